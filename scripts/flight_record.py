#!/usr/bin/env python3
"""Reads the flight records of a miniattn job that stalled and names the rank to blame.

    python3 scripts/flight_record.py FOLDER [--world-size N] [--json]

When an exchange's deadline passes (run.exchange_timeout_s), each rank still
alive writes FOLDER/rank<R>.json: its last (at most 64) exchanges, oldest
first. A rank that was stopped (kill -STOP), died, or is stuck outside an
exchange (in a kernel, in I/O) writes nothing, and that absence is evidence too.

The record ("format": "miniattn flight record 1"):
  rank, world_size, host, pid, deadline_seconds, written_at_s
  waiting       index into entries of the exchange the rank waited in when its
                deadline passed, or null (it waited in no recorded exchange)
  entries[]     seq           the rank's count of exchanges since the start, from 0;
                              consecutive (older entries fall out of the buffer)
                label, op     op: shift (a send and a receive posted together),
                              send, recv, or a collective: allreduce, alltoall,
                              allgather, reduce_scatter, bcast, barrier
                group         world ranks of the communicator, in its rank order;
                              a group is known by its sorted ranks
                channel       "" or the name of a communicator that duplicates
                              another's ranks (the pipeline's gradients): its
                              point-to-point messages are counted on their own
                group_seq     collectives: the rank's count of collectives on the group
                send_to, send_seq, recv_from, recv_seq
                              point-to-point: the peer's world rank, and the rank's
                              count of sends to (receives from) that peer in the
                              group; null where the op has no such direction
                step, micro_batch, layer   where the run was (-1: none applies)
                posted_s, completed_s      the rank's own clock; completed_s is
                              null while the exchange has not completed

How exchanges match (MPI's ordering rules):
  - rank A's send #k to B in a group meets B's receive #k from A in that group
    (and channel);
  - every member's collective #n on a group is the same collective, so they
    agree on label and op (and normally on step, micro-batch and layer).

What it prints, most important first:
  1. the ranks that wrote no record;
  2. what each waiting rank waits in, for how long, and for whom: a peer that
     wrote no record, never posted the matching send or receive, or did not
     reach the collective (ranks waiting in the same collective share a line);
  3. disagreements on the order of exchanges (a bug rather than a stall): the
     first per pair of ranks and per group, with both sides;
  4. "suspect: ...": the ranks at the end of the chains of waits (no record,
     or never posted what others wait for while waiting on nobody themselves;
     where ranks wait for each other, the one most waited for), and the side
     of a disagreement that runs ahead (it skipped an exchange) or is outvoted.

With --json it prints the findings as one JSON object instead: no_record,
waiting (rank, label, seq, for, why, blames), not_waiting, disagreements,
suspects, suspect_reasons, notes.

Exit status: 0 when the folder could be read, suspects or not; 2 when it is
missing, holds no rank*.json, or a file is not a readable record (the message
names the file).
"""

import argparse
import glob
import json
import os
import re
import sys

FORMAT = "miniattn flight record 1"
COLLECTIVE_OPS = ("allreduce", "alltoall", "allgather", "reduce_scatter", "bcast", "barrier")
POINT_TO_POINT_FIELDS = {"send": ("send_to", "send_seq"), "recv": ("recv_from", "recv_seq"),
                         "shift": ("send_to", "send_seq", "recv_from", "recv_seq")}
EXCHANGE_FIELDS = ("group_seq", "send_to", "send_seq", "recv_from", "recv_seq")
RECORD_NAME = re.compile(r"rank(\d+)\.json")
EXIT_UNREADABLE = 2
# A peer blamed with one of these holds the waiting rank up: it is a link in the chain of waits.
BLOCKING = ("no_record", "not_posted", "did_not_reach")
# The waiting rank still waits for these peers, though they are not (yet) to blame.
AWAITED = BLOCKING + ("posted", "unknown", "disagrees")
# Beyond this many ranks, lines list ranks without the details of each.
DETAILED_RANKS = 8


class RecordError(Exception):
    """A folder or file that cannot be read as flight records; the message names it."""


def is_int(value):
    # JSON true/false load as Python bools, which are ints, yet never a count or a rank
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def group_key(group):
    return tuple(sorted(group))


def channel_key(entry):
    """Where an entry's point-to-point messages are counted: its group, and its channel if any."""
    return group_key(entry["group"]), entry.get("channel") or ""


# ---------------------------------------------------------------- reading

