#!/usr/bin/env python3
"""The bf16 training step kernel by kernel, miniattn's beside PyTorch's (scripts/gpu_bringup.sh steps).

    python3 scripts/step_kernels.py pytorch > pytorch_step_kernels.txt
    python3 scripts/step_kernels.py table --csv ncu_step.csv [--step 2] > miniattn_step_kernels.txt

`pytorch`: one step of the bench model (scripts/gpu_reference_bench.py's
make_train_step, eager + SDPA under bf16 autocast, N = 32768) after three
warm-ups, under torch.profiler: CUDA time per kernel name, largest first.

`table`: Nsight Compute's CSV of a miniattn bench run (`ncu --metrics
gpu__time_duration.sum --csv`, one row a kernel launch): the launches of one
step (the n-th from the data kernel that starts each step, SyntheticTask::fill),
summed by a short name (the function a Kokkos kernel runs, cuDNN's fprop and
bprop, cuBLAS's kernel names), largest first.
"""

import argparse
import collections
import csv
import io
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
STEP_START = "SyntheticTask::fill"


def pytorch_step(seq_len):
    import torch
    from torch.profiler import ProfilerActivity, profile
    sys.path.insert(0, HERE)
    import gpu_reference_bench as grb

    step = grb.make_train_step(grb.bench_model_config(seq_len), "eager_sdpa_bf16")
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    return [(e.key, e.device_time_total / 1e3, e.count) for e in prof.key_averages() if e.device_time_total > 0]


def short_name(kernel):
    if "cudnn_generated" in kernel:
        return "cuDNN " + ("fprop" if "fprop" in kernel else "bprop" if "bprop" in kernel else "sdpa")
    if "cuda_parallel_launch" in kernel:
        inner = re.sub(r"^(For|Reduce|Scan)<(Kokkos::CombinedFunctorReducer<)?", "",
                       kernel.split("Kokkos::Parallel", 1)[-1])
        inner = re.sub(r"^void ", "", inner).replace("<unnamed>::", "")
        inner = re.sub(r"^simd::row_packs<\w+, void ", "", inner)
        match = re.match(r"[\w:]+", inner)
        return "Kokkos " + (match.group(0) if match else inner[:60])
    return re.sub(r"^void ", "", kernel).split("(")[0].split("<")[0][:70]


def ncu_launches(path):
    lines = open(path).read().splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    rows = csv.DictReader(io.StringIO("\n".join(line for line in lines[header:] if line.startswith('"'))))
    return [(short_name(r["Kernel Name"]), float(r["Metric Value"].replace(",", "")) / 1e6) for r in rows
            if r["Metric Name"] == "gpu__time_duration.sum"]


def one_step(launches, step):
    starts = [i for i, (name, _) in enumerate(launches) if name.endswith(STEP_START)]
    if len(starts) < step + 1:
        raise SystemExit(f"step_kernels: {len(starts)} steps in the CSV, step {step} asked for (first is 0)")
    end = starts[step + 1] if step + 1 < len(starts) else len(launches)
    return launches[starts[step]:end]


def print_table(rows, title):
    total = sum(ms for _, ms, _ in rows)
    print(f"{title}: {total:.3f} ms of kernel time in {sum(n for _, _, n in rows)} launches")
    for name, ms, n in sorted(rows, key=lambda r: -r[1]):
        print(f"{ms:9.3f} ms {n:4d} x {1e3 * ms / n:9.1f} us  {name[:120]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    pt = sub.add_parser("pytorch", help="PyTorch's bf16 step under torch.profiler")
    pt.add_argument("--seq-len", type=int, default=32768)
    table = sub.add_parser("table", help="one step of an ncu CSV, summed by kernel")
    table.add_argument("--csv", required=True)
    table.add_argument("--step", type=int, default=1, help="which step, from 0 (default 1: after a warm-up)")
    args = ap.parse_args()
    if args.command == "pytorch":
        print_table(pytorch_step(args.seq_len), f"PyTorch bf16 step, N = {args.seq_len}")
        return
    sums = collections.defaultdict(lambda: [0.0, 0])
    for name, ms in one_step(ncu_launches(args.csv), args.step):
        sums[name][0] += ms
        sums[name][1] += 1
    print_table([(name, ms, n) for name, (ms, n) in sums.items()], f"miniattn step {args.step}")


if __name__ == "__main__":
    main()
