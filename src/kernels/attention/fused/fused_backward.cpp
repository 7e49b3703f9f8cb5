// Blockwise attention, backward pass: the fused kernel (fused_attention.hpp).
// See kernels/attention/attention.hpp for the contract and fused_tiles.hpp
// for the team and tile machinery.
//
// FlashAttention-2's five products per (query tile, key tile) pair, with K^T
// and V^T transposed once per call, tile by tile (TransposedKeyTiles):
//   P = exp(scale Q K^T - lse), dS = scale P (dO V^T - delta),
//   dq += dS K,  dv += P^T dO,  dk += dS^T Q.
// With grouped K/V heads (GQA) a team owns one K/V head's key block and loops
// over the group's query heads, so dk, dv sum over them in scratch.
// No atomics; every row's sum runs in an order fixed by the tiling alone, the
// same bits on any number of threads. Two schedules
// (AttentionBlocking::one_launch_backward):
//  * waves (host): tiles are grouped in blocks of S = 8 consecutive tiles
//    (a block's tiles stay in L2), and block pairs run in waves: in wave w
//    the team of key block kb takes query block (kb + w) mod waves. Within a
//    wave no two teams share a query tile (dq rows) or a key tile (dk, dv
//    rows); a team stages a key tile once per block and keeps its dk, dv in
//    scratch over the block's query tiles. A wave is one kernel launch;
//    waves = max(query blocks, key blocks). Each product runs once.
//  * one launch (GPU): a team per key tile walks every query tile for its
//    dk, dv (four products a pair), and a team per query tile walks every key
//    tile for its dq (three: P and dS again), all in one launch with every
//    team busy, instead of a launch per wave in which most teams of a causal
//    mask return at once. Two more products per pair for n-fold fewer launches.
#include "kernels/attention/fused/fused_attention.hpp"

#include "kernels/attention/fused/fused_tiles.hpp"

namespace miniattn::kernels {

using namespace attention_detail;

namespace {

// Which gradients a team adds: all three (a wave's block pair), or only its
// key tile's dk, dv or only its query tile's dq (the one-launch schedule).
enum class Adds { all, keys, queries };

// The functor of a launch: a wave's block pairs, or the one launch's key-tile
// and query-tile teams.
template <class T>
struct BackwardTilePair {
  using V = typename Pack<T>::type;
  static constexpr int R = Tiling<T>::R, P = Tiling<T>::P, W = Tiling<T>::W, lanes = Tiling<T>::lanes;

  View4<const T> q, k, v, dout;
  View3<const T> lse, delta;
  View1<const index_t> q_pos, k_pos;
  View4<T> dq, dk, dv;
  View4<const T> k_t, v_t;  // [B, KV, key tiles x Dh, >= kb]: transposed_key_tiles
  AttentionMask mask;
  // Set after the Views (attention_backward_accumulate). group: query heads per K/V head.
  index_t batch = 0, kv_heads = 0, group = 0, nq = 0, nk = 0, dh = 0, qb = 0, kb = 0, kb_ld = 0, dh_ld = 0,
          n_qtiles = 0, n_ktiles = 0, waves = 0, wave = 0;
  bool one_launch = false;
  int level = 0;
  T scale = T(0);

  struct Pair {
    index_t b, h, kh, i0, rows, j0, cols;  // h: the query head, kh: its K/V head
    bool masked;
    const T* k_t;    // [dh][kt_ld]: the pair's K^T tile, in the workspace or (kStageKeyTiles) scratch
    const T* v_t;    // [dh][kt_ld]: the pair's V^T tile
    index_t kt_ld;
    T* k_stage;      // kStageKeyTiles: [dh][kb_ld], the scratch copies
    T* v_stage;
    T* p_tile;       // [qb][kb_ld]: probabilities
    T* ds_tile;      // [qb][kb_ld]: scale * dS
    T* dk_acc;       // [kb][dh_ld]: this key tile's dk over the block's query tiles
    T* dv_acc;       // [kb][dh_ld]
    index_t* kpos;   // [kb_ld]: key positions, padding always masked
  };

  std::size_t scratch_bytes() const { return backward_scratch_bytes<T>(qb, kb, dh); }

