#include "perfmodel/predict_mode.hpp"

#include <cstdio>
#include <string>
#include <vector>

#include "attention/strategy_table.hpp"
#include "core/config_json.hpp"
#include "core/error.hpp"
#include "model/pipeline_schedule.hpp"
#include "perf/memory_plan.hpp"
#include "perfmodel/performance_model.hpp"

namespace miniattn {

namespace {

// The attention kernel and tiles the run would use (tiles given as 0 are the
// ones this build would choose), the kernel the machine file's attention
// rates were measured with: a GPU machine file predicts cudnn on any host.
template <class T>
kernels::AttentionBlocking predicted_blocking(const Config& c, const MachineDescription& machine) {
  const AttentionKernel kernel = machine.attention_kernel.empty() ? c.kernels.attention
                                                                  : enum_of_word<AttentionKernel>(machine.attention_kernel);
  // cudnn has no tiles and needs no library to be planned: the gemm kernel's are chosen (its fallback's chunk).
  KernelConfig requested = c.kernels;
  requested.attention = kernel == AttentionKernel::cudnn ? AttentionKernel::gemm : kernel;
  kernels::AttentionBlocking blocking = kernels::choose_attention_tiles<T>(requested, c.model.head_dim()).blocking;
  if (kernel == AttentionKernel::cudnn) blocking.kernel = AttentionKernel::cudnn;
  kernels::route_documents(blocking, c.data.documents, c.kernels.cudnn_documents);
  blocking.deterministic = c.kernels.deterministic;
  return blocking;
}

StepConfig deck_step_config(const Config& c, const MachineDescription& machine) {
  StepConfig s;
  s.model = c.model;
  s.strategy = c.parallel.strategy;
  s.layout = c.parallel.layout;
  s.optimizer = c.train.optimizer;
  s.recompute = c.train.recompute;
  s.dp = static_cast<int>(c.parallel.dp);
  s.tp = static_cast<int>(c.parallel.tp);
  s.pp = static_cast<int>(c.parallel.pp);
  s.virtual_stages = static_cast<int>(c.parallel.virtual_stages);
  s.tp_sequence_parallel = c.parallel.tp_sequence_parallel;
  s.micro_batches = c.train.micro_batches;
  s.documents = c.data.documents;
  s.ulysses = static_cast<int>(c.parallel.ulysses_degree);
  switch (c.model.precision) {
    case Precision::fp32: s.blocking = predicted_blocking<float>(c, machine); break;
    case Precision::bf16: s.blocking = predicted_blocking<bf16>(c, machine); break;
    default: s.blocking = predicted_blocking<double>(c, machine);
  }
  s.memory_available = static_cast<std::size_t>(machine.memory_bytes_per_rank);
  s.cudnn_workspace_limit = c.kernels.cudnn_workspace_limit_bytes();
  return s;
}

// The deck's decomposition (dp x pp x tp x sp) on the ranks of this run.
StepConfig own_step_config(const Config& c, const StepConfig& deck, int world_size) {
  StepConfig own = deck;
  own.sp = static_cast<int>(sp_size(c.parallel, world_size));
  own.ulysses = strategy_record(own.strategy).ulysses_degree(own.sp, own.ulysses);
  return own;
}

// run.machine, with the deck's memory per rank when it names one (any
// machine may be asked "what if each rank had this much"); refuses rates
// measured for another precision or another attention kernel than the deck names.
MachineDescription deck_machine(const Config& c) {
  MachineDescription machine = read_machine_file(c.run.machine, "run.machine");
  if (c.run.memory_per_rank_gib > 0) machine.memory_bytes_per_rank = c.run.memory_per_rank_gib * 1024.0 * 1024.0 * 1024.0;
  const std::string precision = to_string(c.model.precision);
  if (!machine.precision.empty() && machine.precision != precision)
    throw InputError("run.machine: " + c.run.machine + ": precision: the rates are for " + machine.precision +
                     " but model.precision is " + precision + " (calibrate with the deck's precision, or give a "
                     "machine file measured in it)");
  const std::string kernel = to_string(c.kernels.attention);
  if (!machine.attention_kernel.empty() && c.kernels.attention != AttentionKernel::automatic &&
      machine.attention_kernel != kernel)
    throw InputError("run.machine: " + c.run.machine + ": attention_kernel: the attention rates are for " +
                     machine.attention_kernel + " but kernels.attention is " + kernel + " (use auto)");
  return machine;
}

nlohmann::json brief_json(const StepConfig& c, const StepPrediction& p) {
  nlohmann::json j = {{"dp", c.dp}, {"pp", c.pp}, {"virtual_stages", c.virtual_stages},
                      {"micro_batches", c.micro_batches}, {"tp", c.tp}, {"sp", c.sp}, {"ulysses_degree", c.ulysses}, {"valid", p.valid}};
  if (!p.valid) {
    j["problem"] = p.problem;
    return j;
  }
  j.update({{"step_seconds", p.step_seconds},
            {"compute_seconds", p.compute_seconds},
            {"exchange_seconds", p.exchange_seconds},
            {"hidden_seconds", p.hidden_seconds},
            {"memory_bytes_per_rank", p.memory_bytes_per_rank},
            {"recompute", p.recompute},
            {"fits", p.fits},
            {"tokens_per_second", p.tokens_per_second},
            {"bubble_fraction", p.bubble_fraction}});
  return j;
}

// A map by Comm label or memory part as a JSON object keyed by their names.
template <class Key, class Value>
nlohmann::json by_name(const std::map<Key, Value>& values) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [label, value] : values) j[to_string(label)] = value;
  return j;
}

