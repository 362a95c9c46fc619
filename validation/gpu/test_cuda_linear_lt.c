/* test_cuda_linear_lt.c: the CUDA linear layer's cuBLASLt paths against the CPU
 * kernels on the same inputs (src/cuda/cuda_linear_lt.cu): linear_forward with the
 * bias epilogue, linear_gelu_forward with the GELU_AUX_BIAS epilogue (fp32; in 16-bit
 * formats it stores the MLP's activations in 16 bits without that epilogue, checked in
 * test_cuda_kernels.c), and
 * linear_forward_stored_io with a 16-bit output (bf16/fp16), and
 * linear_backward accumulating over two calls (two micro-batches), in fp32 and in
 * bf16- and fp16-mixed, at a GPT-like shape and at odd sizes, with tensors at
 * 256-byte aligned addresses and at addresses one float past that (the trainer's
 * tensors are views at any float offset).
 *
 * Tolerances, relative to the tensor's max |cpu| (as test_cuda_kernels.c):
 *  - 1e-4 for every GEMM output (out, pre, dinp, dw): the epilogue adds the bias to
 *    the finished fp32 sum where the CPU starts the sum at the bias, and cuBLAS
 *    blocks the K products its own way; both are fp32 rounding (about 1e-6 here). In
 *    bf16/fp16 the inputs are rounded to the format first, as the model stores them,
 *    so every product is exact on both sides (test_cuda_gemm_precision.c) and the
 *    same 1e-4 holds.
 *  - 1e-5 for db (+=): a float sum of B terms in another order.
 *  - out of linear_gelu_forward (fp32), element by element: |gpu - cpu| <= 1.13 |pre
 *    difference| + 5e-5 (1 + |pre|), where 1.13 bounds |gelu'|, and 5e-5 allows
 *    cuBLASLt's GELU arithmetic while staying well under the largest gap between the
 *    tanh form and the erf form of GELU (about 4.7e-4 near |x| = 2).
 * And the formula itself: pre values from -6 to 6 made exactly (one-hot inputs, so
 * pre is a weight plus a bias, both exact), the GPU's GELU within 5e-5 (1 + |x|) of
 * tr_gelu; the distance to the erf form is printed beside it.
 *
 * Paths: tr_cuda_linear_lt_counts says whether a call ran through cuBLASLt or fell
 * back. The fp32 bias and GELU epilogues on aligned tensors must run through it (any
 * GPU the trainer supports has them); elsewhere the path is printed, as cuBLASLt may
 * legitimately have no kernel (the fallback is then what is compared). A GELU call
 * with OUT not a multiple of 8 must fall back (to linear_forward, whose own bias
 * matmul then runs through cuBLASLt, then GELU).
 *
 * No usable GPU: prints why and exits 77 (CTest: skipped). */
#include "backend/cpu_backend.h"
#include "backend/gelu_math.h"
#include "backend/lowp_math.h"
#include "backend/transformer_kernels.h"
#include "core/rng.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_probe.h"
#include "test_util.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL_GEMM 1e-4
#define TOL_SUM 1e-5
#define GELU_SLOPE 1.13 /* max |gelu'(x)| is about 1.129 */
#define GELU_ABS 5e-5

static const tr_kernels *gpu = &tr_cuda_kernels;
static uint64_t g_stream = 1;

static const char *format_name(int format)
{
    return format == TR_PREC_BF16 ? "bf16" : format == TR_PREC_FP16 ? "fp16" : "fp32";
}

/* one rounding step of the format relative to the value (0 for fp32) */
static double format_step(int format)
{
    return format == TR_PREC_BF16 ? ldexp(1.0, -8) : format == TR_PREC_FP16 ? ldexp(1.0, -11) : 0.0;
}

/* ---- a tensor on both sides, `shift` floats past an aligned address ------------------ */

typedef struct pair {
    float *h, *d, *base; /* host copy, device view, the device allocation */
    size_t n;
} pair;