def read_folder(folder):
    """Every rank*.json in the folder, as {rank: record}."""
    if not os.path.isdir(folder):
        raise RecordError(f"{folder}: not a folder" if os.path.exists(folder) else f"{folder}: no such folder")
    paths = sorted(glob.glob(os.path.join(folder, "rank*.json")))
    if not paths:
        raise RecordError(f"{folder}: holds no rank*.json flight record")
    records = {}
    for path in paths:
        record = read_record(path)
        if record["rank"] in records:
            raise RecordError(f"{path}: rank {record['rank']} again (also {records[record['rank']]['path']})")
        records[record["rank"]] = record
    return records


def read_record(path):
    match = RECORD_NAME.fullmatch(os.path.basename(path))
    if not match:
        raise RecordError(f"{path}: the name is not rank<R>.json")
    try:
        with open(path, encoding="utf-8") as stream:
            record = json.load(stream)
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise RecordError(f"{path}: not readable as JSON: {error}") from None
    try:
        check_record(record, int(match.group(1)))
        IndexedRecord(record)  # a count met twice on one channel is a writer's bug: say so now
    except ValueError as error:
        raise RecordError(f"{path}: {error}") from None
    record["path"] = path
    return record


def check_record(record, rank_in_name):
    if not isinstance(record, dict):
        raise ValueError("not a JSON object")
    if record.get("format") != FORMAT:
        raise ValueError(f"format is {record.get('format')!r}, not {FORMAT!r}")
    rank = record.get("rank")
    if not is_int(rank) or rank != rank_in_name:
        raise ValueError(f"rank is {rank!r}, yet the file is named for rank {rank_in_name}")
    world = record.get("world_size")
    if world is not None and not (is_int(world) and world > rank):
        raise ValueError(f"world_size {world!r} is not an integer above the rank")
    if not is_number(record.get("written_at_s")):
        raise ValueError(f"written_at_s is {record.get('written_at_s')!r}, not a number")
    entries = record.get("entries")
    if not isinstance(entries, list):
        raise ValueError("entries is not a list")
    good_groups = set()  # a world-sized group is checked once, not once per entry
    for index, entry in enumerate(entries):
        check_entry(entry, rank, f"entries[{index}]", good_groups)
        if index and entry["seq"] != entries[index - 1]["seq"] + 1:
            raise ValueError(f"entries[{index}]: seq {entry['seq']} does not follow {entries[index - 1]['seq']}")
    if "waiting" not in record:
        raise ValueError("waiting is missing (null when the rank waits in no recorded exchange)")
    waiting = record["waiting"]
    if waiting is not None and not (is_int(waiting) and 0 <= waiting < len(entries)):
        raise ValueError(f"waiting is {waiting!r}, neither null nor an index into entries")


def check_entry(entry, rank, where, good_groups):
    if not isinstance(entry, dict):
        raise ValueError(f"{where} is not a JSON object")
    for key in ("seq", "step", "micro_batch", "layer"):
        if not is_int(entry.get(key)):
            raise ValueError(f"{where}: {key} is {entry.get(key)!r}, not an integer")
    if not isinstance(entry.get("label"), str):
        raise ValueError(f"{where}: label is {entry.get('label')!r}, not a string")
    if not is_number(entry.get("posted_s")):
        raise ValueError(f"{where}: posted_s is {entry.get('posted_s')!r}, not a number")
    if "completed_s" not in entry or not (entry["completed_s"] is None or is_number(entry["completed_s"])):
        raise ValueError(f"{where}: completed_s is {entry.get('completed_s', 'missing')!r}, not a number or null")
    group = entry.get("group")
    if not isinstance(group, list):
        raise ValueError(f"{where}: group {group!r} is not a list")
    if tuple(group) not in good_groups:
        ranks = all(is_int(member) and member >= 0 for member in group)
        if not (ranks and len(set(group)) == len(group) and rank in group):
            raise ValueError(f"{where}: group {group!r} is not a list of distinct world ranks holding rank {rank}")
        good_groups.add(tuple(group))
    check_exchange_fields(entry, where)


