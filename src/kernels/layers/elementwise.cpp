#include "kernels/layers/elementwise.hpp"

#include <stdexcept>

#include "core/kokkos_compat.hpp"
#include "kernels/base/simd_pack.hpp"

namespace miniattn::kernels {

// Through row_packs, as the other element-wise kernels: whole SIMD registers
// on the host (one index division a value had held it to a third of the
// memory's rate), every value in parallel on a GPU.
template <class T>
void add(const View2<T>& z, const View2<const T>& x, const View2<const T>& y) {
  if (x.extent(0) != y.extent(0) || x.extent(1) != y.extent(1) || z.extent(0) != x.extent(0) ||
      z.extent(1) != x.extent(1)) {
    throw std::invalid_argument("kernels::add: x, y and z must have the same shape");
  }
  using V = typename simd::Pack<Acc<T>>::type;
  simd::row_packs<Acc<T>>("miniattn::add", z.extent(0), z.extent(1),
                          KOKKOS_LAMBDA(const index_t r, const index_t c0, const int width) {
                            // bf16: one rounding, of the sum in fp32
                            simd::store_n(&z(r, c0), V(simd::load_n(&x(r, c0), width) + simd::load_n(&y(r, c0), width)),
                                          width);
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
  template void add<T>(const View2<T>&, const View2<const T>&, const View2<const T>&);
MINIATTN_INSTANTIATE_ELEMENTWISE(float)
MINIATTN_INSTANTIATE_ELEMENTWISE(double)
MINIATTN_INSTANTIATE_ELEMENTWISE(bf16)
#undef MINIATTN_INSTANTIATE_ELEMENTWISE

}  // namespace miniattn::kernels
