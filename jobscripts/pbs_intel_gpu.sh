#!/bin/bash
# miniattn on a PBS Pro GPU system with Cray PALS mpiexec: Aurora-like (6 Intel
# GPUs of 2 tiles a node, a Kokkos SYCL build, one rank per tile) or
# Polaris-like (4 NVIDIA A100 a node, a Kokkos CUDA build: set
# MINIATTN_GPU_VENDOR=nvidia and MINIATTN_RANKS_PER_NODE=4).
#
#   qsub jobscripts/pbs_intel_gpu.sh                    # from the repository root
#   qsub -l select=4 jobscripts/pbs_intel_gpu.sh        # qsub options override the #PBS lines
#   qsub -v MINIATTN_SETS="train.steps=50" jobscripts/pbs_intel_gpu.sh   # pass MINIATTN_* with -v
#
# Writes results/miniattn-<jobid>.json (the RESULT object) and
# results/miniattn-<jobid>.log (everything the ranks printed), relative to the
# directory qsub was run from. A small per-rank GPU affinity wrapper is written
# next to them (results/gpu_affinity-<jobid>.sh): it shows each rank one GPU
# (tile) chosen by its node-local rank before starting miniattn.
#
# Load the modules the build used in the EDIT block below (PBS jobs start
# with a login environment, not the submitting shell's).

# ============================== EDIT BELOW ==================================
#PBS -N miniattn
#PBS -A CHANGE_ME
#PBS -q debug
#PBS -l select=1
#PBS -l place=scatter
#PBS -l walltime=00:30:00
#PBS -l filesystems=home:flare        # ALCF only (Polaris: home:eagle); delete elsewhere
#PBS -j oe
#PBS -k doe

# module load frameworks/... / module use ...      (what the build used)

# Relative paths are taken from the directory qsub was run from.
MINIATTN_DECK="${MINIATTN_DECK:-inputs/example.yaml}"     # the input deck
MINIATTN_BUILD="${MINIATTN_BUILD:-build}"                 # build directory (Kokkos SYCL or CUDA build)
MINIATTN_EXE="${MINIATTN_EXE:-$MINIATTN_BUILD/src/miniattn}"
MINIATTN_RESULTS="${MINIATTN_RESULTS:-results}"           # where <jobid>.json/.log go
MINIATTN_SETS="${MINIATTN_SETS:-}"                        # extra overrides, e.g. "train.steps=100 parallel.dp=12"
MINIATTN_COMM="${MINIATTN_COMM:-}"                        # empty: the deck's; mpi | nccl (NVIDIA, MINIATTN_ENABLE_NCCL=ON)
MINIATTN_GPU_VENDOR="${MINIATTN_GPU_VENDOR:-intel}"       # intel (ZE_AFFINITY_MASK) | nvidia (CUDA_VISIBLE_DEVICES)
MINIATTN_GPUS_PER_NODE="${MINIATTN_GPUS_PER_NODE:-12}"    # devices a rank can be given: Aurora 12 tiles, Polaris 4
MINIATTN_RANKS_PER_NODE="${MINIATTN_RANKS_PER_NODE:-12}"  # one per device
MINIATTN_DEPTH="${MINIATTN_DEPTH:-8}"                     # CPU threads per rank (mpiexec --depth)
# ============================== END OF EDITS ================================

set -euo pipefail
trap 'echo "pbs_intel_gpu.sh: FAILED at line $LINENO (exit $?)" >&2' ERR

die() { echo "pbs_intel_gpu.sh: error: $*" >&2; exit 1; }
[ -n "${PBS_JOBID:-}" ] || die "not inside a PBS job: submit with qsub"
[ -r "${PBS_NODEFILE:-}" ] || die "PBS_NODEFILE is not readable"

