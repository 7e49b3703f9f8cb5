"""Checks a miniattn verification snapshot against the independent PyTorch float64 reference.

Reads /params/<name>, /inputs/tokens [B, N+1], /loss, /grads/<name> and the
config attributes on `/` (docs/design.md section 4), recomputes loss and gradients
in float64 with autograd (reference_model.py) from the stored parameters and
compares:
  loss       |L - Lref| / |Lref|
  gradients  ||g - gref||_2 / ||gref||_2 per parameter (||g|| when gref is 0)
  optional /activations/blocks.{l}.out and /logits, norm-wise like gradients.
Default tolerances follow the snapshot's `precision` attribute
(fp64: loss 1e-10, grads 1e-8; fp32: loss 1e-7, grads 2e-6: measured on the
test decks, fp32 runs stay within 3.2e-9 (loss) and 3.1e-7 (worst gradient,
about 2.6 float32 epsilons), on 1 rank and on 4 ranks of hybrid attention).
bf16 is judged as FlashAttention's and PyTorch's own tests judge low
precision: each tensor's error against the float64 reference may be at most
3x (the loss: 2x) the error of a plain bf16 implementation - the same
reference model run by PyTorch in bfloat16 from the same fp32 parameters -
against that same reference, plus 1e-4 (loss: 1e-6) for ties of small errors.

    /usr/bin/python3 check_snapshot.py SNAPSHOT.h5 [--loss-rtol X] [--grad-rtol Y]

Exit status: 0 all within tolerance, 1 some value out of tolerance or a
gradient missing, 2 malformed file (missing dataset or attribute, parameter set
or shapes not matching the config).
"""

import argparse
import math
import sys

import h5py
import torch

import reference_model as rm

DEFAULT_RTOL = {"fp64": (1e-10, 1e-8), "fp32": (1e-7, 2e-6)}  # (loss, grads)
BF16_FACTORS = (2.0, 3.0)   # (loss, grads): multiples of the plain bf16 implementation's error
BF16_FLOORS = (1e-6, 1e-4)  # (loss, grads)


class Malformed(Exception):
    pass


def read_dataset(f, path):
    if path not in f or not isinstance(f[path], h5py.Dataset):
        raise Malformed(f"missing dataset /{path}")
    return f[path][...]


def dataset_names(f, group):
    if group not in f:
        return []
    names = []
    f[group].visititems(lambda n, obj: names.append(n) if isinstance(obj, h5py.Dataset) else None)
    return names


def read_snapshot(path):
    """(cfg, params, tokens, document_ids or None, loss, grads, optional activations) as
    float64 tensors."""
    with h5py.File(path, "r") as f:
        try:
            cfg = rm.load_config(f)
        except (KeyError, ValueError, TypeError) as e:
            raise Malformed(str(e).strip("'\""))
        if "params" not in f:
            raise Malformed("missing group /params")
        params = rm.load_params(f)
        try:
            rm.check_shapes(params, cfg)
        except ValueError as e:
            raise Malformed(f"parameters do not match the config: {e}")
        tokens = torch.from_numpy(read_dataset(f, "inputs/tokens")).to(torch.int64)
        if tuple(tokens.shape) != (cfg.batch, cfg.seq_len + 1):
            raise Malformed(f"/inputs/tokens has shape {tuple(tokens.shape)}, "
                            f"config says {(cfg.batch, cfg.seq_len + 1)}")
        if tokens.numel() and (tokens.min() < 0 or tokens.max() >= cfg.vocab):
            raise Malformed(f"/inputs/tokens holds values outside [0, {cfg.vocab})")
        document_ids = None
        if cfg.documents:
            document_ids = torch.from_numpy(read_dataset(f, "inputs/document_ids")).to(torch.int64)
            if tuple(document_ids.shape) != (cfg.batch, cfg.seq_len):
                raise Malformed(f"/inputs/document_ids has shape {tuple(document_ids.shape)}, "
                                f"config says {(cfg.batch, cfg.seq_len)}")
            if document_ids.numel() and bool((document_ids[:, 1:] < document_ids[:, :-1]).any()):
                raise Malformed("/inputs/document_ids decrease along a sample (documents are packed in order)")
        loss = read_dataset(f, "loss")
        if loss.size != 1:
            raise Malformed(f"/loss has {loss.size} values, expected a scalar")
        loss = float(loss.reshape(()))
        grads = {n: torch.from_numpy(f["grads"][n][...]).to(torch.float64)
                 for n in dataset_names(f, "grads")}
        extras = {n: torch.from_numpy(f["activations"][n][...]).to(torch.float64)
                  for n in dataset_names(f, "activations")}
        if "logits" in f:
            extras["logits"] = torch.from_numpy(read_dataset(f, "logits")).to(torch.float64)
    return cfg, params, tokens, document_ids, loss, grads, extras


def normwise_error(value, ref):
    """||value - ref|| / ||ref||, or ||value|| when ref is zero; inf on a shape mismatch."""
    if value.shape != ref.shape:
        return math.inf
    ref_norm = ref.norm().item()
    diff = (value - ref).norm().item()
    return diff / ref_norm if ref_norm > 0 else value.norm().item()


