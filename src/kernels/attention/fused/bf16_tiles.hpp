#pragma once
// The tile machinery of the fused kernel's bf16 version, a host kernel
// (fused_bf16_forward.cpp, fused_bf16_backward.cpp): its products run
// through kernels/base/simd_bf16_dot.hpp's register tile (vdpbf16ps, or
// widened to fp32), which takes its inner dimension in pairs:
//   C[rows x cols] = A B, A's rows bf16 with the inner dimension contiguous,
//   B pair-interleaved: b[t ldb + 2 c + h] = B(2 t + h, c), h = 0, 1.
// So a kernel lays out each operand as its product reads it: rows of Q, K, V,
// dO straight from memory (Dh in pairs), and Q, dO, probabilities and score
// gradients staged or written in pairs of rows. The softmax, its statistics
// and every accumulator stay fp32; only the products' operands are bf16.
//
// One host thread works on one tile (or block pair) at a time, in buffers of
// its own (kept per thread from one to the next), so no result depends on
// which thread takes which.
// Kokkos (through fused_tiles.hpp) before <cstring>: HIP declares its device
// memcpy in Kokkos's headers, and std::memcpy names only the memcpy declared
// before <cstring> came (as core/bf16.hpp orders them); a unity build that put
// this file first failed in the gemm kernel's device code otherwise.
#include "kernels/attention/fused/fused_tiles.hpp"
#include "kernels/base/simd_bf16_dot.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace miniattn::kernels::attention_detail {

// The register tile: 8 rows x 2 packs of 16 fp32 columns (16 accumulators,
// 2 of B and a broadcast of A in AVX-512's 32 registers; tests/kernels/
// bench_bf16_dot.cpp measures it).
constexpr int kBf16Rows = 8;
constexpr int kBf16Packs = 2;
constexpr int kBf16Cols = kBf16Packs * simd::kBf16TileColumns;
using Bf16Acc = float[kBf16Rows][kBf16Cols];

using HostPolicy = Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace, Kokkos::Schedule<Kokkos::Dynamic>,
                                       Kokkos::IndexType<index_t>>;
using FloatPack = simd::Pack<float>::type;
constexpr int kFloatLanes = simd::Pack<float>::lanes;

// The path of a call's bf16 products: the core's (bf16_dot_path: the
// environment may play a core without bf16 dot products), or widened where the
// blocking asks for it.
inline simd::Bf16Dot bf16_dot_path_of(const AttentionBlocking& blocking) {
  return blocking.widened_bf16_dot ? simd::Bf16Dot::widened : simd::bf16_dot_path();
}

// A call's shape and tiles, as both passes take them (each pass's functor
// derives from it): heads, K/V heads and query heads per K/V head, rows and
// head width, the tiles (clamped to the rows) and their counts, the padded
// query columns of the staged tiles, the softmax scale and the products' path.
struct Bf16CallShape {
  index_t heads = 0, kv_heads = 0, group = 0, nq = 0, nk = 0, dh = 0, qb = 0, kb = 0, qb_ld = 0, n_qtiles = 0,
          n_ktiles = 0;
  float scale = 0.0f;
  simd::Bf16Dot path = simd::Bf16Dot::widened;

  Bf16CallShape(const View4<const bf16>& q, const View4<const bf16>& k, const AttentionBlocking& blocking)
      : heads(q.extent(1)), kv_heads(k.extent(1)), group(heads / kv_heads), nq(q.extent(2)), nk(k.extent(2)),
        dh(q.extent(3)), qb(clamp_block(blocking.query_block, nq)), kb(clamp_block(blocking.key_block, nk)),
        qb_ld(round_up(qb, kBf16Cols)), n_qtiles(ceil_div(nq, qb)), n_ktiles(ceil_div(nk, kb)),
        scale(1.0f / compat::sqrt(static_cast<float>(dh))), path(bf16_dot_path_of(blocking)) {}
};

