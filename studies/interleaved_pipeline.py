"""The interleaved pipeline (PTD-P, Narayanan et al. 2021) for studies/tp_vs_sp_study.py
(--only interleaved): the bubble measured at pp = 2 on 2 ranks for v = 1, 2, 4 chunks a stage beside
(pp - 1) / (v m + pp - 1), and the predicted step of PTD-P's layout at 64 to 1024 ranks for v = 1, 2, 4.
Writes interleaved.md / .json and gives the figure a panel (bubble_panel)."""
import json
import os

# A GPT-like model for PTD-P's own layout (TP inside a node, pipeline stages across, DP outside), on the
# GPU description: the step of a fixed global batch as DP grows (predict's `local` rows).
PTDP_MODEL = {"vocab": 32000, "d_model": 2048, "heads": 16, "layers": 32, "ffn": 0, "causal": "true",
              "precision": "fp32"}


def interleaved_measured(args, run_miniattn, model):
    """pp = 2 on 2 ranks, v = 1, 2, 4 chunks a stage, m = 4 and 8 micro-batches of one sample each: the
    bubble each rank measured (mean over ranks of the median over steps) beside (pp - 1) / (v m + pp - 1)."""
    rows = []
    for micro in (4, 8):
        for v in (1, 2, 4):
            sets = {"model.batch": micro, "model.seq_len": args.interleaved_seq_len, "run.mode": "bench",
                    "train.steps": args.steps, "parallel.pp": 2, "parallel.virtual_stages": v,
                    "train.micro_batches": micro}
            _, r = run_miniattn(args, 2, sets, model=model)
            p = r["pipeline"]
            rows.append({"micro_batches": micro, "virtual_stages": v,
                         "bubble_measured": p["bubble_fraction_measured"]["mean"],
                         "bubble_measured_min": p["bubble_fraction_measured"]["min"],
                         "bubble_measured_max": p["bubble_fraction_measured"]["max"],
                         "bubble_model": p["bubble_fraction_model"], "step_seconds": r["step_seconds_median"],
                         "pipeline_bytes": r["exchange"].get("pipeline.activations", {}).get("bytes_per_step", 0),
                         "allocated_bytes_most_of_any_rank": r["memory"]["allocated_bytes_most_of_any_rank"]})
            print(f"interleaved pp 2 v {v} m {micro}: bubble {rows[-1]['bubble_measured']:.3f} measured, "
                  f"{rows[-1]['bubble_model']:.3f} modelled, step {rows[-1]['step_seconds']:.3f} s", flush=True)
    return rows


def interleaved_predicted(args, run_miniattn):
    """PTD-P's layout on the GPU description: tp = 4 (a node), pp = 4, v = 1, 2, 4, a global batch of
    --ptdp-batch over DP = ranks / 16, predicted at 64 to 1024 ranks (predict on 16 ranks)."""
    rows = []
    for v in (1, 2, 4):
        sets = {"run.mode": "predict", "run.machine": args.gpu_machine, "run.predict_max_ranks": 1024,
                "run.predict_seq_lens": args.ptdp_seq_len, "model.seq_len": args.ptdp_seq_len,
                "model.batch": args.ptdp_batch, "parallel.strategy": "local", "parallel.tp": 4, "parallel.pp": 4,
                "parallel.virtual_stages": v, "train.micro_batches": args.ptdp_micro_batches, "train.steps": 0}
        _, r = run_miniattn(args, 16, sets, model=PTDP_MODEL)
        for row in r["predictions"]:
            local = row["strategies"]["local"]
            if row["ranks"] < 64 or not local["valid"]:
                continue
            rows.append({"ranks": row["ranks"], "virtual_stages": v, "dp": local["dp"],
                         "step_seconds": local["step_seconds"], "bubble_fraction": local["bubble_fraction"],
                         "memory_bytes_per_rank": local["memory_bytes_per_rank"], "fits": local["fits"]})
    return rows