/* values uniform in [lo, hi), rounded to `format` as the model stores them */
static pair pair_rand(size_t n, float lo, float hi, int format, int shift)
{
    pair p = {malloc(n * sizeof(float)), NULL,
              tr_cuda_alloc((n + (size_t)shift) * sizeof(float), "test tensor"), n};
    p.d = p.base + shift;
    uint64_t s = g_stream++;
    for (size_t i = 0; i < n; i++)
        p.h[i] = lo + (hi - lo) * tr_rng_uniform(2026, s, i);
    tr_cpu_round_lowp(p.h, n, format);
    tr_cuda_upload(p.d, p.h, n * sizeof(float));
    return p;
}

static void pair_free(pair *p)
{
    free(p->h);
    tr_cuda_free(p->base);
}

static float *fetch(const pair *p)
{
    float *g = malloc(p->n * sizeof(float));
    tr_cuda_download(g, p->d, p->n * sizeof(float));
    return g;
}

static double max_abs(const float *x, size_t n)
{
    double m = 0.0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs(x[i]));
    return m;
}

/* max |gpu - cpu| / max |cpu| */
static void compare(const char *what, const pair *p, double tol)
{
    float *g = fetch(p);
    double worst = 0.0, scale = max_abs(p->h, p->n);
    for (size_t i = 0; i < p->n; i++)
        worst = fmax(worst, fabs((double)g[i] - p->h[i]));
    free(g);
    double e = scale > 0.0 ? worst / scale : worst;
    printf("    %-46s rel err %.2e (tol %.1e)\n", what, e, tol);
    CHECK(e <= tol, "%s: relative error %.3e above %.1e", what, e, tol);
}

/* ---- which path ran ------------------------------------------------------------------ */

static long g_fused_before, g_refused_before;

static void path_start(void) { tr_cuda_linear_lt_counts(&g_fused_before, &g_refused_before); }

/* prints the paths the calls since path_start took (a GELU call that falls back
 * runs linear_forward, whose bias matmul counts on its own); with must_fuse, all
 * `calls` of them must have been cuBLASLt matmuls and none refused */
static void path_report(const char *what, int calls, int must_fuse)
{
    long fused, refused;
    tr_cuda_linear_lt_counts(&fused, &refused);
    fused -= g_fused_before;
    refused -= g_refused_before;
    printf("    %-46s %d call%s: %ld cuBLASLt matmul%s, %ld fell back\n", what, calls,
           calls == 1 ? "" : "s", fused, fused == 1 ? "" : "s", refused);
    if (must_fuse)
        CHECK(fused == calls && refused == 0,
              "%s: %ld of %d calls ran through cuBLASLt, %ld fell back", what, fused, calls,
              refused);
}

/* ---- the cases ------------------------------------------------------------------------ */

typedef struct shape {
    const char *name;
    int B, IN, OUT;
} shape;

/* linear_forward with a bias, then linear_backward twice (two micro-batches) onto
 * random dw and db, so "+=" shows */
static void check_linear(const shape *s, int format, int shift)
{
    int B = s->B, IN = s->IN, OUT = s->OUT;
    pair inp = pair_rand((size_t)B * IN, -1, 1, format, shift);
    pair w = pair_rand((size_t)OUT * IN, -0.5, 0.5, format, shift);
    pair b = pair_rand(OUT, -1, 1, format, shift);
    pair out = pair_rand((size_t)B * OUT, -1, 1, TR_PREC_FP32, shift);
    pair dinp = pair_rand((size_t)B * IN, -1, 1, TR_PREC_FP32, shift);
    pair dw = pair_rand((size_t)OUT * IN, -1, 1, TR_PREC_FP32, shift);
    pair db = pair_rand(OUT, -1, 1, TR_PREC_FP32, shift);
    pair dout[2] = {pair_rand((size_t)B * OUT, -1, 1, format, shift),
                    pair_rand((size_t)B * OUT, -1, 1, format, shift)};
    path_start();
    tr_cpu_linear_forward(out.h, inp.h, w.h, b.h, B, IN, OUT);
    gpu->linear_forward(out.d, inp.d, w.d, b.d, B, IN, OUT);
    path_report("linear_forward", 1, format == TR_PREC_FP32 && shift == 0);
    compare("linear_forward out", &out, TOL_GEMM);
    for (int mb = 0; mb < 2; mb++) {
        tr_cpu_linear_backward(dinp.h, dw.h, db.h, dout[mb].h, inp.h, w.h, B, IN, OUT);
        gpu->linear_backward(dinp.d, dw.d, db.d, dout[mb].d, inp.d, w.d, B, IN, OUT);
    }
    compare("linear_backward dinp (second call)", &dinp, TOL_GEMM);
    compare("linear_backward dw (+= twice)", &dw, TOL_GEMM);
    compare("linear_backward db (+= twice)", &db, TOL_SUM);
    pair *all[] = {&inp, &w, &b, &out, &dinp, &dw, &db, &dout[0], &dout[1]};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        pair_free(all[i]);
}

