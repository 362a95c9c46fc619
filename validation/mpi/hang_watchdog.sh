#!/usr/bin/env bash
# hang_watchdog.sh: run.hang_minutes. A rank that stops answering without dying (here
# SIGSTOP: a hung node, GPU or link looks the same to its peers) leaves the others
# waiting inside a collective; their watchdogs end the job with exit 71 and a message
# that says what they were doing (rank 0 has warned half-way, once), and no rank is
# left running. A whole job that is stopped and continued (Slurm's suspend, gang
# scheduling) is not a hang: it finishes.
# A rank stuck while it frees what it holds at the end is one too: its own watchdog
# ends the job, which would otherwise wait in MPI_Finalize.
source "$(dirname "$0")/../lib.sh"
require_data

TIMEOUT_MIN=0.05 # 3 s: a step here takes about a millisecond
steps=2000
base=(inputs/mnist.in train.log_every=10 run.progress=off run.hang_minutes=$TIMEOUT_MIN)

# start_run DIR STEPS: mpirun -np 2 in the background (LAUNCHER), back once training
# is under way (its metrics have lines)
start_run() {
  timeout -k 5 120 mpirun -np 2 "$TRAINER" "${base[@]}" train.steps="$2" run.dir="$1" \
    >"$WORK/out" 2>"$WORK/err" &
  LAUNCHER=$!
  for _ in $(seq 1 1200); do
    [ -f "$1/metrics.csv" ] && [ "$(wc -l <"$1/metrics.csv")" -gt 3 ] && return
    sleep 0.05
  done
}

# 1. one rank stopped: the other ends the job
start_run "$WORK/hung" 100000000
victim=
for pid in $(trainer_pids); do # rank 1: rank 0 is the one that warns half-way
  tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qxE "(OMPI_COMM_WORLD_RANK|PMIX_RANK|PMI_RANK)=1" && victim=$pid
done
kill -STOP "$victim"
wait "$LAUNCHER"
code=$?
kill -CONT "$victim" 2>/dev/null # (only if something failed to kill it)
check "a stopped rank: the job ends with 71 (got $code) $(cat "$WORK/err")" [ "$code" = 71 ]
check "the message names the timeout and the rank" \
  grep -q "^\[rank [01]\] .*: no progress for [0-9]* s (run.hang_minutes = $TIMEOUT_MIN)" "$WORK/err"
check "the message says where the rank was" grep -q "since the start of training step [0-9]" "$WORK/err"
check "rank 0 warned once, half-way, how to keep a slow run going" [ "$(grep -c "^\[rank 0\] .*: \
no progress for [0-9]* s (run.hang_minutes = $TIMEOUT_MIN), since .*, half of the timeout: warning: at 3 s \
the job ends with exit 71. If nothing is hung and this part of the run is simply this slow, raise \
run.hang_minutes.$" "$WORK/err")" = 1 ]
check "no other rank warned" [ "$(grep -c "half of the timeout" "$WORK/err")" = 1 ]
check "no rank left running" no_leftover_ranks

# the sanitizer build checks the watchdog's memory and threads, which the above and
# every other test's watchdog (started, joined) exercise; the rest is timing logic
if sanitized; then
  finish
  exit
fi

# 2. the whole job stopped for over two timeouts and continued: it finishes
start_run "$WORK/suspended" "$steps"
pids=$(trainer_pids)
# shellcheck disable=SC2086 # one pid a word
kill -STOP $pids
sleep 7
# shellcheck disable=SC2086
kill -CONT $pids
wait "$LAUNCHER"
code=$?
check "a suspended and continued job finishes (got $code) $(cat "$WORK/err")" [ "$code" = 0 ]
check "it trained every step" [ "$(grep -c ',train,' "$WORK/suspended/metrics.csv")" = $((steps / 10)) ]
check "no rank left running" no_leftover_ranks

