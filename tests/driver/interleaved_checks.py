#!/usr/bin/env python3
"""End-to-end checks of the interleaved pipeline (parallel.virtual_stages,
PTD-P's interleaved 1F1B), against the 1-rank run and plain 1F1B:

  stages      pp = 2 on 2 ranks, v = 1, 2 and 4 (8 layers, 4 micro-batches): the
              loss curve, parameters and gradients within 1e-10 of one rank; a
              repeat of v = 2 bitwise equal; every rank's plan equal to its
              allocation and its bytes to the exchange model; the point-to-point
              bytes v times 1F1B's (the model's last chunk sends no activations,
              its first no gradients); the report's chunks, slots and modelled
              bubble (pp - 1) / (v m + pp - 1)
  combined    4 ranks: interleaving beside TP (with and without its sequence
              parallelism), beside ring attention with packed documents, and
              beside DP in bf16; each within rounding of its one-rank run, the
              plan and bytes holding on every rank

usage: interleaved_checks.py MINIATTN MPIEXEC CHECK
"""
import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from driver_checks import Check, compare_losses, compare_snapshots, fail, require_plan_and_bytes  # noqa: E402

DECK = """\
model: {vocab: 32, d_model: 32, heads: 4, layers: 8, seq_len: 16, batch: 8, causal: true, precision: fp64}
parallel: {strategy: local, dp: 1}
train: {steps: 3, lr: 1.0e-2, optimizer: adamw, weight_decay: 0.1, grad_clip: 0.5, seed: 11, micro_batches: 4}
kernels: {query_block: 4, key_block: 3}
run: {mode: train, log_every: 1}
"""


def pipeline_bytes(run):
    exchange = run["exchange"]
    return tuple(exchange.get(label, {}).get("bytes_per_step", 0.0)
                 for label in ("pipeline.activations", "pipeline.gradients"))


def require_report(run, pp, v, micro):
    p = run["pipeline"]
    if (p["stages"], p["virtual_stages"], p["micro_batches"]) != (pp, v, micro):
        fail(f"v = {v}: the report says {p['stages']} stages of {p['virtual_stages']} chunks, "
             f"{p['micro_batches']} micro-batches")
    if p["schedule"] != ("1F1B" if v == 1 else "interleaved 1F1B"):
        fail(f"v = {v}: schedule {p['schedule']}")
    model = (pp - 1) / (v * micro + pp - 1)
    if abs(p["bubble_fraction_model"] - model) > 1e-15:
        fail(f"v = {v}: modelled bubble {p['bubble_fraction_model']}, expected {model}")
    layers = run["config"]["model"]["layers"] // (pp * v)
    expected = [[[(c * pp + s) * layers, (c * pp + s + 1) * layers] for c in range(v)] for s in range(pp)]
    got = p["stage_layers"] if v > 1 else [[chunk] for chunk in p["stage_layers"]]
    if got != expected:
        fail(f"v = {v}: stage layers {p['stage_layers']}, expected {expected}")
    return p


def stages(c):
    deck = c.path("interleaved.yaml")
    with open(deck, "w") as f:
        f.write(DECK)
    one = c.result(c.run(1, "io.snapshot=one.h5", "io.snapshot_step=2", deck=deck))
    base = None
    for v in (1, 2, 4):
        sets = ["parallel.pp=2", f"parallel.virtual_stages={v}", f"io.snapshot=v{v}.h5", "io.snapshot_step=2"]
        run = c.result(c.run(2, *sets, deck=deck, threads=1))
        loss_err = compare_losses(one, run, 1e-10)
        worst = compare_snapshots(c.path("one.h5"), c.path(f"v{v}.h5"), 1e-10)
        require_plan_and_bytes(run, f"v = {v}")
        p = require_report(run, 2, v, 4)
        sent = pipeline_bytes(run)  # rank 0's: stage 0 sends v activations, v - 1 gradients
        if base is None:
            base = sent[0]
        if sent != (v * base, (v - 1) * base):
            fail(f"v = {v}: rank 0 sent {sent} pipeline bytes, expected {(v * base, (v - 1) * base)}")
        print(f"pp 2, v {v}: loss curve {loss_err:.1e}, worst tensor {worst:.1e} from one rank; pipeline bytes "
              f"{sent} on stage 0 (v x {base:.0f}); plan and bytes hold on every rank; first stage keeps "
              f"{p['slots_first_stage']} slots; bubble measured {p['bubble_fraction_measured']['mean']:.3f}, "
              f"modelled {p['bubble_fraction_model']:.3f}")
        if v == 2:
            again = c.result(c.run(2, *sets[:2], "io.snapshot=v2-again.h5", "io.snapshot_step=2", deck=deck,
                                   threads=1))
            if again["losses"] != run["losses"]:
                fail(f"a repeat of v = 2 lost bitwise equality: {again['losses']} vs {run['losses']}")
            compare_snapshots(c.path("v2.h5"), c.path("v2-again.h5"), 0.0)
            print("pp 2, v 2 repeated: losses and snapshot bitwise equal")


def combined(c):
    deck = c.path("interleaved.yaml")
    with open(deck, "w") as f:
        f.write(DECK)
    cases = [
        ("tp", ["parallel.tp=2"], 1e-10),
        ("tp-replicated-rows", ["parallel.tp=2", "parallel.tp_sequence_parallel=false"], 1e-10),
        ("ring-documents", ["parallel.strategy=ring", "parallel.layout=zigzag", "data.documents=true"], 1e-10),
        ("dp-bf16", ["parallel.dp=2", "model.precision=bf16", "train.micro_batches=2"], 1e-2),
    ]
    for name, sets, tolerance in cases:
        shared = [s for s in sets if not s.startswith("parallel.")]
        one = c.result(c.run(1, *shared, f"io.snapshot={name}-one.h5", "io.snapshot_step=2", deck=deck))
        run = c.result(c.run(4, *sets, "parallel.pp=2", "parallel.virtual_stages=2", f"io.snapshot={name}.h5",
                             "io.snapshot_step=2", deck=deck, threads=1))
        loss_err = compare_losses(one, run, tolerance)
        worst = compare_snapshots(c.path(f"{name}-one.h5"), c.path(f"{name}.h5"), tolerance)
        require_plan_and_bytes(run, name)
        require_report(run, 2, 2, run["pipeline"]["micro_batches"])
        print(f"{name} (pp 2 x v 2, dp {run['dp']} tp {run['tp']} sp {run['sp']}): loss curve {loss_err:.1e}, "
              f"worst tensor {worst:.1e} from one rank; plan and bytes hold on every rank")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("miniattn")
    p.add_argument("mpiexec")
    p.add_argument("check", choices=["stages", "combined"])
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix=f"miniattn-interleaved-{a.check}-") as scratch:
        c = Check(os.path.abspath(a.miniattn), a.mpiexec, scratch)
        globals()[a.check](c)
    print(f"interleaved {a.check}: PASSED")


if __name__ == "__main__":
    main()
