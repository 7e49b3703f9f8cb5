// Blockwise attention, backward pass: the fused kernel's bf16 version, on the
// host (fused_attention.hpp; the tile machinery in bf16_tiles.hpp). The fp32
// kernel's wave schedule (fused_backward.cpp: block pairs of kBlockTiles
// tiles, in waves in which no two threads share a query or a key tile; each
// product once), with FlashAttention-2's five products laid out for bf16:
//   P^T  = exp(scale K Q^T - lse)           (K's rows from memory, Q^T in pairs of Dh)
//   dS^T = scale P^T (V dO^T - delta)       (V's rows, dO^T in pairs of Dh)
//   dv  += P^T dO,  dk += dS^T Q            (Q, dO staged in pairs of queries)
//   dq^T += K^T dS^T                        (K^T by key tiles; dS^T in pairs of keys)
// P and dS are computed in fp32 and rounded to bf16 as product operands.
// dq gathers a block pair's sum transposed in the thread's buffer, then adds
// it to the fp32 dq; dk and dv add into fp32 accumulators of the whole call
// (the workspace's dk_acc, dv_acc), rounded into the bf16 dk, dv once at the
// end. Every sum runs in an order fixed by the tiling alone.
#include "kernels/attention/fused/fused_attention.hpp"

#include "kernels/attention/fused/bf16_tiles.hpp"

namespace miniattn::kernels {

using namespace attention_detail;

namespace {

// One query tile of a block pair, for one query head.
struct QuerySlot {
  index_t i0 = 0, rows = 0;
  std::vector<bf16> q_width, g_width;  // [ceil(dh/2)][2 qb_ld]: Q^T, dO^T in pairs of Dh
  std::vector<bf16> q_rows, g_rows;    // [ceil(qb/2)][2 dh_ld]: Q, dO in pairs of queries
  std::vector<float> lse_col, delta_col;  // [qb_ld]: +inf (no probability) and 0 past the rows
  std::vector<index_t> qpos;              // [qb_ld]
  std::vector<float> dq_t;                // [dh][qb_ld]: the block pair's dq, transposed
};

// One key tile of a block pair and its products with a query tile.
struct KeySlot {
  index_t kt = 0, j0 = 0, cols = 0;
  WidthRows k_rows, v_rows;
  std::vector<bf16> k_padded, v_padded;  // odd Dh
  std::vector<bf16> p_bf, ds_bf;         // [kb][qb_ld]: P^T, dS^T rounded
  std::vector<bf16> ds_pairs;            // [ceil(kb/2)][2 qb_ld]: dS^T in pairs of keys
  TileReach reach;                       // its register tiles that the mask lets meet the query tile's
};

struct BackwardBf16BlockPair : Bf16CallShape {
  View4<const bf16> q, k, v, dout;
  View3<const float> lse, delta;
  View1<const index_t> q_pos, k_pos;
  View4<float> dq, dk_acc, dv_acc;
  View4<const bf16> k_t;  // [B, KV, key tiles x Dh, kt_ld]: transpose_key_tiles
  AttentionMask mask;
  index_t dh_ld = 0, n_kblocks = 0, waves = 0, wave = 0;

  void operator()(const index_t rank) const {
    const index_t key_block = rank % n_kblocks, query_block = (key_block + wave) % waves;
    if (query_block * kBlockTiles >= n_qtiles) return;
    const index_t bkh = rank / n_kblocks, b = bkh / kv_heads, kh = bkh % kv_heads;
    const index_t kt0 = key_block * kBlockTiles, kt1 = std::min(kt0 + kBlockTiles, n_ktiles);
    const index_t qt0 = query_block * kBlockTiles, qt1 = std::min(qt0 + kBlockTiles, n_qtiles);
    bool partly = false;
    const index_t i_lo = qt0 * qb, i_hi = std::min(qt1 * qb, nq), j_lo = kt0 * kb, j_hi = std::min(kt1 * kb, nk);
    if (mask.hides_any() && !host_tiles_meet(mask, b, &q_pos(i_lo), i_hi - i_lo, &k_pos(j_lo), j_hi - j_lo, partly))
      return;
    // The thread's buffers move in and out of a cache kept from one block pair
    // to the next: allocated anew (mmap'ed, in a run's fragmented heap), their
    // pages were faulted in again each time, which doubled a run's backward.
    static thread_local std::vector<QuerySlot> slot_cache;
    static thread_local KeySlot key_cache;
    std::vector<QuerySlot> slots = std::move(slot_cache);
    KeySlot key = std::move(key_cache);
    slots.resize(static_cast<std::size_t>(kBlockTiles));
    allocate(key);
    for (index_t h = kh * group; h < (kh + 1) * group; ++h) {  // the K/V head's query heads
      for (index_t qt = qt0; qt < qt1; ++qt) stage_queries(slots[std::size_t(qt - qt0)], b, h, qt);
      for (index_t kt = kt0; kt < kt1; ++kt) {
        stage_keys(key, b, kh, kt);
        for (index_t qt = qt0; qt < qt1; ++qt) {
          QuerySlot& slot = slots[std::size_t(qt - qt0)];
          bool masked = false;
          if (mask.hides_any() &&
              !host_tiles_meet(mask, b, slot.qpos.data(), slot.rows, &k_pos(key.j0), key.cols, masked))
            continue;
          key.reach.of_mask(mask, masked, b, &k_pos(key.j0), key.cols, slot.qpos.data(), slot.rows);
          probabilities_and_score_gradients(key, slot, b, masked);
          add_gradients(key, slot, b, kh);
        }
      }
      for (index_t qt = qt0; qt < qt1; ++qt) add_query_gradients(slots[std::size_t(qt - qt0)], b, h);
    }
    slot_cache = std::move(slots);
    key_cache = std::move(key);
  }

