#pragma once
// The strategies' costs and layers, from one AttentionSizes (their records:
// strategy_record.hpp): what a strategy allocates on a rank, what it sends per
// step and how its layers are built, so that the factory, the memory plan and
// the exchange model ask its record instead of switching on the strategy.
#include <cstddef>

#include "attention/attention_strategy.hpp"
#include "attention/strategy_record.hpp"
#include "comm/comm.hpp"
#include "comm/process_grid.hpp"
#include "core/config.hpp"
#include "core/decomposition.hpp"
#include "kernels/attention/attention.hpp"

namespace miniattn {

// One rank's share of a layer's attention, as every strategy sizes it.
struct AttentionSizes {
  index_t batch = 0;  // samples: a micro-batch (allocation), or the step's local batch (bytes sent)
  index_t heads = 0, kv_heads = 0, head_dim = 0;  // this TP rank's query and K/V heads
  index_t rows = 0;                                // local positions, seq_len / sp
  int sp = 1, ulysses = 1;                         // the SP group and its Ulysses degree U
  int ring_steps = 1;                              // ring_steps() under the model's mask
  std::size_t value_bytes = 0, acc_bytes = 0;      // of an activation and a statistic (element_sizes)
  kernels::AttentionBlocking blocking;
  int ring_size() const { return sp / ulysses; }  // the ring round the Ulysses groups
  // Bytes of a local [batch, heads, rows, head_dim] block of activations.
  double block_bytes(index_t block_heads) const {
    return static_cast<double>(batch) * static_cast<double>(rows) * static_cast<double>(head_dim) *
           static_cast<double>(value_bytes) * static_cast<double>(block_heads);
  }
};

AttentionSizes attention_sizes(const ModelConfig& model, const Decomposition& d, index_t batch,
                               const kernels::AttentionBlocking& blocking);

// What building a strategy's layers needs (MakeLayers, strategy_record.hpp).
struct AttentionBuild {
  Comm& comm;
  const ProcessGrid& grid;
  View2<const index_t> positions;  // ring_positions(): each ring rank's global positions
  AttentionSizes sizes;
  Layout layout = Layout::contiguous;  // parallel.layout (where a Ulysses all-to-all puts its rows)
};

}  // namespace miniattn