def check_exchange_fields(entry, where):
    op = entry.get("op")
    if op in COLLECTIVE_OPS:
        wanted = ("group_seq",)
    elif op in POINT_TO_POINT_FIELDS:
        wanted = POINT_TO_POINT_FIELDS[op]
    else:
        raise ValueError(f"{where}: op {op!r} is none of {', '.join(COLLECTIVE_OPS + tuple(POINT_TO_POINT_FIELDS))}")
    for key in EXCHANGE_FIELDS:
        if key not in entry:
            raise ValueError(f"{where}: {key} is missing (null where it does not apply)")
        value = entry[key]
        if key in wanted and not (is_int(value) and value >= 0):
            raise ValueError(f"{where}: {key} is {value!r}; op {op} needs a count or a rank")
        if key not in wanted and value is not None:
            raise ValueError(f"{where}: {key} is {value!r}; it is null for op {op}")
    for key in ("send_to", "recv_from"):
        if entry[key] is not None and entry[key] not in entry["group"]:
            raise ValueError(f"{where}: {key} {entry[key]} is not in the group {entry['group']}")


def world_size_of(records, override):
    """The world size and notes on it: --world-size, else the records' (which must agree), else guessed."""
    sizes = {record["world_size"] for record in records.values() if record.get("world_size") is not None}
    if override is not None:
        world, notes = override, []
    elif len(sizes) > 1:
        paths = ", ".join(f"{r['path']} ({r.get('world_size')})" for r in records.values())
        raise RecordError(f"the records disagree on world_size: {paths}; pass --world-size")
    elif sizes:
        world, notes = sizes.pop(), []
    else:
        groups = {tuple(e["group"]) for record in records.values() for e in record["entries"]}
        world = 1 + max([max(records)] + [max(group) for group in groups])
        notes = [f"no record gives world_size: assuming {world}, the highest rank seen plus one (pass --world-size)"]
    for record in records.values():
        highest = max([record["rank"]] + [max(group) for group in {tuple(e["group"]) for e in record["entries"]}])
        if highest >= world:
            raise RecordError(f"{record['path']}: rank {highest} is outside a world of {world}")
    return world, notes


# ---------------------------------------------------------------- indexing

class IndexedRecord:
    """One rank's record, indexed the way MPI matches exchanges: by channel and count."""

    def __init__(self, record):
        self.rank = record["rank"]
        self.entries = record["entries"]
        self.written_at = record["written_at_s"]
        self.host, self.pid = record.get("host"), record.get("pid")
        # Counting starts at seq 0: a record that starts later lost its oldest entries.
        self.truncated = bool(self.entries) and self.entries[0]["seq"] > 0
        self.waiting = None if record["waiting"] is None else self.entries[record["waiting"]]
        self.sends, self.receives, self.collectives = {}, {}, {}
        for index, entry in enumerate(self.entries):
            self._index(entry, f"entries[{index}]")

    def _index(self, entry, where):
        group = group_key(entry["group"])
        if entry["op"] in COLLECTIVE_OPS:
            self._add(self.collectives, group, entry["group_seq"], entry, where, "collective")
            return
        channel = channel_key(entry)
        if entry["send_to"] is not None:
            self._add(self.sends, (channel, entry["send_to"]), entry["send_seq"], entry, where,
                      f"send to {entry['send_to']}")
        if entry["recv_from"] is not None:
            self._add(self.receives, (channel, entry["recv_from"]), entry["recv_seq"], entry, where,
                      f"receive from {entry['recv_from']}")

    @staticmethod
    def _add(table, channel, count, entry, where, what):
        by_count = table.setdefault(channel, {})
        if count in by_count:
            # Counts are kept per set of ranks: two communicators with the same ranks must share them.
            raise ValueError(f"{where}: a second {what} #{count} on the group {list(entry['group'])}"
                             f" (seq {by_count[count]['seq']} is one too)")
        by_count[count] = entry

    def lookup(self, table, channel, count):
        """('found', entry), ('absent', last entry or None): never posted, ('older', None) or ('unknown', None)."""
        by_count = table.get(channel, {})
        if count in by_count:
            return "found", by_count[count]
        # The newest entries are always in the record, so a count past the last one was never posted.
        if by_count and count > max(by_count):
            return "absent", by_count[max(by_count)]
        if not by_count and not self.truncated:
            return "absent", None
        if by_count and count < min(by_count):
            return "older", None
        return "unknown", None


# ---------------------------------------------------------------- words

def format_ranks(ranks):
    """'rank 3', 'ranks 0-2, 5'."""
    ranks = sorted(ranks)
    runs, start = [], 0
    for index in range(1, len(ranks) + 1):
        if index == len(ranks) or ranks[index] != ranks[index - 1] + 1:
            first, last = ranks[start], ranks[index - 1]
            runs.append(str(first) if first == last else f"{first}, {last}" if last == first + 1 else f"{first}-{last}")
            start = index
    return f"rank{'' if len(ranks) == 1 else 's'} {', '.join(runs)}"


