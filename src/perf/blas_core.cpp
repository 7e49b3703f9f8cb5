#include "perf/blas_core.hpp"

#include <dlfcn.h>
#include <strings.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

namespace miniattn {

namespace {

// Set in the restarted process: the core OpenBLAS had chosen by itself.
constexpr const char* kReplacedCoreVariable = "MINIATTN_BLAS_CORE_REPLACED";

bool same_word(const std::string& a, const char* b) { return strcasecmp(a.c_str(), b) == 0; }

std::string openblas_corename() {
  using GetString = char* (*)();
  auto get = reinterpret_cast<GetString>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  return get ? std::string(get()) : std::string();
}

}  // namespace

bool cpu_has_flag(const char* flag) {
  std::ifstream cpuinfo("/proc/cpuinfo");
  const std::string word = std::string(" ") + flag + " ";
  std::string line;
  while (std::getline(cpuinfo, line))
    if (line.rfind("flags", 0) == 0) return (line + " ").find(word) != std::string::npos;
  return false;
}

VectorLevel openblas_core_level(const std::string& core) {
  // OpenBLAS 0.3.21's x86-64 cores (driver/others/dynamic.c), by the widest
  // arithmetic their SGEMM kernels use.
  for (const char* name : {"SkylakeX", "CooperLake", "SapphireRapids"})
    if (same_word(core, name)) return VectorLevel::avx512;
  for (const char* name : {"Haswell", "Zen", "Excavator"})
    if (same_word(core, name)) return VectorLevel::avx2_fma;
  for (const char* name : {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom", "Opteron",
                           "Opteron_SSE3", "Barcelona", "Nano", "Bobcat", "Bulldozer", "Piledriver",
                           "Steamroller", "Sandybridge", "Katmai", "Coppermine", "Northwood", "Banias"})
    if (same_word(core, name)) return VectorLevel::older;
  return VectorLevel::unknown;
}

VectorLevel cpu_vector_level() {
#if defined(__x86_64__)
  // SkylakeX's kernels use AVX-512 F, BW, VL and DQ.
  if (cpu_has_flag("avx512f") && cpu_has_flag("avx512bw") && cpu_has_flag("avx512vl") && cpu_has_flag("avx512dq"))
    return VectorLevel::avx512;
  if (cpu_has_flag("avx2") && cpu_has_flag("fma")) return VectorLevel::avx2_fma;
  return VectorLevel::older;
#else
  return VectorLevel::unknown;
#endif
}

std::string openblas_core_to_force(const std::string& chosen, VectorLevel cpu) {
  const VectorLevel level = openblas_core_level(chosen);
  if (level == VectorLevel::unknown || level >= cpu) return "";
  // Not Cooperlake for AVX512-BF16 CPUs: OpenBLAS 0.3.21 does not accept
  // that name in OPENBLAS_CORETYPE (it says "Core not found" and detects
  // again); its SGEMM kernels are SkylakeX's anyway.
  switch (cpu) {
    case VectorLevel::avx512: return "SkylakeX";
    case VectorLevel::avx2_fma: return "Haswell";
    default: return "";
  }
}

void restart_with_cpu_blas_core(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr || std::getenv(kReplacedCoreVariable) != nullptr) return;
  const std::string chosen = openblas_corename();
  const std::string wanted = openblas_core_to_force(chosen, cpu_vector_level());
  if (wanted.empty()) return;
  setenv("OPENBLAS_CORETYPE", wanted.c_str(), 1);
  setenv(kReplacedCoreVariable, chosen.c_str(), 1);
  // The same process (MPI's and Slurm's handles survive), a new image.
  execv("/proc/self/exe", argv);
  unsetenv("OPENBLAS_CORETYPE");
  unsetenv(kReplacedCoreVariable);
}

std::string replaced_blas_core() {
  const char* replaced = std::getenv(kReplacedCoreVariable);
  return replaced ? replaced : "";
}

}  // namespace miniattn
