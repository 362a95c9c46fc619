/* rank_times.h: where each rank's steps went, and which rank held the others up.
 *
 * A job of many ranks runs at the pace of its slowest one: a GPU that throttles, a
 * node with a noisy neighbour or a failing part makes every collective wait for it,
 * and the others' lost time shows up only as waiting. So each rank's steps are split
 * into busy time and its three waits (for data, in the gradient sync, for the other
 * pipeline stages' messages); rank 0 writes every rank's figures to RUN/ranks.csv,
 * and the rank whose busy time is furthest above the median of the ranks doing the
 * same work (its pipeline stage's: tp shards and dp replicas do the same work,
 * stages do not) is named, with its node. Ranks of one tp group wait for each other
 * inside every layer, so a slow rank makes its whole tp group look busy; the line
 * then names one of that group. */
#ifndef TR_RANK_TIMES_H
#define TR_RANK_TIMES_H

#include "comm/comm.h"

/* One rank's session: seconds. busy is a step's average; the waits are totals. */
typedef struct tr_rank_time {
    double busy, data_wait, sync_wait, pipe_wait;
} tr_rank_time;

typedef struct tr_rank_times {
    int n;              /* world size */
    tr_rank_time *rows; /* [n] by world rank */
    char (*host)[64];   /* [n] each rank's node */
} tr_rank_times;

typedef struct tr_straggler {
    int rank;      /* furthest above its stage's median; -1: no rank has a peer */
    int stage;     /* its pipeline stage */
    int peers;     /* ranks in its stage, itself included */
    double busy;   /* its busy seconds a step */
    double median; /* the median of its stage's busy seconds a step */
    char host[64]; /* its node */
} tr_straggler;

/* Every rank's row and node on every rank. Collective over the world, host memory
 * (any device). */
void tr_rank_times_gather(const tr_world *w, const tr_rank_time *mine, tr_rank_times *out);
/* The same answer on every rank, from the gathered rows. */
void tr_rank_times_straggler(const tr_world *w, const tr_rank_times *t, tr_straggler *out);
/* Each pipeline stage's median busy seconds a step: busy[0 .. w->pp). */
void tr_rank_times_stage_busy(const tr_world *w, const tr_rank_times *t, double *busy);
/* DIR/ranks.csv: rank,host,dp,pp,tp, then the row (rank 0 calls it). 0 or errno. */
int tr_rank_times_write(const char *dir, const tr_world *w, const tr_rank_times *t);
void tr_rank_times_free(tr_rank_times *t);

#endif
