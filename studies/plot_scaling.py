#!/usr/bin/python3
"""Figures and a markdown table from the JSON lines of studies/scaling.py.

  /usr/bin/python3 studies/plot_scaling.py results/scaling.jsonl --outdir studies/scaling

writes into OUTDIR:

  strong_scaling.png   speed-up T(1 rank, local) / T(R ranks, strategy) and parallel efficiency
                       (speed-up / R) against ranks, one row per global sequence length, with
                       the ideal lines
  weak_scaling.png     weak-scaling efficiency against ranks: time-based T(1) / T(R), and
                       work-normalised (attention FLOPs grow as N^2, so the work per rank grows
                       with R at a fixed length per rank): per-rank FLOP/s at R over that at 1
  time_breakdown.png   mean seconds per step of every run split into compute, exchange, I/O and
                       other, in seconds and as fractions
  exchange_bytes.png   bytes one rank sends per step, per strategy and sequence length (attention
                       exchanges and gradient/loss all-reduces stacked), the model as markers
  summary.md           the numbers as markdown tables, plus the failed runs

Definitions (per step, rank 0, means over all steps of the run so that the parts add up):
  exchange = exchange_seconds_per_step (all Comm seconds: attention exchanges, gradient,
             loss and gradient-norm all-reduces)
  compute  = (forward + backward phase seconds) / steps - attention exchange seconds / steps
  I/O      = snapshot, checkpoint and restart phase seconds / steps
  other    = total_seconds / steps - compute - exchange - I/O (data, optimizer, waiting)
The step times used for speed-up and efficiency are `step_seconds_median` (median over the
steps after the first).
"""

import argparse
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.lines as mlines  # noqa: E402
import matplotlib.patches as mpatches  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

STRATEGY_ORDER = ["local", "ring", "rsa", "ulysses", "hybrid"]
COLORS = {"local": "tab:gray", "ring": "tab:blue", "rsa": "tab:orange", "ulysses": "tab:green",
          "hybrid": "tab:purple"}
MARKERS = {"local": "s", "ring": "o", "rsa": "^", "ulysses": "D", "hybrid": "v"}
NON_ATTENTION_EXCHANGES = {"gradients.replicated", "gradients.wpe", "loss", "grad_norm"}
IO_PHASES = ("snapshot", "checkpoint", "restart", "io")
MIB = 2.0**20


def load(path):
    ok, failed, skipped = [], [], []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"{path}:{number}: not JSON: {e}")
            status = record.get("status", "ok")
            if status == "ok" and "step_seconds_median" in record:
                ok.append(record)
            elif status == "skipped":
                skipped.append(record)
            else:
                failed.append(record)
    return fastest_of_repeats(ok), failed, unique_skipped(skipped)


def config_key(record):
    s = record["study"]
    return (s["ranks"], s["strategy"], s.get("layout", "contiguous"), s["seq_len"])


def fastest_of_repeats(records):
    """One record per (study mode, configuration): the fastest median step time of all runs of that
    configuration (in either mode; noise from other processes only adds time). `repeats` holds every
    executed run's median step time."""
    best, times, modes = {}, defaultdict(dict), {}
    for r in records:
        key = config_key(r)
        run_id = r.get("run", {}).get("finished") or id(r)
        times[key][run_id] = r["step_seconds_median"]
        if key not in best or r["step_seconds_median"] < best[key]["step_seconds_median"]:
            best[key] = r
        modes.setdefault((r["study"]["mode"], key), r["study"])
    out = []
    for (mode, key), study in modes.items():
        out.append(dict(best[key], study=study, repeats=sorted(times[key].values())))
    return out


def unique_skipped(skipped):
    # A sweep continued with --resume may list a skipped study once per sweep: keep one.
    unique = {}
    for r in skipped:
        s = r.get("study", {})
        unique[(s.get("mode"), s.get("ranks"), s.get("strategy"), s.get("layout"), s.get("seq_len"))] = r
    return list(unique.values())


def series_name(record):
    """The strategy, with the layout when it is not the default."""
    s = record["study"]
    name = s["strategy"]
    if s.get("layout", "contiguous") != "contiguous" and s["ranks"] > 1:
        name += f" ({s['layout']})"
    return name


def strategy_of(name):
    return name.split(" ")[0]


def sort_key(name):
    base = strategy_of(name)
    return (STRATEGY_ORDER.index(base) if base in STRATEGY_ORDER else len(STRATEGY_ORDER), name)


