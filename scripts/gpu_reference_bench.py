#!/usr/bin/env python3
"""PyTorch's rates on this GPU, the yardsticks of the miniattn GPU bring-up.

    python3 scripts/gpu_reference_bench.py [--seq-lens 8192 32768] [--heads 4] [--head-dim 64]
        [--gemm-sizes 4096 8192 16384] [--train-seq-len 32768] [--train-steps 6] > reference_bench.json
    python3 scripts/gpu_reference_bench.py summarize --results results/gpu

The first form prints ONE JSON line (progress goes to stderr) with, all in fp32
with TF32 off (torch.backends.cuda.matmul.fp32_precision = "ieee", or
allow_tf32 = False before PyTorch 2.9: cuBLAS's default math mode, which
miniattn's KokkosBlas::gemm gets):
  sgemm       torch.matmul on n x n x n random matrices: seconds, TFLOP/s (2 n^3)
  sdpa        torch.nn.functional.scaled_dot_product_attention, B=1, H heads, N, Dh:
              forward, and forward+backward, seconds and TFLOP/s, counted as
              miniattn counts its own kernel (bench_attention): forward 4 N^2 Dh H,
              backward 2.5x that, both halved when causal; the backend that ran
  train_step  one training step (zero grads, forward, loss, backward, clip 1.0,
              AdamW) of validation/reference_model.py's model, the configuration of
              the miniattn bench run (V = D = 256, H = 4, FFN 1024, L = 2, B = 1,
              causal): "eager" as written there (explicit matmul + softmax, an N x N
              score matrix per head), and "eager_sdpa" with its attention replaced by
              scaled_dot_product_attention. Out of memory is a result, not a failure.

With --bf16 it adds a "bf16" section, the yardsticks of model.precision bf16:
  gemm        torch.matmul on bf16 n x n x n matrices (fp32 accumulation)
  sdpa        scaled_dot_product_attention on bf16 Q, K, V with each of the
              FlashAttention-2 and cuDNN backends, counted as above
  train_step  "eager_sdpa" under torch.autocast(dtype=torch.bfloat16)

`summarize` reads what scripts/gpu_bringup.sh bench wrote into the results folder
(bench_attention_n*.txt, bench_miniattn_*.json, reference_bench.json) and writes
figures.json and figures.md there: each figure beside the project's GPU targets (TARGETS),
met or missed.
"""

import argparse
import glob
import json
import math
import os
import re
import statistics
import sys
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


# The GPU issues' targets (docs/gpu_bringup.md), each judged against PyTorch measured
# in the same run on the same GPU. The bf16 kernels' pairs are floors for (forward,
# forward+backward) TFLOP/s, None where there is none; cudnn's are fractions of PyTorch
# SDPA's cuDNN backend on the same N and mask.
TARGETS = {"attention_tflops": 25.0, "attention_fraction_of_sdpa": 0.8,
           "step_seconds_over_pytorch_eager_sdpa": 1.25,
           "bf16": {"attention_tflops_forward_and_forward_backward": {"gemm": (None, 50.0)},
                    "fraction_of_sdpa_cudnn_forward_and_forward_backward": {"cudnn": (0.9, 0.85)},
                    "step_seconds_over_pytorch_eager_sdpa_bf16": 1.5}}


def log(*args):
    print(*args, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- measuring
def cuda_time(fn, warmups, reps):
    """Median seconds of fn() over reps CUDA-event-timed calls after warm-ups."""
    import torch
    for _ in range(warmups):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e-3)
    return statistics.median(times)


def measure_sgemm(sizes, dtype=None):
    import torch
    out = []
    for n in sizes:
        a = torch.randn(n, n, device="cuda", dtype=dtype or torch.float32)
        b = torch.randn(n, n, device="cuda", dtype=dtype or torch.float32)
        seconds = cuda_time(lambda: torch.matmul(a, b), warmups=3, reps=10)
        out.append({"n": n, "seconds": seconds, "tflops": 2.0 * n**3 / seconds * 1e-12})
        log(f"gemm {str(a.dtype).split('.')[-1]} {n}^3: {out[-1]['tflops']:.1f} TFLOP/s")
        del a, b
    torch.cuda.empty_cache()
    return out


def attention_flops(n, dh, heads, causal):
    forward = 4.0 * n * n * dh * heads
    return forward / 2 if causal else forward


def measure_sdpa(seq_lens, heads, dh, dtype=None, backend_groups=None, deterministic=False):
    """One entry per (N, causal[, backend group]): the first backend of a group that runs;
    deterministic: under torch.use_deterministic_algorithms(True)."""
    import torch
    from torch.nn.attention import SDPBackend

    dtype = dtype or torch.float32
    # fp32 has no flash kernel: the memory-efficient one is PyTorch's fastest; math is the fallback.
    backend_groups = backend_groups or [(SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH)]
    out = []
    for n in seq_lens:
        for causal in (False, True):
            for group in backend_groups:
                out.append(measure_sdpa_case(n, heads, dh, causal, dtype, group, deterministic))
    return out


