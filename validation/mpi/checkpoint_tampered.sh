#!/usr/bin/env bash
# checkpoint_tampered.sh: a checkpoint whose tensors are intact but whose other
# contents are not (root attributes of another kind or out of range, datasets of
# another kind or shape, crc32 attributes missing or malformed) is refused on
# resume with the file and the attribute named, exit 65, printed once; files that
# hold the same values stored another way (float64, gzip chunks, an extra dataset,
# no /deck, h5repack's copy) resume exactly as the original does. And a sound
# checkpoint past the run's last step trains nothing, says so, and evaluates it. A
# resume names the deck keys that differ from the original run's.
source "$(dirname "$0")/../lib.sh"
require_data
RUN_TIMEOUT=100
base=(inputs/mnist.in run.progress=off train.log_every=1 train.precision=fp16-mixed)

# the original: 20 steps of fp16-mixed (so the loss scaler's attributes are there)
run 2 "$WORK/orig.out" "$WORK/err" "${base[@]}" train.steps=20 run.dir="$WORK/orig" checkpoint.every=20
check "original run: $RC $(cat "$WORK/err")" [ "$RC" = 0 ]
src=$WORK/orig/checkpoints/step_00000020.h5
"$PYTHON" "$SRC/validation/tamper_checkpoint.py" "$src" "$WORK/t" >/dev/null
check "tampered copies written" [ -f "$WORK/t/same-gzip.h5" ]

# resume NAME FILE: 5 more steps from FILE, into run directory $WORK/r-NAME
resume() {
  run 2 "$WORK/out" "$WORK/err" "${base[@]}" train.steps=25 run.dir="$WORK/r-$1" \
    checkpoint.every=0 checkpoint.resume="$2"
}

# what training reports, less the timings (samples/s, elapsed)
curve() { cut -d, -f1-7,10 "$WORK/r-$1/metrics.csv"; }

resume reference "$src"
check "resume from the original: $RC $(cat "$WORK/err")" [ "$RC" = 0 ]
check "resume from the original: trained steps 21-25" grep -q "^25,.*,train," "$WORK/r-reference/metrics.csv"
# the one deck key that differs from the original run's, and nothing else
check "resume from the original: the changed key named: $(grep -A3 '^note' "$WORK/out")" \
  grep -qx "note: 1 deck key differs from the run that wrote the checkpoint (this run uses its own):" "$WORK/out"
check "resume from the original: train.steps 20 -> 25" grep -qx "  \[train\] steps = 25 (checkpoint: 20)" "$WORK/out"
check "resume from the original: no warning about the data" \
  bash -c "! grep -q 'training data differ' '$WORK/out'"

# refused NAME PATTERN: resuming from $WORK/t/NAME.h5 fails clearly
refused() {
  local f=$WORK/t/$1.h5 pattern
  pattern="'$f'.*$2"
  resume "$1" "$f"
  check "$1: exit $RC, expected 65" [ "$RC" = 65 ]
  check "$1: message '$pattern' in: $(cat "$WORK/err")" grep -qE -- "$pattern" "$WORK/err"
  check "$1: printed once" [ "$(grep -cE -- "$pattern" "$WORK/err")" = 1 ]
  check "$1: no rank left" no_leftover_ranks
}

not_int="is not a single integer: the file is damaged"
refused step-array "root attribute 'step' $not_int"
refused step-float "root attribute 'step' $not_int"
refused step-string "root attribute 'step' $not_int"
refused seed-string "root attribute 'seed' $not_int"
refused data-digest-string "root attribute 'data_digest' $not_int"
refused step-missing "lacks the root attribute 'step' that every trainer checkpoint has"
refused model-variable-length "root attribute 'model' is not a short fixed-length string"
refused model-too-long "root attribute 'model' is not a short fixed-length string"
refused step-negative "root attribute step = -1 is outside 0\.\.1099511627776: the file is damaged"
refused step-huge "root attribute step = 9000000000000000000 is outside 0\.\.1099511627776"
refused epoch-nan "root attribute epoch = nan is outside 0\.\.20:"
refused epoch-past-step "root attribute epoch = 1e\+300 is outside 0\.\.20:"
refused ranks-zero "root attribute written_ranks = 0 is outside 1\.\.2147483647"
refused dp-past-int "root attribute written_dp = 8589934592 is outside 1\.\.2:"
refused layout-inconsistent "written_ranks 2 is not dp 2 x tp 1 x pp 2"
refused zero-stage-5 "root attribute written_zero = 5 is outside 0\.\.2:"
refused loss-scale-nan "root attribute loss_scale = nan is outside"
refused loss-scale-negative "root attribute loss_scale = -1 is outside"
refused skipped-past-step "root attribute skipped_steps = 21 is outside 0\.\.20:"
refused precision-unknown "precision = 'fp8' is none of fp32, bf16-mixed, fp16-mixed"
refused weight-transposed "/model/fc1/weight has shape \[784, 256\], the model has \[256, 784\]"
refused weight-group "cannot open /model/fc1/weight: not a dataset"
refused weight-string "/model/fc1/weight has shape \[\], the model has \[256, 784\]"
refused weight-float16 "checksum mismatch in /model/fc1/weight: the file is corrupt"
refused crc-missing "/model/fc1/weight has no crc32 attribute"
refused crc-array "/model/fc1/weight has a crc32 attribute that is not one integer"
refused crc-string "/model/fc1/weight has a crc32 attribute that is not one integer"

