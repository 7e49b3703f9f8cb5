// Blockwise (flash-style) attention kernels. See attention.hpp for the contract.
//
// One Kokkos team per (batch, head, tile). The operand a tile keeps meeting is
// staged once per team in scratch, and every matrix product of a tile pair goes
// through one register-blocked kernel (team_tile_product):
//   C[rows x width] = A B, cut into R x W register tiles.
// A thread of the team takes a strip of R rows (R pointers into A); a vector
// lane takes W consecutive columns of B and accumulates the R x W block in
// registers over the whole inner dimension, then hands it to an epilogue
// (scale, mask, exp, rescale-and-add, atomic add, ...). The tiling is chosen by
// execution space, the code is the same:
//   host (one thread per team): a lane is a "pack" of SIMD registers: W = P
//     vectors of the target's width (GCC/Clang vector extensions; 16 floats or
//     8 doubles with AVX2), R = 6 rows: 12 accumulator registers, 2 for B, 1
//     broadcast of A - the classic broadcast + FMA micro-kernel;
//   GPU: R = W = 1 and a pack is one scalar: a lane owns one output element,
//     lanes run along B's rows.
// Row-wise passes (online softmax) use the same split: one pack of consecutive
// queries per lane. Phases that read what other threads wrote are separated by
// team barriers.
//
// Forward (per query tile, looping over key tiles). Q^T is staged once per
// query tile, so no key tile is ever copied or transposed:
//   S^T = scale K Q^T (masked to -inf)          [keys x queries]
//   m_new = max(m, column max of S^T), P^T = exp(S^T - m_new),
//   l = l alpha + column sum P^T, alpha = exp(m - m_new),
//   O = O alpha + P V                           (O, m, l live in scratch)
// Backward (per key tile, looping over query tiles; FlashAttention-2 order).
// K^T and V^T are staged once per key tile:
//   P = exp(scale Q K^T - lse), dS = scale P (dO V^T - delta),
//   dq += dS K (atomic: several key tiles meet the same query rows),
//   dv += P^T dO, dk += dS^T Q (accumulated in scratch, added at the end).
//
// On the host, exp is pack_exp (a branch-free polynomial on whole SIMD
// registers; libm's expf/exp are scalar calls). The products reach the FMA
// units when the target has them and the compiler may contract a * b + c
// (cmake/MiniattnArch.cmake: -march=native -ffp-contract=fast by default).
#include "kernels/attention.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>

#include "core/error.hpp"
#include "core/kokkos_compat.hpp"
#include "kernels/simd_pack.hpp"