def measure_sdpa_case(n, heads, dh, causal, dtype, backends, deterministic=False):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel

    q, k, v = (torch.randn(1, heads, n, dh, device="cuda", dtype=dtype, requires_grad=True) for _ in range(3))
    dout = torch.randn(1, heads, n, dh, device="cuda", dtype=dtype)
    entry = {"n": n, "heads": heads, "head_dim": dh, "causal": causal, "dtype": str(dtype).split(".")[-1],
             "deterministic": deterministic}
    was_deterministic = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(deterministic)
    for backend in backends:
        try:
            with sdpa_kernel([backend]):
                def forward():
                    with torch.no_grad():
                        F.scaled_dot_product_attention(q, k, v, is_causal=causal)

                def forward_backward():
                    o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                    o.backward(dout)

                fwd = cuda_time(forward, warmups=2, reps=5)
                both = cuda_time(forward_backward, warmups=2, reps=5)
            flops = attention_flops(n, dh, heads, causal)
            entry.update(backend=backend.name, forward_seconds=fwd, forward_tflops=flops / fwd * 1e-12,
                         forward_backward_seconds=both, forward_backward_tflops=3.5 * flops / both * 1e-12)
            break
        except (RuntimeError, torch.cuda.OutOfMemoryError) as err:
            entry.setdefault("errors", []).append(f"{backend.name}: {str(err).splitlines()[0][:200]}")
            torch.cuda.empty_cache()
    torch.use_deterministic_algorithms(was_deterministic)
    mode = " deterministic" if deterministic else ""
    log(f"sdpa {entry['dtype']}{mode} N={n} {'causal' if causal else 'non-causal'}: "
        + (f"{entry['forward_tflops']:.1f} TFLOP/s forward, {entry['forward_backward_tflops']:.1f} "
           f"forward+backward ({entry['backend']})" if "backend" in entry else f"failed {entry['errors']}"))
    del q, k, v, dout
    torch.cuda.empty_cache()
    return entry


def sdpa_attention_forward(self, x, document_ids=None, rope=None):
    """reference_model.Attention.forward with the attention itself fused (no N x N matrix):
    the plain causal or full mask only (the benchmark's model has no window, K/V groups or
    documents, and says so rather than computing something else)."""
    import torch.nn.functional as F
    cfg = self.cfg
    if document_ids is not None or rope is not None or cfg.window or cfg.kv_head_count != cfg.heads:
        raise ValueError("sdpa_attention_forward: no windows, grouped K/V heads, documents or rotary positions")
    B, N, D = x.shape
    H, Dh = self.heads, D // self.heads
    q, k, v = self.qkv(x).split(D, dim=-1)
    q, k, v = (t.view(B, N, H, Dh).transpose(1, 2) for t in (q, k, v))
    o = F.scaled_dot_product_attention(q, k, v, is_causal=cfg.causal)
    return self.proj(o.transpose(1, 2).reshape(B, N, D))


def reference_model():
    """validation/reference_model.py, the model PyTorch's steps run."""
    sys.path.insert(0, os.path.join(ROOT, "validation"))
    import reference_model as rm
    return rm


def bench_model_config(seq_len):
    """The model of the miniattn bench run (gpu_bringup.sh's bench deck)."""
    return reference_model().Config(vocab=256, d_model=256, heads=4, ffn=1024, layers=2, seq_len=seq_len, batch=1,
                                    causal=True, precision="fp32")


def make_train_step(cfg, variant):
    """One training step of reference_model's model on cfg (zero grads, forward, loss, backward, clip 1.0,
    AdamW): "eager", "eager_sdpa" (attention through SDPA), "eager_sdpa_bf16" (that under bf16 autocast)
    or "eager_sdpa_cudnn_bf16" (that with SDPA held to its cuDNN backend)."""
    import contextlib
    import torch
    rm = reference_model()
    model = rm.ReferenceGPT(cfg)
    init = rm.random_params(cfg, seed=1234, perturb_norms=False)
    model.load_state_dict({name: value.float() for name, value in init.items()})
    model = model.cuda()
    if variant.startswith("eager_sdpa"):
        for block in model.blocks:
            block.attn.forward = types.MethodType(sdpa_attention_forward, block.attn)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=1e-3)
    tokens = torch.randint(0, cfg.vocab, (cfg.batch, cfg.seq_len + 1),
                           generator=torch.Generator().manual_seed(1234)).cuda()

    def backend():
        if "_cudnn" not in variant:
            return contextlib.nullcontext()
        from torch.nn.attention import SDPBackend, sdpa_kernel
        return sdpa_kernel(SDPBackend.CUDNN_ATTENTION)

    def step():
        optimizer.zero_grad(set_to_none=True)
        with backend():
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=variant.endswith("_bf16")):
                loss, extras = model(tokens)
            del extras
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    return step


