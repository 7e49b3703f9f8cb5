#!/usr/bin/env python3
"""run.mode predict through the executable: the table and JSON for a machine
file, the deck's own prediction, and clean errors (exit status 2, naming the
key) for a missing run.machine, an unreadable file and a malformed one.

With MPIEXEC, also a pipelined deck (parallel.pp 2, train.micro_batches 4)
on 2 ranks: its 1F1B span, bubble and stages in the deck's own prediction.

usage: check_predict_mode.py MINIATTN MACHINE.yaml [MPIEXEC]
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

DECK = """model:
  vocab: 256
  d_model: 256
  heads: 4
  layers: 2
  seq_len: 4096
  batch: 1
  causal: true
  precision: fp32
parallel:
  strategy: ring
  layout: zigzag
run:
  mode: predict
"""

STRATEGIES = ["local", "ring", "rsa", "ulysses", "hybrid", "allgather", "tensor_parallel"]


def run(exe, deck, sets, launcher=()):
    args = list(launcher) + [exe, deck] + [a for s in sets for a in ("--set", s)]
    start = time.time()
    proc = subprocess.run(args, capture_output=True, text=True, timeout=60)
    return proc, time.time() - start


def check(condition, message):
    if not condition:
        print("FAIL:", message)
        sys.exit(1)


def result_of(proc):
    check(proc.returncode == 0, f"predict failed ({proc.returncode}): {proc.stderr}")
    lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
    check(len(lines) == 1, f"one RESULT line, got {len(lines)}")
    return json.loads(lines[0][len("RESULT "):])


def check_pipeline(exe, deck, machine, mpiexec):
    """pp 2 x 4 micro-batches on 2 ranks: (m + pp - 1) slots of the slowest
    stage, then stage 0's reductions and update; rank counts pp cannot divide
    are invalid with the validator's message; interleaved over 2 chunks a
    stage, (m + (pp - 1) / v) slots and the interleaved bubble."""
    sets = [f"run.machine={machine}", "parallel.pp=2", "train.micro_batches=4", "model.batch=4",
            "run.predict_seq_lens=4096"]
    proc, _ = run(exe, deck, sets, [mpiexec, "-n", "2"])
    result = result_of(proc)
    check("pp 2 stages, 4 micro-batches, modelled bubble 0.200" in proc.stdout, f"the table's header: {proc.stdout}")
    own = result["prediction_for_deck"]
    check(own["valid"] and own["pp"] == 2 and own["micro_batches"] == 4 and own["sp"] == 1, f"own: {own}")
    check(abs(own["bubble_fraction"] - 1 / 5) < 1e-15, f"bubble (pp-1)/(m+pp-1): {own['bubble_fraction']}")
    stages = own["stage_seconds_per_micro_batch"]
    check(len(stages) == 2 and min(stages) > 0, f"two stages: {stages}")
    span = 5 * max(stages)
    check(abs(own["pipeline_seconds"] - span) <= 1e-12 * span, f"span {own['pipeline_seconds']} != 5 x {max(stages)}")
    check(abs(own["bubble_seconds"] - (span - 4 * stages[0])) <= 1e-12 * span, "stage 0's idle time in the span")
    check(own["pipeline_seconds"] < own["step_seconds"], "the update after the pipeline")
    check("pipeline.activations" in own["exchange"], f"stage 0 sends activations: {own['exchange']}")
    check(len(result["predictions"]) > 0, "predictions for the pipelined deck")
    for row in result["predictions"]:
        check(row["pp"] == 2, f"the deck's pp in every row: {row}")
        for name, s in row["strategies"].items():
            if row["ranks"] == 1:
                check(not s["valid"] and "parallel.pp" in s["problem"], f"1 rank cannot hold 2 stages: {name} {s}")
            elif name == "local" and s["valid"]:
                check(s["dp"] * s["pp"] * s["tp"] == row["ranks"], f"local fills the ranks: {row['ranks']} {s}")
    # Interleaved over 2 chunks a stage (4 layers): (v m + pp - 1) passes of half a stage's micro-batch.
    proc, _ = run(exe, deck, sets + ["parallel.virtual_stages=2", "model.layers=4"], [mpiexec, "-n", "2"])
    check("pp 2 stages of 2 chunks (interleaved), 4 micro-batches, modelled bubble 0.111" in proc.stdout,
          f"the interleaved table's header: {proc.stdout}")
    own = result_of(proc)["prediction_for_deck"]
    check(own["valid"] and own["virtual_stages"] == 2, f"own: {own}")
    check(abs(own["bubble_fraction"] - 1 / 9) < 1e-15, f"bubble (pp-1)/(vm+pp-1): {own['bubble_fraction']}")
    span = 4.5 * max(own["stage_seconds_per_micro_batch"])
    check(abs(own["pipeline_seconds"] - span) <= 1e-12 * span, f"span {own['pipeline_seconds']} != 4.5 x the slowest")


def main():
    exe, machine = sys.argv[1], sys.argv[2]
    mpiexec = sys.argv[3] if len(sys.argv) > 3 else None
    with tempfile.TemporaryDirectory() as tmp:
        deck = os.path.join(tmp, "deck.yaml")
        with open(deck, "w") as f:
            f.write(DECK)
        result_path = os.path.join(tmp, "predict.json")

        # The full default table: 13 rank counts x 4 sequence lengths, in well under a second of work.
        proc, seconds = run(exe, deck, [f"run.machine={machine}", f"run.result={result_path}"])
        check(proc.returncode == 0, f"predict failed ({proc.returncode}): {proc.stderr}")
        check(seconds < 10, f"predict took {seconds:.1f} s")
        lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
        check(len(lines) == 1, "one RESULT line")
        result = json.loads(lines[0][len("RESULT "):])
        with open(result_path) as f:
            check(json.load(f) == result, "run.result holds the RESULT line")
        check(result["mode"] == "predict", "mode")
        predictions = result["predictions"]
        check(len(predictions) == 13 * 4, f"13 rank counts x 4 lengths, got {len(predictions)}")
        check([p["ranks"] for p in predictions[:13]] == [2 ** k for k in range(13)], "ranks 1..4096")
        check(sorted({p["seq_len"] for p in predictions}) == [65536, 262144, 1048576, 4194304], "seq_lens")
        for p in predictions:
            check(set(p["strategies"]) == set(STRATEGIES), "every strategy")
            # The deck's pipeline (none here) goes with the row and every choice.
            check(p["pp"] == 1 and p["micro_batches"] == 1, f"the deck's pp and micro_batches: {p}")
            for name, s in p["strategies"].items():
                check(s["pp"] == 1 and s["micro_batches"] == 1, f"{name}: pp and micro_batches: {s}")
                check(not s["valid"] or s["bubble_fraction"] == 0, f"{name}: no pipeline, no bubble: {s}")
            best = p["best"]
            fitting = {name: s["step_seconds"] for name, s in p["strategies"].items() if s["valid"] and s["fits"]}
            if fitting:
                check(fitting.get(best) == min(fitting.values()), f"best is a fastest that fits: {p}")
            else:
                check(best is None, "no best when nothing fits")
            ring = p["strategies"]["ring"]
            check(ring["valid"], "ring is always possible here")
            check(ring["step_seconds"] > 0 and ring["memory_bytes_per_rank"] > 0, "positive figures")
            if p["ranks"] > 1:
                check(not p["strategies"]["local"]["valid"], "local needs the batch split over ranks")
            if p["ranks"] > 4:
                check(not p["strategies"]["ulysses"]["valid"], "ulysses needs heads % sp == 0")
        # Sequence parallelism pays: 4096 ranks run a 4M-token step faster than 4 ranks.
        by = {(p["ranks"], p["seq_len"]): p for p in predictions}
        check(by[(4096, 4194304)]["strategies"]["ring"]["step_seconds"]
              < by[(4, 4194304)]["strategies"]["ring"]["step_seconds"] / 100, "ring scales")
        # RSA's N x N / P rows do not fit at 4M tokens on 4 GPUs.
        check(not by[(4, 4194304)]["strategies"]["rsa"]["fits"], "rsa runs out of memory")
        # The longest fitting sequence agrees with every fits / does-not-fit cell of the table.
        longest = {e["ranks"]: e["strategies"] for e in result["longest_seq_len"]}
        check(sorted(longest) == [2 ** k for k in range(13)], "longest seq_len for ranks 1..4096")
        for p in predictions:
            for name, s in p["strategies"].items():
                if s["valid"]:
                    n = longest[p["ranks"]][name]
                    check(s["fits"] == (p["seq_len"] <= n), f"{name} on {p['ranks']} ranks: N={p['seq_len']} "
                          f"fits={s['fits']} but the longest that fits is {n}")
        check(longest[4096]["ring"] > longest[4]["ring"] * 100, "ring's longest sequence grows with the ranks")
        # All-gather attention holds the whole sequence's K, V, dK and dV on every rank.
        check(longest[4096]["allgather"] < longest[4096]["ring"] / 2,
              "allgather's O(N) buffers cap its sequence well below the ring's")
        # run.memory_per_rank_gib replaces the machine's memory: half the memory, a shorter longest sequence.
        proc_half, _ = run(exe, deck, [f"run.machine={machine}", "run.predict_max_ranks=2",
                                       "run.predict_seq_lens=4096", "run.memory_per_rank_gib=0.5"])
        check(proc_half.returncode == 0, proc_half.stderr)
        half = json.loads([l for l in proc_half.stdout.splitlines() if l.startswith("RESULT ")][0][7:])
        check(half["machine"]["memory_bytes_per_rank"] == 0.5 * 2 ** 30, "run.memory_per_rank_gib overrides")
        check(0 < half["longest_seq_len"][1]["strategies"]["ring"] < longest[2]["ring"], "less memory, shorter")

        own = result["prediction_for_deck"]
        check(own["strategy"] == "ring" and own["ranks"] == 1 and own["seq_len"] == 4096, "the deck's own prediction")
        check(own["valid"] and own["step_seconds"] > 0, "a valid own prediction")
        check(set(own["compute"]) == {"gemm", "attention_forward", "attention_backward", "elementwise", "optimizer"},
              "compute breakdown")
        check(own["pp"] == 1 and own["micro_batches"] == 1 and own["bubble_fraction"] == 0, "the deck's pipeline")
        check(len(own["stage_seconds_per_micro_batch"]) == 1 and own["bubble_seconds"] == 0
              and 0 < own["pipeline_seconds"] < own["step_seconds"], "one stage: the micro-batch, then the update")

        # Deterministic: the same prediction twice.
        proc2, _ = run(exe, deck, [f"run.machine={machine}"])
        again = json.loads([l for l in proc2.stdout.splitlines() if l.startswith("RESULT ")][0][len("RESULT "):])
        check(again["predictions"] == predictions, "deterministic")

        # One configuration: exactly one entry.
        proc, _ = run(exe, deck, [f"run.machine={machine}", "run.predict_max_ranks=1", "run.predict_seq_lens=4096"])
        check(proc.returncode == 0, proc.stderr)
        one = json.loads([l for l in proc.stdout.splitlines() if l.startswith("RESULT ")][0][7:])
        check(len(one["predictions"]) == 1, "one entry")

        # Errors: exit status 2, the key named.
        def expect_error(sets, needle, deck_path=deck):
            proc, _ = run(exe, deck_path, sets)
            check(proc.returncode == 2, f"{sets}: exit status {proc.returncode}, stderr {proc.stderr}")
            check(needle in proc.stderr, f"{sets}: '{needle}' not in '{proc.stderr}'")

        expect_error([], "run.machine: required for run.mode predict")
        expect_error(["run.machine=/nonexistent/m.yaml"], "run.machine: cannot read the machine file /nonexistent/m.yaml")
        bad = os.path.join(tmp, "bad.yaml")
        with open(machine) as f:
            text = f.read()
        with open(bad, "w") as f:
            f.write(text.replace("gemm_flops:", "gemm_flop:"))
        expect_error([f"run.machine={bad}"], "gemm_flop: unknown key")
        with open(bad, "w") as f:
            f.write("\n".join(l for l in text.splitlines() if not l.startswith("ranks_per_node")))
        expect_error([f"run.machine={bad}"], f"run.machine: {bad}: ranks_per_node: missing")
        expect_error([f"run.machine={machine}", "model.precision=fp64"], "precision: the rates are for fp32")
        expect_error([f"run.machine={machine}", "run.predict_seq_lens=4096,x"], "run.predict_seq_lens: expected")
        expect_error([f"run.machine={machine}", "run.predict_max_ranks=0"], "run.predict_max_ranks: must be >= 1")
        expect_error(["run.mode=calibrate"], "run.machine: required for run.mode calibrate")
        expect_error([f"run.machine={machine}", "parallel.pp=2"], "parallel.pp: must divide the ranks")
        check_bf16(exe, deck, machine, expect_error)
        check_calibrate_bf16(exe, tmp, expect_error)
        if mpiexec:
            check_pipeline(exe, deck, machine, mpiexec)
    print("predict mode: OK")


def check_calibrate_bf16(exe, tmp, expect_error):
    """run.mode calibrate in bf16 (a tiny model: seconds) writes a bf16 machine
    file naming the kernel it timed, with its rates on tiles on a mask's edge;
    predict takes a bf16 deck on it and refuses fp32."""
    deck = os.path.join(tmp, "tiny_bf16.yaml")
    with open(deck, "w") as f:
        f.write("model: {vocab: 64, d_model: 32, heads: 4, layers: 1, seq_len: 256, batch: 1, precision: bf16}\n"
                "parallel: {strategy: local}\nrun: {mode: calibrate}\n")
    machine = os.path.join(tmp, "calibrated_bf16.yaml")
    proc, _ = run(exe, deck, [f"run.machine={machine}"])
    check(proc.returncode == 0, proc.stderr)
    # auto's host kernel for bf16: fused where the core has bf16 dot products and no AMX, else gemm.
    timed = json.loads([l for l in proc.stdout.splitlines() if l.startswith("RESULT ")][0][7:])["attention_kernel"]
    check(timed in ("fused", "gemm"), f"calibrate timed {timed}, not a host kernel")
    with open(machine) as f:
        text = f.read()
    check('precision: "bf16"' in text and f'attention_kernel: "{timed}"' in text,
          f"a bf16 machine file of the {timed} kernel: {text}")
    edge = re.findall(r"^attention_edge_flops_(?:forward|backward): (\S+)$", text, re.M)
    check(len(edge) == 2 and all(float(rate) > 0 for rate in edge), f"the host kernel's edge-tile rates: {text}")
    proc, _ = run(exe, deck, ["run.mode=predict", f"run.machine={machine}", "run.predict_max_ranks=2",
                              "run.predict_seq_lens=1024"])
    check(proc.returncode == 0, proc.stderr)
    own = json.loads([l for l in proc.stdout.splitlines() if l.startswith("RESULT ")][0][7:])["prediction_for_deck"]
    check(own["valid"] and own["step_seconds"] > 0 and "cudnn workspace" not in own["memory_parts"],
          f"bf16 predicted on its own calibration, {timed} attention: {own}")
    expect_error(["run.mode=predict", f"run.machine={machine}", "model.precision=fp32"],
                 "precision: the rates are for bf16 but model.precision is fp32", deck_path=deck)


def check_bf16(exe, deck, machine, expect_error):
    """bf16 on a bf16 machine file whose attention rates are cudnn's: cuDNN's
    workspace in the memory, cut to fit a smaller memory; refusals when the
    precisions or the kernels differ."""
    bf16_machine = os.path.join(os.path.dirname(machine), "gpu_cluster_4x_bf16.yaml")

    def own(sets):
        proc, _ = run(exe, deck, [f"run.machine={bf16_machine}", "model.precision=bf16", "parallel.strategy=local",
                                  "parallel.layout=contiguous", "run.predict_max_ranks=1"] + sets)
        check(proc.returncode == 0, proc.stderr)
        return json.loads([l for l in proc.stdout.splitlines() if l.startswith("RESULT ")][0][7:])["prediction_for_deck"]

    small = own([])
    check(small["valid"] and small["fits"], "bf16 on the bf16 machine file")
    # 4096 rows: 2 H N^2 bytes of dS and its sums, whole (the block fits).
    check(small["memory_parts"]["cudnn workspace"] == 2 * 4 * 4096 * 4096 + 4 * 4 * 4096 + 256,
          f"the deterministic workspace of the whole block: {small['memory_parts']}")
    atomic = own(["kernels.deterministic=false"])
    check(atomic["memory_parts"]["cudnn workspace"] == 4 * 4 * 4096 * 64 + 4 * 4 * 4096 + 256,
          f"the non-deterministic workspace: {atomic['memory_parts']}")
    # A million tokens: the whole block's dS (8 TiB) is cut to what 32 GiB leave, and more memory cuts less;
    # 16 GiB hold too little beside the rest of the plan even for calls of 64 rows.
    million = ["model.seq_len=1048576", "run.predict_seq_lens=1048576"]
    at_32 = own(million + ["run.memory_per_rank_gib=32"])
    at_64 = own(million + ["run.memory_per_rank_gib=64"])
    check(at_32["fits"] and at_64["fits"], "a million tokens fit in 32 GiB and in 64 GiB")
    check(at_32["memory_bytes_per_rank"] <= 32 * 2 ** 30, "within the 32 GiB")
    check(0 < at_32["memory_parts"]["cudnn workspace"] < at_64["memory_parts"]["cudnn workspace"],
          "more memory, a larger workspace (fewer cuts)")
    check(not own(million + ["run.memory_per_rank_gib=16"])["fits"], "16 GiB are too few for a million tokens")
    limited = own(million + ["run.memory_per_rank_gib=64", "kernels.cudnn_workspace_mib=1024"])
    check(limited["memory_parts"]["cudnn workspace"] <= 2 ** 30, "kernels.cudnn_workspace_mib bounds it")

    expect_error([f"run.machine={bf16_machine}"], "precision: the rates are for bf16 but model.precision is fp32")
    expect_error([f"run.machine={machine}", "model.precision=bf16"],
                 "precision: the rates are for fp32 but model.precision is bf16")
    expect_error([f"run.machine={bf16_machine}", "model.precision=bf16", "kernels.attention=gemm"],
                 "attention_kernel: the attention rates are for cudnn but kernels.attention is gemm")


if __name__ == "__main__":
    main()
