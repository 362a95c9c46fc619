/* data_parallel.h: gradient averaging over the data-parallel group, in buckets that
 * start while backward is still running.
 *
 * The flat gradient buffer is cut into buckets of about bucket_kib. Backward
 * completes gradients from the top of the buffer down (see model.h); as soon as
 * every offset of a bucket is complete, its non-blocking all-reduce starts, and
 * each later notification also tests the open ones so MPI progresses them while
 * backward computes. (Ranks of one node that share memory reduce it all at once at
 * the end instead: see tr_dp_finish.) Summation, not averaging: the loss is already scaled by
 * 1 / global batch, so the sum over ranks is the mean over the global batch. */
#ifndef TR_DATA_PARALLEL_H
#define TR_DATA_PARALLEL_H

#include "backend/device.h"
#include "comm/comm.h"

#include <stddef.h>

typedef struct tr_dp_bucket {
    size_t lo, hi; /* flat offsets [lo, hi) */
    int owner;     /* ZeRO: the dp rank that owns the range; -1 without */
    int started;
    int open;      /* started over MPI and not yet seen complete (counted in open_bytes) */
    tr_request req;
} tr_dp_bucket;

typedef struct tr_dp {
    tr_group *group;
    int size, rank;
    float *grads;
    size_t count;
    /* ZeRO (parallel.zero): 0 all-reduce; 1 reduce each bucket to the rank owning it
     * (its optimizer state lives there), parameters all-gathered after the update;
     * 2 as 1, each rank then keeping only its own slice's gradients (the rest of the
     * buffer is zeroed after the step's reduction: backward's workspace, so on the
     * CPU 2 saves no memory over 1) */
    int zero;
    size_t lo, hi; /* this rank's slice (all of it without ZeRO) */
    size_t *part_counts, *part_displs; /* ZeRO: every rank's slice (else NULL) */
    int nbuckets;
    tr_dp_bucket *buckets; /* ordered from the top of the buffer down */
    size_t open_bytes;     /* of the buckets open over MPI (TR_DP_OPEN_BYTES at most) */
    size_t hold_lo, hold_hi; /* buckets touching this range wait for tr_dp_finish */
    double comm_wait_s;      /* time blocked in tr_dp_finish and the gather */
    const tr_device *dev;    /* where grads live */
} tr_dp;

/* The flat range [lo, hi) of count elements that data-parallel rank `rank` of
 * `size` owns under ZeRO (its optimizer state, and its gradients to reduce),
 * balanced to within one element. */
static inline void tr_dp_slice(size_t count, int size, int rank, size_t *lo, size_t *hi)
{
    *lo = count * (size_t)rank / (size_t)size;
    *hi = count * (size_t)(rank + 1) / (size_t)size;
}

/* MPI's non-blocking collectives reduce through buffers of their own as large as the
 * message (Open MPI's libnbc: one per bucket, held until the bucket completes), so a
 * backward that starts every bucket before the first completes held a whole gradient's
 * worth more than the plan (GPT-2 124M at dp 2 across nodes: 0.4 GB a rank). At most
 * this many bytes of buckets are open over MPI at once, the oldest waited for first;
 * the plan counts them. NCCL works in place and is not limited. */
#define TR_DP_OPEN_BYTES ((size_t)32 << 20)

void tr_dp_init(tr_dp *dp, tr_group *group, const tr_device *dev, float *grads, size_t count,
                size_t bucket_floats, int zero);
void tr_dp_free(tr_dp *dp);
/* Buckets touching [lo, hi) do not start during backward but in tr_dp_finish (the
 * tied embedding: its two copies' gradients are summed between the pipeline's ends
 * first). */
void tr_dp_hold(tr_dp *dp, size_t lo, size_t hi);
/* Before the backward whose buckets the callbacks will start. */
void tr_dp_begin(tr_dp *dp);
/* Callback for tr_model_backward: every offset >= lo is complete. */
void tr_dp_grads_ready(void *dp, size_t lo);
/* Starts what is left and waits for all buckets (where the group shares memory: one
 * all-reduce, or under ZeRO one reduce-scatter, of the whole buffer): gradients are
 * then the global sum (under ZeRO: in the owner's slice only). */
void tr_dp_finish(tr_dp *dp);
/* ZeRO: every rank updated its own slice of params; after this all ranks hold all of
 * them. Nothing without ZeRO. */
void tr_dp_gather_params(tr_dp *dp, float *params);

#endif
