#!/usr/bin/env bash
# gpt_layouts.sh: the same GPT run on any layout. A 4-block GPT (4 heads, so tp up
# to 4) on the Brown bytes, fixed seed, unshuffled windows, global batch 8 in 4 or 8
# micro-batches, AdamW with clipping, 20 steps: every layout below must give the
# single-rank loss curve (each step's training loss and the final validation loss)
# within a relative 2e-6. Only the fp32 summation order differs between layouts
# (partial sums over tp ranks, gradient sums over dp ranks, norm sums by slice); the
# differences measured here are about 1e-7 after 20 steps, so 2e-6 catches any real
# error (a missed all-reduce, a wrong shard, a stale activation slot) by orders of
# magnitude while never flaking. The learning rate is modest on purpose: at 3e-3 this
# model hits a loss spike at step 15 (gradient norm 275), and a spike turns 1e-8
# rounding differences into 1e-4 ones; any layout comparison needs a smooth curve.
# Every run has dropout at all three sites (0.1): its masks are drawn for each
# element's place in the global batch (dropout_math.h), so they too must be the same
# at every layout, micro-batching and recomputation; a mask keyed by a rank's local
# rows, or drawn again differently in a recomputed forward, moves the curve by far
# more than 2e-6.
# Sequence parallelism (a tp rank keeps its share of the tokens between the products)
# runs at tp 2, tp 4 and dp 2 x tp 2 x pp 2 recomputing; its dropout masks too are
# drawn for each element's global place, its layernorms' gradients summed over tp.
# Five runs also sample 40 bytes greedily after training, past the 32-token window:
# one rank, dp 2 x tp 2 x pp 2 and pp 5 (its last stage the head alone) with the
# key-value cache (one row through the stages per token until the window slides,
# then whole windows), and dp 2 x tp 2 x pp 2 recomputing, which keeps no cache (a
# whole window per token), once in sequence parallelism (which generation turns
# off): the same text.
source "$(dirname "$0")/../lib.sh"
layout_gpt_setup
common=("${LAYOUT_GPT[@]}" checkpoint.at_end=false)
RUN_TIMEOUT=180
# The sanitizer build proves the same code paths memory-clean in 6 steps (the release
# build runs the 20 that the comparison is stated for): it is 6x slower per step, and
# it leaves out the layouts marked "also" below, whose code paths the others take,
# and the dropout, whose code the sanitizer build runs in gradcheck.test_gpt,
# mpi.gpt_resume and mpi.guarded_device.
STEPS=20
ASAN=0
sanitized && STEPS=6 ASAN=1
common+=(train.steps=$STEPS)
DROP="dropout in training steps: embeddings 0.1, attention 0.1, residual 0.1"
[ "$ASAN" = 1 ] ||
  common+=(model.embd_pdrop=0.1 model.attn_pdrop=0.1 model.resid_pdrop=0.1)

also() { [ "$ASAN" = 1 ] || layout "$@"; } # a release-build-only layout
layout() { # layout NP NAME overrides...
  local np=$1 name=$2; shift 2
  run "$np" "$WORK/$name.out" "$WORK/$name.err" "$WORK/gpt.in" "${common[@]}" "$@" \
    run.dir="$WORK/$name"
  check "$name: exit $RC: $(tail -3 "$WORK/$name.err")" [ "$RC" = 0 ]
}

SAMPLE=(sample.length=40 sample.prompt=The)
layout 1 single "${SAMPLE[@]}"
also 1 nodrop model.embd_pdrop=0 model.attn_pdrop=0 model.resid_pdrop=0
[ "$ASAN" = 1 ] || grep -q "$DROP" "$WORK/single.out" ||
  fail "the banner states the dropout: $(grep '^model' "$WORK/single.out")"
