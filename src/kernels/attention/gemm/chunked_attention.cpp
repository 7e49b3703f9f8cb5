// Chunked attention through GEMMs (chunked_attention.hpp). For each pair of a
// query chunk (Cq rows: kernels.chunk) and a key chunk (Ck rows: the same, or
// half of it in bf16, gemm_key_chunk) that the mask does not hide entirely, for
// every sample and head at once:
//   forward:  S = scale Q K^T                                   batched GEMM
//             hide masked keys; m, l, O *= alpha; S -> P        one row kernel
//             O += P V                                          batched GEMM
//   backward: S = scale Q K^T, dP = dO V^T                      batched GEMMs
//             P = exp(S - lse) (masked), dS = scale P (dP - delta)  one row kernel
//             dV += P^T dO, dK += dS^T Q, dQ += dS K            batched GEMMs
// S and dP are kept in Acc<T>, P and dS in T (PairBuffers). When T is Acc<T>
// (fp32, fp64), P overwrites S and dS overwrites dP. When T is bf16 (the GEMMs
// take bf16 operands), S lies in an fp32 buffer and P in a bf16 one, and the
// backward's row kernel runs in two passes so that dP can take S's buffer: P
// from S; dV += P^T dO; dP = dO V^T; dS from P and dP, over P. Scores rounded
// to bf16, as plain bf16 attention stores them, cost a head that copies one
// token from a thousand positions back its precision: on the copy task
// (inputs/example_copy.yaml) bf16 runs with bf16 scores settled near 2.7-2.9
// where fp32 settles near 2.09; with fp32 scores they settle with fp32
// (docs/results/2026-11-26-cpu.md, "bf16: scores kept in fp32").
// The GEMMs are batched over heads as head_batches.hpp describes, so dK and dV
// sum over a K/V head's group of query heads in a fixed order. Chunk pairs run
// one after another in a fixed order: no atomics, the same bits on every run.
#include "kernels/attention/gemm/chunked_attention.hpp"

#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include "core/error.hpp"
#include "core/kokkos_compat.hpp"
#include "kernels/base/head_batches.hpp"
#include "kernels/base/reduction.hpp"
#include "kernels/base/team_policy.hpp"

namespace miniattn::kernels {

namespace {

using RowTeam = Kokkos::TeamPolicy<ExecSpace>::member_type;

struct Chunk {
  index_t first = 0, rows = 0;
};

Chunk chunk_of(index_t c, index_t chunk, index_t n) { return {c * chunk, std::min(chunk, n - c * chunk)}; }

// Sizes of one accumulate call.
template <class T>
struct Shape {
  index_t batch, heads, kv_heads, group, nq, nk, dh;
  Acc<T> scale;
  template <class Q, class K>
  Shape(const Q& q, const K& k)
      : batch(q.extent(0)), heads(q.extent(1)), kv_heads(k.extent(1)), group(heads / kv_heads), nq(q.extent(2)),
        nk(k.extent(2)), dh(q.extent(3)), scale(Acc<T>(1) / compat::sqrt(static_cast<Acc<T>>(dh))) {}
  index_t entries() const { return batch * kv_heads; }  // one batched GEMM: every (sample, K/V head)
};

// Whether P overwrites S and dS overwrites dP (T computes in T), else S and dP
// share an Acc<T> buffer and the backward's row kernel runs in two passes.
template <class T>
constexpr bool kScoresInPlace = std::is_same<T, Acc<T>>::value;

template <class T>
GemmChunkSides chunk_sides(const AttentionScope& scope, const Shape<T>& s) {
  attention_detail::require(scope.blocking.chunk > 0,
                            "gemm chunk rows must be > 0 (choose_attention_tiles resolves 0)");
  return gemm_chunk_sides(scope.blocking.chunk, s.nq, s.nk, !kScoresInPlace<T>);
}

// Which chunk pairs run, decided on the host from copies of the positions (and
// document ids) by the ranges of positions a chunk holds, as the fused kernel
// decides for its tiles. Both answers err on the side of computing.
class ChunkPairs {
 public:
  ChunkPairs(const AttentionScope& scope, GemmChunkSides sides)
      : mask_(scope.mask), q_ranges_(ranges(scope.q_pos, sides.queries)), k_ranges_(ranges(scope.k_pos, sides.keys)) {
    if (mask_.documents.extent(1) > 0)
      documents_ = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), mask_.documents);
  }
  index_t query_chunks() const { return static_cast<index_t>(q_ranges_.size()); }
  index_t key_chunks() const { return static_cast<index_t>(k_ranges_.size()); }

