#!/usr/bin/env python3
"""End-to-end checks of the exchange deadline and the flight record
(docs/deck.md, "Exchange deadlines and the flight record"), with real
processes: a rank is stopped with SIGSTOP, as a frozen node would be.

  stopped FAMILY      a rank stopped mid-run (--ranks 2 or 4): the job ends within the
                      deadline + 15 s with exit status 75, the message names the exchange,
                      step and layer, and scripts/flight_record.py names the stopped rank
  skipped             rank 1 skips one ring shift (MINIATTN_FAULT skip_exchange): the job
                      ends with 75 and the analyzer reports the disagreement, naming rank 1
  continued           a rank stopped for less than the deadline, then continued: the run
                      ends as an undisturbed one, bitwise
  checkpoint          a rank stopped while checkpoints are written: the job ends, and the
                      checkpoint left on disk restarts bitwise to the undisturbed run

usage: deadline_checks.py MINIATTN MPIEXEC ANALYZER CHECK [--family F] [--ranks R]
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from driver_checks import Check, fail  # noqa: E402

EXIT_DEADLINE = 75  # kExitDeadline, src/core/error.hpp
DEADLINE = 3.0
DECK = """\
model: {vocab: 32, d_model: 24, heads: 4, layers: 2, seq_len: 24, batch: 12, causal: true, precision: fp64}
parallel: {strategy: ring, dp: 1}
train: {steps: 100000, lr: 1.0e-2, optimizer: adamw, weight_decay: 0.1, grad_clip: 0.5, seed: 7}
kernels: {query_block: 8, key_block: 6}
run: {mode: train, log_every: 100000}
"""
FAMILIES = {
    "ring": ["parallel.strategy=ring"],
    "ulysses": ["parallel.strategy=ulysses"],
    "allgather": ["parallel.strategy=allgather"],
    "rsa": ["parallel.strategy=rsa"],
    "tp": ["parallel.strategy=local", "parallel.tp=2"],
    "pp": ["parallel.strategy=local", "parallel.pp=2"],
    # Both stages send each other activations and gradients (on two communicators of the same ranks).
    "interleaved": ["parallel.strategy=local", "parallel.pp=2", "parallel.virtual_stages=2", "model.layers=4",
                    "train.micro_batches=2"],
    "dp": ["parallel.strategy=local", "parallel.dp=2"],
}


class Job:
    """One mpiexec job whose ranks can be found (a tag in their environment)
    and stopped; always ended, whatever the check found."""

    def __init__(self, c, ranks, sets, name, env=None):
        self.c, self.name, self.tag = c, name, uuid.uuid4().hex
        self.record = c.path(f"{name}.flight-record")
        self.out, self.err = c.path(f"{name}.out"), c.path(f"{name}.err")
        cmd = [c.mpiexec, "-n", str(ranks), c.miniattn, c.path("deadline.yaml"),
               "--set", f"run.exchange_timeout_s={DEADLINE}", "--set", f"run.flight_record={self.record}",
               "--set", f"run.result={c.path(name + '.json')}"]
        for s in sets:
            cmd += ["--set", s]
        environment = dict(os.environ, MINIATTN_TEST_TAG=self.tag, **(env or {}))
        with open(self.out, "w") as out, open(self.err, "w") as err:
            self.proc = subprocess.Popen(cmd, cwd=c.scratch, stdout=out, stderr=err, env=environment)
        self.ranks = ranks

    def rank_pids(self):
        """{world rank: pid} of this job's ranks, from their environment (MPICH's PMI_RANK, Open MPI's own)."""
        found = {}
        exe = os.path.realpath(self.c.miniattn)
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if os.path.realpath(f"/proc/{pid}/exe") != exe:
                    continue
                with open(f"/proc/{pid}/environ", "rb") as f:
                    env = dict(v.split(b"=", 1) for v in f.read().split(b"\0") if b"=" in v)
            except OSError:
                continue
            if env.get(b"MINIATTN_TEST_TAG") != self.tag.encode():
                continue
            for key in (b"PMI_RANK", b"OMPI_COMM_WORLD_RANK", b"PMIX_RANK"):
                if key in env:
                    found[int(env[key])] = int(pid)
                    break
        return found

    def stop(self, rank, after):
        """SIGSTOP to `rank` once the job has run `after` seconds; returns the time of the stop."""
        deadline = time.monotonic() + 60
        while len(self.rank_pids()) < self.ranks:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                fail(f"{self.name}: the job ended or never started its {self.ranks} ranks:\n{self.stderr()}")
            time.sleep(0.05)
        time.sleep(after)
        pid = self.rank_pids()[rank]
        os.kill(pid, signal.SIGSTOP)
        return time.monotonic(), pid

    def wait(self, limit):
        try:
            return self.proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            self.end()
            fail(f"{self.name}: the job still ran {limit:.0f} s after the stop: it hangs\n{self.stderr()}")

    def end(self):
        for pid in self.rank_pids().values():
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stderr(self):
        with open(self.err) as f:
            return f.read()


