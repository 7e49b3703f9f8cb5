#!/usr/bin/env bash
# Builds Kokkos 4.6.01 and Kokkos Kernels 4.6.02 (BLAS only) from their source
# tarballs into a prefix, for miniattn to build against with -DKokkos_ROOT.
#
#   scripts/build_kokkos.sh [openmp|cuda|hip|tools]      (default openmp)
#
#   openmp  Kokkos with the OpenMP and Serial backends; Kokkos Kernels with the
#           BLAS TPL: OpenBLAS's OpenMP build where Debian has it
#           (libopenblas-openmp-dev), so that BLAS calls share Kokkos's OpenMP
#           threads instead of starting a second pool of threads that fights
#           them for the cores (measured here: 1 rank x 2 threads takes 19%
#           longer per step with the pthreads OpenBLAS). Prefix:
#           build-deps/kokkos-openmp.
#   cuda    Kokkos with the CUDA backend (Kokkos_ARCH_HOPPER90 unless
#           MINIATTN_KOKKOS_CUDA_ARCH names another, e.g. AMPERE80) and the
#           Serial host backend, built with its nvcc_wrapper; CUDA 13 needs the
#           patch in scripts/patches/ (guarded by CUDART_VERSION, so CUDA 12
#           builds unchanged); Kokkos Kernels with the cuBLAS TPL.
#           Prefix: build-deps/kokkos-cuda.
#   hip     Kokkos with the HIP backend (Kokkos_ARCH_AMD_GFX90A, MI250X, unless
#           MINIATTN_KOKKOS_HIP_ARCH names another, e.g. AMD_GFX942 where the
#           hipcc knows it: Debian 12's hipcc 5.2 does not) and the Serial host
#           backend, built with hipcc, rocThrust off (Debian has none); Kokkos
#           Kernels with no TPL: rocBLAS is not in Debian, so its GEMMs are
#           Kokkos Kernels' own (portable, slow) unless
#           MINIATTN_KOKKOS_ROCBLAS=ON on a ROCm machine that has rocBLAS.
#           Prefix: build-deps/kokkos-hip.
#   tools   Kokkos Tools' simple kernel timer (kp_kernel_timer.so, kp_reader)
#           and space-time stack (kp_space_time_stack.so, MPI-aware), built
#           with their Makefiles; they work with any Kokkos build (see
#           docs/kokkos_tools.md). Prefix: build-deps/kokkos-tools.
#
# Environment:
#   MINIATTN_THIRD_PARTY  folder with the tarballs and their SHA256SUMS
#                         (default ../shared/third_party beside the checkout)
#   MINIATTN_DEPS_DIR     where sources are unpacked and prefixes installed
#                         (default build-deps/ in the checkout)
#   CUDA_HOME             CUDA toolkit for the cuda variant (default /usr/local/cuda)
#   HIPCC                 the hip variant's compiler (default hipcc)
#   MINIATTN_KOKKOS_HIP_ARCH, MINIATTN_KOKKOS_ROCBLAS  the hip variant's target
#                         and rocBLAS TPL (above)
#   MINIATTN_BLAS_LIBRARIES  BLAS libraries for the openmp variant, as Kokkos
#                         Kernels' BLAS_LIBRARIES (default: Debian's OpenMP
#                         OpenBLAS if installed, else CMake's FindBLAS)
#
# A prefix is complete when its stamp (the tarballs' checksums and the flags)
# matches: then the script only prints the prefix and exits. Every tarball is
# checked against SHA256SUMS before it is unpacked.
#
# Kokkos Kernels pre-instantiates nothing (every KokkosKernels_INST_* off):
# miniattn instantiates the few BLAS-3 calls it makes, and those reach the
# vendor BLAS through the TPL (hip without rocBLAS: Kokkos Kernels' own GEMM).
# That keeps its build to a few minutes.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
variant=${1:-openmp}
case "$variant" in
  openmp|cuda|hip|tools) ;;
  *) echo "build_kokkos: unknown variant '$variant' (expected openmp, cuda, hip or tools)" >&2; exit 2 ;;
esac

third_party=${MINIATTN_THIRD_PARTY:-$root/../shared/third_party}
deps=${MINIATTN_DEPS_DIR:-$root/build-deps}
prefix=$deps/kokkos-$variant

# Every tarball is checked against SHA256SUMS before it is unpacked (verify_tarballs).
third_party_caller=build_kokkos
third_party_hint="or build against your own install with -DKokkos_ROOT"
# shellcheck source=scripts/third_party.sh
. "$root/scripts/third_party.sh"

