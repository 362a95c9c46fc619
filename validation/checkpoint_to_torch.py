"""checkpoint_to_torch.py: load a trainer checkpoint with h5py into a PyTorch model
and evaluate it on the test split, as an outside reader would.

usage: checkpoint_to_torch.py CHECKPOINT.h5 [--expect-accuracy A] [--tolerance T]

The model is rebuilt from the checkpoint alone: its `model` attribute names the
architecture, /model/<layer>/<weight|bias> give the shapes and values, and /deck
(the resolved deck) names the test files. The torch layers are the standard ones
(nn.Linear, nn.Conv2d, nn.MaxPool2d), so the layouts must agree with PyTorch's:
Linear weight [out, in], Conv2d weight [out, in, k, k], NCHW activations.
With --expect-accuracy the script fails unless torch's accuracy matches within
--tolerance (default 0.001, i.e. 2 of 2,000 test images: the last bits of fp32
sums may flip a prediction that sits on a tie). A checkpoint of a bf16- or
fp16-mixed run holds the fp32 master weights, which this script evaluates in fp32,
while the trainer evaluated their 16-bit copies with 16-bit activations: there the
defaults are 0.005 (10 images) and 5e-3 relative for the loss.
"""
import argparse
import configparser
import gzip
import sys

import h5py
import numpy as np
import torch
from torch import nn


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    magic = int.from_bytes(data[0:4], "big")
    ndim = magic & 0xFF
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def deck_of(f):
    text = f["/deck"][()]
    text = text.decode() if isinstance(text, bytes) else str(text)
    cp = configparser.ConfigParser(inline_comment_prefixes=("#",), interpolation=None)
    cp.read_string(text)
    return cp


def build(f):
    name = f.attrs["model"]
    name = name.decode() if isinstance(name, bytes) else str(name)
    m = f["/model"]
    layers = []
    if name == "mlp":
        fcs = sorted(m.keys(), key=lambda k: int(k[2:]))
        layers.append(nn.Flatten())
        for i, k in enumerate(fcs):
            out_f, in_f = m[k]["weight"].shape
            layers.append(nn.Linear(in_f, out_f))
            layers[-1]._trainer_name = k
            if i + 1 < len(fcs):
                layers.append(nn.ReLU())
    elif name == "cnn":
        c1, c2 = m["conv1"]["weight"].shape, m["conv2"]["weight"].shape
        spec = [("conv1", nn.Conv2d(c1[1], c1[0], c1[2], padding=2)), (None, nn.ReLU()),
                (None, nn.MaxPool2d(2)), ("conv2", nn.Conv2d(c2[1], c2[0], c2[2])),
                (None, nn.ReLU()), (None, nn.MaxPool2d(2)), (None, nn.Flatten())]
        for i, k in enumerate(["fc1", "fc2", "fc3"]):
            out_f, in_f = m[k]["weight"].shape
            spec.append((k, nn.Linear(in_f, out_f)))
            if i < 2:
                spec.append((None, nn.ReLU()))
        for k, layer in spec:
            if k:
                layer._trainer_name = k
            layers.append(layer)
    elif name == "gpt":
        # a user with a GPT's checkpoint lands here from the README: say where it goes
        raise SystemExit(f"{f.filename}: a GPT's checkpoint; this script rebuilds the MLP and "
                         "the CNN only: tools/gpt2_hf.py export CKPT DIR writes a GPT's as "
                         "Hugging Face's GPT2LMHeadModel files, which transformers loads")
    else:
        raise SystemExit(f"{f.filename}: unknown model {name!r} in the checkpoint")
    model = nn.Sequential(*layers)
    with torch.no_grad():
        for layer in model:
            k = getattr(layer, "_trainer_name", None)
            if k:
                layer.weight.copy_(torch.from_numpy(m[k]["weight"][()]))
                layer.bias.copy_(torch.from_numpy(m[k]["bias"][()]))
    return name, model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("checkpoint")
    ap.add_argument("--expect-accuracy", type=float)
    ap.add_argument("--tolerance", type=float)
    ap.add_argument("--expect-loss", type=float,
                    help="the trainer's test loss; must agree within 1e-4 relative (fp32 sums "
                         "in another order: about 1e-6 expected; mixed precision 5e-3)")
    a = ap.parse_args()
    with h5py.File(a.checkpoint, "r") as f:
        name, model = build(f)
        deck = deck_of(f)
        step = int(f.attrs["step"])
        precision = f.attrs.get("precision", b"fp32")
    precision = precision.decode() if isinstance(precision, bytes) else str(precision)
    mixed = precision != "fp32"
    if a.tolerance is None:
        a.tolerance = 0.005 if mixed else 0.001
    loss_tolerance = 5e-3 if mixed else 1e-4
    images = read_idx(deck["data"]["test_images"].strip())
    labels = read_idx(deck["data"]["test_labels"].strip()).astype(np.int64)
    x = torch.from_numpy(images.astype(np.float32) / 255.0).unsqueeze(1)  # N,1,28,28
    y = torch.from_numpy(labels)
    model.eval()
    with torch.no_grad():
        logits = model(x)
        loss = nn.functional.cross_entropy(logits, y).item()
        acc = (logits.argmax(1) == y).float().mean().item()
    print(f"{a.checkpoint}: model {name}, step {step}, {precision}: PyTorch test loss "
          f"{loss:.6f}, accuracy {acc:.4f}" +
          (" (fp32 master weights in fp32; the trainer evaluated their 16-bit copies)"
           if mixed else ""))
    ok = True
    if a.expect_accuracy is not None:
        good = abs(acc - a.expect_accuracy) <= a.tolerance
        print(f"trainer reported accuracy {a.expect_accuracy:.4f}: "
              f"{'match' if good else 'MISMATCH'} (tolerance {a.tolerance})")
        ok &= good
    if a.expect_loss is not None:
        rel = abs(loss - a.expect_loss) / abs(a.expect_loss)
        good = rel <= loss_tolerance
        print(f"trainer reported loss {a.expect_loss:.6f}: relative difference {rel:.2g} "
              f"{'match' if good else 'MISMATCH'} (tolerance {loss_tolerance:g})")
        ok &= good
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
