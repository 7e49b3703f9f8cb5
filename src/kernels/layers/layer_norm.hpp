#pragma once
// LayerNorm over the last dimension, eps = 1e-5, biased variance (PyTorch's).
#include "core/types.hpp"

namespace miniattn::kernels {

constexpr double kLayerNormEps = 1e-5;

// y = (x - mean) * rstd * gamma + beta, per row. Saves mean [rows] and rstd [rows] for backward.
// T is the storage of x, y, gamma and beta (bf16: the parameters' compute
// copy); the statistics are Acc<T> (fp32 for bf16), as is the arithmetic.
template <class T>
void layer_norm_forward(const View2<const T>& x, const View1<const T>& gamma, const View1<const T>& beta,
                        const View2<T>& y, const View1<Acc<T>>& mean, const View1<Acc<T>>& rstd);

// dx += dL/dx (accumulated: the input is the residual stream), dgamma += , dbeta += .
// partials: column-sum workspace of at least column_sum_chunks(rows) x D (kernels/base/reduction.hpp).
// dgamma and dbeta are Param<T> (fp32 gradients for bf16), partials Acc<T>.
template <class T>
void layer_norm_backward(const View2<const T>& dy, const View2<const T>& x, const View1<const T>& gamma,
                         const View1<const Acc<T>>& mean, const View1<const Acc<T>>& rstd, const View2<T>& dx,
                         const View1<Param<T>>& dgamma, const View1<Param<T>>& dbeta,
                         const View2<Acc<T>>& partials);

}  // namespace miniattn::kernels
