#!/usr/bin/env python3
"""Exact as the ring grows: the fp32 error of the loss and of every gradient
against an fp64 reference, for each sequence-parallel strategy on P = 1, 2,
4, 8 and 16 ranks (oversubscribed here: the numbers, not the timings, are
the point) and sequence lengths up to 64K.

Each case runs one step of the same deck (same seed, so the fp32 and fp64
parameters are the same numbers up to their rounding) with a step-0
snapshot; the reference is the fp64 run on one rank, which CTest checks
against the PyTorch float64 reference (validation/) at small sizes and which
equals every fp64 decomposition to 1e-10 (driver tests). Reported per case:
the loss error |L32 - L64| / L64 and the worst gradient error
max over tensors of ||g32 - g64|| / ||g64||.

Attention merges blocks with an online softmax whose running maximum only
grows: every rescale factor exp(m_old - m_new) is <= 1, and the row sum is
rescaled, never the exponentials of the block's own log-sum-exp, so nothing
overflows and nothing is subtracted in fp32 beyond what one rank does. If P
added error, it would show as a rising column.

Writes to --out: numerics.json (every case), numerics.md (the tables) and
numerics.png (error against P, one line per strategy and length).

usage: studies/numerics_study.py [--exe build/src/miniattn] [--out studies/numerics] [--quick]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RANKS = [1, 2, 4, 8, 16]
# 16 heads: Ulysses reaches 16 ranks; Dh = 4 keeps 64K positions affordable on 2 cores.
DECK = """\
model: {{vocab: 64, d_model: 64, heads: 16, ffn: 64, layers: 1, seq_len: {seq_len}, batch: 1, causal: true,
        precision: {precision}}}
parallel: {{strategy: local, layout: zigzag}}
train: {{steps: 1, lr: 1.0e-3, seed: 17}}
run: {{mode: train, log_every: 1}}
"""
# (strategy, sequence length, extra settings): every strategy at 4K, 16K and
# 64K except RSA, whose dense [N/P, N] scores per head (16 GiB in all at 16K,
# 256 GiB at 64K) do not fit this study's one machine; it runs at 4K and 8K.
HYBRID = {"parallel.ulysses_degree": 2}
CASES = ([("rsa", n, {}) for n in (4096, 8192)] +
         [(s, n, HYBRID if s == "hybrid" else {}) for n in (4096, 16384, 65536)
          for s in ("ring", "allgather", "ulysses", "hybrid")])
QKV = "blocks.0.attn.qkv.weight"  # the gradient attention's backward pass writes first


def run(exe, ranks, deck, settings, snapshot):
    cmd = ["mpiexec", "-n", str(ranks), exe, deck, "--set", f"io.snapshot={snapshot}", "--set", "io.snapshot_step=0"]
    for key, value in settings.items():
        cmd += ["--set", f"{key}={value}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-2000:]}")


def read(snapshot):
    with h5py.File(snapshot, "r") as f:
        grads = {}
        f["grads"].visititems(lambda n, d: grads.__setitem__(n, d[...].astype(np.float64)) if hasattr(d, "shape")
                              else None)
        return float(f["loss"][...].reshape(())), grads


def errors(case, reference):
    """Loss error, worst gradient error, and the QKV weight's gradient error."""
    loss, grads = read(case)
    ref_loss, ref_grads = read(reference)
    error = {n: np.linalg.norm(grads[n] - g) / max(np.linalg.norm(g), 1e-300) for n, g in ref_grads.items()}
    return abs(loss - ref_loss) / abs(ref_loss), max(error.values()), error[QKV]


def pending_cases(seq_len, quick, done):
    """(strategy as listed, settings, ranks) still to run at seq_len. On one rank every strategy is the
    local one: it runs and is listed once, as "local"."""
    cases = []
    for strategy, n, extra in CASES:
        for ranks in (RANKS if not quick else RANKS[:3]) if n == seq_len else []:
            name = strategy if ranks > 1 else "local"
            if (strategy == "hybrid" and ranks < 2) or (name, seq_len, ranks) in done:
                continue
            done.add((name, seq_len, ranks))
            cases.append((name, dict(extra, **{"parallel.strategy": name}), ranks))
    return cases


