#include "kernels/elementwise.hpp"

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
        y(r, c) += x(r, c);
      });
}

template <class T>
index_t count_nonfinite(const Kokkos::View<const T*, Kokkos::LayoutRight, MemSpace>& x) {
  index_t count = 0;
  Kokkos::parallel_reduce(
      "miniattn::count_nonfinite", Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<index_t>>(0, x.extent(0)),
      KOKKOS_LAMBDA(const index_t i, index_t& acc) { acc += compat::isfinite(x(i)) ? 0 : 1; }, count);
  return count;
}

template <class T>
index_t count_nonfinite(const View2<const T>& x) {
  return count_nonfinite<T>(Kokkos::View<const T*, Kokkos::LayoutRight, MemSpace>(x.data(), x.span()));
}

template index_t count_nonfinite<float>(const Kokkos::View<const float*, Kokkos::LayoutRight, MemSpace>&);
template index_t count_nonfinite<double>(const Kokkos::View<const double*, Kokkos::LayoutRight, MemSpace>&);
template index_t count_nonfinite<float>(const View2<const float>&);
template index_t count_nonfinite<double>(const View2<const double>&);
template void add_inplace<float>(const View2<float>&, const View2<const float>&);
template void add_inplace<double>(const View2<double>&, const View2<const double>&);

}  // namespace miniattn::kernels
