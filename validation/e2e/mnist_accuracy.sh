#!/usr/bin/env bash
# mnist_accuracy.sh: the used-by line, literally: `mpirun -np 8 ./trainer inputs/mnist.in`
# (and the CNN deck) train to the target test accuracy, and the run directory holds
# what scripts rely on: the resolved deck, metrics.csv and summary.json.
source "$(dirname "$0")/../lib.sh"
require_data
RUN_TIMEOUT=300

# accuracy DECK MIN: run the deck at 8 ranks and check summary.json
accuracy() {
  local deck=$1 min=$2 dir=$WORK/$(basename "$1" .in)
  run 8 "$WORK/out" "$WORK/err" "$deck" run.dir="$dir"
  check "$deck: exit code $RC: $(tail -3 "$WORK/err")" [ "$RC" = 0 ]
  check "$deck: final line printed" grep -q "^done: .* test accuracy" "$WORK/out"
  grep "^done:\|^time:" "$WORK/out"
  check "$deck: where the time went, in summary.json and the time line" \
    time_accounted "$dir" "$WORK/out"
  check "$deck: summary.json has the required keys and test_accuracy >= $min" "$PYTHON" -c "
import json, sys
s = json.load(open('$dir/summary.json'))
need = ['test_accuracy', 'test_loss', 'steps', 'samples_per_second', 'wall_seconds', 'ranks']
missing = [k for k in need if k not in s]
assert not missing, f'missing keys {missing}'
assert s['ranks'] == 8, s['ranks']
print(f\"$deck: test accuracy {s['test_accuracy']:.4f} (target >= $min), {s['samples_per_second']:.0f} samples/s, {s['wall_seconds']:.1f} s\")
sys.exit(0 if s['test_accuracy'] >= $min else 1)"
  check "$deck: metrics.csv has step and loss columns, train and eval rows" "$PYTHON" -c "
import csv
rows = list(csv.DictReader(open('$dir/metrics.csv')))
assert 'step' in rows[0] and 'loss' in rows[0]
assert any(r['phase'] == 'train' for r in rows) and any(r['phase'] == 'eval' for r in rows)"
  # the resolved deck reproduces the run's settings: it parses back as a deck
  check "$deck: the resolved deck is a valid deck" grep -q "^name = " "$dir/deck.in"
  cp "$dir/deck.in" "$WORK/resolved.in"
  run 2 "$WORK/out2" "$WORK/err2" "$WORK/resolved.in" train.steps=1 run.dir="$WORK/again" \
    run.progress=off
  check "$deck: the resolved deck runs: $(cat "$WORK/err2")" [ "$RC" = 0 ]
}

accuracy inputs/mnist.in 0.95
accuracy inputs/mnist_cnn.in 0.97
finish
