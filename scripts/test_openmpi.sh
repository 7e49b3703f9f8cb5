#!/usr/bin/env bash
# The MPI tests under Open MPI (the MPI of most GPU clusters; NVIDIA's HPC-X is
# built on it) instead of MPICH: installs Debian's Open MPI and its parallel
# HDF5 (scripts/install_deps.sh openmpi), builds miniattn against them into
# build-openmpi/ (or $MINIATTN_OPENMPI_BUILD_DIR), then runs through CTest:
#   * every strategy on 2 and 4 ranks, and hybrid on 4 (driver.sp.*: the
#     1-rank loss curve, parameters and gradients, measured bytes = formula),
#   * TP and a pipeline on 4 ranks, a stopped rank ending the job by its
#     exchange deadline (exit 75 through Open MPI's launcher),
#   * the Comm, HDF5 and checkpoint unit tests on 2 and 4 ranks, a checkpoint
#     restart bitwise equal to an undisturbed run,
#   * PyTorch float64 reference checks on 2 and 4 ranks (ring, Ulysses, RSA,
#     pp x tp).
# Bad input (driver.bad_input, about 90 launches) is left to MPICH: Open MPI's
# launcher starts slower (193 s against 20 s). Only the targets these tests
# run are built (scripts/test_targets.py). Meant
# for a machine or root without MPICH (CI runs it in a fresh root:
# scripts/fresh_root.sh openmpi); beside MPICH, pass -DMPI_C_COMPILER=mpicc.openmpi
# -DMPI_CXX_COMPILER=mpicxx.openmpi -DMPIEXEC_EXECUTABLE=/usr/bin/mpiexec.openmpi
# and the Open MPI HDF5's paths to the first configure. Extra arguments go to
# the first configure.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export MINIATTN_MPI=openmpi
"$root/scripts/install_deps.sh" openmpi
build=${MINIATTN_OPENMPI_BUILD_DIR:-$root/build-openmpi}
selection=(-R '^(driver\.sp\.[a-z]+\.np[24]\.dp1(\.u2)?|driver\.(checkpoint_restart|deadline\.ring\.np2|pipeline\.np4|tp\.ring\.np4\.dp1\.tp2)|test_(comm|hdf5|checkpoint)\.np[24]|reference\.fp64\.(ring\.zigzag\.np4|ulysses\.striped\.np2|rsa\.noncausal\.np4|pp2\.tp2\.np4))$')
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DMINIATTN_CUDNN_GRAPH_CHECK=OFF "$@"
else
  cmake "$build" > /dev/null
fi
# A build folder configured against MPICH would test MPICH again, silently.
(cd "$build" && ctest -N -R '^driver\.bad_input$' --show-only=json-v1 | grep -q 'OMPI_ALLOW_RUN_AS_ROOT=1') \
  || { echo "test_openmpi: $build is not configured for Open MPI (its tests lack Open MPI's environment)" >&2; exit 2; }
targets=$(cd "$build" && ctest -N "${selection[@]}" --show-only=json-v1 | "$root/scripts/test_targets.py" "$build")
MINIATTN_BUILD_DIR=$build MINIATTN_BUILD_TARGETS=$targets "$root/scripts/build.sh"
export OMP_NUM_THREADS=1 OMP_PROC_BIND=false OPENBLAS_NUM_THREADS=1
cd "$build"
ctest --output-on-failure --no-tests=error -j "$(nproc)" "${selection[@]}"
