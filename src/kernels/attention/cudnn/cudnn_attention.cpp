// The cudnn kernel (cudnn_attention.hpp): plans, calls and the merges.
#include "kernels/attention/cudnn/cudnn_attention.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/kokkos_compat.hpp"
#include "kernels/attention/gemm/chunked_attention.hpp"
#include "kernels/base/reduction.hpp"

namespace miniattn::kernels {

namespace {

using RowPolicy = Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<index_t>>;
using Member = Kokkos::TeamPolicy<ExecSpace>::member_type;

// The merges walk rows of Dh contiguous values: one row per GPU thread, its
// values over the thread's vector lanes, so that a warp reads whole rows
// (a thread looping over its own row read 32 rows Dh apart at each step).

CudnnTally& tally() {
  static CudnnTally counts;
  return counts;
}

std::vector<index_t> host_positions(const View1<const index_t>& positions) {
  const auto host = Kokkos::create_mirror_view_and_copy(HostSpace(), positions);
  return std::vector<index_t>(host.data(), host.data() + host.extent(0));
}

SdpaCallShape call_shape(const View4<const bf16>& q, const View4<const bf16>& k, const CudnnCall& call) {
  SdpaCallShape shape;
  shape.batch = call.sample < 0 ? static_cast<index_t>(q.extent(0)) : 1;
  shape.heads = q.extent(1);
  shape.kv_heads = k.extent(1);
  shape.head_dim = q.extent(3);
  shape.query_rows = q.extent(2);
  shape.key_rows = k.extent(2);
  shape.call = call;
  return shape;
}

// The samples a call reads and writes: the block's all, or its one (packed documents).
struct Samples {
  index_t first = 0, count = 0;
};
Samples samples_of(const CudnnCall& call, index_t batch) {
  return call.sample < 0 ? Samples{0, batch} : Samples{call.sample, 1};
}

SdpaRunner& runner_of(const CudnnBlocks& blocks) {
  if (!blocks.runner)
    throw RuntimeFailure("kernels.attention cudnn: this build of miniattn has no cuDNN (configure a CUDA build with "
                         "-DMINIATTN_ENABLE_CUDNN=ON)");
  return *blocks.runner;
}

// The call's rows folded into the running state as a block of row maximum
// s_c (its LSE, [B, H, its rows]), row sum 1 and weighted sum O_c (its
// normalised output).
void merge_call_output(const CudnnCall& call, const View4<const bf16>& call_out, const View1<const float>& call_lse,
                       const View4<float>& out_acc, const View3<float>& row_max, const View3<float>& row_sum) {
  const index_t heads = out_acc.extent(1), dh = out_acc.extent(3), rows = call.query_count;
  const index_t first = call.query_offset;
  const Samples samples = samples_of(call, out_acc.extent(0));
  const index_t total = samples.count * heads * rows;
  const float neg_inf = -compat::infinity<float>();
  Kokkos::parallel_for(
      "miniattn::cudnn_merge_output", row_team_policy(total, kGpuMemoryRowsPerTeam),
      KOKKOS_LAMBDA(const Member& team) {
        const index_t row = team_row(team);
        if (row >= total) return;
        const index_t i = first + row % rows, bh = row / rows, b = samples.first + bh / heads, h = bh % heads;
        const float m = row_max(b, h, i), s = call_lse(row);
        const float m_new = m > s ? m : s;
        const float keep = m == neg_inf ? 0.0f : compat::exp(m - m_new), weight = compat::exp(s - m_new);
        Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, dh), [&](index_t d) {
          out_acc(b, h, i, d) = out_acc(b, h, i, d) * keep + static_cast<float>(call_out(b, h, i, d)) * weight;
        });
        Kokkos::single(Kokkos::PerThread(team), [&]() {
          row_sum(b, h, i) = row_sum(b, h, i) * keep + weight;
          row_max(b, h, i) = m_new;
        });
      });
}

// The global LSE of a call's rows, [B, H, its rows], for its backward.
void copy_call_lse(const CudnnCall& call, const View3<const float>& lse, const View1<float>& call_lse) {
  const index_t heads = lse.extent(1), rows = call.query_count, first = call.query_offset;
  const Samples samples = samples_of(call, lse.extent(0));
  Kokkos::parallel_for(
      "miniattn::cudnn_call_lse", RowPolicy(0, samples.count * heads * rows), KOKKOS_LAMBDA(const index_t row) {
        const index_t bh = row / rows;
        call_lse(row) = lse(samples.first + bh / heads, bh % heads, first + row % rows);
      });
}

