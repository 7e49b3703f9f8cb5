#pragma once
// Builds the deck's attention strategy (one instance per layer of the stage
// and micro-batch slot) on the process grid, through the strategy's entry in
// the strategy table (attention/strategy_table.hpp).
#include <memory>
#include <vector>

#include "attention/attention_strategy.hpp"
#include "comm/comm.hpp"
#include "comm/process_grid.hpp"
#include "core/config.hpp"
#include "kernels/attention/attention.hpp"

namespace miniattn {

// Global positions held by each ring rank after the Ulysses all-to-all:
// row g concatenates the positions of SP ranks g*U .. g*U + U - 1.
View2<index_t> ring_positions(const ModelConfig& model, const ParallelConfig& parallel, const ProcessGrid& grid);

// slots x layers strategies (slot-major) for micro-batches of `micro_batch` samples.
template <class T>
AttentionLayers<T> make_attention_layers(const Config& config, const ProcessGrid& grid, Comm& comm,
                                         const View2<const index_t>& ring_positions,
                                         const kernels::AttentionBlocking& blocking, index_t micro_batch, index_t slots,
                                         index_t layers);

}  // namespace miniattn
