#!/usr/bin/env bash
# impossible.sh: requests that cannot work fail at once, with a reason, instead of
# pending or cycling through requeues.
#   Slurm refuses at submission (EnforcePartLimits=ALL) what the cluster can never
#   grant: jobs/gpt_512gpu.sh at its full size (64 nodes x 8 GPUs) on this one-node
#   cluster, and 16 GPUs on a node that has 8.
#   The trainer refuses, exit 64 on every rank, the message printed once, the job
#   FAILED and not requeued, what Slurm grants but the layout cannot use: more
#   threads than the CPUs the job holds, a tensor-parallel group that does not fit
#   the ranks of a node, and (today) the GPU script as written on this machine,
#   which has no usable GPU.
source "$(dirname "$0")/../lib.sh"
source "$SRC/validation/slurm_cluster.sh"
slurm_require
require_data
tiny_gpt_deck "$WORK/gpt.in"
slurm_start
export TRAINER
M=$SRC/data/mnist
MNIST_DATA="data.train_images=$M/train-images-idx3-ubyte data.train_labels=$M/train-labels-idx1-ubyte
  data.test_images=$M/t10k-images-idx3-ubyte data.test_labels=$M/t10k-labels-idx1-ubyte"

# refused NAME WHAT SCRIPT [sbatch options]: sbatch must fail within seconds, saying WHAT
refused() {
  local name=$1 what=$2 script=$3 t0 rc
  shift 3
  t0=$(date +%s)
  timeout 30 sbatch --parsable --chdir="$WORK" --output="$WORK/$name.out" "$@" "$script" \
    >"$WORK/$name.sbatch" 2>&1
  rc=$?
  check "$name: sbatch refused it (exit $rc: $(cat "$WORK/$name.sbatch"))" [ "$rc" = 1 ]
  check "$name: at once ($(($(date +%s) - t0)) s)" [ $(($(date +%s) - t0)) -le 10 ]
  check "$name: saying '$what'" grep -q "$what" "$WORK/$name.sbatch"
}

refused full-size "Batch job submission failed" jobs/gpt_512gpu.sh
refused too-many-gpus "Requested node configuration is not available" jobs/mnist.sh \
  --nodes=1 --ntasks-per-node=1 --cpus-per-task=1 --gpus-per-node=16

# failed NAME MESSAGE SCRIPT [sbatch options]: the job runs and ends FAILED with exit 64
# (64:0), fast, not requeued, MESSAGE printed once
failed() {
  local name=$1 what=$2 script=$3 j t0
  shift 3
  t0=$(date +%s)
  j=$(sbatch --parsable --chdir="$WORK" --output="$WORK/$name.out" --time=30 "$@" "$script")
  [ -n "$j" ] || { fail "$name: sbatch refused the job"; return; }
  slurm_wait_final "$j" 60
  check "$name: FAILED 64:0 (got $JOB_STATE $JOB_EXIT: $(grep -v '^+' "$WORK/$name.out" | tail -4))" \
    [ "$JOB_STATE/$JOB_EXIT" = "FAILED/64:0" ]
  check "$name: at once ($(($(date +%s) - t0)) s)" [ $(($(date +%s) - t0)) -le 30 ]
  check "$name: said once: $what" [ "$(grep -c -- "$what" "$WORK/$name.out")" = 1 ]
  check "$name: not requeued" [ "$(slurm_job_field "$j" Restarts)" = 0 ]
}

# 2 ranks x 4 threads on the 2 CPUs the job holds
DECK=$SRC/inputs/mnist.in OVERRIDES="$MNIST_DATA system.threads=4" \
  failed threads "holds 2 CPUs" jobs/mnist.sh --nodes=1 --ntasks-per-node=2 --cpus-per-task=1
check "threads: the message names the override and the fix" grep -q \
  "command line 'system.threads=4': 2 ranks x 4 threads (\[system\] threads) = 8 threads on a node where Slurm job [0-9]* holds 2 CPUs.*set \[system\] threads = 1 or 0" \
  "$WORK/threads.out"
# tp = 2 on 3 ranks a node: a tensor-parallel group would straddle nodes
DECK=$WORK/gpt.in DEVICE=cpu TP=2 PP=1 OVERRIDES="train.batch_size=6 train.micro_batches=1" \
  failed tp-straddles "tp = 2 does not divide the 3 ranks on this node" jobs/gpt_512gpu.sh \
  --nodes=1 --ntasks-per-node=3 --cpus-per-task=1 --gpus-per-node=0
# the GPU script as written, shrunk to one node: [system] device = cuda cannot train
# here (a CUDA build: no usable GPU; a build without CUDA: not built in), and says so
# at once rather than requeueing
DECK=$WORK/gpt.in failed cuda-not-yet "device = cuda, but" jobs/gpt_512gpu.sh \
  --nodes=1 --ntasks-per-node=2 --cpus-per-task=1 --gpus-per-node=2
check "no job left in the queue" [ -z "$(squeue -h -o %i)" ]
finish
