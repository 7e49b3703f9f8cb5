#pragma once
// Internal to the tensor-core attention kernels (tensor_core_forward.cpp,
// tensor_core_backward.cpp), CUDA only: what a warp does with fragments and
// what a team stages in shared memory. The fragment layouts come from
// mma_fragments.hpp alone.
#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_bf16.h>

#include <cstdint>
#include <string>

#include "core/error.hpp"
#include "kernels/attention/attention.hpp"
#include "kernels/attention/tensor_core/block_walk.hpp"
#include "kernels/attention/tensor_core/mma_fragments.hpp"
#include "kernels/attention/tensor_core/tensor_core_attention.hpp"

namespace miniattn::kernels::tensor_core {

using Word = std::uint32_t;  // two bf16, the first in the low half

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * mma::kWarpLanes;
constexpr int kTile = static_cast<int>(kTensorCoreTile);
static_assert(kTile == kWarps * mma::kRows, "a team's rows are its warps' 16 each");
// A staged row holds 8 bf16 (16 bytes) beyond its data: the rows of a
// fragment load (8 rows, 4 words each) then fall in 32 different banks.
constexpr int kPad = 8;
constexpr int kTileN = kTile / mma::kCols;   // 8-column tiles across a block of 64 rows
constexpr int kTileK = kTile / mma::kDepth;  // 16-deep steps across a block of 64 rows
constexpr float kLog2e = 1.4426950408889634f;

template <int Dh>
struct Widths {
  static_assert(Dh % (2 * mma::kDepth) == 0, "head width must be a multiple of 32 (ldmatrix.x4 takes two k-steps)");
  static constexpr int rows_ld = Dh + kPad;         // a block staged row-major: [kTile][Dh + kPad]
  static constexpr int k_steps = Dh / mma::kDepth;  // A fragments across a head
  static constexpr int n_tiles = Dh / mma::kCols;   // C fragments across a head
  static constexpr int block_bf16 = kTile * rows_ld;  // one staged block
  static_assert(block_bf16 % 8 == 0, "staged blocks start on 16-byte boundaries");
};

struct Range {
  index_t lo, hi;
  KOKKOS_INLINE_FUNCTION bool empty() const { return lo > hi; }
};

// The two rows (g and g + 8 of its warp's 16) whose C values a lane holds:
// C value e belongs to row slot e / 2.
constexpr int kRowSlots = 2;

__device__ __forceinline__ int lane_id() { return static_cast<int>(threadIdx.x) % mma::kWarpLanes; }
__device__ __forceinline__ int warp_id() { return static_cast<int>(threadIdx.x) / mma::kWarpLanes; }

// D += A B for one 16 x 8 tile.
__device__ __forceinline__ void mma_bf16(const Word (&a)[mma::kARegisters], const Word (&b)[mma::kBRegisters],
                                         float (&c)[mma::kCValues]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  __trap();  // unreachable: tensor_core_unavailable_reason refuses devices before compute capability 8.0
#endif
}

// Four 8 x 8 bf16 matrices from shared memory (mma_fragments.hpp: ldsm_element);
// `row` is the row this lane addresses.
__device__ __forceinline__ void load_matrices(const bf16* row, Word (&r)[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const auto at = static_cast<std::uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(at));
#else
  __trap();
#endif
}
__device__ __forceinline__ void load_matrices_transposed(const bf16* row, Word (&r)[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const auto at = static_cast<std::uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(at));
#else
  __trap();
#endif
}

// Round to nearest even, as miniattn::bf16 does.
__device__ __forceinline__ Word pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const Word*>(&v);
}
__device__ __forceinline__ Word load_word(const bf16* p) { return *reinterpret_cast<const Word*>(p); }