/* out against the CPU element by element, within the bound of the file's header */
static void compare_gelu_out(const pair *out, const pair *pre, int format)
{
    float *go = fetch(out), *gp = fetch(pre);
    double worst = -INFINITY, worst_rel = 0.0, scale = max_abs(out->h, out->n);
    for (size_t i = 0; i < out->n; i++) {
        double x = pre->h[i], d = fabs((double)go[i] - out->h[i]);
        double bound = GELU_SLOPE * (fabs((double)gp[i] - x) + format_step(format) * fabs(x)) +
                       GELU_ABS * (1.0 + fabs(x));
        worst = fmax(worst, d - bound);
        worst_rel = fmax(worst_rel, d / scale);
    }
    free(go);
    free(gp);
    printf("    %-46s rel err %.2e (within its bound: %s)\n", "linear_gelu_forward out", worst_rel,
           worst <= 0.0 ? "yes" : "no");
    CHECK(worst <= 0.0, "linear_gelu_forward out: an element %.3e beyond its bound", worst);
}

static void check_linear_gelu(const shape *s, int format, int shift, int with_bias)
{
    int B = s->B, IN = s->IN, OUT = s->OUT;
    pair inp = pair_rand((size_t)B * IN, -1, 1, format, shift);
    pair w = pair_rand((size_t)OUT * IN, -0.5, 0.5, format, shift);
    pair b = pair_rand(OUT, -1, 1, format, shift);
    pair pre = pair_rand((size_t)B * OUT, -1, 1, TR_PREC_FP32, shift);
    pair out = pair_rand((size_t)B * OUT, -1, 1, TR_PREC_FP32, shift);
    path_start();
    tr_cpu_linear_gelu_forward(pre.h, out.h, inp.h, w.h, with_bias ? b.h : NULL, B, IN, OUT,
                               format, NULL, NULL);
    gpu->linear_gelu_forward(pre.d, out.d, inp.d, w.d, with_bias ? b.d : NULL, B, IN, OUT,
                             format, NULL, NULL);
    path_report(with_bias ? "linear_gelu_forward" : "linear_gelu_forward (no bias)", 1,
                format == TR_PREC_FP32 && shift == 0 && OUT % 8 == 0);
    compare("linear_gelu_forward pre", &pre, fmax(TOL_GEMM, format_step(format)));
    compare_gelu_out(&out, &pre, format);
    pair *all[] = {&inp, &w, &b, &pre, &out};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        pair_free(all[i]);
}

/* The epilogue's GELU against tr_gelu on exact inputs: inp one-hot rows, so
 * pre[r, j] = w[j, r % IN] + b[j] with w and b multiples of 1/64: exact in fp32.
 * pre spans [-6, 6]. */