  void allocate(KeySlot& key) const {
    const auto n = [](index_t count) { return static_cast<std::size_t>(count); };
    key.p_bf.resize(n(kb * qb_ld));
    key.ds_bf.resize(n(kb * qb_ld));
    key.ds_pairs.resize(n((kb + 1) / 2 * 2 * qb_ld));
  }

  void stage_queries(QuerySlot& slot, index_t b, index_t h, index_t qt) const {
    const auto n = [](index_t count) { return static_cast<std::size_t>(count); };
    slot.i0 = qt * qb;
    slot.rows = std::min(qb, nq - slot.i0);
    const index_t width_pairs = (dh + 1) / 2, row_pairs = (qb + 1) / 2;
    slot.q_width.resize(n(width_pairs * 2 * qb_ld));
    slot.g_width.resize(n(width_pairs * 2 * qb_ld));
    slot.q_rows.resize(n(row_pairs * 2 * dh_ld));
    slot.g_rows.resize(n(row_pairs * 2 * dh_ld));
    const bf16* const q_tile = &q(b, h, slot.i0, 0);
    const bf16* const g_tile = &dout(b, h, slot.i0, 0);
    const index_t q_ld = q.stride(2), g_ld = dout.stride(2);
    stage_width_pairs(q_tile, q_ld, slot.rows, dh, slot.q_width.data(), 2 * qb_ld);
    stage_width_pairs(g_tile, g_ld, slot.rows, dh, slot.g_width.data(), 2 * qb_ld);
    stage_row_pairs(q_tile, q_ld, slot.rows, dh, slot.q_rows.data(), 2 * dh_ld);
    stage_row_pairs(g_tile, g_ld, slot.rows, dh, slot.g_rows.data(), 2 * dh_ld);
    slot.lse_col.assign(n(qb_ld), compat::infinity<float>());  // exp(x - inf) = 0
    slot.delta_col.assign(n(qb_ld), 0.0f);
    slot.qpos.assign(n(qb_ld), kPaddingPosition);
    for (index_t c = 0; c < slot.rows; ++c) {
      const float lse_i = lse(b, h, slot.i0 + c);
      if (lse_i != -compat::infinity<float>()) slot.lse_col[n(c)] = lse_i;  // a row that saw no key: P = 0
      slot.delta_col[n(c)] = delta(b, h, slot.i0 + c);
      slot.qpos[n(c)] = q_pos(slot.i0 + c);
    }
    slot.dq_t.assign(n(dh * qb_ld), 0.0f);
  }

  void stage_keys(KeySlot& key, index_t b, index_t kh, index_t kt) const {
    key.kt = kt;
    key.j0 = kt * kb;
    key.cols = std::min(kb, nk - key.j0);
    key.k_rows = width_rows(&k(b, kh, key.j0, 0), index_t(k.stride(2)), key.cols, dh, key.k_padded);
    key.v_rows = width_rows(&v(b, kh, key.j0, 0), index_t(v.stride(2)), key.cols, dh, key.v_padded);
  }

