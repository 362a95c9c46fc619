"""torch_gpt.py: the PyTorch side of validation/bench/gpt.sh (GPT-2 124M training on CPU).

Trains GPT-2 124M in PyTorch on random tokens and prints ONE line of JSON on stdout
(everything else goes to stderr): the median tokens/s over the timed steps, plus the
configuration it ran with (torch, threads, OpenBLAS core and threads, oneDNN, options).

    /usr/bin/python3 validation/bench/torch_gpt.py --threads 2
    /usr/bin/python3 validation/bench/torch_gpt.py --threads 2 --foreach 0 --zero none
    /usr/bin/python3 validation/bench/torch_gpt.py --sgemm 2048 --threads 2 --reps 7

Model (written here, no library model code): GPT-2 124M as llm.c and nanoGPT define it:
token embedding wte [Vp, 768], position embedding wpe [1024, 768], 12 pre-LayerNorm
blocks (LayerNorm eps 1e-5; causal self-attention of 12 heads x 64, written by hand
since torch 1.13 has no F.scaled_dot_product_attention: one qkv Linear 768->2304,
softmax(q k^T / 8 + causal mask) v, output Linear 768->768; MLP Linear 768->3072,
tanh-approximated GELU, Linear 3072->768; residual adds), final LayerNorm, and the
language-model head tied to wte (logits = x wte^T). All Linears have biases. fp32.
V = 50257 real tokens; --vocab-pad 50304 (the default, as llm.c and the trainer do)
pads wte to 50304 rows so the head GEMM's N is a multiple of 64: logits are computed
for all 50304 columns and the loss is cross-entropy over the first 50257 only (the pad
rows get no gradient but the head's embedding gradient); --vocab-pad 0 keeps 50257.
Init: normal(0, 0.02), output projections 0.02 / sqrt(24), biases 0, LayerNorm 1/0.

Training: batch 4 x sequence 64 (256 tokens a step), a fresh batch of uniformly random
tokens in [0, 50257) each step (inputs = tokens[:, :-1], targets = tokens[:, 1:]),
mean cross-entropy, gradients clipped to global L2 norm --clip (1.0, as the trainer's
inputs/gpt2_124m.in; 0 = off), AdamW lr 3e-4 (constant), betas (0.9, 0.95), eps 1e-8,
decoupled weight decay 0.1 on the weight matrices and embeddings, 0 on biases and
LayerNorms (GPT-2's recipe, as the trainer's deck).

Timing: --warmup untimed steps (allocator, AdamW state, jit profiling), then --steps
timed steps; each step is forward, loss, backward, clipping, optimizer step, zero_grad, timed
with perf_counter; the figure is tokens per step / the median step time.

Honest PyTorch options (gpt.sh tries several and keeps the fastest):
  --foreach 1/0/default  AdamW's multi-tensor (_foreach_) path or the per-tensor loop;
                         default = torch's own choice (in 1.13: the loop on CPU)
  --zero none/zeros      zero_grad(set_to_none=True) or zero-filled grads (1.13 default)
  --attn masked/baddbmm  masked_fill(-inf) then softmax (nanoGPT), or one fused
                         baddbmm(mask bias, q, k^T, alpha) then softmax
  --jit none/script/nnc  eager, torch.jit.script blocks, or script + NNC CPU fuser
                         (this Debian build has no LLVM, so NNC cannot codegen)
  --no-mkldnn            torch.backends.mkldnn.enabled = False (1.13 sends fp32 Linear
                         and bmm to the BLAS either way, oneDNN matmul being for bf16,
                         so this is expected to change nothing)
  --flush-denormal       torch.set_flush_denormal(True)
Environment knobs that must be set before torch loads, reported not set here:
OPENBLAS_NUM_THREADS, OPENBLAS_CORETYPE, OMP_WAIT_POLICY, OMP_PROC_BIND, GOMP_SPINCOUNT,
GLIBC_TUNABLES (malloc: keep freed memory in the heap instead of munmap, see gpt.sh).
"""
import argparse
import ctypes
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

V = 50257
ENV_KNOBS = ("OPENBLAS_NUM_THREADS", "OPENBLAS_CORETYPE", "OMP_WAIT_POLICY", "OMP_PROC_BIND", "GLIBC_TUNABLES",
             "OMP_PLACES", "GOMP_SPINCOUNT", "OMP_NUM_THREADS")


def log(*a):
    print(*a, file=sys.stderr, flush=True)


