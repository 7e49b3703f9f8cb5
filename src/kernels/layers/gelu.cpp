#include "kernels/layers/gelu.hpp"

#include <cmath>
#include <sstream>
#include <stdexcept>

#include "kernels/base/simd_pack.hpp"

namespace miniattn::kernels {

using namespace simd;

namespace {

void require_same_shape(bool ok, const char* where) {
  if (!ok) {
    std::ostringstream os;
    os << "kernels::" << where << ": all views must have the same shape";
    throw std::invalid_argument(os.str());
  }
}

// gelu(x) = 0.5 x (1 + tanh(u)) = x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3).
// The sigmoid form keeps full relative precision where 1 + tanh(u) cancels
// (large negative x) and needs one exp instead of libm's scalar tanh.
template <class T>
struct GeluConstants {
  T two_k0 = static_cast<T>(2.0 * std::sqrt(2.0 / compat::pi<double>()));  // 2 sqrt(2/pi)
  T k1 = static_cast<T>(0.044715);
  T k3 = static_cast<T>(3.0 * 0.044715);
};

}  // namespace

template <class T>
void gelu_forward(const View2<const T>& x, const View2<T>& y) {
  require_same_shape(x.extent(0) == y.extent(0) && x.extent(1) == y.extent(1), "gelu_forward");
  using A = Acc<T>;
  using V = typename Pack<A>::type;
  const GeluConstants<A> k;
  row_packs<A>("miniattn::gelu_forward", x.extent(0), x.extent(1),
               KOKKOS_LAMBDA(const index_t r, const index_t c0, const int width) {
                 const V v = load_n(&x(r, c0), width);
                 const V two_u = pack_splat<V>(k.two_k0) * (v + pack_splat<V>(k.k1) * v * v * v);
                 store_n(&y(r, c0), V(v * pack_sigmoid<A>(two_u)), width);
               });
}

// gelu'(x) = s + x s (1 - s) 2u'(x),  s = sigmoid(2u),  2u' = 2 sqrt(2/pi) (1 + 3 * 0.044715 x^2).
template <class T>
void gelu_backward(const View2<const T>& x, const View2<const T>& dy, const View2<T>& dx) {
  require_same_shape(x.extent(0) == dy.extent(0) && x.extent(1) == dy.extent(1) && x.extent(0) == dx.extent(0) &&
                         x.extent(1) == dx.extent(1),
                     "gelu_backward");
  using A = Acc<T>;
  using V = typename Pack<A>::type;
  const GeluConstants<A> k;
  row_packs<A>("miniattn::gelu_backward", x.extent(0), x.extent(1),
               KOKKOS_LAMBDA(const index_t r, const index_t c0, const int width) {
                 const V v = load_n(&x(r, c0), width);
                 const V v2 = v * v;
                 const V two_k0 = pack_splat<V>(k.two_k0), one = pack_splat<V>(A(1));
                 const V s = pack_sigmoid<A>(two_k0 * (v + pack_splat<V>(k.k1) * v2 * v));
                 const V dgelu = s + v * s * (one - s) * two_k0 * (one + pack_splat<V>(k.k3) * v2);
                 // dy is read before dx is written: dx may alias dy.
                 store_n(&dx(r, c0), V(dgelu * load_n(&dy(r, c0), width)), width);
               });
}

#define MINIATTN_INSTANTIATE_GELU(T)                                      \
  template void gelu_forward<T>(const View2<const T>&, const View2<T>&); \
  template void gelu_backward<T>(const View2<const T>&, const View2<const T>&, const View2<T>&);
MINIATTN_INSTANTIATE_GELU(float)
MINIATTN_INSTANTIATE_GELU(double)
MINIATTN_INSTANTIATE_GELU(bf16)
#undef MINIATTN_INSTANTIATE_GELU

}  // namespace miniattn::kernels
