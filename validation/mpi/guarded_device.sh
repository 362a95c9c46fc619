#!/usr/bin/env bash
# guarded_device.sh: the device code path, checked on the CPU. system.device =
# cpu-guarded keeps every model, gradient and optimizer buffer in one arena that is
# unreadable except inside a kernel, a transfer of the device table or an MPI call,
# as GPU memory is to host code; any host code that reads or writes it directly dies
# with SIGSEGV. Each run must finish, and give bit-identically the losses of the same
# run on the plain CPU device (the same kernels): the MLP and the CNN at 2 ranks, the
# layout GPT at 1 rank (fp32, and bf16-mixed with evaluations), tp 2, pp 2 with
# ZeRO 1, fp16-mixed and dropout at every site (and, with collectives staged through host copies as when
# ranks share a GPU, tp 2 x pp 2, dp 2 x pp 2 with ZeRO-2 and dp 2), dp 2 x tp 2 with sampling (bf16-mixed),
# tp 2 x pp 2 in sequence parallelism with dropout (bf16-mixed; and staged, its
# reduce-scatters and all-gathers through host copies), and a
# GPT checkpoint written and resumed through the guarded device (also one written in
# the background, checkpoint.async). In bf16/fp16-mixed the guarded
# device keeps the logits in 16 bits as a GPU does (device_guarded_logits.c), so these
# runs take the model's 16-bit-logits code: the whole and the split vocabulary's
# cross-entropy, the accuracy, the pipeline's last stage and the sampler.
source "$(dirname "$0")/../lib.sh"
guarded_transports
layout_gpt_setup
G=("$WORK/gpt.in" "${LAYOUT_GPT[@]}" train.steps=8)
# under the sanitizers (which check memory themselves, slowly) only the layout with
# the most code paths and the resume
ASAN=0
sanitized && ASAN=1
same() { # same NAME NP args...: cpu and cpu-guarded runs, identical metrics.csv
  local name=$1 np=$2; shift 2
  run "$np" "$WORK/$name.cpu.out" "$WORK/err" "$@" run.dir="$WORK/$name.cpu"
  check "$name, cpu: exit $RC $(tail -2 "$WORK/err")" [ "$RC" = 0 ]
  run "$np" "$WORK/$name.out" "$WORK/err" "$@" system.device=cpu-guarded run.dir="$WORK/$name"
  check "$name, cpu-guarded: exit $RC $(grep -m3 -i 'error\|signal\|fail' "$WORK/err")" [ "$RC" = 0 ]
  check "$name: cpu-guarded gives the cpu's losses bit for bit" \
    diff <(cut -d, -f1-7 "$WORK/$name.cpu/metrics.csv") <(cut -d, -f1-7 "$WORK/$name/metrics.csv")
}
if [ "$ASAN" = 0 ] && [ -f "$SRC/data/mnist/train-images-idx3-ubyte" ]; then
  same mlp 2 inputs/mnist.in train.steps=30 train.eval_every=15 train.log_every=1 run.progress=off
  same cnn 2 inputs/mnist_cnn.in train.steps=6 train.log_every=1 train.eval_batch_size=200 \
    data.train_limit=2000 run.progress=off
fi
same gpt_3d 4 "${G[@]}" parallel.tp=2 parallel.pp=2 parallel.zero=1 train.precision=fp16-mixed \
  model.embd_pdrop=0.1 model.attn_pdrop=0.1 model.resid_pdrop=0.1
# collectives and messages on device memory staged through host copies
# (TRAINER_STAGED_COMM=1, how ranks sharing one GPU run: gpu.trainer_on_gpu): the same
# bits, and MPI gets no access to the guarded memory then, so a call on it that is not
# staged dies. The 3-D layout's tp sums and pipeline messages (dp 1: no ZeRO), dp 2 x
# pp 2's ZeRO-2 (reduce to owner and all-gather, bucketed, through MPI) and dp 2's
# bucketed non-blocking all-reduces. (Staged broadcasts, which the trainer makes on
# host memory only, are mpi.staged_comm's; its reduce-scatters on device memory, of
# sequence parallelism, are gpt_sp_staged's below.)
TRAINER_STAGED_COMM=1 same gpt_3d_staged 4 "${G[@]}" parallel.tp=2 parallel.pp=2 \
  train.precision=fp16-mixed
check "the banner says the device's memory is staged" \
  grep -q "sums through .*device memory staged through the host" "$WORK/gpt_3d_staged.out"
TRAINER_STAGED_COMM=1 same gpt_pp2_zero2_staged 4 "${G[@]}" parallel.pp=2 parallel.zero=2 \
  parallel.shm_allreduce=false parallel.bucket_kib=16
TRAINER_STAGED_COMM=1 same gpt_dp2_staged 2 "${G[@]}" parallel.shm_allreduce=false \
  parallel.bucket_kib=16
TRAINER_STAGED_COMM=yes run 2 "$WORK/out" "$WORK/err" "${G[@]}" system.device=cpu-guarded \
  run.dir="$WORK/bad_env"
