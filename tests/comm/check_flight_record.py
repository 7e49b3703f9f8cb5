#!/usr/bin/env python3
"""Self-test of scripts/flight_record.py on synthetic flight records.

    python3 tests/comm/check_flight_record.py [ANALYZER_PATH]

Each case writes the records a job would leave (rank<R>.json, as the C++
writer counts: per group, per peer and direction) into a temporary folder, runs
the analyzer on it (with --json, in a subprocess) and checks what it finds.
Exit status 0 when every case passes; otherwise each failure is printed.
"""

import json
import os
import subprocess
import sys
import tempfile

FORMAT = "miniattn flight record 1"
KV = "ring.forward.kv"


class RankLog:
    """One rank's exchanges, counted the way the C++ flight record counts them."""

    def __init__(self, rank, world):
        self.rank, self.world = rank, world
        self.entries, self.counts, self.clock = [], {}, 0.0

    def _count(self, *channel):
        count = self.counts.get(channel, 0)
        self.counts[channel] = count + 1
        return count

    def _open(self, label, op, group, where, **fields):
        group = list(range(self.world)) if group is None else list(group)
        self.clock += 0.01
        entry = {"seq": len(self.entries), "label": label, "op": op, "group": group, "group_seq": None,
                 "send_to": None, "send_seq": None, "recv_from": None, "recv_seq": None, "bytes": 4096,
                 "step": where[0], "micro_batch": where[1], "layer": where[2],
                 "posted_s": round(self.clock, 3), "completed_s": round(self.clock + 0.005, 3)}
        entry.update(fields)
        self.entries.append(entry)
        return entry

    def _channel(self, group, channel):
        """Where the C++ record counts point-to-point messages: the group's sorted ranks and the channel."""
        return tuple(sorted(group or range(self.world))), channel

    def shift(self, label, to, source, where, group=None):
        key = self._channel(group, "")
        return self._open(label, "shift", group, where, send_to=to, send_seq=self._count(key, "send", to),
                          recv_from=source, recv_seq=self._count(key, "recv", source))

    def send(self, label, to, where, group=None, channel=""):
        key = self._channel(group, channel)
        return self._open(label, "send", group, where, send_to=to, send_seq=self._count(key, "send", to),
                          channel=channel)

    def recv(self, label, source, where, group=None, channel=""):
        key = self._channel(group, channel)
        return self._open(label, "recv", group, where, recv_from=source, recv_seq=self._count(key, "recv", source),
                          channel=channel)

    def collective(self, label, where, op="allreduce", group=None):
        key = tuple(sorted(group or range(self.world)))
        return self._open(label, op, group, where, group_seq=self._count(key, "collective"))

    def write(self, folder, waiting=True, keep=64, drop=()):
        """rank<R>.json, its last entry the one it waits in (not completed) when `waiting`."""
        entries = [dict(entry) for entry in self.entries[-keep:]]
        if waiting:
            entries[-1]["completed_s"] = None
        record = {"format": FORMAT, "rank": self.rank, "world_size": self.world, "host": "node0",
                  "pid": 4000 + self.rank, "deadline_seconds": 5.0, "written_at_s": round(self.clock + 5.0, 3),
                  "waiting": len(entries) - 1 if waiting else None, "entries": entries}
        for key in drop:
            del record[key]
        with open(os.path.join(folder, f"rank{self.rank}.json"), "w", encoding="utf-8") as stream:
            stream.write(json.dumps(record))


def ring_step(logs, step, layers=2):
    """A training step of a ring: a K/V shift per layer (to the next rank, from the previous), then the loss."""
    world = len(logs)
    for log in logs:
        for layer in range(layers):
            log.shift(KV, (log.rank + 1) % world, (log.rank - 1) % world, (step, 0, layer))
        log.collective("loss", (step, -1, -1))


def run(analyzer, folder, *options):
    result = subprocess.run([sys.executable, analyzer, folder, *options], capture_output=True, text=True, timeout=120)
    return result.returncode, result.stdout, result.stderr


