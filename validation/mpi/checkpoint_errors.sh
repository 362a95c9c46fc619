#!/usr/bin/env bash
# checkpoint_errors.sh: nothing lost, nothing trusted blindly. A kill -9 during a
# write leaves the previous checkpoint as the newest valid one; truncated, corrupt,
# mismatched and foreign files are refused with the file and the problem named, and
# resume = auto falls back to an older valid one; among 5000 files, resume = auto
# finds the newest and one prune leaves the newest checkpoint.keep; a branch killed
# as last.h5 moves resumes from its own checkpoint; an unwritable or
# full checkpoint directory stops training (exit 74) without harming the previous
# checkpoint.
source "$(dirname "$0")/../lib.sh"
require_data
RUN_TIMEOUT=200
base=(inputs/mnist.in train.steps=30 run.progress=off)

# a run with checkpoints at 10, 20 and 30
run 2 "$WORK/out" "$WORK/err" "${base[@]}" run.dir="$WORK/good" checkpoint.every=10 checkpoint.keep=0
check "reference run: $RC" [ "$RC" = 0 ]
ck=$WORK/good/checkpoints

# expect_resume NAME CODE PATTERN FILE [overrides]: an explicit resume must fail clearly
expect_resume() {
  local name=$1 code=$2 pattern=$3 file=$4; shift 4
  run 2 "$WORK/out" "$WORK/err" "${base[@]}" run.dir="$WORK/r_$name" checkpoint.resume="$file" "$@"
  check "$name: exit $RC, expected $code" [ "$RC" = "$code" ]
  check "$name: message '$pattern' in: $(cat "$WORK/err")" grep -qE -- "$pattern" "$WORK/err"
  check "$name: printed once" [ "$(grep -cE -- "$pattern" "$WORK/err")" = 1 ]
  check "$name: no rank left" no_leftover_ranks
}

# a directory (the checkpoint directory itself, a likely slip): one line, not MPI-IO's
# errors from every rank
expect_resume directory 66 "checkpoint '$ck' is a directory: name a checkpoint file" "$ck"

# truncated
cp "$ck/step_00000030.h5" "$WORK/trunc.h5"
truncate -s $(( $(stat -c %s "$WORK/trunc.h5") / 2 )) "$WORK/trunc.h5"
expect_resume truncated 65 "'$WORK/trunc.h5' is not a readable checkpoint: .*truncated" "$WORK/trunc.h5"

# one flipped byte inside /model/fc1/weight
cp "$ck/step_00000030.h5" "$WORK/flip.h5"
off=$("$PYTHON" -c "import h5py; print(h5py.File('$WORK/flip.h5','r')['/model/fc1/weight'].id.get_offset() + 4000)")
"$PYTHON" -c "
f = open('$WORK/flip.h5', 'r+b'); f.seek($off); b = f.read(1); f.seek($off); f.write(bytes([b[0] ^ 0x10]))"
expect_resume flipped-byte 65 "'$WORK/flip.h5': checksum mismatch in /model/fc1/weight: the file is corrupt" "$WORK/flip.h5"

# other model, other shapes, other optimizer
expect_resume wrong-model 65 "was written for model 'mlp'; this deck trains 'cnn'" "$ck/step_00000030.h5" model.name=cnn
expect_resume wrong-shape 65 "/model/fc1/weight has shape \[256, 784\], the model has \[128, 784\]" "$ck/step_00000030.h5" model.hidden=128,256
# a deeper model's checkpoint: this one's tensors all in it, same shapes (fc1, and fc2
# of 256 x 256 as the classes) and one layer more (fc3), which it would have lost
expect_resume fewer-layers 65 "holds 6 parameter tensors and this model 4: written for another model" "$ck/step_00000030.h5" model.hidden=256 model.classes=256
expect_resume wrong-optimizer 65 "holds sgd optimizer state; this deck uses adamw" "$ck/step_00000030.h5" optim.name=adamw

