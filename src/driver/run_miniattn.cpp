#include "driver/run_miniattn.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>

#include "comm/agree.hpp"
#include "comm/exchange_watch.hpp"
#include "comm/mpi_ranks.hpp"
#include "core/error.hpp"
#include "driver/output_paths.hpp"
#include "driver/training_state.hpp"
#include "driver/training_run.hpp"
#include "io/text_file.hpp"
#include "kernels/attention/kernel_record.hpp"
#include "model/synthetic_task.hpp"
#include "perf/memory_plan.hpp"

namespace miniattn {

namespace {

// The kernel in its record's words (kernels/attention/kernel_record.cpp), and its shape.
void print_attention_kernel(const nlohmann::json& tiles) {
  const auto kernel = enum_of_word<AttentionKernel>(tiles.at("kernel").get<std::string>());
  std::printf("miniattn: attention kernel %s%s", kernels::attention_kernel_record(kernel).what,
              tiles.at("chosen_by") == "auto" ? ", auto's choice" : "");
  if (kernel == AttentionKernel::fused && tiles.contains("bf16_products")) {
    std::printf(", tiles %lld x %lld in buffers of each thread, bf16 products %s\n",
                tiles.at("query_block").get<long long>(), tiles.at("key_block").get<long long>(),
                tiles.at("bf16_products").get<std::string>().c_str());
  } else if (kernel == AttentionKernel::fused) {
    const double scratch = std::max(tiles.at("forward_scratch_bytes").get<double>(),
                                    tiles.at("backward_scratch_bytes").get<double>());
    std::printf(", tiles %lld x %lld, team scratch %.1f KiB at level %d (level 0 holds %.1f KiB)\n",
                tiles.at("query_block").get<long long>(), tiles.at("key_block").get<long long>(), scratch / 1024,
                tiles.at("scratch_level").get<int>(), tiles.at("level0_bytes").get<double>() / 1024);
  } else if (kernel == AttentionKernel::cudnn) {
    const nlohmann::json& tally = tiles.at("cudnn");
    std::printf(", %lld calls for %lld blocks, %lld blocks on the gemm fallback\n", tally.at("calls").get<long long>(),
                tally.at("blocks").get<long long>(), tally.at("blocks_on_gemm_fallback").get<long long>());
  } else {
    std::printf(", %s of %lld rows\n", kernel == AttentionKernel::gemm ? "chunks" : "query tiles",
                tiles.at(kernel == AttentionKernel::gemm ? "chunk" : "query_block").get<long long>());
  }
}

// A few lines for a person at the end of a training or bench run: what the
// RESULT line says, in words.
void print_summary(const nlohmann::json& r, const Config& config) {
  double exchanged = 0.0;
  for (const auto& [label, e] : r.at("exchange").items()) exchanged += e.value("bytes_per_step", 0.0);
  const double steps = r.at("steps").get<double>() - r.at("first_step").get<double>();
  std::printf("miniattn: %.0f steps in %.1f s on %d ranks: %.4g tokens/s (%.4g per rank), %s exchanged per step, "
              "peak memory %s per rank\n",
              steps, r.at("total_seconds").get<double>(), r.at("ranks").get<int>(),
              r.at("tokens_per_second").get<double>(), r.at("tokens_per_second_per_rank").get<double>(),
              format_bytes(exchanged).c_str(), format_bytes(r.at("peak_memory_bytes_per_rank").at("max")).c_str());
  const auto& losses = r.at("losses");
  const SyntheticTask task{config.model.vocab, config.model.seq_len, config.train.seed, config.data.documents,
                           config.data.task};
  const SyntheticTask::LossLevels level = task.loss_levels();
  if (!losses.empty() && losses.front().is_number() && losses.back().is_number())
    std::printf("miniattn: loss %.4f -> %.4f (task %s: %.4f = ln %lld: guessing; %.4f: %s; %.4f: %s)\n",
                losses.front().get<double>(), losses.back().get<double>(), to_string(config.data.task),
                level.guessing, static_cast<long long>(config.model.vocab), level.known, level.known_means,
                level.solved, level.solved_means);
  print_attention_kernel(r.at("attention_tiles"));
  std::printf("miniattn: the whole report is the RESULT line above%s\n",
              config.run.result.empty() ? "" : (" and " + config.run.result + " (with every step's loss)").c_str());
}

}  // namespace

int run_miniattn(const Config& config, MPI_Comm world, const ModelModes& model_modes) {
  ExchangeWatchSettings watch;
  watch.deadline_seconds = config.run.exchange_timeout_s;
  watch.record_folder = flight_record_folder(config.run);
  const InjectedFault fault = injected_fault(rank_in(world));
  if (fault.rank == rank_in(world)) {
    watch.skip_label = fault.skip_label;
    watch.skip_index = fault.skip_index;
  }
  const ExchangeWatchScope watched(watch, world);
  const RunMode mode = config.run.mode;
  const bool model_mode = mode == RunMode::predict || mode == RunMode::calibrate;
  if (model_mode && config.run.machine.empty())
    throw InputError(std::string("run.machine: required for run.mode ") + to_string(mode) +
                     " (the machine description YAML " + (mode == RunMode::predict ? "to read" : "to write") + ")");
  // File systems can differ between nodes: every rank checks, all agree.
  agree_on(world, [&] { check_output_paths(config); });

  const Precision precision = config.model.precision;
  nlohmann::json result;
  if (model_mode) {
    result = model_modes(config, world);
  } else {
    result = precision == Precision::fp32   ? run_training<float>(config, world)
             : precision == Precision::bf16 ? run_training<bf16>(config, world)
                                            : run_training<double>(config, world);
  }
  if (rank_in(world) == 0) {
    // One line however long the run: every step's loss goes to the file only.
    nlohmann::json line = result;
    line.erase("losses");
    std::printf("RESULT %s\n", line.dump().c_str());
    if (!config.run.result.empty()) write_file_atomically(config.run.result, result.dump(2) + "\n", "run.result");
    if (!model_mode) print_summary(result, config);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace miniattn
