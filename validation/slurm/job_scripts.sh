#!/usr/bin/env bash
# job_scripts.sh: the job scripts of jobs/ run as they are on a private single-node
# Slurm, shrunk by sbatch command-line options (which override #SBATCH lines) and the
# scripts' own variables (DECK, DEVICE, OVERRIDES):
#   - jobs/mnist.sh on 2 ranks: trains to the end; the deck's [run] dir is kept;
#   - jobs/gpt2_124m_8gpu.sh on the CPU with a 2-layer model, holding 2 (fake) GPUs:
#     trains to the end, and the trainer warns once that the GPUs stay idle;
#   - jobs/gpt_512gpu.sh with a deck that sets no [run] dir: the run directory is
#     named after the job (runs/gpt-JOBID) and the resolved deck says so;
# and the trainer logs the allocation once (job id, nodes, ranks per node, CPUs);
#   - jobs/mnist.sh with a rank stopped mid-run: the job fails within seconds
#     (run.hang_minutes), no rank left.
# (The preemption cycle is requeue.sh; requests that must fail, impossible.sh.)
source "$(dirname "$0")/../lib.sh"
source "$SRC/validation/slurm_cluster.sh"
slurm_require
require_data
tiny_gpt_deck "$WORK/gpt.in"
slurm_start
export TRAINER
M=$SRC/data/mnist
BYTES=$SRC/data/brown/bytes
# submit NAME SCRIPT [sbatch options]: runs to the end; sets J, OUT, JOB_STATE, JOB_EXIT.
# The time limit stays above the scripts' --signal lead (up to 10 minutes), or Slurm
# would signal the job as soon as it starts.
submit() {
  local name=$1 script=$2
  shift 2
  OUT=$WORK/$name.out
  J=$(sbatch --parsable --chdir="$WORK" --output="$OUT" --time=30 "$@" "$script")
  [ -n "$J" ] || { fail "$name: sbatch refused the job"; return; }
  slurm_wait_final "$J" 120
  check "$name: COMPLETED 0:0 (got $JOB_STATE $JOB_EXIT; $(tail -3 "$OUT"))" \
    [ "$JOB_STATE/$JOB_EXIT" = "COMPLETED/0:0" ]
}

# ---- the MLP on CPU nodes, shrunk to one node of 2 ranks
DECK=$SRC/inputs/mnist.in OVERRIDES="train.epochs=1 data.train_images=$M/train-images-idx3-ubyte
  data.train_labels=$M/train-labels-idx1-ubyte data.test_images=$M/t10k-images-idx3-ubyte
  data.test_labels=$M/t10k-labels-idx1-ubyte" \
  submit mnist jobs/mnist.sh --nodes=1 --ntasks-per-node=2 --cpus-per-task=1
check "mnist: the allocation logged once" [ "$(grep -c "^slurm: job $J \"mnist\"" "$OUT")" = 1 ]
check "mnist: 2 ranks, 1 thread each, as the job asked" \
  grep -q "^slurm: job $J \"mnist\" on 1 node $SLURM_NODE: 2 ranks, 2 on this node (Slurm: 2), 1 CPUs per task" "$OUT"
check "mnist: trained to the end" grep -q "^done: 62 steps.*test accuracy" "$OUT"
check "mnist: the deck's [run] dir is kept" grep -q '"ranks": 2' "$WORK/runs/mnist/summary.json"

# ---- GPT-2 124M's one-node script, on the CPU with a small model
DEVICE=cpu DECK=$SRC/inputs/gpt2_124m.in OVERRIDES="model.n_layer=2 model.n_head=2
  model.n_embd=32 model.seq_len=16 model.vocab_size=256 data.tokenizer=bytes
  data.train_tokens=$BYTES.train.tok data.val_tokens=$BYTES.val.tok data.val_limit=8
  train.steps=20 train.batch_size=8 train.eval_every=0 optim.warmup_steps=2 sample.length=0
  checkpoint.every=0" \
  submit gpt2-124m jobs/gpt2_124m_8gpu.sh --ntasks-per-node=2 --cpus-per-task=1 --gpus-per-node=2
check "gpt2-124m: trained to the end" grep -q "^done: 20 steps" "$OUT"
check "gpt2-124m: warned once that the job's 2 GPUs stay idle" \
  [ "$(grep -c "warning: Slurm job $J holds 2 GPUs per node but \[system\] device = cpu" "$OUT")" = 1 ]
check "gpt2-124m: the deck's [run] dir is kept" [ -f "$WORK/runs/gpt2_124m/summary.json" ]

# ---- the 512-GPU script, one node, CPU, a deck without [run] dir
DEVICE=cpu TP=1 PP=2 DECK=$WORK/gpt.in OVERRIDES="train.batch_size=8 train.micro_batches=4
  train.steps=30" \
  submit gpt-512 jobs/gpt_512gpu.sh --nodes=1 --ntasks-per-node=2 --cpus-per-task=1 --gpus-per-node=0
check "gpt-512: trained to the end" grep -q "^done: 30 steps" "$OUT"
check "gpt-512: as a 2-stage pipeline" grep -q "^layout: 2 ranks = dp 1 x pp 2 x tp 1" "$OUT"
check "gpt-512: run directory named after the job" grep -q "directory runs/gpt-$J\$" "$OUT"
check "gpt-512: its checkpoint there" [ -f "$WORK/runs/gpt-$J/checkpoints/step_00000030.h5" ]
check "gpt-512: the resolved deck says where [run] dir came from" \
  grep -q "^dir = runs/gpt-$J   # set at Slurm job $J (the deck sets no \[run\] dir)" \
  "$WORK/runs/gpt-$J/deck.in"
check "gpt-512: no requeue after a clean end" [ "$(slurm_job_field "$J" Restarts)" = 0 ]
# ---- a rank that stops answering (SIGSTOP) in jobs/mnist.sh: the other's watchdog
# (run.hang_minutes) ends it, Slurm cancels the step, and the job fails at once
# instead of holding its node until the time limit
DECK=$SRC/inputs/mnist.in OVERRIDES="train.steps=100000000 train.log_every=10
  run.hang_minutes=0.05 data.train_images=$M/train-images-idx3-ubyte
  data.train_labels=$M/train-labels-idx1-ubyte data.test_images=$M/t10k-images-idx3-ubyte
  data.test_labels=$M/t10k-labels-idx1-ubyte run.dir=$WORK/runs/hung" \
  sbatch --parsable --chdir="$WORK" --output="$WORK/hung.out" --time=30 --nodes=1 \
  --ntasks-per-node=2 --cpus-per-task=1 jobs/mnist.sh >"$WORK/hung.id"
J=$(cat "$WORK/hung.id")
for _ in $(seq 1200); do # until training is under way
  [ "$(grep -c ',train,' "$WORK/runs/hung/metrics.csv" 2>/dev/null)" -gt 3 ] 2>/dev/null && break
  sleep 0.05
done
kill -STOP "$(trainer_pids | sed -n 2p)"
slurm_wait_final "$J" 60
check "hung rank: the job ends FAILED (got $JOB_STATE $JOB_EXIT; $(tail -4 "$WORK/hung.out"))" \
  [ "$JOB_STATE" = FAILED ]
check "hung rank: the watchdog says so in the job's output" \
  grep -q "^\[rank [01]\] .*: no progress for [0-9]* s (run.hang_minutes = 0.05)" "$WORK/hung.out"
check "hung rank: no rank left running" no_leftover_ranks

check "no job left in the queue" [ -z "$(squeue -h -o %i)" ]
finish
