#!/usr/bin/env python3
"""End-to-end checks of the miniattn executable, run by CTest.

Each subcommand runs miniattn under mpiexec in a scratch directory and exits
non-zero with a message when the check fails:

  rank_independence  snapshots from 1..4 ranks (data parallel) equal the 1-rank one
  init_roundtrip     weights loaded with io.init reproduce the snapshot they came from
  learns             on 2 ranks of ring attention the copy across >= 1024 positions is learned
  bad_input          malformed decks and command lines exit with status 2, naming the key,
                     before any work and without touching existing output files
  checkpoint_restart a restart continues bitwise on the same ranks, within rounding on others;
                     a run killed while checkpointing leaves the previous checkpoint usable;
                     a deck changing the model's definition is refused, a deliberate change said once
  faults             a NaN stops the run naming step and layer; a failure on one rank of
                     four ends every rank within seconds; one rank seeing less memory
                     makes every rank refuse the run (exit 2), none hangs
  determinism        two identical runs give bitwise-identical snapshots
  threads            (threaded backends) 1, 2 and 4 threads agree within 1e-12 (bf16 with the fused
                     kernel: bitwise), and 2 ranks of
                     one thread within 1e-10; repeat and restart on 2 threads are bitwise
  bf16               model.precision bf16: restart bitwise, half the ring's bytes, the first
                     loss within 2^-8 of fp32's
  bench_report       run.mode bench reports every phase's seconds and rates, the GEMM
                     reference, the NaN guard's cost, ring overlap and the memory plan
  blas_kernels       OpenBLAS runs the kernels the CPU's flags support, or the run warns
                     with the variable to set (forced: OPENBLAS_CORETYPE=Prescott)
  sequence_parallel  a strategy on R ranks (dp x tp x sp) equals the 1-rank run: loss curve,
                     parameters and gradients within 1e-10, causal and not, every layout,
                     optionally under a sliding window (--window), with grouped K/V
                     heads (--kv-heads) and packed documents (--documents), with either attention
                     kernel (--kernel fused|gemm); measured bytes equal the model and the memory
                     plan the allocations

usage: driver_checks.py MINIATTN MPIEXEC SUBCOMMAND [--scratch DIR]
"""
import argparse
import itertools
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import h5py
import numpy as np

SMALL_DECK = """\
model: {vocab: 32, d_model: 24, heads: 3, layers: 2, seq_len: 20, batch: 12, causal: true, precision: fp64}
parallel: {strategy: local, dp: 1}
train: {steps: 3, lr: 1.0e-2, optimizer: adamw, weight_decay: 0.1, grad_clip: 0.5, seed: 7}
kernels: {query_block: 8, key_block: 6}
run: {mode: train, log_every: 1}
"""


class Check:
    def __init__(self, miniattn, mpiexec, scratch):
        self.miniattn = miniattn
        self.mpiexec = mpiexec
        self.scratch = scratch
        self.deck = os.path.join(scratch, "small.yaml")
        self.runs = 0
        with open(self.deck, "w") as f:
            f.write(SMALL_DECK)

    def run(self, ranks, *sets, deck=None, expect=0, args=None, threads=None, env=None):
        """Runs miniattn; a deck run (not `args`) also writes its whole report
        (every step's loss included) to a file that result() reads."""
        cmd = [self.mpiexec, "-n", str(ranks), self.miniattn]
        cmd += args if args is not None else [deck or self.deck]
        for s in sets:
            cmd += ["--set", s]
        result_path = None
        if args is None and not any(s.startswith("run.result=") for s in sets):
            self.runs += 1
            result_path = self.path(f"result-{self.runs}.json")
            cmd += ["--set", f"run.result={result_path}"]
        extra = dict(env or {}, **({} if threads is None else {"OMP_NUM_THREADS": str(threads)}))
        environment = {k: v for k, v in dict(os.environ, **extra).items() if v is not None}
        proc = subprocess.run(cmd, cwd=self.scratch, capture_output=True, text=True, timeout=600,
                              env=environment)
        if expect is not None and proc.returncode != expect:
            sys.stdout.write(proc.stdout)
            sys.stdout.write(proc.stderr)
            fail(f"{' '.join(cmd)}: exit status {proc.returncode}, expected {expect}")
        proc.result_path = result_path
        return proc

    def result(self, proc):
        """The report: the RESULT line (one, without the per-step losses) and,
        when the run wrote one, the result file, which must add exactly those."""
        lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
        if len(lines) != 1:
            fail(f"expected one RESULT line, got {len(lines)}:\n{proc.stdout}")
        line = json.loads(lines[0][len("RESULT "):])
        if "losses" in line:
            fail("the RESULT line carries the per-step losses; they belong in the run.result file")
        if proc.result_path is None:
            return line
        with open(proc.result_path) as f:
            full = json.load(f)
        if {k: v for k, v in full.items() if k != "losses"} != line or len(full["losses"]) != line["steps"] - line["first_step"]:
            fail(f"{proc.result_path} is not the RESULT line plus every step's loss")
        return full

    def path(self, name):
        return os.path.join(self.scratch, name)


def fail(message):
    print("FAILED:", message)
    sys.exit(1)


def read_snapshot(path):
    out = {}
    with h5py.File(path, "r") as f:
        for group in ("params", "grads"):
            for name, ds in f[group].items():
                out[f"{group}/{name}"] = np.asarray(ds[()], dtype=np.float64)
        out["inputs/tokens"] = np.asarray(f["inputs/tokens"][()])
        out["loss"] = np.float64(f["loss"][()])
    return out


def compare_snapshots(a_path, b_path, rtol):
    a, b = read_snapshot(a_path), read_snapshot(b_path)
    if sorted(a) != sorted(b):
        fail(f"{a_path} and {b_path} hold different datasets")
    worst = 0.0
    for key in sorted(a):
        x, y = a[key], b[key]
        if x.shape != y.shape:
            fail(f"{key}: shape {x.shape} vs {y.shape}")
        if key.startswith("inputs/"):
            if not np.array_equal(x, y):
                fail(f"{key} differs")
            continue
        scale = max(np.linalg.norm(x), 1e-300)
        err = np.linalg.norm(x - y) / scale
        worst = max(worst, err)
        if not err <= rtol:
            fail(f"{key}: relative difference {err:.3e} > {rtol:.1e} ({a_path} vs {b_path})")
    return worst


def rank_independence(c):
    c.run(1, "io.snapshot=np1.h5", "io.snapshot_step=2")
    for ranks in (2, 3, 4):
        c.run(ranks, f"parallel.dp={ranks}", f"io.snapshot=np{ranks}.h5", "io.snapshot_step=2")
        worst = compare_snapshots(c.path("np1.h5"), c.path(f"np{ranks}.h5"), 1e-10)
        print(f"{ranks} ranks vs 1 rank at step 2: worst relative difference {worst:.2e}")


def init_roundtrip(c):
    c.run(1, "io.snapshot=first.h5", "io.snapshot_step=1")
    # The step-1 snapshot holds the parameters before update 1; loaded with io.init
    # on another rank count they must reappear bitwise in a step-0 snapshot.
    c.run(2, "parallel.dp=2", "io.init=first.h5", "io.snapshot=second.h5", "io.snapshot_step=0")
    with h5py.File(c.path("first.h5"), "r") as f, h5py.File(c.path("second.h5"), "r") as g:
        for name in f["params"]:
            if not np.array_equal(f["params"][name][()], g["params"][name][()]):
                fail(f"params/{name} changed when loaded with io.init")
    print("io.init reproduces every parameter bitwise")
    bad = c.run(1, "io.init=missing.h5", expect=2)
    if "io.init" not in bad.stderr or "missing.h5" not in bad.stderr:
        fail(f"missing init file: message does not name io.init and the file: {bad.stderr!r}")
    other = c.run(1, "model.d_model=30", "io.init=first.h5", expect=2)
    if "io.init" not in other.stderr or "wte" not in other.stderr:
        fail(f"shape mismatch: message does not name io.init and the dataset: {other.stderr!r}")
    print("missing file and shape mismatch are refused with exit status 2")