  // Whether some query of chunk qc may see some key of chunk kc, and whether
  // some pair may be hidden (then the row kernel tests each pair).
  bool meet(index_t qc, index_t kc, bool& partly_masked) const {
    const Range& q = q_ranges_[static_cast<std::size_t>(qc)];
    const Range& k = k_ranges_[static_cast<std::size_t>(kc)];
    partly_masked = false;
    if (!mask_.ranges_meet(q.lo, q.hi, k.lo, k.hi, partly_masked)) return false;
    if (documents_.extent(1) == 0) return true;
    // The samples share the GEMMs: the pair runs if any sample's documents
    // meet, and the rows of a sample whose documents do not are masked.
    bool any = false, all = true;
    const auto& d = documents_;
    for (index_t b = 0; b < static_cast<index_t>(d.extent(0)); ++b) {
      const bool meets = documents_meet(d(b, q.lo), d(b, q.hi), d(b, k.lo), d(b, k.hi), partly_masked);
      any = any || meets;
      all = all && meets;
    }
    partly_masked = partly_masked || !all;
    return any;
  }

 private:
  struct Range {
    index_t lo, hi;
  };
  static std::vector<Range> ranges(const View1<const index_t>& positions, index_t chunk) {
    const auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), positions);
    const index_t n = static_cast<index_t>(host.extent(0));
    std::vector<Range> result;
    for (index_t first = 0; first < n; first += chunk) {
      const index_t last = std::min(n, first + chunk);
      Range r{host(first), host(first)};
      for (index_t i = first; i < last; ++i) r = {std::min(r.lo, host(i)), std::max(r.hi, host(i))};
      result.push_back(r);
    }
    return result;
  }

  AttentionMask mask_;
  std::vector<Range> q_ranges_, k_ranges_;
  Kokkos::View<const index_t**, Kokkos::LayoutRight, Kokkos::HostSpace> documents_;
};

// The row kernels run one thread per query row of every head over that row of
// its score block (reduction.hpp's row machinery: SIMD packs and pack_exp on
// the host, a warp or a wavefront of vector lanes on a GPU), in Acc<T>: scores and probabilities are
// stored as T (bf16 for bf16 runs), the statistics and the output as Acc<T>.
// Hidden keys of a partly masked pair are tested one by one. On a GPU a team
// takes kGpuMemoryRowsPerTeam rows (reduction.hpp).
template <class T>
using Pack = typename simd::Pack<Acc<T>>::type;

// Where a chunk pair's blocks lie (see the top of this file).
template <class T>
struct PairBuffers {
  Acc<T>* logits;  // S
  T* probs;        // P
  Acc<T>* dp;      // dP
  T* ds;           // dS
};

template <class T>
PairBuffers<T> pair_buffers(const AttentionWorkspace<T>& w) {
  if constexpr (kScoresInPlace<T>)
    return {w.scores.data(), w.scores.data(), w.score_grads.data(), w.score_grads.data()};
  else
    return {w.logits.data(), w.scores.data(), w.logits.data(), w.scores.data()};
}

// Forward: hides masked keys, folds the row's maximum into the running state,
// rescales the running output row and writes P = exp(S - m).
template <class T>
struct ForwardRows {
  PairBuffers<T> at;
  Chunk qc, kc;
  index_t heads;
  View1<const index_t> q_pos, k_pos;
  AttentionMask mask;
  bool partly_masked;
  View4<Acc<T>> out_acc;
  View3<Acc<T>> row_max, row_sum;

