/* slurm_job.h: the trainer inside a Slurm job (glue over core/slurm.h, which is pure).
 *
 * Reads the job from the environment, names the run directory after it when the deck
 * does not, checks the layout against what the job holds on every node (CPUs for the
 * threads, one rank per GPU, tensor-parallel groups inside a node) and agrees on the
 * verdict over all ranks, so a wrong request is reported once, before any work. */
#ifndef TR_SLURM_JOB_H
#define TR_SLURM_JOB_H

#include "comm/comm.h"
#include "core/deck.h"
#include "core/slurm.h"

#include <stdio.h>

typedef struct tr_slurm_job {
    tr_slurm env;
    char line[1400]; /* the banner's allocation line (rank 0's node); "" outside Slurm */
    char warn[1024]; /* rank 0: notes that do not stop the run, one per line */
} tr_slurm_job;

/* Collective; after the deck is loaded and the threads per rank are chosen. Outside
 * Slurm it only fills job->env (inactive). Returns 0, or the exit code every rank
 * shares (TR_EXIT_USAGE), its message printed once to stderr. May set [run] dir in d. */
int tr_slurm_job_setup(tr_slurm_job *job, tr_deck *d, const tr_world *w, int threads);

/* Rank 0: the allocation line for the banner, then any warnings (GPUs held but
 * unused, tasks left idle) to stderr; nothing outside Slurm. */
void tr_slurm_job_print(const tr_slurm_job *job, FILE *out);

#endif
