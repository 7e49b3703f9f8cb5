#include "kernels/gelu.hpp"

#include "core/kokkos_compat.hpp"

#include <cmath>
#include <sstream>
#include <stdexcept>

namespace miniattn::kernels {

namespace {

void require_same_shape(bool ok, const char* where) {
  if (!ok) {
    std::ostringstream os;
    os << "kernels::" << where << ": all views must have the same shape";
    throw std::invalid_argument(os.str());
  }
}

// sqrt(2/pi), computed on the host once and captured by value.
template <class T>
T gelu_sqrt_2_over_pi() {
  return static_cast<T>(std::sqrt(2.0 / compat::pi<double>()));
}

constexpr double kGeluCubic = 0.044715;

}  // namespace

// gelu(x) = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
template <class T>
void gelu_forward(const View2<const T>& x, const View2<T>& y) {
  require_same_shape(x.extent(0) == y.extent(0) && x.extent(1) == y.extent(1), "gelu_forward");
  const index_t cols = static_cast<index_t>(x.extent(1));
  const index_t n = static_cast<index_t>(x.extent(0)) * cols;
  if (n == 0) return;
  const T k0 = gelu_sqrt_2_over_pi<T>();
  const T k1 = static_cast<T>(kGeluCubic);
  Kokkos::parallel_for(
      "miniattn::gelu_forward", Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<index_t>>(0, n),
      KOKKOS_LAMBDA(const index_t i) {
        const index_t r = i / cols;
        const index_t c = i - r * cols;
        const T v = x(r, c);
        const T t = compat::tanh(k0 * (v + k1 * v * v * v));
        y(r, c) = T(0.5) * v * (T(1) + t);
      });
}

// gelu'(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2),  t = tanh(u)
template <class T>
void gelu_backward(const View2<const T>& x, const View2<const T>& dy, const View2<T>& dx) {
  require_same_shape(x.extent(0) == dy.extent(0) && x.extent(1) == dy.extent(1) && x.extent(0) == dx.extent(0) &&
                         x.extent(1) == dx.extent(1),
                     "gelu_backward");
  const index_t cols = static_cast<index_t>(x.extent(1));
  const index_t n = static_cast<index_t>(x.extent(0)) * cols;
  if (n == 0) return;
  const T k0 = gelu_sqrt_2_over_pi<T>();
  const T k1 = static_cast<T>(kGeluCubic);
  const T k3 = static_cast<T>(3.0 * kGeluCubic);
  Kokkos::parallel_for(
      "miniattn::gelu_backward", Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<index_t>>(0, n),
      KOKKOS_LAMBDA(const index_t i) {
        const index_t r = i / cols;
        const index_t c = i - r * cols;
        const T v = x(r, c);
        const T v2 = v * v;
        const T t = compat::tanh(k0 * (v + k1 * v2 * v));
        const T dgelu = T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t * t) * k0 * (T(1) + k3 * v2);
        dx(r, c) = dgelu * dy(r, c);  // dy read before dx written: dx may alias dy
      });
}

template void gelu_forward<float>(const View2<const float>&, const View2<float>&);
template void gelu_forward<double>(const View2<const double>&, const View2<double>&);
template void gelu_backward<float>(const View2<const float>&, const View2<const float>&, const View2<float>&);
template void gelu_backward<double>(const View2<const double>&, const View2<const double>&, const View2<double>&);

}  // namespace miniattn::kernels
