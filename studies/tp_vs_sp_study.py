#!/usr/bin/env python3
"""Tensor parallelism against sequence parallelism: the sequence-parallelism
paper's headline comparison (Li et al., arXiv 2105.13120), rerunnable.

At equal rank counts it sets Megatron tensor parallelism (parallel.tp = P,
strategy local) against sequence parallelism over P ranks (rsa, ring,
ulysses), on a BERT-like non-causal model, and writes to --out:

  weak_scaling.md / .json   measured here (run.mode bench): the batch, or the
                            sequence, grows with the ranks; memory per rank
                            (planned = allocated bytes, peak resident set) and
                            tokens/s, the shape of the paper's Table 4
  limits.md / .json         the largest batch (at a fixed sequence) and the
                            longest sequence (at a fixed batch) whose planned
                            memory fits a budget per rank, from the planner
                            (run.mode predict), confirmed here by real runs at
                            small sizes: the size found runs, one step larger
                            is refused before any work (exit 2)
  prediction_64.md / .json  the same limits and the predicted step time at 64
                            ranks, on a GPU machine description
  pipeline.md / .json       the paper's Table 4 experiment: pipeline size fixed
                            (--pipeline, 2 here: the most 4 ranks allow beside a
                            second axis), TP against SP as the other axis grows
                            with the batch; measured memory per rank and
                            tokens/s (--only pipeline runs just this)
  pipeline_predicted.md / .json
                            the same experiment predicted at the paper's scale
                            (run.mode predict on the GPU machine description):
                            pipeline size 8, parallel size 1 to 8 (8 to 64
                            ranks), BERT-Base and BERT-Large, N = 512, batch
                            64 per unit of parallel size, 16 GiB per rank
                            (--only pipeline-predicted runs just this)
  tp_vs_sp.png              the figures (matplotlib, when installed)

Rank counts above the cores of this machine are oversubscribed: their memory
figures are exact, their timings are not timings and are marked so.

usage: studies/tp_vs_sp_study.py [--build build-openmp] [--out studies/scaling/tp_vs_sp]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# BERT-like (non-causal) with BERT-Base's 12 heads, small enough for 2 cores;
# tensor parallelism and Ulysses both reach 4 ranks (12 % 4 == 0).
MODEL = {"vocab": 1024, "d_model": 384, "heads": 12, "layers": 2, "ffn": 0, "causal": "false", "precision": "fp32"}
# BERT-Base itself for the 64-rank prediction (the paper's model).
BERT_BASE = {"vocab": 30522, "d_model": 768, "heads": 12, "layers": 12, "ffn": 0, "causal": "false", "precision": "fp32"}
# BERT-Large (16 heads: TP reaches 8 in the pipeline experiment).
BERT_LARGE = {"vocab": 30522, "d_model": 1024, "heads": 16, "layers": 24, "ffn": 0, "causal": "false",
              "precision": "fp32"}
CHOICES = ["tensor_parallel", "rsa", "ring", "ulysses"]  # predict mode's names
CONFIGS = [  # (name, settings for P ranks)
    ("tp", lambda p: {"parallel.strategy": "local", "parallel.tp": p}),
    ("rsa", lambda p: {"parallel.strategy": "rsa"}),
    ("ring", lambda p: {"parallel.strategy": "ring"}),
    ("ulysses", lambda p: {"parallel.strategy": "ulysses"}),
]


def run_miniattn(args, ranks, settings, expect_ok=True, model=MODEL):
    """Runs the executable with --set overrides; returns (exit status, RESULT dict, or stderr when it failed)."""
    with tempfile.TemporaryDirectory() as scratch:
        result_path = os.path.join(scratch, "result.json")
        cmd = [args.mpiexec, "-n", str(ranks), args.miniattn, os.path.join(ROOT, "inputs", "example.yaml")]
        merged = {f"model.{k}": v for k, v in model.items()}
        merged.update({"run.log_every": 1000, "run.result": result_path, "io.snapshot": "", "io.checkpoint": ""})
        merged.update(settings)
        for key, value in merged.items():
            cmd += ["--set", f"{key}={value}"]
        env = dict(os.environ, OMP_NUM_THREADS=str(max(1, args.cores // ranks)), OMP_PROC_BIND="false")
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
        if expect_ok and proc.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
        if proc.returncode != 0:
            return proc.returncode, proc.stderr
        with open(result_path) as f:
            return 0, json.load(f)


def weak_scaling(args, grow):
    """The paper's Table 4 shape: per rank count and configuration, memory and tokens/s."""
    rows = []
    for ranks in args.ranks:
        batch = args.batch * ranks if grow == "batch" else args.batch
        seq_len = args.seq_len * ranks if grow == "seq_len" else args.seq_len
        for name, settings in CONFIGS:
            sets = {"model.batch": batch, "model.seq_len": seq_len, "run.mode": "bench", "train.steps": args.steps}
            sets.update(settings(ranks))
            _, r = run_miniattn(args, ranks, sets)
            rows.append({"ranks": ranks, "config": name, "batch": batch, "seq_len": seq_len,
                         "allocated_bytes_per_rank": r["memory"]["allocated_bytes_per_rank"],
                         "peak_memory_bytes_per_rank": r["peak_memory_bytes_per_rank"]["max"],
                         "tokens_per_second": r["tokens_per_second"],
                         "exchange_bytes_per_step": r["exchange_bytes_per_step_measured"],
                         "oversubscribed": ranks > args.cores})
            print(f"weak scaling ({grow}) {ranks} ranks {name}: {rows[-1]['allocated_bytes_per_rank'] / 2**20:.1f} MiB "
                  f"per rank, {rows[-1]['tokens_per_second']:.0f} tokens/s", flush=True)
    return rows


