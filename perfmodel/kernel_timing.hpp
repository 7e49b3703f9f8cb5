#pragma once
// Timing the attention kernels on one rank's local problem, shared by
// run.mode calibrate (calibrate_mode.cpp: the machine's attention rates) and
// bench_attention (tests/attention: the kernels against the GEMM rate): the
// operands, the whole forward and backward pass as a local strategy runs them,
// and fenced timings.
#include <functional>
#include <vector>

#include "core/types.hpp"
#include "kernels/attention/attention.hpp"

namespace miniattn {

// One attention problem: B = 1, `heads` heads of n rows and Dh columns; q, k,
// v and dout uniform in [-1, 1) (drawn in Acc<T>, rounded to T; fixed seeds),
// positions 0 .. n-1.
template <class T>
struct AttentionOperands {
  View4<T> q, k, v, out, dout, dq, dk, dv;
  View3<Acc<T>> lse, row_sum, delta;
  View1<index_t> positions;
  index_t heads, n, dh;

  AttentionOperands(index_t heads, index_t n, index_t dh);
  // The workspace shape of this problem for kernels::AttentionWorkspace.
  kernels::AttentionShape shape() const { return {1, heads, heads, dh, n, n}; }
  // Query-key pairs over all heads; forward FLOPs are 4 pairs() Dh (half of that causal).
  double pairs() const { return static_cast<double>(heads) * static_cast<double>(n) * static_cast<double>(n); }
};

// The forward of the whole problem (init, one key block, finalize).
template <class T>
void attention_forward_pass(AttentionOperands<T>& x, const kernels::AttentionMask& mask,
                            const kernels::AttentionBlocking& blocking, const kernels::AttentionWorkspace<T>& workspace);

// The backward of the whole problem from the forward's out and lse (delta,
// one key block, dq rounded from its accumulator).
template <class T>
void attention_backward_pass(AttentionOperands<T>& x, const kernels::AttentionMask& mask,
                             const kernels::AttentionBlocking& blocking, const kernels::AttentionWorkspace<T>& workspace);

// Seconds of each of `repeats` calls of `work` after `warmups` untimed ones,
// fenced before and after, sorted ascending. cpu_time: the process's CPU time
// (CLOCK_PROCESS_CPUTIME_ID) instead of the wall clock; worst_wall_over_cpu,
// when given, receives the largest wall / CPU ratio of a timed call (above 1:
// the core was shared).
std::vector<double> fenced_timings(int warmups, int repeats, const std::function<void()>& work,
                                   bool cpu_time = false, double* worst_wall_over_cpu = nullptr);

}  // namespace miniattn