namespace miniattn::kernels {

using namespace simd;

namespace {

using TeamPolicy = Kokkos::TeamPolicy<ExecSpace>;
using TeamMember = TeamPolicy::member_type;
template <class T>
using ScratchView = Kokkos::View<T*, ExecSpace::scratch_memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
using RowPolicy = Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<index_t>>;

// Register tile of the products: R rows x P packs (W = P * lanes columns).
// Host: 2R accumulator registers + P for B + 1 broadcast fit the 16 SIMD
// registers of SSE2/AVX2.
template <class T>
struct Tiling {
  static constexpr int R = kHostExecution ? 6 : 1;
  static constexpr int P = kHostExecution ? 2 : 1;
  static constexpr int lanes = Pack<T>::lanes;
  static constexpr int W = P * lanes;
  static constexpr int L = kHostExecution ? 1 : 32;  // vector lanes of the row-wise passes
};


// Picks scratch level 0 (fast, small) when the tiles fit, level 1 otherwise.
TeamPolicy make_team_policy(index_t league_size, std::size_t scratch_bytes, int& scratch_level) {
  scratch_level = scratch_bytes <= static_cast<std::size_t>(TeamPolicy::scratch_size_max(0)) ? 0 : 1;
  if (scratch_bytes > static_cast<std::size_t>(TeamPolicy::scratch_size_max(1))) {
    throw RuntimeFailure("attention: tiles need " + std::to_string(scratch_bytes) +
                         " bytes of team scratch, more than the backend offers; reduce the block sizes");
  }
  if (kHostExecution) {
    TeamPolicy policy(static_cast<int>(league_size), 1, 1);
    return policy.set_scratch_size(scratch_level, Kokkos::PerTeam(scratch_bytes));
  }
  const int vector_length = std::min(TeamPolicy::vector_length_max(), 32);
  TeamPolicy policy(static_cast<int>(league_size), Kokkos::AUTO, vector_length);
  return policy.set_scratch_size(scratch_level, Kokkos::PerTeam(scratch_bytes));
}

template <class T>
std::size_t scratch_bytes_for(index_t count) {
  return ScratchView<T>::shmem_size(static_cast<std::size_t>(count));
}

index_t clamp_block(index_t requested, index_t extent) {
  return std::max<index_t>(1, std::min<index_t>(requested, extent));
}

index_t ceil_div(index_t a, index_t b) { return (a + b - 1) / b; }
index_t round_up(index_t a, index_t m) { return ceil_div(a, m) * m; }

void require(bool condition, const char* what) {
  if (!condition) throw RuntimeFailure(std::string("attention: ") + what);
}

template <class View>
bool same_extents4(const View& a, index_t b, index_t h, index_t n, index_t d) {
  return static_cast<index_t>(a.extent(0)) == b && static_cast<index_t>(a.extent(1)) == h &&
         static_cast<index_t>(a.extent(2)) == n && static_cast<index_t>(a.extent(3)) == d;
}

template <class View>
bool same_extents3(const View& a, index_t b, index_t h, index_t n) {
  return static_cast<index_t>(a.extent(0)) == b && static_cast<index_t>(a.extent(1)) == h &&
         static_cast<index_t>(a.extent(2)) == n;
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

}  // namespace

// ---------------------------------------------------------------------------
template <class T>
void attention_forward_init(const View4<T>& out_acc, const View3<T>& row_max, const View3<T>& row_sum) {
  Kokkos::deep_copy(out_acc, T(0));
  Kokkos::deep_copy(row_max, -std::numeric_limits<T>::infinity());
  Kokkos::deep_copy(row_sum, T(0));
}

// ---------------------------------------------------------------------------
template <class T>
void attention_forward_accumulate(const View4<const T>& q, const View4<const T>& k, const View4<const T>& v,
                                  const View1<const index_t>& q_pos, const View1<const index_t>& k_pos, bool causal,
                                  const AttentionBlocking& blocking, const View4<T>& out_acc, const View3<T>& row_max,
                                  const View3<T>& row_sum) {
  const index_t batch = q.extent(0), heads = q.extent(1), nq = q.extent(2), dh = q.extent(3);
  const index_t nk = k.extent(2);
  require(same_extents4(k, batch, heads, nk, dh), "k must be [B, H, n_k, Dh] with q's B, H, Dh");
  require(same_extents4(v, batch, heads, nk, dh), "v must have k's shape");
  require(same_extents4(out_acc, batch, heads, nq, dh), "out_acc must have q's shape");
  require(same_extents3(row_max, batch, heads, nq) && same_extents3(row_sum, batch, heads, nq),
          "row_max and row_sum must be [B, H, n_q]");
  require(static_cast<index_t>(q_pos.extent(0)) == nq && static_cast<index_t>(k_pos.extent(0)) == nk,
          "q_pos / k_pos must have one entry per query / key row");
  if (batch == 0 || heads == 0 || nq == 0 || nk == 0 || dh == 0) return;

  using V = typename Pack<T>::type;
  constexpr int R = Tiling<T>::R, P = Tiling<T>::P, W = Tiling<T>::W, lanes = Tiling<T>::lanes;
  const index_t qb = clamp_block(blocking.query_block, nq);
  const index_t kb = clamp_block(blocking.key_block, nk);
  const index_t qb_ld = round_up(qb, W);  // columns of Q^T and S^T: whole register tiles
  const index_t dh_ld = round_up(dh, W);  // columns of the O tile
  const index_t n_qtiles = ceil_div(nq, qb);
  const index_t n_ktiles = ceil_div(nk, kb);
  const T scale = T(1) / compat::sqrt(static_cast<T>(dh));
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const index_t never_masked = std::numeric_limits<index_t>::max();

  const std::size_t bytes = scratch_bytes_for<T>(dh * qb_ld) + scratch_bytes_for<T>(kb * qb_ld) +
                            scratch_bytes_for<T>(qb * dh_ld) + 3 * scratch_bytes_for<T>(qb_ld) +
                            scratch_bytes_for<index_t>(qb_ld);
  int level = 0;
  const TeamPolicy policy = make_team_policy(batch * heads * n_qtiles, bytes, level);

  const index_t q_ld = q.stride(2), k_ld = k.stride(2), v_ld = v.stride(2), o_ld = out_acc.stride(2);

  Kokkos::parallel_for(
      "miniattn::attention_forward_accumulate", policy, KOKKOS_LAMBDA(const TeamMember& team) {
        const index_t league = team.league_rank();
        const index_t qt = league % n_qtiles;
        const index_t bh = league / n_qtiles;
        const index_t b = bh / heads, h = bh % heads;
        const index_t i0 = qt * qb;
        const index_t rows = (nq - i0) < qb ? (nq - i0) : qb;

        ScratchView<T> qt_view(team.team_scratch(level), dh * qb_ld);
        ScratchView<T> st_view(team.team_scratch(level), kb * qb_ld);
        ScratchView<T> o_view(team.team_scratch(level), qb * dh_ld);
        ScratchView<T> m_view(team.team_scratch(level), qb_ld);
        ScratchView<T> l_view(team.team_scratch(level), qb_ld);
        ScratchView<T> alpha_view(team.team_scratch(level), qb_ld);
        ScratchView<index_t> qpos_view(team.team_scratch(level), qb_ld);
        T* const q_t = qt_view.data();           // [dh][qb_ld]: q tile transposed, zero columns past `rows`
        T* const s_t = st_view.data();           // [kb][qb_ld]: scores, then probabilities, transposed
        T* const o_tile = o_view.data();         // [qb][dh_ld]: running output (unnormalised)
        T* const m_run = m_view.data();          // [qb_ld]: running row maximum
        T* const l_run = l_view.data();          // [qb_ld]: running row sum
        T* const alpha = alpha_view.data();      // [qb_ld]: rescale factor exp(m_old - m_new)
        index_t* const qpos = qpos_view.data();  // [qb_ld]: query positions, padding never masked

        const T* const q_tile = &q(b, h, i0, 0);
        const T* const k_all = &k(b, h, 0, 0);
        const T* const v_all = &v(b, h, 0, 0);
        T* const o_out = &out_acc(b, h, i0, 0);
        const index_t* const qp = q_pos.data() + i0;
        const index_t* const kp_all = k_pos.data();

        // Stage Q^T, the running state and the positions.
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, dh), [&](const index_t d) {
          Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, qb_ld), [&](const index_t r) {
            q_t[d * qb_ld + r] = r < rows ? q_tile[r * q_ld + d] : T(0);
          });
        });
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows), [&](const index_t r) {
          Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, dh_ld), [&](const index_t d) {
            o_tile[r * dh_ld + d] = d < dh ? o_out[r * o_ld + d] : T(0);
          });
        });
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, qb_ld), [&](const index_t r) {
          Kokkos::single(Kokkos::PerThread(team), [&]() {
            m_run[r] = r < rows ? row_max(b, h, i0 + r) : neg_inf;
            l_run[r] = r < rows ? row_sum(b, h, i0 + r) : T(0);
            qpos[r] = r < rows ? qp[r] : never_masked;
          });
        });

        index_t q_lo = 0, q_hi = 0;
        if (causal) team_position_range(team, qp, rows, q_lo, q_hi);

        for (index_t kt = 0; kt < n_ktiles; ++kt) {
          const index_t j0 = kt * kb;
          const index_t cols = (nk - j0) < kb ? (nk - j0) : kb;
          const index_t* const kp = kp_all + j0;
          bool masked = false;
          if (causal) {
            index_t k_lo = 0, k_hi = 0;
            team_position_range(team, kp, cols, k_lo, k_hi);
            if (k_lo > q_hi) continue;  // every key of this tile is in every query's future
            masked = k_hi > q_lo;       // some pair needs the mask
          }

          team.team_barrier();  // staging is done; the previous tile is done with s_t and alpha

          // S^T = scale K Q^T: key rows of K straight from memory against the staged Q^T.
          team_tile_product<T>(team, cols, qb_ld, dh, k_all + j0 * k_ld, k_ld, index_t(1), q_t, qb_ld,
                               [&](const index_t r0, const index_t nr, const index_t c0, const index_t,
                                   const V(&acc)[R][P]) {
                                 const V s = pack_splat<V>(scale);
                                 MINIATTN_UNROLL
                                 for (int r = 0; r < R; ++r) {
                                   if (r >= nr) break;
                                   T* const dst = s_t + (r0 + r) * qb_ld + c0;
                                   MINIATTN_UNROLL
                                   for (int p = 0; p < P; ++p) pack_store(dst + p * lanes, V(s * acc[r][p]));
                                 }
                               });
          team.team_barrier();

          // Online softmax down each query's column of S^T, W queries per lane.
          team_lane_chunks<T>(team, rows, [&](const index_t c0) {
            if (masked) {  // keys in a query's future get -inf (scalar: only tiles on the diagonal)
              for (index_t j = 0; j < cols; ++j) {
                const index_t kj = kp[j];
                T* const s = s_t + j * qb_ld + c0;
                for (int w = 0; w < W; ++w) {
                  if (kj > qpos[c0 + w]) s[w] = neg_inf;
                }
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
          team.team_barrier();

          // O = O alpha + P V.
          team_tile_product<T>(team, rows, dh, cols, s_t, index_t(1), qb_ld, v_all + j0 * v_ld, v_ld,
                               [&](const index_t r0, const index_t nr, const index_t c0, const index_t,
                                   const V(&acc)[R][P]) {
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
        team.team_barrier();

        // Hand the running state back.
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows), [&](const index_t r) {
          Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, dh),
                               [&](const index_t d) { o_out[r * o_ld + d] = o_tile[r * dh_ld + d]; });
          Kokkos::single(Kokkos::PerThread(team), [&]() {
            row_max(b, h, i0 + r) = m_run[r];
            row_sum(b, h, i0 + r) = l_run[r];
          });
        });
      });
}

