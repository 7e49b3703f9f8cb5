// The strategy search of the performance model (performance_model.hpp): every
// decomposition of a rank count predicted and compared, and the longest
// sequence that fits.
#include "perfmodel/performance_model.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "attention/strategy_table.hpp"

namespace miniattn {

// ---------------------------------------------------------------- strategy comparison

namespace {

// The deck's ulysses_degree when it fits sp and the heads and K/V heads of a
// TP rank, else the largest degree that does and whose group (u SP ranks at
// stride tp, so u tp consecutive world ranks) fits in a node.
int hybrid_degree(const StepConfig& deck, int sp, int tp, std::int64_t ranks_per_node) {
  const std::int64_t heads = deck.model.heads / tp,
                     kv_heads = std::max<std::int64_t>(deck.model.kv_head_count() / tp, 1);
  const auto fits = [&](std::int64_t u) {
    return sp % u == 0 && heads % u == 0 && all_to_all_carries_kv_heads(kv_heads, u);
  };
  if (deck.ulysses > 1 && fits(deck.ulysses)) return deck.ulysses;
  for (std::int64_t u = std::min<std::int64_t>(sp, ranks_per_node / tp); u > 1; --u)
    if (fits(u)) return static_cast<int>(u);
  return 1;
}

}  // namespace

std::vector<StrategyChoice> predict_strategies(const MachineDescription& machine, const StepConfig& deck, int ranks) {
  const std::int64_t batch = deck.model.batch;
  const int tp = (deck.tp > 1 && ranks % deck.tp == 0) ? deck.tp : 1;
  const int dp = (deck.dp > 1 && (ranks / tp) % deck.dp == 0 && batch % deck.dp == 0) ? deck.dp : 1;
  const int pp = deck.pp, sp = ranks / (dp * tp * pp);  // sp 0: the stages do not fit
  std::vector<StrategyChoice> choices;
  // A decomposition that cannot make `ranks` (pp does not divide what dp and
  // tp leave) is invalid as the validator says on `ranks` ranks; sp = 0 keeps
  // its config invalid too (longest_fitting_seq_len: 0).
  const auto add = [&](const char* name, StepConfig c) {
    if (c.world_size() == ranks) {
      choices.push_back({name, c, predict_step(machine, c)});
      return;
    }
    StepPrediction p;
    p.valid = false;
    p.problem = validator_problem(c, ranks);
    c.sp = 0;
    choices.push_back({name, c, p});
  };
  for (std::size_t index = 0; index < enum_names<Strategy>().size(); ++index) {
    const auto strategy = static_cast<Strategy>(index);
    StepConfig c = deck;
    c.strategy = strategy;
    c.tp = tp;
    // local: no sequence parallelism, dp x tp x pp ranks (else the SP strategies' dp: the validator names pp).
    const bool splits = strategy_record(strategy).splits_sequence;
    c.dp = splits ? dp : ranks % (tp * pp) == 0 ? ranks / (tp * pp) : dp;
    c.sp = splits ? sp : 1;
    c.ulysses = strategy_record(strategy).ulysses_degree(sp, hybrid_degree(deck, sp, tp, machine.ranks_per_node));
    add(to_string(strategy), c);
  }
  // Pure tensor parallelism: the ranks of each DP replica's stage form one TP group.
  StepConfig c = deck;
  c.strategy = Strategy::local;
  c.dp = dp;
  c.tp = ranks % (dp * pp) == 0 ? ranks / (dp * pp) : tp;
  c.sp = c.ulysses = 1;
  add(kTensorParallelChoice, c);
  return choices;
}

std::vector<std::string> predicted_choice_names() {
  std::vector<std::string> names = enum_names<Strategy>();
  names.push_back(kTensorParallelChoice);
  return names;
}

int best_strategy(const std::vector<StrategyChoice>& choices) {
  int best = -1;
  for (std::size_t i = 0; i < choices.size(); ++i) {
    const StepPrediction& p = choices[i].prediction;
    if (!p.valid || !p.fits) continue;
    if (best < 0 || p.step_seconds < choices[static_cast<std::size_t>(best)].prediction.step_seconds)
      best = static_cast<int>(i);
  }
  return best;
}

std::int64_t longest_fitting_seq_len(const MachineDescription& machine, StepConfig config) {
  // Multiples of 2 sp (every layout splits them) whose micro-batch rows (batch/dp/m)(seq_len/sp) divide over tp.
  const std::int64_t tp = std::max(config.tp, 1);
  const std::int64_t b = std::max<std::int64_t>(
      config.model.batch / std::max(config.dp, 1) / std::max<std::int64_t>(config.micro_batches, 1), 1);
  const std::int64_t granule = 2 * std::max<std::int64_t>(config.sp, 1) * (tp / std::gcd(tp, 2 * b));
  // Only the memory plan grows with seq_len: no need for the step's timing.
  const auto fits = [&](std::int64_t units) {
    config.model.seq_len = units * granule;
    return step_config_problem(config).empty() &&
           static_cast<double>(largest_memory_plan(config).total()) <= machine.memory_bytes_per_rank;
  };
  std::int64_t good = 0, bad = ((std::int64_t{1} << 31) / granule) + 1;  // fits(good) or good == 0; !fits(bad)
  if (fits(bad - 1)) return (bad - 1) * granule;
  while (bad - good > 1) {
    const std::int64_t mid = good + (bad - good) / 2;
    (fits(mid) ? good : bad) = mid;
  }
  return good * granule;
}

}  // namespace miniattn
