#!/usr/bin/env bash
# gpt2_hf.sh: GPT-2 weights in and out of the trainer (tools/gpt2_hf.py) and runs that
# start from them (checkpoint.init_from).
#  - export: a trained GPT's checkpoint as Hugging Face's config.json and
#    model.safetensors, whose loss computed the way transformers computes it
#    (e2e/hf_gpt2_forward.py) is the reference GPT's loss of the checkpoint, with the
#    GPT-2 tokenizer's files where the run used it, and the run's dropout in config.json
#    (which import prints back as the deck's keys);
#  - import: those files, a pytorch_model.bin with "transformer." names and a tied
#    lm_head.weight, and a bfloat16 safetensors file, back into checkpoints whose /model
#    is the original bit for bit (bf16: the original's values cut to bf16); an untied
#    head and a truncated file are refused;
#  - init_from: a run at another layout (tp 2 x pp 2, bf16-mixed, SGD) starts from the
#    imported weights (its step-0 checkpoint holds them bit for bit) with a fresh
#    optimizer, as does one on cpu-guarded with ZeRO 1 in fp16-mixed, and a run of 0
#    steps evaluates them to the original's final validation loss; run again, the
#    first resumes its own checkpoint instead; a file of another model size, a missing
#    file, and resume= on a file without optimizer state are refused with the key named;
#    an import cropped to a shorter context (--seq-len) starts a run of that seq_len.
source "$(dirname "$0")/../lib.sh"
guarded_transports
layout_gpt_setup
"$PYTHON" -c "import torch, h5py" 2>/dev/null || { echo "skipped: no python3-torch/h5py"; exit 77; }
TOOL=(timeout 120 "$PYTHON" tools/gpt2_hf.py)
G=("$WORK/gpt.in" "${LAYOUT_GPT[@]}" checkpoint.keep=0)

run 1 "$WORK/out" "$WORK/err" "${G[@]}" train.steps=4 run.dir="$WORK/a" model.embd_pdrop=0.1 \
  model.resid_pdrop=0.05
check "the run to export: $RC $(tail -3 "$WORK/err")" [ "$RC" = 0 ]
orig=$WORK/a/checkpoints/step_00000004.h5
val() { grep -o "val loss [0-9.]*, perplexity [0-9.]*" "$1"; }
val "$WORK/out" >"$WORK/a.val"

"${TOOL[@]}" export "$orig" "$WORK/hf" >"$WORK/out" 2>&1
check "export: $(cat "$WORK/out")" [ -s "$WORK/hf/model.safetensors" -a -s "$WORK/hf/config.json" ]
check "transformers' loss of the export is the reference's of the checkpoint" \
  timeout 120 "$PYTHON" validation/e2e/hf_gpt2_forward.py "$WORK/hf" "$orig"
check "config.json has the run's dropout" "$PYTHON" -c "
import json, sys
c = json.load(open(sys.argv[1]))
sys.exit(0 if (c['embd_pdrop'], c['attn_pdrop'], c['resid_pdrop']) == (0.1, 0.0, 0.05) else 1)" \
  "$WORK/hf/config.json"

# a run with GPT-2's tokenizer: its files come along (here a copy of the checkpoint
# whose /deck says so, exported from the repository root where the deck's paths point)
if [ -f data/gpt2/encoder.json ] && [ -f data/gpt2/vocab.bpe ]; then
  "$PYTHON" -c "
import h5py, numpy as np, shutil, sys
shutil.copyfile(sys.argv[1], sys.argv[2])
with h5py.File(sys.argv[2], 'r+') as f:
    deck = f['deck'][()].decode().replace('tokenizer = bytes', 'tokenizer = gpt2')
    del f['deck']
    f.create_dataset('deck', data=np.bytes_(deck))" "$orig" "$WORK/bpe.h5"
  "${TOOL[@]}" export "$WORK/bpe.h5" "$WORK/hf_bpe" >"$WORK/out" 2>&1
  check "export with GPT-2's tokenizer: its vocab.json and merges.txt: $(cat "$WORK/out")" \
    cmp -s data/gpt2/encoder.json "$WORK/hf_bpe/vocab.json"
  check "... merges.txt" cmp -s data/gpt2/vocab.bpe "$WORK/hf_bpe/merges.txt"
fi
check "a byte-level run's export has no tokenizer files" [ ! -e "$WORK/hf/vocab.json" ]

same_model() { h5diff -q "$1" "$2" /model /model; }
"${TOOL[@]}" import "$WORK/hf" "$WORK/imp.h5" >"$WORK/out" 2>&1
check "import the export: $(cat "$WORK/out")" same_model "$orig" "$WORK/imp.h5"
check "import prints the overrides: $(cat "$WORK/out")" \
  grep -q "checkpoint.init_from=$WORK/imp.h5 model.name=gpt model.n_layer=4 model.n_head=4" \
  "$WORK/out"
check "import prints config.json's dropout as keys" \
  grep -q "trains with dropout; to do so too:  model.embd_pdrop=0.1 model.resid_pdrop=0.05$" "$WORK/out"