// exp of a probability that is rounded to bf16 next: simd_pack.hpp's
// ExpForBf16, two FMAs shorter than float's exp and four orders of magnitude
// below that rounding (through kernel_exp: a GPU build compiles this host
// kernel too, and has no device copy of the polynomial).
inline FloatPack probability_exp(const FloatPack& x) { return simd::kernel_exp<float, simd::ExpForBf16>(x); }

// Indices [begin, end): key rows, query columns, or the pairs of a product's
// inner dimension that one register tile of C adds up (a register tile with
// none is skipped, epilogue and all).
struct IndexRange {
  index_t begin = 0, end = 0;
};

// The order in which a product visits its register tiles. rows_outer: each
// row tile of A meets every column tile of B, so all of B is read once per
// row tile. columns_outer: each column tile of B meets every row tile of A
// while it is in L1, for products whose B is the large operand (P^T or dS^T
// in pairs of keys, 72 KiB at 192 x 192) and A has only Dh rows.
enum class TileOrder { rows_outer, columns_outer };

// C = A B over pairs of the inner dimension, each register tile of C over the
// pairs reach(r0, c0) gives it: A's row r at a + r lda, B pair-interleaved
// with row stride ldb >= 2 round_up(cols, kBf16Cols). Calls epilogue(r0, nr,
// c0, acc) for each tile of rows r0 .. r0+nr-1 and columns c0 .. c0+kBf16Cols-1
// (acc's columns past `cols` are not part of C; rows past `rows` repeat the
// last row of A). Each register tile's sum is the same in either order.
template <class Reach, class Epilogue>
inline void bf16_tile_product_within(simd::Bf16Dot path, index_t rows, index_t cols, const Reach& reach,
                                     const bf16* a, index_t lda, const bf16* b, index_t ldb, const Epilogue& epilogue,
                                     TileOrder order = TileOrder::rows_outer) {
  const auto register_tile = [&](index_t r0, index_t c0) {
    const IndexRange pairs = reach(r0, c0);
    if (pairs.begin >= pairs.end) return;
    const index_t nr = std::min<index_t>(kBf16Rows, rows - r0);
    const bf16* a_rows[kBf16Rows];
    for (int r = 0; r < kBf16Rows; ++r) a_rows[r] = a + (r0 + std::min<index_t>(r, nr - 1)) * lda + 2 * pairs.begin;
    alignas(64) Bf16Acc acc;
    simd::bf16_dot_tile<kBf16Rows, kBf16Packs>(path, pairs.end - pairs.begin, a_rows, b + pairs.begin * ldb + 2 * c0,
                                               ldb, acc);
    epilogue(r0, nr, c0, acc);
  };
  if (order == TileOrder::rows_outer) {
    for (index_t r0 = 0; r0 < rows; r0 += kBf16Rows)
      for (index_t c0 = 0; c0 < cols; c0 += kBf16Cols) register_tile(r0, c0);
  } else {
    for (index_t c0 = 0; c0 < cols; c0 += kBf16Cols)
      for (index_t r0 = 0; r0 < rows; r0 += kBf16Rows) register_tile(r0, c0);
  }
}

// The same over all `pairs` pairs for every register tile.
template <class Epilogue>
inline void bf16_tile_product(simd::Bf16Dot path, index_t rows, index_t cols, index_t pairs, const bf16* a,
                              index_t lda, const bf16* b, index_t ldb, const Epilogue& epilogue) {
  const auto all_pairs = [pairs](index_t, index_t) { return IndexRange{0, pairs}; };
  bf16_tile_product_within(path, rows, cols, all_pairs, a, lda, b, ldb, epilogue);
}