static void check_gelu_formula(void)
{
    enum { B = 64, IN = 16, OUT = 64 };
    pair inp = pair_rand((size_t)B * IN, 0, 0, TR_PREC_FP32, 0);
    pair w = pair_rand((size_t)OUT * IN, 0, 0, TR_PREC_FP32, 0);
    pair b = pair_rand(OUT, 0, 0, TR_PREC_FP32, 0);
    pair pre = pair_rand((size_t)B * OUT, 0, 0, TR_PREC_FP32, 0);
    pair out = pair_rand((size_t)B * OUT, 0, 0, TR_PREC_FP32, 0);
    for (int r = 0; r < B; r++)
        inp.h[(size_t)r * IN + r % IN] = 1.0f;
    for (int j = 0; j < OUT; j++) {
        b.h[j] = (float)(j % 8) / 64.0f; /* 0 .. 7/64 */
        for (int k = 0; k < IN; k++) /* -6 .. 6 in steps of 12/255, rounded to 1/64 */
            w.h[(size_t)j * IN + k] = roundf((-6.0f + 12.0f * (float)(j * IN + k) / 1023.0f) *
                                             64.0f) / 64.0f - b.h[j];
    }
    tr_cuda_upload(inp.d, inp.h, inp.n * sizeof(float));
    tr_cuda_upload(w.d, w.h, w.n * sizeof(float));
    tr_cuda_upload(b.d, b.h, b.n * sizeof(float));
    path_start();
    gpu->linear_gelu_forward(pre.d, out.d, inp.d, w.d, b.d, B, IN, OUT, TR_PREC_FP32, NULL,
                             NULL);
    path_report("GELU formula: linear_gelu_forward", 1, 1);
    float *gp = fetch(&pre), *go = fetch(&out);
    double worst_tanh = 0.0, worst_erf = 0.0, excess = -INFINITY;
    size_t inexact = 0;
    for (int r = 0; r < B; r++)
        for (int j = 0; j < OUT; j++) {
            size_t i = (size_t)r * OUT + j;
            float x = w.h[(size_t)j * IN + r % IN] + b.h[j];
            inexact += gp[i] != x;
            double tanh_form = tr_gelu(x), erf_form = 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
            worst_tanh = fmax(worst_tanh, fabs(go[i] - tanh_form));
            worst_erf = fmax(worst_erf, fabs(go[i] - erf_form));
            excess = fmax(excess, fabs(go[i] - tanh_form) - GELU_ABS * (1.0 + fabs(x)));
        }
    free(gp);
    free(go);
    printf("    pre exact: %zu of %d differ (want 0)\n", inexact, B * OUT);
    printf("    GELU of x in [-6, 6]: max |gpu - tanh form| %.2e, |gpu - erf form| %.2e\n",
           worst_tanh, worst_erf);
    CHECK(inexact == 0, "GELU formula: %zu pre values not exact", inexact);
    CHECK(excess <= 0.0,
          "GELU formula: the epilogue is %.3e beyond 5e-5 (1 + |x|) of the tanh form "
          "(max %.3e from it, %.3e from the erf form)",
          excess, worst_tanh, worst_erf);
    pair *all[] = {&inp, &w, &b, &pre, &out};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        pair_free(all[i]);
}

/* a pair's values stored in format (16 bits each) on the device, `shift` floats (as
 * the trainer's views are) past an aligned address; *base gets the allocation */
static void *stored_device(const pair *p, int format, int shift, void **base)
{
    size_t bytes = p->n * tr_stored_bytes(format);
    uint16_t *h = malloc(bytes);
    for (size_t i = 0; i < p->n; i++)
        tr_stored_store(h, i, p->h[i], format);
    *base = tr_cuda_alloc(bytes + 16, "test stored tensor");
    void *d = (float *)*base + shift;
    tr_cuda_upload(d, h, bytes);
    free(h);
    return d;
}

/* c_attn's form in the 16-bit formats: input and output stored in the format, the
 * product through cuBLASLt's bias epilogue with a 16-bit output and the bias's 16-bit
 * copy where it has a kernel for that (the path is printed: the fallback is an fp32
 * product and a pass storing it), against the CPU's product rounded, within a step
 * of the format (two fp32 sums a rounding apart may round to neighbours) */