def style(name):
    base = strategy_of(name)
    dashed = "(" in name
    return dict(color=COLORS.get(base, "black"), marker=MARKERS.get(base, "o"), linestyle="--" if dashed else "-")


def breakdown(record):
    """Mean seconds per step: compute, exchange, I/O, other (see the module docstring)."""
    steps = max(1, record.get("steps", 1))
    phases = record.get("phases", {})
    total = lambda name: phases.get(name, {}).get("total_s", 0.0)  # noqa: E731
    exchange = record.get("exchange_seconds_per_step", 0.0)
    attention_exchange = sum(v.get("seconds", 0.0) for k, v in record.get("exchange", {}).items()
                             if k not in NON_ATTENTION_EXCHANGES) / steps
    compute = max(0.0, (total("forward") + total("backward")) / steps - attention_exchange)
    io = sum(v.get("total_s", 0.0) for k, v in phases.items() if k.startswith(IO_PHASES)) / steps
    step = record.get("total_seconds", 0.0) / steps
    other = max(0.0, step - compute - exchange - io)
    return {"compute": compute, "exchange": exchange, "I/O": io, "other": other, "step_mean": step}


def machine_note(records):
    machines = sorted({r.get("machine", {}).get("description", "unknown machine") for r in records})
    loads = [x for r in records for x in (r.get("run", {}).get("load_average_before") or [])[:1]]
    loads += [x for r in records for x in (r.get("run", {}).get("load_average_after") or [])[:1]]
    model = {}
    if records:
        cfg = records[0].get("config", {}).get("model", {})
        model = {k: cfg.get(k) for k in ("d_model", "heads", "layers", "batch", "precision")}
    text = "Machine: " + "; ".join(machines)
    if loads:
        text += f" (shared: 1-min load average {min(loads):.1f}-{max(loads):.1f} around the runs)"
    if model:
        text += (f".  Model: d_model {model['d_model']}, {model['heads']} heads, {model['layers']} layers, "
                 f"batch {model['batch']}, {model['precision']}, causal.  One OpenBLAS thread per rank.")
    return text


def add_note(fig, text):
    fig.text(0.01, 0.005, text, fontsize=7.5, ha="left", va="bottom", wrap=True, color="0.25")


def baselines(records, mode):
    """(seq_len) -> median step seconds of the 1-rank run of that study mode."""
    out = {}
    for r in records:
        s = r["study"]
        if s["mode"] == mode and s["ranks"] == 1:
            out[s["seq_len"]] = r["step_seconds_median"]
    return out


def strong_points(records):
    """seq_len -> series name -> [(ranks, speed-up, efficiency, record)], the 1-rank point in every series."""
    base = baselines(records, "strong")
    out = defaultdict(lambda: defaultdict(list))
    strong = [r for r in records if r["study"]["mode"] == "strong"]
    for r in strong:
        s = r["study"]
        t1 = base.get(s["seq_len"])
        if t1 is None:
            continue
        speedup = t1 / r["step_seconds_median"]
        point = (s["ranks"], speedup, speedup / s["ranks"], r)
        if s["ranks"] == 1:
            names = sorted({series_name(x) for x in strong
                            if x["study"]["ranks"] > 1 and x["study"]["seq_len"] == s["seq_len"]}, key=sort_key)
            for name in names or ["local"]:
                out[s["seq_len"]][name].append(point)
        else:
            out[s["seq_len"]][series_name(r)].append(point)
    for per_len in out.values():
        for pts in per_len.values():
            pts.sort(key=lambda p: p[0])
    return out


def weak_points(records):
    """seq_per_rank -> series -> [(ranks, time efficiency, work efficiency, record)]."""
    ones = {}
    for r in records:
        s = r["study"]
        if s["mode"] == "weak" and s["ranks"] == 1:
            ones[s["seq_per_rank"]] = r
    out = defaultdict(lambda: defaultdict(list))
    weak = [r for r in records if r["study"]["mode"] == "weak"]
    for r in weak:
        s = r["study"]
        one = ones.get(s["seq_per_rank"])
        if one is None:
            continue
        time_eff = one["step_seconds_median"] / r["step_seconds_median"]
        rate = lambda x: x["flops_per_step"]["total"] / x["step_seconds_median"] / x["ranks"]  # noqa: E731
        work_eff = rate(r) / rate(one)
        point = (s["ranks"], time_eff, work_eff, r)
        if s["ranks"] == 1:
            names = sorted({series_name(x) for x in weak
                            if x["study"]["ranks"] > 1 and x["study"]["seq_per_rank"] == s["seq_per_rank"]},
                           key=sort_key)
            for name in names or ["local"]:
                out[s["seq_per_rank"]][name].append(point)
        else:
            out[s["seq_per_rank"]][series_name(r)].append(point)
    for per_len in out.values():
        for pts in per_len.values():
            pts.sort(key=lambda p: p[0])
    return out


