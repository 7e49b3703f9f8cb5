#pragma once
// This machine's own dense matrix-multiply rate, measured in the run with
// KokkosBlas::gemm on the run's scalar type, so that achieved FLOP/s can be
// reported as a fraction of what the hardware + BLAS reach on this rank.
namespace miniattn {

// FLOP/s of C = A B with square n x n LayoutRight operands: median of
// `repeats` timed calls after one warm-up call.
template <class T>
double measure_gemm_flops(long n, int repeats);

}  // namespace miniattn