// Two products of one shape, C1 = A1 B1 and C2 = A2 B2, tile by tile, over all
// `pairs` pairs of the register tiles for which computes(r0, c0) holds: the
// epilogue sees both tiles of the same rows and columns together (the
// backward's scores and their gradients: dS from P without a buffer of P).
template <class Computes, class Epilogue>
inline void bf16_tile_products(simd::Bf16Dot path, index_t rows, index_t cols, index_t pairs, const Computes& computes,
                               const bf16* a1, index_t lda1, const bf16* b1, const bf16* a2, index_t lda2,
                               const bf16* b2, index_t ldb, const Epilogue& epilogue) {
  for (index_t r0 = 0; r0 < rows; r0 += kBf16Rows) {
    const index_t nr = std::min<index_t>(kBf16Rows, rows - r0);
    const bf16 *rows1[kBf16Rows], *rows2[kBf16Rows];
    for (int r = 0; r < kBf16Rows; ++r) {
      rows1[r] = a1 + (r0 + std::min<index_t>(r, nr - 1)) * lda1;
      rows2[r] = a2 + (r0 + std::min<index_t>(r, nr - 1)) * lda2;
    }
    for (index_t c0 = 0; c0 < cols; c0 += kBf16Cols) {
      if (!computes(r0, c0)) continue;
      alignas(64) Bf16Acc first, second;
      simd::bf16_dot_tile<kBf16Rows, kBf16Packs>(path, pairs, rows1, b1 + 2 * c0, ldb, first);
      simd::bf16_dot_tile<kBf16Rows, kBf16Packs>(path, pairs, rows2, b2 + 2 * c0, ldb, second);
      epilogue(r0, nr, c0, first, second);
    }
  }
}

// Stores (lo[w], hi[w]) rounded to bf16 as the pair of column c0 + w of a
// pair-interleaved row: the layout's words, lo in the low half. The native
// path rounds with vcvtne2ps2bf16 (two packs in one instruction, then
// interleaved), the same bits as bf16_bits_of on every value a kernel makes
// (denormals aside, which FTZ flushes: core/denormals.hpp).
inline void store_bf16_pairs(simd::Bf16Dot path, bf16* row, index_t c0, const FloatPack& lo, const FloatPack& hi) {
#if MINIATTN_NATIVE_BF16_DOT  // an AVX-512 target: a float pack is an __m512
  if (path == simd::Bf16Dot::native) {
    const __m512i interleave = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7,
                                                22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512i halves = (__m512i)_mm512_cvtne2ps_pbh((__m512)hi, (__m512)lo);  // lo's 16, then hi's
    _mm512_storeu_si512(row + 2 * c0, _mm512_permutexvar_epi16(interleave, halves));
    return;
  }
#endif
  (void)path;
  using Bits = simd::Pack<float>::bits;
  const Bits words = simd::bf16_bits_of(simd::pack_bit_cast<Bits>(lo)) |
                     (simd::bf16_bits_of(simd::pack_bit_cast<Bits>(hi)) << 16);
  std::memcpy(static_cast<void*>(row + 2 * c0), &words, sizeof words);
}

// Stores lo, then hi, rounded to bf16 at p (2 kFloatLanes values in a row):
// one vcvtne2ps2bf16 and one store on the native path, as store_bf16_pairs.
inline void store_bf16_row(simd::Bf16Dot path, bf16* p, const FloatPack& lo, const FloatPack& hi) {
#if MINIATTN_NATIVE_BF16_DOT
  if (path == simd::Bf16Dot::native) {
    _mm512_storeu_si512(p, (__m512i)_mm512_cvtne2ps_pbh((__m512)hi, (__m512)lo));
    return;
  }
#endif
  (void)path;
  simd::store_n<bf16>(p, lo, kFloatLanes);
  simd::store_n<bf16>(p + kFloatLanes, hi, kFloatLanes);
}

