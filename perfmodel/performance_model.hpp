#pragma once
// An alpha-beta performance model of one training step, per strategy (local,
// ring, rsa, ulysses, hybrid, allgather), from a machine description (rates, bandwidths,
// latencies, memory) and the deck's sizes. It reuses the analytic byte counts
// (exchange_model), the memory planner (memory_plan) and the FLOP counts
// (flop_count), so that prediction and measurement count the same things.
//
// One rank's step = compute + exchange - hidden:
//  compute   dense GEMMs (forward 1x, backward 2x of the dense FLOPs) / gemm_flops
//            + attention kernel work / attention (or rsa) FLOP/s, counted as the
//              tiles the blockwise kernel really computes (causal: the tiles on
//              and below the diagonal of each chunk pair, and under model.window
//              only the tiles the window reaches: attention_work), the tiles
//              on a mask's edge at the edge rates, with the slowest rank of
//              each ring step setting its pace
//            + elementwise bytes (LayerNorm, GELU, head layouts, residual adds,
//              cross-entropy, Ulysses packing, optimizer) / elementwise_bandwidth;
//              (RSA's softmax over its n x N rows is part of its calibrated rate)
//            with tp > 1 (Megatron, docs/design.md 3.1a) a rank computes every
//            block GEMM and its attention for H/tp heads and F/tp units over all
//            R rows, and its LayerNorm, residual, head and loss work on R/tp rows
//  exchange  per Comm label: messages * latency + bytes / bandwidth, the bytes
//            from modelled_exchange_bytes; intra- or inter-node bandwidth by
//            where the partners sit (consecutive world ranks share a node;
//            Ulysses groups are consecutive SP ranks; a ring crosses nodes
//            when its SP group spans more than one node); all-reduces as a ring
//            (2 (p-1)/p bytes / bandwidth) with a tree's 2 log2(p) latencies;
//            tensor-parallel all-gathers and reduce-scatters (tp consecutive
//            ranks) are blocking: bytes / bandwidth + (tp-1) latencies per call
//  hidden    the part of each ring step's posted K/V (RSA: K, V) transfer that
//            runs during that step's block compute:
//            min(compute, overlap_efficiency * transfer); the backward's
//            travelling dK/dV are posted after the block compute and stay exposed.
//
// Pipeline (pp stages, m micro-batches, 1F1B): each stage's per-micro-batch
// time t_s is the compute and TP/SP exchanges above for its layers
// (stage_layers; the embedding on the first stage, ln_f, head and loss on the
// last) and 1/m of the local batch, plus the sends of its activations and
// input gradients to the neighbour stages (a receive completes before its pass
// runs, so every hop is on the critical path). The pipeline spans
// (m + pp - 1) max_s t_s. Interleaved over v chunks a stage (PTD-P), a pass
// is a chunk's, t_s / v, with v sends each way instead of one (the last
// stage's outputs wrap round to the first stage), and the span is
// (m + (pp - 1) / v) max_s t_s; then come the gradient all-reduces (over the stage's
// ranks; the tied wte between the first and last stage), the loss, the norm
// and the update. Stage 0 runs the step's last backward pass, so its
// all-reduces and update end the step: every per-rank figure (parts, bytes) is
// stage 0's, the memory the largest stage's (stage 0's in practice: pp
// micro-batches in flight). With pp = m = 1 all of it is the plain step above.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "comm/exchange_label.hpp"
#include "core/config.hpp"
#include "kernels/attention/attention.hpp"
#include "perf/memory_plan.hpp"

namespace miniattn {

// The compute rates of one rank; kRateFields says what each is.
struct RankRates {
  double gemm_flops = 0;
  double attention_flops_forward = 0;
  double attention_flops_backward = 0;
  double attention_edge_flops_forward = 0;
  double attention_edge_flops_backward = 0;
  double rsa_flops_forward = 0;
  double rsa_flops_backward = 0;
  double elementwise_bandwidth = 0;

