/* data_parallel.c: bucketed, overlapped gradient all-reduce. */
#include "data_parallel.h"
#include "core/error.h"

void tr_dp_init(tr_dp *dp, tr_group *group, float *grads, size_t count, size_t bucket_floats)
{
    dp->group = group;
    dp->size = tr_group_size(group);
    dp->grads = grads;
    dp->count = count;
    dp->comm_wait_s = 0;
    if (bucket_floats == 0)
        bucket_floats = count;
    dp->nbuckets = (int)((count + bucket_floats - 1) / bucket_floats);
    dp->buckets = tr_alloc((size_t)dp->nbuckets * sizeof *dp->buckets, "gradient buckets");
    /* bucket 0 is the top of the buffer: the first one backward completes */
    for (int b = 0; b < dp->nbuckets; b++) {
        size_t hi = count - (size_t)b * bucket_floats;
        dp->buckets[b].hi = hi;
        dp->buckets[b].lo = hi > bucket_floats ? hi - bucket_floats : 0;
    }
    dp->next = dp->nbuckets;
}

void tr_dp_free(tr_dp *dp)
{
    tr_free(dp->buckets);
    dp->buckets = NULL;
}

void tr_dp_begin(tr_dp *dp)
{
    dp->next = 0;
    for (int b = 0; b < dp->nbuckets; b++)
        dp->buckets[b].started = 0;
}

static void start(tr_dp *dp, tr_dp_bucket *b)
{
    float *p = dp->grads + b->lo;
    tr_iallreduce(p, p, b->hi - b->lo, TR_F32, TR_SUM, dp->group, &b->req);
    b->started = 1;
}

void tr_dp_grads_ready(void *ctx, size_t lo)
{
    tr_dp *dp = ctx;
    if (dp->size == 1)
        return;
    while (dp->next < dp->nbuckets && dp->buckets[dp->next].lo >= lo)
        start(dp, &dp->buckets[dp->next++]);
    /* MPI moves non-blocking collectives only inside MPI calls: poke the open ones */
    for (int b = 0; b < dp->next; b++)
        tr_test(&dp->buckets[b].req);
}

void tr_dp_finish(tr_dp *dp)
{
    if (dp->size == 1)
        return;
    while (dp->next < dp->nbuckets)
        start(dp, &dp->buckets[dp->next++]);
    double t0 = tr_wtime();
    for (int b = 0; b < dp->nbuckets; b++)
        tr_wait(&dp->buckets[b].req);
    dp->comm_wait_s += tr_wtime() - t0;
}
