#pragma once
// The attention strategies, listed once (strategy_entry). Each strategy's
// entry is defined in its own .cpp, beside its class: what it allocates on a
// rank, what it sends per step and how its layers are built, from one
// AttentionSizes, so that the factory, the memory plan and the exchange model
// ask it instead of switching on the strategy. A new strategy is one file in
// attention/ that defines its entry, plus its line in strategy_entry().
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <type_traits>

#include "attention/attention_strategy.hpp"
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

struct AttentionMemory {
  std::size_t shared = 0;     // one workspace all layers share
  std::size_t per_layer = 0;  // each layer instance's own Views
};

// What building a strategy's layers needs; a strategy's MakeLayers allocates
// its shared workspace (adding its bytes to shared_bytes) and returns the
// maker of one layer for a given mask.
struct AttentionBuild {
  Comm& comm;
  const ProcessGrid& grid;
  View2<const index_t> positions;  // ring_positions(): each ring rank's global positions
  AttentionSizes sizes;
};
template <class T>
using LayerMaker = std::function<std::unique_ptr<AttentionStrategy<T>>(const kernels::AttentionMask&)>;
template <class T>
using MakeLayers = LayerMaker<T> (*)(const AttentionBuild&, std::size_t& shared_bytes);

// How the K/V blocks of the other SP ranks reach a rank's queries: the
// performance model times each route its own way.
enum class KeyValueRoute {
  ring,        // round the ring of sp / U ranks a block a step, each transfer behind a step's compute
  dense_ring,  // RSA: K round the ring for the dense score rows, then V for the output
  gathered,    // all-gathered before the attention, dK and dV reduce-scattered after
};

struct StrategyEntry {
  AttentionMemory (*memory)(const AttentionSizes&);
  // Adds the payload bytes one step sends over `layers` layers, by the labels the Comm counts.
  void (*add_exchanges)(const AttentionSizes&, double layers, std::map<Exchange, double>& bytes);
  MakeLayers<float> make_f32;
  MakeLayers<double> make_f64;
  MakeLayers<bf16> make_bf16;
  KeyValueRoute key_values;
  bool all_to_all;  // Ulysses all-to-alls over U ranks around the inner attention

  template <class T>
  MakeLayers<T> make_layers() const {
    if constexpr (std::is_same<T, float>::value) return make_f32;
    else if constexpr (std::is_same<T, double>::value) return make_f64;
    else return make_bf16;
  }
};

const StrategyEntry& strategy_entry(Strategy strategy);

// The Ulysses degree U of a strategy over sp ranks (hybrid: the deck's, or predict's choice).
int ulysses_degree_for(Strategy strategy, int sp, int hybrid_degree);

}  // namespace miniattn
