#!/usr/bin/env bash
# gpu_profile.sh: where a training step's GPU time goes, kernel by kernel: gpu_mfu.sh's
# run (GPT-2 124M, batch 16 x 1024, bf16-mixed, one GPU) for 2 steps under Nsight
# Compute, which times every kernel (gpu__time_duration; clocks left as they are),
# then validation/bench/kernel_breakdown.py on the second step: milliseconds per part
# (matrix products, attention, the 16-bit operand copies, rounding passes,
# cross-entropy, layernorm, ...) and the costliest kernels. The kernels run one at a
# time under ncu, so the sum is the step's kernel time without overlap. Slow (ncu
# replays each of about 1,500 kernels): minutes. Prints figures; it is not a test.
#
# Run from the repository root after building with CUDA:
#     validation/bench/gpu_profile.sh
# Knobs (environment): TRAINER (./trainer), BATCH (16), SEQ (1024), PRECISION
# (bf16-mixed), EXTRA (more deck overrides), NCU (ncu from PATH or CUDA's tree),
# CSV (where to keep ncu's output; default a temporary file).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1
TRAINER=${TRAINER:-./trainer}
BATCH=${BATCH:-16} SEQ=${SEQ:-1024} PRECISION=${PRECISION:-bf16-mixed} EXTRA=${EXTRA:-}
NCU=${NCU:-$(command -v ncu || find /usr/local /opt -name ncu -type f 2>/dev/null | head -1)}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [ -z "$NCU" ]; then
  echo "skipped: no ncu (Nsight Compute) found; set NCU"
  exit 77
fi
WORK=$(mktemp -d /tmp/bench_gpu_profile.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
CSV=${CSV:-$WORK/kernels.csv}
echo "== validation/bench/gpu_profile.sh: GPT-2 124M, batch $BATCH x $SEQ, $PRECISION, 1 GPU =="
# one rank without mpirun: the trainer runs as a singleton MPI process
# shellcheck disable=SC2086  # $EXTRA is words
"$NCU" --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \
  "$TRAINER" inputs/gpt2_124m.in system.device=cuda train.precision="$PRECISION" \
  train.batch_size="$BATCH" model.seq_len="$SEQ" train.steps=2 train.log_every=1 \
  train.eval_every=0 data.format=random_tokens data.val_limit=0 checkpoint.every=0 \
  checkpoint.at_end=false sample.length=0 run.progress=lines run.dir="$WORK/run" $EXTRA \
  >"$CSV" 2>"$WORK/err"
rc=$?
if [ "$rc" != 0 ]; then
  echo "ncu or the trainer failed (exit $rc):" >&2
  tail -20 "$WORK/err" >&2
  grep -v '^"' "$CSV" | tail -20 >&2
  exit 1
fi
/usr/bin/python3 validation/bench/kernel_breakdown.py "$CSV" 2