also 2 dp2
layout 2 tp2 parallel.tp=2
layout 2 pp2 parallel.pp=2
also 4 tp2_pp2 parallel.tp=2 parallel.pp=2
layout 8 dp2_tp2_pp2 parallel.tp=2 parallel.pp=2 "${SAMPLE[@]}"
layout 4 tp4 parallel.tp=4
also 4 pp4_m4 parallel.pp=4
layout 4 pp4_m8 parallel.pp=4 train.micro_batches=8
layout 4 pp4_gpipe parallel.pp=4 parallel.schedule=gpipe
# pp = n_layer + 1: the last stage holds the head alone (ln_f, the tied head, the loss)
layout 5 pp5_head_alone parallel.pp=5 "${SAMPLE[@]}"
# a split by hand (by cost pp 3 would be 2,1,1): one block, three, the head alone
layout 3 pp3_stage_blocks parallel.pp=3 parallel.stage_blocks=1,3,0
layout 2 zero1 parallel.zero=1
layout 4 zero2_dp4 parallel.zero=2 train.micro_batches=2
also 2 recompute train.recompute=block
layout 8 dp2_tp2_pp2_zero1_recompute parallel.tp=2 parallel.pp=2 parallel.zero=1 \
  train.recompute=block parallel.schedule=gpipe "${SAMPLE[@]}"
also 8 dp2_pp4_zero2 parallel.pp=4 parallel.zero=2
SP=parallel.sequence_parallel=true
layout 2 tp2_sp parallel.tp=2 $SP
also 4 tp4_sp parallel.tp=4 $SP
layout 8 dp2_tp2_pp2_sp_recompute parallel.tp=2 parallel.pp=2 $SP train.recompute=block \
  "${SAMPLE[@]}"
# a model deeper than GPT-2's deepest (100 blocks; the deck takes 128) split by hand
# over 4 stages, against its own single-rank run; at a fifth of the learning rate, as
# at 1e-3 its gradient norm spikes at step 10 (6.8), which turns the layouts' 1e-8
# rounding differences into 3e-2 ones by step 15
also 1 deep_single model.n_layer=100 optim.lr=2e-4
also 4 deep_pp4 model.n_layer=100 optim.lr=2e-4 parallel.pp=4 parallel.stage_blocks=40,30,20,10
sample_text() { grep -a -A2 '^sample (greedy, 40 tokens' "$WORK/$1.out" | tail -n +2; }
check "one rank sampled: $(sample_text single | head -c 60)" [ -n "$(sample_text single)" ]
for name in dp2_tp2_pp2 dp2_tp2_pp2_zero1_recompute dp2_tp2_pp2_sp_recompute pp5_head_alone; do
  check "$name samples one rank's text" diff <(sample_text single) <(sample_text $name)
done
grep -q "; tp sums through .*, sequence parallel (a tp rank keeps 1/2 of the tokens" \
  "$WORK/dp2_tp2_pp2_sp_recompute.out" ||
  fail "the banner says sequence parallel: $(grep '^layout' "$WORK/dp2_tp2_pp2_sp_recompute.out")"
grep -q "sequence parallel" "$WORK/dp2_tp2_pp2.out" &&
  fail "the banner says sequence parallel where it is off: $(grep '^layout' "$WORK/dp2_tp2_pp2.out")"
grep -q "tp groups: {0,1} {2,3} {4,5} {6,7}" "$WORK/dp2_tp2_pp2.out" ||
  fail "the banner names the tp groups: $(grep -A4 '^layout' "$WORK/dp2_tp2_pp2.out")"
grep -q "stages: 0: blocks 0-1 + embeddings, 1: blocks 2-3 + head" "$WORK/dp2_tp2_pp2.out" ||
  fail "the banner names the stages: $(grep -A4 '^layout' "$WORK/dp2_tp2_pp2.out")"
grep -q "stages: 0: blocks 0-0 + embeddings, 1: blocks 1-1, 2: blocks 2-2, 3: blocks 3-3, 4: no blocks + head" \
  "$WORK/pp5_head_alone.out" ||
  fail "the banner names a stage of the head alone: $(grep -A4 '^layout' "$WORK/pp5_head_alone.out")"
