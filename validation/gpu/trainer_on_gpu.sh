#!/usr/bin/env bash
# trainer_on_gpu.sh: the trainer with system.device = cuda against the same runs on
# the CPU. The MLP, the CNN and the layout GPT (20 AdamW steps) at 1 rank, and the
# GPT at dp 2, tp 2 and ZeRO-1 (2 ranks: on one GPU, where only one is usable, with
# their collectives staged through host copies, lib.sh's gpu_staged), must give the CPU's loss curve
# within 1e-4 relative per step (fp32 on both; cuBLAS and OpenBLAS sum in different
# orders), and a GPU checkpoint must resume on the CPU (one written in the background,
# checkpoint.async, into the CPU run's curve), and the initial weights drawn a slice a
# rank at dp 2 are the CPU's single rank's bit for bit. bf16-mixed runs too (its
# curve within 1e-2 of the CPU's bf16-mixed), with each of the two tensor-core
# attention forms (TRAINER_CUDA_ATTENTION), and fp16-mixed (within 1e-2). A CPU
# checkpoint's weights start a GPU run (checkpoint.init_from) bit for bit. Dropout at every site draws the CPU's masks on
# the GPU (dropout_math.h): the tp 2 pair runs with it (fp32 attention kernels), and so
# does the mma.sync pair (bf16-mixed). Exits 77 (skipped)
# where no GPU is usable, which the trainer itself reports. A run whose checkpoints'
# host copies do not fit the host, or whose plan does not fit the GPU, stops with
# exit 71 and the figures.
# The GPU's memory beyond the plan's one reservation after the first step (the
# trainer's "device memory:" line, from cudaMemGetInfo) must stay under 24 MiB at
# 1 rank: cuBLAS's workspace and the backend's scratch are inside the reservation,
# so what remains is the driver's own (kernel code loaded on first use, the 2 MiB
# granularity of the reservation). 24 MiB is below the 32 MiB pool cuBLAS would
# allocate for itself on an H100 were it not given its workspace, and below any
# model buffer allocated outside the plan at this size would be. At 2 ranks NCCL's
# buffers come on top, so the check is at 1 rank only.
source "$(dirname "$0")/../lib.sh"
layout_gpt_setup
# GPT steps per run: 20, or TR_GPU_TEST_STEPS where the GPU is the CUDA emulator
# (validation/emu), which runs kernels on the CPU one CUDA thread at a time
S=${TR_GPU_TEST_STEPS:-20}
# evaluated on 4 validation windows, not the layout GPT's 16: only the training curves
# are compared here, and on the emulator the 16 windows' forward cost more than a step
G=("$WORK/gpt.in" "${LAYOUT_GPT[@]}" train.steps="$S" data.val_limit=4)
gpu_setup "${G[@]}"
if [ -f "$SRC/data/mnist/train-images-idx3-ubyte" ]; then
  gpu_pair mlp 1 1e-4 inputs/mnist.in train.steps=$((5 * S)) train.log_every=1 run.progress=off
  # the CNN evaluated on the first 200 test images (its deck's 2000 took the emulator
  # longer than its 5 steps; the evaluation's kernels are the same)
  "$PYTHON" - "$SRC/data/mnist" "$WORK" 200 <<'PY'
import struct, sys
src, dst, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
for name, header, record in (("t10k-images-idx3-ubyte", 16, 784), ("t10k-labels-idx1-ubyte", 8, 1)):
    b = open(f"{src}/{name}", "rb").read()
    assert struct.unpack(">I", b[4:8])[0] >= n, name
    open(f"{dst}/{name}", "wb").write(b[:4] + struct.pack(">I", n) + b[8:header + n * record])
PY
  gpu_pair cnn 1 1e-4 inputs/mnist_cnn.in train.steps=$((5 * S / 2)) train.log_every=1 \
    run.progress=off data.test_images="$WORK/t10k-images-idx3-ubyte" \
    data.test_labels="$WORK/t10k-labels-idx1-ubyte"
  check "the CNN evaluated its 200 test images" grep -q "^data: .*, 200 test samples" \
    "$WORK/cnn.out"
