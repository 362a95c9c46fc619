/* test_cuda_gemm_precision.c: the CUDA GEMMs under each precision of
 * set_gemm_precision (kernels.h) against the CPU's fp32 GEMM, the oracle
 * (test_cuda_kernels.c covers the rest of the table, at fp32).
 *
 * What must hold:
 *  - bf16 (fp16): for inputs rounded to the format with round_lowp, as the model
 *    stores them, the tensor-core GEMM (cublasGemmEx, compute type _FAST_16BF or
 *    _FAST_16F) is the CPU's fp32 GEMM of the same values: every product is exact
 *    on both sides (two 8- or 11-bit significands make at most 22 bits; whatever
 *    cuBLAS converts to, bf16, fp16 or TF32, holds the inputs exactly) and both add
 *    them in fp32, in different orders and groupings. Tolerance TOL_SAME = 1e-4
 *    relative to max |C|, as for fp32 GEMMs in test_cuda_kernels.c: the two sums
 *    differ by fp32 rounding of partial sums, a random walk of about sqrt(K) u |C|
 *    (u = 2^-24; about 1e-6 of max |C| at K = 768), or, where tensor cores truncate
 *    instead of rounding while they accumulate, about (K / 8) u |C|, 1e-5 at the
 *    most at K = 768. C stays fp32: it starts as large as the product (values up to
 *    sqrt(K), beta = 0.75), so a C rounded to bf16 on the way would be off by up to
 *    2^-9 of it, about 1e-3 of max |C|. A missed term, a transposed operand or a
 *    wrong stride is off by order 1.
 *  - Unrounded inputs at bf16 (fp16) may be rounded by cuBLAS (to the format or to
 *    TF32, its choice): each element stays within the bound of that rounding,
 *    (2 e + e^2) sum_k |alpha a_ik b_kj| with e = 2^-7 for bf16, 2^-10 for fp16 and
 *    TF32 (a step of the format relative to the value, which holds whether cuBLAS
 *    rounds to nearest or truncates), plus TOL_SAME max |C| for the additions. How
 *    far it is from fp32 is printed: it shows whether tensor cores ran (about 2e-3
 *    of max |C| for bf16) or fp32 kernels (1e-7), which cuBLAS may choose for small
 *    or unaligned shapes.
 *  - fp32, before any change and after returning to it: cublasSgemm within TOL_SAME
 *    of the CPU on unrounded inputs; tensor cores would be off by about 1e-3.
 * Both the table's gemm and tr_cuda_gemm_strided_batched (the attention's GEMMs, in
 * the attention's layout: heads HS apart in rows of 3C) are checked, every transpose
 * pair, with padded leading dimensions, at small odd sizes and at K = 768.
 *
 * No usable GPU: prints why and exits 77 (CTest: skipped). */
#include "backend/cpu_backend.h"
#include "backend/lowp_math.h"
#include "core/rng.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_probe.h"
#include "test_util.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL_SAME 1e-4

static const tr_kernels *gpu = &tr_cuda_kernels;
static uint64_t g_stream = 1;

static const char *format_name(int format)
{
    return format == TR_PREC_BF16 ? "bf16" : format == TR_PREC_FP16 ? "fp16" : "fp32";
}

/* the largest relative error of the conversions cuBLAS may apply in this format, to
 * nearest or towards zero: one step of the significand (bf16 8 bits, fp16/TF32 11) */
static double conversion_error(int format)
{
    return format == TR_PREC_BF16 ? ldexp(1.0, -7) : format == TR_PREC_FP16 ? ldexp(1.0, -10) : 0.0;
}

/* ---- a matrix on both sides -------------------------------------------------------- */

typedef struct mat {
    float *h, *d; /* host (CPU GEMM) and device copies */
    size_t n;
} mat;

/* n values uniform in [-scale, scale), rounded to `format` when it is not fp32 */
static mat mat_rand(size_t n, float scale, int format)
{
    mat m = {malloc(n * sizeof(float)), tr_cuda_alloc(n * sizeof(float), "test matrix"), n};
    uint64_t s = g_stream++;
    for (size_t i = 0; i < n; i++)
        m.h[i] = scale * (2.0f * tr_rng_uniform(2025, s, i) - 1.0f);
    tr_cpu_round_lowp(m.h, n, format);
    tr_cuda_upload(m.d, m.h, n * sizeof(float));
    return m;
}

