#include "driver/run_miniattn.hpp"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "comm/agree.hpp"
#include "core/error.hpp"
#include "driver/predict_mode.hpp"
#include "driver/training_run.hpp"

namespace miniattn {

namespace {

// Writes the result file next to its final name and renames it, so a reader
// never sees half a file and an existing result survives a failed write.
void write_result_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << text << '\n';
    if (!out) throw InputError("run.result: cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw InputError("run.result: cannot rename " + tmp + " to " + path);
}

// Refuses an output path whose directory does not exist or is not writable,
// before any work, instead of failing after a long run.
void require_writable_directory(const std::string& key, const std::string& path) {
  if (path.empty()) return;
  const std::filesystem::path parent = std::filesystem::absolute(path).parent_path();
  std::error_code ec;
  if (!std::filesystem::is_directory(parent, ec))
    throw InputError(key + ": directory " + parent.string() + " of " + path + " does not exist");
  if (access(parent.c_str(), W_OK) != 0)
    throw InputError(key + ": directory " + parent.string() + " of " + path + " is not writable");
}

}  // namespace

int run_miniattn(const Config& config, MPI_Comm world) {
  const RunMode mode = config.run.mode;
  const bool model_mode = mode == RunMode::predict || mode == RunMode::calibrate;
  if (model_mode && config.run.machine.empty())
    throw InputError(std::string("run.machine: required for run.mode ") + to_string(mode) +
                     " (the machine description YAML " + (mode == RunMode::predict ? "to read" : "to write") + ")");
  // File systems can differ between nodes: every rank checks, all agree.
  agree_on(world, [&] {
    if (mode == RunMode::calibrate) require_writable_directory("run.machine", config.run.machine);
    if (!model_mode) require_writable_directory("io.snapshot", config.io.snapshot);
    require_writable_directory("run.result", config.run.result);
    require_writable_directory("io.checkpoint", config.io.checkpoint);
  });

  const bool fp32 = config.model.precision == Precision::fp32;
  nlohmann::json result;
  if (mode == RunMode::predict) result = run_predict(config, world);
  else if (mode == RunMode::calibrate) result = fp32 ? run_calibrate<float>(config, world) : run_calibrate<double>(config, world);
  else result = fp32 ? run_training<float>(config, world) : run_training<double>(config, world);
  int rank = 0;
  MPI_Comm_rank(world, &rank);
  if (rank == 0) {
    const std::string line = result.dump();
    std::printf("RESULT %s\n", line.c_str());
    std::fflush(stdout);
    if (!config.run.result.empty()) write_result_file(config.run.result, result.dump(2));
  }
  return 0;
}

}  // namespace miniattn