  double attention_edge_forward_rate() const {
    return attention_edge_flops_forward > 0 ? attention_edge_flops_forward : attention_flops_forward;
  }
  double attention_edge_backward_rate() const {
    return attention_edge_flops_backward > 0 ? attention_edge_flops_backward : attention_flops_backward;
  }
  double rsa_forward_rate() const { return rsa_flops_forward > 0 ? rsa_flops_forward : attention_flops_forward; }
  double rsa_backward_rate() const { return rsa_flops_backward > 0 ? rsa_flops_backward : attention_flops_backward; }
};

// A data member of type T of class C, named through an alias: g++ behind
// nvcc warns (-Wparentheses) about a bare pointer-to-member declarator.
template <class C, class T>
using MemberOf = T C::*;

// A rate's machine-file key (the same under `alone:`), its member and the
// comment written above it. Optional rates are 0 when unset.
struct RateField {
  const char* key;
  MemberOf<RankRates, double> member;
  bool required;
  const char* comment;
};
inline constexpr RateField kRateFields[] = {
    {"gemm_flops", &RankRates::gemm_flops, true, "FLOP/s of one rank's dense-layer GEMMs (2 FLOPs per multiply-add)"},
    {"attention_flops_forward", &RankRates::attention_flops_forward, true,
     "FLOP/s of the blockwise attention forward (4 n^2 D per head set of the tiles it computes)"},
    {"attention_flops_backward", &RankRates::attention_flops_backward, true,
     "FLOP/s of the blockwise attention backward (counted as 2.5 x the forward FLOPs)"},
    {"attention_edge_flops_forward", &RankRates::attention_edge_flops_forward, false,
     "FLOP/s of the forward on tiles on a mask's edge (causal diagonal, window bounds), counted whole "
     "(default: attention_flops_forward)"},
    {"attention_edge_flops_backward", &RankRates::attention_edge_flops_backward, false,
     "FLOP/s of the backward on tiles on a mask's edge (default: attention_flops_backward)"},
    {"rsa_flops_forward", &RankRates::rsa_flops_forward, false,
     "FLOP/s of RSA's score + softmax + apply kernels, 4 Dh per pair (default: attention_flops_forward)"},
    {"rsa_flops_backward", &RankRates::rsa_flops_backward, false,
     "FLOP/s of RSA's dense block backward, 10 Dh per pair (default: attention_flops_backward)"},
    {"elementwise_bandwidth", &RankRates::elementwise_bandwidth, true,
     "bytes/s (read + written) of the elementwise kernels (LayerNorm, GELU, layouts)"},
};

// A machine, per rank (one rank = one GPU or one CPU core/socket, as run).
// All rates are for one precision (`precision`, empty = not stated).
//
// Node sharing: the inherited rates are per rank with every rank of a node
// busy (ranks share memory bandwidth, caches and clock headroom). `alone`
// holds the rates of one rank with the rest of its node idle (0: the same).
// A run with `active` ranks on a node gets, for every rate,
//   min(alone, busy * ranks_per_node / active)
// (the node's busy throughput shared by the active ranks, capped by what one
// rank reaches alone): busy when the node is full, alone for one rank.
struct MachineDescription : RankRates {
  std::string name;
  std::string description;
  std::string precision;                // fp32 | fp64 | bf16 | "" (any)
  std::string attention_kernel;         // fused | gemm | cudnn | "" (the deck's): what the attention rates timed
  double memory_bytes_per_rank = 0;     // bytes one rank may use
  double bandwidth_intra = 0;           // bytes/s one rank sends to a partner on its node
  double bandwidth_inter = 0;           // bytes/s one rank sends to a partner on another node
  double latency_intra = 0;             // seconds per message on a node
  double latency_inter = 0;             // seconds per message between nodes
  std::int64_t ranks_per_node = 1;      // consecutive world ranks share a node
  double overlap_efficiency = 1.0;      // fraction of a posted transfer that progresses during compute
  RankRates alone;