class Block(nn.Module):
    def __init__(self, C, NH, attn):
        super().__init__()
        self.C, self.NH, self.HS = C, NH, C // NH
        self.baddbmm = attn == "baddbmm"
        self.scale = 1.0 / math.sqrt(C // NH)
        self.ln_1 = nn.LayerNorm(C)
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)

    def forward(self, x, mask, bias):
        # mask [T,T] bool, True above the diagonal; bias [T,T] float, -inf there, 0 elsewhere
        B, T, C = x.shape
        NH, HS = self.NH, self.HS
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q = q.reshape(B, T, NH, HS).transpose(1, 2)
        k = k.reshape(B, T, NH, HS).transpose(1, 2)
        v = v.reshape(B, T, NH, HS).transpose(1, 2)
        if self.baddbmm:
            q = q.reshape(B * NH, T, HS)
            k = k.reshape(B * NH, T, HS)
            att = torch.baddbmm(bias, q, k.transpose(1, 2), beta=1.0, alpha=self.scale)
            att = F.softmax(att, dim=-1)
            y = torch.bmm(att, v.reshape(B * NH, T, HS)).reshape(B, NH, T, HS)
        else:
            att = (q @ k.transpose(-2, -1)) * self.scale
            att = att.masked_fill(mask, float("-inf"))
            att = F.softmax(att, dim=-1)
            y = att @ v
        y = y.transpose(1, 2).reshape(B, T, C)
        x = x + self.c_proj(y)
        x = x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))
        return x


class GPT(nn.Module):
    def __init__(self, Vp, L=12, C=768, NH=12, maxT=1024, attn="masked"):
        super().__init__()
        self.Vp = Vp
        self.wte = nn.Embedding(Vp, C)
        self.wpe = nn.Embedding(maxT, C)
        self.h = nn.ModuleList([Block(C, NH, attn) for _ in range(L)])
        self.ln_f = nn.LayerNorm(C)
        std = 0.02
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif ".ln_" in name or name.startswith("ln_"):
                nn.init.ones_(p)
            elif name.endswith("c_proj.weight") or name.endswith("mlp_proj.weight"):
                nn.init.normal_(p, 0.0, std / math.sqrt(2 * L))
            else:
                nn.init.normal_(p, 0.0, std)
        masks = torch.ones(maxT, maxT, dtype=torch.bool).triu(1)
        self.register_buffer("mask", masks, persistent=False)

    def forward(self, idx, targets):
        B, T = idx.shape
        mask = self.mask[:T, :T]
        bias = torch.zeros(T, T).masked_fill(mask, float("-inf"))
        x = self.wte(idx) + self.wpe.weight[:T]
        for blk in self.h:
            x = blk(x, mask, bias)
        x = self.ln_f(x)
        logits = F.linear(x, self.wte.weight)  # tied head, [B,T,Vp]
        logits = logits.reshape(B * T, self.Vp)
        if self.Vp != V:
            logits = logits[:, :V]
        return F.cross_entropy(logits, targets.reshape(B * T))


def matmul_params(L=12, C=768, vocab=V):
    """Weights of the matrix multiplies (no biases, LayerNorms or wpe): 12 C^2 per block
    (qkv 3C^2, attention projection C^2, MLP 8C^2) plus the tied head V x C."""
    return L * 12 * C * C + vocab * C


def model_flops_per_token(T, L=12, C=768, vocab=V):
    """6 N + 12 L C T (PaLM appendix B / llm.c): N = matmul_params (head with the real
    V = 50257, not the padding), the attention scores and values counted unmasked."""
    return 6 * matmul_params(L, C, vocab) + 12 * L * C * T


def openblas_info():
    """Core name, config and thread count of the OpenBLAS that this process loaded."""
    libs = set()
    with open("/proc/self/maps") as f:
        for line in f:
            p = line.split()[-1]
            if "openblas" in p and ".so" in p:
                libs.add(p)
    for p in sorted(libs):
        try:
            lib = ctypes.CDLL(p)
            lib.openblas_get_corename.restype = ctypes.c_char_p
            lib.openblas_get_config.restype = ctypes.c_char_p
            return {"lib": p, "core": lib.openblas_get_corename().decode(),
                    "config": lib.openblas_get_config().decode(),
                    "threads": lib.openblas_get_num_threads()}
        except (OSError, AttributeError):
            continue
    return {"lib": None, "core": "not loaded", "config": "", "threads": 0}


def config(args):
    torch.mm(torch.ones(4, 4), torch.ones(4, 4))  # make sure the BLAS is loaded
    c = {
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
        "openblas": openblas_info(),
        "env": {k: os.environ[k] for k in ENV_KNOBS if k in os.environ},
        "mkldnn": bool(torch.backends.mkldnn.enabled and torch.backends.mkldnn.is_available()),
        "llvm": bool(torch._C._llvm_enabled()),
    }
    if not args.sgemm:
        c.update({"vocab": V, "vocab_padded": args.vocab_pad or V, "attn": args.attn,
                  "jit": args.jit, "foreach": args.foreach, "zero_grad": args.zero,
                  "flush_denormal": args.flush_denormal, "clip_grad_norm": args.clip,
                  "batch": args.batch, "seq": args.seq})
    return c


def options_text(args):
    return (f"vocab {args.vocab_pad or V}, clip {args.clip:g}, attn {args.attn}, jit {args.jit}, "
            f"AdamW foreach {args.foreach}, zero_grad {args.zero}, "
            f"oneDNN {'on' if args.mkldnn else 'off'}, flush_denormal {args.flush_denormal}")