  KOKKOS_INLINE_FUNCTION void operator()(const RowTeam& team) const {
    using A = Acc<T>;
    using V = Pack<T>;
    const A neg_inf = -compat::infinity<A>();
    const index_t row = team_row(team), bh = row / qc.rows, b = bh / heads, h = bh % heads;
    if (b >= index_t(out_acc.extent(0))) return;
    const index_t i = qc.first + row % qc.rows, query = q_pos(i);
    A* const s = at.logits + row * kc.rows;
    T* const p = at.probs + row * kc.rows;
    if (partly_masked) {
      team_vector_for<A>(team, kc.rows, [&](const index_t c0, const int width) {
        for (int w = 0; w < width; ++w)
          if (mask.hides(b, query, k_pos(kc.first + c0 + w))) s[c0 + w] = neg_inf;
      });
    }
    A block_max = team_vector_max<A>(team, kc.rows, [&](const index_t c0, const int width) {
      return simd::load_n(s + c0, width);
    });
    // Kokkos::Max (the GPU's lanes) starts from the lowest finite value, which a row of hidden keys keeps.
    if (!(block_max > Kokkos::reduction_identity<A>::max())) block_max = neg_inf;
    const A m_old = row_max(b, h, i), m_new = block_max > m_old ? block_max : m_old;
    // A row that has seen no unmasked key keeps m = -inf: subtracting 0, not -inf, avoids NaN.
    const V base = simd::pack_splat<V>(m_new == neg_inf ? A(0) : m_new);
    // The row sum adds the probabilities as stored (rounded to T), as P V multiplies them.
    const A sum = team_vector_sum<A>(team, kc.rows, [&](const index_t c0, const int width) {
      simd::store_n(p + c0, simd::kernel_exp<A>(V(simd::load_n(s + c0, width) - base)), width);  // exp(-inf) = 0
      return simd::load_n(p + c0, width);
    });
    const A alpha = simd::pack_lane(simd::kernel_exp<A>(V(simd::pack_splat<V>(m_old) - base)), 0);
    // Past a row's first chunks its maximum seldom moves: alpha = exp(0) = 1
    // exactly, and the rescale, a read and write of the row, would change no bit.
    A* const o = &out_acc(b, h, i, 0);
    if (alpha != A(1))
      team_vector_for<A>(team, out_acc.extent(3), [&](const index_t c0, const int width) {
        simd::pack_store_n(o + c0, V(simd::pack_load_n<V>(o + c0, width) * simd::pack_splat<V>(alpha)), width);
      });
    Kokkos::single(Kokkos::PerThread(team), [&]() {
      row_sum(b, h, i) = row_sum(b, h, i) * alpha + sum;
      row_max(b, h, i) = m_new;
    });
  }
};

// Backward: P = exp(S - lse) (0 where masked and in rows that saw no key),
// and dS = scale P (dP - delta); both in one pass, or (bf16) as two passes.
enum class RowPass { both, probabilities, gradients };
template <class T>
struct BackwardRows {
  PairBuffers<T> at;
  RowPass pass;
  Chunk qc, kc;
  index_t heads;
  View1<const index_t> q_pos, k_pos;
  AttentionMask mask;
  bool partly_masked;
  View3<const Acc<T>> lse, delta;
  Acc<T> scale;

  KOKKOS_INLINE_FUNCTION void operator()(const RowTeam& team) const {
    using A = Acc<T>;
    using V = Pack<T>;
    const index_t row = team_row(team), bh = row / qc.rows, b = bh / heads, h = bh % heads;
    if (b >= index_t(lse.extent(0))) return;
    const index_t i = qc.first + row % qc.rows, query = q_pos(i);
    const A lse_i = lse(b, h, i);
    const V shift = simd::pack_splat<V>(lse_i == -compat::infinity<A>() ? compat::infinity<A>() : lse_i);
    const V delta_i = simd::pack_splat<V>(delta(b, h, i)), vscale = simd::pack_splat<V>(scale);
    const A* const s = at.logits + row * kc.rows;
    const A* const dp = at.dp + row * kc.rows;
    T* const p = at.probs + row * kc.rows;
    T* const ds = at.ds + row * kc.rows;
    team_vector_for<A>(team, kc.rows, [&](const index_t c0, const int width) {
      if (pass != RowPass::gradients) {
        simd::store_n(p + c0, simd::kernel_exp<A>(V(simd::load_n(s + c0, width) - shift)), width);
        if (partly_masked) {  // exp(x - inf) = 0 already in rows that saw no key
          for (int w = 0; w < width; ++w)
            if (mask.hides(b, query, k_pos(kc.first + c0 + w))) p[c0 + w] = narrow<T>(A(0));
        }
      }
      if (pass == RowPass::probabilities) return;
      const V pv = simd::load_n(p + c0, width), dpv = simd::load_n(dp + c0, width);
      simd::store_n(ds + c0, V(vscale * pv * (dpv - delta_i)), width);
    });
  }
};

