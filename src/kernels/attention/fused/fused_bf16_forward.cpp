// Blockwise attention, forward pass: the fused kernel's bf16 version, on the
// host (fused_attention.hpp; the tile machinery in bf16_tiles.hpp). The
// fp32 kernel's algorithm (fused_forward.cpp), laid out for bf16 products:
// one thread per query tile, looping over key tiles,
//   S^T = scale K Q^T            (K's rows from memory, Q^T staged once in pairs of Dh)
//   online softmax down each query's column of S^T in fp32, writing P^T
//   in pairs of keys (bf16),
//   O^T = O^T alpha + V^T P^T    (V^T transposed once per call, by key tiles)
// so that every product's operands come as vdpbf16ps takes them, and the
// running output is kept transposed (columns: queries) to rescale by alpha a
// pack at a time. O, m and l are fp32; each query row is owned by one thread.
#include "kernels/attention/fused/fused_attention.hpp"

#include "kernels/attention/fused/bf16_tiles.hpp"

namespace miniattn::kernels {

using namespace attention_detail;

namespace {

struct ForwardBf16QueryTile : Bf16CallShape {
  View4<const bf16> q, k;
  View4<const bf16> v_t;  // [B, KV, key tiles x Dh, kt_ld]: transpose_key_tiles
  View1<const index_t> q_pos, k_pos;
  View4<float> out_acc;
  View3<float> row_max, row_sum;
  AttentionMask mask;

  // One thread's buffers for a query tile.
  struct Tile {
    index_t b, h, kh, i0, rows;
    std::vector<bf16> q_pairs;  // [ceil(dh/2)][2 qb_ld]: Q^T in pairs of Dh
    std::vector<float> s_t;     // [kb rounded up to even][qb_ld]: scores, transposed
    std::vector<bf16> p_pairs;  // [ceil(kb/2)][2 qb_ld]: P^T in pairs of keys
    std::vector<float> o_t;     // [dh][qb_ld]: running output, transposed
    std::vector<float> m_run, l_run, alpha;  // [qb_ld]
    std::vector<float> tile_max;             // [qb_ld]: each query's largest score in the key tile
    std::vector<index_t> qpos;  // [qb_ld]: padding never masked
    std::vector<bf16> k_padded;  // odd Dh: the key tile's rows with a zero half-pair
    TileReach reach;             // the key tile's register tiles that the mask lets meet the queries
  };

  void operator()(const index_t tile_index) const {
    // The thread's buffers move in and out of a cache kept from one tile to the
    // next, as the backward's (fused_bf16_backward.cpp): allocated anew, the
    // scores of a 128 x 192 tile pair were mmap'ed in a run's heap and took
    // their page faults each time.
    static thread_local Tile cache;
    Tile t = std::move(cache);
    place(t, tile_index);
    stage(t);
    for (index_t kt = 0; kt < n_ktiles; ++kt) {
      const index_t j0 = kt * kb, cols = std::min(kb, nk - j0);
      bool masked = false;
      if (mask.hides_any() && !host_tiles_meet(mask, t.b, t.qpos.data(), t.rows, &k_pos(j0), cols, masked)) continue;
      t.reach.of_mask(mask, masked, t.b, &k_pos(j0), cols, t.qpos.data(), t.rows);
      scores(t, j0, cols, masked);
      online_softmax(t, j0, masked);
      accumulate_output(t, kt);
    }
    write_back(t);
    cache = std::move(t);
  }

  void place(Tile& t, index_t tile_index) const {
    const index_t qt = tile_index % n_qtiles, bh = tile_index / n_qtiles;
    t.b = bh / heads;
    t.h = bh % heads;
    t.kh = t.h / group;
    t.i0 = qt * qb;
    t.rows = std::min(qb, nq - t.i0);
    const auto n = [](index_t count) { return static_cast<std::size_t>(count); };
    t.q_pairs.resize(n((dh + 1) / 2 * 2 * qb_ld));
    t.s_t.resize(n(round_up(kb, 2) * qb_ld));  // the softmax reads keys in pairs
    t.p_pairs.resize(n((kb + 1) / 2 * 2 * qb_ld));
    t.o_t.resize(n(dh * qb_ld));
    t.m_run.resize(n(qb_ld));
    t.l_run.resize(n(qb_ld));
    t.alpha.resize(n(qb_ld));
    t.tile_max.resize(n(qb_ld));
    t.qpos.resize(n(qb_ld));
  }

