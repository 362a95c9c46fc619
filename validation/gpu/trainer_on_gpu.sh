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
gpu_setup "${G[@]}"
if [ -f "$SRC/data/mnist/train-images-idx3-ubyte" ]; then
  gpu_pair mlp 1 1e-4 inputs/mnist.in train.steps=100 train.log_every=1 run.progress=off
  gpu_pair cnn 1 1e-4 inputs/mnist_cnn.in train.steps=50 train.log_every=1 run.progress=off
fi
gpu_pair gpt 1 1e-4 "${G[@]}"
gpu_pair gpt_bf16 1 1e-2 "${G[@]}" train.precision=bf16-mixed
# MFU has a peak on the GPU: the datasheet's (a listed GPU) or a measured one, named
check "the GPU's peak for MFU is known: $(grep '^mfu:' "$WORK/gpt_bf16.out")" \
  grep -qE "^mfu: against [1-9][0-9.]* GFLOP/s per rank \((.*datasheet, bf16 tensor cores dense|measured: .*bf16 tensor cores)" \
  "$WORK/gpt_bf16.out"
if [ "$GPUS" -ge 2 ]; then
  gpu_pair gpt_dp2 2 1e-4 "${G[@]}"
  gpu_pair gpt_tp2 2 1e-4 "${G[@]}" parallel.tp=2
  gpu_pair gpt_zero1 2 1e-4 "${G[@]}" parallel.zero=1
fi
# a GPU checkpoint resumes on the CPU
run 1 "$WORK/out" "$WORK/err" "${G[@]}" train.steps=24 run.dir="$WORK/gpt"
check "the GPU run's checkpoint resumes on the CPU: exit $RC $(tail -2 "$WORK/err")" [ "$RC" = 0 ]
check "... from step 20" grep -q "resumed from .*step_00000020" "$WORK/out"
check "no rank left running" no_leftover_ranks
finish
