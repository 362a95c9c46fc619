/* test_cuda_kernels.c: every kernel of the CUDA table (tr_cuda_kernels) against the
 * CPU kernel of the same entry, on the same random inputs: the CPU backend is the
 * oracle (its own tests check it by finite differences and against PyTorch).
 *
 * Shapes: B=2, T=16, C=64, NH=4 (HS=16), V=100, Vp=128, odd GEMM sizes with padded
 * leading dimensions; and 1200 rows for the kernels that split rows into blocks (the
 * wte gradient's 256-row scans, the column sums of the layernorm and bias gradients);
 * layernorm also at GPT-2's C = 768 over 8 x 1024 rows (the fused backward, 256 row
 * blocks) and at C = 1600 (too wide for it: the two-kernel form). The classifier's
 * kernels: the CNN's (src/models/cnn.c) conv 1->6 5x5 pad 2 on 28x28, maxpool 2,
 * conv 6->16 5x5 on 14x14, with B=3, and odd
 * shapes (7x9 inputs, a 3x3 pool window that leaves a row and a column over, a pad
 * larger than the kernel's reach); softmax over 37 samples of 10 and of 100 classes.
 * Parameter-gradient buffers, and activation gradients that must be overwritten,
 * start at random values on both sides, so "+=" against "=" shows; in-place
 * variants run where the kernels allow them.
 *
 * Comparison: max |gpu - cpu| / max |cpu| over the whole tensor, printed for each.
 * Tolerances (fp32): 1e-5 for element-wise and row-wise kernels, whose only
 * differences are the order of additions and fused multiply-adds (a few ulp, ~1e-7
 * relative; the conv bias gradient, a float sum of B ho wo terms in another order,
 * ~1e-6); 1e-4 for anything that goes through a GEMM (cuBLAS sums K products in
 * its own order and blocking). Returned double sums: 1e-5 relative (1e-12 for
 * sum_squares, which adds squares in double). Exact (0): ReLU, max pooling (values
 * and argmax indices), the softmax's correct count, and round_lowp, which must give
 * the CPU's bits for bf16 and fp16, NaN payloads, infinities and subnormals included.
 * A wrong index, a missed term or a transposed operand gives errors of order 1.
 *
 * The GPT MLP's activations stored in 16 bits (linear_gelu_forward and the _stored
 * entries): pre and out within a step of the format (TOL_BF16_STORE), the products
 * after them within TOL_GEMM; mlp_backward's results past its hidden gradient (which
 * each side rounds from its own sums) within TOL_BF16_STORE, the rest within TOL_GEMM.
 * linear_gelu_forward's fp32 GELU epilogue, and the
 * cuBLASLt epilogue paths of linear_forward in every precision, are checked in
 * test_cuda_linear_lt.c.
 *
 * No usable GPU (no driver, no device): prints why and exits 77, which CTest
 * reports as skipped. A bad token must end the process with exit 70 and a message,
 * as on the CPU: checked by running this program again with --bad-token. */
#include "backend/cpu_backend.h"
#include "backend/lowp_math.h" /* tr_precision */
#include "backend/transformer_kernels.h"
#include "core/error.h"
#include "core/rng.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_probe.h"
#include "test_util.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

enum { B = 2, T = 16, C = 64, NH = 4, V = 100, VP = 128, BT = B * T };

#define TOL_ELEM 1e-5
#define TOL_GEMM 1e-4
/* attention in bf16-mixed: P and dS rounded to bf16 (8 bits) before their products */
#define TOL_ATT_BF16 2e-2
/* and in fp16-mixed on the tensor-core kernels, to fp16 (11 bits) */
#define TOL_ATT_FP16 4e-3
/* a kernel that rounds its output to bf16 as it stores: where the two sides' fp32
 * values differ in the last bits, their bf16 roundings may differ by one bf16 step
 * (2^-8 of the value) */
#define TOL_BF16_STORE 8e-3
/* the same in fp16 (one step is 2^-10 of the value): the fp32 attention kernels'
 * outputs in fp16-mixed, stored in fp16 */
#define TOL_FP16_STORE 2e-3

static const tr_kernels *gpu = &tr_cuda_kernels;
static uint64_t g_stream = 1; /* each random tensor its own Philox stream */

/* ---- a tensor on both sides ------------------------------------------------------ */

typedef struct pair {
    float *h, *d; /* host (CPU kernel) and device (CUDA kernel) copies */
    size_t n;
} pair;

static pair pair_rand(size_t n, float lo, float hi)
{
    pair p = {malloc(n * sizeof(float)), tr_cuda_alloc(n * sizeof(float), "test tensor"), n};
    uint64_t s = g_stream++;
    for (size_t i = 0; i < n; i++)
        p.h[i] = lo + (hi - lo) * tr_rng_uniform(2024, s, i);
    tr_cuda_upload(p.d, p.h, n * sizeof(float));
    return p;
}

static pair pair_zero(size_t n) { return pair_rand(n, 0.0f, 0.0f); }

static void pair_free(pair *p)
{
    free(p->h);
    tr_cuda_free(p->d);
    p->h = p->d = NULL;
}

typedef struct ipair {
    int *h, *d;
} ipair;

/* n tokens in [lo, hi), with repeats (every fourth is one of three common tokens) so
 * that the embedding gradient must add several rows into one */
static ipair tokens(size_t n, int lo, int hi)
{
    ipair t = {malloc(n * sizeof(int)), tr_cuda_alloc(n * sizeof(int), "test tokens")};
    uint64_t s = g_stream++;
    for (size_t i = 0; i < n; i++) {
        uint64_t u = tr_rng_u64(2024, s, i);
        t.h[i] = i % 4 == 0 ? lo + (int)(u % 3) : lo + (int)(u % (uint64_t)(hi - lo));
    }
    tr_cuda_upload(t.d, t.h, n * sizeof(int));
    return t;
}

static void ipair_free(ipair *t)
{
    free(t->h);
    tr_cuda_free(t->d);
}

/* n ints, zero on both sides (an output: argmax indices) */
static ipair ipair_zero(size_t n)
{
    ipair t = {calloc(n, sizeof(int)), tr_cuda_alloc(n * sizeof(int), "test ints")};
    return t;
}

/* p's values rounded to multiples of `step` on both sides: ties for max and argmax */
static void pair_quantize(pair *p, float step)
{
    for (size_t i = 0; i < p->n; i++)
        p->h[i] = step * roundf(p->h[i] / step);
    tr_cuda_upload(p->d, p->h, p->n * sizeof(float));
}

static double max_abs(const float *x, size_t n)
{
    double m = 0.0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs(x[i]));
    return m;
}

/* max |gpu - cpu| / max |cpu|, the device copy fetched first */
static double rel_err(const pair *p)
{
    float *g = malloc(p->n * sizeof(float));
    tr_cuda_download(g, p->d, p->n * sizeof(float));
    double worst = 0.0, scale = max_abs(p->h, p->n);
    for (size_t i = 0; i < p->n; i++) { /* a NaN on either side is the worst error */
        double d = fabs((double)g[i] - p->h[i]);
        worst = isnan(d) ? INFINITY : fmax(worst, d);
    }
    free(g);
    return scale > 0.0 ? worst / scale : worst;
}

static void compare(const char *what, const pair *p, double tol)
{
    double e = rel_err(p);
    printf("  %-40s rel err %.2e (tol %.0e)\n", what, e, tol);
    CHECK(e <= tol, "%s: relative error %.3e above %.0e", what, e, tol);
}

/* every value of p's device copy is one `format` holds: the kernel rounded as it
 * stored (a NaN passes) */
static void check_rounded(const char *what, const pair *p, int format)
{
    float *g = malloc(p->n * sizeof(float));
    tr_cuda_download(g, p->d, p->n * sizeof(float));
    size_t bad = 0;
    for (size_t i = 0; i < p->n; i++)
        bad += !(isnan(g[i]) || tr_round_lowp(g[i], format) == g[i]);
    free(g);
    CHECK(bad == 0, "%s: %zu of %zu values not rounded to %s", what, bad, p->n,
          format == TR_PREC_BF16 ? "bf16" : "fp16");
}

/* The CPU and GPU kernels' outputs at a 16-bit format agree and the GPU's are of it. */
static void compare_rounded(const char *what, const pair *p, int format)
{
    compare(what, p, TOL_BF16_STORE);
    check_rounded(what, p, format);
}

/* compare_rounded at a 16-bit format, compare within TOL_ELEM at fp32 */
static void compare_format(const char *what, const pair *p, int format)
{
    char name[96];
    snprintf(name, sizeof name, "%s (%s)", what,
             format == TR_PREC_BF16 ? "bf16" : format == TR_PREC_FP16 ? "fp16" : "fp32");
    if (format == TR_PREC_FP32)
        compare(name, p, TOL_ELEM);
    else
        compare_rounded(name, p, format);
}

static void compare_value(const char *what, double cpu, double cuda, double tol)
{
    double e = fabs(cuda - cpu) / fmax(fabs(cpu), 1e-300);
    printf("  %-40s rel err %.2e (tol %.0e)\n", what, e, tol);
    CHECK(e <= tol, "%s: %.17g (cuda) against %.17g (cpu), relative error %.3e", what, cuda, cpu,
          e);
}

/* ints must match exactly: the device copy against the host one */
static void compare_ints(const char *what, const ipair *t, size_t n)
{
    int *g = malloc(n * sizeof(int));
    tr_cuda_download(g, t->d, n * sizeof(int));
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += g[i] != t->h[i];
    free(g);
    printf("  %-40s %zu of %zu differ (want 0)\n", what, bad, n);
    CHECK(bad == 0, "%s: %zu of %zu ints differ", what, bad, n);
}

/* ---- tensors stored in the format's width (lowp_math.h) --------------------------- */

typedef struct stored {
    void *h, *d; /* host and device copies */
    size_t n;
    int format;
} stored;

static stored stored_of(const float *x, size_t n, int format)
{
    size_t bytes = n * tr_stored_bytes(format);
    stored s = {malloc(bytes), tr_cuda_alloc(bytes, "test stored tensor"), n, format};
    for (size_t i = 0; i < n; i++)
        tr_stored_store(s.h, i, x[i], format);
    tr_cuda_upload(s.d, s.h, bytes);
    return s;
}

static void stored_free(stored *s)
{
    free(s->h);
    tr_cuda_free(s->d);
    s->h = s->d = NULL;
}

/* the device copy against the host one, both widened: relative to max |cpu| */
static void compare_stored(const char *what, const stored *s, double tol)
{
    size_t bytes = s->n * tr_stored_bytes(s->format);
    void *g = malloc(bytes);
    tr_cuda_download(g, s->d, bytes);
    double worst = 0.0, scale = 0.0;
    for (size_t i = 0; i < s->n; i++) {
        double c = tr_stored_load(s->h, i, s->format), d = tr_stored_load(g, i, s->format);
        scale = fmax(scale, fabs(c));
        worst = isnan(d - c) ? INFINITY : fmax(worst, fabs(d - c));
    }
    free(g);
    double e = scale > 0.0 ? worst / scale : worst;
    printf("  %-40s rel err %.2e (tol %.0e)\n", what, e, tol);
    CHECK(e <= tol, "%s: relative error %.3e above %.0e", what, e, tol);
}

/* ---- GEMM and linear ------------------------------------------------------------- */

static void test_gemm(void)
{
    printf("gemm\n");
    enum { M = 37, N = 29, K = 45, PAD = 3 };
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            /* stored shapes: A is [M,K] or, transposed, [K,M]; B is [K,N] or [N,K] */
            int lda = (ta ? M : K) + PAD, ldb = (tb ? K : N) + PAD, ldc = N + PAD;
            pair a = pair_rand((size_t)(ta ? K : M) * lda, -1, 1);
            pair b = pair_rand((size_t)(tb ? N : K) * ldb, -1, 1);
            pair c = pair_rand((size_t)M * ldc, -1, 1);
            tr_cpu_gemm(ta, tb, M, N, K, 0.7f, a.h, lda, b.h, ldb, 0.3f, c.h, ldc);
            gpu->gemm(ta, tb, M, N, K, 0.7f, a.d, lda, b.d, ldb, 0.3f, c.d, ldc);
            char what[64];
            snprintf(what, sizeof what, "gemm transA=%d transB=%d", ta, tb);
            compare(what, &c, TOL_GEMM);
            pair_free(&a);
            pair_free(&b);
            pair_free(&c);
        }
    /* K = 0: C = beta C, and beta = 0 clears C whatever it held */
    for (int z = 0; z < 2; z++) {
        float beta = z ? 0.0f : 0.5f;
        pair c = pair_rand((size_t)M * (N + PAD), -1, 1);
        tr_cpu_gemm(0, 0, M, N, 0, 1.0f, c.h, 1, c.h, 1, beta, c.h, N + PAD);
        gpu->gemm(0, 0, M, N, 0, 1.0f, c.d, 1, c.d, 1, beta, c.d, N + PAD);
        compare(z ? "gemm K=0 beta=0" : "gemm K=0 beta=0.5", &c, TOL_ELEM);
        pair_free(&c);
    }
}

