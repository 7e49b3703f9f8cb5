// Blockwise (flash-style) attention kernels. See attention.hpp for the contract.
//
// Structure of both passes: one Kokkos team per (batch, head, tile). Tiles of
// the other operand are staged, transposed, in team scratch so that the
// innermost loops run over a contiguous index (key index j or head dimension
// d) inside a ThreadVectorRange: on GPUs those are the vector lanes, on a host
// backend (team size 1) they are plain unit-stride loops the compiler
// vectorises. Phases that read values written by other threads of the team are
// separated by team barriers; within a thread, a vector loop only reads the
// elements its own lane wrote in an earlier vector loop of the same range.
//
// Forward (per query tile, looping over key tiles):
//   S = scale q k^T (masked to -inf), m_new = max(m, rowmax S),
//   P = exp(S - m_new), l = l * exp(m - m_new) + rowsum P,
//   acc = acc * exp(m - m_new) + P v.
// Backward (per key tile, looping over query tiles; FlashAttention-2 order):
//   P = exp(scale q k^T - lse), dP = dout v^T, dS = scale * P * (dP - delta),
//   dv += P^T dout, dk += dS^T q, dq += dS k (atomic: several key tiles meet
//   the same query rows).
#include "kernels/attention.hpp"

#include <algorithm>
#include <limits>
#include <string>
#include <type_traits>

#include "core/error.hpp"
#include "core/kokkos_compat.hpp"

namespace miniattn::kernels {

namespace {

using TeamPolicy = Kokkos::TeamPolicy<ExecSpace>;
using TeamMember = TeamPolicy::member_type;
template <class T>
using ScratchView = Kokkos::View<T*, ExecSpace::scratch_memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
using RowPolicy = Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<index_t>>;

// Host backends run one thread per team (the league is the parallel loop) and
// leave vectorisation to the compiler; GPU backends use vector lanes.
constexpr bool kHostExecution = std::is_same<ExecSpace, Kokkos::DefaultHostExecutionSpace>::value;

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

// Vector-lane kernels of the hot loops. On GPUs they spread the index over the
// vector lanes of the calling thread. On host backends (team size 1, vector
// length 1) they are plain loops over restrict-qualified parameters: written
// through a ThreadVectorRange lambda the host compiler loses the restrict
// information and falls back to scalar code behind run-time alias checks.

// y[i] += a0 x0[i] for i < n
template <class T>
KOKKOS_FORCEINLINE_FUNCTION void vector_axpy(const TeamMember& team, index_t n, T* KOKKOS_RESTRICT y, T a0,
                                             const T* KOKKOS_RESTRICT x0) {
  if constexpr (kHostExecution) {
    (void)team;
    for (index_t i = 0; i < n; ++i) y[i] += a0 * x0[i];
  } else {
    Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, n), [&](const index_t i) { y[i] += a0 * x0[i]; });
  }
}

// y[i] += a0 x0[i] + a1 x1[i] + a2 x2[i] + a3 x3[i]: four terms per sweep, a quarter of y's loads and stores.
template <class T>
KOKKOS_FORCEINLINE_FUNCTION void vector_axpy4(const TeamMember& team, index_t n, T* KOKKOS_RESTRICT y, T a0,
                                              const T* KOKKOS_RESTRICT x0, T a1, const T* KOKKOS_RESTRICT x1, T a2,
                                              const T* KOKKOS_RESTRICT x2, T a3, const T* KOKKOS_RESTRICT x3) {
  if constexpr (kHostExecution) {
    (void)team;
    for (index_t i = 0; i < n; ++i) y[i] += a0 * x0[i] + a1 * x1[i] + a2 * x2[i] + a3 * x3[i];
  } else {
    Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, n),
                         [&](const index_t i) { y[i] += a0 * x0[i] + a1 * x1[i] + a2 * x2[i] + a3 * x3[i]; });
  }
}

