"""gpt_torch_reference.py: an independent GPT-2 in PyTorch checks the trainer's GPT.

usage:
  gpt_torch_reference.py RUN_DIR [--tokens TRAIN.tok] [--steps 10] [--fp64-floor]
                         [--loss-rtol 2e-6] [--step-loss-rtol 1e-6] [--grad-tol 3e-5]
                         [--v-tol 1e-3] [-v]
  gpt_torch_reference.py --self-test      (checks this reference on its own, no trainer)

RUN_DIR is a finished trainer run of model.name = gpt with checkpoint.at_start = true,
checkpoint.every = 1, train.log_every = 1, data.shuffle = false, optim.name = adamw, a
constant learning rate and no gradient clipping. From it the script reads
  checkpoints/step_00000000.h5  the initial parameters and /deck (the resolved deck:
                                model sizes, batch and optimizer settings)
  checkpoints/step_0000000N.h5  parameters and AdamW state after step N (N = 1..steps;
                                at least N = 1): adam_m = (1-beta1) g and adam_v =
                                (1-beta2) g^2 after the first step, g the step-0 gradient
  metrics.csv                   the train loss of every step (the row step = s+1 holds
                                the loss of step s, computed before its update)
and the token file named by the deck's data.train_tokens (or --tokens), read in the
trainer's unshuffled order: window w = tokens[w*T : w*T+T+1], step s takes windows
(s % steps_per_epoch)*B .. +B-1 (T = seq_len, B = global batch_size).

Checks (exit 1 on any mismatch, 2 when the run cannot be checked):
  1. for each step n whose checkpoints n and n+1 exist, from the trainer's own
     parameters p_n (so errors do not compound):
       loss    PyTorch's loss of batch n at p_n vs metrics.csv, |a-b|/|b|
               <= --step-loss-rtol;
       grad    PyTorch's gradient of every parameter at p_n vs the trainer's, recovered
               from its AdamW state: g_n = (m_n+1 - beta1 m_n) / (1-beta1) (at n = 0
               simply adam_m / (1-beta1)); max|a-b| / max|b| per tensor <= --grad-tol;
       v       g^2 vs (v_n+1 - beta2 v_n) / (1-beta2), the same way, <= --v-tol;
       update  p_n+1 vs torch.optim.AdamW's formula applied to p_n, m_n+1, v_n+1 in
               float64 (decoupled decay lr*wd on the 2-D weights only), within 4 float32
               ulps of p plus 1e-4 lr per entry;
  2. --steps steps of torch.optim.AdamW (weight decay on the 2-D weights wte, wpe and
     the Linear weights; none on biases and LayerNorms) from the step-0 parameters,
     every step's loss vs metrics.csv, |a-b|/|b| <= --loss-rtol.
How far the two free runs' parameters drift apart is printed for information (and
itemised per step when the loss curve disagrees, or with -v).

The model is written here from the GPT-2 paper's description, not taken from the
trainer or from HF transformers: token + learned position embeddings, n_layer pre-LN
blocks (x += attn(ln_1(x)); x += mlp(ln_2(x))), causal multi-head attention with a fused
c_attn (q, k, v stacked along the output dimension, each cut into n_head contiguous
heads), GELU in its tanh form, final ln_f, logits = ln_f(x) wte^T (tied), LayerNorm eps
1e-5, loss = mean cross-entropy over all B*T positions. Dropout (the deck's
model.embd_pdrop, attn_pdrop, resid_pdrop) at GPT-2's sites: the embeddings' sum, the
attention probabilities, each projection before its residual add; its masks are the
trainer's documented ones (src/backend/dropout_math.h: Philox-4x32-10 written here in
numpy, keyed by train.seed, counter (step << 32 | 5 << 20 | site, n / 4), word n % 4
below p 2^32 drops, kept values times float32(1 / (1 - p)); n the element's index in
the step's global batch, sites 0 for the embeddings and 1 + 3 l + (0 attention, 1 its
projection, 2 the MLP's) for block l; attention's probabilities (b, h, i, j) four to a
counter instead: that of (b, h, i & ~8, j & ~8), word 2 (i bit 3) + (j bit 3)), so a
run with dropout is checked the same way. All of it runs in float32
(float64 for --fp64-floor and for the self-test's finite differences), one thread,
deterministic algorithms. The deck's float settings (lr, betas, eps, weight_decay) are
rounded to float32 first, as the trainer holds them.

Tolerances, chosen from measurements of the e2e test's runs (2 layers, 4 heads, 64 wide,
32 tokens, batch 4, GPT-2 BPE vocabulary 50257 and bytes 256; 1 rank, 1 rank with 2
threads, 2 ranks) and from defects planted in fake runs written by this script:
  --step-loss-rtol 1e-6   measured <= 1.3e-7 (float32 PyTorch itself is ~1e-7 from
                          float64; the trainer is ~1e-8 from it). Counting the 47 padded
                          vocabulary rows in the softmax shows as 8.5e-5 at step 0.
  --loss-rtol 2e-6        the free 10-step run: measured <= 1.3e-7, no growth over 10
                          steps (Adam's first steps are ~lr*sign(g), so an entry whose
                          gradient is at rounding level may step the other way, but such
                          entries barely move the loss). Weight decay on biases and
                          LayerNorms too shows as 3.5e-5 by step 9, the padded softmax as
                          1.4e-4; an erf GELU only as 1.3e-6, which the gradients catch.
  --grad-tol 3e-5         measured <= 3.7e-6 (float32 vs float64 PyTorch alone: <= 8e-7
                          at step 0); the worst are the small 1-D tensors (LayerNorm,
                          biases), sums over B*T positions that largely cancel. GELU with
                          erf instead of tanh gives 5.6e-5 to 1.6e-4 in mlp.c_fc at every
                          step (at this init the GELU inputs are small, where the two
                          forms differ little); the padded softmax 1e-4 at step 0.
  --v-tol 1e-3            measured <= 6.2e-5; loose on purpose: v_n+1 - beta2 v_n cancels
                          and g^2 doubles relative errors.
  update: 4 ulps of p     measured at most 0.10 of the allowance (half an ulp of the
                          LayerNorm gains near 1); decay on 1-D parameters is 170 times it.
"""
import argparse
import configparser
import csv
import math
import os
import struct
import sys
import tempfile
import time

