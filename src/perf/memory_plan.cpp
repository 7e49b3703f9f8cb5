#include "perf/memory_plan.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <type_traits>

#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_runtime_api.h>
#elif defined(KOKKOS_ENABLE_HIP)
#include <hip/hip_runtime_api.h>
#endif

#include "attention/strategy_table.hpp"
#include "core/types.hpp"
#include "model/pipeline_schedule.hpp"
#include "kernels/attention/attention.hpp"
#include "kernels/base/ordered_sum.hpp"
#include "kernels/base/reduction.hpp"
#include "model/parameter_layout.hpp"
#include "model/rotary_positions.hpp"

namespace miniattn {

const char* to_string(MemoryPart part) {
  switch (part) {
    case MemoryPart::activations: return "activations";
    case MemoryPart::attention: return "attention";
    case MemoryPart::cudnn_workspace: return "cudnn workspace";
    case MemoryPart::optimizer: return "optimizer";
    case MemoryPart::parameters_gradients: return "parameters+gradients";
    case MemoryPart::pipeline_send_buffer: return "pipeline send buffer";
    case MemoryPart::reduction_workspaces: return "reduction workspaces";
    case MemoryPart::rotary_positions: return "rotary positions";
    case MemoryPart::tokens_positions: return "tokens+positions";
    case MemoryPart::workspaces: return "workspaces";
  }
  throw std::logic_error("to_string(MemoryPart): unknown part");
}

std::size_t MemoryPlan::total() const {
  std::size_t sum = 0;
  for (const auto& [name, bytes] : parts) sum += bytes;
  return sum;
}

namespace {

// cuDNN rounds a call's query and key rows up to 64 (cudnn_call_workspace_bytes).
constexpr index_t kCudnnRowsQuantum = 64;

// This rank's sizes, in elements unless named bytes. Bytes of an activation
// (s), of a statistic or accumulator (a) and of a parameter, gradient or
// optimizer value (p): all equal but for bf16 (2, 4, 4).
struct RankSizes {
  std::size_t s, a, p, ib, tp;
  std::size_t local_batch, b, n, D, V, N;  // b: a micro-batch; n: local positions
  std::size_t L, slots;  // the layers of each of the stage's chunks, held once per slot; the slots of all chunks
  bool first_stage, last_stage;
  // This rank's share over TP: heads, attention columns, K/V heads (GQA) and
  // their columns Dk, the QKV projection's columns Dq, FFN units.
  std::size_t H, Da, Dh, KV, Dk, Dq, F;
  std::size_t R, r, U, G;  // rows of a micro-batch, per TP rank; Ulysses degree, ring size
};

RankSizes rank_sizes(const MemoryPlanInput& in) {
  const ModelConfig& m = in.model;
  const ElementSizes sizes = element_sizes(m.precision);
  RankSizes z{};
  z.s = sizes.value, z.a = sizes.acc, z.p = sizes.param;
  z.ib = sizeof(index_t), z.tp = static_cast<std::size_t>(in.tp);
  z.local_batch = static_cast<std::size_t>(m.batch / in.dp);
  z.b = z.local_batch / static_cast<std::size_t>(in.micro_batches);
  z.n = static_cast<std::size_t>(m.seq_len / in.sp);
  z.D = static_cast<std::size_t>(m.d_model), z.V = static_cast<std::size_t>(m.vocab);
  z.N = static_cast<std::size_t>(m.seq_len);
  // Interleaved chunks hold equal layers, each its own slots.
  z.L = static_cast<std::size_t>(chunk_layers(m.layers, in.pp, in.virtual_stages, in.stage, 0).count());
  z.slots = static_cast<std::size_t>(pipeline_slots(in.stage, in.pp, in.micro_batches, in.virtual_stages));
  z.first_stage = in.stage == 0, z.last_stage = in.stage == in.pp - 1;
  z.H = static_cast<std::size_t>(m.heads) / z.tp, z.Da = z.D / z.tp;
  z.Dh = z.D / static_cast<std::size_t>(m.heads), z.KV = static_cast<std::size_t>(m.kv_head_count()) / z.tp;
  z.Dk = z.KV * z.Dh, z.Dq = static_cast<std::size_t>(m.qkv_rows()) / z.tp;
  z.F = static_cast<std::size_t>(m.ffn_width()) / z.tp;
  z.R = z.b * z.n, z.r = static_cast<std::size_t>(in.tp_chunk_rows(static_cast<std::int64_t>(z.R)));
  z.U = static_cast<std::size_t>(in.ulysses);
  z.G = static_cast<std::size_t>(in.sp) / z.U;
  return z;
}

// The attention strategies, one per layer and slot, plus the workspace they
// share, and of that workspace, cuDNN's own.
void add_attention_parts(const MemoryPlanInput& in, const RankSizes& z, MemoryPlan& plan) {
  const AttentionSizes sizes = attention_sizes(in.model, in, static_cast<index_t>(z.b), in.blocking);
  const AttentionMemory memory = strategy_record(in.strategy).memory(sizes);
  plan.parts[MemoryPart::attention] = memory.shared - memory.cudnn_workspace + z.slots * z.L * memory.per_layer;
  if (in.blocking.kernel == AttentionKernel::cudnn) plan.parts[MemoryPart::cudnn_workspace] = memory.cudnn_workspace;
}

}  // namespace

MemoryPlan plan_memory(const MemoryPlanInput& in) {
  const ModelConfig& m = in.model;
  const RankSizes z = rank_sizes(in);
  const std::size_t s = z.s, a = z.a, p = z.p, ib = z.ib, tp = z.tp, b = z.b, n = z.n, D = z.D, V = z.V;
  const std::size_t R = z.R, r = z.r, Da = z.Da, Dk = z.Dk, Dq = z.Dq, F = z.F, H = z.H;
  const std::size_t L = z.L, slots = z.slots;

  MemoryPlan plan;
  const bool learned_positions = m.positions == PositionEncoding::learned;
  const std::size_t wpe = z.first_stage && learned_positions ? n * D : 0;
  const std::size_t replicated = static_cast<std::size_t>(in.replicated_parameters);
  const std::size_t parameters = replicated + wpe;
  // Master parameters and gradients, and (bf16) the weights rounded for compute.
  plan.parts[MemoryPart::parameters_gradients] = 2 * parameters * p + (s != p ? parameters * s : 0);
  if (in.optimizer == OptimizerKind::adamw) plan.parts[MemoryPart::optimizer] = 2 * parameters * p;
  plan.parts[MemoryPart::tokens_positions] = 2 * z.local_batch * n * ib + n * ib + n * ib + z.G * z.U * n * ib +
                                   (in.documents ? slots * b * z.N * ib : 0);  // packed documents' ids
  if (!learned_positions)
    plan.parts[MemoryPart::rotary_positions] = rotary_table_bytes(m, static_cast<index_t>(n), static_cast<index_t>(b),
                                                        in.documents, static_cast<index_t>(slots), a);

  // Transformer (src/model/transformer.hpp): saved per block (after_attention,
  // attention output, LayerNorm statistics, log-sum-exp, and unless
  // recomputed q, k, v and fc1's output), the residual stream, the head (ln_f
  // statistics, logits), and workspaces shared by all blocks (qkv, normed, the
  // q/k/v-or-fc1 arena when recomputed, d_residual, d_normed, d_hidden,
  // dq/dk/dv/d_attention_out, and where TP splits the rows (sequence
  // parallelism) the gathered rows and their gradient; without it every TP
  // rank holds all rows: r = R).
  // The head saves ln_f statistics, logits, their row log-sum-exp and each
  // row's loss (double). Reductions in a fixed order need workspaces: column
  // partial sums (kernels/base/reduction.hpp), the ordered sums of the loss and of
  // the squared gradients (kernels/base/ordered_sum.hpp) and each token's rows
  // (kernels/layers/embedding.hpp).
  const std::size_t kept = in.recompute ? 0 : R * (Dq + F);
  const std::size_t per_block = (r * D + R * Da + kept) * s + (4 * r + R * H) * a;
  plan.parts[MemoryPart::activations] = slots * (L * per_block + (L + 1) * r * D * s) + 3 * r * a +
                              (z.last_stage ? r * V : 0) * s + r * sizeof(double);
  if (sends_input_gradients(in.stage, in.virtual_stages)) plan.parts[MemoryPart::pipeline_send_buffer] = r * D * s;
  plan.parts[MemoryPart::workspaces] =
      (R * Dq + r * D + (in.recompute ? R * std::max(Dq, F) : 0) + 2 * r * D + R * F + 2 * R * (Da + Dk) +
       (tp > 1 && in.tp_sequence_parallel ? 2 * R * D : 0)) *
      s;
  const auto ordered_sum_bytes = [](std::size_t count) {
    return (count + kernels::kOrderedSumChunk - 1) / kernels::kOrderedSumChunk * sizeof(double);
  };
  const std::size_t chunks = static_cast<std::size_t>(kernels::column_sum_chunks(static_cast<index_t>(R)));
  plan.parts[MemoryPart::reduction_workspaces] = chunks * std::max({Dq, F, D}) * a + ordered_sum_bytes(r) +
                                       ordered_sum_bytes(std::max(replicated, wpe)) + (V + 1 + 2 * r) * ib;
  add_attention_parts(in, z, plan);
  plan.recompute = in.recompute;
  return plan;
}

namespace {

MemoryPlan plan_with_cudnn_cut(MemoryPlanInput& in, std::size_t available, std::size_t cudnn_workspace_limit) {
  kernels::AttentionBlocking& blocking = in.blocking;
  blocking.cudnn_rows_per_call = 0;
  MemoryPlan plan = plan_memory(in);
  if (blocking.kernel != AttentionKernel::cudnn || !blocking.deterministic) return plan;
  const auto fits = [&](const MemoryPlan& p) {
    return (available == 0 || p.total() <= available) &&
           (cudnn_workspace_limit == 0 || p.parts.at(MemoryPart::cudnn_workspace) <= cudnn_workspace_limit);
  };
  // From the block's rows (no cut) down to 64, halving.
  const index_t block_rows = static_cast<index_t>(in.model.seq_len / in.sp * in.ulysses);
  index_t rows = kCudnnRowsQuantum;
  while (rows * 2 < block_rows) rows *= 2;
  for (; !fits(plan) && rows >= kCudnnRowsQuantum; rows /= 2) {
    blocking.cudnn_rows_per_call = rows;
    plan = plan_memory(in);
  }
  return plan;
}

}  // namespace

MemoryPlan plan_memory_within(MemoryPlanInput& in, std::size_t available, std::size_t cudnn_workspace_limit,
                              Recompute recompute) {
  in.recompute = recompute != Recompute::never;
  if (recompute == Recompute::automatic) {
    in.recompute = false;
    MemoryPlan kept = plan_with_cudnn_cut(in, available, cudnn_workspace_limit);
    if (available == 0 || kept.total() <= available) return kept;
    in.recompute = true;
  }
  return plan_with_cudnn_cut(in, available, cudnn_workspace_limit);
}

std::string cudnn_workspace_refusal(const MemoryPlan& plan, std::size_t limit, bool deterministic) {
  const auto workspace = plan.parts.find(MemoryPart::cudnn_workspace);
  if (limit == 0 || workspace == plan.parts.end() || workspace->second <= limit) return "";
  const std::string what = "kernels.cudnn_workspace_mib: " + format_bytes(static_cast<double>(limit)) +
                           " is less than cuDNN's " + (deterministic ? "deterministic" : "non-deterministic") +
                           " backward needs ";
  const std::string needs = "(" + format_bytes(static_cast<double>(workspace->second)) + ")";
  // Neither backward is offered as the way out: which needs less depends on
  // the head width and the block's query and key rows.
  if (deterministic) return what + "for calls of 64 query rows " + needs + "; allow more";
  return what + needs + ", a workspace linear in the block's query rows that is not cut; allow more";
}

std::size_t device_free_bytes() {
  std::size_t free = 0, total = 0;
#if defined(KOKKOS_ENABLE_CUDA)
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) return 0;
#elif defined(KOKKOS_ENABLE_HIP)
  if (hipMemGetInfo(&free, &total) != hipSuccess) return 0;
#endif
  (void)total;
  return free;
}

int memory_device_id() {
#if defined(KOKKOS_ENABLE_CUDA)
  return ExecSpace().cuda_device();
#elif defined(KOKKOS_ENABLE_HIP)
  return ExecSpace().hip_device();
#else
  return -1;
#endif
}

std::size_t memory_available_per_rank(double memory_per_rank_gib, int ranks_sharing) {
  if (memory_per_rank_gib > 0) return static_cast<std::size_t>(memory_per_rank_gib * 1024.0 * 1024.0 * 1024.0);
  const std::size_t sharing = static_cast<std::size_t>(ranks_sharing > 0 ? ranks_sharing : 1);
  if (!std::is_same<MemSpace, Kokkos::HostSpace>::value) return device_free_bytes() / sharing;
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    std::istringstream fields(line);
    std::string key;
    std::size_t kib = 0;
    if (fields >> key >> kib && key == "MemAvailable:")
      return kib * 1024 / sharing;
  }
  return 0;
}

std::string format_bytes(double bytes) {
  char buf[32];
  if (bytes >= 1024.0 * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / (1024.0 * 1024 * 1024));
  else std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / (1024.0 * 1024));
  return buf;
}

}  // namespace miniattn