static void mat_free(mat *m)
{
    free(m->h);
    tr_cuda_free(m->d);
}

/* One GEMM problem, row-major, `count` times at strides sa, sb, sc (count 1: the
 * table's gemm, else tr_cuda_gemm_strided_batched). */
typedef struct problem {
    const char *what;
    int ta, tb, M, N, K, lda, ldb, ldc, count;
    long long sa, sb, sc;
} problem;

/* elements a stored operand spans: rows x cols at stride ld, count times */
static size_t extent(int rows, int cols, int ld, long long stride, int count)
{
    return (size_t)(rows - 1) * ld + cols + (size_t)(count - 1) * stride;
}

static void cpu_run(const problem *p, float alpha, const float *A, const float *B, float beta,
                    float *C)
{
    for (int i = 0; i < p->count; i++)
        tr_cpu_gemm(p->ta, p->tb, p->M, p->N, p->K, alpha, A + i * p->sa, p->lda, B + i * p->sb,
                    p->ldb, beta, C + i * p->sc, p->ldc);
}

static void gpu_run(const problem *p, float alpha, const float *A, const float *B, float beta,
                    float *C)
{
    if (p->count == 1)
        gpu->gemm(p->ta, p->tb, p->M, p->N, p->K, alpha, A, p->lda, B, p->ldb, beta, C, p->ldc);
    else
        tr_cuda_gemm_strided_batched(p->ta, p->tb, p->M, p->N, p->K, alpha, A, p->lda, p->sa, B,
                                     p->ldb, p->sb, beta, C, p->ldc, p->sc, p->count);
}

/* sum_k |alpha a_ik b_kj| of C element (i, j) of batch entry e */
static double abs_dot(const problem *p, float alpha, const float *A, const float *B, int e,
                      int i, int j)
{
    const float *a = A + e * p->sa, *b = B + e * p->sb;
    double s = 0.0;
    for (int k = 0; k < p->K; k++) {
        float x = p->ta ? a[(size_t)k * p->lda + i] : a[(size_t)i * p->lda + k];
        float y = p->tb ? b[(size_t)j * p->ldb + k] : b[(size_t)k * p->ldb + j];
        s += fabs((double)x * y);
    }
    return fabs(alpha) * s;
}

/* Runs p at `format` on inputs rounded to `round_to`: checks every C element the
 * problem writes against the CPU, within TOL_SAME max |C| plus, when the inputs
 * are unrounded and the format is 16-bit, the bound of rounding them. */
static void check_problem(const problem *p, int format, int round_to)
{
    int arows = p->ta ? p->K : p->M, acols = p->ta ? p->M : p->K;
    int brows = p->tb ? p->N : p->K, bcols = p->tb ? p->K : p->N;
    mat a = mat_rand(extent(arows, acols, p->lda, p->sa, p->count), 1.0f, round_to);
    mat b = mat_rand(extent(brows, bcols, p->ldb, p->sb, p->count), 1.0f, round_to);
    mat c = mat_rand(extent(p->M, p->N, p->ldc, p->sc, p->count), sqrtf((float)p->K),
                     TR_PREC_FP32);
    const float alpha = 0.7f, beta = 0.75f;
    gpu->set_gemm_precision(format);
    cpu_run(p, alpha, a.h, b.h, beta, c.h);
    gpu_run(p, alpha, a.d, b.d, beta, c.d);
    float *g = malloc(c.n * sizeof(float));
    tr_cuda_download(g, c.d, c.n * sizeof(float));
    double cmax = 0.0;
    for (size_t i = 0; i < c.n; i++)
        cmax = fmax(cmax, fabs(c.h[i]));
    double u = round_to == TR_PREC_FP32 ? conversion_error(format) : 0.0;
    double worst = 0.0, worst_excess = -INFINITY; /* |g - c| / cmax; |g - c| - bound */
    for (int e = 0; e < p->count; e++)
        for (int i = 0; i < p->M; i++)
            for (int j = 0; j < p->N; j++) {
                size_t at = (size_t)e * p->sc + (size_t)i * p->ldc + j;
                double d = fabs((double)g[at] - c.h[at]);
                double bound = TOL_SAME * cmax;
                if (u > 0.0)
                    bound += (2.0 * u + u * u) * abs_dot(p, alpha, a.h, b.h, e, i, j);
                worst = fmax(worst, d / cmax);
                worst_excess = fmax(worst_excess, d - bound);
            }
    char what[160];
    snprintf(what, sizeof what, "%s at %s, inputs %s", p->what, format_name(format),
             round_to == TR_PREC_FP32 ? "unrounded" : "rounded");
    if (u > 0.0)
        printf("  %-58s rel err %.2e (%s)\n", what, worst,
               worst > 1e-5 ? "inputs rounded: tensor cores" : "not rounded: fp32 kernel");
    else
        printf("  %-58s rel err %.2e (tol %.0e)\n", what, worst, TOL_SAME);
    CHECK(worst_excess <= 0.0, "%s: an element is %.3e beyond its bound (rel err %.3e)", what,
          worst_excess, worst);
    free(g);
    mat_free(&a);
    mat_free(&b);
    mat_free(&c);
}