// ---------------------------------------------------------------------------
template <class T>
void attention_forward_finalize(const View4<T>& out, const View3<const T>& row_max, const View3<const T>& row_sum,
                                const View3<T>& lse) {
  const index_t batch = out.extent(0), heads = out.extent(1), n = out.extent(2), dh = out.extent(3);
  require(same_extents3(row_max, batch, heads, n) && same_extents3(row_sum, batch, heads, n) &&
              same_extents3(lse, batch, heads, n),
          "row_max, row_sum and lse must be [B, H, n] with out's B, H, n");
  const T neg_inf = -std::numeric_limits<T>::infinity();
  Kokkos::parallel_for(
      "miniattn::attention_forward_finalize", RowPolicy(0, batch * heads * n), KOKKOS_LAMBDA(const index_t row) {
        const index_t i = row % n;
        const index_t bh = row / n;
        const index_t b = bh / heads, h = bh % heads;
        const T m = row_max(b, h, i);  // read before lse is written: lse may alias row_max
        const T l = row_sum(b, h, i);
        T* const o_row = &out(b, h, i, 0);
        if (m == neg_inf || !(l > T(0))) {
          for (index_t d = 0; d < dh; ++d) o_row[d] = T(0);
          lse(b, h, i) = neg_inf;
        } else {
          const T inv = T(1) / l;
          for (index_t d = 0; d < dh; ++d) o_row[d] *= inv;
          lse(b, h, i) = m + compat::log(l);
        }
      });
}

