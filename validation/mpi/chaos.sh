#!/usr/bin/env bash
# chaos.sh: a run preempted and crashed at random moments still finishes exactly. A
# small GPT with every feature that a resume must carry on at once (dropout,
# fp16-mixed with dynamic loss scaling whose scale changes every few steps, clipping,
# AdamW with a cosine schedule, evaluations, checkpoints every 3 steps written in the
# background and pruned to 2, best.h5, samples drawn every 7 steps at top-k 5,
# TensorBoard) runs at dp 2 and at pp 2 (2 micro-batches each) through a chain of
# interruptions drawn from a seed (chaos.py: SIGTERM to a rank or to all, SIGUSR1 or
# SIGTERM to mpirun, SIGKILL to a rank, to mpirun alone or to the whole job, each
# session's exit code and leftover ranks checked), each session started again with
# the same command (checkpoint.resume = auto), until the run ends. Against the same
# deck run straight: the final checkpoint and best.h5 bit-identical (h5diff), last.h5
# the final one, metrics.csv's rows identical but for samples_per_s and elapsed_s
# (wall time), the TensorBoard files read as that metrics.csv (validation/tb_events.py),
# summary.json's results the same, each sample drawn at a step the same text, the
# checkpoints that keep = 2 leaves and no temporary file left.
# A fixed seed, so that a failure reproduces (the same interruptions in the same
# order, at about the same steps: they wait for metrics.csv's rows, and the machine's
# speed moves them a little): 4044, whose 7 draws are the 7 kinds of interruption, one
# within the start-up (the ranks of a killed mpirun train on for about a second, so a
# chain may end before its last draws). TR_CHAOS_SEED draws others, TR_CHAOS_CUTS sets
# the interruptions a layout (7), TR_CHAOS_STEPS the run's steps (60),
# TR_CHAOS_LAYOUTS the layouts ("dp2 pp2"; also zero1: dp 2 with ZeRO 1) and
# TR_CHAOS_KEEP=DIR keeps a failure's files (TR_CHAOS_KEEP_ALWAYS=1: any run's), e.g.
#   TR_CHAOS_SEED=7 TR_CHAOS_CUTS=40 TR_CHAOS_STEPS=300 ctest -R mpi.chaos
source "$(dirname "$0")/../lib.sh"
BYTES=$SRC/data/brown/bytes
[ -f "$BYTES.train.tok" ] || { echo "skipped: no $BYTES.train.tok (run scripts/prepare_text.sh)"; exit 77; }
SEED=${TR_CHAOS_SEED:-4044}
CUTS=${TR_CHAOS_CUTS:-7}
STEPS=${TR_CHAOS_STEPS:-60}
sanitized && STEPS=30 CUTS=${TR_CHAOS_CUTS:-3}
echo "seed $SEED, $CUTS interruptions a layout, $STEPS steps"
printf '[model]\nname = gpt\n' >"$WORK/gpt.in"
common=("$WORK/gpt.in" model.n_layer=2 model.n_head=2 model.n_embd=32 model.seq_len=16
  model.vocab_size=256 data.format=tokens data.tokenizer=bytes data.train_tokens="$BYTES.train.tok"
  data.val_tokens="$BYTES.val.tok" data.val_limit=8 train.batch_size=8 train.micro_batches=2
  train.steps=$STEPS train.log_every=1 train.eval_every=5 train.precision=fp16-mixed
  train.loss_scale_window=8 optim.name=adamw optim.lr=3e-3 optim.schedule=cosine
  optim.warmup_steps=3 optim.weight_decay=0.1 optim.clip_grad_norm=1.0 model.embd_pdrop=0.1
  model.attn_pdrop=0.2 model.resid_pdrop=0.1 checkpoint.every=3 checkpoint.keep=2
  checkpoint.async=true checkpoint.best=true sample.every=7 sample.length=8 sample.top_k=5
  run.progress=off run.tensorboard=true system.peak_gflops=100)
ck() { printf '%s/checkpoints/step_%08d.h5' "$1" "$2"; } # ck RUN_DIR STEP
# samples RUN_OUT...: "step: text" of every sample drawn during training (a session
# cut off inside one leaves its header without a finished line: passed over), sorted
# bytewise (the texts are any bytes) for subset's comm
export LC_ALL=C
samples() {
  cat "$@" | awk '/^sample at step [0-9]+ / { s = $4; getline t; if (t != "") print s ": " t }' |
    sort -u
}
# subset A B: A has lines, each of them in B (both sorted)
subset() { [ -s "$1" ] && [ -z "$(comm -23 "$1" "$2")" ]; }
# results SUMMARY_JSON: its values that do not depend on the wall time
results() {
  "$PYTHON" -c "import json, sys; s = json.load(open(sys.argv[1])); print(*(s[k] for k in \
('steps', 'epochs', 'test_loss', 'test_accuracy', 'best_val_loss', 'best_val_step', \
'skipped_steps', 'loss_scale', 'val_perplexity', 'unigram_perplexity')))" "$1"
}

