"""Step time and peak memory of miniattn against PyTorch eager, same model, same cores.

Runs one training configuration twice: in miniattn (`mpiexec -n R miniattn` on a
temporary deck, `run.mode: bench`, one core per rank) and in PyTorch eager with
the independent reference model of reference_model.py (one process, T threads),
then prints the step-time ratio (speed-up = PyTorch / miniattn) and the
peak-memory ratio (miniattn, summed over ranks / PyTorch), with the project's
CPU targets (SPEEDUP_TARGET, MEMORY_RATIO_TARGET below) as PASS/MISS lines. The targets are reported, not enforced: the exit
status is 0 unless a run failed (1). PyTorch running out of memory is a result,
not a failure: it is reported and the exit status stays 0.

    /usr/bin/python3 validation/compare_pytorch.py [--miniattn build/src/miniattn]
        [--ranks 2] [--threads 2] [--seq-len 8192] [--d-model 256] [--heads 4]
        [--layers 2] [--vocab 256] [--batch 1] [--causal|--no-causal]
        [--precision fp32|fp64] [--steps 5] [--strategy ring] [--layout zigzag]
        [--extra-set key=value ...] [--repeats 1] [--json out.json]
        [--torch-mem-limit-gib G] [--timeout-s S]

Both sides run the same steps: zero gradients, forward, mean cross-entropy,
backward, global-norm gradient clipping (train.grad_clip), AdamW with decay on
matrices and embeddings only. The first step is a warm-up; the step time is the
median over the others (miniattn reports it as `step_seconds_median`). With
`--repeats K` both sides run K times, alternating, and the medians of the K
step times and peaks are compared (the machine may be shared: timings are noisy).

Peak memory is the peak resident set (getrusage ru_maxrss) of each process:
for miniattn the per-rank peaks from its RESULT line, summed over ranks (a
single PyTorch process using all the threads is compared with all the ranks
together); for PyTorch the peak of a separate worker process (this script
re-invoked with a hidden flag), so that the parent's own state does not count.
The worker's resident size after its imports, before the model is built, is
reported as its baseline. PyTorch out of memory shows as a RuntimeError /
MemoryError caught in the worker, as a SIGKILL (returncode -9, the kernel's
OOM killer), or as the worker passing --torch-mem-limit-gib (watched from
here: a limit set inside the worker with setrlimit makes OpenBLAS retry its
failing malloc forever).

The parent needs only the standard library; the worker needs torch (Debian's
/usr/bin/python3, see --python).
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WORKER_FLAG = "--_torch-worker"
TORCH_PREFIX = "TORCH_RESULT "
RESULT_PREFIX = "RESULT "
EXIT_TORCH_OOM = 3
EXIT_TORCH_ERROR = 4
SPEEDUP_TARGET = 4.0
MEMORY_RATIO_TARGET = 1.0 / 8.0

# --extra-set keys whose values the PyTorch side mirrors (so both do the same work).
MIRRORED_TRAIN_KEYS = {"lr": float, "weight_decay": float, "grad_clip": float, "optimizer": str,
                       "beta1": float, "beta2": float, "eps": float, "seed": int}
# model.* keys mirrored from --extra-set (RoPE has no wpe: a different parameter set and work).
MIRRORED_MODEL_KEYS = {"positions": str, "rope_theta": float}
# model.* keys that have their own option here: --extra-set would desynchronise the two sides.
MODEL_KEYS_WITH_OPTIONS = ("vocab", "d_model", "heads", "layers", "seq_len", "batch", "causal",
                           "precision")


# ---------------------------------------------------------------------------- common
def resident_bytes(pid="self"):
    """Current resident set size (VmRSS) of a process, in bytes; None if it is gone."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def peak_resident_bytes():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def mib(nbytes):
    return nbytes / 2**20


def fmt_bytes(nbytes):
    if nbytes is None:
        return "n/a"
    return f"{nbytes / 2**30:.3f} GiB" if nbytes >= 2**30 else f"{mib(nbytes):.1f} MiB"


