#pragma once
// The tile machinery of the fused kernel (fused_forward.cpp,
// fused_backward.cpp): the team scratch of its tiles, the register-blocked
// tile product, and the loops over a tile's rows. The team policies and the
// scratch level, which the gemm kernel and the dispatch use too, are
// kernels/base/team_policy.hpp's.
//
// One Kokkos team works on one tile (forward: a query tile; backward: a
// query-tile x key-tile pair). The operand a tile keeps meeting is staged once
// per team in scratch, and every matrix product of a tile pair goes through one
// register-blocked kernel (team_tile_product):
//   C[rows x width] = A B, cut into R x W register tiles.
// A thread of the team takes a strip of R rows (R pointers into A); a vector
// lane takes W consecutive columns of B and accumulates the R x W block in
// registers over the whole inner dimension, then hands it to an epilogue
// (scale, mask, exp, rescale-and-add, ...). The tiling is chosen by execution
// space, the code is the same:
//   host (one thread per team): a lane is a "pack" of SIMD registers: W = P
//     vectors of the target's width (kernels/base/simd_pack.hpp), R rows (Tiling
//     below): 2R accumulator registers, 2 for B, 1 broadcast of A - the
//     classic broadcast + FMA micro-kernel;
//   GPU: W = 1 and a pack is one scalar: a lane owns R outputs of one column
//     of C, lanes run along B's rows.
// Row-wise passes (online softmax) use the same split: one pack of consecutive
// queries per lane. Phases that read what other threads wrote are separated by
// team barriers.
#include <algorithm>
#include <cstddef>
#include <limits>

#include "kernels/attention/attention.hpp"
#include "kernels/base/reduction.hpp"
#include "kernels/base/simd_pack.hpp"
#include "kernels/base/team_policy.hpp"