# foreign files
"$PYTHON" -c "import h5py, numpy; h5py.File('$WORK/foreign.h5','w')['x'] = numpy.zeros(3)"
expect_resume foreign-hdf5 65 "is an HDF5 file but not a trainer checkpoint" "$WORK/foreign.h5"
echo "hello" >"$WORK/text.h5"
expect_resume not-hdf5 65 "'$WORK/text.h5' is not a readable checkpoint" "$WORK/text.h5"
expect_resume missing 66 "cannot read checkpoint '$WORK/nope.h5': No such file" "$WORK/nope.h5"

# resume = auto falls back past a corrupt newest checkpoint, and says so
mkdir -p "$WORK/fallback"
cp -r "$WORK/good/checkpoints" "$WORK/fallback/"
cp "$WORK/flip.h5" "$WORK/fallback/checkpoints/step_00000030.h5"
run 2 "$WORK/out" "$WORK/err" inputs/mnist.in train.steps=40 run.progress=off run.dir="$WORK/fallback"
check "auto fallback: exit $RC" [ "$RC" = 0 ]
check "auto fallback: warns about the bad file" grep -q "skipping checkpoint: .*step_00000030.h5': checksum mismatch" "$WORK/out"
check "auto fallback: resumes from step 20" grep -q "resumed from .*step_00000020.h5: step 20" "$WORK/out"

# thousands of checkpoint files (checkpoint.keep = 0 for a long run): resume = auto
# finds the newest among all of them, and pruning keeps exactly the newest
# checkpoint.keep of all of them. Files named unlike a checkpoint are left alone.
many=$WORK/many/checkpoints
mkdir -p "$many"
(cd "$many" && for i in $(seq 1 5000); do printf '' >"$(printf 'step_%08d.h5' "$i")"; done)
touch "$many/step_+0000007.h5" "$many/step_7.h5" "$many/step_00000007.h5.bak"
cp "$ck/step_00000030.h5" "$many/step_00005990.h5"
"$PYTHON" -c "import h5py; h5py.File('$many/step_00005990.h5', 'r+').attrs['step'] = 5990"
run 2 "$WORK/out" "$WORK/err" inputs/mnist.in train.steps=5990 run.progress=off \
  run.dir="$WORK/many" checkpoint.keep=0
check "5000 checkpoints: exit $RC $(cat "$WORK/err")" [ "$RC" = 0 ]
check "5000 checkpoints: auto resumes from the newest" grep -q "resumed from .*step_00005990.h5: step 5990" "$WORK/out"
# one write, so one prune must do it
run 2 "$WORK/out" "$WORK/err" inputs/mnist.in train.steps=6000 run.progress=off \
  run.dir="$WORK/many" checkpoint.every=10 checkpoint.keep=2 checkpoint.resume="$many/step_00005990.h5"
check "5000 checkpoints, resumed to step 6000: exit $RC $(cat "$WORK/err")" [ "$RC" = 0 ]
left=$(LC_ALL=C ls "$many" | tr '\n' ' ')
check "5000 checkpoints: keep = 2 leaves the two newest and the other names: $(echo "$left" | cut -c1-200)" \
  [ "$left" = "last.h5 step_+0000007.h5 step_00000007.h5.bak step_00005990.h5 step_00006000.h5 step_7.h5 " ]
check "5000 checkpoints: last.h5 names the newest" [ "$(readlink "$many/last.h5")" = step_00006000.h5 ]

# another model's later checkpoints in the same directory (resume = auto skips them as
# another size): pruning to checkpoint.keep counts only this run's steps, so the
# checkpoint just written stays, last.h5 names it, and the other run's are left alone
run 2 "$WORK/out" "$WORK/err" "${base[@]}" run.dir="$WORK/foreign" train.steps=6 \
  checkpoint.every=2 checkpoint.keep=2
run 2 "$WORK/out" "$WORK/err" "${base[@]}" run.dir="$WORK/foreign" train.steps=3 \
  checkpoint.keep=2 model.hidden=16
