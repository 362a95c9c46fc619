#!/usr/bin/env bash
# trainer_on_gpu.sh: the trainer with system.device = cuda against the same runs on
# the CPU. The MLP, the CNN and the layout GPT (20 AdamW steps) at 1 rank, and the
# GPT at dp 2 and tp 2 where 2 GPUs are usable, must give the CPU's loss curve
# within 1e-4 relative per step (fp32 on both; cuBLAS and OpenBLAS sum in different
# orders), and a GPU checkpoint must resume on the CPU. bf16-mixed runs too (its
# curve within 1e-2 of the CPU's bf16-mixed). Exits 77 (skipped) where no GPU is
# usable, which the trainer itself reports.
source "$(dirname "$0")/../lib.sh"
layout_gpt_setup
G=("$WORK/gpt.in" "${LAYOUT_GPT[@]}")
run 1 "$WORK/probe" "$WORK/err" "${G[@]}" train.steps=1 system.device=cuda run.dir="$WORK/probe.d"
if [ "$RC" != 0 ] && grep -q "no usable GPU\|built without CUDA" "$WORK/err"; then
  echo "skipped: $(grep -m1 -o 'no usable GPU.*\|built without CUDA' "$WORK/err")"
  exit 77
fi
check "a first GPU run: exit $RC $(tail -3 "$WORK/err")" [ "$RC" = 0 ]
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
cmp() { "$PYTHON" validation/compare_metrics.py "$@"; }
pair() { # pair NAME NP RTOL args...: the same run on cpu and cuda
  local name=$1 np=$2 rtol=$3; shift 3
  run "$np" "$WORK/$name.cpu.out" "$WORK/err" "$@" run.dir="$WORK/$name.cpu"
  check "$name, cpu: exit $RC" [ "$RC" = 0 ]
  run "$np" "$WORK/$name.out" "$WORK/err" "$@" system.device=cuda run.dir="$WORK/$name"
  check "$name, cuda: exit $RC $(tail -3 "$WORK/err")" [ "$RC" = 0 ]
  check "$name: cuda follows cpu within $rtol" cmp "$WORK/$name.cpu/metrics.csv" \
    "$WORK/$name/metrics.csv" --rtol "$rtol"
}
if [ -f "$SRC/data/mnist/train-images-idx3-ubyte" ]; then
  pair mlp 1 1e-4 inputs/mnist.in train.steps=100 train.log_every=1 run.progress=off
  pair cnn 1 1e-4 inputs/mnist_cnn.in train.steps=50 train.log_every=1 run.progress=off
fi
pair gpt 1 1e-4 "${G[@]}"
pair gpt_bf16 1 1e-2 "${G[@]}" train.precision=bf16-mixed
if [ "$gpus" -ge 2 ]; then
  pair gpt_dp2 2 1e-4 "${G[@]}"
  pair gpt_tp2 2 1e-4 "${G[@]}" parallel.tp=2
  pair gpt_zero1 2 1e-4 "${G[@]}" parallel.zero=1
fi
# a GPU checkpoint resumes on the CPU
run 1 "$WORK/out" "$WORK/err" "${G[@]}" train.steps=24 run.dir="$WORK/gpt"
check "the GPU run's checkpoint resumes on the CPU: exit $RC $(tail -2 "$WORK/err")" [ "$RC" = 0 ]
check "... from step 20" grep -q "resumed from .*step_00000020" "$WORK/out"
check "no rank left running" no_leftover_ranks
finish
