#include "kernels/base/gemm.hpp"

#include "kernels/base/batched_gemm.hpp"

#include <KokkosBlas3_gemm.hpp>

#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace miniattn::kernels {

namespace {

// 'N'/'n' -> 'N', 'T'/'t' -> 'T'; anything else (including conjugate 'C', which
// has no meaning for real data here) is a programming error.
char normalised_trans(char trans, const char* which) {
  if (trans == 'N' || trans == 'n') return 'N';
  if (trans == 'T' || trans == 't') return 'T';
  std::ostringstream os;
  os << "kernels::gemm: " << which << " = '" << trans << "' (expected 'N' or 'T')";
  throw std::invalid_argument(os.str());
}

// The fp32 / fp64 product through KokkosBlas.
template <class T>
void blas_gemm(char trans_a, char trans_b, T alpha, const View2<const T>& a, const View2<const T>& b, T beta,
               const View2<T>& c) {
  const char ta = normalised_trans(trans_a, "trans_a");
  const char tb = normalised_trans(trans_b, "trans_b");

  const index_t m = static_cast<index_t>(ta == 'N' ? a.extent(0) : a.extent(1));
  const index_t k = static_cast<index_t>(ta == 'N' ? a.extent(1) : a.extent(0));
  const index_t kb = static_cast<index_t>(tb == 'N' ? b.extent(0) : b.extent(1));
  const index_t n = static_cast<index_t>(tb == 'N' ? b.extent(1) : b.extent(0));
  if (k != kb || m != static_cast<index_t>(c.extent(0)) || n != static_cast<index_t>(c.extent(1))) {
    std::ostringstream os;
    os << "kernels::gemm: shapes do not match: op" << ta << "(A) is " << m << "x" << k << ", op" << tb
       << "(B) is " << kb << "x" << n << ", C is " << c.extent(0) << "x" << c.extent(1);
    throw std::invalid_argument(os.str());
  }
  if (m == 0 || n == 0) return;

  if (k == 0) {
    // Empty inner dimension: C = beta * C. KokkosBlas returns early here
    // without scaling (3.4), so do it ourselves; beta == 0 overwrites.
    const index_t cols = n;
    Kokkos::parallel_for(
        "miniattn::gemm_scale_c", Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<index_t>>(0, m * n),
        KOKKOS_LAMBDA(const index_t i) {
          const index_t r = i / cols;
          const index_t col = i - r * cols;
          c(r, col) = (beta == T(0)) ? T(0) : beta * c(r, col);
        });
    return;
  }

  // All three operands are LayoutRight views on the default memory space:
  // Kokkos Kernels forwards this combination to the vendor BLAS (OpenBLAS on
  // HostSpace, cuBLAS on CudaSpace) by swapping the operands (C^T = B^T A^T).
  const char ta_str[2] = {ta, '\0'};
  const char tb_str[2] = {tb, '\0'};
  KokkosBlas::gemm(ta_str, tb_str, alpha, a, b, beta, c);
}

}  // namespace

template <class T, class C>
void gemm(char trans_a, char trans_b, Acc<T> alpha, const View2<const T>& a, const View2<const T>& b, Acc<T> beta,
          const View2<C>& c) {
  if constexpr (std::is_same<T, bf16>::value) {
    const auto batch = [](auto* data, const auto& v) {
      return MatrixBatch<std::remove_pointer_t<decltype(data)>>{data, index_t(v.extent(0)), index_t(v.extent(1)), 0};
    };
    batched_gemm<T, C>(trans_a, trans_b, alpha, batch(a.data(), a), batch(b.data(), b), beta, batch(c.data(), c), 1);
    return;
  } else {
    static_assert(std::is_same<T, C>::value, "fp32 and fp64 products write their own type");
    blas_gemm<T>(trans_a, trans_b, alpha, a, b, beta, c);
  }
}

template void gemm<float, float>(char, char, float, const View2<const float>&, const View2<const float>&, float,
                                 const View2<float>&);
template void gemm<double, double>(char, char, double, const View2<const double>&, const View2<const double>&,
                                   double, const View2<double>&);
template void gemm<bf16, bf16>(char, char, float, const View2<const bf16>&, const View2<const bf16>&, float,
                               const View2<bf16>&);
template void gemm<bf16, float>(char, char, float, const View2<const bf16>&, const View2<const bf16>&, float,
                                const View2<float>&);

}  // namespace miniattn::kernels