base="${PBS_O_WORKDIR:-$PWD}"
cd "$base"
absolute() { case "$1" in /*) printf '%s\n' "$1" ;; *) printf '%s\n' "$base/$1" ;; esac; }
exe=$(absolute "$MINIATTN_EXE")
deck=$(absolute "$MINIATTN_DECK")
results=$(absolute "$MINIATTN_RESULTS")
[ -x "$exe" ] || die "executable not found: $exe (build it, or set MINIATTN_BUILD / MINIATTN_EXE)"
[ -f "$deck" ] || die "deck not found: $deck (set MINIATTN_DECK)"
mkdir -p "$results"
jobid="${PBS_JOBID%%.*}"              # 12345.server.domain -> 12345
json="$results/miniattn-$jobid.json"
log="$results/miniattn-$jobid.log"

nodes=$(sort -u "$PBS_NODEFILE" | wc -l)
ranks=$(( nodes * MINIATTN_RANKS_PER_NODE ))

export MPICH_GPU_SUPPORT_ENABLED=1   # Cray MPICH (Polaris): GPU-aware MPI; harmless elsewhere
export OMP_NUM_THREADS="$MINIATTN_DEPTH" OMP_PLACES=cores OMP_PROC_BIND=close
export OPENBLAS_NUM_THREADS=1
export HDF5_USE_FILE_LOCKING=FALSE   # Lustre and DAOS-backed file systems refuse HDF5's flock

# The per-rank GPU affinity wrapper. PALS sets PALS_LOCAL_RANKID (and
# PMI_LOCAL_RANK); each rank sees one device.
wrapper="$results/gpu_affinity-$jobid.sh"
cat >"$wrapper" <<'EOF'
#!/bin/bash
# Shows this rank one GPU (Intel: one tile in FLAT mode) chosen by its node-local rank.
local_rank="${PALS_LOCAL_RANKID:-${PMI_LOCAL_RANK:-${MPI_LOCALRANKID:-0}}}"
device=$(( local_rank % MINIATTN_GPUS_PER_NODE ))
case "$MINIATTN_GPU_VENDOR" in
  intel)  export ZE_AFFINITY_MASK="$device" ;;
  # Polaris numbers its GPUs in the reverse order of the CPU cores nearest them.
  nvidia) export CUDA_VISIBLE_DEVICES=$(( MINIATTN_GPUS_PER_NODE - 1 - device )) ;;
  *) echo "gpu_affinity: unknown MINIATTN_GPU_VENDOR '$MINIATTN_GPU_VENDOR'" >&2; exit 1 ;;
esac
exec "$@"
EOF
chmod +x "$wrapper"
export MINIATTN_GPU_VENDOR MINIATTN_GPUS_PER_NODE

sets=()
[ -z "$MINIATTN_COMM" ] || sets+=(--set "parallel.comm=$MINIATTN_COMM")
for s in $MINIATTN_SETS; do sets+=(--set "$s"); done
app=("$exe" "$deck" --set "run.result=$json" ${sets[@]+"${sets[@]}"} --kokkos-map-device-id-by=mpi_rank)
# --cpu-bind depth: rank r gets MINIATTN_DEPTH consecutive hardware threads.
# On Aurora a --cpu-bind list:... that skips cores 0 and 52 (kept for the OS) is better still.
launch=(mpiexec -n "$ranks" --ppn "$MINIATTN_RANKS_PER_NODE" --depth "$MINIATTN_DEPTH" --cpu-bind depth
        --env OMP_NUM_THREADS="$MINIATTN_DEPTH" "$wrapper")

{
  echo "# miniattn job $jobid on $nodes node(s), $ranks ranks, $MINIATTN_GPU_VENDOR GPUs, $(date -u +%FT%TZ)"
  echo "# deck $deck"
  echo "# ${launch[*]} ${app[*]}"
} | tee "$log"

status=0
"${launch[@]}" "${app[@]}" 2>&1 | tee -a "$log" || status=$?
[ "$status" -eq 0 ] || die "miniattn exited with status $status (log: $log)"
[ -s "$json" ] || die "no result file $json (log: $log)"
got=$(grep -oE '"ranks"[[:space:]]*:[[:space:]]*[0-9]+' "$json" | grep -oE '[0-9]+$' || true)
[ "$got" = "$ranks" ] || die "the result reports ${got:-no} ranks, the job asked for $ranks"
echo "pbs_intel_gpu.sh: done: $json" | tee -a "$log"