def study(exe, scratch, quick, results, save):
    """Runs every case not already in results (so an interrupted study resumes)."""
    done = {(r["strategy"], r["seq_len"], r["ranks"]) for r in results}
    for seq_len in sorted({n for _, n, _ in CASES if not quick or n <= 4096}):
        cases = pending_cases(seq_len, quick, done)
        if not cases:
            continue
        decks = {}
        for precision in ("fp32", "fp64"):
            decks[precision] = os.path.join(scratch, f"{precision}-{seq_len}.yaml")
            with open(decks[precision], "w") as f:
                f.write(DECK.format(seq_len=seq_len, precision=precision))
        reference = os.path.join(scratch, f"fp64-{seq_len}.h5")
        run(exe, 1, decks["fp64"], {}, reference)
        for name, settings, ranks in cases:
            snapshot = os.path.join(scratch, f"fp32-{seq_len}-{name}-{ranks}.h5")
            run(exe, ranks, decks["fp32"], settings, snapshot)
            loss_error, grad_error, qkv_error = errors(snapshot, reference)
            results.append({"strategy": name, "seq_len": seq_len, "ranks": ranks,
                            "loss_error": loss_error, "grad_error": grad_error, "qkv_error": qkv_error})
            save()
            print(f"N {seq_len:6d} {name:9s} P {ranks:2d}: loss {loss_error:.2e}, worst gradient "
                  f"{grad_error:.2e}, {QKV} {qkv_error:.2e}", flush=True)


def curves(results):
    """{(N, strategy): rows by P}, each strategy's P = 1 point being the local run at its N."""
    keys = sorted({(r["seq_len"], r["strategy"]) for r in results if r["strategy"] != "local"})
    return {(n, s): sorted((r for r in results if r["seq_len"] == n and (
        r["strategy"] == s or (r["strategy"] == "local" and s != "hybrid"))), key=lambda r: r["ranks"])
            for n, s in keys}


def write_tables(results, path):
    lines = ["# fp32 against fp64 as the ring grows", "",
             "Generated by `studies/numerics_study.py` (one step of its deck: V 64, D 64, 16 heads, "
             "1 layer, causal, zigzag, batch 1; reference: the fp64 run on one rank). Each cell: loss "
             f"error / worst gradient error (norm-wise, over all tensors) / error of {QKV}'s gradient "
             "(the first that attention's backward pass produces). P = 1 is the single-rank fp32 run.", ""]
    lines += ["| N | strategy | " + " | ".join(f"P = {p}" for p in RANKS) + " |",
              "|---|---|" + "---|" * len(RANKS)]
    for (seq_len, strategy), rows in curves(results).items():
        cells = []
        for p in RANKS:
            hit = [r for r in rows if r["ranks"] == p]
            cells.append(f"{hit[0]['loss_error']:.1e} / {hit[0]['grad_error']:.1e} / {hit[0]['qkv_error']:.1e}"
                         if hit else "-")
        lines.append(f"| {seq_len} | {strategy} | " + " | ".join(cells) + " |")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def plot(results, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plot")
        return
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.4))
    # Colour by length, marker and line by strategy: 14 curves stay apart.
    lengths = sorted({n for n, _ in curves(results)})
    colours = {n: plt.cm.viridis(i / max(1, len(lengths) - 1) * 0.85) for i, n in enumerate(lengths)}
    styles = {"ring": ("o", "-"), "allgather": ("s", "--"), "ulysses": ("^", "-."), "hybrid": ("v", ":"),
              "rsa": ("D", "-")}
    for (seq_len, strategy), rows in curves(results).items():
        label = f"{strategy}, N = {seq_len // 1024}K"
        marker, line = styles.get(strategy, ("x", "-"))
        for ax, key in zip(axes, ("loss_error", "grad_error", "qkv_error")):
            ax.plot([r["ranks"] for r in rows], [max(r[key], 1e-12) for r in rows], marker=marker, linestyle=line,
                    color=colours[seq_len], label=label)
    for ax, title in zip(axes, ("loss: |L32 - L64| / L64", "gradients: max ||g32 - g64|| / ||g64||",
                                f"{QKV}: ||g32 - g64|| / ||g64||")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(RANKS, [str(p) for p in RANKS])
        ax.set_xlabel("sequence-parallel ranks P")
        ax.set_title(title)
        ax.axhline(np.finfo(np.float32).eps, color="gray", linestyle=":", linewidth=1)
        ax.grid(True, which="both", alpha=0.3)
    axes[2].legend(fontsize=7, ncol=2)
    fig.suptitle("fp32 error against fp64 does not grow with the ranks (dotted: fp32 machine epsilon)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--exe", default=os.path.join(ROOT, "build", "src", "miniattn"))
    p.add_argument("--out", default=os.path.join(ROOT, "studies", "numerics"))
    p.add_argument("--quick", action="store_true", help="4K positions and P <= 4 only (a few minutes)")
    p.add_argument("--resume", action="store_true", help="keep the cases already in --out's numerics.json")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    table = os.path.join(a.out, "numerics.json")
    results = []
    if a.resume and os.path.exists(table):
        with open(table) as f:
            results = json.load(f)

    def save():
        with open(table, "w") as f:
            json.dump(results, f, indent=1)

    with tempfile.TemporaryDirectory(prefix="miniattn-numerics-") as scratch:
        study(os.path.abspath(a.exe), scratch, a.quick, results, save)
    write_tables(results, os.path.join(a.out, "numerics.md"))
    plot(results, os.path.join(a.out, "numerics.png"))


if __name__ == "__main__":
    main()
