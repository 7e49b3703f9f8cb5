#!/usr/bin/env python3
"""Tensor parallelism against sequence parallelism: the sequence-parallelism
paper's headline comparison (Li et al., arXiv 2105.13120), rerunnable.

At equal rank counts it sets Megatron tensor parallelism (parallel.tp = P,
strategy local) against sequence parallelism over P ranks (rsa, ring,
ulysses), on a BERT-like non-causal model. Tensor parallelism comes in two
modes: "tp", Megatron with its sequence parallelism (Korthikanti et al. 2022),
and "tp2021" (parallel.tp_sequence_parallel false), the paper's baseline, whose
LayerNorm/residual rows are replicated on every TP rank. It writes to --out:

  weak_scaling.md / .json   measured here (run.mode bench): the batch, or the
                            sequence, grows with the ranks; memory per rank
                            (planned = allocated bytes, peak resident set) and
                            tokens/s, the shape of the paper's Table 4
  limits.md / .json         the largest batch (at a fixed sequence) and the
                            longest sequence (at a fixed batch) whose planned
                            memory fits a budget per rank, from the planner
                            (run.mode predict), for tp, tp2021, rsa, ring and
                            ulysses, confirmed here by real runs at small
                            sizes: the size found runs one step, one sample
                            more is refused before any work (exit 2); then the
                            same limits and the predicted tokens/s for
                            BERT-Base at 4, 16 and 64 ranks on --gpu-machine
  paper_ratios.md / .json   the paper's memory ratios (13.7x batch, 3.0x
                            sequence, ...) against miniattn's, predicted at its
                            scale on --paper-machine (nominal P100 figures):
                            BERT-Base and BERT-Large, TP at its largest degree
                            (the heads) in both modes, SP on 16 and 64 ranks,
                            the memory parts per rank at the limits, and the
                            same ratios under Korthikanti et al.'s activation
                            accounting (--only paper runs just this, ~5 min)
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
  interleaved.md / .json    the interleaved pipeline (PTD-P, parallel.virtual_stages):
                            the bubble measured at pp = 2 on 2 ranks for v = 1,
                            2, 4 beside (pp - 1) / (v m + pp - 1), and PTD-P's
                            layout (TP 4 x PP 4 x DP) predicted at 64 to 1024
                            ranks (studies/interleaved_pipeline.py; --only
                            interleaved runs just this, timings: a quiet machine)
  tp_vs_sp.png              the figures (matplotlib, when installed)

Rank counts above the cores of this machine are oversubscribed: their memory
figures are exact, their timings are not timings and are marked so.

Run from the repository root (the machine files are relative paths).
usage: studies/tp_vs_sp_study.py [--build build-openmp] [--out studies/scaling/tp_vs_sp]
       [--skip-measured: no timings, only the limits, their runs and the predictions]
       [--only pipeline | pipeline-predicted | paper | interleaved] [--paper-recompute auto | never]
"""
import argparse
import json
import math
import os
import subprocess
import sys

