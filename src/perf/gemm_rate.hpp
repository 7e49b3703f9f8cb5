#pragma once
// This machine's own dense matrix-multiply rate: the one reference every
// report compares against (run.mode bench, run.mode calibrate,
// bench_attention), measured the same way everywhere: KokkosBlas::gemm on the
// run's scalar type, n x n x n with random operands, on as many BLAS threads
// as the Kokkos execution space has, 2 warm-up calls, median of 7.
#include <cstddef>
#include <string>

namespace miniattn {

// The BLAS behind KokkosBlas::gemm, as far as it says (OpenBLAS does).
struct BlasInfo {
  std::string library = "unknown";  // e.g. "OpenBLAS 0.3.21 DYNAMIC_ARCH ..."
  std::string core;                  // the kernel set chosen at run time, e.g. "SkylakeX"
  std::string core_chosen_by;        // OpenBLAS, OPENBLAS_CORETYPE, or miniattn (blas_core.hpp)
  int threads = 0;                   // 0: unknown
  std::string warning;               // a kernel set below the CPU's flags, and the variable to set
};
BlasInfo blas_info();

// Gives an OpenBLAS as many threads as the Kokkos execution space runs
// (OpenBLAS otherwise starts one per core in every rank), unless
// OPENBLAS_NUM_THREADS is set. Call after Kokkos is initialised.
void match_blas_threads_to_kokkos();

// The FMA peak of the cores one rank runs on (host execution spaces), from
// stated assumptions: 2 FMA pipes per core of the widest vector the CPU's
// flags list (AVX-512, AVX2 or SSE2), at the clock a chain of dependent
// integer adds (one cycle each) runs at. Not known on GPUs or other CPUs.
struct CorePeak {
  bool known = false;
  double clock_hz = 0;             // measured
  double flops_per_cycle = 0;      // per core, for the scalar type asked
  int cores = 0;                   // the execution space's concurrency
  double flops() const { return clock_hz * flops_per_cycle * cores; }
  std::string assumption;          // how the figure was made, for the report
};
CorePeak core_peak(std::size_t scalar_bytes);

// FLOP/s of C = A B with square n x n LayoutRight operands.
template <class T>
double measure_gemm_flops(long n = 1024);

}  // namespace miniattn