def group_name(group, world):
    return "all ranks" if group_key(group) == tuple(range(world)) else "the group of " + format_ranks(group)


def position(item):
    """Where the run was: 'step 0, micro-batch 0, layer 1', leaving out what does not apply."""
    names = (("step", "step"), ("micro_batch", "micro-batch"), ("layer", "layer"))
    words = [f"{name} {item[key]}" for key, name in names if item[key] != -1]
    return ", ".join(words) or "outside any step"


def describe(entry, with_op=False):
    return f"{entry['label']} ({entry['op'] + ', ' if with_op else ''}{position(entry)})"


def exchange_name(verb, count, peer):
    return f"{verb} #{count} {'to' if verb == 'send' else 'from'} rank {peer}"


def exchange_key(entry):
    return entry["label"], entry["step"], entry["micro_batch"], entry["layer"]


def collective_key(entry):
    return (entry["op"],) + exchange_key(entry)


def blame(rank, kind, text):
    return {"rank": rank, "kind": kind, "text": text}


# ---------------------------------------------------------------- waits

def point_to_point_blames(indexed, records):
    """What holds up each half (receive, send) of the rank's point-to-point wait."""
    entry = indexed.waiting
    halves = []
    if entry["recv_from"] is not None:
        halves.append(("receive", entry["recv_from"], entry["recv_seq"]))
    if entry["send_to"] is not None:
        halves.append(("send", entry["send_to"], entry["send_seq"]))
    return [half_blame(indexed.rank, entry, half, records) for half in halves]


def half_blame(rank, entry, half, records):
    verb, peer, count = half
    peer_verb = "send" if verb == "receive" else "receive"
    mine, theirs = f"its {exchange_name(verb, count, peer)}", exchange_name(peer_verb, count, rank)
    peer_record = records.get(peer)
    if peer_record is None:
        return blame(peer, "no_record", f"{mine}: rank {peer} wrote no record")
    table = peer_record.sends if peer_verb == "send" else peer_record.receives
    state, found = peer_record.lookup(table, (channel_key(entry), rank), count)
    if state == "absent":
        count_field = "send_seq" if peer_verb == "send" else "recv_seq"
        last = (f"its last is #{found[count_field]}, {describe(found)}" if found
                else f"it has no {peer_verb} {'to' if peer_verb == 'send' else 'from'} rank {rank} in its record")
        return blame(peer, "not_posted", f"{mine}: rank {peer} never posted its {theirs} ({last})")
    if state == "older":
        return blame(peer, "older", f"{mine}: rank {peer}'s {theirs} is older than its record (posted long ago: odd)")
    if state == "unknown":
        return blame(peer, "unknown", f"{mine}: rank {peer}'s record does not reach back far enough to tell")
    return found_half_blame(entry, found, peer, mine, theirs)


def found_half_blame(entry, found, peer, mine, theirs):
    disagrees = exchange_key(found) != exchange_key(entry)
    note = f" (it is {describe(found)} there: see the disagreement)" if disagrees else ""
    if found["completed_s"] is None:
        return blame(peer, "disagrees" if disagrees else "posted",
                     f"{mine}: rank {peer} posted its {theirs} (seq {found['seq']}), not completed there either{note}")
    # A shift waits for both halves: the half whose peer completed is likely done.
    if entry["op"] == "shift":
        return blame(peer, "done", f"{mine}: rank {peer}'s {theirs} completed, so this half is likely done{note}")
    return blame(peer, "completed", f"{mine}: rank {peer}'s {theirs} completed (odd: sent but not received){note}")


def member_blame(member, entry, records):
    """How far one member of the group got towards the collective `entry`."""
    count = entry["group_seq"]
    member_record = records.get(member)
    if member_record is None:
        return blame(member, "no_record", f"rank {member} wrote no record")
    state, found = member_record.lookup(member_record.collectives, group_key(entry["group"]), count)
    if state == "absent":
        last = (f"its last collective on the group is #{found['group_seq']}, {describe(found, with_op=True)}" if found
                else "it has no collective on the group in its record")
        return blame(member, "did_not_reach", f"rank {member} did not reach it ({last})")
    if state in ("older", "unknown"):
        text = ("is older than its record (odd)" if state == "older"
                else "is not in its record, which starts too late to tell")
        return blame(member, state, f"rank {member}'s collective #{count} on the group {text}")
    if collective_key(found) != collective_key(entry):
        return blame(member, "disagrees", f"rank {member}'s collective #{count} on the group is "
                                          f"{describe(found, with_op=True)}: see the disagreement")
    if found["completed_s"] is not None:
        return blame(member, "completed", f"rank {member} completed it (odd)")
    return blame(member, "reached", f"rank {member} reached it")


