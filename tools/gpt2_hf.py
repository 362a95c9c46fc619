#!/usr/bin/env python3
"""gpt2_hf.py: GPT-2 weights between Hugging Face's format and the trainer's checkpoints.

usage:
  gpt2_hf.py import HF_MODEL OUT.h5 [--n-head N] [--seq-len T]
  gpt2_hf.py export CHECKPOINT.h5 OUT_DIR [--n-head N]

import  reads GPT-2 weights as Hugging Face stores them (a model directory with
        config.json and model.safetensors or pytorch_model.bin, or one such file) and
        writes a trainer checkpoint holding the parameters (no optimizer state), which
        a run starts from with checkpoint.init_from = OUT.h5 (fine-tuning). The deck
        overrides that give the model its shapes are printed (inputs/gpt2_124m.in has
        those of GPT-2 124M), and config.json's dropout as the deck's keys (GPT-2's
        0.1; the trainer's default is none). Float16 and bfloat16 weights are widened
        to float32.
        --seq-len T keeps the first T rows of the position table (wpe): a model with a
        shorter context (model.seq_len = T) then starts from the same weights, as
        nanoGPT crops GPT-2's block size.
export  writes a trainer checkpoint's GPT as OUT_DIR/config.json and
        OUT_DIR/model.safetensors (float32), which transformers' GPT2LMHeadModel
        .from_pretrained(OUT_DIR) loads (tied head, LayerNorm eps 1e-5, GELU in its tanh
        form: activation_function "gelu_new"; resid_pdrop, embd_pdrop and attn_pdrop
        the run's model.resid_pdrop, embd_pdrop and attn_pdrop). A run
        with GPT-2's tokenizer (data.tokenizer = gpt2) also gets its files as
        OUT_DIR/vocab.json and OUT_DIR/merges.txt (copies of the deck's data.encoder
        and data.merges, which GPT2Tokenizer.from_pretrained(OUT_DIR) reads), where
        they are found from the current directory.

The layouts: Hugging Face's GPT-2 keeps its linear layers as Conv1D, weight [in, out]
(y = x W + b); the trainer keeps them as nn.Linear does, [out, in] (README,
"Checkpoints"). So c_attn, c_proj, c_fc and the MLP's c_proj are transposed, the rest
(wte, wpe, the LayerNorms, every bias) copied. Names: h.0.attn.c_attn.weight (with or
without a leading "transformer.") is /model/h.0/attn/c_attn/weight. The causal-mask
buffers (attn.bias, attn.masked_bias) are not weights and are skipped; an lm_head.weight
must equal wte (GPT-2 ties them). n_head is not in the weights: import takes it from
config.json (or --n-head), export from the checkpoint's /deck (or --n-head).

Needs numpy and h5py (Debian: python3-numpy python3-h5py); torch only to read a
pytorch_model.bin. Exit status 0, or 1 with a message naming the file and the problem.
"""
import argparse
import configparser
import json
import os
import shutil
import struct
import sys
import zlib

import h5py
import numpy as np

CKPT_FORMAT = "trainer-checkpoint"
CKPT_VERSION = 1
# Conv1D in Hugging Face's GPT-2, nn.Linear in the trainer: [in, out] <-> [out, in]
TRANSPOSED = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight",
              "mlp.c_proj.weight")
BLOCK_TENSORS = ("ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                 "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                 "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias")
SKIPPED = ("attn.bias", "attn.masked_bias")  # causal-mask buffers, not weights


def in_block(name):
    """h.0.attn.c_attn.bias -> attn.c_attn.bias (the name inside its block)"""
    return name.split(".", 2)[-1] if name.startswith("h.") else name


def transposed(name):
    return in_block(name) in TRANSPOSED


def expected_names(n_layer):
    return (["wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias"] +
            [f"h.{i}.{t}" for i in range(n_layer) for t in BLOCK_TENSORS])


def count_blocks(sd):
    n = 0
    while f"h.{n}.ln_1.weight" in sd:
        n += 1
    return n


def check_names(path, sd, n_layer):
    wanted = expected_names(n_layer)
    missing = [k for k in wanted if k not in sd]
    extra = sorted(set(sd) - set(wanted))
    if missing or extra or n_layer == 0:
        raise Failure(f"{path}: not the tensors of a GPT-2 with {n_layer} blocks: "
                      f"missing {missing[:4]}{'...' if len(missing) > 4 else ''}, "
                      f"unexpected {extra[:4]}{'...' if len(extra) > 4 else ''}")


class Failure(Exception):
    pass


# ---- safetensors (https://github.com/huggingface/safetensors: an 8-byte little-endian
# header length, a JSON header {name: {dtype, shape, data_offsets}}, then the bytes) ----

