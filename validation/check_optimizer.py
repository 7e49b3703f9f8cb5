"""Checks miniattn's optimizer, initialisation and data generator from Python.

Three checks on verification snapshots (docs/design.md section 4; a snapshot taken
at step s holds the parameters before update s, the gradients of step s and
the tokens of step s), each independent of the C++ code:

  optimizer  From the step-0 parameters, PyTorch's own torch.optim.AdamW (or
             torch.optim.SGD) takes K steps on the gradients the independent
             float64 reference (reference_model.py) computes on each step's
             tokens; after step s its parameters must equal /params of the
             step-(s+1) snapshot (norm-wise relative error per tensor, default
             1e-10 for fp64). Hyperparameters (optimizer, lr, beta1, beta2, eps,
             weight_decay, grad_clip) come from the snapshots' `config`
             attribute (the resolved deck); a missing one is an error (exit 2)
             unless given with --train KEY=VALUE. Decay mask: weight decay on
             2-D tensors (wte, wpe if any and the linear weights), none on biases and
             LayerNorm parameters (torch param groups). Clipping: the global
             L2 norm of all gradients, torch.nn.utils.clip_grad_norm_ itself
             (scale min(1, grad_clip / (norm + 1e-6)), as miniattn does). The learning
             rate is constant (miniattn has no schedule); SGD has no momentum.
  init       The step-0 parameters against docs/design.md's initialisation: weights
             N(0, 0.02), attn.proj.weight and ffn.fc2.weight N(0, 0.02/sqrt(2L)),
             wpe N(0, 0.01) (learned positions only: RoPE has no wpe), biases
             exactly 0, LayerNorm weight exactly 1 and bias exactly 0.
             For a normal tensor of n values: |mean| <= z s/sqrt(n),
             |std/s - 1| <= z/sqrt(2(n-1)), |excess kurtosis| <= z sqrt(24/n), all
             values distinct (fp64), and |correlation| <= z/sqrt(n) between any two
             normal tensors (first min(n1, n2) values); z = 5 by default.
  data       /inputs/tokens [B, N+1] of the synthetic task (src/model/synthetic_task.hpp):
             tokens in [0, V); token[p] == token[p - P] for p >= P, P = ceil((N+1)/2)
             (the second half repeats the first); at most min(V, 16) distinct tokens
             per sample; samples of a batch not all equal; different steps' tokens differ.

Snapshots are given as files, or written here by running a generator (any
command line, e.g. `mpiexec -n 2 miniattn deck.yaml --set parallel.dp=2`) once
per step with `--set io.snapshot=WORKDIR/NAME.stepS.h5 --set io.snapshot_step=S
--set train.steps=LAST+1` appended:

    python3 check_optimizer.py optimizer --steps 3 --workdir DIR [--expect-optimizer adamw] -- GENERATOR...
    python3 check_optimizer.py optimizer S0.h5 S1.h5 S2.h5 S3.h5
    python3 check_optimizer.py init --workdir DIR -- GENERATOR...      (or: init S0.h5)
    python3 check_optimizer.py data --workdir DIR [--snapshot-steps 0 1] -- GENERATOR...

--prove-faults: after the check passes, run it again once per injected fault
(a wrong beta2, no bias correction, no clipping, wrong decay masks, ...; a wrong
expected std; a shifted half, ...) and require every one to be detected.
--inject-fault NAME runs the check with that fault only (it must then fail).

Exit status: 0 passed (and every injected fault detected with --prove-faults),
1 a value out of tolerance or a fault not detected, 2 malformed input (missing
dataset, attribute or hyperparameter, inconsistent snapshots, generator failure).
"""

import argparse
import json
import math
import os
import subprocess
import sys
from dataclasses import dataclass

import h5py
import numpy as np
import torch

import reference_model as rm

# fp32 has no default: float32 AdamW moves parameters whose exact gradient is zero (the key
# bias: softmax ignores it) by lr * g/(|g| + eps) with g pure rounding, ~1e-9 in float32;
# on tests/decks/reference_small.yaml that is a 7e-5 relative difference in attn.qkv.bias.
DEFAULT_RTOL = {"fp64": 1e-10}

