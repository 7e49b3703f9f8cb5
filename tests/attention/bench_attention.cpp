// Rough throughput of the blockwise attention kernels (prints only).
// Usage: bench_attention [n] [Dh] [heads] [query_block] [key_block]
// Forward FLOPs are counted as 4 n^2 Dh H (two matrix products); the causal
// forward is reported against the same count divided by two; backward as 2.5x forward.
#include <Kokkos_Core.hpp>
#include <Kokkos_Random.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/types.hpp"
#include "kernels/attention.hpp"

namespace {

using miniattn::index_t;
using miniattn::View1;
using miniattn::View3;
using miniattn::View4;

template <class F>
double best_seconds(int reps, F&& f) {
  f();  // warm-up
  Kokkos::fence();
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    Kokkos::Timer timer;
    f();
    Kokkos::fence();
    best = std::min(best, timer.seconds());
  }
  return best;
}

template <class T>
void run(index_t n, index_t dh, index_t heads, miniattn::kernels::AttentionBlocking blocking) {
  const index_t batch = 1;
  View4<T> q("q", batch, heads, n, dh), k("k", batch, heads, n, dh), v("v", batch, heads, n, dh);
  View4<T> out("out", batch, heads, n, dh), dout("dout", batch, heads, n, dh);
  View4<T> dq("dq", batch, heads, n, dh), dk("dk", batch, heads, n, dh), dv("dv", batch, heads, n, dh);
  View3<T> lse("lse", batch, heads, n), row_sum("row_sum", batch, heads, n), delta("delta", batch, heads, n);
  View1<index_t> pos("pos", n);
  Kokkos::Random_XorShift64_Pool<miniattn::ExecSpace> pool(1234);
  Kokkos::fill_random(q, pool, T(-1), T(1));
  Kokkos::fill_random(k, pool, T(-1), T(1));
  Kokkos::fill_random(v, pool, T(-1), T(1));
  Kokkos::fill_random(dout, pool, T(-1), T(1));
  Kokkos::parallel_for(
      "positions", Kokkos::RangePolicy<miniattn::ExecSpace>(0, n), KOKKOS_LAMBDA(const int i) { pos(i) = i; });

  const double flops = 4.0 * double(n) * double(n) * double(dh) * double(heads) * double(batch);
  for (bool causal : {false, true}) {
    const double t_fwd = best_seconds(
        3, [&] { miniattn::kernels::attention_forward<T>(q, k, v, pos, pos, causal, blocking, out, lse, row_sum); });
    miniattn::kernels::attention_backward_delta<T>(out, dout, delta);
    const double t_bwd = best_seconds(2, [&] {
      miniattn::kernels::attention_backward_accumulate<T>(q, k, v, dout, lse, delta, pos, pos, causal, blocking, dq, dk,
                                                          dv);
    });
    const double useful = causal ? flops / 2 : flops;
    std::printf(
        "%s %-10s B=1 H=%ld n=%ld Dh=%ld blocks=%ldx%ld  forward %.3f s  %.2f GFLOP/s   backward %.3f s  %.2f "
        "GFLOP/s\n",
        sizeof(T) == 4 ? "fp32" : "fp64", causal ? "causal" : "non-causal", long(heads), long(n), long(dh),
        long(blocking.query_block), long(blocking.key_block), t_fwd, useful / t_fwd * 1e-9, t_bwd,
        2.5 * useful / t_bwd * 1e-9);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Kokkos::ScopeGuard kokkos(argc, argv);
  const index_t n = argc > 1 ? std::atol(argv[1]) : 4096;
  const index_t dh = argc > 2 ? std::atol(argv[2]) : 64;
  const index_t heads = argc > 3 ? std::atol(argv[3]) : 4;
  miniattn::kernels::AttentionBlocking blocking;
  if (argc > 4) blocking.query_block = std::atol(argv[4]);
  if (argc > 5) blocking.key_block = std::atol(argv[5]);
  std::printf("execution space: %s\n", miniattn::ExecSpace::name());
  run<float>(n, dh, heads, blocking);
  return 0;
}
