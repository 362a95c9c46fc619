/* data_parallel.h: gradient averaging over the data-parallel group, in buckets that
 * start while backward is still running.
 *
 * The flat gradient buffer is cut into buckets of about bucket_kib. Backward
 * completes gradients from the top of the buffer down (see model.h); as soon as
 * every offset of a bucket is complete, its non-blocking all-reduce starts, and
 * each later notification also tests the open ones so MPI progresses them while
 * backward computes. Summation, not averaging: the loss is already scaled by
 * 1 / global batch, so the sum over ranks is the mean over the global batch. */
#ifndef TR_DATA_PARALLEL_H
#define TR_DATA_PARALLEL_H

#include "comm/comm.h"

#include <stddef.h>

typedef struct tr_dp_bucket {
    size_t lo, hi; /* flat offsets [lo, hi) */
    int started;
    tr_request req;
} tr_dp_bucket;

typedef struct tr_dp {
    tr_group *group;
    int size;
    float *grads;
    size_t count;
    int nbuckets;
    tr_dp_bucket *buckets; /* ordered from the top of the buffer down */
    int next;              /* first bucket not yet started */
    double comm_wait_s;    /* time blocked in tr_dp_finish, for the summary */
} tr_dp;

/* The flat range [lo, hi) of count elements that data-parallel rank `rank` of
 * `size` owns under ZeRO (its optimizer state, and its gradients to reduce),
 * balanced to within one element. */
static inline void tr_dp_slice(size_t count, int size, int rank, size_t *lo, size_t *hi)
{
    *lo = count * (size_t)rank / (size_t)size;
    *hi = count * (size_t)(rank + 1) / (size_t)size;
}

void tr_dp_init(tr_dp *dp, tr_group *group, float *grads, size_t count, size_t bucket_floats);
void tr_dp_free(tr_dp *dp);
/* Before the backward of the step's last micro-batch. */
void tr_dp_begin(tr_dp *dp);
/* Callback for tr_model_backward: every offset >= lo is complete. */
void tr_dp_grads_ready(void *dp, size_t lo);
/* Starts what is left and waits for all buckets: gradients are then the global sum. */
void tr_dp_finish(tr_dp *dp);

#endif