def analyze(analyzer, folder, *options):
    code, out, err = run(analyzer, folder, "--json", *options)
    assert code == 0, f"exit status {code}, stderr: {err.strip()}"
    return json.loads(out)


def wait_of(findings, rank):
    found = [wait for wait in findings["waiting"] if wait["rank"] == rank]
    assert len(found) == 1, f"rank {rank} should wait once, waiting: {findings['waiting']}"
    return found[0]


def expect(actual, wanted, what):
    assert actual == wanted, f"{what}: {actual!r}, expected {wanted!r}"


def expect_in(part, text, what):
    assert part in text, f"{what}: expected {part!r} in {text!r}"


# ---------------------------------------------------------------- cases

def ring_of_two_rank_one_stopped(analyzer, folder):
    logs = [RankLog(rank, 2) for rank in range(2)]
    for step in range(3):
        ring_step(logs, step)
    logs[0].shift(KV, 1, 1, (3, 0, 0))
    logs[0].write(folder)
    findings = analyze(analyzer, folder)
    expect(findings["no_record"], [1], "no_record")
    expect(findings["suspects"], [1], "suspects")
    expect(wait_of(findings, 0)["for"], [1], "rank 0 waits for")
    expect([b["kind"] for b in wait_of(findings, 0)["blames"]], ["no_record", "no_record"], "rank 0's blames")
    lines = run(analyzer, folder)[1].splitlines()
    expect(lines[0], "rank 1 wrote no record: stopped, dead, or stuck outside an exchange", "first line")
    assert lines[-1].startswith("suspect: rank 1 "), f"last line: {lines[-1]!r}"
    expect_in("rank 0 waits in ring.forward.kv (shift, seq 9", lines[1], "the wait line")


def ring_of_four_rank_two_stopped(analyzer, folder):
    logs = [RankLog(rank, 4) for rank in range(4)]
    for step in range(2):
        ring_step(logs, step)
    # Rank 2 stops before step 2: rank 3 cannot receive from it, rank 1 cannot send to it,
    # and rank 0 gets one shift further before rank 3's next send is missing.
    logs[0].shift(KV, 1, 3, (2, 0, 0))
    logs[0].shift(KV, 1, 3, (2, 0, 1))
    logs[1].shift(KV, 2, 0, (2, 0, 0))
    logs[3].shift(KV, 0, 2, (2, 0, 0))
    for rank in (0, 1, 3):
        logs[rank].write(folder)
    findings = analyze(analyzer, folder)
    expect(findings["no_record"], [2], "no_record")
    expect(findings["suspects"], [2], "suspects")
    expect(findings["disagreements"], [], "disagreements")
    assert 2 in wait_of(findings, 3)["for"], f"rank 3 should wait for rank 2: {wait_of(findings, 3)}"
    assert 2 in wait_of(findings, 1)["for"], f"rank 1 should wait for rank 2: {wait_of(findings, 1)}"
    expect(wait_of(findings, 0)["for"], [1, 3], "rank 0 waits for")
    expect_in("rank 3 never posted its send #5 to rank 0", wait_of(findings, 0)["why"], "rank 0's wait")


def collective_stall(analyzer, folder, rank_three_waits):
    logs = [RankLog(rank, 4) for rank in range(4)]
    for step in range(7):
        for log in logs:
            log.collective("loss", (step, -1, -1))
    for rank in (0, 1, 2):
        logs[rank].collective("loss", (7, -1, -1))
        logs[rank].write(folder)
    if rank_three_waits:
        # On another code path: it waits for a message rank 1 never sends.
        logs[3].recv("debug.probe", 1, (7, -1, -1))
    logs[3].write(folder, waiting=rank_three_waits)
    findings = analyze(analyzer, folder)
    expect(findings["no_record"], [], "no_record")
    for rank in (0, 1, 2):
        wait = wait_of(findings, rank)
        expect((wait["label"], wait["group_seq"], wait["for"]), ("loss", 7, [3]), f"rank {rank}'s wait")
        expect_in("rank 3 did not reach it", wait["why"], f"rank {rank}'s wait")
    expect(findings["suspects"], [3], "suspects")
    expect(findings["not_waiting"], [] if rank_three_waits else [3], "not_waiting")


