#!/usr/bin/env bash
# arrays.sh: job arrays and a job step that never starts, on a private single-node Slurm.
#   1. jobs/gpt_512gpu.sh as a 2-task array (--array=0-1), each task sliced by
#      run.stop_after_steps: every task checkpoints, requeues itself (one of them has
#      the array's own id as SLURM_JOB_ID, which names every task) and finishes in its
#      own run directory, runs/gpt-ARRAY_TASK;
#   2. jobs/mnist.sh as a 2-task array with a deck that sets [run] dir: the tasks
#      would share the directory; one runs, the other stops with 64 naming the job
#      that holds it (not FAILED 74 on a checkpoint the other task pruned);
#   3. a step whose tasks all fail to launch (a PMIx directory in the way): srun
#      returns 0, the job must not end COMPLETED.
source "$(dirname "$0")/../lib.sh"
source "$SRC/validation/slurm_cluster.sh"
slurm_require
require_data
tiny_gpt_deck "$WORK/gpt.in"
slurm_start
export TRAINER
M=$SRC/data/mnist

# ---- 1. every task of an array requeues itself, each in its own run directory
A=$(DECK=$WORK/gpt.in DEVICE=cpu TP=1 PP=1 OVERRIDES="train.batch_size=8 train.micro_batches=2
  train.steps=60 run.stop_after_steps=30" sbatch --parsable --chdir="$WORK" --nodes=1 \
  --ntasks-per-node=2 --cpus-per-task=1 --gpus-per-node=0 --time=30 --array=0-1 \
  --output="$WORK/arr-%a.out" jobs/gpt_512gpu.sh)
for t in 0 1; do
  slurm_wait_final "${A}_$t" 180
  r=$(slurm_job_field "${A}_$t" Restarts)
  check "array task $t: COMPLETED 0:0 after one restart (got $JOB_STATE $JOB_EXIT, Restarts=$r; $(tail -3 "$WORK/arr-$t.out"))" \
    [ "$JOB_STATE/$JOB_EXIT/$r" = "COMPLETED/0:0/1" ]
  check "array task $t: in its own run directory" \
    [ -f "$WORK/runs/gpt-${A}_$t/checkpoints/step_00000060.h5" ]
  check "array task $t: resumed there" grep -q "resumed from runs/gpt-${A}_$t/checkpoints/step_00000030.h5" \
    "$WORK/arr-$t.out"
done

# ---- 2. two tasks, one [run] dir: one runs, the other is refused
B=$(DECK=$SRC/inputs/mnist.in OVERRIDES="train.epochs=4 checkpoint.every=10 run.dir=$WORK/runs/shared
  data.train_images=$M/train-images-idx3-ubyte data.train_labels=$M/train-labels-idx1-ubyte
  data.test_images=$M/t10k-images-idx3-ubyte data.test_labels=$M/t10k-labels-idx1-ubyte" \
  sbatch --parsable --chdir="$WORK" --nodes=1 --ntasks-per-node=2 --cpus-per-task=1 --time=30 \
  --array=0-1 --output="$WORK/shared-%a.out" jobs/mnist.sh)
states=""
for t in 0 1; do
  slurm_wait_final "${B}_$t" 180
  states="$states $JOB_STATE/$JOB_EXIT"
done
check "shared run dir: one task COMPLETED, the other FAILED 64 (got$states)" \
  [ "$(echo "$states" | tr ' ' '\n' | sort | tr '\n' ' ')" = " COMPLETED/0:0 FAILED/64:0 " ]
check "shared run dir: the refused task names the job holding it" \
  grep -q "is in use by another run (Slurm job ${B}_[01], pid [0-9]* on " "$WORK"/shared-*.out

# ---- 3. every task fails to launch: srun says so and returns 0; the job fails
J=$(sbatch --parsable --hold --chdir="$WORK" --nodes=1 --ntasks-per-node=2 --cpus-per-task=1 \
  --time=30 --output="$WORK/nolaunch.out" jobs/mnist.sh)
mkdir -p "$WORK/slurm/tmp/spmix_appdir_$(id -u)_$J.0" # the PMIx directory of its step
scontrol release "$J"
slurm_wait_final "$J" 60
check "failed launch: the job FAILED 69 (got $JOB_STATE $JOB_EXIT; $(tail -3 "$WORK/nolaunch.out"))" \
  [ "$JOB_STATE/$JOB_EXIT" = "FAILED/69:0" ]
check "failed launch: says the trainer never started" \
  grep -q "srun returned 0, but the trainer never started" "$WORK/nolaunch.out"

check "no job left in the queue" [ -z "$(squeue -h -o %i)" ]
finish