def collective_why(blames):
    no_record = [b["rank"] for b in blames if b["kind"] == "no_record"]
    parts = [f"{format_ranks(no_record)} wrote no record"] if no_record else []
    others = [b["text"] for b in blames if b["kind"] not in ("no_record", "reached")]
    if len(others) > DETAILED_RANKS:
        others = others[:DETAILED_RANKS] + [f"and {len(others) - DETAILED_RANKS} more"]
    return "; ".join(parts + others) or "every other member reached it, yet it has not completed"


def analyze_wait(indexed, records, members_cache):
    entry = indexed.waiting
    if entry["op"] in COLLECTIVE_OPS:
        # Every rank waiting in the same collective asks about the same members: ask once.
        key = (group_key(entry["group"]), collective_key(entry), entry["group_seq"])
        if key not in members_cache:
            members_cache[key] = [member_blame(member, entry, records) for member in entry["group"]]
        blames = [b for b in members_cache[key] if b["rank"] != indexed.rank]
        why = collective_why(blames)
    else:
        blames = point_to_point_blames(indexed, records)
        why = "; ".join(b["text"] for b in blames)
    return {"rank": indexed.rank, "label": entry["label"], "seq": entry["seq"], "op": entry["op"],
            "group": entry["group"], "group_seq": entry["group_seq"], "step": entry["step"],
            "micro_batch": entry["micro_batch"], "layer": entry["layer"],
            "waited_s": round(indexed.written_at - entry["posted_s"], 3), "host": indexed.host, "pid": indexed.pid,
            "for": sorted({b["rank"] for b in blames if b["kind"] in AWAITED}), "why": why,
            "blames": [{"rank": b["rank"], "kind": b["kind"]} for b in blames if b["kind"] != "reached"]}


# ---------------------------------------------------------------- disagreements

def following(by_count, count, key):
    """The keys of the entries from #count on, while the record has them."""
    keys = []
    while count in by_count:
        keys.append(key(by_count[count]))
        count += 1
    return keys


def one_ahead(leading, trailing):
    """True when leading's #k+i is trailing's #k+i+1 wherever both records have them (once at least)."""
    pairs = list(zip(leading, trailing[1:]))
    return bool(pairs) and all(a == b for a, b in pairs)


def runs_ahead(first, second):
    """'first' or 'second': the side whose exchanges from #k on are the other's from #k+1 on."""
    first_ahead, second_ahead = one_ahead(first, second), one_ahead(second, first)
    if first_ahead != second_ahead:
        return "first" if first_ahead else "second"
    return None


def layer_direction(indexed_records, label, step, micro_batch):
    """+1 when this label's layers rise within a micro-batch (a forward pass), -1 when they fall."""
    trend = 0
    for indexed in indexed_records:
        layers = [e["layer"] for e in indexed.entries
                  if (e["label"], e["step"], e["micro_batch"]) == (label, step, micro_batch)]
        trend += sum((b > a) - (b < a) for a, b in zip(layers, layers[1:]))
    return -1 if trend < 0 else 1


def further_along(first, second, indexed_records):
    """'first' or 'second' by where the run was, when the later records cannot tell; else None."""
    first_at, second_at = (first["step"], first["micro_batch"]), (second["step"], second["micro_batch"])
    if first_at != second_at:
        return "first" if first_at > second_at else "second"
    if first["label"] != second["label"] or first["layer"] == second["layer"]:
        return None
    direction = layer_direction(indexed_records, first["label"], first["step"], first["micro_batch"])
    return "first" if (first["layer"] - second["layer"]) * direction > 0 else "second"


def ahead_side(first_table, second_table, count, key, indexed_records):
    side = runs_ahead(following(first_table, count, key), following(second_table, count, key))
    if side is not None:
        return side, "what follows matches the other side's one further on"
    side = further_along(first_table[count], second_table[count], indexed_records)
    return side, "it is further along"


def first_mismatch(first_table, second_table, key):
    for count in sorted(set(first_table) & set(second_table)):
        if key(first_table[count]) != key(second_table[count]):
            return count
    return None