def interleaved_tables(measured, predicted, args, model):
    lines = ["# The interleaved pipeline (PTD-P)", "",
             f"Measured here: pp = 2 on 2 ranks (one core each), {model['layers']} layers "
             f"(D = {model['d_model']}, non-causal), N = {args.interleaved_seq_len}, one sample a "
             f"micro-batch, run.mode bench, {args.steps} steps (bubble: each rank's idle time over the "
             "pipeline's span, median over the steps after the first, mean over the ranks).", "",
             "| micro-batches | v | bubble measured (min-max over ranks) | modelled (p-1)/(vm+p-1) | "
             "measured / modelled | step s | activations sent by stage 0 per step | memory of the fullest rank |",
             "|---|---|---|---|---|---|---|---|"]
    for r in measured:
        lines.append(f"| {r['micro_batches']} | {r['virtual_stages']} | {r['bubble_measured']:.3f} "
                     f"({r['bubble_measured_min']:.3f}-{r['bubble_measured_max']:.3f}) | {r['bubble_model']:.3f} | "
                     f"{r['bubble_measured'] / r['bubble_model']:.2f} | {r['step_seconds']:.3f} | "
                     f"{mib(r['pipeline_bytes'])} MiB | {mib(r['allocated_bytes_most_of_any_rank'])} MiB |")
    lines += ["", f"Predicted on {args.gpu_machine}: PTD-P's layout (TP 4 inside a node, 4 pipeline stages, DP "
              f"over the rest) for a GPT-like model (D = {PTDP_MODEL['d_model']}, {PTDP_MODEL['heads']} heads, "
              f"{PTDP_MODEL['layers']} layers, causal, fp32), N = {args.ptdp_seq_len}, a global batch of "
              f"{args.ptdp_batch} in {args.ptdp_micro_batches} micro-batches per DP replica:", "",
              "| ranks | DP | v = 1 step s (bubble) | v = 2 | v = 4 | memory per rank v = 1 / 2 / 4 |",
              "|---|---|---|---|---|---|"]
    by_ranks = {}
    for r in predicted:
        by_ranks.setdefault(r["ranks"], {})[r["virtual_stages"]] = r
    for ranks, cells in sorted(by_ranks.items()):
        steps = [f"{cells[v]['step_seconds']:.3f} ({cells[v]['bubble_fraction']:.3f})" if v in cells else "-"
                 for v in (1, 2, 4)]
        memory = " / ".join(f"{cells[v]['memory_bytes_per_rank'] / 2**30:.1f} GiB" for v in (1, 2, 4) if v in cells)
        dp = next(iter(cells.values()))["dp"]
        lines.append(f"| {ranks} | {dp} | " + " | ".join(steps) + f" | {memory} |")
    return "\n".join(lines) + "\n"


def mib(x):
    return f"{x / 2**20:,.1f}"


def study(args, run_miniattn, model):
    """Both parts; `run_miniattn(args, ranks, settings, model=...)` runs a deck and returns (status, RESULT)."""
    model = dict(model, layers=8)  # 8 layers: v = 4 chunks of one layer on each of 2 stages
    measured = interleaved_measured(args, run_miniattn, model)
    predicted = interleaved_predicted(args, run_miniattn)
    with open(os.path.join(args.out, "interleaved.json"), "w") as f:
        json.dump({"measured": measured, "predicted": predicted}, f, indent=1)
    with open(os.path.join(args.out, "interleaved.md"), "w") as f:
        f.write(interleaved_tables(measured, predicted, args, model))


def bubble_panel(ax, data):
    """Measured bubble against the model's, per v, for each micro-batch count."""
    for micro, marker, color in ((4, "o", "tab:blue"), (8, "s", "tab:green")):
        rows = [r for r in data["measured"] if r["micro_batches"] == micro]
        v = [r["virtual_stages"] for r in rows]
        ax.plot(v, [r["bubble_measured"] for r in rows], marker=marker, color=color, label=f"measured, m = {micro}")
        ax.plot(v, [r["bubble_model"] for r in rows], marker=marker, color=color, linestyle="--",
                label=f"(p-1)/(vm+p-1), m = {micro}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("chunks a stage (v), pp = 2")
    ax.set_title("interleaved pipeline: bubble fraction (measured on 2 ranks)", fontsize=9)
    ax.legend(fontsize=7)
