// The strategy records (attention/strategy_record.hpp): every deck word has
// its record in its place, a record lists every exchange label its byte
// count writes, and the Ulysses degree follows the record.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>

#include "attention/strategy_table.hpp"

namespace {

using miniattn::Exchange;
using miniattn::Strategy;
using miniattn::StrategyRecord;

Strategy strategy_at(std::size_t index) { return static_cast<Strategy>(index); }

TEST(StrategyTable, EveryStrategyWordHasItsRecord) {
  for (std::size_t i = 0; i < miniattn::enum_names<Strategy>().size(); ++i) {
    const Strategy strategy = strategy_at(i);
    EXPECT_NO_THROW(EXPECT_EQ(miniattn::strategy_record(strategy).strategy, strategy))
        << "parallel.strategy " << miniattn::to_string(strategy) << " is missing from strategy_table.cpp";
  }
}

// Four SP ranks (hybrid: two Ulysses groups of two), every step of the ring.
miniattn::AttentionSizes sizes_for(const StrategyRecord& record) {
  miniattn::AttentionSizes z;
  z.batch = 2;
  z.heads = 8;
  z.kv_heads = 4;
  z.head_dim = 16;
  z.rows = 32;
  z.sp = record.splits_sequence ? 4 : 1;
  z.ulysses = record.ulysses_degree(z.sp, 2);
  z.ring_steps = z.ring_size();
  z.value_bytes = z.acc_bytes = 4;
  return z;
}

TEST(StrategyTable, ARecordListsEveryLabelItsBytesUse) {
  for (std::size_t i = 0; i < miniattn::enum_names<Strategy>().size(); ++i) {
    const StrategyRecord& record = miniattn::strategy_record(strategy_at(i));
    std::map<Exchange, double> bytes;
    record.add_exchanges(sizes_for(record), 3.0, bytes);
    const std::string name = miniattn::to_string(record.strategy);
    for (const auto& [label, sent] : bytes) {
      EXPECT_GE(sent, 0.0) << name;
      EXPECT_TRUE(miniattn::attention_exchange(label)) << name << " sends " << miniattn::to_string(label);
      EXPECT_NE(std::find(record.exchanges.begin(), record.exchanges.end(), label), record.exchanges.end())
          << name << " sends " << miniattn::to_string(label) << " but its record does not list it";
    }
    for (const Exchange label : record.exchanges)
      EXPECT_GT(bytes[label], 0.0) << name << " lists " << miniattn::to_string(label) << " but sends nothing there";
  }
}

TEST(StrategyTable, OnlyStrategiesOwnTheirExchanges) {
  EXPECT_TRUE(miniattn::ring_exchange(Exchange::ring_backward_dkdv));
  EXPECT_FALSE(miniattn::ring_exchange(Exchange::rsa_forward_k));
  EXPECT_TRUE(miniattn::attention_exchange(Exchange::allgather_forward_kv));
  for (const Exchange label : {Exchange::loss, Exchange::gradients_replicated, Exchange::pipeline_activations,
                               Exchange::tensor_parallel_gather, Exchange::overlap_probe})
    EXPECT_FALSE(miniattn::attention_exchange(label)) << miniattn::to_string(label);
}

TEST(StrategyTable, UlyssesDegreeFollowsTheRecord) {
  EXPECT_EQ(miniattn::strategy_record(Strategy::ulysses).ulysses_degree(8, 2), 8);
  EXPECT_EQ(miniattn::strategy_record(Strategy::hybrid).ulysses_degree(8, 2), 2);
  for (const Strategy s : {Strategy::local, Strategy::ring, Strategy::rsa, Strategy::allgather})
    EXPECT_EQ(miniattn::strategy_record(s).ulysses_degree(8, 2), 1) << miniattn::to_string(s);
}

}  // namespace
