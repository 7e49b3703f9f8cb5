#pragma once
// Linear layer in the PyTorch convention: weight [out, in], y = x W^T + b.
// Activations are [rows, features] with rows = batch * local positions.
#include "core/types.hpp"

namespace miniattn::kernels {

// y = x W^T + b.   x [rows, in], w [out, in], b [out] (extent 0: no bias), y [rows, out] (overwritten).
template <class T>
void linear_forward(const View2<const T>& x, const View2<const T>& w, const View1<const T>& b, const View2<T>& y);

// dx = dy W (overwritten; skipped when dx has extent 0), dw += dy^T x, db += column sums of dy
// (skipped when db has extent 0; partials: column-sum workspace of at least
// column_sum_chunks(rows) x out, kernels/base/reduction.hpp).
// T: the activations' and weights' storage (bf16: the compute copy of the
// weights); dw and db are Param<T> (fp32 gradients for bf16), partials Acc<T>.
template <class T>
void linear_backward(const View2<const T>& dy, const View2<const T>& x, const View2<const T>& w, const View2<T>& dx,
                     const View2<Param<T>>& dw, const View1<Param<T>>& db, const View2<Acc<T>>& partials);

}  // namespace miniattn::kernels
