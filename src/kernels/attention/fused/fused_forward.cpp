// Blockwise attention, forward pass: the fused kernel (fused_attention.hpp).
// See kernels/attention/attention.hpp for the contract and fused_tiles.hpp
// for the team and tile machinery.
//
// One team per query tile, looping over key tiles. Q^T is staged once per
// query tile, so no key tile is ever copied or transposed:
//   S^T = scale K Q^T (masked to -inf)          [keys x queries]
//   m_new = max(m, column max of S^T), P^T = exp(S^T - m_new),
//   l = l alpha + column sum P^T, alpha = exp(m - m_new),
//   O = O alpha + P V                           (O, m, l live in scratch)
// Each query row is owned by one team: no atomics, and the order of every sum
// is fixed by the tiling alone.
//
// On the host, exp is pack_exp (a branch-free polynomial on whole SIMD
// registers; libm's expf/exp are scalar calls). The products reach the FMA
// units when the target has them and the compiler may contract a * b + c
// (cmake/MiniattnArch.cmake: -march=native -ffp-contract=fast by default).
#include "kernels/attention/fused/fused_attention.hpp"

#include "kernels/attention/fused/fused_tiles.hpp"

namespace miniattn::kernels {

using namespace attention_detail;

namespace {

// One query tile's work (the functor of the forward kernel).
template <class T>
struct ForwardQueryTile {
  using V = typename Pack<T>::type;
  static constexpr int R = Tiling<T>::R, P = Tiling<T>::P, W = Tiling<T>::W, lanes = Tiling<T>::lanes;

  View4<const T> q, k, v;
  View1<const index_t> q_pos, k_pos;
  View4<T> out_acc;
  View3<T> row_max, row_sum;
  AttentionMask mask;
  index_t heads, group, nq, nk, dh, qb, kb, qb_ld, dh_ld, n_qtiles, n_ktiles;  // group: query heads per K/V head
  int level;
  T scale;

  // This team's scratch and place.
  struct Tile {
    index_t b, h, kh, i0, rows;  // kh: the K/V head of query head h
    T* q_t;          // [dh][qb_ld]: q tile transposed, zero columns past `rows`
    T* s_t;          // [kb][qb_ld]: scores, then probabilities, transposed
    T* o_tile;       // [qb][dh_ld]: running output (unnormalised)
    T* m_run;        // [qb_ld]: running row maximum
    T* l_run;        // [qb_ld]: running row sum
    T* alpha;        // [qb_ld]: rescale factor exp(m_old - m_new)
    index_t* qpos;   // [qb_ld]: query positions, padding never masked
  };

  std::size_t scratch_bytes() const { return forward_scratch_bytes<T>(qb, kb, dh); }

  KOKKOS_INLINE_FUNCTION void operator()(const TeamMember& team) const {
    const index_t qt = team.league_rank() % n_qtiles, bh = team.league_rank() / n_qtiles;
    Tile t;
    t.b = bh / heads;
    t.h = bh % heads;
    t.kh = t.h / group;
    t.i0 = qt * qb;
    t.rows = (nq - t.i0) < qb ? (nq - t.i0) : qb;
    t.q_t = ScratchView<T>(team.team_scratch(level), dh * qb_ld).data();
    t.s_t = ScratchView<T>(team.team_scratch(level), kb * qb_ld).data();
    t.o_tile = ScratchView<T>(team.team_scratch(level), qb * dh_ld).data();
    t.m_run = ScratchView<T>(team.team_scratch(level), qb_ld).data();
    t.l_run = ScratchView<T>(team.team_scratch(level), qb_ld).data();
    t.alpha = ScratchView<T>(team.team_scratch(level), qb_ld).data();
    t.qpos = ScratchView<index_t>(team.team_scratch(level), qb_ld).data();
    stage(team, t);
    const index_t* const qp = q_pos.data() + t.i0;
    for (index_t kt = 0; kt < n_ktiles; ++kt) {
      const index_t j0 = kt * kb;
      const index_t cols = (nk - j0) < kb ? (nk - j0) : kb;
      bool masked = false;
      if (mask.hides_any() && !tiles_meet(team, mask, t.b, qp, t.rows, k_pos.data() + j0, cols, masked)) continue;
      team.team_barrier();  // staging is done; the previous tile is done with s_t and alpha
      scores(team, t, j0, cols);
      team.team_barrier();
      online_softmax(team, t, j0, cols, masked);
      team.team_barrier();
      accumulate_output(team, t, j0, cols);
    }
    team.team_barrier();
    write_back(team, t);
  }