OPTIMIZER_FAULTS = {
    "beta2": "beta2 = 0.99 instead of the deck's value (AdamW)",
    "no-bias-correction": "Adam without bias correction (AdamW; torch's step count preset to 10^6)",
    "no-clip": "gradients not clipped",
    "clip-without-eps": "clipping by grad_clip / norm (without clip_grad_norm_'s + 1e-6)",
    "decay-all": "weight decay on every tensor (biases and LayerNorm too)",
    "decay-none": "no weight decay at all",
    "decay-no-embeddings": "no weight decay on wte and wpe (decay on linear weights only)",
    "momentum": "SGD with momentum 0.9 (SGD)",
    "lr": "learning rate x (1 + 1e-6)",
}
INIT_FAULTS = {
    "residual-std": "expect 0.02 (not 0.02/sqrt(2L)) for attn.proj.weight and ffn.fc2.weight",
    "wpe-std": "expect 0.02 (not 0.01) for wpe",
    "std-5pct": "expect every std 5% larger",
    "ln-bias-one": "expect LayerNorm bias 1",
}
DATA_FAULTS = {
    "period-plus-one": "expect token[p] == token[p - (P+1)]",
    "period-minus-one": "expect token[p] == token[p - (P-1)]",
    "vocab-x4": "expect the first half drawn from 4V slots of [0, 4V) (more distinct tokens than V slots give)",
}


class Malformed(Exception):
    pass


@dataclass
class Snapshot:
    path: str
    cfg: rm.Config
    config: dict  # the resolved deck (attribute "config")
    step: int
    ranks: int
    params: dict
    grads: dict
    tokens: torch.Tensor


def attr(f, name):
    if name not in f["/"].attrs:
        raise Malformed(f"{f.filename}: missing attribute '{name}' on '/'")
    return rm._attr_value(f["/"].attrs[name])


def read_snapshot(path, need_grads=False):
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise Malformed(f"{path}: cannot open: {e}")
    with f:
        try:
            cfg = rm.load_config(f)
        except (KeyError, ValueError, TypeError) as e:
            raise Malformed(f"{path}: {str(e).strip(chr(34) + chr(39))}")
        try:
            config = json.loads(attr(f, "config"))
        except json.JSONDecodeError as e:
            raise Malformed(f"{path}: attribute 'config' is not JSON: {e}")
        step = int(attr(f, "step"))
        ranks = int(attr(f, "ranks"))
        if "params" not in f:
            raise Malformed(f"{path}: missing group /params")
        params = rm.load_params(f)
        try:
            rm.check_shapes(params, cfg)
        except ValueError as e:
            raise Malformed(f"{path}: parameters do not match the config: {e}")
        grads = {}
        if need_grads:
            if "grads" not in f:
                raise Malformed(f"{path}: missing group /grads")
            grads = {n: torch.from_numpy(f["grads"][n][...]).to(torch.float64) for n in params if n in f["grads"]}
        if "inputs/tokens" not in f:
            raise Malformed(f"{path}: missing dataset /inputs/tokens")
        raw = f["inputs/tokens"]
        if not np.issubdtype(raw.dtype, np.integer):
            raise Malformed(f"{path}: /inputs/tokens has type {raw.dtype}, expected an integer type")
        tokens = torch.from_numpy(raw[...].astype(np.int64))
        if tuple(tokens.shape) != (cfg.batch, cfg.seq_len + 1):
            raise Malformed(f"{path}: /inputs/tokens has shape {tuple(tokens.shape)}, "
                            f"config says {(cfg.batch, cfg.seq_len + 1)}")
    return Snapshot(path, cfg, config, step, ranks, params, grads, tokens)


def normwise_error(value, ref):
    ref_norm = ref.norm().item()
    diff = (value - ref).norm().item()
    return diff / ref_norm if ref_norm > 0 else diff


# --------------------------------------------------------------------------- generation

