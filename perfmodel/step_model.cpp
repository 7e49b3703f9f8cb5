// The step model of the performance model (performance_model.hpp): one
// decomposition's step time on a machine, part by part (compute, exchanges,
// placement on nodes, memory), and the sizes it builds on.
#include "perfmodel/performance_model.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <tuple>

#include "attention/block_reach.hpp"
#include "attention/strategy_table.hpp"
#include "core/error.hpp"
#include "model/parameter_layout.hpp"
#include "model/pipeline_schedule.hpp"
#include "perfmodel/attention_work.hpp"
#include "perf/exchange_model.hpp"
#include "perf/flop_count.hpp"
#include "perf/memory_plan.hpp"

namespace miniattn {

// ---------------------------------------------------------------- sizes

std::int64_t replicated_parameter_count(const ModelConfig& m, int tp, int pp, int stage) {
  return ParameterLayout(m, 0, tp, 0, pp, stage).replicated_size();
}

// ---------------------------------------------------------------- decompositions

// The deck validator itself judges a decomposition, so that predict marks
// invalid exactly what a run would refuse, with the same message. It is judged
// as the training run it predicts (run.mode train): what run.mode predict
// itself may refuse is no property of the decomposition.
std::string validator_problem(const StepConfig& c, int ranks) {
  Config deck;
  deck.model = c.model;
  deck.parallel.strategy = c.strategy;
  deck.parallel.layout = c.layout;
  deck.parallel.dp = c.dp;
  deck.parallel.tp = c.tp;
  deck.parallel.pp = c.pp;
  deck.parallel.virtual_stages = c.virtual_stages;
  deck.parallel.tp_sequence_parallel = c.tp_sequence_parallel;
  deck.parallel.ulysses_degree = strategy_record(c.strategy).ulysses == UlyssesDegree::deck ? c.ulysses : 1;  // else implied
  deck.train.optimizer = c.optimizer;
  deck.train.micro_batches = c.micro_batches;
  deck.run.mode = RunMode::train;
  try {
    validate_config(deck, ranks);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

std::string step_config_problem(const StepConfig& c) {
  if (c.dp < 1 || c.tp < 1 || c.pp < 1 || c.sp < 1) return "dp, tp, pp and sp must be >= 1";
  return validator_problem(c, c.world_size());
}

namespace {

// Where the partners of each exchange sit (world ranks r share node r / rpn;
// world rank = ((dp index x pp + stage) x sp + sp index) x tp + tp index,
// docs/design.md 3.1: TP groups are consecutive ranks, SP groups ranks at
// stride tp, Ulysses groups consecutive SP ranks, neighbour stages sp tp apart).
struct Placement {
  bool ring_inter = false;       // some ring hop crosses nodes
  double ulysses_off_node = 0;   // worst rank: fraction of its Ulysses peers on other nodes
  bool world_inter = false;      // the world spans several nodes
  bool stage_inter = false;      // a stage's ranks (DP x SP x TP, one stage) do
  bool sp_inter = false;         // an SP group spans several nodes
  bool tp_inter = false;         // a TP group spans several nodes
  bool position_inter = false;   // a position group (DP x TP of the first stage, the replicas of a wpe row) does
  bool shard_inter = false;      // a shard group (DP x SP, one stage and TP index) does
  bool pp_inter = false;         // a pipeline group (the stages of one DP, SP, TP index) does
  std::vector<bool> boundary_inter;  // [k]: some pair of stage k and k + 1 sits on two nodes
};

// Whether any of `groups` groups spans nodes, group g's ranks lying in
// [first(g), last(g)]: a group is on one node iff its lowest and highest ranks are.
template <class First, class Last>
bool some_group_spans(std::int64_t groups, First first, Last last, std::int64_t rpn) {
  for (std::int64_t g = 0; g < groups; ++g)
    if (first(g) / rpn != last(g) / rpn) return true;
  return false;
}

// Over the Ulysses groups (U SP ranks, world ranks at stride tp) that span
// nodes: the largest fraction of a member's peers on other nodes (the member
// with the smallest share of its node).
double ulysses_off_node(const StepConfig& c, std::int64_t rpn) {
  const std::int64_t U = c.ulysses, tp = c.tp, rings = c.sp / std::max(c.ulysses, 1);
  double worst = 0;
  for (std::int64_t g = 0; U > 1 && g < c.world_size() / U; ++g) {  // g = (replica: dp index x pp + stage, Ulysses group, tp index)
    const std::int64_t first = ((g / (tp * rings)) * c.sp + ((g / tp) % rings) * U) * tp + g % tp;
    if (first / rpn == (first + (U - 1) * tp) / rpn) continue;
    std::int64_t smallest = U;
    for (std::int64_t k = 0; k < U;) {  // the members from k on that share member k's node
      const std::int64_t node = (first + k * tp) / rpn, start = k;
      while (k < U && (first + k * tp) / rpn == node) ++k;
      smallest = std::min(smallest, k - start);
    }
    worst = std::max(worst, static_cast<double>(U - smallest) / static_cast<double>(U - 1));
  }
  return worst;
}

Placement place(const StepConfig& c, std::int64_t rpn) {
  Placement p;
  const std::int64_t dp = c.dp, pp = c.pp, sp = c.sp, tp = c.tp, stage = sp * tp;
  // World rank of SP index s and TP index t in replica g = dp index x pp + stage.
  const auto at = [&](std::int64_t g, std::int64_t s, std::int64_t t) { return (g * sp + s) * tp + t; };
  p.world_inter = c.world_size() > rpn;
  // (A group of one rank spans nothing: skipped, the loops are O(world).)
  p.stage_inter = dp * sp * tp > 1 && some_group_spans(
      pp, [&](std::int64_t k) { return at(k, 0, 0); }, [&](std::int64_t k) { return at((dp - 1) * pp + k, sp - 1, tp - 1); },
      rpn);
  p.sp_inter = sp > 1 && some_group_spans(
      dp * pp * tp, [&](std::int64_t g) { return at(g / tp, 0, g % tp); },
      [&](std::int64_t g) { return at(g / tp, sp - 1, g % tp); }, rpn);
  p.tp_inter = tp > 1 && some_group_spans(
      dp * pp * sp, [&](std::int64_t g) { return g * tp; }, [&](std::int64_t g) { return g * tp + tp - 1; }, rpn);
  p.position_inter = dp * tp > 1 && some_group_spans(
      sp, [&](std::int64_t s) { return at(0, s, 0); }, [&](std::int64_t s) { return at((dp - 1) * pp, s, tp - 1); },
      rpn);
  p.shard_inter = dp * sp > 1 && some_group_spans(
      pp * tp, [&](std::int64_t g) { return at(g / tp, 0, g % tp); },
      [&](std::int64_t g) { return at((dp - 1) * pp + g / tp, sp - 1, g % tp); }, rpn);
  // Pipeline groups and neighbour pairs: g = (dp index, SP x TP index), stages `stage` ranks apart.
  const auto first_stage = [&](std::int64_t g) { return at((g / stage) * pp, 0, 0) + g % stage; };
  p.pp_inter = pp > 1 && some_group_spans(
      dp * stage, first_stage, [&](std::int64_t g) { return first_stage(g) + (pp - 1) * stage; }, rpn);
  for (std::int64_t k = 0; k + 1 < pp; ++k)
    p.boundary_inter.push_back(some_group_spans(
        dp * stage, [&](std::int64_t g) { return first_stage(g) + k * stage; },
        [&](std::int64_t g) { return first_stage(g) + (k + 1) * stage; }, rpn));
  p.ring_inter = (sp / c.ulysses) > 1 && p.sp_inter;
  p.ulysses_off_node = ulysses_off_node(c, rpn);
  return p;
}

// Seconds of `bytes` in `messages` messages to a partner on another node (inter) or on this one.
double transfer_seconds(const MachineDescription& m, bool inter, double bytes, double messages) {
  return messages * (inter ? m.latency_inter : m.latency_intra) + bytes / (inter ? m.bandwidth_inter : m.bandwidth_intra);
}

// What one micro-batch of one pipeline stage runs on a rank: the stage's
// layers, batch / dp / m samples of its DP replica, the embedding on the first
// stage and ln_f, the head and the loss on the last. With pp = m = 1: the
// whole step's work.
struct MicroBatch {
  int stage = 0;
  std::int64_t layers = 0, samples = 0;
  bool first = true, last = true;
};

MicroBatch micro_batch(const StepConfig& c, int stage) {
  MicroBatch w;
  w.stage = stage;
  w.layers = stage_layers(c.model.layers, c.pp, stage).count();
  w.samples = c.model.batch / c.dp / c.micro_batches;
  w.first = stage == 0;
  w.last = stage == c.pp - 1;
  return w;
}

// Dense-layer GEMMs. With tp every GEMM divides by tp: a block's over H/tp
// heads and F/tp units of all R rows, the head's over the R/tp chunk rows
// (without TP's sequence parallelism every TP rank runs the head on all R rows).
// The stage's share of the model's FLOP count: a model of its layers and
// batch / m samples (over the stage's dp sp tp ranks), less the head's FLOPs
// (those of that model without layers) on all but the last stage.
void add_gemm_compute(const MachineDescription& machine, const StepConfig& c, const MicroBatch& w, StepPrediction& out) {
  ModelConfig m = c.model;
  m.layers = w.layers;
  m.batch = c.model.batch / c.micro_batches;
  const double L = static_cast<double>(m.layers), D = static_cast<double>(m.d_model);
  const double F = static_cast<double>(m.ffn_width());
  const double R = static_cast<double>(w.samples) * static_cast<double>(m.seq_len / c.sp);  // rows of a TP group
  const FlopCount all = training_step_flops(m);
  const AttentionFlops attention = attention_flops(m);
  double stage_flops = all.total() - attention.forward - attention.backward;
  m.layers = 0;
  const double head_flops = training_step_flops(m).total();
  stage_flops -= head_flops;
  double dense_flops = stage_flops / c.stage_ranks();
  if (w.last) dense_flops += head_flops / (c.tp_sequence_parallel ? c.stage_ranks() : c.dp * c.sp);
  // The backward pass recomputes each block's QKV and fc1 projections unless
  // the blocks keep them (src/model/transformer.cpp): work the model's FLOP count leaves out.
  const double recompute_flops =
      c.recompute == Recompute::never ? 0.0 : L * 2.0 * R * (static_cast<double>(m.qkv_rows()) * D + D * F) / c.tp;
  out.compute_parts["gemm"] = (dense_flops + recompute_flops) / machine.gemm_flops;
}

// Elementwise kernels of a micro-batch: bandwidth-bound.
void add_elementwise_compute(const MachineDescription& machine, const StepConfig& c, const MicroBatch& w,
                             StepPrediction& out) {
  const ModelConfig& m = c.model;
  const double s = static_cast<double>(c.sizes().value), tp = c.tp;
  const double L = static_cast<double>(w.layers), D = static_cast<double>(m.d_model);
  const double F = static_cast<double>(m.ffn_width()), V = static_cast<double>(m.vocab);
  const double n = static_cast<double>(m.seq_len / c.sp);
  const double R = static_cast<double>(w.samples) * n;  // rows of a TP group
  const double r = static_cast<double>(c.tp_chunk_rows(static_cast<std::int64_t>(R)));  // this rank's share
  // Elementwise scalars per micro-batch (read + written), kernel by kernel, per
  // row of D (F, V), by where the rows live with tp (docs/design.md 3.1a).
  // Chunk rows (r x D): each block's forward LayerNorms, residual
  // adds, their backward and the backward's recomputed LayerNorms; once: the
  // embedding 3 + 3 (first stage), the final LayerNorm and its recomputation,
  // the residual gradient's zeroing 1 and cross-entropy 2 + 3 per row of V
  // (last stage). Attention region (R x D/tp): q/k/v bias rows (forward,
  // recomputed) and gradients 3 + 3 + 3, q/k/v split and head merge (forward,
  // recomputed), head split and q/k/v merge, attention delta 2, dq zero 1;
  // the q/k/v terms scale with the projection's width, (H + 2 KV) Dh of 3 D.
  // The row-parallel proj and fc2 bias rows and gradients (1 + 1 + 1 + 1) fall
  // on TP rank 0's R x D partial sums; FFN region (R x F/tp): GELU (forward,
  // recomputed, backward), fc1 bias rows (forward, recomputed) and gradient.
  // Blocks that keep q, k, v and fc1's output recompute neither bias rows nor the split.
  namespace e = elementwise_scalars;
  const double recomputed = c.recompute == Recompute::never ? 0.0 : 1.0;
  const double block_chunk_d = 4 * e::layer_norm_forward + 2 * e::residual_add +
                               2 * e::layer_norm_backward;
  const double qkv_width = static_cast<double>(m.qkv_rows()) / (3 * D);
  const double block_shard_d = (3 * (2 + recomputed) + (1 + recomputed) * e::qkv_split + e::qkv_merge) * qkv_width +
                               2 * e::head_merge + e::head_split + 2 + 1;
  const double block_f = 2 * e::gelu_forward + e::gelu_backward + 2 + recomputed;
  const double once_d = (w.first ? 6 : 0) + (w.last ? 2 * e::layer_norm_forward + e::layer_norm_backward + 1 : 0);
  const double once_v = w.last ? 5 : 0;
  double elementwise = L * (block_chunk_d * r * D + block_shard_d * R * D / tp + 4 * R * D + block_f * R * F / tp) +
                       once_d * r * D + once_v * r * V;
  if (strategy_record(c.strategy).all_to_all()) elementwise += L * 32 * R * D / tp;  // pack + unpack, 8 tensors
  out.compute_parts["elementwise"] = elementwise * s / machine.elementwise_bandwidth;
}

// Once per step, after the pipeline: gradient zeroing, the norm's sum of
// squares and the update (AdamW: p, g, m, v read, p, m, v written) of stage
// 0's parameters on this rank: the replicated ones with its TP shards, and its wpe rows.
void add_optimizer(const MachineDescription& machine, const StepConfig& c, StepPrediction& out) {
  const double s = static_cast<double>(c.sizes().param), D = static_cast<double>(c.model.d_model);
  const double n = static_cast<double>(c.model.seq_len / c.sp);
  const double optimizer_passes = (c.optimizer == OptimizerKind::adamw ? 7.0 : 3.0) + 2.0;
  const double wpe = c.model.positions == PositionEncoding::learned ? n * D : 0.0;
  const double local_parameters = static_cast<double>(replicated_parameter_count(c.model, c.tp, c.pp, 0)) + wpe;
  out.compute_parts["optimizer"] = optimizer_passes * local_parameters * s / machine.elementwise_bandwidth;
}

// Stage 0's all-reduces (out.exchange_bytes says which it has), each over its
// group: a ring's 2 (p-1)/p bytes and a tree's 2 log2(p) latencies. The
// gradients of the tensors whole on a stage's ranks are summed over those; the
// tied wte over the first and last stage (a pipeline group's two ends).
// grad_norm is one double over the SP group (wpe's share, on the first
// stage), one over the TP group (the shards') and one over the stages.
void add_allreduces(const MachineDescription& machine, const StepConfig& c, const Placement& where, StepPrediction& out) {
  const double world = c.world_size(), dp = c.dp, sp = c.sp, tp = c.tp, pp = c.pp;
  // Without TP's sequence parallelism the TP ranks' whole tensors and wpe rows have equal gradients: not summed over TP.
  const bool over_tp = c.tp_sequence_parallel;
  const double stage = over_tp ? c.stage_ranks() : dp * sp, wpe_replicas = over_tp ? dp * tp : dp;
  const std::tuple<Exchange, double, bool> allreduces[] = {
      {Exchange::gradients_replicated, stage, over_tp ? where.stage_inter : where.shard_inter},
      {Exchange::loss, world, where.world_inter},
      {Exchange::gradients_tensor_parallel, dp * sp, where.shard_inter},
      {Exchange::gradients_wpe, wpe_replicas, where.position_inter},
      {Exchange::gradients_tied_embedding, 2, where.pp_inter},
      {Exchange::grad_norm, sp, where.sp_inter},
      {Exchange::grad_norm, tp, where.tp_inter},
      {Exchange::grad_norm, pp, where.pp_inter}};
  for (const auto& [label, p, inter] : allreduces) {
    const auto bytes = out.exchange_bytes.find(label);
    if (p < 2 || bytes == out.exchange_bytes.end()) continue;
    const double call_bytes = label == Exchange::grad_norm ? sizeof(double) : bytes->second;
    out.exchange_parts[label] += transfer_seconds(machine, inter, 2.0 * (p - 1) / p * call_bytes,
                                                  2.0 * std::ceil(std::log2(p)));
  }
}

// Megatron's all-gathers and reduce-scatters over a TP group (without
// sequence parallelism: all-reduces): blocking (the next GEMM or LayerNorm
// needs their result), on the node's link when the group's consecutive ranks
// share a node; each all-gather or reduce-scatter a ring of tp - 1 messages,
// each all-reduce a ring's 2 (tp - 1) moving 2 (tp - 1) / tp of its buffer. A
// micro-batch moves 1/m of the stage's bytes per step.
void add_tensor_parallel(const MachineDescription& machine, const StepConfig& c, const MicroBatch& w, bool inter,
                         StepPrediction& out) {
  const double L = static_cast<double>(w.layers);
  if (!c.tp_sequence_parallel) {
    const double t = c.tp, bytes = out.exchange_bytes.at(Exchange::tensor_parallel_allreduce) / c.micro_batches;
    out.exchange_parts[Exchange::tensor_parallel_allreduce] =
        transfer_seconds(machine, inter, 2 * (t - 1) / t * bytes, L * 4 * 2 * (t - 1));
    return;
  }
  // Per layer: forward 2 + 2, backward 4 (two recomputed LayerNorm outputs, two output gradients) + 2.
  const std::pair<Exchange, double> calls_per_layer[] = {{Exchange::tensor_parallel_gather, 6},
                                                            {Exchange::tensor_parallel_reduce_scatter, 4}};
  for (const auto& [label, calls] : calls_per_layer)
    out.exchange_parts[label] = transfer_seconds(machine, inter, out.exchange_bytes.at(label) / c.micro_batches,
                                                 L * calls * (c.tp - 1));
}

// One direction's attention rates on tiles no mask touches and on tiles on a mask's edge.
struct TileRates {
  double full = 0, edge = 0;
  // Seconds of `blocks` chunk pairs, `edge_blocks` of them in edge tiles, of `flops` each.
  double seconds(double blocks, double edge_blocks, double flops) const {
    return ((blocks - edge_blocks) / full + edge_blocks / edge) * flops;
  }
};
struct AttentionRates {
  TileRates forward, backward;
};

AttentionRates attention_rates(const MachineDescription& m) {
  return {{m.attention_flops_forward, m.attention_edge_forward_rate()},
          {m.attention_flops_backward, m.attention_edge_backward_rate()}};
}

// One rank's K (or V) block as a ring or all-gather moves it: b samples of
// n = N / sp rows of this TP rank's K/V heads (GQA: fewer than its query
// heads), after a Ulysses all-to-all of degree U (U n rows of the heads it leaves).
double kv_block_bytes(const StepConfig& c, const MicroBatch& w, int U) {
  const std::int64_t kv_heads = kv_heads_after_all_to_all(c.model.kv_head_count() / c.tp, U);
  return static_cast<double>(w.samples) * static_cast<double>(c.model.seq_len / c.sp) * U *
         static_cast<double>(kv_heads * c.model.head_dim()) * static_cast<double>(c.sizes().value);
}

// RSA's dense blocks: every score of a rank's rows against each source is
// computed (the mask only hides them before the softmax), so every step is
// full whatever the mask (it predicted RSA 25% fast when it skipped the
// diagonal's upper half as the tiled kernels do).
RingWork dense_ring_work(const StepConfig& c) {
  StepConfig unmasked = c;
  unmasked.model.causal = false;
  unmasked.model.window = 0;
  return ring_work(unmasked, 1, false);
}

// The tiles the blockwise kernels compute: counted where a window or packed
// documents skip some (counted_ring_work), else the closed forms.
RingWork tiled_ring_work(const StepConfig& c, int U) {
  return c.model.window > 0 || c.documents ? counted_ring_work(c, U, true) : ring_work(c, U, true);
}

// Attention over a ring of G = sp / U ranks (G = 1: local attention; RSA:
// U = 1, its dense kernels at RSA's rates), per ring step on the slowest rank,
// and its K/V transfers, part of each hidden by the step's block compute. A
// sliding window stops the ring after S <= G steps (ring_steps), and the
// work of each step is the tiles it and packed documents leave.
void add_ring_attention(const MachineDescription& machine, const StepConfig& c, const MicroBatch& w, bool ring_inter,
                        StepPrediction& out) {
  const ModelConfig& m = c.model;
  const bool rsa = strategy_record(c.strategy).key_values == KeyValueRoute::dense_ring;
  const int U = rsa ? 1 : c.ulysses, G = c.sp / U;
  const double L = static_cast<double>(w.layers), b = static_cast<double>(w.samples);
  const double X = kv_block_bytes(c, w, U);
  const RingWork work = rsa ? dense_ring_work(c) : tiled_ring_work(c, U);
  // Forward FLOPs of one c x c block over the rank's heads (H/tp over U); the backward's are 2.5x.
  const double block_flops =
      4.0 * b * (static_cast<double>(m.heads / c.tp) / U) * work.chunk * work.chunk * m.head_dim();
  const double rsa_f = machine.rsa_forward_rate(), rsa_b = machine.rsa_backward_rate();
  const AttentionRates rates = rsa ? AttentionRates{{rsa_f, rsa_f}, {rsa_b, rsa_b}} : attention_rates(machine);
  const double t_kv = transfer_seconds(machine, ring_inter, 2 * X, 2), e = machine.overlap_efficiency;
  // RSA posts K during its score pass and V during its apply pass, half the forward each.
  const double pieces = rsa ? 2 : 1, t_piece = transfer_seconds(machine, ring_inter, 2 * X / pieces, 2 / pieces);
  const int S = rsa ? G : ring_steps(m, c.layout, c.sp, U);
  double forward = 0, backward = 0, hidden = 0;
  for (int step = 0; step < S; ++step) {
    const double blocks = work.steps[step], edge = work.edge_steps[step];
    const double f = rates.forward.seconds(blocks, edge, block_flops);
    const double bwd = rates.backward.seconds(blocks, edge, 2.5 * block_flops);
    forward += f;
    backward += bwd;
    if (step + 1 < S) hidden += pieces * std::min(f / pieces, e * t_piece) + std::min(bwd, e * t_kv);
  }
  out.compute_parts["attention_forward"] = L * forward;
  out.compute_parts["attention_backward"] = L * backward;
  out.hidden_seconds = L * hidden;
  if (G < 2) return;
  if (rsa)
    out.exchange_parts[Exchange::rsa_forward_k] = out.exchange_parts[Exchange::rsa_forward_v] = L * (S - 1) * t_piece;
  else
    out.exchange_parts[Exchange::ring_forward_kv] = L * (S - 1) * t_piece;
  out.exchange_parts[rsa ? Exchange::rsa_backward_kv : Exchange::ring_backward_kv] = L * (S - 1) * t_kv;
  out.exchange_parts[rsa ? Exchange::rsa_backward_dkdv : Exchange::ring_backward_dkdv] = L * (S > 1 ? S : 0) * t_kv;
}

// All-gather attention over the SP group of G ranks: each rank computes its
// queries against every block at once, so its work is the ring's summed over
// the steps (the slowest rank's sum: the layouts balance it as they do the
// ring's steps), and nothing hides its exchanges: per layer, all-gathers of K
// and V forward and again backward, reduce-scatters of dK and dV, each a ring
// of G - 1 messages of one local [b, H/tp, n, Dh] tensor.
void add_allgather_attention(const MachineDescription& machine, const StepConfig& c, const MicroBatch& w,
                             bool inter, StepPrediction& out) {
  const ModelConfig& m = c.model;
  const int G = c.sp;
  const double L = static_cast<double>(w.layers), b = static_cast<double>(w.samples);
  const double X = kv_block_bytes(c, w, 1);
  const RingWork work = tiled_ring_work(c, 1);
  const double blocks = work.slowest_total, edge = work.edge_total;
  const double block_flops = 4.0 * b * static_cast<double>(m.heads / c.tp) * work.chunk * work.chunk * m.head_dim();
  const AttentionRates rates = attention_rates(machine);
  out.compute_parts["attention_forward"] = L * rates.forward.seconds(blocks, edge, block_flops);
  out.compute_parts["attention_backward"] = L * rates.backward.seconds(blocks, edge, 2.5 * block_flops);
  if (G < 2) return;
  const double t_pair = 2 * transfer_seconds(machine, inter, (G - 1) * X, G - 1);  // two collectives
  for (const Exchange label : {Exchange::allgather_forward_kv, Exchange::allgather_backward_kv, Exchange::allgather_backward_dkdv})
    out.exchange_parts[label] = L * t_pair;
}

// All-to-alls over U consecutive ranks, each U - 1 messages: the on-node and
// off-node shares travel side by side. A micro-batch moves 1/m of the stage's bytes.
void add_alltoalls(const MachineDescription& machine, const StepConfig& c, const MicroBatch& w, double off_node,
                   StepPrediction& out) {
  const double L = static_cast<double>(w.layers), U = c.ulysses;
  const double latency = off_node > 0 ? machine.latency_inter : machine.latency_intra;
  const std::pair<Exchange, double> calls_per_layer[] = {{Exchange::ulysses_forward_qkv, 3}, {Exchange::ulysses_forward_out, 1},
                                                            {Exchange::ulysses_forward_lse, 1}, {Exchange::ulysses_backward_dout, 1},
                                                            {Exchange::ulysses_backward_dqkv, 3}};
  for (const auto& [label, calls] : calls_per_layer) {
    const double bytes = out.exchange_bytes.at(label) / c.micro_batches;
    const double on_time = (1 - off_node) * bytes / machine.bandwidth_intra;
    const double off_time = off_node * bytes / machine.bandwidth_inter;
    out.exchange_parts[label] = std::max(on_time, off_time) + L * calls * (U - 1) * latency;
  }
}

// A micro-batch's output to the next stage and its input gradient to the
// previous one (out.exchange_bytes has the labels this stage sends): one
// message each of 1/m of the step's bytes, over the link between the two
// stages. A receive completes before its pass runs (driver/pipeline_step.cpp),
// so every hop is on the pipeline's critical path: the sender's time counts it.
// Interleaved, one message per chunk (v, or v - 1 from the model's last
// chunk and to its first), of which one wraps round from the last stage to
// the first: off-node wherever a pipeline group spans nodes.
void add_pipeline_sends(const MachineDescription& machine, const StepConfig& c, const MicroBatch& w,
                        const Placement& where, StepPrediction& out) {
  const std::pair<Exchange, int> sends[] = {{Exchange::pipeline_activations, w.stage}, {Exchange::pipeline_gradients, w.stage - 1}};
  const double v = c.virtual_stages;
  for (const auto& [label, boundary] : sends) {
    const auto bytes = out.exchange_bytes.find(label);
    if (bytes == out.exchange_bytes.end()) continue;
    const bool model_end = label == Exchange::pipeline_activations ? w.last : w.first;
    const bool inter = v > 1 ? where.pp_inter : where.boundary_inter[static_cast<std::size_t>(boundary)];
    out.exchange_parts[label] = transfer_seconds(machine, inter, bytes->second / c.micro_batches, v - model_end);
  }
}

// The bytes a rank of `stage` sends per step (all m micro-batches).
std::map<Exchange, double> exchange_bytes(const StepConfig& c, int stage) {
  ExchangeModelInput in;
  static_cast<Decomposition&>(in) = c;
  in.model = c.model;
  in.stage = stage;
  // This rank's replicated part (its stage's); its TP shards at the end.
  const ParameterLayout layout(c.model, 0, c.tp, 0, c.pp, stage);
  in.replicated_parameters = layout.replicated_size();
  in.tensor_parallel_parameters = layout.replicated_size() - layout.tensor_parallel_begin();
  in.local_wpe_parameters =
      c.model.positions == PositionEncoding::learned ? c.model.seq_len / c.sp * c.model.d_model : 0;
  return modelled_exchange_bytes(in);
}

MemoryPlan memory_plan(const StepConfig& c, int stage) {
  MemoryPlanInput in;
  static_cast<Decomposition&>(in) = c;
  in.model = c.model;
  in.optimizer = c.optimizer;
  in.stage = stage;
  in.replicated_parameters = replicated_parameter_count(c.model, c.tp, c.pp, stage);
  in.documents = c.documents;
  in.blocking = c.blocking;
  return plan_memory_within(in, c.memory_available, c.cudnn_workspace_limit, c.recompute);
}

// Fills compute_seconds and exchange_seconds from the parts; returns compute + exchange - hidden.
double sum_parts(StepPrediction& out) {
  for (const auto& [name, seconds] : out.compute_parts) out.compute_seconds += seconds;
  for (const auto& [name, seconds] : out.exchange_parts) out.exchange_seconds += seconds;
  return out.compute_seconds + out.exchange_seconds - out.hidden_seconds;
}

// One micro-batch on one stage: its compute, its TP, SP and pipeline
// exchanges, and the part of them its compute hides; exchange_bytes: the
// stage's per step.
StepPrediction micro_batch_work(const MachineDescription& machine, const StepConfig& c, const Placement& where,
                                int stage) {
  const MicroBatch w = micro_batch(c, stage);
  StepPrediction out;
  out.exchange_bytes = exchange_bytes(c, stage);
  add_gemm_compute(machine, c, w, out);
  add_elementwise_compute(machine, c, w, out);
  if (c.tp > 1) add_tensor_parallel(machine, c, w, where.tp_inter, out);
  const StrategyRecord& strategy = strategy_record(c.strategy);
  if (strategy.key_values == KeyValueRoute::gathered) add_allgather_attention(machine, c, w, where.sp_inter, out);
  else add_ring_attention(machine, c, w, where.ring_inter, out);
  if (c.ulysses > 1 && strategy.all_to_all())
    add_alltoalls(machine, c, w, where.ulysses_off_node, out);
  if (c.pp > 1) add_pipeline_sends(machine, c, w, where, out);
  return out;
}

}  // namespace

MemoryPlan largest_memory_plan(const StepConfig& c) {
  MemoryPlan largest = memory_plan(c, 0);
  bool recompute = largest.recompute;
  for (int stage = 1; stage < c.pp; ++stage) {
    MemoryPlan plan = memory_plan(c, stage);
    recompute = recompute || plan.recompute;
    if (plan.total() > largest.total()) largest = std::move(plan);
  }
  if (recompute == largest.recompute) return largest;
  // Where one stage must recompute, all do (check_memory agrees it so).
  StepConfig agreed = c;
  agreed.recompute = Recompute::always;
  return largest_memory_plan(agreed);
}

StepPrediction predict_step(const MachineDescription& node_machine, const StepConfig& deck) {
  StepPrediction out;
  out.problem = step_config_problem(deck);
  out.valid = out.problem.empty();
  if (!out.valid) return out;
  const MemoryPlan plan = largest_memory_plan(deck);  // the planner the run itself checks against
  StepConfig c = deck;  // timed as the plan runs it
  c.recompute = plan.recompute ? Recompute::always : Recompute::never;
  // The rates of a rank when min(world, ranks_per_node) ranks share its node.
  const MachineDescription machine =
      node_machine.shared_by(std::min<std::int64_t>(c.world_size(), node_machine.ranks_per_node));
  const Placement where = place(c, machine.ranks_per_node);
  // 1F1B: the slowest stage's micro-batch sets the pace of all m + pp - 1
  // slots (interleaved: v m + pp - 1 slots of a chunk's pass, 1/v of it).
  StepPrediction first_stage;
  for (int stage = 0; stage < c.pp; ++stage) {
    StepPrediction work = micro_batch_work(machine, c, where, stage);
    out.stage_seconds.push_back(sum_parts(work));
    if (stage == 0) first_stage = std::move(work);
  }
  const double m = static_cast<double>(c.micro_batches), v = c.virtual_stages;
  out.pipeline_seconds = (m + (c.pp - 1) / v) * *std::max_element(out.stage_seconds.begin(), out.stage_seconds.end());
  out.bubble_fraction = modelled_bubble_fraction(c.pp, c.micro_batches, c.virtual_stages);

  // Stage 0 runs the step's last backward pass, so its gradient all-reduces
  // and update end the step: its m micro-batches, its idle time in the
  // pipeline (the bubble), then its once-per-step work.
  out.exchange_bytes = first_stage.exchange_bytes;
  for (const auto& [name, seconds] : first_stage.compute_parts) out.compute_parts[name] = m * seconds;
  for (const auto& [name, seconds] : first_stage.exchange_parts) out.exchange_parts[name] = m * seconds;
  out.hidden_seconds = m * first_stage.hidden_seconds;
  add_optimizer(machine, c, out);
  add_allreduces(machine, c, where, out);
  out.bubble_seconds = out.pipeline_seconds - m * out.stage_seconds.front();
  out.step_seconds = sum_parts(out) + out.bubble_seconds;
  const double tokens = static_cast<double>(c.model.seq_len) * static_cast<double>(c.model.batch);
  out.tokens_per_second = out.step_seconds > 0 ? tokens / out.step_seconds : 0.0;

  out.memory_parts = plan.parts;
  out.recompute = plan.recompute;
  out.memory_bytes_per_rank = static_cast<double>(plan.total());
  out.fits = out.memory_bytes_per_rank <= machine.memory_bytes_per_rank;
  return out;
}

}  // namespace miniattn