def point_to_point_disagreements(records, world):
    """The first mismatch of each pair of ranks in each group and channel, both directions taken together."""
    first_by_pair = {}
    for sender, indexed in sorted(records.items()):
        for (channel, receiver), sends in sorted(indexed.sends.items()):
            if receiver not in records:
                continue
            receives = records[receiver].receives.get((channel, sender), {})
            count = first_mismatch(sends, receives, exchange_key)
            if count is None:
                continue
            finding = point_to_point_disagreement(channel, (sender, sends), (receiver, receives), count, records,
                                                  world)
            pair = (channel, min(sender, receiver), max(sender, receiver))
            # Both directions of a pair show one skipped shift: keep the one earliest in the lower rank's
            # record, and of one shift the direction that reads "the sender runs ahead".
            order = ((sends if sender == pair[1] else receives)[count]["seq"], finding["suspects"] != [sender])
            if pair not in first_by_pair or order < first_by_pair[pair][0]:
                first_by_pair[pair] = (order, finding)
    return [first_by_pair[pair][1] for pair in sorted(first_by_pair)]


def point_to_point_disagreement(channel, sending, receiving, count, records, world):
    (sender, sends), (receiver, receives) = sending, receiving
    group, name = channel
    side, because = ahead_side(sends, receives, count, exchange_key, (records[sender], records[receiver]))
    if side is None:
        suspects, verdict = [sender, receiver], "one of them skipped or added an exchange"
        reasons = {sender: f"disagrees with rank {receiver} on the order of exchanges",
                   receiver: f"disagrees with rank {sender} on the order of exchanges"}
    else:
        ahead, other = (sender, receiver) if side == "first" else (receiver, sender)
        suspects = [ahead]
        verdict = f"rank {ahead} runs one exchange ahead ({because}): it skipped one, or rank {other} added one"
        reasons = {ahead: f"runs one exchange ahead of rank {other}"}
    where = ("" if group == tuple(range(world)) else f" in {group_name(group, world)}") + (f" ({name})" if name else "")
    text = (f"ranks disagree on the order of exchanges{where}:"
            f" rank {receiver}'s {exchange_name('receive', count, sender)} is {describe(receives[count])};"
            f" rank {sender}'s {exchange_name('send', count, receiver)} is {describe(sends[count])}: {verdict}")
    sides = [dict(rank=sender, role=f"send #{count} to {receiver}", **entry_summary(sends[count])),
             dict(rank=receiver, role=f"receive #{count} from {sender}", **entry_summary(receives[count]))]
    return {"kind": "point-to-point", "group": list(group), "channel": name, "count": count, "sides": sides,
            "suspects": sorted(suspects), "suspect_reasons": reasons, "text": text}


def entry_summary(entry):
    return {key: entry[key] for key in ("seq", "label", "op", "step", "micro_batch", "layer")}


def collective_disagreements(records, world):
    """The first collective on each group whose members' records disagree on what it is."""
    tables_by_group = {}
    for rank, indexed in sorted(records.items()):
        for group, by_count in indexed.collectives.items():
            tables_by_group.setdefault(group, {})[rank] = by_count
    found = []
    for group, tables in sorted(tables_by_group.items()):
        for count in sorted(set().union(*tables.values())):
            if len({collective_key(t[count]) for t in tables.values() if count in t}) > 1:
                found.append(collective_disagreement(group, tables, count, records, world))
                break
    return found


def collective_disagreement(group, tables, count, records, world):
    variants = {}
    for rank, by_count in sorted(tables.items()):
        if count in by_count:
            variants.setdefault(collective_key(by_count[count]), []).append(rank)
    suspects, verdict, reason = collective_verdict(variants, tables, count, records)
    sides = "; ".join(f"{format_ranks(ranks)} {'has' if len(ranks) == 1 else 'have'} "
                      f"{describe(tables[ranks[0]][count], with_op=True)}" for ranks in variants.values())
    summaries = [dict(ranks=ranks, **entry_summary(tables[ranks[0]][count])) for ranks in variants.values()]
    for summary in summaries:
        del summary["seq"]  # each rank's own seq differs; the group count is what they share
    reason = f"{reason} on {group_name(group, world)}"
    return {"kind": "collective", "group": list(group), "count": count, "variants": summaries,
            "suspects": sorted(suspects), "suspect_reasons": {rank: reason for rank in suspects},
            "text": f"ranks disagree on collective #{count} on {group_name(group, world)}: {sides}: {verdict}"}