def rank_axis(ax, ranks):
    ax.set_xscale("log", base=2)
    ax.set_xticks(ranks)
    ax.set_xticklabels([str(r) for r in ranks])
    ax.minorticks_off()
    lo, hi = min(ranks), max(ranks)
    ax.set_xlim(lo / 1.25, hi * 1.25)


CONTENDED_FRACTION = 0.6
BEST_PROBE = [0.0]  # the highest GEMM probe of the file, set in main()


def contended(record):
    """True when the run's GEMM probe (measured by bench mode right after the steps) is under
    CONTENDED_FRACTION of the best in the file: other processes had part of its core."""
    rate = record.get("bench", {}).get("gemm_gflops_per_rank")
    return bool(rate) and BEST_PROBE[0] > 0 and rate < CONTENDED_FRACTION * BEST_PROBE[0]


CONTENDED_NOTE = (f"Values marked * : that run or its 1-rank baseline was contended (GEMM probe after the steps under "
                  f"{100 * CONTENDED_FRACTION:.0f}% of the best run's): other processes took part of its core.")


def annotate_points(ax, pts, index, baseline, color):
    """Labels the value of every point after the first; a star marks a contended run or baseline."""
    for p in pts[1:]:
        star = "*" if contended(p[3]) or (baseline is not None and contended(baseline)) else ""
        ax.annotate(f"{p[index]:.2f}{star}", (p[0], p[index]), textcoords="offset points", xytext=(6, 2),
                    fontsize=7.5, color=color)


