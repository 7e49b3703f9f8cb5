#pragma once
// How a run splits its work over world = dp x pp x tp x sp ranks: built once
// (the driver from the deck and the process grid, predict per candidate) and
// passed whole to the memory plan, the exchange model and the performance
// model, which take it as their base.
#include <cstdint>

#include "core/deck_words.hpp"

namespace miniattn {

struct Decomposition {
  Strategy strategy = Strategy::local;
  Layout layout = Layout::contiguous;  // positions over the sp ranks
  int dp = 1, pp = 1, tp = 1, sp = 1;
  int ulysses = 1;                     // Ulysses degree: sp for ulysses, 1 for ring, rsa, allgather and local
  std::int64_t micro_batches = 1;      // per DP replica and step (train.micro_batches)
  int virtual_stages = 1;              // model chunks per pipeline stage (interleaved 1F1B)
  bool tp_sequence_parallel = true;    // LayerNorm and residual rows split over TP (else replicated)
  // The rows a TP rank holds in the LayerNorm and residual regions, of `rows`.
  std::int64_t tp_chunk_rows(std::int64_t rows) const { return tp_sequence_parallel ? rows / tp : rows; }
  int world_size() const { return dp * pp * tp * sp; }
  int stage_ranks() const { return dp * tp * sp; }  // the ranks of one pipeline stage
};

}  // namespace miniattn
