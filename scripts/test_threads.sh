#!/usr/bin/env bash
# The threaded suite: builds Kokkos 4.6 (OpenMP + Serial) and Kokkos Kernels
# (scripts/build_kokkos.sh, skipped when its prefix is complete), builds
# miniattn against them into build-openmp/ (or $MINIATTN_OPENMP_BUILD_DIR) and
# runs the CTest suite there:
#   * every test with OMP_NUM_THREADS=1 (multi-rank tests: ranks x 1 thread;
#     more threads than cores would oversubscribe this machine),
#   * the tests labelled "threads" with the thread counts they set themselves
#     (unit kernel and attention tests on 2 threads; the model on 1, 2 and 4
#     threads of one rank against each other and against 2 ranks x 1 thread;
#     reference checks of snapshots written by 2 threads).
# The Slurm test and the tests labelled "slow" (8 oversubscribed ranks, the
# same numbers on one thread per rank as the Serial suite) stay on the Debian
# build (scripts/test.sh).
# Extra arguments go to ctest (e.g. -L threads).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install_deps.sh"
"$root/scripts/build_kokkos.sh" openmp
prefix=${MINIATTN_DEPS_DIR:-$root/build-deps}/kokkos-openmp
build=${MINIATTN_OPENMP_BUILD_DIR:-$root/build-openmp}
MINIATTN_BUILD_DIR=$build "$root/scripts/build.sh" -DKokkos_ROOT="$prefix" -DKokkosKernels_ROOT="$prefix"
export OMP_NUM_THREADS=1 OMP_PROC_BIND=false OPENBLAS_NUM_THREADS=1
cd "$build"
ctest --output-on-failure --no-tests=error -LE "slurm|slow" "$@"