// x [rows x dh] (row stride ld) -> dst, the columns of x^T pair-interleaved:
// dst[t ld_dst + 2 c + h] = x(c, 2 t + h), zero past `rows` (up to ld_dst / 2
// columns) and past dh (an odd width's last half-pair). The B operand of a
// product over Dh whose columns are x's rows. x is read row by row, in
// memory order: read a column at a time, each load of a tile's first pass
// waited on memory.
inline void stage_width_pairs(const bf16* x, index_t ld, index_t rows, index_t dh, bf16* dst, index_t ld_dst) {
  const index_t pairs = (dh + 1) / 2, columns = ld_dst / 2;
  for (index_t c = 0; c < columns; ++c) {
    const bool real = c < rows;
    for (index_t t = 0; t < pairs; ++t) {
      bf16* const out = dst + t * ld_dst + 2 * c;
      out[0] = real ? x[c * ld + 2 * t] : bf16();
      out[1] = real && 2 * t + 1 < dh ? x[c * ld + 2 * t + 1] : bf16();
    }
  }
}

// x [rows x cols] (row stride ld) -> dst, pairs of x's rows interleaved:
// dst[t ld_dst + 2 c + h] = x(2 t + h, c), zero past `rows` (an odd count's
// last half-pair) and past `cols` (up to ld_dst / 2). The B operand of a
// product over x's rows.
inline void stage_row_pairs(const bf16* x, index_t ld, index_t rows, index_t cols, bf16* dst, index_t ld_dst) {
  const index_t pairs = (rows + 1) / 2, columns = ld_dst / 2;
  for (index_t t = 0; t < pairs; ++t) {
    bf16* const out = dst + t * ld_dst;
    const bf16* const even = x + 2 * t * ld;
    const bf16* const odd = 2 * t + 1 < rows ? even + ld : nullptr;
    for (index_t c = 0; c < columns; ++c) {
      out[2 * c] = c < cols ? even[c] : bf16();
      out[2 * c + 1] = c < cols && odd != nullptr ? odd[c] : bf16();
    }
  }
}

// Rows of K or V as the A operand of a product over Dh: in place where Dh is
// even, else copied with a zero half-pair (a row read in pairs would run into
// the next one).
struct WidthRows {
  const bf16* rows = nullptr;
  index_t ld = 0;
};
inline WidthRows width_rows(const bf16* x, index_t ld, index_t count, index_t dh, std::vector<bf16>& padded) {
  if (dh % 2 == 0) return {x, ld};
  const index_t padded_ld = dh + 1;
  padded.assign(static_cast<std::size_t>(count * padded_ld), bf16());
  for (index_t r = 0; r < count; ++r) std::copy(x + r * ld, x + r * ld + dh, padded.data() + r * padded_ld);
  return {padded.data(), padded_ld};
}

// Whether queries qp[0 .. q_count) may see keys kp[0 .. k_count) in sample b
// (tiles_meet for one host thread).
inline bool host_tiles_meet(const AttentionMask& mask, index_t b, const index_t* qp, index_t q_count,
                            const index_t* kp, index_t k_count, bool& partly_masked) {
  const auto [q_lo, q_hi] = std::minmax_element(qp, qp + q_count);
  const auto [k_lo, k_hi] = std::minmax_element(kp, kp + k_count);
  return mask.blocks_meet(b, *q_lo, *q_hi, *k_lo, *k_hi, partly_masked);
}