static void test_linear(void)
{
    printf("linear\n");
    enum { IN = C, OUT = 3 * C };
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        pair inp = pair_rand((size_t)BT * IN, -1, 1), w = pair_rand((size_t)OUT * IN, -0.5, 0.5);
        pair bias = pair_rand(OUT, -1, 1), out = pair_rand((size_t)BT * OUT, -1, 1);
        pair dout = pair_rand((size_t)BT * OUT, -1, 1), dinp = pair_rand((size_t)BT * IN, -1, 1);
        pair dw = pair_rand((size_t)OUT * IN, -1, 1), db = pair_rand(OUT, -1, 1);
        tr_cpu_linear_forward(out.h, inp.h, w.h, with_bias ? bias.h : NULL, BT, IN, OUT);
        gpu->linear_forward(out.d, inp.d, w.d, with_bias ? bias.d : NULL, BT, IN, OUT);
        compare(with_bias ? "linear_forward out" : "linear_forward out (no bias)", &out, TOL_GEMM);
        /* with a bias: everything; without: dinp and db skipped (NULL) */
        tr_cpu_linear_backward(with_bias ? dinp.h : NULL, dw.h, with_bias ? db.h : NULL, dout.h,
                               inp.h, w.h, BT, IN, OUT);
        gpu->linear_backward(with_bias ? dinp.d : NULL, dw.d, with_bias ? db.d : NULL, dout.d,
                             inp.d, w.d, BT, IN, OUT);
        compare(with_bias ? "linear_backward dinp" : "linear_backward dinp (untouched)", &dinp,
                TOL_GEMM);
        compare("linear_backward dw (+=)", &dw, TOL_GEMM);
        compare(with_bias ? "linear_backward db (+=)" : "linear_backward db (untouched)", &db,
                TOL_ELEM);
        pair *all[] = {&inp, &w, &bias, &out, &dout, &dinp, &dw, &db};
        for (size_t i = 0; i < sizeof all / sizeof *all; i++)
            pair_free(all[i]);
    }
}

/* The GPT MLP's activations stored in the format (transformer_kernels.h): c_fc on the
 * stored ln_2 output and GELU storing pre and out, c_proj's forward and backward on
 * the stored out, and
 * GELU's backward on the stored pre, against the CPU's entries at each format; where
 * the products are of the format (c_proj multiplies the 16-bit out as it is) and, for
 * the 16-bit formats, where they are fp32 (the entries widen the input first). The
 * inputs are rounded to the format, as the model stores them. pre and out within a
 * GEMM's tolerance in fp32, a step of the format else; from there both sides read the
 * CPU's stored tensors. */
static void test_stored_hidden(void)
{
    enum { F = 4 * C };
    size_t nx = (size_t)BT * C, nh = (size_t)BT * F;
    static const int formats[] = {TR_PREC_BF16, TR_PREC_FP16, TR_PREC_FP32};
    for (size_t i = 0; i < sizeof formats / sizeof *formats; i++)
        for (int fp32_products = 0; fp32_products < 2; fp32_products++) {
            int f = formats[i];
            if (fp32_products && f == TR_PREC_FP32)
                continue;
            printf("MLP hidden activations stored in %s, %s products\n",
                   f == TR_PREC_BF16 ? "bf16" : f == TR_PREC_FP16 ? "fp16" : "fp32",
                   fp32_products ? "fp32" : "the format's");
            gpu->set_gemm_precision(fp32_products ? TR_PREC_FP32 : f);
            pair x = pair_rand(nx, -1, 1), dout = pair_rand(nx, -1, 1);
            pair wfc = pair_rand((size_t)F * C, -0.5, 0.5), bfc = pair_rand(F, -1, 1);
            pair wpr = pair_rand((size_t)C * F, -0.5, 0.5), bpr = pair_rand(C, -1, 1);
            pair *in[] = {&x, &dout, &wfc, &bfc, &wpr, &bpr};
            for (size_t k = 0; k < sizeof in / sizeof *in; k++) {
                tr_cpu_round_lowp(in[k]->h, in[k]->n, f);
                tr_cuda_upload(in[k]->d, in[k]->h, in[k]->n * sizeof(float));
            }
            pair scratch = pair_zero(nh), y = pair_zero(nx), dinp = pair_zero(nh);
            pair dw = pair_rand((size_t)C * F, -1, 1), db = pair_rand(C, -1, 1);
            float *zero = calloc(nh, sizeof(float));
            stored pre = stored_of(zero, nh, f), out = stored_of(zero, nh, f);
            free(zero);
            stored xs = stored_of(x.h, nx, f); /* ln_2's output, stored too */
            tr_cpu_linear_gelu_forward(pre.h, out.h, xs.h, wfc.h, bfc.h, BT, C, F, f, scratch.h,
                                       y.h);
            gpu->linear_gelu_forward(pre.d, out.d, xs.d, wfc.d, bfc.d, BT, C, F, f, scratch.d,
                                     y.d);
            double tol = f == TR_PREC_FP32 ? TOL_GEMM : TOL_BF16_STORE;
            compare_stored("linear_gelu_forward pre", &pre, tol);
            compare_stored("linear_gelu_forward out", &out, tol);
            size_t bytes = nh * tr_stored_bytes(f);
            tr_cuda_upload(pre.d, pre.h, bytes);
            tr_cuda_upload(out.d, out.h, bytes);
            /* c_fc again with its output stored in the format (c_attn's form, qkv) */
            float *zeros = calloc(nh, sizeof(float));
            stored io = stored_of(zeros, nh, f);
            free(zeros);
            tr_cpu_linear_forward_stored_io(io.h, xs.h, wfc.h, bfc.h, BT, C, F, f, scratch.h,
                                            y.h);
            gpu->linear_forward_stored_io(io.d, xs.d, wfc.d, bfc.d, BT, C, F, f, scratch.d,
                                          y.d);
            compare_stored("linear_forward_stored_io out", &io, tol);
            stored_free(&io);
            tr_cpu_linear_forward_stored(y.h, out.h, wpr.h, bpr.h, BT, F, C, f, scratch.h);
            gpu->linear_forward_stored(y.d, out.d, wpr.d, bpr.d, BT, F, C, f, scratch.d);
            compare("linear_forward_stored out", &y, TOL_GEMM);
            tr_cpu_linear_backward_stored(dinp.h, dw.h, db.h, dout.h, out.h, wpr.h, BT, F, C, f);
            gpu->linear_backward_stored(dinp.d, dw.d, db.d, dout.d, out.d, wpr.d, BT, F, C, f);
            compare("linear_backward_stored dinp", &dinp, TOL_GEMM);
            compare("linear_backward_stored dw (+=)", &dw, TOL_GEMM);
            compare("linear_backward_stored db (+=)", &db, TOL_ELEM);
            /* with dout stored too (c_attn's form: dqkv), from the same values */
            stored dos = stored_of(dout.h, nx, f);
            tr_cpu_linear_backward_stored_dout(dinp.h, dw.h, db.h, dos.h, out.h, wpr.h, BT, F, C,
                                               f, scratch.h);
            gpu->linear_backward_stored_dout(dinp.d, dw.d, db.d, dos.d, out.d, wpr.d, BT, F, C, f,
                                             scratch.d);
            stored_free(&dos);
            compare("linear_backward_stored_dout dinp", &dinp, TOL_GEMM);
            compare("linear_backward_stored_dout dw (+=)", &dw, TOL_GEMM);
            compare("linear_backward_stored_dout db (+=)", &db, TOL_ELEM);
            /* with dinp stored in the format (attention's c_proj: attention's dout), each
             * side rounding its own sums */
            float *zd = calloc(nh, sizeof(float));
            stored dis = stored_of(zd, nh, f);
            free(zd);
            tr_cpu_linear_backward_stored_dinp(dis.h, dw.h, db.h, dout.h, out.h, wpr.h, BT, F, C,
                                               f, scratch.h);
            gpu->linear_backward_stored_dinp(dis.d, dw.d, db.d, dout.d, out.d, wpr.d, BT, F, C, f,
                                             scratch.d);
            compare_stored("linear_backward_stored_dinp dinp", &dis, tol);
            compare("linear_backward_stored_dinp dw (+=)", &dw, TOL_GEMM);
            compare("linear_backward_stored_dinp db (+=)", &db, TOL_ELEM);
            stored_free(&dis);
            /* GELU's backward in place on the CPU's dinp, reading the stored pre */
            tr_cuda_upload(dinp.d, dinp.h, nh * sizeof(float));
            tr_cpu_gelu_backward(dinp.h, pre.h, dinp.h, nh, f);
            gpu->gelu_backward(dinp.d, pre.d, dinp.d, nh, f);
            compare_format("gelu_backward on the stored pre", &dinp, f);
            /* the MLP's backward in one entry on the CPU's stored activations: the
             * hidden gradient in 16 bits where the products are of the format, each
             * side rounding its own sums to the format, which may put a value one step
             * apart (relative to the largest, far below TOL_BF16_STORE) */
            pair dln = pair_zero(nx), dwf = pair_rand((size_t)F * C, -1, 1);
            pair dbf = pair_rand(F, -1, 1), dwp = pair_rand((size_t)C * F, -1, 1);
            pair dbp = pair_rand(C, -1, 1);
            tr_cpu_mlp_backward(dln.h, dwf.h, dbf.h, dwp.h, dbp.h, dout.h, xs.h, pre.h, out.h,
                                wfc.h, wpr.h, BT, C, F, f, scratch.h);
            gpu->mlp_backward(dln.d, dwf.d, dbf.d, dwp.d, dbp.d, dout.d, xs.d, pre.d, out.d,
                              wfc.d, wpr.d, BT, C, F, f, scratch.d);
            compare("mlp_backward c_proj dw (+=)", &dwp, TOL_GEMM);
            compare("mlp_backward c_proj db (+=)", &dbp, TOL_ELEM);
            compare("mlp_backward dinp", &dln, tol);
            compare("mlp_backward c_fc dw (+=)", &dwf, tol);
            compare("mlp_backward c_fc db (+=)", &dbf, tol);
            pair *mlp[] = {&dln, &dwf, &dbf, &dwp, &dbp};
            for (size_t k = 0; k < sizeof mlp / sizeof *mlp; k++)
                pair_free(mlp[k]);
            stored_free(&xs);
            stored_free(&pre);
            stored_free(&out);
            pair *all[] = {&x, &dout, &wfc, &bfc, &wpr, &bpr, &scratch, &y, &dinp, &dw, &db};
            for (size_t k = 0; k < sizeof all / sizeof *all; k++)
                pair_free(all[k]);
        }
    gpu->set_gemm_precision(TR_PREC_FP32);
}

/* c_attn's backward (linear_backward_stored_dout) and the MLP's (mlp_backward) with
 * more rows than a cast buffer holds of dout (the 16-bit dqkv, the 16-bit hidden
 * gradient), as at GPT-2 124M's 32 x 1024 tokens and past: they take their 16-bit
 * operands as they are and copy only the weight, so they stay on the 16-bit path;
 * the cast limit is lowered to between the weight and dout to reach that at a small
 * shape (128 rows, C 32, 4C 128: weight 4096 values, dout 16384, limit 8192). The
 * CPU's entries are the oracle, at the tolerances of test_stored_hidden. */
