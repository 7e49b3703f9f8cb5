#!/usr/bin/env bash
# Installs the Debian 12 packages miniattn needs, skipping those already there.
# Runs apt-get as root (directly, or through sudo when available).
#
#   scripts/install_deps.sh          the build, test and check dependencies,
#                                    with MPICH and its parallel HDF5
#   scripts/install_deps.sh openmpi  the same with Open MPI and its parallel
#                                    HDF5 instead (scripts/test_openmpi.sh)
#   scripts/install_deps.sh hip      the HIP compiler for scripts/build_hip.sh:
#                                    hipcc 5.2 (clang 15), the HIP runtime
#                                    headers and the AMD GPU device libraries
#   scripts/install_deps.sh ci       the compiler cache .ci/run keeps between
#                                    its runs (ccache)
# MINIATTN_MPI=openmpi makes the first form the second, so that the scripts
# that call install_deps.sh (build, test) keep the MPI a user chose.
set -euo pipefail

set_name=${1:-}
[ "$set_name" != "" ] || [ "${MINIATTN_MPI:-mpich}" = mpich ] || set_name=${MINIATTN_MPI}
case "$set_name" in
  mpich|"") mpi_packages=(mpich libmpich-dev libhdf5-mpich-dev) ;;
  openmpi)  mpi_packages=(openmpi-bin libopenmpi-dev libhdf5-openmpi-dev) ;;
esac
case "$set_name" in
  ""|mpich|openmpi)
    packages=(
      build-essential cmake
      libtrilinos-kokkos-dev libtrilinos-kokkos-kernels-dev libopenblas-dev libopenblas-openmp-dev
      # Debian's oneDNN is built with OpenCL's GPU runtime, and its CMake
      # package finds OpenCL (REQUIRED): without the loader's development
      # files it is not found (cmake/MiniattnOnednn.cmake), and host bf16
      # GEMMs lose the core's bf16 units.
      libdnnl-dev ocl-icd-opencl-dev
      "${mpi_packages[@]}" hdf5-tools
      libyaml-cpp-dev nlohmann-json3-dev libcli11-dev libgtest-dev
      python3 python3-h5py python3-numpy python3-torch python3-matplotlib
      slurm-wlm munge
    ) ;;
  hip) packages=(hipcc libamdhip64-dev rocm-device-libs) ;;
  ci)  packages=(ccache) ;;
  *) echo "install_deps: unknown set '$set_name' (expected nothing, mpich, openmpi, hip or ci;" \
          "MINIATTN_MPI must be mpich or openmpi)" >&2; exit 2 ;;
esac

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install_deps: installing ${missing[*]}"
as_root=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install_deps: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  as_root=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update -q
"${as_root[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