def generate(workdir, name, steps, generator):
    """Runs the generator once per step; returns the snapshot paths."""
    os.makedirs(workdir, exist_ok=True)
    paths = []
    for s in steps:
        path = os.path.join(workdir, f"{name}.step{s}.h5")
        if os.path.exists(path):
            os.remove(path)  # never check a stale file
        command = generator + ["--set", f"io.snapshot={path}", "--set", f"io.snapshot_step={s}",
                               "--set", f"train.steps={max(steps) + 1}"]
        print("generating:", " ".join(command), flush=True)
        result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if result.returncode != 0 or not os.path.isfile(path):
            print(result.stdout[-4000:], end="")
            why = f"exit status {result.returncode}" if result.returncode else f"no {path} written"
            raise Malformed(f"generator failed ({why})")
        paths.append(path)
    return paths


# --------------------------------------------------------------------------- optimizer

HYPERPARAMETERS = {"adamw": ("lr", "beta1", "beta2", "eps", "weight_decay", "grad_clip"),
                   "sgd": ("lr", "weight_decay", "grad_clip")}


def hyperparameters(snapshot, overrides):
    """The train.* values the optimizer needs, from the deck in the snapshot or --train."""
    train = snapshot.config.get("train", {})

    def value(key):
        if key in train and key in overrides:
            try:
                same = (str(train[key]) == overrides[key] if key == "optimizer"
                        else float(train[key]) == float(overrides[key]))
            except (TypeError, ValueError):
                same = False
            if not same:
                raise Malformed(f"--train {key}={overrides[key]} contradicts the snapshot's train.{key}={train[key]}")
        if key in train:
            return train[key]
        if key in overrides:
            return overrides[key]
        raise Malformed(f"{snapshot.path}: the deck in attribute 'config' has no train.{key}; "
                        f"pass --train {key}=VALUE (no default is assumed)")

    kind = str(value("optimizer"))
    if kind not in HYPERPARAMETERS:
        raise Malformed(f"train.optimizer={kind!r}: this check knows adamw and sgd")
    hp = {"optimizer": kind}
    for key in HYPERPARAMETERS[kind]:
        try:
            hp[key] = float(value(key))
        except (TypeError, ValueError):
            raise Malformed(f"train.{key}={value(key)!r} is not a number")
    return hp


def decayed(name, shape):
    """The decay mask: matrices (wte, wpe if any, linear weights) yes; biases and LayerNorm no."""
    return len(shape) >= 2


def comparable_config(snapshot):
    config = json.loads(json.dumps(snapshot.config))
    for key in ("snapshot", "snapshot_step"):
        config.get("io", {}).pop(key, None)
    return config


def flat(config, prefix=""):
    """{'train.lr': 0.01, ...} of a nested deck."""
    out = {}
    for key, value in config.items():
        if isinstance(value, dict):
            out.update(flat(value, prefix + key + "."))
        else:
            out[prefix + key] = value
    return out


def check_consistent(snaps, first_step=0):
    base = comparable_config(snaps[0])
    for i, snap in enumerate(snaps):
        if snap.step != first_step + i:
            raise Malformed(f"{snap.path}: attribute step is {snap.step}, expected {first_step + i}")
        if comparable_config(snap) != base:
            a, b = flat(base), flat(comparable_config(snap))
            keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
            raise Malformed(f"{snap.path}: its deck differs from {snaps[0].path}'s: "
                            + ", ".join(f"{k} {b.get(k)!r} vs {a.get(k)!r}" for k in keys))