static void test_stored_past_cast_limit(void)
{
    enum { R = 128, CC = 32, FF = 4 * CC };
    size_t nx = (size_t)R * CC, nh = (size_t)R * FF;
    static const int formats[] = {TR_PREC_BF16, TR_PREC_FP16};
    for (size_t i = 0; i < sizeof formats / sizeof *formats; i++) {
        int f = formats[i];
        printf("rows past the cast buffer's room for dout, %s\n",
               f == TR_PREC_BF16 ? "bf16" : "fp16");
        gpu->set_gemm_precision(f);
        pair x = pair_rand(nx, -1, 1), dout = pair_rand(nx, -1, 1);
        pair hid = pair_rand(nh, -1, 1), pre = pair_rand(nh, -2, 2);
        pair wfc = pair_rand((size_t)FF * CC, -0.5, 0.5);
        pair wpr = pair_rand((size_t)CC * FF, -0.5, 0.5);
        pair dqkv = pair_rand(nh, -1, 1); /* c_attn's dout, [R, FF] as 3C would be */
        pair *in[] = {&x, &dout, &hid, &pre, &wfc, &wpr, &dqkv};
        for (size_t k = 0; k < sizeof in / sizeof *in; k++)
            tr_cpu_round_lowp(in[k]->h, in[k]->n, f);
        stored xs = stored_of(x.h, nx, f), hs = stored_of(hid.h, nh, f);
        stored ps = stored_of(pre.h, nh, f), ds = stored_of(dqkv.h, nh, f);
        tr_cuda_upload(dout.d, dout.h, nx * sizeof(float));
        tr_cuda_upload(wfc.d, wfc.h, wfc.n * sizeof(float));
        tr_cuda_upload(wpr.d, wpr.h, wpr.n * sizeof(float));
        pair scratch = pair_zero(nh), dinp = pair_rand(nx, -1, 1);
        pair dw = pair_rand((size_t)FF * CC, -1, 1), db = pair_rand(FF, -1, 1);
        tr_cuda_set_cast_limit((size_t)2 * FF * CC);
        /* c_attn: dinp [R, CC] = dqkv [R, FF] w [FF, CC]; dw, db += */
        tr_cpu_linear_backward_stored_dout(dinp.h, dw.h, db.h, ds.h, xs.h, wfc.h, R, CC, FF, f,
                                           scratch.h);
        gpu->linear_backward_stored_dout(dinp.d, dw.d, db.d, ds.d, xs.d, wfc.d, R, CC, FF, f,
                                         scratch.d);
        compare("linear_backward_stored_dout dinp, rows past the limit", &dinp, TOL_GEMM);
        compare("linear_backward_stored_dout dw (+=), rows past the limit", &dw, TOL_GEMM);
        compare("linear_backward_stored_dout db (+=), rows past the limit", &db, TOL_ELEM);
        /* the MLP: c_proj on hid, GELU's backward on pre, c_fc on ln_2's output */
        pair dln = pair_zero(nx), dwf = pair_rand((size_t)FF * CC, -1, 1);
        pair dbf = pair_rand(FF, -1, 1), dwp = pair_rand((size_t)CC * FF, -1, 1);
        pair dbp = pair_rand(CC, -1, 1);
        tr_cpu_mlp_backward(dln.h, dwf.h, dbf.h, dwp.h, dbp.h, dout.h, xs.h, ps.h, hs.h, wfc.h,
                            wpr.h, R, CC, FF, f, scratch.h);
        gpu->mlp_backward(dln.d, dwf.d, dbf.d, dwp.d, dbp.d, dout.d, xs.d, ps.d, hs.d, wfc.d,
                          wpr.d, R, CC, FF, f, scratch.d);
        tr_cuda_set_cast_limit(0);
        compare("mlp_backward c_proj dw (+=), rows past the limit", &dwp, TOL_GEMM);
        compare("mlp_backward c_proj db (+=), rows past the limit", &dbp, TOL_ELEM);
        compare("mlp_backward dinp, rows past the limit", &dln, TOL_BF16_STORE);
        compare("mlp_backward c_fc dw (+=), rows past the limit", &dwf, TOL_BF16_STORE);
        compare("mlp_backward c_fc db (+=), rows past the limit", &dbf, TOL_BF16_STORE);
        stored *st[] = {&xs, &hs, &ps, &ds};
        for (size_t k = 0; k < sizeof st / sizeof *st; k++)
            stored_free(st[k]);
        pair *all[] = {&x, &dout, &hid, &pre, &wfc, &wpr, &dqkv, &scratch, &dinp, &dw, &db,
                       &dln, &dwf, &dbf, &dwp, &dbp};
        for (size_t k = 0; k < sizeof all / sizeof *all; k++)
            pair_free(all[k]);
    }
}

/* The bias gradient's column sums past one row block: B 1200 rows (64 row blocks of
 * 19), OUT 320 (the last 32-column block part-filled); a small IN keeps the GEMMs
 * cheap. db within TOL_ELEM: a float sum of 1200 terms in another order. */
static void test_linear_bias_long(void)
{
    enum { LB = 1200, LIN = 16, LOUT = 320 };
    printf("linear backward, B %d, OUT %d\n", LB, LOUT);
    pair inp = pair_rand((size_t)LB * LIN, -1, 1), w = pair_rand((size_t)LOUT * LIN, -0.5, 0.5);
    pair dout = pair_rand((size_t)LB * LOUT, -1, 1), dinp = pair_rand((size_t)LB * LIN, -1, 1);
    pair dw = pair_rand((size_t)LOUT * LIN, -1, 1), db = pair_rand(LOUT, -1, 1);
    tr_cpu_linear_backward(dinp.h, dw.h, db.h, dout.h, inp.h, w.h, LB, LIN, LOUT);
    gpu->linear_backward(dinp.d, dw.d, db.d, dout.d, inp.d, w.d, LB, LIN, LOUT);
    compare("linear_backward dinp, long", &dinp, TOL_GEMM);
    compare("linear_backward dw (+=), long", &dw, TOL_GEMM);
    compare("linear_backward db (+=), long", &db, TOL_ELEM);
    pair *all[] = {&inp, &w, &dout, &dinp, &dw, &db};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        pair_free(all[i]);
}

/* bf16-mixed linear_backward whose dout does not fit a 16-bit operand buffer (the LM
 * head's at GPT-2 scale): the buffers' limit is lowered so that a small shape takes
 * the path, dout in slices of output features (80, 80, 80 and a ragged 60 here; 8 at
 * the tightest limit), dinp added slice by slice; with dinp skipped; and a limit
 * below inp's size, where the product falls back to cuBLAS on the fp32 buffers.
 * Inputs rounded to bf16 as the model stores them: every product exact, fp32 sums. */
static void test_linear_sliced(void)
{
    enum { LB = 96, LIN = 40, LOUT = 300 };
    static const size_t limits[] = {8192, (size_t)LB * LIN + 8 * LIN + 8, 3000};
    printf("linear backward in slices of dout (bf16), B %d, IN %d, OUT %d\n", LB, LIN, LOUT);
    gpu->set_gemm_precision(TR_PREC_BF16);
    for (size_t l = 0; l < sizeof limits / sizeof *limits; l++) {
        for (int with_dinp = 1; with_dinp >= 0; with_dinp--) {
            pair inp = pair_rand((size_t)LB * LIN, -1, 1);
            pair w = pair_rand((size_t)LOUT * LIN, -0.5, 0.5);
            pair dout = pair_rand((size_t)LB * LOUT, -1, 1);
            pair dinp = pair_rand((size_t)LB * LIN, -1, 1);
            pair dw = pair_rand((size_t)LOUT * LIN, -1, 1);
            pair db = pair_rand(LOUT, -1, 1);
            pair *in[] = {&inp, &w, &dout, &dw};
            for (size_t i = 0; i < sizeof in / sizeof *in; i++) {
                tr_cpu_round_lowp(in[i]->h, in[i]->n, TR_PREC_BF16);
                tr_cuda_upload(in[i]->d, in[i]->h, in[i]->n * sizeof(float));
            }
            tr_cuda_set_cast_limit(limits[l]);
            tr_cpu_linear_backward(with_dinp ? dinp.h : NULL, dw.h, db.h, dout.h, inp.h, w.h, LB,
                                   LIN, LOUT);
            gpu->linear_backward(with_dinp ? dinp.d : NULL, dw.d, db.d, dout.d, inp.d, w.d, LB,
                                 LIN, LOUT);
            tr_cuda_set_cast_limit(0);
            char name[96];
            snprintf(name, sizeof name, "dinp%s, limit %zu", with_dinp ? "" : " (untouched)",
                     limits[l]);
            compare(name, &dinp, TOL_GEMM);
            snprintf(name, sizeof name, "dw (+=), limit %zu", limits[l]);
            compare(name, &dw, TOL_GEMM);
            snprintf(name, sizeof name, "db (+=), limit %zu", limits[l]);
            compare(name, &db, TOL_ELEM);
            pair *all[] = {&inp, &w, &dout, &dinp, &dw, &db};
            for (size_t i = 0; i < sizeof all / sizeof *all; i++)
                pair_free(all[i]);
        }
    }
    gpu->set_gemm_precision(TR_PREC_FP32);
}

/* The LM head's backward in one entry against the CPU's (xent_shard_backward in
 * place, then linear_backward): the whole padded vocabulary (v0 0, V real of VP) and
 * a shard (columns from 64, 36 real); in bf16 the gradient is made slice by slice
 * from the logits and the softmax's statistics (one slice at the full buffers,
 * slices of 24 at a lowered limit), in fp32 by the two kernels. The statistics are
 * the CPU forward's on both sides; inp and w are rounded to bf16: exact products. */
static void test_xent_linear(void)
{
    enum { HC = 48 };
    static const size_t limits[] = {0, (size_t)BT * 16 + HC * 16 + (size_t)BT * HC};
    printf("xent_linear_backward, B*T %d, C %d, V %d of %d\n", BT, HC, V, VP);
    for (int f = TR_PREC_FP32; f <= TR_PREC_BF16; f++) {
        gpu->set_gemm_precision(f);
        for (size_t l = 0; l < sizeof limits / sizeof *limits; l++) {
            for (int shard = 0; shard < 2; shard++) {
                int W = shard ? VP / 2 : VP, v0 = shard ? VP / 2 : 0;
                int nreal = shard ? V - VP / 2 : V;
                ipair tgt = tokens(BT, 0, V);
                pair logits = pair_rand((size_t)BT * W, -4, 4), stats = pair_zero(2 * BT);
                pair losses = pair_zero(BT);
                pair inp = pair_rand((size_t)BT * HC, -1, 1);
                pair w = pair_rand((size_t)W * HC, -0.5, 0.5);
                pair dinp = pair_rand((size_t)BT * HC, -1, 1);
                pair dw = pair_rand((size_t)W * HC, -1, 1);
                pair *in[] = {&inp, &w, &dw};
                for (size_t i = 0; i < sizeof in / sizeof *in; i++) {
                    tr_cpu_round_lowp(in[i]->h, in[i]->n, TR_PREC_BF16);
                    tr_cuda_upload(in[i]->d, in[i]->h, in[i]->n * sizeof(float));
                }
                /* inp, ln_f's output, is stored in the format (16 bits in bf16) */
                stored inp_s = stored_of(inp.h, inp.n, f);
                /* statistics of these columns alone stand in for the tp group's */
                float rowmax[BT];
                double sums[2 * BT];
                tr_cpu_xent_shard_max(rowmax, logits.h, BT, W, nreal, f, TR_PREC_FP32);
                tr_cpu_xent_shard_sums(sums, logits.h, rowmax, tgt.h, BT, W, v0, nreal, f,
                                       TR_PREC_FP32);
                tr_cpu_xent_shard_finish(stats.h, losses.h, sums, rowmax, BT);
                tr_cuda_upload(stats.d, stats.h, 2 * BT * sizeof(float));
                tr_cuda_set_cast_limit(limits[l]);
                tr_cpu_xent_linear_backward(dinp.h, dw.h, logits.h, stats.h, tgt.h, 0.3f, BT, W,
                                            v0, nreal, inp_s.h, w.h, HC, f, TR_PREC_FP32);
                gpu->xent_linear_backward(dinp.d, dw.d, logits.d, stats.d, tgt.d, 0.3f, BT, W,
                                          v0, nreal, inp_s.d, w.d, HC, f, TR_PREC_FP32);
                stored_free(&inp_s);
                tr_cuda_set_cast_limit(0);
                char name[96];
                snprintf(name, sizeof name, "dinp (%s%s, limit %zu)", f ? "bf16" : "fp32",
                         shard ? ", shard" : "", limits[l]);
                compare(name, &dinp, TOL_GEMM);
                snprintf(name, sizeof name, "dw (+=) (%s%s, limit %zu)", f ? "bf16" : "fp32",
                         shard ? ", shard" : "", limits[l]);
                compare(name, &dw, TOL_GEMM);
                pair *all[] = {&logits, &stats, &losses, &inp, &w, &dinp, &dw};
                for (size_t i = 0; i < sizeof all / sizeof *all; i++)
                    pair_free(all[i]);
                ipair_free(&tgt);
            }
        }
    }
    gpu->set_gemm_precision(TR_PREC_FP32);
}

/* ---- embedding, layernorm, GELU, residual ---------------------------------------- */