static void check_linear_stored_io(const shape *s, int format, int shift)
{
    int B = s->B, IN = s->IN, OUT = s->OUT;
    size_t nout = (size_t)B * OUT;
    pair inp = pair_rand((size_t)B * IN, -1, 1, format, 0);
    pair w = pair_rand((size_t)OUT * IN, -0.5, 0.5, format, shift);
    pair b = pair_rand(OUT, -1, 1, format, shift);
    pair want = pair_rand(nout, 0, 0, TR_PREC_FP32, 0);
    pair scratch = pair_rand(nout, 0, 0, TR_PREC_FP32, 0);
    pair scratch_in = pair_rand((size_t)B * IN, 0, 0, TR_PREC_FP32, 0);
    void *in_base, *out_base;
    const void *in16 = stored_device(&inp, format, shift, &in_base);
    void *out16 = stored_device(&want, format, shift, &out_base);
    tr_cpu_linear_forward(want.h, inp.h, w.h, b.h, B, IN, OUT);
    tr_cpu_round_lowp(want.h, nout, format);
    path_start();
    gpu->linear_forward_stored_io(out16, in16, w.d, b.d, B, IN, OUT, format, scratch.d,
                                  scratch_in.d);
    path_report("linear_forward_stored_io (16-bit output)", 1, 0);
    uint16_t *g = malloc(nout * sizeof *g);
    tr_cuda_download(g, out16, nout * sizeof *g);
    double worst = 0.0, scale = max_abs(want.h, nout);
    for (size_t i = 0; i < nout; i++)
        worst = fmax(worst, fabs((double)tr_stored_load(g, i, format) - want.h[i]));
    free(g);
    double e = scale > 0.0 ? worst / scale : worst, tol = fmax(TOL_GEMM, format_step(format));
    printf("    %-46s rel err %.2e (tol %.1e)\n", "linear_forward_stored_io out", e, tol);
    CHECK(e <= tol, "linear_forward_stored_io: relative error %.3e above %.1e", e, tol);
    tr_cuda_free(in_base);
    tr_cuda_free(out_base);
    pair *all[] = {&inp, &w, &b, &want, &scratch, &scratch_in};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        pair_free(all[i]);
}

static const shape shapes[] = {
    {"GPT-like B*T 64, C 64 -> 4C 256", 64, 64, 256},
    {"odd 37 x 45 -> 29", 37, 45, 29},
    {"odd 33 x 19 -> 40 (OUT a multiple of 8)", 33, 19, 40},
};

static void check_format(int format)
{
    gpu->set_gemm_precision(format);
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
        for (int shift = 0; shift < 2; shift++) {
            printf("  %s, %s, %s\n", format_name(format), shapes[i].name,
                   shift ? "tensors one float past 256-byte alignment" : "aligned tensors");
            check_linear(&shapes[i], format, shift);
            if (format != TR_PREC_FP32) { /* 16-bit: no GELU epilogue (test_cuda_kernels.c) */
                check_linear_stored_io(&shapes[i], format, shift);
                continue;
            }
            check_linear_gelu(&shapes[i], format, shift, 1);
            if (shift == 0)
                check_linear_gelu(&shapes[i], format, shift, 0);
        }
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
    printf("the epilogue's GELU\n");
    check_gelu_formula();
    const int formats[] = {TR_PREC_FP32, TR_PREC_BF16, TR_PREC_FP16};
    for (int f = 0; f < 3; f++) {
        printf("%s\n", format_name(formats[f]));
        check_format(formats[f]);
    }
    /* GELU's aux matrix needs OUT % 8 == 0: 29 must take the fallback */
    gpu->set_gemm_precision(TR_PREC_FP32);
    long fused0, refused0, fused1, refused1;
    tr_cuda_linear_lt_counts(&fused0, &refused0);
    check_linear_gelu(&shapes[1], TR_PREC_FP32, 0, 1);
    tr_cuda_linear_lt_counts(&fused1, &refused1);
    /* refused once (GELU), then the fallback's linear_forward: its bias epilogue */
    CHECK(refused1 == refused0 + 1 && fused1 == fused0 + 1,
          "OUT 29: linear_gelu_forward should fall back (fused +%ld, refused +%ld)",
          fused1 - fused0, refused1 - refused0);
    return tr_test_finish();
}
