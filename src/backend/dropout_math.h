/* dropout_math.h: dropout's mask, one definition for the CPU and the GPU.
 *
 * Element n of a dropout site is kept, and multiplied by 1 / (1 - p), unless word
 * n % 4 of Philox(seed, (stream, n / 4)) is below p 2^32; else it is zeroed. n is the
 * element's index in the whole global batch, not in a rank's or a micro-batch's part
 * of it, and stream names the step and the site, so the mask is a function of (seed,
 * step, site, element): the same at every data, tensor and pipeline layout, in a
 * recomputed forward, in backward (which draws it again instead of storing it), on
 * either backend, and in a resumed run. Four consecutive elements share one Philox
 * call, which a kernel may exploit and the mask does not depend on.
 *
 * Attention's probabilities, [B, NH, T, T] per block, number their elements
 * ((b NH + h) T + i) T + j over the global batch's rows b and the model's heads h. */
#ifndef TR_DROPOUT_MATH_H
#define TR_DROPOUT_MATH_H

#include "core/philox.h"

#include <stdint.h>

typedef struct tr_dropout {
    uint32_t threshold; /* drop where the draw is below it: p 2^32; 0: no dropout */
    float scale;        /* 1 / (1 - p), for the kept elements */
    uint64_t seed;      /* Philox's key: the run's train.seed */
    uint64_t stream;    /* the counter's high word: the step << 32 | the site's stream */
    /* element-wise sites: the global index of the call's element 0; attention: the
     * global batch row of the call's row 0 */
    uint64_t base;
    int heads, head0; /* attention: the model's heads, and the first of the call's */
} tr_dropout;

/* nonzero where d drops anything (NULL: no dropout) */
TR_PHILOX_HD static inline int tr_dropout_on(const tr_dropout *d) { return d && d->threshold; }

/* 0 or d->scale: what element n (global) is multiplied by */
TR_PHILOX_HD static inline float tr_dropout_factor(const tr_dropout *d, uint64_t n)
{
    uint32_t r[4];
    tr_philox4x32(r, d->seed, d->stream, n >> 2);
    return r[n & 3] < d->threshold ? 0.0f : d->scale;
}

/* the factors of elements n and n + 1: one Philox call where they share a group of
 * four (attention's neighbouring keys of a row, which a tensor-core lane holds) */
TR_PHILOX_HD static inline void tr_dropout_factor2(const tr_dropout *d, uint64_t n, float *f0,
                                                   float *f1)
{
    uint32_t r[4];
    tr_philox4x32(r, d->seed, d->stream, n >> 2);
    *f0 = r[n & 3] < d->threshold ? 0.0f : d->scale;
    if ((n & 3) != 3)
        *f1 = r[(n + 1) & 3] < d->threshold ? 0.0f : d->scale;
    else
        *f1 = tr_dropout_factor(d, n + 1);
}

/* attention's element (b, h, i, j) of a call over T positions, b and h the call's */
TR_PHILOX_HD static inline uint64_t tr_dropout_att_index(const tr_dropout *d, int b, int h, int i,
                                                         int j, int T)
{
    uint64_t row = (d->base + (uint64_t)b) * (uint64_t)d->heads + (uint64_t)(d->head0 + h);
    return (row * (uint64_t)T + (uint64_t)i) * (uint64_t)T + (uint64_t)j;
}

/* A site's parameters for probability p in [0, 1) (p = 0: off). */
static inline tr_dropout tr_dropout_make(float p, uint64_t seed, uint64_t step,
                                         uint32_t site_stream, uint64_t base)
{
    tr_dropout d;
    double t = (double)p * 4294967296.0;
    d.threshold = p > 0.0f ? (uint32_t)(t < 4294967295.0 ? t : 4294967295.0) : 0u;
    if (p > 0.0f && d.threshold == 0u)
        d.threshold = 1u; /* a p below 2^-32 still drops (almost nothing) */
    d.scale = p > 0.0f ? (float)(1.0 / (1.0 - (double)p)) : 1.0f;
    d.seed = seed;
    d.stream = (step << 32) | site_stream;
    d.base = base;
    d.heads = d.head0 = 0;
    return d;
}

#endif