def tolerances(args, cfg, params, tokens, document_ids, ref_loss, ref_grads):
    """(loss rtol, label -> rtol): the precision's defaults or the command line's; for bf16
    multiples of a plain bf16 implementation's errors (BF16_FACTORS, BF16_FLOORS)."""
    if cfg.precision != "bf16":
        loss_tol = args.loss_rtol if args.loss_rtol is not None else DEFAULT_RTOL[cfg.precision][0]
        grad_tol = args.grad_rtol if args.grad_rtol is not None else DEFAULT_RTOL[cfg.precision][1]
        return loss_tol, lambda label: grad_tol
    plain_loss, plain_grads, _ = rm.loss_and_grads(params, tokens, cfg, dtype=torch.bfloat16,
                                                   document_ids=document_ids)
    plain_loss_err = abs(plain_loss.item() - ref_loss) / abs(ref_loss)
    loss_tol = args.loss_rtol if args.loss_rtol is not None else BF16_FACTORS[0] * plain_loss_err + BF16_FLOORS[0]
    if args.grad_rtol is not None:
        return loss_tol, lambda label: args.grad_rtol
    plain = {f"grad {n}": normwise_error(g.to(torch.float64), ref_grads[n]) for n, g in plain_grads.items()}
    # Activations and logits are not written by bf16 runs; a tensor the plain run lacks gets the floor.
    return loss_tol, lambda label: BF16_FACTORS[1] * plain.get(label, 0.0) + BF16_FLOORS[1]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("snapshot")
    ap.add_argument("--loss-rtol", type=float, default=None)
    ap.add_argument("--grad-rtol", type=float, default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)

    try:
        cfg, params, tokens, document_ids, loss, grads, extras = read_snapshot(args.snapshot)
    except (Malformed, OSError) as e:
        print(f"{args.snapshot}: malformed snapshot: {e}")
        print("reference check: FAILED (malformed snapshot)")
        return 2
    ref_loss, ref_grads, ref_extras = rm.loss_and_grads(params, tokens, cfg, document_ids=document_ids)
    ref_loss = ref_loss.item()
    loss_tol, grad_tol = tolerances(args, cfg, params, tokens, document_ids, ref_loss, ref_grads)

    print(f"snapshot {args.snapshot}: V={cfg.vocab} D={cfg.d_model} H={cfg.heads} F={cfg.ffn} "
          f"L={cfg.layers} N={cfg.seq_len} B={cfg.batch} causal={int(cfg.causal)} window={cfg.window} "
          f"kv_heads={cfg.kv_head_count} documents={int(cfg.documents)} positions={cfg.positions} "
          f"precision={cfg.precision}")
    if cfg.precision == "bf16" and args.grad_rtol is None:
        print(f"tolerances: {BF16_FACTORS[1]:g}x a plain bf16 implementation's error + {BF16_FLOORS[1]:g} per "
              f"tensor; loss {BF16_FACTORS[0]:g}x + {BF16_FLOORS[0]:g} = {loss_tol:.2e}")
    else:
        print(f"tolerances: loss rtol {loss_tol:.1e}, grads/activations norm-wise rtol {grad_tol(None):.1e}")
    print(f"{'tensor':<36} {'shape':<16} {'||ref||':>12} {'error':>10}  result")
    failures, checked = [], 0

    def report(label, shape, ref_norm, err, note=""):
        nonlocal checked
        checked += 1
        tol = grad_tol(label)
        ok = err <= tol  # False for NaN
        if cfg.precision == "bf16":
            note += f" (rtol {tol:.2e})"
        if not ok:
            failures.append(label)
        shape_text = "x".join(map(str, shape)) or "scalar"
        print(f"{label:<36} {shape_text:<16} {ref_norm:12.4e} {err:10.2e}  "
              f"{'PASS' if ok else 'FAIL'}{note}")

    for name in rm.expected_shapes(cfg):  # docs/design.md order
        ref, label = ref_grads[name], f"grad {name}"
        if name not in grads:
            checked += 1
            failures.append(label)
            print(f"{label:<36} {'':<16} {ref.norm().item():12.4e} {'-':>10}  FAIL (missing /grads/{name})")
            continue
        note = "" if grads[name].shape == ref.shape else f" (shape {tuple(grads[name].shape)})"
        report(label, tuple(ref.shape), ref.norm().item(), normwise_error(grads[name], ref), note)
    for name in grads:
        if name not in ref_grads:
            checked += 1
            failures.append(f"grad {name}")
            print(f"{'grad ' + name:<36} {'':<16} {'':>12} {'-':>10}  FAIL (no such parameter)")
    for name, value in extras.items():
        label = name if name == "logits" else f"activation {name}"
        if name not in ref_extras:
            checked += 1
            failures.append(label)
            print(f"{label:<36} {'':<16} {'':>12} {'-':>10}  FAIL (not an activation of the model)")
            continue
        ref = ref_extras[name]
        note = "" if value.shape == ref.shape else f" (shape {tuple(value.shape)})"
        report(label, tuple(ref.shape), ref.norm().item(), normwise_error(value, ref), note)

    loss_err = abs(loss - ref_loss) / abs(ref_loss) if ref_loss != 0 else abs(loss)
    loss_ok = loss_err <= loss_tol
    checked += 1
    if not loss_ok:
        failures.append("loss")
    print(f"loss: snapshot {loss:.17g} reference {ref_loss:.17g} rel. error {loss_err:.2e} "
          f"(rtol {loss_tol:.1e}) {'PASS' if loss_ok else 'FAIL'}")

    if failures:
        print(f"reference check: FAILED ({len(failures)} of {checked} tensors: {', '.join(failures)})")
        return 1
    print(f"reference check: PASSED ({checked} tensors)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