// cuDNN's backward refuses a call of one query and one key (s_q = s_kv = 1),
// which a window gives where all a block shows is its corner pair: that
// pair's share of the gradients, computed here and written where cuDNN writes
// a call's (dq's row in `rows`, the key's dk, dv), delta being D = rowsum(dO O).
void single_pair_backward(const CudnnCall& call, const View4<const bf16>& q, const View4<const bf16>& k,
                          const View4<const bf16>& v, const View4<const bf16>& dout, const View3<const float>& lse,
                          const View3<const float>& delta, const CudnnBlocks& blocks) {
  const index_t i = call.query_offset, j = call.key_offset;
  const index_t kv_heads = k.extent(1), dh = q.extent(3), group = q.extent(1) / kv_heads;
  const float scale = 1.0f / compat::sqrt(static_cast<float>(dh));
  const View4<bf16> dq = blocks.rows, dk = blocks.dk, dv = blocks.dv;
  const Samples samples = samples_of(call, q.extent(0));
  Kokkos::parallel_for(
      "miniattn::cudnn_single_pair_backward", RowPolicy(0, samples.count * kv_heads), KOKKOS_LAMBDA(const index_t bg) {
        const index_t b = samples.first + bg / kv_heads, g = bg % kv_heads;
        const auto pair = [&](index_t h, float& p, float& ds) {  // query head h against the key
          float s = 0.0f, dp = 0.0f;
          for (index_t d = 0; d < dh; ++d) {
            s += static_cast<float>(q(b, h, i, d)) * static_cast<float>(k(b, g, j, d));
            dp += static_cast<float>(dout(b, h, i, d)) * static_cast<float>(v(b, g, j, d));
          }
          p = compat::exp(scale * s - lse(b, h, i));
          ds = p * (dp - delta(b, h, i));
        };
        float p = 0.0f, ds = 0.0f;
        for (index_t h = g * group; h < (g + 1) * group; ++h) {
          pair(h, p, ds);
          for (index_t d = 0; d < dh; ++d) dq(b, h, i, d) = bf16(scale * ds * static_cast<float>(k(b, g, j, d)));
        }
        for (index_t d = 0; d < dh; ++d) {
          float dk_d = 0.0f, dv_d = 0.0f;
          for (index_t h = g * group; h < (g + 1) * group; ++h) {
            pair(h, p, ds);
            dk_d += ds * static_cast<float>(q(b, h, i, d));
            dv_d += p * static_cast<float>(dout(b, h, i, d));
          }
          dk(b, g, j, d) = bf16(scale * dk_d);
          dv(b, g, j, d) = bf16(dv_d);
        }
      });
}

// Rows [first, first + count) of the samples' [heads, n, Dh] in a [B, heads,
// n, Dh] tensor: to += from, in fp32, rounded once where `to` is bf16 (the
// travelling dk, dv).
template <class From, class To>
void add_rows(const View4<From>& from, const View4<To>& to, index_t first, index_t count, const Samples& samples) {
  const index_t heads = to.extent(1), dh = to.extent(3), total = samples.count * heads * count;
  Kokkos::parallel_for(
      "miniattn::cudnn_add_rows", row_team_policy(total, kGpuMemoryRowsPerTeam), KOKKOS_LAMBDA(const Member& team) {
        const index_t row = team_row(team);
        if (row >= total) return;
        const index_t i = first + row % count, bh = row / count, b = samples.first + bh / heads, h = bh % heads;
        Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, dh), [&](index_t d) {
          to(b, h, i, d) = narrow<To>(widen(to(b, h, i, d)) + static_cast<float>(from(b, h, i, d)));
        });
      });
}

void count_calls(const BlockPlan& plan, const SdpaRunner& runner) {
  tally().calls += static_cast<std::int64_t>(plan.calls.size());
  tally().cut_calls += plan.cut_calls;
  tally().graphs = runner.graphs_built();
}

}  // namespace

CudnnTally cudnn_tally() { return tally(); }

CudnnBlocks::CudnnBlocks(const AttentionShape& s, const AttentionBlocking& blocking)
    : runner(default_sdpa_runner(blocking.deterministic)),
      rows("cudnn.call_rows", s.batch, s.heads, s.queries, s.head_dim),
      stats("cudnn.call_lse", s.batch * s.heads * s.queries),
      dk("cudnn.call_dk", s.batch, s.kv_heads, s.keys, s.head_dim),
      dv("cudnn.call_dv", s.batch, s.kv_heads, s.keys, s.head_dim),
      dk_sum("cudnn.block_dk", s.batch, s.kv_heads, s.keys, s.head_dim),
      dv_sum("cudnn.block_dv", s.batch, s.kv_heads, s.keys, s.head_dim),
      rows_per_call_(blocking.deterministic ? blocking.cudnn_rows_per_call : 0),
      documents_on_gemm_(!blocking.cudnn_document_calls),
      workspace_(Kokkos::view_alloc(Kokkos::WithoutInitializing, "cudnn.workspace"),
                 cudnn_workspace_bytes(s, blocking)) {
  tally().workspace_planned_bytes = workspace_.extent(0);
  tally().workspace_needed_bytes = 0;
  tally().workspace_bytes = workspace_.extent(0);
}