check "another model's later checkpoints: exit $RC $(cat "$WORK/err")" [ "$RC" = 0 ]
check "another model's later checkpoints: skipped" grep -q "warning: skipping checkpoint" "$WORK/out"
left=$(LC_ALL=C ls "$WORK/foreign/checkpoints" | tr '\n' ' ')
check "another model's later checkpoints: the new one kept beside them: $left" \
  [ "$left" = "last.h5 step_00000003.h5 step_00000004.h5 step_00000006.h5 " ]
check "another model's later checkpoints: last.h5 names the new one" \
  [ "$(readlink "$WORK/foreign/checkpoints/last.h5")" = step_00000003.h5 ]

# a branch: resumed from an older checkpoint of the directory and stopped (75), the
# run's message says how to go on from there, and resume = auto does, from the file
# last.h5 names, not from the later step files of the run it branched from
bdir=$WORK/branch
run 2 "$WORK/out" "$WORK/err" "${base[@]}" run.dir="$bdir" checkpoint.every=10 checkpoint.keep=0 \
  checkpoint.best=true
run 2 "$WORK/out" "$WORK/err" "${base[@]}" run.dir="$bdir" checkpoint.every=10 checkpoint.keep=0 \
  checkpoint.best=true checkpoint.resume="$bdir/checkpoints/step_00000010.h5" run.stop_after_steps=5
check "branch: stopped with 75 (got $RC)" [ "$RC" = 75 ]
check "branch: best.h5 named as the other branch's" grep -q "warning: $bdir/checkpoints/best.h5 holds step 30's model, past the step resumed from: written after the checkpoint resumed from (by this run before it stopped, or by the run this one branched from)" "$WORK/out"
check "branch: the stop says to resume with auto" grep -q "checkpointed at step 15, .*exiting with 75 (to resume, run again with checkpoint.resume = auto: resume = $bdir/checkpoints/step_00000010.h5 would start it over)" "$WORK/out"
check "branch: last.h5 names its checkpoint" [ "$(readlink "$bdir/checkpoints/last.h5")" = step_00000015.h5 ]
run 2 "$WORK/out" "$WORK/err" "${base[@]}" run.dir="$bdir" checkpoint.every=10 checkpoint.keep=0
check "branch: auto resumes from last.h5's step 15, not step 30 of the run it left: $(grep resumed "$WORK/out")" \
  grep -q "resumed from $bdir/checkpoints/step_00000015.h5: step 15" "$WORK/out"

# a branch with keep = 1, its rank 0 killed as last.h5 is pointed at its second
# checkpoint (a node failing there): last.h5 must still name a checkpoint of the
# branch, or resume = auto takes the newest step file, step 30 of the run it left
if sanitized; then
  echo "skipped: a crash at last.h5's link (a preload library under AddressSanitizer)"
else
  kdir=$WORK/branch_keep1
  mkdir -p "$kdir" && cp -r "$WORK/good/checkpoints" "$kdir/"
  LD_PRELOAD="$FAULT_PRELOAD" TR_TEST_CRASH_SYMLINK_RANK=0 TR_TEST_CRASH_SYMLINK_TO=step_00000014.h5 \
    run 2 "$WORK/out" "$WORK/err" "${base[@]}" run.dir="$kdir" checkpoint.every=2 \
    checkpoint.keep=1 checkpoint.resume="$kdir/checkpoints/step_00000010.h5"
  check "branch, keep = 1: killed as last.h5 was pointed at step 14 (exit $RC), its file written" \
    [ "$RC" != 0 -a -f "$kdir/checkpoints/step_00000014.h5" ]
  run 2 "$WORK/out" "$WORK/err" "${base[@]}" run.dir="$kdir" checkpoint.every=2 \
    checkpoint.keep=1 run.stop_after_steps=1
  check "branch, keep = 1: auto resumes from the branch's own checkpoint, not step 30 of the run it left: $(grep ^resumed "$WORK/out")" \
    grep -qE "resumed from $kdir/checkpoints/step_0000001[24].h5: step 1[24]," "$WORK/out"
  # a resumed run whose metrics.csv cannot be read (EIO on rank 0: a stale file system,
  # a failing disk): 74, and the file's rows of the steps resumed kept, not replaced by
  # a fresh file's header
  edir=$WORK/metrics_eio
  mkdir -p "$edir" && cp -r "$WORK/good/checkpoints" "$WORK/good/metrics.csv" "$edir/"
  LD_PRELOAD="$FAULT_PRELOAD" TR_TEST_EIO_READ_RANK=0 TR_TEST_EIO_READ_NAME=/metrics.csv \
    run 2 "$WORK/out" "$WORK/err" "${base[@]}" run.dir="$edir" train.steps=40
  check "unreadable metrics.csv on resume: exit $RC, expected 74" [ "$RC" = 74 ]
  check "unreadable metrics.csv on resume: said: $(cat "$WORK/err")" \
    grep -q "cannot continue '$edir/metrics.csv': Input/output error" "$WORK/err"
  check "unreadable metrics.csv on resume: its rows kept" cmp -s "$WORK/good/metrics.csv" \
    "$edir/metrics.csv"
