#include "perfmodel/kernel_timing.hpp"

#include <Kokkos_Random.hpp>
#include <time.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "core/bf16.hpp"
#include "core/kokkos_compat.hpp"

namespace miniattn {

namespace {

// Uniform in [-1, 1), drawn in Acc<T> and rounded to T.
template <class T>
View4<T> random_view(const char* name, index_t heads, index_t n, index_t dh, std::uint64_t seed) {
  using A = Acc<T>;
  View4<A> wide("kernel_timing.random", 1, heads, n, dh);
  Kokkos::Random_XorShift64_Pool<ExecSpace> pool(seed);
  Kokkos::fill_random(wide, pool, A(-1), A(1));
  View4<T> x(std::string(name), 1, heads, n, dh);
  const A* from = wide.data();
  T* to = x.data();
  Kokkos::parallel_for(
      "miniattn::kernel_timing_narrow", Kokkos::RangePolicy<ExecSpace>(0, x.span()),
      KOKKOS_LAMBDA(const std::size_t e) { to[e] = narrow<T>(from[e]); });
  return x;
}

// pos(i) = i (a free function: CUDA lambdas may not live in constructors).
View1<index_t> identity_positions(index_t n) {
  View1<index_t> positions("kernel_timing.positions", n);
  Kokkos::parallel_for(
      "miniattn::kernel_timing_positions", Kokkos::RangePolicy<ExecSpace>(0, n),
      KOKKOS_LAMBDA(const index_t i) { positions(i) = i; });
  return positions;
}

double clock_seconds(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace

template <class T>
AttentionOperands<T>::AttentionOperands(index_t heads_, index_t n_, index_t dh_)
    : q(random_view<T>("q", heads_, n_, dh_, 1)),
      k(random_view<T>("k", heads_, n_, dh_, 2)),
      v(random_view<T>("v", heads_, n_, dh_, 3)),
      out("out", 1, heads_, n_, dh_),
      dout(random_view<T>("dout", heads_, n_, dh_, 4)),
      dq("dq", 1, heads_, n_, dh_),
      dk("dk", 1, heads_, n_, dh_),
      dv("dv", 1, heads_, n_, dh_),
      lse("lse", 1, heads_, n_),
      row_sum("row_sum", 1, heads_, n_),
      delta("delta", 1, heads_, n_),
      positions(identity_positions(n_)),
      heads(heads_),
      n(n_),
      dh(dh_) {
  compat::fence("miniattn::kernel_timing");
}

template <class T>
void attention_forward_pass(AttentionOperands<T>& x, const kernels::AttentionMask& mask,
                            const kernels::AttentionBlocking& blocking, const kernels::AttentionWorkspace<T>& workspace) {
  kernels::attention_forward<T>(x.q, x.k, x.v, {x.positions, x.positions, mask, blocking}, x.out, x.lse, x.row_sum,
                                workspace);
}

template <class T>
void attention_backward_pass(AttentionOperands<T>& x, const kernels::AttentionMask& mask,
                             const kernels::AttentionBlocking& blocking, const kernels::AttentionWorkspace<T>& workspace) {
  Kokkos::deep_copy(x.dk, T());
  Kokkos::deep_copy(x.dv, T());
  const View4<Acc<T>> dq_acc = kernels::accumulator_of(x.dq, workspace);
  Kokkos::deep_copy(dq_acc, Acc<T>(0));
  kernels::attention_backward_delta<T>(x.out, x.dout, x.delta);
  kernels::attention_backward_accumulate<T>(x.q, x.k, x.v, x.out, x.dout, x.lse, x.delta,
                                            {x.positions, x.positions, mask, blocking}, dq_acc, x.dk, x.dv,
                                            workspace);
  kernels::round_accumulator<T>(dq_acc, x.dq);
}

std::vector<double> fenced_timings(int warmups, int repeats, const std::function<void()>& work, bool cpu_time,
                                   double* worst_wall_over_cpu) {
  for (int w = 0; w < warmups; ++w) {
    work();
    compat::fence("miniattn::kernel_timing");
  }
  std::vector<double> seconds;
  for (int r = 0; r < repeats; ++r) {
    compat::fence("miniattn::kernel_timing");
    const double wall0 = clock_seconds(CLOCK_MONOTONIC), cpu0 = clock_seconds(CLOCK_PROCESS_CPUTIME_ID);
    work();
    compat::fence("miniattn::kernel_timing");
    const double wall = clock_seconds(CLOCK_MONOTONIC) - wall0;
    const double cpu = clock_seconds(CLOCK_PROCESS_CPUTIME_ID) - cpu0;
    if (worst_wall_over_cpu && cpu > 0) *worst_wall_over_cpu = std::max(*worst_wall_over_cpu, wall / cpu);
    seconds.push_back(cpu_time ? cpu : wall);
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds;
}

#define MINIATTN_INSTANTIATE_KERNEL_TIMING(T)                                                                         \
  template struct AttentionOperands<T>;                                                                               \
  template void attention_forward_pass<T>(AttentionOperands<T>&, const kernels::AttentionMask&,                      \
                                          const kernels::AttentionBlocking&, const kernels::AttentionWorkspace<T>&);  \
  template void attention_backward_pass<T>(AttentionOperands<T>&, const kernels::AttentionMask&,                     \
                                           const kernels::AttentionBlocking&, const kernels::AttentionWorkspace<T>&);
MINIATTN_INSTANTIATE_KERNEL_TIMING(float)
MINIATTN_INSTANTIATE_KERNEL_TIMING(double)
MINIATTN_INSTANTIATE_KERNEL_TIMING(bf16)
#undef MINIATTN_INSTANTIATE_KERNEL_TIMING

}  // namespace miniattn
