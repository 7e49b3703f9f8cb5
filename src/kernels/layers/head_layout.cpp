#include "kernels/layers/head_layout.hpp"

#include <sstream>
#include <stdexcept>

#include "kernels/base/simd_pack.hpp"

namespace miniattn::kernels {

namespace {

// Checks that a [B, H, n, Dh] view and a [B*n, H*Dh] view describe the same data.
template <class V4, class V2>
void check_head_shapes(const char* where, const V4& heads, const V2& tokens) {
  const index_t b = static_cast<index_t>(heads.extent(0));
  const index_t h = static_cast<index_t>(heads.extent(1));
  const index_t n = static_cast<index_t>(heads.extent(2));
  const index_t dh = static_cast<index_t>(heads.extent(3));
  if (static_cast<index_t>(tokens.extent(0)) != b * n || static_cast<index_t>(tokens.extent(1)) != h * dh) {
    std::ostringstream os;
    os << "kernels::" << where << ": head-major view is [" << b << ", " << h << ", " << n << ", " << dh
       << "] but the token-major view is [" << tokens.extent(0) << ", " << tokens.extent(1) << "], expected [" << b * n
       << ", " << h * dh << "]";
    throw std::invalid_argument(os.str());
  }
}

// q [B, H, n, Dh], k and v [B, KV, n, Dh] with KV dividing H, and qkv [B*n, (H + 2 KV) Dh].
template <class Q, class K, class V2>
void check_qkv_shapes(const char* where, const Q& q, const K& k, const K& v, const V2& qkv) {
  for (unsigned i : {0u, 2u, 3u}) {
    if (k.extent(i) != q.extent(i) || v.extent(i) != q.extent(i)) {
      throw std::invalid_argument(std::string("kernels::") + where + ": q, k and v must have the same B, n and Dh");
    }
  }
  if (k.extent(1) != v.extent(1) || k.extent(1) == 0 || q.extent(1) % k.extent(1) != 0) {
    throw std::invalid_argument(std::string("kernels::") + where + ": k and v need the same number of heads, " +
                                "dividing q's");
  }
  const index_t columns = static_cast<index_t>((q.extent(1) + 2 * k.extent(1)) * q.extent(3));
  if (static_cast<index_t>(qkv.extent(0)) != static_cast<index_t>(q.extent(0) * q.extent(2)) ||
      static_cast<index_t>(qkv.extent(1)) != columns) {
    std::ostringstream os;
    os << "kernels::" << where << ": the token-major view is [" << qkv.extent(0) << ", " << qkv.extent(1)
       << "], expected [" << q.extent(0) * q.extent(2) << ", " << columns << "] (H + 2 KV heads)";
    throw std::invalid_argument(os.str());
  }
}

// Row (b, h, i) of a head-major [B, H, n, Dh] view is row b*n + i, columns
// part*D + h*Dh .. + Dh - 1, of the token-major one. f(b, h, i, e0, width, row,
// col) runs for each pack of `width` elements e0 .. e0 + width - 1 of each row,
// col without the part offset: contiguous on both sides.
template <class T, class V4, class F>
void for_each_head_row_pack(const char* label, const V4& heads, const F& f) {
  const index_t nh = static_cast<index_t>(heads.extent(1));
  const index_t n = static_cast<index_t>(heads.extent(2));
  const index_t dh = static_cast<index_t>(heads.extent(3));
  simd::row_packs<Acc<T>>(label, static_cast<index_t>(heads.extent(0)) * nh * n, dh,
                     KOKKOS_LAMBDA(const index_t r, const index_t e0, const int width) {
                       const index_t i = r % n;
                       const index_t bh = r / n;
                       const index_t h = bh % nh, b = bh / nh;
                       f(b, h, i, e0, width, b * n + i, h * dh + e0);
                     });
}

}  // namespace

template <class T>
void split_qkv_heads(const View2<const T>& qkv, const View4<T>& q, const View4<T>& k, const View4<T>& v) {
  check_qkv_shapes("split_qkv_heads", q, k, v, qkv);
  const index_t k_col = static_cast<index_t>(q.extent(1) * q.extent(3));  // where k's columns begin
  const index_t v_col = k_col + static_cast<index_t>(k.extent(1) * k.extent(3));
  for_each_head_row_pack<T>(
      "miniattn::split_qkv_heads.q", q,
      KOKKOS_LAMBDA(index_t b, index_t h, index_t i, index_t e, int width, index_t row, index_t col) {
        simd::copy_n(&q(b, h, i, e), &qkv(row, col), width);
      });
  for_each_head_row_pack<T>(
      "miniattn::split_qkv_heads.kv", k,
      KOKKOS_LAMBDA(index_t b, index_t h, index_t i, index_t e, int width, index_t row, index_t col) {
        simd::copy_n(&k(b, h, i, e), &qkv(row, k_col + col), width);
        simd::copy_n(&v(b, h, i, e), &qkv(row, v_col + col), width);
      });
}

template <class T>
void merge_qkv_heads(const View4<const T>& dq, const View4<const T>& dk, const View4<const T>& dv,
                     const View2<T>& dqkv) {
  check_qkv_shapes("merge_qkv_heads", dq, dk, dv, dqkv);
  const index_t k_col = static_cast<index_t>(dq.extent(1) * dq.extent(3));
  const index_t v_col = k_col + static_cast<index_t>(dk.extent(1) * dk.extent(3));
  for_each_head_row_pack<T>(
      "miniattn::merge_qkv_heads.q", dq,
      KOKKOS_LAMBDA(index_t b, index_t h, index_t i, index_t e, int width, index_t row, index_t col) {
        simd::copy_n(&dqkv(row, col), &dq(b, h, i, e), width);
      });
  for_each_head_row_pack<T>(
      "miniattn::merge_qkv_heads.kv", dk,
      KOKKOS_LAMBDA(index_t b, index_t h, index_t i, index_t e, int width, index_t row, index_t col) {
        simd::copy_n(&dqkv(row, k_col + col), &dk(b, h, i, e), width);
        simd::copy_n(&dqkv(row, v_col + col), &dv(b, h, i, e), width);
      });
}

template <class T>
void split_heads(const View2<const T>& x, const View4<T>& xh) {
  check_head_shapes("split_heads", xh, x);
  for_each_head_row_pack<T>(
      "miniattn::split_heads", xh,
      KOKKOS_LAMBDA(index_t b, index_t h, index_t i, index_t e, int width, index_t row, index_t col) {
        simd::copy_n(&xh(b, h, i, e), &x(row, col), width);
      });
}

template <class T>
void merge_heads(const View4<const T>& xh, const View2<T>& x) {
  check_head_shapes("merge_heads", xh, x);
  for_each_head_row_pack<T>(
      "miniattn::merge_heads", xh,
      KOKKOS_LAMBDA(index_t b, index_t h, index_t i, index_t e, int width, index_t row, index_t col) {
        simd::copy_n(&x(row, col), &xh(b, h, i, e), width);
      });
}

#define MINIATTN_INSTANTIATE_HEAD_LAYOUT(T)                                                                    \
  template void split_qkv_heads<T>(const View2<const T>&, const View4<T>&, const View4<T>&, const View4<T>&); \
  template void merge_qkv_heads<T>(const View4<const T>&, const View4<const T>&, const View4<const T>&,      \
                                   const View2<T>&);                                                          \
  template void split_heads<T>(const View2<const T>&, const View4<T>&);                                      \
  template void merge_heads<T>(const View4<const T>&, const View2<T>&);
MINIATTN_INSTANTIATE_HEAD_LAYOUT(float)
MINIATTN_INSTANTIATE_HEAD_LAYOUT(double)
MINIATTN_INSTANTIATE_HEAD_LAYOUT(bf16)
#undef MINIATTN_INSTANTIATE_HEAD_LAYOUT

}  // namespace miniattn::kernels