nlohmann::json full_json(const StepConfig& c, const StepPrediction& p) {
  nlohmann::json j = brief_json(c, p);
  j.update({{"strategy", to_string(c.strategy)},
            {"layout", to_string(c.layout)},
            {"ranks", c.world_size()},
            {"seq_len", c.model.seq_len}});
  if (!p.valid) return j;
  // Per rank of stage 0 (with pp = 1: every rank), but memory_parts: the stage needing the most.
  j.update({{"compute", p.compute_parts},
            {"exchange", by_name(p.exchange_parts)},
            {"exchange_bytes_per_step", by_name(p.exchange_bytes)},
            {"memory_parts", by_name(p.memory_parts)},
            {"stage_seconds_per_micro_batch", p.stage_seconds},
            {"pipeline_seconds", p.pipeline_seconds},
            {"bubble_seconds", p.bubble_seconds}});
  return j;
}

// Every strategy for each sequence length and rank count 1, 2, 4, ... max_ranks.
nlohmann::json strategy_table(const MachineDescription& machine, const StepConfig& deck,
                              const std::vector<std::int64_t>& seq_lens, std::int64_t max_ranks) {
  nlohmann::json rows = nlohmann::json::array();
  for (const std::int64_t seq_len : seq_lens) {
    for (std::int64_t ranks = 1; ranks <= max_ranks; ranks *= 2) {
      StepConfig config = deck;
      config.model.seq_len = seq_len;
      const std::vector<StrategyChoice> choices = predict_strategies(machine, config, static_cast<int>(ranks));
      const int best = best_strategy(choices);
      // dp, pp and tp of the sequence-parallel strategies (each choice has its own in its entry).
      const StepConfig& sp_choice = choices[1].config;
      nlohmann::json row = {{"ranks", ranks},
                            {"seq_len", seq_len},
                            {"dp", sp_choice.dp},
                            {"pp", sp_choice.pp},
                            {"micro_batches", sp_choice.micro_batches},
                            {"tp", sp_choice.tp}};
      for (const StrategyChoice& choice : choices)
        row["strategies"][choice.name] = brief_json(choice.config, choice.prediction);
      row["best"] = best < 0 ? nlohmann::json(nullptr) : nlohmann::json(choices[best].name);
      rows.push_back(row);
    }
  }
  return rows;
}