fi

# a directory another run is using (its rank 0 holds DIR/.lock: this shell holds it
# here): refused with 64, naming the holder, and nothing of the other run's touched,
# its unfinished checkpoint write included; checkpoint.dir shared by two run
# directories likewise; the run directory named as its own checkpoint.dir is not
# "another run"
mkdir -p "$WORK/busy/checkpoints" "$WORK/busy_ck"
touch "$WORK/busy/checkpoints/step_00000040.h5.tmp" "$WORK/busy_ck/step_00000040.h5.tmp"
for d in "$WORK/busy" "$WORK/busy_ck"; do
  exec {held}>"$d/.lock"
  flock -n "$held" && echo "pid 4242 on elsewhere" >&"$held"
  if [ "$d" = "$WORK/busy" ]; then
    what="run directory"; over=(run.dir="$d")
  else
    what="checkpoint directory"; over=(run.dir="$WORK/busy_run" checkpoint.dir="$d")
  fi
  run 2 "$WORK/out" "$WORK/err" "${base[@]}" "${over[@]}"
  exec {held}>&-
  check "$what in use: exit $RC, expected 64" [ "$RC" = 64 ]
  check "$what in use: the holder named in: $(cat "$WORK/err")" \
    grep -q "the $what '$d' is in use by another run (pid 4242 on elsewhere)" "$WORK/err"
  check "$what in use: printed once" [ "$(grep -c "is in use by another run" "$WORK/err")" = 1 ]
  check "$what in use: the other run's unfinished write left alone" \
    bash -c "ls '$d'/step_00000040.h5.tmp '$d'/checkpoints/step_00000040.h5.tmp 2>/dev/null | grep -q ."
  check "$what in use: no rank left" no_leftover_ranks
done
check "run directory in use: nothing written there" \
  [ ! -e "$WORK/busy/metrics.csv" ]
run 2 "$WORK/out" "$WORK/err" "${base[@]}" train.steps=2 run.dir="$WORK/self" checkpoint.dir="$WORK/self"
check "checkpoint.dir = run.dir: exit $RC $(cat "$WORK/err")" [ "$RC" = 0 ]
check "checkpoint.dir = run.dir: its checkpoint written" [ -f "$WORK/self/step_00000002.h5" ]

