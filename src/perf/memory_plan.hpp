#pragma once
// Bytes every View of a run will take on one rank, computed from the deck
// before anything is allocated, so that a run that cannot fit is refused with
// the amount it needs. The driver compares the plan with what the objects
// really allocated (they must agree exactly; a test holds that).
//
// With R = (batch / dp) * (N / sp) rows per TP group, activation memory is
// linear in R for every strategy but two: rsa, whose (N / sp) x N score rows
// are its defining cost, and allgather, whose gathered K and V (and dK, dV)
// hold all N positions of the K/V heads: O(N) per rank, not O(N / sp). Tensor parallelism divides all of it by tp: the residual
// stream and LayerNorm regions hold R / tp rows (Megatron sequence
// parallelism), the attention and FFN regions H / tp heads and F / tp units;
// it adds two [R, D] exchange buffers. With micro-batches, R is one micro-
// batch's rows; pipeline stage s keeps the activations of its layers for
// min(pp - s, micro_batches) micro-batches in flight (the 1F1B bound; with
// interleaving, each chunk's own count: pipeline_slots), the
// embedding's parameters on the first stage, the head's on the last, and a
// [R / tp, D] send buffer for the input gradient on all but the first.
#include <cstddef>
#include <map>
#include <string>

#include "core/config.hpp"
#include "core/decomposition.hpp"
#include "kernels/attention/attention.hpp"

namespace miniattn {

// What the bytes are for; in the order of their names (to_string), the order
// the report and the refusal message list them.
enum class MemoryPart {
  activations,           // saved per block and micro-batch in flight, the residual stream, the head
  attention,             // the strategy's buffers and the kernels' scratch
  cudnn_workspace,       // cuDNN's own workspace (kernels.attention: cudnn)
  optimizer,             // AdamW's moments
  parameters_gradients,  // master parameters and gradients ((bf16) and the rounded weights)
  pipeline_send_buffer,  // the input gradient sent to the previous stage
  reduction_workspaces,  // fixed-order sums
  rotary_positions,      // rope's cos/sin tables
  tokens_positions,      // inputs, targets, positions (and document ids)
  workspaces,            // shared by all blocks
};

// The part as the report spells it ("parameters+gradients").
const char* to_string(MemoryPart part);

struct MemoryPlan {
  std::map<MemoryPart, std::size_t> parts;  // bytes by purpose
  bool recompute = true;  // as MemoryPlanInput::recompute: the plan's own choice under train.recompute auto
  std::size_t total() const;
};

// The decomposition and this rank's share.
struct MemoryPlanInput : Decomposition {
  ModelConfig model;
  OptimizerKind optimizer = OptimizerKind::adamw;
  int stage = 0;  // this rank's pipeline stage
  std::int64_t replicated_parameters = 0;  // on this rank (its stage's; tensor-parallel shards included)
  bool documents = false;                  // data.documents: each slot's document ids
  kernels::AttentionBlocking blocking{kernels::kHostTileRows, kernels::kHostTileRows};  // the attention kernel's
  // Whether the backward pass recomputes each block's q, k, v and fc1 output
  // into one shared workspace; else every block of every slot keeps its own.
  bool recompute = true;
};

MemoryPlan plan_memory(const MemoryPlanInput& in);

// plan_memory, with the cudnn kernel's deterministic calls cut along their
// query rows (in.blocking.cudnn_rows_per_call, set here) so that the plan fits
// `available` bytes (0: unknown, no cut) and cuDNN's workspace fits
// `cudnn_workspace_limit` (0: no limit of its own): the most rows, a power of
// two times 64 (cuDNN pads a call's rows and keys to 64) or the whole block,
// so that a little more or less free memory seldom changes the cut, and with
// it the bits. The smallest cut when nothing fits (the caller refuses the run).
// in.recompute is set from `recompute`: under auto, kept activations when
// that plan fits `available`, else recomputed (the bits are the same either way).
MemoryPlan plan_memory_within(MemoryPlanInput& in, std::size_t available, std::size_t cudnn_workspace_limit,
                              Recompute recompute);

// Why the plan's cuDNN workspace breaks kernels.cudnn_workspace_mib
// (`limit` bytes, 0: none), naming the backward; "" when it does not.
// Deterministic calls were cut as far as they go (64 query rows); the
// non-deterministic backward's workspace is not cut at all.
std::string cudnn_workspace_refusal(const MemoryPlan& plan, std::size_t limit, bool deterministic);

// Memory one rank may use: run.memory_per_rank_gib if set, else the free
// memory of where the Views live divided by the ranks that share it: this
// node's MemAvailable by the ranks on the node, a GPU's free memory (CUDA,
// HIP) by the ranks on that GPU; 0 when unknown.
std::size_t memory_available_per_rank(double memory_per_rank_gib, int ranks_sharing);

// The GPU this rank's Views live on; -1 for host memory.
int memory_device_id();

// Free memory of this rank's GPU now (the device's own count); 0 when the Views live in host memory.
std::size_t device_free_bytes();

std::string format_bytes(double bytes);

}  // namespace miniattn