  // Q^T, the running state and the positions into scratch.
  KOKKOS_FORCEINLINE_FUNCTION void stage(const TeamMember& team, const Tile& t) const {
    const T neg_inf = -compat::infinity<T>();
    stage_transposed(team, &q(t.b, t.h, t.i0, 0), index_t(q.stride(2)), t.rows, dh, t.q_t, qb_ld);
    const T* const o_out = &out_acc(t.b, t.h, t.i0, 0);
    const index_t o_ld = out_acc.stride(2);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, t.rows), [&](const index_t r) {
      Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, dh_ld), [&](const index_t d) {
        t.o_tile[r * dh_ld + d] = d < dh ? o_out[r * o_ld + d] : T(0);
      });
    });
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, qb_ld), [&](const index_t r) {
      Kokkos::single(Kokkos::PerThread(team), [&]() {
        t.m_run[r] = r < t.rows ? row_max(t.b, t.h, t.i0 + r) : neg_inf;
        t.l_run[r] = r < t.rows ? row_sum(t.b, t.h, t.i0 + r) : T(0);
        t.qpos[r] = r < t.rows ? q_pos(t.i0 + r) : kPaddingPosition;
      });
    });
  }

  // S^T = scale K Q^T: key rows of K straight from memory against the staged Q^T.
  KOKKOS_FORCEINLINE_FUNCTION void scores(const TeamMember& team, const Tile& t, index_t j0, index_t cols) const {
    const index_t k_ld = k.stride(2), qb_ld = this->qb_ld;
    T* const s_t = t.s_t;
    const T scale = this->scale;
    team_tile_product<T>(team, cols, qb_ld, dh, &k(t.b, t.kh, j0, 0), k_ld, index_t(1), t.q_t, qb_ld,
                         [&](const index_t r0, const index_t nr, const index_t c0, const index_t, const V(&acc)[R][P]) {
                           const V s = pack_splat<V>(scale);
                           MINIATTN_UNROLL
                           for (int r = 0; r < R; ++r) {
                             if (r >= nr) break;
                             T* const dst = s_t + (r0 + r) * qb_ld + c0;
                             MINIATTN_UNROLL
                             for (int p = 0; p < P; ++p) pack_store(dst + p * lanes, V(s * acc[r][p]));
                           }
                         });
  }

  // Online softmax down each query's column of S^T, W queries per lane:
  // S^T becomes P^T, and m, l, alpha are updated.
  KOKKOS_FORCEINLINE_FUNCTION void online_softmax(const TeamMember& team, const Tile& t, index_t j0, index_t cols,
                                             bool masked) const {
    const T neg_inf = -compat::infinity<T>();
    const index_t* const kp = k_pos.data() + j0;
    const index_t qb_ld = this->qb_ld;
    T* const s_t = t.s_t;
    T* const m_run = t.m_run;
    T* const l_run = t.l_run;
    T* const alpha = t.alpha;
    const index_t* const qpos = t.qpos;
    team_lane_chunks<T>(team, t.rows, [&](const index_t c0) {
      if (masked) {  // hidden keys get -inf (only tiles on a mask's edge)
        for (index_t j = 0; j < cols; ++j) {
          const index_t key = kp[j];
          hide_masked<W>(
              mask, t.b, s_t + j * qb_ld + c0, neg_inf, [&](int w) { return qpos[c0 + w]; },
              [&](int) { return key; });
        }
      }
      V mx[P];
      MINIATTN_UNROLL
      for (int p = 0; p < P; ++p) mx[p] = pack_splat<V>(neg_inf);
      for (index_t j = 0; j < cols; ++j) {
        const T* const s = s_t + j * qb_ld + c0;
        MINIATTN_UNROLL
        for (int p = 0; p < P; ++p) {
          const V x = pack_load<V>(s + p * lanes);
          mx[p] = x > mx[p] ? x : mx[p];
        }
      }
      // A query that has seen no unmasked key keeps m = -inf, l = 0, o = 0:
      // subtracting 0 instead of -inf keeps exp(-inf - 0) = 0 and avoids NaN.
      V base[P], sum[P];
      MINIATTN_UNROLL
      for (int p = 0; p < P; ++p) {
        const V m_old = pack_load<V>(m_run + c0 + p * lanes);
        const V m_new = mx[p] > m_old ? mx[p] : m_old;
        pack_store(m_run + c0 + p * lanes, m_new);
        base[p] = m_new == pack_splat<V>(neg_inf) ? pack_splat<V>(T(0)) : m_new;
        pack_store(alpha + c0 + p * lanes, kernel_exp<T>(m_old - base[p]));  // 0 when m_old = -inf
        sum[p] = pack_splat<V>(T(0));
      }
      for (index_t j = 0; j < cols; ++j) {
        T* const s = s_t + j * qb_ld + c0;
        MINIATTN_UNROLL
        for (int p = 0; p < P; ++p) {
          const V e = kernel_exp<T>(pack_load<V>(s + p * lanes) - base[p]);  // exp(-inf) = 0 when masked
          pack_store(s + p * lanes, e);
          sum[p] += e;
        }
      }
      MINIATTN_UNROLL
      for (int p = 0; p < P; ++p) {
        const V a = pack_load<V>(alpha + c0 + p * lanes);
        pack_store(l_run + c0 + p * lanes, V(pack_load<V>(l_run + c0 + p * lanes) * a + sum[p]));
      }
    });
  }

  // O = O alpha + P V.
  KOKKOS_FORCEINLINE_FUNCTION void accumulate_output(const TeamMember& team, const Tile& t, index_t j0,
                                                index_t cols) const {
    const index_t v_ld = v.stride(2), dh_ld = this->dh_ld;
    T* const o_tile = t.o_tile;
    const T* const alpha = t.alpha;
    team_tile_product<T>(team, t.rows, dh, cols, t.s_t, index_t(1), qb_ld, &v(t.b, t.kh, j0, 0), v_ld,
                         [&](const index_t r0, const index_t nr, const index_t c0, const index_t, const V(&acc)[R][P]) {
                           MINIATTN_UNROLL
                           for (int r = 0; r < R; ++r) {
                             if (r >= nr) break;
                             T* const o_row = o_tile + (r0 + r) * dh_ld + c0;
                             const V a = pack_splat<V>(alpha[r0 + r]);
                             MINIATTN_UNROLL
                             for (int p = 0; p < P; ++p) {
                               pack_store(o_row + p * lanes, V(pack_load<V>(o_row + p * lanes) * a + acc[r][p]));
                             }
                           }
                         });
  }

  // Hands the running state back.
  KOKKOS_FORCEINLINE_FUNCTION void write_back(const TeamMember& team, const Tile& t) const {
    T* const o_out = &out_acc(t.b, t.h, t.i0, 0);
    const index_t o_ld = out_acc.stride(2);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, t.rows), [&](const index_t r) {
      Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, dh),
                           [&](const index_t d) { o_out[r * o_ld + d] = t.o_tile[r * dh_ld + d]; });
      Kokkos::single(Kokkos::PerThread(team), [&]() {
        row_max(t.b, t.h, t.i0 + r) = t.m_run[r];
        row_sum(t.b, t.h, t.i0 + r) = t.l_run[r];
      });
    });
  }
};

}  // namespace