static void test_embedding(void)
{
    printf("embedding\n");
    ipair tok = tokens(BT, 0, V);
    pair wte = pair_rand((size_t)V * C, -1, 1), wpe = pair_rand((size_t)T * C, -1, 1);
    pair out = pair_zero((size_t)BT * C), dout = pair_rand((size_t)BT * C, -1, 1);
    pair dwte = pair_rand((size_t)V * C, -1, 1), dwpe = pair_rand((size_t)T * C, -1, 1);
    tr_cpu_embedding_forward(out.h, tok.h, wte.h, wpe.h, B, T, C, V);
    gpu->embedding_forward(out.d, tok.d, wte.d, wpe.d, B, T, C, V);
    compare("embedding_forward out", &out, TOL_ELEM);
    tr_cpu_embedding_backward(dwte.h, dwpe.h, dout.h, tok.h, B, T, C, V);
    gpu->embedding_backward(dwte.d, dwpe.d, dout.d, tok.d, B, T, C, V);
    compare("embedding_backward dwte (+=)", &dwte, TOL_ELEM);
    compare("embedding_backward dwpe (+=)", &dwpe, TOL_ELEM);

    /* shard v0 = 40, Vl = 50: tokens below 40 and from 90 on belong to other ranks */
    enum { V0 = 40, VL = 50 };
    const float *wte_h = wte.h + (size_t)V0 * C, *wte_d = wte.d + (size_t)V0 * C;
    for (int with_wpe = 0; with_wpe < 2; with_wpe++) {
        tr_cpu_embedding_shard_forward(out.h, tok.h, wte_h, with_wpe ? wpe.h : NULL, B, T, C, V0,
                                       VL);
        gpu->embedding_shard_forward(out.d, tok.d, wte_d, with_wpe ? wpe.d : NULL, B, T, C, V0,
                                     VL);
        compare(with_wpe ? "embedding_shard_forward out" : "embedding_shard_forward out (no wpe)",
                &out, TOL_ELEM);
        tr_cpu_embedding_shard_backward(dwte.h + (size_t)V0 * C, with_wpe ? dwpe.h : NULL, dout.h,
                                        tok.h, B, T, C, V0, VL);
        gpu->embedding_shard_backward(dwte.d + (size_t)V0 * C, with_wpe ? dwpe.d : NULL, dout.d,
                                      tok.d, B, T, C, V0, VL);
        compare("embedding_shard_backward dwte (+=)", &dwte, TOL_ELEM);
        compare("embedding_shard_backward dwpe", &dwpe, TOL_ELEM);
    }
    pair *all[] = {&wte, &wpe, &out, &dout, &dwte, &dwpe};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        pair_free(all[i]);
    ipair_free(&tok);
}

/* The wte gradient past one block's reach: B*T = 1200 rows (five trips of the
 * kernel's 256-row scan, matches in several of them), C = 320 (two channel slices,
 * the second part-filled), V = 50 (every token repeated), whole and as a shard.
 * The GPU adds each token's rows in the CPU's order, so the sums agree to the bit;
 * TOL_ELEM as everywhere. */
static void test_embedding_long(void)
{
    enum { LB = 4, LT = 300, LBT = LB * LT, LC = 320, LV = 50, LV0 = 10, LVL = 30 };
    printf("embedding backward, B*T %d, C %d, V %d\n", LBT, LC, LV);
    ipair tok = tokens(LBT, 0, LV);
    pair dout = pair_rand((size_t)LBT * LC, -1, 1), dwte = pair_rand((size_t)LV * LC, -1, 1);
    pair dwpe = pair_rand((size_t)LT * LC, -1, 1);
    tr_cpu_embedding_backward(dwte.h, dwpe.h, dout.h, tok.h, LB, LT, LC, LV);
    gpu->embedding_backward(dwte.d, dwpe.d, dout.d, tok.d, LB, LT, LC, LV);
    compare("embedding_backward dwte (+=), long", &dwte, TOL_ELEM);
    compare("embedding_backward dwpe (+=), long", &dwpe, TOL_ELEM);
    tr_cpu_embedding_shard_backward(dwte.h + (size_t)LV0 * LC, NULL, dout.h, tok.h, LB, LT, LC,
                                    LV0, LVL);
    gpu->embedding_shard_backward(dwte.d + (size_t)LV0 * LC, NULL, dout.d, tok.d, LB, LT, LC,
                                  LV0, LVL);
    compare("embedding_shard_backward dwte (+=), long", &dwte, TOL_ELEM);
    pair *all[] = {&dout, &dwte, &dwpe};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        pair_free(all[i]);
    ipair_free(&tok);
}

/* at the table's shapes, and at B*T 1200, C 320: 64 row blocks of 19 rows in the
 * parameter gradients' partial sums, the last channel block part-filled */
static void test_layernorm(int nb, int nt, int nc)
{
    size_t nbt = (size_t)nb * nt;
    printf("layernorm, B*T %zu, C %d\n", nbt, nc);
    /* a mean well away from 0 next to the spread: the two-pass variance matters */
    pair inp = pair_rand(nbt * nc, -2, 3), w = pair_rand(nc, 0.5, 1.5);
    pair bias = pair_rand(nc, -0.5, 0.5), out = pair_zero(nbt * nc);
    pair mean = pair_zero(nbt), rstd = pair_zero(nbt), dout = pair_rand(nbt * nc, -1, 1);
    pair dinp = pair_rand(nbt * nc, -1, 1), dw = pair_rand(nc, -1, 1);
    pair db = pair_rand(nc, -1, 1);
    /* bf16: the input (the residual stream) and the output stored in 16 bits, the
     * output within a step of the format */
    stored in16 = stored_of(inp.h, nbt * nc, TR_PREC_BF16);
    stored out16 = stored_of(out.h, nbt * nc, TR_PREC_BF16);
    tr_cpu_layernorm_forward(out16.h, mean.h, rstd.h, in16.h, w.h, bias.h, nb, nt, nc,
                             TR_PREC_BF16);
    gpu->layernorm_forward(out16.d, mean.d, rstd.d, in16.d, w.d, bias.d, nb, nt, nc,
                           TR_PREC_BF16);
    compare_stored("layernorm_forward out (bf16, stored)", &out16, TOL_BF16_STORE);
    stored_free(&out16);
    stored_free(&in16);
    tr_cpu_layernorm_forward(out.h, mean.h, rstd.h, inp.h, w.h, bias.h, nb, nt, nc, TR_PREC_FP32);
    gpu->layernorm_forward(out.d, mean.d, rstd.d, inp.d, w.d, bias.d, nb, nt, nc, TR_PREC_FP32);
    compare("layernorm_forward out", &out, TOL_ELEM);
    compare("layernorm_forward mean", &mean, TOL_ELEM);
    compare("layernorm_forward rstd", &rstd, TOL_ELEM);
    /* backward from the CPU's saved mean and rstd on both sides: tests backward alone */
    tr_cuda_upload(mean.d, mean.h, nbt * sizeof(float));
    tr_cuda_upload(rstd.d, rstd.h, nbt * sizeof(float));
    tr_cpu_layernorm_backward(dinp.h, dw.h, db.h, dout.h, inp.h, w.h, mean.h, rstd.h, nb, nt, nc,
                              TR_PREC_FP32, 0);
    gpu->layernorm_backward(dinp.d, dw.d, db.d, dout.d, inp.d, w.d, mean.d, rstd.d, nb, nt, nc,
                            TR_PREC_FP32, 0);
    compare("layernorm_backward dinp", &dinp, TOL_ELEM);
    compare("layernorm_backward dweight (+=)", &dw, TOL_ELEM);
    compare("layernorm_backward dbias (+=)", &db, TOL_ELEM);
    /* the model's 16-bit forms: the input stored in the format, dout (not rounded here)
     * read as its values, dinp the residual stream's gradient (values of the format),
     * added into and rounded */
    for (int f = TR_PREC_BF16; f <= TR_PREC_FP16; f++) {
        stored ins = stored_of(inp.h, nbt * nc, f);
        tr_cpu_round_lowp(dinp.h, dinp.n, f);
        tr_cuda_upload(dinp.d, dinp.h, dinp.n * sizeof(float));
        tr_cpu_layernorm_backward(dinp.h, dw.h, db.h, dout.h, ins.h, w.h, mean.h, rstd.h, nb,
                                  nt, nc, f, 1);
        gpu->layernorm_backward(dinp.d, dw.d, db.d, dout.d, ins.d, w.d, mean.d, rstd.d, nb, nt,
                                nc, f, 1);
        stored_free(&ins);
        compare_format("layernorm_backward dinp (+=)", &dinp, f);
        compare("layernorm_backward dweight, dout rounded", &dw, TOL_ELEM);
        compare("layernorm_backward dbias, dout rounded", &db, TOL_ELEM);
    }
    pair *all[] = {&inp, &w, &bias, &out, &mean, &rstd, &dout, &dinp, &dw, &db};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        pair_free(all[i]);
}

static void test_elementwise(void)
{
    printf("gelu, residual\n");
    size_t n = (size_t)BT * 4 * C;
    pair inp = pair_rand(n, -6, 6), out = pair_zero(n), dout = pair_rand(n, -1, 1);
    pair dinp = pair_zero(n), other = pair_rand(n, -1, 1);
    tr_cpu_gelu_forward(out.h, inp.h, n);
    gpu->gelu_forward(out.d, inp.d, n);
    compare("gelu_forward out", &out, TOL_ELEM);
    static const int formats[] = {TR_PREC_BF16, TR_PREC_FP16, TR_PREC_FP32};
    for (size_t i = 0; i < sizeof formats / sizeof *formats; i++) {
        int f = formats[i];
        stored pre = stored_of(inp.h, n, f); /* GELU's input is stored in the format */
        tr_cpu_gelu_backward(dinp.h, pre.h, dout.h, n, f);
        gpu->gelu_backward(dinp.d, pre.d, dout.d, n, f);
        compare_format("gelu_backward dinp", &dinp, f);
        stored_free(&pre);
        /* the stream (a, out) stored in the format, other a product's fp32 output: the
         * same arithmetic on both sides, so the same bits; then in place on the stream */
        stored a = stored_of(inp.h, n, f), o = stored_of(dout.h, n, f);
        tr_cpu_residual_forward(o.h, a.h, other.h, n, f);
        gpu->residual_forward(o.d, a.d, other.d, n, f);
        compare_stored("residual_forward out (stored)", &o, 0.0);
        tr_cpu_residual_forward(a.h, a.h, other.h, n, f);
        gpu->residual_forward(a.d, a.d, other.d, n, f);
        compare_stored("residual_forward out (stored, in place)", &a, 0.0);
        stored_free(&a);
        stored_free(&o);
        /* the embeddings' fp32 sum stored into the stream */
        stored e = stored_of(dout.h, n, f);
        tr_cpu_narrow_stored(e.h, other.h, n, f);
        gpu->narrow_stored(e.d, other.d, n, f);
        compare_stored("narrow_stored", &e, 0.0);
        stored_free(&e);
    }
    tr_cpu_gelu_backward(dout.h, inp.h, dout.h, n, TR_PREC_FP32); /* in place */
    gpu->gelu_backward(dout.d, inp.d, dout.d, n, TR_PREC_FP32);
    compare("gelu_backward dinp (in place)", &dout, TOL_ELEM);
    tr_cpu_residual_forward(other.h, inp.h, other.h, n, TR_PREC_FP32); /* out aliasing b */
    gpu->residual_forward(other.d, inp.d, other.d, n, TR_PREC_FP32);
    compare("residual_forward out (in place)", &other, TOL_ELEM);
    /* dropout: the same mask (dropout_math.h) and products, so the same bits; from a
     * global element that is not a multiple of four, then in place */
    tr_dropout d = tr_dropout_make(0.2f, 5, 3, TR_STREAM_DROPOUT + 7, 1001);
    tr_cpu_dropout(out.h, inp.h, n, &d);
    gpu->dropout(out.d, inp.d, n, &d);
    compare("dropout out", &out, 0.0);
    tr_cpu_dropout(inp.h, inp.h, n, &d);
    gpu->dropout(inp.d, inp.d, n, &d);
    compare("dropout out (in place)", &inp, 0.0);
    pair *all[] = {&inp, &out, &dout, &dinp, &other};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        pair_free(all[i]);
}

/* ---- attention ------------------------------------------------------------------- */

/* One shape: each side runs its own forward, whose saved state (att) is the
 * backend's own (the CPU's rows' max and 1 / sum, the GPU's log-sum-exps), then backward
 * from it; out and dqkv must agree. The datt scratch starts as NaN on the GPU, so
 * a read of scratch the kernels did not write first would show. qkv is stored in the
 * format, as c_attn stores it, and dout as c_proj's backward stores it. */
/* the dropout of the probabilities both sides get (NULL: none) */
static const tr_dropout *g_drop;

