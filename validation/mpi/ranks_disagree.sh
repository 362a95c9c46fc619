#!/usr/bin/env bash
# ranks_disagree.sh: every rank must be given the same deck, the same Slurm job, the
# same data and a checkpoint directory they all see. Ranks that differ would disagree
# on the step count or on a collective file open and wait forever; instead the run
# stops at start-up with one message naming the rank and the fix, the same exit
# code on every rank, and no rank left running. Each case runs two ranks started
# apart (mpirun's MPMD form), the second one given the difference; node-local
# directories are a mount namespace of the second rank's own (unshare -m).
source "$(dirname "$0")/../lib.sh"
require_data
RUN_TIMEOUT=60
base=(inputs/mnist.in train.steps=30 run.progress=off checkpoint.every=10)

# two NAME CODE PATTERN -- ARGS0... -- PREFIX1...: rank 0 runs the trainer with ARGS0,
# rank 1 runs PREFIX1 (a command that ends in exec'ing the trainer with ARGS0)
two() {
  local name=$1 code=$2 pattern=$3
  shift 3
  timeout -k 5 $RUN_TIMEOUT mpirun -np 1 "$TRAINER" "${args0[@]}" : -np 1 "$@" \
    >"$WORK/out" 2>"$WORK/err"
  RC=$?
  check "$name: exit $RC, expected $code (124: a hang)" [ "$RC" = "$code" ]
  check "$name: message '$pattern' in: $(cat "$WORK/err")" grep -qE -- "$pattern" "$WORK/err"
  check "$name: printed once" [ "$(grep -cE -- "$pattern" "$WORK/err")" = 1 ]
  check "$name: no rank left" no_leftover_ranks
}

args0=("${base[@]}" run.dir="$WORK/deck")
two other-overrides 64 "rank 1 was given another deck than rank 0: \[train\] steps = 31 there, 30 on rank 0 .*start every rank with the same deck and overrides" \
  "$TRAINER" "${base[@]}" run.dir="$WORK/deck" train.steps=31

# a deck only rank 0 can read (a node-local copy): rank 1's message alone, not rank 0's
# count of its own (no) problems
args0=("${base[@]}" run.dir="$WORK/deck")
two deck-on-one-rank 66 "$WORK/nowhere.in: cannot read the deck" "$TRAINER" "$WORK/nowhere.in"
check "deck-on-one-rank: no count of rank 0's problems" bash -c "! grep -q 'problems\? in the deck' '$WORK/err'"

# the same deck named by another path, a value written another way: no difference
# (and the checkpoints' /deck, which every rank creates, is rank 0's text)
timeout -k 5 $RUN_TIMEOUT mpirun -np 1 "$TRAINER" "${base[@]}" run.dir="$WORK/spelled" : \
  -np 1 "$TRAINER" ./inputs/mnist.in checkpoint.every=10 train.steps=3e1 run.progress=off \
  run.dir="$WORK/spelled" >"$WORK/out" 2>"$WORK/err"
RC=$?
check "same deck spelled otherwise: exit $RC $(cat "$WORK/err")" [ "$RC" = 0 ]
check "same deck spelled otherwise: checkpoints written" [ -f "$WORK/spelled/checkpoints/step_00000030.h5" ]

args0=("${base[@]}" run.dir="$WORK/slurm")
two slurm-on-one-rank 64 "rank 1 runs in a Slurm job, and rank 0 in another or none: start every rank the same way" \
  env SLURM_JOB_ID=4242 SLURM_NTASKS=2 "$TRAINER" "${args0[@]}"

# the node-local cases need a mount namespace (root, and a kernel that allows it)
mkdir -p "$WORK/probe"
if ! unshare -m sh -c "mount -t tmpfs none '$WORK/probe'" 2>/dev/null; then
  echo "skipped: node-local directories (unshare -m cannot mount here)"
  finish
  exit
fi

# other data files at the same path (a node-local copy of other size)
"$PYTHON" - "$SRC/data/mnist" "$WORK/m4000" <<'PY'
import os, shutil, struct, sys
src, dst = sys.argv[1], sys.argv[2]
os.makedirs(dst, exist_ok=True)
for name in os.listdir(src):
    shutil.copy(os.path.join(src, name), dst)