import interleaved_pipeline
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
# The limits' configurations: name -> (predict's choice, parallel.tp_sequence_parallel,
# the settings of a real run on P ranks). "tp" is Megatron with its sequence
# parallelism (Korthikanti et al. 2022); "tp2021" is the paper's baseline, the
# 2021 Megatron without it (LayerNorm/residual rows replicated on every TP rank).
LIMIT_CONFIGS = {
    "tp": ("tensor_parallel", True, lambda p: {"parallel.strategy": "local", "parallel.tp": p}),
    "tp2021": ("tensor_parallel", False, lambda p: {"parallel.strategy": "local", "parallel.tp": p,
                                                     "parallel.tp_sequence_parallel": "false"}),
    "rsa": ("rsa", True, lambda p: {"parallel.strategy": "rsa"}),
    "ring": ("ring", True, lambda p: {"parallel.strategy": "ring"}),
    "ulysses": ("ulysses", True, lambda p: {"parallel.strategy": "ulysses"}),
}
# The paper's ratios (Li et al. 2021: 13.7x and 3.0x in its abstract, the
# equal-GPU figures in its section 5), as (what, limit, model, SP ranks, TP
# degree, the paper's ratio). TP's degree is capped by the heads: 12 for
# BERT-Base, 16 for BERT-Large. The 1.4x at equal 16 GPUs is given for
# BERT-Base, where TP cannot use 16 GPUs: both readings are computed.
PAPER_RATIOS = [
    ("largest batch (N = 512), SP on 64 / TP on 12", "largest_batch", "BERT-Base", 64, 12, 13.7),
    ("largest batch (N = 512), SP on 16 / TP on 16", "largest_batch", "BERT-Large", 16, 16, 2.7),
    ("longest N (batch 64), SP on 64 / TP on 12", "longest_seq_len", "BERT-Base", 64, 12, 3.0),
    ("longest N (batch 64), SP on 16 / TP on 12", "longest_seq_len", "BERT-Base", 16, 12, 1.4),
    ("longest N (batch 64), SP on 16 / TP on 16", "longest_seq_len", "BERT-Large", 16, 16, 1.4),
]
PAPER_MODELS = {"BERT-Base": (BERT_BASE, 12), "BERT-Large": (BERT_LARGE, 16)}  # model, TP's largest degree
# Whose memory parts the paper-ratio output lists (model, config, ranks).
PAPER_PARTS = [("BERT-Base", "tp2021", 12), ("BERT-Base", "tp", 12), ("BERT-Base", "rsa", 64),
               ("BERT-Base", "ring", 64), ("BERT-Large", "tp2021", 16), ("BERT-Large", "rsa", 16)]
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


def largest_fitting(fits, step):
    """The largest multiple of `step` for which fits() holds (0: none), by
    doubling then bisection; memory grows with the batch and the length."""
    if not fits(step):
        return 0
    low, high = step, 2 * step
    while fits(high):
        low, high = high, 2 * high
    while high - low > step:
        mid = (low + high) // (2 * step) * step
        low, high = (mid, high) if fits(mid) else (low, mid)
    return low


class Planner:
    """The planner's answers through run.mode predict (one rank, any rank count):
    whether each choice fits the memory budget per rank at a batch and length.
    tp_sequence_parallel decides which Megatron predict's tensor_parallel is."""

    def __init__(self, args, machine, budget_gib, model, max_ranks, dp=1, tp_sequence_parallel=True):
        self.args, self.model, self.cache = args, model, {}
        self.sets = {"run.mode": "predict", "run.machine": machine, "run.memory_per_rank_gib": budget_gib,
                     "run.predict_max_ranks": max_ranks, "parallel.dp": dp, "parallel.tp": 1,
                     "parallel.strategy": "ring", "parallel.layout": "contiguous", "train.steps": 0,
                     "parallel.tp_sequence_parallel": str(tp_sequence_parallel).lower()}

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
        return largest_fitting(lambda batch: self.fits(choice, batch, seq_len, ranks), step)

    def longest_seq_len(self, choice, batch, ranks):
        rows = self.predict(batch, 4096)["longest_seq_len"]
        return next(r for r in rows if r["ranks"] == ranks)["strategies"][choice]


def planners(args, machine, budget_gib, model, max_ranks, extra=None):
    """One Planner per Megatron mode (True: with sequence parallelism, False: 2021's)."""
    made = {mode: Planner(args, machine, budget_gib, model, max_ranks, tp_sequence_parallel=mode)
            for mode in (True, False)}
    for planner in made.values():
        planner.sets.update(extra or {})
    return made