fi
# (its checkpoint halfway written in the background: a GPU's thread writes from the
# host copies the checkpoint downloaded, checked by the resume below)
H=$((S / 2))
gpu_pair gpt 1 1e-4 "${G[@]}" checkpoint.every=$H checkpoint.async=true
check "the GPU run's checkpoint at step $H written in the background" \
  grep -q "step_$(printf %08d "$H").h5: .*, written in the background" "$WORK/gpt.out"
beyond=$(grep -m1 "^device memory:" "$WORK/gpt.out")
check "the GPU run reports its memory beyond the plan: '$beyond'" [ -n "$beyond" ]
check "memory beyond the plan under 24 MiB after the first step: '$beyond'" "$PYTHON" -c "
import re, sys
m = re.search(r'device memory: ([0-9.]+) (B|KiB|MiB|GiB)', '''$beyond''')
b = float(m.group(1)) * {'B': 1, 'KiB': 2**10, 'MiB': 2**20, 'GiB': 2**30}[m.group(2)]
sys.exit(0 if b < 24 * 2**20 else 1)"
MEASURE_PEAK=1 gpu_pair gpt_bf16 1 1e-2 "${G[@]}" train.precision=bf16-mixed
# MFU has a peak on the GPU: the datasheet's (a listed GPU) or a measured one, named
check "the GPU's peak for MFU is known: $(grep '^mfu:' "$WORK/gpt_bf16.out")" \
  grep -qE "^mfu: against [1-9][0-9.]* GFLOP/s per rank \((.*datasheet, bf16 tensor cores dense|measured: .*bf16 tensor cores)" \
  "$WORK/gpt_bf16.out"
# fp16-mixed: fp16 attention on WMMA, dynamic loss scaling (the same steps skipped)
gpu_pair gpt_fp16 1 1e-2 "${G[@]}" train.precision=fp16-mixed
# the mma.sync attention kernels (opt-in until they have run on a GPU), the same curve,
# with dropout at every site
DROP=(model.embd_pdrop=0.1 model.attn_pdrop=0.1 model.resid_pdrop=0.1)
TRAINER_CUDA_ATTENTION=mma gpu_pair gpt_bf16_mma 1 1e-2 "${G[@]}" train.precision=bf16-mixed \
  "${DROP[@]}"
# 2 ranks: on one GPU (where no second is usable) staged through host copies
gpu_pair gpt_dp2 2 1e-4 "${G[@]}"
gpu_pair gpt_tp2 2 1e-4 "${G[@]}" parallel.tp=2 "${DROP[@]}"
gpu_pair gpt_zero1 2 1e-4 "${G[@]}" parallel.zero=1
# the initial weights at dp 2: each rank draws its slice on the host, uploads it and
# all-gathers the rest (NCCL, or staged); one step at learning rate 0 leaves them as
# drawn, which must be the CPU's single rank's bit for bit
I=("${G[@]}" train.steps=1 optim.lr=0)
run 1 "$WORK/out" "$WORK/err" "${I[@]}" run.dir="$WORK/init.cpu"
check "initial weights, cpu: exit $RC" [ "$RC" = 0 ]
TRAINER_STAGED_COMM=$(gpu_staged 2) run 2 "$WORK/out" "$WORK/err" "${I[@]}" system.device=cuda \
  run.dir="$WORK/init"
check "initial weights, cuda at dp 2: exit $RC $(tail -3 "$WORK/err")" [ "$RC" = 0 ]
check "initial weights at dp 2 on the GPU: the CPU's single rank's, bit for bit" h5diff -q \
  "$WORK/init.cpu/checkpoints/step_00000001.h5" "$WORK/init/checkpoints/step_00000001.h5" /model /model
# a GPU checkpoint resumes on the CPU
run 1 "$WORK/out" "$WORK/err" "${G[@]}" train.steps=$((S + 4)) run.dir="$WORK/gpt"
check "the GPU run's checkpoint resumes on the CPU: exit $RC $(tail -2 "$WORK/err")" [ "$RC" = 0 ]
check "... from step $S" grep -q "resumed from .*step_$(printf %08d "$S")" "$WORK/out"
# the one written in the background resumes on the CPU into the CPU run's curve
run 1 "$WORK/out" "$WORK/err" "${G[@]}" run.dir="$WORK/gpt_async" \
  checkpoint.resume="$WORK/gpt/checkpoints/step_$(printf %08d "$H").h5"
