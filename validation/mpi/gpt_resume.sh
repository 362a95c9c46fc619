#!/usr/bin/env bash
# gpt_resume.sh: the GPT resumes exactly. A run interrupted mid-epoch and resumed
# (same layout) ends with bit-identical parameters and AdamW state (h5diff) and the
# same metrics.csv rows as the run done straight; a checkpoint written on 2 ranks
# resumes on 1 with the same loss curve (fp32 summation order aside); and the same
# run on 1, 2 and 4 ranks gives the same losses. With dropout at every site: its
# masks are drawn from (seed, step, place in the global batch), so a resumed run
# draws what the straight one did. The straight run also samples text every 7 steps
# (sample.every), the others never: sampling between steps must leave training as it
# was, bit for bit. The interrupted run's TensorBoard event files hold its
# metrics.csv (validation/tb_events.py). A checkpoint written in the background
# (checkpoint.async) resumes to the same final state.
source "$(dirname "$0")/../lib.sh"
BYTES=$SRC/data/brown/bytes
[ -f "$BYTES.train.tok" ] || { echo "skipped: no $BYTES.train.tok (run scripts/prepare_text.sh)"; exit 77; }
printf '[model]\nname = gpt\n' >"$WORK/gpt.in"
common=("$WORK/gpt.in" model.n_layer=2 model.n_head=2 model.n_embd=32 model.seq_len=16
  model.vocab_size=256 data.format=tokens data.train_tokens="$BYTES.train.tok"
  data.val_tokens="$BYTES.val.tok" data.val_limit=8 data.train_limit=0 train.batch_size=8
  train.micro_batches=2 train.steps=14 train.log_every=1 train.eval_every=7 optim.name=adamw
  optim.lr=3e-3 optim.schedule=cosine optim.warmup_steps=3 optim.weight_decay=0.1
  optim.clip_grad_norm=1.0 run.progress=off sample.length=0 model.embd_pdrop=0.1
  model.attn_pdrop=0.2 model.resid_pdrop=0.1)

run 2 "$WORK/straight.out" "$WORK/err" "${common[@]}" run.dir="$WORK/straight" \
  sample.every=7 sample.length=6 sample.prompt=The data.tokenizer=bytes
check "straight run: exit $RC $(tail -2 "$WORK/err")" [ "$RC" = 0 ]
check "it sampled at step 7 (and not at 14, its last, but after training)" [ \
  "$(grep -c '^sample at step 7 (greedy, 6 tokens' "$WORK/straight.out") \
$(grep -c '^sample at step 14' "$WORK/straight.out") \
$(grep -c '^sample (greedy, 6 tokens' "$WORK/straight.out")" = "1 0 1" ]
check "where its time went: $(grep '^time:' "$WORK/straight.out")" \
  time_accounted "$WORK/straight" "$WORK/straight.out" sampled
run 2 "$WORK/out" "$WORK/err" "${common[@]}" run.dir="$WORK/cut" run.stop_after_steps=5
check "interrupted at step 5: exit $RC (75 expected)" [ "$RC" = 75 ]
check "a session cut short says where its time went: $(grep -A2 '^run.stop' "$WORK/out")" \
  grep -q "^time: .* = set-up .* + steps .* + checkpoints .*, on rank 0$" "$WORK/out"
check "... and names the slowest of its 2 ranks, in ranks.csv too" [ \
  "$(grep -c '^slowest rank: [01] on .* over the 2 ranks doing its work' "$WORK/out") \
$(wc -l <"$WORK/cut/ranks.csv")" = "1 3" ]
run 2 "$WORK/out" "$WORK/err" "${common[@]}" run.dir="$WORK/cut"
check "resumed run: exit $RC $(tail -2 "$WORK/err")" [ "$RC" = 0 ]
check "resumed from step 5" grep -q "resum.*step 5\|step_00000005" "$WORK/out"
check "final parameters and AdamW state bit-identical (h5diff)" \
  h5_same "$WORK/straight/checkpoints/step_00000014.h5" "$WORK/cut/checkpoints/step_00000014.h5"
# every column but the timings (samples_per_s, elapsed_s)
check "metrics.csv rows identical" diff <(cut -d, -f1-7 "$WORK/straight/metrics.csv") \
  <(cut -d, -f1-7 "$WORK/cut/metrics.csv")
check "the interrupted run's TensorBoard files (two sessions) read as its metrics.csv, perplexity too" \
  "$PYTHON" validation/tb_events.py "$WORK/cut" --lm 16

# a checkpoint written in the background (checkpoint.async, at steps 3 and 6 before a
# stop at 8) resumes the same: from step 6, the straight run's final state
run 2 "$WORK/out" "$WORK/err" "${common[@]}" run.dir="$WORK/async" run.stop_after_steps=8 \
  checkpoint.async=true checkpoint.every=3 checkpoint.keep=0
check "async: stopped at step 8: exit $RC (75 expected)" [ "$RC" = 75 ]
check "async: step 6 written in the background" \
  grep -q "step_00000006.h5: .* MiB in .*, written in the background" "$WORK/out"
run 2 "$WORK/out" "$WORK/err" "${common[@]}" run.dir="$WORK/async2" \
  checkpoint.resume="$WORK/async/checkpoints/step_00000006.h5"
check "async: resumed from step 6: exit $RC $(tail -2 "$WORK/err")" [ "$RC" = 0 ]
check "async: final parameters and AdamW state bit-identical (h5diff)" \
  h5_same "$WORK/straight/checkpoints/step_00000014.h5" "$WORK/async2/checkpoints/step_00000014.h5"

# another layout: written on 2 ranks at step 5, continued on 1
run 2 "$WORK/out" "$WORK/err" "${common[@]}" run.dir="$WORK/moved" run.stop_after_steps=5
run 1 "$WORK/out" "$WORK/err" "${common[@]}" run.dir="$WORK/moved"
check "2 -> 1 ranks: exit $RC $(tail -2 "$WORK/err")" [ "$RC" = 0 ]
check "2 -> 1 ranks: the same loss curve" "$PYTHON" validation/compare_metrics.py \
  "$WORK/straight/metrics.csv" "$WORK/moved/metrics.csv" --rtol 1e-5 --min-steps 14

# the same run at other rank counts
for np in 1 4; do
  run $np "$WORK/out" "$WORK/err" "${common[@]}" run.dir="$WORK/np$np"
  check "$np ranks: exit $RC" [ "$RC" = 0 ]
done
check "1, 2 and 4 ranks: the same loss curve" "$PYTHON" validation/compare_metrics.py \
  "$WORK/straight/metrics.csv" "$WORK/np1/metrics.csv" "$WORK/np4/metrics.csv" --rtol 1e-5 --min-steps 14
check "no rank left running" no_leftover_ranks
finish
