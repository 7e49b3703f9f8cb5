#pragma once
// One record per parallel.strategy word: what the deck check, the memory plan,
// the exchange model, the performance model, the report and the factory ask
// of a strategy, defined in the strategy's own file beside its class
// (ring_attention.cpp: local and ring; ring_self_attention.cpp: rsa;
// ulysses_attention.cpp: ulysses and hybrid; allgather_attention.cpp:
// allgather) and listed once in strategy_table.cpp. This header is plain C++
// (no Kokkos, no MPI): the deck check (core/config_validation.cpp) reads it.
// docs/design.md 5.4 lists the places a new strategy touches.
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <type_traits>
#include <vector>

#include "comm/exchange_label.hpp"
#include "core/deck_words.hpp"

namespace miniattn {

struct bf16;
template <class T>
class AttentionStrategy;
struct AttentionSizes;  // strategy_table.hpp
struct AttentionBuild;  // strategy_table.hpp
namespace kernels {
struct AttentionMask;
}

struct AttentionMemory {
  std::size_t shared = 0;     // one workspace all layers share
  std::size_t per_layer = 0;  // each layer instance's own Views
  std::size_t cudnn_workspace = 0;  // of shared: cuDNN's own (kernels::cudnn_workspace_bytes)
};

// A strategy's MakeLayers allocates its shared workspace (adding its bytes to
// shared_bytes) and returns the maker of one layer for a given mask.
template <class T>
using LayerMaker = std::function<std::unique_ptr<AttentionStrategy<T>>(const kernels::AttentionMask&)>;
template <class T>
using MakeLayers = LayerMaker<T> (*)(const AttentionBuild&, std::size_t& shared_bytes);

// How the K/V blocks of the other SP ranks reach a rank's queries: the
// performance model (perfmodel/step_model.cpp) times each route its own way.
enum class KeyValueRoute {
  ring,        // round the ring of sp / U ranks a block a step, each transfer behind a step's compute
  dense_ring,  // RSA: K round the ring for the dense score rows, then V for the output
  gathered,    // all-gathered before the attention, dK and dV reduce-scattered after
};

// The Ulysses degree U of the all-to-alls around the attention.
enum class UlyssesDegree {
  none,   // U = 1: no all-to-all
  sp,     // U = sp: the whole SP group exchanges heads
  deck,   // U = parallel.ulysses_degree (predict: its own choice)
};

struct StrategyRecord {
  Strategy strategy;
  // The deck check's facts (core/config_validation.cpp): whether it splits
  // the sequence (local needs sp = 1), its Ulysses degree (heads and K/V heads
  // must split over U), and whether its blocks run on kernels.attention's
  // kernel (rsa computes dense score blocks of its own).
  bool splits_sequence;
  UlyssesDegree ulysses;
  bool takes_attention_kernel;
  // The performance model's: the route of its K/V blocks; U > 1 adds the all-to-alls.
  KeyValueRoute key_values;
  // Its own exchanges, inside its measured attention time (the report's
  // waits, the bench's hidden-exchange account): every label add_exchanges writes.
  std::vector<Exchange> exchanges;
  // What it allocates on a rank and sends per step, from one AttentionSizes.
  AttentionMemory (*memory)(const AttentionSizes&);
  // Adds the payload bytes one step sends over `layers` layers, by the labels the Comm counts.
  void (*add_exchanges)(const AttentionSizes&, double layers, std::map<Exchange, double>& bytes);
  MakeLayers<float> make_f32;
  MakeLayers<double> make_f64;
  MakeLayers<bf16> make_bf16;

  template <class T>
  MakeLayers<T> make_layers() const {
    if constexpr (std::is_same<T, float>::value) return make_f32;
    else if constexpr (std::is_same<T, double>::value) return make_f64;
    else return make_bf16;
  }
  bool all_to_all() const { return ulysses != UlyssesDegree::none; }
  // U over sp ranks, given the deck's (or predict's) hybrid degree.
  int ulysses_degree(int sp, int deck_degree) const {
    return ulysses == UlyssesDegree::sp ? sp : ulysses == UlyssesDegree::deck ? deck_degree : 1;
  }
};

// The record of a deck word; every word has one (test_strategy_table holds it).
const StrategyRecord& strategy_record(Strategy strategy);

// Whether `label` is one of any strategy's own exchanges; of the ring's.
bool attention_exchange(Exchange label);
bool ring_exchange(Exchange label);

}  // namespace miniattn
