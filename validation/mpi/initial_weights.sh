#!/usr/bin/env bash
# initial_weights.sh: a run from scratch draws the same initial parameters at every
# layout. Each rank of a data-parallel group draws only its slice of the flat
# parameter buffer (ZeRO's split) and one in-place all-gather over the group gives
# every rank the rest, so a slice drawn at the wrong offset, a counter (tensor,
# element) mapped wrongly or a gather that misses a part would show here as weights
# that differ from the single rank's. Compared: the weights after one step at
# learning rate 0 (the initial ones: a run writes no checkpoint before its first
# step), bit for bit (h5diff of /model), of the layout GPT
# at dp 2, dp 3 (slices that do not divide the buffer evenly), dp 2 x tp 2, dp 2 x
# pp 2 (the last stage's copy of the tied embedding; no ZeRO, whose all-gather after
# the step would hide a missing one at the start), on the guarded
# device (drawn on the host and uploaded a slice at a time, as on a GPU) with the
# gather through MPI and staged through host copies, and a model larger than the
# host's staging; and the MLP (PyTorch's fan-in uniform initialisation) at dp 3.
# (validation/gpu/trainer_on_gpu.sh checks dp 2 on GPUs, the gather through NCCL.)
source "$(dirname "$0")/../lib.sh"
guarded_transports
layout_gpt_setup
G=("$WORK/gpt.in" "${LAYOUT_GPT[@]}" train.steps=1 optim.lr=0 train.batch_size=12
  train.micro_batches=1)
step=checkpoints/step_00000001.h5

draw() { # draw NAME NP args...: the checkpoint of step 1 in $WORK/NAME
  local name=$1 np=$2; shift 2
  run "$np" "$WORK/$name.out" "$WORK/$name.err" "$@" run.dir="$WORK/$name"
  check "$name: exit $RC $(tail -3 "$WORK/$name.err")" [ "$RC" = 0 ]
}
same_as() { # same_as REF NAME: the same model, bit for bit
  check "$2: the initial weights of 1 rank, bit for bit" \
    h5diff -q "$WORK/$1/$step" "$WORK/$2/$step" /model /model
}

draw gpt1 1 "${G[@]}"
check "a checkpoint of step 1" [ -f "$WORK/gpt1/$step" ]
draw gpt_dp2 2 "${G[@]}"
same_as gpt1 gpt_dp2
draw gpt_dp3 3 "${G[@]}"
same_as gpt1 gpt_dp3
draw gpt_dp2_tp2 4 "${G[@]}" parallel.tp=2
same_as gpt1 gpt_dp2_tp2
draw gpt_dp2_pp2 4 "${G[@]}" parallel.pp=2
same_as gpt1 gpt_dp2_pp2
draw gpt_guarded 2 "${G[@]}" system.device=cpu-guarded
same_as gpt1 gpt_guarded
TRAINER_STAGED_COMM=1 draw gpt_guarded_staged 3 "${G[@]}" system.device=cpu-guarded
same_as gpt1 gpt_guarded_staged
# more than the 4 Mi floats the host stages at a time (model.c): 4.8 M parameters,
# uploaded in two pieces at 1 rank
W=(model.n_layer=6 model.n_embd=256)
draw gpt_wide 1 "${G[@]}" "${W[@]}"
draw gpt_wide_guarded 1 "${G[@]}" "${W[@]}" system.device=cpu-guarded
same_as gpt_wide gpt_wide_guarded

M=(inputs/mnist.in model.name=mlp train.steps=1 optim.lr=0 train.batch_size=12 train.eval_every=0)
draw mlp1 1 "${M[@]}"
draw mlp_dp3 3 "${M[@]}"
same_as mlp1 mlp_dp3
check "no rank left running" no_leftover_ranks
finish