def train(args):
    if args.vocab_pad and args.vocab_pad < V:
        raise SystemExit(f"--vocab-pad must be 0 or >= {V}")
    torch.set_num_threads(args.threads)
    if not args.mkldnn:
        torch.backends.mkldnn.enabled = False
    if args.flush_denormal:
        torch.set_flush_denormal(True)
    if args.jit == "nnc":
        torch._C._jit_override_can_fuse_on_cpu(True)
        torch._C._jit_set_texpr_fuser_enabled(True)
    torch.manual_seed(1234)
    Vp = args.vocab_pad or V
    model = GPT(Vp, attn=args.attn)
    if args.jit != "none":
        model.h = nn.ModuleList([torch.jit.script(b) for b in model.h])
    model.train()
    nparams = sum(p.numel() for p in model.parameters())
    foreach = None if args.foreach == "default" else bool(int(args.foreach))
    params = list(model.parameters())
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=3e-4, betas=(0.9, 0.95), eps=1e-8, foreach=foreach)
    set_to_none = args.zero == "none"
    B, T = args.batch, args.seq
    gen = torch.Generator().manual_seed(42)
    opt.zero_grad(set_to_none=set_to_none)

    def step():
        tok = torch.randint(0, V, (B, T + 1), generator=gen)
        loss = model(tok[:, :-1], tok[:, 1:])
        loss.backward()
        if args.clip > 0:
            torch.nn.utils.clip_grad_norm_(params, args.clip)
        opt.step()
        opt.zero_grad(set_to_none=set_to_none)
        return loss

    log(f"torch gpt2-124m: {nparams:,} parameters (vocab {Vp}), B {B} x T {T}, "
        f"{args.threads} thread(s); {options_text(args)}")
    for i in range(args.warmup):
        t0 = time.perf_counter()
        loss = step()
        log(f"  warm-up step {i + 1}: {time.perf_counter() - t0:.3f} s, loss {float(loss):.4f}")
    times, losses = [], []
    for i in range(args.steps):
        t0 = time.perf_counter()
        loss = step()
        times.append(time.perf_counter() - t0)
        losses.append(float(loss))
        log(f"  step {i + 1}: {times[-1]:.3f} s, {B * T / times[-1]:.1f} tokens/s, loss {losses[-1]:.4f}")
    med = statistics.median(times)
    fpt = model_flops_per_token(T)
    res = {
        "model": "gpt2-124m", "parameters": nparams, "matmul_parameters": matmul_params(),
        "batch": B, "seq": T, "tokens_per_step": B * T, "warmup_steps": args.warmup,
        "step_seconds": times, "median_seconds": med, "tokens_per_second": B * T / med,
        "model_flops_per_token": fpt, "gflops_per_second": fpt * B * T / med / 1e9,
        "first_loss": losses[0] if losses else None, "last_loss": losses[-1] if losses else None,
        "options": options_text(args), "config": config(args),
    }
    log(f"torch gpt2-124m: median step {med:.3f} s = {res['tokens_per_second']:.1f} tokens/s "
        f"({res['gflops_per_second']:.1f} model GFLOP/s)")
    print(json.dumps(res), flush=True)


def sgemm(args):
    """fp32 GEMM ceiling: best of --reps n x n x n torch.mm (OpenBLAS sgemm) calls."""
    torch.set_num_threads(args.threads)
    n = args.sgemm
    a, b = torch.randn(n, n), torch.randn(n, n)
    c = torch.empty(n, n)
    torch.mm(a, b, out=c)
    best = float("inf")
    for _ in range(args.reps):
        t0 = time.perf_counter()
        torch.mm(a, b, out=c)
        best = min(best, time.perf_counter() - t0)
    print(json.dumps({"n": n, "best_seconds": best, "gflops_per_second": 2.0 * n ** 3 / best / 1e9,
                      "config": config(args)}), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--steps", type=int, default=8, help="timed steps (median reported)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed warm-up steps")
    ap.add_argument("--vocab-pad", type=int, default=50304,
                    help="wte rows (0 = the real 50257; 50304 as llm.c)")
    ap.add_argument("--clip", type=float, default=1.0, help="clip_grad_norm (0 = off)")
    ap.add_argument("--attn", choices=["masked", "baddbmm"], default="masked")
    ap.add_argument("--jit", choices=["none", "script", "nnc"], default="none")
    ap.add_argument("--foreach", choices=["default", "0", "1"], default="default")
    ap.add_argument("--zero", choices=["none", "zeros"], default="zeros",
                    help="zero_grad: set_to_none=True (none) or zero-filled (1.13's default)")
    ap.add_argument("--no-mkldnn", dest="mkldnn", action="store_false")
    ap.add_argument("--flush-denormal", action="store_true")
    ap.add_argument("--sgemm", type=int, default=0, metavar="N",
                    help="instead of training, time an N x N fp32 matmul (best of --reps)")
    ap.add_argument("--reps", type=int, default=7, help="--sgemm: matmuls timed (best kept)")
    args = ap.parse_args()
    torch.set_num_interop_threads(1)
    if args.sgemm:
        return sgemm(args)
    return train(args)


if __name__ == "__main__":
    main()