def fmt_seconds(seconds):
    return "n/a" if seconds is None else f"{seconds:.4f} s"


def parse_value(text, kind):
    if kind is bool:
        return text.strip().lower() in ("1", "true", "yes", "on")
    return kind(text)


# ---------------------------------------------------------------------------- worker
def torch_worker(spec):
    """Runs in the subprocess: builds the reference model, times K training steps, and
    prints one TORCH_RESULT {json} line. Exit 0, EXIT_TORCH_OOM or EXIT_TORCH_ERROR."""
    result = {"ok": False}

    def finish(code):
        result["peak_rss_bytes"] = peak_resident_bytes()
        print(TORCH_PREFIX + json.dumps(result), flush=True)
        return code

    try:
        import torch
        sys.path.insert(0, HERE)
        import reference_model as rm
    except ImportError as err:
        result["error"] = f"cannot import torch / reference_model with {sys.executable}: {err}"
        return finish(EXIT_TORCH_ERROR)

    torch.set_num_threads(spec["threads"])
    result["baseline_rss_bytes"] = resident_bytes()  # after imports, before the model
    result["torch_version"] = torch.__version__
    result["torch_threads"] = torch.get_num_threads()

    m, t = spec["model"], spec["train"]
    dtype = {"fp32": torch.float32, "fp64": torch.float64}[m["precision"]]
    stage = "building the model"
    try:
        cfg = rm.Config(vocab=m["vocab"], d_model=m["d_model"], heads=m["heads"],
                        ffn=m["ffn"] or 4 * m["d_model"], layers=m["layers"], seq_len=m["seq_len"],
                        batch=m["batch"], causal=m["causal"], precision=m["precision"],
                        **{k: m[k] for k in MIRRORED_MODEL_KEYS if k in m})
        model = rm.ReferenceGPT(cfg).to(dtype)
        # docs/design.md's initialisation (biases 0, LayerNorm 1/0); the values do not matter for timing.
        init = rm.random_params(cfg, seed=t["seed"], perturb_norms=False)
        model.load_state_dict({name: value.to(dtype) for name, value in init.items()})
        del init
        decay = [p for p in model.parameters() if p.dim() >= 2]      # matrices and embeddings
        no_decay = [p for p in model.parameters() if p.dim() < 2]    # biases, LayerNorm
        groups = [{"params": decay, "weight_decay": t["weight_decay"]},
                  {"params": no_decay, "weight_decay": 0.0}]
        if t["optimizer"] == "adamw":
            optimizer = torch.optim.AdamW(groups, lr=t["lr"], betas=(t["beta1"], t["beta2"]), eps=t["eps"])
        elif t["optimizer"] == "sgd":
            optimizer = torch.optim.SGD(groups, lr=t["lr"])
        else:
            raise ValueError(f"optimizer {t['optimizer']!r} is not mirrored here")
        generator = torch.Generator().manual_seed(t["seed"])
        tokens = torch.randint(0, cfg.vocab, (cfg.batch, cfg.seq_len + 1), generator=generator)
        result["model_rss_bytes"] = resident_bytes()
        result["parameters"] = sum(p.numel() for p in model.parameters())

        step_seconds, losses = [], []
        for step in range(spec["steps"]):
            stage = f"training step {step}"
            start = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            loss, extras = model(tokens)
            del extras
            loss.backward()
            if t["grad_clip"] > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), t["grad_clip"])
            optimizer.step()
            step_seconds.append(time.perf_counter() - start)
            losses.append(loss.item())
            del loss
    except (RuntimeError, MemoryError) as err:
        text = str(err) or type(err).__name__
        oom = isinstance(err, MemoryError) or any(
            s in text.lower() for s in ("out of memory", "can't allocate", "cannot allocate", "not enough memory"))
        result["error"] = f"{'out of memory' if oom else type(err).__name__} while {stage}: {text.splitlines()[0][:300]}"
        result["oom"] = oom
        return finish(EXIT_TORCH_OOM if oom else EXIT_TORCH_ERROR)

    result.update(ok=True, step_seconds=step_seconds, losses=losses,
                  step_seconds_median=statistics.median(step_seconds[1:] or step_seconds))
    return finish(0)


