#!/usr/bin/env bash
# tensorboard.sh: run.tensorboard. The event files under RUN/tensorboard, read as
# TensorBoard reads them (validation/tb_events.py: framing CRCs, protobuf, a
# session's START dropping the later steps of earlier sessions), hold metrics.csv's
# rows: after a run resumed from an earlier checkpoint than its last step (its first
# session's steps past that checkpoint replaced, as in metrics.csv) and with
# fp16-mixed's loss scale. run.tensorboard = false writes none; a tensorboard path
# that cannot be a directory stops the run with exit 74 and the key named.
source "$(dirname "$0")/../lib.sh"
require_data
base=(inputs/mnist.in run.progress=off train.steps=30 train.log_every=5 train.eval_every=10
  train.precision=fp16-mixed checkpoint.every=10 checkpoint.keep=0)

run 2 "$WORK/out" "$WORK/err" "${base[@]}" run.dir="$WORK/a"
check "first session: exit $RC $(tail -2 "$WORK/err")" [ "$RC" = 0 ]
check "one event file" [ "$(ls "$WORK/a/tensorboard" | grep -c '^events.out.tfevents\.')" = 1 ]
check "its scalars are metrics.csv's: $("$PYTHON" validation/tb_events.py "$WORK/a" --loss-scale 2>&1)" \
  "$PYTHON" validation/tb_events.py "$WORK/a" --loss-scale
# back to step 10: the second session logs steps 11-30 again
rm "$WORK/a/checkpoints/step_00000020.h5" "$WORK/a/checkpoints/step_00000030.h5"
# TensorBoard reads the files in name order, so the new session's must sort after the
# first one's whatever its name says: here the first is named as if written 5 s from
# now (an earlier session under a clock ahead of this one's; or one in the same second,
# where the pids' digits decide as text and 10012 sorts before 9987: mpi.chaos's quick
# restarts opened 2 pairs of its 17 files within one second), and no wait for another
# second
first=$(ls "$WORK/a/tensorboard")
ahead=events.out.tfevents.$(($(date +%s) + 5)).${first#events.out.tfevents.*.}
mv "$WORK/a/tensorboard/$first" "$WORK/a/tensorboard/$ahead"
run 2 "$WORK/out" "$WORK/err" "${base[@]}" run.dir="$WORK/a"
check "second session: exit $RC $(tail -2 "$WORK/err")" [ "$RC" = 0 ]
check "it resumed at step 10" grep -q "^resumed from .*: step 10," "$WORK/out"
check "two event files" [ "$(ls "$WORK/a/tensorboard" | grep -c '^events.out.tfevents\.')" = 2 ]
check "the second session's file sorts after the first's ($ahead): $(LC_ALL=C ls "$WORK/a/tensorboard" | tail -1)" \
  [ "$(LC_ALL=C ls "$WORK/a/tensorboard" | head -1)" = "$ahead" ]
check "read as TensorBoard does, they are metrics.csv: $("$PYTHON" validation/tb_events.py "$WORK/a" --loss-scale 2>&1)" \
  "$PYTHON" validation/tb_events.py "$WORK/a" --loss-scale

# (the sanitizer build leaves out the two start-ups below: their code is the above's)
if sanitized; then
  finish
  exit
fi
run 2 "$WORK/out" "$WORK/err" "${base[@]}" train.steps=5 run.dir="$WORK/off" run.tensorboard=false
check "run.tensorboard = false: exit $RC" [ "$RC" = 0 ]
check "run.tensorboard = false: no directory" [ ! -e "$WORK/off/tensorboard" ]

mkdir -p "$WORK/bad" && touch "$WORK/bad/tensorboard"
run 2 "$WORK/out" "$WORK/err" "${base[@]}" train.steps=5 run.dir="$WORK/bad"
check "tensorboard is a file: exit 74 ($RC)" [ "$RC" = 74 ]
check "tensorboard is a file: the key and the fix named: $(head -c 400 "$WORK/err")" \
  grep -q "\[run\] tensorboard.*cannot write TensorBoard's event file under '$WORK/bad/tensorboard'.*run.tensorboard = false" "$WORK/err"
check "no rank left running" no_leftover_ranks
finish
