#include "kernels/layers/ulysses_layout.hpp"

#include "kernels/base/simd_pack.hpp"

namespace miniattn::kernels {

namespace {

// Calls f(j, b, h, i, d0, width) for each pack of `width` elements d0 .. d0 +
// width - 1 of every row of a [U, B, Hl, n, Dh] exchange buffer: rows are
// contiguous in the buffer and in the [B, H, n, Dh] views on either side, and
// on a GPU consecutive threads take consecutive d of a row (simd::row_packs),
// so both the reads and the writes are coalesced.
template <class T, class Buffer, class F>
void for_each_block_row_pack(const char* label, const Buffer& buffer, const F& f) {
  const index_t B = buffer.extent(1), Hl = buffer.extent(2), n = buffer.extent(3);
  simd::row_packs<Acc<T>>(label, buffer.extent(0) * B * Hl * n, buffer.extent(4),
                     KOKKOS_LAMBDA(const index_t row, const index_t d0, const int width) {
                       index_t r = row;
                       const index_t i = r % n;
                       r /= n;
                       const index_t h = r % Hl;
                       r /= Hl;
                       f(r / B, r % B, h, i, d0, width);
                     });
}

}  // namespace

template <class T>
void pack_heads(const View4<const T>& x, const View5<T>& buffer) {
  const index_t Hl = buffer.extent(2);
  const index_t replicas = buffer.extent(0) * Hl / x.extent(1);
  for_each_block_row_pack<T>(
      "miniattn::pack_heads", buffer, KOKKOS_LAMBDA(index_t j, index_t b, index_t h, index_t i, index_t d, int width) {
        simd::copy_n(&buffer(j, b, h, i, d), &x(b, (j * Hl + h) / replicas, i, d), width);
      });
}

// With replicas, the buffer's first replica of each head (in head order) sums
// all of them, in replica order (in Acc<T>: one rounding for bf16).
template <class T>
void unpack_heads(const View5<const T>& buffer, const View4<T>& x) {
  using V = typename simd::Pack<Acc<T>>::type;
  const index_t Hl = buffer.extent(2);
  const index_t replicas = buffer.extent(0) * Hl / x.extent(1);
  for_each_block_row_pack<T>(
      "miniattn::unpack_heads", buffer,
      KOKKOS_LAMBDA(index_t j, index_t b, index_t h, index_t i, index_t d, int width) {
        const index_t head = j * Hl + h;
        if (head % replicas != 0) return;
        V sum = simd::load_n(&buffer(j, b, h, i, d), width);
        for (index_t t = 1; t < replicas; ++t) {
          const index_t jt = (head + t) / Hl, ht = (head + t) % Hl;
          sum += simd::load_n(&buffer(jt, b, ht, i, d), width);
        }
        simd::store_n(&x(b, head / replicas, i, d), sum, width);
      });
}

template <class T>
void pack_rows(const View4<const T>& y, const View1<const index_t>& rows, const View5<T>& buffer) {
  const index_t n = buffer.extent(3);
  for_each_block_row_pack<T>("miniattn::pack_rows", buffer,
                             KOKKOS_LAMBDA(index_t s, index_t b, index_t h, index_t i, index_t d, int width) {
                               simd::copy_n(&buffer(s, b, h, i, d), &y(b, h, rows(s * n + i), d), width);
                             });
}

template <class T>
void unpack_rows(const View5<const T>& buffer, const View1<const index_t>& rows, const View4<T>& y) {
  const index_t n = buffer.extent(3);
  for_each_block_row_pack<T>("miniattn::unpack_rows", buffer,
                             KOKKOS_LAMBDA(index_t s, index_t b, index_t h, index_t i, index_t d, int width) {
                               simd::copy_n(&y(b, h, rows(s * n + i), d), &buffer(s, b, h, i, d), width);
                             });
}

#define MINIATTN_INSTANTIATE(T)                                                  \
  template void pack_heads<T>(const View4<const T>&, const View5<T>&);           \
  template void unpack_heads<T>(const View5<const T>&, const View4<T>&);         \
  template void pack_rows<T>(const View4<const T>&, const View1<const index_t>&, const View5<T>&);   \
  template void unpack_rows<T>(const View5<const T>&, const View1<const index_t>&, const View4<T>&);
MINIATTN_INSTANTIATE(float)
MINIATTN_INSTANTIATE(double)
MINIATTN_INSTANTIATE(bf16)
#undef MINIATTN_INSTANTIATE

}  // namespace miniattn::kernels