def copy_levels(vocab, seq_len):
    """The copy task's loss levels (docs/design.md section 2): guessing ln V;
    `known`, the expected entropy of a sample's token frequencies (V slots of
    uniform tokens: a token's slot count c is Binomial(V, 1/V)); copying,
    `known` on the first half's targets and 0 on the rest."""
    v = vocab
    known = -sum(v * math.comb(v, c) * (1 / v) ** c * (1 - 1 / v) ** (v - c) * (c / v) * math.log(c / v)
                 for c in range(1, v + 1))
    period = (seq_len + 2) // 2
    return math.log(v), known, known * (period - 1) / seq_len


def learns(c, deck):
    """The copy is learned across ranks: on 2 ranks of ring attention, with
    the twin of each second-half token at least 1024 positions back (on the
    other rank under zigzag), the loss ends more than halfway from `known`
    (the sample's token frequencies read from context, no copying) to
    copying. Only attention to the twin gets below `known`."""
    proc = c.run(2, deck=deck)
    r = c.result(proc)
    if r["strategy"] != "ring" or r["sp"] != 2:
        fail(f"the deck must split the sequence over 2 ranks with ring attention, ran {r['strategy']} sp {r['sp']}")
    model = r["config"]["model"]
    seq_len, vocab = model["seq_len"], model["vocab"]
    distance = (seq_len + 2) // 2
    if r["config"]["data"]["task"] != "copy" or distance < 1024:
        fail(f"the deck must run the copy task at a distance of at least 1024 positions, "
             f"ran {r['config']['data']['task']} at N={seq_len}")
    guessing, known, copying = copy_levels(vocab, seq_len)
    tail = r["losses"][-50:]
    final = sum(tail) / len(tail)
    halfway = (known + copying) / 2
    print(f"N={seq_len} (copy distance {distance}): loss {r['initial_loss']:.4f} -> mean of the last "
          f"{len(tail)} steps {final:.4f}; guessing ln {vocab} = {guessing:.4f}, frequencies known {known:.4f}, "
          f"copying {copying:.4f}")
    if not final < halfway:
        fail(f"the copy was not learned: final loss {final:.4f} is not below {halfway:.4f}, "
             f"halfway from the frequencies alone to copying")


# Bad decks and command lines: (ranks, --set overrides, text the message must contain).
BAD_SETTINGS = [
    (1, ["model.vocab=abc"], "model.vocab"),
    (1, ["model.vocab=0"], "model.vocab"),
    (1, ["model.vocab=-5"], "model.vocab"),
    (1, ["model.d_model=0"], "model.d_model"),
    (1, ["model.d_model=1.5"], "model.d_model"),
    (1, ["model.heads=5"], "model.heads"),
    (1, ["parallel.tp=0"], "parallel.tp"),
    (2, ["parallel.tp=2"], "parallel.tp"),  # 3 heads
    (3, ["parallel.tp=2", "model.heads=6"], "parallel.tp"),  # 3 ranks
    (2, ["parallel.tp=2", "model.heads=6", "model.ffn=33"], "parallel.tp"),
    (4, ["parallel.tp=4", "model.heads=12", "model.batch=1", "model.seq_len=22"], "parallel.tp"),  # 22 rows
    (4, ["parallel.strategy=ulysses", "parallel.tp=2", "model.heads=6"], "model.heads"),  # 3 heads per TP rank
    (1, ["parallel.pp=0"], "parallel.pp"),
    (3, ["parallel.pp=2", "parallel.strategy=ring"], "parallel.pp"),  # 3 ranks
    (4, ["parallel.pp=4", "model.layers=2"], "parallel.pp"),  # a stage without a layer
    (1, ["train.micro_batches=5"], "train.micro_batches"),  # 12 samples
    (2, ["parallel.pp=2", "train.micro_batches=0"], "train.micro_batches"),
    (1, ["parallel.layout=zigzag", "model.seq_len=21"], "model.seq_len"),
    (1, ["model.heads=0"], "model.heads"),
    (1, ["data.task=lookup"], "data.task"),  # vocab 32 < 72
    (1, ["data.task=retrieval"], "data.task"),
    (1, ["model.ffn=-1"], "model.ffn"),
    (1, ["model.layers=0"], "model.layers"),
    (1, ["model.seq_len=0"], "model.seq_len"),
    (1, ["model.seq_len=[1, 2]"], "model.seq_len"),
    (1, ["model.batch=0"], "model.batch"),
    (1, ["model.causal=maybe"], "model.causal"),
    (1, ["model.precision=fp16"], "model.precision"),
    (1, ["model.nonsense=1"], "model.nonsense"),
    (1, ["modle.vocab=32"], "modle"),
    (1, ["parallel.strategy=tree"], "parallel.strategy"),
    (1, ["parallel.layout=spiral"], "parallel.layout"),
    (1, ["parallel.comm=carrier-pigeon"], "parallel.comm"),
    (2, ["parallel.dp=3"], "parallel.dp"),
    (1, ["parallel.dp=0"], "parallel.dp"),
    (2, ["parallel.dp=2", "model.batch=3"], "model.batch"),
    (2, [], "parallel.strategy"),
    (4, ["parallel.strategy=ring", "parallel.layout=zigzag"], "model.seq_len"),
    (3, ["parallel.strategy=ring", "model.seq_len=20"], "model.seq_len"),
    (2, ["parallel.strategy=ulysses"], "model.heads"),
    (4, ["parallel.strategy=hybrid", "parallel.ulysses_degree=3"], "parallel.ulysses_degree"),
    (1, ["parallel.ulysses_degree=0"], "parallel.ulysses_degree"),
    (1, ["train.steps=0"], "train.steps"),
    (1, ["train.lr=0"], "train.lr"),
    (1, ["train.lr=fast"], "train.lr"),
    (1, ["train.optimizer=lion"], "train.optimizer"),
    (1, ["train.weight_decay=-0.1"], "train.weight_decay"),
    (1, ["train.grad_clip=-1"], "train.grad_clip"),
    (1, ["train.beta1=1.0"], "train.beta1"),
    (1, ["train.eps=0"], "train.eps"),
    (1, ["train.seed=-1"], "train.seed"),
    (1, ["train.nan_check=sometimes"], "train.nan_check"),
    (1, ["io.init=missing.h5"], "io.init"),
    (1, ["io.init=small.yaml"], "io.init"),
    (1, ["io.snapshot_step=7"], "io.snapshot_step"),
    (1, ["io.snapshot=/nonexistent-dir/x.h5"], "io.snapshot"),
    (1, ["run.result=/nonexistent-dir/r.json"], "run.result"),
    # Outputs that would fail only after the run, or destroy another file.
    (1, ["io.checkpoint=."], "is a directory"),
    (2, ["parallel.strategy=ring", "io.checkpoint=/dev/null"], "not a regular file"),
    (1, ["io.checkpoint=./existing.json"], "also io.checkpoint's file"),
    (1, ["io.snapshot=small.yaml"], "is the input deck"),
    (1, ["run.mode=sprint"], "run.mode"),
    (1, ["run.log_every=0"], "run.log_every"),
    (1, ["kernels.query_block=-1"], "kernels.query_block"),
    (1, ["kernels.attention=cudnn"], "the cudnn kernel computes bf16 only"),  # fp64
    (1, ["model.precision=bf16", "kernels.attention=cudnn", "model.d_model=30"], "a multiple of 8"),  # Dh 10
    (2, ["model.precision=bf16", "kernels.attention=cudnn", "parallel.strategy=rsa"], "rsa keeps its own kernels"),
    (1, ["run.memory_per_rank_gib=-1"], "run.memory_per_rank_gib"),
    (2, ["run.exchange_timeout_s=-5"], "run.exchange_timeout_s"),
    (1, ["run.exchange_timeout_s=ten"], "run.exchange_timeout_s"),
    (1, ["run.exchange_timeout_s=inf"], "run.exchange_timeout_s"),
    (2, ["parallel.dp=2", "run.memory_per_rank_gib=0.0001"], "per rank"),
    (2, ["parallel.dp=2", "run.memory_per_rank_gib=0.0001"], "model.seq_len: this run needs"),
    (1, ["model.d_model=1200", "run.memory_per_rank_gib=0.5"], "model.layers: this run needs"),
    (1, ["model.seq_len=4000000000"], "model.seq_len"),
    (1, ["model.seq_len=1048576", "model.d_model=4096", "model.heads=32"], "model.seq_len"),
    (1, ["model.vocab"], "model.vocab"),
    (1, ["=3"], "--set"),
]

