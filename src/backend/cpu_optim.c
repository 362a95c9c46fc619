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

/* AdamW over n parameters, each gradient read as tr_grad_in(g, FMT, grad_factor):
 * one function a format, whose loop, free of the format's branches, vectorises */
#define ADAMW_RANGE(NAME, FMT)                                                                     \
    static void NAME(float *restrict param, float *restrict m, float *restrict v,                  \
                     const float *restrict grad, size_t n, const tr_adamw_consts *c,               \
                     float grad_factor)                                                            \
    {                                                                                              \
        tr_adamw_consts k = *c; /* a local: no store through param can change it */                \
        for (size_t i = 0; i < n; i++)                                                             \
            tr_adamw_elem(&param[i], &m[i], &v[i], tr_grad_in(grad[i], FMT, grad_factor), &k);     \
    }
ADAMW_RANGE(adamw_range, TR_PREC_FP32)
ADAMW_RANGE(adamw_range_bf16, TR_PREC_BF16)
ADAMW_RANGE(adamw_range_fp16, TR_PREC_FP16)
#undef ADAMW_RANGE

/* elements of one adamw_range call (the threads take blocks of them) */
#define ADAMW_BLOCK ((size_t)4096)

static void adamw(float *param, float *m, float *v, const float *grad, size_t n,
                  const tr_adamw_consts *c, int grad_format, float grad_factor)
{
    void (*range)(float *, float *, float *, const float *, size_t, const tr_adamw_consts *,
                  float) = grad_format == TR_PREC_BF16   ? adamw_range_bf16
                           : grad_format == TR_PREC_FP16 ? adamw_range_fp16
                                                         : adamw_range;
    size_t blocks = (n + ADAMW_BLOCK - 1) / ADAMW_BLOCK;
#pragma omp parallel for schedule(static) if (n > PAR_MIN_ELEMS)
    for (size_t b = 0; b < blocks; b++) {
        size_t lo = b * ADAMW_BLOCK, len = n - lo < ADAMW_BLOCK ? n - lo : ADAMW_BLOCK;
        range(param + lo, m + lo, v + lo, grad + lo, len, c, grad_factor);
    }
}

void tr_cpu_adamw_update(float *restrict param, float *restrict m, float *restrict v,
                         const float *restrict grad, size_t n, float lr, double beta1,
                         double beta2, float eps, float weight_decay, long t,
                         float *restrict lowp, int format)
{
    if (t < 1) /* the bias corrections 1 - beta^t would divide by zero */
        tr_fatal(TR_EXIT_SOFTWARE, "adamw_update: step %ld, steps count from 1", t);
    tr_adamw_consts c = tr_adamw_make_consts(lr, beta1, beta2, eps, weight_decay, t);
    adamw(param, m, v, grad, n, &c, TR_PREC_FP32, 1.0f);
    store_lowp(lowp, param, n, format);
}

void tr_cpu_adamw_update_spans(const tr_adamw_span *s, int count, float lr, double beta1,
                               double beta2, float eps, long t, int format, int grad_format,
                               float grad_factor)
{
    if (t < 1) /* the bias corrections 1 - beta^t would divide by zero */
        tr_fatal(TR_EXIT_SOFTWARE, "adamw_update: step %ld, steps count from 1", t);
    for (int i = 0; i < count; i++) {
        tr_adamw_consts c = tr_adamw_make_consts(lr, beta1, beta2, eps, s[i].weight_decay, t);
        adamw(s[i].param, s[i].m, s[i].v, s[i].grad, s[i].n, &c, grad_format, grad_factor);
        store_lowp(s[i].lowp, s[i].param, s[i].n, format);
    }
}

/* Sum of squares of one chunk in double, each value rounded to FMT first (one
 * function a format, whose loop, free of the format's branches, vectorises). Eight
 * explicit accumulators give the compiler independent lanes to vectorise without
 * reassociating anything, and they are combined in a fixed tree. */
#define CHUNK_SUM_SQUARES(NAME, FMT)                                                               \
    static double NAME(const float *x, size_t n)                                                   \
    {                                                                                              \
        double acc[8] = {0};                                                                       \
        size_t i = 0;                                                                              \
        for (; i + 8 <= n; i += 8)                                                                 \
            for (int j = 0; j < 8; j++) {                                                          \
                double r = tr_round_lowp(x[i + j], FMT);                                           \
                acc[j] += r * r;                                                                   \
            }                                                                                      \
        for (int j = 0; i < n; i++, j++) {                                                         \
            double r = tr_round_lowp(x[i], FMT);                                                   \
            acc[j] += r * r;                                                                       \
        }                                                                                          \
        return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));  \
    }
CHUNK_SUM_SQUARES(chunk_sum_squares, TR_PREC_FP32)
CHUNK_SUM_SQUARES(chunk_sum_squares_bf16, TR_PREC_BF16)
CHUNK_SUM_SQUARES(chunk_sum_squares_fp16, TR_PREC_FP16)
#undef CHUNK_SUM_SQUARES

/* tr_cpu_sum_squares of x's values rounded to format */
static double sum_squares_as(const float *x, size_t n, int format)
{
    double (*chunk)(const float *, size_t) = format == TR_PREC_BF16   ? chunk_sum_squares_bf16
                                             : format == TR_PREC_FP16 ? chunk_sum_squares_fp16
                                                                      : chunk_sum_squares;
    size_t nchunks = (n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK;
    double total = 0.0;
    for (size_t first = 0; first < nchunks; first += SUMSQ_ROUND) {
        double part[SUMSQ_ROUND];
        int count = (int)(nchunks - first < SUMSQ_ROUND ? nchunks - first : SUMSQ_ROUND);
#pragma omp parallel for schedule(static) if (count > 8)
        for (int c = 0; c < count; c++) {
            size_t lo = (first + c) * SUMSQ_CHUNK;
            size_t len = n - lo < SUMSQ_CHUNK ? n - lo : SUMSQ_CHUNK;
            part[c] = chunk(x + lo, len);
        }
        for (int c = 0; c < count; c++) /* in chunk order */
            total += part[c];
    }
    return total;
}

double tr_cpu_sum_squares(const float *x, size_t n) { return sum_squares_as(x, n, TR_PREC_FP32); }

double tr_cpu_sum_squares_spans(const float *const *x, const size_t *n, int count, int format)
{
    double total = 0.0;
    for (int i = 0; i < count; i++) /* in span order */
        total += sum_squares_as(x[i], n[i], format);
    return total;
}
