#include "kernels/ulysses_layout.hpp"

namespace miniattn::kernels {

namespace {

// Calls f(j, b, h, i) for every row of a [U, B, Hl, n, Dh] exchange buffer.
template <class T, class F>
void for_each_block_row(const char* label, const View5<T>& buffer, const F& f) {
  const index_t B = buffer.extent(1), Hl = buffer.extent(2), n = buffer.extent(3);
  Kokkos::parallel_for(
      label, Kokkos::RangePolicy<ExecSpace>(0, buffer.extent(0) * B * Hl * n), KOKKOS_LAMBDA(index_t r) {
        const index_t i = r % n;
        r /= n;
        const index_t h = r % Hl;
        r /= Hl;
        f(r / B, r % B, h, i);
      });
}

}  // namespace

template <class T>
void pack_heads(const View4<const T>& x, const View5<T>& buffer) {
  const index_t Hl = buffer.extent(2), Dh = buffer.extent(4);
  for_each_block_row("miniattn::pack_heads", buffer, KOKKOS_LAMBDA(index_t j, index_t b, index_t h, index_t i) {
    for (index_t d = 0; d < Dh; ++d) buffer(j, b, h, i, d) = x(b, j * Hl + h, i, d);
  });
}

template <class T>
void unpack_heads(const View5<const T>& buffer, const View4<T>& x) {
  const index_t Hl = buffer.extent(2), Dh = buffer.extent(4);
  for_each_block_row("miniattn::unpack_heads", buffer, KOKKOS_LAMBDA(index_t j, index_t b, index_t h, index_t i) {
    for (index_t d = 0; d < Dh; ++d) x(b, j * Hl + h, i, d) = buffer(j, b, h, i, d);
  });
}

template <class T>
void pack_rows(const View4<const T>& y, const View5<T>& buffer) {
  const index_t n = buffer.extent(3), Dh = buffer.extent(4);
  for_each_block_row("miniattn::pack_rows", buffer, KOKKOS_LAMBDA(index_t s, index_t b, index_t h, index_t i) {
    for (index_t d = 0; d < Dh; ++d) buffer(s, b, h, i, d) = y(b, h, s * n + i, d);
  });
}

template <class T>
void unpack_rows(const View5<const T>& buffer, const View4<T>& y) {
  const index_t n = buffer.extent(3), Dh = buffer.extent(4);
  for_each_block_row("miniattn::unpack_rows", buffer, KOKKOS_LAMBDA(index_t s, index_t b, index_t h, index_t i) {
    for (index_t d = 0; d < Dh; ++d) y(b, h, s * n + i, d) = buffer(s, b, h, i, d);
  });
}

#define MINIATTN_INSTANTIATE(T)                                                  \
  template void pack_heads<T>(const View4<const T>&, const View5<T>&);           \
  template void unpack_heads<T>(const View5<const T>&, const View4<T>&);         \
  template void pack_rows<T>(const View4<const T>&, const View5<T>&);            \
  template void unpack_rows<T>(const View5<const T>&, const View4<T>&);
MINIATTN_INSTANTIATE(float)
MINIATTN_INSTANTIATE(double)
#undef MINIATTN_INSTANTIATE

}  // namespace miniattn::kernels