# 3. off: a stop longer than the timeout is waited out
base=(inputs/mnist.in train.log_every=10 run.progress=off run.hang_minutes=0)
start_run "$WORK/off" "$steps"
victim=
for pid in $(trainer_pids); do # rank 1: rank 0 is the one that warns half-way
  tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qxE "(OMPI_COMM_WORLD_RANK|PMIX_RANK|PMI_RANK)=1" && victim=$pid
done
kill -STOP "$victim"
sleep 4
kill -CONT "$victim"
wait "$LAUNCHER"
code=$?
check "run.hang_minutes = 0: the job waits for the stopped rank and finishes (got $code)" \
  [ "$code" = 0 ]

# 4. a rank stuck while it frees what it holds at the end (here its data loader's
# thread never joins: fault_preload.c) while the other waits for it in MPI_Finalize:
# its own watchdog ends the job
base=(inputs/mnist.in train.log_every=10 run.progress=off run.hang_minutes=$TIMEOUT_MIN)
check "the preload library is built: $FAULT_PRELOAD" [ -f "$FAULT_PRELOAD" ]
LD_PRELOAD="$FAULT_PRELOAD" TR_TEST_HANG_RANK=1 timeout -k 5 60 mpirun -np 2 "$TRAINER" \
  "${base[@]}" train.steps=20 checkpoint.at_end=false run.dir="$WORK/shutdown" \
  >"$WORK/out" 2>"$WORK/err"
code=$?
# (MPICH's mpiexec, Hydra, returns the signal of a rank that a signal ended, whatever
# the others' codes: once the stuck rank has exited 71 it kills the ranks still in
# MPI_Finalize, and where it does so before their own watchdogs end them, the job
# ends with SIGKILL's 9: seen once in CI; a rank exiting 71 beside one killed by
# SIGKILL, under mpiexec.mpich 4.0.2, returns 9. Open MPI's mpirun returns the 71.)
hydra=0
mpirun --version 2>&1 | grep -q HYDRA && hydra=1
check "a rank stuck at shutdown: the job ends with 71 (got $code; 9 allowed under MPICH's Hydra: $hydra) $(cat "$WORK/err")" \
  bash -c '[ "$0" = 71 ] || { [ "$1" = 1 ] && [ "$0" = 9 ]; }' "$code" "$hydra"
check "the message names the rank and where it was" \
  grep -q "^\[rank 1\] .*: no progress .* since the start of shutdown" "$WORK/err"
check "the run itself finished first" grep -q "^done: 20 steps" "$WORK/out"
check "no rank left running" no_leftover_ranks

# 4. a long sample during training (a GPT held whole by each of 2 ranks) is progress
# on every rank: each generates it, where the others used to wait for rank 0's in
# their next collective and their watchdogs ended a healthy job
bytes=$SRC/data/brown/bytes
if [ -f "$bytes.train.tok" ]; then
  len=1000
  sanitized && len=100 # (the release build checks the long one)
  printf '[model]\nname = gpt\n' >"$WORK/gpt.in"
  timeout -k 5 300 mpirun -np 2 "$TRAINER" "$WORK/gpt.in" model.n_layer=2 model.n_head=2 \
    model.n_embd=64 model.seq_len=64 model.vocab_size=256 data.format=tokens \
    data.tokenizer=bytes data.train_tokens="$bytes.train.tok" data.val_tokens="$bytes.val.tok" \
    data.val_limit=8 train.batch_size=4 train.steps=10 sample.every=5 sample.length=$len \
    run.hang_minutes=$TIMEOUT_MIN run.progress=off run.dir="$WORK/sampling" \
    >"$WORK/out" 2>"$WORK/err"
  code=$?
  check "a sample of $len tokens during training: the job finishes (got $code) $(cat "$WORK/err")" \
    [ "$code" = 0 ]
  check "... and rank 0 printed it once: $(grep 'tokens in' "$WORK/out")" \
    [ "$(grep -c "^sample at step 5 (.*$len tokens in" "$WORK/out")" = 1 ]
else
  echo "skipped: a long sample (no Brown token files; run scripts/prepare_text.sh)"
fi
check "no rank left running" no_leftover_ranks
finish
