// Preloaded by driver_checks.py blas_kernels: plays an OpenBLAS that chose its
// Prescott kernels by itself, as OpenBLAS 0.3.21 does on a CPU whose model it
// does not know, so that the run's restart onto the CPU's own kernels
// (src/perf/blas_core.hpp) is exercised on any machine. Once OPENBLAS_CORETYPE
// is set, the real OpenBLAS answers.
#include <dlfcn.h>

#include <cstdlib>

extern "C" char* openblas_get_corename() {
  static char prescott[] = "Prescott";
  if (std::getenv("OPENBLAS_CORETYPE") == nullptr) return prescott;
  using GetString = char* (*)();
  static const auto real = reinterpret_cast<GetString>(dlsym(RTLD_NEXT, "openblas_get_corename"));
  return real ? real() : prescott;
}