import h5py
import numpy as np
import torch
import torch.nn.functional as F

LN_EPS = 1e-5


# ----------------------------------------------------------------------------- inputs

class Config:
    """The settings this reference needs, from the resolved deck text."""

    def __init__(self, deck_text):
        cp = configparser.ConfigParser(inline_comment_prefixes=("#",), interpolation=None,
                                       comment_prefixes=("#",), strict=False)
        cp.read_string(deck_text)
        self.cp = cp

        def get(sec, key, conv=str, default=None):
            if cp.has_option(sec, key):
                return conv(cp.get(sec, key).strip())
            if default is None:
                raise SystemExit(f"deck has no [{sec}] {key}")
            return default

        self.get = get
        self.model = get("model", "name")
        self.n_layer = get("model", "n_layer", int)
        self.n_head = get("model", "n_head", int)
        self.n_embd = get("model", "n_embd", int)
        self.seq_len = get("model", "seq_len", int)
        self.vocab_size = get("model", "vocab_size", int)
        self.batch_size = get("train", "batch_size", int)
        self.optim = get("optim", "name")
        # the trainer holds these as C floats; PyTorch gets the same float32 values
        f32 = lambda s: float(np.float32(float(s)))
        self.lr = get("optim", "lr", f32)
        self.beta1 = get("optim", "beta1", f32)
        self.beta2 = get("optim", "beta2", f32)
        self.eps = get("optim", "eps", f32)
        self.weight_decay = get("optim", "weight_decay", f32)
        self.schedule = get("optim", "schedule", str, "constant")
        self.warmup_steps = get("optim", "warmup_steps", int, 0)
        self.clip = get("optim", "clip_grad_norm", float, 0.0)
        self.shuffle = get("data", "shuffle", str, "false").lower()
        self.train_tokens = get("data", "train_tokens", str, "")
        self.seed = get("train", "seed", int, 1234)
        self.embd_pdrop = get("model", "embd_pdrop", f32, 0.0)
        self.attn_pdrop = get("model", "attn_pdrop", f32, 0.0)
        self.resid_pdrop = get("model", "resid_pdrop", f32, 0.0)
        if self.n_embd % self.n_head:
            raise SystemExit(f"n_embd {self.n_embd} is not a multiple of n_head {self.n_head}")

    def unsupported(self):
        """Reasons this reference cannot reproduce the run (it does one thing only)."""
        why = []
        if self.model != "gpt":
            why.append(f"model.name = {self.model}, not gpt")
        if self.optim != "adamw":
            why.append(f"optim.name = {self.optim}, not adamw")
        if self.schedule != "constant" and self.warmup_steps != 0:
            why.append("the learning rate is not constant (schedule/warmup)")
        elif self.schedule != "constant":
            why.append(f"optim.schedule = {self.schedule}, not constant")
        elif self.warmup_steps:
            why.append(f"optim.warmup_steps = {self.warmup_steps}, not 0")
        if self.clip != 0:
            why.append(f"optim.clip_grad_norm = {self.clip}, not 0")
        if self.shuffle not in ("false", "0", "no", "off"):
            why.append("data.shuffle is on (the batch order is then the trainer's seeded shuffle)")
        return why


def read_tokens(path):
    """A TRTOKENS file: 32-byte little-endian header, then the ids."""
    with open(path, "rb") as f:
        head = f.read(32)
        if len(head) != 32 or head[:8] != b"TRTOKENS":
            raise SystemExit(f"{path}: not a TRTOKENS file")
        version, dtype, count, vocab, _ = struct.unpack("<IIQII", head[8:])
        if version != 1 or dtype not in (1, 2):
            raise SystemExit(f"{path}: version {version} dtype {dtype} not understood")
        ids = np.frombuffer(f.read(), dtype="<u2" if dtype == 1 else "<u4")
    if ids.size != count:
        raise SystemExit(f"{path}: header says {count} tokens, the file holds {ids.size}")
    if count and int(ids.max()) >= vocab:
        raise SystemExit(f"{path}: token {int(ids.max())} >= the file's vocab_size {vocab}")
    return ids.astype(np.int64), vocab


def write_tokens(path, ids, vocab):
    ids = np.asarray(ids)
    dtype = 1 if vocab <= 65536 else 2
    with open(path, "wb") as f:
        f.write(b"TRTOKENS" + struct.pack("<IIQII", 1, dtype, ids.size, vocab, 0))
        f.write(ids.astype("<u2" if dtype == 1 else "<u4").tobytes())


def batch_for_step(tokens, step, T, G):
    """Unshuffled order: window w = tokens[w*T : w*T+T+1]; step s takes windows
    (s % steps_per_epoch)*G .. +G-1. Returns (inputs, targets), int64 [G, T]."""
    windows = (tokens.size - 1) // T
    per_epoch = windows // G
    if per_epoch < 1:
        raise SystemExit(f"{windows} windows of {T}+1 tokens, fewer than a batch of {G}")
    first = (step % per_epoch) * G
    rows = np.stack([tokens[(first + j) * T:(first + j) * T + T + 1] for j in range(G)])
    return torch.from_numpy(rows[:, :-1].copy()), torch.from_numpy(rows[:, 1:].copy())


def read_metrics(path):
    """{step: (loss, lr)} of the train rows."""
    with open(path) as f:
        return {int(r["step"]): (float(r["loss"]), float(r["lr"]))
                for r in csv.DictReader(f) if r["phase"] == "train"}


# ------------------------------------------------------------------------------ model

