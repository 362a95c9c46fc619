/* data_parallel.c: bucketed, overlapped gradient reduction over the dp group. */
#include "data_parallel.h"
#include "core/error.h"

#include <string.h>

void tr_dp_init(tr_dp *dp, tr_group *group, const tr_device *dev, float *grads, size_t count,
                size_t bucket_floats, int zero)
{
    memset(dp, 0, sizeof *dp);
    dp->dev = dev;
    dp->group = group;
    dp->size = tr_group_size(group);
    dp->rank = tr_group_rank(group);
    dp->grads = grads;
    dp->count = count;
    dp->zero = dp->size > 1 ? zero : 0;
    tr_dp_slice(count, dp->size, dp->rank, &dp->lo, &dp->hi);
    if (dp->zero) { /* every rank's slice, for the collectives that take them all */
        dp->part_counts = tr_alloc(2 * (size_t)dp->size * sizeof *dp->part_counts,
                                   "ZeRO slices");
        dp->part_displs = dp->part_counts + dp->size;
        for (int r = 0; r < dp->size; r++) {
            size_t lo, hi;
            tr_dp_slice(count, dp->size, r, &lo, &hi);
            dp->part_counts[r] = hi - lo;
            dp->part_displs[r] = lo;
        }
    }
    if (bucket_floats == 0)
        bucket_floats = count ? count : 1;
    /* buckets from the top of the buffer down (the order backward completes them);
     * under ZeRO none straddles two ranks' slices, so each has one owner */
    int cap = (int)((count + bucket_floats - 1) / bucket_floats) + dp->size + 1;
    dp->buckets = tr_alloc((size_t)cap * sizeof *dp->buckets, "gradient buckets");
    size_t hi = count;
    int owner = dp->size - 1;
    while (hi > 0) {
        size_t lo = hi > bucket_floats ? hi - bucket_floats : 0;
        size_t olo = 0, ohi = 0;
        if (dp->zero) {
            while (tr_dp_slice(count, dp->size, owner, &olo, &ohi), olo >= hi && owner > 0)
                owner--;
            if (lo < olo)
                lo = olo;
        }
        tr_dp_bucket *b = &dp->buckets[dp->nbuckets++];
        memset(b, 0, sizeof *b);
        b->lo = lo, b->hi = hi, b->owner = dp->zero ? owner : -1;
        hi = lo;
    }
}

void tr_dp_free(tr_dp *dp)
{
    tr_free(dp->buckets);
    tr_free(dp->part_counts);
    dp->buckets = NULL;
    dp->part_counts = dp->part_displs = NULL;
}

void tr_dp_hold(tr_dp *dp, size_t lo, size_t hi)
{
    dp->hold_lo = lo;
    dp->hold_hi = hi;
}

void tr_dp_begin(tr_dp *dp)
{
    for (int b = 0; b < dp->nbuckets; b++)
        dp->buckets[b].started = dp->buckets[b].open = 0;
    dp->open_bytes = 0;
}

static size_t bucket_bytes(const tr_dp_bucket *b) { return (b->hi - b->lo) * sizeof(float); }

/* A bucket seen complete: its MPI buffers are given back */
static void closed(tr_dp *dp, tr_dp_bucket *b)
{
    b->open = 0;
    dp->open_bytes -= bucket_bytes(b);
}

/* Before starting a bucket of `bytes` over MPI: waits for the oldest open buckets
 * (started first: the lowest index) until it fits under TR_DP_OPEN_BYTES. */
static void make_room(tr_dp *dp, size_t bytes)
{
    for (int i = 0; i < dp->nbuckets && dp->open_bytes && dp->open_bytes + bytes > TR_DP_OPEN_BYTES;
         i++) {
        tr_dp_bucket *b = &dp->buckets[i];
        if (b->open) {
            tr_wait(&b->req);
            closed(dp, b);
        }
    }
}

static void start(tr_dp *dp, tr_dp_bucket *b)
{
    int mpi = !tr_group_has_nccl(dp->group);
    if (mpi)
        make_room(dp, bucket_bytes(b));
    float *p = dp->grads + b->lo;
    if (dp->zero)
        tr_ireduce(p, b->hi - b->lo, TR_F32, TR_SUM, b->owner, dp->group, &b->req);
    else
        tr_iallreduce(p, p, b->hi - b->lo, TR_F32, TR_SUM, dp->group, &b->req);
    b->started = 1;
    if (mpi) {
        b->open = 1;
        dp->open_bytes += bucket_bytes(b);
    }
}

static int held(const tr_dp *dp, const tr_dp_bucket *b)
{
    return b->lo < dp->hold_hi && dp->hold_lo < b->hi;
}

/* Through shared memory the buckets do not pay: nothing moves until tr_dp_finish,
 * and then all of the buffer in one all-reduce (ZeRO: one reduce-scatter to the
 * owners). On a node, a bucket started during backward would not move either until
 * an MPI call, and its copies take the same cores as backward; an MPI group spread
 * over nodes keeps its buckets (the network moves them while backward runs). */
static int whole(const tr_dp *dp) { return tr_group_shares_memory(dp->group); }

void tr_dp_grads_ready(void *ctx, size_t lo)
{
    tr_dp *dp = ctx;
    if (dp->size == 1 || whole(dp))
        return;
    /* every rank of the group starts the same buckets in the same order: their
     * layouts are the same and backward reports the same offsets */
    for (int i = 0; i < dp->nbuckets; i++) {
        tr_dp_bucket *b = &dp->buckets[i];
        if (!b->started && b->lo >= lo && !held(dp, b))
            start(dp, b);
    }
    /* MPI moves non-blocking collectives only inside MPI calls: poke the open ones */
    for (int i = 0; i < dp->nbuckets; i++)
        if (dp->buckets[i].started && tr_test(&dp->buckets[i].req) && dp->buckets[i].open)
            closed(dp, &dp->buckets[i]);
}

void tr_dp_finish(tr_dp *dp)
{
    if (dp->size == 1)
        return;
    double t0 = tr_wtime();
    if (whole(dp) && dp->zero) {
        tr_reduce_scatterv(dp->grads, dp->part_counts, dp->part_displs, dp->group);
    } else if (whole(dp)) {
        tr_allreduce(dp->grads, dp->grads, dp->count, TR_F32, TR_SUM, dp->group);
    } else {
        for (int i = 0; i < dp->nbuckets; i++)
            if (!dp->buckets[i].started)
                start(dp, &dp->buckets[i]);
        t0 = tr_wtime();
        for (int i = 0; i < dp->nbuckets; i++) {
            tr_wait(&dp->buckets[i].req);
            if (dp->buckets[i].open)
                closed(dp, &dp->buckets[i]);
        }
    }
    dp->comm_wait_s += tr_wtime() - t0;
    if (dp->zero == 2) {
        /* what this rank sent is now its owner's: only the owned slice accumulates */
        dp->dev->zero(dp->grads, dp->lo * sizeof(float));
        dp->dev->zero(dp->grads + dp->hi, (dp->count - dp->hi) * sizeof(float));
    }
}

void tr_dp_gather_params(tr_dp *dp, float *params)
{
    if (!dp->zero)
        return;
    double t0 = tr_wtime();
    tr_allgatherv(params, dp->part_counts, dp->part_displs, TR_F32, dp->group);
    dp->comm_wait_s += tr_wtime() - t0;
}