# the other forms Hugging Face publishes: a pickled state dict with the model's prefix
# and the tied head, and 16-bit weights (the hub's gpt2 files have both kinds of name)
"$PYTHON" - "$WORK" <<'PY'
import sys, json, os, numpy as np, torch
sys.path.insert(0, "tools")
import gpt2_hf
w = sys.argv[1]
sd = gpt2_hf.read_safetensors(f"{w}/hf/model.safetensors")
os.makedirs(f"{w}/bin", exist_ok=True)
os.makedirs(f"{w}/bf16", exist_ok=True)
cfg = json.load(open(f"{w}/hf/config.json"))
for d in ("bin", "bf16"):
    json.dump(cfg, open(f"{w}/{d}/config.json", "w"))
t = {"transformer." + k: torch.from_numpy(v.copy()) for k, v in sd.items()}
t["lm_head.weight"] = t["transformer.wte.weight"]
for i in range(cfg["n_layer"]):  # the causal-mask buffers the hub's files carry
    t[f"transformer.h.{i}.attn.bias"] = torch.ones(1, 1, 4, 4).tril()
torch.save(t, f"{w}/bin/pytorch_model.bin")
# bfloat16: the upper 16 bits of each float32 (truncation: what the reader widens back)
header, blobs, off = {}, [], 0
for k in sorted(sd):
    b = (np.ascontiguousarray(sd[k], "<f4").view("<u4") >> 16).astype("<u2").tobytes()
    header[k] = {"dtype": "BF16", "shape": list(sd[k].shape), "data_offsets": [off, off + len(b)]}
    off += len(b)
    blobs.append(b)
h = json.dumps(header).encode()
with open(f"{w}/bf16/model.safetensors", "wb") as f:
    f.write(len(h).to_bytes(8, "little") + h + b"".join(blobs))
PY
"${TOOL[@]}" import "$WORK/bin/pytorch_model.bin" "$WORK/bin.h5" >"$WORK/out" 2>&1
check "import a pytorch_model.bin: $(cat "$WORK/out")" same_model "$orig" "$WORK/bin.h5"
"${TOOL[@]}" import "$WORK/bf16" "$WORK/bf16.h5" >"$WORK/out" 2>&1
check "import bf16: $(cat "$WORK/out")" "$PYTHON" -c "
import h5py, numpy as np, sys
a, b = h5py.File(sys.argv[1]), h5py.File(sys.argv[2])
bad = []
a['model'].visititems(lambda n, o: bad.append(n) if isinstance(o, h5py.Dataset) and not
    np.array_equal((o[()].view('<u4') & 0xffff0000).view('<f4'), b['model'][n][()]) else None)
sys.exit(1 if bad else 0)" "$orig" "$WORK/bf16.h5"
# a head that is not the embedding is refused (the trainer's GPT ties them)
"$PYTHON" -c "
import torch, sys
t = torch.load(sys.argv[1]); t['lm_head.weight'] = t['lm_head.weight'] * 2; torch.save(t, sys.argv[2])
" "$WORK/bin/pytorch_model.bin" "$WORK/untied.bin"
"${TOOL[@]}" import "$WORK/untied.bin" "$WORK/untied.h5" --n-head 4 >"$WORK/out" 2>&1
rc=$?
check "an untied head refused: $rc $(cat "$WORK/out")" [ $rc = 1 -a ! -e "$WORK/untied.h5" ]
check "an untied head: the message" grep -q "lm_head.weight differs from wte.weight" "$WORK/out"

# a truncated download is refused, naming the tensor cut short
mkdir -p "$WORK/cut" && cp "$WORK/hf/config.json" "$WORK/cut/"
head -c 100000 "$WORK/hf/model.safetensors" >"$WORK/cut/model.safetensors"
"${TOOL[@]}" import "$WORK/cut" "$WORK/cut.h5" >"$WORK/out" 2>&1
rc=$?
check "a truncated file refused: $rc $(cat "$WORK/out")" [ $rc = 1 -a ! -e "$WORK/cut.h5" ]
check "a truncated file: the message" grep -q "inside the file (truncated?)" "$WORK/out"

# fine-tuning from the import at another layout and precision, with another optimizer
F=("${G[@]}" train.steps=3 parallel.tp=2 parallel.pp=2 train.micro_batches=2
  train.precision=bf16-mixed optim.name=sgd checkpoint.at_start=true
  checkpoint.init_from="$WORK/imp.h5" run.dir="$WORK/ft")
run 4 "$WORK/out" "$WORK/err" "${F[@]}"
check "init_from run: $RC $(tail -3 "$WORK/err")" [ "$RC" = 0 ]
check "init_from says so: $(grep -i init "$WORK/out")" \
  grep -q "^initialised the model's parameters from $WORK/imp.h5 (model gpt, written at step 0 by 1 rank); the optimizer starts fresh at step 0" "$WORK/out"
check "init_from: the step-0 checkpoint holds the imported weights" \
  same_model "$orig" "$WORK/ft/checkpoints/step_00000000.h5"
