# lib.sh: shared helpers for the script tests (sourced, not run).
# Environment from CTest: TRAINER (the binary), TRAINER_SOURCE_DIR, PYTHON.
set -uo pipefail

TRAINER=${TRAINER:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/trainer}
SRC=${TRAINER_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
PYTHON=${PYTHON:-/usr/bin/python3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
# mpirun's own "process exited with non-zero status" banner is not our message
export OMPI_MCA_orte_execute_quiet=1
# When a rank exits non-zero (every bad-input case), mpirun's daemon sends the
# others SIGTERM and then waits odls_base_sigkill_timeout seconds (default 1) before
# it lets mpirun return: 2 s lost on every error run. The trainer's ranks agree on
# an error and pass MPI_Finalize (a barrier) before they exit, so nothing is left to
# wait for; a rank that hangs is still killed, and no_leftover_ranks still checks.
export OMPI_MCA_odls_base_sigkill_timeout=0
cd "$SRC" || exit 1

PASSED=0
FAILED=0
WORK=$(mktemp -d /tmp/trainer_test.XXXXXX)
export TR_TEST_TAG=$WORK
trap 'rm -rf "$WORK"' EXIT

ok() { PASSED=$((PASSED + 1)); }
fail() { FAILED=$((FAILED + 1)); echo "FAIL: $*" >&2; }
check() { # check "description" command...
  local what=$1; shift
  if "$@"; then ok; else fail "$what"; fi
}

# run NP OUTFILE ERRFILE args...: mpirun with a time limit; sets RC.
# A test that hangs is a failure, never a stuck suite. The MFU's peak is given
# (system.peak_gflops=100) unless the arguments set it or MEASURE_PEAK=1: the CPU's
# start-up calibration (0.3 s of GEMMs a run, some 200 runs a build) is checked by
# e2e.gpt_learns, and no other test reads what it measures.
run() {
  local np=$1 out=$2 err=$3; shift 3
  local peak=(system.peak_gflops=100)
  if [ "${MEASURE_PEAK:-0}" = 1 ] || [[ " $* " == *" system.peak_gflops="* ]]; then peak=(); fi
  timeout -k 5 ${RUN_TIMEOUT:-120} mpirun -np "$np" "$TRAINER" "$@" "${peak[@]}" >"$out" 2>"$err"
  RC=$?
}

# For the scripts that run system.device=cpu-guarded: its model memory is PROT_NONE
# outside the rank's own kernels and MPI calls, and UCX's single-copy transport (cma:
# process_vm_readv, as MPICH 4 on Debian uses it) reads a peer's send buffer while
# that peer computes, which then fails with EFAULT and kills the job. A GPU's memory
# stays readable to such transports (CUDA IPC); the guard cannot tell them apart, so
# these runs keep UCX to copies through shared memory, on this one node (not ^cma:
# UCX then also takes tcp, and MPICH's MPI_Finalize stalled for minutes on it). (Open
# MPI's vader, which also has cma, passes these runs as it is; why it never fails that
# way is not traced.)
guarded_transports() { export UCX_TLS=${UCX_TLS:-self,posix,sysv}; }

# true in the AddressSanitizer build, where tests run shorter versions of their
# runs: they check memory there, and the release build checks the full curves
# (ldd's whole output first: under pipefail, `ldd | grep -q` fails when grep's early
# exit cuts ldd off with SIGPIPE, which tests running side by side made happen)
sanitized() { [[ $(ldd "$TRAINER" 2>/dev/null) == *libasan* ]]; }

# time_accounted RUN_DIR OUT [sampled]: summary.json's parts of the session's time
# are there, disjoint (set-up, steps, evaluation, checkpoints and samples add up to
# no more than wall_seconds; the waits for data, the gradient sync and the other
# pipeline stages lie inside the steps), evaluation and checkpoints took time, and
# so did samples if "sampled"; and OUT's "time:" line says the same wall time
time_accounted() {
  "$PYTHON" - "$1/summary.json" "$2" "${3:-}" <<'PY'
import json, re, sys
s = json.load(open(sys.argv[1]))
parts = ["setup_seconds", "train_seconds", "eval_seconds", "checkpoint_seconds", "sample_seconds"]
waits = ["data_wait_seconds", "comm_wait_seconds", "pipeline_wait_seconds"]
t = {k: s[k] for k in parts + waits + ["wall_seconds"]}
assert all(v >= 0 for v in t.values()), t
assert sum(t[k] for k in parts) <= t["wall_seconds"] + 0.005, t
assert sum(t[k] for k in waits) <= t["train_seconds"] + 0.001, t
assert t["eval_seconds"] > 0 and t["checkpoint_seconds"] > 0, t
assert (t["sample_seconds"] > 0) == (sys.argv[3] == "sampled"), t
line = [l for l in open(sys.argv[2]) if l.startswith("time: ")]
assert len(line) == 1, line
m = re.match(r"time: ([0-9.]+) s = set-up ([0-9.]+) \+ steps ([0-9.]+)", line[0])
assert m and abs(float(m[1]) - t["wall_seconds"]) < 0.006, (line, t)
PY
}

# no_leftover_ranks: none of this test's ranks is left 0.2 s after its run ended (a
# rank that timeout or a signal killed may take a moment to go). Looked for every
# 20 ms, so that the usual case, none left, costs no wait (it was a sleep of 0.2 s
# each time: 11 s of mpi.bad_input's 53 cases).
no_leftover_ranks() {
  local end=$((${EPOCHREALTIME/[.,]/} + 200000)) # microseconds
  while [ -n "$(test_pids "$TRAINER ")" ]; do
    [ "${EPOCHREALTIME/[.,]/}" -ge "$end" ] && return 1
    sleep 0.02
  done
}

require_data() {
  if [ ! -f "$SRC/data/mnist/train-images-idx3-ubyte" ]; then
    echo "skipped: no MNIST data (run scripts/prepare_data.sh)"
    exit 77
  fi
}

finish() {
  echo "$PASSED passed, $FAILED failed"
  [ "$FAILED" = 0 ]
}

# test_pids PATTERN: this test's processes whose command line matches PATTERN (pgrep
# -f), in pid order. A process is this test's when its environment holds this test's
# TR_TEST_TAG (exported below, inherited through timeout, mpirun and srun by every
# rank), so that tests running side by side (ctest -j) neither see nor signal each
# other's ranks.
test_pids() {
  local p
  for p in $(pgrep -f "$1"); do
    grep -qzxF "TR_TEST_TAG=$TR_TEST_TAG" "/proc/$p/environ" 2>/dev/null && echo "$p"
  done
  return 0
}
# this test's ranks currently running (their command line starts with the trainer)
trainer_pids() { test_pids "^$TRAINER "; }

# h5_same A B: the model and optimizer state of two checkpoints are bit-identical
h5_same() {
  h5diff -q "$1" "$2" /model /model && h5diff -q "$1" "$2" /optimizer /optimizer
}

# layout_gpt_setup: the GPT of the layout tests (gpt_layouts.sh,
# gpt_checkpoint_layouts.sh): 4 blocks and 4 heads (tp up to 4, pp up to 4) on the
# Brown bytes, unshuffled, global batch 8 in 4 micro-batches, 20 AdamW steps with
# clipping at a learning rate low enough for a smooth curve. Writes $WORK/gpt.in and
# sets the array LAYOUT_GPT; exits 77 (skipped) without the Brown token files.
layout_gpt_setup() {
  local bytes=$SRC/data/brown/bytes
  [ -f "$bytes.train.tok" ] ||
    { echo "skipped: no Brown token files (run scripts/prepare_text.sh)"; exit 77; }
  printf '[model]\nname = gpt\n' >"$WORK/gpt.in"
  LAYOUT_GPT=(model.n_layer=4 model.n_head=4 model.n_embd=64 model.seq_len=32
    model.vocab_size=256 data.format=tokens data.tokenizer=bytes
    data.train_tokens="$bytes.train.tok" data.val_tokens="$bytes.val.tok" data.val_limit=16
    data.shuffle=false train.batch_size=8 train.micro_batches=4 train.steps=20
    train.eval_every=0 train.log_every=1 optim.name=adamw optim.lr=1e-3
    optim.clip_grad_norm=1.0 optim.weight_decay=0.1 run.progress=off sample.length=0)
}

# gpu_setup ARGS...: for the scripts of validation/gpu: one step of ARGS (a GPT on
# token data) on one GPU, at batch 2 in one micro-batch and evaluated on one window:
# it finds whether a GPU is usable, and the runs after it check the rest (on the CUDA
# emulator the deck's whole batch and evaluation took 5-13 s, this 1.5). Exits 77
# (skipped) where no GPU is usable or CUDA is not built in, which the
# trainer itself reports; any other failure fails the test. Sets GPUS, the GPUs the
# runs can use: CUDA's count (trainer --version), which honours CUDA_VISIBLE_DEVICES
# as the runs do. Not nvidia-smi's list, which shows every GPU of the node whatever
# the job was given (runs of more ranks than usable GPUs then fail rather than being
# left out), and is missing in some containers where CUDA works.
gpu_setup() {
  run 1 "$WORK/probe" "$WORK/err" "$@" train.steps=1 train.batch_size=2 train.micro_batches=1 \
    data.val_limit=1 system.device=cuda run.dir="$WORK/probe.d"
  # (not where the node has GPUs that CUDA cannot use, "though the node has N NVIDIA
  # GPUs": a broken GPU node fails rather than passing as one without GPUs)
  if [ "$RC" != 0 ] && grep -q "no usable GPU\|built without CUDA" "$WORK/err" &&
    ! grep -q "though the node has" "$WORK/err"; then
    echo "skipped: $(grep -m1 -o 'no usable GPU.*\|built without CUDA' "$WORK/err")"
    exit 77
  fi
  check "a first GPU run: exit $RC $(tail -3 "$WORK/err")" [ "$RC" = 0 ]
  GPUS=$("$TRAINER" --version | sed -n 's/^CUDA probe compiled in: \([0-9][0-9]*\) CUDA device.*/\1/p')
  GPUS=${GPUS:-0}
}

# gpu_staged NP: 1 where NP ranks are more than the usable GPUs ($GPUS): their GPU
# run then shares the GPUs, its collectives and messages staged through host copies
# over MPI (TRAINER_STAGED_COMM=1: NCCL refuses one device twice), which tests the
# layout's device code on one GPU, all but NCCL; else 0.
gpu_staged() { if [ "$1" -gt "${GPUS:-0}" ]; then echo 1; else echo 0; fi; }

# gpu_pair NAME NP RTOL ARGS...: the same run on the CPU ($WORK/NAME.cpu) and on
# GPUs ($WORK/NAME), staged (gpu_staged) where NP ranks are more than the GPUs; the
# training loss curves must agree within RTOL per step.
gpu_pair() {
  local name=$1 np=$2 rtol=$3 staged; shift 3
  staged=$(gpu_staged "$np")
  run "$np" "$WORK/$name.cpu.out" "$WORK/err" "$@" run.dir="$WORK/$name.cpu"
  check "$name, cpu: exit $RC" [ "$RC" = 0 ]
  TRAINER_STAGED_COMM=$staged run "$np" "$WORK/$name.out" "$WORK/err" "$@" system.device=cuda \
    run.dir="$WORK/$name"
  check "$name, cuda$([ "$staged" = 1 ] && echo " ($np ranks on $GPUS GPU(s), staged)"): exit $RC $(tail -3 "$WORK/err")" [ "$RC" = 0 ]
  check "$name: cuda follows cpu within $rtol" "$PYTHON" validation/compare_metrics.py \
    "$WORK/$name.cpu/metrics.csv" "$WORK/$name/metrics.csv" --rtol "$rtol"
}
