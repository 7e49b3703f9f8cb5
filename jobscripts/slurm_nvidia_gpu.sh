#!/bin/bash
# miniattn on an NVIDIA GPU Slurm system (Perlmutter-like: 4 A100 a node,
# Cray MPICH, a Kokkos CUDA build). One MPI rank per GPU.
#
#   sbatch jobscripts/slurm_nvidia_gpu.sh               # from the repository root
#   sbatch --nodes=8 jobscripts/slurm_nvidia_gpu.sh     # sbatch options override the #SBATCH lines
#   MINIATTN_COMM=nccl sbatch jobscripts/slurm_nvidia_gpu.sh
#
# Writes results/miniattn-<jobid>.json (the RESULT object) and
# results/miniattn-<jobid>.log (everything the ranks printed), relative to the
# directory sbatch was run from.
#
# Before submitting, load what the build used (for example on Perlmutter:
# `module load PrgEnv-gnu cudatoolkit craype-accel-nvidia80`, plus `nccl` for
# parallel.comm=nccl); sbatch passes the environment to the job.

# ============================== EDIT BELOW ==================================
#SBATCH --job-name=miniattn
#SBATCH --account=CHANGE_ME           # project to charge (Perlmutter: mXXXX_g)
#SBATCH --constraint=gpu
#SBATCH --qos=regular                 # regular | debug | ...
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=4           # one rank per GPU
#SBATCH --gpus-per-node=4
#SBATCH --cpus-per-task=32            # 128 hardware threads / 4 ranks
#SBATCH --time=00:30:00
#SBATCH --output=miniattn-%j.out      # Slurm's own log, in the submission directory

# Relative paths are taken from the directory sbatch was run from. Each line may
# also be set in the environment at submission (sbatch exports it).
MINIATTN_DECK="${MINIATTN_DECK:-inputs/example.yaml}"     # the input deck
MINIATTN_BUILD="${MINIATTN_BUILD:-build}"                 # build directory (a Kokkos CUDA build)
MINIATTN_EXE="${MINIATTN_EXE:-$MINIATTN_BUILD/src/miniattn}"
MINIATTN_RESULTS="${MINIATTN_RESULTS:-results}"           # where <jobid>.json/.log go
MINIATTN_SETS="${MINIATTN_SETS:-}"                        # extra overrides, e.g. "train.steps=100 parallel.dp=4"
MINIATTN_COMM="${MINIATTN_COMM:-}"                        # empty: the deck's; mpi | nccl (nccl needs MINIATTN_ENABLE_NCCL=ON)
MINIATTN_GPU_BIND="${MINIATTN_GPU_BIND:-all}"             # all: every rank sees the node's 4 GPUs and Kokkos picks
                                                          #   one by node-local rank (keeps CUDA IPC for NCCL and
                                                          #   GPU-aware MPI); single: Slurm shows each rank one GPU
MINIATTN_OMP_THREADS="${MINIATTN_OMP_THREADS:-8}"         # host threads per rank (OpenMP host space, if built)
# ============================== END OF EDITS ================================

set -euo pipefail
trap 'echo "slurm_nvidia_gpu.sh: FAILED at line $LINENO (exit $?)" >&2' ERR

die() { echo "slurm_nvidia_gpu.sh: error: $*" >&2; exit 1; }
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
ranks="${SLURM_NTASKS:-$(( nodes * ${SLURM_NTASKS_PER_NODE:-4} ))}"
cpus="${SLURM_CPUS_PER_TASK:-1}"

export MPICH_GPU_SUPPORT_ENABLED=1   # Cray MPICH: MPI reads and writes GPU buffers directly
export OMP_NUM_THREADS="$MINIATTN_OMP_THREADS" OMP_PLACES=threads OMP_PROC_BIND=spread
export OPENBLAS_NUM_THREADS=1
export HDF5_USE_FILE_LOCKING=FALSE   # Lustre and other parallel file systems refuse HDF5's flock

sets=()
[ -z "$MINIATTN_COMM" ] || sets+=(--set "parallel.comm=$MINIATTN_COMM")
for s in $MINIATTN_SETS; do sets+=(--set "$s"); done
# --kokkos-map-device-id-by=mpi_rank: device = node-local rank (SLURM_LOCALID) modulo visible GPUs.
app=("$exe" "$deck" --set "run.result=$json" ${sets[@]+"${sets[@]}"} --kokkos-map-device-id-by=mpi_rank)

launch=(srun --nodes="$nodes" --ntasks="$ranks" --cpus-per-task="$cpus" --cpu-bind=cores --kill-on-bad-exit=1)
case "$MINIATTN_GPU_BIND" in
  all)    launch+=(--gpus-per-node="${SLURM_GPUS_PER_NODE:-4}" --gpu-bind=none) ;;
  single) launch+=(--gpus-per-task=1 --gpu-bind=single:1) ;;
  *) die "MINIATTN_GPU_BIND must be all or single, not '$MINIATTN_GPU_BIND'" ;;
esac

{
  echo "# miniattn job $SLURM_JOB_ID on $nodes node(s) [${SLURM_JOB_NODELIST:-?}], $ranks ranks, GPU binding $MINIATTN_GPU_BIND, $(date -u +%FT%TZ)"
  echo "# deck $deck"
  echo "# ${launch[*]} ${app[*]}"
} | tee "$log"

status=0
"${launch[@]}" "${app[@]}" 2>&1 | tee -a "$log" || status=$?
[ "$status" -eq 0 ] || die "miniattn exited with status $status (log: $log)"
[ -s "$json" ] || die "no result file $json (log: $log)"
got=$(grep -oE '"ranks"[[:space:]]*:[[:space:]]*[0-9]+' "$json" | grep -oE '[0-9]+$' || true)
[ "$got" = "$ranks" ] || die "the result reports ${got:-no} ranks, the job asked for $ranks: srun did not start one MPI job"
echo "slurm_nvidia_gpu.sh: done: $json" | tee -a "$log"