// y[i] += sum_t a[t] x[t][i] and z[i] += sum_t b[t] w[t][i], t < 4, in one sweep.
template <class T>
KOKKOS_FORCEINLINE_FUNCTION void vector_axpy4_pair(const TeamMember& team, index_t n, T* KOKKOS_RESTRICT y,
                                                   const T (&a)[4], const T* KOKKOS_RESTRICT x0,
                                                   const T* KOKKOS_RESTRICT x1, const T* KOKKOS_RESTRICT x2,
                                                   const T* KOKKOS_RESTRICT x3, T* KOKKOS_RESTRICT z, const T (&b)[4],
                                                   const T* KOKKOS_RESTRICT w0, const T* KOKKOS_RESTRICT w1,
                                                   const T* KOKKOS_RESTRICT w2, const T* KOKKOS_RESTRICT w3) {
  const T a0 = a[0], a1 = a[1], a2 = a[2], a3 = a[3];
  const T b0 = b[0], b1 = b[1], b2 = b[2], b3 = b[3];
  if constexpr (kHostExecution) {
    (void)team;
    for (index_t i = 0; i < n; ++i) {
      y[i] += a0 * x0[i] + a1 * x1[i] + a2 * x2[i] + a3 * x3[i];
      z[i] += b0 * w0[i] + b1 * w1[i] + b2 * w2[i] + b3 * w3[i];
    }
  } else {
    Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, n), [&](const index_t i) {
      y[i] += a0 * x0[i] + a1 * x1[i] + a2 * x2[i] + a3 * x3[i];
      z[i] += b0 * w0[i] + b1 * w1[i] + b2 * w2[i] + b3 * w3[i];
    });
  }
}

