/* train.h: the training run: set-up checks, the step loop, evaluation, metrics. */
#ifndef TR_TRAIN_H
#define TR_TRAIN_H

#include "comm/comm.h"
#include "core/deck.h"

typedef struct tr_runtime {
    int threads;           /* OpenMP threads of this rank */
    const char *blas_core; /* OpenBLAS kernel in use */
    double start_time;     /* tr_wtime() at start-up */
    /* trainer --plan: the layout to plan for, instead of training (plan_ranks > 0) */
    int plan_ranks, plan_ranks_per_node;
    int plan_threads;          /* the OpenMP threads of a rank of that layout (else threads) */
    double plan_device_memory; /* bytes; 0 = not given */
    int plan_layouts;          /* --layouts: every dp x tp x pp of plan_ranks (a GPT's) */
    /* --layouts' step estimate (0: none): model TFLOP/s a rank sustains, GB/s a rank
     * sends to ranks of its node and across nodes */
    double plan_tflops, plan_node_gbps, plan_network_gbps;
} tr_runtime;

/* Runs the deck on the world; collective. Returns the exit code every rank shares.
 * With rt->plan_ranks set (one process, trainer --plan) it checks the deck, data and
 * layout for that many ranks exactly as a run would, prints the plan (plan.c) and
 * returns without allocating the model. */
int tr_train_run(const tr_deck *d, tr_world *w, const tr_runtime *rt);

#endif