template <class T>
void require_workspace(const AttentionWorkspace<T>& workspace, const Shape<T>& s, GemmChunkSides chunk, bool backward) {
  const index_t key_rows = std::min(chunk.keys, s.nk);
  const auto needed = static_cast<std::size_t>(s.batch * s.heads * std::min(chunk.queries, s.nq) * key_rows);
  constexpr bool in_place = kScoresInPlace<T>;  // the second buffer: score_grads, else logits
  const std::size_t second = in_place ? workspace.score_grads.extent(0) : workspace.logits.extent(0);
  if (workspace.scores.extent(0) < needed || ((backward || !in_place) && second < needed))
    throw RuntimeFailure("attention (gemm): the workspace holds fewer than the " + std::to_string(needed) +
                         " values of a chunk pair's score blocks");
  if (backward && !std::is_same<T, Acc<T>>::value &&
      static_cast<index_t>(workspace.dk_acc.extent(2)) < key_rows)
    throw RuntimeFailure("attention (gemm): the workspace's dk/dv accumulators hold fewer rows than a key chunk");
}

// The rows of chunk pair (qc, kc) of each operand: a query-side tensor's rows
// of group member g, a key-side tensor's rows, member g's score blocks.
template <class T>
struct PairOperands {
  const Shape<T>& s;
  Chunk qc, kc;
  template <class U>
  MatrixBatch<U> queries(U* x, index_t g) const { return head_rows(x, s.nq, s.dh, s.group, g, qc.first, qc.rows); }
  template <class U>
  MatrixBatch<U> keys(U* x) const { return head_rows(x, s.nk, s.dh, index_t(1), index_t(0), kc.first, kc.rows); }
  template <class U>
  MatrixBatch<U> blocks(U* x, index_t g) const { return score_blocks(x, s.group, g, qc.rows, kc.rows); }
};

template <class T>
void forward_chunk_pair(const Shape<T>& s, const View4<const T>& q, const View4<const T>& k, const View4<const T>& v,
                        ForwardRows<T> rows) {
  const PairOperands<T> at{s, rows.qc, rows.kc};
  const index_t E = s.entries();
  for (index_t g = 0; g < s.group; ++g)
    batched_gemm<T>('N', 'T', s.scale, at.queries(q.data(), g), at.keys(k.data()), Acc<T>(0),
                    at.blocks(rows.at.logits, g), E);
  Kokkos::parallel_for("miniattn::chunked_attention_forward_rows",
                       row_team_policy(s.batch * s.heads * rows.qc.rows, kGpuMemoryRowsPerTeam), rows);
  for (index_t g = 0; g < s.group; ++g)
    batched_gemm<T>('N', 'N', Acc<T>(1), read_only(at.blocks(rows.at.probs, g)), at.keys(v.data()), Acc<T>(1),
                    at.queries(rows.out_acc.data(), g), E);
}

// The gradients' GEMMs of one chunk pair, after the row kernel.
// dk, dv: the caller's (fp32, fp64) or the workspace's Acc<T> copies (bf16).
// The keys' gradients: accumulated straight into the caller's dk, dv when T
// computes in T; else key chunk by key chunk in the workspace's Acc<T>
// buffers ([B, KV, chunk, Dh]), added to the chunk's rows of dk, dv with one
// rounding once all its query chunks are done.
template <class T>
struct KeyGradients {
  static constexpr bool separate = !std::is_same<T, Acc<T>>::value;
  View4<T> dk, dv;
  View4<Acc<T>> dk_acc, dv_acc;