def optimizer_run(snaps, hp, rtol, fault=None, grads_from="reference", quiet=False):
    """Steps torch's optimizer along the snapshots; returns (passed, worst error)."""
    cfg = snaps[0].cfg
    lr = hp["lr"] * (1 + 1e-6 if fault == "lr" else 1)
    wd, clip = hp["weight_decay"], hp["grad_clip"]
    params = {n: torch.nn.Parameter(t.clone()) for n, t in snaps[0].params.items()}

    def is_decayed(name):
        if fault == "decay-all":
            return True
        if fault == "decay-none":
            return False
        if fault == "decay-no-embeddings" and name in ("wte", "wpe"):
            return False
        return decayed(name, params[name].shape)

    groups = [{"params": [p for n, p in params.items() if is_decayed(n)], "weight_decay": wd},
              {"params": [p for n, p in params.items() if not is_decayed(n)], "weight_decay": 0.0}]
    groups = [g for g in groups if g["params"]]
    if hp["optimizer"] == "adamw":
        beta2 = 0.99 if fault == "beta2" else hp["beta2"]
        opt = torch.optim.AdamW(groups, lr=lr, betas=(hp["beta1"], beta2), eps=hp["eps"], foreach=False)
        if fault == "no-bias-correction":
            # torch's AdamW always corrects; with its step count at 10^6 the corrections are 1.
            for p in params.values():
                opt.state[p] = {"step": torch.tensor(1e6), "exp_avg": torch.zeros_like(p),
                                "exp_avg_sq": torch.zeros_like(p)}
    else:
        opt = torch.optim.SGD(groups, lr=lr, momentum=0.9 if fault == "momentum" else 0.0, foreach=False)

    if not quiet:
        print(f"{'step':>4} {'||g|| ref':>11} {'clip scale':>12} {'grads vs /grads':>16} "
              f"{'max param rel. err':>19}  {'worst tensor':<26} {'update rel. err':>15}  result")
    worst, failed = 0.0, []
    for s in range(len(snaps) - 1):
        before = {n: p.detach().clone() for n, p in params.items()}
        _, ref_grads, _ = rm.loss_and_grads(before, snaps[s].tokens, cfg)
        if snaps[s].grads:
            # Information: the C++ gradients (at the C++ parameters) against the reference here.
            grad_diff = max(normwise_error(snaps[s].grads[n], ref_grads[n]) if n in snaps[s].grads else math.inf
                            for n in ref_grads)
        else:
            grad_diff = math.nan
        use = snaps[s].grads if grads_from == "snapshot" else ref_grads
        for n, p in params.items():
            p.grad = use[n].clone()
        scale = 1.0
        if clip > 0 and fault != "no-clip":
            if fault != "clip-without-eps":
                norm = torch.nn.utils.clip_grad_norm_(list(params.values()), clip).item()
                scale = min(1.0, clip / (norm + 1e-6))
            else:
                norm = torch.nn.utils.clip_grad_norm_(list(params.values()), math.inf).item()
                if norm > clip:
                    scale = clip / norm
                    for p in params.values():
                        p.grad.mul_(scale)
        else:
            norm = math.sqrt(sum(float((p.grad ** 2).sum()) for p in params.values()))
        opt.step()
        target = snaps[s + 1].params
        errors = {n: normwise_error(p.detach(), target[n]) for n, p in params.items()}
        update_errors = {n: normwise_error(p.detach() - before[n], target[n] - before[n]) for n, p in params.items()}
        name = max(errors, key=lambda n: (errors[n], n))
        err = errors[name]
        uname = max(update_errors, key=lambda n: (update_errors[n], n))
        ok = err <= rtol  # False for NaN
        worst = max(worst, err) if not math.isnan(err) else math.inf
        if not ok:
            failed.append(s)
        if not quiet:
            print(f"{s:>4} {norm:11.4e} {scale:12.6g} {grad_diff:16.2e} {err:19.2e}  {name:<26} "
                  f"{update_errors[uname]:15.2e}  {'PASS' if ok else 'FAIL'}")
            if not ok:
                bad = sorted((n for n in errors if not errors[n] <= rtol), key=lambda n: -errors[n])
                print(f"     tensors over {rtol:.0e} after step {s}: "
                      + ", ".join(f"{n} {errors[n]:.2e}" for n in bad[:8]) + (" ..." if len(bad) > 8 else ""))
    return not failed, worst


