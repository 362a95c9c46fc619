#!/usr/bin/env bash
# fashion_accuracy.sh: the Fashion-MNIST decks reach their targets at 8 ranks:
# MLP >= 88 %, CNN >= 90 % test accuracy (published baselines: 88.3 % and 91.6 %).
source "$(dirname "$0")/../lib.sh"
if [ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  echo "skipped: Debian's dataset-fashion-mnist is not installed"; exit 77
fi
RUN_TIMEOUT=600
for pair in "inputs/fashion_mnist.in 0.88" "inputs/fashion_mnist_cnn.in 0.90"; do
  set -- $pair
  dir=$WORK/$(basename "$1" .in)
  run 8 "$WORK/out" "$WORK/err" "$1" run.dir="$dir"
  check "$1: exit code $RC: $(tail -3 "$WORK/err")" [ "$RC" = 0 ]
  grep "^done:" "$WORK/out"
  check "$1: test accuracy >= $2" "$PYTHON" -c "
import json, sys
s = json.load(open('$dir/summary.json'))
print(f\"$1: test accuracy {s['test_accuracy']:.4f} (target >= $2)\")
sys.exit(0 if s['test_accuracy'] >= $2 else 1)"
done
finish