std::size_t CudnnBlocks::bytes() const {
  return (rows.span() + dk.span() + dv.span()) * sizeof(bf16) +
         (stats.span() + dk_sum.span() + dv_sum.span()) * sizeof(float) + workspace_.span();
}

void* CudnnBlocks::workspace_for(const SdpaCallShape& call, bool backward) {
  const std::size_t needed = runner->workspace_needed(call, backward);
  tally().workspace_needed_bytes = std::max(tally().workspace_needed_bytes, needed);
  if (needed > workspace_.extent(0)) {
    workspace_ = View1<unsigned char>();
    workspace_ = View1<unsigned char>(Kokkos::view_alloc(Kokkos::WithoutInitializing, "cudnn.workspace"), needed);
    tally().workspace_bytes = needed;
  }
  return workspace_.data();
}

std::size_t cudnn_blocks_bytes(const AttentionShape& s) {
  const auto count = [](index_t x) { return static_cast<std::size_t>(x); };
  const std::size_t query_rows = count(s.batch) * count(s.heads) * count(s.queries);
  const std::size_t key_values = count(s.batch) * count(s.kv_heads) * count(s.keys) * count(s.head_dim);
  return (query_rows * count(s.head_dim) + 2 * key_values) * sizeof(bf16) +
         (query_rows + 2 * key_values) * sizeof(float);
}

std::size_t cudnn_call_workspace_bytes(const AttentionShape& s, index_t query_rows, index_t key_rows,
                                       bool deterministic) {
  const auto count = [](index_t x) { return static_cast<std::size_t>(x); };
  const auto ceil64 = [&](index_t x) { return (count(x) + 63) / 64 * 64; };
  const std::size_t row_sets = count(s.batch) * count(s.heads);
  const std::size_t softmax_sums = row_sets * count(query_rows) * sizeof(float);
  const std::size_t dq_or_ds = deterministic ? row_sets * ceil64(query_rows) * ceil64(key_rows) * sizeof(bf16)
                                             : row_sets * count(query_rows) * count(s.head_dim) * sizeof(float);
  return dq_or_ds + softmax_sums + 256;
}

std::size_t cudnn_workspace_bytes(const AttentionShape& s, const AttentionBlocking& blocking) {
  if (blocking.kernel != AttentionKernel::cudnn) return 0;
  const index_t limit = blocking.deterministic ? blocking.cudnn_rows_per_call : 0;
  const index_t rows = limit > 0 ? std::min(limit, s.queries) : s.queries;
  return cudnn_call_workspace_bytes(s, rows, s.keys, blocking.deterministic);
}

namespace {

// The block's packed documents on the host: each of its samples' document of
// each query and key row. A position past the documents' end is hidden
// (AttentionMask::hides_position): ids no row of the documents has.
BlockDocuments block_documents(const View2<const index_t>& documents, index_t samples,
                               const std::vector<index_t>& q_pos, const std::vector<index_t>& k_pos) {
  if (static_cast<index_t>(documents.extent(0)) < samples)
    throw RuntimeFailure("kernels.attention cudnn: documents of " + std::to_string(documents.extent(0)) +
                         " samples for a block of " + std::to_string(samples));
  const auto ids = Kokkos::create_mirror_view_and_copy(HostSpace(), documents);
  const index_t n = ids.extent(1);
  BlockDocuments block{samples, {}, {}};
  for (index_t b = 0; b < samples; ++b) {
    for (const index_t p : q_pos) block.query.push_back(p < n ? ids(b, p) : -1);
    for (const index_t p : k_pos) block.key.push_back(p < n ? ids(b, p) : -2);
  }
  return block;
}

}  // namespace

