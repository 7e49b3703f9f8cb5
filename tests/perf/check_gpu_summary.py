#!/usr/bin/env python3
"""The GPU bring-up's figures read what the benchmarks print: bench_attention
and miniattn's bench mode run here at a small size, their outputs saved under
the names scripts/gpu_bringup.sh gives them, beside a made-up PyTorch
reference_bench.json; `summarize` (scripts/gpu_reference_bench.py) must read
every miniattn figure and judge each one by its TARGETS, met just inside a
target and missed just outside it. A GPU lease is short: a table that reads
n/a, or a verdict that does not follow the targets, would waste it.

usage: check_gpu_summary.py GPU_REFERENCE_BENCH.py BENCH_ATTENTION MINIATTN DECK
"""
import copy
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile

N = 128  # sequence length of every run here


def fail(message):
    print(f"FAIL: {message}")
    sys.exit(1)


def load_summarizer(path):
    spec = importlib.util.spec_from_file_location("gpu_reference_bench", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(args, out_path=None):
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        fail(f"{' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    if out_path:
        with open(out_path, "w") as f:
            f.write(proc.stdout)


def run_benchmarks(bench_attention, miniattn, deck, results):
    """The benchmarks of gpu_bringup.sh's bench step, at N = 128, under its file names."""
    for precision, kernel, name in (("fp32", "gemm", f"bench_attention_gemm_n{N}.txt"),
                                    ("fp32", "fused", f"bench_attention_fused_n{N}.txt"),
                                    ("bf16", "gemm", f"bench_attention_bf16_gemm_n{N}.txt")):
        run([bench_attention, str(N), "64", "2", f"--precision={precision}", "--reps=1", "--gemm=64",
             f"--kernel={kernel}"], os.path.join(results, name))
    model = ["model.vocab=64", "data.task=copy", "model.d_model=64", "model.heads=1", "model.layers=1", "model.batch=1",
             f"model.seq_len={N}", "model.causal=true", "model.positions=learned", "parallel.strategy=local",
             "parallel.layout=contiguous", "parallel.dp=1", "train.steps=3", "run.mode=bench",
             "kernels.attention=gemm"]
    for precision, name in (("fp32", f"bench_miniattn_gemm_n{N}_causal.json"),
                            ("bf16", f"bench_miniattn_bf16_gemm_n{N}_causal.json")):
        sets = model + [f"model.precision={precision}", f"run.result={os.path.join(results, name)}"]
        run([miniattn, deck] + [a for s in sets for a in ("--set", s)])


# PyTorch's deterministic SDPA, as gpu_reference_bench.py measures it, and its line in figures.md.
DETERMINISTIC_SDPA = {"n": N, "causal": True, "backend": "EFFICIENT_ATTENTION", "deterministic": True,
                      "forward_tflops": 2.5, "forward_backward_tflops": 1.5}
DETERMINISTIC_SDPA_TEXT = f"N = {N} causal 2.5 / 1.5"


def pytorch_figures(kernels, step, bf16_step, targets, margin):
    """A reference_bench.json that puts miniattn's figures `margin` times their targets: SDPA
    rates from the kernels' slower rate when margin > 1 (both kernels meet the target), their
    faster one otherwise (both miss it); eager+SDPA steps from miniattn's."""
    pick = min if margin > 1 else max
    sdpa_share = targets["attention_fraction_of_sdpa"] * margin
    step_ratio = targets["step_seconds_over_pytorch_eager_sdpa"] / margin
    bf16_step_ratio = targets["bf16"]["step_seconds_over_pytorch_eager_sdpa_bf16"] / margin
    sdpa = []
    for causal in (False, True):
        kind = "causal" if causal else "non-causal"
        rate = {phase: pick(k["rates"][f"{kind} {phase}"]["tflops"] for k in kernels)
                for phase in ("forward", "forward+backward")}
        sdpa.append({"n": N, "causal": causal, "backend": "EFFICIENT_ATTENTION",
                     "forward_tflops": rate["forward"] / sdpa_share,
                     "forward_backward_tflops": rate["forward+backward"] / sdpa_share})
    torch_step = {"ok": True, "peak_bytes": 2**30, "config": {"seq_len": N}}
    return {"device": "made up", "torch": "made up", "cuda": "made up",
            "sgemm": [{"n": 64, "seconds": 1.0, "tflops": 1.0}], "sdpa": sdpa,
            "train_step": [dict(torch_step, variant="eager", step_seconds_median=step),
                           dict(torch_step, variant="eager_sdpa", step_seconds_median=step / step_ratio)],
            "bf16": {"gemm": [], "sdpa": [], "sdpa_deterministic": [DETERMINISTIC_SDPA],
                     "train_step": [dict(torch_step, variant="eager_sdpa_bf16",
                                         step_seconds_median=bf16_step / bf16_step_ratio)]}}


def verdicts(results):
    """The last cell of every table row of figures.md, by section heading."""
    found, section = {}, None
    for line in open(os.path.join(results, "figures.md")):
        if line.startswith("## "):
            section = line[3:].split(" (")[0].strip()
        elif line.startswith(f"| {N} |"):
            found.setdefault(section, []).append(line.strip().strip("|").split("|")[-1].strip())
    return found


def check_figures_read(figures):
    rows = [(r["kernel"], r["causal"]) for r in figures["attention"] if r["forward_tflops"]
            and r["forward_backward_tflops"] and r["tiles"]]
    if sorted(rows) != sorted((k, c) for k in ("fused", "gemm") for c in (False, True)):
        fail(f"fp32 attention rows read: {rows} of {figures['attention']}")
    if not all(r["forward_tflops"] and r["forward_backward_tflops"] for r in figures["bf16_attention"]) or \
            len(figures["bf16_attention"]) != 2:
        fail(f"bf16 attention rows: {figures['bf16_attention']}")
    steps = figures["train_step"]
    if len(steps) != 1 or not steps[0]["step_seconds"] or steps[0].get("speedup_over_eager_sdpa") is None:
        fail(f"training step rows: {steps}")
    if len(figures["bf16_train_step"]) != 1 or figures["bf16_train_step"][0]["ratio"] is None:
        fail(f"bf16 training step rows: {figures['bf16_train_step']}")


def judged(summarizer, results, targets, margin):
    """figures.md's verdicts with the targets met by `margin` (> 1) or missed by it (< 1)."""
    kernels = [summarizer.parse_bench_attention(os.path.join(results, f"bench_attention_{k}_n{N}.txt"))
               for k in ("gemm", "fused")]
    step = json.load(open(os.path.join(results, f"bench_miniattn_gemm_n{N}_causal.json")))["step_seconds_median"]
    bf16_step = json.load(open(os.path.join(results, f"bench_miniattn_bf16_gemm_n{N}_causal.json")))[
        "step_seconds_median"]
    reference = pytorch_figures(kernels, step, bf16_step, targets, margin)
    with open(os.path.join(results, "reference_bench.json"), "w") as f:
        json.dump(reference, f)
    with open(os.devnull, "w") as quiet:
        stdout, sys.stdout = sys.stdout, quiet
        try:
            summarizer.summarize(results)
        finally:
            sys.stdout = stdout
    if DETERMINISTIC_SDPA_TEXT not in open(os.path.join(results, "figures.md")).read():
        fail(f"figures.md does not give PyTorch's deterministic SDPA as '{DETERMINISTIC_SDPA_TEXT}'")
    return verdicts(results), json.load(open(os.path.join(results, "figures.json")))


def check_cudnn_extras(summarizer, results):
    """The cudnn runs with the non-deterministic backward and with wide heads: one bf16 output
    under all three names (so the cost of determinism reads 1 exactly) and SDPA figures of 1."""
    source = os.path.join(results, f"bench_attention_bf16_gemm_n{N}.txt")
    with tempfile.TemporaryDirectory() as extras:
        for name in (f"bench_attention_bf16_cudnn_n{N}.txt", f"nondeterministic_bench_attention_bf16_cudnn_n{N}.txt",
                     f"wide_bench_attention_bf16_cudnn_n{N}.txt"):
            shutil.copy(source, os.path.join(extras, name))
        sdpa = [{"n": N, "causal": c, "backend": "CUDNN_ATTENTION", "forward_tflops": 1.0,
                 "forward_backward_tflops": 1.0} for c in (False, True)]
        with open(os.path.join(extras, "wide_reference_bench.json"), "w") as f:
            json.dump({"bf16": {"sdpa": sdpa}}, f)
        figures, lines = {}, []
        summarizer.summarize_cudnn_extras(extras, figures, lines)
    ratios = [r["time_ratio"] for r in figures.get("cudnn_determinism", [])]
    if len(ratios) != 2 or any(r is None or abs(r - 1.0) > 1e-12 for r in ratios):
        fail(f"cost of determinism: {figures.get('cudnn_determinism')}")
    fractions = [f for r in figures.get("cudnn_wide_heads", []) for f in r["fractions"]]
    if len(fractions) != 4 or any(f is None or f <= 0 for f in fractions):
        fail(f"wide heads against SDPA: {figures.get('cudnn_wide_heads')}")


def check_long(summarizer, miniattn, deck):
    """The long step's table reads real outputs: a small bf16 bench run saved as the million-token
    run, a predict run on the nominal bf16 machine file as its prediction, a made-up PyTorch step."""
    machine = os.path.join(os.path.dirname(deck), "machines", "gpu_cluster_4x_bf16.yaml")
    model = ["model.seq_len=256", "model.precision=bf16", "parallel.strategy=local", "parallel.layout=contiguous",
             "train.steps=2"]
    with tempfile.TemporaryDirectory() as results:
        sets = model + ["run.mode=bench", f"run.result={os.path.join(results, 'long_1m_deterministic_true.json')}"]
        run([miniattn, deck] + [a for s in sets for a in ("--set", s)])
        sets = model + ["run.mode=predict", f"run.machine={machine}", "run.predict_max_ranks=1",
                        "run.predict_seq_lens=256"]
        out = os.path.join(results, "predict.txt")
        run([miniattn, deck] + [a for s in sets for a in ("--set", s)], out)
        with open(out) as f, open(os.path.join(results, "predict_1m_deterministic_true.json"), "w") as g:
            g.write([l for l in f.read().splitlines() if l.startswith("RESULT ")][0][len("RESULT "):])
        with open(os.path.join(results, "pytorch_1m.json"), "w") as f:
            json.dump({"train_step": {"ok": False, "oom": True, "peak_bytes": 2**30}}, f)
        figures, lines = {}, []
        summarizer.summarize_long(results, figures, lines)
    rows = figures.get("long", [])
    if len(rows) != 1 or not rows[0]["step_seconds"] or not rows[0]["predicted_step_seconds"] or \
            not rows[0]["memory"].get("plan_holds_on_every_rank") or not rows[0]["model_flops_per_second"]:
        fail(f"the million-token rows: {rows}")
    if not any("out of memory" in line for line in lines):
        fail(f"PyTorch's step at a million tokens: {lines}")


def check_documents(summarizer, miniattn, deck):
    """The documents step's section: the probe's table as printed, and the two bench steps read
    from real reports (small bf16 runs saved under both names)."""
    with tempfile.TemporaryDirectory() as results:
        table = "docs 512       per-document     fwd    1.000 ms  100.0 TFLOP/s (0.50)  ..."
        with open(os.path.join(results, "documents_cudnn_deterministic.txt"), "w") as f:
            f.write(table + "\n")
        sets = ["model.seq_len=128", "model.precision=bf16", "parallel.strategy=local", "train.steps=2",
                "run.mode=bench", "data.documents=true"]
        for mode in ("gemm", "calls"):
            result = os.path.join(results, f"bench_documents_cudnn_{mode}.json")
            run([miniattn, deck] + [a for s in sets + [f"run.result={result}"] for a in ("--set", s)])
        figures, lines = {}, []
        summarizer.summarize_documents(results, figures, lines)
    steps = figures.get("documents_step", {})
    if sorted(steps) != ["calls", "gemm"] or not all(e["step_seconds_median"] and e["step_seconds_mean"]
                                                      for e in steps.values()):
        fail(f"the documents steps: {steps}")
    if table not in lines:
        fail(f"the documents probe's table is not in figures.md: {lines}")
    if any(line.startswith("nondeterministic backward") for line in lines):
        fail(f"a table for a probe that did not run: {lines}")


def main():
    script, bench_attention, miniattn, deck = sys.argv[1:5]
    summarizer = load_summarizer(script)
    with tempfile.TemporaryDirectory() as results:
        run_benchmarks(bench_attention, miniattn, deck, results)
        # This CPU is far below the GPU's absolute floors: judge the ratios alone.
        targets = copy.deepcopy(summarizer.TARGETS)
        targets["attention_tflops"] = 0.0
        summarizer.TARGETS = targets
        bf16_gemm = summarizer.parse_bench_attention(os.path.join(results, f"bench_attention_bf16_gemm_n{N}.txt"),
                                                     "bf16")["rates"]
        bf16_both = [bf16_gemm[f"{kind} forward+backward"]["tflops"] for kind in ("non-causal", "causal")]
        for margin, expected in ((1.01, "met"), (0.99, "MISSED")):
            # The bf16 gemm floor just below both measured rates, or just above both.
            floor = (min(bf16_both) if margin > 1 else max(bf16_both)) / margin
            targets["bf16"]["attention_tflops_forward_and_forward_backward"]["gemm"] = (None, floor)
            found, figures = judged(summarizer, results, targets, margin)
            check_figures_read(figures)
            want = {"Attention kernel": [expected] * 4, "Training step": [expected],
                    "bf16 attention": [expected] * 2, "bf16 training step": [expected]}
            if found != want:
                fail(f"targets {'met' if margin > 1 else 'missed'} by 1%: verdicts {found}, expected {want}")
        check_cudnn_extras(summarizer, results)
    check_long(summarizer, miniattn, deck)
    check_documents(summarizer, miniattn, deck)
    print("PASS: every figure read; verdicts follow TARGETS on both sides of each target")


if __name__ == "__main__":
    main()