def plot_strong(records, outdir, note):
    data = strong_points(records)
    if not data:
        return None
    lengths = sorted(data)
    all_ranks = sorted({p[0] for per in data.values() for pts in per.values() for p in pts})
    fig, axes = plt.subplots(len(lengths), 2, figsize=(11, 3.9 * len(lengths) + 0.8), squeeze=False)
    for row, n in enumerate(lengths):
        ax_s, ax_e = axes[row]
        ax_s.plot(all_ranks, all_ranks, color="black", linestyle=":", linewidth=1, label="ideal")
        ax_e.axhline(1.0, color="black", linestyle=":", linewidth=1, label="ideal")
        for name in sorted(data[n], key=sort_key):
            pts = data[n][name]
            xs = [p[0] for p in pts]
            st = style(name)
            ax_s.plot(xs, [p[1] for p in pts], label=name, **st)
            ax_e.plot(xs, [p[2] for p in pts], label=name, **st)
            annotate_points(ax_s, pts, 1, pts[0][3] if pts[0][0] == 1 else None, st["color"])
            annotate_points(ax_e, pts, 2, pts[0][3] if pts[0][0] == 1 else None, st["color"])
        for ax in (ax_s, ax_e):
            rank_axis(ax, all_ranks)
            ax.set_xlabel("MPI ranks (sequence-parallel degree)")
            ax.grid(True, alpha=0.3)
        ax_s.set_ylabel("speed-up over 1 rank (local)")
        ax_e.set_ylabel("parallel efficiency (speed-up / ranks)")
        top = max([p[1] for pts in data[n].values() for p in pts] + all_ranks)
        ax_s.set_ylim(0, top * 1.15)
        ax_e.set_ylim(0, max(1.2, max(p[2] for pts in data[n].values() for p in pts) * 1.15))
        one = [p[3] for pts in data[n].values() for p in pts if p[0] == 1]
        flag = ""
        if one and contended(one[0]):
            flag = (f"\n1-rank baseline contended: GEMM probe {one[0]['bench']['gemm_gflops_per_rank']:.0f} of "
                    f"{BEST_PROBE[0]:.0f} GFLOP/s")
        ax_s.set_title(f"Strong scaling, global seq_len {n}: speed-up{flag}", fontsize=11 if not flag else 9.5)
        ax_e.set_title(f"Strong scaling, global seq_len {n}: efficiency{flag}", fontsize=11 if not flag else 9.5)
        ax_e.legend(fontsize=8, loc="lower left")
    fig.suptitle("miniattn strong scaling (step time = median over steps after the first)", fontsize=12)
    fig.tight_layout(rect=(0, 0.05, 1, 0.97))
    add_note(fig, note)
    path = outdir / "strong_scaling.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_weak(records, outdir, note):
    data = weak_points(records)
    if not data:
        return None
    all_ranks = sorted({p[0] for per in data.values() for pts in per.values() for p in pts})
    fig, (ax_t, ax_w) = plt.subplots(1, 2, figsize=(11, 4.8))
    ax_t.axhline(1.0, color="black", linestyle=":", linewidth=1, label="ideal")
    ax_w.axhline(1.0, color="black", linestyle=":", linewidth=1, label="ideal")
    lines_per_len = len(data) > 1
    for n in sorted(data):
        for name in sorted(data[n], key=sort_key):
            pts = data[n][name]
            xs = [p[0] for p in pts]
            st = style(name)
            label = f"{name}, {n}/rank" if lines_per_len else name
            ax_t.plot(xs, [p[1] for p in pts], label=label, **st)
            ax_w.plot(xs, [p[2] for p in pts], label=label, **st)
            annotate_points(ax_t, pts, 1, pts[0][3] if pts[0][0] == 1 else None, st["color"])
            annotate_points(ax_w, pts, 2, pts[0][3] if pts[0][0] == 1 else None, st["color"])
    lengths = ", ".join(str(n) for n in sorted(data))
    ax_t.set_title(f"time-based: T(1 rank) / T(R ranks)")
    ax_w.set_title("work-normalised: per-rank FLOP/s at R / at 1 rank")
    ys = [p[i] for per in data.values() for pts in per.values() for p in pts for i in (1, 2)]
    for ax in (ax_t, ax_w):
        rank_axis(ax, all_ranks)
        ax.set_xlabel("MPI ranks (global seq_len = per-rank x ranks)")
        ax.set_ylabel("weak-scaling efficiency")
        ax.set_ylim(0, max(1.2, max(ys) * 1.15))
        ax.grid(True, alpha=0.3)
    ax_w.legend(fontsize=8, loc="lower left")
    ax_t.text(0.02, 0.02, "causal attention work grows as N^2:\nat fixed N/rank the work per rank\n"
                          "grows with R, so time-based\nefficiency falls even if ideal",
              transform=ax_t.transAxes, fontsize=7.5, va="bottom", ha="left", color="0.3")
    fig.suptitle(f"miniattn weak scaling, seq_len per rank {lengths}", fontsize=12)
    fig.tight_layout(rect=(0, 0.06, 1, 0.96))
    add_note(fig, note)
    path = outdir / "weak_scaling.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def distinct_runs(records):
    """Each executed run once (weak-scaling lines that reuse a strong-scaling run are folded in)."""
    seen, runs = set(), []
    for r in records:
        s = r["study"]
        key = (s["ranks"], series_name(r), s["seq_len"], r.get("run", {}).get("finished"))
        if key in seen:
            continue
        seen.add(key)
        runs.append(r)
    runs.sort(key=lambda r: (r["study"]["seq_len"], r["study"]["ranks"], sort_key(series_name(r))))
    return runs


def run_label(r):
    s = r["study"]
    return f"N={s['seq_len']}\nR={s['ranks']} {series_name(r)}" + (" *" if contended(r) else "")


