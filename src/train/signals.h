/* signals.h: preemption. SIGUSR1 (Slurm's --signal) and SIGTERM (scancel, requeue)
 * only set a flag; the training loop looks at it at each step boundary, all ranks
 * agree, write a checkpoint and exit with TR_EXIT_TEMPFAIL (75). A second signal
 * while the checkpoint is written sets the flag again and changes nothing. */
#ifndef TR_SIGNALS_H
#define TR_SIGNALS_H

void tr_signals_install(void);
/* The signal number received on this rank, or 0. */
int tr_signal_pending(void);
/* Seconds since this rank's first signal, or -1 when none came. */
double tr_signal_age(void);

#endif
