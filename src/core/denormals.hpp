#pragma once
// Subnormal floats flushed to zero on the host (x86 MXCSR FTZ + DAZ, Arm FPCR
// FZ), for this thread and the threads it creates afterwards (a new thread
// inherits its creator's floating-point environment), so call it before
// Kokkos starts its OpenMP threads.
//
// Why: once attention learns, most probabilities are tiny, and the backward
// multiplies them by small gradients; the products fall below 1.2e-38 (fp32)
// and x86 cores take a slow microcode path for every subnormal operand: on
// inputs/example_copy.yaml (fp32, fused kernel, 2 ranks here) throughput fell
// from 6.1e4 to 3.9e4 tokens/s as the copy was learned; flushed, it stays
// at 6.1e4 with the same losses to the last digit printed.
// Flushing changes only values below the smallest normal (1.2e-38 in fp32,
// 2.2e-308 in fp64), far below every tolerance; GPUs are not affected (their
// fp32 subnormal handling is a compile flag and costs nothing).
namespace miniattn {

// Returns false where the host has no such control (then nothing changes).
bool flush_denormals_to_zero();

}  // namespace miniattn