static void test_attention_shape(int b, int t, int c, int nh, int format)
{
    printf("attention%s: B=%d T=%d C=%d NH=%d (head size %d)%s\n",
           format == TR_PREC_BF16   ? " (bf16-mixed)"
           : format == TR_PREC_FP16 ? " (fp16-mixed)"
                                    : "",
           b, t, c, nh, c / nh, g_drop ? ", dropout" : "");
    /* bf16-mixed rounds P and dS to bf16 on the GPU's tensor cores, not on the CPU, and
     * fp16-mixed to fp16 (head sizes up to 128; past them, or where the GPU does not
     * grant WMMA's shared memory, the fp32 kernels, within the tighter store tolerance) */
    double tol = format == TR_PREC_BF16                    ? TOL_ATT_BF16
                 : format == TR_PREC_FP16 && c / nh <= 128 ? TOL_ATT_FP16
                 : format == TR_PREC_FP16                  ? TOL_FP16_STORE
                                                           : TOL_GEMM;
    gpu->set_gemm_precision(format);
    size_t natt = (size_t)b * nh * t * t, bt = (size_t)b * t;
    float *x = malloc(bt * 3 * c * sizeof(float));
    for (size_t i = 0; i < bt * 3 * c; i++)
        x[i] = -1.0f + 2.0f * (float)tr_rng_uniform(81, (uint64_t)format, i);
    stored qkv = stored_of(x, bt * 3 * c, format); /* qkv is stored in the format */
    free(x);
    pair att = pair_rand(natt, -1, 1), datt = pair_rand(natt, NAN, NAN);
    float *g = malloc(bt * c * sizeof(float));
    for (size_t i = 0; i < bt * c; i++)
        g[i] = -1.0f + 2.0f * (float)tr_rng_uniform(83, (uint64_t)format, i);
    stored dout = stored_of(g, bt * c, format); /* dout is stored in the format */
    free(g);
    float *zero = calloc(bt * c, sizeof(float));
    stored out = stored_of(zero, bt * c, format); /* out is stored in the format */
    free(zero);
    /* dqkv too, starting as other values on each side (it is overwritten: =) */
    float *init = malloc(bt * 3 * c * sizeof(float));
    for (size_t i = 0; i < bt * 3 * c; i++)
        init[i] = (float)tr_rng_uniform(82, (uint64_t)format, i);
    stored dqkv = stored_of(init, bt * 3 * c, format);
    free(init);
    tr_cpu_attention_forward(out.h, att.h, qkv.h, b, t, c, nh, format, g_drop);
    gpu->attention_forward(out.d, att.d, qkv.d, b, t, c, nh, format, g_drop);
    compare_stored("attention_forward out (stored)", &out, tol);
    tr_cpu_attention_backward(dqkv.h, datt.h, dout.h, out.h, qkv.h, att.h, b, t, c, nh, format,
                              g_drop);
    gpu->attention_backward(dqkv.d, datt.d, dout.d, out.d, qkv.d, att.d, b, t, c, nh, format,
                            g_drop);
    compare_stored("attention_backward dqkv (stored)", &dqkv, tol);
    /* twice: the same bits (no atomics, dqkv overwritten) */
    size_t dbytes = bt * 3 * c * tr_stored_bytes(format);
    void *first = malloc(dbytes), *again = malloc(dbytes);
    tr_cuda_download(first, dqkv.d, dbytes);
    gpu->attention_backward(dqkv.d, datt.d, dout.d, out.d, qkv.d, att.d, b, t, c, nh, format,
                            g_drop);
    tr_cuda_download(again, dqkv.d, dbytes);
    CHECK(memcmp(first, again, dbytes) == 0, "attention_backward: two runs differ");
    free(first);
    free(again);
    /* sampling's attention of the newest token alone: row t-1 of batch row 0, over its
     * t keys (fp32 math on either side; datt, free again, the scratch) */
    float *zc = calloc((size_t)c, sizeof(float));
    stored dec = stored_of(zc, (size_t)c, format);
    free(zc);
    tr_cpu_attention_decode(dec.h, datt.h, qkv.h, t, c, nh, format);
    gpu->attention_decode(dec.d, datt.d, qkv.d, t, c, nh, format);
    compare_stored("attention_decode out (stored)", &dec,
                   format == TR_PREC_BF16   ? TOL_BF16_STORE
                   : format == TR_PREC_FP16 ? TOL_FP16_STORE
                                            : TOL_ELEM);
    stored_free(&dec);
    gpu->set_gemm_precision(TR_PREC_FP32);
    stored_free(&out);
    stored_free(&qkv);
    stored_free(&dqkv);
    stored_free(&dout);
    pair *all[] = {&att, &datt};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        pair_free(all[i]);
}

/* Head sizes padded to each of the kernels' widths (16 -> 32, 64, 96 -> 128, 256),
 * sequence lengths that end mid-tile, and GPT-2's own head size at T 256. */
static void test_attention(void)
{
    for (int f = TR_PREC_FP32; f <= TR_PREC_FP16; f++) {
        test_attention_shape(B, T, C, NH, f);
        test_attention_shape(2, 77, 64, 4, f);
        test_attention_shape(1, 130, 96, 1, f);
        test_attention_shape(2, 100, 128, 2, f);
        test_attention_shape(1, 70, 512, 2, f);
        test_attention_shape(2, 256, 256, 4, f);
    }
    /* the mma.sync kernels (bf16- and fp16-mixed, head sizes up to 64; opt-in until they
     * have run here): the same shapes where they fit, GPT-2's head size at T 1024 too.
     * Head size 128 and up still takes the WMMA kernels, which this also checks. */
    printf("attention: the mma.sync kernels (TRAINER_CUDA_ATTENTION=mma)\n");
    tr_cuda_set_attention_kernel(1);
    test_attention_shape(B, T, C, NH, TR_PREC_BF16);
    test_attention_shape(2, 77, 64, 4, TR_PREC_BF16);
    test_attention_shape(1, 130, 96, 1, TR_PREC_BF16);
    test_attention_shape(2, 100, 128, 2, TR_PREC_BF16);
    test_attention_shape(2, 256, 256, 4, TR_PREC_BF16);
    test_attention_shape(1, 1024, 128, 2, TR_PREC_BF16);
    /* head sizes whose rows the mma.sync kernels cannot copy by cp.async: 8-byte loads
     * (head size 20) and value by value (21) */
    test_attention_shape(1, 70, 40, 2, TR_PREC_BF16);
    test_attention_shape(1, 66, 42, 2, TR_PREC_BF16);
    /* fp16-mixed on them too (head size 96 takes the WMMA kernels) */
    test_attention_shape(2, 77, 64, 4, TR_PREC_FP16);
    test_attention_shape(1, 130, 96, 1, TR_PREC_FP16);
    test_attention_shape(1, 1024, 128, 2, TR_PREC_FP16);
    test_attention_shape(1, 70, 40, 2, TR_PREC_FP16);
    /* dropout of the probabilities (model.attn_pdrop) in every form, each drawing the
     * CPU's mask: mma.sync (chosen here), then WMMA (bf16, and fp16 at head size 96)
     * and the fp32 kernels (head size 256); a call of a dp and tp rank (global rows 3..,
     * heads 2.. of 8) */
    tr_dropout d = tr_dropout_make(0.2f, 11, 4, TR_STREAM_DROPOUT + 1, 3);
    d.heads = 8, d.head0 = 2;
    g_drop = &d;
    test_attention_shape(2, 77, 64, 4, TR_PREC_BF16);
    tr_cuda_set_attention_kernel(0);
    test_attention_shape(2, 77, 64, 4, TR_PREC_BF16);
    test_attention_shape(1, 130, 96, 1, TR_PREC_FP16);
    test_attention_shape(1, 70, 512, 2, TR_PREC_FP16);
    g_drop = NULL;
}

/* ---- cross-entropy --------------------------------------------------------------- */

static void test_xent_padded(void)
{
    printf("xent_padded\n");
    size_t n = (size_t)BT * VP;
    ipair tgt = tokens(BT, 0, V);
    pair logits = pair_rand(n, -4, 4), stats = pair_zero(2 * BT), losses = pair_zero(BT);
    pair dlogits = pair_rand(n, -1, 1);
    float scale = 1.0f / BT;
    /* the logits read as values of each format (not rounded here) */
    static const int formats[] = {TR_PREC_BF16, TR_PREC_FP32};
    for (size_t k = 0; k < sizeof formats / sizeof *formats; k++) {
        int f = formats[k];
        char name[64];
        const char *fn = f == TR_PREC_BF16 ? " (bf16)" : "";
        double lc = tr_cpu_xent_padded_forward(stats.h, losses.h, logits.h, tgt.h, B, T, V, VP, f,
                                               TR_PREC_FP32);
        double lg = gpu->xent_padded_forward(stats.d, losses.d, logits.d, tgt.d, B, T, V, VP, f,
                                             TR_PREC_FP32);
        snprintf(name, sizeof name, "xent_padded_forward stats%s", fn);
        compare(name, &stats, TOL_ELEM);
        snprintf(name, sizeof name, "xent_padded_forward losses%s", fn);
        compare(name, &losses, TOL_ELEM);
        snprintf(name, sizeof name, "xent_padded_forward loss sum%s", fn);
        compare_value(name, lc, lg, TOL_ELEM);
        /* backward from the CPU's statistics on both sides: tests backward alone */
        tr_cuda_upload(stats.d, stats.h, 2 * BT * sizeof(float));
        tr_cpu_xent_padded_backward(dlogits.h, logits.h, stats.h, tgt.h, scale, B, T, V, VP, f,
                                    TR_PREC_FP32);
        gpu->xent_padded_backward(dlogits.d, logits.d, stats.d, tgt.d, scale, B, T, V, VP, f,
                                  TR_PREC_FP32);
        snprintf(name, sizeof name, "xent_padded_backward dlogits%s", fn);
        compare_format(name, &dlogits, f);
    }
    /* in place: dlogits over the logits */
    tr_cpu_xent_padded_backward(logits.h, logits.h, stats.h, tgt.h, scale, B, T, V, VP,
                                TR_PREC_FP32, TR_PREC_FP32);
    gpu->xent_padded_backward(logits.d, logits.d, stats.d, tgt.d, scale, B, T, V, VP,
                              TR_PREC_FP32, TR_PREC_FP32);
    compare("xent_padded_backward dlogits (in place)", &logits, TOL_ELEM);
    pair *all[] = {&logits, &stats, &losses, &dlogits};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        pair_free(all[i]);
    ipair_free(&tgt);
}

/* The second shard of Vp = 128 split over two ranks: columns [64, 128), of which 36
 * are real (V = 100). Targets below 64 are held by the other rank. Each step starts
 * from the CPU's result of the step before, so each kernel is tested alone. */