def collective_verdict(variants, tables, count, records):
    """Who is wrong: the outvoted side, else the side that runs ahead of the other, else everyone."""
    voters = sum(len(ranks) for ranks in variants.values())
    largest = max(variants.values(), key=len)
    if voters >= 3 and 2 * len(largest) > voters:
        others = [rank for ranks in variants.values() if ranks is not largest for rank in ranks]
        verdict = f"{format_ranks(others)} {'is' if len(others) == 1 else 'are'} outvoted"
        return others, verdict, f"outvoted on collective #{count}"
    if len(variants) == 2:
        first, second = variants.values()
        side, because = ahead_side(tables[first[0]], tables[second[0]], count, collective_key,
                                   (records[first[0]], records[second[0]]))
        if side is not None:
            ahead = first if side == "first" else second
            verdict = (f"{format_ranks(ahead)} run{'s' if len(ahead) == 1 else ''} one collective ahead ({because}):"
                       " skipped one, or the others added one")
            return ahead, verdict, "runs one collective ahead"
    everyone = [rank for ranks in variants.values() for rank in ranks]
    return everyone, "which side is wrong cannot be told", f"disagrees on collective #{count}"


# ---------------------------------------------------------------- suspects

def strongly_connected(edges):
    """Tarjan's components of the graph {node: successors}, iteratively (a world can be deep)."""
    index, low, on_stack, stack, components = {}, {}, set(), [], []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        return node, iter(sorted(edges.get(node, ())))

    for root in sorted(set(edges) | {t for targets in edges.values() for t in targets}):
        if root in index:
            continue
        work = [visit(root)]
        while work:
            node, successors = work[-1]
            successor = next(successors, None)
            if successor is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    components.append(pop_component(node, stack, on_stack))
            elif successor not in index:
                work.append(visit(successor))
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
    return components


def pop_component(root, stack, on_stack):
    component = []
    while True:
        node = stack.pop()
        on_stack.discard(node)
        component.append(node)
        if node == root:
            return sorted(component)


def wait_suspects(waits, disagreement_suspects, records):
    """{rank: reason} for the ranks where the chains of waits end."""
    edges = {w["rank"]: {b["rank"] for b in w["blames"] if b["kind"] in BLOCKING} for w in waits}
    awaited_by = {}
    for waiter, targets in edges.items():
        for target in targets:
            awaited_by.setdefault(target, set()).add(waiter)
    reasons = {}
    for component in strongly_connected(edges):
        members = set(component)
        leaves = any(target not in members for node in component for target in edges.get(node, ()))
        if leaves or not members & set(awaited_by):
            continue
        for rank in chain_ends(component, awaited_by, disagreement_suspects):
            reasons[rank] = end_reason(rank, component, awaited_by, records)
    return reasons


def chain_ends(component, awaited_by, disagreement_suspects):
    """Ranks waiting for each other: the one a disagreement blames, else the one most waited for."""
    if len(component) == 1:
        return component
    named = [rank for rank in component if rank in disagreement_suspects]
    if named:
        return named
    most = max(len(awaited_by.get(rank, ())) for rank in component)
    return [rank for rank in component if len(awaited_by.get(rank, ())) == most]


def end_reason(rank, component, awaited_by, records):
    waiters = sorted(awaited_by.get(rank, ()))
    awaited = f"{format_ranks(waiters)} wait{'s' if len(waiters) == 1 else ''} for it"
    indexed = records.get(rank)
    if indexed is None:
        return f"wrote no record; {awaited}"
    if len(component) > 1:
        return f"{format_ranks(component)} wait for each other; {awaited}"
    if indexed.waiting is None:
        return f"waits in no recorded exchange; {awaited}"
    return f"waits in {describe(indexed.waiting)}, though for no rank that stalled; {awaited}"


def suspects_of(waits, disagreements, records):
    from_disagreements = {rank for d in disagreements for rank in d["suspects"]}
    reasons = wait_suspects(waits, from_disagreements, records)
    for finding in disagreements:
        for rank in finding["suspects"]:
            why = finding["suspect_reasons"][rank]
            reasons[rank] = f"{reasons[rank]}; {why}" if rank in reasons else why
    return dict(sorted(reasons.items()))


# ---------------------------------------------------------------- report