// 2^x by the special-function unit alone. exp2f without fast math wraps the
// same approximation in a test and two multiplies so that results below
// 2^-126 stay subnormal; here those flush to 0, which no probability notices:
// every row's largest is 1, and P V and the row sum add them to it in fp32.
__device__ __forceinline__ float exp2_flushed(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// A row's log-sum-exp in log2 units for P = exp2(S log2(e) / sqrt(Dh) - lse2);
// a row that saw no key (lse -inf) or does not exist gets +inf: P = 0.
__device__ __forceinline__ float lse_log2(float lse) {
  return lse == -compat::infinity<float>() ? compat::infinity<float>() : lse * kLog2e;
}

// Over the 4 lanes of a group, which hold the same two rows of a C fragment.
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}
__device__ __forceinline__ Range warp_range(Range r) {
  for (int offset = mma::kWarpLanes / 2; offset > 0; offset /= 2) {
    const index_t lo = __shfl_xor_sync(0xffffffffu, r.lo, offset), hi = __shfl_xor_sync(0xffffffffu, r.hi, offset);
    r = {lo < r.lo ? lo : r.lo, hi > r.hi ? hi : r.hi};
  }
  return r;
}
// The rows of a warp's 16 starting at `first` that exist in [0, n).
__device__ __forceinline__ index_t rows_left(index_t n, index_t first) {
  const index_t left = n - first;
  return left < 0 ? 0 : left < mma::kRows ? left : mma::kRows;
}
__device__ __forceinline__ Range with(Range r, index_t pos) {
  return {pos < r.lo ? pos : r.lo, pos > r.hi ? pos : r.hi};
}
constexpr Range kNoRows = {Kokkos::reduction_identity<index_t>::min(), Kokkos::reduction_identity<index_t>::max()};

// Each warp's range of row positions into shared memory (parts: kWarps):
// the walk reads it, and works out the team's from the four (team_range),
// for each block it looks at instead of holding them in registers.
__device__ __forceinline__ void share_warp_range(Range warp_rows, Range* parts) {
  if (lane_id() == 0) parts[warp_id()] = warp_rows;
  __syncthreads();
}
__device__ __forceinline__ Range team_range(const Range* parts) {
  Range r = kNoRows;
  for (int w = 0; w < kWarps; ++w) r = {parts[w].lo < r.lo ? parts[w].lo : r.lo, parts[w].hi > r.hi ? parts[w].hi : r.hi};
  return r;
}

// C += A B over a 16-row A of Depth columns (Depth / 16 fragments) and a B of
// N 8-column tiles staged in shared memory with leading dimension ld, either
// n-major (b_rows[n ld + k] = B(k, n): K's rows for S = Q K^T) or k-major
// (b_rows[k ld + n] = B(k, n): V's rows for O += P V), one ldmatrix for two mma.
template <int Depth, int N>
__device__ __forceinline__ void accumulate_product(const Word (&a)[Depth / mma::kDepth][mma::kARegisters],
                                                   const bf16* b_rows, int ld, float (&c)[N][mma::kCValues]) {
  static_assert(Depth % (2 * mma::kDepth) == 0, "two k-steps a load");
  const mma::Element at = mma::b_nmajor_row(lane_id());
  const bf16* const lane_row = b_rows + at.row * ld + at.col;
#pragma unroll
  for (int j = 0; j < N; ++j)
#pragma unroll
    for (int s = 0; s < Depth / mma::kDepth; s += 2) {
      Word b[4];
      load_matrices(lane_row + j * mma::kCols * ld + s * mma::kDepth, b);
      mma_bf16(a[s], {b[0], b[1]}, c[j]);
      mma_bf16(a[s + 1], {b[2], b[3]}, c[j]);
    }
}
template <int Depth, int N>
__device__ __forceinline__ void accumulate_product_kmajor(const Word (&a)[Depth / mma::kDepth][mma::kARegisters],
                                                          const bf16* b_rows, int ld, float (&c)[N][mma::kCValues]) {
  static_assert(N % 2 == 0, "two 8-column tiles a load");
  const mma::Element at = mma::b_kmajor_row(lane_id());
  const bf16* const lane_row = b_rows + at.row * ld + at.col;
#pragma unroll
  for (int s = 0; s < Depth / mma::kDepth; ++s)
#pragma unroll
    for (int j = 0; j < N; j += 2) {
      Word b[4];
      load_matrices_transposed(lane_row + s * mma::kDepth * ld + j * mma::kCols, b);
      mma_bf16(a[s], {b[0], b[1]}, c[j]);
      mma_bf16(a[s], {b[2], b[3]}, c[j + 1]);
    }
}

// A 16-row result of N 8-column C tiles, rounded to bf16, as the A operand of
// the next product (its columns become the depth).
template <int N>
__device__ __forceinline__ void as_a_fragments(const float (&c)[N][mma::kCValues],
                                               Word (&a)[N / 2][mma::kARegisters]) {
#pragma unroll
  for (int s = 0; s < N / 2; ++s)
#pragma unroll
    for (int r = 0; r < mma::kARegisters; ++r) {
      const float* pair = c[2 * s + mma::c_tile_of_a(r)] + mma::c_value_of_a(r);
      a[s][r] = pack_bf16(pair[0], pair[1]);
    }
}