# the same values stored another way: the same run as from the original
if command -v h5repack >/dev/null; then
  h5repack -f GZIP=6 "$src" "$WORK/t/same-h5repack.h5"
  same=(same-float64 same-gzip same-extra-dataset same-no-deck same-foreign-deck same-h5repack)
else
  echo "note: no h5repack (Debian: hdf5-tools); its case is left out"
  same=(same-float64 same-gzip same-extra-dataset same-no-deck same-foreign-deck)
fi
# a checkpoint of a trainer from before images were hashed: its data_digest is the
# labels' FNV-1a alone (as 32-bit values), which a resume takes for the same data
"$PYTHON" - "$src" "$WORK/t/same-labels-only-digest.h5" data/mnist/train-labels-idx1-ubyte <<'PY'
import shutil, sys, h5py, numpy as np
src, dst, labels = sys.argv[1:4]
shutil.copy(src, dst)
h = 0xcbf29ce484222325
for label in open(labels, "rb").read()[8:]:
    h = ((h ^ label) * 0x100000001b3) % 2**64
with h5py.File(dst, "r+") as f:
    f.attrs.modify("data_digest", np.uint64(h))
PY
same+=(same-other-data-digest same-no-data-digest same-labels-only-digest)
data_warning="^warning: the training data differ from those of the run that wrote the checkpoint (its data_digest 0x1234, this run's 0x[0-9a-f]*: .*): the resumed run trains on other data than the original\$"
for name in "${same[@]}"; do
  resume "$name" "$WORK/t/$name.h5"
  check "$name: resumes: $RC $(cat "$WORK/err")" [ "$RC" = 0 ]
  check "$name: the same curve as from the original" diff <(curve reference) <(curve "$name")
  case $name in
    same-no-deck) check "$name: nothing compared" bash -c "! grep -q '^note: .*deck' '$WORK/out'" ;;
    same-foreign-deck) check "$name: says its deck is not compared: $(grep '^note' "$WORK/out")" \
      grep -q "^note: the deck stored in .*same-foreign-deck.h5 does not load with this trainer (.*unknown key 'old_key' in \[train\].*): its keys are not compared" "$WORK/out" ;;
    *) check "$name: the changed key named" grep -qx "  \[train\] steps = 25 (checkpoint: 20)" "$WORK/out" ;;
  esac
  if [ "$name" = same-other-data-digest ]; then
    check "$name: warns that the data differ: $(grep '^warning' "$WORK/out")" grep -q "$data_warning" "$WORK/out"
  else
    check "$name: no warning about the data" bash -c "! grep -q 'training data differ' '$WORK/out'"
  fi
done

# resumed at or past the last step: nothing trained, the model evaluated as written
run 2 "$WORK/out" "$WORK/err" "${base[@]}" train.steps=10 run.dir="$WORK/r-past" \
  checkpoint.every=0 checkpoint.resume="$src"
check "past the end: $RC $(cat "$WORK/err")" [ "$RC" = 0 ]
check "past the end: says so" grep -q "note: resumed at step 20, at or past this run's last step: nothing to train" "$WORK/out"
loss() { grep -o "test loss [0-9.]*, test accuracy [0-9.]*" "$1"; }
check "past the end: the original's final test loss and accuracy ($(loss "$WORK/orig.out"))" \
  [ "$(loss "$WORK/out")" = "$(loss "$WORK/orig.out")" ]

echo "checkpoint_tampered: $PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
