/* test_row_scans.c: the vector scans of a logits row (src/backend/cpu_row_scans.h)
 * against the scalar loops they replace, on rows of every length from 0 to 100 (all
 * the remainders of their 8-, 16- and 32-value steps) and of GPT-2's vocabulary:
 *  - tr_row_max and tr_row_argmax give the scalar scans' value and index bit for bit,
 *    on rows made to hold ties (a value repeated at several columns, in different
 *    lanes and in the tail), NaNs (in column 0, which stays, and elsewhere, which
 *    never wins), infinities and signed zeros (where a max of zeros may differ only in
 *    its sign);
 *  - tr_row_sum_double is within 1e-15 of the serial double sum, and gives the same
 *    bits on a copy of the row at another address. */
#include "backend/cpu_row_scans.h"
#include "core/rng.h"
#include "test_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static float scalar_max(float init, const float *x, size_t n)
{
    float m = init;
    for (size_t j = 0; j < n; j++)
        m = x[j] > m ? x[j] : m;
    return m;
}

static size_t scalar_argmax(const float *x, size_t n, float *val)
{
    size_t best = 0;
    for (size_t j = 1; j < n; j++)
        if (x[j] > x[best])
            best = j;
    *val = x[best];
    return best;
}

static int same_float(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

/* Row `kind` of length n from stream s: plain random values, or with ties, NaNs,
 * infinities, zeros. */
static void make_row(float *x, size_t n, int kind, uint64_t s)
{
    for (size_t j = 0; j < n; j++)
        x[j] = (float)(8.0 * tr_rng_uniform(s, (uint64_t)kind, j) - 4.0);
    if (n == 0)
        return;
    size_t a = (size_t)(tr_rng_uniform(s, 100 + (uint64_t)kind, 0) * (double)n);
    size_t b = (size_t)(tr_rng_uniform(s, 100 + (uint64_t)kind, 1) * (double)n);
    size_t c = n - 1;
    switch (kind) {
    case 1: /* the row's max at three columns */
        x[a] = x[b] = x[c] = 9.0f;
        break;
    case 2: /* a NaN in column 0: stays */
        x[0] = NAN;
        break;
    case 3: /* NaNs elsewhere: never win */
        x[a] = NAN;
        x[c] = NAN;
        break;
    case 4: /* infinities, the largest tied */
        x[a] = INFINITY;
        x[b] = -INFINITY;
        x[c] = INFINITY;
        break;
    case 5: /* zeros of both signs only */
        for (size_t j = 0; j < n; j++)
            x[j] = (j * 7 + (size_t)s) % 3 ? -0.0f : 0.0f;
        break;
    case 6: /* everything equal: the first wins */
        for (size_t j = 0; j < n; j++)
            x[j] = 1.5f;
        break;
    default:
        break;
    }
}

static void check_row(const float *x, size_t n, int kind)
{
    float inits[2] = {n ? x[0] : 0.0f, -INFINITY};
    for (int i = 0; i < 2; i++) {
        float want = scalar_max(inits[i], x, n), got = tr_row_max(inits[i], x, n);
        int ok = same_float(got, want) || (kind == 5 && got == want) || (isnan(got) && isnan(want));
        CHECK(ok, "row_max: n %zu, kind %d, init %d: %g, the scalar scan %g", n, kind, i,
              (double)got, (double)want);
    }
    if (n) {
        float v1, v2;
        size_t i1 = tr_row_argmax(x, n, &v1), i2 = scalar_argmax(x, n, &v2);
        CHECK(i1 == i2 && (same_float(v1, v2) || (isnan(v1) && isnan(v2))),
              "row_argmax: n %zu, kind %d: %zu (%g), the scalar scan %zu (%g)", n, kind, i1,
              (double)v1, i2, (double)v2);
    }
    if (kind == 0) {
        double serial = 0.0;
        for (size_t j = 0; j < n; j++)
            serial += fabsf(x[j]);
        float *a = malloc((n + 1) * sizeof *a);
        for (size_t j = 0; j < n; j++)
            a[j] = fabsf(x[j]);
        double s1 = tr_row_sum_double(a, n);
        memmove(a + 1, a, n * sizeof *a); /* another address, another alignment */
        double s2 = tr_row_sum_double(a + 1, n);
        free(a);
        CHECK(fabs(s1 - serial) <= 1e-15 * serial, "row_sum: n %zu: %.17g, serially %.17g", n, s1,
              serial);
        CHECK(memcmp(&s1, &s2, sizeof s1) == 0, "row_sum: n %zu: other bits at another address", n);
    }
}

int main(void)
{
    long rows = 0;
    for (size_t n = 0; n <= 100; n++)
        for (int kind = 0; kind <= 6; kind++)
            for (uint64_t s = 1; s <= 3; s++) {
                float *x = malloc((n ? n : 1) * sizeof *x);
                make_row(x, n, kind, s);
                check_row(x, n, kind);
                free(x);
                rows++;
            }
    /* GPT-2's vocabulary, and a split of it */
    size_t big[] = {50257, 50304, 25129};
    for (size_t i = 0; i < sizeof big / sizeof *big; i++)
        for (int kind = 0; kind <= 6; kind++) {
            float *x = malloc(big[i] * sizeof *x);
            make_row(x, big[i], kind, 7);
            check_row(x, big[i], kind);
            free(x);
            rows++;
        }
    printf("%ld rows: max and argmax as the scalar scans, sums within 1e-15\n", rows);
    return tr_test_finish();
}