// C value e of tile j of a result as_a_fragments packed: the bf16 value it
// became, read back when the fp32 one is no longer held.
template <int N>
__device__ __forceinline__ float packed_value(const Word (&a)[N / 2][mma::kARegisters], int j, int e) {
  const Word w = a[j / 2][mma::a_register_of_c(j, e)];
  return __uint_as_float(e % 2 == 0 ? w << 16 : w & 0xffff0000u);
}
// Per row slot, the sum of the bf16 values as_a_fragments packed, taken in
// C order (tile by tile): the row sums of P as P V multiplies it.
template <int N>
__device__ __forceinline__ void add_row_sums(const Word (&a)[N / 2][mma::kARegisters], float (&sum)[kRowSlots]) {
#pragma unroll
  for (int j = 0; j < N; ++j)
#pragma unroll
    for (int e = 0; e < mma::kCValues; ++e) sum[e / 2] += packed_value<N>(a, j, e);
}

// A fragments of 16 rows of a row-major [rows, Depth] matrix; rows at or
// past `valid` read as 0.
template <int Depth>
__device__ __forceinline__ void load_a_fragments(const bf16* rows, index_t valid,
                                                 Word (&a)[Depth / mma::kDepth][mma::kARegisters]) {
  const int lane = lane_id();
#pragma unroll
  for (int s = 0; s < Depth / mma::kDepth; ++s)
#pragma unroll
    for (int r = 0; r < mma::kARegisters; ++r)
      a[s][r] = mma::a_element(lane, 2 * r).row < valid
                    ? load_word(rows + s * mma::kDepth + mma::a_pair_offset(lane, r, Depth))
                    : Word(0);
}

// The A fragments of 16 rows of a row-major [rows, Depth] block staged in
// shared memory with leading dimension ld, one ldmatrix a k-step.
template <int Depth>
__device__ __forceinline__ void load_a_fragments_staged(const bf16* rows, int ld,
                                                        Word (&a)[Depth / mma::kDepth][mma::kARegisters]) {
  const mma::Element at = mma::a_row_major_row(lane_id());
  const bf16* const lane_row = rows + at.row * ld + at.col;
#pragma unroll
  for (int s = 0; s < Depth / mma::kDepth; ++s) load_matrices(lane_row + s * mma::kDepth, a[s]);
}

// Rows [first, first + kTile) of a row-major [n, Dh] matrix staged row-major
// (dst[row * (Dh + kPad) + d]); rows at or past n are 0. 16-byte loads: the caller checks the alignment.
template <int Dh>
__device__ __forceinline__ void stage_rows(const bf16* src, index_t first, index_t n, bf16* dst) {
  constexpr int vectors = Dh / 8;
  for (int i = static_cast<int>(threadIdx.x); i < kTile * vectors; i += kThreads) {
    const int row = i / vectors, col = 8 * (i % vectors);
    uint4 x = {0, 0, 0, 0};
    if (first + row < n) x = *reinterpret_cast<const uint4*>(src + (first + row) * Dh + col);
    *reinterpret_cast<uint4*>(dst + row * Widths<Dh>::rows_ld + col) = x;
  }
}
// The same rows copied asynchronously (cp.async, 16 bytes a copy, zero-filled
// past n): they land while the team computes on the other buffer, and are
// there once wait_for_copies has returned in every thread and the team has
// passed a barrier.
__device__ __forceinline__ void copy_async(bf16* dst, const bf16* src, bool exists) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const auto at = static_cast<std::uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(at), "l"(src), "r"(exists ? 16 : 0));
#else
  __trap();
#endif
}
template <int Dh>
__device__ __forceinline__ void stage_rows_async(const bf16* src, index_t first, index_t n, bf16* dst) {
  constexpr int vectors = Dh / 8;
  for (int i = static_cast<int>(threadIdx.x); i < kTile * vectors; i += kThreads) {
    const int row = i / vectors, col = 8 * (i % vectors);
    const bool exists = first + row < n;
    copy_async(dst + row * Widths<Dh>::rows_ld + col, src + (exists ? (first + row) * Dh + col : 0), exists);
  }
}
__device__ __forceinline__ void commit_copies() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
// All committed groups of this thread but the newest have landed.
__device__ __forceinline__ void wait_for_copies_but_newest() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group 1;\n" ::);
#endif
}

