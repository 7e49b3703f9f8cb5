"""Writes a verification snapshot (docs/design.md section 4) computed by the PyTorch reference.

Builds a random model (docs/design.md's initialisation, with biases and LayerNorm
parameters randomised a little so every gradient is exercised), random tokens,
and stores params, tokens, loss and gradients exactly as miniattn would. With
`--precision fp32` it imitates an fp32 run: parameters are rounded to float32
and loss, gradients and activations are computed in float32. `--positions rope`
gives rotary positions (no wpe; theta 10000) instead of the learned table.
`--perturb-grad NAME` / `--perturb-loss` spoil the file slightly so that tests
can prove check_snapshot.py rejects it.

    /usr/bin/python3 make_reference_snapshot.py OUT.h5 --vocab 13 --d-model 8 \\
        --heads 2 --layers 2 --seq-len 6 --batch 2 [--ffn F] [--causal 0|1] \\
        [--seed S] [--precision fp64|fp32] [--positions learned|rope] [--with-activations] \\
        [--perturb-grad NAME] [--perturb-loss] [--perturb-size EPS]
"""

import argparse
import sys

import h5py
import numpy as np
import torch

import reference_model as rm


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    for key in ("vocab", "d-model", "heads", "layers", "seq-len", "batch"):
        ap.add_argument("--" + key, type=int, required=True)
    ap.add_argument("--ffn", type=int, default=None, help="FFN width (default 4*d_model)")
    ap.add_argument("--causal", type=int, choices=(0, 1), default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--precision", choices=("fp64", "fp32"), default="fp64")
    ap.add_argument("--positions", choices=rm.POSITIONS, default="learned")
    ap.add_argument("--with-activations", action="store_true",
                    help="also write /activations/blocks.{l}.out and /logits")
    ap.add_argument("--perturb-grad", metavar="NAME", help="scale this gradient by (1 + EPS)")
    ap.add_argument("--perturb-loss", action="store_true", help="scale the loss by (1 + EPS)")
    ap.add_argument("--perturb-size", type=float, default=None, metavar="EPS",
                    help="relative perturbation (default 1e-6 for a gradient, 1e-8 for the loss)")
    args = ap.parse_args(argv)

    if args.d_model % args.heads:
        ap.error("d-model must be divisible by heads")
    cfg = rm.Config(vocab=args.vocab, d_model=args.d_model, heads=args.heads,
                    ffn=args.ffn or 4 * args.d_model, layers=args.layers,
                    seq_len=args.seq_len, batch=args.batch, causal=bool(args.causal),
                    precision=args.precision, positions=args.positions)
    dtype = torch.float32 if args.precision == "fp32" else torch.float64
    torch.set_num_threads(1)

    params = {n: t.to(dtype) for n, t in rm.random_params(cfg, seed=args.seed).items()}
    tokens = torch.randint(0, cfg.vocab, (cfg.batch, cfg.seq_len + 1),
                           generator=torch.Generator().manual_seed(args.seed + 1))
    loss, grads, extras = rm.loss_and_grads(params, tokens, cfg, dtype=dtype)

    if args.perturb_grad:
        if args.perturb_grad not in grads:
            ap.error(f"--perturb-grad: no parameter named {args.perturb_grad}")
        eps = args.perturb_size if args.perturb_size is not None else 1e-6
        g = grads[args.perturb_grad]
        grads[args.perturb_grad] = g * (1 + eps) if g.norm() > 0 else g + eps
    if args.perturb_loss:
        eps = args.perturb_size if args.perturb_size is not None else 1e-8
        loss = loss * (1 + eps)

    np_dtype = np.float32 if dtype == torch.float32 else np.float64
    with h5py.File(args.out, "w") as f:
        for key in rm.CONFIG_INT_ATTRS:
            f.attrs[key] = np.int64(getattr(cfg, key))
        f.attrs["causal"] = np.int64(int(cfg.causal))
        f.attrs["precision"] = cfg.precision
        f.attrs["positions"] = cfg.positions
        f.attrs["rope_theta"] = np.float64(cfg.rope_theta)
        f.attrs["seed"] = np.int64(args.seed)
        f.attrs["step"] = np.int64(0)
        for name in rm.expected_shapes(cfg):
            f[f"params/{name}"] = params[name].numpy().astype(np_dtype)
            f[f"grads/{name}"] = grads[name].numpy().astype(np_dtype)
        f["inputs/tokens"] = tokens.numpy().astype(np.int64)
        f["loss"] = np.array(loss.item(), dtype=np_dtype)
        if args.with_activations:
            for name, value in extras.items():
                path = "logits" if name == "logits" else f"activations/{name}"
                f[path] = value.numpy().astype(np_dtype)
    print(f"wrote {args.out}: loss {loss.item():.17g} ({args.precision}, "
          f"{'causal' if cfg.causal else 'non-causal'}, {cfg.positions} positions, {len(params)} parameters)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