  // P^T = exp(scale K Q^T - lse), 0 where masked, and dS^T = scale P^T (V dO^T
  // - delta), from the two products' tiles together: both rounded, dS^T also
  // in pairs of keys. A pair of keys' packs at a time: their exponentials are
  // independent chains of dependent FMAs, which one pack at a time left
  // waiting on each other's latency.
  void probabilities_and_score_gradients(KeySlot& key, const QuerySlot& slot, index_t b, bool masked) const {
    constexpr int kPacks = kBf16Cols / kFloatLanes;
    static_assert(kPacks % 2 == 0, "store_bf16_row stores two packs");
    const index_t ld = qb_ld;
    const FloatPack s = simd::pack_splat<FloatPack>(scale);
    const auto computed = [&](index_t r0, index_t c0) { return key.reach.computes(r0, c0); };
    bf16_tile_products(
        path, key.cols, slot.rows, (dh + 1) / 2, computed, key.k_rows.rows, key.k_rows.ld, slot.q_width.data(),
        key.v_rows.rows, key.v_rows.ld, slot.g_width.data(), 2 * qb_ld,
        [&](index_t r0, index_t nr, index_t c0, const Bf16Acc& scores, const Bf16Acc& score_grads) {
          FloatPack shift[kPacks], delta_c[kPacks];
          MINIATTN_UNROLL
          for (int p = 0; p < kPacks; ++p) {
            shift[p] = simd::pack_load<FloatPack>(&slot.lse_col[std::size_t(c0 + p * kFloatLanes)]);
            delta_c[p] = simd::pack_load<FloatPack>(&slot.delta_col[std::size_t(c0 + p * kFloatLanes)]);
          }
          for (index_t r = 0; r < nr; r += 2) {  // r0 is even: pairs of keys (r, r + 1)
            const int keys = r + 1 < nr ? 2 : 1;  // an odd tile's last pair is half zero
            FloatPack pv[2][kPacks], ds[2][kPacks];
            MINIATTN_UNROLL
            for (int h = 0; h < 2; ++h)
              MINIATTN_UNROLL
              for (int p = 0; p < kPacks; ++p)  // rows past nr repeat the last one: finite
                pv[h][p] = probability_exp(s * simd::pack_load<FloatPack>(&scores[r + h][p * kFloatLanes]) - shift[p]);
            if (masked) hide_masked_keys(pv, keys, key, slot, b, r0 + r, c0);
            MINIATTN_UNROLL
            for (int h = 0; h < 2; ++h)
              MINIATTN_UNROLL
              for (int p = 0; p < kPacks; ++p)
                ds[h][p] = h < keys ? FloatPack(s * pv[h][p] *
                                                (simd::pack_load<FloatPack>(&score_grads[r + h][p * kFloatLanes]) -
                                                 delta_c[p]))
                                    : simd::pack_splat<FloatPack>(0.0f);
            for (int h = 0; h < keys; ++h) {
              const std::size_t row = std::size_t((r0 + r + h) * ld + c0);
              MINIATTN_UNROLL
              for (int p = 0; p < kPacks; p += 2) {
                store_bf16_row(path, &key.p_bf[row + std::size_t(p * kFloatLanes)], pv[h][p], pv[h][p + 1]);
                store_bf16_row(path, &key.ds_bf[row + std::size_t(p * kFloatLanes)], ds[h][p], ds[h][p + 1]);
              }
            }
            MINIATTN_UNROLL
            for (int p = 0; p < kPacks; ++p)
              store_bf16_pairs(path, &key.ds_pairs[std::size_t((r0 + r) * ld)], c0 + p * kFloatLanes, ds[0][p],
                               ds[1][p]);
          }
        });
  }

  // Probabilities of keys hidden from a query set to 0 (only tiles on a mask's
  // edge): the pair of key rows `first`, first + 1 of the tile (`keys` of them
  // real) against query columns c0 ...
  template <int kPacks>
  void hide_masked_keys(FloatPack (&pv)[2][kPacks], int keys, const KeySlot& key, const QuerySlot& slot, index_t b,
                        index_t first, index_t c0) const {
    for (int h = 0; h < keys; ++h) {
      const index_t key_position = k_pos(key.j0 + first + h);
      for (int p = 0; p < kPacks; ++p) {
        alignas(64) float probabilities[kFloatLanes];
        simd::pack_store(probabilities, pv[h][p]);
        const std::size_t col = std::size_t(c0 + p * kFloatLanes);
        hide_masked<kFloatLanes>(
            mask, b, probabilities, 0.0f, [&](int w) { return slot.qpos[col + std::size_t(w)]; },
            [&](int) { return key_position; });
        pv[h][p] = simd::pack_load<FloatPack>(probabilities);
      }
    }
  }