// The positions of rows [first, first + kTile) of n (every lane of a warp
// gets the range; a layout may shuffle positions, so not first and last).
__device__ __forceinline__ Range block_range(const index_t* pos, index_t first, index_t n) {
  Range r = kNoRows;
  for (int i = lane_id(); i < kTile && first + i < n; i += mma::kWarpLanes) r = with(r, pos[first + i]);
  return warp_range(r);
}

// Whether some row of the team may see some row of the block starting at
// `first` of n (block_pos: their positions), and what the calling warp may
// (parts: the warps' ranges, share_warp_range). The team's and the warp's
// rows are the queries when team_queries, else the keys.
template <bool team_queries>
__device__ __forceinline__ bool team_sees_block(const AttentionMask& mask, index_t sample, const Range* parts,
                                                const index_t* block_pos, index_t first, index_t n,
                                                WarpView& warp) {
  const Range team = team_range(parts);
  if (team.empty()) return false;
  const Range block = block_range(block_pos, first, n);
  const auto meet = [&](Range rows, bool& partly) {
    return team_queries ? mask.blocks_meet(sample, rows.lo, rows.hi, block.lo, block.hi, partly)
                        : mask.blocks_meet(sample, block.lo, block.hi, rows.lo, rows.hi, partly);
  };
  bool partly = false;
  if (!meet(team, partly)) return false;
  const Range own = parts[warp_id()];
  warp.sees = !own.empty() && meet(own, partly);
  warp.partly = partly || first + kTile > n;
  return true;
}

// The device side of walk_visible_blocks (block_walk.hpp).
struct CopyingTeam {
  __device__ void commit() const { commit_copies(); }
  __device__ void wait_for_staged() const {
    wait_for_copies_but_newest();
    __syncthreads();  // every thread's copies of the block have landed
  }
  __device__ void barrier() const { __syncthreads(); }
};

// Shared memory of the key-block walk below: two buffers of a K block and a V block.
template <int Dh>
constexpr int key_block_buffers_bytes() {
  return 2 * 2 * Widths<Dh>::block_bf16 * static_cast<int>(sizeof(bf16));
}

// The key blocks a team of query rows walks (the forward, the query
// gradients; Args: their kernel's arguments): the [nk, Dh] rows of the K/V
// head that serves query head blockIdx.y % heads of sample blockIdx.y / heads
// (GQA: heads / kv_heads query heads a K/V head), double-buffered in the
// dynamic shared memory (key_block_buffers_bytes). Blocks the mask hides from
// every row of the team are never staged; fold(sample, first_key, partly, ks,
// vs) runs in each warp whose own rows (`queries`, their positions) may see
// some key of the block (partly: some pair may be hidden, or the block runs
// past nk).
template <int Dh, class Args, class Fold>
__device__ __forceinline__ void for_each_visible_key_block(const Args& a, Range queries, Fold fold) {
  extern __shared__ uint4 shared[];
  __shared__ Range parts[kWarps];
  bf16* const staged = reinterpret_cast<bf16*>(shared);
  const index_t sample = blockIdx.y / a.heads, head = blockIdx.y % a.heads, nk = a.nk;
  const index_t kv_rows = (sample * a.kv_heads + head / (a.heads / a.kv_heads)) * nk * Dh;
  share_warp_range(queries, parts);
  auto keys_of = [&](int buffer) { return staged + 2 * buffer * Widths<Dh>::block_bf16; };
  const auto visible = [&](index_t, index_t first_key, WarpView& warp) {
    return team_sees_block<true>(a.mask, sample, parts, a.k_pos, first_key, nk, warp);
  };
  const auto stage = [&](const VisibleBlock& block, int buffer) {
    stage_rows_async<Dh>(a.k + kv_rows, block.first, nk, keys_of(buffer));
    stage_rows_async<Dh>(a.v + kv_rows, block.first, nk, keys_of(buffer) + Widths<Dh>::block_bf16);
  };
  const auto fold_block = [&](const VisibleBlock& block, int buffer) {
    if (block.warp.sees)
      fold(sample, block.first, block.warp.partly, keys_of(buffer), keys_of(buffer) + Widths<Dh>::block_bf16);
  };
  walk_visible_blocks(CopyingTeam{}, nk, kTile, 1, visible, stage, fold_block);
}

