/* cpu_row_scans.h: the scans of a language model's logits row (50257 values for GPT-2)
 * that the cross-entropy and the accuracy take: its max, the first index of its max,
 * and the double sum of its exponentials.
 *
 * Why vectors: written as one scalar loop each, every step waits on the last
 * (m = x > m ? x : m; s += e): some 4 cycles a value, about 200 K cycles a row, which
 * made the cross-entropy's forward and the accuracy a quarter of a GPT step's time on
 * the CPU (gpt_brown.in, one thread), more than the memory they read. Here 8 to 32
 * independent lanes carry the scan; GCC does not do it itself, since it may not
 * reorder float max (NaN) or sums (rounding).
 *
 * What each gives:
 *  - tr_row_max: the scalar scan's value exactly (a max does not round; NaN never wins
 *    in either, and a NaN start stays in both); only the sign of a zero max may differ;
 *  - tr_row_argmax: the scalar scan's index and value exactly (lanes keep their first
 *    best, ties between lanes go to the lower index);
 *  - tr_row_sum_double: a sum in double in a fixed order of its own (16 lanes, then a
 *    fixed tree): not the serial loop's bits, but the same bits every run, at any
 *    thread count. */
#ifndef TR_CPU_ROW_SCANS_H
#define TR_CPU_ROW_SCANS_H

#include "backend/cpu_simd.h"

#include <stddef.h>

typedef float tr_v4f __attribute__((vector_size(16)));
typedef double tr_v4d __attribute__((vector_size(32)));

/* lanes: a > m ? a : m (the scalar scan's step, MAXPS's rule) */
TR_INLINE tr_v8 v8_max_step(tr_v8 a, tr_v8 m)
{
#if defined(__AVX__)
    return (tr_v8)_mm256_max_ps((__m256)a, (__m256)m);
#else
    tr_v8i take = a > m;
    return (tr_v8)(((tr_v8i)a & take) | ((tr_v8i)m & ~take));
#endif
}

/* The scan "m = init; for j < n: m = x[j] > m ? x[j] : m". */
static inline float tr_row_max(float init, const float *x, size_t n)
{
    tr_v8 m0 = v8_set1(init), m1 = m0, m2 = m0, m3 = m0;
    size_t j = 0;
    for (; j + 32 <= n; j += 32) {
        m0 = v8_max_step(v8_load(x + j), m0);
        m1 = v8_max_step(v8_load(x + j + 8), m1);
        m2 = v8_max_step(v8_load(x + j + 16), m2);
        m3 = v8_max_step(v8_load(x + j + 24), m3);
    }
    m0 = v8_max_step(m1, m0);
    m2 = v8_max_step(m3, m2);
    m0 = v8_max_step(m2, m0);
    float m = init;
    for (int l = 0; l < 8; l++)
        m = m0[l] > m ? m0[l] : m;
    for (; j < n; j++)
        m = x[j] > m ? x[j] : m;
    return m;
}

/* The scan "best = 0; for j in 1..n-1: if (x[j] > x[best]) best = j" (n >= 1): its
 * index, and its value in *val. */
static inline size_t tr_row_argmax(const float *x, size_t n, float *val)
{
    tr_v8 bv = v8_set1(x[0]);
    tr_v8i bi = {0}, idx = {0, 1, 2, 3, 4, 5, 6, 7};
    const tr_v8i step = {8, 8, 8, 8, 8, 8, 8, 8};
    size_t j = 0;
    /* (lane indices are ints: rows of up to 2^31 values) */
    for (; j + 8 <= n; j += 8, idx += step) {
        tr_v8 v = v8_load(x + j);
        tr_v8i take = v > bv;
        bv = (tr_v8)(((tr_v8i)v & take) | ((tr_v8i)bv & ~take));
        bi = (idx & take) | (bi & ~take);
    }
    /* each lane holds the first best of its columns; the best of the lanes, the lower
     * index on a tie, then the tail's columns, which come after all of them */
    float best = bv[0];
    size_t at = (size_t)bi[0];
    for (int l = 1; l < 8; l++)
        if (bv[l] > best || (bv[l] == best && (size_t)bi[l] < at)) {
            best = bv[l];
            at = (size_t)bi[l];
        }
    for (; j < n; j++)
        if (x[j] > best) {
            best = x[j];
            at = j;
        }
    *val = best;
    return at;
}

/* The sum of x[0..n) in double: lane l of 16 adds the values at j = l mod 16 in order,
 * the rest (n mod 16 of them) a 17th in order; then a fixed tree. */
static inline double tr_row_sum_double(const float *x, size_t n)
{
    tr_v4d s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0};
    size_t j = 0;
    for (; j + 16 <= n; j += 16) {
        tr_v4f a, b, c, d;
        memcpy(&a, x + j, sizeof a);
        memcpy(&b, x + j + 4, sizeof b);
        memcpy(&c, x + j + 8, sizeof c);
        memcpy(&d, x + j + 12, sizeof d);
        s0 += __builtin_convertvector(a, tr_v4d);
        s1 += __builtin_convertvector(b, tr_v4d);
        s2 += __builtin_convertvector(c, tr_v4d);
        s3 += __builtin_convertvector(d, tr_v4d);
    }
    double t = 0.0;
    for (; j < n; j++)
        t += x[j];
    tr_v4d s = (s0 + s1) + (s2 + s3);
    return ((s[0] + s[2]) + (s[1] + s[3])) + t;
}

#endif
