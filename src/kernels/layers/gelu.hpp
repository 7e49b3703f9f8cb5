#pragma once
// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
#include "core/types.hpp"

namespace miniattn::kernels {

// y = gelu(x), elementwise; y may not alias x.
template <class T>
void gelu_forward(const View2<const T>& x, const View2<T>& y);

// dx = gelu'(x) * dy (overwritten); dx may alias dy.
template <class T>
void gelu_backward(const View2<const T>& x, const View2<const T>& dy, const View2<T>& dx);

}  // namespace miniattn::kernels