  // The rates a rank gets when `active` ranks of its node run (see above).
  MachineDescription shared_by(std::int64_t active) const;
};

// Reads a machine YAML file. Errors are InputError naming `key_name` (e.g.
// "run.machine"), the file and the offending key.
MachineDescription read_machine_file(const std::string& path, const std::string& key_name = "run.machine");
MachineDescription parse_machine_text(const std::string& yaml_text, const std::string& where);
// Checks every value (positive rates, 0 <= overlap <= 1, ...); throws InputError "where: key: reason".
void validate_machine(const MachineDescription& machine, const std::string& where);
// The YAML text of a machine description, every key with a comment line; `extra` is
// appended as-is (e.g. a "calibration:" mapping with what was measured how).
std::string machine_to_yaml(const MachineDescription& machine, const std::string& header_comment,
                            const std::string& extra = "");
// The same keys as JSON, RSA's rates as predict uses them (the attention rates when unset).
nlohmann::json machine_to_json(const MachineDescription& machine);

// One decomposition of one model.
struct StepConfig : Decomposition {
  ModelConfig model;
  OptimizerKind optimizer = OptimizerKind::adamw;
  bool documents = false;  // data.documents (their ids are in the memory plan)
  kernels::AttentionBlocking blocking{kernels::kHostTileRows, kernels::kHostTileRows};  // attention kernel and tiles
  // train.recompute: predict_step plans memory with it, then predicts the time of the plan's choice.
  Recompute recompute = Recompute::automatic;
  // What the memory plan cuts cuDNN's deterministic calls to fit (plan_memory_within): the machine's
  // memory per rank and kernels.cudnn_workspace_mib in bytes (0: no limit).
  std::size_t memory_available = 0, cudnn_workspace_limit = 0;
  ElementSizes sizes() const { return element_sizes(model.precision); }
};

// "" when the decomposition can run, else the deck validator's message for it
// (validate_config: "key: reason", e.g. "parallel.tp: must divide model.heads ...").
std::string step_config_problem(const StepConfig& config);
// The same judged on `ranks` ranks (the strategy search's candidates).
std::string validator_problem(const StepConfig& config, int ranks);

// The memory plan of the stage that needs the most: the run checks every
// rank's plan, so that one decides whether it fits (stage 0 in practice: pp
// micro-batches in flight, the embedding, the extra layer of an uneven split).
MemoryPlan largest_memory_plan(const StepConfig& config);

// step_seconds = compute_seconds + exchange_seconds - hidden_seconds + bubble_seconds,
// each of stage 0's ranks (with pp = 1: the only stage; bubble_seconds = 0).
struct StepPrediction {
  bool valid = true;
  std::string problem;  // why not valid
  double step_seconds = 0, compute_seconds = 0, exchange_seconds = 0, hidden_seconds = 0;
  std::map<std::string, double> compute_parts;   // gemm, attention_forward, attention_backward, elementwise, optimizer
  std::map<Exchange, double> exchange_parts;  // seconds by Comm label, before hiding
  std::map<Exchange, double> exchange_bytes;  // bytes per step by Comm label (modelled_exchange_bytes, stage 0)
  // Pipeline: per-micro-batch seconds of each stage; the 1F1B span
  // (m + (pp - 1) / v) x their maximum; stage 0's idle time in it; and the idle
  // fraction of the ideal pipeline, modelled_bubble_fraction(pp, m, v).
  std::vector<double> stage_seconds;
  double pipeline_seconds = 0, bubble_seconds = 0, bubble_fraction = 0;
  std::map<MemoryPart, std::size_t> memory_parts;  // of the stage needing the most
  double memory_bytes_per_rank = 0;
  bool recompute = true;  // the plan's choice: whether the backward recomputes q, k, v and fc1's output
  bool fits = true;
  double tokens_per_second = 0;
};

StepPrediction predict_step(const MachineDescription& machine, const StepConfig& config);

// Replicated parameters (all but wpe) on one rank of pipeline stage `stage`
// (of pp), as ParameterLayout counts them: with tp > 1 the tensors whole on
// every rank plus this rank's TP shards.
std::int64_t replicated_parameter_count(const ModelConfig& model, int tp = 1, int pp = 1, int stage = 0);

// predict_strategies() compares every strategy of the deck, in the order of
// enum_names<Strategy>(), then one more choice, pure tensor parallelism.
inline constexpr const char* kTensorParallelChoice = "tensor_parallel";
// The names of predict_strategies()' choices, in its order.
std::vector<std::string> predicted_choice_names();

// The choices predicted for `ranks` ranks: each strategy of the deck
// with its decomposition (the deck's pp and micro_batches; tp from the deck
// when it divides ranks, else 1; dp from the deck when it divides ranks / tp
// and the batch, else 1; sp = ranks / (dp tp pp); local: sp = 1, dp = ranks /
// (tp pp); hybrid with the deck's ulysses_degree when > 1, else the largest
// divisor of sp and heads / tp whose group fits in a node), then pure tensor
// parallelism: strategy local, the same dp, tp = ranks / (dp pp). Invalid ones
// (also those whose dp tp pp sp cannot make `ranks`) come back with valid =
// false and the validator's problem for `ranks` ranks.
struct StrategyChoice {
  std::string name;  // one of predicted_choice_names()
  StepConfig config;
  StepPrediction prediction;
};
std::vector<StrategyChoice> predict_strategies(const MachineDescription& machine, const StepConfig& deck, int ranks);

// Index in `choices` of the fastest valid strategy that fits, -1 if none.
int best_strategy(const std::vector<StrategyChoice>& choices);

// The longest seq_len (a multiple of 2 sp, so that every layout splits it, and
// of what makes a micro-batch's rows (batch/dp/m)(seq_len/sp) divide over tp; at most 2^31)
// with which `config` is valid and its planned memory fits in the machine's
// memory per rank; 0 when not even the shortest fits. The planned memory grows
// with seq_len, so a bisection finds it.
std::int64_t longest_fitting_seq_len(const MachineDescription& machine, StepConfig config);

// Bytes the element-wise kernels move (read + written), in scalars per row of
// width D (or F for the FFN's hidden rows): one convention for the
// performance model and for calibrate's measurement of their bandwidth.
namespace elementwise_scalars {
constexpr double layer_norm_forward = 3, layer_norm_backward = 5;  // x, y, stats; x, dy, dx, ...
constexpr double qkv_split = 6, qkv_merge = 6;                     // [R, 3D] <-> three [H, R, Dh]
constexpr double head_merge = 2, head_split = 2;                   // [H, R, Dh] <-> [R, D]
constexpr double residual_add = 3;  // x, y read, z written
constexpr double gelu_forward = 2, gelu_backward = 3;              // per row of F
// What calibrate runs for one block: the forward's LayerNorms, q/k/v split,
// head merge, residual adds, GELU; the backward's GELU,
// LayerNorms, head split and q/k/v merge (in rows of D, and rows of F).
constexpr double calibrated_block_d = 2 * layer_norm_forward + qkv_split + head_merge + 2 * residual_add +
                                      2 * layer_norm_backward + head_split + qkv_merge;
constexpr double calibrated_block_f = gelu_forward + gelu_backward;
}  // namespace elementwise_scalars

}  // namespace miniattn