namespace miniattn::kernels::attention_detail {

using namespace simd;

// The position of a tile's padding rows: past every real one (how the masks
// treat it: AttentionMask::hides). A constant, so that device code calls no
// host function (std::numeric_limits) for it.
constexpr index_t kPaddingPosition = std::numeric_limits<index_t>::max();

// Register tile of the products: R rows x P packs (W = P * lanes columns).
// Host: 2R accumulator registers + P for B + 1 broadcast fit the SIMD register
// file: R = 6 for the 16 registers of SSE2/AVX2, R = 8 for AVX-512's 32
// (measured: R = 4 is 60% slower, R = 12 about 5% slower than 8 there).
// GPU: a lane owns R = 4 outputs of one column, so each value of B it loads
// serves 4 multiply-adds (one output per lane took two loads per multiply-add,
// measured near 12% of the FMA peak on an H100); R = 4 is not yet measured there.
template <class T>
struct Tiling {
  static constexpr int R = kHostExecution ? (kHostVectorBytes == 64 ? 8 : 6) : 4;
  static constexpr int P = kHostExecution ? 2 : 1;
  static constexpr int lanes = Pack<T>::lanes;
  static constexpr int W = P * lanes;
  static constexpr int L = kHostExecution ? 1 : kGpuRowLanes;  // vector lanes of the row-wise passes
};

inline index_t clamp_block(index_t requested, index_t extent) {
  require(requested > 0, "tile sizes must be > 0 (choose_attention_tiles resolves kernels.* = 0)");
  return std::max<index_t>(1, std::min<index_t>(requested, extent));
}

// Team scratch of one forward query tile (qb queries against kb keys) and of
// one backward tile pair; the kernels' Tile and Pair carve it up in this order.
template <class T>
std::size_t forward_scratch_bytes(index_t qb, index_t kb, index_t dh) {
  const index_t qb_ld = round_up(qb, Tiling<T>::W), dh_ld = round_up(dh, Tiling<T>::W);
  return scratch_bytes_for<T>(dh * qb_ld) + scratch_bytes_for<T>(kb * qb_ld) + scratch_bytes_for<T>(qb * dh_ld) +
         3 * scratch_bytes_for<T>(qb_ld) + scratch_bytes_for<index_t>(qb_ld);
}

// Whether a backward team copies its key tile's K^T and V^T into scratch: a
// GPU does (shared memory). The host reads the tile where the call transposed
// it, one contiguous block (kernels::TransposedKeyTiles): a copy stalls on
// each cache miss of the tile, which the products, reading it in place,
// overlap with their multiply-adds (the copy took an eighth of the backward's
// time, Xeon, n = 8192, 96 x 96 tiles).
constexpr bool kStageKeyTiles = !kHostExecution;

template <class T>
std::size_t backward_scratch_bytes(index_t qb, index_t kb, index_t dh) {
  const index_t kb_ld = round_up(kb, Tiling<T>::W), dh_ld = round_up(dh, Tiling<T>::W);
  return (kStageKeyTiles ? 2 * scratch_bytes_for<T>(dh * kb_ld) : 0) + 2 * scratch_bytes_for<T>(qb * kb_ld) +
         2 * scratch_bytes_for<T>(kb * dh_ld) + scratch_bytes_for<index_t>(kb_ld);
}

// Smallest and largest global position of a tile; the same on every thread.
KOKKOS_INLINE_FUNCTION void team_position_range(const TeamMember& team, const index_t* pos, index_t count,
                                                index_t& lowest, index_t& highest) {
  Kokkos::parallel_reduce(
      Kokkos::TeamThreadRange(team, count),
      [&](const index_t r, index_t& value) { value = pos[r] < value ? pos[r] : value; }, Kokkos::Min<index_t>(lowest));
  Kokkos::parallel_reduce(
      Kokkos::TeamThreadRange(team, count),
      [&](const index_t r, index_t& value) { value = pos[r] > value ? pos[r] : value; }, Kokkos::Max<index_t>(highest));
}

// Whether a tile's queries may see any of a tile's keys under the mask in
// sample b (false: every pair hidden, the tile pair is skipped), and whether
// some pair may be hidden (then each pair is tested). From the tiles'
// position ranges, and for documents from the documents of their ends (ids
// do not decrease with the position), so both answers err on the side of
// computing.
KOKKOS_INLINE_FUNCTION bool tiles_meet(const TeamMember& team, const AttentionMask& mask, index_t b,
                                       const index_t* q_pos, index_t q_count, const index_t* k_pos, index_t k_count,
                                       bool& partly_masked) {
  index_t q_lo = 0, q_hi = 0, k_lo = 0, k_hi = 0;
  team_position_range(team, q_pos, q_count, q_lo, q_hi);
  team_position_range(team, k_pos, k_count, k_lo, k_hi);
  return mask.blocks_meet(b, q_lo, q_hi, k_lo, k_hi, partly_masked);
}

// values[w] = hidden for each w < W whose pair (query(w), key(w)) the mask
// hides in sample b. Without documents the test is on positions alone and
// branch-free, so the compiler runs it on whole SIMD registers (a scalar
// test a value took 3-4% of the causal forward pass, Xeon, n = 8192).
template <int W, class T, class Query, class Key>
KOKKOS_FORCEINLINE_FUNCTION void hide_masked(const AttentionMask& mask, index_t b, T* values, T hidden,
                                             const Query& query, const Key& key) {
  if (mask.documents.extent(1) == 0) {
    for (int w = 0; w < W; ++w) values[w] = mask.hides_position(query(w), key(w)) ? hidden : values[w];
  } else {
    for (int w = 0; w < W; ++w)
      if (mask.hides(b, query(w), key(w))) values[w] = hidden;
  }
}

// acc[r][p] = sum_{t < depth} A(r, t) B(t, columns of pack p), A(r, t) = a[r][t * a_step],
// B(t, c) = b[t * ldb + c]. kPartial: only the first `width` columns of B exist.
template <int R, int P, bool kPartial, class T, class V>
KOKKOS_FORCEINLINE_FUNCTION void register_tile(index_t depth, const T* const (&a)[R], index_t a_step,
                                               const T* b, index_t ldb, index_t width, V (&acc)[R][P]) {
  constexpr int lanes = static_cast<int>(sizeof(V) / sizeof(T));
  MINIATTN_UNROLL
  for (int r = 0; r < R; ++r) {
    MINIATTN_UNROLL
    for (int p = 0; p < P; ++p) acc[r][p] = pack_splat<V>(T(0));
  }
  for (index_t t = 0; t < depth; ++t) {
    const T* const b_row = b + t * ldb;
    V bv[P];
    if constexpr (kPartial) {
      T padded[P * lanes];
      for (int c = 0; c < P * lanes; ++c) padded[c] = c < width ? b_row[c] : T(0);
      MINIATTN_UNROLL
      for (int p = 0; p < P; ++p) bv[p] = pack_load<V>(padded + p * lanes);
    } else {
      MINIATTN_UNROLL
      for (int p = 0; p < P; ++p) bv[p] = pack_load<V>(b_row + p * lanes);
    }
    MINIATTN_UNROLL
    for (int r = 0; r < R; ++r) {
      const V av = pack_splat<V>(a[r][t * a_step]);
      MINIATTN_UNROLL
      for (int p = 0; p < P; ++p) acc[r][p] += av * bv[p];
    }
  }
}

// C[rows x width] = A B with A(r, t) = a0[r * a_rs + t * a_cs] and
// B(t, c) = b0[t * ldb + c], t < depth, in R x W register tiles spread over the
// team's threads (row strips) and vector lanes (column chunks). For each tile
// calls epilogue(r0, nr, c0, nc, acc): rows r0 .. r0+nr-1, columns c0 .. c0+nc-1
// (acc's other entries are not part of C). Rows past the end repeat the last
// row of A; columns past `width` read nothing.
template <class T, class Epilogue>
KOKKOS_FORCEINLINE_FUNCTION void team_tile_product(const TeamMember& team, index_t rows, index_t width, index_t depth,
                                                   const T* a0, index_t a_rs, index_t a_cs, const T* b0, index_t ldb,
                                                   const Epilogue& epilogue) {
  using V = typename Pack<T>::type;
  constexpr int R = Tiling<T>::R, P = Tiling<T>::P, W = Tiling<T>::W;
  const index_t strips = (rows + R - 1) / R;
  const index_t chunks = (width + W - 1) / W;
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, strips), [&](const index_t s) {
    const index_t r0 = s * R;
    const index_t nr = rows - r0 < R ? rows - r0 : R;
    const T* a[R];
    MINIATTN_UNROLL
    for (int r = 0; r < R; ++r) a[r] = a0 + (r0 + (r < nr ? r : nr - 1)) * a_rs;
    Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, chunks), [&](const index_t c) {
      const index_t c0 = c * W;
      const index_t nc = width - c0 < W ? width - c0 : W;
      V acc[R][P];
      if (nc == W) {
        register_tile<R, P, false>(depth, a, a_cs, b0 + c0, ldb, nc, acc);
      } else {
        register_tile<R, P, true>(depth, a, a_cs, b0 + c0, ldb, nc, acc);
      }
      epilogue(r0, nr, c0, nc, acc);
    });
  });
}