// Which register tiles of a tile pair hold a pair of a query and a key that
// the mask lets meet: keys are the rows (kBf16Rows to a register tile) and
// queries the columns (kBf16Cols) of the scores' products. A tile pair on a
// mask's edge (a causal diagonal, a window's edge) then skips the register
// tiles every pair of which is hidden: at 192 x 192 tiles a causal diagonal's
// are 42% of its work. What is skipped would add exact zeros (probabilities
// of hidden keys are 0), so the results are the same, bit for bit.
//
// Per column tile the key rows [key_begin, key_end) and per row tile the
// query columns [query_begin, query_end) that cover its visible register
// tiles; a kernel computes the probabilities of every register tile inside
// either range, and each product reads no more than those.
class TileReach {
 public:
  // Every register tile of key_rows x query_cols (a tile pair the mask does not cut).
  void whole(index_t key_rows, index_t query_cols) {
    key_rows_ = key_rows;
    query_cols_ = query_cols;
    whole_ = true;
  }
  // The register tiles that meet: keys at positions kpos[0 .. key_rows), queries at qpos[0 .. query_cols);
  // every one where the mask does not cut the tile pair (partly_masked false: host_tiles_meet's answer).
  void of_mask(const AttentionMask& mask, bool partly_masked, index_t b, const index_t* kpos, index_t key_rows,
               const index_t* qpos, index_t query_cols) {
    whole(key_rows, query_cols);
    if (!partly_masked) return;
    whole_ = false;
    const index_t row_tiles = ceil_div(key_rows, kBf16Rows), col_tiles = ceil_div(query_cols, kBf16Cols);
    key_begin_.assign(static_cast<std::size_t>(col_tiles), key_rows);
    key_end_.assign(static_cast<std::size_t>(col_tiles), 0);
    query_begin_.assign(static_cast<std::size_t>(row_tiles), query_cols);
    query_end_.assign(static_cast<std::size_t>(row_tiles), 0);
    for (index_t r = 0; r < row_tiles; ++r) {
      const index_t j0 = r * kBf16Rows, j1 = std::min(j0 + kBf16Rows, key_rows);
      for (index_t c = 0; c < col_tiles; ++c) {
        const index_t i0 = c * kBf16Cols, i1 = std::min(i0 + kBf16Cols, query_cols);
        bool partly = false;
        if (!host_tiles_meet(mask, b, qpos + i0, i1 - i0, kpos + j0, j1 - j0, partly)) continue;
        key_begin_[std::size_t(c)] = std::min(key_begin_[std::size_t(c)], j0);
        key_end_[std::size_t(c)] = std::max(key_end_[std::size_t(c)], j1);
        query_begin_[std::size_t(r)] = std::min(query_begin_[std::size_t(r)], i0);
        query_end_[std::size_t(r)] = std::max(query_end_[std::size_t(r)], i1);
      }
    }
  }
  // The key rows of the column tile at c0 [begin, end) (empty: none).
  IndexRange keys(index_t c0) const {
    if (whole_) return {0, key_rows_};
    const std::size_t c = std::size_t(c0 / kBf16Cols);
    return {key_begin_[c], key_end_[c]};
  }
  // The same in pairs of keys, and the query columns of the row tile at r0 in pairs of queries.
  IndexRange key_pairs(index_t c0) const { return in_pairs(keys(c0)); }
  IndexRange query_pairs(index_t r0) const {
    if (whole_) return in_pairs({0, query_cols_});
    const std::size_t r = std::size_t(r0 / kBf16Rows);
    return in_pairs({query_begin_[r], query_end_[r]});
  }
  // Whether the key rows of the column tile at c0 hold the register tile at r0 (the scores the softmax reads).
  bool keys_hold(index_t r0, index_t c0) const {
    const IndexRange k = keys(c0);
    return k.begin <= r0 && r0 < k.end;
  }
  // Whether the register tile at (r0, c0) is inside a range some product reads.
  bool computes(index_t r0, index_t c0) const {
    if (whole_) return true;
    const std::size_t r = std::size_t(r0 / kBf16Rows);
    return keys_hold(r0, c0) || (query_begin_[r] <= c0 && c0 < query_end_[r]);
  }

 private:
  // Ranges start on register tiles (even); an odd end takes its zero half-pair.
  static IndexRange in_pairs(IndexRange rows) {
    return rows.begin < rows.end ? IndexRange{rows.begin / 2, (rows.end + 1) / 2} : IndexRange{};
  }
  index_t key_rows_ = 0, query_cols_ = 0;
  bool whole_ = true;
  std::vector<index_t> key_begin_, key_end_, query_begin_, query_end_;
};

}  // namespace miniattn::kernels::attention_detail