def cmd_optimizer(args, paths):
    snaps = [read_snapshot(p, need_grads=True) for p in paths]
    if len(snaps) < 2:
        raise Malformed("need snapshots of steps 0..K, K >= 1")
    check_consistent(snaps)
    hp = hyperparameters(snaps[0], args.train)
    if args.expect_optimizer and hp["optimizer"] != args.expect_optimizer:
        raise Malformed(f"the snapshots were written with train.optimizer={hp['optimizer']}, "
                        f"this test expects {args.expect_optimizer}")
    cfg = snaps[0].cfg
    rtol = args.rtol if args.rtol is not None else DEFAULT_RTOL.get(cfg.precision)
    if rtol is None:
        raise Malformed(f"precision {cfg.precision}: no default tolerance, pass --rtol")
    k = len(snaps) - 1
    text = ", ".join(f"{key}={hp[key]:g}" for key in HYPERPARAMETERS[hp["optimizer"]])
    print(f"optimizer check: torch.optim.{'AdamW' if hp['optimizer'] == 'adamw' else 'SGD'} ({text}), "
          f"{k} steps from {snaps[0].path}")
    print(f"  model V={cfg.vocab} D={cfg.d_model} H={cfg.heads} F={cfg.ffn} L={cfg.layers} N={cfg.seq_len} "
          f"B={cfg.batch} precision={cfg.precision}; written by {snaps[0].ranks} rank(s), "
          f"parallel {json.dumps(snaps[0].config.get('parallel', {}), sort_keys=True)}")
    print("  decayed: " + " ".join(n for n, t in snaps[0].params.items() if decayed(n, t.shape)))
    print(f"  gradients: {args.grads}; "
          f"tolerance: norm-wise relative error per tensor <= {rtol:.0e}")
    if args.grads == "snapshot":
        missing = sorted({n for snap in snaps[:-1] for n in snap.params if n not in snap.grads})
        if missing:
            raise Malformed(f"--grads snapshot: missing /grads/{missing[0]} (and {len(missing) - 1} more)")
    faults = applicable_faults(hp)
    if args.inject_fault:
        if args.inject_fault not in faults:
            raise Malformed(f"--inject-fault {args.inject_fault} does not apply to these snapshots "
                            f"(applicable: {', '.join(faults)})")
        print(f"  INJECTED FAULT: {args.inject_fault}: {OPTIMIZER_FAULTS[args.inject_fault]}")
    ok, worst = optimizer_run(snaps, hp, rtol, args.inject_fault, args.grads)
    if not ok:
        print(f"optimizer check: FAILED (max error {worst:.2e} > {rtol:.0e})")
        return 1
    print(f"optimizer check: PASSED ({k} steps, max error {worst:.2e} <= {rtol:.0e})")
    if args.prove_faults:
        return prove(faults, OPTIMIZER_FAULTS,
                     lambda f: optimizer_fault_run(snaps, hp, rtol, f, args.grads))
    return 0


def applicable_faults(hp):
    """The optimizer faults that change something for these hyperparameters."""
    return [f for f in OPTIMIZER_FAULTS
            if not (hp["optimizer"] == "sgd" and f in ("beta2", "no-bias-correction"))
            and not (hp["optimizer"] == "adamw" and f == "momentum")
            and not (hp["grad_clip"] <= 0 and f in ("no-clip", "clip-without-eps"))
            and not (hp["weight_decay"] == 0 and f.startswith("decay"))]


def optimizer_fault_run(snaps, hp, rtol, fault, grads_from):
    passed, worst = optimizer_run(snaps, hp, rtol, fault, grads_from, quiet=True)
    return passed, f"max error {worst:.2e}"


def failures_run(failures):
    """(passed, description) of a list of failures, for prove()."""
    return not failures, f"{len(failures)} failure(s): {failures[0]}" if failures else "no failure"


def prove(faults, descriptions, run):
    undetected = []
    for f in faults:
        passed, how = run(f)
        print(f"  injected fault {f:<20} ({descriptions[f]}): {'NOT DETECTED' if passed else 'detected'} ({how})")
        if passed:
            undetected.append(f)
    if undetected:
        print(f"fault injection: FAILED (not detected: {', '.join(undetected)})")
        return 1
    print(f"fault injection: PASSED (all {len(faults)} faults detected)")
    return 0


# --------------------------------------------------------------------------- initialisation

def init_rule(name, layers, fault=None):
    """(kind, value): ('normal', std) or ('constant', c), as docs/design.md section 1 says."""
    residual = 0.02 / math.sqrt(2 * layers)
    scale = 1.05 if fault == "std-5pct" else 1.0
    if name == "wpe":
        return "normal", (0.02 if fault == "wpe-std" else 0.01) * scale
    if name == "wte" or name.endswith("qkv.weight") or name.endswith("fc1.weight"):
        return "normal", 0.02 * scale
    if name.endswith("proj.weight") or name.endswith("fc2.weight"):
        return "normal", (0.02 if fault == "residual-std" else residual) * scale
    if name.startswith("ln") or ".ln" in name:
        if name.endswith(".weight"):
            return "constant", 1.0
        return "constant", 1.0 if fault == "ln-bias-one" else 0.0
    if name.endswith(".bias"):
        return "constant", 0.0
    raise Malformed(f"no initialisation rule for parameter {name}")