def param_shapes(cfg):
    """Every parameter the checkpoint must hold, by its path under /model, in order."""
    C, V, T = cfg.n_embd, cfg.vocab_size, cfg.seq_len
    shapes = {"wte/weight": (V, C), "wpe/weight": (T, C)}
    for i in range(cfg.n_layer):
        h = f"h.{i}/"
        shapes.update({
            h + "ln_1/weight": (C,), h + "ln_1/bias": (C,),
            h + "attn/c_attn/weight": (3 * C, C), h + "attn/c_attn/bias": (3 * C,),
            h + "attn/c_proj/weight": (C, C), h + "attn/c_proj/bias": (C,),
            h + "ln_2/weight": (C,), h + "ln_2/bias": (C,),
            h + "mlp/c_fc/weight": (4 * C, C), h + "mlp/c_fc/bias": (4 * C,),
            h + "mlp/c_proj/weight": (C, 4 * C), h + "mlp/c_proj/bias": (C,),
        })
    shapes.update({"ln_f/weight": (C,), "ln_f/bias": (C,)})
    return shapes


def decays(name, shape):
    """AdamW's decoupled weight decay applies to the 2-D weights (wte, wpe, Linear)."""
    return name.endswith("/weight") and len(shape) == 2


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))


def gelu_erf(x):  # the self-test's deliberately wrong variant
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def philox4x32(key, hi, lo):
    """Philox-4x32-10 (Salmon et al., SC'11) of the uint64 counters lo (an array) with the
    counter's high word hi and key, both ints: the four uint32 words, [4, len(lo)]."""
    m32 = np.uint64(0xFFFFFFFF)
    lo = np.asarray(lo, dtype=np.uint64)
    c = [lo & m32, lo >> np.uint64(32), np.full_like(lo, hi & 0xFFFFFFFF),
         np.full_like(lo, hi >> 32)]
    k0, k1 = key & 0xFFFFFFFF, (key >> 32) & 0xFFFFFFFF
    for _ in range(10):
        p0 = np.uint64(0xD2511F53) * c[0]
        p1 = np.uint64(0xCD9E8D57) * c[2]
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ np.uint64(k0), p1 & m32,
             (p0 >> np.uint64(32)) ^ c[3] ^ np.uint64(k1), p0 & m32]
        k0, k1 = (k0 + 0x9E3779B9) & 0xFFFFFFFF, (k1 + 0xBB67AE85) & 0xFFFFFFFF
    return np.stack(c)


def dropout_factors(cfg, p, step, site, shape, attention=False):
    """The trainer's mask for a tensor of `shape` that holds a whole global batch: a
    float32 tensor of 0 and 1 / (1 - p) (None where p is 0). Element-wise sites: word
    n % 4 of counter n / 4. attention (shape [B, nh, T, T]): (i, j), (i, j + 8),
    (i + 8, j), (i + 8, j + 8) share the counter of (i, j) with bit 3 of both clear,
    word 2 (i bit 3) + (j bit 3)."""
    if p <= 0 or step is None:
        return None
    n = np.arange(int(np.prod(shape)), dtype=np.uint64)
    if attention:
        T = np.uint64(shape[-1])
        i, j = (n // T) % T, n % T
        eight, one = np.uint64(8), np.uint64(1)
        counter = n - (i & eight) * T - (j & eight)
        word = ((i >> np.uint64(3)) & one) * np.uint64(2) + ((j >> np.uint64(3)) & one)
    else:
        counter, word = n >> np.uint64(2), n & np.uint64(3)
    words = philox4x32(cfg.seed, (step << 32) | (5 << 20) | site, counter)
    draw = np.take_along_axis(words, word.astype(np.int64)[None, :], 0)[0]
    threshold = min(int(float(np.float32(p)) * 4294967296.0), 4294967295)
    scale = np.float32(1.0 / (1.0 - float(np.float32(p))))
    f = np.where(draw < threshold, np.float32(0), scale).astype(np.float32)
    return torch.from_numpy(f.reshape(shape))


def dropped(t, cfg, p, step, site, attention=False):
    f = dropout_factors(cfg, p, step, site, tuple(t.shape), attention)
    return t if f is None else t * f.to(t.dtype)


def forward(P, cfg, idx, targets, gelu=gelu_tanh, step=None):
    """Mean cross-entropy of the next-token predictions; P: name -> tensor. step: a
    training step's batch (dropout's masks, where the deck has any), None: no dropout."""
    B, T = idx.shape
    C, nh = cfg.n_embd, cfg.n_head
    hs = C // nh
    x = P["wte/weight"][idx] + P["wpe/weight"][:T].unsqueeze(0)
    x = dropped(x, cfg, cfg.embd_pdrop, step, 0)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    for i in range(cfg.n_layer):
        h = f"h.{i}/"
        a = F.layer_norm(x, (C,), P[h + "ln_1/weight"], P[h + "ln_1/bias"], LN_EPS)
        qkv = a @ P[h + "attn/c_attn/weight"].t() + P[h + "attn/c_attn/bias"]
        q, k, v = qkv.split(C, dim=2)
        q = q.view(B, T, nh, hs).transpose(1, 2)  # B, nh, T, hs
        k = k.view(B, T, nh, hs).transpose(1, 2)
        v = v.view(B, T, nh, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        att = dropped(att, cfg, cfg.attn_pdrop, step, 1 + 3 * i, attention=True)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        y = y @ P[h + "attn/c_proj/weight"].t() + P[h + "attn/c_proj/bias"]
        x = x + dropped(y, cfg, cfg.resid_pdrop, step, 2 + 3 * i)
        a = F.layer_norm(x, (C,), P[h + "ln_2/weight"], P[h + "ln_2/bias"], LN_EPS)
        a = gelu(a @ P[h + "mlp/c_fc/weight"].t() + P[h + "mlp/c_fc/bias"])
        y = a @ P[h + "mlp/c_proj/weight"].t() + P[h + "mlp/c_proj/bias"]
        x = x + dropped(y, cfg, cfg.resid_pdrop, step, 3 + 3 * i)
    x = F.layer_norm(x, (C,), P["ln_f/weight"], P["ln_f/bias"], LN_EPS)
    logits = x @ P["wte/weight"].t()  # tied head, [B, T, V]
    return F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(B * T))


def make_params(arrays, dtype):
    return {k: torch.tensor(np.asarray(v), dtype=dtype, requires_grad=True)
            for k, v in arrays.items()}


def make_adamw(P, cfg, decay_all=False):
    dec = [p for k, p in P.items() if decay_all or decays(k, p.shape)]
    nodec = [p for k, p in P.items() if not (decay_all or decays(k, p.shape))]
    groups = [{"params": dec, "weight_decay": cfg.weight_decay}]
    if nodec:
        groups.append({"params": nodec, "weight_decay": 0.0})
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps,
                             amsgrad=False, maximize=False, foreach=False)


