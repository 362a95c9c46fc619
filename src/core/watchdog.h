/* watchdog.h: no hangs. A rank that makes no progress for run.hang_minutes ends the
 * job instead of holding its nodes until the time limit.
 *
 * The usual hang of a large job is a collective that never completes: a peer rank,
 * GPU or link stopped answering without dying, so no launcher notices, and every
 * other rank waits inside MPI or NCCL, where neither a signal nor the training loop
 * reaches it. A thread of this rank's own (no MPI calls: the library runs
 * MPI_THREAD_FUNNELED) watches a counter that the training loop, evaluation,
 * checkpoint I/O and sampling advance as they go; when it has stood still for the
 * whole timeout, the thread prints what this rank was doing and _exits with
 * TR_EXIT_OSERR. Every waiting rank does the same, and the launcher (mpirun, srun)
 * takes down whatever is left.
 *
 * Time while the whole process is stopped (SIGSTOP, Slurm's suspend or gang
 * scheduling) is not counted: the thread wakes every tick, and one wake-up counts for
 * at most two ticks, however late it came. */
#ifndef TR_WATCHDOG_H
#define TR_WATCHDOG_H

#ifdef __cplusplus
extern "C" {
#endif

/* Starts watching this rank (rank: for the message; key: the deck key that set the
 * timeout, named in the message). seconds <= 0: off, and beats cost nothing. Returns
 * 0, or an errno when the thread cannot start. */
int tr_watchdog_start(double seconds, int rank, const char *key);
/* Progress: `what` (a string literal that reads after "since", e.g. "an evaluation
 * batch") and `step` (-1: none). Cheap: two relaxed stores and an increment. */
void tr_watchdog_beat(const char *what, long step);
/* Stops watching (before work whose length depends on another rank, such as
 * MPI_Finalize waiting for rank 0's sample). Idempotent. */
void tr_watchdog_stop(void);

#ifdef __cplusplus
}
#endif

#endif
