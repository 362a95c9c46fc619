#!/usr/bin/env bash
# gpt_checkpoint_layouts.sh: a GPT checkpoint written at one layout resumes at any
# other. A 4-block GPT is stopped at step 10 at dp 2 x tp 2 x pp 2 with ZeRO 1, and
# resumed at 1 rank, at tp 4 in sequence parallelism, at dp 2 x pp 2 with ZeRO 2 (its blocks split 3 and 1 by
# hand) and at pp 5 (the last stage the head alone); the single-rank run's
# step-10 checkpoint is resumed at dp 2 x tp 2 x pp 2 with ZeRO 1, and the stopped run
# resumed at its own layout must end bit for bit as that layout's straight run (not
# under the sanitizers, for time). Every other resumed run
# must continue the straight single-rank loss curve within the layout tolerance of
# gpt_layouts.sh (2e-6 relative: only the fp32 summation order differs, a wrongly
# placed shard would be off by orders of magnitude), and the step-10 checkpoints of
# both layouts must hold the same tensors: within 1% of each tensor's largest value,
# since AdamW turns rounding differences in tiny gradients into updates of up to
# 6e-4 of that (plain dp 2 against 1 rank gives 4e-4), while a misplaced row or
# column is off by about 100%.
source "$(dirname "$0")/../lib.sh"
layout_gpt_setup
common=("${LAYOUT_GPT[@]}" checkpoint.every=10 checkpoint.keep=0)
RUN_TIMEOUT=180
big=(parallel.tp=2 parallel.pp=2 parallel.zero=1)

go() { # go NP NAME overrides...
  local np=$1 name=$2; shift 2
  run "$np" "$WORK/$name.out" "$WORK/$name.err" "$WORK/gpt.in" "${common[@]}" "$@" \
    run.dir="$WORK/$name"
}

go 1 straight
check "straight run: exit $RC: $(tail -3 "$WORK/straight.err")" [ "$RC" = 0 ]
go 8 cut "${big[@]}" run.stop_after_steps=10
check "dp2 tp2 pp2 zero1 stopped at step 10: exit $RC: $(tail -3 "$WORK/cut.err")" [ "$RC" = 75 ]
ck=$WORK/cut/checkpoints/step_00000010.h5
check "it wrote step 10" [ -f "$ck" ]

# resume NP NAME FILE overrides...: continues from FILE at another layout
resume() {
  local np=$1 name=$2 file=$3; shift 3
  go "$np" "$name" checkpoint.resume="$file" "$@"
  check "$name: exit $RC: $(tail -3 "$WORK/$name.err")" [ "$RC" = 0 ]
  check "$name: resumed from step 10 and says where it was written: $(grep resumed "$WORK/$name.out")" \
    grep -q "resumed from .*step_00000010.h5: step 10, .*written at" "$WORK/$name.out"
}
# (the sanitizer build leaves out the resumes to and from 1 rank, for time:
# mpi.checkpoint_shards reads shards whole and whole files as shards under it)
ASAN=0
sanitized && ASAN=1
[ "$ASAN" = 1 ] || resume 1 at_1 "$ck"
resume 4 at_tp4 "$ck" parallel.tp=4 parallel.sequence_parallel=true
# (its stages split by hand, 3 blocks and 1 where the writer's had 2 and 2)
resume 4 at_dp2_pp2_zero2 "$ck" parallel.pp=2 parallel.zero=2 parallel.stage_blocks=3,1
# pp 5 on 4 blocks: its last stage holds the head alone, reads ln_f and the head
# from the checkpoint and writes them into its step-20 checkpoint (checked below)
resume 5 at_pp5 "$ck" parallel.pp=5
[ "$ASAN" = 1 ] || resume 8 from_1 "$WORK/straight/checkpoints/step_00000010.h5" "${big[@]}"
check "the resumed runs say the layout they came from" \
  grep -q "written at 8 ranks: dp 2, tp 2, pp 2, zero 1" "$WORK/at_tp4.out"