grep -q "stages: 0: blocks 0-0 + embeddings, 1: blocks 1-3, 2: no blocks + head (by \[parallel\] stage_blocks)" \
  "$WORK/pp3_stage_blocks.out" ||
  fail "the banner names the split set by hand: $(grep -A4 '^layout' "$WORK/pp3_stage_blocks.out")"
# what the stages measured: each one's busy time a step, and the split those times
# choose (its sums by unit.test_stage_balance; here, that a run prints and stores them)
grep -qE "^stage balance: busy [0-9.]+, [0-9.]+, [0-9.]+ ms a step by stage \(a block [0-9.]+ ms, the embeddings [0-9.]+, the head [0-9.]+\); (parallel.stage_blocks=[0-9,]+ would make|these times choose|no split)" \
  "$WORK/pp3_stage_blocks.out" ||
  fail "the stages' balance as measured: $(grep -A3 '^time:' "$WORK/pp3_stage_blocks.out")"
check "summary.json: 3 stages' busy times and a split of 4 blocks by them" "$PYTHON" -c '
import json, sys
s = json.load(open(sys.argv[1]))
busy, split = s["stage_busy_seconds"], [int(x) for x in s["stage_blocks_by_time"].split(",")]
assert len(busy) == 3 and min(busy) > 0 and len(split) == 3 and sum(split) == 4, (busy, split)
assert min(split[:2]) >= 1, split
one = json.load(open(sys.argv[2]))
assert one["stage_busy_seconds"] is None and one["stage_blocks_by_time"] is None, one
' "$WORK/pp3_stage_blocks/summary.json" "$WORK/single/summary.json"
# the split's costs, by hand: a block 6 x 12 C^2 + 12 C T = 319488 FLOPs a token (C 64,
# T 32), the head 6 C V = 98304; stage 0 two blocks (46 %), stage 1 two and the head
# (54 %): the mean stage 7 % below the busiest; the bubble of 4 micro-batches 1/5
grep -q "^  stage work: 0: 46 %, 1: 54 % of the model's FLOPs; .* waits at least 7 % of a step on average, and a balanced pipeline's bubble is 20 % " \
  "$WORK/dp2_tp2_pp2.out" ||
  fail "the banner weighs the stages: $(grep -A6 '^layout' "$WORK/dp2_tp2_pp2.out")"

check "every layout's loss curve matches one rank's" "$PYTHON" - "$WORK" "$STEPS" <<'PY'
import csv, glob, os, sys
work = sys.argv[1]
def rows(name):
    with open(os.path.join(work, name, "metrics.csv")) as f:
        return [(r["phase"], int(r["step"]), float(r["loss"])) for r in csv.DictReader(f)]
ref = rows("single")
assert sum(1 for p, _, _ in ref if p == "train") >= int(sys.argv[2]), "too few training steps"
bad = 0
for d in sorted(glob.glob(os.path.join(work, "*", "metrics.csv"))):
    name = os.path.basename(os.path.dirname(d))
    if name in ("single", "deep_single"):
        continue
    ref = rows("deep_single" if name.startswith("deep_") else "single")
    if name == "nodrop":  # the same run without dropout: its masks must matter
        worst = max(abs(a[2] - b[2]) / abs(a[2]) for a, b in zip(ref, rows(name)))
        print(f"{name:32s} (no dropout) relative loss difference {worst:.2e}, must be > 1e-3")
        bad += worst <= 1e-3
        continue
    got = rows(name)
    if [(p, s) for p, s, _ in got] != [(p, s) for p, s, _ in ref]:
        print(f"{name}: rows differ from the single-rank run"); bad += 1; continue
    worst = max(abs(a[2] - b[2]) / abs(a[2]) for a, b in zip(ref, got))
    print(f"{name:32s} worst relative loss difference {worst:.2e} over {len(got)} rows")
    bad += worst > 2e-6
sys.exit(1 if bad else 0)
PY
finish
