#!/usr/bin/env bash
# gpt_random_layouts.sh: layouts drawn at random (random_layouts.py) give the loss
# curve of one rank. Each case is a small GPT of odd shapes on the Brown bytes and a
# layout of 2, 3, 4 or 8 ranks mixing tp, pp (its blocks split by cost or by hand),
# dp, micro-batches, ZeRO 0-2, both schedules,
# recomputation, both reduction paths, a bucket of 4 or 256 KiB, the three
# precisions, SGD or AdamW, clipping and dropout; it runs 6 steps at that layout and
# at one rank, and each step's training loss and the final validation loss must agree
# within 2e-6 (fp32) or 1e-3 (16-bit storage), each step's gradient norm within ten
# times that. (The loss alone misses a wrong norm where clipping is off, as
# metrics.csv still logs it, and in 16-bit cases, whose tolerance hides the clip
# factor it moves: LayerNorms counted on every tp rank, the norm 26-46 % too large,
# failed 2 of seed 2033's 7 tp cases by the loss, all 7 by the norm.) A fixed seed,
# so a failure reproduces (2033: the first from 2026 whose 24 cases hold dp 2 x tp 2
# x pp 2, tp with dp, tp 3, ZeRO 2 over dp with micro-batches and bf16 with tp and
# pp); TR_RANDOM_LAYOUTS_SEED and TR_RANDOM_LAYOUTS_CASES draw others (e.g. 200 cases
# of a new seed before changing the pipeline or the sharding: 45 cases took 2.5
# minutes here). Measured over 85 cases of three seeds: the training loss at most
# 1.4e-8 in fp32, 5.8e-5 in bf16 and fp16; over 84 more (seeds 2033, 11, 12) and 92
# of 4 steps with two evaluations: the norm at most 7.5e-7 in fp32, 5.9e-4 in 16 bits
# (bf16), the validation loss 3.8e-8 and 3.1e-5. The sanitizer build runs 4 cases of
# 3 steps: memory on odd shapes.
source "$(dirname "$0")/../lib.sh"
layout_gpt_setup # the Brown bytes, or skipped
printf '[model]\nname = gpt\n' >"$WORK/gpt.in"
SEED=${TR_RANDOM_LAYOUTS_SEED:-2033}
CASES=${TR_RANDOM_LAYOUTS_CASES:-24}
STEPS=6
if sanitized; then CASES=${TR_RANDOM_LAYOUTS_CASES:-4} STEPS=3; fi
RUN_TIMEOUT=300
echo "seed $SEED, $CASES cases of $STEPS steps"
# (read whole first: mpirun would read the rest of a loop's input as its own)
mapfile -t cases < <("$PYTHON" "$SRC/validation/mpi/random_layouts.py" "$SEED" "$CASES" \
  "$SRC/data/brown/bytes")
check "$CASES cases drawn" [ "${#cases[@]}" = "$CASES" ]
for c in "${cases[@]}"; do
  read -r np tol name rest <<<"$c"
  read -ra args <<<"$rest"
  common=() layout=() seen=0
  for a in "${args[@]}"; do
    if [ "$a" = "--" ]; then seen=1; elif [ $seen = 0 ]; then common+=("$a"); else layout+=("$a"); fi
  done
  common+=(train.steps=$STEPS)
  run 1 "$WORK/$name.ref.out" "$WORK/$name.ref.err" "$WORK/gpt.in" "${common[@]}" \
    run.dir="$WORK/$name.ref"
  check "$name on one rank: exit $RC: $(tail -3 "$WORK/$name.ref.err")" [ "$RC" = 0 ]
  run "$np" "$WORK/$name.out" "$WORK/$name.err" "$WORK/gpt.in" "${common[@]}" "${layout[@]}" \
    run.dir="$WORK/$name"
  check "$name on $np ranks: exit $RC: $(tail -3 "$WORK/$name.err")" [ "$RC" = 0 ]
  check "$name (${layout[*]} ${common[*]:0:6}) within $tol of one rank" \
    "$PYTHON" "$SRC/validation/compare_metrics.py" "$WORK/$name.ref/metrics.csv" \
    "$WORK/$name/metrics.csv" --rtol "$tol" --min-steps $STEPS --eval \
    --norm-rtol "$(awk -v t="$tol" 'BEGIN { printf "%g", 10 * t }')"
done
finish
