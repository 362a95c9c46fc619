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
finish
