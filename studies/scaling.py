#!/usr/bin/python3
"""Strong- and weak-scaling sweeps of miniattn over rank counts and attention strategies.

Every run is `mpiexec -n R miniattn DECK --set run.mode=bench --set model.seq_len=N
--set parallel.strategy=S ...` with OPENBLAS_NUM_THREADS=1; its `RESULT {json}` line is
written to the output file (JSON lines) with three fields added:

  study    {mode: strong|weak, ranks, strategy, layout, seq_len, seq_per_rank}
  machine  CPU model and count from /proc/cpuinfo, memory, host name
  run      the command, wall seconds, CPU seconds of the ranks (cores_obtained = CPU / wall),
           exit status, load average before and after, the binary (path, mtime, sha256 prefix)

A run that fails (non-zero exit, timeout, no RESULT line) is written as a line with
`"status": "failed"` and the error, the sweep goes on, and the script exits 1 at the end.
A run excluded by --limit (e.g. rsa, whose N/P x N score block makes it slow and large at
long sequences) is written with `"status": "skipped"` and does not count as a failure.

  strong: global seq_len fixed (each of --seq-lens), ranks from --ranks.
  weak:   seq_len per rank fixed (each of --seq-per-rank), global seq_len = per-rank x ranks.

On 1 rank every strategy is the 1-rank baseline `local`, run once per sequence length;
`local` is not run on more ranks (it would be pure data parallelism, not sequence
parallelism). A weak-scaling point identical to a strong-scaling one already run
(same ranks, strategy, layout, seq_len and overrides) reuses its result, marked with
`study.reused_from`, unless --no-reuse is given. With --resume the runs already in --out
(same command, successful) are not run again, so an interrupted sweep can be continued.

Example (the study of studies/scaling.md), then the figures:
  /usr/bin/python3 studies/scaling.py --ranks 1,2 --seq-lens 8192,16384 --seq-per-rank 8192 \
      --limit rsa=8192 --out studies/scaling/results.jsonl
  /usr/bin/python3 studies/plot_scaling.py studies/scaling/results.jsonl --outdir studies/scaling
"""

import argparse
import hashlib
import json
import os
import platform
import resource
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_MINIATTN = REPO / "build" / "src" / "miniattn"

DEFAULT_DECK = """\
# Base deck of the scaling study (written by studies/scaling.py); the sweep sets
# model.seq_len, parallel.strategy, parallel.layout, train.steps and run.mode.
model:
  vocab: 256
  d_model: 256
  heads: 4
  layers: 2
  seq_len: 8192
  batch: 1
  causal: true
  precision: fp32
parallel:
  strategy: local
train:
  steps: 4
run:
  mode: bench
"""


def int_list(text):
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def name_list(text):
    values = [v.strip() for v in text.split(",") if v.strip()]
    if not values:
        raise argparse.ArgumentTypeError("expected a comma-separated list")
    return values


def machine_info():
    """The CPU model and count from /proc/cpuinfo, memory from /proc/meminfo."""
    models, processors, cores = [], 0, set()
    physical = core = None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key, value = key.strip(), value.strip()
                if key == "processor":
                    processors += 1
                elif key == "model name":
                    models.append(value)
                elif key == "physical id":
                    physical = value
                elif key == "core id":
                    core = value
                elif not key and physical is not None and core is not None:
                    cores.add((physical, core))
                    physical = core = None
        if physical is not None and core is not None:
            cores.add((physical, core))
    except OSError:
        pass
    memory_kib = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    memory_kib = int(line.split()[1])
    except OSError:
        pass
    model = models[0] if models else platform.processor() or "unknown"
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    return {
        "cpu_model": model,
        "logical_cpus": processors or os.cpu_count(),
        "physical_cores": len(cores) or None,
        "usable_cpus": usable,
        "memory_gib": round(memory_kib / 2**20, 1) if memory_kib else None,
        "hostname": platform.node(),
        "kernel": platform.release(),
        "description": f"{model}, {processors or os.cpu_count()} logical CPUs",
    }


def load_average():
    try:
        return list(os.getloadavg())
    except OSError:
        return None