// How long a sequence each strategy can train before its planned memory per
// rank runs out: the question a long-sequence user asks first.
nlohmann::json longest_table(const MachineDescription& machine, const StepConfig& deck, std::int64_t max_ranks) {
  nlohmann::json rows = nlohmann::json::array();
  for (std::int64_t ranks = 1; ranks <= max_ranks; ranks *= 2) {
    nlohmann::json row = {{"ranks", ranks}, {"strategies", nlohmann::json::object()}};
    for (const StrategyChoice& choice : predict_strategies(machine, deck, static_cast<int>(ranks)))
      row["strategies"][choice.name] = longest_fitting_seq_len(machine, choice.config);
    rows.push_back(row);
  }
  return rows;
}

// "1.23e+03 s 12.0 GiB" of a brief_json, marked "!" when it does not fit
// and "r" when it fits with q, k, v and fc1's output recomputed (train.recompute).
std::string cell(const nlohmann::json& p) {
  if (!p.at("valid").get<bool>()) return "-";
  const char* mark = !p.at("fits").get<bool>() ? "!" : p.at("recompute").get<bool>() ? "r" : " ";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%9.3g s %14s%s", p.at("step_seconds").get<double>(),
                format_bytes(p.at("memory_bytes_per_rank").get<double>()).c_str(), mark);
  return buf;
}

void print_report(const Config& c, const MachineDescription& machine, const nlohmann::json& result) {
  const ModelConfig& m = c.model;
  const std::string memory = format_bytes(machine.memory_bytes_per_rank);
  const std::vector<std::string> names = predicted_choice_names();
  std::printf("miniattn: predict, machine %s (%s), %s, model V=%lld D=%lld H=%lld F=%lld L=%lld B=%lld %s, layout %s\n",
              machine.name.empty() ? "unnamed" : machine.name.c_str(), c.run.machine.c_str(), to_string(m.precision),
              static_cast<long long>(m.vocab), static_cast<long long>(m.d_model), static_cast<long long>(m.heads),
              static_cast<long long>(m.ffn_width()), static_cast<long long>(m.layers), static_cast<long long>(m.batch),
              m.causal ? "causal" : "non-causal", to_string(c.parallel.layout));
  std::printf("miniattn: predicted step seconds and memory per rank ('!': does not fit in %s; 'r': fits with q, k, v "
              "and fc1's output recomputed; '-': not possible)\n",
              memory.c_str());
  const std::string chunks = c.parallel.virtual_stages > 1
                                 ? " of " + std::to_string(c.parallel.virtual_stages) + " chunks (interleaved)"
                                 : std::string();
  std::printf("miniattn: dp, pp and tp are those of the sequence-parallel strategies; %s is local with tp = ranks / "
              "(dp pp); pp %lld stages%s, %lld micro-batches, modelled bubble %.3f\n",
              kTensorParallelChoice, static_cast<long long>(c.parallel.pp), chunks.c_str(),
              static_cast<long long>(c.train.micro_batches),
              modelled_bubble_fraction(static_cast<int>(c.parallel.pp), c.train.micro_batches,
                                       static_cast<int>(c.parallel.virtual_stages)));
  for (const nlohmann::json& warning : result.at("warnings"))
    std::printf("miniattn: warning: %s\n", warning.get<std::string>().c_str());
  std::printf("%7s %4s %4s %4s %10s", "ranks", "dp", "pp", "tp", "seq_len");
  for (const std::string& name : names) std::printf(" | %-26s", name.c_str());
  std::printf(" | best\n");
  for (const nlohmann::json& row : result.at("predictions")) {
    std::printf("%7lld %4d %4d %4d %10lld", row.at("ranks").get<long long>(), row.at("dp").get<int>(),
                row.at("pp").get<int>(), row.at("tp").get<int>(), row.at("seq_len").get<long long>());
    for (const std::string& name : names) std::printf(" | %-26s", cell(row.at("strategies").at(name)).c_str());
    std::printf(" | %s\n", row.at("best").is_null() ? "none fits" : row.at("best").get<std::string>().c_str());
  }
  std::printf("miniattn: longest seq_len whose planned memory fits in %s per rank (multiples of 2 sp whose rows "
              "divide over tp)\n", memory.c_str());
  std::printf("%7s", "ranks");
  for (const std::string& name : names) std::printf(" | %15s", name.c_str());
  std::printf("\n");
  for (const nlohmann::json& row : result.at("longest_seq_len")) {
    std::printf("%7lld", row.at("ranks").get<long long>());
    for (const std::string& name : names) std::printf(" | %15lld", row.at("strategies").at(name).get<long long>());
    std::printf("\n");
  }
  const nlohmann::json& own = result.at("prediction_for_deck");
  std::printf("miniattn: this deck on %d ranks (%s, dp %d x pp %d x tp %d x sp %d, %lld micro-batches, N=%lld): %s\n",
              own.at("ranks").get<int>(), own.at("strategy").get<std::string>().c_str(), own.at("dp").get<int>(),
              own.at("pp").get<int>(), own.at("tp").get<int>(), own.at("sp").get<int>(),
              own.at("micro_batches").get<long long>(), own.at("seq_len").get<long long>(),
              own.at("valid").get<bool>() ? cell(own).c_str() : own.at("problem").get<std::string>().c_str());
  std::fflush(stdout);
}

}  // namespace