class Planner:
    """The planner's answers through run.mode predict (one rank, any rank count):
    whether each choice fits the memory budget per rank at a batch and length."""

    def __init__(self, args, machine, budget_gib, model, max_ranks, dp=1):
        self.args, self.model, self.cache = args, model, {}
        self.sets = {"run.mode": "predict", "run.machine": machine, "run.memory_per_rank_gib": budget_gib,
                     "run.predict_max_ranks": max_ranks, "parallel.dp": dp, "parallel.tp": 1,
                     "parallel.strategy": "ring", "parallel.layout": "contiguous", "train.steps": 0}

    def predict(self, batch, seq_len):
        key = (batch, seq_len)
        if key not in self.cache:
            sets = dict(self.sets, **{"model.batch": batch, "model.seq_len": seq_len, "run.predict_seq_lens": seq_len})
            _, self.cache[key] = run_miniattn(self.args, 1, sets, model=self.model)
        return self.cache[key]

    def row(self, batch, seq_len, ranks):
        rows = self.predict(batch, seq_len)["predictions"]
        return next(r for r in rows if r["ranks"] == ranks)

    def fits(self, choice, batch, seq_len, ranks):
        p = self.row(batch, seq_len, ranks)["strategies"][choice]
        return p["valid"] and p["fits"]

    def largest_batch(self, choice, seq_len, ranks, step=1):
        """The largest multiple of `step` that fits (0: none); memory grows with the batch."""
        if not self.fits(choice, step, seq_len, ranks):
            return 0
        low, high = step, 2 * step
        while self.fits(choice, high, seq_len, ranks):
            low, high = high, 2 * high
        while high - low > step:
            mid = (low + high) // (2 * step) * step
            low, high = (mid, high) if self.fits(choice, mid, seq_len, ranks) else (low, mid)
        return low

    def longest_seq_len(self, choice, batch, ranks):
        rows = self.predict(batch, 4096)["longest_seq_len"]
        return next(r for r in rows if r["ranks"] == ranks)["strategies"][choice]


