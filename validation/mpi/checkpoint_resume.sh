#!/usr/bin/env bash
# checkpoint_resume.sh: a run interrupted mid-epoch and resumed ends bit-identical to
# the run done straight (h5diff of the final checkpoints, metrics.csv rows); a
# checkpoint resumes at another rank count within the any-layout tolerance; a
# signal to one rank checkpoints at the next step boundary and exits 75; keep and
# every_minutes write and keep the checkpoints they say, and last.h5 names the newest;
# checkpoints written in the background (checkpoint.async) resume the same; a run
# made longer from a checkpoint before optim.schedule = wsd's decay ends as if run
# straight.
source "$(dirname "$0")/../lib.sh"
require_data
RUN_TIMEOUT=300
# the sanitizer build runs shorter (it checks memory; the curves are the release
# build's): still mid-epoch (62 steps per epoch at batch 128), still past an epoch.
# The signals land after the 20 logged steps the test waits for (at steps 25 to 41 of
# SIG_STEPS here, 2026-11-29): 150 leave room, and past two epochs.
STEPS=100 CUT=45 SIG_STEPS=150
sanitized && STEPS=70 CUT=25 SIG_STEPS=60 # room to stop after the 20 logged steps it waits for
ck() { printf '%s/checkpoints/step_%08d.h5' "$1" "$2"; } # ck RUN_DIR STEP: its checkpoint
steps_in() { ls "$1/checkpoints" | grep '^step_' | tr '\n' ' '; } # steps_in RUN_DIR: its step files
common=(inputs/mnist.in train.steps=$STEPS train.log_every=1 run.progress=off)

# 1. straight, and interrupted at step CUT (mid-epoch) then resumed
run 4 "$WORK/out" "$WORK/err" "${common[@]}" run.dir="$WORK/straight"
check "straight run: $RC $(cat "$WORK/err")" [ "$RC" = 0 ]
run 4 "$WORK/out" "$WORK/err" "${common[@]}" run.dir="$WORK/cut" run.stop_after_steps=$CUT
check "interrupted run exits 75 (got $RC)" [ "$RC" = 75 ]
check "interrupted run wrote step $CUT" [ -f "$(ck "$WORK/cut" $CUT)" ]
run 4 "$WORK/out" "$WORK/err" "${common[@]}" run.dir="$WORK/cut"
check "resumed run: $RC $(cat "$WORK/err")" [ "$RC" = 0 ]
check "resumed run says so" grep -q "resumed from .*$(basename "$(ck . $CUT)"): step $CUT" "$WORK/out"
check "final parameters and optimizer state bit-identical (h5diff)" \
  h5_same "$(ck "$WORK/straight" $STEPS)" "$(ck "$WORK/cut" $STEPS)"
check "metrics.csv train rows identical" "$PYTHON" validation/compare_metrics.py --exact \
  "$WORK/straight/metrics.csv" "$WORK/cut/metrics.csv"
check "metrics.csv has no duplicate steps" bash -c \
  "[ \$(grep -c ',train,' '$WORK/cut/metrics.csv') = $STEPS ]"

# 2. the same with AdamW and the CNN, resumed at the same layout
adam=(inputs/mnist.in model.name=cnn optim.name=adamw optim.lr=0.001 train.steps=40
  train.log_every=1 run.progress=off)
run 2 "$WORK/out" "$WORK/err" "${adam[@]}" run.dir="$WORK/adam_straight"
run 2 "$WORK/out" "$WORK/err" "${adam[@]}" run.dir="$WORK/adam_cut" run.stop_after_steps=17
check "adamw cnn interrupted exits 75" [ "$RC" = 75 ]
run 2 "$WORK/out" "$WORK/err" "${adam[@]}" run.dir="$WORK/adam_cut"
check "adamw cnn: Adam moments and parameters bit-identical after resume" \
  h5_same "$WORK/adam_straight/checkpoints/step_00000040.h5" "$WORK/adam_cut/checkpoints/step_00000040.h5"