check "the background checkpoint resumes on the CPU: exit $RC $(tail -2 "$WORK/err")" [ "$RC" = 0 ]
check "... and follows the CPU run within 1e-4" "$PYTHON" validation/compare_metrics.py \
  "$WORK/gpt.cpu/metrics.csv" "$WORK/gpt_async/metrics.csv" --common --min-steps $((S - H)) \
  --rtol 1e-4
# out of memory, before anything is allocated: the host's (the checkpoints' host
# copies of a 155 G-parameter model, 1.7 TiB) and the GPU's (309 GiB of activations)
run 1 "$WORK/out" "$WORK/err" "${G[@]}" system.device=cuda model.n_layer=48 \
  model.n_embd=16384 model.n_head=128 run.dir="$WORK/oom_host"
check "host memory too small for a GPU run: exit $RC, expected 71" [ "$RC" = 71 ]
check "... names the host copies and the fix: $(cat "$WORK/err")" grep -q \
  "^out of host memory: each rank of this GPU run needs .* (host copies of the weights and optimizer state for checkpoints .*); use parallel.zero = 1" \
  "$WORK/err"
run 1 "$WORK/out" "$WORK/err" "${G[@]}" system.device=cuda model.n_embd=256 \
  train.batch_size=131072 train.micro_batches=1 run.dir="$WORK/oom_gpu"
check "GPU memory too small: exit $RC, expected 71" [ "$RC" = 71 ]
check "... with the plan's figures and the fix: $(cat "$WORK/err")" grep -q \
  "^out of cuda memory: .*; the plan (trainer --plan) per rank: parameters .* at batch 131072.*; reduce \[train\] batch_size" \
  "$WORK/err"
# ... and the fewest micro-batches that fit the GPU's free memory, which the plan of
# that many confirms (the GPU's memory given as the free memory the message names)
micro=$(sed -n 's/.*; at \[train\] micro_batches = \([0-9]*\) (micro-batches of [0-9]*) a rank would need .*/\1/p' "$WORK/err")
free=$(sed -n 's/.* GiB of GPU memory asked for, \([0-9.]*\) GiB free of .*/\1/p' "$WORK/err")
check "... names the micro-batches that fit: '$micro' of '$free' GiB" [ -n "$micro" ] && [ -n "$free" ]
"$TRAINER" --plan "${G[@]}" system.device=cuda model.n_embd=256 train.batch_size=131072 \
  train.micro_batches="$micro" --device-memory "${free}GiB" >"$WORK/out" 2>&1
check "... which the plan says fit: $(grep -E '^(fits|warning)' "$WORK/out")" \
  grep -q "^fits: " "$WORK/out"
[ "$micro" -gt 1 ] && "$TRAINER" --plan "${G[@]}" system.device=cuda model.n_embd=256 \
  train.batch_size=131072 train.micro_batches=$((micro / 2)) --device-memory "${free}GiB" \
  >"$WORK/out" 2>&1
check "... and half as many do not: $(grep -E '^(fits|warning)' "$WORK/out")" \
  grep -q "^warning: does not fit" "$WORK/out"
# a CPU checkpoint's weights start a GPU run (checkpoint.init_from, bf16-mixed: into the
# master weights through their host copy)
src_ckpt="$WORK/gpt.cpu/checkpoints/step_$(printf %08d "$S").h5"
run 1 "$WORK/out" "$WORK/err" "${G[@]}" train.steps=1 system.device=cuda \
  train.precision=bf16-mixed checkpoint.at_start=true checkpoint.init_from="$src_ckpt" \
  run.dir="$WORK/gpt_init"
check "init_from on the GPU: exit $RC $(tail -2 "$WORK/err")" [ "$RC" = 0 ]
check "init_from on the GPU: its step-0 checkpoint holds the CPU run's weights" \
  h5diff -q "$src_ckpt" "$WORK/gpt_init/checkpoints/step_00000000.h5" /model /model
check "no rank left running" no_leftover_ranks
finish