  KeyGradients(const View4<T>& k_grads, const View4<T>& v_grads, const AttentionWorkspace<T>& workspace)
      : dk(k_grads), dv(v_grads), dk_acc(accumulator(k_grads, workspace.dk_acc)),
        dv_acc(accumulator(v_grads, workspace.dv_acc)) {}

  // Rows of key chunk kc of dk or dv as one GEMM batch over (sample, K/V head).
  MatrixBatch<Acc<T>> rows(const View4<Acc<T>>& grads, Chunk kc) const {
    if (separate) return head_rows(grads.data(), index_t(grads.extent(2)), index_t(grads.extent(3)), 1, 0, 0, kc.rows);
    return head_rows(grads.data(), index_t(grads.extent(2)), index_t(grads.extent(3)), 1, 0, kc.first, kc.rows);
  }
  void begin(Chunk) const {
    if (!separate) return;
    Kokkos::deep_copy(dk_acc, Acc<T>(0));
    Kokkos::deep_copy(dv_acc, Acc<T>(0));
  }
  void end(Chunk kc) const {
    if constexpr (separate) {
      add_rounded_rows<T>(dk_acc, kc.first, kc.rows, dk);
      add_rounded_rows<T>(dv_acc, kc.first, kc.rows, dv);
    }
  }

 private:
  static View4<Acc<T>> accumulator(const View4<T>& own, const View4<Acc<T>>& chunk_buffers) {
    if constexpr (separate) {
      return chunk_buffers;
    } else {
      (void)chunk_buffers;
      return own;
    }
  }
};

// The operands of the gradients' GEMMs.
template <class T>
struct BackwardOperands {
  View4<const T> q, k, v, dout;
  View4<Acc<T>> dq;
  const KeyGradients<T>& keys;
};

template <class T>
void backward_chunk_pair(const Shape<T>& s, const BackwardOperands<T>& x, BackwardRows<T> rows) {
  constexpr bool one_pass = kScoresInPlace<T>;  // dP has a buffer of its own
  const PairOperands<T> at{s, rows.qc, rows.kc};
  const index_t E = s.entries();
  const auto run_rows = [&](RowPass pass) {
    rows.pass = pass;
    Kokkos::parallel_for("miniattn::chunked_attention_backward_rows",
                         row_team_policy(s.batch * s.heads * rows.qc.rows, kGpuMemoryRowsPerTeam), rows);
  };
  const auto score_gradients = [&]() {  // dP = dO V^T
    for (index_t g = 0; g < s.group; ++g)
      batched_gemm<T>('N', 'T', Acc<T>(1), at.queries(x.dout.data(), g), at.keys(x.v.data()), Acc<T>(0),
                      at.blocks(rows.at.dp, g), E);
  };
  for (index_t g = 0; g < s.group; ++g)
    batched_gemm<T>('N', 'T', s.scale, at.queries(x.q.data(), g), at.keys(x.k.data()), Acc<T>(0),
                    at.blocks(rows.at.logits, g), E);
  if (one_pass) score_gradients();
  run_rows(one_pass ? RowPass::both : RowPass::probabilities);
  for (index_t g = 0; g < s.group; ++g)
    batched_gemm<T>('T', 'N', Acc<T>(1), read_only(at.blocks(rows.at.probs, g)), at.queries(x.dout.data(), g),
                    Acc<T>(1), x.keys.rows(x.keys.dv_acc, at.kc), E);
  if (!one_pass) {
    score_gradients();
    run_rows(RowPass::gradients);
  }
  for (index_t g = 0; g < s.group; ++g) {
    const auto ds = read_only(at.blocks(rows.at.ds, g));
    batched_gemm<T>('T', 'N', Acc<T>(1), ds, at.queries(x.q.data(), g), Acc<T>(1), x.keys.rows(x.keys.dk_acc, at.kc),
                    E);
    batched_gemm<T>('N', 'N', Acc<T>(1), ds, at.keys(x.k.data()), Acc<T>(1), at.queries(x.dq.data(), g), E);
  }
}

}  // namespace

