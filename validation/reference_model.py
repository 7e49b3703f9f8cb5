"""Independent PyTorch float64 reference of the miniattn model (docs/design.md section 1).

A plain, readable re-implementation used to verify the C++ code: the module's
state_dict names are exactly the HDF5 parameter names of docs/design.md
(`wte`, `wpe`, `blocks.{l}.ln1.weight`, ..., `ln_f.bias`; `wpe` only with
learned positions), attention is written out explicitly (matmul, masked_fill,
softmax) so that no fused kernel is involved, and the loss is the mean
next-token cross-entropy.

Rotary positions (positions "rope") follow GPT-NeoX / Llama / Hugging Face's
rotate-half convention: in every head of width Dh, q and k (after the QKV bias,
before attention; v is not turned) pair element i with element i + Dh/2 and turn
the pair by pos * theta^(-2i/Dh) radians, x' = x cos + rotate_half(x) sin, with
angles in float64 and pos counted from the start of each token's document.

Library use (run with Debian's /usr/bin/python3, which has torch, h5py, numpy):

    import h5py, reference_model as rm
    with h5py.File("snap.h5") as f:
        cfg = rm.load_config(f)
        params = rm.load_params(f)
        tokens = torch.from_numpy(f["inputs/tokens"][...])
    loss, grads, extras = rm.loss_and_grads(params, tokens, cfg)

`/usr/bin/python3 reference_model.py` runs a small self-test: gradcheck against
finite differences, agreement with a second formulation built on torch's own
multi-head attention, and causality.
"""

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.stateless import functional_call

LAYERNORM_EPS = 1e-5


@dataclass
class Config:
    vocab: int
    d_model: int
    heads: int
    ffn: int
    layers: int
    seq_len: int
    batch: int
    causal: bool = True
    precision: str = "fp64"
    window: int = 0  # sliding window: keys less than `window` positions away (0 = all)
    kv_heads: int = 0  # key/value heads shared by groups of query heads (GQA); 0 = heads
    documents: bool = False  # packed documents: the snapshot's /inputs/document_ids masks attention
    positions: str = "learned"  # "learned": the wpe table is added to the embedding; "rope": q, k rotated
    rope_theta: float = 10000.0  # RoPE base: pair i of a head turns pos * theta^(-2i/Dh) radians

    @property
    def head_dim(self):
        return self.d_model // self.heads

    @property
    def kv_head_count(self):
        return self.kv_heads if self.kv_heads > 0 else self.heads

    @property
    def qkv_rows(self):
        """Rows of attn.qkv: q (D) | k (KV Dh) | v (KV Dh)."""
        return self.d_model + 2 * self.kv_head_count * self.head_dim


def _attr_value(value):
    """Turns an HDF5 attribute (numpy scalar, 1-element array, bytes) into a Python value."""
    if hasattr(value, "shape") and getattr(value, "size", 1) == 1 and value.shape != ():
        value = value.reshape(())
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, bytes):
        value = value.decode()
    return value


CONFIG_INT_ATTRS = ("vocab", "d_model", "heads", "ffn", "layers", "seq_len", "batch")
POSITIONS = ("learned", "rope")


def load_config(h5file):
    """Reads the model config from the attributes on `/`; raises KeyError naming a missing one."""
    attrs = h5file["/"].attrs
    missing = [k for k in CONFIG_INT_ATTRS + ("causal", "precision") if k not in attrs]
    if missing:
        raise KeyError("missing attribute(s) on '/': " + ", ".join(missing))
    values = {k: int(_attr_value(attrs[k])) for k in CONFIG_INT_ATTRS}
    precision = str(_attr_value(attrs["precision"])).strip().lower()
    if precision not in ("fp32", "fp64", "bf16"):
        raise ValueError(f"attribute 'precision' must be fp32, fp64 or bf16, got {precision!r}")
    # Snapshots written before model.window existed have no 'window' attribute: full attention.
    window = int(_attr_value(attrs["window"])) if "window" in attrs else 0
    # Likewise model.kv_heads: one K/V head per query head.
    kv_heads = int(_attr_value(attrs["kv_heads"])) if "kv_heads" in attrs else 0
    documents = bool(int(_attr_value(attrs["documents"]))) if "documents" in attrs else False
    # And model.positions: the learned table.
    positions = str(_attr_value(attrs["positions"])).strip().lower() if "positions" in attrs else "learned"
    if positions not in POSITIONS:
        raise ValueError(f"attribute 'positions' must be learned or rope, got {positions!r}")
    rope_theta = float(_attr_value(attrs["rope_theta"])) if "rope_theta" in attrs else 10000.0
    return Config(**values, causal=bool(int(_attr_value(attrs["causal"]))), precision=precision, window=window,
                  kv_heads=kv_heads, documents=documents, positions=positions, rope_theta=rope_theta)