check "TRAINER_STAGED_COMM=yes: exit $RC (64 expected)" [ "$RC" = 64 ]
check "... said once what it takes" \
  [ "$(grep -c "TRAINER_STAGED_COMM=yes in the environment: expected 1" "$WORK/err")" = 1 ]
# ranks that differ (one would make NCCL communicators the other never joins) stop
# shellcheck disable=SC2016  # the wrapper's own expansions
printf '#!/usr/bin/env bash\n[ "${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-${PMI_RANK:-0}}}" = 1 ] && export TRAINER_STAGED_COMM=1\nexec "%s" "$@"\n' \
  "$TRAINER" >"$WORK/rank1_staged.sh"
chmod +x "$WORK/rank1_staged.sh"
TRAINER="$WORK/rank1_staged.sh" run 2 "$WORK/out" "$WORK/err" "${G[@]}" \
  system.device=cpu-guarded run.dir="$WORK/half_staged"
check "TRAINER_STAGED_COMM on rank 1 only: exit $RC (64 expected)" [ "$RC" = 64 ]
check "... said once" [ "$(grep -c "is 1 on some ranks and not on others" "$WORK/err")" = 1 ]
if [ "$ASAN" = 0 ]; then
  same gpt1 1 "${G[@]}"
  same gpt1_bf16 1 "${G[@]}" train.precision=bf16-mixed train.eval_every=4
  check "gpt1_bf16: the guarded device keeps 16-bit logits (its plan)" bash -c \
    '"$0" --plan "$@" | grep -q "the logits .* of it, bf16)"' "$TRAINER" "${G[@]}" \
    train.precision=bf16-mixed system.device=cpu-guarded
  same gpt_tp2 2 "${G[@]}" parallel.tp=2
  # top-k sampling draws by the logits' values (greedy text from a model this young
  # is one letter over and over, whatever the logits); -a: byte tokens are binary
  same gpt_sample 4 "${G[@]}" parallel.tp=2 sample.length=12 sample.top_k=50 \
    sample.temperature=1 train.precision=bf16-mixed
  # sequence parallelism: its copies and gathers of 16-bit rows on device memory
  SP=(parallel.tp=2 parallel.pp=2 parallel.sequence_parallel=true train.precision=bf16-mixed)
  same gpt_sp 4 "${G[@]}" "${SP[@]}" model.embd_pdrop=0.1 model.attn_pdrop=0.1 \
    model.resid_pdrop=0.1
  TRAINER_STAGED_COMM=1 same gpt_sp_staged 4 "${G[@]}" "${SP[@]}"
  sample_text() { grep -a -A2 '^sample' "$1" | tail -n +2; } # the text, not the timing
  check "sampling printed the same text" diff <(sample_text "$WORK/gpt_sample.cpu.out") \
    <(sample_text "$WORK/gpt_sample.out")
fi
# a checkpoint through the host copies: stopped at step 4, resumed, the same run
run 2 "$WORK/out" "$WORK/err" "${G[@]}" parallel.zero=1 system.device=cpu-guarded \
  run.dir="$WORK/cut" run.stop_after_steps=4
check "cpu-guarded stopped at step 4: exit $RC (75 expected)" [ "$RC" = 75 ]
run 2 "$WORK/out" "$WORK/err" "${G[@]}" parallel.zero=1 system.device=cpu-guarded run.dir="$WORK/cut"
check "cpu-guarded resumed: exit $RC $(tail -2 "$WORK/err")" [ "$RC" = 0 ]
run 2 "$WORK/out" "$WORK/err" "${G[@]}" parallel.zero=1 run.dir="$WORK/straight"
check "resumed through the guarded device: the uninterrupted cpu run's checkpoint" h5_same \
  "$WORK/straight/checkpoints/step_00000008.h5" "$WORK/cut/checkpoints/step_00000008.h5"
# the same from a checkpoint written in the background (checkpoint.async), which on a
# device host code cannot touch is written from the host copies themselves
run 2 "$WORK/out" "$WORK/err" "${G[@]}" parallel.zero=1 system.device=cpu-guarded \
  run.dir="$WORK/bg" checkpoint.async=true checkpoint.every=3 run.stop_after_steps=4
check "cpu-guarded, async: stopped at step 4: exit $RC (75 expected) $(tail -2 "$WORK/err")" \
  [ "$RC" = 75 ]
check "... step 3 written in the background" \
  grep -q "step_00000003.h5: .*, written in the background" "$WORK/out"
run 2 "$WORK/out" "$WORK/err" "${G[@]}" parallel.zero=1 system.device=cpu-guarded \
  run.dir="$WORK/bg" checkpoint.resume="$WORK/bg/checkpoints/step_00000003.h5"
check "cpu-guarded resumed from step 3: exit $RC $(tail -2 "$WORK/err")" [ "$RC" = 0 ]
check "resumed from the background checkpoint: the uninterrupted cpu run's checkpoint" \
  h5_same "$WORK/straight/checkpoints/step_00000008.h5" "$WORK/bg/checkpoints/step_00000008.h5"
check "no rank left running" no_leftover_ranks
finish
