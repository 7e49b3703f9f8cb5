// Blockwise attention, backward pass. See attention.hpp for the contract and
// attention_tiles.hpp for the team and tile machinery.
//
// One team per (query tile, key tile) pair, FlashAttention-2's five products,
// with K^T and V^T transposed once per call (TransposedKeys):
//   P = exp(scale Q K^T - lse), dS = scale P (dO V^T - delta),
//   dq += dS K,  dv += P^T dO,  dk += dS^T Q.
// No atomics: the pairs run in waves. In wave w the team of key tile kt takes
// query tile (kt + w) mod waves, so within a wave no two teams share a query
// tile (dq rows) or a key tile (dk, dv rows), and every row's sum runs in wave
// order - fixed by the tiling alone, the same bits on any number of threads.
// A wave is one kernel launch; waves = max(query tiles, key tiles).
#include <limits>

#include "kernels/attention_tiles.hpp"

namespace miniattn::kernels {

using namespace attention_detail;

namespace {

// One (query tile, key tile) pair's work in one wave (the functor of a launch).
template <class T>
struct BackwardTilePair {
  using V = typename Pack<T>::type;
  static constexpr int R = Tiling<T>::R, P = Tiling<T>::P, W = Tiling<T>::W, lanes = Tiling<T>::lanes;

  View4<const T> q, k, v, dout;
  View3<const T> lse, delta;
  View1<const index_t> q_pos, k_pos;
  View4<T> dq, dk, dv;
  View4<const T> k_t, v_t;  // [B, H, Dh, >= nk]
  bool causal;
  index_t heads, nq, nk, dh, qb, kb, kb_ld, n_qtiles, n_ktiles, waves, wave;
  int level;
  T scale;

  struct Pair {
    index_t b, h, i0, rows, j0, cols;
    bool masked;
    T* p_tile;       // [qb][kb_ld]: probabilities
    T* ds_tile;      // [qb][kb_ld]: scale * dS
    index_t* kpos;   // [kb_ld]: key positions, padding always masked
  };

  std::size_t scratch_bytes() const {
    return 2 * scratch_bytes_for<T>(qb * kb_ld) + scratch_bytes_for<index_t>(kb_ld);
  }

  KOKKOS_INLINE_FUNCTION void operator()(const TeamMember& team) const {
    const index_t kt = team.league_rank() % n_ktiles, bh = team.league_rank() / n_ktiles;
    const index_t qt = (kt + wave) % waves;
    if (qt >= n_qtiles) return;
    Pair t;
    t.b = bh / heads;
    t.h = bh % heads;
    t.i0 = qt * qb;
    t.rows = (nq - t.i0) < qb ? (nq - t.i0) : qb;
    t.j0 = kt * kb;
    t.cols = (nk - t.j0) < kb ? (nk - t.j0) : kb;
    t.masked = false;
    if (causal && !causal_tiles_meet(team, q_pos.data() + t.i0, t.rows, k_pos.data() + t.j0, t.cols, t.masked))
      return;  // every key of the pair is in the future of every query
    t.p_tile = ScratchView<T>(team.team_scratch(level), qb * kb_ld).data();
    t.ds_tile = ScratchView<T>(team.team_scratch(level), qb * kb_ld).data();
    t.kpos = ScratchView<index_t>(team.team_scratch(level), kb_ld).data();
    stage(team, t);
    team.team_barrier();
    probabilities(team, t);
    team.team_barrier();
    score_gradients(team, t);
    team.team_barrier();
    add_gradients(team, t);
  }

  // The key positions into scratch.
  KOKKOS_INLINE_FUNCTION void stage(const TeamMember& team, const Pair& t) const {
    const index_t always_masked = std::numeric_limits<index_t>::max();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kb_ld), [&](const index_t j) {
      Kokkos::single(Kokkos::PerThread(team), [&]() { t.kpos[j] = j < t.cols ? k_pos(t.j0 + j) : always_masked; });
    });
  }

  // P = exp(scale q k^T - lse), 0 where masked and in rows that saw no key.
  // Columns past `cols` (up to kb_ld) hold values no product reads.
  KOKKOS_INLINE_FUNCTION void probabilities(const TeamMember& team, const Pair& t) const {
    const T neg_inf = -std::numeric_limits<T>::infinity(), pos_inf = std::numeric_limits<T>::infinity();
    const index_t* const qp = q_pos.data() + t.i0;
    team_tile_product<T>(
        team, t.rows, t.cols, dh, &q(t.b, t.h, t.i0, 0), index_t(q.stride(2)), index_t(1), &k_t(t.b, t.h, 0, t.j0),
        index_t(k_t.stride(2)),
        [&](const index_t r0, const index_t nr, const index_t c0, const index_t, const V(&acc)[R][P]) {
          const V vscale = pack_splat<V>(scale);
          MINIATTN_UNROLL
          for (int r = 0; r < R; ++r) {
            if (r >= nr) break;
            const T lse_i = lse(t.b, t.h, t.i0 + r0 + r);
            const V shift = pack_splat<V>(lse_i == neg_inf ? pos_inf : lse_i);  // exp(x - inf) = 0
            T* const p_row = t.p_tile + (r0 + r) * kb_ld + c0;
            MINIATTN_UNROLL
            for (int p = 0; p < P; ++p) pack_store(p_row + p * lanes, kernel_exp<T>(vscale * acc[r][p] - shift));
            if (t.masked) {  // keys in the query's future (scalar: only tiles on the diagonal)
              for (int w = 0; w < W; ++w) {
                if (t.kpos[c0 + w] > qp[r0 + r]) p_row[w] = T(0);
              }
            }
          }
        });
  }

