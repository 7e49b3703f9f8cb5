// miniattn DECK.yaml [--set section.key=value ...]
// Thin: MPI and Kokkos up, deck parsed and validated, the chosen mode run.
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <thread>

#include "core/command_line.hpp"
#include "core/config.hpp"
#include "core/denormals.hpp"
#include "core/error.hpp"
#include "driver/run_miniattn.hpp"
#include "io/hdf5_file.hpp"
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

}  // namespace

int main(int argc, char** argv) {
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
    std::optional<Kokkos::ScopeGuard> kokkos;
    try {
      kokkos.emplace(argc, argv);
    } catch (const std::exception& e) {
      if (rank == 0)
        std::fprintf(stderr, "miniattn: error: Kokkos refused its arguments%s (%s)\n", kokkos_args.c_str(), e.what());
      MPI_Finalize();
      return miniattn::kExitInputError;
    }
    miniattn::match_blas_threads_to_kokkos();
    try {
      const miniattn::CommandLine cli = miniattn::parse_command_line(argc, argv);
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
