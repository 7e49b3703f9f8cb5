#!/usr/bin/env bash
# The threaded suite: builds Kokkos 4.6 (OpenMP + Serial) and Kokkos Kernels
# (scripts/build_kokkos.sh, skipped when its prefix is complete; C++20 without
# the API Kokkos 4 deprecated, as Kokkos 5 asks), builds miniattn against them
# into build-openmp/ (or $MINIATTN_OPENMP_BUILD_DIR) and
# runs there what the Serial suite (scripts/test.sh, the README's test command,
# Debian's Kokkos 3.4) cannot show, without running its tests a second time:
#   * the tests labelled "threads", with the thread counts they set
#     themselves (the kernel and attention unit tests on 2 threads; the model
#     on 1, 2 and 4 threads of one rank against each other and against 2
#     ranks x 1 thread; reference checks of snapshots written by 2 threads),
#   * one end-to-end check of each kind against Kokkos 4.6 and the OpenMP
#     OpenBLAS (labelled "backend": a ring, Ulysses, the gemm kernel,
#     determinism, a checkpoint restart, a pipeline, bf16, four PyTorch
#     reference checks),
#   * the checks that need the CUDA toolkit on this machine (labelled
#     "toolkit": cuDNN's graphs validated for sm_90, NCCL's link), where it is
#     installed; CI runs the Serial suite in a bare root without it.
# The unit tests at one thread, the other end-to-end checks, the Slurm test
# and the tests labelled "slow" run in the Serial suite only, and only the
# targets these tests run are built (scripts/test_targets.py).
# CTest runs tests side by side up to the cores (a test's PROCESSORS counts its ranks).
# Extra arguments go to ctest (e.g. -R attention).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install_deps.sh"
"$root/scripts/build_kokkos.sh" openmp
prefix=${MINIATTN_DEPS_DIR:-$root/build-deps}/kokkos-openmp
build=${MINIATTN_OPENMP_BUILD_DIR:-$root/build-openmp}
selection=(-L "threads|backend|toolkit" -LE "slurm|slow")
# cudnn-frontend for the cuDNN graph test (nothing when its tarball is absent).
frontend=$("$root/scripts/unpack_cudnn_frontend.sh")
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DKokkos_ROOT="$prefix" -DKokkosKernels_ROOT="$prefix" \
    ${frontend:+-DCUDNN_FRONTEND_ROOT="$frontend"}
else
  # The test list the selection below reads is the last configure's: tests
  # added since then would be run without being built.
  cmake "$build" > /dev/null
fi
targets=$(cd "$build" && ctest -N "${selection[@]}" --show-only=json-v1 | "$root/scripts/test_targets.py" "$build")
MINIATTN_BUILD_DIR=$build MINIATTN_BUILD_TARGETS=$targets "$root/scripts/build.sh"
export OMP_NUM_THREADS=1 OMP_PROC_BIND=false OPENBLAS_NUM_THREADS=1
cd "$build"
ctest --output-on-failure --no-tests=error -j "$(nproc)" "${selection[@]}" "$@"