for name, hdr, size in [("train-images-idx3-ubyte", 16, 784), ("train-labels-idx1-ubyte", 8, 1)]:
    b = open(os.path.join(src, name), "rb").read()
    open(os.path.join(dst, name), "wb").write(b[:4] + struct.pack(">I", 4000) + b[8:hdr] + b[hdr:hdr + 4000 * size])
PY
args0=("${base[@]}" run.dir="$WORK/data")
two other-data 65 "rank 1 reads other data than rank 0: 4000 and 2000 training and test samples against rank 0's 8000 and 2000" \
  unshare -m sh -c "mount --bind '$WORK/m4000' '$SRC/data/mnist' && exec \"\$@\"" sh "$TRAINER" "${args0[@]}"

# images of the same count with one other pixel (labels unchanged): their hash
"$PYTHON" - "$SRC/data/mnist" "$WORK/pixel" <<'PY'
import os, shutil, sys
src, dst = sys.argv[1], sys.argv[2]
os.makedirs(dst, exist_ok=True)
for name in os.listdir(src):
    shutil.copy(os.path.join(src, name), dst)
path = os.path.join(dst, "train-images-idx3-ubyte")
b = bytearray(open(path, "rb").read())
b[16 + 784 * 7 + 400] ^= 1  # image 7's pixel 400: one bit
open(path, "wb").write(bytes(b))
PY
args0=("${base[@]}" run.dir="$WORK/pixel-run")
two other-images 65 "rank 1 reads other data than rank 0: 8000 and 2000 training and test samples, with other images, against rank 0's 8000 and 2000" \
  unshare -m sh -c "mount --bind '$WORK/pixel' '$SRC/data/mnist' && exec \"\$@\"" sh "$TRAINER" "${args0[@]}"

# token files of the size of rank 0's and another content at the same path (a
# node-local copy of another version of the corpus): the hash of their windows
if [ -f "$SRC/data/brown/bytes.train.tok" ]; then
  layout_gpt_setup
  mkdir -p "$WORK/brown"
  cp "$SRC/data/brown/"bytes.*.tok "$WORK/brown/"
  "$PYTHON" - "$WORK/brown/bytes.train.tok" <<'PY'
import array, sys
path = sys.argv[1]
raw = open(path, "rb").read()
tokens = array.array("H", raw[32:])  # uint16 tokens after the 32-byte header
tokens.reverse()  # the same tokens, in another order
open(path, "wb").write(raw[:32] + tokens.tobytes())
PY
  args0=("$WORK/gpt.in" "${LAYOUT_GPT[@]}" run.dir="$WORK/tokens")
  two other-tokens 65 "rank 1 reads other data than rank 0: ([0-9]+) and 16 training and validation windows, with other tokens, against rank 0's \\1 and 16" \
    unshare -m sh -c "mount --bind '$WORK/brown' '$SRC/data/brown' && exec \"\$@\"" sh "$TRAINER" "${args0[@]}"
fi

# a run directory under a node-local path: refused at start-up, not at the first
# checkpoint (where the collective file create would hang)
mkdir -p "$WORK/local"
args0=("${base[@]}" run.dir="$WORK/local")
two node-local-run-dir 64 "the checkpoint directory '$WORK/local/checkpoints' is not the same directory on every rank: rank 1 cannot open the file rank 0 wrote there" \
  unshare -m sh -c "mount -t tmpfs none '$WORK/local' && exec \"\$@\"" sh "$TRAINER" "${args0[@]}"
check "node-local run dir: no probe file left" bash -c "! ls -a '$WORK/local/checkpoints' | grep -q probe"

# resuming from a file that rank 1 does not see: refused, no rank waits in the open
run 1 "$WORK/out" "$WORK/err" "${base[@]}" train.steps=10 run.dir="$WORK/first"
check "a checkpoint to resume from: $RC" [ "$RC" = 0 ]
mkdir -p "$WORK/only0" && cp "$WORK/first/checkpoints/step_00000010.h5" "$WORK/only0/"
args0=("${base[@]}" run.dir="$WORK/resume" checkpoint.resume="$WORK/only0/step_00000010.h5")
two resume-unseen 66 "cannot read checkpoint '$WORK/only0/step_00000010.h5': No such file or directory" \
  unshare -m sh -c "mount -t tmpfs none '$WORK/only0' && exec \"\$@\"" sh "$TRAINER" "${args0[@]}"

finish
