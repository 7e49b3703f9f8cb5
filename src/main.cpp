// miniattn DECK.yaml [--set section.key=value ...]
// Thin: MPI and Kokkos up, deck parsed and validated, the chosen mode run.
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/command_line.hpp"
#include "core/config.hpp"
#include "core/denormals.hpp"
#include "core/error.hpp"
#include "driver/run_miniattn.hpp"
#include "io/hdf5_file.hpp"
#include "perf/blas_core.hpp"
#include "perf/gemm_rate.hpp"
#include "perfmodel/predict_mode.hpp"

namespace {

// MPI_Abort makes the launcher kill every process at once, and output it has
// not yet forwarded is lost with them: give it a moment to drain.
[[noreturn]] void abort_job(int status) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  MPI_Abort(MPI_COMM_WORLD, status);
  std::abort();  // MPI_Abort does not return
}

// The argv that Kokkos and then the command-line parser read. Kokkos prints its
// whole help text for --help and --kokkos-help on every rank that sees one, so
// ranks other than 0 keep both from Kokkos. Rank 0 hands Kokkos --help for
// either: Kokkos's development branch (mid-2025, on the way to Kokkos 5) exits
// inside initialize on --kokkos-help, skipping MPI_Finalize and miniattn's
// help, and returns on --help. Either one asks for miniattn's help too, so
// --help is in what the parser reads, on every rank.
class Arguments {
 public:
  Arguments(int argc, char** argv, bool kokkos_prints_help) {
    for (int i = 0; i < argc; ++i) {
      const bool help = i > 0 && (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "--kokkos-help") == 0);
      help_asked_ = help_asked_ || help;
      if (!help) args_.push_back(argv[i]);
      else if (kokkos_prints_help) args_.push_back(help_flag_);
    }
    terminate();
  }
  int& argc() { return argc_; }
  char** argv() { return args_.data(); }
  // After Kokkos took its own arguments out.
  void give_back_help() {
    args_.resize(static_cast<std::size_t>(argc_));
    const auto is_help = [](const char* arg) { return std::strcmp(arg, "--help") == 0; };
    const bool present = std::any_of(args_.begin(), args_.end(), is_help);
    if (help_asked_ && !present) args_.push_back(help_flag_);
    terminate();
  }

 private:
  void terminate() {
    argc_ = static_cast<int>(args_.size());
    args_.push_back(nullptr);
  }
  std::vector<char*> args_;
  bool help_asked_ = false;
  char help_flag_[7] = "--help";
  int argc_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  miniattn::restart_with_cpu_blas_core(argv);  // before anything starts: it may execute the program again
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int status = 0;
  miniattn::io::hdf5_cleanup_in_mpi_finalize_only();
  miniattn::flush_denormals_to_zero();  // before Kokkos starts threads: they inherit it
  {
    // Kokkos removes its own --kokkos-* arguments from argv. It throws on a
    // malformed one (--kokkos-threads=abc), the same on every rank.
    std::string kokkos_args;
    for (int i = 1; i < argc; ++i)
      if (std::string(argv[i]).rfind("--kokkos", 0) == 0) kokkos_args += std::string(" ") + argv[i];
    Arguments args(argc, argv, rank == 0);
    std::optional<Kokkos::ScopeGuard> kokkos;
    try {
      kokkos.emplace(args.argc(), args.argv());
    } catch (const std::exception& e) {
      if (rank == 0)
        std::fprintf(stderr, "miniattn: error: Kokkos refused its arguments%s (%s)\n", kokkos_args.c_str(), e.what());
      MPI_Finalize();
      return miniattn::kExitInputError;
    }
    miniattn::match_blas_threads_to_kokkos();
    args.give_back_help();
    try {
      const miniattn::CommandLine cli = miniattn::parse_command_line(args.argc(), args.argv());
      if (cli.help_requested) {
        if (rank == 0) std::printf("%s", cli.help_text.c_str());
      } else {
        const miniattn::Config config = miniattn::parse_config(cli.deck_path, cli.overrides, size);
        status = miniattn::run_miniattn(config, MPI_COMM_WORLD, miniattn::run_model_mode);
      }
    } catch (const miniattn::InputError& e) {
      // Input errors are detected identically on every rank (same deck, same
      // files), so every rank leaves with the same status and rank 0 speaks.
      if (rank == 0) std::fprintf(stderr, "miniattn: error: %s\n", e.what());
      status = miniattn::kExitInputError;
    } catch (const miniattn::CollectiveFailure& e) {
      if (rank == 0) std::fprintf(stderr, "miniattn: error: %s\n", e.what());
      status = miniattn::kExitRuntimeFailure;
    } catch (const std::exception& e) {
      // Anything else may have hit this rank alone: abort the whole job
      // rather than leave the other ranks waiting in a collective.
      std::fprintf(stderr, "miniattn: rank %d: fatal: %s\n", rank, e.what());
      abort_job(miniattn::kExitRuntimeFailure);
    }
  }
  if (miniattn::io::hdf5_files_abandoned()) {
    // Every rank failed the same write (agreed) and left the file open:
    // MPI_Finalize would have HDF5 close it, with rank 0's metadata write
    // failing inside its collectives.
    abort_job(status != 0 ? status : miniattn::kExitRuntimeFailure);
  }
  MPI_Finalize();
  return status;
}