check "init_from: a fresh optimizer (zero momentum at step 0)" "$PYTHON" -c "
import h5py, numpy as np, sys
f = h5py.File(sys.argv[1]); bad = []
f['optimizer'].visititems(lambda n, o: bad.append(n) if isinstance(o, h5py.Dataset) and np.any(o[()]) else None)
sys.exit(1 if bad or int(f.attrs['step']) else 0)" "$WORK/ft/checkpoints/step_00000000.h5"
# no training: the imported model evaluated as it is, the original's final figures
run 2 "$WORK/out" "$WORK/err" "${G[@]}" train.steps=0 train.epochs=0 checkpoint.init_from="$WORK/imp.h5" \
  run.dir="$WORK/eval"
check "init_from, 0 steps: $RC $(tail -3 "$WORK/err")" [ "$RC" = 0 ]
check "init_from, 0 steps: says so" \
  grep -q "^note: 0 training steps: the model is evaluated as checkpoint.init_from gives it" \
  "$WORK/out"
check "init_from, 0 steps: the original's $(cat "$WORK/a.val")" \
  [ "$(val "$WORK/out")" = "$(cat "$WORK/a.val")" -a -s "$WORK/a.val" ]
check "init_from, 0 steps: no rates" grep -q "^done: no training step in" "$WORK/out"
check "init_from, 0 steps: metrics.csv has the evaluation (step 0)" \
  grep -q "^0,0.000000,eval," "$WORK/eval/metrics.csv"
# device memory (the parameters reach it through host copies: cpu-guarded), ZeRO's
# sliced master weights, fp16
run 2 "$WORK/out" "$WORK/err" "${G[@]}" train.steps=1 system.device=cpu-guarded parallel.zero=1 \
  train.precision=fp16-mixed checkpoint.at_start=true checkpoint.init_from="$WORK/imp.h5" \
  run.dir="$WORK/guarded"
check "init_from on cpu-guarded: $RC $(tail -3 "$WORK/err")" [ "$RC" = 0 ]
check "init_from on cpu-guarded, ZeRO 1, fp16: the imported weights" \
  same_model "$orig" "$WORK/guarded/checkpoints/step_00000000.h5"
run 4 "$WORK/out" "$WORK/err" "${F[@]}" train.steps=5
check "init_from with a checkpoint to resume: $RC $(tail -2 "$WORK/err")" [ "$RC" = 0 ]
check "init_from: the run's own checkpoint comes first: $(head -12 "$WORK/out")" \
  grep -q "^resumed from $WORK/ft/checkpoints/step_00000003.h5" "$WORK/out"
check "init_from: not applied over a resume" [ "$(grep -c "^initialised" "$WORK/out")" = 0 ]

expect_refused() { # expect_refused CODE PATTERN overrides...
  local code=$1 pat=$2; shift 2
  run 2 "$WORK/out" "$WORK/err" "${G[@]}" train.steps=1 run.dir="$WORK/bad" "$@"
  check "refused ($*): $RC, $(cat "$WORK/err")" [ "$RC" = "$code" ]
  check "message ($*): $(cat "$WORK/err")" grep -q -- "$pat" "$WORK/err"
}
expect_refused 65 "checkpoint.init_from=.*/model/wte/weight has shape \[256, 64\], the model has \[256, 128\]" \
  checkpoint.init_from="$WORK/imp.h5" model.n_embd=128
expect_refused 65 "/model/wpe/weight has shape \[32, 64\], the model has \[16, 64\].*import --seq-len T" \
  checkpoint.init_from="$WORK/imp.h5" model.seq_len=16
expect_refused 66 "checkpoint.init_from=$WORK/none.h5.*No such file" checkpoint.init_from="$WORK/none.h5"
# a shorter context: the import keeps the first positions, and a run of that seq_len
# starts from them (its step-0 wpe is the original's first 16 rows, the rest the same)
"${TOOL[@]}" import "$WORK/hf" "$WORK/crop.h5" --seq-len 16 >"$WORK/out" 2>&1
check "import --seq-len 16: $(cat "$WORK/out")" grep -q "model.seq_len=16" "$WORK/out"
run 2 "$WORK/out" "$WORK/err" "${G[@]}" train.steps=1 model.seq_len=16 checkpoint.at_start=true \
  checkpoint.init_from="$WORK/crop.h5" run.dir="$WORK/short"
check "init_from the cropped import at seq_len 16: $RC $(tail -2 "$WORK/err")" [ "$RC" = 0 ]
check "... its wpe is the original's first 16 rows, every other tensor the same" "$PYTHON" -c "
import h5py, numpy as np, sys
a, b = h5py.File(sys.argv[1]), h5py.File(sys.argv[2])
bad = []
a['model'].visititems(lambda n, o: bad.append(n) if isinstance(o, h5py.Dataset) and not
    np.array_equal(o[()][:16] if n == 'wpe/weight' else o[()], b['model'][n][()]) else None)
sys.exit(1 if bad else 0)" "$orig" "$WORK/short/checkpoints/step_00000000.h5"
expect_refused 65 "holds none optimizer state; this deck uses adamw" checkpoint.resume="$WORK/imp.h5"
finish
