#include "driver/run_miniattn.hpp"

#include <cstdio>
#include <fstream>
#include <iostream>

#include "core/error.hpp"
#include "driver/training_loop.hpp"

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

}  // namespace

int run_miniattn(const Config& config, MPI_Comm world) {
  if (config.run.mode == "predict")
    throw InputError("run.mode: 'predict' (the performance model) is not available in this version");

  const nlohmann::json result = config.model.precision == Precision::fp32 ? run_training<float>(config, world)
                                                                           : run_training<double>(config, world);
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
