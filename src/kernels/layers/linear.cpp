#include "kernels/layers/linear.hpp"

#include "kernels/base/gemm.hpp"
#include "kernels/base/reduction.hpp"
#include "kernels/base/require_shape.hpp"

namespace miniattn::kernels {

// y = x W^T + b: the bias is broadcast into y first and the product added
// with beta = 1, so the whole layer is one BLAS call plus one cheap pass.
template <class T>
void linear_forward(const View2<const T>& x, const View2<const T>& w, const View1<const T>& b, const View2<T>& y) {
  require_shape(x.extent(1) == w.extent(1), "linear_forward", "x [rows, in] and w [out, in] disagree on in");
  require_shape(y.extent(0) == x.extent(0) && y.extent(1) == w.extent(0), "linear_forward",
                "y must be [rows, out]");
  const bool has_bias = b.extent(0) != 0;
  require_shape(!has_bias || b.extent(0) == w.extent(0), "linear_forward", "b must be [out] or empty");

  if (has_bias) {
    simd::row_packs<Acc<T>>("miniattn::linear_forward_bias", y.extent(0), y.extent(1),
                            KOKKOS_LAMBDA(const index_t r, const index_t c0, const int width) {
                              simd::store_n(&y(r, c0), simd::load_n(&b(c0), width), width);
                            });
  }
  gemm<T>('N', 'T', Acc<T>(1), x, w, has_bias ? Acc<T>(1) : Acc<T>(0), y);
}

template <class T>
void linear_backward(const View2<const T>& dy, const View2<const T>& x, const View2<const T>& w, const View2<T>& dx,
                     const View2<Param<T>>& dw, const View1<Param<T>>& db, const View2<Acc<T>>& partials) {
  const index_t rows = static_cast<index_t>(dy.extent(0));
  const index_t out = static_cast<index_t>(dy.extent(1));
  require_shape(static_cast<index_t>(x.extent(0)) == rows, "linear_backward", "dy and x disagree on rows");
  require_shape(static_cast<index_t>(w.extent(0)) == out && w.extent(1) == x.extent(1), "linear_backward",
                "w must be [out, in] with out = dy.extent(1), in = x.extent(1)");
  require_shape(dw.extent(0) == w.extent(0) && dw.extent(1) == w.extent(1), "linear_backward",
                "dw must have the shape of w");
  require_shape(dx.extent(0) == 0 || (dx.extent(0) == x.extent(0) && dx.extent(1) == x.extent(1)),
                "linear_backward", "dx must have the shape of x or extent 0");
  require_shape(db.extent(0) == 0 || static_cast<index_t>(db.extent(0)) == out, "linear_backward",
                "db must be [out] or empty");

  // dx = dy W   ([rows, out] x [out, in])
  if (dx.extent(0) != 0) gemm<T>('N', 'N', Acc<T>(1), dy, w, Acc<T>(0), dx);
  // dw += dy^T x   ([out, rows] x [rows, in]), accumulated in Param<T>
  gemm<T, Param<T>>('T', 'N', Acc<T>(1), dy, x, Acc<T>(1), dw);

  if (db.extent(0) != 0) {
    add_column_sums<Acc<T>>(
        "miniattn::linear_backward_bias", rows, out, partials,
        KOKKOS_LAMBDA(const index_t r, const index_t c0, const int width) { return simd::load_n(&dy(r, c0), width); },
        db);
  }
}

#define MINIATTN_INSTANTIATE_LINEAR(T)                                                                          \
  template void linear_forward<T>(const View2<const T>&, const View2<const T>&, const View1<const T>&,          \
                                  const View2<T>&);                                                             \
  template void linear_backward<T>(const View2<const T>&, const View2<const T>&, const View2<const T>&,         \
                                   const View2<T>&, const View2<Param<T>>&, const View1<Param<T>>&,             \
                                   const View2<Acc<T>>&);
MINIATTN_INSTANTIATE_LINEAR(float)
MINIATTN_INSTANTIATE_LINEAR(double)
MINIATTN_INSTANTIATE_LINEAR(bf16)
#undef MINIATTN_INSTANTIATE_LINEAR

}  // namespace miniattn::kernels
