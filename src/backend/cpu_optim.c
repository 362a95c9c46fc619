/* cpu_optim.c: optimizer updates and the squared norm (for gradient clipping) on
 * the CPU.
 *
 * The per-element rules live in scalar_math.h, shared with the CUDA backend; here
 * they are only spread over threads. Updates are element-wise, so any split gives
 * the same bits. sum_squares is the one reduction: it is cut into chunks whose
 * boundaries depend only on n, never on the thread count or on scheduling, and the
 * chunk sums are added in chunk order, so the norm (and the clipping factor built
 * from it) is bit-identical run to run and across thread counts. */
#include "backend/cpu_backend.h"
#include "backend/lowp_math.h" /* tr_round_lowp */
#include "backend/scalar_math.h"
#include "core/error.h"

#define PAR_MIN_ELEMS ((size_t)1 << 15)
/* sum_squares: elements per chunk, and chunks per round (the round's partial sums
 * live on the stack, so a tensor of any size needs no allocation). */
#define SUMSQ_CHUNK ((size_t)4096)
#define SUMSQ_ROUND 256

/* Mixed precision's working copy of the updated parameters, rounded to format, where
 * the update loops leave them (lowp NULL: none wanted). */
static void store_lowp(float *restrict lowp, const float *restrict param, size_t n, int format)
{
    if (!lowp)
        return;
#pragma omp parallel for schedule(static) if (n > PAR_MIN_ELEMS)
    for (size_t i = 0; i < n; i++)
        lowp[i] = tr_round_lowp(param[i], format);
}

void tr_cpu_sgd_update(float *restrict param, float *restrict momentum_buf,
                       const float *restrict grad, size_t n, float lr, float momentum,
                       float weight_decay, float *restrict lowp, int format)
{
    if (momentum == 0.0f) { /* plain SGD: the momentum buffer may be NULL */
#pragma omp parallel for schedule(static) if (n > PAR_MIN_ELEMS)
        for (size_t i = 0; i < n; i++)
            tr_sgd_elem(&param[i], NULL, grad[i], lr, 0.0f, weight_decay);
    } else {
#pragma omp parallel for schedule(static) if (n > PAR_MIN_ELEMS)
        for (size_t i = 0; i < n; i++)
            tr_sgd_elem(&param[i], &momentum_buf[i], grad[i], lr, momentum, weight_decay);
    }
    store_lowp(lowp, param, n, format);
}

void tr_cpu_adamw_update(float *restrict param, float *restrict m, float *restrict v,
                         const float *restrict grad, size_t n, float lr, double beta1,
                         double beta2, float eps, float weight_decay, long t,
                         float *restrict lowp, int format)
{
    if (t < 1) /* the bias corrections 1 - beta^t would divide by zero */
        tr_fatal(TR_EXIT_SOFTWARE, "adamw_update: step %ld, steps count from 1", t);
    tr_adamw_consts c = tr_adamw_make_consts(lr, beta1, beta2, eps, weight_decay, t);
#pragma omp parallel for schedule(static) if (n > PAR_MIN_ELEMS)
    for (size_t i = 0; i < n; i++)
        tr_adamw_elem(&param[i], &m[i], &v[i], grad[i], &c);
    store_lowp(lowp, param, n, format);
}

void tr_cpu_adamw_update_spans(const tr_adamw_span *s, int count, float lr, double beta1,
                               double beta2, float eps, long t, int format)
{
    for (int i = 0; i < count; i++)
        tr_cpu_adamw_update(s[i].param, s[i].m, s[i].v, s[i].grad, s[i].n, lr, beta1, beta2, eps,
                            s[i].weight_decay, t, s[i].lowp, format);
}

/* Sum of squares of one chunk in double. Eight explicit accumulators give the
 * compiler independent lanes to vectorise without reassociating anything, and
 * they are combined in a fixed tree. */
static double chunk_sum_squares(const float *x, size_t n)
{
    double acc[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            acc[j] += (double)x[i + j] * x[i + j];
    for (int j = 0; i < n; i++, j++)
        acc[j] += (double)x[i] * x[i];
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

double tr_cpu_sum_squares(const float *x, size_t n)
{
    size_t nchunks = (n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK;
    double total = 0.0;
    for (size_t first = 0; first < nchunks; first += SUMSQ_ROUND) {
        double part[SUMSQ_ROUND];
        int count = (int)(nchunks - first < SUMSQ_ROUND ? nchunks - first : SUMSQ_ROUND);
#pragma omp parallel for schedule(static) if (count > 8)
        for (int c = 0; c < count; c++) {
            size_t lo = (first + c) * SUMSQ_CHUNK;
            size_t len = n - lo < SUMSQ_CHUNK ? n - lo : SUMSQ_CHUNK;
            part[c] = chunk_sum_squares(x + lo, len);
        }
        for (int c = 0; c < count; c++) /* in chunk order */
            total += part[c];
    }
    return total;
}

double tr_cpu_sum_squares_spans(const float *const *x, const size_t *n, int count)
{
    double total = 0.0;
    for (int i = 0; i < count; i++) /* in span order */
        total += tr_cpu_sum_squares(x[i], n[i]);
    return total;
}
