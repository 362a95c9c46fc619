#!/usr/bin/env bash
# requeue.sh: requeue without loss, on a real (private, single-node) Slurm. The GPT job
# script jobs/gpt_512gpu.sh, shrunk to 2 ranks on the CPU and a 2-layer model, runs
#   1. uninterrupted (500 steps): the reference;
#   2. signalled mid-run as `#SBATCH --signal=USR1@T` does (scancel --signal=USR1 to
#      the ranks): the trainer checkpoints and exits 75, the script requeues the job
#      itself (scontrol requeue), the rerun (SLURM_RESTART_COUNT=1) resumes;
#   3. requeued mid-run from outside (`scontrol requeue`, as preemption does): SIGTERM
#      to every process, the ranks checkpoint while the batch shell waits, Slurm
#      requeues, the rerun resumes;
#   4. signalled through the batch shell (`--signal=B:USR1@T`, here scancel --batch):
#      the script forwards the signal to the ranks; then as 2.
# Each interrupted job must end COMPLETED with one restart, its output appended
# across the runs, and final parameters and AdamW state bit-identical (h5diff) to the
# reference, with the same metrics.csv rows. Prints the timings of each cycle.
source "$(dirname "$0")/../lib.sh"
source "$SRC/validation/slurm_cluster.sh"
slurm_require
tiny_gpt_deck "$WORK/gpt.in"
slurm_start

STEPS=500
sanitized && STEPS=250 # interrupted at step 100 either way
export TRAINER DECK=$WORK/gpt.in DEVICE=cpu TP=1 PP=1
export OVERRIDES="train.batch_size=8 train.micro_batches=2 train.steps=$STEPS"
# the script's #SBATCH size, shrunk on the command line (it overrides #SBATCH lines);
# the time limit stays above the script's --signal lead (10 minutes), or Slurm would
# signal the job as soon as it starts
SHRINK=(--chdir="$WORK" --nodes=1 --ntasks-per-node=2 --cpus-per-task=1 --gpus-per-node=0
  --time=30)
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# submit NAME: sets J (the job id) and OUT (its output file)
submit() {
  OUT=$WORK/$1.out
  J=$(sbatch --parsable "${SHRINK[@]}" --output="$OUT" jobs/gpt_512gpu.sh)
}
final_ckpt() { echo "$WORK/runs/gpt-$1/checkpoints/step_$(printf %08d $STEPS).h5"; }
# waits until the job's metrics.csv has N steps (the trainer is mid-run)
wait_steps() {
  local m=$WORK/runs/gpt-$1/metrics.csv
  for _ in $(seq 600); do
    [ "$(grep -c ',train,' "$m" 2>/dev/null || true)" -ge "$2" ] 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}

t=$(now)
submit reference
check "reference: submitted" [ -n "$J" ]
REF=$J
slurm_wait_final "$REF" 120
check "reference: COMPLETED 0:0 (got $JOB_STATE $JOB_EXIT; $(tail -3 "$OUT"))" \
  [ "$JOB_STATE/$JOB_EXIT" = "COMPLETED/0:0" ]
check "reference: the run directory is named after the job (runs/gpt-$REF)" \
  grep -q "directory runs/gpt-$REF\$" "$OUT"
check "reference: resolved deck says where [run] dir came from" \
  grep -q "^dir = runs/gpt-$REF   # set at Slurm job $REF" "$WORK/runs/gpt-$REF/deck.in"
echo "reference: $(since "$t") s"

# cycle NAME HOW: submit, interrupt at step 100 by HOW, wait for the rerun to finish
cycle() {
  local name=$1 how=$2 t0 t_int
  t0=$(now)
  submit "$name"
  if ! wait_steps "$J" 100; then
    fail "$name: job $J never reached step 100 ($(tail -3 "$OUT"))"
    return
  fi
  t_int=$(now)
  case $how in
    usr1) scancel --signal=USR1 "$J" ;;
    batch) scancel --batch --signal=USR1 "$J" ;;
    requeue) scontrol requeue "$J" ;;
  esac
  # back in the queue, then running again, then done
  local t_pending="" t_running=""
  for _ in $(seq 300); do
    case $(slurm_job_field "$J" JobState) in
      PENDING) [ -z "$t_pending" ] && t_pending=$(since "$t_int") ;;
      RUNNING) [ -n "$t_pending" ] && { t_running=$(since "$t_int"); break; } ;;
    esac
    sleep 0.1
  done
  slurm_wait_final "$J" 120
  check "$name: COMPLETED 0:0 (got $JOB_STATE $JOB_EXIT; $(tail -3 "$OUT"))" \
    [ "$JOB_STATE/$JOB_EXIT" = "COMPLETED/0:0" ]
  check "$name: requeued once (Restarts=$(slurm_job_field "$J" Restarts))" \
    [ "$(slurm_job_field "$J" Restarts)" = 1 ]
  local stop
  stop=$(grep -m1 "checkpointed at step" "$OUT")
  check "$name: the trainer checkpointed and exited 75 ($stop)" \
    grep -q "exiting with 75" "$OUT"
  local step
  step=$(sed -n 's/.*checkpointed at step \([0-9]*\),.*/\1/p' "$OUT" | head -1)
  check "$name: stopped mid-run (step $step of $STEPS)" \
    test "${step:-0}" -ge 100 -a "${step:-0}" -lt "$STEPS"
  check "$name: the rerun saw SLURM_RESTART_COUNT=1" grep -q "^slurm: job $J (restart 1)" "$OUT"
  check "$name: the rerun resumed from that checkpoint" \
    grep -q "resumed from runs/gpt-$J/checkpoints/step_$(printf %08d "${step:-0}").h5" "$OUT"
  check "$name: the output file kept both runs (--open-mode=append)" \
    [ "$(grep -c "^slurm: job $J" "$OUT")" = 2 ]
  check "$name: final parameters and AdamW state bit-identical to the reference (h5diff)" \
    h5_same "$(final_ckpt "$REF")" "$(final_ckpt "$J")"
  check "$name: metrics.csv rows identical to the reference" \
    diff <(cut -d, -f1-7 "$WORK/runs/gpt-$REF/metrics.csv") \
    <(cut -d, -f1-7 "$WORK/runs/gpt-$J/metrics.csv")
  local took
  took=$(sed -n 's/.*checkpointed at step [0-9]*, \([0-9.]*\) s after the signal.*/\1/p' "$OUT" | head -1)
  echo "$name: signal to checkpoint ${took:-?} s (trainer's count); back in the queue" \
    "${t_pending:-?} s and running again ${t_running:-?} s after the interruption; whole" \
    "job $(since "$t0") s"
}

cycle "usr1-self-requeue" usr1
# scontrol requeue: SIGTERM reaches srun too; the ranks must still get to checkpoint
cycle "scontrol-requeue" requeue
grep -q "waiting for the ranks to checkpoint" "$WORK/scontrol-requeue.out" ||
  fail "scontrol-requeue: the batch shell did not wait for the ranks"
cycle "batch-shell-signal" batch
check "batch-shell-signal: the script forwarded the signal" \
  grep -q "batch shell got SIGUSR1" "$WORK/batch-shell-signal.out"
check "no job left in the queue" [ -z "$(squeue -h -o %i)" ]
finish