def train(arrays, cfg, tokens, steps, dtype, gelu=gelu_tanh, decay_all=False, keep=None):
    """steps AdamW steps from arrays. Returns (losses, step-0 grads, params after
    each step listed in keep as {step: {name: ndarray}})."""
    P = make_params(arrays, dtype)
    opt = make_adamw(P, cfg, decay_all)
    losses, grads0, snaps = [], None, {}
    for s in range(steps):
        x, y = batch_for_step(tokens, s, cfg.seq_len, cfg.batch_size)
        opt.zero_grad(set_to_none=True)
        loss = forward(P, cfg, x, y, gelu, step=s)
        loss.backward()
        losses.append(loss.item())
        if s == 0:
            grads0 = {k: p.grad.detach().double().numpy().copy() for k, p in P.items()}
        opt.step()
        if keep is not None and s + 1 in keep:
            snaps[s + 1] = {k: p.detach().double().numpy().copy() for k, p in P.items()}
    return losses, grads0, snaps


# ----------------------------------------------------------------------- checkpoints

def read_checkpoint(path, cfg=None):
    """(deck text, step, {name: array} of /model, {name: array} of adam_m, adam_v)."""
    with h5py.File(path, "r") as f:
        deck = f["/deck"][()]
        deck = deck.decode() if isinstance(deck, bytes) else str(deck)
        step = int(f.attrs["step"]) if "step" in f.attrs else None
        cfg = cfg or Config(deck)

        def group(root):
            out = {}
            if root not in f:
                return out
            f[root].visititems(lambda n, o: out.__setitem__(n, o[()])
                               if isinstance(o, h5py.Dataset) else None)
            return out

        model = group("/model")
        m = group("/optimizer/adam_m")
        v = group("/optimizer/adam_v")
    return deck, step, model, m, v, cfg


def check_layout(what, arrays, shapes, problems):
    missing = [k for k in shapes if k not in arrays]
    extra = [k for k in arrays if k not in shapes]
    wrong = [f"{k} {tuple(arrays[k].shape)} (want {shapes[k]})" for k in shapes
             if k in arrays and tuple(arrays[k].shape) != shapes[k]]
    notf32 = [f"{k} {arrays[k].dtype}" for k in shapes
              if k in arrays and arrays[k].dtype != np.float32]
    for label, items in (("missing", missing), ("unexpected", extra), ("wrong shape", wrong),
                         ("not float32", notf32)):
        if items:
            problems.append(f"{what}: {label}: {', '.join(items[:8])}"
                            + (f" (+{len(items) - 8} more)" if len(items) > 8 else ""))