  // Q^T in pairs, the running state (O transposed) and the positions.
  void stage(Tile& t) const {
    stage_width_pairs(&q(t.b, t.h, t.i0, 0), index_t(q.stride(2)), t.rows, dh, t.q_pairs.data(), 2 * qb_ld);
    for (index_t c = 0; c < qb_ld; ++c) {
      const bool real = c < t.rows;
      for (index_t d = 0; d < dh; ++d) t.o_t[d * qb_ld + c] = real ? out_acc(t.b, t.h, t.i0 + c, d) : 0.0f;
      t.m_run[c] = real ? row_max(t.b, t.h, t.i0 + c) : -compat::infinity<float>();
      t.l_run[c] = real ? row_sum(t.b, t.h, t.i0 + c) : 0.0f;
      t.qpos[c] = real ? q_pos(t.i0 + c) : kPaddingPosition;
    }
  }

  // S^T = scale K Q^T, and each query's largest score (t.tile_max) where no
  // key of the tile is hidden from it (else the softmax finds it, after the mask).
  void scores(Tile& t, index_t j0, index_t cols, bool masked) const {
    const WidthRows keys = width_rows(&k(t.b, t.kh, j0, 0), index_t(k.stride(2)), cols, dh, t.k_padded);
    float* const s_t = t.s_t.data();
    float* const tile_max = t.tile_max.data();
    const index_t ld = qb_ld;
    const FloatPack s = simd::pack_splat<FloatPack>(scale);
    const index_t width_pairs = (dh + 1) / 2;
    const auto reached = [&](index_t r0, index_t c0) {
      return t.reach.keys_hold(r0, c0) ? IndexRange{0, width_pairs} : IndexRange{};
    };
    const auto scale_and_find_max = [&](index_t r0, index_t nr, index_t c0, const Bf16Acc& acc) {
      for (int c = 0; c < kBf16Cols; c += kFloatLanes) {
        FloatPack mx = r0 == 0 ? simd::pack_splat<FloatPack>(-compat::infinity<float>())
                               : simd::pack_load<FloatPack>(tile_max + c0 + c);
        for (index_t r = 0; r < nr; ++r) {
          const FloatPack x = s * simd::pack_load<FloatPack>(&acc[r][c]);
          simd::pack_store(s_t + (r0 + r) * ld + c0 + c, x);
          mx = x > mx ? x : mx;
        }
        if (!masked) simd::pack_store(tile_max + c0 + c, mx);
      }
    };
    bf16_tile_product_within(path, cols, t.rows, reached, keys.rows, keys.ld, t.q_pairs.data(), 2 * qb_ld,
                             scale_and_find_max);
  }

  // Down each query's column of S^T, a register tile's columns of queries at
  // a time: the new maximum, alpha, l, and P^T = exp(S^T - m) as bf16 pairs
  // of keys (the sum l takes the fp32 values, as the fp32 kernel's). Two keys
  // of kPacks packs each: independent exponentials, whose chains of dependent
  // FMAs one pack at a time left waiting on each other's latency.
  void online_softmax(Tile& t, index_t j0, bool masked) const {
    constexpr int kPacks = kBf16Cols / kFloatLanes;
    const float neg_inf = -compat::infinity<float>();
    const index_t ld = qb_ld;
    float* const s_t = t.s_t.data();
    for (index_t c0 = 0; c0 < t.rows; c0 += kBf16Cols) {  // columns past the rows (to qb_ld) are never read back
      // Keys outside the reach are hidden from every query of the columns: m,
      // l and the output keep their values (alpha would be 1).
      const IndexRange keys = t.reach.keys(c0);
      if (keys.begin >= keys.end) continue;
      if (masked) hide_masked_keys(t, j0, keys, c0);
      FloatPack base[kPacks], a[kPacks], sum[kPacks];
      MINIATTN_UNROLL
      for (int p = 0; p < kPacks; ++p) {
        const index_t c = c0 + p * kFloatLanes;
        FloatPack mx = simd::pack_splat<FloatPack>(neg_inf);
        if (masked) {
          for (index_t j = keys.begin; j < keys.end; ++j) {
            const FloatPack x = simd::pack_load<FloatPack>(s_t + j * ld + c);
            mx = x > mx ? x : mx;
          }
        } else {
          mx = simd::pack_load<FloatPack>(&t.tile_max[c]);
        }
        // A query that has seen no unmasked key keeps m = -inf, l = 0, o = 0 (fused_forward.cpp).
        const FloatPack m_old = simd::pack_load<FloatPack>(&t.m_run[c]);
        const FloatPack m_new = mx > m_old ? mx : m_old;
        simd::pack_store(&t.m_run[c], m_new);
        base[p] = m_new == simd::pack_splat<FloatPack>(neg_inf) ? simd::pack_splat<FloatPack>(0.0f) : m_new;
        a[p] = simd::kernel_exp<float>(m_old - base[p]);
        simd::pack_store(&t.alpha[c], a[p]);
        sum[p] = simd::pack_splat<FloatPack>(0.0f);
      }
      for (index_t j = keys.begin; j < keys.end; j += 2) {  // keys.begin is even
        const bool odd_key = j + 1 < keys.end;  // else an odd tile's zero half-pair
        FloatPack e[2][kPacks];
        MINIATTN_UNROLL
        for (int h = 0; h < 2; ++h)
          MINIATTN_UNROLL
          for (int p = 0; p < kPacks; ++p)  // row j + 1 past cols: the buffer's stale scores, finite, zeroed below
            e[h][p] = probability_exp(simd::pack_load<FloatPack>(s_t + (j + h) * ld + c0 + p * kFloatLanes) -
                                      base[p]);
        MINIATTN_UNROLL
        for (int p = 0; p < kPacks; ++p) {
          if (!odd_key) e[1][p] = simd::pack_splat<FloatPack>(0.0f);
          sum[p] += e[0][p];
          sum[p] += e[1][p];
          store_bf16_pairs(path, t.p_pairs.data() + j * ld, c0 + p * kFloatLanes, e[0][p], e[1][p]);
        }
      }
      MINIATTN_UNROLL
      for (int p = 0; p < kPacks; ++p) {
        float* const l = &t.l_run[c0 + p * kFloatLanes];
        simd::pack_store(l, FloatPack(simd::pack_load<FloatPack>(l) * a[p] + sum[p]));
      }
    }
  }