def attention_mask(cfg, device=None, document_ids=None):
    """[N, N] bool, True where query i must not see key j: after it (causal),
    or `window` or more positions away (before it, or on either side when not causal);
    with document_ids [B, N] also where j lies in another document: [B, 1, N, N]."""
    i = torch.arange(cfg.seq_len, device=device).view(-1, 1)
    j = torch.arange(cfg.seq_len, device=device).view(1, -1)
    hidden = (j > i) if cfg.causal else torch.zeros(cfg.seq_len, cfg.seq_len, dtype=torch.bool, device=device)
    if cfg.window > 0:
        hidden = hidden | ((i - j).abs() >= cfg.window)
    if document_ids is not None:
        other_document = document_ids[:, :, None] != document_ids[:, None, :]  # [B, N, N]
        hidden = (hidden | other_document)[:, None]
    return hidden


def rope_positions(seq_len, document_ids=None, device=None):
    """RoPE's position of every token: [1, N] 0..N-1, or with document_ids [B, N] the
    distance from the first token of its document [B, N]."""
    p = torch.arange(seq_len, device=device)
    if document_ids is None:
        return p[None]
    # ids never decrease along a sample, so a document starts where searchsorted would insert its id.
    return p - torch.searchsorted(document_ids, document_ids)


def rope_cos_sin(cfg, positions, dtype):
    """cos, sin [B|1, N, Dh] for apply_rope at positions [B|1, N], rounded to dtype from
    float64 angles (bfloat16 cannot even hold position 257)."""
    Dh = cfg.head_dim
    if Dh % 2:
        raise ValueError(f"RoPE needs an even head width, d_model / heads = {Dh}")
    inv_freq = cfg.rope_theta ** (-torch.arange(0, Dh, 2, dtype=torch.float64, device=positions.device) / Dh)
    angle = positions.to(torch.float64)[..., None] * inv_freq  # [B|1, N, Dh/2]
    angle = torch.cat([angle, angle], dim=-1)
    return angle.cos().to(dtype), angle.sin().to(dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def apply_rope(x, cos, sin):
    """x [B, heads, N, Dh] turned by position; cos, sin [B|1, N, Dh] from rope_cos_sin."""
    return x * cos[:, None] + rotate_half(x) * sin[:, None]


def expected_shapes(cfg):
    """Name -> shape of every parameter, in docs/design.md order."""
    V, D, F_, N = cfg.vocab, cfg.d_model, cfg.ffn, cfg.seq_len
    shapes = {"wte": (V, D)}
    if cfg.positions == "learned":
        shapes["wpe"] = (N, D)
    for l in range(cfg.layers):
        p = f"blocks.{l}."
        shapes.update({
            p + "ln1.weight": (D,), p + "ln1.bias": (D,),
            p + "attn.qkv.weight": (cfg.qkv_rows, D), p + "attn.qkv.bias": (cfg.qkv_rows,),
            p + "attn.proj.weight": (D, D), p + "attn.proj.bias": (D,),
            p + "ln2.weight": (D,), p + "ln2.bias": (D,),
            p + "ffn.fc1.weight": (F_, D), p + "ffn.fc1.bias": (F_,),
            p + "ffn.fc2.weight": (D, F_), p + "ffn.fc2.bias": (D,),
        })
    shapes.update({"ln_f.weight": (D,), "ln_f.bias": (D,)})
    return shapes


def load_params(h5file):
    """Reads every dataset under /params into a dict of float64 tensors."""
    group = h5file["params"]
    names = []
    group.visititems(lambda name, obj: names.append(name) if hasattr(obj, "shape") else None)
    return {n: torch.from_numpy(group[n][...]).to(torch.float64) for n in names}


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.heads, self.cfg = cfg.heads, cfg
        self.qkv = nn.Linear(cfg.d_model, cfg.qkv_rows)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x, document_ids=None, rope=None):
        """x [B, N, D]; rope: (cos, sin) of rope_cos_sin with rotary positions, else None."""
        B, N, D = x.shape
        H, KV, Dh = self.heads, self.cfg.kv_head_count, D // self.heads
        q, k, v = self.qkv(x).split([D, KV * Dh, KV * Dh], dim=-1)  # q [B, N, D] | k, v [B, N, KV Dh]
        # head h = columns h*Dh..(h+1)*Dh-1 -> [B, H, N, Dh]; query head h uses K/V head h // (H / KV)
        q = q.view(B, N, H, Dh).transpose(1, 2)
        k, v = (t.view(B, N, KV, Dh).transpose(1, 2) for t in (k, v))
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        k, v = (t.repeat_interleave(H // KV, dim=1) for t in (k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(Dh)  # [B, H, N, N]
        hidden = attention_mask(self.cfg, x.device, document_ids)
        scores = scores.masked_fill(hidden, float("-inf"))
        o = torch.softmax(scores, dim=-1).masked_fill(hidden, 0.0) @ v  # [B, H, N, Dh]; a row without keys gives 0
        return self.proj(o.transpose(1, 2).reshape(B, N, D))


class FeedForward(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.fc1 = nn.Linear(cfg.d_model, cfg.ffn)
        self.fc2 = nn.Linear(cfg.ffn, cfg.d_model)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model, eps=LAYERNORM_EPS)
        self.attn = Attention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model, eps=LAYERNORM_EPS)
        self.ffn = FeedForward(cfg)

    def forward(self, x, document_ids=None, rope=None):
        x = x + self.attn(self.ln1(x), document_ids, rope)
        return x + self.ffn(self.ln2(x))


class ReferenceGPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Parameter(torch.empty(cfg.vocab, cfg.d_model))
        if cfg.positions == "learned":
            self.wpe = nn.Parameter(torch.empty(cfg.seq_len, cfg.d_model))
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.ln_f = nn.LayerNorm(cfg.d_model, eps=LAYERNORM_EPS)

    def forward(self, tokens, document_ids=None):
        """tokens [B, N+1] (document_ids [B, N] with packed documents)
        -> (loss, {'blocks.{l}.out': [B,N,D], 'logits': [B,N,V]})."""
        inputs, targets = tokens[:, :-1], tokens[:, 1:]
        N = inputs.shape[1]
        x = self.wte[inputs]
        rope = None
        if self.cfg.positions == "learned":
            x = x + self.wpe[torch.arange(N, device=tokens.device)]
        else:
            rope = rope_cos_sin(self.cfg, rope_positions(N, document_ids, tokens.device), x.dtype)
        extras = {}
        for l, block in enumerate(self.blocks):
            x = block(x, document_ids, rope)
            extras[f"blocks.{l}.out"] = x
        logits = self.ln_f(x) @ self.wte.t()
        extras["logits"] = logits
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        return loss, extras


def check_shapes(params, cfg):
    """Raises ValueError naming every missing, extra or wrongly shaped parameter."""
    expected = expected_shapes(cfg)
    problems = [f"missing parameter {n}" for n in expected if n not in params]
    problems += [f"unexpected parameter {n}" for n in params if n not in expected]
    problems += [f"parameter {n} has shape {tuple(params[n].shape)}, config says {s}"
                 for n, s in expected.items() if n in params and tuple(params[n].shape) != s]
    if problems:
        raise ValueError("; ".join(problems))


def forward_loss(params, tokens, cfg, document_ids=None):
    """Loss (0-d tensor) and activations of the model with `params` (name -> tensor, all of
    one dtype) on tokens [B, N+1] (and document_ids [B, N] with packed documents);
    differentiable with respect to the tensors in `params`."""
    check_shapes(params, cfg)
    if cfg.documents and document_ids is None:
        raise ValueError("the config packs documents: document_ids [B, N] are needed")
    dtype = next(iter(params.values())).dtype
    model = ReferenceGPT(cfg).to(dtype)
    tokens = torch.as_tensor(tokens, dtype=torch.int64)
    if document_ids is not None:
        document_ids = torch.as_tensor(document_ids, dtype=torch.int64)
    return functional_call(model, params, (tokens, document_ids))


def loss_and_grads(params, tokens, cfg, dtype=torch.float64, document_ids=None):
    """(loss, {name: gradient}, {activation name: tensor}) by autograd in `dtype`."""
    leaves = {n: t.detach().to(dtype).requires_grad_() for n, t in params.items()}
    loss, extras = forward_loss(leaves, tokens, cfg, document_ids)
    grads = torch.autograd.grad(loss, list(leaves.values()))
    return loss.detach(), dict(zip(leaves, grads)), {n: t.detach() for n, t in extras.items()}


def random_params(cfg, seed=0, perturb_norms=True):
    """docs/design.md's initialisation; with perturb_norms, biases and LayerNorm
    parameters are randomised a little so that every gradient path is exercised."""
    g = torch.Generator().manual_seed(seed)
    params = {}
    for name, shape in expected_shapes(cfg).items():
        if name == "wpe":
            std, mean = 0.01, 0.0
        elif name.endswith("proj.weight") or name.endswith("fc2.weight"):
            std, mean = 0.02 / math.sqrt(2 * cfg.layers), 0.0
        elif name == "wte" or name.endswith(".weight") and len(shape) == 2:
            std, mean = 0.02, 0.0
        elif name.startswith("ln") or ".ln" in name:  # LayerNorm weight/bias
            std, mean = 0.1 if perturb_norms else 0.0, 1.0 if name.endswith("weight") else 0.0
        else:  # linear biases
            std, mean = 0.02 if perturb_norms else 0.0, 0.0
        params[name] = mean + std * torch.randn(shape, generator=g, dtype=torch.float64)
    return params


def _multi_head_projection(qkv, cfg):
    """GQA's q | k | v rows as the plain multi-head projection that computes the same
    attention: each K/V head's rows repeated for every query head of its group (the
    weights, where the model repeats the activations)."""
    Dh, KV = cfg.head_dim, cfg.kv_head_count
    q, k, v = qkv.split([cfg.d_model, KV * Dh, KV * Dh], dim=0)
    group = cfg.heads // KV
    widen = lambda t: torch.cat([t[(h // group) * Dh:(h // group + 1) * Dh] for h in range(cfg.heads)], dim=0)
    return torch.cat([q, widen(k), widen(v)], dim=0)


def _rope_angles(cfg, batch, N, document_ids=None):
    """[B, N, Dh/2] float64 angles pos * theta^(-2i/Dh), pos counted with list.index from
    the first token of the same document (everything one document without document_ids)."""
    Dh = cfg.head_dim
    inv_freq = torch.tensor([cfg.rope_theta ** (-2 * i / Dh) for i in range(Dh // 2)], dtype=torch.float64)
    samples = document_ids.tolist() if document_ids is not None else [[0] * N] * batch
    pos = torch.tensor([[p - d.index(d[p]) for p in range(N)] for d in samples], dtype=torch.float64)
    return pos[:, :, None] * inv_freq


def _rotate_pairs(t, angles, heads):
    """t [B, N, heads Dh] with pair (x_i, x_{i+Dh/2}) of every head turned by angles [B, N, Dh/2]:
    (x_i cos - x_{i+Dh/2} sin, x_{i+Dh/2} cos + x_i sin)."""
    B, N, _ = t.shape
    t = t.view(B, N, heads, -1)
    low, high = t.chunk(2, dim=-1)
    c, s = angles.cos().to(t.dtype)[:, :, None], angles.sin().to(t.dtype)[:, :, None]
    return torch.cat([low * c - high * s, high * c + low * s], dim=-1).view(B, N, -1)


def _loss_with_torch_attention(params, tokens, cfg, document_ids=None):
    """The same model built on nn.functional.multi_head_attention_forward (heads as contiguous
    Dh-column blocks) and F.layer_norm: a second opinion for the self-test."""
    D = cfg.d_model
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    B, N = inputs.shape
    x = params["wte"][inputs]
    if cfg.positions == "learned":
        x = x + params["wpe"][:N]
    else:
        angles = _rope_angles(cfg, B, N, document_ids)
    allowed = torch.ones(N, N, dtype=torch.bool)
    if cfg.causal:
        allowed = allowed.tril()
    if cfg.window > 0:  # the band of diagonals -(w - 1) .. w - 1
        allowed = allowed.triu(-(cfg.window - 1)).tril(cfg.window - 1)
    mask = None if bool(allowed.all()) else ~allowed
    if document_ids is not None:  # per sample, one [N, N] mask per head: [B H, N, N]
        same = torch.stack([torch.tensor([[int(d[i] == d[j]) for j in range(N)] for i in range(N)], dtype=torch.bool)
                            for d in document_ids.tolist()])
        mask = ~(allowed & same).repeat_interleave(cfg.heads, dim=0)
    for l in range(cfg.layers):
        p = {k[len(f"blocks.{l}."):]: v for k, v in params.items() if k.startswith(f"blocks.{l}.")}
        a = F.layer_norm(x, (D,), p["ln1.weight"], p["ln1.bias"], LAYERNORM_EPS)
        # The in-projection is done here, not by torch, so that RoPE can turn q and k before attention.
        q, k, v = F.linear(a, _multi_head_projection(p["attn.qkv.weight"], cfg),
                           _multi_head_projection(p["attn.qkv.bias"], cfg)).split(D, dim=-1)
        if cfg.positions == "rope":
            q, k = _rotate_pairs(q, angles, cfg.heads), _rotate_pairs(k, angles, cfg.heads)
        identity = torch.eye(D, dtype=x.dtype)
        o = F.multi_head_attention_forward(
            q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), D, cfg.heads,
            None, None, None, None, False, 0.0, p["attn.proj.weight"], p["attn.proj.bias"],
            need_weights=False, attn_mask=mask, use_separate_proj_weight=True,
            q_proj_weight=identity, k_proj_weight=identity, v_proj_weight=identity)[0]
        x = x + o.transpose(0, 1)
        m = F.layer_norm(x, (D,), p["ln2.weight"], p["ln2.bias"], LAYERNORM_EPS)
        x = x + F.linear(F.gelu(F.linear(m, p["ffn.fc1.weight"], p["ffn.fc1.bias"]), approximate="tanh"),
                         p["ffn.fc2.weight"], p["ffn.fc2.bias"])
    x = F.layer_norm(x, (D,), params["ln_f.weight"], params["ln_f.bias"], LAYERNORM_EPS)
    return F.cross_entropy((x @ params["wte"].t()).reshape(-1, cfg.vocab), targets.reshape(-1))


def _rope_self_test(documents):
    """Failures of RoPE's own properties: positions restart with every document, the rotation
    keeps each head vector's norm, and a document's first token (position 0) is not turned."""
    cfg = Config(vocab=11, d_model=16, heads=2, ffn=12, layers=1, seq_len=documents.shape[1],
                 batch=documents.shape[0], documents=True, positions="rope")
    positions = rope_positions(cfg.seq_len, documents)
    expected = torch.tensor([[p - d.index(d[p]) for p in range(cfg.seq_len)] for d in documents.tolist()])
    q = torch.randn(cfg.batch, cfg.heads, cfg.seq_len, cfg.head_dim, dtype=torch.float64,
                    generator=torch.Generator().manual_seed(5))
    turned = apply_rope(q, *rope_cos_sin(cfg, positions, q.dtype))
    norm_change = ((turned.norm(dim=-1) / q.norm(dim=-1) - 1).abs().max()).item()
    starts = (positions == 0)[:, None].expand(-1, cfg.heads, -1)
    first_unturned = torch.equal(turned[starts], q[starts])
    print(f"rope: positions {positions.tolist()} restart per document: {torch.equal(positions, expected)}; "
          f"max head norm change {norm_change:.1e}; documents' first tokens unturned: {first_unturned}")
    return (not torch.equal(positions, expected)) + (not norm_change < 1e-14) + (not first_unturned)


if __name__ == "__main__":
    # Self-test: autograd agrees with finite differences (gradcheck) and with a second
    # formulation on torch's own attention; in causal mode future tokens change nothing;
    # RoPE restarts with every document, keeps norms and leaves position 0 alone.
    torch.set_num_threads(1)
    documents = torch.tensor([[0, 0, 1, 1, 1], [0, 1, 1, 1, 2]])  # sample 0: positions 0-1 | 2-4
    failures = _rope_self_test(documents)
    for causal, window, heads, kv_heads, packed, positions in (
            (True, 0, 2, 0, False, "learned"), (False, 0, 2, 0, False, "learned"),
            (True, 2, 2, 0, False, "learned"), (False, 3, 2, 0, False, "learned"),
            (True, 0, 4, 2, False, "learned"), (False, 2, 4, 1, False, "learned"),
            (True, 0, 2, 0, True, "learned"), (False, 3, 4, 2, True, "learned"),
            (True, 0, 2, 0, False, "rope"), (False, 2, 4, 2, False, "rope"),
            (True, 3, 4, 1, True, "rope"), (False, 0, 2, 0, True, "rope")):
        cfg = Config(vocab=11, d_model=8, heads=heads, ffn=12, layers=2, seq_len=5, batch=2, causal=causal,
                     window=window, kv_heads=kv_heads, documents=packed, positions=positions)
        ids = documents if packed else None
        params = random_params(cfg, seed=3)
        tokens = torch.randint(0, cfg.vocab, (cfg.batch, cfg.seq_len + 1), generator=torch.Generator().manual_seed(4))
        names = list(params)

        def loss_of(*tensors):
            return forward_loss(dict(zip(names, tensors)), tokens, cfg, ids)[0]

        # fast_mode: each parameter's gradient against the finite difference
        # along one random direction, not its whole Jacobian (about 1000 columns
        # here: 2 minutes for the 12 variants, against 3 s). The gradients are
        # around 1e-6, under gradcheck's default atol (1e-5), so the tolerances
        # are tightened to 100x the finite differences' own error here (about
        # 1e-10): then one query row's softmax cut from the graph fails every
        # variant, which the defaults let through.
        inputs = [p.clone().requires_grad_() for p in params.values()]
        ok = torch.autograd.gradcheck(loss_of, inputs, fast_mode=True, atol=1e-8, rtol=1e-5, raise_exception=False)
        print(f"gradcheck causal={causal} window={window} heads={heads} kv_heads={cfg.kv_head_count} "
              f"documents={packed} positions={positions}: "
              f"{'ok' if ok else 'FAILED'}")
        failures += not ok

        loss, grads, extras = loss_and_grads(params, tokens, cfg, document_ids=ids)
        leaves = {n: t.clone().requires_grad_() for n, t in params.items()}
        other = _loss_with_torch_attention(leaves, tokens, cfg, ids)
        other_grads = torch.autograd.grad(other, list(leaves.values()))
        worst = max(((grads[n] - g).norm() / grads[n].norm()).item() for n, g in zip(leaves, other_grads))
        print(f"vs nn.functional.multi_head_attention_forward causal={causal} window={window} "
              f"kv_heads={cfg.kv_head_count} documents={packed} positions={positions}: "
              f"loss rel. diff {abs(loss.item() / other.item() - 1):.1e}, worst grad rel. diff {worst:.1e}")
        failures += not (abs(loss.item() / other.item() - 1) < 1e-13 and worst < 1e-12)

        changed = tokens.clone()
        changed[:, -2] = (changed[:, -2] + 1) % cfg.vocab  # last input token
        logits = forward_loss(params, changed, cfg, ids)[1]["logits"]
        same_prefix = torch.equal(logits[:, :-1], extras["logits"][:, :-1])
        print(f"earlier logits unchanged by the last input token: {same_prefix} (expected {causal})")
        failures += same_prefix != causal
        changed = tokens.clone()
        changed[0, 0] = (changed[0, 0] + 1) % cfg.vocab  # in sample 0's first document
        logits = forward_loss(params, changed, cfg, ids)[1]["logits"]
        other_document_same = torch.equal(logits[0, 2:], extras["logits"][0, 2:])
        print(f"sample 0's second document unchanged by a token of its first: {other_document_same} "
              f"(expected {packed})")
        failures += other_document_same != packed
    print("reference model self-test: " + ("FAILED" if failures else "PASSED"))
    raise SystemExit(1 if failures else 0)
