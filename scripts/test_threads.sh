#!/usr/bin/env bash
# The threaded suite: builds Kokkos 4.6 (OpenMP + Serial) and Kokkos Kernels
# (scripts/build_kokkos.sh, skipped when its prefix is complete), builds
# miniattn against them into build-openmp/ (or $MINIATTN_OPENMP_BUILD_DIR) and
# runs there what the Serial suite (scripts/test.sh, the README's test command,
# Debian's Kokkos 3.4) cannot show, without running its end-to-end checks a
# second time:
#   * every unit test (GoogleTest: kernels of both attention implementations,
#     layouts, config, comm, I/O, performance model) with OMP_NUM_THREADS=1
#     (multi-rank tests: ranks x 1 thread; more threads than cores would
#     oversubscribe this machine),
#   * the tests labelled "threads" with the thread counts they set themselves
#     (unit kernel and attention tests on 2 threads; the model on 1, 2 and 4
#     threads of one rank against each other and against 2 ranks x 1 thread;
#     reference checks of snapshots written by 2 threads),
#   * one end-to-end check of each kind against Kokkos 4.6 and the OpenMP
#     OpenBLAS (labelled "backend": a ring, Ulysses, the gemm kernel,
#     determinism, a checkpoint restart, a pipeline, bf16, four PyTorch
#     reference checks).
# The other sequence-parallel, feature, pipeline and reference checks, the
# Slurm test and the tests labelled "slow" run in the Serial suite only.
# CTest runs tests side by side up to the cores (a test's PROCESSORS counts its ranks).
# Extra arguments go to ctest (e.g. -L threads).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install_deps.sh"
"$root/scripts/build_kokkos.sh" openmp
prefix=${MINIATTN_DEPS_DIR:-$root/build-deps}/kokkos-openmp
build=${MINIATTN_OPENMP_BUILD_DIR:-$root/build-openmp}
# The cuDNN graphs are validated by the Serial suite (scripts/test.sh) alone.
MINIATTN_BUILD_DIR=$build "$root/scripts/build.sh" -DKokkos_ROOT="$prefix" -DKokkosKernels_ROOT="$prefix" \
  -DMINIATTN_CUDNN_GRAPH_CHECK=OFF
export OMP_NUM_THREADS=1 OMP_PROC_BIND=false OPENBLAS_NUM_THREADS=1
cd "$build"
ctest --output-on-failure --no-tests=error -j "$(nproc)" -L "unit|threads|backend" -LE "slurm|slow" "$@"