// y[i] += a0 x0[i] and z[i] += b0 w0[i]
template <class T>
KOKKOS_FORCEINLINE_FUNCTION void vector_axpy_pair(const TeamMember& team, index_t n, T* KOKKOS_RESTRICT y, T a0,
                                                  const T* KOKKOS_RESTRICT x0, T* KOKKOS_RESTRICT z, T b0,
                                                  const T* KOKKOS_RESTRICT w0) {
  if constexpr (kHostExecution) {
    (void)team;
    for (index_t i = 0; i < n; ++i) {
      y[i] += a0 * x0[i];
      z[i] += b0 * w0[i];
    }
  } else {
    Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, n), [&](const index_t i) {
      y[i] += a0 * x0[i];
      z[i] += b0 * w0[i];
    });
  }
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

  const index_t qb = clamp_block(blocking.query_block, nq);
  const index_t kb = clamp_block(blocking.key_block, nk);
  const index_t kt_ld = kb + (kHostExecution ? 0 : 1);  // pad on GPUs against bank conflicts
  const index_t n_qtiles = ceil_div(nq, qb);
  const index_t n_ktiles = ceil_div(nk, kb);
  const T scale = T(1) / compat::sqrt(static_cast<T>(dh));
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const T lowest = std::numeric_limits<T>::lowest();

  const std::size_t bytes = scratch_bytes_for<T>(dh * kt_ld) + scratch_bytes_for<T>(qb * kb) + scratch_bytes_for<T>(qb);
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

        ScratchView<T> kt_view(team.team_scratch(level), dh * kt_ld);
        ScratchView<T> s_view(team.team_scratch(level), qb * kb);
        ScratchView<T> alpha_view(team.team_scratch(level), qb);
        T* const kt_tile = kt_view.data();   // [dh][kt_ld]: k tile transposed
        T* const s_tile = s_view.data();     // [qb][kb]: scores, then probabilities
        T* const alpha = alpha_view.data();  // [qb]: rescale factor exp(m_old - m_new)

        const T* const q_tile = &q(b, h, i0, 0);
        const T* const k_all = &k(b, h, 0, 0);
        const T* const v_all = &v(b, h, 0, 0);
        T* const o_tile = &out_acc(b, h, i0, 0);
        const index_t* const qp = q_pos.data() + i0;
        const index_t* const kp_all = k_pos.data();

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

          team.team_barrier();  // the previous tile is done with kt_tile, s_tile, alpha
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, cols), [&](const index_t j) {
            const T* const k_row = k_all + (j0 + j) * k_ld;
            Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, dh),
                                 [&](const index_t d) { kt_tile[d * kt_ld + j] = k_row[d]; });
          });
          team.team_barrier();

          // Scores, running max and sum for each query row of the tile.
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows), [&](const index_t r) {
            T* const KOKKOS_RESTRICT s_row = s_tile + r * kb;
            const T* const KOKKOS_RESTRICT q_row = q_tile + r * q_ld;
            Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, cols), [&](const index_t j) { s_row[j] = T(0); });
            // Four head dimensions per sweep: a quarter of the loads and stores of s_row.
            index_t d = 0;
            for (; d + 4 <= dh; d += 4) {
              const T q0 = q_row[d], q1 = q_row[d + 1], q2 = q_row[d + 2], q3 = q_row[d + 3];
              const T* const KOKKOS_RESTRICT k0 = kt_tile + d * kt_ld;
              const T* const KOKKOS_RESTRICT k1 = k0 + kt_ld;
              const T* const KOKKOS_RESTRICT k2 = k1 + kt_ld;
              const T* const KOKKOS_RESTRICT k3 = k2 + kt_ld;
              vector_axpy4(team, cols, s_row, q0, k0, q1, k1, q2, k2, q3, k3);
            }
            for (; d < dh; ++d) vector_axpy(team, cols, s_row, q_row[d], kt_tile + d * kt_ld);
            T tile_max = neg_inf;
            if (masked) {
              const index_t qi = qp[r];
              Kokkos::parallel_reduce(
                  Kokkos::ThreadVectorRange(team, cols),
                  [&](const index_t j, T& value) {
                    const T s = kp[j] > qi ? neg_inf : scale * s_row[j];
                    s_row[j] = s;
                    value = s > value ? s : value;
                  },
                  Kokkos::Max<T>(tile_max));
            } else {
              Kokkos::parallel_reduce(
                  Kokkos::ThreadVectorRange(team, cols),
                  [&](const index_t j, T& value) {
                    const T s = scale * s_row[j];
                    s_row[j] = s;
                    value = s > value ? s : value;
                  },
                  Kokkos::Max<T>(tile_max));
            }
            // Kokkos's Max identity is the lowest finite value, not -inf: a row whose keys are
            // all masked in this tile has no tile maximum.
            if (!(tile_max > lowest)) tile_max = neg_inf;
            const index_t i = i0 + r;
            const T m_old = row_max(b, h, i);
            const T m_new = tile_max > m_old ? tile_max : m_old;
            if (m_new == neg_inf) {
              // No unmasked key so far: keep m = -inf, l = 0, acc = 0.
              Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, cols), [&](const index_t j) { s_row[j] = T(0); });
              Kokkos::single(Kokkos::PerThread(team), [&]() { alpha[r] = T(1); });
              return;
            }
            T tile_sum = T(0);
            Kokkos::parallel_reduce(
                Kokkos::ThreadVectorRange(team, cols),
                [&](const index_t j, T& value) {
                  const T p = compat::exp(s_row[j] - m_new);  // exp(-inf) = 0 for masked keys
                  s_row[j] = p;
                  value += p;
                },
                tile_sum);
            const T a = compat::exp(m_old - m_new);  // 0 when m_old = -inf
            Kokkos::single(Kokkos::PerThread(team), [&]() {
              alpha[r] = a;
              row_max(b, h, i) = m_new;
              row_sum(b, h, i) = row_sum(b, h, i) * a + tile_sum;
            });
          });
          team.team_barrier();

          // acc = acc * alpha + P v
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows), [&](const index_t r) {
            T* const KOKKOS_RESTRICT o_row = o_tile + r * o_ld;
            const T* const KOKKOS_RESTRICT p_row = s_tile + r * kb;
            const T a = alpha[r];
            if (a != T(1)) {
              Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, dh), [&](const index_t d) { o_row[d] *= a; });
            }
            // Four keys per sweep over the output row.
            index_t j = 0;
            for (; j + 4 <= cols; j += 4) {
              const T p0 = p_row[j], p1 = p_row[j + 1], p2 = p_row[j + 2], p3 = p_row[j + 3];
              if (p0 == T(0) && p1 == T(0) && p2 == T(0) && p3 == T(0)) continue;  // masked keys
              const T* const KOKKOS_RESTRICT v0 = v_all + (j0 + j) * v_ld;
              const T* const KOKKOS_RESTRICT v1 = v0 + v_ld;
              const T* const KOKKOS_RESTRICT v2 = v1 + v_ld;
              const T* const KOKKOS_RESTRICT v3 = v2 + v_ld;
              vector_axpy4(team, dh, o_row, p0, v0, p1, v1, p2, v2, p3, v3);
            }
            for (; j < cols; ++j) {
              const T p = p_row[j];
              if (p != T(0)) vector_axpy(team, dh, o_row, p, v_all + (j0 + j) * v_ld);
            }
          });
        }
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

  const index_t qb = clamp_block(blocking.query_block, nq);
  const index_t kb = clamp_block(blocking.key_block, nk);
  const index_t kt_ld = kb + (kHostExecution ? 0 : 1);
  const index_t n_qtiles = ceil_div(nq, qb);
  const index_t n_ktiles = ceil_div(nk, kb);
  const T scale = T(1) / compat::sqrt(static_cast<T>(dh));
  const T neg_inf = -std::numeric_limits<T>::infinity();

  const std::size_t bytes =
      2 * scratch_bytes_for<T>(dh * kt_ld) + 2 * scratch_bytes_for<T>(qb * kb) + scratch_bytes_for<T>(qb * dh);
  int level = 0;
  const TeamPolicy policy = make_team_policy(batch * heads * n_ktiles, bytes, level);

  const index_t q_ld = q.stride(2), k_ld = k.stride(2), v_ld = v.stride(2), g_ld = dout.stride(2);
  const index_t dk_ld = dk.stride(2), dv_ld = dv.stride(2);

  Kokkos::parallel_for(
      "miniattn::attention_backward_accumulate", policy, KOKKOS_LAMBDA(const TeamMember& team) {
        const index_t league = team.league_rank();
        const index_t kt = league % n_ktiles;
        const index_t bh = league / n_ktiles;
        const index_t b = bh / heads, h = bh % heads;
        const index_t j0 = kt * kb;
        const index_t cols = (nk - j0) < kb ? (nk - j0) : kb;

        ScratchView<T> kt_view(team.team_scratch(level), dh * kt_ld);
        ScratchView<T> vt_view(team.team_scratch(level), dh * kt_ld);
        ScratchView<T> p_view(team.team_scratch(level), qb * kb);
        ScratchView<T> ds_view(team.team_scratch(level), qb * kb);
        ScratchView<T> dq_view(team.team_scratch(level), qb * dh);
        T* const kt_tile = kt_view.data();  // [dh][kt_ld]: k tile transposed
        T* const vt_tile = vt_view.data();  // [dh][kt_ld]: v tile transposed
        T* const p_tile = p_view.data();    // [qb][kb]: probabilities
        T* const ds_tile = ds_view.data();  // [qb][kb]: dP, then scale * dS
        T* const dq_rows = dq_view.data();  // [qb][dh]: this tile's dq contribution

        const T* const k_tile = &k(b, h, j0, 0);
        const T* const v_tile = &v(b, h, j0, 0);
        const T* const q_all = &q(b, h, 0, 0);
        const T* const g_all = &dout(b, h, 0, 0);
        T* const dk_tile = &dk(b, h, j0, 0);
        T* const dv_tile = &dv(b, h, j0, 0);
        const index_t* const kp = k_pos.data() + j0;

        index_t k_lo = 0, k_hi = 0;
        if (causal) team_position_range(team, kp, cols, k_lo, k_hi);

        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, cols), [&](const index_t j) {
          const T* const k_row = k_tile + j * k_ld;
          const T* const v_row = v_tile + j * v_ld;
          Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, dh), [&](const index_t d) {
            kt_tile[d * kt_ld + j] = k_row[d];
            vt_tile[d * kt_ld + j] = v_row[d];
          });
        });

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

          team.team_barrier();  // k/v tiles are loaded; the previous query tile is done with p/ds/dq

          // P and scale * dS for each query row.
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows), [&](const index_t r) {
            T* const KOKKOS_RESTRICT p_row = p_tile + r * kb;
            T* const KOKKOS_RESTRICT ds_row = ds_tile + r * kb;
            const index_t i = i0 + r;
            const T lse_i = lse(b, h, i);
            if (lse_i == neg_inf) {  // the row saw no key: it has no probability mass anywhere
              Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, cols), [&](const index_t j) {
                p_row[j] = T(0);
                ds_row[j] = T(0);
              });
              return;
            }
            const T delta_i = delta(b, h, i);
            const T* const KOKKOS_RESTRICT q_row = q_tile + r * q_ld;
            const T* const KOKKOS_RESTRICT g_row = g_tile + r * g_ld;
            Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, cols), [&](const index_t j) {
              p_row[j] = T(0);
              ds_row[j] = T(0);
            });
            index_t d = 0;
            for (; d + 4 <= dh; d += 4) {
              const T q0 = q_row[d], q1 = q_row[d + 1], q2 = q_row[d + 2], q3 = q_row[d + 3];
              const T g0 = g_row[d], g1 = g_row[d + 1], g2 = g_row[d + 2], g3 = g_row[d + 3];
              const T* const KOKKOS_RESTRICT k0 = kt_tile + d * kt_ld;
              const T* const KOKKOS_RESTRICT k1 = k0 + kt_ld;
              const T* const KOKKOS_RESTRICT k2 = k1 + kt_ld;
              const T* const KOKKOS_RESTRICT k3 = k2 + kt_ld;
              const T* const KOKKOS_RESTRICT v0 = vt_tile + d * kt_ld;
              const T* const KOKKOS_RESTRICT v1 = v0 + kt_ld;
              const T* const KOKKOS_RESTRICT v2 = v1 + kt_ld;
              const T* const KOKKOS_RESTRICT v3 = v2 + kt_ld;
              const T qs[4] = {q0, q1, q2, q3};
              const T gs[4] = {g0, g1, g2, g3};
              vector_axpy4_pair(team, cols, p_row, qs, k0, k1, k2, k3, ds_row, gs, v0, v1, v2, v3);
            }
            for (; d < dh; ++d) {
              vector_axpy_pair(team, cols, p_row, q_row[d], kt_tile + d * kt_ld, ds_row, g_row[d], vt_tile + d * kt_ld);
            }
            if (masked) {
              const index_t qi = qp[r];
              Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, cols), [&](const index_t j) {
                const T p = kp[j] > qi ? T(0) : compat::exp(scale * p_row[j] - lse_i);
                p_row[j] = p;
                ds_row[j] = scale * p * (ds_row[j] - delta_i);
              });
            } else {
              Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, cols), [&](const index_t j) {
                const T p = compat::exp(scale * p_row[j] - lse_i);
                p_row[j] = p;
                ds_row[j] = scale * p * (ds_row[j] - delta_i);
              });
            }
          });
          team.team_barrier();

          // dq += scale dS k  (other key tiles add to the same rows: atomic)
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows), [&](const index_t r) {
            T* const KOKKOS_RESTRICT dq_row = dq_rows + r * dh;
            const T* const KOKKOS_RESTRICT ds_row = ds_tile + r * kb;
            Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, dh), [&](const index_t d) { dq_row[d] = T(0); });
            index_t j = 0;
            for (; j + 4 <= cols; j += 4) {
              const T s0 = ds_row[j], s1 = ds_row[j + 1], s2 = ds_row[j + 2], s3 = ds_row[j + 3];
              if (s0 == T(0) && s1 == T(0) && s2 == T(0) && s3 == T(0)) continue;
              const T* const KOKKOS_RESTRICT k0 = k_tile + j * k_ld;
              const T* const KOKKOS_RESTRICT k1 = k0 + k_ld;
              const T* const KOKKOS_RESTRICT k2 = k1 + k_ld;
              const T* const KOKKOS_RESTRICT k3 = k2 + k_ld;
              vector_axpy4(team, dh, dq_row, s0, k0, s1, k1, s2, k2, s3, k3);
            }
            for (; j < cols; ++j) {
              const T ds = ds_row[j];
              if (ds != T(0)) vector_axpy(team, dh, dq_row, ds, k_tile + j * k_ld);
            }
            const index_t i = i0 + r;
            Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, dh),
                                 [&](const index_t d) { Kokkos::atomic_add(&dq(b, h, i, d), dq_row[d]); });
          });

          // dv += P^T dout, dk += scale dS^T q  (this team owns these key rows)
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, cols), [&](const index_t j) {
            T* const KOKKOS_RESTRICT dk_row = dk_tile + j * dk_ld;
            T* const KOKKOS_RESTRICT dv_row = dv_tile + j * dv_ld;
            index_t r = 0;
            for (; r + 4 <= rows; r += 4) {
              const T p0 = p_tile[r * kb + j], p1 = p_tile[(r + 1) * kb + j];
              const T p2 = p_tile[(r + 2) * kb + j], p3 = p_tile[(r + 3) * kb + j];
              const T s0 = ds_tile[r * kb + j], s1 = ds_tile[(r + 1) * kb + j];
              const T s2 = ds_tile[(r + 2) * kb + j], s3 = ds_tile[(r + 3) * kb + j];
              if (p0 == T(0) && p1 == T(0) && p2 == T(0) && p3 == T(0)) continue;  // then dS is 0 too
              const T* const KOKKOS_RESTRICT q0 = q_tile + r * q_ld;
              const T* const KOKKOS_RESTRICT q1 = q0 + q_ld;
              const T* const KOKKOS_RESTRICT q2 = q1 + q_ld;
              const T* const KOKKOS_RESTRICT q3 = q2 + q_ld;
              const T* const KOKKOS_RESTRICT g0 = g_tile + r * g_ld;
              const T* const KOKKOS_RESTRICT g1 = g0 + g_ld;
              const T* const KOKKOS_RESTRICT g2 = g1 + g_ld;
              const T* const KOKKOS_RESTRICT g3 = g2 + g_ld;
              const T ps[4] = {p0, p1, p2, p3};
              const T ss[4] = {s0, s1, s2, s3};
              vector_axpy4_pair(team, dh, dv_row, ps, g0, g1, g2, g3, dk_row, ss, q0, q1, q2, q3);
            }
            for (; r < rows; ++r) {
              const T p = p_tile[r * kb + j];
              const T ds = ds_tile[r * kb + j];
              if (p == T(0)) continue;  // then dS is 0 too
              vector_axpy_pair(team, dh, dv_row, p, g_tile + r * g_ld, dk_row, ds, q_tile + r * q_ld);
            }
          });
        }
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