  // Hidden keys' scores set to -inf (only tiles on a mask's edge), for the
  // query columns c0 .. c0 + kBf16Cols - 1 and the keys of their reach.
  void hide_masked_keys(Tile& t, index_t j0, IndexRange keys, index_t c0) const {
    for (index_t j = keys.begin; j < keys.end; ++j) {
      const index_t key = k_pos(j0 + j);
      for (index_t c = c0; c < c0 + kBf16Cols; c += kFloatLanes)
        hide_masked<kFloatLanes>(
            mask, t.b, t.s_t.data() + j * qb_ld + c, -compat::infinity<float>(), [&](int w) { return t.qpos[c + w]; },
            [&](int) { return key; });
    }
  }

  // O^T = O^T alpha + V^T P^T.
  void accumulate_output(Tile& t, index_t kt) const {
    const index_t ld = qb_ld;
    float* const o_t = t.o_t.data();
    const float* const alpha = t.alpha.data();
    const auto rescale_and_add = [&](index_t r0, index_t nr, index_t c0, const Bf16Acc& acc) {
      for (index_t r = 0; r < nr; ++r)
        for (int c = 0; c < kBf16Cols; c += kFloatLanes) {
          float* const o = o_t + (r0 + r) * ld + c0 + c;
          simd::pack_store(o, FloatPack(simd::pack_load<FloatPack>(o) * simd::pack_load<FloatPack>(alpha + c0 + c) +
                                        simd::pack_load<FloatPack>(&acc[r][c])));
        }
    };
    const auto reached = [&](index_t, index_t c0) { return t.reach.key_pairs(c0); };
    bf16_tile_product_within(path, dh, t.rows, reached, &v_t(t.b, t.kh, kt * dh, 0), index_t(v_t.stride(2)),
                             t.p_pairs.data(), 2 * qb_ld, rescale_and_add, TileOrder::columns_outer);
  }

  void write_back(const Tile& t) const {
    for (index_t c = 0; c < t.rows; ++c) {
      for (index_t d = 0; d < dh; ++d) out_acc(t.b, t.h, t.i0 + c, d) = t.o_t[d * qb_ld + c];
      row_max(t.b, t.h, t.i0 + c) = t.m_run[c];
      row_sum(t.b, t.h, t.i0 + c) = t.l_run[c];
    }
  }
};

}  // namespace

void fused_bf16_forward_accumulate(const View4<const bf16>& q, const View4<const bf16>& k,
                                   const View4<const bf16>& v, const AttentionScope& scope,
                                   const View4<float>& out_acc, const View3<float>& row_max,
                                   const View3<float>& row_sum, const AttentionWorkspace<bf16>& workspace) {
  ForwardBf16QueryTile tile{{q, k, scope.blocking}, q, k, workspace.v_t, scope.q_pos, scope.k_pos, out_acc, row_max,
                            row_sum, scope.mask};
  transpose_key_tiles_into(v, tile.kb, tile.n_ktiles, workspace.v_t);
  Kokkos::parallel_for("miniattn::attention_forward_accumulate_bf16",
                       HostPolicy(0, index_t(q.extent(0)) * tile.heads * tile.n_qtiles), tile);
}

}  // namespace miniattn::kernels