// acc (one register tile of team_tile_product) added into the rows
// dst + (r0 + r) * ld, columns c0 .. c0 + nc - 1: each team owns the rows it
// adds to, so there is no race and the order of additions is fixed.
template <class T, int R, int P, class V>
KOKKOS_FORCEINLINE_FUNCTION void add_register_tile(T* dst, index_t ld, index_t r0, index_t nr, index_t c0, index_t nc,
                                                   const V (&acc)[R][P]) {
  constexpr int lanes = static_cast<int>(sizeof(V) / sizeof(T));
  MINIATTN_UNROLL
  for (int r = 0; r < R; ++r) {
    if (r >= nr) break;
    T* const row = dst + (r0 + r) * ld + c0;
    MINIATTN_UNROLL
    for (int p = 0; p < P; ++p) {
      const index_t left = nc - p * lanes;
      if (left <= 0) break;
      const int width = left < lanes ? static_cast<int>(left) : lanes;
      pack_store_n(row + p * lanes, V(pack_load_n<V>(row + p * lanes, width) + acc[r][p]), width);
    }
  }
}

// Calls f(c0) for c0 = 0, W, 2W, ... < count: W consecutive items per vector
// lane (host: one lane, W items in P packs; GPU: W = 1, L lanes).
template <class T, class F>
KOKKOS_FORCEINLINE_FUNCTION void team_lane_chunks(const TeamMember& team, index_t count, const F& f) {
  constexpr int W = Tiling<T>::W, L = Tiling<T>::L;
  const index_t groups = (count + W * L - 1) / (W * L);
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, groups), [&](const index_t g) {
    Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, L), [&](const index_t lane) {
      const index_t c0 = (g * L + lane) * W;
      if (c0 < count) f(c0);
    });
  });
}