BAD_COMMAND_LINES = [
    (1, ["no-such-deck.yaml"], "no-such-deck.yaml"),
    (1, [], "usage"),
    (1, ["small.yaml", "--bogus"], "--bogus"),
    (1, ["small.yaml", "other.yaml"], "other.yaml"),
    (1, ["not-yaml.yaml"], "not-yaml.yaml"),
]


def bad_input(c):
    with open(c.path("not-yaml.yaml"), "w") as f:
        f.write("model: {vocab: [\n")
    sentinel = "existing content, must survive\n"
    outputs = {"run.result": c.path("existing.json"), "io.snapshot": c.path("existing.h5")}
    cases = [(r, [c.deck] + [f"--set={k}={v}" for k, v in outputs.items()] + ["--set=io.snapshot_step=0"] +
              [f"--set={s}" for s in sets], needle) for r, sets, needle in BAD_SETTINGS]
    cases += [(r, args, needle) for r, args, needle in BAD_COMMAND_LINES]
    if os.environ.get("MINIATTN_TEST_BUILD_HAS_CUDNN") == "0":  # set by CMake: this build has no cuDNN
        cases.append((1, [c.deck, "--set=model.precision=bf16", "--set=kernels.attention=cudnn"] +
                      [f"--set={k}={v}" for k, v in outputs.items()] + ["--set=io.snapshot_step=0"],
                      "kernels.attention: cudnn: this build of miniattn has no cuDNN"))
    for ranks, args, needle in cases:
        for path in outputs.values():
            with open(path, "w") as f:
                f.write(sentinel)
        proc = c.run(ranks, args=args, expect=2)
        text = proc.stderr + proc.stdout
        if needle.lower() not in text.lower():
            fail(f"{args}: message does not mention {needle!r}: {proc.stderr!r}")
        if text.count("miniattn: error:") != 1:
            fail(f"{args}: expected one error message, got: {text!r}")
        if "RESULT" in proc.stdout or "step " in proc.stdout:
            fail(f"{args}: work started before the input was refused")
        for path in outputs.values():
            with open(path) as f:
                if f.read() != sentinel:
                    fail(f"{args}: {path} was overwritten")
        print(f"exit 2 on {ranks} rank(s), names {needle}: {' '.join(args[1:] if args else args)}")
    print(f"{len(cases)} bad decks and command lines refused; no existing file touched")
    bad_kokkos_argument(c)
    help_once(c)


def bad_kokkos_argument(c):
    """Kokkos 3 throws on a malformed --kokkos-* argument (miniattn: exit 2),
    Kokkos 4 aborts with its own message: either way every rank ends, and the
    message names the argument."""
    proc = c.run(2, args=[c.deck, "--kokkos-threads=abc"], expect=None)
    if proc.returncode == 0 or "--kokkos-threads=abc" not in proc.stderr + proc.stdout:
        fail(f"--kokkos-threads=abc: exit {proc.returncode}, message {proc.stderr!r}")
    if "RESULT" in proc.stdout:
        fail("--kokkos-threads=abc: the run went on")
    print(f"--kokkos-threads=abc refused with exit status {proc.returncode}, naming the argument")


def help_once(c):
    """--help (with or without a deck) and --kokkos-help print Kokkos's help and
    miniattn's, each once however many ranks run, and exit 0 without a run."""
    for args in (["--help"], [c.deck, "--help"], ["--kokkos-help"]):
        proc = c.run(3, args=args)
        text = proc.stdout + proc.stderr
        counts = (text.count("--kokkos-help"), text.count("usage: miniattn"))
        if counts != (1, 1) or "RESULT" in text or "error" in text:
            fail(f"{' '.join(args)} on 3 ranks: Kokkos's help {counts[0]} times, miniattn's {counts[1]}: {text!r}")
    print("--help and --kokkos-help on 3 ranks: each help text once, exit 0")


def faults(c):
    # A NaN stops the run, naming the step and the first layer where it appeared.
    proc = c.run(2, "parallel.dp=2", "model.precision=fp32", "train.lr=1e30", "train.grad_clip=0", "train.steps=4", expect=None)
    if proc.returncode == 0 or "train.nan_check" not in proc.stderr or "at step 1" not in proc.stderr:
        fail(f"NaN not caught: exit {proc.returncode}, {proc.stderr!r}")
    if "blocks.0" not in proc.stderr:
        fail(f"NaN message names no layer: {proc.stderr!r}")
    print("NaN stopped at step 1, in blocks.0")
    unchecked = c.run(2, "parallel.dp=2", "model.precision=fp32", "train.lr=1e30", "train.grad_clip=0", "train.steps=4",
                      "train.nan_check=false")
    if c.result(unchecked)["final_loss"] is not None:
        fail("without train.nan_check the run should have gone on to a NaN loss")
    # A failure on one rank of four ends every rank quickly, with the message.
    env = dict(os.environ, MINIATTN_FAULT="rank=2,step=1")
    cmd = [c.mpiexec, "-n", "4", c.miniattn, c.deck, "--set", "parallel.strategy=ring", "--set", "train.steps=50"]
    try:
        proc = subprocess.run(cmd, cwd=c.scratch, capture_output=True, text=True, timeout=60, env=env)
    except subprocess.TimeoutExpired:
        fail("a failure on rank 2 left the other ranks hanging for 60 s")
    if proc.returncode == 0 or "rank 2: fatal: injected fault" not in proc.stderr:
        fail(f"fault on rank 2: exit {proc.returncode}, {proc.stderr!r}")
    print(f"fault on rank 2 of 4 ended the job with exit status {proc.returncode}")
    memory_disagreement(c)


def memory_disagreement(c):
    """One rank's node has less memory than the others: every rank must agree
    on the smallest figure, refuse the run with the same message and exit 2,
    and leave existing output files alone (not hang in the next collective)."""
    result = c.path("kept.json")
    with open(result, "w") as f:
        f.write("previous result\n")
    env = dict(os.environ, MINIATTN_FAULT="rank=1,memory_gib=0.0001")
    cmd = [c.mpiexec, "-n", "2", c.miniattn, c.deck, "--set", "parallel.strategy=ring", "--set",
           f"run.result={result}"]
    try:
        proc = subprocess.run(cmd, cwd=c.scratch, capture_output=True, text=True, timeout=60, env=env)
    except subprocess.TimeoutExpired:
        fail("less memory on rank 1 left the job hanging for 60 s")
    if proc.returncode != 2:
        fail(f"less memory on rank 1: exit {proc.returncode}, expected 2: {proc.stderr!r}")
    # "node" on a host backend, "GPU" on a device one (the memory that is short).
    named = "on rank 1's node" in proc.stderr or "on rank 1's GPU" in proc.stderr
    if proc.stderr.count("model.seq_len: this run needs") != 1 or not named:
        fail(f"less memory on rank 1: expected one message naming rank 1's node or GPU, got {proc.stderr!r}")
    if "fatal" in proc.stderr:
        fail(f"less memory on rank 1 ended through MPI_Abort, not an agreed input error: {proc.stderr!r}")
    with open(result) as f:
        if f.read() != "previous result\n":
            fail("the refused run damaged the existing run.result file")
    print("less memory on rank 1 of 2: every rank exited 2 with one message, run.result untouched")


SP_DECK = """\
model: {vocab: 32, d_model: 48, heads: 12, layers: 2, seq_len: 24, batch: 2, causal: true, precision: fp64}
parallel: {strategy: local, dp: 1}
train: {steps: 3, lr: 1.0e-2, optimizer: adamw, weight_decay: 0.1, grad_clip: 0.5, seed: 5}
kernels: {query_block: 5, key_block: 7}
run: {mode: train, log_every: 1}
"""


def require_plan_and_bytes(r, who):
    """A run's memory plan equals its allocation and its bytes the exchange model: rank 0's
    figures, which the report prints, and its flags for every rank (label by label)."""
    memory = r["memory"]
    if memory["planned_bytes_per_rank"] != memory["allocated_bytes_per_rank"] or not memory["plan_holds_on_every_rank"]:
        fail(f"{who}: a rank allocated other than its memory plan (rank 0: {memory})")
    if (r["exchange_bytes_per_step_measured"] != r["exchange_bytes_per_step_model"]
            or not r["exchange_model_holds_on_every_rank"]):
        fail(f"{who}: a rank's bytes differ from the exchange model (rank 0: {r['exchange']})")