  // scale dS = scale P (dout v^T - delta).
  KOKKOS_INLINE_FUNCTION void score_gradients(const TeamMember& team, const Pair& t) const {
    team_tile_product<T>(
        team, t.rows, t.cols, dh, &dout(t.b, t.h, t.i0, 0), index_t(dout.stride(2)), index_t(1),
        &v_t(t.b, t.h, 0, t.j0), index_t(v_t.stride(2)),
        [&](const index_t r0, const index_t nr, const index_t c0, const index_t, const V(&acc)[R][P]) {
          const V vscale = pack_splat<V>(scale);
          MINIATTN_UNROLL
          for (int r = 0; r < R; ++r) {
            if (r >= nr) break;
            const V delta_i = pack_splat<V>(delta(t.b, t.h, t.i0 + r0 + r));
            const T* const p_row = t.p_tile + (r0 + r) * kb_ld + c0;
            T* const ds_row = t.ds_tile + (r0 + r) * kb_ld + c0;
            MINIATTN_UNROLL
            for (int p = 0; p < P; ++p) {
              const V pv = pack_load<V>(p_row + p * lanes);
              pack_store(ds_row + p * lanes, V(vscale * pv * (acc[r][p] - delta_i)));
            }
          }
        });
  }

  // dq += scale dS k, dv += P^T dout, dk += scale dS^T q. This team is the only
  // one of its wave on these dq rows and these dk, dv rows.
  KOKKOS_INLINE_FUNCTION void add_gradients(const TeamMember& team, const Pair& t) const {
    const index_t q_ld = q.stride(2), g_ld = dout.stride(2);
    const T* const q_tile = &q(t.b, t.h, t.i0, 0);
    const T* const g_tile = &dout(t.b, t.h, t.i0, 0);
    T* const dq_tile = &dq(t.b, t.h, t.i0, 0);
    T* const dk_tile = &dk(t.b, t.h, t.j0, 0);
    T* const dv_tile = &dv(t.b, t.h, t.j0, 0);
    const index_t dq_ld = dq.stride(2), dk_ld = dk.stride(2), dv_ld = dv.stride(2);
    team_tile_product<T>(team, t.rows, dh, t.cols, t.ds_tile, kb_ld, index_t(1), &k(t.b, t.h, t.j0, 0),
                         index_t(k.stride(2)),
                         [&](const index_t r0, const index_t nr, const index_t c0, const index_t nc,
                             const V(&acc)[R][P]) { add_register_tile<T, R, P>(dq_tile, dq_ld, r0, nr, c0, nc, acc); });
    team_tile_product<T>(team, t.cols, dh, t.rows, t.p_tile, index_t(1), kb_ld, g_tile, g_ld,
                         [&](const index_t r0, const index_t nr, const index_t c0, const index_t nc,
                             const V(&acc)[R][P]) { add_register_tile<T, R, P>(dv_tile, dv_ld, r0, nr, c0, nc, acc); });
    team_tile_product<T>(team, t.cols, dh, t.rows, t.ds_tile, index_t(1), kb_ld, q_tile, q_ld,
                         [&](const index_t r0, const index_t nr, const index_t c0, const index_t nc,
                             const V(&acc)[R][P]) { add_register_tile<T, R, P>(dk_tile, dk_ld, r0, nr, c0, nc, acc); });
  }
};

// x [B, H, n, Dh] -> x_t [B, H, Dh, >= n].
template <class T>
void transpose_rows(const View4<const T>& x, const View4<T>& x_t) {
  const index_t heads = x.extent(1), n = x.extent(2), dh = x.extent(3);
  Kokkos::parallel_for(
      "miniattn::attention_transpose_keys", RowPolicy(0, index_t(x.extent(0)) * heads * dh),
      KOKKOS_LAMBDA(const index_t row) {
        const index_t d = row % dh, bh = row / dh;
        const index_t b = bh / heads, h = bh % heads;
        for (index_t j = 0; j < n; ++j) x_t(b, h, d, j) = x(b, h, j, d);
      });
}

}  // namespace

// Rows of n_k + 16 (rounded to 16) elements: a power-of-two row length would
// put a tile's rows in the same cache sets.
template <class T>
TransposedKeys<T>::TransposedKeys(index_t batch, index_t heads, index_t head_dim, index_t keys)
    : k_t("attention.k_transposed", batch, heads, head_dim, transposed_keys_row(keys)),
      v_t("attention.v_transposed", batch, heads, head_dim, transposed_keys_row(keys)) {}

