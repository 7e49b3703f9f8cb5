#!/bin/bash
# miniattn on an AMD GPU Slurm system (Frontier-like: 4 MI250X a node = 8 GCDs,
# Cray MPICH, a Kokkos HIP build). One MPI rank per GCD, on the CPU cores
# closest to it.
#
#   sbatch jobscripts/slurm_amd_gpu.sh                  # from the repository root
#   sbatch --nodes=8 jobscripts/slurm_amd_gpu.sh        # sbatch options override the #SBATCH lines
#   MINIATTN_SETS="train.steps=50" sbatch jobscripts/slurm_amd_gpu.sh
#
# Writes results/miniattn-<jobid>.json (the RESULT object) and
# results/miniattn-<jobid>.log (everything the ranks printed), relative to the
# directory sbatch was run from.
#
# Before submitting, load what the build used (for example on Frontier:
# `module load PrgEnv-amd rocm craype-accel-amd-gfx90a`); sbatch passes the
# environment to the job.
#
# Build first, on a login node with those modules loaded: scripts/build_hip.sh
# (Kokkos 4.6.01 and Kokkos Kernels for HIP, gfx90a, then miniattn into
# build-hip/; MINIATTN_KOKKOS_ROCBLAS=ON gives Kokkos Kernels ROCm's rocBLAS,
# without which its GEMMs are slow), then submit with MINIATTN_BUILD=build-hip.
# Or against your own Kokkos HIP install:
#   cmake -S . -B build -DCMAKE_CXX_COMPILER=hipcc -DKokkos_ROOT=... -DKokkosKernels_ROOT=...
#   cmake --build build -j
# Only the fused and gemm attention kernels run on AMD GPUs (cudnn and
# parallel.comm: nccl are CUDA-only).

# ============================== EDIT BELOW ==================================
#SBATCH --job-name=miniattn
#SBATCH --account=CHANGE_ME           # project to charge
#SBATCH --partition=batch             # batch | extended | ...
#SBATCH --nodes=1
#SBATCH --time=00:30:00
#SBATCH --output=miniattn-%j.out      # Slurm's own log, in the submission directory

# Relative paths are taken from the directory sbatch was run from. Each line may
# also be set in the environment at submission (sbatch exports it).
MINIATTN_DECK="${MINIATTN_DECK:-inputs/example.yaml}"     # the input deck
MINIATTN_BUILD="${MINIATTN_BUILD:-build}"                 # build directory (a Kokkos HIP build; build-hip from scripts/build_hip.sh)
MINIATTN_EXE="${MINIATTN_EXE:-$MINIATTN_BUILD/src/miniattn}"
MINIATTN_RESULTS="${MINIATTN_RESULTS:-results}"           # where <jobid>.json/.log go
MINIATTN_SETS="${MINIATTN_SETS:-}"                        # extra overrides, e.g. "train.steps=100 parallel.dp=8"
MINIATTN_COMM="${MINIATTN_COMM:-}"                        # empty: the deck's; mpi (nccl is CUDA-only: no RCCL backend)
MINIATTN_RANKS_PER_NODE="${MINIATTN_RANKS_PER_NODE:-8}"   # one per GCD
MINIATTN_CPUS_PER_RANK="${MINIATTN_CPUS_PER_RANK:-7}"     # 56 usable cores (8 kept for the system) / 8
MINIATTN_OMP_THREADS="${MINIATTN_OMP_THREADS:-7}"         # host threads per rank (OpenMP host space, if built)
# ============================== END OF EDITS ================================

set -euo pipefail
trap 'echo "slurm_amd_gpu.sh: FAILED at line $LINENO (exit $?)" >&2' ERR

die() { echo "slurm_amd_gpu.sh: error: $*" >&2; exit 1; }
[ -n "${SLURM_JOB_ID:-}" ] || die "not inside a Slurm job: submit with sbatch"

base="${SLURM_SUBMIT_DIR:-$PWD}"
absolute() { case "$1" in /*) printf '%s\n' "$1" ;; *) printf '%s\n' "$base/$1" ;; esac; }
exe=$(absolute "$MINIATTN_EXE")
deck=$(absolute "$MINIATTN_DECK")
results=$(absolute "$MINIATTN_RESULTS")
[ -x "$exe" ] || die "executable not found: $exe (build it, or set MINIATTN_BUILD / MINIATTN_EXE)"
[ -f "$deck" ] || die "deck not found: $deck (set MINIATTN_DECK)"
mkdir -p "$results"
json="$results/miniattn-$SLURM_JOB_ID.json"
log="$results/miniattn-$SLURM_JOB_ID.log"

nodes="${SLURM_JOB_NUM_NODES:-1}"
ranks=$(( nodes * MINIATTN_RANKS_PER_NODE ))

export MPICH_GPU_SUPPORT_ENABLED=1   # Cray MPICH: MPI reads and writes GPU buffers directly
export OMP_NUM_THREADS="$MINIATTN_OMP_THREADS" OMP_PLACES=cores OMP_PROC_BIND=close
export OPENBLAS_NUM_THREADS=1
export HDF5_USE_FILE_LOCKING=FALSE   # Lustre and other parallel file systems refuse HDF5's flock

sets=()
[ -z "$MINIATTN_COMM" ] || sets+=(--set "parallel.comm=$MINIATTN_COMM")
for s in $MINIATTN_SETS; do sets+=(--set "$s"); done
# Each rank sees its one GCD (--gpu-bind=closest); Kokkos maps rank to device by
# node-local rank, which then is device 0 of the visible one.
app=("$exe" "$deck" --set "run.result=$json" ${sets[@]+"${sets[@]}"} --kokkos-map-device-id-by=mpi_rank)
launch=(srun --nodes="$nodes" --ntasks="$ranks" --ntasks-per-node="$MINIATTN_RANKS_PER_NODE"
        --cpus-per-task="$MINIATTN_CPUS_PER_RANK" --gpus-per-task=1 --gpu-bind=closest
        --cpu-bind=cores --kill-on-bad-exit=1)

{
  echo "# miniattn job $SLURM_JOB_ID on $nodes node(s) [${SLURM_JOB_NODELIST:-?}], $ranks ranks, $(date -u +%FT%TZ)"
  echo "# deck $deck"
  echo "# ${launch[*]} ${app[*]}"
} | tee "$log"

status=0
"${launch[@]}" "${app[@]}" 2>&1 | tee -a "$log" || status=$?
[ "$status" -eq 0 ] || die "miniattn exited with status $status (log: $log)"
[ -s "$json" ] || die "no result file $json (log: $log)"
got=$(grep -oE '"ranks"[[:space:]]*:[[:space:]]*[0-9]+' "$json" | grep -oE '[0-9]+$' || true)
[ "$got" = "$ranks" ] || die "the result reports ${got:-no} ranks, the job asked for $ranks: srun did not start one MPI job"
echo "slurm_amd_gpu.sh: done: $json" | tee -a "$log"
