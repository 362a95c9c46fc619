#!/usr/bin/env bash
# gpt2_decks.sh: the GPT-2 family decks (124M, 350M, 774M, 1558M: GPT-2's shapes,
# untouched) start and train 2 steps on a CPU with small-run overrides: context 64,
# one sequence a step, one validation window, no final checkpoint (1558M's would be
# 19 GB), no sample. The loss at step 1 must be near ln(50257) = 10.83 (GPT-2's
# initialisation predicts a near-uniform distribution; measured 10.86, 10.97, 11.13,
# 10.99 from 124M to 1558M) and finite at step 2.
# By default only 124M runs (about a minute), to keep the suite short; GPT2_DECKS="124m
# 350m 774m 1558m" runs all four (about 9 minutes and 19 GB on a 2-core machine).
# 1558M trains with plain SGD here: its AdamW state (12.5 GB) with parameters and
# gradients (12.5 GB) would not fit this 23 GB machine, and the trainer's memory
# check would refuse it with exit 71, as it should.
source "$(dirname "$0")/../lib.sh"
[ -f "$SRC/data/brown/gpt2.train.tok" ] || { echo "skipped: no Brown tokens (run scripts/prepare_text.sh)"; exit 77; }
RUN_TIMEOUT=600
for size in ${GPT2_DECKS:-124m}; do
  extra=()
  [ "$size" = 1558m ] && extra=(optim.name=sgd optim.momentum=0.9)
  start=$(date +%s)
  run 1 "$WORK/out" "$WORK/err" inputs/gpt2_$size.in train.steps=2 model.seq_len=64 \
    train.batch_size=1 train.eval_batch_size=1 data.val_limit=1 checkpoint.at_end=false \
    sample.length=0 train.log_every=1 run.dir="$WORK/$size" run.progress=off "${extra[@]}"
  check "gpt2_$size: exit $RC $(tail -3 "$WORK/err")" [ "$RC" = 0 ]
  params=$(grep -o 'model gpt: [0-9]* parameters' "$WORK/out")
  echo "gpt2_$size: $params, $(($(date +%s) - start)) s"
  check "gpt2_$size: step-1 loss near ln 50257" "$PYTHON" -c "
import csv, math, sys
rows = [r for r in csv.DictReader(open('$WORK/$size/metrics.csv')) if r['phase'] == 'train']
l1, l2 = float(rows[0]['loss']), float(rows[1]['loss'])
print('gpt2_$size losses', l1, l2)
sys.exit(0 if abs(l1 - math.log(50257)) < 0.5 and math.isfinite(l2) else 1)"
done
finish