template <class T>
void attention_backward_delta(const View4<const T>& out, const View4<const T>& dout, const View3<T>& delta) {
  const index_t batch = out.extent(0), heads = out.extent(1), n = out.extent(2), dh = out.extent(3);
  require(same_extents4(dout, batch, heads, n, dh), "dout must have out's shape");
  require(same_extents3(delta, batch, heads, n), "delta must be [B, H, n]");
  Kokkos::parallel_for(
      "miniattn::attention_backward_delta", RowPolicy(0, batch * heads * n), KOKKOS_LAMBDA(const index_t row) {
        const index_t i = row % n;
        const index_t bh = row / n;
        const index_t b = bh / heads, h = bh % heads;
        const T* const o_row = &out(b, h, i, 0);
        const T* const g_row = &dout(b, h, i, 0);
        T sum = T(0);
        for (index_t d = 0; d < dh; ++d) sum += o_row[d] * g_row[d];
        delta(b, h, i) = sum;
      });
}

template <class T>
void attention_backward_accumulate(const View4<const T>& q, const View4<const T>& k, const View4<const T>& v,
                                   const View4<const T>& dout, const View3<const T>& lse, const View3<const T>& delta,
                                   const View1<const index_t>& q_pos, const View1<const index_t>& k_pos, bool causal,
                                   const AttentionBlocking& blocking, const View4<T>& dq, const View4<T>& dk,
                                   const View4<T>& dv, const TransposedKeys<T>& workspace) {
  const index_t batch = q.extent(0), heads = q.extent(1), nq = q.extent(2), dh = q.extent(3);
  const index_t nk = k.extent(2);
  require(same_extents4(k, batch, heads, nk, dh), "k must be [B, H, n_k, Dh] with q's B, H, Dh");
  require(same_extents4(v, batch, heads, nk, dh), "v must have k's shape");
  require(same_extents4(dout, batch, heads, nq, dh) && same_extents4(dq, batch, heads, nq, dh),
          "dout and dq must have q's shape");
  require(same_extents4(dk, batch, heads, nk, dh) && same_extents4(dv, batch, heads, nk, dh),
          "dk and dv must have k's shape");
  require(same_extents3(lse, batch, heads, nq) && same_extents3(delta, batch, heads, nq),
          "lse and delta must be [B, H, n_q]");
  require(static_cast<index_t>(q_pos.extent(0)) == nq && static_cast<index_t>(k_pos.extent(0)) == nk,
          "q_pos / k_pos must have one entry per query / key row");
  require(same_extents3(workspace.k_t, batch, heads, dh) && same_extents3(workspace.v_t, batch, heads, dh) &&
              static_cast<index_t>(workspace.k_t.extent(3)) >= nk && static_cast<index_t>(workspace.v_t.extent(3)) >= nk,
          "the workspace must be at least [B, H, Dh, n_k]");
  if (batch == 0 || heads == 0 || nq == 0 || nk == 0 || dh == 0) return;

  transpose_rows<T>(k, workspace.k_t);
  transpose_rows<T>(v, workspace.v_t);
  BackwardTilePair<T> pair{q, k, v, dout, lse, delta, q_pos, k_pos, dq, dk, dv, workspace.k_t, workspace.v_t, causal,
                           heads, nq, nk, dh, 0, 0, 0, 0, 0, 0, 0, 0, T(1) / compat::sqrt(static_cast<T>(dh))};
  pair.qb = clamp_block(blocking.query_block, nq);
  pair.kb = clamp_block(blocking.key_block, nk);
  pair.kb_ld = round_up(pair.kb, Tiling<T>::W);  // columns of K^T, V^T, P and dS: whole register tiles
  pair.n_qtiles = ceil_div(nq, pair.qb);
  pair.n_ktiles = ceil_div(nk, pair.kb);
  pair.waves = std::max(pair.n_qtiles, pair.n_ktiles);
  const TeamPolicy policy = make_team_policy(batch * heads * pair.n_ktiles, pair.scratch_bytes(), pair.level);
  for (pair.wave = 0; pair.wave < pair.waves; ++pair.wave)
    Kokkos::parallel_for("miniattn::attention_backward_accumulate", policy, pair);
}

#define MINIATTN_INSTANTIATE_ATTENTION_BACKWARD(T)                                                                  \
  template void attention_backward_delta<T>(const View4<const T>&, const View4<const T>&, const View3<T>&);         \
  template void attention_backward_accumulate<T>(                                                                   \
      const View4<const T>&, const View4<const T>&, const View4<const T>&, const View4<const T>&,                   \
      const View3<const T>&, const View3<const T>&, const View1<const index_t>&, const View1<const index_t>&, bool, \
      const AttentionBlocking&, const View4<T>&, const View4<T>&, const View4<T>&, const TransposedKeys<T>&); \
  template struct TransposedKeys<T>;
MINIATTN_INSTANTIATE_ATTENTION_BACKWARD(float)
MINIATTN_INSTANTIATE_ATTENTION_BACKWARD(double)
#undef MINIATTN_INSTANTIATE_ATTENTION_BACKWARD

}  // namespace miniattn::kernels