static void test_xent_shard(void)
{
    printf("xent_shard\n");
    enum { VL = VP / 2, V0 = VP / 2, NREAL = V - VP / 2 };
    size_t n = (size_t)BT * VL;
    ipair tgt = tokens(BT, 0, V);
    pair logits = pair_rand(n, -4, 4), rowmax = pair_zero(BT), losses = pair_zero(BT);
    pair stats = pair_zero(2 * BT), dlogits = pair_zero(n);
    tr_cpu_xent_shard_max(rowmax.h, logits.h, BT, VL, NREAL, TR_PREC_BF16, TR_PREC_FP32);
    gpu->xent_shard_max(rowmax.d, logits.d, BT, VL, NREAL, TR_PREC_BF16, TR_PREC_FP32);
    compare("xent_shard_max rowmax (bf16)", &rowmax, 0.0); /* the same max, rounded */
    tr_cpu_xent_shard_max(rowmax.h, logits.h, BT, VL, NREAL, TR_PREC_FP32, TR_PREC_FP32);
    gpu->xent_shard_max(rowmax.d, logits.d, BT, VL, NREAL, TR_PREC_FP32, TR_PREC_FP32);
    compare("xent_shard_max rowmax", &rowmax, TOL_ELEM);

    double sums_h[2 * BT], sums_g[2 * BT];
    double *sums_d = tr_cuda_alloc(sizeof sums_h, "test sums");
    tr_cuda_upload(rowmax.d, rowmax.h, BT * sizeof(float));
    for (int f = TR_PREC_BF16; f >= TR_PREC_FP32; f--) {
        tr_cpu_xent_shard_sums(sums_h, logits.h, rowmax.h, tgt.h, BT, VL, V0, NREAL, f,
                               TR_PREC_FP32);
        gpu->xent_shard_sums(sums_d, logits.d, rowmax.d, tgt.d, BT, VL, V0, NREAL, f, TR_PREC_FP32);
        tr_cuda_download(sums_g, sums_d, sizeof sums_g);
        double worst = 0.0, scale = 0.0;
        for (int i = 0; i < 2 * BT; i++) {
            worst = fmax(worst, fabs(sums_g[i] - sums_h[i]));
            scale = fmax(scale, fabs(sums_h[i]));
        }
        printf("  %-40s rel err %.2e (tol %.0e)\n",
               f ? "xent_shard_sums sums (bf16)" : "xent_shard_sums sums", worst / scale, TOL_ELEM);
        CHECK(worst <= TOL_ELEM * scale, "xent_shard_sums (format %d): relative error %.3e", f,
              worst / scale);
    }

    /* finish from the CPU's sums */
    tr_cuda_upload(sums_d, sums_h, sizeof sums_h);
    double lc = tr_cpu_xent_shard_finish(stats.h, losses.h, sums_h, rowmax.h, BT);
    double lg = gpu->xent_shard_finish(stats.d, losses.d, sums_d, rowmax.d, BT);
    compare("xent_shard_finish stats", &stats, TOL_ELEM);
    compare("xent_shard_finish losses", &losses, TOL_ELEM);
    compare_value("xent_shard_finish loss sum", lc, lg, TOL_ELEM);

    tr_cuda_upload(stats.d, stats.h, 2 * BT * sizeof(float));
    tr_cpu_xent_shard_backward(dlogits.h, logits.h, stats.h, tgt.h, 0.5f, BT, VL, V0, NREAL,
                               TR_PREC_BF16, TR_PREC_FP32);
    gpu->xent_shard_backward(dlogits.d, logits.d, stats.d, tgt.d, 0.5f, BT, VL, V0, NREAL,
                             TR_PREC_BF16, TR_PREC_FP32);
    compare_rounded("xent_shard_backward dlogits (bf16)", &dlogits, TR_PREC_BF16);
    tr_cpu_xent_shard_backward(dlogits.h, logits.h, stats.h, tgt.h, 0.5f, BT, VL, V0, NREAL,
                               TR_PREC_FP32, TR_PREC_FP32);
    gpu->xent_shard_backward(dlogits.d, logits.d, stats.d, tgt.d, 0.5f, BT, VL, V0, NREAL,
                             TR_PREC_FP32, TR_PREC_FP32);
    compare("xent_shard_backward dlogits", &dlogits, TOL_ELEM);
    tr_cuda_free(sums_d);
    pair *all[] = {&logits, &rowmax, &losses, &stats, &dlogits};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        pair_free(all[i]);
    ipair_free(&tgt);
}

/* The accuracy's argmax over logits with near-ties that rounding to bf16 or fp16
 * makes ties: both sides read them as values of the format and must pick the same
 * (first) index and value, at fp32 too. */
static void test_rows_argmax(void)
{
    printf("rows_argmax\n");
    size_t n = (size_t)BT * VP;
    pair x = pair_rand(n, 0, 1);
    for (size_t i = 0; i < n; i++)
        x.h[i] = 4.0f + 1e-3f * x.h[i];
    x.h[3 * VP] = NAN; /* NaN in column 0 of row 3 stays the answer */
    tr_cuda_upload(x.d, x.h, n * sizeof(float));
    for (int f = TR_PREC_FP32; f <= TR_PREC_FP16; f++) {
        ipair idx = ipair_zero(BT);
        pair val = pair_zero(BT);
        int *got = malloc(BT * sizeof(int));
        float *gv = malloc(BT * sizeof(float));
        tr_cpu_rows_argmax(idx.h, val.h, x.h, BT, VP, V, f, TR_PREC_FP32);
        gpu->rows_argmax(idx.d, val.d, x.d, BT, VP, V, f, TR_PREC_FP32);
        tr_cuda_download(got, idx.d, BT * sizeof(int));
        tr_cuda_download(gv, val.d, BT * sizeof(float));
        size_t bad = 0;
        for (int r = 0; r < BT; r++)
            bad += got[r] != idx.h[r] || memcmp(&gv[r], &val.h[r], sizeof(float)) != 0;
        printf("  %-40s %zu of %d rows differ (format %d)\n", "rows_argmax", bad, BT, f);
        CHECK(bad == 0, "rows_argmax (format %d): %zu of %d rows differ from the CPU", f, bad,
              BT);
        free(got);
        free(gv);
        ipair_free(&idx);
        pair_free(&val);
    }
    pair_free(&x);
}

/* The logits in 16 bits (logits_format: where bf16 products take the head's weight in
 * one copy). The head's forward stores them itself; every reader takes them as the
 * values the CPU reads from fp32 logits rounded to bf16, and the head's backward writes
 * dlogits over them and multiplies them as they are. The CPU runs on the same values
 * held in fp32 (its own form). */
static void test_logits_16(void)
{
    enum { HC = 48 };
    const int f = TR_PREC_BF16;
    size_t n = (size_t)BT * VP;
    printf("logits stored in bf16, B*T %d, C %d, V %d of %d\n", BT, HC, V, VP);
    gpu->set_gemm_precision(f);
    CHECK(gpu->logits_format(f, HC, VP) == f, "logits_format: not bf16 where the head fits");
    CHECK(gpu->logits_format(TR_PREC_FP16, HC, VP) == TR_PREC_FP32,
          "logits_format: 16-bit logits in fp16 with bf16 products");
    tr_cuda_set_cast_limit((size_t)HC * VP - 1);
    CHECK(gpu->logits_format(f, HC, VP) == TR_PREC_FP32,
          "logits_format: 16-bit logits where the head's weight does not fit a cast buffer");
    tr_cuda_set_cast_limit(0);
    gpu->set_gemm_precision(TR_PREC_FP32);
    CHECK(gpu->logits_format(f, HC, VP) == TR_PREC_FP32,
          "logits_format: 16-bit logits with fp32 products");
    gpu->set_gemm_precision(f);

    /* the head's forward: inp stored in bf16, w rounded to it (exact products) */
    pair inp = pair_rand((size_t)BT * HC, -1, 1), w = pair_rand((size_t)VP * HC, -0.5, 0.5);
    tr_cpu_round_lowp(inp.h, inp.n, f);
    tr_cpu_round_lowp(w.h, w.n, f);
    tr_cuda_upload(w.d, w.h, w.n * sizeof(float));
    stored inp_s = stored_of(inp.h, inp.n, f);
    pair scratch = pair_zero((size_t)BT * HC), ref = pair_zero(n);
    tr_cpu_lm_head_forward(ref.h, inp_s.h, w.h, BT, HC, VP, f, TR_PREC_FP32, scratch.h);
    tr_cpu_round_lowp(ref.h, n, f); /* the values the readers take */
    stored lg = stored_of(ref.h, n, f);
    float *zero = calloc(n, sizeof *zero);
    stored out = stored_of(zero, n, f);
    gpu->lm_head_forward(out.d, inp_s.d, w.d, BT, HC, VP, f, f, scratch.d);
    memcpy(out.h, lg.h, n * tr_stored_bytes(f)); /* the CPU's logits, rounded */
    compare_stored("lm_head_forward (16-bit logits)", &out, TOL_BF16_STORE);
    stored_free(&out);
    free(zero);

    /* the readers on the CPU's values, in 16 bits on the GPU */
    ipair tgt = tokens(BT, 0, V);
    pair stats = pair_zero(2 * BT), losses = pair_zero(BT);
    double lc = tr_cpu_xent_padded_forward(stats.h, losses.h, ref.h, tgt.h, B, T, V, VP, f,
                                           TR_PREC_FP32);
    double lgs = gpu->xent_padded_forward(stats.d, losses.d, lg.d, tgt.d, B, T, V, VP, f, f);
    compare("xent_padded_forward stats (16-bit)", &stats, TOL_ELEM);
    compare("xent_padded_forward losses (16-bit)", &losses, TOL_ELEM);
    compare_value("xent_padded_forward loss sum (16-bit)", lc, lgs, TOL_ELEM);
    float rowmax_h[BT];
    pair rowmax = pair_zero(BT);
    tr_cpu_xent_shard_max(rowmax_h, ref.h, BT, VP, V, f, TR_PREC_FP32);
    gpu->xent_shard_max(rowmax.d, lg.d, BT, VP, V, f, f);
    memcpy(rowmax.h, rowmax_h, sizeof rowmax_h);
    compare("xent_shard_max rowmax (16-bit)", &rowmax, 0.0);
    double sums_h[2 * BT], sums_g[2 * BT];
    double *sums_d = tr_cuda_alloc(sizeof sums_h, "test sums");
    tr_cpu_xent_shard_sums(sums_h, ref.h, rowmax.h, tgt.h, BT, VP, 0, V, f, TR_PREC_FP32);
    gpu->xent_shard_sums(sums_d, lg.d, rowmax.d, tgt.d, BT, VP, 0, V, f, f);
    tr_cuda_download(sums_g, sums_d, sizeof sums_g);
    double worst = 0.0, scale = 0.0;
    for (int i = 0; i < 2 * BT; i++) {
        worst = fmax(worst, fabs(sums_g[i] - sums_h[i]));
        scale = fmax(scale, fabs(sums_h[i]));
    }
    printf("  %-40s rel err %.2e (tol %.0e)\n", "xent_shard_sums (16-bit)", worst / scale,
           TOL_ELEM);
    CHECK(worst <= TOL_ELEM * scale, "xent_shard_sums (16-bit): relative error %.3e",
          worst / scale);
    tr_cuda_free(sums_d);
    ipair idx = ipair_zero(BT);
    pair val = pair_zero(BT);
    int got[BT];
    tr_cpu_rows_argmax(idx.h, val.h, ref.h, BT, VP, V, f, TR_PREC_FP32);
    gpu->rows_argmax(idx.d, val.d, lg.d, BT, VP, V, f, f);
    tr_cuda_download(got, idx.d, sizeof got);
    size_t bad = 0;
    for (int r = 0; r < BT; r++)
        bad += got[r] != idx.h[r];
    CHECK(bad == 0, "rows_argmax (16-bit logits): %zu of %d rows differ", bad, BT);
    compare("rows_argmax value (16-bit)", &val, 0.0);
    /* the statistics the CPU's forward made, on both sides: backward alone */
    tr_cuda_upload(stats.d, stats.h, 2 * BT * sizeof(float));
    stored dl = stored_of(ref.h, n, f);
    tr_cpu_xent_padded_backward(ref.h, ref.h, stats.h, tgt.h, 0.3f, B, T, V, VP, f,
                                TR_PREC_FP32);
    gpu->xent_padded_backward(dl.d, dl.d, stats.d, tgt.d, 0.3f, B, T, V, VP, f, f);
    for (size_t i = 0; i < n; i++) /* dl.h: the CPU's dlogits, stored */
        tr_stored_store(dl.h, i, ref.h[i], f);
    compare_stored("xent_padded_backward (16-bit, in place)", &dl, TOL_BF16_STORE);
    stored_free(&dl);

    /* the head's backward over the 16-bit logits against the CPU's on their values */
    for (size_t i = 0; i < n; i++)
        ref.h[i] = tr_stored_load(lg.h, i, f);
    pair dinp = pair_rand((size_t)BT * HC, -1, 1), dw = pair_rand((size_t)VP * HC, -1, 1);
    tr_cpu_round_lowp(dw.h, dw.n, f);
    tr_cuda_upload(dw.d, dw.h, dw.n * sizeof(float));
    tr_cpu_xent_linear_backward(dinp.h, dw.h, ref.h, stats.h, tgt.h, 0.3f, BT, VP, 0, V,
                                inp_s.h, w.h, HC, f, TR_PREC_FP32);
    gpu->xent_linear_backward(dinp.d, dw.d, lg.d, stats.d, tgt.d, 0.3f, BT, VP, 0, V, inp_s.d,
                              w.d, HC, f, f);
    compare("xent_linear_backward dinp (16-bit logits)", &dinp, TOL_GEMM);
    compare("xent_linear_backward dw (+=) (16-bit logits)", &dw, TOL_GEMM);

    gpu->set_gemm_precision(TR_PREC_FP32);
    stored_free(&inp_s);
    stored_free(&lg);
    pair *all[] = {&inp, &w, &scratch, &ref, &stats, &losses, &rowmax, &val, &dinp, &dw};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        pair_free(all[i]);
    ipair_free(&idx);
    ipair_free(&tgt);
}

/* ---- optimizers and norms -------------------------------------------------------- */

/* a second device copy of src's device values */
static float *device_clone(const pair *src)
{
    float *h = malloc(src->n * sizeof *h), *d = tr_cuda_alloc(src->n * sizeof *d, "test copy");
    tr_cuda_download(h, src->d, src->n * sizeof *h);
    tr_cuda_upload(d, h, src->n * sizeof *h);
    free(h);
    return d;
}