def analyze(raw_records, world):
    """The findings as a JSON-ready dict, and the indexed records."""
    records = {rank: IndexedRecord(record) for rank, record in raw_records.items()}
    members_cache = {}
    waits = [analyze_wait(indexed, records, members_cache)
             for rank, indexed in sorted(records.items()) if indexed.waiting is not None]
    disagreements = point_to_point_disagreements(records, world) + collective_disagreements(records, world)
    reasons = suspects_of(waits, disagreements, records)
    findings = {"world_size": world,
                "no_record": [rank for rank in range(world) if rank not in records],
                "waiting": waits,
                "not_waiting": [rank for rank, indexed in sorted(records.items()) if indexed.waiting is None],
                "disagreements": disagreements,
                "suspects": list(reasons),
                "suspect_reasons": {str(rank): why for rank, why in reasons.items()}}
    return findings, records


def wait_lines(waits, world):
    """A line per point-to-point wait, and one per collective for all the ranks that wait in it."""
    similar = {}
    for wait in waits:
        key = (("rank", wait["rank"]) if wait["group_seq"] is None
               else (group_key(wait["group"]), wait["group_seq"], wait["label"], wait["why"]))
        similar.setdefault(key, []).append(wait)
    lines = []
    for group in similar.values():
        wait, ranks = group[0], [w["rank"] for w in group]
        longest = max(w["waited_s"] for w in group)
        if wait["group_seq"] is None:
            what = f"{wait['label']} ({wait['op']}, seq {wait['seq']}, {position(wait)}) for {longest:.1f} s"
        else:
            what = (f"{wait['label']} ({wait['op']} #{wait['group_seq']} on {group_name(wait['group'], world)},"
                    f" {position(wait)}) for {'up to ' if len(group) > 1 else ''}{longest:.1f} s")
        lines.append(f"{format_ranks(ranks)} wait{'s' if len(ranks) == 1 else ''} in {what}: {wait['why']}")
    return lines


def idle_lines(ranks, records):
    """The ranks that wrote a record but wait in no recorded exchange, with their last exchange."""
    if len(ranks) > DETAILED_RANKS:
        return [f"{format_ranks(ranks)} wrote records but wait in no recorded exchange"]
    lines = []
    for rank in ranks:
        entries = records[rank].entries
        last = entries[-1] if entries else None
        done = last and ("completed" if last["completed_s"] is not None else "not completed")
        tail = (f"its last is {describe(last, with_op=True)}, seq {last['seq']}, {done}" if last
                else "its record is empty")
        lines.append(f"rank {rank} wrote a record but waits in no recorded exchange; {tail}")
    return lines


def suspect_line(findings):
    suspects, reasons = findings["suspects"], findings["suspect_reasons"]
    if not suspects:
        why = ("no rank waits in a recorded exchange" if not findings["waiting"]
               else "the waits lead to no rank that stalled, and the records agree")
        return f"suspect: none can be told ({why})"
    if len(suspects) == 1:
        return f"suspect: rank {suspects[0]} ({reasons[str(suspects[0])]})"
    details = "; ".join(f"rank {rank}: {reasons[str(rank)]}" for rank in suspects[:DETAILED_RANKS])
    return f"suspect: {format_ranks(suspects)} ({details}{'; ...' if len(suspects) > DETAILED_RANKS else ''})"


def report_lines(findings, records):
    lines = []
    if findings["no_record"]:
        lines.append(f"{format_ranks(findings['no_record'])} wrote no record:"
                     " stopped, dead, or stuck outside an exchange")
    lines += wait_lines(findings["waiting"], findings["world_size"])
    lines += idle_lines(findings["not_waiting"], records)
    lines += [finding["text"] for finding in findings["disagreements"]]
    lines.append(suspect_line(findings))
    return lines


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", help="the folder the ranks wrote rank<R>.json into")
    parser.add_argument("--world-size", type=int, metavar="N",
                        help="the number of ranks (default: the records' world_size)")
    parser.add_argument("--json", action="store_true", help="print the findings as one JSON object")
    args = parser.parse_args(argv)
    if args.world_size is not None and args.world_size < 1:
        parser.error("--world-size must be at least 1")
    return args


def main(argv=None):
    args = parse_args(argv)
    try:
        raw_records = read_folder(args.folder)
        world, notes = world_size_of(raw_records, args.world_size)
    except RecordError as error:
        print(f"flight_record.py: {error}", file=sys.stderr)
        return EXIT_UNREADABLE
    findings, records = analyze(raw_records, world)
    findings["notes"] = notes
    if args.json:
        print(json.dumps(findings))
        return 0
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    print("\n".join(report_lines(findings, records)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