# ---------------------------------------------------------------------------- parent
def run_torch(args, spec):
    """Runs the worker; returns a dict with ok, oom, error and the measurements."""
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads),
               OPENBLAS_NUM_THREADS=str(args.threads), PYTHONDONTWRITEBYTECODE="1")
    cmd = [args.python, os.path.abspath(__file__), WORKER_FLAG, json.dumps(spec)]
    limit = int(args.torch_mem_limit_gib * 2**30)
    watch = {"killed_at_bytes": None, "timed_out": False}
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        try:
            proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True, env=env)
        except OSError as error:
            return {"ok": False, "oom": False, "error": f"cannot start {args.python}: {error}"}
        started = time.monotonic()
        while True:
            try:
                proc.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                pass
            # A limit is enforced from outside: inside the worker, a failing malloc makes
            # OpenBLAS retry forever instead of raising.
            rss = resident_bytes(proc.pid)
            if limit and rss is not None and rss > limit:
                watch["killed_at_bytes"] = rss
                proc.kill()
            elif args.timeout_s and time.monotonic() - started > args.timeout_s:
                watch["timed_out"] = True
                proc.kill()
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if watch["timed_out"]:
        return {"ok": False, "oom": False, "error": f"PyTorch run exceeded --timeout-s {args.timeout_s:g}"}
    lines = [l for l in stdout.splitlines() if l.startswith(TORCH_PREFIX)]
    result = json.loads(lines[-1][len(TORCH_PREFIX):]) if lines else {"ok": False}
    result["returncode"] = proc.returncode
    if watch["killed_at_bytes"] is not None:
        result.update(ok=False, oom=True, peak_rss_bytes=watch["killed_at_bytes"],
                      error=f"PyTorch worker stopped: its resident memory reached "
                            f"{fmt_bytes(watch['killed_at_bytes'])}, over --torch-mem-limit-gib "
                            f"{args.torch_mem_limit_gib:g}: out of memory at this limit")
    elif proc.returncode == -9:
        result.update(ok=False, oom=True, error="PyTorch worker was killed by SIGKILL (returncode -9), "
                      "most likely by the kernel's OOM killer: it ran out of memory")
    elif proc.returncode < 0:
        result.update(ok=False, oom=False, error=f"PyTorch worker died from signal {-proc.returncode}")
    elif proc.returncode != 0 or not result.get("ok"):
        result["ok"] = False
        result.setdefault("oom", False)
        result.setdefault("error", f"PyTorch worker exited {proc.returncode}: " + tail(stderr or stdout))
    return result


def tail(text, lines=15):
    return "\n".join(text.strip().splitlines()[-lines:])


def deck_text(args, train):
    m = args
    return "\n".join([
        "# written by validation/compare_pytorch.py",
        "model:",
        f"  vocab: {m.vocab}", f"  d_model: {m.d_model}", f"  heads: {m.heads}", f"  ffn: {m.ffn}",
        f"  layers: {m.layers}", f"  seq_len: {m.seq_len}", f"  batch: {m.batch}",
        f"  causal: {'true' if m.causal else 'false'}", f"  precision: {m.precision}",
        "parallel:", f"  strategy: {m.strategy}", f"  layout: {m.layout}", f"  dp: {m.dp}",
        "train:", f"  steps: {m.steps}", f"  lr: {train['lr']!r}", f"  optimizer: {train['optimizer']}",
        f"  weight_decay: {train['weight_decay']!r}", f"  grad_clip: {train['grad_clip']!r}",
        f"  seed: {train['seed']}",
        "run:", "  mode: bench", ""])


