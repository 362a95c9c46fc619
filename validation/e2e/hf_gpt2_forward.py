"""hf_gpt2_forward.py: the loss of a GPT-2 given as Hugging Face stores it (a directory
with config.json and model.safetensors, as tools/gpt2_hf.py exports it), computed the
way transformers' GPT2LMHeadModel computes it, against validation/gpt_torch_reference.py's
loss of the trainer checkpoint it came from, on the same random tokens.

usage: hf_gpt2_forward.py HF_DIR CHECKPOINT.h5 [--rtol 1e-6]

Written from Hugging Face's modeling_gpt2 and the safetensors format, not from the
trainer or tools/gpt2_hf.py: Conv1D layers (weight [in, out], y = x W + b), c_attn's
output split into q, k, v of n_embd each, heads of n_embd / n_head contiguous columns,
GELU "gelu_new" (tanh), LayerNorm with config's layer_norm_epsilon, the head tied to wte
(config tie_word_embeddings). Exit 0 when the two losses agree within --rtol, else 1.
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import gpt_torch_reference as ref  # noqa: E402


def load_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", f"{name}: {info['dtype']}"
        b, e = info["data_offsets"]
        a = np.frombuffer(raw[8 + n + b:8 + n + e], "<f4").reshape(info["shape"])
        out[name] = torch.from_numpy(a.copy())
    return out


def hf_loss(sd, cfg, idx, targets):
    B, T = idx.shape
    C, nh, eps = cfg["n_embd"], cfg["n_head"], cfg["layer_norm_epsilon"]
    assert cfg["activation_function"] == "gelu_new" and cfg["tie_word_embeddings"]

    def conv1d(x, name):  # transformers' Conv1D: addmm(bias, x, weight), weight [in, out]
        w, b = sd[name + ".weight"], sd[name + ".bias"]
        return torch.addmm(b, x.reshape(-1, x.shape[-1]), w).reshape(*x.shape[:-1], -1)

    def ln(x, name):
        return F.layer_norm(x, (C,), sd[name + ".weight"], sd[name + ".bias"], eps)

    def heads(t):  # [B, T, C] -> [B, nh, T, C / nh]
        return t.view(B, T, nh, C // nh).permute(0, 2, 1, 3)

    h = sd["wte.weight"][idx] + sd["wpe.weight"][torch.arange(T)]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for i in range(cfg["n_layer"]):
        p = f"h.{i}."
        q, k, v = conv1d(ln(h, p + "ln_1"), p + "attn.c_attn").split(C, dim=2)
        q, k, v = heads(q), heads(k), heads(v)
        w = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(v.size(-1))
        w = torch.where(mask, w, torch.finfo(w.dtype).min).softmax(dim=-1)
        a = torch.matmul(w, v).permute(0, 2, 1, 3).reshape(B, T, C)
        h = h + conv1d(a, p + "attn.c_proj")
        m = conv1d(ln(h, p + "ln_2"), p + "mlp.c_fc")
        m = 0.5 * m * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (m + 0.044715 * m ** 3)))
        h = h + conv1d(m, p + "mlp.c_proj")
    logits = ln(h, "ln_f") @ sd["wte.weight"].t()
    return F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(-1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("hf_dir")
    p.add_argument("checkpoint")
    p.add_argument("--rtol", type=float, default=1e-6)
    a = p.parse_args()
    torch.manual_seed(0)
    with open(os.path.join(a.hf_dir, "config.json")) as f:
        cfg = json.load(f)
    sd = load_safetensors(os.path.join(a.hf_dir, "model.safetensors"))
    _, _, model, _, _, rcfg = ref.read_checkpoint(a.checkpoint)
    P = {k: torch.tensor(np.asarray(v), dtype=torch.float32) for k, v in model.items()}
    V, T = cfg["vocab_size"], cfg["n_positions"]
    idx = torch.randint(0, V, (3, T))
    targets = torch.randint(0, V, (3, T))
    with torch.no_grad():
        got = float(hf_loss(sd, cfg, idx, targets))
        want = float(ref.forward(P, rcfg, idx, targets))
    rel = abs(got - want) / abs(want)
    print(f"loss as transformers computes it from {a.hf_dir}: {got:.7f}; the reference's "
          f"from {a.checkpoint}: {want:.7f}; relative difference {rel:.2e} (<= {a.rtol})")
    return 0 if rel <= a.rtol else 1


if __name__ == "__main__":
    sys.exit(main())
