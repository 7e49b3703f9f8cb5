#include "attention/strategy_table.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "attention/allgather_attention.hpp"
#include "attention/block_reach.hpp"
#include "attention/ring_attention.hpp"
#include "attention/ring_self_attention.hpp"
#include "attention/ulysses_attention.hpp"

namespace miniattn {

namespace {

// Every deck word's record, in the order of enum_names<Strategy>(): the one
// line a new strategy adds.
const std::vector<const StrategyRecord*>& strategy_records() {
  static const std::vector<const StrategyRecord*> records = {
      &local_attention_record(),   &ring_self_attention_record(), &ring_attention_record(),
      &ulysses_attention_record(), &hybrid_attention_record(),    &allgather_attention_record()};
  return records;
}

}  // namespace

const StrategyRecord& strategy_record(Strategy strategy) {
  const auto index = static_cast<std::size_t>(strategy);
  const std::vector<const StrategyRecord*>& records = strategy_records();
  if (index >= records.size() || records[index]->strategy != strategy)
    throw std::logic_error(std::string("strategy_record: the table has no record for ") + to_string(strategy) +
                           " in its place");
  return *records[index];
}

bool attention_exchange(Exchange label) {
  for (const StrategyRecord* record : strategy_records())
    if (std::find(record->exchanges.begin(), record->exchanges.end(), label) != record->exchanges.end()) return true;
  return false;
}

bool ring_exchange(Exchange label) {
  const std::vector<Exchange>& ring = ring_attention_record().exchanges;
  return std::find(ring.begin(), ring.end(), label) != ring.end();
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