def run_miniattn(args, train, workdir, index):
    deck = os.path.join(workdir, f"compare_{index}.yaml")
    with open(deck, "w") as f:
        f.write(deck_text(args, train))
    cmd = [args.mpiexec, "-n", str(args.ranks), args.miniattn, deck]
    for kv in args.extra_set:
        cmd += ["--set", kv]
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    started = time.perf_counter()
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                              timeout=args.timeout_s or None)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"miniattn exceeded --timeout-s {args.timeout_s}", "command": cmd}
    except OSError as err:
        return {"ok": False, "error": f"cannot run {cmd[0]}: {err}", "command": cmd}
    wall = time.perf_counter() - started
    lines = [l for l in proc.stdout.splitlines() if l.startswith(RESULT_PREFIX)]
    if proc.returncode != 0 or not lines:
        return {"ok": False, "command": cmd,
                "error": f"miniattn exited {proc.returncode}" + ("" if lines else " without a RESULT line")
                         + ":\n" + tail(proc.stdout)}
    report = json.loads(lines[-1][len(RESULT_PREFIX):])
    peak = report["peak_memory_bytes_per_rank"]
    ranks = int(report.get("ranks", args.ranks))
    memory = report.get("memory", {})
    return {"ok": True, "command": cmd, "wall_seconds": wall, "ranks": ranks,
            "step_seconds_median": report["step_seconds_median"],
            "peak_bytes_per_rank": {k: peak[k] for k in ("min", "max", "mean")},
            "peak_bytes_total": peak["mean"] * ranks,
            "planned_bytes_per_rank": memory.get("planned_bytes_per_rank"),
            "baseline_bytes_per_rank": memory.get("baseline_resident_bytes"),
            "first_loss": report.get("initial_loss"), "final_loss": report.get("final_loss")}


def median_of(runs, key):
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(values) if values else None


