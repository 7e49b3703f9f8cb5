#pragma once
// Builds the deck's attention strategy (one instance per layer of the stage
// and micro-batch slot) on the process grid:
//   local    ring attention on a ring of one rank (sp = 1)
//   ring     ring attention over the SP group
//   rsa      Ring Self-Attention over the SP group
//   ulysses  all-to-all over the SP group around local attention (U = sp)
//   hybrid   all-to-all over groups of U = ulysses_degree ranks around ring
//            attention across the sp / U groups
//   allgather  all-gather of K and V over the SP group around local attention
#include <memory>
#include <vector>

#include "attention/attention_strategy.hpp"
#include "comm/comm.hpp"
#include "comm/process_grid.hpp"
#include "core/config.hpp"
#include "kernels/attention.hpp"

namespace miniattn {

// The Ulysses degree U the grid needs for a strategy with sp ranks.
int ulysses_degree_for(const ParallelConfig& parallel, int sp_size);

// Global positions held by each ring rank after the Ulysses all-to-all:
// row g concatenates the positions of SP ranks g*U .. g*U + U - 1.
View2<index_t> ring_positions(const ModelConfig& model, const ParallelConfig& parallel, const ProcessGrid& grid);

template <class T>
struct AttentionLayers {
  std::vector<std::unique_ptr<AttentionStrategy<T>>> layers;
  std::size_t shared_workspace_bytes = 0;  // workspaces all layers share (not in the layers' own counts)
  // With data.documents, each slot's [micro_batch, N] document ids, read by
  // the masks of the slot's layers: fill before a micro-batch's forward pass.
  std::vector<View2<index_t>> documents;
};

// slots x layers strategies (slot-major) for micro-batches of `micro_batch` samples.
template <class T>
AttentionLayers<T> make_attention_layers(const Config& config, const ProcessGrid& grid, Comm& comm,
                                         const View2<const index_t>& ring_positions,
                                         const kernels::AttentionBlocking& blocking, index_t micro_batch, index_t slots,
                                         index_t layers);

}  // namespace miniattn
