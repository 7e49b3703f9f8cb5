#pragma once
// Index permutations around the all-to-alls of Ulysses attention, with U ranks
// in the all-to-all, H heads, Hl = H / U heads per rank after the exchange and
// n rows per rank before it. Exchange buffers are [U, B, Hl, n, Dh] (block j
// goes to / comes from rank j), so each rank's block is contiguous.
//   sequence-split x [B, H, n, Dh]  <->  buffer[j, b, h, i, d] = x[b, j*Hl + h, i, d]
//   head-split     y [B, Hl, U*n, Dh] <-> buffer[s, b, h, i, d] = y[b, h, rows(s*n + i), d]
// where rows (gathered_rows, comm/process_grid.hpp) puts the gathered rows in
// position order; a permutation of 0 .. U*n - 1.
// Grouped K/V heads fewer than U (GQA, KV < U with U % KV == 0) are replicated:
// x [B, KV, n, Dh] packs head j*Hl + h of U*Hl as x's head (j*Hl + h) / (U*Hl / KV),
// and unpack_heads sums the replicas of each head (their gradients) in order.
#include "core/types.hpp"

namespace miniattn::kernels {

template <class T>
using View5 = Kokkos::View<T*****, Kokkos::LayoutRight, MemSpace>;

template <class T>
void pack_heads(const View4<const T>& x, const View5<T>& buffer);
template <class T>
void unpack_heads(const View5<const T>& buffer, const View4<T>& x);

template <class T>
void pack_rows(const View4<const T>& y, const View1<const index_t>& rows, const View5<T>& buffer);
template <class T>
void unpack_rows(const View5<const T>& buffer, const View1<const index_t>& rows, const View4<T>& y);

}  // namespace miniattn::kernels
