#include "kernels/layers/elementwise.hpp"

#include <stdexcept>

#include "core/kokkos_compat.hpp"

namespace miniattn::kernels {

template <class T>
void add_inplace(const View2<T>& y, const View2<const T>& x) {
  if (y.extent(0) != x.extent(0) || y.extent(1) != x.extent(1)) {
    throw std::invalid_argument("kernels::add_inplace: x and y must have the same shape");
  }
  const index_t cols = static_cast<index_t>(y.extent(1));
  const index_t n = static_cast<index_t>(y.extent(0)) * cols;
  if (n == 0) return;
  Kokkos::parallel_for(
      "miniattn::add_inplace", Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<index_t>>(0, n),
      KOKKOS_LAMBDA(const index_t i) {
        const index_t r = i / cols;
        const index_t c = i - r * cols;
        y(r, c) = narrow<T>(widen(y(r, c)) + widen(x(r, c)));  // bf16: one rounding
      });
}

template <class T>
index_t count_nonfinite(const Kokkos::View<const T*, Kokkos::LayoutRight, MemSpace>& x) {
  index_t count = 0;
  Kokkos::parallel_reduce(
      "miniattn::count_nonfinite", Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<index_t>>(0, x.extent(0)),
      KOKKOS_LAMBDA(const index_t i, index_t& acc) { acc += compat::isfinite(widen(x(i))) ? 0 : 1; }, count);
  return count;
}

template <class T>
index_t count_nonfinite(const View2<const T>& x) {
  return count_nonfinite<T>(Kokkos::View<const T*, Kokkos::LayoutRight, MemSpace>(x.data(), x.span()));
}

#define MINIATTN_INSTANTIATE_ELEMENTWISE(T)                                                         \
  template index_t count_nonfinite<T>(const Kokkos::View<const T*, Kokkos::LayoutRight, MemSpace>&); \
  template index_t count_nonfinite<T>(const View2<const T>&);                                        \
  template void add_inplace<T>(const View2<T>&, const View2<const T>&);
MINIATTN_INSTANTIATE_ELEMENTWISE(float)
MINIATTN_INSTANTIATE_ELEMENTWISE(double)
MINIATTN_INSTANTIATE_ELEMENTWISE(bf16)
#undef MINIATTN_INSTANTIATE_ELEMENTWISE

}  // namespace miniattn::kernels