// ---------------------------------------------------------------------------
template <class T>
void attention_forward(const View4<const T>& q, const View4<const T>& k, const View4<const T>& v,
                       const View1<const index_t>& q_pos, const View1<const index_t>& k_pos, bool causal,
                       const AttentionBlocking& blocking, const View4<T>& out, const View3<T>& lse,
                       const View3<T>& row_sum) {
  attention_forward_init<T>(out, lse, row_sum);
  attention_forward_accumulate<T>(q, k, v, q_pos, k_pos, causal, blocking, out, lse, row_sum);
  attention_forward_finalize<T>(out, lse, row_sum, lse);
}

// ---------------------------------------------------------------------------
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

// ---------------------------------------------------------------------------
template <class T>
void attention_backward_accumulate(const View4<const T>& q, const View4<const T>& k, const View4<const T>& v,
                                   const View4<const T>& dout, const View3<const T>& lse, const View3<const T>& delta,
                                   const View1<const index_t>& q_pos, const View1<const index_t>& k_pos, bool causal,
                                   const AttentionBlocking& blocking, const View4<T>& dq, const View4<T>& dk,
                                   const View4<T>& dv) {
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
  if (batch == 0 || heads == 0 || nq == 0 || nk == 0 || dh == 0) return;

  using V = typename Pack<T>::type;
  constexpr int R = Tiling<T>::R, P = Tiling<T>::P, W = Tiling<T>::W, lanes = Tiling<T>::lanes;
  const index_t qb = clamp_block(blocking.query_block, nq);
  const index_t kb = clamp_block(blocking.key_block, nk);
  const index_t kb_ld = round_up(kb, W);  // columns of K^T, V^T, P and dS: whole register tiles
  const index_t dh_ld = round_up(dh, W);  // columns of the dk / dv accumulators
  const index_t n_qtiles = ceil_div(nq, qb);
  const index_t n_ktiles = ceil_div(nk, kb);
  const T scale = T(1) / compat::sqrt(static_cast<T>(dh));
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const T pos_inf = std::numeric_limits<T>::infinity();
  const index_t always_masked = std::numeric_limits<index_t>::max();

  const std::size_t bytes = 2 * scratch_bytes_for<T>(dh * kb_ld) + 2 * scratch_bytes_for<T>(qb * kb_ld) +
                            2 * scratch_bytes_for<T>(kb * dh_ld) + scratch_bytes_for<index_t>(kb_ld);
  int level = 0;
  const TeamPolicy policy = make_team_policy(batch * heads * n_ktiles, bytes, level);

  const index_t q_ld = q.stride(2), k_ld = k.stride(2), v_ld = v.stride(2), g_ld = dout.stride(2);
  const index_t dq_ld = dq.stride(2), dk_ld = dk.stride(2), dv_ld = dv.stride(2);

  Kokkos::parallel_for(
      "miniattn::attention_backward_accumulate", policy, KOKKOS_LAMBDA(const TeamMember& team) {
        const index_t league = team.league_rank();
        const index_t kt = league % n_ktiles;
        const index_t bh = league / n_ktiles;
        const index_t b = bh / heads, h = bh % heads;
        const index_t j0 = kt * kb;
        const index_t cols = (nk - j0) < kb ? (nk - j0) : kb;

        ScratchView<T> kt_view(team.team_scratch(level), dh * kb_ld);
        ScratchView<T> vt_view(team.team_scratch(level), dh * kb_ld);
        ScratchView<T> p_view(team.team_scratch(level), qb * kb_ld);
        ScratchView<T> ds_view(team.team_scratch(level), qb * kb_ld);
        ScratchView<T> dk_view(team.team_scratch(level), kb * dh_ld);
        ScratchView<T> dv_view(team.team_scratch(level), kb * dh_ld);
        ScratchView<index_t> kpos_view(team.team_scratch(level), kb_ld);
        T* const k_t = kt_view.data();           // [dh][kb_ld]: k tile transposed, zero columns past `cols`
        T* const v_t = vt_view.data();           // [dh][kb_ld]: v tile transposed
        T* const p_tile = p_view.data();         // [qb][kb_ld]: probabilities
        T* const ds_tile = ds_view.data();       // [qb][kb_ld]: scale * dS
        T* const dk_acc = dk_view.data();        // [kb][dh_ld]: this tile's dk, summed over query tiles
        T* const dv_acc = dv_view.data();        // [kb][dh_ld]
        index_t* const kpos = kpos_view.data();  // [kb_ld]: key positions, padding always masked

        const T* const k_tile = &k(b, h, j0, 0);
        const T* const v_tile = &v(b, h, j0, 0);
        const T* const q_all = &q(b, h, 0, 0);
        const T* const g_all = &dout(b, h, 0, 0);
        T* const dq_all = &dq(b, h, 0, 0);
        T* const dk_tile = &dk(b, h, j0, 0);
        T* const dv_tile = &dv(b, h, j0, 0);
        const index_t* const kp = k_pos.data() + j0;

        // Stage K^T, V^T and the key positions; clear the accumulators.
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, dh), [&](const index_t d) {
          Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, kb_ld), [&](const index_t j) {
            k_t[d * kb_ld + j] = j < cols ? k_tile[j * k_ld + d] : T(0);
            v_t[d * kb_ld + j] = j < cols ? v_tile[j * v_ld + d] : T(0);
          });
        });
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, cols), [&](const index_t j) {
          Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, dh_ld), [&](const index_t d) {
            dk_acc[j * dh_ld + d] = T(0);
            dv_acc[j * dh_ld + d] = T(0);
          });
        });
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kb_ld), [&](const index_t j) {
          Kokkos::single(Kokkos::PerThread(team), [&]() { kpos[j] = j < cols ? kp[j] : always_masked; });
        });

        index_t k_lo = 0, k_hi = 0;
        if (causal) team_position_range(team, kp, cols, k_lo, k_hi);

        for (index_t qt = 0; qt < n_qtiles; ++qt) {
          const index_t i0 = qt * qb;
          const index_t rows = (nq - i0) < qb ? (nq - i0) : qb;
          const index_t* const qp = q_pos.data() + i0;
          bool masked = false;
          if (causal) {
            index_t q_lo = 0, q_hi = 0;
            team_position_range(team, qp, rows, q_lo, q_hi);
            if (k_lo > q_hi) continue;  // this key tile is in the future of every query of the tile
            masked = k_hi > q_lo;
          }
          const T* const q_tile = q_all + i0 * q_ld;
          const T* const g_tile = g_all + i0 * g_ld;

          team.team_barrier();  // staging is done; the previous query tile is done with p and dS

          // P = exp(scale q k^T - lse), 0 where masked and in rows that saw no key.
          team_tile_product<T>(
              team, rows, kb_ld, dh, q_tile, q_ld, index_t(1), k_t, kb_ld,
              [&](const index_t r0, const index_t nr, const index_t c0, const index_t, const V(&acc)[R][P]) {
                const V vscale = pack_splat<V>(scale);
                MINIATTN_UNROLL
                for (int r = 0; r < R; ++r) {
                  if (r >= nr) break;
                  const T lse_i = lse(b, h, i0 + r0 + r);
                  const V shift = pack_splat<V>(lse_i == neg_inf ? pos_inf : lse_i);  // exp(x - inf) = 0
                  T* const p_row = p_tile + (r0 + r) * kb_ld + c0;
                  MINIATTN_UNROLL
                  for (int p = 0; p < P; ++p) {
                    pack_store(p_row + p * lanes, kernel_exp<T>(vscale * acc[r][p] - shift));
                  }
                  if (masked) {  // keys in the query's future (scalar: only tiles on the diagonal)
                    const index_t qi = qp[r0 + r];
                    for (int w = 0; w < W; ++w) {
                      if (kpos[c0 + w] > qi) p_row[w] = T(0);
                    }
                  }
                }
              });
          team.team_barrier();

          // scale dS = scale P (dout v^T - delta).
          team_tile_product<T>(
              team, rows, kb_ld, dh, g_tile, g_ld, index_t(1), v_t, kb_ld,
              [&](const index_t r0, const index_t nr, const index_t c0, const index_t, const V(&acc)[R][P]) {
                const V vscale = pack_splat<V>(scale);
                MINIATTN_UNROLL
                for (int r = 0; r < R; ++r) {
                  if (r >= nr) break;
                  const V delta_i = pack_splat<V>(delta(b, h, i0 + r0 + r));
                  const T* const p_row = p_tile + (r0 + r) * kb_ld + c0;
                  T* const ds_row = ds_tile + (r0 + r) * kb_ld + c0;
                  MINIATTN_UNROLL
                  for (int p = 0; p < P; ++p) {
                    const V pv = pack_load<V>(p_row + p * lanes);
                    pack_store(ds_row + p * lanes, V(vscale * pv * (acc[r][p] - delta_i)));
                  }
                }
              });
          team.team_barrier();

          // dq += scale dS k (other key tiles add to the same rows: atomic).
          team_tile_product<T>(
              team, rows, dh, cols, ds_tile, kb_ld, index_t(1), k_tile, k_ld,
              [&](const index_t r0, const index_t nr, const index_t c0, const index_t nc, const V(&acc)[R][P]) {
                MINIATTN_UNROLL
                for (int r = 0; r < R; ++r) {
                  if (r >= nr) break;
                  T* const dq_row = dq_all + (i0 + r0 + r) * dq_ld + c0;
                  for (int w = 0; w < W; ++w) {
                    if (w < nc) Kokkos::atomic_add(&dq_row[w], pack_lane(acc[r][w / lanes], w % lanes));
                  }
                }
              });
          // dv += P^T dout, dk += scale dS^T q (this team owns these key rows).
          team_tile_product<T>(
              team, cols, dh, rows, p_tile, index_t(1), kb_ld, g_tile, g_ld,
              [&](const index_t r0, const index_t nr, const index_t c0, const index_t, const V(&acc)[R][P]) {
                MINIATTN_UNROLL
                for (int r = 0; r < R; ++r) {
                  if (r >= nr) break;
                  T* const dv_row = dv_acc + (r0 + r) * dh_ld + c0;
                  MINIATTN_UNROLL
                  for (int p = 0; p < P; ++p) {
                    pack_store(dv_row + p * lanes, V(pack_load<V>(dv_row + p * lanes) + acc[r][p]));
                  }
                }
              });
          team_tile_product<T>(
              team, cols, dh, rows, ds_tile, index_t(1), kb_ld, q_tile, q_ld,
              [&](const index_t r0, const index_t nr, const index_t c0, const index_t, const V(&acc)[R][P]) {
                MINIATTN_UNROLL
                for (int r = 0; r < R; ++r) {
                  if (r >= nr) break;
                  T* const dk_row = dk_acc + (r0 + r) * dh_ld + c0;
                  MINIATTN_UNROLL
                  for (int p = 0; p < P; ++p) {
                    pack_store(dk_row + p * lanes, V(pack_load<V>(dk_row + p * lanes) + acc[r][p]));
                  }
                }
              });
        }
        team.team_barrier();

        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, cols), [&](const index_t j) {
          Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, dh), [&](const index_t d) {
            dk_tile[j * dk_ld + d] += dk_acc[j * dh_ld + d];
            dv_tile[j * dv_ld + d] += dv_acc[j * dh_ld + d];
          });
        });
      });
}

