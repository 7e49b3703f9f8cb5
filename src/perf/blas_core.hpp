#pragma once
// The kernel set a dynamically dispatching OpenBLAS runs, against what the
// CPU's own flags support. OpenBLAS (0.3.21, Debian 12) picks its kernels from
// the CPU's family and model, not its flags: a CPU it does not know (a virtual
// machine's CPU without a model, AMD Zen 4/5) gets an older set. On such a
// Xeon it ran Prescott's SSE kernels at 0.17 of the core's peak, on a Zen 5
// Haswell's AVX2 kernels at about half the AVX-512 rate.
#include <string>

namespace miniattn {

// Whether /proc/cpuinfo's first "flags" line lists `flag` (false elsewhere).
bool cpu_has_flag(const char* flag);

// The widest vector arithmetic a kernel set or a CPU offers, in order.
enum class VectorLevel { unknown = 0, older = 1, avx2_fma = 2, avx512 = 3 };

// The level of an OpenBLAS core name (openblas_get_corename(), the words of
// OPENBLAS_CORETYPE), case-insensitive; unknown for a name not listed.
VectorLevel openblas_core_level(const std::string& core);

// The level this CPU's flags support.
VectorLevel cpu_vector_level();

// The OpenBLAS core to force with OPENBLAS_CORETYPE where OpenBLAS chose
// `chosen` on a CPU of level `cpu`: "" where `chosen` is of that level (or
// unknown), else the core of the CPU's level (SkylakeX, Haswell).
std::string openblas_core_to_force(const std::string& chosen, VectorLevel cpu);

// First thing in main, before MPI or Kokkos start: where OpenBLAS chose a
// kernel set below the CPU's level and OPENBLAS_CORETYPE is unset, sets it to
// openblas_core_to_force() and executes the program again (OpenBLAS reads the
// variable once, when it loads), marking the new process with the core it
// replaced (replaced_blas_core()). Returns where nothing needs to change, or
// where the new image cannot be executed (blas_info() then warns).
void restart_with_cpu_blas_core(char** argv);

// The core OpenBLAS chose by itself before restart_with_cpu_blas_core
// replaced it; "" where nothing was replaced.
std::string replaced_blas_core();

}  // namespace miniattn
