#pragma once
// LayerNorm over the last dimension, eps = 1e-5, biased variance (PyTorch's).
#include "core/types.hpp"

namespace miniattn::kernels {

constexpr double kLayerNormEps = 1e-5;

// y = (x - mean) * rstd * gamma + beta, per row. Saves mean [rows] and rstd [rows] for backward.
template <class T>
void layer_norm_forward(const View2<const T>& x, const View1<const T>& gamma, const View1<const T>& beta,
                        const View2<T>& y, const View1<T>& mean, const View1<T>& rstd);

// dx += dL/dx (accumulated: the input is the residual stream), dgamma += , dbeta += .
// partials: column-sum workspace of at least column_sum_chunks(rows) x D (kernels/reduction.hpp).
template <class T>
void layer_norm_backward(const View2<const T>& dy, const View2<const T>& x, const View1<const T>& gamma,
                         const View1<const T>& mean, const View1<const T>& rstd, const View2<T>& dx,
                         const View1<T>& dgamma, const View1<T>& dbeta, const View2<T>& partials);

}  // namespace miniattn::kernels