def read_safetensors(path):
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise Failure(f"{path}: too short for a safetensors file")
        n = struct.unpack("<Q", head)[0]
        if 8 + n > size:
            raise Failure(f"{path}: its header claims {n} bytes, the file has {size - 8}")
        try:
            header = json.loads(f.read(n))
        except ValueError as e:
            raise Failure(f"{path}: the header is not JSON ({e}): not a safetensors file")
    # mapped, not read: GPT-2 1558M's float32 file is 6 GB, copied once into float32
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype, shape = info.get("dtype"), info.get("shape")
        begin, end = info.get("data_offsets", (0, -1))
        count = int(np.prod(shape)) if shape else 1
        sizes = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8}
        if dtype not in sizes:
            raise Failure(f"{path}: {name} has dtype {dtype}; GPT-2's weights are F32, F16 "
                          "or BF16")
        if end - begin != count * sizes[dtype] or base + end > len(raw) or begin < 0:
            raise Failure(f"{path}: {name}'s bytes [{begin}, {end}) do not hold {dtype} "
                          f"{shape} inside the file (truncated?)")
        buf = raw[base + begin:base + end]
        if dtype == "BF16":  # the top half of a float32
            a = (buf.view("<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            a = buf.view({"F32": "<f4", "F16": "<f2", "F64": "<f8"}[dtype])
        out[name] = np.array(a, dtype=np.float32).reshape(shape)  # a copy: the map closes
    return out


def write_safetensors(path, tensors, metadata=None):
    header, offset, blobs = {}, 0, []
    if metadata:
        header["__metadata__"] = metadata
    for name in sorted(tensors):
        b = np.ascontiguousarray(tensors[name], dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape),
                        "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def read_torch_bin(path):
    import torch  # only here: safetensors files need no torch
    try:
        sd = torch.load(path, map_location="cpu", weights_only=True)
    except TypeError:  # a torch without weights_only
        sd = torch.load(path, map_location="cpu")
    except Exception as e:  # noqa: BLE001 (torch raises many kinds)
        raise Failure(f"{path}: torch cannot load it ({e})")
    if not isinstance(sd, dict):
        raise Failure(f"{path}: holds a {type(sd).__name__}, not a state dict")
    return {k: v.detach().float().numpy() for k, v in sd.items() if hasattr(v, "detach")}


# ---- Hugging Face side --------------------------------------------------------------

def find_weights(src):
    """(weights file, config.json or None) of a model directory or a file."""
    if os.path.isdir(src):
        for name in ("model.safetensors", "pytorch_model.bin"):
            if os.path.exists(os.path.join(src, name)):
                cfg = os.path.join(src, "config.json")
                return os.path.join(src, name), cfg if os.path.exists(cfg) else None
        raise Failure(f"{src}: a directory without model.safetensors or pytorch_model.bin")
    if not os.path.exists(src):
        raise Failure(f"{src}: no such file or directory")
    cfg = os.path.join(os.path.dirname(src) or ".", "config.json")
    return src, cfg if os.path.exists(cfg) else None


def load_hf(src):
    path, cfg_path = find_weights(src)
    raw = read_torch_bin(path) if path.endswith(".bin") else read_safetensors(path)
    sd = {}
    for k, v in raw.items():
        name = k[len("transformer."):] if k.startswith("transformer.") else k
        if name.startswith("h.") and in_block(name) in SKIPPED:
            continue
        sd[name] = v
    head = sd.pop("lm_head.weight", None)
    if "wte.weight" not in sd:
        raise Failure(f"{path}: no wte.weight (or transformer.wte.weight): not GPT-2 weights")
    if head is not None and not np.array_equal(head, sd["wte.weight"]):
        raise Failure(f"{path}: lm_head.weight differs from wte.weight; the trainer's GPT "
                      "ties its output head to the token embedding")
    n_layer = count_blocks(sd)
    check_names(path, sd, n_layer)
    cfg = {}
    if cfg_path:
        with open(cfg_path) as f:
            cfg = json.load(f)
    return path, sd, n_layer, cfg


# ---- the trainer's side ---------------------------------------------------------------

def trainer_path(hf_name):
    """h.0.attn.c_attn.weight -> /model/h.0/attn/c_attn/weight"""
    parts = hf_name.split(".")
    if parts[0] == "h":
        parts = [parts[0] + "." + parts[1]] + parts[2:]
    return "/model/" + "/".join(parts)


def check_shapes(path, sd, n_layer):
    V, C = sd["wte.weight"].shape
    T = sd["wpe.weight"].shape[0]
    want = {"wpe.weight": (T, C), "ln_f.weight": (C,), "ln_f.bias": (C,)}
    for i in range(n_layer):
        p = f"h.{i}."
        want.update({p + "ln_1.weight": (C,), p + "ln_1.bias": (C,),
                     p + "ln_2.weight": (C,), p + "ln_2.bias": (C,),
                     p + "attn.c_attn.weight": (C, 3 * C), p + "attn.c_attn.bias": (3 * C,),
                     p + "attn.c_proj.weight": (C, C), p + "attn.c_proj.bias": (C,),
                     p + "mlp.c_fc.weight": (C, 4 * C), p + "mlp.c_fc.bias": (4 * C,),
                     p + "mlp.c_proj.weight": (4 * C, C), p + "mlp.c_proj.bias": (C,)})
    for k, shape in want.items():
        if tuple(sd[k].shape) != shape:
            raise Failure(f"{path}: {k} has shape {list(sd[k].shape)}, a GPT-2 of width {C} "
                          f"has {list(shape)}")
    return V, C, T


def write_checkpoint(out, tensors, deck_text, source):
    """tensors: {trainer path: float32 array}; the root attributes a trainer reads."""
    tmp = out + ".tmp"
    with h5py.File(tmp, "w") as f:
        for k, v in (("format", CKPT_FORMAT), ("model", "gpt"), ("optimizer", "none"),
                     ("precision", "fp32"), ("imported_from", source[-200:])):
            f.attrs[k] = np.bytes_(v)
        f.attrs["format_version"] = np.int64(CKPT_VERSION)
        for k in ("step", "written_zero"):
            f.attrs[k] = np.int64(0)
        for k in ("written_ranks", "written_dp", "written_tp", "written_pp"):
            f.attrs[k] = np.int64(1)
        f.attrs["epoch"] = np.float64(0)
        f.attrs["seed"] = np.uint64(0)
        f.create_dataset("deck", data=np.bytes_(deck_text))
        for path, a in sorted(tensors.items()):
            a = np.ascontiguousarray(a, dtype="<f4")
            ds = f.create_dataset(path, data=a)
            ds.attrs["kind"] = np.bytes_("parameter")
            ds.attrs["layer"] = np.bytes_(path[len("/model/"):path.rindex("/")])
            ds.attrs["crc32"] = np.uint32(zlib.crc32(a.tobytes()))
    os.replace(tmp, out)


def read_checkpoint(path):
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise Failure(f"{path}: cannot open it as HDF5 ({e})")
    with f:
        fmt = f.attrs.get("format")
        fmt = fmt.decode() if isinstance(fmt, bytes) else fmt
        model = f.attrs.get("model")
        model = model.decode() if isinstance(model, bytes) else model
        if fmt != CKPT_FORMAT:
            raise Failure(f"{path}: not a trainer checkpoint (no format = {CKPT_FORMAT})")
        if model != "gpt":
            raise Failure(f"{path}: a checkpoint of model '{model}', not of the GPT")
        tensors = {}

        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                a = np.asarray(obj[()], dtype="<f4")
                crc = obj.attrs.get("crc32")
                if crc is not None and zlib.crc32(a.tobytes()) != int(crc):
                    raise Failure(f"{path}: /model/{name} does not match its crc32")
                tensors["/model/" + name] = a
        if "model" not in f:
            raise Failure(f"{path}: no /model group")
        f["model"].visititems(visit)
        deck = f["deck"][()] if "deck" in f else b""
        deck = deck.decode() if isinstance(deck, bytes) else str(deck)
    return tensors, deck


def deck_value(deck, section, key):
    cp = configparser.ConfigParser(inline_comment_prefixes=("#",), interpolation=None)
    try:
        cp.read_string(deck)
        return cp.get(section, key).strip()
    except configparser.Error:
        return None


def pdrop_of_deck(deck, key):
    """The run's model.<key> (a dropout probability; none given: 0, the default)."""
    try:
        return float(deck_value(deck, "model", key) or 0.0)
    except ValueError:
        return 0.0


def n_head_of_deck(deck):
    try:
        return int(deck_value(deck, "model", "n_head"))
    except (TypeError, ValueError):
        return None


# ---- the two commands -----------------------------------------------------------------

def do_import(a):
    path, sd, n_layer, cfg = load_hf(a.source)
    V, C, T = check_shapes(path, sd, n_layer)
    n_head = a.n_head or cfg.get("n_head")
    if not n_head:
        raise Failure(f"{path}: no config.json beside it names n_head: give --n-head")
    if C % n_head:
        raise Failure(f"{path}: n_head {n_head} does not divide the width {C}")
    if a.seq_len:
        if not 0 < a.seq_len <= T:
            raise Failure(f"{path}: --seq-len {a.seq_len}: its position table has {T} rows")
        sd["wpe.weight"] = sd["wpe.weight"][:a.seq_len]
        T = a.seq_len
    tensors = {}
    for k, v in sd.items():
        tensors[trainer_path(k)] = v.T if transposed(k) else v
    overrides = (f"model.name=gpt model.n_layer={n_layer} model.n_head={n_head} "
                 f"model.n_embd={C} model.seq_len={T} model.vocab_size={V}")
    deck = (f"# GPT-2 weights imported by tools/gpt2_hf.py from {path}\n"
            f"[model]\nname = gpt\nn_layer = {n_layer}\nn_head = {n_head}\nn_embd = {C}\n"
            f"seq_len = {T}\nvocab_size = {V}\n")
    write_checkpoint(a.out, tensors, deck, os.path.abspath(path))
    n = sum(v.size for v in sd.values())
    print(f"{a.out}: GPT-2 with {n_layer} blocks, {n_head} heads, width {C}, {T} positions, "
          f"vocabulary {V}: {n} parameters ({len(tensors)} tensors)")
    print(f"train from it with:  checkpoint.init_from={a.out} {overrides}")
    drops = [f"model.{k}={cfg[k]:g}" for k in ("embd_pdrop", "attn_pdrop", "resid_pdrop")
             if isinstance(cfg.get(k), (int, float)) and cfg[k] > 0]
    if drops:
        print(f"its config.json trains with dropout; to do so too:  {' '.join(drops)}")
    return 0


def do_export(a):
    tensors, deck = read_checkpoint(a.checkpoint)
    n_head = a.n_head or n_head_of_deck(deck)
    if not n_head:
        raise Failure(f"{a.checkpoint}: its /deck names no model.n_head: give --n-head")
    sd = {}
    for path, v in tensors.items():
        parts = path[len("/model/"):].split("/")
        name = ".".join(parts)
        sd[name] = v.T if transposed(name) else v
    n_layer = count_blocks(sd)
    check_names(a.checkpoint, sd, n_layer)
    V, C, T = check_shapes(a.checkpoint, sd, n_layer)
    os.makedirs(a.out, exist_ok=True)
    config = {
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
        "n_layer": n_layer, "n_head": n_head, "n_embd": C, "n_positions": T, "n_ctx": T,
        "vocab_size": V, "n_inner": None, "activation_function": "gelu_new",
        "layer_norm_epsilon": 1e-5, **{k: pdrop_of_deck(deck, k) for k in
                                       ("resid_pdrop", "embd_pdrop", "attn_pdrop")},
        "initializer_range": 0.02, "scale_attn_weights": True, "tie_word_embeddings": True,
        "bos_token_id": V - 1 if V == 50257 else None,
        "eos_token_id": V - 1 if V == 50257 else None,
        "torch_dtype": "float32",
    }
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    write_safetensors(os.path.join(a.out, "model.safetensors"), sd, {"format": "pt"})
    print(f"{a.out}: config.json and model.safetensors of a GPT-2 with {n_layer} blocks, "
          f"{n_head} heads, width {C}, {T} positions, vocabulary {V}")
    if (deck_value(deck, "data", "tokenizer") or "gpt2") == "gpt2":  # the deck's default
        files = {"vocab.json": deck_value(deck, "data", "encoder") or "data/gpt2/encoder.json",
                 "merges.txt": deck_value(deck, "data", "merges") or "data/gpt2/vocab.bpe"}
        if all(os.path.isfile(src) for src in files.values()):
            for name, src in files.items():
                shutil.copyfile(src, os.path.join(a.out, name))
            print(f"{a.out}: the run's GPT-2 tokenizer as vocab.json and merges.txt")
        else:
            print(f"{a.out}: no tokenizer files written: {' or '.join(files.values())} not "
                  "found from here (run from the directory the training ran in)")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    i = sub.add_parser("import", help="Hugging Face GPT-2 -> trainer checkpoint")
    i.add_argument("source", help="model directory, model.safetensors or pytorch_model.bin")
    i.add_argument("out", help="the checkpoint to write (.h5)")
    i.add_argument("--n-head", type=int, default=0,
                   help="attention heads (default: n_head of the config.json beside SOURCE)")
    i.add_argument("--seq-len", type=int, default=0,
                   help="keep the first T positions of wpe (a shorter context)")
    e = sub.add_parser("export", help="trainer checkpoint -> Hugging Face GPT-2")
    e.add_argument("checkpoint")
    e.add_argument("out", help="directory for config.json and model.safetensors")
    e.add_argument("--n-head", type=int, default=0,
                   help="attention heads (default: model.n_head of the checkpoint's /deck)")
    a = p.parse_args()
    try:
        return do_import(a) if a.cmd == "import" else do_export(a)
    except Failure as err:
        print(f"gpt2_hf.py: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