def plot_breakdown(records, outdir, note):
    runs = distinct_runs(records)
    if not runs:
        return None
    parts = ["compute", "exchange", "I/O", "other"]
    colors = {"compute": "tab:blue", "exchange": "tab:red", "I/O": "tab:olive", "other": "tab:gray"}
    rows = [breakdown(r) for r in runs]
    labels = [run_label(r) for r in runs]
    xs = list(range(len(runs)))
    width = max(8.0, 0.9 * len(runs) + 3)
    fig, (ax_a, ax_f) = plt.subplots(2, 1, figsize=(width, 8.6), sharex=True)
    bottom_a = [0.0] * len(runs)
    bottom_f = [0.0] * len(runs)
    for part in parts:
        vals = [row[part] for row in rows]
        fracs = [row[part] / sum(row[p] for p in parts) if sum(row[p] for p in parts) > 0 else 0 for row in rows]
        ax_a.bar(xs, vals, bottom=bottom_a, color=colors[part], label=part, width=0.7)
        ax_f.bar(xs, fracs, bottom=bottom_f, color=colors[part], label=part, width=0.7)
        for i, f in enumerate(fracs):
            if f >= 0.06:
                ax_f.text(i, bottom_f[i] + f / 2, f"{100 * f:.0f}%", ha="center", va="center", fontsize=7,
                          color="white")
        bottom_a = [b + v for b, v in zip(bottom_a, vals)]
        bottom_f = [b + v for b, v in zip(bottom_f, fracs)]
    ax_a.scatter(xs, [r["step_seconds_median"] for r in runs], marker="_", s=300, color="black", zorder=5,
                 label="median step (after the first)")
    ax_a.set_ylabel("seconds per step (mean over all steps)")
    ax_a.set_title("Time per training step by part (rank 0)")
    ax_a.legend(fontsize=8, loc="upper left")
    ax_a.grid(True, axis="y", alpha=0.3)
    ax_f.set_ylabel("fraction of the step")
    ax_f.set_ylim(0, 1)
    ax_f.set_title("Same, as fractions  (compute = forward + backward - attention exchange; exchange = all "
                   "Comm seconds; I/O = snapshot/checkpoint)", fontsize=9)
    ax_f.set_xticks(xs)
    ax_f.set_xticklabels(labels, fontsize=7.5)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    add_note(fig, note)
    path = outdir / "time_breakdown.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def exchange_split(record):
    attention = grads = attention_model = grads_model = 0.0
    for label, v in record.get("exchange", {}).items():
        if label in NON_ATTENTION_EXCHANGES:
            grads += v.get("bytes_per_step", 0.0)
            grads_model += v.get("bytes_per_step_model", 0.0)
        else:
            attention += v.get("bytes_per_step", 0.0)
            attention_model += v.get("bytes_per_step_model", 0.0)
    return attention, grads, attention_model, grads_model


