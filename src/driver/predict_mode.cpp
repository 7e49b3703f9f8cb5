#include "driver/predict_mode.hpp"

#include <cstdio>
#include <string>
#include <vector>

#include "core/config_json.hpp"
#include "core/error.hpp"
#include "perf/memory_plan.hpp"
#include "perf/performance_model.hpp"

namespace miniattn {

namespace {

StepConfig deck_step_config(const Config& c) {
  StepConfig s;
  s.model = c.model;
  s.strategy = c.parallel.strategy;
  s.layout = c.parallel.layout;
  s.optimizer = c.train.optimizer;
  s.dp = static_cast<int>(c.parallel.dp);
  s.ulysses = static_cast<int>(c.parallel.ulysses_degree);
  s.query_block = c.kernels.query_block;
  s.key_block = c.kernels.key_block;
  return s;
}

nlohmann::json seconds_map(const std::map<std::string, double>& values) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, value] : values) out[name] = value;
  return out;
}

nlohmann::json brief_json(const StepConfig& c, const StepPrediction& p) {
  nlohmann::json j = {{"dp", c.dp}, {"sp", c.sp}, {"ulysses_degree", c.ulysses}, {"valid", p.valid}};
  if (!p.valid) {
    j["problem"] = p.problem;
    return j;
  }
  j["step_seconds"] = p.step_seconds;
  j["compute_seconds"] = p.compute_seconds;
  j["exchange_seconds"] = p.exchange_seconds;
  j["hidden_seconds"] = p.hidden_seconds;
  j["memory_bytes_per_rank"] = p.memory_bytes_per_rank;
  j["fits"] = p.fits;
  j["tokens_per_second"] = p.tokens_per_second;
  return j;
}

nlohmann::json full_json(const StepConfig& c, const StepPrediction& p) {
  nlohmann::json j = brief_json(c, p);
  j["strategy"] = to_string(c.strategy);
  j["layout"] = to_string(c.layout);
  j["ranks"] = c.world_size();
  j["seq_len"] = c.model.seq_len;
  if (!p.valid) return j;
  j["compute"] = seconds_map(p.compute_parts);
  j["exchange"] = seconds_map(p.exchange_parts);
  j["exchange_bytes_per_step"] = seconds_map(p.exchange_bytes);
  nlohmann::json memory = nlohmann::json::object();
  for (const auto& [name, bytes] : p.memory_parts) memory[name] = bytes;
  j["memory_parts"] = memory;
  return j;
}

nlohmann::json machine_json(const MachineDescription& m) {
  return {{"name", m.name},
          {"description", m.description},
          {"precision", m.precision},
          {"gemm_flops", m.gemm_flops},
          {"attention_flops_forward", m.attention_flops_forward},
          {"attention_flops_backward", m.attention_flops_backward},
          {"rsa_flops_forward", m.rsa_forward_rate()},
          {"rsa_flops_backward", m.rsa_backward_rate()},
          {"elementwise_bandwidth", m.elementwise_bandwidth},
          {"memory_bytes_per_rank", m.memory_bytes_per_rank},
          {"bandwidth_intra", m.bandwidth_intra},
          {"bandwidth_inter", m.bandwidth_inter},
          {"latency_intra", m.latency_intra},
          {"latency_inter", m.latency_inter},
          {"ranks_per_node", m.ranks_per_node},
          {"overlap_efficiency", m.overlap_efficiency},
          {"alone", {{"gemm_flops", m.alone.gemm_flops},
                     {"attention_flops_forward", m.alone.attention_flops_forward},
                     {"attention_flops_backward", m.alone.attention_flops_backward},
                     {"rsa_flops_forward", m.alone.rsa_flops_forward},
                     {"rsa_flops_backward", m.alone.rsa_flops_backward},
                     {"elementwise_bandwidth", m.alone.elementwise_bandwidth}}}};
}

// "1.23e+03 s 12.0 GiB", marked "!" when it does not fit.
std::string cell(const StepPrediction& p) {
  if (!p.valid) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%9.3g s %14s%s", p.step_seconds, format_bytes(p.memory_bytes_per_rank).c_str(),
                p.fits ? " " : "!");
  return buf;
}

}  // namespace