def skipped_shift(analyzer, folder):
    logs = [RankLog(rank, 2) for rank in range(2)]
    ring_step(logs, 0, layers=4)
    for layer in range(4):
        logs[0].shift(KV, 1, 1, (1, 0, layer))
        if layer != 1:  # rank 1 skips its layer-1 shift and gets to the loss one exchange early
            logs[1].shift(KV, 0, 0, (1, 0, layer))
    logs[1].collective("loss", (1, -1, -1))
    for log in logs:
        log.write(folder)
    findings = analyze(analyzer, folder)
    expect(len(findings["disagreements"]), 1, "disagreements")
    finding = findings["disagreements"][0]
    expect((finding["kind"], finding["suspects"]), ("point-to-point", [1]), "the disagreement")
    expect_in("rank 0's receive #5 from rank 1 is ring.forward.kv (step 1, micro-batch 0, layer 1); rank 1's send #5"
              " to rank 0 is ring.forward.kv (step 1, micro-batch 0, layer 2)", finding["text"], "the disagreement")
    expect(findings["suspects"], [1], "suspects")


def skipped_send_without_later_entries(analyzer, folder, layers):
    """Only the mismatching pair is recorded: whose layer runs ahead tells, in either pass direction."""
    logs = [RankLog(rank, 2) for rank in range(2)]
    logs[1].send(KV, 0, (0, 0, layers[0]))
    logs[1].send(KV, 0, (0, 0, layers[2]))  # rank 1 skipped layers[1]
    logs[0].recv(KV, 1, (0, 0, layers[0]))
    logs[0].recv(KV, 1, (0, 0, layers[1]))
    for log in logs:
        log.write(folder)
    findings = analyze(analyzer, folder)
    expect(len(findings["disagreements"]), 1, "disagreements")
    expect(findings["disagreements"][0]["suspects"], [1], "the disagreement's suspects")
    expect(findings["suspects"], [1], "suspects")


def collective_pair_disagreement(analyzer, folder):
    logs = [RankLog(rank, 4) for rank in range(4)]
    pair, other = [0, 1], [2, 3]
    for step in range(5):
        for log in logs:
            log.collective("loss", (step, -1, -1), group=pair if log.rank in pair else other)
    logs[0].collective("loss", (5, -1, -1), group=pair)
    logs[1].collective("grad_norm", (5, -1, -1), group=pair)
    for rank in other:
        logs[rank].collective("end", (-1, -1, -1), op="barrier")
    for log in logs:
        log.write(folder)
    findings = analyze(analyzer, folder)
    expect(len(findings["disagreements"]), 1, "disagreements")
    finding = findings["disagreements"][0]
    expect((finding["kind"], finding["group"], finding["count"]), ("collective", [0, 1], 5), "the disagreement")
    expect(sorted(label for v in finding["variants"] for label in [v["label"]]), ["grad_norm", "loss"], "variants")
    expect(finding["suspects"], [0, 1], "the disagreement's suspects (cannot tell)")
    expect(findings["suspects"], [0, 1], "suspects")


def collective_outvoted(analyzer, folder):
    logs = [RankLog(rank, 4) for rank in range(4)]
    for step in range(5):
        for log in logs:
            log.collective("loss", (step, -1, -1))
    for log in logs:
        log.collective("grad_norm" if log.rank == 1 else "loss", (5, -1, -1))
        log.write(folder)
    findings = analyze(analyzer, folder)
    expect(len(findings["disagreements"]), 1, "disagreements")
    expect_in("rank 1 is outvoted", findings["disagreements"][0]["text"], "the disagreement")
    expect(findings["suspects"], [1], "suspects")


