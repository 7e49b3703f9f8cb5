#!/usr/bin/env bash
# The CUDA compile-and-link check: Kokkos 4.6.01 and Kokkos Kernels 4.6.02 for
# CUDA (scripts/build_kokkos.sh cuda; Hopper unless MINIATTN_KOKKOS_CUDA_ARCH
# names another), then every miniattn target built with nvcc_wrapper, the
# NCCL backend and, where cudnn-frontend's tarball is there
# (scripts/unpack_cudnn_frontend.sh), the cuDNN attention path into
# build-cuda/ (or $MINIATTN_BUILD_DIR). Nothing runs: use
# it on a machine without a GPU too. Skips, saying so, without a CUDA toolkit.
# Extra arguments go to the first CMake configure. MINIATTN_BUILD_TARGETS
# (space-separated) builds only those targets (a short GPU lease; CI).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cuda_home=${CUDA_HOME:-/usr/local/cuda}
if [ ! -x "$cuda_home/bin/nvcc" ]; then
  echo "build_cuda: no CUDA toolkit at $cuda_home (set CUDA_HOME); skipped"
  exit 0
fi
"$root/scripts/build_kokkos.sh" cuda
frontend=$("$root/scripts/unpack_cudnn_frontend.sh")
prefix=${MINIATTN_DEPS_DIR:-$root/build-deps}/kokkos-cuda
arch=${MINIATTN_KOKKOS_CUDA_ARCH:-HOPPER90}
build=${MINIATTN_BUILD_DIR:-$root/build-cuda}
export NVCC_WRAPPER_DEFAULT_COMPILER=${CXX:-g++}
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$prefix/bin/nvcc_wrapper" \
        -DCMAKE_CXX_FLAGS="-arch=sm_$(echo "$arch" | tr -dc 0-9)" -DKokkos_ROOT="$prefix" \
        -DKokkosKernels_ROOT="$prefix" -DCUDAToolkit_ROOT="$cuda_home" -DMINIATTN_ENABLE_NCCL=ON \
        ${frontend:+-DCUDNN_FRONTEND_ROOT="$frontend"} "$@"
fi
start=$(date +%s)
read -r -a targets <<< "${MINIATTN_BUILD_TARGETS:-}"
cmake --build "$build" --parallel "$(nproc)" ${targets[@]:+--target "${targets[@]}"}
echo "build_cuda: ${targets[*]:-every target} compiled and linked for CUDA ($arch) in $build, $(( $(date +%s) - start )) s"