# kill -9 during a checkpoint write: the previous checkpoint stays the newest valid one
big=(inputs/mnist.in model.hidden=2048,2048 train.steps=400 checkpoint.every=3 checkpoint.keep=0 run.progress=off)
dir=$WORK/killed
timeout 200 mpirun -np 2 "$TRAINER" "${big[@]}" run.dir="$dir" >"$WORK/kout" 2>&1 &
launcher=$!
caught=0
for _ in $(seq 1 6000); do
  if ls "$dir"/checkpoints/*.h5.tmp >/dev/null 2>&1 && ls "$dir"/checkpoints/step_*.h5 >/dev/null 2>&1; then
    pids=$(trainer_pids)
    # shellcheck disable=SC2086 # one pid a word
    [ -n "$pids" ] && kill -9 $pids && caught=1
    break
  fi
  sleep 0.005
done
wait "$launcher" 2>/dev/null
check "kill -9 landed during a write" [ "$caught" = 1 ]
newest=$(ls "$dir"/checkpoints/step_*.h5 | tail -1)
# resume = auto takes the checkpoint last.h5 names first: a kill that lands after a
# write's rename but before last.h5 moves to it leaves last.h5 at the one before
# (by design: see train_checkpoint.c), and the run resumes from that
if [ -e "$dir/checkpoints/last.h5" ]; then
  newest=$dir/checkpoints/$(readlink "$dir/checkpoints/last.h5")
fi
run 2 "$WORK/out" "$WORK/err" "${big[@]}" train.steps=$(( $(basename "$newest" .h5 | sed 's/step_0*//') + 1 )) \
  run.dir="$dir" checkpoint.every=0
check "after kill -9: resumes from the newest complete checkpoint ($(basename "$newest")): $(cat "$WORK/err")" \
  grep -q "resumed from $newest" "$WORK/out"
check "after kill -9: the stale temporary file is cleaned up" bash -c "! ls '$dir'/checkpoints/*.tmp 2>/dev/null"

# unwritable checkpoint directory: exit 74 at the first write, clearly
run 2 "$WORK/out" "$WORK/err" "${base[@]}" run.dir="$WORK/unwritable" checkpoint.dir=/proc/nope
check "unwritable dir: exit 74 (got $RC)" [ "$RC" = 74 ]
check "unwritable dir: message: $(cat "$WORK/err")" grep -q "cannot create the checkpoint directory '/proc/nope'" "$WORK/err"

# a checkpoint directory already full at the start: exit 74 as the ranks check that
# they see it, and the file rank 0 could not fill for that check is not left there
if mkdir -p "$WORK/nospace" && mount -t tmpfs -o size=64k tmpfs "$WORK/nospace" 2>/dev/null; then
  dd if=/dev/zero of="$WORK/nospace/fill" bs=1k count=64 2>/dev/null
  run 2 "$WORK/out" "$WORK/err" "${base[@]}" run.dir="$WORK/nospace_run" checkpoint.dir="$WORK/nospace"
  check "checkpoint directory full at the start: exit 74 (got $RC)" [ "$RC" = 74 ]
  check "checkpoint directory full at the start: reported: $(cat "$WORK/err")" grep -q \
    "cannot write in the checkpoint directory '$WORK/nospace': No space left on device" "$WORK/err"
  check "checkpoint directory full at the start: no probe file left: $(ls -A "$WORK/nospace")" \
    bash -c "! ls -A '$WORK/nospace' | grep -q trainer-probe"
  umount "$WORK/nospace"
else
  echo "skipped: checkpoint directory full at the start (cannot mount a small tmpfs here)"
fi
# a full disk during a write: exit 74, and the previous checkpoint is intact
if mkdir -p "$WORK/small" && mount -t tmpfs -o size=5m tmpfs "$WORK/small" 2>/dev/null; then
  run 2 "$WORK/out" "$WORK/err" "${base[@]}" run.dir="$WORK/full" checkpoint.dir="$WORK/small" \
    checkpoint.every=10 checkpoint.keep=0
  check "full disk: exit 74 (got $RC)" [ "$RC" = 74 ]
  check "full disk: reported: $(cat "$WORK/err")" grep -q "not enough space for a checkpoint in .*No space left on device" "$WORK/err"
  check "full disk: no temporary file left" bash -c "! ls '$WORK/small'/*.tmp 2>/dev/null"
  cp "$WORK/small/step_00000010.h5" "$WORK/prev.h5"
  umount "$WORK/small"
  run 2 "$WORK/out" "$WORK/err" "${base[@]}" run.dir="$WORK/full2" checkpoint.resume="$WORK/prev.h5"
  check "full disk: the previous checkpoint still loads: $(cat "$WORK/err")" [ "$RC" = 0 ]