def collective_skipped(analyzer, folder):
    """Rank 1 skipped the loss: its later collectives are rank 0's one further on."""
    logs = [RankLog(rank, 2) for rank in range(2)]
    for log in logs:
        log.collective("loss", (0, -1, -1))
    logs[0].collective("loss", (1, -1, -1))
    logs[0].collective("grad_norm", (1, -1, -1))
    logs[1].collective("grad_norm", (1, -1, -1))
    logs[1].collective("loss", (2, -1, -1))
    for log in logs:
        log.write(folder)
    findings = analyze(analyzer, folder)
    expect([d["suspects"] for d in findings["disagreements"]], [[1]], "the disagreement's suspects")
    expect(findings["suspects"], [1], "suspects")


def healthy_but_one_missing(analyzer, folder, world):
    logs = [RankLog(rank, world) for rank in range(world)]
    for step in range(30):  # past the 64 entries a record keeps
        ring_step(logs, step)
    for log in logs:
        log.collective("loss", (30, -1, -1))
        if log.rank != 5:
            log.write(folder)
    findings = analyze(analyzer, folder)
    expect(findings["no_record"], [5], "no_record")
    expect(findings["suspects"], [5], "suspects")
    expect(findings["disagreements"], [], "disagreements")
    expect(len(findings["waiting"]), world - 1, "waiting ranks")
    assert all(wait["for"] == [5] for wait in findings["waiting"]), findings["waiting"]
    lines = run(analyzer, folder)[1].splitlines()
    expect(len(lines), 3, f"text lines {lines}")
    assert lines[1].startswith(f"ranks 0-4, 6{', 7' if world == 8 else '-' + str(world - 1)} wait in loss"), lines[1]


def pipeline_channels(analyzer, folder):
    """Interleaved pp = 2: rank 1 sends rank 0 activations (its last chunk's outputs wrap round) and
    gradients, on two communicators of the same ranks, in another order than rank 0 receives them. Counted
    per channel (the gradients' communicator is named), nothing disagrees and rank 0's wait for the
    gradient that rank 1 never sent (it is busy elsewhere) blames rank 1; counted together, they would
    disagree."""
    gradients = "miniattn.pipeline_gradients"
    for channels in (True, False):
        logs = [RankLog(rank, 2) for rank in range(2)]
        channel = gradients if channels else ""
        logs[1].send("pipeline.activations", 0, (0, 0, -1))
        logs[1].send("pipeline.gradients", 0, (0, 0, -1), channel=channel)
        logs[1].send("pipeline.activations", 0, (0, 1, -1))
        logs[0].recv("pipeline.activations", 1, (0, 0, -1))
        logs[0].recv("pipeline.activations", 1, (0, 1, -1))
        logs[0].recv("pipeline.gradients", 1, (0, 0, -1), channel=channel)
        logs[0].recv("pipeline.gradients", 1, (0, 1, -1), channel=channel)
        logs[0].write(folder)
        logs[1].write(folder, waiting=False)  # busy outside any exchange
        findings = analyze(analyzer, folder)
        if channels:
            expect(findings["disagreements"], [], "disagreements with the gradients on their own channel")
            expect(findings["suspects"], [1], "suspects")
            expect(wait_of(findings, 0)["for"], [1], "rank 0 waits for")
        else:
            assert findings["disagreements"], "one channel: the orders should disagree"


def truncated_peer(analyzer, folder):
    """Rank 1's record no longer shows whether it sent to rank 0: the analyzer must not guess."""
    logs = [RankLog(rank, 2) for rank in range(2)]
    logs[1].send(KV, 0, (0, 0, 0))
    for step in range(70):
        logs[1].collective("loss", (step, -1, -1), group=[1])
    logs[0].recv(KV, 1, (0, 0, 0))
    logs[0].recv(KV, 1, (0, 0, 1))
    logs[0].write(folder)
    logs[1].write(folder, waiting=False)
    findings = analyze(analyzer, folder)
    expect([b["kind"] for b in wait_of(findings, 0)["blames"]], ["unknown"], "rank 0's blames")
    expect(findings["suspects"], [], "suspects")
    assert run(analyzer, folder)[1].splitlines()[-1].startswith("suspect: none can be told"), "no suspect line"