def measure_train_step(seq_len, steps, variant):
    import torch
    cfg = bench_model_config(seq_len)
    entry = {"variant": variant, "config": {k: getattr(cfg, k) for k in
                                            ("vocab", "d_model", "heads", "ffn", "layers", "seq_len", "batch",
                                             "causal", "precision")},
             "optimizer": "adamw lr 1e-3 wd 0.01 (matrices and embeddings), grad_clip 1.0"}
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    step = None
    try:
        step = make_train_step(cfg, variant)
        seconds = []
        for _ in range(steps):
            torch.cuda.synchronize()
            start = time.perf_counter()
            step()
            torch.cuda.synchronize()
            seconds.append(time.perf_counter() - start)
        entry.update(ok=True, step_seconds=seconds, step_seconds_median=statistics.median(seconds[1:] or seconds),
                     peak_bytes=torch.cuda.max_memory_allocated())
    except torch.cuda.OutOfMemoryError as err:
        entry.update(ok=False, oom=True, peak_bytes=torch.cuda.max_memory_allocated(),
                     error="out of memory: " + str(err).splitlines()[0][:200])
    finally:
        step = None
        torch.cuda.empty_cache()
    log(f"train step N={seq_len} {variant}: " + (f"{entry['step_seconds_median']:.4f} s" if entry["ok"]
                                                  else entry["error"]))
    return entry


def measure(args):
    import torch
    if not torch.cuda.is_available():
        log("gpu_reference_bench: torch sees no CUDA device")
        return 1
    # PyTorch 2.9 deprecated the allow_tf32 flags for fp32_precision: set the one this version has.
    if hasattr(torch.backends.cuda.matmul, "fp32_precision"):
        torch.backends.cuda.matmul.fp32_precision = "ieee"
        torch.backends.cudnn.fp32_precision = "ieee"
    else:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    if args.train_step_only:
        print(json.dumps({"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
                          "train_step": measure_train_step(args.train_seq_len, args.train_steps,
                                                           args.train_step_only)}), flush=True)
        return 0
    if args.sdpa_bf16_only:
        from torch.nn.attention import SDPBackend
        print(json.dumps({"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
                          "heads": args.heads, "head_dim": args.head_dim,
                          "bf16": {"sdpa": measure_sdpa(args.seq_lens, args.heads, args.head_dim, torch.bfloat16,
                                                        [(SDPBackend.FLASH_ATTENTION,),
                                                         (SDPBackend.CUDNN_ATTENTION,)])}}), flush=True)
        return 0
    result = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda,
              "tf32": False, "sgemm": measure_sgemm(args.gemm_sizes),
              "sdpa": measure_sdpa(args.seq_lens, args.heads, args.head_dim),
              "train_step": [measure_train_step(args.train_seq_len, args.train_steps, v)
                             for v in ("eager", "eager_sdpa")]}
    if args.bf16:
        from torch.nn.attention import SDPBackend
        result["bf16"] = {
            "gemm": measure_sgemm(args.gemm_sizes, torch.bfloat16),
            "sdpa": measure_sdpa(args.seq_lens, args.heads, args.head_dim, torch.bfloat16,
                                 [(SDPBackend.FLASH_ATTENTION,), (SDPBackend.CUDNN_ATTENTION,)]),
            # PyTorch's cuDNN backward has no deterministic mode; its memory-efficient one does
            # (one key split under torch.use_deterministic_algorithms): miniattn's like for like.
            "sdpa_deterministic": measure_sdpa(args.seq_lens, args.heads, args.head_dim, torch.bfloat16,
                                               [(SDPBackend.EFFICIENT_ATTENTION,)], deterministic=True),
            "train_step": [measure_train_step(args.train_seq_len, args.train_steps, "eager_sdpa_bf16")]}
    print(json.dumps(result), flush=True)
    return 0


# ---------------------------------------------------------------- summarizing
def parse_bench_attention(path, precision="fp32"):
    """The reference GEMM rate and one precision's kernel lines of one bench_attention output
    (bench_attention_KERNEL_nN.txt for fp32, bench_attention_bf16_KERNEL_nN.txt for bf16)."""
    text = open(path).read()
    m = re.search(r"bench_attention_(?:bf16_)?([a-z_]+?)_n(\d+)\.txt$", path)
    out = {"kernel": m.group(1), "n": int(m.group(2)), "rates": {}}
    gemm = "SGEMM" if precision == "fp32" else "bf16 GEMM"
    m = re.search(rf"^{gemm} (\d+)\^3:\s+([\d.]+) GFLOP/s", text, re.M)
    if m:
        out["sgemm_n"], out["sgemm_tflops"] = int(m.group(1)), float(m.group(2)) * 1e-3
    m = re.search(rf"^{precision} kernel (fused, tiles \S+|gemm, chunks of \d+ rows|cudnn \(cuDNN \d+\))", text, re.M)
    if m:
        out["tiles"] = m.group(1)
    out["mismatch"] = "MISMATCH" in text
    for kind, phase, seconds, gflops in re.findall(
            rf"^{precision} (causal|non-causal)\s+(forward\+backward|forward|backward)\s+([\d.]+) s\s+([\d.]+) GFLOP/s",
            text, re.M):
        out["rates"][f"{kind} {phase}"] = {"seconds": float(seconds), "tflops": float(gflops) * 1e-3}
    return out