def children_cpu_seconds():
    """User + system seconds of the finished child processes (mpiexec reaps the ranks, so they count)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def binary_info(path):
    info = {"path": str(path)}
    try:
        st = os.stat(path)
        info["mtime"] = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(st.st_mtime))
        with open(path, "rb") as f:
            info["sha256"] = hashlib.sha256(f.read()).hexdigest()[:16]
    except OSError as e:
        info["error"] = str(e)
    return info


def limit_list(text):
    limits = {}
    for item in text.split(","):
        strategy, sep, value = item.partition("=")
        try:
            limits[strategy.strip()] = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected STRATEGY=MAX_SEQ_LEN[,...], got {text!r}")
        if not sep or not strategy.strip():
            raise argparse.ArgumentTypeError(f"expected STRATEGY=MAX_SEQ_LEN[,...], got {text!r}")
    return limits


def previous_runs(path):
    """Successful lines already in PATH: command -> record, and the (command, mode) pairs."""
    records, studies = {}, set()
    try:
        with open(path) as f:
            for line in f:
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue
                command = record.get("run", {}).get("command")
                if record.get("status") == "ok" and command:
                    records.setdefault(command, record)
                    studies.add((command, record.get("study", {}).get("mode")))
    except FileNotFoundError:
        pass
    return records, studies


def plan_runs(args):
    """(mode, ranks, strategy, layout, seq_len, seq_per_rank) for every run, in order."""
    runs = []
    modes = ["strong", "weak"] if args.mode == "both" else [args.mode]
    for mode in modes:
        lengths = args.seq_lens if mode == "strong" else args.seq_per_rank
        for length in lengths:
            for ranks in args.ranks:
                seq_len = length if mode == "strong" else length * ranks
                if ranks == 1:
                    combos = [("local", "contiguous")]
                else:
                    combos = [(s, l) for s in args.strategies if s != "local" for l in args.layouts]
                for strategy, layout in combos:
                    runs.append({"mode": mode, "ranks": ranks, "strategy": strategy, "layout": layout,
                                 "seq_len": seq_len, "seq_per_rank": seq_len // ranks if seq_len % ranks == 0 else seq_len / ranks})
    return runs


def kill_group(proc):
    """End the process group this script started for one run (mpiexec and its ranks)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=10)
            return
        except subprocess.TimeoutExpired:
            continue


def run_one(command, env, timeout):
    """Runs one command in its own process group; returns (rc, stdout, stderr, seconds, timed_out)."""
    start = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out, err, time.monotonic() - start, False
    except subprocess.TimeoutExpired:
        kill_group(proc)
        out, err = proc.communicate()
        return proc.returncode, out, err, time.monotonic() - start, True
    except KeyboardInterrupt:
        kill_group(proc)
        raise