# 3. written at 4 ranks, resumed at 2 and at 8: same curve within the layout tolerance
for np in 2 8; do
  cp -r "$WORK/cut" "$WORK/relayout$np"
  rm "$(ck "$WORK/relayout$np" $STEPS)"
  run "$np" "$WORK/out" "$WORK/err" "${common[@]}" run.dir="$WORK/relayout$np" \
    checkpoint.resume="$(ck "$WORK/cut" $CUT)"
  check "resume at $np ranks: $RC $(cat "$WORK/err")" [ "$RC" = 0 ]
  check "resume at $np ranks says where it was written" grep -q "written at 4 ranks" "$WORK/out"
  check "resume at $np ranks continues the curve" "$PYTHON" validation/compare_metrics.py \
    --rtol 1e-5 "$WORK/straight/metrics.csv" "$WORK/relayout$np/metrics.csv"
done

# 4. a signal (USR1, USR2, TERM) to one rank: all ranks checkpoint at the next step boundary, exit 75,
#    and the resumed run ends where the straight one does
sig=(inputs/mnist.in model.name=cnn train.steps=$SIG_STEPS train.log_every=1 run.progress=off)
run 4 "$WORK/out" "$WORK/err" "${sig[@]}" run.dir="$WORK/sig_straight"
for s in USR1 USR2 TERM; do
  dir=$WORK/sig_$s
  timeout 120 mpirun -np 4 "$TRAINER" "${sig[@]}" run.dir="$dir" >"$WORK/sout" 2>"$WORK/serr" &
  launcher=$!
  for _ in $(seq 1 600); do # wait until training is under way
    [ -f "$dir/metrics.csv" ] && [ "$(wc -l <"$dir/metrics.csv")" -gt 20 ] && break
    sleep 0.05
  done
  victim=$(trainer_pids | sed -n 3p)
  kill -"$s" "$victim"
  sleep 0.01
  kill -"$s" "$victim" 2>/dev/null # a second signal while it writes changes nothing
  wait "$launcher"
  code=$?
  check "SIG$s to one rank: exit 75 (got $code) $(cat "$WORK/serr")" [ "$code" = 75 ]
  check "SIG$s: says it checkpointed" grep -q "SIG$s: checkpointed at step" "$WORK/sout"
  step=$(sed -n "s/.*checkpointed at step \([0-9]*\).*/\1/p" "$WORK/sout")
  check "SIG$s: stopped early (step $step of $SIG_STEPS)" [ -n "$step" ] && [ "${step:-$SIG_STEPS}" -lt $SIG_STEPS ]
  check "SIG$s: no temporary file left" bash -c "! ls '$dir'/checkpoints/*.tmp 2>/dev/null"
  check "no rank left running" no_leftover_ranks
  run 4 "$WORK/out" "$WORK/err" "${sig[@]}" run.dir="$dir"
  check "SIG$s: resumed run finishes: $RC" [ "$RC" = 0 ]
  check "SIG$s: final state bit-identical to the straight run" \
    h5_same "$(ck "$WORK/sig_straight" $SIG_STEPS)" "$(ck "$dir" $SIG_STEPS)"
done

# 5. keep: only the newest N remain
run 2 "$WORK/out" "$WORK/err" "${common[@]}" run.dir="$WORK/keep" checkpoint.every=10 checkpoint.keep=2
newest="$(basename "$(ck . $((STEPS - 10)))") $(basename "$(ck . $STEPS)") "
check "keep=2 keeps the two newest" [ "$(steps_in "$WORK/keep")" = "$newest" ]
check "last.h5 names the newest: $(readlink "$WORK/keep/checkpoints/last.h5")" \
  [ "$(readlink "$WORK/keep/checkpoints/last.h5")" = "$(basename "$(ck . $STEPS)")" ]
check "last.h5 opens as the newest checkpoint" \
  [ "$(h5dump -a /step "$WORK/keep/checkpoints/last.h5" | grep -o '(0): [0-9]*')" = "(0): $STEPS" ]

# 6. every_minutes: a period shorter than any step (6 us) writes one after every step;
#    ten minutes, none before the end
for m in 1e-7 10; do
  run 2 "$WORK/out" "$WORK/err" inputs/mnist.in train.steps=4 run.progress=off \
    checkpoint.every_minutes=$m checkpoint.keep=0 run.dir="$WORK/minutes$m"
  check "every_minutes=$m: exit $RC $(cat "$WORK/err")" [ "$RC" = 0 ]
done
check "every_minutes=1e-7: a checkpoint after each of the 4 steps" \
  [ "$(steps_in "$WORK/minutes1e-7")" = "$(for s in 1 2 3 4; do basename "$(ck . $s)"; done | tr '\n' ' ')" ]