def summarize(results):
    figures = {"targets": TARGETS}
    min_tflops, min_of_sdpa = TARGETS["attention_tflops"], TARGETS["attention_fraction_of_sdpa"]
    max_step_ratio = TARGETS["step_seconds_over_pytorch_eager_sdpa"]
    lines = ["# miniattn on the GPU: figures", ""]
    ref_path = os.path.join(results, "reference_bench.json")
    ref = json.load(open(ref_path)) if os.path.exists(ref_path) else {}
    sgemm = max((g["tflops"] for g in ref.get("sgemm", [])), default=None)
    figures.update(device=ref.get("device"), torch=ref.get("torch"), sgemm_tflops_torch=sgemm)
    lines.append(f"Device: {ref.get('device')}; PyTorch {ref.get('torch')} (CUDA {ref.get('cuda')}); fp32, TF32 off.")
    lines.append("")
    lines.append("SGEMM (cuBLAS through torch.matmul): " + ", ".join(
        f"{g['n']}^3 {g['tflops']:.1f} TFLOP/s" for g in ref.get("sgemm", [])))

    fp32_files = [p for p in glob.glob(os.path.join(results, "bench_attention_*_n*.txt")) if "_bf16_" not in p]
    kernels = sorted((parse_bench_attention(p) for p in fp32_files), key=lambda k: (k["n"], k["kernel"]))
    sdpa = {(e["n"], e["causal"]): e for e in ref.get("sdpa", [])}
    if kernels:
        lines.append("SGEMM (KokkosBlas::gemm -> cuBLAS, in bench_attention): " + ", ".join(
            f"{k.get('sgemm_n')}^3 {k.get('sgemm_tflops', float('nan')):.1f} TFLOP/s" for k in kernels))
    lines += ["", "## Attention kernel (tests/attention/bench_attention, B=1, fp32)", "",
              "| N | causal | kernel | miniattn fwd TFLOP/s | fwd / SGEMM | miniattn fwd+bwd TFLOP/s "
              "| SDPA fwd | SDPA fwd+bwd | miniattn / SDPA fwd | miniattn / SDPA fwd+bwd "
              f"| target >= {min_tflops:g} and >= {min_of_sdpa:g} SDPA |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    figures["attention"] = []
    for k in kernels:
        for causal in (False, True):
            kind = "causal" if causal else "non-causal"
            fwd = k["rates"].get(f"{kind} forward", {}).get("tflops")
            both = k["rates"].get(f"{kind} forward+backward", {}).get("tflops")
            s = sdpa.get((k["n"], causal), {})
            reference = sgemm or k.get("sgemm_tflops")
            frac = fwd / reference if fwd and reference else None
            row = {"n": k["n"], "causal": causal, "kernel": k["kernel"], "tiles": k.get("tiles"), "forward_tflops": fwd,
                   "forward_backward_tflops": both, "forward_fraction_of_sgemm": frac,
                   "sdpa_forward_tflops": s.get("forward_tflops"),
                   "sdpa_forward_backward_tflops": s.get("forward_backward_tflops"), "sdpa_backend": s.get("backend")}
            figures["attention"].append(row)
            of_fwd = fwd / s["forward_tflops"] if fwd and s.get("forward_tflops") else None
            of_both = both / s["forward_backward_tflops"] if both and s.get("forward_backward_tflops") else None
            met = all(x is not None and x >= min_tflops for x in (fwd, both)) and all(
                x is not None and x >= min_of_sdpa for x in (of_fwd, of_both))
            lines.append(f"| {k['n']} | {causal} | {k.get('tiles')} | {fmt(fwd)} | {fmt(frac, '.2f')} | {fmt(both)} | "
                         f"{fmt(s.get('forward_tflops'))} | {fmt(s.get('forward_backward_tflops'))} | "
                         f"{fmt(of_fwd, '.2f')} | {fmt(of_both, '.2f')} | {'met' if met else 'MISSED'} |")

    lines += ["", "## Training step (V=D=256, H=4, FFN 1024, L=2, B=1, fp32, AdamW)", "",
              "| N | causal | kernel | miniattn step s | tokens/s | attention fwd TFLOP/s in the step | planned GiB | "
              "PyTorch eager s (peak GiB) | eager+SDPA s (peak GiB) | speed-up vs eager | vs eager+SDPA "
              f"| target: miniattn <= {max_step_ratio:g} x eager+SDPA |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    torch_steps = {e["variant"]: e for e in ref.get("train_step", [])}
    train_n = (ref.get("train_step") or [{}])[0].get("config", {}).get("seq_len")
    figures["train_step"] = []
    runs = []
    for path in glob.glob(os.path.join(results, "bench_miniattn_*_n*.json")):
        if "_bf16_" in path:
            continue
        m = re.search(r"bench_miniattn_(\w+)_n(\d+)_(causal|noncausal)\.json$", path)
        runs.append((int(m.group(2)), m.group(3) == "causal", m.group(1), path))
    for n, causal, kernel, path in sorted(runs, key=lambda r: (r[0], not r[1], r[2])):
        report = json.load(open(path))
        step = report.get("step_seconds_median")
        bench = report.get("bench", {})
        row = {"n": n, "causal": causal, "kernel": kernel, "step_seconds": step, "tokens_per_second": report.get("tokens_per_second"),
               "attention_forward_tflops": (bench.get("attention_forward", {}).get("gflops_per_rank") or 0) * 1e-3,
               "planned_bytes": report.get("memory", {}).get("planned_bytes_per_rank"),
               "attention_tiles": report.get("attention_tiles")}
        eager = sdpa_step = speedup = speedup_sdpa = None
        if n == train_n and causal:
            eager = torch_steps.get("eager", {})
            sdpa_step = torch_steps.get("eager_sdpa", {})
            if step and eager.get("ok"):
                speedup = eager["step_seconds_median"] / step
            if step and sdpa_step.get("ok"):
                speedup_sdpa = sdpa_step["step_seconds_median"] / step
            row.update(pytorch_eager=eager, pytorch_eager_sdpa=sdpa_step, speedup_over_eager=speedup,
                       speedup_over_eager_sdpa=speedup_sdpa)
        figures["train_step"].append(row)
        verdict = ("" if sdpa_step is None else "met" if speedup_sdpa and speedup_sdpa >= 1 / max_step_ratio
                   else "MISSED" if speedup_sdpa else "eager+SDPA failed")
        lines.append(
            f"| {n} | {causal} | {kernel} | {fmt(step, '.4f')} | {fmt(row['tokens_per_second'], '.0f')} | "
            f"{fmt(row['attention_forward_tflops'])} | {gib(row['planned_bytes'])} | {torch_cell(eager)} | "
            f"{torch_cell(sdpa_step)} | {fmt(speedup, '.2f')} | {fmt(speedup_sdpa, '.2f')} | {verdict} |")
    lines += ["", "PyTorch eager is validation/reference_model.py as written (an N x N score matrix per head); "
              "eager+SDPA is the same model with fused attention, the stronger opponent. The PyTorch step "
              "is timed only at the N and causality of its row."]

    summarize_bf16(results, ref, figures, lines)
    summarize_cudnn_extras(results, figures, lines)
    summarize_long(results, figures, lines)
    summarize_documents(results, figures, lines)
    with open(os.path.join(results, "figures.json"), "w") as f:
        json.dump(figures, f, indent=1)
    text = "\n".join(lines) + "\n"
    with open(os.path.join(results, "figures.md"), "w") as f:
        f.write(text)
    print(text)
    return 0


def summarize_bf16(results, ref, figures, lines):
    """The bf16 tables: kernels against PyTorch SDPA (FlashAttention-2 and cuDNN), the step
    against eager+SDPA under bf16 autocast, with the project's bf16 targets."""
    bf16 = ref.get("bf16", {})
    files = glob.glob(os.path.join(results, "bench_attention_bf16_*_n*.txt"))
    if not files and not bf16:
        return
    targets = TARGETS["bf16"]["attention_tflops_forward_and_forward_backward"]
    max_step_ratio = TARGETS["bf16"]["step_seconds_over_pytorch_eager_sdpa_bf16"]
    sdpa = {(e["n"], e["causal"], e.get("backend")): e for e in bf16.get("sdpa", [])}
    lines += ["", "## bf16 attention (bench_attention --precision=bf16, B=1)", "",
              "bf16 GEMM (torch.matmul): " + ", ".join(f"{g['n']}^3 {g['tflops']:.1f} TFLOP/s"
                                                    for g in bf16.get("gemm", [])), "",
              "| N | causal | kernel | fwd TFLOP/s | fwd+bwd TFLOP/s | agrees with gemm | FA2 fwd / fwd+bwd "
              "| cuDNN fwd / fwd+bwd | target |", "|---|---|---|---|---|---|---|---|---|"]
    figures["bf16_attention"] = []
    for k in sorted((parse_bench_attention(p, "bf16") for p in files), key=lambda k: (k["n"], k["kernel"])):
        for causal in (False, True):
            kind = "causal" if causal else "non-causal"
            fwd = k["rates"].get(f"{kind} forward", {}).get("tflops")
            both = k["rates"].get(f"{kind} forward+backward", {}).get("tflops")
            flash = sdpa.get((k["n"], causal, "FLASH_ATTENTION"), {})
            cudnn = sdpa.get((k["n"], causal, "CUDNN_ATTENTION"), {})
            want_fwd, want_both = targets.get(k["kernel"], (None, None))
            fractions = TARGETS["bf16"]["fraction_of_sdpa_cudnn_forward_and_forward_backward"].get(k["kernel"])
            if fractions:  # no PyTorch figure: a target that cannot be met
                want_fwd = fractions[0] * cudnn.get("forward_tflops", math.inf)
                want_both = fractions[1] * cudnn.get("forward_backward_tflops", math.inf)
            met = (not k["mismatch"] and (want_fwd is None or (fwd or 0) >= want_fwd)
                   and (want_both is None or (both or 0) >= want_both))
            figures["bf16_attention"].append({"n": k["n"], "causal": causal, "kernel": k["kernel"],
                                              "forward_tflops": fwd, "forward_backward_tflops": both,
                                              "agrees_with_gemm": not k["mismatch"], "sdpa_flash": flash,
                                              "sdpa_cudnn": cudnn})
            lines.append(f"| {k['n']} | {causal} | {k['kernel']} | {fmt(fwd)} | {fmt(both)} | "
                         f"{'no' if k['mismatch'] else 'yes'} | {fmt(flash.get('forward_tflops'))} / "
                         f"{fmt(flash.get('forward_backward_tflops'))} | {fmt(cudnn.get('forward_tflops'))} / "
                         f"{fmt(cudnn.get('forward_backward_tflops'))} | {'met' if met else 'MISSED'} |")
    deterministic = [e for e in bf16.get("sdpa_deterministic", []) if "backend" in e]
    if deterministic:
        lines += ["", "PyTorch's deterministic SDPA (its memory-efficient backend under "
                  "torch.use_deterministic_algorithms; its cuDNN backward has no deterministic mode), "
                  "TFLOP/s forward / forward+backward: " + ", ".join(
                      f"N = {e['n']} {'causal' if e['causal'] else 'full'} {fmt(e['forward_tflops'])} / "
                      f"{fmt(e['forward_backward_tflops'])}" for e in deterministic)]
    figures["bf16_sdpa_deterministic"] = bf16.get("sdpa_deterministic", [])
    torch_step = (bf16.get("train_step") or [{}])[0]
    lines += ["", "## bf16 training step (as above, model.precision bf16)", "",
              "| N | kernel | miniattn step s | planned GiB | eager+SDPA bf16 autocast s (peak GiB) | ratio "
              f"| target <= {max_step_ratio:g} |", "|---|---|---|---|---|---|---|"]
    figures["bf16_train_step"] = []
    for path in sorted(glob.glob(os.path.join(results, "bench_miniattn_bf16_*_n*_causal.json"))):
        m = re.search(r"bench_miniattn_bf16_([a-z_]+?)_n(\d+)_causal\.json$", path)
        report = json.load(open(path))
        step = report.get("step_seconds_median")
        ratio = step / torch_step["step_seconds_median"] if step and torch_step.get("ok") else None
        figures["bf16_train_step"].append({"n": int(m.group(2)), "kernel": m.group(1), "step_seconds": step,
                                           "pytorch_eager_sdpa_bf16": torch_step, "ratio": ratio})
        lines.append(f"| {m.group(2)} | {m.group(1)} | {fmt(step, '.4f')} | "
                     f"{gib(report.get('memory', {}).get('planned_bytes_per_rank'))} | {torch_cell(torch_step)} | "
                     f"{fmt(ratio, '.2f')} | {'met' if ratio and ratio <= max_step_ratio else 'MISSED'} |")


def load_json(results, name):
    path = os.path.join(results, name)
    try:
        return json.load(open(path)) if os.path.exists(path) else None
    except ValueError:
        return None


def summarize_long(results, figures, lines):
    """The long-sequence step (gpu_bringup.sh long): a million tokens in both backward modes with
    their memory (plan, allocation, the device's own count), PyTorch at a million tokens, the
    longest N under 16 GiB, and predicted steps beside measured ones."""
    runs = {det: load_json(results, f"long_1m_deterministic_{det}.json") for det in ("true", "false")}
    if not any(runs.values()):
        return
    torch_1m = (load_json(results, "pytorch_1m.json") or {}).get("train_step", {})
    lines += ["", "## A million tokens on one GPU (inputs/long_bf16_1m.yaml, bf16, cudnn)", "",
              "| run | step s | tokens/s | model TFLOP/s | planned GiB | allocated GiB | plan holds | "
              "device used / plan | cuDNN workspace planned / needed GiB | rows a call | predicted step s |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    figures["long"] = []
    for det, report in runs.items():
        if not report:
            lines.append(f"| deterministic {det} | failed: see logs/long.log |||||||||")
            continue
        memory, cudnn = report.get("memory", {}), report.get("attention_tiles", {}).get("cudnn", {})
        predicted = ((load_json(results, f"predict_1m_deterministic_{det}.json") or {})
                     .get("prediction_for_deck", {}).get("step_seconds"))
        entry = {"deterministic": det == "true", "step_seconds": report.get("step_seconds_median"),
                 "tokens_per_second": report.get("tokens_per_second"),
                 "model_flops_per_second": report.get("achieved_flops_per_second"), "memory": memory,
                 "cudnn": cudnn, "predicted_step_seconds": predicted}
        figures["long"].append(entry)
        tflops = entry["model_flops_per_second"] * 1e-12 if entry["model_flops_per_second"] else None
        lines.append(f"| deterministic {det} | {fmt(entry['step_seconds'], '.3f')} | "
                     f"{fmt(entry['tokens_per_second'], '.0f')} | {fmt(tflops)} | "
                     f"{gib(memory.get('planned_bytes_per_rank'))} | {gib(memory.get('allocated_bytes_per_rank'))} | "
                     f"{memory.get('plan_holds_on_every_rank')} | {fmt(memory.get('device_used_over_plan'), '.3f')} | "
                     f"{gib(cudnn.get('workspace_planned_bytes'))} / {gib(cudnn.get('workspace_needed_bytes'))} | "
                     f"{cudnn.get('query_rows_per_call')} | {fmt(predicted, '.3f')} |")
    figures["long_pytorch"] = torch_1m
    lines.append("")
    lines.append(f"PyTorch eager + SDPA-cuDNN under bf16 autocast, same model at a million tokens: "
                 f"{torch_cell(torch_1m) if torch_1m else 'not run'}.")
    bench = load_json(results, "bench_miniattn_bf16_cudnn_n32768_causal.json") or {}
    predicted = (load_json(results, "predict_32768.json") or {}).get("prediction_for_deck", {}).get("step_seconds")
    measured = bench.get("step_seconds_median")
    figures["predicted_32768"] = {"predicted_step_seconds": predicted, "measured_step_seconds": measured}
    lines.append(f"The bench deck's bf16 step at N = 32768: predicted {fmt(predicted, '.4f')} s, measured "
                 f"{fmt(measured, '.4f')} s (ratio {fmt(predicted / measured if predicted and measured else None, '.2f')}).")
    longest = load_json(results, "predict_1m_16gib.json")
    under_16 = load_json(results, "long_16gib.json")
    if longest:
        n16 = longest["longest_seq_len"][0]["strategies"].get("local")
        figures["longest_under_16_gib"] = {"seq_len": n16, "ran": bool(under_16)}
        lines.append(f"Under 16 GiB predict's longest N is {n16}: "
                     f"{'it ran' if under_16 else 'it did NOT run'} (one increment more: long_16gib_plus.txt).")


def summarize_documents(results, figures, lines):
    """The documents step (gpu_bringup.sh documents): bench_cudnn_documents' tables as printed
    (each way's rates beside the whole block's, its first pass and whether it agrees), and the
    bench step with packed documents under kernels.cudnn_documents gemm and calls."""
    probes = [(mode, os.path.join(results, f"documents_cudnn_{mode}.txt"))
              for mode in ("deterministic", "nondeterministic")]
    steps = {mode: load_json(results, f"bench_documents_cudnn_{mode}.json") for mode in ("gemm", "calls")}
    if not any(os.path.exists(path) for _, path in probes) and not any(steps.values()):
        return
    lines += ["", "## Packed documents on cuDNN (bench_cudnn_documents, N = 32768, H = 4, Dh = 64)"]
    for mode, path in probes:
        if os.path.exists(path):
            lines += ["", f"{mode} backward:", "", "```"] + open(path).read().rstrip("\n").splitlines() + ["```"]
    lines += ["", "The bench step (N = 32768, bf16, causal) with packed documents:", "",
              "| kernels.cudnn_documents | step s (median) | step s (mean) | blocks on the gemm fallback | "
              "cuDNN calls | graphs built |", "|---|---|---|---|---|---|"]
    figures["documents_step"] = {}
    for mode, report in steps.items():
        if not report:
            lines.append(f"| {mode} | failed: see logs/documents.log ||||| ")
            continue
        cudnn = report.get("attention_tiles", {}).get("cudnn", {})
        entry = {"step_seconds_median": report.get("step_seconds_median"),
                 "step_seconds_mean": report.get("step_seconds_mean"),
                 "blocks_on_gemm_fallback": cudnn.get("blocks_on_gemm_fallback"), "calls": cudnn.get("calls"),
                 "graphs_built": cudnn.get("graphs_built")}
        figures["documents_step"][mode] = entry
        lines.append(f"| {mode} | {fmt(entry['step_seconds_median'], '.4f')} | {fmt(entry['step_seconds_mean'], '.4f')} | "
                     f"{entry['blocks_on_gemm_fallback']} | {entry['calls']} | {entry['graphs_built']} |")


def summarize_cudnn_extras(results, figures, lines):
    """The cudnn kernel's two extra runs of the bench step: with cuDNN's non-deterministic
    backward (what the deterministic one costs), and at H = 16, Dh = 128 beside PyTorch's
    SDPA on that shape (wide_reference_bench.json)."""
    def rates(path):
        k = parse_bench_attention(path, "bf16") if os.path.exists(path) else {"rates": {}}
        return {causal: (k["rates"].get(f"{kind} forward", {}).get("tflops"),
                         k["rates"].get(f"{kind} forward+backward", {}).get("tflops"))
                for causal, kind in ((False, "non-causal"), (True, "causal"))}
    for nondet_path in sorted(glob.glob(os.path.join(results, "nondeterministic_bench_attention_bf16_cudnn_n*.txt"))):
        n = re.search(r"_n(\d+)\.txt$", nondet_path).group(1)
        det = rates(os.path.join(results, f"bench_attention_bf16_cudnn_n{n}.txt"))
        nondet = rates(nondet_path)
        lines += ["", f"## cudnn: what the deterministic backward costs (N = {n}, H = 4, Dh = 64)", "",
                  "| causal | fwd+bwd TFLOP/s, deterministic | non-deterministic | deterministic time / non-deterministic |", "|---|---|---|---|"]
        figures["cudnn_determinism"] = []
        for causal in (False, True):
            d, n = det[causal][1], nondet[causal][1]
            ratio = n / d if d and n else None
            figures["cudnn_determinism"].append({"causal": causal, "deterministic_tflops": d,
                                                 "nondeterministic_tflops": n, "time_ratio": ratio})
            lines.append(f"| {causal} | {fmt(d)} | {fmt(n)} | {fmt(ratio, '.2f')} |")
    wide_ref_path = os.path.join(results, "wide_reference_bench.json")
    for wide_path in sorted(glob.glob(os.path.join(results, "wide_bench_attention_bf16_cudnn_n*.txt"))):
        if not os.path.exists(wide_ref_path):
            break
        n = re.search(r"_n(\d+)\.txt$", wide_path).group(1)
        wide = rates(wide_path)
        ref = json.load(open(wide_ref_path)).get("bf16", {}).get("sdpa", [])
        sdpa = {(e["causal"], e.get("backend")): e for e in ref if e.get("n") == int(n)}
        lines += ["", f"## cudnn at H = 16, Dh = 128 (N = {n})", "",
                  "| causal | fwd / fwd+bwd TFLOP/s | SDPA cuDNN fwd / fwd+bwd | fraction fwd / fwd+bwd |",
                  "|---|---|---|---|"]
        figures["cudnn_wide_heads"] = []
        for causal in (False, True):
            (fwd, both), c = wide[causal], sdpa.get((causal, "CUDNN_ATTENTION"), {})
            cf, cb = c.get("forward_tflops"), c.get("forward_backward_tflops")
            fractions = (fwd / cf if fwd and cf else None, both / cb if both and cb else None)
            figures["cudnn_wide_heads"].append({"causal": causal, "forward_tflops": fwd, "forward_backward_tflops": both,
                                                "sdpa_cudnn": c, "fractions": fractions})
            lines.append(f"| {causal} | {fmt(fwd)} / {fmt(both)} | {fmt(cf)} / {fmt(cb)} | "
                         f"{fmt(fractions[0], '.2f')} / {fmt(fractions[1], '.2f')} |")


def fmt(value, spec=".1f"):
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def gib(nbytes):
    return "n/a" if not isinstance(nbytes, (int, float)) else f"{nbytes / 2**30:.2f}"


def torch_cell(entry):
    if not entry:
        return ""
    if entry.get("ok"):
        return f"{entry['step_seconds_median']:.4f} ({gib(entry.get('peak_bytes'))})"
    return f"out of memory ({gib(entry.get('peak_bytes'))})" if entry.get("oom") else "failed"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["summarize"]:
        ap = argparse.ArgumentParser(description="write figures.md / figures.json from a results folder")
        ap.add_argument("--results", required=True)
        return summarize(ap.parse_args(argv[1:]).results)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq-lens", type=int, nargs="+", default=[8192, 32768])
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--gemm-sizes", type=int, nargs="+", default=[4096, 8192, 16384])
    ap.add_argument("--train-seq-len", type=int, default=32768)
    ap.add_argument("--train-steps", type=int, default=6, help="the first is a warm-up")
    ap.add_argument("--bf16", action="store_true", help="also the bf16 yardsticks")
    ap.add_argument("--train-step-only", choices=("eager", "eager_sdpa", "eager_sdpa_bf16", "eager_sdpa_cudnn_bf16"),
                    help="only the training step of this variant at --train-seq-len (its time, or where it "
                         "runs out of memory)")
    ap.add_argument("--sdpa-bf16-only", action="store_true",
                    help="only bf16 SDPA (FlashAttention-2 and cuDNN backends) at --heads and --head-dim")
    return measure(ap.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
