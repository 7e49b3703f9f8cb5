#pragma once
// The 1F1B pipeline schedule (PipeDream-Flush, as in Megatron-LM), as a pure
// function of the stage, the number of stages and of micro-batches: stage s
// runs min(pp - s - 1, m) forward passes (warm-up), then alternates one
// forward and one backward, then runs the remaining backward passes
// (cool-down). Micro-batches flow forward in order and backward in order, so
// each pair of neighbouring stages exchanges its messages in the same order
// on both sides, and at most min(pp - s, m) micro-batches are in flight on
// stage s (pp on the first stage): the slots of activations it keeps.
#include <vector>

#include "core/types.hpp"

namespace miniattn {

struct PipelineOp {
  bool forward = true;
  index_t micro_batch = 0;
};

std::vector<PipelineOp> one_forward_one_backward(int stage, int stages, index_t micro_batches);

// Micro-batches in flight at once on a stage: min(stages - stage, micro_batches).
index_t pipeline_slots(int stage, int stages, index_t micro_batches);

// The idle fraction of every stage in the ideal 1F1B step (equal stages, no
// exchange time): (pp - 1) / (m + pp - 1).
double modelled_bubble_fraction(int stages, index_t micro_batches);

}  // namespace miniattn