if [ "$variant" = tools ]; then
  tools_tar=$(cd "$third_party" 2>/dev/null && ls kokkos-tools-*.tar.gz 2>/dev/null | head -n 1)
  [ -n "$tools_tar" ] || { echo "build_kokkos: no kokkos-tools-*.tar.gz in $third_party" >&2; exit 1; }
  stamp_text=$(cd "$third_party" && grep -E " $tools_tar\$" SHA256SUMS || true)
  if [ -f "$prefix/.miniattn-stamp" ] && [ "$(cat "$prefix/.miniattn-stamp")" = "$stamp_text" ]; then
    echo "build_kokkos: $prefix is complete"
    exit 0
  fi
  verify_tarballs "$tools_tar"
  rm -rf "$deps/src-tools" "$prefix"
  mkdir -p "$deps/src-tools" "$prefix"
  tar -xzf "$third_party/$tools_tar" -C "$deps/src-tools"
  profiling=$(echo "$deps"/src-tools/kokkos-tools-*/profiling)
  make -C "$profiling/simple-kernel-timer" -j "$(nproc)" > /dev/null
  make -C "$profiling/space-time-stack" CXX="${MPICXX:-mpicxx}" > /dev/null
  cp "$profiling/simple-kernel-timer/kp_kernel_timer.so" "$profiling/simple-kernel-timer/kp_reader" \
     "$profiling/space-time-stack/kp_space_time_stack.so" "$prefix/"
  printf '%s\n' "$stamp_text" > "$prefix/.miniattn-stamp"
  rm -rf "$deps/src-tools"
  echo "build_kokkos: Kokkos Tools in $prefix (KOKKOS_TOOLS_LIBS=$prefix/kp_kernel_timer.so)"
  exit 0
fi
kokkos_tar=kokkos-4.6.01.tar.gz
kernels_tar=kokkos-kernels-4.6.02.tar.gz
jobs=$(nproc)

# Every variant without the API Kokkos 4 deprecated (Kokkos 5 removes it), so
# that a use of it fails the build. The openmp prefix is C++20, the standard
# Kokkos 5 requires, so that the threaded suite compiles and runs miniattn as
# C++20; the GPU prefixes stay at C++17, as the GPU machines have run them.
cxx_standard=17
[ "$variant" = openmp ] && cxx_standard=20
common_flags=(-DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_STANDARD="$cxx_standard" -DCMAKE_CXX_EXTENSIONS=OFF)
kokkos_common_flags=(-DKokkos_ENABLE_DEPRECATED_CODE_4=OFF)
kernels_flags=(
  -DKokkosKernels_ENABLE_ALL_COMPONENTS=OFF -DKokkosKernels_ENABLE_COMPONENT_BLAS=ON
  -DKokkosKernels_ADD_DEFAULT_ETI=OFF
  -DKokkosKernels_INST_DOUBLE=OFF -DKokkosKernels_INST_FLOAT=OFF
  -DKokkosKernels_INST_COMPLEX_DOUBLE=OFF -DKokkosKernels_INST_COMPLEX_FLOAT=OFF
  -DKokkosKernels_INST_LAYOUTLEFT=OFF -DKokkosKernels_INST_LAYOUTRIGHT=OFF
  -DKokkosKernels_INST_ORDINAL_INT=OFF -DKokkosKernels_INST_OFFSET_SIZE_T=OFF -DKokkosKernels_INST_OFFSET_INT=OFF
  -DKokkosKernels_INST_EXECSPACE_SERIAL=OFF -DKokkosKernels_INST_EXECSPACE_OPENMP=OFF
  -DKokkosKernels_ENABLE_TESTS=OFF -DKokkosKernels_ENABLE_EXAMPLES=OFF
)
patches=()
if [ "$variant" = openmp ]; then
  kokkos_flags=(-DKokkos_ENABLE_OPENMP=ON -DKokkos_ENABLE_SERIAL=ON)
  kernels_flags+=(-DKokkosKernels_ENABLE_TPL_BLAS=ON -DKokkosKernels_ENABLE_TPL_LAPACK=OFF)
  openmp_blas_dir=/usr/lib/$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)/openblas-openmp
  if [ -n "${MINIATTN_BLAS_LIBRARIES:-}" ]; then
    kernels_flags+=(-DBLAS_LIBRARIES="$MINIATTN_BLAS_LIBRARIES")
  elif [ -f "$openmp_blas_dir/libopenblas.so" ]; then
    kernels_flags+=(-DBLAS_LIBRARIES=openblas -DBLAS_LIBRARY_DIRS="$openmp_blas_dir")
  fi
  compiler=(-DCMAKE_CXX_COMPILER="${CXX:-g++}")
