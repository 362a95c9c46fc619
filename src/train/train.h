/* train.h: the training run: set-up checks, the step loop, evaluation, metrics. */
#ifndef TR_TRAIN_H
#define TR_TRAIN_H

#include "comm/comm.h"
#include "core/deck.h"

typedef struct tr_runtime {
    int threads;           /* OpenMP threads of this rank */
    const char *blas_core; /* OpenBLAS kernel in use */
    double start_time;     /* tr_wtime() at start-up */
} tr_runtime;

/* Runs the deck on the world; collective. Returns the exit code every rank shares. */
int tr_train_run(const tr_deck *d, tr_world *w, const tr_runtime *rt);

#endif
