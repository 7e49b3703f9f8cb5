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
  index_t chunk = 0;  // the stage's model chunk (interleaved schedule; 0 otherwise)
};

std::vector<PipelineOp> one_forward_one_backward(int stage, int stages, index_t micro_batches);

// Megatron-LM's interleaved 1F1B (PTD-P, Narayanan et al. 2021) over
// `chunks` model chunks per stage: stage s holds chunks s, s + pp, ... of
// the model (its local chunk c is the model's chunk c pp + s). Its passes run
// over (micro-batch, chunk) pairs, the k-th forward on chunk (k mod pp v) / pp
// of micro-batch (k / pp v) pp + k mod pp (the chunks taken in turn over
// groups of pp micro-batches; backward passes take the chunks in reverse): a
// warm-up of min(2 (pp - s - 1) + (v - 1) pp, m v) forward passes, then one
// forward and one backward, then the remaining backward passes. Needs
// m % pp == 0 (as Megatron does). With one chunk it is one_forward_one_backward.
// Where m = pp, Megatron-LM runs every forward pass first on every stage; here
// the formula holds there too, so that on the last stage each pass of the
// model's last chunk is followed by its backward, as in 1F1B: the head keeps
// one micro-batch's logits (model/transformer.hpp), not one per slot. Every stage takes each chunk's micro-batches in
// order, forward and backward, and each pair of neighbouring virtual stages
// exchanges its messages in the same order on both sides.
std::vector<PipelineOp> interleaved_one_forward_one_backward(int stage, int stages, int chunks,
                                                             index_t micro_batches);

// The micro-batches in flight at once on each of the stage's chunks under
// the interleaved schedule (the slots of activations each keeps).
std::vector<index_t> interleaved_slots(int stage, int stages, int chunks, index_t micro_batches);

// The slots of activations a stage keeps: in 1F1B the micro-batches in
// flight at once, min(stages - stage, micro_batches); interleaved, the sum of
// its chunks' interleaved_slots (a slot holds one chunk's layers).
index_t pipeline_slots(int stage, int stages, index_t micro_batches, int chunks = 1);

// The idle fraction of every stage in the ideal step (equal stages or
// chunks, no exchange time): (pp - 1) / (v m + pp - 1), 1F1B's with v = 1.
double modelled_bubble_fraction(int stages, index_t micro_batches, int chunks = 1);

// Whether a stage sends input gradients back: all but one holding only the
// model's first chunk (the first stage of 1F1B). It keeps a send buffer for them.
inline bool sends_input_gradients(int stage, int chunks) { return stage > 0 || chunks > 1; }

}  // namespace miniattn