// The fused kernel (fp32 and fp64: it stages tiles of its input type).
template <class T>
void fused_forward_accumulate(const View4<const T>& q, const View4<const T>& k, const View4<const T>& v,
                              const AttentionScope& scope, const View4<T>& out_acc, const View3<T>& row_max,
                              const View3<T>& row_sum) {
  const index_t batch = q.extent(0), heads = q.extent(1), nq = q.extent(2), dh = q.extent(3);
  const index_t kv_heads = k.extent(1), nk = k.extent(2);
  constexpr int W = Tiling<T>::W;
  const T scale = T(1) / compat::sqrt(static_cast<T>(dh));
  ForwardQueryTile<T> tile{q,  k,  v,  scope.q_pos, scope.k_pos, out_acc, row_max, row_sum, scope.mask, heads,
                           heads / kv_heads, nq, nk, dh, 0, 0, 0, 0, 0, 0, 0, scale};
  tile.qb = clamp_block(scope.blocking.query_block, nq);
  tile.kb = clamp_block(scope.blocking.key_block, nk);
  tile.qb_ld = round_up(tile.qb, W);  // columns of Q^T and S^T: whole register tiles
  tile.dh_ld = round_up(dh, W);       // columns of the O tile
  tile.n_qtiles = ceil_div(nq, tile.qb);
  tile.n_ktiles = ceil_div(nk, tile.kb);
  const TeamPolicy policy = make_team_policy(batch * heads * tile.n_qtiles, tile.scratch_bytes(), tile.level);
  Kokkos::parallel_for("miniattn::attention_forward_accumulate", policy, tile);
}

template void fused_forward_accumulate<float>(const View4<const float>&, const View4<const float>&,
                                              const View4<const float>&, const AttentionScope&, const View4<float>&,
                                              const View3<float>&, const View3<float>&);
template void fused_forward_accumulate<double>(const View4<const double>&, const View4<const double>&,
                                               const View4<const double>&, const AttentionScope&, const View4<double>&,
                                               const View3<double>&, const View3<double>&);

}  // namespace miniattn::kernels