/* n floats at a and b on the device: the same bits */
static void same_device_bits(const char *what, const float *a, const float *b, size_t n)
{
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    tr_cuda_download(x, a, n * sizeof *x);
    tr_cuda_download(y, b, n * sizeof *y);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += memcmp(&x[i], &y[i], sizeof *x) != 0;
    printf("  %-40s %zu of %zu differ (bit for bit)\n", what, bad, n);
    CHECK(bad == 0, "%s: %zu of %zu values differ", what, bad, n);
    free(x);
    free(y);
}

/* AdamW on 40 spans of p, m, v at once (two launches of up to 32), some empty, some
 * off 16-byte alignment, each its own weight decay, with a bf16 working copy: the
 * bits of adamw_update on each, on a second copy of the state. */
static void test_adamw_spans(const pair *p, const pair *m, const pair *v)
{
    enum { NS = 40 };
    size_t n = p->n;
    float *p1 = device_clone(p), *m1 = device_clone(m), *v1 = device_clone(v);
    float *p2 = device_clone(p), *m2 = device_clone(m), *v2 = device_clone(v);
    pair g = pair_rand(n, -1, 1), lp1 = pair_zero(n), lp2 = pair_zero(n);
    tr_adamw_span s[NS];
    size_t at = 0;
    for (int i = 0; i < NS; i++) {
        size_t len = i % 9 == 4 ? 0 : (size_t)(i * 37 % 301) + 1;
        if (at + len > n)
            len = 0;
        float wd = i % 3 ? 0.1f : 0.0f;
        s[i] = (tr_adamw_span){p2 + at, m2 + at, v2 + at, g.d + at, lp2.d + at, len, wd};
        gpu->adamw_update(p1 + at, m1 + at, v1 + at, g.d + at, len, 1e-3f, 0.9, 0.999, 1e-8f, wd,
                          5, lp1.d + at, TR_PREC_BF16);
        at += len + (size_t)(i % 2); /* every other span starts off alignment */
    }
    gpu->adamw_update_spans(s, NS, 1e-3f, 0.9, 0.999, 1e-8f, 5, TR_PREC_BF16, TR_PREC_FP32, 1.0f);
    same_device_bits("adamw_update_spans params", p2, p1, n);
    same_device_bits("adamw_update_spans m", m2, m1, n);
    same_device_bits("adamw_update_spans v", v2, v1, n);
    same_device_bits("adamw_update_spans working copy", lp2.d, lp1.d, n);
    float *all[] = {p1, m1, v1, p2, m2, v2};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        tr_cuda_free(all[i]);
    pair_free(&g);
    pair_free(&lp1);
    pair_free(&lp2);
}

static void test_optim(void)
{
    printf("optimizers\n");
    size_t n = 10007;
    pair p = pair_rand(n, -1, 1), m = pair_zero(n), v = pair_zero(n), lp = pair_zero(n);
    for (long t = 1; t <= 3; t++) {
        pair g = pair_rand(n, -1, 1);
        tr_cpu_adamw_update(p.h, m.h, v.h, g.h, n, 1e-3f, 0.9, 0.999, 1e-8f, 0.1f, t, lp.h,
                            TR_PREC_BF16);
        gpu->adamw_update(p.d, m.d, v.d, g.d, n, 1e-3f, 0.9, 0.999, 1e-8f, 0.1f, t, lp.d,
                          TR_PREC_BF16);
        pair_free(&g);
    }
    compare("adamw_update param (3 steps)", &p, TOL_ELEM);
    compare("adamw_update m", &m, TOL_ELEM);
    compare("adamw_update v", &v, TOL_ELEM);
    compare_rounded("adamw_update working copy (bf16)", &lp, TR_PREC_BF16);
    test_adamw_spans(&p, &m, &v);

    pair buf = pair_zero(n);
    for (int step = 0; step < 3; step++) {
        pair g = pair_rand(n, -1, 1);
        tr_cpu_sgd_update(p.h, buf.h, g.h, n, 0.05f, 0.9f, 1e-4f, NULL, TR_PREC_FP32);
        gpu->sgd_update(p.d, buf.d, g.d, n, 0.05f, 0.9f, 1e-4f, NULL, TR_PREC_FP32);
        /* plain: no buffer; with an fp16 working copy */
        tr_cpu_sgd_update(p.h, NULL, g.h, n, 0.01f, 0.0f, 0.0f, lp.h, TR_PREC_FP16);
        gpu->sgd_update(p.d, NULL, g.d, n, 0.01f, 0.0f, 0.0f, lp.d, TR_PREC_FP16);
        pair_free(&g);
    }
    compare("sgd_update param (momentum, plain)", &p, TOL_ELEM);
    compare("sgd_update momentum buffer", &buf, TOL_ELEM);
    compare_rounded("sgd_update working copy (fp16)", &lp, TR_PREC_FP16);

    tr_cpu_scale(p.h, n, -0.37f);
    gpu->scale(p.d, n, -0.37f);
    compare("scale", &p, TOL_ELEM);

    size_t big = 1000003; /* more than one element per thread of the fixed grid */
    pair x = pair_rand(big, -2, 2);
    compare_value("sum_squares (n = 1000003)", tr_cpu_sum_squares(x.h, big),
                  gpu->sum_squares(x.d, big), 1e-12);
    compare_value("sum_squares (n = 5)", tr_cpu_sum_squares(x.h, 5), gpu->sum_squares(x.d, 5),
                  1e-12);
    compare_value("sum_squares run to run", gpu->sum_squares(x.d, big),
                  gpu->sum_squares(x.d, big), 0.0);
    /* spans: 70 of them (three launches of up to TR_CUDA_SPAN_CHUNK), empty ones among
     * them: each span's sum as sum_squares makes it, added in order, so the bits of the
     * calls one by one; the CPU's within the sums' tolerance */
    enum { NSPANS = 70 };
    const float *xd[NSPANS], *xh[NSPANS];
    size_t ns[NSPANS];
    double one_by_one = 0.0;
    for (int i = 0; i < NSPANS; i++) {
        size_t off = (size_t)i * 9973 % (big / 2);
        ns[i] = i % 11 == 3 ? 0 : (size_t)(i * i * 37 % 20011) + (i == 5 ? 400000 : 1);
        xd[i] = x.d + off, xh[i] = x.h + off;
        one_by_one += gpu->sum_squares(xd[i], ns[i]);
    }
    compare_value("sum_squares_spans (70 spans) vs one by one", one_by_one,
                  gpu->sum_squares_spans(xd, ns, NSPANS, TR_PREC_FP32), 0.0);
    compare_value("sum_squares_spans (70 spans) vs the CPU",
                  tr_cpu_sum_squares_spans(xh, ns, NSPANS, TR_PREC_FP32),
                  gpu->sum_squares_spans(xd, ns, NSPANS, TR_PREC_FP32), 1e-12);
    compare_value("sum_squares_spans (70 spans read as bf16) vs the CPU",
                  tr_cpu_sum_squares_spans(xh, ns, NSPANS, TR_PREC_BF16),
                  gpu->sum_squares_spans(xd, ns, NSPANS, TR_PREC_BF16), 1e-12);
    compare_value("sum_squares_spans (all empty)", 0.0,
                  gpu->sum_squares_spans(xd, ns + 3, 1, TR_PREC_FP32), 0.0);
    pair *all[] = {&p, &m, &v, &lp, &buf, &x};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        pair_free(all[i]);
}

/* ---- the classifier: ReLU, convolution, max pooling, softmax cross-entropy -------- */

static void test_relu(void)
{
    printf("relu\n");
    size_t n = (size_t)3 * 6 * 28 * 28 + 5; /* conv1's output and an odd tail */
    pair inp = pair_rand(n, -1, 1), out = pair_rand(n, -1, 1), dout = pair_rand(n, -1, 1);
    pair dinp = pair_rand(n, -1, 1);
    pair_quantize(&inp, 0.25f); /* exact zeros: the "< 0" and "> 0" edges */
    tr_cpu_relu_forward(out.h, inp.h, n);
    gpu->relu_forward(out.d, inp.d, n);
    compare("relu_forward out", &out, 0.0);
    tr_cpu_relu_backward(dinp.h, dout.h, out.h, n);
    gpu->relu_backward(dinp.d, dout.d, out.d, n);
    compare("relu_backward dinp", &dinp, 0.0);
    tr_cpu_relu_backward(dout.h, dout.h, out.h, n); /* in place */
    gpu->relu_backward(dout.d, dout.d, out.d, n);
    compare("relu_backward dinp (in place)", &dout, 0.0);
    tr_cpu_relu_forward(inp.h, inp.h, n); /* in place */
    gpu->relu_forward(inp.d, inp.d, n);
    compare("relu_forward out (in place)", &inp, 0.0);
    pair *all[] = {&inp, &out, &dout, &dinp};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        pair_free(all[i]);
}

/* One convolution shape, both sides from the same inputs: forward with and without
 * a bias, backward with every output and with dinp and db skipped (NULL). The
 * scratch is sized for `alloc_B` samples (>= s.B): the model sizes it for its
 * largest batch and may run a smaller one. */
static void conv_case(const char *name, tr_conv_shape s, int alloc_B)
{
    size_t in_n = (size_t)s.B * s.cin * s.h * s.w, out_n = (size_t)s.B * s.cout * s.ho * s.wo;
    size_t w_n = (size_t)s.cout * s.cin * s.k * s.k;
    tr_conv_shape sa = s;
    sa.B = alloc_B;
    size_t sc_h = tr_cpu_conv_scratch_floats(&sa), sc_d = gpu->conv_scratch_floats(&sa);
    CHECK(sc_d >= gpu->conv_scratch_floats(&s), "%s: conv scratch for B=%d is smaller than for "
          "B=%d", name, alloc_B, s.B);
    float *scratch_h = malloc(sc_h * sizeof(float));
    float *scratch_d = tr_cuda_alloc(sc_d * sizeof(float), "test conv scratch");
    pair inp = pair_rand(in_n, -1, 1), w = pair_rand(w_n, -0.5, 0.5), b = pair_rand(s.cout, -1, 1);
    pair out = pair_rand(out_n, -1, 1), dout = pair_rand(out_n, -1, 1);
    pair dinp = pair_rand(in_n, -1, 1), dw = pair_rand(w_n, -1, 1), db = pair_rand(s.cout, -1, 1);
    printf("conv2d %s: B=%d %d->%d %dx%d k=%d pad=%d -> %dx%d, scratch %zu floats\n", name, s.B,
           s.cin, s.cout, s.h, s.w, s.k, s.pad, s.ho, s.wo, sc_d);

    tr_cpu_conv2d_forward(out.h, inp.h, w.h, NULL, &s, scratch_h);
    gpu->conv2d_forward(out.d, inp.d, w.d, NULL, &s, scratch_d);
    compare("conv2d_forward out (no bias)", &out, TOL_GEMM);
    tr_cpu_conv2d_forward(out.h, inp.h, w.h, b.h, &s, scratch_h);
    gpu->conv2d_forward(out.d, inp.d, w.d, b.d, &s, scratch_d);
    compare("conv2d_forward out", &out, TOL_GEMM);

    tr_cpu_conv2d_backward(dinp.h, dw.h, db.h, dout.h, inp.h, w.h, &s, scratch_h);
    gpu->conv2d_backward(dinp.d, dw.d, db.d, dout.d, inp.d, w.d, &s, scratch_d);
    compare("conv2d_backward dinp", &dinp, TOL_GEMM);
    compare("conv2d_backward dw (+=)", &dw, TOL_GEMM);
    compare("conv2d_backward db (+=)", &db, TOL_ELEM);
    /* a second backward, dinp and db skipped: dw adds again, the rest is untouched */
    tr_cpu_conv2d_backward(NULL, dw.h, NULL, dout.h, inp.h, w.h, &s, scratch_h);
    gpu->conv2d_backward(NULL, dw.d, NULL, dout.d, inp.d, w.d, &s, scratch_d);
    compare("conv2d_backward dw (+= twice)", &dw, TOL_GEMM);
    compare("conv2d_backward dinp (untouched)", &dinp, TOL_GEMM);
    compare("conv2d_backward db (untouched)", &db, TOL_ELEM);

    free(scratch_h);
    tr_cuda_free(scratch_d);
    pair *all[] = {&inp, &w, &b, &out, &dout, &dinp, &dw, &db};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        pair_free(all[i]);
}

static tr_conv_shape conv_shape(int nb, int cin, int h, int w, int cout, int k, int pad)
{
    return (tr_conv_shape){.B = nb, .cin = cin, .h = h, .w = w, .cout = cout, .k = k,
                           .pad = pad, .ho = h + 2 * pad - k + 1, .wo = w + 2 * pad - k + 1};
}