  KOKKOS_INLINE_FUNCTION void operator()(const TeamMember& team) const {
    Pair t = carve(team);
    const index_t rank = team.league_rank();
    if (!one_launch) {
      const index_t n_kblocks = (n_ktiles + kBlockTiles - 1) / kBlockTiles;
      const index_t key_block = rank % n_kblocks, query_block = (key_block + wave) % waves;
      if (query_block * kBlockTiles >= n_qtiles) return;
      const index_t kt = key_block * kBlockTiles, qt = query_block * kBlockTiles;
      run_pairs(team, t, rank / n_kblocks, kt, kt + kBlockTiles < n_ktiles ? kt + kBlockTiles : n_ktiles, qt,
                qt + kBlockTiles < n_qtiles ? qt + kBlockTiles : n_qtiles, Adds::all);
    } else if (rank < batch * kv_heads * n_ktiles) {
      const index_t kt = rank % n_ktiles;
      run_pairs(team, t, rank / n_ktiles, kt, kt + 1, 0, n_qtiles, Adds::keys);
    } else {
      const index_t qt = (rank - batch * kv_heads * n_ktiles) % n_qtiles;
      run_pairs(team, t, (rank - batch * kv_heads * n_ktiles) / n_qtiles, 0, n_ktiles, qt, qt + 1, Adds::queries);
    }
  }

  // This team's scratch.
  KOKKOS_INLINE_FUNCTION Pair carve(const TeamMember& team) const {
    Pair t;
    t.k_stage = kStageKeyTiles ? ScratchView<T>(team.team_scratch(level), dh * kb_ld).data() : nullptr;
    t.v_stage = kStageKeyTiles ? ScratchView<T>(team.team_scratch(level), dh * kb_ld).data() : nullptr;
    t.p_tile = ScratchView<T>(team.team_scratch(level), qb * kb_ld).data();
    t.ds_tile = ScratchView<T>(team.team_scratch(level), qb * kb_ld).data();
    t.dk_acc = ScratchView<T>(team.team_scratch(level), kb * dh_ld).data();
    t.dv_acc = ScratchView<T>(team.team_scratch(level), kb * dh_ld).data();
    t.kpos = ScratchView<index_t>(team.team_scratch(level), kb_ld).data();
    return t;
  }

  // The pairs of key tiles [kt0, kt1) and query tiles [qt0, qt1) of (sample,
  // K/V head) bkh, key tiles outer, adding the gradients `adds` says.
  KOKKOS_INLINE_FUNCTION void run_pairs(const TeamMember& team, Pair& t, index_t bkh, index_t kt0, index_t kt1,
                                        index_t qt0, index_t qt1, Adds adds) const {
    t.b = bkh / kv_heads;
    t.kh = bkh % kv_heads;
    for (index_t kt = kt0; kt < kt1; ++kt) {
      t.j0 = kt * kb;
      t.cols = (nk - t.j0) < kb ? (nk - t.j0) : kb;
      bool staged = false;
      for (index_t qt = qt0; qt < qt1; ++qt) {
        t.i0 = qt * qb;
        t.rows = (nq - t.i0) < qb ? (nq - t.i0) : qb;
        t.masked = false;
        if (mask.hides_any() &&
            !tiles_meet(team, mask, t.b, q_pos.data() + t.i0, t.rows, k_pos.data() + t.j0, t.cols, t.masked))
          continue;  // the mask hides every key of the pair from every query
        if (!staged) stage(team, t);
        staged = true;
        for (t.h = t.kh * group; t.h < (t.kh + 1) * group; ++t.h) {  // the K/V head's query heads
          team.team_barrier();  // staging is done; the previous pair is done with p and dS
          probabilities(team, t);
          team.team_barrier();
          score_gradients(team, t);
          team.team_barrier();
          add_gradients(team, t, adds);
        }
      }
      if (!staged) continue;
      team.team_barrier();
      if (adds != Adds::queries) add_key_gradients(team, t);
      team.team_barrier();  // the next key tile overwrites the scratch
    }
  }

