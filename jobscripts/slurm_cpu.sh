#!/bin/bash
# miniattn on a CPU-only Slurm cluster (OpenMP or Serial Kokkos build, MPICH or
# a Cray/Intel MPI that Slurm's PMI serves).
#
#   sbatch jobscripts/slurm_cpu.sh                      # from the repository root
#   sbatch --nodes=4 jobscripts/slurm_cpu.sh            # sbatch options override the #SBATCH lines
#   MINIATTN_SETS="train.steps=50" sbatch jobscripts/slurm_cpu.sh   # so do MINIATTN_* variables
#
# Writes results/miniattn-<jobid>.json (the RESULT object) and
# results/miniattn-<jobid>.log (everything the ranks printed), relative to the
# directory sbatch was run from.
#
# Launcher: `srun --mpi=pmi2` where Slurm's PMI-2 plugin starts (tested with
# Debian 12's Slurm 22.05 and MPICH 4.0.2: MPICH's PMI client talks to it),
# otherwise MPICH's own `mpiexec`, which inside an allocation starts its proxies
# through Slurm and needs no Slurm MPI plugin. `srun` without an MPI plugin
# would start N independent one-rank jobs; the script checks the rank count in
# the result and fails if it is wrong.

# ============================== EDIT BELOW ==================================
#SBATCH --job-name=miniattn
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=2          # MPI ranks per node
#SBATCH --cpus-per-task=1            # OpenMP threads per rank
#SBATCH --time=00:30:00
##SBATCH --account=CHANGE_ME         # remove one '#' to charge an account
##SBATCH --partition=CHANGE_ME       # remove one '#' to pick a partition / queue
##SBATCH --qos=CHANGE_ME
#SBATCH --output=miniattn-%j.out     # Slurm's own log, in the submission directory

# Relative paths are taken from the directory sbatch was run from. Each line may
# also be set in the environment at submission (sbatch exports it).
MINIATTN_DECK="${MINIATTN_DECK:-inputs/example.yaml}"     # the input deck
MINIATTN_BUILD="${MINIATTN_BUILD:-build}"                 # build directory
MINIATTN_EXE="${MINIATTN_EXE:-$MINIATTN_BUILD/src/miniattn}"
MINIATTN_RESULTS="${MINIATTN_RESULTS:-results}"           # where <jobid>.json/.log go
MINIATTN_SETS="${MINIATTN_SETS:-}"                        # extra overrides, e.g. "train.steps=100 parallel.dp=4"
MINIATTN_LAUNCHER="${MINIATTN_LAUNCHER:-auto}"            # auto | srun | mpiexec
MINIATTN_SRUN_MPI="${MINIATTN_SRUN_MPI:-pmi2}"            # srun --mpi= type (pmi2, pmix, cray_shasta)
MINIATTN_CPU_BIND="${MINIATTN_CPU_BIND:-cores}"           # cores | none (pin ranks and threads?)
# ============================== END OF EDITS ================================

set -euo pipefail
trap 'echo "slurm_cpu.sh: FAILED at line $LINENO (exit $?)" >&2' ERR

die() { echo "slurm_cpu.sh: error: $*" >&2; exit 1; }
[ -n "${SLURM_JOB_ID:-}" ] || die "not inside a Slurm job: submit with sbatch"

base="${SLURM_SUBMIT_DIR:-$PWD}"
absolute() { case "$1" in /*) printf '%s\n' "$1" ;; *) printf '%s\n' "$base/$1" ;; esac; }
exe=$(absolute "$MINIATTN_EXE")
deck=$(absolute "$MINIATTN_DECK")
results=$(absolute "$MINIATTN_RESULTS")
[ -x "$exe" ] || die "executable not found: $exe (build with scripts/build.sh, or set MINIATTN_BUILD / MINIATTN_EXE)"
[ -f "$deck" ] || die "deck not found: $deck (set MINIATTN_DECK)"
mkdir -p "$results"
json="$results/miniattn-$SLURM_JOB_ID.json"
log="$results/miniattn-$SLURM_JOB_ID.log"

nodes="${SLURM_JOB_NUM_NODES:-1}"
ranks="${SLURM_NTASKS:-$(( nodes * ${SLURM_NTASKS_PER_NODE:-1} ))}"
threads="${SLURM_CPUS_PER_TASK:-1}"
ranks_per_node=$(( (ranks + nodes - 1) / nodes ))

# One OpenMP team per rank; OpenBLAS single-threaded inside it (Kokkos owns the threads).
export OMP_NUM_THREADS="$threads"
export OPENBLAS_NUM_THREADS=1
if [ "$MINIATTN_CPU_BIND" = cores ]; then
  export OMP_PLACES=cores OMP_PROC_BIND=close
else
  export OMP_PROC_BIND=false
fi
export HDF5_USE_FILE_LOCKING=FALSE   # parallel file systems often refuse HDF5's flock

sets=()
for s in $MINIATTN_SETS; do sets+=(--set "$s"); done
app=("$exe" "$deck" --set "run.result=$json" ${sets[@]+"${sets[@]}"})

# Pick the launcher: srun with an MPI plugin that starts here, else mpiexec.
launcher="$MINIATTN_LAUNCHER"
if [ "$launcher" = auto ]; then
  if srun --mpi="$MINIATTN_SRUN_MPI" --nodes=1 --ntasks=1 --cpus-per-task=1 true >/dev/null 2>&1; then
    launcher=srun
  elif command -v mpiexec >/dev/null; then
    echo "slurm_cpu.sh: srun --mpi=$MINIATTN_SRUN_MPI does not start here; using mpiexec" >&2
    launcher=mpiexec
  else
    die "srun --mpi=$MINIATTN_SRUN_MPI does not start and there is no mpiexec"
  fi
fi
case "$launcher" in
  srun)
    launch=(srun --mpi="$MINIATTN_SRUN_MPI" --nodes="$nodes" --ntasks="$ranks" --cpus-per-task="$threads"
            --kill-on-bad-exit=1)
    [ "$MINIATTN_CPU_BIND" = cores ] && launch+=(--cpu-bind=cores)
    ;;
  mpiexec)  # MPICH's Hydra: reads the node list from Slurm, starts its proxies with srun
    launch=(mpiexec -n "$ranks" -ppn "$ranks_per_node")
    [ "$MINIATTN_CPU_BIND" = cores ] && launch+=(-bind-to "core:$threads")
    ;;
  *) die "MINIATTN_LAUNCHER must be auto, srun or mpiexec, not '$launcher'" ;;
esac

{
  echo "# miniattn job $SLURM_JOB_ID on $nodes node(s) [${SLURM_JOB_NODELIST:-?}], $ranks ranks x $threads threads, $(date -u +%FT%TZ)"
  echo "# deck $deck"
  echo "# ${launch[*]} ${app[*]}"
} | tee "$log"

status=0
"${launch[@]}" "${app[@]}" 2>&1 | tee -a "$log" || status=$?
[ "$status" -eq 0 ] || die "miniattn exited with status $status (log: $log)"
[ -s "$json" ] || die "no result file $json (log: $log)"
got=$(grep -oE '"ranks"[[:space:]]*:[[:space:]]*[0-9]+' "$json" | grep -oE '[0-9]+$' || true)
[ "$got" = "$ranks" ] || die "the result reports ${got:-no} ranks, the job asked for $ranks: the launcher did not start one MPI job (try MINIATTN_LAUNCHER=mpiexec or another MINIATTN_SRUN_MPI)"
echo "slurm_cpu.sh: done: $json" | tee -a "$log"