nlohmann::json run_predict(const Config& c, MPI_Comm world) {
  int rank = 0, world_size = 1;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &world_size);
  const MachineDescription machine = deck_machine(c);
  const std::vector<std::int64_t> seq_lens = parse_predict_seq_lens(c.run.predict_seq_lens);
  const StepConfig deck = deck_step_config(c, machine), own = own_step_config(c, deck, world_size);

  nlohmann::json result = {{"program", "miniattn"},
                           {"mode", "predict"},
                           {"config", config_to_json(c)},
                           {"ranks", world_size},
                           {"precision", to_string(c.model.precision)},
                           {"machine_file", c.run.machine},
                           {"machine", machine_to_json(machine)}};
  // Every rank has checked the deck and the machine file above (an error
  // stops all of them alike); only rank 0 reports, so only it computes.
  if (rank != 0) return result;
  result["warnings"] = nlohmann::json::array();
  if (deck.blocking.gemm_fallback)  // kernels.cudnn_documents: gemm (docs/deck.md)
    result["warnings"].push_back(
        "data.documents with cudnn: the run computes every block with the gemm kernel, which this machine file has "
        "no rates for, and attention is timed at cuDNN's rates: the predicted step is too short");
  if (deck.blocking.cudnn_document_calls)
    result["warnings"].push_back(
        "data.documents with kernels.cudnn_documents: calls: cuDNN builds a graph for every new document length "
        "(about 0.4 s each), which the predicted step leaves out");
  result["predictions"] = strategy_table(machine, deck, seq_lens, c.run.predict_max_ranks);
  result["longest_seq_len"] = longest_table(machine, deck, c.run.predict_max_ranks);
  result["prediction_for_deck"] = full_json(own, predict_step(machine, own));
  print_report(c, machine, result);
  return result;
}

nlohmann::json run_model_mode(const Config& config, MPI_Comm world) {
  if (config.run.mode == RunMode::predict) return run_predict(config, world);
  switch (config.model.precision) {
    case Precision::fp32: return run_calibrate<float>(config, world);
    case Precision::bf16: return run_calibrate<bf16>(config, world);
    default: return run_calibrate<double>(config, world);
  }
}

}  // namespace miniattn