def parse_result(stdout):
    for line in reversed(stdout.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    return None


def tail(text, lines=15):
    return "\n".join(text.strip().splitlines()[-lines:])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--miniattn", default=str(DEFAULT_MINIATTN), help="the executable (default: %(default)s)")
    p.add_argument("--deck", help="base deck; default: write one next to --out (d_model 256, 4 heads, 2 layers, "
                                  "batch 1, fp32, causal, bench)")
    p.add_argument("--ranks", type=int_list, default=[1, 2], help="rank counts, e.g. 1,2 (default: 1,2)")
    p.add_argument("--strategies", type=name_list, default=["local", "ring", "rsa", "ulysses"],
                   help="attention strategies for ranks >= 2 (1 rank is always local) "
                        "(default: local,ring,rsa,ulysses)")
    p.add_argument("--layouts", type=name_list, default=["contiguous"],
                   help="sequence layouts for ranks >= 2: contiguous,zigzag (default: contiguous)")
    p.add_argument("--seq-lens", type=int_list, default=[8192, 16384],
                   help="strong scaling: global sequence lengths (default: 8192,16384)")
    p.add_argument("--seq-per-rank", type=int_list, default=[8192],
                   help="weak scaling: sequence length per rank (default: 8192)")
    p.add_argument("--mode", choices=["strong", "weak", "both"], default="both")
    p.add_argument("--steps", type=int, default=4, help="training steps per run; the step time is the median "
                                                        "over steps after the first (default: 4)")
    p.add_argument("--out", default=str(REPO / "results" / "scaling.jsonl"), help="JSON lines (default: %(default)s)")
    p.add_argument("--append", action="store_true", help="append to --out instead of replacing it")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="passed to every run as --set KEY=VALUE (repeatable)")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per run before it is killed "
                                                                 "(default: %(default)s)")
    p.add_argument("--mpiexec", default="mpiexec", help="launcher (default: %(default)s)")
    p.add_argument("--mpiexec-args", default="", help="extra launcher arguments, one shell-quoted string")
    p.add_argument("--threads", type=int, default=1, help="OPENBLAS_NUM_THREADS and OMP_NUM_THREADS per rank "
                                                          "(default: 1)")
    p.add_argument("--limit", type=limit_list, action="append", default=[], metavar="STRATEGY=MAX_SEQ_LEN",
                   help="skip runs of STRATEGY above this global seq_len (recorded as skipped), e.g. rsa=8192")
    p.add_argument("--resume", action="store_true", help="append to --out and do not run again what it already "
                                                         "holds (same command, successful)")
    p.add_argument("--no-reuse", action="store_true", help="run weak-scaling points again even when a strong-"
                                                           "scaling run had the same configuration")
    p.add_argument("--dry-run", action="store_true", help="print the commands only")
    args = p.parse_args(argv)
    if args.steps < 1:
        p.error("--steps must be at least 1")

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.deck:
        deck = Path(args.deck)
        if not deck.is_file():
            p.error(f"--deck {deck}: no such file")
    else:
        deck = out.with_name(out.stem + ".deck.yaml")
        if not args.dry_run:
            deck.write_text(DEFAULT_DECK)
    miniattn = Path(args.miniattn)
    if not args.dry_run and not os.access(miniattn, os.X_OK):
        p.error(f"--miniattn {miniattn}: not an executable file")

    env = dict(os.environ)
    env["OPENBLAS_NUM_THREADS"] = str(args.threads)
    env["OMP_NUM_THREADS"] = str(args.threads)
    machine = machine_info()
    runs = plan_runs(args)
    limits = {}
    for item in args.limit:
        limits.update(item)
    print(f"scaling: {len(runs)} runs on {machine['description']}; results to {out}", flush=True)

    done = {}  # command -> (record, mode) of a successful run
    already = set()  # (command, mode) already written to --out by an earlier sweep
    if args.resume and not args.dry_run:
        earlier, already = previous_runs(out)
        done = {command: (record, record["study"]["mode"]) for command, record in earlier.items()}
    failures = skipped = 0
    sink = None if args.dry_run else open(out, "a" if args.append or args.resume else "w")
    try:
        for i, study in enumerate(runs, 1):
            command = [args.mpiexec, "-n", str(study["ranks"]), *shlex.split(args.mpiexec_args), str(miniattn),
                       str(deck), "--set", "run.mode=bench", "--set", f"model.seq_len={study['seq_len']}",
                       "--set", f"parallel.strategy={study['strategy']}", "--set",
                       f"parallel.layout={study['layout']}", "--set", f"train.steps={args.steps}"]
            for o in args.overrides:
                command += ["--set", o]
            label = (f"[{i}/{len(runs)}] {study['mode']:6s} ranks={study['ranks']} {study['strategy']:8s} "
                     f"{study['layout']:10s} seq_len={study['seq_len']}")
            key = shlex.join(command)
            limit = limits.get(study["strategy"])
            if limit is not None and study["seq_len"] > limit:
                print(f"{label}  skipped (--limit {study['strategy']}={limit})", flush=True)
                skipped += 1
                if not args.dry_run and (key, study["mode"]) not in already:
                    sink.write(json.dumps({"status": "skipped", "error": f"--limit {study['strategy']}={limit}",
                                           "study": study, "machine": machine, "run": {"command": key}}) + "\n")
                    sink.flush()
                continue
            if args.dry_run:
                print(label, "\n   ", key)
                continue
            if (key, study["mode"]) in already:
                print(f"{label}  already in {out}", flush=True)
                continue
            if key in done and not args.no_reuse:
                previous, previous_mode = done[key]
                record = dict(previous)
                record["study"] = dict(study, reused_from=previous_mode)
                sink.write(json.dumps(record) + "\n")
                sink.flush()
                print(f"{label}  reused the {previous_mode} run: "
                      f"{previous['step_seconds_median']:.3f} s/step", flush=True)
                continue
            print(label, "...", end=" ", flush=True)
            load_before = load_average()
            cpu_before = children_cpu_seconds()
            rc, stdout, stderr, seconds, timed_out = run_one(command, env, args.timeout)
            cpu = children_cpu_seconds() - cpu_before
            run_info = {"command": key, "wall_seconds": seconds, "returncode": rc,
                        "load_average_before": load_before, "load_average_after": load_average(),
                        "cpu_seconds": cpu, "cores_obtained": cpu / seconds if seconds > 0 else None,
                        "threads_per_rank": args.threads, "binary": binary_info(miniattn),
                        "finished": time.strftime("%Y-%m-%dT%H:%M:%S")}
            result, error = None, None
            if timed_out:
                error = f"timed out after {args.timeout:g} s"
            elif rc != 0:
                error = f"exit status {rc}: {tail(stderr) or tail(stdout)}"
            else:
                try:
                    result = parse_result(stdout)
                    if result is None:
                        error = "no RESULT line in the output: " + tail(stdout)
                except json.JSONDecodeError as e:
                    error = f"unreadable RESULT line: {e}"
            if error is None:
                record = dict(result, study=study, machine=machine, run=run_info, status="ok")
                done[key] = (record, study["mode"])
                print(f"{result['step_seconds_median']:.3f} s/step, {result['tokens_per_second']:.1f} tokens/s "
                      f"({seconds:.0f} s)", flush=True)
            else:
                failures += 1
                run_info["stderr_tail"] = tail(stderr, 40)
                record = {"status": "failed", "error": error, "study": study, "machine": machine, "run": run_info}
                print(f"FAILED ({error.splitlines()[0]})", flush=True)
            sink.write(json.dumps(record) + "\n")
            sink.flush()
    finally:
        if sink:
            sink.close()
    if failures:
        print(f"scaling: {failures} of {len(runs)} runs failed; see the lines with \"status\": \"failed\" in {out}",
              file=sys.stderr)
        return 1
    if not args.dry_run:
        print(f"scaling: {len(runs)} runs ({skipped} skipped by --limit) written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
