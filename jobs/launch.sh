# jobs/launch.sh: what every job script in jobs/ does once it has chosen its deck and
# layout. Sourced by them inside the job (sbatch runs a copy of the job script from
# Slurm's spool directory, so they find this file from the submission directory, or
# TRAINER_ROOT); not a job script itself. Relative paths (DECK, the data in decks) are
# taken from the job's working directory: the submission directory unless --chdir.
#
# In (set by the job script, or the environment at submission):
#   TRAINER       the binary (default: trainer in the repository this file is in)
#   DECK          the input deck
#   ARGS          array of deck overrides (the job script's layout, then $OVERRIDES)
#   SRUN_ARGS     array of extra srun options (the job script's binding)
#   SRUN_MPI      srun's --mpi plugin (default pmix, what Open MPI takes; pmi2 for an
#                 MPICH built with Slurm's PMI2, cray_shasta on a Cray EX)
#   MAX_RESTARTS  requeue at most this many times (default 50), so a job that cannot
#                 make progress does not cycle forever
#
# What it does:
#   1. srun --mpi=$SRUN_MPI: one rank per task as the allocation gives them, cores bound;
#      srun runs in the background so this shell's traps can run while it waits.
#   2. Signals: Slurm's `--signal=USR1@T` (the scripts' choice) reaches the trainer
#      ranks directly; a signal meant for the batch shell (`--signal=B:USR1@T`,
#      `scancel --batch --signal=USR1`) is forwarded to them. SIGTERM (scancel,
#      `scontrol requeue`, preemption, the time limit) reaches every process of the
#      job at once; the shell then keeps waiting, so the ranks can finish their
#      checkpoint within Slurm's KillWait before the job step ends.
#   3. Exit codes: 75 (checkpointed, resubmit me) makes the job requeue itself with
#      `scontrol requeue`: same job id, so the trainer's run directory and
#      `[checkpoint] resume = auto` pick up the checkpoint, and SLURM_RESTART_COUNT
#      counts the restarts. Not when Slurm itself is ending the job (this shell got
#      SIGTERM, or the job is no longer RUNNING): scancel means stay ended, and
#      `scontrol requeue` or preemption requeue it already. Any other code ends the
#      job with that code (64: fix the deck or the request; 65/66: the data; 74: the
#      file system; see the README).
# shellcheck shell=bash disable=SC2317 # (the trap functions are called indirectly)

: "${TRAINER:=$(dirname "${BASH_SOURCE[0]}")/../trainer}"
: "${MAX_RESTARTS:=50}"
if [ -n "${SLURM_CPUS_PER_TASK:-}" ]; then
  # OpenMP threads per rank = the CPUs Slurm gave each task (without --cpus-per-task
  # the trainer takes the node's CPUs / ranks on the node)
  export OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK
  # srun of Slurm >= 23.11 no longer inherits --cpus-per-task from sbatch
  export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK
fi

# A task of a job array is named ARRAY_TASK: one of them has the array's own id as
# SLURM_JOB_ID, and that id names every task (scontrol show lists them all, scontrol
# requeue would requeue them all).
job_ref=${SLURM_JOB_ID:-0}
if [ -n "${SLURM_ARRAY_JOB_ID:-}" ] && [ -n "${SLURM_ARRAY_TASK_ID:-}" ]; then
  job_ref=${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}
fi

echo "job $job_ref (${SLURM_JOB_NAME:-?}), restart ${SLURM_RESTART_COUNT:-0}," \
  "$(date '+%F %T'): ${SLURM_JOB_NUM_NODES:-?} node(s) ${SLURM_JOB_NODELIST:-?}," \
  "tasks per node ${SLURM_TASKS_PER_NODE:-?}, ${SLURM_CPUS_PER_TASK:-?} CPUs per task," \
  "GPUs per node ${SLURM_GPUS_ON_NODE:-0}"
SRUN_MPI=${SRUN_MPI:-pmix}
echo "+ srun --mpi=$SRUN_MPI ${SRUN_ARGS[*]} $TRAINER $DECK ${ARGS[*]}"

got_term=0
srun_pid=
forward() { # the batch shell's signal, on to the ranks (srun forwards it to its tasks)
  echo "job $job_ref: batch shell got SIG$1 at $(date +%T); forwarding to the ranks"
  [ -n "$srun_pid" ] && kill -"$1" "$srun_pid" 2>/dev/null
}
trap 'forward USR1' USR1
trap 'forward USR2' USR2
trap 'got_term=1; echo "job $job_ref: SIGTERM at $(date +%T); waiting for the ranks to checkpoint"' TERM

# srun returns 0 when every task failed to launch (seen with Slurm 22.05: a PMIx
# set-up failure, "task N launch failed"): rank 0 creates this file once it runs, so
# such a step is not taken for a finished training (the job's directory, shared by
# the nodes like the run directory it holds)
export TR_STARTED_FILE=$PWD/.trainer-started-$job_ref
rm -f "$TR_STARTED_FILE"
srun --mpi="$SRUN_MPI" "${SRUN_ARGS[@]}" "$TRAINER" "$DECK" "${ARGS[@]}" &
srun_pid=$!
# `wait` returns early when a trapped signal arrives: wait again until srun is done
while :; do
  wait "$srun_pid"
  rc=$?
  kill -0 "$srun_pid" 2>/dev/null || break
done
if [ "$rc" = 0 ] && [ ! -e "$TR_STARTED_FILE" ]; then
  echo "job $job_ref: srun returned 0, but the trainer never started (the job step failed" \
    "to launch: srun's errors above); ending the job with 69" >&2
  rc=69
fi
rm -f "$TR_STARTED_FILE"

# Slurm ending the job itself: the SIGTERM may reach the ranks (and end them) before
# it reaches this shell, so ask Slurm too: requeue only a job that is still RUNNING
state=$(scontrol show job "$job_ref" 2>/dev/null | tr ' ' '\n' | sed -n 's/^JobState=//p' | head -1)
echo "job $job_ref: trainer exited with $rc at $(date +%T) (job ${state:-?})"
if [ "$rc" = 75 ] && [ "$got_term" = 0 ] && [ "${state:-RUNNING}" = RUNNING ]; then
  if [ "${SLURM_RESTART_COUNT:-0}" -ge "$MAX_RESTARTS" ]; then
    echo "job $job_ref: checkpointed, but already restarted $MAX_RESTARTS times" \
      "(MAX_RESTARTS); not requeueing: to continue, requeue it (scontrol requeue $job_ref;" \
      "MAX_RESTARTS counts on), or submit again with the same run directory (the trainer's" \
      "exit message above says which)" >&2
    exit 75
  fi
  echo "job $job_ref: checkpointed; requeueing (scontrol requeue)"
  # requeueing ends this shell too (SIGTERM); the rerun starts in Slurm's own time
  scontrol requeue "$job_ref" || {
    echo "job $job_ref: scontrol requeue failed (is the job requeueable: --requeue," \
      "JobRequeue?); submit again with the same run directory to resume from the" \
      "checkpoint" >&2
    exit 75
  }
  exit 0
fi
if [ "$rc" = 75 ] && [ "$got_term" = 0 ]; then
  echo "job $job_ref: checkpointed, not requeued by this script: Slurm reports the job" \
    "${state:-?} (it ends or requeues the job itself)" >&2
fi
exit "$rc"
