/* fd_check.h: central finite-difference gradient checks in float32, shared by the
 * gradcheck tests.
 *
 * For a scalar loss L(x) evaluated by a callback, the numeric derivative of element
 * i is (L(x + eps e_i) - L(x - eps e_i)) / (x_i^+ - x_i^-), where x_i^+/- are the
 * perturbed values as actually stored in float (dividing by 2 eps would add the
 * rounding of x_i +/- eps to the error). It is compared with the analytic value by
 *   err = |a - n| / max(floor, |a| + |n|),
 * a relative error for gradients of normal size and an absolute one (err * floor)
 * for tiny ones, where float rounding in L, not the backward pass, dominates |a - n|.
 * Elements whose perturbation crosses a kink of a piecewise-linear op (relu, max
 * pooling) are skipped when the callback reports it; the caller bounds how many. */
#ifndef TR_FD_CHECK_H
#define TR_FD_CHECK_H

#include "core/rng.h"
#include "test_util.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>

typedef struct fd_problem {
    double (*loss)(void *ctx);  /* runs the forward pass at the current values */
    int (*kinked)(void *ctx);   /* optional: nonzero when the last loss crossed a kink */
    void *ctx;
} fd_problem;

typedef struct fd_result {
    size_t n, failed, skipped;
    double worst;       /* largest err over the compared elements */
    size_t worst_at;
    double worst_a, worst_n;
} fd_result;

/* Compares analytic[i] with the numeric derivative of p->loss along x[i], for every i. */
static inline fd_result fd_check(const fd_problem *p, float *x, const float *analytic,
                                 size_t n, float eps, double floor_, double tol)
{
    fd_result r = {.n = n};
    for (size_t i = 0; i < n; i++) {
        float save = x[i];
        float xp = save + eps, xm = save - eps;
        x[i] = xp;
        double lp = p->loss(p->ctx);
        int kink = p->kinked ? p->kinked(p->ctx) : 0;
        x[i] = xm;
        double lm = p->loss(p->ctx);
        kink |= p->kinked ? p->kinked(p->ctx) : 0;
        x[i] = save;
        if (kink) {
            r.skipped++;
            continue;
        }
        double num = (lp - lm) / ((double)xp - (double)xm);
        double a = analytic[i];
        double den = fabs(a) + fabs(num);
        double err = fabs(a - num) / (den > floor_ ? den : floor_);
        if (!(err < tol)) /* also catches NaN */
            r.failed++;
        if (!(err <= r.worst)) {
            r.worst = err;
            r.worst_at = i;
            r.worst_a = a;
            r.worst_n = num;
        }
    }
    p->loss(p->ctx); /* leave the forward state as it was at the unperturbed point */
    return r;
}

/* One CHECK per tensor, with the worst element in the message. */
#define FD_CHECK_TENSOR(what, res, max_skip_frac)                                          \
    do {                                                                                 \
        fd_result r_ = (res);                                                            \
        CHECK(r_.failed == 0 && (double)r_.skipped <= (max_skip_frac) * (double)r_.n,    \
              "%s: %zu of %zu elements off, %zu skipped at kinks; worst err %.3g at %zu " \
              "(analytic %.6g, numeric %.6g)",                                           \
              what, r_.failed, r_.n, r_.skipped, r_.worst, r_.worst_at, r_.worst_a,      \
              r_.worst_n);                                                               \
        printf("  %-30s n=%-4zu worst err %.2e (a %+.4e n %+.4e) skipped %zu\n", what,  \
               r_.n, r_.worst, r_.worst_a, r_.worst_n, r_.skipped);                      \
    } while (0)

/* U(lo, hi) values from the counter-based generator: the same on every machine. */
static inline void fd_fill_uniform(float *x, size_t n, float lo, float hi, uint64_t stream)
{
    for (size_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * tr_rng_uniform(12345, stream, i);
}

/* Distinct values spaced `gap` apart, none within gap/2 of zero, in a shuffled order:
 * max pooling has a unique winner and relu a clear sign that a perturbation smaller
 * than gap/2 cannot change. */
static inline void fd_fill_distinct(float *x, size_t n, float gap, uint64_t stream)
{
    for (size_t i = 0; i < n; i++)
        x[i] = ((float)i + 0.5f - (float)(n / 2)) * gap; /* half-integers: never 0 */
    for (size_t i = n; i > 1; i--) { /* Fisher-Yates */
        size_t j = (size_t)(tr_rng_u64(12345, stream, i) % i);
        float t = x[i - 1];
        x[i - 1] = x[j];
        x[j] = t;
    }
}

#endif