check "every_minutes=10: only the final one" \
  [ "$(steps_in "$WORK/minutes10")" = "$(basename "$(ck . 4)") " ]
# 7. checkpoint.async: periodic checkpoints written in the background appear whole,
#    keep and last.h5 as without it, no temporary file left; a stop finishes the one
#    under way before its own; a resume from one ends bit-identical to the straight run
A=$((CUT - CUT % 10)) # the last periodic one before the stop at CUT
run 4 "$WORK/out" "$WORK/err" "${common[@]}" run.dir="$WORK/async" run.stop_after_steps=$CUT \
  checkpoint.async=true checkpoint.every=10 checkpoint.keep=2
check "async: stopped at $CUT, exit 75 (got $RC) $(cat "$WORK/err")" [ "$RC" = 75 ]
check "async: says it wrote step $A in the background" \
  grep -q "checkpoint .*$(basename "$(ck . $A)"): .* MiB in .*, written in the background" "$WORK/out"
check "async: keep=2 keeps the two newest: $(steps_in "$WORK/async")" \
  [ "$(steps_in "$WORK/async")" = "$(basename "$(ck . $A)") $(basename "$(ck . $CUT)") " ]
check "async: last.h5 names the newest" \
  [ "$(readlink "$WORK/async/checkpoints/last.h5")" = "$(basename "$(ck . $CUT)")" ]
check "async: no temporary file left" bash -c "! ls '$WORK/async'/checkpoints/*.tmp 2>/dev/null"
run 4 "$WORK/out" "$WORK/err" "${common[@]}" run.dir="$WORK/async2" \
  checkpoint.resume="$(ck "$WORK/async" $A)"
check "async: resumed from step $A: $RC $(cat "$WORK/err")" \
  grep -q "resumed from .*$(basename "$(ck . $A)"): step $A" "$WORK/out"
check "async: final state bit-identical to the straight run" \
  h5_same "$(ck "$WORK/straight" $STEPS)" "$(ck "$WORK/async2" $STEPS)"
# 8. a run made longer from a checkpoint (optim.schedule = wsd): 30 steps whose last 10
#    decay, continued from step 15 (before that decay) as a run of 40, ends bit-identical
#    to the run of 40 done straight: the stable rate, then its own decay at its new end
wsd=(inputs/mnist.in optim.schedule=wsd optim.decay_steps=10 optim.warmup_steps=3
  optim.min_lr=0.001 train.log_every=1 run.progress=off)
run 2 "$WORK/out" "$WORK/err" "${wsd[@]}" train.steps=40 run.dir="$WORK/wsd40"
check "wsd: 40 steps straight: $RC $(cat "$WORK/err")" [ "$RC" = 0 ]
run 2 "$WORK/out" "$WORK/err" "${wsd[@]}" train.steps=30 checkpoint.every=15 run.dir="$WORK/wsd30"
check "wsd: 30 steps: $RC $(cat "$WORK/err")" [ "$RC" = 0 ]
run 2 "$WORK/out" "$WORK/err" "${wsd[@]}" train.steps=40 run.dir="$WORK/wsd30to40" \
  checkpoint.resume="$(ck "$WORK/wsd30" 15)"
check "wsd: 30 steps' step 15 continued to 40: $RC $(cat "$WORK/err")" \
  grep -q "resumed from .*$(basename "$(ck . 15)"): step 15" "$WORK/out"
check "wsd: ... says the steps differ" grep -q "\[train\] steps = 40 (checkpoint: 30)" "$WORK/out"
check "wsd: ... and ends bit-identical to the 40 steps done straight" \
  h5_same "$(ck "$WORK/wsd40" 40)" "$(ck "$WORK/wsd30to40" 40)"
lr_at() { awk -F, -v s="$2" '$3 == "train" && $1 == s {print $6}' "$1/metrics.csv"; } # RUN STEP
check "wsd: the rate held (40 steps: $(lr_at "$WORK/wsd40" 25) at step 25 and 30)" \
  [ "$(lr_at "$WORK/wsd40" 25)" = "$(lr_at "$WORK/wsd40" 30)" ]
check "wsd: ... where the 30 steps' run had decayed ($(lr_at "$WORK/wsd30" 30) at step 30)" \
  awk "BEGIN {exit !($(lr_at "$WORK/wsd30" 30) < $(lr_at "$WORK/wsd40" 30))}"
finish