def rel_max(a, b):
    """max|a - b| / max|b| (0 when both are 0)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    den = np.abs(b).max() if b.size else 0.0
    num = np.abs(a - b).max() if b.size else 0.0
    return num / den if den > 0 else (0.0 if num == 0 else math.inf)


# ----------------------------------------------------------------------------- check

def adamw_expected(p, m, v, n, cfg, wd):
    """The trainer's parameter after step n (1-based) from its own stored p_{n-1} and
    m_n, v_n: PyTorch's AdamW, p*(1 - lr wd) - lr/(1-b1^n) m / (sqrt(v)/sqrt(1-b2^n) + eps),
    in float64."""
    p, m, v = (np.asarray(t, np.float64) for t in (p, m, v))
    step_size = cfg.lr / (1.0 - cfg.beta1 ** n)
    bc2_sqrt = math.sqrt(1.0 - cfg.beta2 ** n)
    return p * (1.0 - cfg.lr * wd) - step_size * m / (np.sqrt(v) / bc2_sqrt + cfg.eps)


def torch_grad(arrays, cfg, tokens, step, dtype=torch.float32):
    """Loss and gradients of the batch of `step` at the given parameters."""
    P = make_params(arrays, dtype)
    x, y = batch_for_step(tokens, step, cfg.seq_len, cfg.batch_size)
    loss = forward(P, cfg, x, y, step=step)
    loss.backward()
    return loss.item(), {k: p.grad.double().numpy() for k, p in P.items()}


def check_run(a):
    ckdir = os.path.join(a.run_dir, "checkpoints")
    ckpt = lambda n: os.path.join(ckdir, f"step_{n:08d}.h5")
    for p in (ckpt(0), ckpt(1), os.path.join(a.run_dir, "metrics.csv")):
        if not os.path.exists(p):
            print(f"error: {p} is missing (the run needs checkpoint.at_start = true, "
                  "checkpoint.every = 1, train.log_every = 1)")
            return 2
    _, step0, P0, M0, V0, cfg = read_checkpoint(ckpt(0))
    why = cfg.unsupported()
    if why:
        print("error: this reference cannot reproduce the run: " + "; ".join(why))
        return 2
    shapes = param_shapes(cfg)
    problems = []
    if step0 != 0:
        problems.append(f"{ckpt(0)}: step attribute {step0}, want 0")
    check_layout(ckpt(0) + " /model", P0, shapes, problems)
    # the trainer's states, step 0 .. steps where checkpointed: (params, adam_m, adam_v)
    # (adam_m and adam_v of step 0 are zeros; taken from the file where it has them)
    zeros = {k: np.zeros(s, np.float32) for k, s in shapes.items()}
    states = {0: (P0, M0 if all(k in M0 for k in shapes) else zeros,
                  V0 if all(k in V0 for k in shapes) else zeros)}
    for n in range(1, a.steps + 1):
        if not os.path.exists(ckpt(n)):
            continue
        _, stp, Pn, Mn, Vn, _ = read_checkpoint(ckpt(n), cfg)
        if stp != n:
            problems.append(f"{ckpt(n)}: step attribute {stp}, want {n}")
        check_layout(f"{ckpt(n)} /model", Pn, shapes, problems)
        check_layout(f"{ckpt(n)} /optimizer/adam_m", Mn, shapes, problems)
        check_layout(f"{ckpt(n)} /optimizer/adam_v", Vn, shapes, problems)
        states[n] = (Pn, Mn, Vn)
    if problems:
        print("error: the checkpoints are not laid out as expected:\n  " + "\n  ".join(problems))
        return 2
    tok_path = a.tokens or cfg.train_tokens
    tokens, file_vocab = read_tokens(tok_path)
    if int(tokens.max()) >= cfg.vocab_size:
        print(f"error: {tok_path} holds token {int(tokens.max())} >= model.vocab_size "
              f"{cfg.vocab_size}")
        return 2
    metrics = read_metrics(os.path.join(a.run_dir, "metrics.csv"))
    missing = [s for s in range(1, a.steps + 1) if s not in metrics]
    if missing:
        print(f"error: metrics.csv has no train row for steps {missing} "
              "(train.log_every = 1 and train.steps >= --steps are needed)")
        return 2
    nparams = sum(int(np.prod(s)) for s in shapes.values())
    windows = (tokens.size - 1) // cfg.seq_len
    print(f"run {a.run_dir}: gpt n_layer={cfg.n_layer} n_head={cfg.n_head} "
          f"n_embd={cfg.n_embd} seq_len={cfg.seq_len} vocab={cfg.vocab_size}, {nparams} "
          f"parameters\n  batch {cfg.batch_size} x {cfg.seq_len} tokens from {tok_path} "
          f"({tokens.size} tokens, file vocab {file_vocab}, {windows // cfg.batch_size} "
          f"steps per epoch)\n  adamw lr={cfg.lr:g} betas=({cfg.beta1:g}, {cfg.beta2:g}) "
          f"eps={cfg.eps:g} weight_decay={cfg.weight_decay:g} on the 2-D weights; "
          f"checkpoints at steps {sorted(states)}")
    width = max(len(k) for k in shapes)
    ok = True
    t_start = time.time()
    b1c = float(np.float32(1) - np.float32(cfg.beta1))  # as the trainer's float math
    b2c = float(np.float32(1) - np.float32(cfg.beta2))

    # ---- 1. step by step from the trainer's own parameters: loss, gradient, update
    print(f"\n1. each step n from the trainer's own parameters p_n (step_n.h5):\n"
          f"   loss   torch's loss at p_n vs metrics.csv step n+1, relative "
          f"(tolerance {a.step_loss_rtol:g})\n"
          f"   grad   torch's gradient at p_n vs the trainer's g_n = (m_n+1 - beta1 m_n)/"
          f"(1-beta1), max|diff|/max|g| per tensor (tolerance {a.grad_tol:g})\n"
          f"   v      torch's g^2 vs (v_n+1 - beta2 v_n)/(1-beta2), the same way "
          f"(tolerance {a.v_tol:g})\n"
          f"   update the trainer's p_n+1 vs AdamW(p_n, m_n+1, v_n+1) in float64, worst "
          f"|diff| / (2^-21 |p| + 1e-4 lr) (tolerance 1)")
    floor64 = None
    worst = {"loss": (0.0, -1), "grad": (0.0, "", -1), "v": (0.0, "", -1),
             "update": (0.0, "", -1)}
    for n in range(a.steps):
        if n not in states or n + 1 not in states:
            continue
        (Pn, Mn, Vn), (Pn1, Mn1, Vn1) = states[n], states[n + 1]
        loss, G = torch_grad(Pn, cfg, tokens, n)
        if n == 0 and a.fp64_floor:
            floor64 = torch_grad(Pn, cfg, tokens, n, torch.float64)
        lt = metrics[n + 1][0]
        rel_l = abs(lt - loss) / abs(loss)
        rows, bad = [], []
        for k in shapes:
            gt = (Mn1[k].astype(np.float64) - cfg.beta1 * Mn[k].astype(np.float64)) / b1c
            g2t = (Vn1[k].astype(np.float64) - cfg.beta2 * Vn[k].astype(np.float64)) / b2c
            eg, ev = rel_max(G[k], gt), rel_max(G[k] ** 2, g2t)
            wd = cfg.weight_decay if decays(k, shapes[k]) else 0.0
            want = adamw_expected(Pn[k], Mn1[k], Vn1[k], n + 1, cfg, wd)
            got = Pn1[k].astype(np.float64)
            allowed = 2.0 ** -21 * np.maximum(np.abs(got), np.abs(want)) + 1e-4 * cfg.lr
            eu = float((np.abs(got - want) / allowed).max())
            rows.append((k, float(np.abs(gt).max()), eg, ev, eu))
            if not (eg <= a.grad_tol and ev <= a.v_tol and eu <= 1.0):
                bad.append(k)
            for key, e in (("grad", eg), ("v", ev), ("update", eu)):
                if e > worst[key][0] or worst[key][2] < 0:
                    worst[key] = (e, k, n)
        worst["loss"] = max(worst["loss"], (rel_l, n))
        step_ok = rel_l <= a.step_loss_rtol and not bad
        ok &= step_ok
        wg = max(rows, key=lambda r: r[2])
        wv = max(rows, key=lambda r: r[3])
        wu = max(rows, key=lambda r: r[4])
        print(f"   step {n:>2}: loss {lt:.7f} vs {loss:.7f} ({rel_l:8.2e})  grad {wg[2]:8.2e} "
              f"({wg[0]})  v {wv[3]:8.2e}  update {wu[4]:6.3f} ({wu[0]})"
              + ("" if step_ok else "  MISMATCH"))
        if n == 0 or not step_ok or a.verbose:
            print(f"   {'':2}{'tensor at step ' + str(n):<{width}}  {'max|g|':>9}  "
                  f"{'grad':>8}  {'v':>8}  {'update':>7}"
                  + (f"  {'fp32-vs-fp64 grad':>17}" if n == 0 and floor64 else ""))
            for k, gmax, eg, ev, eu in rows:
                extra = (f"  {rel_max(G[k], floor64[1][k]):17.2e}"
                         if n == 0 and floor64 else "")
                print(f"     {k:<{width}}  {gmax:9.3e}  {eg:8.2e}  {ev:8.2e}  {eu:7.3f}{extra}"
                      + ("  MISMATCH" if k in bad else ""))
            if n == 0 and floor64:
                print(f"     step-0 loss: float32 torch vs float64 torch "
                      f"{abs(loss - floor64[0]) / abs(floor64[0]):.2e}, trainer vs float64 "
                      f"{abs(lt - floor64[0]) / abs(floor64[0]):.2e}")
    print(f"   worst: loss {worst['loss'][0]:.3g} (step {worst['loss'][1]}), grad "
          f"{worst['grad'][0]:.3g} ({worst['grad'][1]}, step {worst['grad'][2]}), v "
          f"{worst['v'][0]:.3g} ({worst['v'][1]}, step {worst['v'][2]}), update "
          f"{worst['update'][0]:.3g} ({worst['update'][1]}, step {worst['update'][2]})")

    # ---- 2. the loss curve of PyTorch's own AdamW run from the step-0 parameters
    keep = set(states) - {0}
    losses, _, snaps = train(P0, cfg, tokens, a.steps, torch.float32, keep=keep)
    l64 = train(P0, cfg, tokens, a.steps, torch.float64)[0] if a.fp64_floor else None
    print(f"\n2. {a.steps} steps of torch.optim.AdamW from step_00000000.h5 vs metrics.csv "
          f"(tolerance {a.loss_rtol:g} relative)")
    print(f"   {'step':>4}  {'trainer':>12}  {'torch fp32':>12}  {'rel error':>9}"
          + (f"  {'fp32 vs fp64':>12}  {'trainer vs fp64':>15}" if l64 else ""))
    worst_l, first_bad, lr_bad = (0.0, -1), None, []
    for s in range(a.steps):
        lt, lrt = metrics[s + 1]
        rel = abs(lt - losses[s]) / abs(losses[s])
        line = f"   {s:>4}  {lt:12.8f}  {losses[s]:12.8f}  {rel:9.2e}"
        if l64:
            line += (f"  {abs(losses[s] - l64[s]) / l64[s]:12.2e}"
                     f"  {abs(lt - l64[s]) / l64[s]:15.2e}")
        bad = not rel <= a.loss_rtol
        print(line + ("  MISMATCH" if bad else ""))
        if bad and first_bad is None:
            first_bad = s
        ok &= not bad
        worst_l = max(worst_l, (rel, s))
        if abs(lrt - cfg.lr) > 1e-6 * cfg.lr:
            lr_bad.append((s + 1, lrt))
    print(f"   worst loss error {worst_l[0]:.3g} (step {worst_l[1]})")
    if lr_bad:
        print(f"   note: metrics.csv's lr differs from the deck's constant {cfg.lr:g}: "
              f"(step, lr) {lr_bad[:5]}")
    # how far the two free runs' parameters drift apart (information)
    drift = []
    for n in sorted(keep):
        rows = []
        for k in shapes:
            d = np.abs(states[n][0][k].astype(np.float64) - snaps[n][k])
            rows.append((d.max() / cfg.lr, float((d > cfg.lr / 100).mean()), k))
        rows.sort(reverse=True)
        drift.append((n, rows))
    if drift:
        n, rows = drift[-1]
        print(f"   parameters after step {n}, trainer vs torch's free run: worst {rows[0][2]} "
              f"max|diff| {rows[0][0]:.3g} lr ({100 * rows[0][1]:.2g}% of entries > lr/100; "
              f"entries with rounding-level gradients take +-lr steps either way)")
    if first_bad is not None or a.verbose:
        for n, rows in drift:
            print(f"   after step {n}: " + ", ".join(f"{k} {d:.3g} lr/{100 * f:.2g}%"
                                                   for d, f, k in rows[:4]))

    print(f"\nreference time {time.time() - t_start:.1f} s ({torch.get_num_threads()} "
          f"thread(s)); {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


# ------------------------------------------------------------------------- self-test

def init_arrays(cfg, seed, std=0.02):
    """Random float32 parameters: weights N(0, std) (GPT-2 uses 0.02; the self-test
    uses larger ones so that GELU inputs are O(1) and a wrong GELU shows), biases
    N(0, 0.02), LayerNorm gains 1 + N(0, 0.1) so that no gradient is special."""
    rng = np.random.default_rng(seed)
    out = {}
    for k, shape in param_shapes(cfg).items():
        if "ln_" in k and k.endswith("weight"):
            a = 1.0 + 0.1 * rng.standard_normal(shape)
        elif k.endswith("bias"):
            a = 0.02 * rng.standard_normal(shape)
        else:
            a = std * rng.standard_normal(shape)
        out[k] = a.astype(np.float32)
    return out


def tiny_deck(V, **over):
    d = {"model": {"name": "gpt", "n_layer": 2, "n_head": 4, "n_embd": 32, "seq_len": 16,
                   "vocab_size": V},
         "data": {"format": "tokens", "train_tokens": "", "shuffle": "false"},
         "train": {"batch_size": 3, "steps": 6},
         "optim": {"name": "adamw", "lr": 1e-3, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8,
                   "weight_decay": 0.1, "schedule": "constant", "warmup_steps": 0,
                   "clip_grad_norm": 0}}
    for key, val in over.items():
        sec, k = key.split(".")
        d[sec][k] = val
    lines = ["# Resolved deck (self-test)"]
    for sec, kv in d.items():
        lines.append(f"\n[{sec}]")
        lines += [f"{k} = {v}   # set at self-test" for k, v in kv.items()]
    return "\n".join(lines) + "\n"


def write_fake_run(run_dir, deck, arrays, cfg, tokens, steps, dtype, gelu=gelu_tanh,
                   decay_all=False, pad_rows=0):
    """A run directory as the trainer would write it, produced by this reference in
    another precision or with a deliberate defect: checkpoints 0..steps and metrics.csv.
    pad_rows > 0 computes the softmax over V + pad_rows logits (zero head rows), the
    padding defect the trainer must avoid."""
    os.makedirs(os.path.join(run_dir, "checkpoints"), exist_ok=True)
    P = make_params(arrays, dtype)
    opt = make_adamw(P, cfg, decay_all)
    rows = []

    def save(n):
        with h5py.File(os.path.join(run_dir, "checkpoints", f"step_{n:08d}.h5"), "w") as f:
            f["/deck"] = deck
            f.attrs["step"] = np.int64(n)
            for k, p in P.items():
                f[f"/model/{k}"] = p.detach().numpy().astype(np.float32)
                st = opt.state.get(p, {})
                for name, sk in (("adam_m", "exp_avg"), ("adam_v", "exp_avg_sq")):
                    val = st[sk].numpy() if sk in st else np.zeros(p.shape)
                    f[f"/optimizer/{name}/{k}"] = val.astype(np.float32)

    save(0)
    for s in range(steps):
        x, y = batch_for_step(tokens, s, cfg.seq_len, cfg.batch_size)
        opt.zero_grad(set_to_none=True)
        if pad_rows:
            Q = dict(P)
            Q["wte/weight"] = torch.cat([P["wte/weight"],
                                         torch.zeros(pad_rows, cfg.n_embd, dtype=dtype)])
            loss = forward(Q, cfg, x, y, gelu)
        else:
            loss = forward(P, cfg, x, y, gelu)
        loss.backward()
        opt.step()
        rows.append(f"{s + 1},0.0,train,{loss.item():.9g},0,{cfg.lr:.9g},0,0,0")
        save(s + 1)
    with open(os.path.join(run_dir, "metrics.csv"), "w") as f:
        f.write("step,epoch,phase,loss,accuracy,lr,grad_norm,samples_per_s,elapsed_s\n")
        f.write("\n".join(rows) + "\n")


def self_test(a):
    ok = True

    def report(what, good, detail):
        nonlocal ok
        ok &= bool(good)
        print(f"  {'ok  ' if good else 'FAIL'} {what}: {detail}")

    V = 97
    cfg = Config(tiny_deck(V))
    # the numpy Philox against Random123's known answers (counter words 0..3, key)
    w = philox4x32(0x299f31d0a4093822, 0x0370734413198a2e, [0x85a308d3243f6a88])[:, 0]
    report("Philox-4x32-10 known answer", list(w) == [0xd16cfe09, 0x94fdcceb, 0x5001e420,
                                                      0x24126ea1], " ".join(f"{x:08x}" for x in w))
    arrays = init_arrays(cfg, 1, std=0.2)
    rng = np.random.default_rng(2)
    tokens = rng.integers(0, V, size=cfg.seq_len * cfg.batch_size * 3 + 5).astype(np.int64)

    print("self-test 1: batches follow the unshuffled window order")
    x, y = batch_for_step(tokens, 4, cfg.seq_len, cfg.batch_size)  # 3 steps/epoch -> step 1
    T, G = cfg.seq_len, cfg.batch_size
    want = tokens[G * T:G * T + T + 1]
    report("step 4 = step 1 of epoch 2, window 3", np.array_equal(x[0].numpy(), want[:-1])
           and np.array_equal(y[0].numpy(), want[1:]), f"{(tokens.size - 1) // T} windows")

    print("self-test 2: the model against a direct per-position loop (float64)")
    P = make_params(arrays, torch.float64)
    x, y = batch_for_step(tokens, 0, T, G)
    with torch.no_grad():
        l_vec = forward(P, cfg, x, y).item()
        C, nh = cfg.n_embd, cfg.n_head
        hs = C // nh
        total = 0.0
        for b in range(G):
            xs = [P["wte/weight"][x[b, t]] + P["wpe/weight"][t] for t in range(T)]
            for i in range(cfg.n_layer):
                h = f"h.{i}/"
                W, bias = P[h + "attn/c_attn/weight"], P[h + "attn/c_attn/bias"]
                ln = lambda v, w, bb: (v - v.mean()) / torch.sqrt(v.var(unbiased=False)
                                                                  + LN_EPS) * w + bb
                qkv = [W @ ln(v, P[h + "ln_1/weight"], P[h + "ln_1/bias"]) + bias for v in xs]
                out = []
                for t in range(T):
                    heads = []
                    for hd in range(nh):
                        sl = slice(hd * hs, hd * hs + hs)
                        q = qkv[t][sl]
                        sc = torch.stack([q @ qkv[u][C:][sl] / math.sqrt(hs)
                                          for u in range(t + 1)])
                        pr = torch.exp(sc - sc.max())
                        pr = pr / pr.sum()
                        heads.append(sum(pr[u] * qkv[u][2 * C:][sl] for u in range(t + 1)))
                    yv = torch.cat(heads)
                    out.append(xs[t] + P[h + "attn/c_proj/weight"] @ yv
                               + P[h + "attn/c_proj/bias"])
                xs = []
                for v in out:
                    m = P[h + "mlp/c_fc/weight"] @ ln(v, P[h + "ln_2/weight"],
                                                     P[h + "ln_2/bias"]) + P[h + "mlp/c_fc/bias"]
                    m = 0.5 * m * (1 + torch.tanh(math.sqrt(2 / math.pi) * (m + 0.044715 * m ** 3)))
                    xs.append(v + P[h + "mlp/c_proj/weight"] @ m + P[h + "mlp/c_proj/bias"])
            for t in range(T):
                z = P["wte/weight"] @ ln(xs[t], P["ln_f/weight"], P["ln_f/bias"])
                total += (torch.logsumexp(z, 0) - z[y[b, t]]).item()
        l_loop = total / (G * T)
    report("vectorised vs loop loss", abs(l_vec - l_loop) <= 1e-12 * abs(l_loop),
           f"{l_vec:.15f} vs {l_loop:.15f}")

    print("self-test 3: autograd against central finite differences (float64)")
    P = make_params(arrays, torch.float64)
    loss = forward(P, cfg, x, y)
    loss.backward()
    worst = 0.0
    picks = ["wte/weight", "wpe/weight", "h.0/ln_1/weight", "h.0/attn/c_attn/weight",
             "h.0/attn/c_attn/bias", "h.1/attn/c_proj/weight", "h.1/mlp/c_fc/weight",
             "h.1/mlp/c_proj/bias", "h.1/ln_2/bias", "ln_f/weight"]
    for k in picks:
        flat = P[k].detach().view(-1)
        n = flat.numel()
        # q, k and v thirds of c_attn, and an id that is in the batch, for wte
        idxs = [0, n // 3 + 1, 2 * n // 3 + 2, n - 1]
        if k == "wte/weight":
            idxs = [int(x[0, 0]) * cfg.n_embd + 3, int(y[1, 2]) * cfg.n_embd + 5, 7]
        for i in idxs:
            h = 1e-3  # five-point stencil: error O(h^4) + rounding O(1e-14 / h)
            with torch.no_grad():
                old = flat[i].item()
                ls = []
                for d in (2, 1, -1, -2):
                    flat[i] = old + d * h
                    ls.append(forward(P, cfg, x, y).item())
                flat[i] = old
            fd = (-ls[0] + 8 * ls[1] - 8 * ls[2] + ls[3]) / (12 * h)
            g = P[k].grad.view(-1)[i].item()
            # relative, but not to an entry that is itself nearly zero
            err = abs(fd - g) / max(abs(g), 1e-3 * P[k].grad.abs().max().item())
            worst = max(worst, err)
    report("finite differences", worst < 1e-7, f"worst relative error {worst:.2e} over "
           f"{len(picks)} tensors")

    print("self-test 4: torch.optim.AdamW as configured against the AdamW formulas")
    P = make_params(arrays, torch.float64)
    opt = make_adamw(P, cfg)
    ref = {k: v.astype(np.float64) for k, v in arrays.items()}
    m = {k: np.zeros_like(v) for k, v in ref.items()}
    v2 = {k: np.zeros_like(v) for k, v in ref.items()}
    worst = 0.0
    for s in range(1, 4):
        xb, yb = batch_for_step(tokens, s - 1, T, G)
        opt.zero_grad(set_to_none=True)
        forward(P, cfg, xb, yb).backward()
        grads = {k: p.grad.numpy().copy() for k, p in P.items()}
        opt.step()
        for k in ref:
            wd = cfg.weight_decay if decays(k, ref[k].shape) else 0.0
            g = grads[k]
            ref[k] = ref[k] * (1 - cfg.lr * wd)
            m[k] = cfg.beta1 * m[k] + (1 - cfg.beta1) * g
            v2[k] = cfg.beta2 * v2[k] + (1 - cfg.beta2) * g * g
            mhat = m[k] / (1 - cfg.beta1 ** s)
            vhat = v2[k] / (1 - cfg.beta2 ** s)
            ref[k] = ref[k] - cfg.lr * mhat / (np.sqrt(vhat) + cfg.eps)
            worst = max(worst, np.abs(P[k].detach().numpy() - ref[k]).max())
            # 2-D weights decay, 1-D (biases, LayerNorms) do not
            want_wd = k.endswith("/weight") and ref[k].ndim == 2
            if want_wd != (wd > 0):
                report("decay groups", False, k)
    report("3 steps, p -= lr*wd*p; m, v; p -= lr mhat/(sqrt(vhat)+eps)", worst < 1e-12,
           f"max |torch - formula| {worst:.2e}; decay on {sum(decays(k, v.shape) for k, v in ref.items())} "
           f"2-D weights, none on {sum(not decays(k, v.shape) for k, v in ref.items())} others")

    print("self-test 5: the whole check on fake runs written by this reference")
    quiet = not a.verbose
    with tempfile.TemporaryDirectory() as tmp:
        tok = os.path.join(tmp, "train.tok")
        write_tokens(tok, tokens, V)
        deck = tiny_deck(V).replace("train_tokens = ", f"train_tokens = {tok}")
        cfg = Config(deck)
        cases = [("float64 'trainer' (a more exact implementation) passes", True, {}),
                 ("erf GELU instead of tanh is caught", False, {"gelu": gelu_erf}),
                 ("weight decay on biases and LayerNorms too is caught", False,
                  {"decay_all": True}),
                 ("softmax over 47 zero padded vocabulary rows is caught", False,
                  {"pad_rows": 47})]
        for n, (what, want_pass, kw) in enumerate(cases):
            run = os.path.join(tmp, f"run{n}")
            write_fake_run(run, deck, arrays, cfg, tokens, 6, torch.float64, **kw)
            args = argparse.Namespace(run_dir=run, tokens=None, steps=6, loss_rtol=a.loss_rtol,
                                      step_loss_rtol=a.step_loss_rtol, grad_tol=a.grad_tol,
                                      v_tol=a.v_tol, fp64_floor=False, verbose=a.verbose)
            if quiet:
                with open(os.devnull, "w") as null:
                    saved, sys.stdout = sys.stdout, null
                    try:
                        rc = check_run(args)
                    finally:
                        sys.stdout = saved
            else:
                rc = check_run(args)
            report(what, (rc == 0) == want_pass, f"check exit {rc}")
    print("self-test " + ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir", nargs="?")
    ap.add_argument("--tokens", help="the training token file (default: the deck's "
                    "data.train_tokens)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--loss-rtol", type=float, default=2e-6,
                    help="PyTorch's free AdamW run vs metrics.csv, relative")
    ap.add_argument("--step-loss-rtol", type=float, default=1e-6,
                    help="torch's loss at the trainer's own step-n parameters vs metrics.csv")
    ap.add_argument("--grad-tol", type=float, default=3e-5,
                    help="max|torch - trainer| / max|trainer| per gradient tensor")
    ap.add_argument("--v-tol", type=float, default=1e-3, help="the same for adam_v vs g^2")
    ap.add_argument("--fp64-floor", action="store_true",
                    help="also run the reference in float64 and print float32's own error")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--self-test", action="store_true")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.use_deterministic_algorithms(True)
    torch.set_default_dtype(torch.float32)
    torch.manual_seed(0)
    if a.self_test:
        return self_test(a)
    if not a.run_dir:
        ap.error("RUN_DIR is required (or --self-test)")
    if a.steps < 1:
        ap.error("--steps must be >= 1")
    return check_run(a)


if __name__ == "__main__":
    sys.exit(main())
