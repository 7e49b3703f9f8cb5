#!/bin/bash
# miniattn on an LSF system with jsrun (Summit/Lassen-like: 6 V100 a node on
# Summit, 4 on Lassen; IBM Spectrum MPI; a Kokkos CUDA build). One resource
# set per GPU: 1 rank, 1 GPU, 7 cores.
#
#   bsub < jobscripts/lsf_jsrun.sh                      # from the repository root; '<' makes bsub
#                                                       # read the #BSUB lines on every LSF version
#   bsub -nnodes 8 < jobscripts/lsf_jsrun.sh            # bsub options override the #BSUB lines
#   MINIATTN_COMM=nccl bsub < jobscripts/lsf_jsrun.sh   # bsub passes the environment
#
# Writes results/miniattn-<jobid>.json (the RESULT object) and
# results/miniattn-<jobid>.log (everything the ranks printed), relative to the
# directory bsub was run from.
#
# Before submitting, load what the build used (for example on Summit:
# `module load gcc cuda spectrum-mpi hdf5`).

# ============================== EDIT BELOW ==================================
#BSUB -J miniattn
#BSUB -P CHANGE_ME
#BSUB -q batch
#BSUB -nnodes 1
#BSUB -W 0:30
#BSUB -alloc_flags smt1
#BSUB -o miniattn-%J.out
#BSUB -e miniattn-%J.out

# Relative paths are taken from the directory bsub was run from. Each line may
# also be set in the environment at submission.
MINIATTN_DECK="${MINIATTN_DECK:-inputs/example.yaml}"     # the input deck
MINIATTN_BUILD="${MINIATTN_BUILD:-build}"                 # build directory (a Kokkos CUDA build)
MINIATTN_EXE="${MINIATTN_EXE:-$MINIATTN_BUILD/src/miniattn}"
MINIATTN_RESULTS="${MINIATTN_RESULTS:-results}"           # where <jobid>.json/.log go
MINIATTN_SETS="${MINIATTN_SETS:-}"                        # extra overrides, e.g. "train.steps=100 parallel.dp=6"
MINIATTN_COMM="${MINIATTN_COMM:-}"                        # empty: the deck's; mpi | nccl (needs MINIATTN_ENABLE_NCCL=ON)
MINIATTN_RS_PER_NODE="${MINIATTN_RS_PER_NODE:-6}"         # resource sets (= ranks = GPUs) a node: Summit 6, Lassen 4
MINIATTN_CORES_PER_RS="${MINIATTN_CORES_PER_RS:-7}"       # cores per resource set: Summit 42/6, Lassen 40/4 = 10
# ============================== END OF EDITS ================================

set -euo pipefail
trap 'echo "lsf_jsrun.sh: FAILED at line $LINENO (exit $?)" >&2' ERR

die() { echo "lsf_jsrun.sh: error: $*" >&2; exit 1; }
[ -n "${LSB_JOBID:-}" ] || die "not inside an LSF job: submit with bsub"

base="${LS_SUBCWD:-$PWD}"
absolute() { case "$1" in /*) printf '%s\n' "$1" ;; *) printf '%s\n' "$base/$1" ;; esac; }
exe=$(absolute "$MINIATTN_EXE")
deck=$(absolute "$MINIATTN_DECK")
results=$(absolute "$MINIATTN_RESULTS")
[ -x "$exe" ] || die "executable not found: $exe (build it, or set MINIATTN_BUILD / MINIATTN_EXE)"
[ -f "$deck" ] || die "deck not found: $deck (set MINIATTN_DECK)"
mkdir -p "$results"
json="$results/miniattn-$LSB_JOBID.json"
log="$results/miniattn-$LSB_JOBID.log"

# Compute nodes of the job: the host file lists the launch ("batch") node too.
[ -r "${LSB_DJOB_HOSTFILE:-}" ] || die "LSB_DJOB_HOSTFILE is not readable"
nodes=$(sort -u "$LSB_DJOB_HOSTFILE" | grep -cvE '^(batch|login)' || true)
[ "$nodes" -ge 1 ] || die "no compute nodes in $LSB_DJOB_HOSTFILE"
ranks=$(( nodes * MINIATTN_RS_PER_NODE ))

export OMP_NUM_THREADS="$MINIATTN_CORES_PER_RS" OMP_PLACES=cores OMP_PROC_BIND=close
export OPENBLAS_NUM_THREADS=1
export HDF5_USE_FILE_LOCKING=FALSE   # GPFS and Lustre refuse HDF5's flock

sets=()
[ -z "$MINIATTN_COMM" ] || sets+=(--set "parallel.comm=$MINIATTN_COMM")
for s in $MINIATTN_SETS; do sets+=(--set "$s"); done
# Each resource set sees its one GPU; Kokkos maps rank to device by node-local
# rank (OMPI_COMM_WORLD_LOCAL_RANK), which then is device 0 of the visible one.
app=("$exe" "$deck" --set "run.result=$json" ${sets[@]+"${sets[@]}"} --kokkos-map-device-id-by=mpi_rank)
# -n resource sets in all, -r a node, each -a 1 rank, -g 1 GPU, -c cores, bound to its set;
# --smpiargs="-gpu" turns on Spectrum MPI's CUDA-aware transfers.
launch=(jsrun -n "$ranks" -r "$MINIATTN_RS_PER_NODE" -a 1 -g 1 -c "$MINIATTN_CORES_PER_RS" -b rs
        --smpiargs="-gpu")

{
  echo "# miniattn job $LSB_JOBID on $nodes node(s), $ranks ranks, $(date -u +%FT%TZ)"
  echo "# deck $deck"
  echo "# ${launch[*]} ${app[*]}"
} | tee "$log"

status=0
"${launch[@]}" "${app[@]}" 2>&1 | tee -a "$log" || status=$?
[ "$status" -eq 0 ] || die "miniattn exited with status $status (log: $log)"
[ -s "$json" ] || die "no result file $json (log: $log)"
got=$(grep -oE '"ranks"[[:space:]]*:[[:space:]]*[0-9]+' "$json" | grep -oE '[0-9]+$' || true)
[ "$got" = "$ranks" ] || die "the result reports ${got:-no} ranks, the job asked for $ranks"
echo "lsf_jsrun.sh: done: $json" | tee -a "$log"
