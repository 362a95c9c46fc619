/* loader.c: double-buffered batch preparation with one worker thread.
 *
 * Two slots. The caller owns the slot it was last handed; the worker may only
 * write the other one, and only when given a job. The caller waits for the
 * worker to be idle before looking at or touching anything shared, so the
 * sampler (not thread-safe) is used by one thread at a time and a slot's content
 * is always exactly "the batch of slot_step". If the prefetched step is not the
 * one asked for (the first call, or a jump), the caller prepares it itself: the
 * same function on the same inputs, which is why prefetch cannot change results. */
#include "loader.h"

#include "core/error.h"

#include <pthread.h>
#include <string.h>

struct tr_loader {
    const tr_dataset *ds;
    tr_sampler sampler;
    long local_batch;
    size_t dim;         /* c*h*w */
    int64_t *indices;   /* [local_batch] scratch for whoever is filling */
    float *x[2];        /* [local_batch, dim] */
    int32_t *y[2];      /* [local_batch] */
    long slot_step[2];  /* the step each slot holds; -1 = nothing valid */
    int cur;            /* slot last handed to the caller; -1 before the first */
    int prefetch;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t job_cv;  /* caller -> worker: a job or quit */
    pthread_cond_t done_cv; /* worker -> caller: idle again */
    int job_pending, busy, quit;
    long job_step;
    int job_slot;
};

static void fill(tr_loader *L, int slot, long step)
{
    tr_sampler_batch(&L->sampler, step, L->indices);
    /* the team shares the copy only on the training thread, without a prefetcher */
    tr_dataset_gather(L->ds, L->indices, (int)L->local_batch, L->x[slot], L->y[slot],
                      !L->prefetch);
}

static void *worker_main(void *arg)
{
    tr_loader *L = arg;
    pthread_mutex_lock(&L->mu);
    for (;;) {
        while (!L->job_pending && !L->quit)
            pthread_cond_wait(&L->job_cv, &L->mu);
        if (L->quit)
            break;
        int slot = L->job_slot;
        long step = L->job_step;
        L->job_pending = 0;
        L->busy = 1;
        pthread_mutex_unlock(&L->mu);
        fill(L, slot, step);
        pthread_mutex_lock(&L->mu);
        L->slot_step[slot] = step;
        L->busy = 0;
        pthread_cond_signal(&L->done_cv);
    }
    pthread_mutex_unlock(&L->mu);
    return NULL;
}

tr_loader *tr_loader_create(const tr_dataset *ds, long global_batch, int dp_rank, int dp_size,
                            uint64_t seed, int shuffle, int prefetch)
{
    tr_loader *L = tr_alloc(sizeof *L, "data loader");
    L->ds = ds;
    tr_sampler_init(&L->sampler, ds->n, global_batch, dp_rank, dp_size, seed, shuffle);
    L->local_batch = L->sampler.local_batch;
    L->dim = (size_t)ds->c * ds->h * ds->w;
    L->indices = tr_alloc((size_t)L->local_batch * sizeof(int64_t), "batch indices");
    for (int k = 0; k < 2; k++) {
        L->x[k] = tr_alloc((size_t)L->local_batch * L->dim * sizeof(float), "batch inputs");
        L->y[k] = tr_alloc((size_t)L->local_batch * sizeof(int32_t), "batch labels");
        L->slot_step[k] = -1;
    }
    L->cur = -1;
    L->prefetch = prefetch != 0;
    if (L->prefetch) {
        pthread_mutex_init(&L->mu, NULL);
        pthread_cond_init(&L->job_cv, NULL);
        pthread_cond_init(&L->done_cv, NULL);
        int rc = pthread_create(&L->thread, NULL, worker_main, L);
        if (rc)
            tr_fatal(TR_EXIT_OSERR, "cannot start the data prefetch thread: %s (set "
                     "data.prefetch = false to load synchronously)", strerror(rc));
    }
    return L;
}

void tr_loader_next(tr_loader *L, long step, const float **x, const int32_t **y)
{
    int slot = L->cur < 0 ? 0 : 1 - L->cur;
    if (!L->prefetch) {
        fill(L, slot, step);
    } else {
        pthread_mutex_lock(&L->mu);
        while (L->job_pending || L->busy)
            pthread_cond_wait(&L->done_cv, &L->mu);
        /* The worker is idle now and touches nothing until the next job. */
        if (L->slot_step[slot] != step) {
            fill(L, slot, step);
            L->slot_step[slot] = step;
        }
        L->slot_step[1 - slot] = -1; /* about to be overwritten with step + 1 */
        L->job_slot = 1 - slot;
        L->job_step = step + 1;
        L->job_pending = 1;
        pthread_cond_signal(&L->job_cv);
        pthread_mutex_unlock(&L->mu);
    }
    L->cur = slot;
    *x = L->x[slot];
    *y = L->y[slot];
}

long tr_loader_steps_per_epoch(const tr_loader *L) { return L->sampler.steps_per_epoch; }

long tr_loader_local_batch(const tr_loader *L) { return L->local_batch; }

void tr_loader_destroy(tr_loader *L)
{
    if (!L)
        return;
    if (L->prefetch) {
        pthread_mutex_lock(&L->mu);
        L->quit = 1;
        pthread_cond_signal(&L->job_cv);
        pthread_mutex_unlock(&L->mu);
        pthread_join(L->thread, NULL);
        pthread_cond_destroy(&L->done_cv);
        pthread_cond_destroy(&L->job_cv);
        pthread_mutex_destroy(&L->mu);
    }
    for (int k = 0; k < 2; k++) {
        tr_free(L->x[k]);
        tr_free(L->y[k]);
    }
    tr_free(L->indices);
    tr_sampler_free(&L->sampler);
    tr_free(L);
}