def init_run(snap, z, fault=None, quiet=False):
    cfg = snap.cfg
    failures = []
    if not quiet:
        print(f"{'parameter':<26} {'n':>7} {'rule':<16} {'mean [SE]':>14} {'std/s - 1':>10} "
              f"{'(tol)':>8} {'ex.kurt':>8} {'(tol)':>6} {'distinct':>8}  result")
    normals = {}
    for name in rm.expected_shapes(cfg):
        x = snap.params[name].reshape(-1).to(torch.float64)
        n = x.numel()
        kind, value = init_rule(name, cfg.layers, fault)
        if kind == "constant":
            dev = (x - value).abs().max().item()
            ok = dev == 0.0
            if not quiet:
                print(f"{name:<26} {n:>7} {'= ' + format(value, 'g'):<16} {'max |x - c|':>14} {dev:10.1e} "
                      f"{'(0)':>8} {'':>8} {'':>6} {'':>8}  {'PASS' if ok else 'FAIL'}")
            if not ok:
                failures.append(name)
            continue
        normals[name] = x
        mean = x.mean().item()
        std = x.std(unbiased=True).item()
        centred = x - mean
        kurt = ((centred ** 4).mean() / (centred ** 2).mean() ** 2).item() - 3.0
        mean_z = mean / (value / math.sqrt(n))
        std_dev, std_tol = std / value - 1.0, z / math.sqrt(2 * (n - 1))
        kurt_tol = z * math.sqrt(24.0 / n)
        distinct = len(np.unique(x.numpy())) if cfg.precision == "fp64" else None
        ok = (abs(mean_z) <= z and abs(std_dev) <= std_tol and abs(kurt) <= kurt_tol
              and (distinct is None or distinct == n))
        if not ok:
            failures.append(name)
        if not quiet:
            print(f"{name:<26} {n:>7} {'N(0, ' + format(value, '.4g') + ')':<16} {mean_z:14.2f} {std_dev:10.4f} "
                  f"{std_tol:8.4f} {kurt:8.3f} {kurt_tol:6.3f} {distinct if distinct is not None else 'n/a':>8}  "
                  f"{'PASS' if ok else 'FAIL'}")
    # Independence: no two normal tensors (e.g. the same tensor of two blocks) correlated.
    names = list(normals)
    worst = (0.0, None)
    for i in range(len(names)):
        for j in range(i + 1, len(names)):
            a, b = normals[names[i]], normals[names[j]]
            m = min(a.numel(), b.numel())
            a, b = a[:m] - a[:m].mean(), b[:m] - b[:m].mean()
            corr_z = ((a * b).sum() / (a.norm() * b.norm())).item() * math.sqrt(m)
            if abs(corr_z) > abs(worst[0]):
                worst = (corr_z, f"{names[i]} / {names[j]}")
            if not abs(corr_z) <= z:
                failures.append(f"corr({names[i]}, {names[j]})")
    if not quiet:
        print(f"largest correlation between two normal tensors: {worst[0]:.2f}/sqrt(n) ({worst[1]}), "
              f"tolerance {z:g}/sqrt(n)")
    return failures