# the same layout: the cut run, resumed where it stopped, ends bit for bit as the run
# at that layout done straight (tensor-parallel shards, pipeline stages and ZeRO
# slices of parameters and AdamW state; every metrics.csv row but the timings)
if [ "$ASAN" = 0 ]; then
  go 8 big_straight "${big[@]}"
  check "dp2 tp2 pp2 zero1 straight: exit $RC: $(tail -3 "$WORK/big_straight.err")" [ "$RC" = 0 ]
  go 8 cut "${big[@]}"
  check "dp2 tp2 pp2 zero1 resumed in place: exit $RC: $(tail -3 "$WORK/cut.err")" [ "$RC" = 0 ]
  check "... final parameters and AdamW state bit-identical to the straight run's (h5diff)" \
    h5_same "$WORK/big_straight/checkpoints/step_00000020.h5" "$WORK/cut/checkpoints/step_00000020.h5"
  check "... metrics.csv rows identical" diff <(cut -d, -f1-7 "$WORK/big_straight/metrics.csv") \
    <(cut -d, -f1-7 "$WORK/cut/metrics.csv")
fi

check "every resumed run continues the straight loss curve" "$PYTHON" - "$WORK" <<'PY'
import csv, os, sys
work = sys.argv[1]
def rows(name):
    with open(os.path.join(work, name, "metrics.csv")) as f:
        return {(r["phase"], int(r["step"])): float(r["loss"]) for r in csv.DictReader(f)}
ref = rows("straight")
bad = 0
for name in ("at_1", "at_tp4", "at_dp2_pp2_zero2", "at_pp5", "from_1"):
    if name in ("at_1", "from_1") and not os.path.isdir(os.path.join(work, name)):
        continue  # the sanitizer build does not run them
    got = {k: v for k, v in rows(name).items() if k[1] > 10}
    if len(got) < 10:
        print(f"{name}: only {len(got)} rows after step 10"); bad += 1; continue
    worst = max(abs(v - ref[k]) / abs(ref[k]) for k, v in got.items())
    print(f"{name:20s} worst relative loss difference {worst:.2e} over {len(got)} rows")
    bad += worst > 2e-6
sys.exit(1 if bad else 0)
PY

same_tensors() { # same_tensors A B: B's tensors, within 1% of each one's largest value
  "$PYTHON" - "$1" "$2" <<'PY'
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
names = []
a.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) and n != "deck" else None)
other = []
b.visititems(lambda n, o: other.append(n) if isinstance(o, h5py.Dataset) and n != "deck" else None)
assert sorted(names) == sorted(other), "different tensors"
worst = 0.0
for n in names:
    x, y = a[n][()], b[n][()]
    assert x.shape == y.shape, n
    scale = max(float(np.abs(y).max()), 1e-30)
    worst = max(worst, float(np.abs(x - y).max()) / scale)
print(f"{len(names)} tensors, worst difference {worst:.2e} of the tensor's largest value")
sys.exit(0 if worst < 1e-2 else 1)
PY
}
check "step 10 at dp2 tp2 pp2 zero1 holds the single-rank run's tensors" \
  same_tensors "$ck" "$WORK/straight/checkpoints/step_00000010.h5"
check "step 20 at pp 5 (the head alone on a stage) holds the single-rank run's tensors" \
  same_tensors "$WORK/at_pp5/checkpoints/step_00000020.h5" \
  "$WORK/straight/checkpoints/step_00000020.h5"

# a vocabulary smaller than the padded rows before the last tp shard (50 tokens padded
# to 128: rank 1's 64 rows are all padding, it holds none of wte): written at tp 2
# (its empty block was described past the tensor's end, exit 70) and read at 1 rank
small=("$WORK/gpt.in" model.n_layer=1 model.n_head=2 model.n_embd=32 model.seq_len=8
  model.vocab_size=50 data.format=random_tokens train.batch_size=2 run.progress=off)
run 2 "$WORK/out" "$WORK/err" "${small[@]}" train.steps=2 parallel.tp=2 run.dir="$WORK/v50"
check "vocabulary 50 at tp 2: checkpoint written (exit $RC) $(tail -2 "$WORK/err")" [ "$RC" = 0 ]
run 1 "$WORK/out" "$WORK/err" "${small[@]}" train.steps=3 run.dir="$WORK/v50"
resumed=$(grep -c "resumed from .*step_00000002.h5" "$WORK/out")
check "vocabulary 50: tp 2's checkpoint resumes at 1 rank (exit $RC) $(tail -2 "$WORK/err")" \
  [ "$RC" = 0 -a "$resumed" = 1 ]
finish