// ---------------------------------------------------------------------------
#define MINIATTN_INSTANTIATE_ATTENTION(T)                                                                              \
  template void attention_forward_init<T>(const View4<T>&, const View3<T>&, const View3<T>&);                          \
  template void attention_forward_accumulate<T>(                                                                       \
      const View4<const T>&, const View4<const T>&, const View4<const T>&, const View1<const index_t>&,                \
      const View1<const index_t>&, bool, const AttentionBlocking&, const View4<T>&, const View3<T>&, const View3<T>&); \
  template void attention_forward_finalize<T>(const View4<T>&, const View3<const T>&, const View3<const T>&,           \
                                              const View3<T>&);                                                        \
  template void attention_forward<T>(const View4<const T>&, const View4<const T>&, const View4<const T>&,              \
                                     const View1<const index_t>&, const View1<const index_t>&, bool,                   \
                                     const AttentionBlocking&, const View4<T>&, const View3<T>&, const View3<T>&);     \
  template void attention_backward_delta<T>(const View4<const T>&, const View4<const T>&, const View3<T>&);            \
  template void attention_backward_accumulate<T>(                                                                      \
      const View4<const T>&, const View4<const T>&, const View4<const T>&, const View4<const T>&,                      \
      const View3<const T>&, const View3<const T>&, const View1<const index_t>&, const View1<const index_t>&, bool,    \
      const AttentionBlocking&, const View4<T>&, const View4<T>&, const View4<T>&);

MINIATTN_INSTANTIATE_ATTENTION(float)
MINIATTN_INSTANTIATE_ATTENTION(double)

#undef MINIATTN_INSTANTIATE_ATTENTION

}  // namespace miniattn::kernels
