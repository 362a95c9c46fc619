#!/usr/bin/env bash
# pipeline_on_gpu.sh: pipeline parallelism on GPUs, whose activations and gradients
# go between stages as NCCL sends and receives over links (src/comm/comm.h: a
# communicator and a stream per direction), against the same runs on the CPU. The
# layout GPT (20 AdamW steps, 4 micro-batches) at pp 2 with 1F1B and with GPipe;
# tp 2 x pp 2, and pp 4 with 8 micro-batches; dp 2 x tp 2 x pp 2 with ZeRO-1;
# sequence parallelism (reduce-scatters and all-gathers in place of tp's all-reduces)
# at tp 2 x pp 2, and at tp 2 in bf16 (16-bit layernorm outputs gathered). A
# layout of more ranks than usable GPUs shares them, its messages and collectives
# staged through host copies over MPI instead of NCCL (lib.sh's gpu_staged), which
# tests all but NCCL on one GPU. Each must give the CPU's loss curve
# within 1e-4 relative per step and its validation loss over 4 windows (the
# pipeline's evaluation forward) within 1e-4 too, as trainer_on_gpu.sh asks of the
# other layouts (their training curves); bf16
# mixed precision at pp 2 within 1e-2. Text is sampled through the pipeline, and a
# pp 2 GPU checkpoint resumes on GPUs. A deadlock shows as a run stopped at its
# time limit (exit 124). Exits 77 (skipped) where no GPU is usable.
source "$(dirname "$0")/../lib.sh"
layout_gpt_setup
# GPT steps per run: 20, or TR_GPU_TEST_STEPS where the GPU is the CUDA emulator
# (validation/emu), which runs kernels on the CPU one CUDA thread at a time
S=${TR_GPU_TEST_STEPS:-20}
# the validation loss over 4 windows, not the layout GPT's 16 (at dp 2 one micro-batch
# a rank): the same evaluation forward, and on the emulator the 16 windows took a
# quarter of each run
G=("$WORK/gpt.in" "${LAYOUT_GPT[@]}" train.steps="$S" data.val_limit=4)
gpu_setup "${G[@]}"
# TR_GPU_TEST_LAYOUTS: the names of the layouts to run (default: all). The emulated
# suite's staged run (validation/emu: one GPU, so every layout staged) takes the four
# whose staged calls differ, pp 2 (point-to-point), tp 2 x pp 2 (tp's all-reduces too),
# dp 2 x tp 2 x pp 2 with ZeRO-1 (its reduce to owner and all-gather) and tp 2 x pp 2
# in sequence parallelism (tp's reduce-scatters and all-gathers): GPipe, bf16 and pp 4
# make the same calls, and its unstaged run covers them.
# pp NAME NP RTOL ARGS...: gpu_pair, and the final validation losses agree within RTOL
pp() {
  local name=$1 rtol=$3
  [ -z "${TR_GPU_TEST_LAYOUTS:-}" ] || [[ " $TR_GPU_TEST_LAYOUTS " == *" $name "* ]] || return 0
  gpu_pair "$@"
  check "$name: validation loss on cuda within $rtol of cpu" "$PYTHON" - \
    "$WORK/$name.cpu/summary.json" "$WORK/$name/summary.json" "$rtol" <<'PY'
import json, sys
a, b = (json.load(open(p))["test_loss"] for p in sys.argv[1:3])
print(f"validation loss: cpu {a:.9g}, cuda {b:.9g}")
sys.exit(0 if abs(a - b) <= float(sys.argv[3]) * abs(a) else 1)
PY
}

pp gpt_pp2 2 1e-4 "${G[@]}" parallel.pp=2
pp gpt_pp2_gpipe 2 1e-4 "${G[@]}" parallel.pp=2 parallel.schedule=gpipe
pp gpt_pp2_bf16 2 1e-2 "${G[@]}" parallel.pp=2 train.precision=bf16-mixed
pp gpt_tp2_pp2 4 1e-4 "${G[@]}" parallel.tp=2 parallel.pp=2
pp gpt_pp4_m8 4 1e-4 "${G[@]}" parallel.pp=4 train.micro_batches=8
pp gpt_dp2_tp2_pp2_zero1 8 1e-4 "${G[@]}" parallel.tp=2 parallel.pp=2 parallel.zero=1
SP=parallel.sequence_parallel=true
pp gpt_tp2_pp2_sp 4 1e-4 "${G[@]}" parallel.tp=2 parallel.pp=2 $SP
pp gpt_tp2_sp_bf16 2 1e-2 "${G[@]}" parallel.tp=2 $SP train.precision=bf16-mixed

# the pp 2 checkpoint of the last step resumes on GPUs for one step, and samples text
# through the stages (one step, not four: nothing compares the resumed curve, and on
# the emulator the three more steps took a fifth of the test)
TRAINER_STAGED_COMM=$(gpu_staged 2) run 2 "$WORK/resume.out" "$WORK/err" "${G[@]}" \
  parallel.pp=2 system.device=cuda train.steps=$((S + 1)) sample.length=16 run.dir="$WORK/gpt_pp2"
check "pp 2 on cuda resumes its checkpoint and samples: exit $RC $(tail -2 "$WORK/err")" \
  [ "$RC" = 0 ]
check "... from step $S" grep -q "resumed from .*step_$(printf %08d "$S")" "$WORK/resume.out"
check "... and prints a sample" grep -q "^sample (greedy, 16 tokens" "$WORK/resume.out"
check "no rank left running" no_leftover_ranks
finish
