#!/usr/bin/env bash
# A real one-node Slurm cluster on loopback, built and torn down by this test,
# runs jobscripts/slurm_cpu.sh through sbatch:
#   1. the script's own launcher choice (srun --mpi=pmi2 here),
#   2. the mpiexec fallback (MINIATTN_LAUNCHER=mpiexec),
#   3. a missing deck, which must make the job fail.
# Jobs 1 and 2 must complete with exit code 0 and write a result JSON with a
# finite final_loss from 2 ranks.
#
# usage: run_slurm_test.sh MINIATTN_EXE SOURCE_DIR WORK_PARENT
#
# Everything (munge key and socket, slurm.conf, state, spool, logs, pid files,
# job outputs) lives in a fresh temporary directory under WORK_PARENT; the
# daemons (a private munged, slurmctld, slurmd) listen on free loopback ports
# and are always stopped on exit, after any job of ours is cancelled. Needs
# root (Slurm's daemons run as SlurmUser=root) and slurm-wlm and munge
# (scripts/install_deps.sh installs them). Any failure fails the test, printing the
# daemons' logs; MINIATTN_SLURM_KEEP=1 keeps the directory for a look.
set -euo pipefail

[ $# -eq 3 ] || { echo "usage: $0 MINIATTN_EXE SOURCE_DIR WORK_PARENT" >&2; exit 2; }
exe=$1
src=$2
parent=$3
python=/usr/bin/python3
start_seconds=$SECONDS

say() { echo "slurm-test: $*"; }
fail() { echo "slurm-test: FAIL: $*" >&2; exit 1; }

[ -x "$exe" ] || fail "miniattn executable not found: $exe"
[ -f "$src/jobscripts/slurm_cpu.sh" ] || fail "jobscript not found: $src/jobscripts/slurm_cpu.sh"
[ -x "$python" ] || fail "$python is needed to pick ports and read the result"

# ---------------------------------------------------------------- packages
export PATH="$PATH:/usr/sbin:/sbin"   # the daemons live in sbin
have_slurm() {
  local c
  for c in slurmctld slurmd sbatch squeue scontrol sinfo srun scancel munged munge unmunge; do
    command -v "$c" >/dev/null 2>&1 || return 1
  done
}
# Installing is the scripts' job (scripts/install_deps.sh), never a test's.
have_slurm || fail "slurm-wlm and munge are missing: run scripts/install_deps.sh (as root)"
[ "$(id -u)" -eq 0 ] || fail "the test cluster runs its daemons as root (SlurmUser=root): run the test as root"

# A Slurm job around this test (CI on a cluster) must not leak into our cluster.
while IFS='=' read -r name _; do
  case "$name" in SLURM_*|SBATCH_*|SALLOC_*|SRUN_*|PMI_*) unset "$name" ;; esac
done < <(env)