for layout in ${TR_CHAOS_LAYOUTS:-dp2 pp2}; do
  args=("${common[@]}")
  case $layout in
  dp2) ;;
  pp2) args+=(parallel.pp=2) ;;
  zero1) args+=(parallel.zero=1) ;; # dp 2, the optimizer state sharded
  *) echo "TR_CHAOS_LAYOUTS: $layout is none of dp2, pp2, zero1" >&2; exit 2 ;;
  esac
  S=$WORK/$layout.straight C=$WORK/$layout.chaos
  t0=$EPOCHREALTIME
  run 2 "$S.out" "$S.err" "${args[@]}" run.dir="$S"
  span=$(echo "$EPOCHREALTIME - $t0" | bc)
  check "$layout: straight run: exit $RC $(tail -2 "$S.err")" [ "$RC" = 0 ]
  check "$layout: the straight run's loss scale went down and up: $(cut -d, -f10 "$S/metrics.csv" | uniq | tr '\n' ' ')" \
    [ "$(cut -d, -f10 "$S/metrics.csv" | uniq | wc -l)" -ge 4 ]
  mkdir -p "$C.log"
  timeout -k 5 600 "$PYTHON" "$SRC/validation/mpi/chaos.py" "$SEED" "$CUTS" "$span" "$C.log/s" \
    -- mpirun -np 2 "$TRAINER" "${args[@]}" run.dir="$C" >"$WORK/chain" 2>&1
  RC=$?
  sed "s/^/$layout: /" "$WORK/chain"
  check "$layout: the chain of interrupted sessions ran to the end (exit $RC)" [ "$RC" = 0 ]
  if [ "$RC" != 0 ]; then # the failed session's output
    last=$(ls "$C.log" | sed -n 's/^s\.\([0-9]*\)\.out$/\1/p' | sort -n | tail -1)
    tail -n 5 "$C.log/s.$last.out" "$C.log/s.$last.err" | sed "s/^/$layout: /"
    continue
  fi
  check "$layout: final parameters and optimizer state bit-identical (h5diff)" \
    h5_same "$(ck "$S" $STEPS)" "$(ck "$C" $STEPS)"
  check "$layout: best.h5 bit-identical" \
    h5_same "$S/checkpoints/best.h5" "$C/checkpoints/best.h5"
  # (a stop's checkpoint, off the every-3 grid, may be one of the 2 that keep leaves)
  check "$layout: the checkpoint directory holds best.h5, last.h5 and 2 step files, the final one among them: $(ls -A "$C/checkpoints" | tr '\n' ' ')" \
    [ "$(ls -A "$C/checkpoints" | grep -v '^step_' | tr '\n' ' ')$(ls "$C/checkpoints" | grep -c '^step_') $(ls "$C/checkpoints" | grep -c "^$(basename "$(ck . $STEPS)")$")" = ".lock best.h5 last.h5 2 1" ]
  check "$layout: last.h5 names the final checkpoint" \
    [ "$(readlink "$C/checkpoints/last.h5")" = "$(basename "$(ck . $STEPS)")" ]
  # every column but samples_per_s and elapsed_s (8 and 9: wall time)
  diff <(cut -d, -f1-7,10 "$S/metrics.csv") <(cut -d, -f1-7,10 "$C/metrics.csv") >"$WORK/rows"
  check "$layout: metrics.csv rows identical but for the wall-time columns: $(head -n 6 "$WORK/rows")" \
    [ ! -s "$WORK/rows" ]
  check "$layout: TensorBoard's files read as metrics.csv: $("$PYTHON" validation/tb_events.py \
"$C" --lm 16 --loss-scale 2>&1)" "$PYTHON" validation/tb_events.py "$C" --lm 16 --loss-scale
  check "$layout: summary.json's results: $(results "$C/summary.json")" \
    [ "$(results "$S/summary.json")" = "$(results "$C/summary.json")" ]
  samples "$S.out" >"$WORK/samples.straight"
  samples "$C.log"/s.*.out >"$WORK/samples.chaos"
  check "$layout: the samples drawn during training ($(wc -l <"$WORK/samples.chaos") steps) are the straight run's: $(comm -23 "$WORK/samples.chaos" "$WORK/samples.straight")" \
    subset "$WORK/samples.chaos" "$WORK/samples.straight"
  check "$layout: no temporary file left in the run directory: $(find "$C" -name '*.tmp')" \
    [ -z "$(find "$C" -name '*.tmp')" ]
done
check "no rank left running" no_leftover_ranks
# TR_CHAOS_KEEP=DIR: a failed test's runs and sessions' output copied there
[ "${TR_CHAOS_KEEP_ALWAYS:-$FAILED}" != 0 ] && [ -n "${TR_CHAOS_KEEP:-}" ] && cp -r "$WORK" "$TR_CHAOS_KEEP" &&
  echo "its runs and sessions' output: $TR_CHAOS_KEEP"
finish
