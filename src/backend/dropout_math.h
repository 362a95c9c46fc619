/* dropout_math.h: dropout's mask, one definition for the CPU and the GPU.
 *
 * An element is kept, and multiplied by 1 / (1 - p), unless its word of a Philox call,
 * Philox(seed, (stream, counter)), is below p 2^32; else it is zeroed. Each element
 * has a number n, its index in the whole global batch, not in a rank's or a
 * micro-batch's part of it, and stream names the step and the site, so the mask is a
 * function of (seed, step, site, element): the same at every data, tensor and
 * pipeline layout, in a recomputed forward, in backward (which draws it again instead
 * of storing it), on either backend, and in a resumed run.
 *
 * Element-wise sites (the embeddings, the projections' outputs): element n takes word
 * n % 4 of the call with counter n / 4, four consecutive elements to a call.
 *
 * Attention's probabilities, [B, NH, T, T] per block, number their elements
 * ((b NH + h) T + i) T + j over the global batch's rows b and the model's heads h, and
 * draw them four to a call by a grouping of their own: (i, j), (i, j + 8), (i + 8, j)
 * and (i + 8, j + 8), for i and j with bit 3 clear, share the call whose counter is
 * the number of (i, j), word 2 (i bit 3) + (j bit 3) each. The group is its
 * own transpose and matches the tensor cores' fragments, whose lane holds rows g and
 * g + 8 and columns 2t and 2t + 8 of two neighbouring 16 x 8 tiles: a lane's four
 * elements of a 16 x 16 square of P (forward, dQ) or of P^T (dK and dV) come from one
 * call, where grouping along j alone gave a call for every one of P^T's. */
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

/* 0 or d->scale: what element n (global) of an element-wise site is multiplied by */
TR_PHILOX_HD static inline float tr_dropout_factor(const tr_dropout *d, uint64_t n)
{
    uint32_t r[4];
    tr_philox4x32(r, d->seed, d->stream, n >> 2);
    return r[n & 3] < d->threshold ? 0.0f : d->scale;
}

/* attention's element (b, h, i, j) of a call over T positions, b and h the call's */
TR_PHILOX_HD static inline uint64_t tr_dropout_att_index(const tr_dropout *d, int b, int h, int i,
                                                         int j, int T)
{
    uint64_t row = (d->base + (uint64_t)b) * (uint64_t)d->heads + (uint64_t)(d->head0 + h);
    return (row * (uint64_t)T + (uint64_t)i) * (uint64_t)T + (uint64_t)j;
}

/* The Philox words of attention's group holding (b, h, i, j): (i, j) with bit 3 of
 * both cleared names the group (its number is not another group's: it is one of the
 * group's own elements), and its number is the counter. */
TR_PHILOX_HD static inline void tr_dropout_att_draw(uint32_t r[4], const tr_dropout *d, int b,
                                                    int h, int i, int j, int T)
{
    tr_philox4x32(r, d->seed, d->stream, tr_dropout_att_index(d, b, h, i & ~8, j & ~8, T));
}

/* 0 or d->scale: the factor of (i, j) from its group's words r */
TR_PHILOX_HD static inline float tr_dropout_att_keep(const tr_dropout *d, const uint32_t r[4],
                                                     int i, int j)
{
    return r[((i >> 2) & 2) | ((j >> 3) & 1)] < d->threshold ? 0.0f : d->scale;
}

/* attention's factor of (b, h, i, j) alone: one Philox call */
TR_PHILOX_HD static inline float tr_dropout_att_factor(const tr_dropout *d, int b, int h, int i,
                                                       int j, int T)
{
    uint32_t r[4];
    tr_dropout_att_draw(r, d, b, h, i, j, T);
    return tr_dropout_att_keep(d, r, i, j);
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