class DeckPredictor:
    """One deck on its own rank count through predict's prediction_for_deck
    (run on those ranks): predict's tables have only rank counts 1, 2, 4, ...,
    but TP's largest degree for BERT-Base is 12, its head count. Also gives the
    memory parts per rank, which the tables do not."""

    def __init__(self, args, machine, budget_gib, model, ranks, settings):
        self.args, self.model, self.ranks, self.cache = args, model, ranks, {}
        self.tp = int(settings.get("parallel.tp", 1))
        self.sets = dict({"run.mode": "predict", "run.machine": machine, "run.memory_per_rank_gib": budget_gib,
                          "run.predict_max_ranks": 1, "parallel.layout": "contiguous", "train.steps": 0}, **settings)

    def predict(self, batch, seq_len):
        key = (batch, seq_len)
        if key not in self.cache:
            sets = dict(self.sets, **{"model.batch": batch, "model.seq_len": seq_len, "run.predict_seq_lens": seq_len})
            _, result = run_miniattn(self.args, self.ranks, sets, model=self.model)
            self.cache[key] = result["prediction_for_deck"]
        return self.cache[key]

    def fits(self, batch, seq_len):
        p = self.predict(batch, seq_len)
        return p["valid"] and p["fits"]

    # The rows b N of a micro-batch must divide over tp (docs/deck.md), hence the steps.
    def largest_batch(self, seq_len):
        return largest_fitting(lambda batch: self.fits(batch, seq_len), self.tp // math.gcd(seq_len, self.tp))

    def longest_seq_len(self, batch):
        return largest_fitting(lambda seq_len: self.fits(batch, seq_len), self.tp // math.gcd(batch, self.tp))


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


def paper_limits(args):
    """The limits at the paper's scale on the P100 description: TP at its
    largest degree (the heads) in both Megatron modes, on that many ranks, and
    SP on 16 and 64 ranks; largest batch at N = 512, longest N at batch 64."""
    rows = []
    for model_name, (model, tp_max) in PAPER_MODELS.items():
        table = planners(args, args.paper_machine, args.gpu_budget_gib, model, 64, paper_settings(args))
        for name in ("tp2021", "tp"):
            deck = DeckPredictor(args, args.paper_machine, args.gpu_budget_gib, model, tp_max,
                                 dict(LIMIT_CONFIGS[name][2](tp_max), **paper_settings(args)))
            rows.append({"model": model_name, "config": name, "ranks": tp_max,
                         "largest_batch": deck.largest_batch(512), "longest_seq_len": deck.longest_seq_len(64)})
            if tp_max & (tp_max - 1) == 0:  # a power of two: predict's own table must agree
                rows[-1]["table_largest_batch"] = table[LIMIT_CONFIGS[name][1]].largest_batch(
                    "tensor_parallel", 512, tp_max)
            print(f"paper scale {model_name} {name} {tp_max}: {rows[-1]}", flush=True)
        for ranks in (16, 64):
            for name in ("rsa", "ring", "ulysses"):
                rows.append({"model": model_name, "config": name, "ranks": ranks,
                             "largest_batch": table[True].largest_batch(name, 512, ranks),
                             "longest_seq_len": table[True].longest_seq_len(name, 64, ranks)})
                print(f"paper scale {model_name} {name} {ranks}: {rows[-1]}", flush=True)
    return rows


def paper_settings(args):
    """train.recompute for every paper-scale deck: auto (miniattn's default)
    keeps q, k, v and fc1's output where that fits; never keeps them always,
    as the paper's software did without checkpointing."""
    return {"train.recompute": args.paper_recompute}


def paper_row(rows, model, config, ranks):
    return next(r for r in rows if r["model"] == model and r["config"] == config and r["ranks"] == ranks)


def korthikanti_bytes_per_token(model, config, degree, seq_len):
    """Activation bytes per layer and per token a rank holds under Korthikanti
    et al. 2022's accounting (fp16 values, 1-byte dropout masks, attention
    scores stored): TP 2021 h (10 + 24/t) + 5 a s/t, TP with SP (34 h + 5 a s)/t,
    and RSA, whose n local queries keep their scores against all s keys,
    34 h + 5 a s per local token (the paper's software, not miniattn)."""
    h, a = model["d_model"], model["heads"]
    return {"tp2021": h * (10 + 24 / degree) + 5 * a * seq_len / degree,
            "tp": (34 * h + 5 * a * seq_len) / degree, "rsa": 34 * h + 5 * a * seq_len}[config]


def korthikanti_limits(model, tp_degree, sp_ranks, budget_bytes):
    """The limits under that accounting plus 16 bytes per parameter (fp16
    weights and gradients, fp32 master weights and two Adam moments), split
    by t under TP, whole under SP; embedding and loss activations left out."""
    h, layers = model["d_model"], model["layers"]
    weights = model["vocab"] * h + 512 * h + layers * (12 * h * h + 13 * h)  # BERT: token and learned position tables

    def per_rank(config, batch, seq_len):
        tokens, split = (seq_len / sp_ranks, 1) if config == "rsa" else (seq_len, tp_degree)
        degree = sp_ranks if config == "rsa" else tp_degree
        return layers * batch * tokens * korthikanti_bytes_per_token(model, config, degree, seq_len) + \
            16 * weights / split

    return {config: {"largest_batch": largest_fitting(lambda b: per_rank(config, b, 512) <= budget_bytes, 1),
                     "longest_seq_len": largest_fitting(lambda n: per_rank(config, 64, n) <= budget_bytes, 1)}
            for config in ("tp2021", "tp", "rsa")}


def paper_ratios(args, rows, parts):
    """miniattn's ratios for each of the paper's, SP's limit over TP's, with
    both Megatron modes and every SP strategy; the paper's own is rsa / tp2021."""
    budget = args.gpu_budget_gib * 2**30
    out = []
    for what, key, model, sp_ranks, tp_degree, paper in PAPER_RATIOS:
        tp = {name: paper_row(rows, model, name, tp_degree)[key] for name in ("tp2021", "tp")}
        sp = {name: paper_row(rows, model, name, sp_ranks)[key] for name in ("rsa", "ring", "ulysses")}
        ratios = {f"{s}/{t}": sp[s] / tp[t] if sp[s] and tp[t] else None for s in sp for t in tp}
        vocab_split = vocab_parallel_tp2021(parts, model, tp_degree, key, budget)
        ratios["rsa/tp2021_vocab_parallel_head"] = sp["rsa"] / vocab_split
        formula = korthikanti_limits(PAPER_MODELS[model][0], tp_degree, sp_ranks, budget)
        formula_ratios = {f"rsa/{t}": formula["rsa"][key] / formula[t][key] for t in tp}
        main = ratios["rsa/tp2021"]
        out.append({"comparison": what, "model": model, "limit": key, "sp_ranks": sp_ranks,
                    "tp_degree": tp_degree, "paper": paper, "tp_limits": tp, "sp_limits": sp, "ratios": ratios,
                    "relative_difference": main / paper - 1 if main else None,
                    "within_25_percent": bool(main) and abs(main / paper - 1) <= 0.25,
                    "tp2021_vocab_parallel_head_limit": vocab_split,
                    "korthikanti_limits": formula, "korthikanti_ratios": formula_ratios})
        print(f"paper ratio {what} ({model}): paper {paper}, miniattn rsa/tp2021 {main}, "
              f"Korthikanti accounting {formula_ratios['rsa/tp2021']:.2f}", flush=True)
    return out


def vocab_parallel_tp2021(parts, model, tp_degree, key, budget):
    """An estimate, from the planner's parts at tp2021's limit: the limit if
    its head held V / t logit columns per row, as 2021 Megatron's
    vocabulary-parallel head did, instead of all V on every TP rank (miniattn's
    tp2021). Everything but weights and optimizer grows with the rows b N
    (no attention scores under TP), so the rows that fit scale inversely
    with the bytes per row."""
    limit = "largest batch" if key == "largest_batch" else "longest N"
    r = next(p for p in parts if (p["model"], p["config"], p["ranks"], p["limit"]) ==
             (model, "tp2021", tp_degree, limit))
    rows = r["batch"] * r["seq_len"]
    per_row = (r["memory_bytes_per_rank"] - r["weights_and_optimizer"]) / rows
    per_row -= r["head_logits_bytes"] / rows * (1 - 1 / tp_degree)
    fitting_rows = (budget - r["weights_and_optimizer"]) / per_row
    return int(fitting_rows // (512 if key == "largest_batch" else 64))


def paper_parts(args, rows):
    """What fills the budget per rank at the limits of the paper's pairs
    (BERT-Base: TP on 12, SP on 64; BERT-Large: both on 16): predict's
    memory parts, from a deck on those ranks."""
    parts = []
    for model_name, name, ranks in PAPER_PARTS:
        model = PAPER_MODELS[model_name][0]
        r = paper_row(rows, model_name, name, ranks)
        deck = DeckPredictor(args, args.paper_machine, args.gpu_budget_gib, model, ranks,
                             dict(LIMIT_CONFIGS[name][2](ranks), **paper_settings(args)))
        for limit, batch, seq_len in (("largest batch", r["largest_batch"], 512), ("longest N", 64, r["longest_seq_len"])):
            p = deck.predict(batch, seq_len)
            fixed = p["memory_parts"]["parameters+gradients"] + p["memory_parts"]["optimizer"]
            local_tokens = batch * seq_len // (1 if name.startswith("tp") else ranks)
            head_rows = batch * seq_len // (1 if name == "tp2021" else ranks)  # tp splits the head's rows
            parts.append({"model": model_name, "config": name, "ranks": ranks, "limit": limit, "batch": batch,
                          "seq_len": seq_len,
                          "memory_bytes_per_rank": p["memory_bytes_per_rank"], "recompute": p["recompute"],
                          "parts": p["memory_parts"], "weights_and_optimizer": fixed,
                          "head_logits_bytes": head_rows * model["vocab"] * 4,  # memory_plan.cpp: r V s, fp32
                          "rest_per_token_per_layer": (p["memory_bytes_per_rank"] - fixed) /
                          (local_tokens * model["layers"]),
                          "korthikanti_per_token_per_layer": None if name == "ring" else
                          korthikanti_bytes_per_token(model, name, ranks, seq_len)})
            print(f"parts {model_name} {name} {ranks} at {limit}: {p['memory_parts']}", flush=True)
    return parts


def paper_prediction(args):
    """The paper's memory comparisons at its scale, predicted on the P100
    description: paper_ratios.md / .json."""
    rows = paper_limits(args)
    parts = paper_parts(args, rows)
    ratios = paper_ratios(args, rows, parts)
    with open(os.path.join(args.out, "paper_ratios.json"), "w") as f:
        json.dump({"machine": args.paper_machine, "budget_gib": args.gpu_budget_gib, "limits": rows,
                   "ratios": ratios, "parts": parts}, f, indent=1)
    with open(os.path.join(args.out, "paper_ratios.md"), "w") as f:
        f.write(f"Predicted with `{' '.join(sys.argv)}` on {args.paper_machine} (assumed nominal P100 figures), "
                f"{args.gpu_budget_gib} GiB per rank, fp32, train.recompute {args.paper_recompute}. tp: Megatron with sequence parallelism; tp2021: "
                f"without it (the paper's baseline). TP runs at its largest degree, the heads.\n\n")
        f.write("### Limits\n\n" + paper_limits_table(rows) + "\n### Ratios\n\n" + paper_ratio_table(ratios))
        f.write("\n### What fills the budget at the limits\n\n" + paper_parts_table(parts))


def paper_limits_table(rows):
    lines = ["| model | config | ranks | largest batch (N = 512) | longest N (batch 64) |", "|---|---|---|---|---|"]
    for r in rows:
        check = f" (predict's table: {r['table_largest_batch']})" if "table_largest_batch" in r else ""
        lines.append(f"| {r['model']} | {r['config']} | {r['ranks']} | {r['largest_batch'] or '-'}{check} | "
                     f"{r['longest_seq_len'] or '-'} |")
    return "'-': not possible (ulysses needs the heads divisible by the ranks).\n\n" + "\n".join(lines) + "\n"


def paper_ratio_table(ratios):
    def x(v):
        return f"{v:.2f}" if v else "-"
    lines = ["| the paper's comparison | model | paper | rsa / tp2021 (the paper's pair) | difference | within 25% "
             "| rsa / tp | ring / tp2021 | ring / tp | ulysses / tp2021 | ulysses / tp "
             "| rsa / tp2021 with a vocabulary-parallel head (estimate) "
             "| Korthikanti accounting: rsa / tp2021, rsa / tp |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in ratios:
        q, k = r["ratios"], r["korthikanti_ratios"]
        diff = f"{100 * r['relative_difference']:+.0f}%" if r["relative_difference"] is not None else "-"
        lines.append(f"| {r['comparison']} | {r['model']} | {r['paper']} | {x(q['rsa/tp2021'])} | {diff} | "
                     f"{'yes' if r['within_25_percent'] else 'no'} | {x(q['rsa/tp'])} | {x(q['ring/tp2021'])} | "
                     f"{x(q['ring/tp'])} | {x(q['ulysses/tp2021'])} | {x(q['ulysses/tp'])} | "
                     f"{x(q['rsa/tp2021_vocab_parallel_head'])} | {x(k['rsa/tp2021'])}, {x(k['rsa/tp'])} |")
    return ("Ratio: SP's limit over TP's. Korthikanti accounting: the same limits from Korthikanti et al. 2022's "
            "activation bytes (fp16, dropout masks, stored attention scores) and 16 bytes per parameter, "
            "not miniattn (studies/tp_vs_sp_study.py korthikanti_limits). Vocabulary-parallel head: tp2021's "
            "limit re-estimated from its memory parts with V / t logit columns per row, as 2021 Megatron held, "
            "where miniattn's tp2021 holds all V on every TP rank (vocab_parallel_tp2021).\n\n" +
            "\n".join(lines) + "\n")


def paper_parts_table(parts):
    gib = 2.0**30
    lines = ["| model | config (ranks) | at its | batch, N | GiB per rank | weights + gradients | optimizer | activations "
             "| attention | workspaces | rest | of which head logits | bytes per token and layer, beyond weights and "
             "optimizer: miniattn (fp32) | Korthikanti (fp16) |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in parts:
        m = r["parts"]
        named = ("parameters+gradients", "optimizer", "activations", "attention", "workspaces")
        rest = r["memory_bytes_per_rank"] - sum(m.get(n, 0) for n in named)
        kb = r["korthikanti_per_token_per_layer"]
        lines.append(f"| {r['model']} | {r['config']} ({r['ranks']}) | {r['limit']} | {r['batch']}, {r['seq_len']} | "
                     f"{r['memory_bytes_per_rank'] / gib:.2f}{' (recompute)' if r['recompute'] else ''} | " +
                     " | ".join(f"{m.get(n, 0) / gib:.2f}" for n in named) + f" | {rest / gib:.2f} | "
                     f"{r['head_logits_bytes'] / gib:.2f} | "
                     f"{r['rest_per_token_per_layer']:,.0f} | {f'{kb:,.0f}' if kb else '-'} |")
    return ("predict's memory_parts (GiB) for a deck on those ranks; 'of which head logits': the fp32 logits "
            "within the activations, rows x V x 4 bytes (src/perf/memory_plan.cpp: r V s; all b N rows under "
            "tp2021, b N / P under tp and SP); a token is one of the rank's own rows (N / P under SP, all N "
            "under TP); the Korthikanti figure leaves the head out.\n\n" + "\n".join(lines) + "\n")


def limits(planners, ranks_list, seq_len, batch, configs=tuple(LIMIT_CONFIGS)):
    """Largest batch at seq_len and longest sequence at batch, per rank count and configuration."""
    rows = []
    for ranks in ranks_list:
        for name in configs:
            choice, mode, _ = LIMIT_CONFIGS[name]
            planner = planners[mode]
            rows.append({"ranks": ranks, "config": name, "largest_batch": planner.largest_batch(choice, seq_len, ranks),
                         "longest_seq_len": planner.longest_seq_len(choice, batch, ranks)})
            print(f"limits {ranks} ranks {name}: batch {rows[-1]['largest_batch']} at N={seq_len}, "
                  f"N {rows[-1]['longest_seq_len']} at batch {batch}", flush=True)
    return rows


def confirm_by_runs(args, rows, seq_len, budget_gib):
    """Real runs at the planner's largest batch: it trains one step within the
    budget, and one sample more is refused (exit 2) before any work."""
    for r in rows:
        if r["largest_batch"] == 0:
            continue
        sets = {"model.seq_len": seq_len, "train.steps": 1, "run.memory_per_rank_gib": budget_gib}
        sets.update(LIMIT_CONFIGS[r["config"]][2](r["ranks"]))
        _, result = run_miniattn(args, r["ranks"], dict(sets, **{"model.batch": r["largest_batch"]}))
        status, stderr = run_miniattn(args, r["ranks"], dict(sets, **{"model.batch": r["largest_batch"] + 1}),
                                      expect_ok=False)
        r["confirmed"] = status == 2 and "needs" in stderr
        r["allocated_bytes_per_rank"] = result["memory"]["allocated_bytes_per_rank"]
        r["tp_sequence_parallel_ran"] = result.get("tp_sequence_parallel")
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
    p.add_argument("--paper-machine", default="inputs/machines/p100_cluster.yaml",
                   help="the paper's machine for its ratios (nominal P100 figures)")
    p.add_argument("--paper-recompute", choices=["auto", "never"], default="auto",
                   help="train.recompute of the paper-scale decks (never: q, k, v, fc1 kept, as the paper)")
    p.add_argument("--only", choices=["pipeline", "pipeline-predicted", "paper", "interleaved"],
                   help="run only this part")
    p.add_argument("--interleaved-seq-len", type=int, default=2048, help="N of the measured interleaved pipeline")
    p.add_argument("--ptdp-seq-len", type=int, default=2048, help="N of the predicted PTD-P layout")
    p.add_argument("--ptdp-batch", type=int, default=512, help="its global batch")
    p.add_argument("--ptdp-micro-batches", type=int, default=8, help="its micro-batches per DP replica")
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
    if args.only == "paper":
        paper_prediction(args)
        plot(args.out)
        return
    if args.only == "interleaved":  # timings: needs a quiet machine
        interleaved_pipeline.study(args, run_miniattn, MODEL)
        plot(args.out)
        return
    if not args.skip_limits:
        planner_limits(args)
        pipeline_prediction(args)
        paper_prediction(args)
    if not args.skip_measured:
        measured_weak_scaling(args)
    plot(args.out)


def plot(out):
    """tp_vs_sp.png from the JSON files present (matplotlib optional): the
    limits and measured figures against the ranks, then the paper's ratios
    and the paper-scale limits as bars."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no figure (the tables are written)")
        return
    panels = line_panels(out)
    if os.path.exists(os.path.join(out, "paper_ratios.json")):
        with open(os.path.join(out, "paper_ratios.json")) as f:
            paper = json.load(f)
        panels += [(ratio_bars, paper), (paper_limit_bars, paper)]
    if os.path.exists(os.path.join(out, "interleaved.json")):
        with open(os.path.join(out, "interleaved.json")) as f:
            panels.append((interleaved_pipeline.bubble_panel, json.load(f)))
    if not panels:
        return
    cols = min(3, len(panels))
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5.5 * cols, 4.2 * rows), squeeze=False)
    for ax, (draw, data) in zip(axes.flat, panels):
        draw(ax, data)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "tp_vs_sp.png"), dpi=110)


def line_panels(out):
    """(draw, data) for each figure against the ranks whose JSON exists."""
    specs = []
    if os.path.exists(os.path.join(out, "limits.json")):
        with open(os.path.join(out, "limits.json")) as f:
            lim = json.load(f)
        specs += [("largest batch, N = 512 (this machine, 0.5 GiB/rank)", lim["here"], "largest_batch"),
                  ("largest batch, N = 512 (BERT-Base, H100-like model, 16 GiB/rank)", lim["gpu"], "largest_batch")]
    if os.path.exists(os.path.join(out, "weak_scaling.json")):
        with open(os.path.join(out, "weak_scaling.json")) as f:
            weak = json.load(f)
        specs += [("MiB per rank, batch grows with ranks (measured)", weak["batch"], "allocated_bytes_per_rank"),
                  ("tokens/s, batch grows with ranks (measured)", weak["batch"], "tokens_per_second")]
    return [(lambda ax, spec: line_panel(ax, *spec), spec) for spec in specs]


COLORS = {"tp": "tab:orange", "tp2021": "tab:red", "tensor_parallel": "tab:orange", "rsa": "tab:blue",
          "ring": "tab:green", "ulysses": "tab:purple"}  # the same configuration in the same colour everywhere


def line_panel(ax, title, rows, key):
    for config in dict.fromkeys(r["config"] for r in rows):
        pts = [(r["ranks"], r[key] / (2**20 if "bytes" in key else 1)) for r in rows
               if r["config"] == config and r[key]]
        if pts:  # "tp 4 x dp k": a single point in its mode's colour, a square
            ax.plot(*zip(*pts), marker="o" if config in COLORS else "s", label=config, color=COLORS.get(
                config.split()[0]), linestyle="--" if config.startswith("tp2021") else "-")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("ranks")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)


def ratio_bars(ax, paper):
    """The paper's ratios beside miniattn's (rsa over both TP modes) and the Korthikanti accounting."""
    series = [("paper", lambda r: r["paper"]), ("miniattn rsa / tp2021", lambda r: r["ratios"]["rsa/tp2021"]),
              ("miniattn rsa / tp2021, vocab-parallel head (est.)",
               lambda r: r["ratios"]["rsa/tp2021_vocab_parallel_head"]),
              ("Korthikanti acct. rsa / tp2021", lambda r: r["korthikanti_ratios"]["rsa/tp2021"]),
              ("miniattn rsa / tp", lambda r: r["ratios"]["rsa/tp"])]
    ratios, width = paper["ratios"], 0.16
    for i, (label, value) in enumerate(series):
        ax.bar([j + (i - 2) * width for j in range(len(ratios))], [value(r) or 0 for r in ratios], width,
               label=label)
    names = [f"{'batch' if r['limit'] == 'largest_batch' else 'N'} {r['model'].split('-')[1]}\n"
             f"SP {r['sp_ranks']} / TP {r['tp_degree']}" for r in ratios]
    ax.set_xticks(range(len(ratios)), names, fontsize=7)
    ax.set_yscale("log")
    ax.axhline(1, color="grey", linewidth=0.5)
    ax.set_ylabel("SP's limit / TP's")
    ax.set_title(f"the paper's ratios and miniattn's (P100 description, {paper['budget_gib']:g} GiB/rank)",
                 fontsize=9)
    ax.legend(fontsize=7)


def paper_limit_bars(ax, paper):
    """BERT-Base's largest batch at N = 512 at the paper's scale, per configuration."""
    rows = [r for r in paper["limits"] if r["model"] == "BERT-Base" and r["largest_batch"]]
    bars = ax.bar(range(len(rows)), [r["largest_batch"] for r in rows], color=[COLORS[r["config"]] for r in rows])
    ax.bar_label(bars, fontsize=7)
    ax.set_xticks(range(len(rows)), [f"{r['config']}\n{r['ranks']} ranks" for r in rows], fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("largest batch, N = 512")
    ax.set_title("BERT-Base, P100 description: largest batch (TP 12 ranks, SP 16 and 64)", fontsize=9)


def planner_limits(args):
    here = planners(args, "inputs/machines/this_machine.yaml", args.budget_gib, MODEL, max(args.ranks))
    here_rows = limits(here, args.ranks, args.seq_len, args.batch)
    confirm_by_runs(args, here_rows, args.seq_len, args.budget_gib)
    gpu_rows = gpu_limits(args)
    with open(os.path.join(args.out, "limits.json"), "w") as f:
        json.dump({"here": here_rows, "gpu": gpu_rows}, f, indent=1)
    with open(os.path.join(args.out, "limits.md"), "w") as f:
        f.write(f"`{' '.join(sys.argv)}`\n\ntp: Megatron with sequence parallelism; tp2021: without it "
                f"(parallel.tp_sequence_parallel false).\n\n### This machine ({MODEL})\n\n")
        f.write(limits_table(here_rows, args.seq_len, args.batch, args.budget_gib))
        f.write(f"\n### Predicted: BERT-Base ({BERT_BASE}) on {args.gpu_machine}\n\n")
        f.write(limits_table(gpu_rows, 512, 64, args.gpu_budget_gib))


def gpu_limits(args):
    """BERT-Base's limits at 4, 16 and 64 ranks on the GPU description, with
    the predicted tokens/s at the largest batch."""
    gpu = planners(args, args.gpu_machine, args.gpu_budget_gib, BERT_BASE, 64)
    rows = limits(gpu, [4, 16, 64], 512, 64)
    # TP is capped by the heads: TP 4 (12 heads, 4 | 64) x DP k for the other
    # ranks. DP replicas hold the same per-rank memory as TP 4 on 4 ranks with
    # batch / k, so their limits come from that row.
    for name in ("tp", "tp2021"):
        planner = gpu[LIMIT_CONFIGS[name][1]]
        for ranks in (16, 64):
            k = ranks // 4
            rows.append({"ranks": ranks, "config": f"{name} 4 x dp {k}", "base": name, "replicas": k,
                         "largest_batch": k * planner.largest_batch("tensor_parallel", 512, 4),
                         "longest_seq_len": planner.longest_seq_len("tensor_parallel", 64 // k, 4)})
    for r in rows:
        k = r.get("replicas", 1)  # k replicas of the 4-rank prediction (DP gradient sum not included)
        choice, mode, _ = LIMIT_CONFIGS[r.get("base", r["config"])]
        p = gpu[mode].row(max(r["largest_batch"] // k, 1), 512, r["ranks"] // k)["strategies"][choice]
        r["predicted_tokens_per_second"] = k * p["tokens_per_second"] if p["valid"] else None
    return rows


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
