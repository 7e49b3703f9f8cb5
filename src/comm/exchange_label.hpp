#pragma once
// The exchanges, by name: every Comm call takes one, the Comm counters, the
// exchange model (perf/exchange_model.hpp) and the performance model key
// their bytes and seconds by it, and the report's "exchange" object and the
// tests read its name (to_string, exchange_label.cpp: the one table of names).
// Which labels are a strategy's own is its record's (attention/strategy_record.hpp).
// A misspelt label no longer compiles, and a row can no longer split in two.
#include <string>

namespace miniattn {

enum class Exchange {
  loss,                            // the step's loss, summed over the world
  grad_norm,                       // the squared gradient norm's shares (sequence, tensor, pipeline)
  gradients_replicated,            // replicated parameters' gradients over DP x SP (x TP)
  gradients_tensor_parallel,       // TP shards' gradients over DP x SP
  gradients_wpe,                   // wpe rows' gradients over the ranks holding them
  gradients_tied_embedding,        // wte's gradient between the first and the last stage
  pipeline_activations,            // a stage's output to the next stage
  pipeline_gradients,              // its gradient back
  tensor_parallel_gather,          // Megatron sequence parallelism: rows gathered
  tensor_parallel_reduce_scatter,  // and reduce-scattered
  tensor_parallel_allreduce,       // without it: row-parallel outputs, column-parallel input gradients
  ring_forward_kv,                 // ring attention: K/V around the ring
  ring_backward_kv,                // K/V again in backward
  ring_backward_dkdv,              // the travelling dK/dV accumulators
  rsa_forward_k,                   // Ring Self-Attention: K for the scores
  rsa_forward_v,                   // V for the output
  rsa_backward_kv,
  rsa_backward_dkdv,
  allgather_forward_kv,            // all-gathered K/V
  allgather_backward_kv,
  allgather_backward_dkdv,         // reduce-scattered dK/dV
  ulysses_forward_qkv,             // all-to-all: sequence-split to head-split
  ulysses_forward_out,             // and back
  ulysses_forward_lse,
  ulysses_backward_dout,
  ulysses_backward_dqkv,
  overlap_probe,                   // bench and calibrate: the probe of how much a ring shift hides
};

// The label as the report and the tests spell it ("ring.forward.kv").
const char* to_string(Exchange label);

}  // namespace miniattn
