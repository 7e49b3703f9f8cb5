#pragma once
// Where the values of a warp-wide tensor-core product live: the fragment
// layouts of PTX's mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type").
// D (16 x 8, fp32) = A (16 x 16, bf16) B (16 x 8, bf16) + C. Lane l of the
// 32 holds, with g = l / 4 (its group) and t = l % 4 (its place in the group):
//   A: 4 registers of 2 bf16, elements e = 0..7 at row g + 8 ((e / 2) % 2),
//      column 2t + e % 2 + 8 (e / 4);
//   B: 2 registers of 2 bf16, elements e = 0..3 at row (k) 2t + e % 2 + 8 (e / 2),
//      column (n) g;
//   C, D: 4 fp32, elements e = 0..3 at row g + 8 (e / 2), column 2t + e % 2.
// The two values of a register are neighbours along k (the low 16 bits hold
// the first), so a register is one 32-bit load from a matrix stored k-minor:
// A row-major, B as its transpose (n-major: the rows of K for S = Q K^T).
// These maps are the only place the tensor-core attention kernels learn the
// layouts from; test_mma_fragments.cpp checks them against the PTX figures and
// emulates a warp's products with them on the host.
#include <Kokkos_Core.hpp>

#include <cstdint>

namespace miniattn::kernels::mma {

constexpr int kWarpLanes = 32;
constexpr int kRows = 16;  // M
constexpr int kCols = 8;   // N
constexpr int kDepth = 16; // K
constexpr int kARegisters = 4, kBRegisters = 2, kCValues = 4;

struct Element {
  int row, col;
};

KOKKOS_INLINE_FUNCTION constexpr Element a_element(int lane, int e) {
  return {lane / 4 + 8 * ((e / 2) % 2), 2 * (lane % 4) + e % 2 + 8 * (e / 4)};
}
// {k, n}
KOKKOS_INLINE_FUNCTION constexpr Element b_element(int lane, int e) {
  return {2 * (lane % 4) + e % 2 + 8 * (e / 2), lane / 4};
}
KOKKOS_INLINE_FUNCTION constexpr Element c_element(int lane, int e) {
  return {lane / 4 + 8 * (e / 2), 2 * (lane % 4) + e % 2};
}

// Element offsets of register r's pair in a row-major A with leading
// dimension ld, and in a B stored n-major (B(k, n) at n ld + k).
KOKKOS_INLINE_FUNCTION constexpr int a_pair_offset(int lane, int r, int ld) {
  return a_element(lane, 2 * r).row * ld + a_element(lane, 2 * r).col;
}
KOKKOS_INLINE_FUNCTION constexpr int b_pair_offset(int lane, int r, int ld) {
  return b_element(lane, 2 * r).col * ld + b_element(lane, 2 * r).row;
}

// A product's result as the A operand of the next one (P of S = Q K^T used
// in O += P V): register r of the A fragment covering columns [16 s, 16 s + 16)
// of a 16-row result held as C fragments of 8-column tiles is the pair of C
// values (c_value_of_a(r), + 1) of tile 2 s + c_tile_of_a(r); the layouts
// agree element for element, so no value leaves its lane.
KOKKOS_INLINE_FUNCTION constexpr int c_tile_of_a(int r) { return r / 2; }
KOKKOS_INLINE_FUNCTION constexpr int c_value_of_a(int r) { return 2 * (r % 2); }
// The other way: C value e of tile t is in register a_register_of_c(t, e) of
// A fragment t / 2, in its low half when e is even.
KOKKOS_INLINE_FUNCTION constexpr int a_register_of_c(int tile, int e) { return 2 * (tile % 2) + e / 2; }

// Which of a lane's C values across `Tiles` 8-column tiles of a 16-row
// result a mask hides, as bits (tile t, value e: bit t kCValues + e; 32 of
// them for the attention kernels' 64-column blocks): hides(column, slot) with
// slot = e / 2, which of the lane's two rows (c_element's row g or g + 8).
// The kernels work the mask out before the products, so the positions it reads
// are not live through them (ptxas -v, sm_90: that took the forward kernel at
// Dh = 64 from 241 registers a thread to 160, three teams an SM instead of two).
template <int Tiles, class Hides>
KOKKOS_INLINE_FUNCTION std::uint32_t hidden_c_values(int lane, Hides hides) {
  static_assert(Tiles * kCValues <= 32, "one bit a C value of a 32-bit word");
  std::uint32_t bits = 0;
#if defined(__CUDA_ARCH__)
#pragma unroll 8  // a few of the mask's loads in flight, not 32
#endif
  for (int i = 0; i < Tiles * kCValues; ++i) {
    const int tile = i / kCValues, e = i % kCValues;
    if (hides(tile * kCols + c_element(lane, e).col, e / 2)) bits |= std::uint32_t(1) << i;
  }
  return bits;
}
KOKKOS_INLINE_FUNCTION constexpr bool is_hidden(std::uint32_t bits, int tile, int e) {
  return (bits >> (tile * kCValues + e)) & 1u;
}

// ldmatrix.sync.aligned.m8n8.x4.b16 (PTX ISA, "Warp-level matrix load
// instruction: ldmatrix"): lane l gives the address of row l % 8 of matrix
// l / 8 (8 rows of 8 bf16 in shared memory); register m of lane l receives
// matrix m's elements (row l / 4, columns 2 (l % 4) and + 1), or with .trans
// (rows 2 (l % 4) and + 1, column l / 4): element i of the pair is ldsm_element(l, i).
KOKKOS_INLINE_FUNCTION constexpr Element ldsm_element(int lane, int i, bool trans) {
  return trans ? Element{2 * (lane % 4) + i, lane / 4} : Element{lane / 4, 2 * (lane % 4) + i};
}
// The row a lane addresses to load A or B fragments with one ldmatrix.x4:
// - n-major B (B(k, n) at n ld + k; K's rows for S = Q K^T): two k-steps of one
//   8-column tile, registers (0, 1) for the first step and (2, 3) for the next;
//   returns {n, k} of the row's first element.
// - k-major B (B(k, n) at k ld + n; V's rows for O += P V), with .trans: one
//   k-step of two 8-column tiles, registers (0, 1) for the first tile and (2, 3)
//   for the next; returns {k, n}.
// - row-major A (A(m, k) at m ld + k): one 16 x 16 A fragment, registers in
//   a_element's order; returns {m, k} of the row's first element.
KOKKOS_INLINE_FUNCTION constexpr Element a_row_major_row(int lane) { return {lane % 16, 8 * (lane / 16)}; }
KOKKOS_INLINE_FUNCTION constexpr Element b_nmajor_row(int lane) { return {lane % 8, 8 * (lane / 8)}; }
KOKKOS_INLINE_FUNCTION constexpr Element b_kmajor_row(int lane) { return {lane % 8 + 8 * ((lane / 8) % 2), 8 * (lane / 16)}; }

}  // namespace miniattn::kernels::mma