__device__ __forceinline__ int slot_row(int slot) { return mma::c_element(lane_id(), 2 * slot).row; }
// The first of the warp's 16 rows (queries of the forward and the query
// gradients, keys of the key gradients).
__device__ __forceinline__ index_t warp_first_row() { return index_t(blockIdx.x) * kTile + warp_id() * mma::kRows; }
// The positions of the lane's two rows of the warp's 16 (pos: n rows'). A
// row past n reads the last row's: nothing of it is kept. Read when needed,
// not held: four registers through every block otherwise.
__device__ __forceinline__ void lane_positions(const index_t* pos, index_t n, index_t (&out)[kRowSlots]) {
  for (int slot = 0; slot < kRowSlots; ++slot) {
    const index_t row = warp_first_row() + slot_row(slot);
    out[slot] = pos[row < n ? row : n - 1];
  }
}
// The positions of the warp's rows that exist (every lane gets the range).
__device__ __forceinline__ Range warp_rows_range(const index_t* pos, index_t n) {
  Range r = kNoRows;
  for (int slot = 0; slot < kRowSlots; ++slot) {
    const index_t row = warp_first_row() + slot_row(slot);
    if (row < n) r = with(r, pos[row]);
  }
  return warp_range(r);
}

// The C values a mask hides (bits of mma::hidden_c_values) set to -inf:
// scores the exponential turns into probabilities of 0.
template <int N>
__device__ __forceinline__ void hide_scores(std::uint32_t hidden, float (&c)[N][mma::kCValues]) {
#pragma unroll
  for (int j = 0; j < N; ++j)
#pragma unroll
    for (int e = 0; e < mma::kCValues; ++e)
      if (mma::is_hidden(hidden, j, e)) c[j][e] = -compat::infinity<float>();
}

// Which pairs of a key block starting at first_key the mask hides from a
// warp's query rows, as mma::hidden_c_values bits; keys at or past nk are
// hidden. Args: the forward's or the query gradients' kernel arguments.
template <class Args>
__device__ __forceinline__ std::uint32_t hidden_keys(const Args& a, index_t sample, index_t first_key) {
  index_t pos[kRowSlots];
  lane_positions(a.q_pos, a.nq, pos);
  return mma::hidden_c_values<kTileN>(lane_id(), [&](int key, int slot) {
    return first_key + key >= a.nk || a.mask.hides(sample, pos[slot], a.k_pos[first_key + key]);
  });
}

// Host side. A launch may use more shared memory than the 48 KB a kernel
// gets by default (and than Kokkos's team scratch): ask once per kernel.
template <class Kernel>
void allow_shared_memory(Kernel* kernel, int bytes) {
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) != cudaSuccess)
    throw RuntimeFailure("attention (tensor_core): the device refuses " + std::to_string(bytes) +
                         " bytes of shared memory per team");
}
inline void check_launch(const char* what) {
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess)
    throw RuntimeFailure(std::string("attention (tensor_core): launching the ") + what +
                         " kernel failed: " + cudaGetErrorString(status));
}
// The kernels read statistics and positions through flat offsets from data().
template <class View>
void require_contiguous(const View& x, const char* name) {
  if (!x.span_is_contiguous())
    throw RuntimeFailure(std::string("attention (tensor_core): ") + name + " must be contiguous");
}
// The kernels read operands as 16-byte vectors of whole rows.
template <class View>
void require_rows_aligned(const View& x, const char* name) {
  if (!x.span_is_contiguous() || reinterpret_cast<std::uintptr_t>(x.data()) % 16 != 0)
    throw RuntimeFailure(std::string("attention (tensor_core): ") + name +
                         " must be contiguous and 16-byte aligned");
}
// A team per 64 rows (x) of every (sample, head) (y: at most 65535 in CUDA).
inline dim3 team_grid(index_t rows, index_t sample_heads) {
  if (sample_heads > 65535)
    throw RuntimeFailure("attention (tensor_core): batch x heads = " + std::to_string(sample_heads) +
                         " is more than the 65535 teams CUDA allows along a grid's second axis");
  return dim3(static_cast<unsigned>((rows + kTile - 1) / kTile), static_cast<unsigned>(sample_heads));
}

}  // namespace miniattn::kernels::tensor_core
#endif
