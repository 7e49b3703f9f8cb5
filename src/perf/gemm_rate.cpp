#include "perf/gemm_rate.hpp"

#include <algorithm>
#include <vector>

#include "core/kokkos_compat.hpp"
#include "core/types.hpp"
#include "kernels/gemm.hpp"
#include "perf/phase_timer.hpp"

namespace miniattn {

template <class T>
double measure_gemm_flops(long n, int repeats) {
  View2<T> a("gemm_rate.a", n, n), b("gemm_rate.b", n, n), c("gemm_rate.c", n, n);
  Kokkos::deep_copy(a, T(1) / T(3));
  Kokkos::deep_copy(b, T(1) / T(7));
  std::vector<double> seconds;
  for (int r = 0; r <= repeats; ++r) {
    compat::fence("miniattn::measure_gemm_flops");
    const double t0 = wall_seconds();
    kernels::gemm<T>('N', 'N', T(1), a, b, T(0), c);
    compat::fence("miniattn::measure_gemm_flops");
    if (r > 0) seconds.push_back(wall_seconds() - t0);  // the first call warms caches and BLAS
  }
  std::sort(seconds.begin(), seconds.end());
  const double median = seconds[seconds.size() / 2];
  return 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / median;
}

template double measure_gemm_flops<float>(long, int);
template double measure_gemm_flops<double>(long, int);

}  // namespace miniattn
