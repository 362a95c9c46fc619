/* loader.h: this rank's training batches, prepared one step ahead in a thread.
 *
 * tr_loader_next(L, s) returns the local batch of global step s (what the
 * sampler assigns this rank, as floats pixel/255 and int32 labels) and then
 * starts preparing step s+1 on a background thread while s trains. A batch
 * depends only on (data, seed, layout, step), never on timing, so prefetch on
 * and off give bit-identical batches. Steps are asked for in increasing order
 * from any starting step (a resumed run starts mid-epoch); any other order is
 * still correct, just without the prefetch's benefit.
 *
 * Ownership: the loader borrows the data set (which must outlive it) and owns
 * two batch buffers allocated at creation; nothing is allocated per step.
 * Buffers returned by next stay valid until the following call to next or
 * destroy. One thread calls the loader; the worker is internal. */
#ifndef TR_DATA_LOADER_H
#define TR_DATA_LOADER_H

#include "data/idx.h"
#include "data/sampler.h" /* tr_sampler_check, tr_shard_range */

#include <stdint.h>

typedef struct tr_loader tr_loader;

/* The layout must pass tr_sampler_check(ds->n, global_batch, dp_size) (a failing
 * one is a bug: fatal). prefetch = 0 prepares each batch synchronously in next. */
tr_loader *tr_loader_create(const tr_dataset *ds, long global_batch, int dp_rank, int dp_size,
                            uint64_t seed, int shuffle, int prefetch);
/* x: [local_batch, c*h*w], y: [local_batch], local_batch = global_batch / dp_size. */
void tr_loader_next(tr_loader *L, long step, const float **x, const int32_t **y);
long tr_loader_steps_per_epoch(const tr_loader *L);
long tr_loader_local_batch(const tr_loader *L);
/* Stops and joins the worker (after the batch it may be preparing); NULL is a no-op. */
void tr_loader_destroy(tr_loader *L);

#endif