  // Points the pair at its K^T and V^T tiles (kStageKeyTiles: copies them
  // into scratch), the key positions into scratch, dk and dv cleared.
  KOKKOS_INLINE_FUNCTION void stage(const TeamMember& team, Pair& t) const {
    const index_t row0 = t.j0 / kb * dh;
    t.k_t = &k_t(t.b, t.kh, row0, 0);
    t.v_t = &v_t(t.b, t.kh, row0, 0);
    t.kt_ld = k_t.stride(2);
    if constexpr (kStageKeyTiles) {
      copy_tile(team, t.k_t, t.kt_ld, dh, t.cols, t.k_stage, kb_ld);
      copy_tile(team, t.v_t, t.kt_ld, dh, t.cols, t.v_stage, kb_ld);
      t.k_t = t.k_stage;
      t.v_t = t.v_stage;
      t.kt_ld = kb_ld;
    }
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, t.cols), [&](const index_t j) {
      Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, dh_ld), [&](const index_t d) {
        t.dk_acc[j * dh_ld + d] = T(0);
        t.dv_acc[j * dh_ld + d] = T(0);
      });
    });
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kb_ld), [&](const index_t j) {
      Kokkos::single(Kokkos::PerThread(team), [&]() { t.kpos[j] = j < t.cols ? k_pos(t.j0 + j) : kPaddingPosition; });
    });
  }

  // P = exp(scale q k^T - lse), 0 where masked and in rows that saw no key.
  // Columns past `cols` (up to kb_ld) hold values no product reads.
  KOKKOS_INLINE_FUNCTION void probabilities(const TeamMember& team, const Pair& t) const {
    const T neg_inf = -compat::infinity<T>(), pos_inf = compat::infinity<T>();
    const index_t* const qp = q_pos.data() + t.i0;
    team_tile_product<T>(
        team, t.rows, t.cols, dh, &q(t.b, t.h, t.i0, 0), index_t(q.stride(2)), index_t(1), t.k_t, t.kt_ld,
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
            if (t.masked) {  // hidden keys (only tiles on a mask's edge)
              const index_t query = qp[r0 + r];
              hide_masked<W>(
                  mask, t.b, p_row, T(0), [&](int) { return query; }, [&](int w) { return t.kpos[c0 + w]; });
            }
          }
        });
  }

  // scale dS = scale P (dout v^T - delta).
  KOKKOS_INLINE_FUNCTION void score_gradients(const TeamMember& team, const Pair& t) const {
    team_tile_product<T>(
        team, t.rows, t.cols, dh, &dout(t.b, t.h, t.i0, 0), index_t(dout.stride(2)), index_t(1), t.v_t, t.kt_ld,
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

  // dq += scale dS k (in memory: no other team of the launch adds to these
  // rows), dv += P^T dout, dk += scale dS^T q (in scratch), as `adds` says.
  KOKKOS_INLINE_FUNCTION void add_gradients(const TeamMember& team, const Pair& t, Adds adds) const {
    const index_t q_ld = q.stride(2), g_ld = dout.stride(2);
    const T* const q_tile = &q(t.b, t.h, t.i0, 0);
    const T* const g_tile = &dout(t.b, t.h, t.i0, 0);
    T* const dq_tile = &dq(t.b, t.h, t.i0, 0);
    T* const dk_tile = t.dk_acc;
    T* const dv_tile = t.dv_acc;
    const index_t dq_ld = dq.stride(2), dk_ld = dh_ld, dv_ld = dh_ld;
    if (adds != Adds::keys)
      team_tile_product<T>(team, t.rows, dh, t.cols, t.ds_tile, kb_ld, index_t(1), &k(t.b, t.kh, t.j0, 0),
                           index_t(k.stride(2)),
                           [&](const index_t r0, const index_t nr, const index_t c0, const index_t nc,
                               const V(&acc)[R][P]) { add_register_tile<T, R, P>(dq_tile, dq_ld, r0, nr, c0, nc, acc); });
    if (adds == Adds::queries) return;
    team_tile_product<T>(team, t.cols, dh, t.rows, t.p_tile, index_t(1), kb_ld, g_tile, g_ld,
                         [&](const index_t r0, const index_t nr, const index_t c0, const index_t nc,
                             const V(&acc)[R][P]) { add_register_tile<T, R, P>(dv_tile, dv_ld, r0, nr, c0, nc, acc); });
    team_tile_product<T>(team, t.cols, dh, t.rows, t.ds_tile, index_t(1), kb_ld, q_tile, q_ld,
                         [&](const index_t r0, const index_t nr, const index_t c0, const index_t nc,
                             const V(&acc)[R][P]) { add_register_tile<T, R, P>(dk_tile, dk_ld, r0, nr, c0, nc, acc); });
  }

  // The key tile's dk, dv from scratch into memory (this team is the only one
  // of its wave on these rows).
  KOKKOS_INLINE_FUNCTION void add_key_gradients(const TeamMember& team, const Pair& t) const {
    T* const dk_tile = &dk(t.b, t.kh, t.j0, 0);
    T* const dv_tile = &dv(t.b, t.kh, t.j0, 0);
    const index_t dk_ld = dk.stride(2), dv_ld = dv.stride(2);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, t.cols), [&](const index_t j) {
      Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, dh), [&](const index_t d) {
        dk_tile[j * dk_ld + d] += t.dk_acc[j * dh_ld + d];
        dv_tile[j * dv_ld + d] += t.dv_acc[j * dh_ld + d];
      });
    });
  }
};

}  // namespace