# --------------------------------------------------------------- work area
mkdir -p "$parent"
tmp=$(mktemp -d "$(cd "$parent" && pwd)/slurm-test.XXXXXX")
# Unix socket paths (munge, slurmstepd) must stay under 108 bytes.
if [ ${#tmp} -gt 60 ]; then
  rmdir "$tmp"
  tmp=$(mktemp -d /tmp/miniattn-slurm-test.XXXXXX)
  say "build tree path too long for Unix sockets: working in $tmp"
fi
chmod 755 "$tmp"
mkdir -p "$tmp/munge" "$tmp/state" "$tmp/spool" "$tmp/log" "$tmp/jobs"
conf="$tmp/slurm.conf"
munged_pid="" slurmctld_pid="" slurmd_pid=""
jobs=()
status_ok=0

print_logs() {
  local f
  for f in "$tmp"/log/*.log "$tmp"/jobs/*.out "$tmp"/jobs/results/*.log; do
    [ -f "$f" ] || continue
    echo "----- $f (last 80 lines)"
    tail -n 80 "$f"
  done
  echo "----- end of logs"
}

stop_pid() {  # stop_pid NAME PID: TERM, wait up to 15 s, then KILL
  local name=$1 pid=$2
  [ -n "$pid" ] || return 0
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 30); do
    kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
    sleep 0.5
  done
  echo "slurm-test: $name (pid $pid) ignored TERM: killing it" >&2
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

cleanup() {
  local rc=$? p
  trap - EXIT INT TERM
  set +e
  if [ ${#jobs[@]} -gt 0 ] && [ -n "$slurmctld_pid" ] && kill -0 "$slurmctld_pid" 2>/dev/null; then
    scancel "${jobs[@]}" >/dev/null 2>&1
    for _ in $(seq 1 60); do
      [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break
      sleep 0.5
    done
  fi
  stop_pid slurmd "$slurmd_pid"
  stop_pid slurmctld "$slurmctld_pid"
  # Last resort: a step daemon or job process of this cluster still alive
  # (found by its SLURM_CONF, which is this test's own file).
  for p in /proc/[0-9]*; do
    if { tr '\0' '\n' <"$p/environ"; } 2>/dev/null | grep -qxF "SLURM_CONF=$conf"; then
      case "$(cat "$p/comm" 2>/dev/null)" in
        slurmstepd|miniattn|mpiexec*|hydra_pmi_proxy|slurm_script|srun)
          echo "slurm-test: killing leftover $(cat "$p/comm") (pid ${p#/proc/})" >&2
          kill -KILL "${p#/proc/}" 2>/dev/null ;;
      esac
    fi
  done
  stop_pid munged "$munged_pid"
  if [ "$rc" -ne 0 ] || [ "$status_ok" -ne 1 ]; then
    echo "slurm-test: failed (exit $rc): logs follow" >&2
    print_logs >&2
    [ "$rc" -ne 0 ] || rc=1
  fi
  if [ "${MINIATTN_SLURM_KEEP:-0}" = 1 ]; then
    echo "slurm-test: kept $tmp" >&2
  else
    rm -rf "$tmp"
  fi
  say "finished in $((SECONDS - start_seconds)) s, exit $rc"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ------------------------------------------------------------------- munge
# A private munged with its own key and socket: a system munged, if any, is
# neither used nor disturbed.
dd if=/dev/urandom of="$tmp/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$tmp/munge/munge.key"
munged --foreground --force --socket="$tmp/munge/munge.socket" --key-file="$tmp/munge/munge.key" \
  --pid-file="$tmp/munge/munged.pid" --seed-file="$tmp/munge/munged.seed" --log-file="$tmp/log/munged.log" \
  </dev/null >>"$tmp/log/munged.log" 2>&1 &
munged_pid=$!
for _ in $(seq 1 40); do
  [ -S "$tmp/munge/munge.socket" ] && munge -S "$tmp/munge/munge.socket" -n </dev/null >/dev/null 2>&1 && break
  kill -0 "$munged_pid" 2>/dev/null || fail "munged exited at start"
  sleep 0.25
done
munge -S "$tmp/munge/munge.socket" -n </dev/null | unmunge -S "$tmp/munge/munge.socket" >/dev/null \
  || fail "munged does not answer on $tmp/munge/munge.socket"

# -------------------------------------------------------------- slurm.conf
read -r ctld_port slurmd_port < <("$python" -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
cpus=$(nproc)
memory_mib=$(( $(awk '/^MemTotal:/ {print $2}' /proc/meminfo) * 95 / 100 / 1024 ))
overcommit=()
[ "$cpus" -ge 2 ] || overcommit=(--overcommit)   # 2 ranks on a 1-CPU machine

cat >"$conf" <<EOF
# One-node test cluster of miniattn's tests/slurm (written by run_slurm_test.sh).
ClusterName=miniattn-test
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$tmp/munge/munge.socket
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
ReturnToService=2
MinJobAge=600
MailProg=/bin/true
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/log/slurmctld.log
SlurmdLogFile=$tmp/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
NodeName=localhost NodeAddr=127.0.0.1 NodeHostname=localhost CPUs=$cpus RealMemory=$memory_mib State=UNKNOWN
PartitionName=test Nodes=localhost Default=YES MaxTime=30 State=UP
EOF
export SLURM_CONF="$conf"

# ----------------------------------------------------------------- daemons
say "starting slurmctld (port $ctld_port) and slurmd (port $slurmd_port) in $tmp"
slurmctld -D -i -f "$conf" </dev/null >>"$tmp/log/slurmctld.stderr.log" 2>&1 &
slurmctld_pid=$!
slurmd -D -f "$conf" -N localhost </dev/null >>"$tmp/log/slurmd.stderr.log" 2>&1 &
slurmd_pid=$!

state=""
for _ in $(seq 1 120); do
  kill -0 "$slurmctld_pid" 2>/dev/null || fail "slurmctld exited at start"
  kill -0 "$slurmd_pid" 2>/dev/null || fail "slurmd exited at start"
  state=$(sinfo -h -n localhost -o %t 2>/dev/null || true)
  [ "$state" = idle ] && break
  sleep 0.5
done
[ "$state" = idle ] || fail "node not idle after 60 s (sinfo state: '${state:-none}')"
say "node idle after $((SECONDS - start_seconds)) s"

# ------------------------------------------------------------------- jobs
cat >"$tmp/jobs/tiny.yaml" <<EOF
# Tiny deck of the Slurm test: 2 ranks of data parallelism, 3 steps.
model:
  vocab: 32
  d_model: 24
  heads: 3
  layers: 1
  seq_len: 16
  batch: 2
parallel:
  strategy: local
  dp: 2
train:
  steps: 3
run:
  log_every: 1
EOF

submit() {  # submit LAUNCHER DECK: prints the job id
  (cd "$tmp/jobs" &&
   MINIATTN_EXE="$exe" MINIATTN_DECK="$2" MINIATTN_LAUNCHER="$1" \
   sbatch --parsable --export=ALL --nodes=1 --ntasks-per-node=2 --cpus-per-task=1 --time=5 \
          ${overcommit[@]+"${overcommit[@]}"} --job-name="miniattn-test-$1" --output="$tmp/jobs/job-%j.out" \
          "$src/jobscripts/slurm_cpu.sh")
}

job_field() {  # job_field JOBID FIELD
  scontrol show job -o "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1
}

wait_job() {  # wait_job JOBID: waits (until $deadline) for a final state; sets job_state, job_exit
  # Runs in this shell, not a subshell, so that a signal to the test is handled
  # within half a second and no poller outlives it.
  local id=$1
  job_state="" job_exit="-"
  while [ "$SECONDS" -lt "$deadline" ]; do
    job_state=$(job_field "$id" JobState)
    case "$job_state" in
      COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|PREEMPTED|BOOT_FAIL|DEADLINE)
        job_exit=$(job_field "$id" ExitCode); return 0 ;;
      "") echo "slurm-test: job $id unknown to slurmctld" >&2; job_state=UNKNOWN; return 0 ;;
    esac
    sleep 0.5
  done
  job_state="STILL_${job_state}_AFTER_DEADLINE"
}

check_result() {  # check_result JSON
  "$python" - "$1" <<'EOF'
import json, math, sys
with open(sys.argv[1]) as f:
    r = json.load(f)
loss = r["final_loss"]
assert isinstance(loss, (int, float)) and math.isfinite(loss), "final_loss is %r" % (loss,)
assert r["ranks"] == 2, "ranks is %r, expected 2" % (r["ranks"],)
assert r["steps"] == 3, "steps is %r, expected 3" % (r.get("steps"),)
print("final_loss %.6f from %d ranks" % (loss, r["ranks"]))
EOF
}

deadline=$((SECONDS + 300))   # for all three jobs together: the whole test stays well inside CTest's TIMEOUT
job_auto=$(submit auto "$tmp/jobs/tiny.yaml");           jobs+=("$job_auto")
job_mpiexec=$(submit mpiexec "$tmp/jobs/tiny.yaml");     jobs+=("$job_mpiexec")
job_nodeck=$(submit auto "$tmp/jobs/no-such-deck.yaml"); jobs+=("$job_nodeck")
say "submitted jobs $job_auto (launcher auto), $job_mpiexec (launcher mpiexec), $job_nodeck (missing deck)"

failures=0
declare -A launcher=(["$job_auto"]=srun ["$job_mpiexec"]=mpiexec)
for job in "$job_auto" "$job_mpiexec"; do
  wait_job "$job"
  say "job $job: $job_state, exit code $job_exit"
  sed -n 's/^# \(srun\|mpiexec\) /  launched with: \1 /p' "$tmp/jobs/job-$job.out" 2>/dev/null | cut -c1-120 || true
  # The auto job must start its ranks with srun: the jobscript falls back to mpiexec quietly.
  if ! grep -q "^# ${launcher[$job]} " "$tmp/jobs/job-$job.out" 2>/dev/null; then
    echo "slurm-test: job $job did not launch with ${launcher[$job]}" >&2; failures=$((failures + 1))
  fi
  if [ "$job_state" != COMPLETED ] || [ "$job_exit" != "0:0" ]; then
    echo "slurm-test: job $job did not complete cleanly" >&2; failures=$((failures + 1)); continue
  fi
  for f in "$tmp/jobs/results/miniattn-$job.json" "$tmp/jobs/results/miniattn-$job.log"; do
    [ -s "$f" ] || { echo "slurm-test: missing $f" >&2; failures=$((failures + 1)); }
  done
  if [ -s "$tmp/jobs/results/miniattn-$job.json" ]; then
    check_result "$tmp/jobs/results/miniattn-$job.json" | sed 's/^/  /' || { echo "slurm-test: bad result of job $job" >&2; failures=$((failures + 1)); }
  fi
done

wait_job "$job_nodeck"
say "job $job_nodeck (missing deck): $job_state, exit code $job_exit"
if [ "$job_state" != FAILED ] || ! grep -q "deck not found" "$tmp/jobs/job-$job_nodeck.out" 2>/dev/null; then
  echo "slurm-test: the job with a missing deck should fail saying 'deck not found'" >&2; failures=$((failures + 1))
fi

[ "$failures" -eq 0 ] || fail "$failures check(s) failed"
status_ok=1
say "PASS: slurm_cpu.sh ran under sbatch with srun and with mpiexec, and failed on a missing deck"