def analyze(c, analyzer, folder):
    proc = subprocess.run([sys.executable, analyzer, "--json", folder], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        fail(f"the analyzer failed on {folder}: {proc.stdout}{proc.stderr}")
    text = subprocess.run([sys.executable, analyzer, folder], capture_output=True, text=True, timeout=60).stdout
    return json.loads(proc.stdout), text


def stopped(c, analyzer, family, ranks):
    """A rank stopped mid-run ends the job by the deadline, named."""
    victim = ranks // 2
    job = Job(c, ranks, FAMILIES[family], f"stopped-{family}-{ranks}")
    try:
        stopped_at, _ = job.stop(victim, after=1.0)
        status = job.wait(DEADLINE + 15)
        took = time.monotonic() - stopped_at
    finally:
        job.end()
    err = job.stderr()
    said = [line for line in err.splitlines() if "exchange deadline of" in line]
    if status != EXIT_DEADLINE or not said:
        fail(f"{job.name}: exit {status} (expected {EXIT_DEADLINE}) and no deadline message:\n{err}")
    if not all(word in said[0] for word in ("passed in", "step", "layer", "for rank(s)")):
        fail(f"{job.name}: the message does not name the exchange, step, layer and peers: {said[0]}")
    findings, text = analyze(c, analyzer, job.record)
    if findings["suspects"] != [victim]:
        fail(f"{job.name}: the analyzer names {findings['suspects']}, the stopped rank was {victim}:\n{text}")
    print(f"{job.name}: ended {took:.1f} s after rank {victim} stopped, exit {status}\n  {said[0]}\n"
          f"  analyzer: {text.strip().splitlines()[-1]}")


def skipped(c, analyzer):
    """A rank on another code path (one ring shift skipped): the analyzer tells a bug from a stall."""
    job = Job(c, 2, FAMILIES["ring"] + ["train.steps=20"], "skipped",
              env={"MINIATTN_FAULT": "rank=1,skip_exchange=ring.forward.kv#5"})
    try:
        status = job.wait(DEADLINE + 30)
    finally:
        job.end()
    if status != EXIT_DEADLINE:
        fail(f"skipped: exit {status}, expected {EXIT_DEADLINE}:\n{job.stderr()}")
    findings, text = analyze(c, analyzer, job.record)
    if not findings["disagreements"] or findings["suspects"] != [1]:
        fail(f"skipped: the analyzer found no disagreement naming rank 1:\n{text}")
    print(f"skipped: exit {status}; analyzer:\n  " + "\n  ".join(text.strip().splitlines()))


def final_state(path):
    with h5py.File(path, "r") as f:
        return {f"{g}/{n}": np.asarray(f[g][n][()]) for g in ("params", "optim/m", "optim/v") for n in f[g]}


def require_same_state(a, b, what):
    sa, sb = final_state(a), final_state(b)
    if sorted(sa) != sorted(sb) or any(not np.array_equal(sa[k], sb[k]) for k in sa):
        fail(f"{what}: the final checkpoint differs from the undisturbed run's")


def continued(c):
    """Stopped for less than the deadline, then continued: nothing changes, bitwise."""
    steps = ["train.steps=1500", "io.checkpoint_every=0"]
    whole = c.result(c.run(2, *FAMILIES["ring"], *steps, "io.checkpoint=whole.h5", deck=c.path("deadline.yaml")))
    job = Job(c, 2, FAMILIES["ring"] + steps + [f"io.checkpoint={c.path('paused.h5')}",
                                                 "run.exchange_timeout_s=20"], "paused")
    try:
        _, pid = job.stop(1, after=1.0)
        time.sleep(DEADLINE)
        os.kill(pid, signal.SIGCONT)
        status = job.wait(120)
    finally:
        job.end()
    if status != 0:
        fail(f"paused: exit {status}:\n{job.stderr()}")
    with open(c.path("paused.json")) as f:
        paused = json.load(f)
    if paused["losses"] != whole["losses"]:
        fail("paused: the losses differ from the undisturbed run's")
    require_same_state(c.path("whole.h5"), c.path("paused.h5"), "paused")
    print(f"continued: rank 1 stopped {DEADLINE:.0f} s (deadline 20 s), then continued: "
          f"{len(whole['losses'])} losses and the final checkpoint bitwise the undisturbed run's")


def checkpoint(c):
    """Stopped while checkpoints are written: the checkpoint on disk is whole and restarts bitwise."""
    total = 60
    c.run(2, *FAMILIES["ring"], f"train.steps={total}", "io.checkpoint=whole.h5", deck=c.path("deadline.yaml"))
    in_write = ("io.checkpoint", "checksums.", "file.", "agree")
    for attempt, after in enumerate((0.8, 0.5, 1.1, 0.65)):
        ckpt = c.path(f"stopped-{attempt}.h5")
        job = Job(c, 2, FAMILIES["ring"] + [f"io.checkpoint={ckpt}", "io.checkpoint_every=1"], f"ckpt-{attempt}")
        try:
            stopped_at, _ = job.stop(1, after=after)
            status = job.wait(4 * DEADLINE + 15)  # a file's region has four deadlines
            took = time.monotonic() - stopped_at
        finally:
            job.end()
        said = [line for line in job.stderr().splitlines() if "exchange deadline of" in line]
        if status != EXIT_DEADLINE or not said:
            fail(f"{job.name}: exit {status}:\n{job.stderr()}")
        if any(word in said[0] for word in in_write):
            break
        print(f"{job.name}: the stop fell outside a checkpoint write ({said[0]}); again")
    else:
        fail("four stops all fell outside a checkpoint write")
    with h5py.File(ckpt, "r") as f:
        step = int(f.attrs["step"])
    if not 0 < step < total:
        fail(f"the stopped run's checkpoint is at step {step}, outside (0, {total})")
    c.run(2, *FAMILIES["ring"], f"train.steps={total}", f"io.restart={ckpt}", "io.checkpoint=resumed.h5",
          deck=c.path("deadline.yaml"))
    require_same_state(c.path("whole.h5"), c.path("resumed.h5"), "checkpoint")
    print(f"checkpoint: ended {took:.1f} s after the stop ({said[0]});\n  its step-{step} checkpoint restarted "
          f"to step {total} bitwise the undisturbed run's")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("miniattn")
    p.add_argument("mpiexec")
    p.add_argument("analyzer")
    p.add_argument("check", choices=["stopped", "skipped", "continued", "checkpoint"])
    p.add_argument("--family", choices=sorted(FAMILIES), default="ring")
    p.add_argument("--ranks", type=int, default=2)
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix=f"miniattn-deadline-{a.check}-") as scratch:
        c = Check(os.path.abspath(a.miniattn), a.mpiexec, scratch)
        with open(c.path("deadline.yaml"), "w") as f:
            f.write(DECK)
        analyzer = os.path.abspath(a.analyzer)
        if a.check == "stopped":
            stopped(c, analyzer, a.family, a.ranks)
        elif a.check == "skipped":
            skipped(c, analyzer)
        else:
            globals()[a.check](c)
    print(f"{a.check}: PASSED")


if __name__ == "__main__":
    main()