/* ---- the problems ------------------------------------------------------------------- */

/* a single GEMM: stored A is [M,K] or, transposed, [K,M]; B is [K,N] or [N,K] */
static problem single(const char *what, int ta, int tb, int M, int N, int K, int pad)
{
    problem p = {what, ta, tb, M, N, K, (ta ? M : K) + pad, (tb ? K : N) + pad, N + pad, 1,
                 0, 0, 0};
    return p;
}

enum { T = 128, NH = 4, HS = 64, CH = NH * HS };

/* the attention's batched products over the NH heads of one batch row (see
 * cuda_attention.cu): q, k, v are HS-wide slices of rows of 3C, att is T x T a head */
static const problem attention_problems[] = {
    {"batched S = Q K^T (T,T,HS)", 0, 1, T, T, HS, 3 * CH, 3 * CH, T, NH, HS, HS, T * T},
    {"batched O = A V (T,HS,T)", 0, 0, T, HS, T, T, 3 * CH, CH, NH, T * T, HS, HS},
    {"batched dV = A^T dO (T,HS,T)", 1, 0, T, HS, T, T, CH, 3 * CH, NH, T * T, HS, HS},
};

static void check_all(int format, int round_to)
{
    static const char *names[2][2] = {{"gemm 37x29x45 NN", "gemm 37x29x45 NT"},
                                      {"gemm 37x29x45 TN", "gemm 37x29x45 TT"}};
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            problem p = single(names[ta][tb], ta, tb, 37, 29, 45, 3);
            check_problem(&p, format, round_to);
        }
    /* GPT's K = C = 768, with a weight-gradient-like transposed A */
    problem big = single("gemm 256x192x768 NT", 0, 1, 256, 192, 768, 0);
    check_problem(&big, format, round_to);
    problem big_t = single("gemm 192x256x768 TN", 1, 0, 192, 256, 768, 4);
    check_problem(&big_t, format, round_to);
    for (size_t i = 0; i < sizeof attention_problems / sizeof *attention_problems; i++)
        check_problem(&attention_problems[i], format, round_to);
}

int main(void)
{
    char why[512];
    int ngpu = tr_cuda_device_count(why, sizeof why);
    if (ngpu < 1) { /* -1: the node has GPUs CUDA cannot use, a failure (cuda_probe.h) */
        printf("%s: %s\n", ngpu < 0 ? "FAIL" : "SKIPPED", why);
        return ngpu < 0 ? 1 : 77;
    }
    printf("%s\n", why);
    tr_cpu_backend_init(2);
    tr_cuda_init(-1);
    printf("fp32 (the default)\n");
    check_all(TR_PREC_FP32, TR_PREC_FP32);
    const int formats[] = {TR_PREC_BF16, TR_PREC_FP16};
    for (int f = 0; f < 2; f++) {
        printf("%s, inputs rounded to it: the CPU's GEMM of the same values\n",
               format_name(formats[f]));
        check_all(formats[f], formats[f]);
        printf("%s, inputs not rounded: within the bound of rounding them\n",
               format_name(formats[f]));
        check_all(formats[f], TR_PREC_FP32);
    }
    printf("fp32 again, after bf16 and fp16\n");
    check_all(TR_PREC_FP32, TR_PREC_FP32);
    return tr_test_finish();
}