// Copies a [rows x cols] tile (row stride src_ld) into scratch dst [rows][dst_ld].
template <class T>
KOKKOS_INLINE_FUNCTION void copy_tile(const TeamMember& team, const T* src, index_t src_ld, index_t rows,
                                      index_t cols, T* dst, index_t dst_ld) {
  using V = typename Pack<T>::type;
  constexpr int lanes = Pack<T>::lanes;
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows), [&](const index_t r) {
    Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, (cols + lanes - 1) / lanes), [&](const index_t p) {
      const index_t c0 = p * lanes;
      const int width = cols - c0 < lanes ? static_cast<int>(cols - c0) : lanes;
      pack_store_n(dst + r * dst_ld + c0, pack_load_n<V>(src + r * src_ld + c0, width), width);
    });
  });
}

// Copies a [rows x cols] tile (row stride src_ld) transposed into scratch
// dst [cols][dst_ld], columns past `rows` zero.
template <class T>
KOKKOS_INLINE_FUNCTION void stage_transposed(const TeamMember& team, const T* src, index_t src_ld, index_t rows,
                                             index_t cols, T* dst, index_t dst_ld) {
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, cols), [&](const index_t d) {
    Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, dst_ld),
                         [&](const index_t r) { dst[d * dst_ld + r] = r < rows ? src[r * src_ld + d] : T(0); });
  });
}

// The backward's blocks: S = kBlockTiles consecutive tiles (fused_backward.cpp,
// fused_bf16_backward.cpp). Each tile a team reads comes from L3 or memory once per block
// pair and serves S pairs; 8 against 4 took a tenth off the backward on the
// Xeon (n = 8192, 96 x 96 tiles: the block pair's q, dout, dq, K, K^T and V^T
// tiles, 1.1 MiB, within its 2 MiB L2). A constant: the order of the sums, and
// so the bits, must not depend on the machine's thread count.
constexpr index_t kBlockTiles = 8;

// x [B, H, n, Dh] -> x_t, key tiles of kb keys transposed one by one: key
// j = kt kb + c at x_t(b, h, kt Dh + d, c) (transposed_key_tiles). Parallel
// over (head, key tile, d, c), no index divided: a GPU spreads a tile's keys
// over its threads. The host takes a whole tile at a time, whose kb rows of x
// (kb Dh values) stay in L1 while it writes the tile's Dh rows in order (by
// single keys, with j / kb and j % kb for each value, it moved 2 GB/s).
template <class T>
void transpose_key_tiles(const View4<const T>& x, index_t kb, index_t tiles, const View4<T>& x_t) {
  const index_t heads = index_t(x.extent(0)) * x.extent(1), n = x.extent(2), dh = x.extent(3);
  const index_t ld = x_t.extent(3), head_stride = x_t.extent(2) * ld;
  const T* const from = x.data();
  T* const to = x_t.data();
  using Policy = Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<4>, Kokkos::IndexType<index_t>>;
  const auto tile = kHostExecution ? typename Policy::tile_type{1, 1, dh, kb} : typename Policy::tile_type{0, 0, 0, 0};
  Kokkos::parallel_for(
      "miniattn::attention_transpose_keys", Policy({0, 0, 0, 0}, {heads, tiles, dh, kb}, tile),
      KOKKOS_LAMBDA(const index_t bh, const index_t kt, const index_t d, const index_t c) {
        const index_t j = kt * kb + c;
        if (j < n) to[bh * head_stride + (kt * dh + d) * ld + c] = from[(bh * n + j) * dh + d];
      });
}

// transpose_key_tiles into a workspace's x_t, which must hold every tile and,
// past an odd tile's last key, the zero column that bf16 products read in pairs.
template <class T>
void transpose_key_tiles_into(const View4<const T>& x, index_t kb, index_t tiles, const View4<T>& x_t) {
  require(x_t.extent(0) == x.extent(0) && x_t.extent(1) == x.extent(1) &&
              index_t(x_t.extent(2)) >= tiles * index_t(x.extent(3)) && index_t(x_t.extent(3)) >= round_up(kb, 2),
          "the workspace must hold K^T and V^T by key tiles: [B, KV, >= key tiles x Dh, >= key_block, even]");
  transpose_key_tiles<T>(x, kb, tiles, x_t);
}

}  // namespace miniattn::kernels::attention_detail