def build_parser():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--miniattn", default=os.path.join(ROOT, "build", "src", "miniattn"))
    ap.add_argument("--mpiexec", default="mpiexec")
    ap.add_argument("--python", default="/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable,
                    help="interpreter with torch for the PyTorch worker (default: Debian's /usr/bin/python3)")
    ap.add_argument("--ranks", type=int, default=2, help="miniattn ranks (one core each)")
    ap.add_argument("--threads", type=int, default=2, help="PyTorch threads (torch.set_num_threads)")
    ap.add_argument("--seq-len", type=int, default=8192)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--ffn", type=int, default=0, help="FFN width, 0 = 4 d_model")
    ap.add_argument("--causal", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--precision", choices=("fp32", "fp64"), default="fp32")
    ap.add_argument("--steps", type=int, default=5, help="training steps per run; the first is a warm-up")
    ap.add_argument("--strategy", default="ring")
    ap.add_argument("--layout", default="zigzag")
    ap.add_argument("--dp", type=int, default=1)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--extra-set", action="append", default=[], metavar="KEY=VALUE",
                    help="passed to miniattn as --set KEY=VALUE (repeatable); train.lr, weight_decay, "
                         "grad_clip, optimizer, beta1, beta2, eps, seed and model.ffn, positions, rope_theta are "
                         "mirrored in PyTorch")
    ap.add_argument("--repeats", type=int, default=1, help="run both sides this many times, alternating")
    ap.add_argument("--torch-mem-limit-gib", type=float, default=0.0,
                    help="stop the PyTorch worker when its resident memory exceeds this (0 = none) and "
                         "report it as out of memory, rather than waiting for the kernel's OOM killer")
    ap.add_argument("--timeout-s", type=float, default=0.0, help="per-run time limit (0 = none)")
    ap.add_argument("--json", metavar="PATH", help="write every number to this JSON file")
    return ap


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == [WORKER_FLAG]:
        return torch_worker(json.loads(argv[1]))
    ap = build_parser()
    args = ap.parse_args(argv)
    if args.steps < 2:
        ap.error("--steps must be at least 2 (the first step is a warm-up)")

    train = {"lr": args.lr, "weight_decay": args.weight_decay, "grad_clip": args.grad_clip,
             "optimizer": "adamw", "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "seed": args.seed}
    model_extra = {}
    for kv in args.extra_set:
        key, sep, value = kv.partition("=")
        if not sep or "." not in key:
            ap.error(f"--extra-set {kv!r}: expected section.key=value")
        section, name = key.split(".", 1)
        if section == "train" and name in MIRRORED_TRAIN_KEYS:
            train[name] = parse_value(value, MIRRORED_TRAIN_KEYS[name])
        elif section == "train" and name == "steps":
            ap.error("use --steps, not --extra-set train.steps")
        elif section == "model" and name == "ffn":
            args.ffn = int(value)
        elif section == "model" and name in MIRRORED_MODEL_KEYS:
            model_extra[name] = MIRRORED_MODEL_KEYS[name](value)
        elif section == "model" and name in MODEL_KEYS_WITH_OPTIONS:
            ap.error(f"use --{name.replace('_', '-')} rather than --extra-set {key} (both sides must agree)")
        elif section == "run" and name == "mode":
            ap.error("run.mode must stay bench")
    if not os.path.isfile(args.miniattn):
        print(f"compare_pytorch: miniattn executable not found: {args.miniattn}", file=sys.stderr)
        return 1

    spec = {"threads": args.threads, "steps": args.steps, "train": train,
            "model": {"vocab": args.vocab, "d_model": args.d_model, "heads": args.heads, "ffn": args.ffn,
                      "layers": args.layers, "seq_len": args.seq_len, "batch": args.batch,
                      "causal": args.causal, "precision": args.precision, **model_extra}}

    print(f"compare_pytorch: V={args.vocab} D={args.d_model} H={args.heads} L={args.layers} "
          f"N={args.seq_len} B={args.batch} {'causal' if args.causal else 'non-causal'} {args.precision}, "
          f"{args.steps} steps (first = warm-up), {args.repeats} repeat(s); miniattn: {args.ranks} ranks x 1 "
          f"thread, {args.strategy}/{args.layout}; PyTorch: 1 process x {args.threads} threads", flush=True)

    mini_runs, torch_runs = [], []
    with tempfile.TemporaryDirectory(prefix="compare_pytorch_") as workdir:
        for rep in range(args.repeats):
            mini = run_miniattn(args, train, workdir, rep)
            mini_runs.append(mini)
            print(f"  [{rep + 1}/{args.repeats}] miniattn: " +
                  (f"step {fmt_seconds(mini['step_seconds_median'])}, peak {fmt_bytes(mini['peak_bytes_total'])} "
                   f"total" if mini["ok"] else "FAILED"), flush=True)
            if not mini["ok"]:
                print(mini["error"])
                break
            tor = run_torch(args, spec)
            torch_runs.append(tor)
            print(f"  [{rep + 1}/{args.repeats}] pytorch:  " +
                  (f"step {fmt_seconds(tor['step_seconds_median'])}, peak {fmt_bytes(tor['peak_rss_bytes'])}"
                   if tor["ok"] else ("OUT OF MEMORY" if tor.get("oom") else "FAILED")), flush=True)
            if not tor["ok"]:
                print("  " + tor["error"])
                break

    mini_ok = bool(mini_runs) and all(r["ok"] for r in mini_runs)
    torch_ok = bool(torch_runs) and all(r["ok"] for r in torch_runs)
    torch_oom = any(r.get("oom") for r in torch_runs)
    good_mini = [r for r in mini_runs if r["ok"]]
    good_torch = [r for r in torch_runs if r["ok"]]

    m_step = median_of(good_mini, "step_seconds_median")
    m_total = median_of(good_mini, "peak_bytes_total")
    m_rank = {k: statistics.median(r["peak_bytes_per_rank"][k] for r in good_mini)
              for k in ("min", "max", "mean")} if good_mini else None
    m_planned = median_of(good_mini, "planned_bytes_per_rank")
    m_base = median_of(good_mini, "baseline_bytes_per_rank")
    t_step = median_of(good_torch, "step_seconds_median") if torch_ok else None
    t_peak = median_of(good_torch, "peak_rss_bytes") if torch_ok else None
    t_base = median_of(torch_runs, "baseline_rss_bytes")
    t_model = median_of(torch_runs, "model_rss_bytes")

    speedup = t_step / m_step if (t_step and m_step) else None
    mem_ratio = m_total / t_peak if (t_peak and m_total) else None
    # The same ratio with each process's resident size before the model taken away
    # (interpreter + torch libraries on one side, MPI + Kokkos on the other): informational.
    excess_ratio = None
    if mem_ratio is not None and m_base is not None and t_base is not None and t_peak > t_base:
        excess_ratio = (m_total - m_base * args.ranks) / (t_peak - t_base)

    print()
    print(f"{'':34}{'miniattn':>16}{'pytorch':>16}{'ratio':>14}")
    print(f"{'step seconds (median)':34}{fmt_seconds(m_step):>16}{fmt_seconds(t_step):>16}"
          f"{('speed-up ' + format(speedup, '.2f')) if speedup else 'n/a':>14}")
    print(f"{'peak memory (miniattn: all ranks)':34}{fmt_bytes(m_total):>16}{fmt_bytes(t_peak):>16}"
          f"{('mem ' + format(mem_ratio, '.3f')) if mem_ratio else 'n/a':>14}")
    if m_rank:
        print(f"{'  miniattn per rank min/mean/max':34}{fmt_bytes(m_rank['min'])} / {fmt_bytes(m_rank['mean'])} / "
              f"{fmt_bytes(m_rank['max'])} (planned {fmt_bytes(m_planned)}, baseline {fmt_bytes(m_base)})")
    if t_base is not None:
        print(f"{'  pytorch baseline after imports':34}{fmt_bytes(t_base)}"
              + (f" (after building model: {fmt_bytes(t_model)})" if t_model else ""))
    if excess_ratio is not None:
        print(f"{'  memory ratio above baselines':34}{excess_ratio:.3f}")
    if torch_oom:
        print("pytorch: OUT OF MEMORY at this size -- " + next(r["error"] for r in torch_runs if r.get("oom")))
    print()
    if speedup is not None:
        print(f"target speed-up >= {SPEEDUP_TARGET:g}: {'PASS' if speedup >= SPEEDUP_TARGET else 'MISS'} "
              f"({speedup:.2f})")
        print(f"target memory ratio <= 1/{1 / MEMORY_RATIO_TARGET:g}: "
              f"{'PASS' if mem_ratio <= MEMORY_RATIO_TARGET else 'MISS'} ({mem_ratio:.3f})")
    else:
        why = "PyTorch ran out of memory" if torch_oom else "a run failed"
        print(f"target speed-up >= {SPEEDUP_TARGET:g}: n/a ({why})")
        print(f"target memory ratio <= 1/{1 / MEMORY_RATIO_TARGET:g}: n/a ({why})")
    print("(timings on a shared machine are noisy: use --repeats and compare medians)")

    if args.json:
        summary = {
            "config": {k: v for k, v in vars(args).items() if k != "json"}, "train": train,
            "miniattn": {"ok": mini_ok, "step_seconds_median": m_step, "peak_bytes_total": m_total,
                         "peak_bytes_per_rank": m_rank, "planned_bytes_per_rank": m_planned,
                         "baseline_bytes_per_rank": m_base, "runs": mini_runs},
            "pytorch": {"ok": torch_ok, "oom": torch_oom, "step_seconds_median": t_step, "peak_rss_bytes": t_peak,
                        "baseline_rss_bytes": t_base, "model_rss_bytes": t_model, "runs": torch_runs},
            "speedup": speedup, "memory_ratio": mem_ratio, "memory_ratio_above_baselines": excess_ratio,
            "targets": {"speedup_min": SPEEDUP_TARGET, "memory_ratio_max": MEMORY_RATIO_TARGET,
                        "speedup_pass": None if speedup is None else speedup >= SPEEDUP_TARGET,
                        "memory_pass": None if mem_ratio is None else mem_ratio <= MEMORY_RATIO_TARGET}}
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)
            f.write("\n")

    if not mini_ok or not (torch_ok or torch_oom):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