  // dv += P^T dO, dk += dS^T Q (fp32 accumulators: this thread is the only
  // one of its wave on these key rows), dq^T += K^T dS^T (the slot's buffer).
  void add_gradients(const KeySlot& key, QuerySlot& slot, index_t b, index_t kh) const {
    const auto queries_reached = [&](index_t r0, index_t) { return key.reach.query_pairs(r0); };
    const auto keys_reached = [&](index_t, index_t c0) { return key.reach.key_pairs(c0); };
    const auto add_into = [&](const View4<float>& grads) {
      return [&, grads](index_t r0, index_t nr, index_t c0, const Bf16Acc& acc) {
        for (index_t r = 0; r < nr; ++r) {
          float* const row = &grads(b, kh, key.j0 + r0 + r, c0);
          for (int c = 0; c < kBf16Cols && c0 + c < dh; c += kFloatLanes) {
            const int width = static_cast<int>(std::min<index_t>(kFloatLanes, dh - c0 - c));
            simd::pack_store_n(row + c, FloatPack(simd::pack_load_n<FloatPack>(row + c, width) +
                                                  simd::pack_load<FloatPack>(&acc[r][c])), width);
          }
        }
      };
    };
    bf16_tile_product_within(path, key.cols, dh, queries_reached, key.p_bf.data(), qb_ld, slot.g_rows.data(),
                             2 * dh_ld, add_into(dv_acc));
    bf16_tile_product_within(path, key.cols, dh, queries_reached, key.ds_bf.data(), qb_ld, slot.q_rows.data(),
                             2 * dh_ld, add_into(dk_acc));
    float* const dq_t = slot.dq_t.data();
    const index_t ld = qb_ld;
    const auto add_transposed = [&](index_t r0, index_t nr, index_t c0, const Bf16Acc& acc) {
      for (index_t r = 0; r < nr; ++r)
        for (int c = 0; c < kBf16Cols; c += kFloatLanes) {
          float* const x = dq_t + (r0 + r) * ld + c0 + c;
          simd::pack_store(x, FloatPack(simd::pack_load<FloatPack>(x) + simd::pack_load<FloatPack>(&acc[r][c])));
        }
    };
    bf16_tile_product_within(path, dh, slot.rows, keys_reached, &k_t(b, kh, key.kt * dh, 0), index_t(k_t.stride(2)),
                             key.ds_pairs.data(), 2 * qb_ld, add_transposed, TileOrder::columns_outer);
  }

  // The block pair's dq into the call's (this thread is the only one of its
  // wave on these query rows).
  void add_query_gradients(const QuerySlot& slot, index_t b, index_t h) const {
    for (index_t c = 0; c < slot.rows; ++c) {
      float* const row = &dq(b, h, slot.i0 + c, 0);
      for (index_t d = 0; d < dh; ++d) row[d] += slot.dq_t[std::size_t(d * qb_ld + c)];
    }
  }
};

}  // namespace

void fused_bf16_backward_accumulate(const View4<const bf16>& q, const View4<const bf16>& k,
                                    const View4<const bf16>& v, const View4<const bf16>& dout,
                                    const View3<const float>& lse, const View3<const float>& delta,
                                    const AttentionScope& scope, const View4<float>& dq, const View4<bf16>& dk,
                                    const View4<bf16>& dv, const AttentionWorkspace<bf16>& workspace) {
  const auto holds_keys = [&](const View4<float>& sums) {
    return sums.extent(0) == dk.extent(0) && sums.extent(1) == dk.extent(1) && sums.extent(2) >= dk.extent(2) &&
           sums.extent(3) == dk.extent(3);
  };
  require(holds_keys(workspace.dk_acc) && holds_keys(workspace.dv_acc),
          "the workspace's dk_acc and dv_acc must hold the call's dk and dv: [B, KV, >= n_k, Dh] (fused, bf16)");
  BackwardBf16BlockPair pair{{q, k, scope.blocking}, q, k, v, dout, lse, delta, scope.q_pos, scope.k_pos, dq,
                             workspace.dk_acc, workspace.dv_acc, workspace.k_t, scope.mask};
  pair.dh_ld = round_up(pair.dh, kBf16Cols);
  pair.n_kblocks = ceil_div(pair.n_ktiles, kBlockTiles);
  pair.waves = std::max(ceil_div(pair.n_qtiles, kBlockTiles), pair.n_kblocks);
  transpose_key_tiles_into(k, pair.kb, pair.n_ktiles, workspace.k_t);
  Kokkos::deep_copy(workspace.dk_acc, 0.0f);
  Kokkos::deep_copy(workspace.dv_acc, 0.0f);
  const HostPolicy policy(0, index_t(q.extent(0)) * pair.kv_heads * pair.n_kblocks);
  for (pair.wave = 0; pair.wave < pair.waves; ++pair.wave)
    Kokkos::parallel_for("miniattn::attention_backward_accumulate_bf16", policy, pair);
  add_rounded_rows<bf16>(workspace.dk_acc, 0, dk.extent(2), dk);
  add_rounded_rows<bf16>(workspace.dv_acc, 0, dv.extent(2), dv);
}

}  // namespace miniattn::kernels