template <class T>
void chunked_forward_accumulate(const View4<const T>& q, const View4<const T>& k, const View4<const T>& v,
                                const AttentionScope& scope, const View4<Acc<T>>& out_acc,
                                const View3<Acc<T>>& row_max, const View3<Acc<T>>& row_sum,
                                const AttentionWorkspace<T>& workspace) {
  const Shape<T> s(q, k);
  const GemmChunkSides chunk = chunk_sides(scope, s);
  require_workspace(workspace, s, chunk, false);
  const ChunkPairs pairs(scope, chunk);
  for (index_t qi = 0; qi < pairs.query_chunks(); ++qi)
    for (index_t ki = 0; ki < pairs.key_chunks(); ++ki) {
      bool partly_masked = false;
      if (!pairs.meet(qi, ki, partly_masked)) continue;
      const ForwardRows<T> rows{pair_buffers(workspace), chunk_of(qi, chunk.queries, s.nq),
                                chunk_of(ki, chunk.keys, s.nk), s.heads, scope.q_pos, scope.k_pos, scope.mask,
                                partly_masked, out_acc, row_max, row_sum};
      forward_chunk_pair<T>(s, q, k, v, rows);
    }
}

template <class T>
void chunked_backward_accumulate(const View4<const T>& q, const View4<const T>& k, const View4<const T>& v,
                                 const View4<const T>& dout, const View3<const Acc<T>>& lse,
                                 const View3<const Acc<T>>& delta, const AttentionScope& scope,
                                 const View4<Acc<T>>& dq, const View4<T>& dk, const View4<T>& dv,
                                 const AttentionWorkspace<T>& workspace) {
  const Shape<T> s(q, k);
  const GemmChunkSides chunk = chunk_sides(scope, s);
  require_workspace(workspace, s, chunk, true);
  const ChunkPairs pairs(scope, chunk);
  const KeyGradients<T> key_gradients(dk, dv, workspace);
  const BackwardOperands<T> operands{q, k, v, dout, dq, key_gradients};
  for (index_t ki = 0; ki < pairs.key_chunks(); ++ki) {
    const Chunk kc = chunk_of(ki, chunk.keys, s.nk);
    bool started = false;
    for (index_t qi = 0; qi < pairs.query_chunks(); ++qi) {
      bool partly_masked = false;
      if (!pairs.meet(qi, ki, partly_masked)) continue;
      if (!started) key_gradients.begin(kc);
      started = true;
      const BackwardRows<T> rows{pair_buffers(workspace), RowPass::both, chunk_of(qi, chunk.queries, s.nq), kc,
                                 s.heads, scope.q_pos, scope.k_pos, scope.mask, partly_masked, lse, delta, s.scale};
      backward_chunk_pair<T>(s, operands, rows);
    }
    if (started) key_gradients.end(kc);
  }
}

#define MINIATTN_INSTANTIATE_CHUNKED_ATTENTION(T)                                                                \
  template void chunked_forward_accumulate<T>(const View4<const T>&, const View4<const T>&, const View4<const T>&, \
                                              const AttentionScope&, const View4<Acc<T>>&, const View3<Acc<T>>&, \
                                              const View3<Acc<T>>&, const AttentionWorkspace<T>&);                \
  template void chunked_backward_accumulate<T>(                                                                  \
      const View4<const T>&, const View4<const T>&, const View4<const T>&, const View4<const T>&,               \
      const View3<const Acc<T>>&, const View3<const Acc<T>>&, const AttentionScope&, const View4<Acc<T>>&,      \
      const View4<T>&, const View4<T>&, const AttentionWorkspace<T>&);
MINIATTN_INSTANTIATE_CHUNKED_ATTENTION(float)
MINIATTN_INSTANTIATE_CHUNKED_ATTENTION(double)
MINIATTN_INSTANTIATE_CHUNKED_ATTENTION(bf16)
#undef MINIATTN_INSTANTIATE_CHUNKED_ATTENTION

}  // namespace miniattn::kernels