def pipeline_experiment(args):
    """Table 4's shape with a pipeline: pp stages fixed, the parallel size P of
    the other axis (TP, or SP with each strategy) grows with the batch; ranks = pp x P."""
    rows = []
    for size in args.pipeline_sizes:
        ranks, batch = args.pipeline * size, args.batch * size
        for name, settings in CONFIGS:
            if name == "ulysses" and MODEL["heads"] % size:
                continue
            sets = {"model.batch": batch, "model.seq_len": args.seq_len, "run.mode": "bench",
                    "train.steps": args.steps, "parallel.pp": args.pipeline,
                    "train.micro_batches": args.micro_batches, "model.layers": max(MODEL["layers"], args.pipeline)}
            sets.update(settings(size))
            _, r = run_miniattn(args, ranks, sets)
            rows.append({"parallel_size": size, "ranks": ranks, "config": name, "batch": batch,
                         "allocated_bytes_most_of_any_rank": r["memory"]["allocated_bytes_most_of_any_rank"],
                         "tokens_per_second": r["tokens_per_second"],
                         "bubble_measured": r["pipeline"]["bubble_fraction_measured"]["mean"],
                         "bubble_model": r["pipeline"]["bubble_fraction_model"],
                         "oversubscribed": ranks > args.cores})
            print(f"pipeline {args.pipeline} x {name} {size}: {mib(rows[-1]['allocated_bytes_most_of_any_rank'])} MiB "
                  f"(most of any rank), {rows[-1]['tokens_per_second']:.0f} tokens/s", flush=True)
    with open(os.path.join(args.out, "pipeline.json"), "w") as f:
        json.dump(rows, f, indent=1)
    lines = ["| parallel size | ranks | batch | config | MiB per rank (most of any rank) | tokens/s | bubble measured / model |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        rate = f"{r['tokens_per_second']:.0f}" + (" (oversubscribed)" if r["oversubscribed"] else "")
        lines.append(f"| {r['parallel_size']} | {r['ranks']} | {r['batch']} | {r['config']} | "
                     f"{mib(r['allocated_bytes_most_of_any_rank'])} | {rate} | "
                     f"{r['bubble_measured']:.3f} / {r['bubble_model']:.3f} |")
    with open(os.path.join(args.out, "pipeline.md"), "w") as f:
        f.write(f"Measured with `{' '.join(sys.argv)}`; model {MODEL} (layers at least pp), pipeline size "
                f"{args.pipeline}, {args.micro_batches} micro-batches, N = {args.seq_len}, bench mode, "
                f"{args.steps} steps (median).\n\n" + "\n".join(lines) + "\n")


def pipeline_prediction(args):
    """Table 4 at the paper's scale, predicted: pp fixed (8), the other axis
    (TP, or SP with each strategy) of size P grows with the batch (64 P);
    memory of the stage needing the most, tokens/s, bubble. Predict runs on
    pp ranks (the deck's grid must divide them) and answers for 8 P ranks."""
    pp, rows = args.predicted_pipeline, []
    for model_name, model in (("BERT-Base", BERT_BASE), ("BERT-Large", BERT_LARGE)):
        for size in args.predicted_sizes:
            ranks, batch = pp * size, 64 * size
            sets = {"run.mode": "predict", "run.machine": args.gpu_machine,
                    "run.memory_per_rank_gib": args.gpu_budget_gib, "run.predict_max_ranks": ranks,
                    "run.predict_seq_lens": 512, "model.seq_len": 512, "model.batch": batch, "train.steps": 0,
                    "parallel.pp": pp, "train.micro_batches": args.predicted_micro_batches,
                    "parallel.strategy": "ring", "parallel.layout": "contiguous", "parallel.tp": 1}
            _, result = run_miniattn(args, pp, sets, model=model)
            row = next(r for r in result["predictions"] if r["ranks"] == ranks)
            for choice in CHOICES:
                p = row["strategies"][choice]
                rows.append({"model": model_name, "parallel_size": size, "ranks": ranks, "batch": batch,
                             "config": choice, "valid": p["valid"], "problem": p.get("problem"),
                             "memory_bytes_per_rank": p.get("memory_bytes_per_rank"), "fits": p.get("fits"),
                             "tokens_per_second": p.get("tokens_per_second"),
                             "bubble_fraction": p.get("bubble_fraction")})
                print(f"predicted pipeline {pp} x {choice} {size} ({model_name}): "
                      f"{pipeline_cell(rows[-1], args.gpu_budget_gib)}", flush=True)
    with open(os.path.join(args.out, "pipeline_predicted.json"), "w") as f:
        json.dump(rows, f, indent=1)
    with open(os.path.join(args.out, "pipeline_predicted.md"), "w") as f:
        f.write(f"Predicted with `{' '.join(sys.argv)}` on {args.gpu_machine}: pipeline size {pp}, "
                f"{args.predicted_micro_batches} micro-batches (modelled bubble "
                f"{(pp - 1) / (args.predicted_micro_batches + pp - 1):.3f}), N = 512, batch 64 per unit of "
                f"parallel size, {args.gpu_budget_gib} GiB per rank. Cell: memory per rank (the stage needing "
                f"the most), predicted tokens/s; '!': does not fit; '-': not possible (reason below).\n\n")
        for model_name in dict.fromkeys(r["model"] for r in rows):
            f.write(f"### {model_name}\n\n| parallel size (ranks, batch) | " + " | ".join(CHOICES) +
                    " |\n|---|" + "---|" * len(CHOICES) + "\n")
            problems = {}
            for size in args.predicted_sizes:
                cells = [r for r in rows if r["model"] == model_name and r["parallel_size"] == size]
                for r in cells:
                    if not r["valid"]:
                        problems[r["config"]] = r["problem"]
                f.write(f"| {size} ({cells[0]['ranks']}, {cells[0]['batch']}) | " +
                        " | ".join(pipeline_cell(r, args.gpu_budget_gib) for r in cells) + " |\n")
            f.write("".join(f"\n- {c}: {why}" for c, why in problems.items()) + "\n\n")


def pipeline_cell(r, budget_gib):
    if not r["valid"]:
        return "-"
    mark = "" if r["fits"] else " !"
    return f"{r['memory_bytes_per_rank'] / 2**20:,.0f} MiB{mark}, {r['tokens_per_second']:.3g} tok/s"


def limits(args, planner, ranks_list, seq_len, batch):
    """Largest batch at seq_len and longest sequence at batch, per rank count and choice."""
    rows = []
    for ranks in ranks_list:
        for choice in CHOICES:
            rows.append({"ranks": ranks, "config": choice, "largest_batch": planner.largest_batch(choice, seq_len, ranks),
                         "longest_seq_len": planner.longest_seq_len(choice, batch, ranks)})
            print(f"limits {ranks} ranks {choice}: batch {rows[-1]['largest_batch']} at N={seq_len}, "
                  f"N {rows[-1]['longest_seq_len']} at batch {batch}", flush=True)
    return rows


def confirm_by_runs(args, rows, seq_len, budget_gib):
    """Real runs at the planner's largest batch: it trains one step within the
    budget, and one sample more is refused (exit 2) before any work."""
    settings = {"tensor_parallel": lambda p: {"parallel.strategy": "local", "parallel.tp": p},
                "rsa": lambda p: {"parallel.strategy": "rsa"}, "ring": lambda p: {"parallel.strategy": "ring"},
                "ulysses": lambda p: {"parallel.strategy": "ulysses"}}
    for r in rows:
        if r["largest_batch"] == 0:
            continue
        sets = {"model.seq_len": seq_len, "train.steps": 1, "run.memory_per_rank_gib": budget_gib}
        sets.update(settings[r["config"]](r["ranks"]))
        _, result = run_miniattn(args, r["ranks"], dict(sets, **{"model.batch": r["largest_batch"]}))
        status, stderr = run_miniattn(args, r["ranks"], dict(sets, **{"model.batch": r["largest_batch"] + 1}),
                                      expect_ok=False)
        r["confirmed"] = status == 2 and "needs" in stderr
        r["allocated_bytes_per_rank"] = result["memory"]["allocated_bytes_per_rank"]
        print(f"confirmed {r['ranks']} ranks {r['config']}: batch {r['largest_batch']} runs with "
              f"{mib(r['allocated_bytes_per_rank'])} MiB per rank; {r['largest_batch'] + 1} "
              f"{'refused' if r['confirmed'] else 'NOT refused'}", flush=True)
        if not r["confirmed"]:
            sys.exit(f"the planner's limit was not confirmed: {r}\n{stderr}")


def limits_table(rows, seq_len, batch, budget):
    lines = [f"| ranks | config | largest batch (N = {seq_len}) | longest N (batch {batch}) | predicted tokens/s |",
             "|---|---|---|---|---|"]
    for r in rows:
        mark = " (confirmed by runs)" if r.get("confirmed") else ""
        rate = r.get("predicted_tokens_per_second")
        lines.append(f"| {r['ranks']} | {r['config']} | {r['largest_batch'] or '-'}{mark} | "
                     f"{r['longest_seq_len'] or '-'} | {f'{rate:.3g}' if rate else '-'} |")
    return f"Memory budget {budget} GiB per rank; '-': not possible or nothing fits.\n\n" + "\n".join(lines) + "\n"


def mib(x):
    return f"{x / 2**20:.1f}"


def weak_scaling_table(rows, grow):
    lines = [f"| ranks | batch | seq_len | config | MiB per rank (allocated) | MiB per rank (peak RSS) "
             f"| tokens/s | MiB exchanged per step |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        rate = f"{r['tokens_per_second']:.0f}" + (" (oversubscribed)" if r["oversubscribed"] else "")
        lines.append(f"| {r['ranks']} | {r['batch']} | {r['seq_len']} | {r['config']} | "
                     f"{mib(r['allocated_bytes_per_rank'])} | {mib(r['peak_memory_bytes_per_rank'])} | {rate} | "
                     f"{mib(r['exchange_bytes_per_step'])} |")
    return f"### {'Batch' if grow == 'batch' else 'Sequence'} grows with the ranks\n\n" + "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--mpiexec", default="mpiexec")
    p.add_argument("--out", default=os.path.join(ROOT, "studies", "scaling", "tp_vs_sp"))
    p.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--cores", type=int, default=os.cpu_count())
    p.add_argument("--batch", type=int, default=4, help="batch per rank (batch scaling) or in all (sequence scaling)")
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--budget-gib", type=float, default=0.5, help="memory per rank for the limits measured here")
    p.add_argument("--gpu-machine", default="inputs/machines/gpu_cluster_4x.yaml")
    p.add_argument("--gpu-budget-gib", type=float, default=16.0, help="the paper's P100 held 16 GB")
    p.add_argument("--skip-measured", action="store_true", help="only the planner's limits and the prediction")
    p.add_argument("--skip-limits", action="store_true", help="only the measured weak scaling (needs a quiet machine)")
    p.add_argument("--only", choices=["pipeline", "pipeline-predicted"], help="run only this part")
    p.add_argument("--pipeline", type=int, default=2, help="pipeline stages of the pipeline experiment")
    p.add_argument("--pipeline-sizes", type=int, nargs="+", default=[1, 2], help="its parallel sizes")
    p.add_argument("--micro-batches", type=int, default=4, help="its micro-batches per step")
    p.add_argument("--predicted-pipeline", type=int, default=8, help="pipeline stages of the predicted experiment")
    p.add_argument("--predicted-sizes", type=int, nargs="+", default=[1, 2, 4, 8], help="its parallel sizes")
    p.add_argument("--predicted-micro-batches", type=int, default=32, help="its micro-batches per step")
    args = p.parse_args()
    args.miniattn = os.path.join(args.build, "src", "miniattn")
    os.makedirs(args.out, exist_ok=True)

    if args.only == "pipeline":
        pipeline_experiment(args)
        return
    if args.only == "pipeline-predicted":
        pipeline_prediction(args)
        return
    if not args.skip_limits:
        planner_limits(args)
        pipeline_prediction(args)
    if not args.skip_measured:
        measured_weak_scaling(args)
    plot(args.out)


def plot(out):
    """tp_vs_sp.png from the JSON files present (matplotlib optional)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no figure (the tables are written)")
        return
    panels = []
    if os.path.exists(os.path.join(out, "limits.json")):
        with open(os.path.join(out, "limits.json")) as f:
            lim = json.load(f)
        panels += [("largest batch, N = 512 (this machine, 0.5 GiB/rank)", lim["here"], "largest_batch"),
                   ("largest batch, N = 512 (BERT-Base, GPU model, 16 GiB/rank)", lim["gpu"], "largest_batch")]
    if os.path.exists(os.path.join(out, "weak_scaling.json")):
        with open(os.path.join(out, "weak_scaling.json")) as f:
            weak = json.load(f)
        panels += [("MiB per rank, batch grows with ranks (measured)", weak["batch"], "allocated_bytes_per_rank"),
                   ("tokens/s, batch grows with ranks (measured)", weak["batch"], "tokens_per_second")]
    if not panels:
        return
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4))
    for ax, (title, rows, key) in zip(axes if len(panels) > 1 else [axes], panels):
        for config in dict.fromkeys(r["config"] for r in rows):
            pts = [(r["ranks"], r[key] / (2**20 if "bytes" in key else 1)) for r in rows
                   if r["config"] == config and r[key]]
            if pts:
                ax.plot(*zip(*pts), marker="o", label=config)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("ranks")
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "tp_vs_sp.png"), dpi=110)


def planner_limits(args):
    here = Planner(args, "inputs/machines/this_machine.yaml", args.budget_gib, MODEL, max(args.ranks))
    here_rows = limits(args, here, args.ranks, args.seq_len, args.batch)
    confirm_by_runs(args, here_rows, args.seq_len, args.budget_gib)
    gpu = Planner(args, args.gpu_machine, args.gpu_budget_gib, BERT_BASE, 64)
    gpu_rows = limits(args, gpu, [4, 16, 64], 512, 64)
    # The paper's TP baseline is capped by the heads: TP 4 (12 heads, 4 | 64)
    # x DP k for the other ranks. DP replicas hold the same per-rank memory
    # as TP 4 on 4 ranks with batch / k, so its limits come from that row.
    for ranks in (16, 64):
        k = ranks // 4
        gpu_rows.append({"ranks": ranks, "config": f"tp 4 x dp {k}",
                         "largest_batch": k * gpu.largest_batch("tensor_parallel", 512, 4),
                         "longest_seq_len": gpu.longest_seq_len("tensor_parallel", 64 // k, 4)})
    for r in gpu_rows:
        if r["config"].startswith("tp "):  # k replicas of the 4-rank prediction (DP gradient sum not included)
            k = r["ranks"] // 4
            p = gpu.row(max(r["largest_batch"] // k, 1), 512, 4)["strategies"]["tensor_parallel"]
            r["predicted_tokens_per_second"] = k * p["tokens_per_second"] if p["valid"] else None
            continue
        p = gpu.row(max(r["largest_batch"], 1), 512, r["ranks"])["strategies"][r["config"]]
        r["predicted_tokens_per_second"] = p.get("tokens_per_second") if p["valid"] else None
    with open(os.path.join(args.out, "limits.json"), "w") as f:
        json.dump({"here": here_rows, "gpu": gpu_rows}, f, indent=1)
    with open(os.path.join(args.out, "limits.md"), "w") as f:
        f.write(f"`{' '.join(sys.argv)}`\n\n### This machine ({MODEL})\n\n")
        f.write(limits_table(here_rows, args.seq_len, args.batch, args.budget_gib))
        f.write(f"\n### Predicted: BERT-Base ({BERT_BASE}) on {args.gpu_machine}\n\n")
        f.write(limits_table(gpu_rows, 512, 64, args.gpu_budget_gib))


def measured_weak_scaling(args):
    scaling = {grow: weak_scaling(args, grow) for grow in ("batch", "seq_len")}
    with open(os.path.join(args.out, "weak_scaling.json"), "w") as f:
        json.dump(scaling, f, indent=1)
    with open(os.path.join(args.out, "weak_scaling.md"), "w") as f:
        f.write(f"Measured with `{' '.join(sys.argv)}`; model {MODEL}, fp32, bench mode, "
                f"{args.steps} steps (median).\n\n")
        for grow, rows in scaling.items():
            f.write(weak_scaling_table(rows, grow) + "\n")


if __name__ == "__main__":
    main()