elif [ "$variant" = hip ]; then
  arch=${MINIATTN_KOKKOS_HIP_ARCH:-AMD_GFX90A}
  rocblas=${MINIATTN_KOKKOS_ROCBLAS:-OFF}
  kokkos_flags=(-DKokkos_ENABLE_HIP=ON -DKokkos_ENABLE_SERIAL=ON -DKokkos_ARCH_"$arch"=ON
                -DKokkos_ENABLE_ROCTHRUST=OFF)
  kernels_flags+=(-DKokkosKernels_ENABLE_TPL_ROCBLAS="$rocblas" -DKokkosKernels_ENABLE_TPL_ROCSPARSE=OFF
                  -DKokkosKernels_ENABLE_TPL_ROCSOLVER=OFF -DKokkosKernels_ENABLE_TPL_BLAS=OFF
                  -DKokkosKernels_ENABLE_TPL_LAPACK=OFF
                  -DKokkosKernels_INST_EXECSPACE_HIP=OFF -DKokkosKernels_INST_MEMSPACE_HIPSPACE=OFF)
  compiler=(-DCMAKE_CXX_COMPILER="${HIPCC:-hipcc}")
  # hipcc asks rocm_agent_enumerator for a GPU (a traceback where there is
  # none) when a command line names no --offload-arch, as CMake's checks do.
  offload=$(echo "${arch#AMD_}" | tr '[:upper:]' '[:lower:]')
  export HCC_AMDGPU_TARGET=${HCC_AMDGPU_TARGET:-${offload%_apu}}
else
  cuda_home=${CUDA_HOME:-/usr/local/cuda}
  arch=${MINIATTN_KOKKOS_CUDA_ARCH:-HOPPER90}
  kokkos_flags=(-DKokkos_ENABLE_CUDA=ON -DKokkos_ENABLE_SERIAL=ON -DKokkos_ARCH_"$arch"=ON
                -DKokkos_ENABLE_CUDA_LAMBDA=ON -DCUDAToolkit_ROOT="$cuda_home")
  kernels_flags+=(-DKokkosKernels_ENABLE_TPL_CUBLAS=ON -DKokkosKernels_ENABLE_TPL_BLAS=OFF
                  -DKokkosKernels_INST_EXECSPACE_CUDA=OFF -DKokkosKernels_INST_MEMSPACE_CUDASPACE=OFF
                  -DCUDAToolkit_ROOT="$cuda_home")
  for p in "$root"/scripts/patches/kokkos-4.6.01-*.patch; do [ -f "$p" ] && patches+=("$p"); done
  export PATH="$cuda_home/bin:$PATH"
fi

# The stamp: what was built, from what. A change to any of it rebuilds.
stamp_text=$(
  cd "$third_party" 2>/dev/null && grep -E " ($kokkos_tar|$kernels_tar)\$" SHA256SUMS
  echo "kokkos: ${kokkos_common_flags[*]} ${kokkos_flags[*]} ${common_flags[*]}"
  echo "kernels: ${kernels_flags[*]}"
  for p in "${patches[@]}"; do sha256sum "$p" | cut -d' ' -f1; done
)
stamp=$prefix/.miniattn-stamp
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$stamp_text" ]; then
  echo "build_kokkos: $prefix is complete"
  exit 0
fi

verify_tarballs "$kokkos_tar" "$kernels_tar"

src=$deps/src-$variant
rm -rf "$src" "$prefix"
mkdir -p "$src"
tar -xzf "$third_party/$kokkos_tar" -C "$src"
tar -xzf "$third_party/$kernels_tar" -C "$src"
for p in "${patches[@]}"; do
  echo "build_kokkos: applying $(basename "$p")"
  patch -d "$src/kokkos-4.6.01" -p1 --forward --silent < "$p"
done

if [ "$variant" = cuda ]; then
  # nvcc_wrapper defaults to sm_70, which CUDA 13 dropped: give CMake's
  # compiler check an architecture the toolkit knows.
  # Both projects' compiler checks run nvcc_wrapper, so both get the flag.
  compiler=(-DCMAKE_CXX_COMPILER="$src/kokkos-4.6.01/bin/nvcc_wrapper"
            -DCMAKE_CXX_FLAGS="-arch=sm_$(echo "$arch" | tr -dc 0-9)")
  export NVCC_WRAPPER_DEFAULT_COMPILER=${CXX:-g++}
fi

start=$(date +%s)
echo "build_kokkos: Kokkos 4.6.01 ($variant) -> $prefix"
cmake -S "$src/kokkos-4.6.01" -B "$src/build-kokkos" "${compiler[@]}" "${common_flags[@]}" \
      "${kokkos_common_flags[@]}" "${kokkos_flags[@]}" \
      -DCMAKE_INSTALL_PREFIX="$prefix" > "$src/kokkos-configure.log"
cmake --build "$src/build-kokkos" --parallel "$jobs"
cmake --install "$src/build-kokkos" > /dev/null

echo "build_kokkos: Kokkos Kernels 4.6.02 (BLAS only) -> $prefix"
cmake -S "$src/kokkos-kernels-4.6.02" -B "$src/build-kernels" "${compiler[@]}" "${common_flags[@]}" \
      "${kernels_flags[@]}" -DKokkos_ROOT="$prefix" -DCMAKE_INSTALL_PREFIX="$prefix" > "$src/kernels-configure.log"
cmake --build "$src/build-kernels" --parallel "$jobs"
cmake --install "$src/build-kernels" > /dev/null

printf '%s\n' "$stamp_text" > "$stamp"
rm -rf "$src"
echo "build_kokkos: done in $(( $(date +%s) - start )) s: use -DKokkos_ROOT=$prefix -DKokkosKernels_ROOT=$prefix"