def plot_bytes(records, outdir, note):
    runs = [r for r in distinct_runs(records) if r["study"]["ranks"] > 1]
    if not runs:
        return None
    rank_counts = sorted({r["study"]["ranks"] for r in runs})
    fig, axes = plt.subplots(1, len(rank_counts), figsize=(6.5 * len(rank_counts) + 2.8, 5.4), squeeze=False)
    for ax, ranks in zip(axes[0], rank_counts):
        sub = [r for r in runs if r["study"]["ranks"] == ranks]
        lengths = sorted({r["study"]["seq_len"] for r in sub})
        names = sorted({series_name(r) for r in sub}, key=sort_key)
        width = 0.8 / max(1, len(names))
        handles = []
        top = 0.0
        for j, name in enumerate(names):
            st = style(name)
            other_layout = "(" in name
            bar_style = dict(facecolor=st["color"], edgecolor="black" if other_layout else st["color"],
                             hatch=".." if other_layout else None, linewidth=0.8)
            handles.append(mpatches.Patch(label=name, **bar_style))
            for i, n in enumerate(lengths):
                match = [r for r in sub if r["study"]["seq_len"] == n and series_name(r) == name]
                x = i + (j - (len(names) - 1) / 2) * width
                if not match:
                    ax.text(x, 0, " not run", rotation=90, ha="center", va="bottom", fontsize=8, color="0.4")
                    continue
                att, grads, att_model, grads_model = exchange_split(match[0])
                ax.bar(x, att / MIB, width=width * 0.92, **bar_style)
                ax.bar(x, grads / MIB, bottom=att / MIB, width=width * 0.92, color=st["color"], alpha=0.35,
                       hatch="//", edgecolor="white", linewidth=0)
                ax.plot(x, (att_model + grads_model) / MIB, marker="o", markersize=7, markerfacecolor="none",
                        markeredgecolor="black", markeredgewidth=1.3, linestyle="none")
                ax.annotate(f"{(att + grads) / MIB:.2f}", (x, (att + grads) / MIB), textcoords="offset points",
                            xytext=(0, 7), ha="center", fontsize=7)
                top = max(top, (att + grads) / MIB, (att_model + grads_model) / MIB)
        handles.append(mpatches.Patch(facecolor="0.6", alpha=0.35, hatch="//", edgecolor="white",
                                      label="gradient + loss all-reduce"))
        handles.append(mlines.Line2D([], [], marker="o", markersize=7, markerfacecolor="none",
                                     markeredgecolor="black", linestyle="none", label="modelled total"))
        ax.set_ylim(0, top * 1.15 if top > 0 else 1)
        ax.set_xticks(range(len(lengths)))
        ax.set_xticklabels([f"seq_len {n}" for n in lengths])
        ax.set_ylabel("MiB sent by one rank per step")
        ax.set_title(f"{ranks} ranks: bytes exchanged per training step\n(bars measured by the Comm counters, "
                     f"circles the exchange model)", fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    add_note(fig, note)
    path = outdir / "exchange_bytes.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def fmt(x, digits=3):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    if abs(x) >= 100:
        return f"{x:.0f}"
    return f"{x:.{digits}g}"


def repeats(record):
    return ", ".join(f"{t:.3g}" for t in record.get("repeats", [record["step_seconds_median"]]))


def star(record, baseline):
    return "\\*" if contended(record) or (baseline is not None and contended(baseline)) else ""


def probe(record):
    """The GEMM rate bench mode measures right after the steps: with the cores to itself, this
    machine's rank reaches its full rate; a lower value means other processes took a share."""
    rate = record.get("bench", {}).get("gemm_gflops_per_rank")
    return f"{rate:.0f}" if rate else "-"


def write_summary(records, failed, skipped, outdir, note, figures):
    lines = ["# miniattn scaling study: numbers", "",
             note.replace("*", "\\*").replace("\n", "\n\n"), "",
             "Produced by `studies/plot_scaling.py` from the JSON lines of `studies/scaling.py`. "
             "Step time: median over the steps after the first; where a configuration was run more "
             "than once (column `runs`), the fastest run is used, since other processes only add time. "
             "Speed-up and efficiencies are relative to the 1-rank `local` run of the same study. "
             "Seconds are rank 0's; bytes are those one rank sends per step. `GEMM probe`: the "
             "single-rank GEMM rate that bench mode measures right after the steps, a gauge of how "
             "much of a core the run had (higher is less contended).", ""]
    strong = strong_points(records)
    if strong:
        lines += ["## Strong scaling", "",
                  "| seq_len | ranks | strategy | step s (median) | runs: step s | tokens/s | tokens/s/rank | speed-up | "
                  "efficiency | exchange s/step | exchange MiB/step (measured / model) | peak MiB/rank (max) | "
                  "GEMM probe GFLOP/s/rank |",
                  "|---:|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for n in sorted(strong):
            base = next((p[3] for pts in strong[n].values() for p in pts if p[0] == 1), None)
            rows = {}
            for name, pts in strong[n].items():
                for ranks, sp, eff, r in pts:
                    rows[(ranks, series_name(r))] = (sp, eff, r)
            for (ranks, name), (sp, eff, r) in sorted(rows.items(), key=lambda kv: (kv[0][0], sort_key(kv[0][1]))):
                lines.append(
                    f"| {n} | {ranks} | {name} | {fmt(r['step_seconds_median'], 4)} | {repeats(r)} | "
                    f"{fmt(r['tokens_per_second'])} | "
                    f"{fmt(r['tokens_per_second_per_rank'])} | {sp:.2f}{star(r, base)} | {eff:.2f}{star(r, base)} | "
                    f"{fmt(r.get('exchange_seconds_per_step', 0.0))} | "
                    f"{r.get('exchange_bytes_per_step_measured', 0) / MIB:.2f} / "
                    f"{r.get('exchange_bytes_per_step_model', 0) / MIB:.2f} | "
                    f"{r['peak_memory_bytes_per_rank']['max'] / MIB:.0f} | {probe(r)} |")
        lines.append("")
    weak = weak_points(records)
    if weak:
        lines += ["## Weak scaling", "",
                  "| seq_len/rank | ranks | global seq_len | strategy | step s (median) | tokens/s/rank | "
                  "GFLOP/s/rank | time efficiency | work-normalised efficiency |",
                  "|---:|---:|---:|---|---:|---:|---:|---:|---:|"]
        for n in sorted(weak):
            base = next((p[3] for pts in weak[n].values() for p in pts if p[0] == 1), None)
            rows = {}
            for name, pts in weak[n].items():
                for ranks, te, we, r in pts:
                    rows[(ranks, series_name(r))] = (te, we, r)
            for (ranks, name), (te, we, r) in sorted(rows.items(), key=lambda kv: (kv[0][0], sort_key(kv[0][1]))):
                gflops = r["flops_per_step"]["total"] / r["step_seconds_median"] / r["ranks"] * 1e-9
                lines.append(f"| {n} | {ranks} | {r['study']['seq_len']} | {name} | {fmt(r['step_seconds_median'], 4)} | "
                             f"{fmt(r['tokens_per_second_per_rank'])} | {gflops:.2f} | {te:.2f}{star(r, base)} | "
                             f"{we:.2f}{star(r, base)} |")
        lines.append("")
    runs = distinct_runs(records)
    if runs:
        lines += ["## Time per step by part (mean over all steps, rank 0)", "",
                  "| seq_len | ranks | strategy | step s (mean) | compute s | exchange s | I/O s | other s | "
                  "exchange fraction | 1-min load avg before / after | GEMM probe GFLOP/s/rank |",
                  "|---:|---:|---|---:|---:|---:|---:|---:|---:|---|---:|"]
        for r in runs:
            b = breakdown(r)
            run = r.get("run", {})
            la = run.get("load_average_before") or [float("nan")]
            lb = run.get("load_average_after") or [float("nan")]
            frac = b["exchange"] / b["step_mean"] if b["step_mean"] > 0 else 0.0
            lines.append(f"| {r['study']['seq_len']} | {r['study']['ranks']} | {series_name(r)} | "
                         f"{fmt(b['step_mean'], 4)} | {fmt(b['compute'])} | {fmt(b['exchange'])} | {fmt(b['I/O'])} | "
                         f"{fmt(b['other'])} | {100 * frac:.1f}% | {la[0]:.1f} / {lb[0]:.1f} | {probe(r)} |")
        lines.append("")
        lines += ["## Bytes exchanged per step (one rank)", "",
                  "| seq_len | ranks | strategy | attention MiB (measured / model) | gradients+loss MiB "
                  "(measured / model) |", "|---:|---:|---|---:|---:|"]
        for r in runs:
            if r["study"]["ranks"] < 2:
                continue
            att, grads, att_m, grads_m = exchange_split(r)
            lines.append(f"| {r['study']['seq_len']} | {r['study']['ranks']} | {series_name(r)} | "
                         f"{att / MIB:.2f} / {att_m / MIB:.2f} | {grads / MIB:.3f} / {grads_m / MIB:.3f} |")
        lines.append("")
    for title, group in (("Skipped runs (studies/scaling.py --limit)", skipped), ("Failed runs", failed)):
        if not group:
            continue
        lines += [f"## {title}", "", "| mode | ranks | strategy | layout | seq_len | reason |",
                  "|---|---:|---|---|---:|---|"]
        for r in group:
            s = r.get("study", {})
            err = str(r.get("error", "")).splitlines()[0].replace("|", "\\|")[:200]
            lines.append(f"| {s.get('mode')} | {s.get('ranks')} | {s.get('strategy')} | {s.get('layout', '-')} | "
                         f"{s.get('seq_len')} | {err} |")
        lines.append("")
    if figures:
        lines += ["## Figures", ""] + [f"![{p.stem}]({p.name})" for p in figures] + [""]
    path = outdir / "summary.md"
    path.write_text("\n".join(lines))
    return path


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", help="JSON lines written by studies/scaling.py")
    p.add_argument("--outdir", default=str(Path(__file__).resolve().parent / "scaling"), help="where the PNGs and summary.md go (default: %(default)s)")
    args = p.parse_args(argv)
    records, failed, skipped = load(args.results)
    if not records:
        sys.exit(f"{args.results}: no successful runs")
    outdir = Path(args.outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    probes = [r.get("bench", {}).get("gemm_gflops_per_rank") or 0.0 for r in records]
    BEST_PROBE[0] = max(probes)
    note = machine_note(records)
    if any(contended(r) for r in records):
        note += "\n" + CONTENDED_NOTE
    figures = [f for f in (plot_strong(records, outdir, note), plot_weak(records, outdir, note),
                           plot_breakdown(records, outdir, note), plot_bytes(records, outdir, note)) if f]
    summary = write_summary(records, failed, skipped, outdir, note, figures)
    for path in figures + [summary]:
        print(path)
    if failed:
        print(f"{len(failed)} failed run(s) listed in {summary}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
