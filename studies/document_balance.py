#!/usr/bin/env python3
"""How evenly each layout spreads causal attention work over P ranks when
samples pack documents (data.documents): the work of a query is the number
of keys it sees (causal, same document), a rank's work the sum over its
queries in every sample. Prints max / mean work over the ranks (1.000 is
perfect balance) for contiguous, zigzag and striped, with and without
documents, from the document ids miniattn writes to a snapshot (so the
documents are exactly the generator's).

usage: studies/document_balance.py [--exe build/src/miniattn] [--seq-len 4096] [--batch 32]
"""
import argparse
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def document_ids(exe, seq_len, batch, scratch):
    snapshot = os.path.join(scratch, "documents.h5")
    deck = os.path.join(scratch, "deck.yaml")
    with open(deck, "w") as f:
        f.write(f"model: {{vocab: 64, d_model: 16, heads: 2, ffn: 16, layers: 1, seq_len: {seq_len}, "
                f"batch: {batch}, precision: fp32}}\ntrain: {{steps: 1, seed: 17}}\ndata: {{documents: true}}\n"
                f"io: {{snapshot: {snapshot}, snapshot_step: 0}}\n")
    proc = subprocess.run([exe, deck], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(proc.stderr)
    with h5py.File(snapshot, "r") as f:
        return f["inputs/document_ids"][...]


def owners(layout, seq_len, ranks):
    pos = np.arange(seq_len)
    chunk = seq_len // (2 * ranks)
    if layout == "contiguous":
        return pos // (seq_len // ranks)
    if layout == "zigzag":  # chunks r and 2P - 1 - r
        return np.where(pos // chunk < ranks, pos // chunk, 2 * ranks - 1 - pos // chunk)
    return pos % ranks  # striped


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--exe", default=os.path.join(ROOT, "build", "src", "miniattn"))
    p.add_argument("--seq-len", type=int, default=4096)
    p.add_argument("--batch", type=int, default=32)
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="miniattn-balance-") as scratch:
        ids = document_ids(os.path.abspath(a.exe), a.seq_len, a.batch, scratch)
    pos = np.arange(a.seq_len)
    causal = np.broadcast_to(pos + 1.0, ids.shape)
    # Keys a query sees in its own document: its distance to the document's first position, plus one.
    documents = np.stack([pos - np.searchsorted(row, row, side="left") + 1.0 for row in ids])
    print(f"N {a.seq_len}, {a.batch} samples, {(ids[:, -1] + 1).mean():.2f} documents per sample; "
          "max / mean work over the ranks")
    print("| P | layout | causal | causal + documents |\n|---|---|---|---|")
    for ranks in (2, 4, 8, 16):
        for layout in ("contiguous", "zigzag", "striped"):
            own = owners(layout, a.seq_len, ranks)
            cells = []
            for work in (causal, documents):
                per_rank = np.array([work[:, own == r].sum() for r in range(ranks)])
                cells.append(f"{per_rank.max() / per_rank.mean():.3f}")
            print(f"| {ranks} | {layout} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