nlohmann::json run_predict(const Config& c, MPI_Comm world) {
  int rank = 0, world_size = 1;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &world_size);
  MachineDescription machine = read_machine_file(c.run.machine, "run.machine");
  // The deck may ask "what if each rank had this much memory" of any machine.
  if (c.run.memory_per_rank_gib > 0) machine.memory_bytes_per_rank = c.run.memory_per_rank_gib * 1024.0 * 1024.0 * 1024.0;
  const std::string precision = to_string(c.model.precision);
  if (!machine.precision.empty() && machine.precision != precision)
    throw InputError("run.machine: " + c.run.machine + ": precision: the rates are for " + machine.precision +
                     " but model.precision is " + precision);
  const std::vector<std::int64_t> seq_lens = parse_predict_seq_lens(c.run.predict_seq_lens);
  const StepConfig deck = deck_step_config(c);

  if (rank == 0) {
    std::printf("miniattn: predict, machine %s (%s), %s, model V=%lld D=%lld H=%lld F=%lld L=%lld B=%lld %s, layout %s\n",
                machine.name.empty() ? "unnamed" : machine.name.c_str(), c.run.machine.c_str(), precision.c_str(),
                static_cast<long long>(c.model.vocab), static_cast<long long>(c.model.d_model),
                static_cast<long long>(c.model.heads), static_cast<long long>(c.model.ffn_width()),
                static_cast<long long>(c.model.layers), static_cast<long long>(c.model.batch),
                c.model.causal ? "causal" : "non-causal", to_string(c.parallel.layout));
    std::printf("miniattn: predicted step seconds and memory per rank ('!': does not fit in %s; '-': not possible)\n",
                format_bytes(machine.memory_bytes_per_rank).c_str());
    std::printf("%7s %4s %10s", "ranks", "dp", "seq_len");
    for (const Strategy s : kPredictedStrategies) std::printf(" | %-26s", to_string(s));
    std::printf(" | best\n");
  }

  nlohmann::json predictions = nlohmann::json::array();
  for (std::int64_t seq_len : seq_lens) {
    for (std::int64_t ranks = 1; ranks <= c.run.predict_max_ranks; ranks *= 2) {
      StepConfig config = deck;
      config.model.seq_len = seq_len;
      const std::vector<StrategyChoice> choices = predict_strategies(machine, config, static_cast<int>(ranks));
      const int best = best_strategy(choices);
      nlohmann::json entry = {{"ranks", ranks}, {"seq_len", seq_len}, {"dp", choices[1].config.dp}};
      nlohmann::json strategies = nlohmann::json::object();
      for (const StrategyChoice& choice : choices)
        strategies[to_string(choice.config.strategy)] = brief_json(choice.config, choice.prediction);
      entry["strategies"] = strategies;
      entry["best"] =
          best < 0 ? nlohmann::json(nullptr) : nlohmann::json(to_string(choices[static_cast<std::size_t>(best)].config.strategy));
      predictions.push_back(entry);
      if (rank == 0) {
        std::printf("%7lld %4d %10lld", static_cast<long long>(ranks), choices[1].config.dp,
                    static_cast<long long>(seq_len));
        for (const StrategyChoice& choice : choices) std::printf(" | %-26s", cell(choice.prediction).c_str());
        std::printf(" | %s\n", best < 0 ? "none fits" : to_string(choices[static_cast<std::size_t>(best)].config.strategy));
      }
    }
  }

  // How long a sequence each strategy can train before its planned memory per
  // rank runs out: the question a long-sequence user asks first.
  if (rank == 0) {
    std::printf("miniattn: longest seq_len whose planned memory fits in %s per rank (multiples of 2 sp)\n",
                format_bytes(machine.memory_bytes_per_rank).c_str());
    std::printf("%7s", "ranks");
    for (const Strategy s : kPredictedStrategies) std::printf(" | %12s", to_string(s));
    std::printf("\n");
  }
  nlohmann::json longest = nlohmann::json::array();
  for (std::int64_t ranks = 1; ranks <= c.run.predict_max_ranks; ranks *= 2) {
    nlohmann::json strategies = nlohmann::json::object();
    if (rank == 0) std::printf("%7lld", static_cast<long long>(ranks));
    for (const StrategyChoice& choice : predict_strategies(machine, deck, static_cast<int>(ranks))) {
      const std::int64_t n = longest_fitting_seq_len(machine, choice.config);
      strategies[to_string(choice.config.strategy)] = n;
      if (rank == 0) std::printf(" | %12lld", static_cast<long long>(n));
    }
    if (rank == 0) std::printf("\n");
    longest.push_back({{"ranks", ranks}, {"strategies", strategies}});
  }

  // The deck's own decomposition on the ranks of this run.
  StepConfig own = deck;
  own.sp = world_size / own.dp;
  if (own.strategy == Strategy::ulysses) own.ulysses = own.sp;
  else if (own.strategy != Strategy::hybrid) own.ulysses = 1;
  const StepPrediction own_prediction = predict_step(machine, own);
  if (rank == 0) {
    std::printf("miniattn: this deck on %d ranks (%s, dp %d x sp %d, N=%lld): %s\n", world_size, to_string(own.strategy),
                own.dp, own.sp, static_cast<long long>(own.model.seq_len),
                own_prediction.valid ? cell(own_prediction).c_str() : own_prediction.problem.c_str());
    std::fflush(stdout);
  }

  nlohmann::json result;
  result["program"] = "miniattn";
  result["mode"] = "predict";
  result["config"] = config_to_json(c);
  result["ranks"] = world_size;
  result["precision"] = precision;
  result["machine_file"] = c.run.machine;
  result["machine"] = machine_json(machine);
  result["predictions"] = predictions;
  result["longest_seq_len"] = longest;
  result["prediction_for_deck"] = full_json(own, own_prediction);
  return result;
}

}  // namespace miniattn
