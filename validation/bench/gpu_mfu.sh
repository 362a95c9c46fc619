#!/usr/bin/env bash
# gpu_mfu.sh: the CUDA backend's target in one command: GPT-2 124M training at batch
# 16 x 1024 tokens in bf16-mixed on one GPU, its tokens/s and model FLOPs utilisation
# against the GPU's dense bf16 peak (the trainer's own MFU: the datasheet's figure on
# a listed GPU, else a measured one; the banner's "mfu:" line names it). Then the
# model's matrix products alone (build/validation/gpu_gemm_bench) at the same shapes,
# the ceiling that the rest of a step (attention, layernorm, optimizer) pulls it down
# from. Prints figures; it is not a test. Exits 77 where no GPU is usable, as the
# gpu tests do.
#
# Run from the repository root after building with CUDA (scripts/build.sh):
#     validation/bench/gpu_mfu.sh
# Knobs (environment): TRAINER (./trainer), STEPS (training steps; 30: the trainer
# leaves the first out of its rate), BATCH (16), SEQ (1024), PRECISION (bf16-mixed),
# EXTRA (more deck overrides, e.g. "train.recompute=block train.micro_batches=2"),
# TRAINER_CUDA_ATTENTION (wmma, the default, or mma: the mma.sync attention kernels,
# opt-in until a GPU has run them; tools/gpu_stage_run.sh measures both), GEMM_BENCH
# (1; 0 leaves out gpu_gemm_bench, about a minute, which does not depend on the
# attention kernels).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1
TRAINER=${TRAINER:-./trainer}
STEPS=${STEPS:-30} BATCH=${BATCH:-16} SEQ=${SEQ:-1024} PRECISION=${PRECISION:-bf16-mixed}
EXTRA=${EXTRA:-}
PY=/usr/bin/python3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
WORK=$(mktemp -d /tmp/bench_gpu_mfu.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

echo "== validation/bench/gpu_mfu.sh: GPT-2 124M, batch $BATCH x $SEQ, $PRECISION, 1 GPU," \
  "attention kernels ${TRAINER_CUDA_ATTENTION:-wmma}${EXTRA:+, $EXTRA} =="
nvidia-smi -L 2>/dev/null | head -1
# shellcheck disable=SC2086  # $EXTRA is words
mpirun -np 1 "$TRAINER" inputs/gpt2_124m.in system.device=cuda train.precision="$PRECISION" \
  train.batch_size="$BATCH" model.seq_len="$SEQ" train.steps="$STEPS" train.log_every=10 \
  train.eval_every=0 data.format=random_tokens data.val_limit=0 checkpoint.every=0 \
  checkpoint.at_end=false sample.length=0 run.progress=lines run.dir="$WORK/run" $EXTRA \
  >"$WORK/out" 2>"$WORK/err"
rc=$?
if [ "$rc" != 0 ]; then
  if grep -q "no usable GPU\|built without CUDA" "$WORK/err" && ! grep -q "though the node has" "$WORK/err"; then
    echo "skipped: $(grep -m1 -o 'no usable GPU.*\|built without CUDA.*' "$WORK/err")"
    exit 77
  fi
  echo "the trainer failed (exit $rc):" >&2
  cat "$WORK/out" "$WORK/err" >&2
  exit 1
fi
grep -E "^(trainer|mfu|plan|device memory|done|time)" "$WORK/out"
# A fast step that computes the wrong thing is no result: on random tokens the loss
# stays near ln(V) ~ 10.8 and must neither blow up nor turn NaN.
if ! "$PY" - "$WORK/run/metrics.csv" <<'PYEOF'; then
import csv, math, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r.get("loss")]
first, last = float(rows[0]["loss"]), float(rows[-1]["loss"])
print(f"loss: {first:.4f} at step {rows[0]['step']}, {last:.4f} at step {rows[-1]['step']}")
sys.exit(0 if math.isfinite(last) and last <= first + 0.5 else 1)
PYEOF
  echo "the loss diverged: the step is not measured right" >&2
  exit 1
fi
read -r tps mfu peak < <("$PY" -c "
import json; d = json.load(open('$WORK/run/summary.json'))
print(d['tokens_per_second'], d['mfu'], d['peak_gflops'])")
printf 'trainer: %.0f tokens/s, MFU %.1f%% of %.1f TFLOP/s (target: above 40%% on an H100)\n' \
  "$tps" "$(awk -v m="$mfu" 'BEGIN {print 100 * m}')" "$(awk -v p="$peak" 'BEGIN {print p / 1000}')"
if [ "${GEMM_BENCH:-1}" != 0 ] && [ -x build/validation/gpu_gemm_bench ]; then
  echo "-- the model's matrix products alone (gpu_gemm_bench $BATCH $SEQ):"
  build/validation/gpu_gemm_bench "$BATCH" "$SEQ" "$(awk -v p="$peak" 'BEGIN {print p / 1000}')" || true
fi
exit 0