def compare_losses(a, b, rtol):
    la, lb = np.array(a["losses"]), np.array(b["losses"])
    if la.shape != lb.shape:
        fail(f"loss curves of different lengths: {la.shape} vs {lb.shape}")
    err = np.max(np.abs(la - lb) / np.abs(la))
    if not err <= rtol:
        fail(f"loss curves differ by {err:.3e} > {rtol:.1e}: {la} vs {lb}")
    return err


def sequence_parallel(c, strategy, ranks, dp, ulysses, tp=1, window=0, kv_heads=0, documents=False, kernel="auto",
                      tp_sequence_parallel=True):
    deck = c.path("sp.yaml")
    with open(deck, "w") as f:
        f.write(SP_DECK)
    # Striped only where it changes the work: causal (its wpe I/O is the same either way).
    # A feature's check (window, K/V heads, documents) runs each layout once and
    # each causality: a window on causal contiguous ranks (where a ring stops
    # early) and causal zigzag, two-sided on striped ones; the others causal on
    # zigzag and striped (the layout documents balance best), not on contiguous.
    sweep = [("true", "contiguous"), ("true", "zigzag"), ("true", "striped"), ("false", "contiguous"),
             ("false", "zigzag")]
    if window:
        sweep = [("true", "contiguous"), ("true", "zigzag"), ("false", "striped")]
    elif kv_heads or documents:
        sweep = [("true", "zigzag"), ("true", "striped"), ("false", "contiguous")]
    for causal, layout in sweep:
        tag = f"{causal}-{layout}"
        common = [f"model.causal={causal}", "io.snapshot_step=2", f"model.window={window}",
                  f"model.kv_heads={kv_heads}", f"data.documents={str(documents).lower()}",
                  f"kernels.attention={kernel}", f"kernels.chunk={GEMM_CHUNK}"]
        ref = c.result(c.run(1, *common, f"io.snapshot=ref-{tag}.h5", deck=deck))
        sp = c.result(c.run(ranks, *common, f"io.snapshot=sp-{tag}.h5", f"parallel.strategy={strategy}",
                            f"parallel.layout={layout}", f"parallel.dp={dp}",
                            f"parallel.ulysses_degree={ulysses}", f"parallel.tp={tp}",
                            f"parallel.tp_sequence_parallel={str(tp_sequence_parallel).lower()}", deck=deck))
        expected = (ranks // (dp * tp), tp, strategy, tp_sequence_parallel)
        if (sp["sp"], sp["tp"], sp["strategy"], sp["tp_sequence_parallel"]) != expected:
            fail(f"ran as sp={sp['sp']} tp={sp['tp']} strategy={sp['strategy']} tp_sequence_parallel="
                 f"{sp['tp_sequence_parallel']}, expected {expected}")
        loss_err = compare_losses(ref, sp, 1e-10)
        worst = compare_snapshots(c.path(f"ref-{tag}.h5"), c.path(f"sp-{tag}.h5"), 1e-10)
        require_plan_and_bytes(sp, f"{strategy} {tag}")
        if kernel != "auto" and sp["attention_tiles"]["kernel"] != kernel:
            fail(f"ran the {sp['attention_tiles']['kernel']} attention kernel, asked for {kernel}")
        print(f"{strategy} on {ranks} ranks (dp {dp}, tp {tp}{'' if tp_sequence_parallel else ' without SP'}, "
              f"U {ulysses}), {kernel} kernel, causal={causal}, window={window}, "
              f"kv_heads={kv_heads}, documents={documents}, {layout}: "
              f"loss curve {loss_err:.1e}, worst tensor {worst:.1e}, "
              f"{sp['exchange_bytes_per_step_measured']:.0f} bytes/step as modelled")


# Chunks of the gemm kernel in the sequence-parallel checks: no rank's rows (20 or
# 24 positions over 1 to 4 ranks) are a multiple of it, so every call ends in a
# short chunk.
GEMM_CHUNK = 7

PP_DECK = """\
model: {vocab: 32, d_model: 32, heads: 8, layers: 2, seq_len: 16, batch: 8, causal: true, precision: fp64}
parallel: {strategy: local, dp: 1}
train: {steps: 3, lr: 1.0e-2, optimizer: adamw, weight_decay: 0.1, grad_clip: 0.5, seed: 11}
kernels: {query_block: 4, key_block: 3}
run: {mode: train, log_every: 1}
"""


def decompositions(ranks):
    """Every (dp, pp, tp, sp) with dp x pp x tp x sp = ranks."""
    divisors = [d for d in range(1, ranks + 1) if ranks % d == 0]
    return [(dp, pp, tp, ranks // (dp * pp * tp)) for dp in divisors for pp in divisors for tp in divisors
            if ranks % (dp * pp * tp) == 0]


def pipeline(c, ranks):
    """Every decomposition of `ranks` over DP x PP x TP x SP that PP_DECK allows
    (8 heads, 8 samples, 16 positions, max(2, pp) layers: all of them for 2, 4
    and 8 ranks) equals the 1-rank run within 1e-10: loss curve, parameters and
    gradients; on every rank the bytes sent are as modelled and the memory
    plan is what was allocated. The SP strategy, the layout, causality, the
    sliding window, the K/V heads, packed documents and the number of micro-batches vary from one
    decomposition to the next.
    (No more layers than stages need: each dataset of a snapshot is a
    collective write, slow on 8 ranks sharing 2 cores.)"""
    deck = c.path("pp.yaml")
    with open(deck, "w") as f:
        f.write(PP_DECK)
    refs = {}
    split = 0  # decompositions with sp > 1 so far: each takes the next strategy
    for i, (dp, pp, tp, sp) in enumerate(decompositions(ranks)):
        causal, layout = ("true", "false")[i % 2], ("contiguous", "zigzag", "striped")[i // 2 % 3]
        window = (0, 0, 3)[i % 3]  # a sliding window beside TP and PP too
        strategies = ["ring", "ulysses", "rsa", "allgather"] + (["hybrid"] if sp >= 4 else [])
        strategy = "local" if sp == 1 else strategies[split % len(strategies)]
        kv_heads = 0 if i // 2 % 2 == 0 else max(2, tp)  # grouped K/V heads
        documents = ("false", "true", "false")[i % 3]  # packed documents
        split += sp > 1
        samples = 8 // dp
        micro = min(samples, 2 * pp) if (i % 3) else min(samples, pp)
        layers = max(2, pp)
        tag = f"{causal}-{layout}-{layers}-{window}-{kv_heads}-{documents}"
        common = [f"model.causal={causal}", f"parallel.layout={layout}", f"model.layers={layers}", "io.snapshot_step=2",
                  f"model.window={window}", f"model.kv_heads={kv_heads}", f"data.documents={documents}"]
        if tag not in refs:
            refs[tag] = c.result(c.run(1, *common, f"io.snapshot=ref-{tag}.h5", deck=deck))
        name = f"dp{dp}-pp{pp}-tp{tp}-sp{sp}"
        run = c.result(c.run(ranks, *common, f"io.snapshot={name}.h5", f"parallel.strategy={strategy}",
                             f"parallel.dp={dp}", f"parallel.pp={pp}", f"parallel.tp={tp}",
                             "parallel.ulysses_degree=2", f"train.micro_batches={micro}", deck=deck, threads=1))
        got = (run["dp"], run["pp"], run["tp"], run["sp"], run["pipeline"]["micro_batches"])
        if got != (dp, pp, tp, sp, micro):
            fail(f"ran as (dp, pp, tp, sp, micro-batches) {got}, expected {(dp, pp, tp, sp, micro)}")
        loss_err = compare_losses(refs[tag], run, 1e-10)
        worst = compare_snapshots(c.path(f"ref-{tag}.h5"), c.path(f"{name}.h5"), 1e-10)
        require_plan_and_bytes(run, name)
        bubble = run["pipeline"]["bubble_fraction_model"]
        if abs(bubble - (pp - 1) / (micro + pp - 1)) > 1e-15:
            fail(f"{name}: modelled bubble {bubble}")
        print(f"dp {dp} x pp {pp} x tp {tp} x sp {sp} ({strategy}, {layout}, causal={causal}, window={window}, "
              f"kv_heads={kv_heads}, documents={documents}, "
              f"{micro} micro-batches): "
              f"loss curve {loss_err:.1e}, worst tensor {worst:.1e}, bytes and memory as planned on every rank")


def checkpoint_restart(c):
    deck = c.path("sp.yaml")
    with open(deck, "w") as f:
        f.write(SP_DECK)
    base = ["parallel.strategy=ring", "parallel.layout=zigzag", "train.steps=6"]
    whole = c.result(c.run(2, *base, "io.snapshot=whole.h5", "io.snapshot_step=5", "io.checkpoint=whole_end.h5",
                           deck=deck))
    c.run(2, *base[:2], "train.steps=3", "io.checkpoint=ck3.h5", deck=deck)
    # Same ranks: bitwise the uninterrupted run.
    resumed = c.result(c.run(2, *base, "io.restart=ck3.h5", "io.snapshot=resumed.h5", "io.snapshot_step=5",
                             "io.checkpoint=resumed_end.h5", deck=deck))
    if resumed["losses"] != whole["losses"][3:]:
        fail(f"resumed losses {resumed['losses']} != {whole['losses'][3:]}")
    compare_snapshots(c.path("whole.h5"), c.path("resumed.h5"), 0.0)
    with h5py.File(c.path("whole_end.h5"), "r") as a, h5py.File(c.path("resumed_end.h5"), "r") as b:
        for group in ("params", "optim/m", "optim/v"):
            for name in a[group]:
                if not np.array_equal(a[group][name][()], b[group][name][()]):
                    fail(f"final {group}/{name} differs after restart")
    print("restart on the same 2 ranks: losses, snapshot and final checkpoint bitwise identical")
    def restart_matches(checkpoint, ranks, sets, uninterrupted="whole.h5"):
        """Restarts `checkpoint` to step 6 on `ranks` ranks; its step-5 snapshot
        equals the uninterrupted run's within rounding."""
        tag = f"restart-{next(tags)}"
        c.run(ranks, "train.steps=6", f"io.restart={checkpoint}", f"io.snapshot={tag}.h5", "io.snapshot_step=5",
              *sets, deck=deck)
        worst = compare_snapshots(c.path(uninterrupted), c.path(f"{tag}.h5"), 1e-10)
        print(f"checkpoint {checkpoint} restarted on {ranks} ranks ({' '.join(sets)}): {worst:.1e}")
    tags = itertools.count()

    # Other rank counts, layouts and tensor parallelism: equal within rounding.
    for ranks, sets in ((1, ["parallel.strategy=local", "parallel.layout=contiguous"]),
                        (4, ["parallel.strategy=ulysses", "parallel.layout=contiguous"]),
                        (4, ["parallel.strategy=ring", "parallel.dp=2"]),
                        (2, ["parallel.strategy=local", "parallel.tp=2"]),
                        (4, ["parallel.strategy=ring", "parallel.tp=2"]),
                        (4, ["parallel.strategy=ring", "parallel.layout=striped"])):
        restart_matches("ck3.h5", ranks, sets)
    # A checkpoint written by tensor-parallel shards (dp 1 x tp 2 x sp 2) restarts on one rank.
    c.run(4, *base[:2], "parallel.tp=2", "train.steps=3", "io.checkpoint=ck3_tp.h5", deck=deck)
    restart_matches("ck3_tp.h5", 1, ["parallel.strategy=local"])
    # Pipeline stages write only their own tensors: a pp 2 x tp 2 checkpoint
    # restarts on 1 rank and on pp 2 x ring 2, and the 2-rank ring checkpoint on pp 2 x dp 2.
    c.run(4, *base[:2], "parallel.pp=2", "parallel.tp=2", "train.micro_batches=2", "train.steps=3",
          "io.checkpoint=ck3_pp.h5", deck=deck)
    restart_matches("ck3_pp.h5", 1, ["parallel.strategy=local"])
    restart_matches("ck3_pp.h5", 4, ["parallel.pp=2", "parallel.strategy=ring"])
    restart_matches("ck3.h5", 4, ["parallel.pp=2", "parallel.dp=2", "parallel.strategy=local",
                                  "train.micro_batches=1"])
    # The attention features across a restart: grouped K/V heads (the q | k | v
    # row groups of unequal height, sharded over TP), packed documents (a
    # function of the step, so the restarted run must see step 3's) and a
    # window. A tp 2 x ring 2 checkpoint restarts on 1 rank, on Ulysses 4 (K/V
    # heads split) and on tp 4 (one K/V head per TP rank), against the
    # uninterrupted 1-rank run.
    features = ["model.kv_heads=4", "data.documents=true", "model.window=7"]
    c.run(1, "parallel.strategy=local", "train.steps=6", "io.snapshot=whole_features.h5", "io.snapshot_step=5",
          *features, deck=deck)
    c.run(4, *base[:2], "parallel.tp=2", "train.steps=3", "io.checkpoint=ck3_features.h5", *features, deck=deck)
    for ranks, sets in ((1, ["parallel.strategy=local"]),
                        (4, ["parallel.strategy=ulysses", "parallel.layout=striped"]),
                        (4, ["parallel.strategy=local", "parallel.tp=4"])):
        restart_matches("ck3_features.h5", ranks, features + sets, uninterrupted="whole_features.h5")
    # SIGKILL in the middle of writing the step-4 checkpoint: the step-3 one survives and restarts.
    env = dict(os.environ, MINIATTN_FAULT_KILL_IN_CHECKPOINT="4")
    cmd = [c.mpiexec, "-n", "2", c.miniattn, deck] + [f"--set={s}" for s in base] + [
        "--set=io.checkpoint=killed.h5", "--set=io.checkpoint_every=1"]
    proc = subprocess.run(cmd, cwd=c.scratch, capture_output=True, text=True, timeout=300, env=env)
    if proc.returncode == 0:
        fail("the run that was to be killed while checkpointing exited 0")
    with h5py.File(c.path("killed.h5"), "r") as f:
        if int(f.attrs["step"]) != 3:
            fail(f"after the kill the checkpoint is at step {f.attrs['step']}, expected the intact step 3")
    c.run(2, *base, "io.restart=killed.h5", "io.snapshot=after_kill.h5", "io.snapshot_step=5", deck=deck)
    compare_snapshots(c.path("whole.h5"), c.path("after_kill.h5"), 0.0)
    print("killed while writing step 4: the step-3 checkpoint is intact and restarts bitwise")
    # A truncated checkpoint is refused naming the file.
    with open(c.path("ck3.h5"), "rb") as f:
        data = f.read()
    with open(c.path("truncated.h5"), "wb") as f:
        f.write(data[: len(data) // 2])
    bad = c.run(2, *base, "io.restart=truncated.h5", deck=deck, expect=2)
    if "io.restart" not in bad.stderr or "truncated.h5" not in bad.stderr:
        fail(f"truncated checkpoint: message does not name io.restart and the file: {bad.stderr!r}")
    print("a truncated checkpoint is refused with exit status 2")
    # A snapshot step before the restart's first step would silently write nothing.
    bad = c.run(2, *base, "io.restart=ck3.h5", "io.snapshot=early.h5", "io.snapshot_step=1", deck=deck, expect=2)
    if "io.snapshot_step" not in bad.stderr:
        fail(f"a snapshot step before the restart point: message does not name io.snapshot_step: {bad.stderr!r}")
    restart_says_what_changed(c, deck, base)
    # A checkpoint that cannot be written mid-run (here: a file size limit
    # that a rank's first rows of parameters exceed, as on a full disk) is a
    # runtime failure, exit 1 on every rank, and leaves the previous
    # checkpoint as it was. On rank 0, which also writes HDF5's metadata, the
    # file used to be closed after the failure, and that close (its metadata
    # write failing as well) left the ranks in different collectives: a hang,
    # or a crash in MPI_Finalize.
    shutil.copy(c.path("ck3.h5"), c.path("full.h5"))
    before = open(c.path("full.h5"), "rb").read()
    limit_kib = 10
    cmd = [c.mpiexec, "-n", "2", c.miniattn, deck] + [f"--set={s}" for s in base] + [
        "--set=io.restart=ck3.h5", "--set=io.checkpoint=full.h5"]
    for rank in (1, 0):
        env = dict(os.environ, MINIATTN_FAULT=f"rank={rank},file_limit_kib={limit_kib}")
        try:
            proc = subprocess.run(cmd, cwd=c.scratch, capture_output=True, text=True, timeout=120, env=env)
        except subprocess.TimeoutExpired:
            fail(f"a checkpoint write failure on rank {rank} left the job hanging for 120 s")
        if proc.returncode != 1 or "io.checkpoint" not in proc.stderr:
            fail(f"a checkpoint write failure on rank {rank}: exit {proc.returncode} (expected 1), "
                 f"stderr {proc.stderr!r}")
        if open(c.path("full.h5"), "rb").read() != before:
            fail(f"a failed checkpoint write on rank {rank} changed the previous checkpoint")
        leftovers = [n for n in os.listdir(c.scratch) if n.startswith("full.h5") and n != "full.h5"]
        if leftovers:
            fail(f"a failed checkpoint write on rank {rank} left {leftovers} behind")
        print(f"a checkpoint write failure on rank {rank} (file size limit {limit_kib} KiB) exits 1; "
              "the previous checkpoint is intact")


def restart_says_what_changed(c, deck, base):
    """A restart continues a run: a deck that changes the model's definition is
    refused (exit 2, naming the key and both values) before anything is written,
    even a checkpoint going on in place; a deliberate change runs, said once."""
    shutil.copy(c.path("ck3.h5"), c.path("in_place.h5"))
    before = open(c.path("in_place.h5"), "rb").read()
    bad = c.run(2, *base, "io.restart=in_place.h5", "io.checkpoint=in_place.h5", "model.positions=rope",
                deck=deck, expect=2)
    want = "miniattn: error: model.positions: checkpoint in_place.h5 holds learned, the deck says rope ("
    if want not in bad.stderr:
        fail(f"learned -> rope restart: stderr {bad.stderr!r} lacks {want!r}")
    if open(c.path("in_place.h5"), "rb").read() != before:
        fail("a refused restart changed the checkpoint")
    leftovers = [n for n in os.listdir(c.scratch) if n.startswith("in_place.h5") and n != "in_place.h5"]
    if leftovers:
        fail(f"a refused restart left {leftovers} behind")
    print("a learned -> rope restart exits 2 naming model.positions; the checkpoint is untouched")
    # A new rope_theta (context extension) is taken with one warning line, from rank 0 alone.
    rope = ["model.positions=rope", "model.rope_theta=10000"]
    c.run(2, *base[:2], "train.steps=3", *rope, "io.checkpoint=ck3_rope.h5", deck=deck)
    proc = c.run(2, *base, "io.restart=ck3_rope.h5", "model.positions=rope", "model.rope_theta=40000", deck=deck)
    said = [l for l in proc.stdout.splitlines() if l.startswith("miniattn: warning: ") and "ck3_rope.h5" in l]
    if len(said) != 1 or not said[0].startswith("miniattn: warning: model.rope_theta: checkpoint ck3_rope.h5 "
                                                "holds 10000, the deck says 40000 ("):
        fail(f"a rope_theta restart: expected one warning line naming model.rope_theta, got {said}")
    print(f"a rope_theta restart runs with one warning: {said[0]}")
    proc = c.run(2, *base, "io.restart=ck3_rope.h5", *rope, deck=deck)
    if any("ck3_rope.h5" in l for l in proc.stdout.splitlines() if "warning" in l):
        fail(f"a restart of the same run warned:\n{proc.stdout}")


def threads(c):
    """A threaded backend (OpenMP): the same numbers on 1, 2 and 4 threads of one
    rank and on 2 ranks of one thread; bitwise repeatable and restartable."""
    deck = c.path("sp.yaml")
    with open(deck, "w") as f:
        f.write(SP_DECK)
    # 2 x 96 = 192 rows: several column-sum chunks, attention tiles and waves.
    base = ["model.seq_len=96", "train.steps=4", "io.snapshot_step=3"]
    runs = {}
    for n in (1, 2, 4):
        r = c.result(c.run(1, *base, f"io.snapshot=t{n}.h5", deck=deck, threads=n))
        space = r["execution_space"]
        if space["concurrency"] != n:
            fail(f"OMP_NUM_THREADS={n} ran on {space}: not a threaded backend, or the threads were not used")
        runs[n] = r
    for n in (2, 4):
        loss = compare_losses(runs[1], runs[n], 1e-12)
        worst = compare_snapshots(c.path("t1.h5"), c.path(f"t{n}.h5"), 1e-12)
        print(f"1 rank x {n} threads vs 1 thread: loss curve {loss:.1e}, parameters and gradients {worst:.1e}")
    c.run(1, *base, "io.snapshot=t2_again.h5", deck=deck, threads=2)
    compare_snapshots(c.path("t2.h5"), c.path("t2_again.h5"), 0.0)
    print("two identical runs on 1 rank x 2 threads: bitwise equal")
    c.run(1, *base[:1], "train.steps=2", "io.checkpoint=t2_ck.h5", deck=deck, threads=2)
    c.run(1, *base, "io.restart=t2_ck.h5", "io.snapshot=t2_restart.h5", deck=deck, threads=2)
    compare_snapshots(c.path("t2.h5"), c.path("t2_restart.h5"), 0.0)
    print("restart on 1 rank x 2 threads: bitwise equal to the uninterrupted run")
    # bf16 with the fused kernel (host threads over its own buffers; on a core without
    # bf16 dot products its widened path): the bits of 1, 2 and 4 threads.
    bf16 = [*base, "model.precision=bf16", "kernels.attention=fused", "model.kv_heads=4", "model.seq_len=200"]
    for n in (1, 2, 4):
        c.run(1, *bf16, f"io.snapshot=bf16_t{n}.h5", deck=deck, threads=n)
    for n in (2, 4):
        compare_snapshots(c.path("bf16_t1.h5"), c.path(f"bf16_t{n}.h5"), 0.0)
    print("bf16, fused kernel: 1, 2 and 4 threads of one rank bitwise equal")
    for strategy in ("ring", "ulysses"):
        r = c.result(c.run(2, *base, f"io.snapshot=np2-{strategy}.h5", f"parallel.strategy={strategy}",
                           "parallel.layout=zigzag", deck=deck, threads=1))
        loss = compare_losses(runs[2], r, 1e-10)
        worst = compare_snapshots(c.path("t2.h5"), c.path(f"np2-{strategy}.h5"), 1e-10)
        print(f"2 ranks x 1 thread ({strategy}, zigzag) vs 1 rank x 2 threads: loss {loss:.1e}, tensors {worst:.1e}")


def bf16(c):
    """model.precision bf16 on a ring of 2 (zigzag, GQA): a restart continues bitwise
    (the bf16 weights are recomputed from the fp32 master copy); every activation
    exchange moves exactly half the bytes of the fp32 run and the gradients' all-reduce
    the same (fp32 gradients); bytes measured = modelled and plan = allocation; the first
    loss (the same parameters) agrees with fp32's within 2^-8 (later steps drift apart as
    any two precisions' trajectories do at this deck's learning rate)."""
    deck = c.path("sp.yaml")
    with open(deck, "w") as f:
        f.write(SP_DECK)
    base = ["parallel.strategy=ring", "parallel.layout=zigzag", "model.kv_heads=4", "train.steps=6"]
    runs = {}
    for precision in ("fp32", "bf16"):
        runs[precision] = c.result(c.run(2, *base, f"model.precision={precision}", f"io.snapshot={precision}.h5",
                                         "io.snapshot_step=5", deck=deck))
        r = runs[precision]
        require_plan_and_bytes(r, precision)
    for label, e in runs["fp32"]["exchange"].items():
        half = label.startswith("ring.")
        want = e["bytes_per_step"] / 2 if half else e["bytes_per_step"]
        got = runs["bf16"]["exchange"][label]["bytes_per_step"]
        if got != want:
            fail(f"{label}: bf16 moves {got} bytes per step, expected {want} (fp32: {e['bytes_per_step']})")
    first = [runs[p]["losses"][0] for p in ("fp32", "bf16")]
    loss = abs(first[1] - first[0]) / abs(first[0])
    if not loss <= 2.0 ** -8:
        fail(f"first loss in bf16 {first[1]} differs from fp32's {first[0]} by {loss:.2e} > 2^-8")
    c.run(2, *base[:3], "model.precision=bf16", "train.steps=3", "io.checkpoint=bf16_ck3.h5", deck=deck)
    resumed = c.result(c.run(2, *base, "model.precision=bf16", "io.restart=bf16_ck3.h5", "io.snapshot=resumed.h5",
                             "io.snapshot_step=5", deck=deck))
    if resumed["losses"] != runs["bf16"]["losses"][3:]:
        fail(f"bf16 resumed losses {resumed['losses']} != {runs['bf16']['losses'][3:]}")
    compare_snapshots(c.path("bf16.h5"), c.path("resumed.h5"), 0.0)
    print(f"bf16: ring bytes half of fp32's, gradients' the same; first loss within {loss:.1e} of fp32's; "
          f"restart bitwise")


def recompute(c):
    """train.recompute: blocks that keep q, k, v and fc1's output (never) and
    blocks that recompute them (always) give the same bits, on every strategy
    and on TP, PP (two micro-batches in flight), rope, packed documents and
    bf16; each run allocates its plan, which keeps exactly 2 x (3 D + F)
    values a row more per block and slot in flight than it frees from the
    shared workspace. auto keeps them where that plan fits the memory per
    rank and recomputes where only the other does; never refuses to run
    where its plan does not fit, naming train.recompute."""
    deck = c.path("sp.yaml")
    with open(deck, "w") as f:
        f.write(SP_DECK)
    cases = {
        "ring-rope-documents": (2, ["parallel.strategy=ring", "parallel.layout=zigzag", "model.positions=rope",
                                    "data.documents=true"]),
        "ulysses-gqa": (2, ["parallel.strategy=ulysses", "parallel.layout=striped", "model.kv_heads=6"]),
        "allgather-window": (2, ["parallel.strategy=allgather", "model.window=5"]),
        "rsa": (2, ["parallel.strategy=rsa", "model.causal=false"]),
        "hybrid": (4, ["parallel.strategy=hybrid", "parallel.ulysses_degree=2"]),
        "tp-pp": (4, ["parallel.strategy=ring", "parallel.tp=2", "parallel.pp=2", "train.micro_batches=2"]),
        "bf16": (2, ["parallel.strategy=ring", "model.precision=bf16"]),
    }
    for name, (ranks, sets) in cases.items():
        runs = {}
        for choice in ("always", "never"):
            runs[choice] = c.result(c.run(ranks, *sets, f"train.recompute={choice}", f"io.snapshot={name}-{choice}.h5",
                                          "io.snapshot_step=2", deck=deck, threads=1))
            memory = runs[choice]["memory"]
            if memory["recompute"] != (choice == "always") or not memory["plan_holds_on_every_rank"]:
                fail(f"{name}, recompute {choice}: memory {memory}")
        if runs["always"]["losses"] != runs["never"]["losses"]:
            fail(f"{name}: losses {runs['always']['losses']} recomputed, {runs['never']['losses']} kept")
        compare_snapshots(c.path(f"{name}-always.h5"), c.path(f"{name}-never.h5"), 0.0)
        print(f"{name} on {ranks} ranks: kept and recomputed q, k, v and fc1 output give the same bits")
    kept = runs["never"]["memory"]["planned_bytes_per_rank"]
    recomputed = runs["always"]["memory"]["planned_bytes_per_rank"]
    # bf16 on 2 ranks of a ring (SP_DECK: batch 2, seq_len 24, d_model 48, F = 4 D): each rank's rows of the
    # batch, 2 bytes a value, 2 blocks in one slot.
    rows, d, f = 2 * 24 // 2, 48, 4 * 48
    if kept - recomputed != rows * (2 * (3 * d + f) - max(3 * d, f)) * 2:
        fail(f"kept activations planned {kept} bytes, recomputed {recomputed}: not 2 x (3 D + F) x 2 bytes a row "
             "more less the shared workspace")
    gib = 1024.0 ** 3
    between, above = (kept + recomputed) / 2 / gib, 2 * kept / gib
    for budget, want in ((between, True), (above, False)):
        r = c.result(c.run(2, *cases["bf16"][1], f"run.memory_per_rank_gib={budget!r}", deck=deck, threads=1))
        if r["memory"]["recompute"] != want:
            fail(f"auto with {budget * gib:.0f} bytes a rank: recompute {r['memory']['recompute']}, expected {want}")
    refused = c.run(2, *cases["bf16"][1], "train.recompute=never", f"run.memory_per_rank_gib={between!r}",
                    deck=deck, expect=2)
    if "train.recompute" not in refused.stdout + refused.stderr:
        fail(f"never beyond the memory per rank: refused without naming train.recompute: {refused.stderr}")
    print(f"auto keeps them within {above * gib:.0f} bytes a rank and recomputes within {between * gib:.0f}; "
          "never is refused there")


def determinism(c, kernel="auto"):
    sets = ["parallel.dp=2", "io.snapshot_step=2", f"kernels.attention={kernel}", f"kernels.chunk={GEMM_CHUNK}"]
    if kernel == "cudnn":  # bf16 only, head widths a multiple of 8; a ring of 2 ranks feeds it blocks
        sets = ["model.precision=bf16", "parallel.strategy=ring", "parallel.layout=zigzag", "io.snapshot_step=2",
                "kernels.attention=cudnn"]
    c.run(2, *sets, "io.snapshot=a.h5")
    c.run(2, *sets, "io.snapshot=b.h5")
    worst = compare_snapshots(c.path("a.h5"), c.path("b.h5"), 0.0)
    print(f"two identical runs ({kernel} attention kernel) differ by {worst:.1e}")


# Kokkos execution spaces whose Views live in host memory.
HOST_EXECUTION_SPACES = ("Serial", "OpenMP", "Threads", "HPX")


def staged_exchanges(c):
    """parallel.gpu_aware_mpi=false stages every MPI exchange through host
    buffers, as on a GPU whose MPI cannot read device memory: the same bits as
    MPI given the Views' memory directly (ring shifts and the DP all-reduce on
    4 ranks, Ulysses all-to-alls on 3)."""
    for ranks, sets in ((4, ["parallel.strategy=ring", "parallel.dp=2"]), (3, ["parallel.strategy=ulysses", "model.seq_len=24"])):
        tag = f"np{ranks}"
        direct = c.result(c.run(ranks, *sets, f"io.snapshot=direct-{tag}.h5", "io.snapshot_step=2"))
        staged = c.result(c.run(ranks, *sets, "parallel.gpu_aware_mpi=false", f"io.snapshot=staged-{tag}.h5",
                                "io.snapshot_step=2"))
        # auto stages device memory when MPI is not GPU-aware, never host memory.
        host_memory = direct["execution_space"]["name"] in HOST_EXECUTION_SPACES
        if (host_memory and direct["comm_staged_through_host"]) or not staged["comm_staged_through_host"]:
            fail(f"staging reported {direct['comm_staged_through_host']} (auto, on "
                 f"{direct['execution_space']['name']}) and {staged['comm_staged_through_host']} (gpu_aware_mpi=false)")
        compare_losses(direct, staged, 0.0)
        worst = compare_snapshots(c.path(f"direct-{tag}.h5"), c.path(f"staged-{tag}.h5"), 0.0)
        print(f"{' '.join(sets)} on {ranks} ranks: staged through host equals direct (worst {worst:.1e})")


def bench_report(c):
    deck = c.path("sp.yaml")
    with open(deck, "w") as f:
        f.write(SP_DECK)
    base = ["run.mode=bench", "parallel.strategy=ring", "parallel.layout=zigzag", "train.steps=4"]
    proc = c.run(2, *base, deck=deck)
    r = c.result(proc)
    if any(line.startswith("step ") for line in proc.stdout.splitlines()):
        fail(f"bench mode printed progress lines:\n{proc.stdout}")
    b = r["bench"]
    if not b["gemm_gflops_per_rank"] > 0:
        fail(f"no GEMM reference rate: {b}")
    for phase in ("step", "forward", "backward", "attention_forward", "attention_backward"):
        p = b[phase]
        if not (p["seconds"] > 0 and p["gflops_per_rank"] > 0 and p["fraction_of_gemm"] > 0):
            fail(f"bench {phase}: {p}")
    # Each step contains its phases, so the median step is at least each phase's
    # median, and the totals of the disjoint phases add up to at most the run's
    # wall time (medians of different phases do not add up: no check of their
    # sum; nan_check is left out, its gradient-norm half runs inside optimizer).
    phases = r["phases"]
    disjoint = ("data", "forward", "backward", "gradient_exchange", "optimizer")
    for name in disjoint:
        if not phases[name]["median_s"] <= b["step"]["seconds"]:
            fail(f"phase {name}'s median {phases[name]['median_s']} exceeds the median step {b['step']['seconds']}")
    in_steps = sum(phases[name]["total_s"] for name in disjoint)
    if not in_steps <= r["total_seconds"]:
        fail(f"the step phases' totals ({in_steps} s) exceed the run's wall time ({r['total_seconds']} s)")
    if b["step"]["seconds"] != r["step_seconds_median"]:
        fail("bench step is not the median step")
    # The mean of the 3 steps after the first: at least a third of their median, within the run's wall time.
    mean = r["step_seconds_mean"]
    if not (r["step_seconds_median"] / 3 <= mean and 3 * mean <= r["total_seconds"]):
        fail(f"mean step {mean} against the median {r['step_seconds_median']} and the run's "
             f"{r['total_seconds']} s")
    if b["figure_of_merit_tokens_per_second_per_rank"] != r["tokens_per_second_per_rank"]:
        fail("figure of merit is not tokens/s per rank")
    peak = b.get("core_peak")  # host backends: a measured clock, an assumed FMA width
    if peak is not None and not 0.3 <= peak["clock_ghz"] <= 7.0:
        fail(f"core peak at an impossible clock: {peak}")
    guard = b["nan_check"]
    if not (0 < guard["seconds_per_step"] < b["step"]["seconds"] and 0 < guard["fraction_of_step"] < 1):
        fail(f"NaN guard cost: {guard}")
    busy = b["attention_busy_seconds_over_ranks"]  # its figures are timings: checked for consistency only
    if not (0 < busy["min"] <= busy["mean"] <= busy["max"] <= b["attention_forward"]["seconds"] * 100
            and busy["max_over_mean"] >= 1):
        fail(f"attention busy seconds over ranks: {busy}")
    overlap = b.get("ring_overlap")
    if overlap is None or not 0.0 <= overlap["hidden_fraction"] <= 1.0:
        fail(f"ring overlap: {overlap}")
    require_plan_and_bytes(r, "bench")
    memory = r["memory"]
    if not r["peak_memory_bytes_per_rank"]["min"] >= memory["allocated_bytes_per_rank"]:
        fail(f"peak resident {r['peak_memory_bytes_per_rank']} below the allocated {memory}")
    off = c.result(c.run(2, *base, "train.nan_check=false", deck=deck))["bench"]["nan_check"]
    if off["seconds_per_step"] != 0:
        fail(f"NaN guard off but timed: {off}")
    print(f"bench: step {b['step']['seconds']:.4f} s, GEMM {b['gemm_gflops_per_rank']:.1f} GFLOP/s, "
          f"NaN guard {guard['fraction_of_step']:.1e} of a step, ring hidden {overlap['hidden_fraction']:.2f}")


def cpu_flags():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def blas_kernels(c):
    """OpenBLAS picks its kernels from the CPU's model; a CPU it does not know
    gets older ones. Forced below the CPU's flags (OPENBLAS_CORETYPE=Prescott on
    a CPU with AVX2 and FMA), the run must say so with the variable to set; left
    to itself, it must run kernels of the CPU's level (blas.warning empty),
    choosing them itself where OpenBLAS did not."""
    base = ["run.mode=bench", "train.steps=2"]
    flags = cpu_flags()
    if not {"avx2", "fma"} <= flags:
        print("blas_kernels: SKIPPED: the CPU has no AVX2 and FMA")
        return
    forced = c.run(1, *base, env={"OPENBLAS_CORETYPE": "Prescott", "MINIATTN_BLAS_CORE_REPLACED": None})
    blas = c.result(forced)["bench"]["blas"]
    if not blas["core"]:
        print(f"blas_kernels: SKIPPED: the BLAS ({blas['library']}) does not name its kernels")
        return
    expected = "SkylakeX" if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags else "Haswell"
    said = [l for l in forced.stdout.splitlines() if l.startswith("miniattn: warning: OpenBLAS runs its Prescott")]
    if (blas["core"].lower() != "prescott" or blas["core_chosen_by"] != "OPENBLAS_CORETYPE"
            or f"OPENBLAS_CORETYPE={expected}" not in blas["warning"] or len(said) != 1
            or f"OPENBLAS_CORETYPE={expected}" not in said[0]):
        fail(f"forced Prescott kernels: report {blas}, header {said}")
    own = c.run(1, *base, env={"OPENBLAS_CORETYPE": None, "MINIATTN_BLAS_CORE_REPLACED": None})
    blas = c.result(own)["bench"]["blas"]
    if blas["warning"] or "miniattn: warning: OpenBLAS" in own.stdout:
        fail(f"left to itself, the run still runs kernels below the CPU's flags: {blas}")
    if blas["core_chosen_by"].startswith("miniattn") != ("chosen by miniattn" in own.stdout):
        fail(f"the header and the report disagree on who chose the kernels: {blas}\n{own.stdout}")
    # An OpenBLAS that chose Prescott's kernels by itself (a preloaded stand-in for
    # its detection): the run restarts itself on the CPU's kernels, on every rank.
    preload = " ".join(filter(None, [os.environ["MINIATTN_TEST_OPENBLAS_CHOSE_PRESCOTT"],
                                     os.environ.get("LD_PRELOAD")]))
    chose = c.run(2, *base, "parallel.dp=2", env={"OPENBLAS_CORETYPE": None, "MINIATTN_BLAS_CORE_REPLACED": None,
                                                  "LD_PRELOAD": preload})
    replaced = c.result(chose)["bench"]["blas"]
    if (replaced["core"] != expected or replaced["core_chosen_by"] != "miniattn (OpenBLAS chose Prescott)"
            or replaced["warning"] or f"runs its {expected} kernels, chosen by miniattn" not in chose.stdout):
        fail(f"OpenBLAS chose Prescott: report {replaced}\n{chose.stdout}")
    print(f"blas_kernels: forced Prescott warned with OPENBLAS_CORETYPE={expected}; "
          f"left alone: {blas['core']} (chosen by {blas['core_chosen_by']}); "
          f"Prescott chosen by OpenBLAS: {replaced['core']} (chosen by {replaced['core_chosen_by']})")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("miniattn")
    p.add_argument("mpiexec")
    p.add_argument("check", choices=["rank_independence", "init_roundtrip", "learns", "bad_input", "determinism",
                                      "sequence_parallel", "faults", "checkpoint_restart", "bench_report", "threads",
                                      "staged_exchanges", "pipeline", "bf16", "recompute", "blas_kernels"])
    p.add_argument("--deck", help="deck for 'learns'")
    p.add_argument("--strategy", help="for sequence_parallel")
    p.add_argument("--window", type=int, default=0, help="for sequence_parallel: model.window")
    p.add_argument("--kv-heads", type=int, default=0, help="for sequence_parallel: model.kv_heads")
    p.add_argument("--documents", choices=["true", "false"], default="false",
                   help="for sequence_parallel: data.documents")
    p.add_argument("--ranks", type=int, default=2, help="for sequence_parallel and pipeline")
    p.add_argument("--dp", type=int, default=1, help="for sequence_parallel")
    p.add_argument("--ulysses", type=int, default=1, help="for sequence_parallel (hybrid)")
    p.add_argument("--tp", type=int, default=1, help="for sequence_parallel (tensor parallelism)")
    p.add_argument("--tp-sequence-parallel", choices=["true", "false"], default="true",
                   help="for sequence_parallel: parallel.tp_sequence_parallel")
    p.add_argument("--kernel", choices=["auto", "fused", "gemm", "cudnn"], default="auto",
                   help="for sequence_parallel and determinism: kernels.attention")
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix=f"miniattn-{a.check}-") as scratch:
        c = Check(os.path.abspath(a.miniattn), a.mpiexec, scratch)
        if a.check == "learns":
            learns(c, os.path.abspath(a.deck))
        elif a.check == "sequence_parallel":
            sequence_parallel(c, a.strategy, a.ranks, a.dp, a.ulysses, a.tp, a.window, a.kv_heads,
                              a.documents == "true", a.kernel, a.tp_sequence_parallel == "true")
        elif a.check == "determinism":
            determinism(c, a.kernel)
        elif a.check == "pipeline":
            pipeline(c, a.ranks)
        else:
            globals()[a.check](c)
    print(f"{a.check}: PASSED")


if __name__ == "__main__":
    main()