def cmd_init(args, paths):
    snap = read_snapshot(paths[0])
    if snap.step != 0:
        raise Malformed(f"{snap.path}: the initialisation check needs a step-0 snapshot, this is step {snap.step}")
    cfg = snap.cfg
    print(f"initialisation check: {snap.path}: V={cfg.vocab} D={cfg.d_model} F={cfg.ffn} L={cfg.layers} "
          f"N={cfg.seq_len} precision={cfg.precision} seed={snap.config.get('train', {}).get('seed')}")
    print(f"  tolerances (z = {args.z:g} standard errors, s = the rule's std, n values): |mean| <= z s/sqrt(n) (column mean [SE] = mean / (s/sqrt(n))); "
          f"|std/s - 1| <= z/sqrt(2(n-1)); |excess kurtosis| <= z sqrt(24/n); "
          f"all values distinct (fp64); |corr| <= z/sqrt(n); constants exact")
    faults = applicable_init_faults(cfg)
    if args.inject_fault:
        if args.inject_fault not in faults:
            raise Malformed(f"--inject-fault {args.inject_fault} does not apply to this snapshot "
                            f"(applicable: {', '.join(faults)})")
        print(f"  INJECTED FAULT: {args.inject_fault}: {INIT_FAULTS[args.inject_fault]}")
    failures = init_run(snap, args.z, args.inject_fault)
    if failures:
        print(f"initialisation check: FAILED ({', '.join(failures)})")
        return 1
    print(f"initialisation check: PASSED ({len(rm.expected_shapes(cfg))} tensors)")
    if args.prove_faults:
        return prove(faults, INIT_FAULTS, lambda f: failures_run(init_run(snap, args.z, f, quiet=True)))
    return 0


def applicable_init_faults(cfg):
    """The initialisation faults that change something: wpe-std needs a wpe (learned positions)."""
    return [f for f in INIT_FAULTS if f != "wpe-std" or "wpe" in rm.expected_shapes(cfg)]


# --------------------------------------------------------------------------- data

def data_run(snaps, fault=None, quiet=False):
    failures = []
    for snap in snaps:
        cfg, tokens = snap.cfg, snap.tokens
        n_tokens = cfg.seq_len + 1
        period = (n_tokens + 1) // 2  # ceil((N+1)/2)
        if fault == "period-plus-one":
            period += 1
        elif fault == "period-minus-one":
            period -= 1
        problems = []
        lo, hi = tokens.min().item(), tokens.max().item()
        if lo < 0 or hi >= cfg.vocab:
            problems.append(f"tokens in [{lo}, {hi}], outside [0, {cfg.vocab})")
        mismatch = (tokens[:, period:] != tokens[:, :n_tokens - period])
        if mismatch.any():
            b, p = (int(v) for v in mismatch.nonzero()[0])
            problems.append(f"{int(mismatch.any(dim=1).sum())} of {cfg.batch} samples break "
                            f"token[p] == token[p - {period}]: first sample {b}, position {p + period}: "
                            f"{int(tokens[b, p + period])} != {int(tokens[b, p])}")
        # The first half draws from V slots, each a uniform token of [0, V):
        # a token with c slots (c ~ Binomial(V, 1/V)) is missing from P
        # positions with odds (1 - c/V)^P.
        slots = cfg.vocab * (4 if fault == "vocab-x4" else 1)
        distinct = [len(torch.unique(row[:period])) for row in tokens]
        expected = slots * (1 - sum(math.comb(slots, c) * (1 / slots) ** c * (1 - 1 / slots) ** (slots - c) *
                                    (1 - c / slots) ** period for c in range(slots + 1)))
        mean_distinct = sum(distinct) / len(distinct)
        if period >= 8 and abs(mean_distinct - expected) > 0.2 * expected:
            problems.append(f"first halves show {mean_distinct:.1f} distinct tokens on average, "
                            f"{slots} slots of uniform tokens show {expected:.1f}")
        if period >= 8:  # a constant first half would make the repeat trivial (odds < 16^-7)
            constant = [b for b in range(cfg.batch) if bool((tokens[b, :period] == tokens[b, 0]).all())]
            if constant:
                problems.append(f"{len(constant)} samples have a constant first half (sample {constant[0]})")
        if cfg.batch >= 2 and all(torch.equal(tokens[0], tokens[b]) for b in range(1, cfg.batch)):
            problems.append("every sample of the batch is the same")
        if not quiet:
            print(f"{snap.path}: step {snap.step}, B={cfg.batch}, N+1={n_tokens}, period P={period}, "
                  f"distinct tokens per first half {min(distinct)}..{max(distinct)} (expected {expected:.1f} on average), "
                  f"{len(torch.unique(tokens))} distinct in the batch: " + ("; ".join(problems) or "PASS"))
        failures += [f"{snap.path}: {p}" for p in problems]
    for i in range(len(snaps)):
        for j in range(i + 1, len(snaps)):
            if snaps[i].step != snaps[j].step and torch.equal(snaps[i].tokens, snaps[j].tokens):
                failures.append(f"steps {snaps[i].step} and {snaps[j].step} have the same tokens")
                if not quiet:
                    print(failures[-1] + ": FAIL")
    return failures