else
  echo "skipped: full-disk case (cannot mount a small tmpfs here)"
fi
# a run directory that fills up while the run goes on (its checkpoints elsewhere):
# metrics.csv says so once and stops; the run finishes; no .tmp is left beside the
# files it could not write
if mkdir -p "$WORK/tiny" && mount -t tmpfs -o size=64k tmpfs "$WORK/tiny" 2>/dev/null; then
  dd if=/dev/zero of="$WORK/tiny/fill" bs=1k count=36 2>/dev/null
  run 1 "$WORK/out" "$WORK/err" inputs/mnist.in model.hidden=16 train.steps=400 \
    train.log_every=1 run.tensorboard=false run.progress=off run.dir="$WORK/tiny/run" \
    checkpoint.dir="$WORK/tiny_ck"
  check "run directory full: the run finishes (exit $RC)" [ "$RC" = 0 ]
  said=$(grep -c "warning: cannot write metrics.csv: No space left on device; its rows stop at step" "$WORK/err")
  check "run directory full: metrics.csv's failure said once: $(cat "$WORK/err")" [ "$said" = 1 ]
  check "run directory full: no .tmp left" bash -c "! ls '$WORK/tiny/run'/*.tmp 2>/dev/null"
  umount "$WORK/tiny"
else
  echo "skipped: full run directory (cannot mount a small tmpfs here)"
fi
# a disk that fills up while a checkpoint is written in the background
# (checkpoint.async; fault_preload.c fails one rank's writer thread): exit 74 at the
# step where the ranks learn it, the message names the file, nothing half-written is
# left, and the checkpoints before it are whole
if sanitized; then
  echo "skipped: background write failure (a preload library under AddressSanitizer)"
else
  LD_PRELOAD="$FAULT_PRELOAD" TR_TEST_THREAD_ENOSPC_RANK=1 run 2 "$WORK/out" "$WORK/err" \
    "${base[@]}" run.dir="$WORK/bgfull" checkpoint.async=true checkpoint.at_start=true \
    checkpoint.every=10 checkpoint.keep=0
  check "background write on a full disk: exit 74 (got $RC)" [ "$RC" = 74 ]
  check "background write on a full disk: reported: $(cat "$WORK/err")" grep -q \
    "writing the data of '.*step_00000010.h5.tmp' failed: No space left on device" "$WORK/err"
  check "background write on a full disk: no temporary file left" \
    bash -c "! ls '$WORK/bgfull/checkpoints'/*.tmp 2>/dev/null"
  check "background write on a full disk: step 10 never appears" \
    [ ! -e "$WORK/bgfull/checkpoints/step_00000010.h5" ]
  run 2 "$WORK/out" "$WORK/err" "${base[@]}" run.dir="$WORK/bgfull2" \
    checkpoint.resume="$WORK/bgfull/checkpoints/step_00000000.h5"
  check "background write on a full disk: the checkpoint before it still loads: $(cat "$WORK/err")" \
    [ "$RC" = 0 ]
  # a disk or quota that fills on one node only, as a checkpoint is written: every
  # write to it fails on that rank. Exit 74, not a hang: parallel HDF5, which laid the
  # file out collectively, waited in two different collectives for ever (the
  # watchdog's 71 after run.hang_minutes)
  for r in 0 1; do
    LD_PRELOAD="$FAULT_PRELOAD" TR_TEST_TMP_ENOSPC_RANK=$r run 2 "$WORK/out" "$WORK/err" \
      "${base[@]}" run.dir="$WORK/onefull$r" checkpoint.at_start=true checkpoint.keep=0 \
      checkpoint.every=10 run.hang_minutes=1
    check "rank $r's disk full: exit 74 (got $RC): $(grep -m1 error "$WORK/err")" [ "$RC" = 74 ]
    check "rank $r's disk full: no temporary file left" \
      bash -c "! ls '$WORK/onefull$r/checkpoints'/*.tmp 2>/dev/null"
  done
fi
finish