def world_size_given(analyzer, folder):
    logs = [RankLog(rank, 2) for rank in range(2)]
    ring_step(logs, 0)
    logs[0].shift(KV, 1, 1, (1, 0, 0))
    logs[0].write(folder, drop=("world_size",))
    findings = analyze(analyzer, folder)
    expect((findings["world_size"], findings["no_record"]), (2, [1]), "world size from the groups")
    assert findings["notes"], "a note should say the world size was guessed"
    findings = analyze(analyzer, folder, "--world-size", "3")
    expect((findings["world_size"], findings["no_record"]), (3, [1, 2]), "--world-size 3")


def unreadable(analyzer, folder):
    code, _, err = run(analyzer, folder)
    expect(code, 2, f"exit status on an empty folder ({err.strip()})")
    code, _, err = run(analyzer, os.path.join(folder, "missing"))
    expect(code, 2, f"exit status on a missing folder ({err.strip()})")
    logs = [RankLog(rank, 2) for rank in range(2)]
    ring_step(logs, 0)
    logs[0].write(folder)
    with open(os.path.join(folder, "rank1.json"), "w", encoding="utf-8") as stream:
        stream.write('{"format": "miniattn flight record 1", "rank": 1,')
    code, _, err = run(analyzer, folder)
    expect(code, 2, "exit status on malformed JSON")
    assert "rank1.json" in err, f"the message should name rank1.json: {err!r}"
    logs[1].entries[0]["op"] = "gather"
    logs[1].write(folder)
    code, _, err = run(analyzer, folder)
    expect(code, 2, "exit status on an unknown op")
    assert "rank1.json" in err and "gather" in err, f"the message should name rank1.json and the op: {err!r}"
    # Two communicators with the same ranks counting apart would break the matching: refused, not guessed at.
    logs[1].entries[0]["op"] = "shift"
    logs[1].collective("loss", (1, -1, -1))["group_seq"] = 0
    logs[1].write(folder)
    code, _, err = run(analyzer, folder)
    expect(code, 2, "exit status on a collective count met twice")
    assert "rank1.json" in err and "a second collective #0" in err, f"the message should name rank1.json: {err!r}"


CASES = {
    "ring of 2, rank 1 stopped": ring_of_two_rank_one_stopped,
    "ring of 4, rank 2 stopped": ring_of_four_rank_two_stopped,
    "collective stall, rank 3 on another path": lambda a, f: collective_stall(a, f, rank_three_waits=True),
    "collective stall, rank 3 not waiting": lambda a, f: collective_stall(a, f, rank_three_waits=False),
    "rank 1 skipped a shift": skipped_shift,
    "rank 1 skipped a send, forward pass": lambda a, f: skipped_send_without_later_entries(a, f, (0, 1, 2)),
    "rank 1 skipped a send, backward pass": lambda a, f: skipped_send_without_later_entries(a, f, (3, 2, 1)),
    "collective disagreement on a pair": collective_pair_disagreement,
    "collective disagreement, outvoted": collective_outvoted,
    "collective skipped": collective_skipped,
    "8 ranks, one record missing": lambda a, f: healthy_but_one_missing(a, f, 8),
    "256 ranks, one record missing": lambda a, f: healthy_but_one_missing(a, f, 256),
    "pipeline's two channels": pipeline_channels,
    "truncated peer record": truncated_peer,
    "world size from groups and --world-size": world_size_given,
    "unreadable folders and files": unreadable,
}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    analyzer = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "..", "scripts", "flight_record.py")
    failures = []
    for name, case in CASES.items():
        with tempfile.TemporaryDirectory(prefix="flight_record_") as folder:
            try:
                case(analyzer, folder)
            except (AssertionError, ValueError, KeyError, IndexError, TypeError) as error:
                failures.append(f"{name}: {type(error).__name__}: {error}")
    for failure in failures:
        print(f"FAIL {failure}")
    print(f"{len(CASES) - len(failures)} of {len(CASES)} cases pass")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
