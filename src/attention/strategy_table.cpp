#include "attention/strategy_table.hpp"

#include <stdexcept>

#include "attention/allgather_attention.hpp"
#include "attention/block_reach.hpp"
#include "attention/ring_attention.hpp"
#include "attention/ring_self_attention.hpp"
#include "attention/ulysses_attention.hpp"

namespace miniattn {

const StrategyEntry& strategy_entry(Strategy strategy) {
  switch (strategy) {
    case Strategy::local: return kRingAttentionEntry;  // ring attention on a ring of one rank (sp = 1)
    case Strategy::ring: return kRingAttentionEntry;   // ring attention over the SP group
    case Strategy::rsa: return kRingSelfAttentionEntry;
    case Strategy::ulysses: return kUlyssesAttentionEntry;  // all-to-all around local attention (U = sp)
    case Strategy::hybrid: return kUlyssesAttentionEntry;   // around ring attention across sp / U groups
    case Strategy::allgather: return kAllGatherAttentionEntry;
  }
  throw std::logic_error("strategy_entry: unknown strategy");
}

int ulysses_degree_for(Strategy strategy, int sp, int hybrid_degree) {
  if (strategy == Strategy::ulysses) return sp;
  return strategy == Strategy::hybrid ? hybrid_degree : 1;
}

AttentionSizes attention_sizes(const ModelConfig& model, const Decomposition& d, index_t batch,
                               const kernels::AttentionBlocking& blocking) {
  const ElementSizes element = element_sizes(model.precision);
  AttentionSizes z;
  z.batch = batch;
  z.heads = model.heads / d.tp;
  z.kv_heads = model.kv_head_count() / d.tp;
  z.head_dim = model.head_dim();
  z.rows = model.seq_len / d.sp;
  z.sp = d.sp;
  z.ulysses = d.ulysses;
  z.ring_steps = ring_steps(model, d.layout, d.sp, d.ulysses);
  z.value_bytes = element.value;
  z.acc_bytes = element.acc;
  z.blocking = blocking;
  return z;
}

}  // namespace miniattn