def cmd_data(args, paths):
    snaps = [read_snapshot(p) for p in paths]
    print(f"data check: {len(snaps)} snapshot(s); the second half repeats the first "
          f"(token[p] == token[p - P], P = ceil((N+1)/2)), the first half drawn from V slots of [0, V)")
    if args.inject_fault:
        print(f"  INJECTED FAULT: {args.inject_fault}: {DATA_FAULTS[args.inject_fault]}")
    failures = data_run(snaps, args.inject_fault)
    if failures:
        print("data check: FAILED (" + "; ".join(failures) + ")")
        return 1
    print(f"data check: PASSED ({len(snaps)} snapshot(s))")
    if args.prove_faults:
        return prove(list(DATA_FAULTS), DATA_FAULTS, lambda f: failures_run(data_run(snaps, f, quiet=True)))
    return 0


# --------------------------------------------------------------------------- main

def parse_train(items):
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--train {item}: expected KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    generator = []
    if "--" in argv:
        cut = argv.index("--")
        argv, generator = argv[:cut], argv[cut + 1:]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="check", required=True)
    faults = {"optimizer": OPTIMIZER_FAULTS, "init": INIT_FAULTS, "data": DATA_FAULTS}
    parsers = {}
    for name in ("optimizer", "init", "data"):
        p = sub.add_parser(name)
        parsers[name] = p
        p.add_argument("snapshots", nargs="*", help="snapshot files (or --workdir and -- GENERATOR...)")
        p.add_argument("--workdir", help="where the generator's snapshots go")
        p.add_argument("--prove-faults", action="store_true",
                       help="after passing, require every injected fault to be detected")
        p.add_argument("--inject-fault", choices=sorted(faults[name]), help="run with this fault (must fail)")
    parsers["optimizer"].add_argument("--steps", type=int, default=3, help="K: optimizer steps (snapshots 0..K)")
    parsers["optimizer"].add_argument("--rtol", type=float, default=None,
                                      help="norm-wise relative tolerance (default 1e-10 for fp64; required for fp32)")
    parsers["optimizer"].add_argument("--train", action="append", default=[], metavar="KEY=VALUE",
                                      help="a train.* value the snapshots lack (e.g. lr=0.01)")
    parsers["optimizer"].add_argument("--expect-optimizer", choices=("adamw", "sgd"))
    parsers["optimizer"].add_argument("--grads", choices=("reference", "snapshot"), default="reference",
                                      help="gradients from the reference (default) or the snapshots' /grads")
    parsers["init"].add_argument("--z", type=float, default=5.0, help="tolerance in standard errors")
    parsers["data"].add_argument("--snapshot-steps", type=int, nargs="+", default=[0, 1])
    args = ap.parse_args(argv)
    if args.check == "optimizer":
        args.train = parse_train(args.train)
    torch.set_num_threads(1)

    try:
        if generator:
            if args.snapshots or not args.workdir:
                ap.error("with a generator (after --), give --workdir and no snapshot files")
            steps = {"optimizer": list(range(args.steps + 1)) if args.check == "optimizer" else None,
                     "init": [0], "data": getattr(args, "snapshot_steps", None)}[args.check]
            if args.check == "optimizer" and args.steps < 1:
                ap.error("--steps must be >= 1")
            paths = generate(args.workdir, args.check, steps, generator)
        else:
            if not args.snapshots:
                ap.error("give snapshot files, or --workdir DIR -- GENERATOR...")
            paths = args.snapshots
        return {"optimizer": cmd_optimizer, "init": cmd_init, "data": cmd_data}[args.check](args, paths)
    except Malformed as e:
        print(f"{args.check} check: FAILED (malformed input: {e})")
        return 2


if __name__ == "__main__":
    sys.exit(main())