static void test_conv(void)
{
    conv_case("cnn conv1", conv_shape(3, 1, 28, 28, 6, 5, 2), 3);
    conv_case("cnn conv2", conv_shape(3, 6, 14, 14, 16, 5, 0), 3);
    conv_case("odd 3x3", conv_shape(4, 3, 7, 9, 5, 3, 1), 6);
    conv_case("pad > k - 1", conv_shape(3, 2, 5, 6, 3, 4, 3), 3);
    conv_case("1x1", conv_shape(3, 4, 6, 5, 7, 1, 0), 3);
}

static void pool_case(const char *name, int Bn, int Cn, int H, int W, int k)
{
    int Ho = H / k, Wo = W / k;
    size_t in_n = (size_t)Bn * Cn * H * W, out_n = (size_t)Bn * Cn * Ho * Wo;
    printf("maxpool %s: B=%d C=%d %dx%d k=%d\n", name, Bn, Cn, H, W, k);
    pair inp = pair_rand(in_n, -1, 1), out = pair_rand(out_n, -1, 1);
    pair dout = pair_rand(out_n, -1, 1), dinp = pair_rand(in_n, -1, 1);
    pair_quantize(&inp, 0.25f); /* ties inside windows: the first must win */
    ipair am = ipair_zero(out_n);
    tr_cpu_maxpool_forward(out.h, am.h, inp.h, Bn, Cn, H, W, k);
    gpu->maxpool_forward(out.d, am.d, inp.d, Bn, Cn, H, W, k);
    compare("maxpool_forward out", &out, 0.0);
    compare_ints("maxpool_forward argmax", &am, out_n);
    /* backward from the CPU's argmax on both sides (the same here, checked above) */
    tr_cuda_upload(am.d, am.h, out_n * sizeof(int));
    tr_cpu_maxpool_backward(dinp.h, dout.h, am.h, Bn, Cn, H, W, k);
    gpu->maxpool_backward(dinp.d, dout.d, am.d, Bn, Cn, H, W, k);
    compare("maxpool_backward dinp", &dinp, 0.0);
    pair *all[] = {&inp, &out, &dout, &dinp};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        pair_free(all[i]);
    ipair_free(&am);
}

static void test_maxpool(void)
{
    pool_case("cnn pool1", 3, 6, 28, 28, 2);
    pool_case("cnn pool2", 3, 16, 10, 10, 2);
    pool_case("odd 7x9", 3, 5, 7, 9, 2);
    pool_case("3x3 on 8x7", 3, 2, 8, 7, 3);
}

static void softmax_case(int Bn, int Vn)
{
    size_t n = (size_t)Bn * Vn;
    printf("softmax_xent: B=%d V=%d\n", Bn, Vn);
    ipair lab = tokens((size_t)Bn, 0, Vn);
    pair logits = pair_rand(n, -4, 4), probs = pair_rand(n, -1, 1), losses = pair_rand(Bn, -1, 1);
    pair dlogits = pair_rand(n, -1, 1);
    /* every third sample on a coarse grid: tied maxima, where the first must win */
    for (int i = 0; i < Bn; i += 3)
        for (int j = 0; j < Vn; j++)
            logits.h[(size_t)i * Vn + j] = roundf(logits.h[(size_t)i * Vn + j] / 2.0f);
    /* and some samples whose label is the winner, so the count is not just 0 */
    for (int i = 1; i < Bn; i += 4)
        logits.h[(size_t)i * Vn + lab.h[i]] = 10.0f;
    tr_cuda_upload(logits.d, logits.h, n * sizeof(float));
    double lc = 0.0, lg = 0.0;
    long cc = -1, cg = -2;
    tr_cpu_softmax_xent_forward(probs.h, losses.h, logits.h, lab.h, Bn, Vn, &lc, &cc);
    gpu->softmax_xent_forward(probs.d, losses.d, logits.d, lab.d, Bn, Vn, &lg, &cg);
    compare("softmax_xent_forward probs", &probs, TOL_ELEM);
    compare("softmax_xent_forward losses", &losses, TOL_ELEM);
    compare_value("softmax_xent_forward loss sum", lc, lg, TOL_ELEM);
    printf("  %-40s cpu %ld cuda %ld\n", "softmax_xent_forward correct", cc, cg);
    CHECK(cc == cg && cc > 0, "softmax_xent_forward: %ld correct (cuda) against %ld (cpu)", cg,
          cc);
    double lg2 = 0.0;
    long cg2 = -1;
    gpu->softmax_xent_forward(probs.d, losses.d, logits.d, lab.d, Bn, Vn, &lg2, &cg2);
    compare_value("softmax_xent_forward run to run", lg, lg2, 0.0);
    CHECK(cg == cg2, "softmax_xent_forward: %ld then %ld correct", cg, cg2);
    /* backward from the CPU's probs on both sides */
    tr_cuda_upload(probs.d, probs.h, n * sizeof(float));
    tr_cpu_softmax_xent_backward(dlogits.h, probs.h, lab.h, 1.0f / Bn, Bn, Vn);
    gpu->softmax_xent_backward(dlogits.d, probs.d, lab.d, 1.0f / Bn, Bn, Vn);
    compare("softmax_xent_backward dlogits", &dlogits, 0.0);
    pair *all[] = {&logits, &probs, &losses, &dlogits};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        pair_free(all[i]);
    ipair_free(&lab);
}

static void test_softmax_xent(void)
{
    softmax_case(37, 10); /* the classifier's: several samples per block, a partial block */
    softmax_case(37, 100); /* more classes than lanes of a warp */
}

/* ---- mixed precision: round_lowp, bit for bit ------------------------------------- */

/* Bit patterns at the edges of bf16 and fp16 (each also with its neighbours one ulp
 * away, and negated): ties to even, the fp16 overflow at 65520, subnormals of both
 * formats and of fp32, infinities, quiet and signalling NaNs with payloads. */
static const uint32_t lowp_edges[] = {
    0x00000000u, 0x3f800000u, 0x40490fdbu, /* 0, 1, pi */
    0x477fe000u, 0x477fe100u, 0x477fef00u, 0x477fefffu, /* 65504 .. just below 65520 */
    0x477ff000u, 0x477ff001u, 0x47800000u, 0x4b800000u, /* 65520, above, 65536, 2^24 */
    0x33800000u, 0x33000000u, 0x33c00000u, 0x32800000u, /* 2^-24, 2^-25 (tie), 3 2^-25, 2^-26 */
    0x38800000u, 0x387fe000u, 0x387fc000u, 0x38000000u, /* 2^-14, 2^-14 - 2^-25 (tie), ... */
    0x3f801000u, 0x3f803000u, 0x3f800800u, /* fp16 ties at 1 */
    0x3f808000u, 0x3f818000u, 0x3f808001u, /* bf16 ties at 1 */
    0x7f7fffffu, 0x7f7f8000u, 0x7f7f7fffu, /* FLT_MAX, bf16's overflow tie */
    0x00000001u, 0x007fffffu, 0x00400000u, 0x00800000u, /* fp32 subnormals, smallest normal */
    0x7f800000u, 0x7fc00000u, 0x7f800001u, 0x7fa5a5a5u, 0x7fbfffffu, 0x7fffffffu, /* inf, NaNs */
};

static void test_round_lowp(void)
{
    printf("round_lowp\n");
    size_t ne = sizeof lowp_edges / sizeof *lowp_edges, nsweep = 65536, nrand = 65536;
    size_t n = ne * 6 + nsweep + nrand;
    uint32_t *bits = malloc(n * sizeof(uint32_t));
    size_t m = 0;
    for (size_t i = 0; i < ne; i++)
        for (uint32_t sign = 0; sign < 2; sign++)
            for (int d = -1; d <= 1; d++)
                bits[m++] = (lowp_edges[i] + (uint32_t)d) ^ (sign << 31);
    for (size_t i = 0; i < nsweep; i++) /* every part of the range, evenly */
        bits[m++] = (uint32_t)(i * 65537u);
    uint64_t st = g_stream++;
    for (size_t i = 0; i < nrand; i++) {
        /* half anywhere, half inside fp16's exponent range (2^-25 .. 2^17) */
        uint32_t u = (uint32_t)tr_rng_u64(2024, st, i);
        bits[m++] = i % 2 ? u : (u & 0x807fffffu) | ((102u + u % 43u) << 23);
    }
    float *x = malloc(n * sizeof(float)), *g = malloc(n * sizeof(float));
    float *d = tr_cuda_alloc(n * sizeof(float), "test round_lowp");
    /* off 1: a start that is not 16-byte aligned (the GPU's 4-wide path is not taken) */
    for (int t = 0; t < 6; t++) {
        int format = t % 3, off = t / 3;
        memcpy(x, bits, n * sizeof(float));
        tr_cuda_upload(d, x, n * sizeof(float));
        tr_cpu_round_lowp(x + off, n - off, format);
        gpu->round_lowp(d + off, n - off, format);
        tr_cuda_download(g, d, n * sizeof(float));
        size_t bad = 0, first = 0;
        for (size_t i = 0; i < n; i++)
            if (memcmp(&x[i], &g[i], sizeof(float)) != 0 && bad++ == 0)
                first = i;
        printf("  round_lowp format %d from %d: %zu values, %zu differ in their bits (want 0)\n",
               format, off, n, bad);
        if (bad) {
            uint32_t xb, gb;
            memcpy(&xb, &x[first], sizeof xb);
            memcpy(&gb, &g[first], sizeof gb);
            CHECK(bad == 0, "round_lowp format %d: 0x%08x gives 0x%08x (cuda), 0x%08x (cpu)",
                  format, bits[first], gb, xb);
        } else {
            CHECK(bad == 0, "round_lowp format %d", format);
        }
    }
    free(bits);
    free(x);
    free(g);
    tr_cuda_free(d);
}

/* ---- a bad token ends the process, as on the CPU ---------------------------------- */

static int bad_token_child(void)
{
    int tok_h[BT];
    for (int i = 0; i < BT; i++)
        tok_h[i] = i % V;
    tok_h[7] = V; /* one past the vocabulary */
    int *tok = tr_cuda_alloc(sizeof tok_h, "tokens");
    float *out = tr_cuda_alloc((size_t)BT * C * sizeof(float), "out");
    float *wte = tr_cuda_alloc((size_t)V * C * sizeof(float), "wte");
    float *wpe = tr_cuda_alloc((size_t)T * C * sizeof(float), "wpe");
    tr_cuda_upload(tok, tok_h, sizeof tok_h);
    gpu->embedding_forward(out, tok, wte, wpe, B, T, C, V);
    tr_cuda_synchronize();
    return 0; /* not reached when the check works */
}

static void test_bad_token(void)
{
    printf("bad token\n");
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) { /* a fresh process: CUDA state must not be used across fork() */
        execl("/proc/self/exe", "test_cuda_kernels", "--bad-token", (char *)NULL);
        _exit(127);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid,
          "could not run this test again with --bad-token");
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    printf("  %-40s exit %d (want %d)\n", "embedding_forward token V", code, TR_EXIT_SOFTWARE);
    CHECK(code == TR_EXIT_SOFTWARE, "a bad token gave exit %d, not %d", code, TR_EXIT_SOFTWARE);
}

int main(int argc, char **argv)
{
    char why[512];
    int ngpu = tr_cuda_device_count(why, sizeof why);
    if (ngpu < 1) { /* -1: the node has GPUs CUDA cannot use, a failure (cuda_probe.h) */
        printf("%s: %s\n", ngpu < 0 ? "FAIL" : "SKIPPED", why);
        return ngpu < 0 ? 1 : 77;
    }
    if (argc > 1 && !strcmp(argv[1], "--bad-token"))
        return bad_token_child();
    printf("%s\n", why);
    tr_cpu_backend_init(2);
    tr_cuda_init(-1);
    CHECK(!strcmp(gpu->name, "cuda"), "table name %s", gpu->name);
    test_gemm();
    test_linear();
    test_linear_bias_long();
    test_stored_hidden();
    test_stored_past_cast_limit();
    test_embedding();
    test_embedding_long();
    test_layernorm(B, T, C);
    test_layernorm(4, 300, 320);
    test_layernorm(8, 1024, 768); /* GPT-2's C: the fused backward, 256 row blocks */
    test_layernorm(2, 100, 1600); /* wider than the fused kernel: the two-kernel form */
    test_elementwise();
    test_attention();
    test_xent_padded();
    test_xent_shard();
    test_rows_argmax();
    test_logits_16();
    test_linear_sliced();
    test_xent_linear();
    test_optim();
    test_round_lowp();
    test_relu();
    test_conv();
    test_maxpool();
    test_softmax_xent();
    test_bad_token();
    return tr_test_finish();
}
