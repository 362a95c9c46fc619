#!/usr/bin/env bash
# torch_reads_checkpoint.sh: an outside reader (h5py + PyTorch, Debian's
# python3-torch) loads the final checkpoint of an MLP and a CNN run and reproduces
# the test accuracy the trainer reported.
source "$(dirname "$0")/../lib.sh"
require_data
"$PYTHON" -c "import torch, h5py" 2>/dev/null || { echo "skipped: no python3-torch/h5py"; exit 77; }
RUN_TIMEOUT=300
for model in mlp cnn; do
  dir=$WORK/$model
  run 4 "$WORK/out" "$WORK/err" inputs/mnist.in model.name=$model train.epochs=2 \
    run.dir="$dir" run.progress=off
  check "$model run: $RC $(cat "$WORK/err")" [ "$RC" = 0 ]
  acc=$("$PYTHON" -c "import json; print(json.load(open('$dir/summary.json'))['test_accuracy'])")
  loss=$("$PYTHON" -c "import json; print(json.load(open('$dir/summary.json'))['test_loss'])")
  ckpt=$(ls "$dir"/checkpoints/step_*.h5 | tail -1)
  check "$model: PyTorch reproduces the accuracy $acc and loss $loss" "$PYTHON" \
    validation/checkpoint_to_torch.py "$ckpt" --expect-accuracy "$acc" --expect-loss "$loss"
done
# a GPT's checkpoint: refused, naming the file and where a GPT's goes (it said only
# "unknown model 'gpt' in the checkpoint")
gpt=(inputs/gpt2_124m.in model.n_layer=1 model.n_head=2 model.n_embd=16 model.seq_len=8
  model.vocab_size=64 data.format=random_tokens data.val_limit=0 train.batch_size=2 train.steps=1
  sample.length=0 run.progress=off)
run 1 "$WORK/out" "$WORK/err" "${gpt[@]}" run.dir="$WORK/gpt"
check "gpt run: $RC $(cat "$WORK/err")" [ "$RC" = 0 ]
"$PYTHON" validation/checkpoint_to_torch.py "$WORK/gpt/checkpoints/last.h5" >"$WORK/gpt_out" 2>&1
rc=$?
check "a GPT's checkpoint: refused ($rc), naming the file and tools/gpt2_hf.py: $(cat "$WORK/gpt_out")" \
  bash -c "[ $rc != 0 ] && grep -q '^$WORK/gpt/checkpoints/last.h5: a GPT.*tools/gpt2_hf.py export' '$WORK/gpt_out'"
finish
