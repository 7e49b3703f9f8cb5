#pragma once
// Analytic bytes one rank hands to MPI per training step (payload sent to
// other ranks). Attention's are the strategy's own (its add_exchanges in
// attention/strategy_table.hpp, stated beside its class: ring, rsa,
// allgather, ulysses/hybrid). The rest, with t = tp ranks, b = local batch,
// n = N / sp local positions, s = bytes of a value (model.precision; 2 in bf16):
//   tensor parallel: 6 all-gathers (2 forward, 4 backward: two recomputed
//                    LayerNorm outputs, two output gradients) and 4
//                    reduce-scatters (2 + 2) of the [b n / t, D] chunk, each
//                    sending (t-1) b n D s / t  (t > 1)
// over the stage's layers (all of them with pp = 1), plus, per step (gradients
// in 4-byte parameters for bf16, as fp32): the gradients of the tensors whole on every rank of the stage (dp sp t > 1), of
// the tensor-parallel shards (dp sp > 1, with t > 1), of the wpe rows (first
// stage, dp t > 1), of the tied wte (first and last stage, pp > 1), the loss
// (ranks > 1) and the gradient norm's shares of wpe (first stage, sp > 1), of
// the shards (t > 1) and of the stages (pp > 1). Pipeline: every micro-batch's
// [b n / (m t), D] output goes to the next stage (all but the last) and its
// input gradient to the previous one (all but the first): b n D s / t each
// per step, whatever the number m of micro-batches.
#include <cstdint>
#include <map>
#include <string>

#include "comm/exchange_label.hpp"
#include "core/config.hpp"
#include "core/decomposition.hpp"

namespace miniattn {

// The decomposition (layout, with model.window: how far a ring must carry blocks) and this rank's share.
struct ExchangeModelInput : Decomposition {
  ModelConfig model;
  int stage = 0;  // this rank's pipeline stage
  std::int64_t replicated_parameters = 0;       // on this rank (its stage's), tensor-parallel shards included
  std::int64_t tensor_parallel_parameters = 0;  // of those, the shards
  std::int64_t local_wpe_parameters = 0;
};

// Bytes this rank sends per step, by the same labels the Comm counters use.
std::map<Exchange, double> modelled_exchange_bytes(const ExchangeModelInput& in);

}  // namespace miniattn
