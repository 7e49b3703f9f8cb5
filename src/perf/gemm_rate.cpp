#include "perf/gemm_rate.hpp"

#include <dlfcn.h>

#include <Kokkos_Random.hpp>
#include <algorithm>
#include <cstdio>
#include <type_traits>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/kokkos_compat.hpp"
#include "core/types.hpp"
#include "kernels/base/gemm.hpp"
#include "core/phase_timer.hpp"
#include "perf/blas_core.hpp"

namespace miniattn {

namespace {

template <class F>
F blas_symbol(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_DEFAULT, name));
}

// Adds per second of a chain of dependent integer adds: the core's clock
// (each add waits one cycle for the previous), turbo included, where
// /proc/cpuinfo's "cpu MHz" may be a nominal figure (virtual machines). The
// added value comes from a register: Intel cores since Golden Cove fold
// chains of add-immediate at rename, several a cycle (measured on a Xeon of
// that family: 24.7 G adds/s with an immediate, 4.04 G with a register, and
// 3 x 1.35 G for a chain of multiplies, 3 cycles each).
double measured_clock_hz() {
#if defined(__x86_64__)
  constexpr long kAddsPerBlock = 1000, kBlocks = 100000;
  double best = 0;
  for (int repeat = 0; repeat < 3; ++repeat) {
    unsigned long chain = 0, one = 1;
    const double t0 = wall_seconds();
    for (long b = 0; b < kBlocks; ++b) asm volatile(".rept 1000\n\taddq %1, %0\n\t.endr" : "+r"(chain) : "r"(one));
    best = std::max(best, kAddsPerBlock * kBlocks / (wall_seconds() - t0));
  }
  return best;
#else
  return 0;
#endif
}

}  // namespace

BlasInfo blas_info() {
  BlasInfo info;
  using GetString = char* (*)();
  using GetInt = int (*)();
  if (auto config = blas_symbol<GetString>("openblas_get_config")) info.library = config();
  if (auto core = blas_symbol<GetString>("openblas_get_corename")) info.core = core();
  if (auto threads = blas_symbol<GetInt>("openblas_get_num_threads")) info.threads = threads();
  if (info.core.empty()) return info;
  const std::string replaced = replaced_blas_core();
  info.core_chosen_by = !replaced.empty() ? "miniattn (OpenBLAS chose " + replaced + ")"
                        : std::getenv("OPENBLAS_CORETYPE") ? "OPENBLAS_CORETYPE"
                                                           : "OpenBLAS";
  const VectorLevel cpu = cpu_vector_level();
  const std::string better = openblas_core_to_force(info.core, cpu);
  if (!better.empty())
    info.warning = "OpenBLAS runs its " + info.core + " kernels on a CPU with " +
                   (cpu == VectorLevel::avx512 ? "AVX-512" : "AVX2 and FMA") + ": set OPENBLAS_CORETYPE=" + better +
                   " for about twice the rate or more";
  return info;
}

void match_blas_threads_to_kokkos() {
  if (std::getenv("OPENBLAS_NUM_THREADS") != nullptr) return;
  using SetThreads = void (*)(int);
  if (auto set_threads = blas_symbol<SetThreads>("openblas_set_num_threads"))
    set_threads(static_cast<int>(ExecSpace().concurrency()));
}

CorePeak core_peak(std::size_t scalar_bytes) {
  CorePeak peak;
  if (!std::is_same<ExecSpace::memory_space, Kokkos::HostSpace>::value) return peak;
  peak.clock_hz = measured_clock_hz();
  if (peak.clock_hz <= 0) return peak;
  const int vector_bits = cpu_has_flag("avx512f") ? 512 : (cpu_has_flag("avx2") && cpu_has_flag("fma")) ? 256 : 128;
  constexpr int kFmaPipes = 2, kFlopsPerFma = 2;
  peak.flops_per_cycle = kFmaPipes * kFlopsPerFma * vector_bits / (8.0 * static_cast<double>(scalar_bytes));
  peak.cores = static_cast<int>(ExecSpace().concurrency());
  peak.known = true;
  char text[200];
  std::snprintf(text, sizeof text,
                "assumed: %d FMA pipes of %d-bit vectors per core at %.2f GHz (measured by a dependent add chain), "
                "%d core(s)",
                kFmaPipes, vector_bits, peak.clock_hz * 1e-9, peak.cores);
  peak.assumption = text;
  return peak;
}

namespace {

// An n x n matrix of uniform values in [-1, 1) (bf16: drawn in fp32 and rounded).
template <class T>
View2<T> random_matrix(const char* label, long n, Kokkos::Random_XorShift64_Pool<ExecSpace>& pool) {
  View2<T> m(std::string(label), n, n);
  View2<Acc<T>> wide = std::is_same<T, Acc<T>>::value ? View2<Acc<T>>(reinterpret_cast<Acc<T>*>(m.data()), n, n)
                                                      : View2<Acc<T>>("gemm_rate.wide", n, n);
  Kokkos::fill_random(wide, pool, Acc<T>(-1), Acc<T>(1));
  if constexpr (!std::is_same<T, Acc<T>>::value)
    Kokkos::parallel_for(
        "miniattn::gemm_rate_round", Kokkos::RangePolicy<ExecSpace>(0, n * n),
        KOKKOS_LAMBDA(const long i) { m.data()[i] = narrow<T>(wide.data()[i]); });
  return m;
}

}  // namespace

template <class T>
double measure_gemm_flops(long n) {
  Kokkos::Random_XorShift64_Pool<ExecSpace> pool(99);
  const View2<T> a = random_matrix<T>("gemm_rate.a", n, pool), b = random_matrix<T>("gemm_rate.b", n, pool);
  const View2<T> c("gemm_rate.c", n, n);
  constexpr int warmups = 2, repeats = 7;
  std::vector<double> seconds;
  for (int r = 0; r < warmups + repeats; ++r) {
    compat::fence("miniattn::measure_gemm_flops");
    const double t0 = wall_seconds();
    kernels::gemm<T>('N', 'N', Acc<T>(1), a, b, Acc<T>(0), c);
    compat::fence("miniattn::measure_gemm_flops");
    if (r >= warmups) seconds.push_back(wall_seconds() - t0);
  }
  std::sort(seconds.begin(), seconds.end());
  return 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / seconds[repeats / 2];
}

template double measure_gemm_flops<float>(long);
template double measure_gemm_flops<double>(long);
template double measure_gemm_flops<bf16>(long);

}  // namespace miniattn
