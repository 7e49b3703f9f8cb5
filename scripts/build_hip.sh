#!/usr/bin/env bash
# The HIP (AMD GPU) compile-and-link check: Debian 12's hipcc 5.2 and the HIP
# headers (scripts/install_deps.sh hip, when missing), Kokkos 4.6.01 and Kokkos
# Kernels 4.6.02 for HIP (scripts/build_kokkos.sh hip; gfx90a, MI250X, unless
# MINIATTN_KOKKOS_HIP_ARCH names another), then every miniattn target built with
# hipcc into build-hip/ (or $MINIATTN_BUILD_DIR). NCCL and cuDNN (CUDA-only) are
# turned off; cuBLAS is compiled for CUDA only.
# Nothing runs: use it on a machine without a GPU too. Skips, saying so, where
# hipcc (or $HIPCC) is missing and cannot be installed (no root, no apt, no
# package); a hipcc already there (a ROCm install) is used as it is.
# Extra arguments go to the first CMake configure. MINIATTN_BUILD_TARGETS
# (space-separated) builds only those targets (CI: the programs, see .ci/run).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
hipcc=${HIPCC:-hipcc}
if ! command -v "$hipcc" > /dev/null; then
  if ! "$root/scripts/install_deps.sh" hip || ! command -v "$hipcc" > /dev/null; then
    echo "build_hip: no $hipcc and it could not be installed (scripts/install_deps.sh hip); skipped"
    exit 0
  fi
fi
# CMake, MPI, HDF5, ... on Debian (nothing to do after scripts/test.sh); elsewhere the module system's.
if command -v dpkg-query > /dev/null; then "$root/scripts/install_deps.sh"; fi
arch=${MINIATTN_KOKKOS_HIP_ARCH:-AMD_GFX90A}
# hipcc asks rocm_agent_enumerator for the GPU (and prints its traceback where
# there is none) when a command line names no --offload-arch, as CMake's
# compiler checks do: name Kokkos's target instead.
offload=$(echo "${arch#AMD_}" | tr '[:upper:]' '[:lower:]')
export HCC_AMDGPU_TARGET=${HCC_AMDGPU_TARGET:-${offload%_apu}}
"$root/scripts/build_kokkos.sh" hip
prefix=${MINIATTN_DEPS_DIR:-$root/build-deps}/kokkos-hip
build=${MINIATTN_BUILD_DIR:-$root/build-hip}
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$hipcc" \
        -DKokkos_ROOT="$prefix" -DKokkosKernels_ROOT="$prefix" \
        -DMINIATTN_ENABLE_NCCL=OFF -DMINIATTN_NCCL_COMPILE_CHECK=OFF \
        -DMINIATTN_ENABLE_CUDNN=OFF -DMINIATTN_CUDNN_GRAPH_CHECK=OFF "$@"
fi
start=$(date +%s)
read -r -a targets <<< "${MINIATTN_BUILD_TARGETS:-}"
cmake --build "$build" --parallel "$(nproc)" ${targets[@]:+--target "${targets[@]}"}
echo "build_hip: ${targets[*]:-every target} compiled and linked for HIP ($arch) in $build, $(( $(date +%s) - start )) s"
