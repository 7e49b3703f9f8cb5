#include "kernels/embedding.hpp"

#include <sstream>
#include <stdexcept>

namespace miniattn::kernels {

namespace embedding_detail {

// Number of entries of idx outside [0, limit). One small reduction (and a
// host synchronisation); done in the forward pass only.
index_t count_out_of_range(const View1<const index_t>& idx, index_t limit) {
  index_t bad = 0;
  Kokkos::parallel_reduce(
      "miniattn::embedding_check_indices",
      Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<index_t>>(0, static_cast<index_t>(idx.extent(0))),
      KOKKOS_LAMBDA(const index_t i, index_t& acc) {
        const index_t v = idx(i);
        if (v < 0 || v >= limit) acc += 1;
      },
      bad);
  return bad;
}

void check_shapes(const char* where, index_t rows, index_t d, const View1<const index_t>& tokens,
                  const View1<const index_t>& wpe_row, index_t vocab, index_t wte_d, index_t wpe_rows,
                  index_t wpe_d, bool check_indices) {
  std::ostringstream os;
  const index_t n = static_cast<index_t>(wpe_row.extent(0));
  if (static_cast<index_t>(tokens.extent(0)) != rows) {
    os << "tokens has " << tokens.extent(0) << " entries but x/dx has " << rows << " rows";
  } else if (n == 0 ? rows != 0 : rows % n != 0) {
    os << "rows (" << rows << ") is not a multiple of the local positions (" << n << ")";
  } else if (wte_d != d || wpe_d != d) {
    os << "wte, wpe_local and x must have the same width";
  } else if (check_indices && count_out_of_range(tokens, vocab) != 0) {
    os << "a token is outside [0, " << vocab << ")";
  } else if (check_indices && count_out_of_range(wpe_row, wpe_rows) != 0) {
    os << "a wpe_row entry is outside [0, " << wpe_rows << ")";
  } else {
    return;
  }
  throw std::invalid_argument(std::string("kernels::") + where + ": " + os.str());
}

}  // namespace embedding_detail

template <class T>
void embedding_forward(const View1<const index_t>& tokens, const View1<const index_t>& wpe_row,
                       const View2<const T>& wte, const View2<const T>& wpe_local, const View2<T>& x) {
  const index_t rows = static_cast<index_t>(x.extent(0));
  const index_t d = static_cast<index_t>(x.extent(1));
  embedding_detail::check_shapes("embedding_forward", rows, d, tokens, wpe_row, static_cast<index_t>(wte.extent(0)),
                                 static_cast<index_t>(wte.extent(1)), static_cast<index_t>(wpe_local.extent(0)),
                                 static_cast<index_t>(wpe_local.extent(1)), /*check_indices=*/true);
  if (rows == 0 || d == 0) return;
  const index_t n = static_cast<index_t>(wpe_row.extent(0));
  Kokkos::parallel_for(
      "miniattn::embedding_forward", Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<index_t>>(0, rows * d),
      KOKKOS_LAMBDA(const index_t i) {
        const index_t r = i / d;
        const index_t c = i - r * d;
        x(r, c) = wte(tokens(r), c) + wpe_local(wpe_row(r % n), c);
      });
}

// Scatter-add: several rows may share a token (and every sample shares the
// position rows), so both updates are atomic.
template <class T>
void embedding_backward(const View2<const T>& dx, const View1<const index_t>& tokens,
                        const View1<const index_t>& wpe_row, const View2<T>& dwte, const View2<T>& dwpe_local) {
  const index_t rows = static_cast<index_t>(dx.extent(0));
  const index_t d = static_cast<index_t>(dx.extent(1));
  embedding_detail::check_shapes("embedding_backward", rows, d, tokens, wpe_row,
                                 static_cast<index_t>(dwte.extent(0)), static_cast<index_t>(dwte.extent(1)),
                                 static_cast<index_t>(dwpe_local.extent(0)), static_cast<index_t>(dwpe_local.extent(1)),
                                 /*check_indices=*/false);  // the forward pass checked the same indices
  if (rows == 0 || d == 0) return;
  const index_t n = static_cast<index_t>(wpe_row.extent(0));
  Kokkos::parallel_for(
      "miniattn::embedding_backward", Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<index_t>>(0, rows * d),
      KOKKOS_LAMBDA(const index_t i) {
        const index_t r = i / d;
        const index_t c = i - r * d;
        const T g = dx(r, c);
        Kokkos::atomic_add(&dwte(tokens(r), c), g);
        Kokkos::atomic_add(&dwpe_local(wpe_row(r % n), c), g);
      });
}

template void embedding_forward<float>(const View1<const index_t>&, const View1<const index_t>&,
                                       const View2<const float>&, const View2<const float>&, const View2<float>&);
template void embedding_forward<double>(const View1<const index_t>&, const View1<const index_t>&,
                                        const View2<const double>&, const View2<const double>&,
                                        const View2<double>&);
template void embedding_backward<float>(const View2<const float>&, const View1<const index_t>&,
                                        const View1<const index_t>&, const View2<float>&, const View2<float>&);
template void embedding_backward<double>(const View2<const double>&, const View1<const index_t>&,
                                         const View1<const index_t>&, const View2<double>&, const View2<double>&);

}  // namespace miniattn::kernels