// The fused kernel (fp32 and fp64).
template <class T>
void fused_backward_accumulate(const View4<const T>& q, const View4<const T>& k, const View4<const T>& v,
                               const View4<const T>& dout, const View3<const T>& lse, const View3<const T>& delta,
                               const AttentionScope& scope, const View4<T>& dq, const View4<T>& dk,
                               const View4<T>& dv, const AttentionWorkspace<T>& workspace) {
  const AttentionBlocking& blocking = scope.blocking;
  const index_t batch = q.extent(0), heads = q.extent(1), nq = q.extent(2), dh = q.extent(3);
  const index_t kv_heads = k.extent(1), nk = k.extent(2);
  const index_t kb = clamp_block(blocking.key_block, nk);
  const index_t tiles = transposed_key_tiles(nk, kb).tiles;
  transpose_key_tiles_into<T>(k, kb, tiles, workspace.k_t);
  transpose_key_tiles_into<T>(v, kb, tiles, workspace.v_t);
  BackwardTilePair<T> pair{q, k, v, dout, lse, delta, scope.q_pos, scope.k_pos,
                           dq, dk, dv, workspace.k_t, workspace.v_t, scope.mask};
  pair.batch = batch;
  pair.kv_heads = kv_heads;
  pair.group = heads / kv_heads;
  pair.nq = nq;
  pair.nk = nk;
  pair.dh = dh;
  pair.scale = T(1) / compat::sqrt(static_cast<T>(dh));
  pair.qb = clamp_block(blocking.query_block, nq);
  pair.kb = kb;
  pair.kb_ld = round_up(pair.kb, Tiling<T>::W);  // columns of K^T, V^T, P and dS: whole register tiles
  pair.dh_ld = round_up(dh, Tiling<T>::W);        // columns of the dk, dv accumulators
  pair.n_qtiles = ceil_div(nq, pair.qb);
  pair.n_ktiles = tiles;
  pair.one_launch = blocking.one_launch_backward;
  if (pair.one_launch) {
    const index_t teams = batch * kv_heads * (pair.n_ktiles + pair.n_qtiles);
    Kokkos::parallel_for("miniattn::attention_backward_accumulate",
                         make_team_policy(teams, pair.scratch_bytes(), pair.level), pair);
    return;
  }
  const index_t n_kblocks = ceil_div(pair.n_ktiles, kBlockTiles);
  pair.waves = std::max(ceil_div(pair.n_qtiles, kBlockTiles), n_kblocks);
  const TeamPolicy policy = make_team_policy(batch * kv_heads * n_kblocks, pair.scratch_bytes(), pair.level);
  for (pair.wave = 0; pair.wave < pair.waves; ++pair.wave)
    Kokkos::parallel_for("miniattn::attention_backward_accumulate", policy, pair);
}

template void fused_backward_accumulate<float>(const View4<const float>&, const View4<const float>&,
                                               const View4<const float>&, const View4<const float>&,
                                               const View3<const float>&, const View3<const float>&,
                                               const AttentionScope&, const View4<float>&, const View4<float>&,
                                               const View4<float>&, const AttentionWorkspace<float>&);
template void fused_backward_accumulate<double>(const View4<const double>&, const View4<const double>&,
                                                const View4<const double>&, const View4<const double>&,
                                                const View3<const double>&, const View3<const double>&,
                                                const AttentionScope&, const View4<double>&, const View4<double>&,
                                                const View4<double>&, const AttentionWorkspace<double>&);

}  // namespace miniattn::kernels