// Plans without documents are kept by positions; with documents, which change
// every step, planned at every call (from the kept positions), unless they go
// to the gemm kernel whole (blocking.cudnn_document_calls false).
const BlockPlan& CudnnBlocks::plan(const AttentionScope& scope, index_t samples) {
  const bool documents = scope.mask.documents.extent(1) > 0;
  const PlanKey key{scope.q_pos.data(), scope.k_pos.data(), static_cast<index_t>(scope.q_pos.extent(0)),
                    static_cast<index_t>(scope.k_pos.extent(0)), scope.mask.causal, scope.mask.window, documents};
  auto found = plans_.find(key);
  const PositionRules rules{scope.mask.causal, scope.mask.window};
  if (found == plans_.end()) {
    Planned made{BlockPlan{}, host_positions(scope.q_pos), host_positions(scope.k_pos), scope.q_pos, scope.k_pos};
    made.plan.whole_block_fallback = documents && documents_on_gemm_;
    if (!documents) made.plan = plan_block(made.q_host, made.k_host, rules, nullptr, rows_per_call_);
    found = plans_.emplace(key, std::move(made)).first;
  }
  const Planned& planned = found->second;
  if (!documents || documents_on_gemm_) return planned.plan;
  const BlockDocuments ids = block_documents(scope.mask.documents, samples, planned.q_host, planned.k_host);
  document_plan_ = plan_block(planned.q_host, planned.k_host, rules, &ids, rows_per_call_);
  return document_plan_;
}

void cudnn_forward_accumulate(const View4<const bf16>& q, const View4<const bf16>& k, const View4<const bf16>& v,
                              const AttentionScope& scope, const View4<float>& out_acc, const View3<float>& row_max,
                              const View3<float>& row_sum, const AttentionWorkspace<bf16>& workspace) {
  CudnnBlocks& blocks = *workspace.cudnn;
  const BlockPlan& plan = blocks.plan(scope, q.extent(0));
  ++tally().blocks;
  if (plan.whole_block_fallback) {
    ++tally().fallback_blocks;
    chunked_forward_accumulate<bf16>(q, k, v, scope, out_acc, row_max, row_sum, workspace);
    return;
  }
  SdpaRunner& runner = runner_of(blocks);
  for (const CudnnCall& call : plan.calls) {
    const SdpaCallShape shape = call_shape(q, k, call);
    void* workspace = blocks.workspace_for(shape, false);
    runner.forward(shape, q.data(), k.data(), v.data(), blocks.rows.data(), blocks.stats.data(), workspace);
    merge_call_output(call, blocks.rows, blocks.stats, out_acc, row_max, row_sum);
  }
  count_calls(plan, runner);
}

void cudnn_backward_accumulate(const View4<const bf16>& q, const View4<const bf16>& k, const View4<const bf16>& v,
                               const View4<const bf16>& out, const View4<const bf16>& dout,
                               const View3<const float>& lse, const View3<const float>& delta,
                               const AttentionScope& scope, const View4<float>& dq, const View4<bf16>& dk,
                               const View4<bf16>& dv, const AttentionWorkspace<bf16>& workspace) {
  CudnnBlocks& blocks = *workspace.cudnn;
  const BlockPlan& plan = blocks.plan(scope, q.extent(0));
  ++tally().blocks;
  if (plan.whole_block_fallback) {
    ++tally().fallback_blocks;
    chunked_backward_accumulate<bf16>(q, k, v, dout, lse, delta, scope, dq, dk, dv, workspace);
    return;
  }
  SdpaRunner& runner = runner_of(blocks);
  const bool summed = plan.calls.size() > 1;  // one call's dk, dv go straight to the block's
  if (summed) {
    Kokkos::deep_copy(blocks.dk_sum, 0.0f);
    Kokkos::deep_copy(blocks.dv_sum, 0.0f);
  }
  for (const CudnnCall& call : plan.calls) {
    if (call.query_count == 1 && call.key_count == 1) {
      single_pair_backward(call, q, k, v, dout, lse, delta, blocks);
    } else {
      copy_call_lse(call, lse, blocks.stats);
      const SdpaCallShape shape = call_shape(q, k, call);
      void* workspace = blocks.workspace_for(shape, true);
      runner.backward(shape, q.data(), k.data(), v.data(), out.data(), dout.data(), blocks.stats.data(),
                      blocks.rows.data(), blocks.dk.data(), blocks.dv.data(), workspace);
    }
    const Samples samples = samples_of(call, q.extent(0));
    add_rows(blocks.rows, dq, call.query_offset, call.query_count, samples);
    if (summed) {
      add_rows(blocks.dk, blocks.dk_sum, call.key_offset, call.key_count, samples);
      add_rows(blocks.dv, blocks.dv_sum, call.key_offset, call.key_count, samples);
    } else {
      add_rows(blocks.dk, dk, call.key_offset, call.key_count, samples);
      add_rows(blocks.dv, dv, call.key_offset, call.key_count, samples);
    }
  }
  if (summed) {
    const Samples all{0, static_cast<index_t>(q.extent(0))};
    add_rows(blocks.dk_sum, dk, 0, dk.extent(2), all);
    add_rows(blocks.dv_sum, dv, 0, dv.extent(2), all);
  }
  count_calls(plan, runner);
}

}  // namespace miniattn::kernels
