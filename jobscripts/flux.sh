#!/bin/bash
# miniattn under Flux (El Capitan/Tioga-like: AMD GPUs, Cray MPICH, a Kokkos
# HIP build; or any Flux system with GPUs). One rank per GPU.
#
#   flux batch jobscripts/flux.sh                       # from the repository root
#   flux batch -N 4 jobscripts/flux.sh                  # flux batch options override the '# flux:' lines
#   MINIATTN_SETS="train.steps=50" flux batch jobscripts/flux.sh   # flux passes the environment
#
# Writes results/miniattn-<jobid>.json (the RESULT object) and
# results/miniattn-<jobid>.log (everything the ranks printed), relative to the
# directory flux batch was run from; <jobid> is the batch job's id in decimal.
#
# Before submitting, load what the build used (for example
# `module load rocm cray-mpich`).

# ============================== EDIT BELOW ==================================
# flux: --job-name=miniattn
# flux: -N 1
# flux: --exclusive
# flux: -t 30m
# flux: -q pbatch
# flux: --output=miniattn-{{id}}.out
# flux: # --setattr=bank=CHANGE_ME
#   (a no-op as written: delete the '#' after 'flux:' to charge a bank. Keep
#    every directive in the '# flux:' form above: Flux stops reading them at
#    the first line that is not a comment.)

# Relative paths are taken from the directory flux batch was run from. Each line
# may also be set in the environment at submission.
MINIATTN_DECK="${MINIATTN_DECK:-inputs/example.yaml}"     # the input deck
MINIATTN_BUILD="${MINIATTN_BUILD:-build}"                 # build directory (a Kokkos HIP or CUDA build)
MINIATTN_EXE="${MINIATTN_EXE:-$MINIATTN_BUILD/src/miniattn}"
MINIATTN_RESULTS="${MINIATTN_RESULTS:-results}"           # where <jobid>.json/.log go
MINIATTN_SETS="${MINIATTN_SETS:-}"                        # extra overrides, e.g. "train.steps=100 parallel.dp=4"
MINIATTN_COMM="${MINIATTN_COMM:-}"                        # empty: the deck's; mpi | nccl (a build with NCCL/RCCL support)
MINIATTN_RANKS_PER_NODE="${MINIATTN_RANKS_PER_NODE:-4}"   # one per GPU (El Capitan: 4 MI300A; Tioga: 8 GCDs)
MINIATTN_CORES_PER_RANK="${MINIATTN_CORES_PER_RANK:-21}"  # cores per rank (El Capitan: 84 usable / 4)
MINIATTN_FLUX_RUN_OPTS="${MINIATTN_FLUX_RUN_OPTS:-}"      # extra flux run options, e.g. "-o pmi=cray-pals"
# ============================== END OF EDITS ================================

set -euo pipefail
trap 'echo "flux.sh: FAILED at line $LINENO (exit $?)" >&2' ERR

die() { echo "flux.sh: error: $*" >&2; exit 1; }
command -v flux >/dev/null || die "flux not found: submit with flux batch"
flux_jobid="${FLUX_JOB_ID:-$(flux getattr jobid 2>/dev/null || true)}"
[ -n "$flux_jobid" ] || die "not inside a Flux job: submit with flux batch"
jobid=$(flux job id --to=dec "$flux_jobid" 2>/dev/null || printf '%s' "$flux_jobid")

base="${MINIATTN_SUBMIT_DIR:-$PWD}"   # flux batch starts the script where it was submitted
absolute() { case "$1" in /*) printf '%s\n' "$1" ;; *) printf '%s\n' "$base/$1" ;; esac; }
exe=$(absolute "$MINIATTN_EXE")
deck=$(absolute "$MINIATTN_DECK")
results=$(absolute "$MINIATTN_RESULTS")
[ -x "$exe" ] || die "executable not found: $exe (build it, or set MINIATTN_BUILD / MINIATTN_EXE)"
[ -f "$deck" ] || die "deck not found: $deck (set MINIATTN_DECK)"
mkdir -p "$results"
json="$results/miniattn-$jobid.json"
log="$results/miniattn-$jobid.log"

nodes=$(flux getattr size)            # one broker per node of this batch instance
ranks=$(( nodes * MINIATTN_RANKS_PER_NODE ))

export MPICH_GPU_SUPPORT_ENABLED=1   # Cray MPICH: MPI reads and writes GPU buffers directly
export OMP_NUM_THREADS="$MINIATTN_CORES_PER_RANK" OMP_PLACES=cores OMP_PROC_BIND=close
export OPENBLAS_NUM_THREADS=1
export HDF5_USE_FILE_LOCKING=FALSE   # Lustre and other parallel file systems refuse HDF5's flock

sets=()
[ -z "$MINIATTN_COMM" ] || sets+=(--set "parallel.comm=$MINIATTN_COMM")
for s in $MINIATTN_SETS; do sets+=(--set "$s"); done
# gpu-affinity=per-task shows each rank its own GPU; Kokkos maps rank to device
# by node-local rank, which then is device 0 of the visible one.
app=("$exe" "$deck" --set "run.result=$json" ${sets[@]+"${sets[@]}"} --kokkos-map-device-id-by=mpi_rank)
extra=()
for o in $MINIATTN_FLUX_RUN_OPTS; do extra+=("$o"); done
launch=(flux run -N "$nodes" -n "$ranks" -c "$MINIATTN_CORES_PER_RANK" -g 1 -o gpu-affinity=per-task
        -o cpu-affinity=per-task ${extra[@]+"${extra[@]}"})

{
  echo "# miniattn job $jobid ($flux_jobid) on $nodes node(s), $ranks ranks, $(date -u +%FT%TZ)"
  echo "# deck $deck"
  echo "# ${launch[*]} ${app[*]}"
} | tee "$log"

status=0
"${launch[@]}" "${app[@]}" 2>&1 | tee -a "$log" || status=$?
[ "$status" -eq 0 ] || die "miniattn exited with status $status (log: $log)"
[ -s "$json" ] || die "no result file $json (log: $log)"
got=$(grep -oE '"ranks"[[:space:]]*:[[:space:]]*[0-9]+' "$json" | grep -oE '[0-9]+$' || true)
[ "$got" = "$ranks" ] || die "the result reports ${got:-no} ranks, the job asked for $ranks"
echo "flux.sh: done: $json" | tee -a "$log"
