/* test_transformer.c: the GPT-2 kernels of transformer_kernels.h on the CPU, with 2
 * OpenMP threads: finite-difference checks of every input and parameter gradient
 * (embedding, layernorm, GELU, causal attention, padded softmax cross-entropy),
 * forward passes against double-precision references, the gradient rules (parameter
 * gradients accumulate, activation gradients overwrite), the causal mask, the padded
 * vocabulary, GELU against its formula, the mixed-precision rounding that kernels do
 * as they store (the same bits as rounding afterwards), and determinism: two runs
 * bit-identical, and 1 thread bit-identical to 2, on shapes large enough to take the
 * parallel paths.
 *
 * Small shapes: B=2, T=5, C=8, NH=2 (HS=4), V=11, Vp=16. Loss for a kernel with a
 * tensor output: L = sum(out * R) for a fixed random R, so dL/dout = R; for the
 * cross-entropy, L = the returned loss sum (backward with scale 1).
 *
 * Choice of eps and tolerance (float32 forward, loss summed in double): every
 * kernel here is smooth (embedding and residual are linear, so exact at any eps).
 * Central differences carry truncation error eps^2/6 |L'''|; with inputs in [-1, 1]
 * and O(1) third derivatives that is ~2e-5 at eps = 1e-2. Rounding: perturbing one
 * element changes at most T*HS = 20 float outputs of magnitude <= ~3 (the attention
 * key/value case), ~2e-7 each, so L moves by noise ~1e-6 at worst, 5e-5 in the
 * derivative after dividing by 2 eps. The check is fd_check's
 * |a - n| / max(floor, |a| + |n|) < 1e-2 with floor 1e-2: relative 1e-2 for
 * gradients above ~5e-3, absolute 1e-4 (twice the worst noise) for smaller ones,
 * where |a| + |n| says nothing about the backward pass. A wrong index, a missing
 * term or a transposed product gives errors of order 1. Measured worst errors are
 * printed per tensor. */
#include "backend/cpu_backend.h"
#include "backend/gelu_math.h"
#include "backend/lowp_math.h"
#include "backend/scalar_math.h" /* tr_expf */
#include "backend/transformer_kernels.h"
#include "core/error.h"
#include "fd_check.h"
#include "test_util.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define EPS 1e-2f
#define FLOOR 1e-2
#define TOL 1e-2

enum { SB = 2, ST = 5, SC = 8, SNH = 2, SV = 11, SVP = 16 };

static float *falloc(size_t n, const char *what) { return tr_alloc(n * sizeof(float), what); }

static double dot_r(const float *out, const float *R, size_t n)
{
    double L = 0.0;
    for (size_t i = 0; i < n; i++)
        L += (double)out[i] * R[i];
    return L;
}

static int same_bits(const float *a, const float *b, size_t n)
{
    return memcmp(a, b, n * sizeof(float)) == 0;
}

static void fill_nan(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = NAN;
}

/* after == g0 + fresh within a few float roundings: the accumulating backward adds
 * its terms onto g0 one at a time, so it rounds differently from g0 + (sum). */
static void check_accumulated(const char *what, const float *after, const float *g0,
                              const float *fresh, size_t n)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        double want = (double)g0[i] + fresh[i];
        double tol = 1e-5 * (fabs(g0[i]) + fabs(fresh[i])) + 1e-7;
        bad += !(fabs(after[i] - want) <= tol);
    }
    CHECK(bad == 0, "%s: %zu of %zu elements did not accumulate (+=)", what, bad, n);
}

/* ---- embedding -------------------------------------------------------------------- */

typedef struct emb_rig {
    int tok[SB * ST];
    float *wte, *wpe, *out, *R;
} emb_rig;

static double emb_loss(void *ctx)
{
    emb_rig *e = ctx;
    tr_cpu_embedding_forward(e->out, e->tok, e->wte, e->wpe, SB, ST, SC, SV);
    return dot_r(e->out, e->R, (size_t)SB * ST * SC);
}

static void test_embedding(void)
{
    printf("embedding\n");
    emb_rig e;
    size_t nte = (size_t)SV * SC, npe = (size_t)ST * SC, nout = (size_t)SB * ST * SC;
    e.wte = falloc(nte, "wte");
    e.wpe = falloc(npe, "wpe");
    e.out = falloc(nout, "out");
    e.R = falloc(nout, "R");
    float *dwte = falloc(nte, "dwte"), *dwpe = falloc(npe, "dwpe");
    float *acc_te = falloc(nte, "acc"), *acc_pe = falloc(npe, "acc");
    float *g0_te = falloc(nte, "g0"), *g0_pe = falloc(npe, "g0");
    fd_fill_uniform(e.wte, nte, -1, 1, 1);
    fd_fill_uniform(e.wpe, npe, -1, 1, 2);
    fd_fill_uniform(e.R, nout, -1, 1, 3);
    /* token 7 three times (across both batch rows), token 10 never */
    const int toks[SB * ST] = {7, 3, 0, 7, 9, 1, 7, 2, 5, 4};
    memcpy(e.tok, toks, sizeof toks);

    emb_loss(&e);
    size_t bad = 0;
    for (int r = 0; r < SB * ST; r++)
        for (int c = 0; c < SC; c++)
            bad += e.out[r * SC + c] != e.wte[toks[r] * SC + c] + e.wpe[(r % ST) * SC + c];
    CHECK(bad == 0, "embedding forward: %zu elements differ from wte[tok] + wpe[t]", bad);

    tr_cpu_embedding_backward(dwte, dwpe, e.R, e.tok, SB, ST, SC, SV);
    fd_problem p = {emb_loss, NULL, &e};
    FD_CHECK_TENSOR("embedding d/dwte", fd_check(&p, e.wte, dwte, nte, EPS, FLOOR, TOL), 0.0);
    FD_CHECK_TENSOR("embedding d/dwpe", fd_check(&p, e.wpe, dwpe, npe, EPS, FLOOR, TOL), 0.0);
    int zero_row = 1;
    for (int c = 0; c < SC; c++)
        zero_row &= dwte[10 * SC + c] == 0.0f;
    CHECK(zero_row, "embedding: the row of an unused token got a gradient");

    fd_fill_uniform(g0_te, nte, -1, 1, 4);
    fd_fill_uniform(g0_pe, npe, -1, 1, 5);
    memcpy(acc_te, g0_te, nte * sizeof(float));
    memcpy(acc_pe, g0_pe, npe * sizeof(float));
    tr_cpu_embedding_backward(acc_te, acc_pe, e.R, e.tok, SB, ST, SC, SV);
    check_accumulated("embedding dwte", acc_te, g0_te, dwte, nte);
    check_accumulated("embedding dwpe", acc_pe, g0_pe, dwpe, npe);

    tr_free(e.wte), tr_free(e.wpe), tr_free(e.out), tr_free(e.R);
    tr_free(dwte), tr_free(dwpe), tr_free(acc_te), tr_free(acc_pe);
    tr_free(g0_te), tr_free(g0_pe);
}

/* ---- layernorm -------------------------------------------------------------------- */

typedef struct ln_rig {
    float *inp, *w, *b, *out, *mean, *rstd, *R;
} ln_rig;

static double ln_loss(void *ctx)
{
    ln_rig *l = ctx;
    tr_cpu_layernorm_forward(l->out, l->mean, l->rstd, l->inp, l->w, l->b, SB, ST, SC,
                             TR_PREC_FP32);
    return dot_r(l->out, l->R, (size_t)SB * ST * SC);
}

static void test_layernorm(void)
{
    printf("layernorm\n");
    size_t n = (size_t)SB * ST * SC, rows = (size_t)SB * ST;
    ln_rig l = {falloc(n, "inp"), falloc(SC, "w"), falloc(SC, "b"), falloc(n, "out"),
                falloc(rows, "mean"), falloc(rows, "rstd"), falloc(n, "R")};
    float *dinp = falloc(n, "dinp"), *dinp2 = falloc(n, "dinp2");
    float *dw = falloc(SC, "dw"), *db = falloc(SC, "db");
    float *g0w = falloc(SC, "g0"), *g0b = falloc(SC, "g0");
    float *accw = falloc(SC, "acc"), *accb = falloc(SC, "acc");
    float *inp0 = falloc(n, "inp0");
    fd_fill_uniform(inp0, n, -1, 1, 11);
    memcpy(l.inp, inp0, n * sizeof(float));
    /* forward only: a row with a large mean tests the two-pass variance (its rounding,
     * 50 * 2^-24 in each deviation, would be noise in the finite differences) */
    for (size_t i = 0; i < SC; i++)
        l.inp[i] += 50.0f;
    fd_fill_uniform(l.w, SC, 0.5f, 1.5f, 12);
    fd_fill_uniform(l.b, SC, -0.5f, 0.5f, 13);
    fd_fill_uniform(l.R, n, -1, 1, 14);

    ln_loss(&l);
    double worst = 0.0;
    for (size_t r = 0; r < rows; r++) {
        const float *x = l.inp + r * SC;
        double m = 0.0, v = 0.0;
        for (int c = 0; c < SC; c++)
            m += x[c];
        m /= SC;
        for (int c = 0; c < SC; c++)
            v += (x[c] - m) * (x[c] - m);
        double rs = 1.0 / sqrt(v / SC + 1e-5);
        worst = fmax(worst, fabs(l.mean[r] - m) / (fabs(m) + 1));
        worst = fmax(worst, fabs(l.rstd[r] - rs) / rs);
        for (int c = 0; c < SC; c++) {
            double y = (x[c] - m) * rs * l.w[c] + l.b[c];
            worst = fmax(worst, fabs(l.out[r * SC + c] - y) / (fabs(y) + 1));
        }
    }
    /* row 0's mean of 50 leaves its deviations with 50 * 2^-24 ~ 3e-6 of rounding */
    CHECK(worst < 2e-5, "layernorm forward vs double reference: worst rel err %.3g", worst);
    memcpy(l.inp, inp0, n * sizeof(float));
    tr_free(inp0);
    ln_loss(&l); /* mean and rstd of the inputs the gradients are checked at */

    tr_cpu_layernorm_backward(dinp, dw, db, l.R, l.inp, l.w, l.mean, l.rstd, SB, ST, SC,
                              TR_PREC_FP32, 0);
    fd_problem p = {ln_loss, NULL, &l};
    FD_CHECK_TENSOR("layernorm d/dinp", fd_check(&p, l.inp, dinp, n, EPS, FLOOR, TOL), 0.0);
    FD_CHECK_TENSOR("layernorm d/dweight", fd_check(&p, l.w, dw, SC, EPS, FLOOR, TOL), 0.0);
    FD_CHECK_TENSOR("layernorm d/dbias", fd_check(&p, l.b, db, SC, EPS, FLOOR, TOL), 0.0);

    fd_fill_uniform(g0w, SC, -1, 1, 15);
    fd_fill_uniform(g0b, SC, -1, 1, 16);
    memcpy(accw, g0w, SC * sizeof(float));
    memcpy(accb, g0b, SC * sizeof(float));
    fill_nan(dinp2, n); /* = must not read what was there */
    tr_cpu_layernorm_backward(dinp2, accw, accb, l.R, l.inp, l.w, l.mean, l.rstd, SB, ST, SC,
                              TR_PREC_FP32, 0);
    check_accumulated("layernorm dweight", accw, g0w, dw, SC);
    check_accumulated("layernorm dbias", accb, g0b, db, SC);
    CHECK(same_bits(dinp, dinp2, n), "layernorm dinp is not overwritten (=)");
    /* accumulate: dinp += the gradient, the same fp32 sum as an add after it */
    fd_fill_uniform(dinp2, n, -1, 1, 17);
    float *sum = falloc(n, "layernorm dinp + gradient");
    for (size_t i = 0; i < n; i++)
        sum[i] = dinp2[i] + dinp[i];
    tr_cpu_layernorm_backward(dinp2, accw, accb, l.R, l.inp, l.w, l.mean, l.rstd, SB, ST, SC,
                              TR_PREC_FP32, 1);
    CHECK(same_bits(sum, dinp2, n), "layernorm dinp with accumulate is not dinp + gradient");
    tr_free(sum);

    tr_free(l.inp), tr_free(l.w), tr_free(l.b), tr_free(l.out), tr_free(l.mean);
    tr_free(l.rstd), tr_free(l.R), tr_free(dinp), tr_free(dinp2), tr_free(dw), tr_free(db);
    tr_free(g0w), tr_free(g0b), tr_free(accw), tr_free(accb);
}

/* ---- GELU ------------------------------------------------------------------------- */

static double gelu_ref(double x)
{
    const double k = sqrt(2.0 / M_PI);
    return 0.5 * x * (1.0 + tanh(k * (x + 0.044715 * x * x * x)));
}

typedef struct gelu_rig {
    size_t n;
    float *inp, *out, *R;
} gelu_rig;

static double gelu_loss(void *ctx)
{
    gelu_rig *g = ctx;
    tr_cpu_gelu_forward(g->out, g->inp, g->n);
    return dot_r(g->out, g->R, g->n);
}

static void test_gelu(void)
{
    printf("gelu\n");
    /* the scalar functions against the formula in double, on [-10, 10] */
    double wf = 0.0, wd = 0.0;
    for (int i = -2000; i <= 2000; i++) {
        float x = (float)i * 0.005f;
        double f = gelu_ref(x);
        wf = fmax(wf, fabs(tr_gelu(x) - f) / fmax(1.0, fabs(f)));
        double h = 1e-5; /* central difference in double: error ~h^2 ~ 1e-10 */
        double d = (gelu_ref((double)x + h) - gelu_ref((double)x - h)) / (2 * h);
        wd = fmax(wd, fabs(tr_gelu_grad(x) - d) / fmax(1.0, fabs(d)));
    }
    printf("  gelu vs formula: worst %.2e, gelu' vs numeric: worst %.2e\n", wf, wd);
    CHECK(wf <= 1e-6, "tr_gelu vs the tanh formula: worst err %.3g", wf);
    /* 2e-6: the float evaluation of gelu' (a sum of three rounded terms near 1.1)
     * measures 5.5e-7, about 5 ulp; 16 ulp leaves room for another libm's tanhf */
    CHECK(wd <= 2e-6, "tr_gelu_grad vs numeric derivative: worst err %.3g", wd);
    CHECK(tr_gelu(1e4f) == 1e4f && tr_gelu(-1e4f) == 0.0f && tr_gelu_grad(1e4f) == 1.0f &&
              tr_gelu_grad(-1e4f) == 0.0f && tr_gelu(0.0f) == 0.0f && tr_gelu_grad(0.0f) == 0.5f,
          "gelu at 0 and far tails: %g %g %g %g", tr_gelu(1e4f), tr_gelu(-1e4f),
          tr_gelu_grad(1e4f), tr_gelu_grad(-1e4f));
    /* tr_gelu's exp, tr_expf_select (its clamps as bit selects, scalar_math.h), gives
     * tr_expf's bits: every 4099th float pattern (NaNs and infinities among them) */
    long expf_diff = 0;
    for (uint64_t bits = 0; bits <= 0xffffffffu; bits += 4099) {
        uint32_t b32 = (uint32_t)bits;
        float x, e1, e2;
        memcpy(&x, &b32, sizeof x);
        e1 = tr_expf(x), e2 = tr_expf_select(x);
        expf_diff += memcmp(&e1, &e2, sizeof e1) != 0;
    }
    CHECK(expf_diff == 0, "tr_expf_select differs from tr_expf at %ld inputs", expf_diff);
    /* PyTorch: torch.nn.functional.gelu(torch.tensor([1.0]), approximate='tanh') */
    CHECK(fabsf(tr_gelu(1.0f) - 0.841192f) < 1e-6f, "gelu(1) = %.7f, PyTorch 0.8411920",
          tr_gelu(1.0f));

    /* the kernels */
    size_t n = (size_t)SB * ST * SC;
    gelu_rig g = {n, falloc(n, "inp"), falloc(n, "out"), falloc(n, "R")};
    float *dinp = falloc(n, "dinp"), *inplace = falloc(n, "inplace");
    fd_fill_uniform(g.inp, n, -3, 3, 21);
    fd_fill_uniform(g.R, n, -1, 1, 22);
    gelu_loss(&g);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += g.out[i] != tr_gelu(g.inp[i]);
    CHECK(bad == 0, "gelu_forward differs from tr_gelu in %zu elements", bad);
    fill_nan(dinp, n);
    tr_cpu_gelu_backward(dinp, g.inp, g.R, n, TR_PREC_FP32);
    fd_problem p = {gelu_loss, NULL, &g};
    FD_CHECK_TENSOR("gelu d/dinp", fd_check(&p, g.inp, dinp, n, EPS, FLOOR, TOL), 0.0);
    memcpy(inplace, g.R, n * sizeof(float));
    tr_cpu_gelu_backward(inplace, g.inp, inplace, n, TR_PREC_FP32);
    CHECK(same_bits(inplace, dinp, n), "gelu_backward in place (dinp == dout) differs");
    tr_free(g.inp), tr_free(g.out), tr_free(g.R), tr_free(dinp), tr_free(inplace);
}

static void test_residual(void)
{
    printf("residual\n");
    size_t n = 37;
    float *a = falloc(n, "a"), *b = falloc(n, "b"), *o = falloc(n, "o");
    fd_fill_uniform(a, n, -1, 1, 31);
    fd_fill_uniform(b, n, -1, 1, 32);
    tr_cpu_residual_forward(o, a, b, n, TR_PREC_FP32);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += o[i] != a[i] + b[i];
    tr_cpu_residual_forward(a, a, b, n, TR_PREC_FP32); /* in place */
    CHECK(bad == 0 && same_bits(a, o, n), "residual: %zu elements differ from a + b", bad);
    tr_free(a), tr_free(b), tr_free(o);
}

/* ---- attention -------------------------------------------------------------------- */

typedef struct att_rig {
    float *qkv, *out, *att, *R;
} att_rig;

static double att_loss(void *ctx)
{
    att_rig *a = ctx;
    tr_cpu_attention_forward(a->out, a->att, a->qkv, SB, ST, SC, SNH, 0, NULL);
    return dot_r(a->out, a->R, (size_t)SB * ST * SC);
}

/* Naive double-precision attention of B x T x C with NH heads and dropout drop (NULL:
 * none), forward and, given dout, backward: out [B,T,C], dqkv [B,T,3C] (NULL: not
 * wanted), each row's max scaled score and 1 / sum of exponentials mx, inv
 * [B,NH,T]. */
static void att_reference(double *out, double *dqkv, double *mx, double *inv, const float *qkv,
                          const float *dout, int B, int T, int C, int NH, const tr_dropout *drop)
{
    const int HS = C / NH;
    double *P = tr_alloc((size_t)T * T * sizeof(double), "reference P");
    double *F = tr_alloc((size_t)T * T * sizeof(double), "reference mask");
    double *dS = tr_alloc((size_t)T * T * sizeof(double), "reference dS");
    if (dqkv)
        memset(dqkv, 0, (size_t)B * T * 3 * C * sizeof(double));
#define QKV(b, t, part, i) ((double)qkv[((size_t)(b)*T + (t)) * 3 * C + (part)*C + (i)])
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            for (int t = 0; t < T; t++) {
                double m = -INFINITY, sum = 0.0;
                for (int j = 0; j <= t; j++) {
                    double s = 0.0;
                    for (int i = 0; i < HS; i++)
                        s += QKV(b, t, 0, h * HS + i) * QKV(b, j, 1, h * HS + i);
                    P[(size_t)t * T + j] = s / sqrt((double)HS);
                    m = fmax(m, P[(size_t)t * T + j]);
                }
                for (int j = 0; j <= t; j++)
                    sum += P[(size_t)t * T + j] = exp(P[(size_t)t * T + j] - m);
                for (int j = 0; j <= t; j++) {
                    P[(size_t)t * T + j] /= sum;
                    F[(size_t)t * T + j] =
                        tr_dropout_on(drop) ? tr_dropout_att_factor(drop, b, h, t, j, T) : 1.0;
                }
                size_t r = ((size_t)b * NH + h) * T + t;
                mx[r] = m, inv[r] = 1.0 / sum;
                for (int i = 0; i < HS; i++) {
                    double o = 0.0;
                    for (int j = 0; j <= t; j++)
                        o += P[(size_t)t * T + j] * F[(size_t)t * T + j] * QKV(b, j, 2, h * HS + i);
                    out[((size_t)b * T + t) * C + h * HS + i] = o;
                }
            }
            if (!dqkv)
                continue;
            for (int t = 0; t < T; t++) { /* dS from dP = M (dO V^T) */
                const float *dO = dout + ((size_t)b * T + t) * C + h * HS;
                double D = 0.0;
                for (int j = 0; j <= t; j++) {
                    double dp = 0.0;
                    for (int i = 0; i < HS; i++)
                        dp += (double)dO[i] * QKV(b, j, 2, h * HS + i);
                    dS[(size_t)t * T + j] = dp * F[(size_t)t * T + j];
                    D += P[(size_t)t * T + j] * dS[(size_t)t * T + j];
                }
                for (int j = 0; j <= t; j++) {
                    double pd = P[(size_t)t * T + j] * F[(size_t)t * T + j];
                    dS[(size_t)t * T + j] =
                        P[(size_t)t * T + j] * (dS[(size_t)t * T + j] - D) / sqrt((double)HS);
                    for (int i = 0; i < HS; i++) { /* dV_j += (P M)_tj dO_t */
                        dqkv[((size_t)b * T + j) * 3 * C + 2 * C + h * HS + i] += pd * dO[i];
                        dqkv[((size_t)b * T + t) * 3 * C + h * HS + i] +=
                            dS[(size_t)t * T + j] * QKV(b, j, 1, h * HS + i);
                        dqkv[((size_t)b * T + j) * 3 * C + C + h * HS + i] +=
                            dS[(size_t)t * T + j] * QKV(b, t, 0, h * HS + i);
                    }
                }
            }
        }
#undef QKV
    tr_free(P), tr_free(F), tr_free(dS);
}

/* worst |got - want| / (|want| + 1) over n */
static double worst_rel(const float *got, const double *want, size_t n)
{
    double worst = 0.0;
    for (size_t i = 0; i < n; i++)
        worst =
            fmax(worst, isnan(got[i]) ? INFINITY : fabs(got[i] - want[i]) / (fabs(want[i]) + 1));
    return worst;
}

/* the saved state (each row's max and 1 / sum, attention_state_floats) against the
 * reference's */
static double att_state_err(const float *att, const double *mx, const double *inv, size_t rows)
{
    double worst = 0.0;
    for (size_t r = 0; r < rows; r++) {
        worst = fmax(worst, fabs(att[2 * r] - mx[r]) / (fabs(mx[r]) + 1));
        worst = fmax(worst, fabs(att[2 * r + 1] - inv[r]) / inv[r]);
    }
    return worst;
}

/* Rows t < t0 of out and of the saved state are bit-identical after every q, k, v of
 * time t0 changes, for each t0 in ts: returns the rows that changed. */
static size_t att_leaks(float *qkv, float *out, float *att, int B, int T, int C, int NH,
                        const int *ts, int nts)
{
    size_t nout = (size_t)B * T * C, natt = tr_cpu_attention_state_floats(B, T, NH), leaks = 0;
    float *out0 = falloc(nout, "out0"), *att0 = falloc(natt, "att0");
    float *kept = falloc((size_t)B * 3 * C, "qkv at t0");
    tr_cpu_attention_forward(out, att, qkv, B, T, C, NH, TR_PREC_FP32, NULL);
    memcpy(out0, out, nout * sizeof(float));
    memcpy(att0, att, natt * sizeof(float));
    for (int k = 0; k < nts; k++) {
        int t0 = ts[k];
        for (int b = 0; b < B; b++)
            for (int i = 0; i < 3 * C; i++) {
                size_t e = ((size_t)b * T + t0) * 3 * C + i;
                kept[(size_t)b * 3 * C + i] = qkv[e];
                qkv[e] += 0.75f;
            }
        tr_cpu_attention_forward(out, att, qkv, B, T, C, NH, TR_PREC_FP32, NULL);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < t0; t++) {
                size_t o = ((size_t)b * T + t) * C;
                leaks += !same_bits(out + o, out0 + o, C);
                for (int h = 0; h < NH; h++) {
                    size_t r = (((size_t)b * NH + h) * T + t) * 2;
                    leaks += !same_bits(att + r, att0 + r, 2);
                }
            }
        for (int b = 0; b < B; b++) /* (x + 0.75 - 0.75 need not be x) */
            for (int i = 0; i < 3 * C; i++)
                qkv[((size_t)b * T + t0) * 3 * C + i] = kept[(size_t)b * 3 * C + i];
    }
    tr_free(out0), tr_free(att0), tr_free(kept);
    return leaks;
}

static void test_attention(void)
{
    printf("attention\n");
    size_t nqkv = (size_t)SB * ST * 3 * SC, nout = (size_t)SB * ST * SC;
    size_t natt = tr_cpu_attention_state_floats(SB, ST, SNH), rows = (size_t)SB * SNH * ST;
    CHECK(natt == 2 * rows, "attention state: %zu floats for %zu rows", natt, rows);
    att_rig a = {falloc(nqkv, "qkv"), falloc(nout, "out"), falloc(natt, "att"),
                 falloc(nout, "R")};
    float *dqkv = falloc(nqkv, "dqkv"), *dqkv2 = falloc(nqkv, "dqkv2");
    float *datt = falloc(natt, "datt");
    double *ref = tr_alloc((nout + 2 * rows) * sizeof(double), "reference");
    /* scores of a few units: a softmax neither flat nor saturated */
    fd_fill_uniform(a.qkv, nqkv, -1.5f, 1.5f, 41);
    fd_fill_uniform(a.R, nout, -1, 1, 42);

    att_loss(&a);
    att_reference(ref, NULL, ref + nout, ref + nout + rows, a.qkv, NULL, SB, ST, SC, SNH, NULL);
    double rerr = worst_rel(a.out, ref, nout);
    CHECK(rerr < 1e-5, "attention forward vs double reference: worst err %.3g", rerr);
    rerr = att_state_err(a.att, ref + nout, ref + nout + rows, rows);
    CHECK(rerr < 1e-5, "attention state (max, 1 / sum) vs double reference: worst err %.3g", rerr);

    fill_nan(dqkv, nqkv);
    fill_nan(datt, natt); /* scratch: must be written before it is read */
    tr_cpu_attention_backward(dqkv, datt, a.R, a.out, a.qkv, a.att, SB, ST, SC, SNH,
                              TR_PREC_FP32, NULL);
    fd_problem p = {att_loss, NULL, &a};
    FD_CHECK_TENSOR("attention d/dqkv", fd_check(&p, a.qkv, dqkv, nqkv, EPS, FLOOR, TOL), 0.0);
    att_loss(&a); /* (the finite differences left the state of a perturbed input) */
    fill_nan(dqkv2, nqkv);
    tr_cpu_attention_backward(dqkv2, datt, a.R, a.out, a.qkv, a.att, SB, ST, SC, SNH,
                              TR_PREC_FP32, NULL);
    CHECK(same_bits(dqkv, dqkv2, nqkv), "attention backward: two runs differ (or dqkv not =)");

    /* causal mask: changing every q, k, v of time t0 leaves rows t < t0 of out and the
     * state bit-identical, for each t0 */
    int ts[ST - 1];
    for (int t0 = 1; t0 < ST; t0++)
        ts[t0 - 1] = t0;
    size_t leaks = att_leaks(a.qkv, a.out, a.att, SB, ST, SC, SNH, ts, ST - 1);
    CHECK(leaks == 0, "attention: %zu earlier rows changed with a future token", leaks);
    tr_free(a.qkv), tr_free(a.out), tr_free(a.att), tr_free(a.R), tr_free(dqkv);
    tr_free(dqkv2), tr_free(datt), tr_free(ref);
}

/* Attention at B x T x C with NH heads, T past blocks of query rows or at their
 * edges: forward, the state and backward against the double reference, with and
 * without dropout, and the causal mask at the blocks' edges */
static void test_attention_blocks(int B, int T, int C, int NH)
{
    printf("attention, B = %d, T = %d, C = %d, NH = %d (blocks of 64 query rows)\n", B, T, C, NH);
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, rows = (size_t)B * NH * T;
    size_t natt = tr_cpu_attention_state_floats(B, T, NH);
    float *qkv = falloc(nqkv, "qkv"), *dout = falloc(nout, "dout"), *out = falloc(nout, "out");
    float *att = falloc(natt, "att"), *datt = falloc(natt, "datt"), *dqkv = falloc(nqkv, "dqkv");
    double *ref = tr_alloc((nout + nqkv + 2 * rows) * sizeof(double), "reference");
    double *rdq = ref + nout, *rmx = rdq + nqkv, *rinv = rmx + rows;
    fd_fill_uniform(qkv, nqkv, -1.5f, 1.5f, 43);
    fd_fill_uniform(dout, nout, -1, 1, 44);
    for (int pass = 0; pass < 2; pass++) {
        tr_dropout d = tr_dropout_make(0.25f, 7, 3, 11, 5);
        d.heads = NH;
        const tr_dropout *drop = pass ? &d : NULL;
        const char *what = pass ? "with dropout" : "";
        tr_cpu_attention_forward(out, att, qkv, B, T, C, NH, TR_PREC_FP32, drop);
        fill_nan(dqkv, nqkv);
        tr_cpu_attention_backward(dqkv, datt, dout, out, qkv, att, B, T, C, NH, TR_PREC_FP32, drop);
        att_reference(ref, rdq, rmx, rinv, qkv, dout, B, T, C, NH, drop);
        double eo = worst_rel(out, ref, nout), es = att_state_err(att, rmx, rinv, rows);
        double ed = worst_rel(dqkv, rdq, nqkv);
        printf("  %s out %.3g, state %.3g, dqkv %.3g from double\n", pass ? "dropout 0.25:" : "",
               eo, es, ed);
        CHECK(eo < 1e-5, "attention %s forward vs double: worst err %.3g", what, eo);
        CHECK(es < 1e-5, "attention %s state vs double: worst err %.3g", what, es);
        CHECK(ed < 1e-5, "attention %s backward vs double: worst err %.3g", what, ed);
    }
    int ts[8], nts = 0; /* the times that exist of 1, 63, 64, 65, 127, 128, 129, T - 1 */
    const int edges[] = {1, 63, 64, 65, 127, 128, 129, T - 1};
    for (int k = 0; k < 8; k++)
        if (edges[k] > 0 && edges[k] < T && (nts == 0 || edges[k] > ts[nts - 1]))
            ts[nts++] = edges[k];
    size_t leaks = att_leaks(qkv, out, att, B, T, C, NH, ts, nts);
    CHECK(leaks == 0, "attention, T = %d: %zu earlier rows changed with a future token", T, leaks);
    tr_free(qkv), tr_free(dout), tr_free(out), tr_free(att), tr_free(datt), tr_free(dqkv);
    tr_free(ref);
}

/* ---- softmax cross-entropy, padded vocabulary ------------------------------------- */

typedef struct xent_rig {
    int tgt[SB * ST];
    float *logits, *stats, *losses;
} xent_rig;

static double xent_loss(void *ctx)
{
    xent_rig *x = ctx;
    return tr_cpu_xent_padded_forward(x->stats, x->losses, x->logits, x->tgt, SB, ST, SV, SVP,
                                      TR_PREC_FP32, TR_PREC_FP32);
}

static void test_xent(void)
{
    printf("softmax cross-entropy, V=%d padded to %d\n", SV, SVP);
    size_t rows = (size_t)SB * ST, n = rows * SVP;
    xent_rig x = {{0, 10, 3, 3, 7, 1, 9, 10, 2, 5}, falloc(n, "logits"), falloc(2 * rows, "stats"),
                  falloc(rows, "losses")};
    float *dl = falloc(n, "dlogits"), *dl2 = falloc(n, "dlogits2"), *lg0 = falloc(n, "lg0");
    float *st0 = falloc(2 * rows, "stats0");
    fd_fill_uniform(x.logits, n, -2, 2, 51);

    double L = xent_loss(&x), ref = 0.0, worst_sum = 0.0;
    for (size_t r = 0; r < rows; r++) {
        const float *l = x.logits + r * SVP;
        double s = 0.0, ps = 0.0;
        for (int j = 0; j < SV; j++) {
            s += exp(l[j]);
            ps += tr_expf(l[j] - x.stats[2 * r]) * x.stats[2 * r + 1];
        }
        ref += log(s) - l[x.tgt[r]];
        worst_sum = fmax(worst_sum, fabs(ps - 1.0));
    }
    CHECK(fabs(L - ref) < 1e-5 * fabs(ref), "xent loss %.9g vs double reference %.9g", L, ref);
    /* the statistics: the softmax they give sums to 1 in every row */
    CHECK(worst_sum < 1e-5, "xent stats: a row's probabilities sum to 1 %+.3g", worst_sum);

    fill_nan(dl, n);
    tr_cpu_xent_padded_backward(dl, x.logits, x.stats, x.tgt, 1.0f, SB, ST, SV, SVP,
                                TR_PREC_FP32, TR_PREC_FP32);
    fd_problem p = {xent_loss, NULL, &x};
    FD_CHECK_TENSOR("xent d/dlogits", fd_check(&p, x.logits, dl, n, EPS, FLOOR, TOL), 0.0);
    size_t padbad = 0;
    for (size_t r = 0; r < rows; r++)
        for (int j = SV; j < SVP; j++)
            padbad += dl[r * SVP + j] != 0.0f;
    CHECK(padbad == 0, "xent: %zu padded entries with a nonzero gradient", padbad);

    /* the padding never touches the loss or the statistics, whatever it holds */
    xent_loss(&x); /* (the finite differences left the last row's stats behind) */
    memcpy(lg0, x.logits, n * sizeof(float));
    memcpy(st0, x.stats, 2 * rows * sizeof(float));
    const float junk[3] = {1e30f, -1e30f, NAN};
    for (int k = 0; k < 3; k++) {
        for (size_t r = 0; r < rows; r++)
            for (int j = SV; j < SVP; j++)
                x.logits[r * SVP + j] = junk[k];
        double Lj = xent_loss(&x);
        CHECK(Lj == L && same_bits(x.stats, st0, 2 * rows),
              "xent: padded logits = %g changed the loss", junk[k]);
    }
    memcpy(x.logits, lg0, n * sizeof(float));

    /* scale: scale (softmax - onehot), the softmax exp(x - max) (1 / sum) */
    tr_cpu_xent_padded_backward(dl2, x.logits, x.stats, x.tgt, 0.1f, SB, ST, SV, SVP,
                                TR_PREC_FP32, TR_PREC_FP32);
    size_t bad = 0;
    for (size_t r = 0; r < rows; r++)
        for (int j = 0; j < SV; j++) {
            float pj = tr_expf(x.logits[r * SVP + j] - x.stats[2 * r]) * x.stats[2 * r + 1];
            bad += dl2[r * SVP + j] != 0.1f * (pj - (j == x.tgt[r] ? 1.0f : 0.0f));
        }
    CHECK(bad == 0, "xent backward with scale 0.1: %zu elements off", bad);
    /* in place: dlogits over the logits */
    tr_cpu_xent_padded_backward(x.logits, x.logits, x.stats, x.tgt, 1.0f, SB, ST, SV, SVP,
                                TR_PREC_FP32, TR_PREC_FP32);
    CHECK(same_bits(x.logits, dl, n), "xent backward in place differs");

    tr_free(x.logits), tr_free(x.stats), tr_free(x.losses), tr_free(dl), tr_free(dl2);
    tr_free(lg0), tr_free(st0);
}

/* ---- determinism on shapes that take the parallel paths --------------------------- */

enum { LB = 4, LT = 72, LC = 128, LNH = 4, LV = 100, LVP = 128 };

typedef struct big {
    int *tok;
    float *wte, *wpe, *lnw, *lnb, *qkv, *logits, *dout;
} big;

static float *take(float **w, size_t n)
{
    float *p = *w;
    *w += n;
    return p;
}

/* Runs every forward and backward on the inputs of g and appends every output,
 * saved tensor and gradient to res (zeroed: the parameter gradients accumulate into
 * it); returns how many floats it wrote. */
static size_t big_run(const big *g, float *res)
{
    size_t BT = (size_t)LB * LT, n = BT * LC, natt = tr_cpu_attention_state_floats(LB, LT, LNH);
    float *w = res;
    float *emb = take(&w, n), *dwte = take(&w, (size_t)LV * LC), *dwpe = take(&w, (size_t)LT * LC);
    tr_cpu_embedding_forward(emb, g->tok, g->wte, g->wpe, LB, LT, LC, LV);
    tr_cpu_embedding_backward(dwte, dwpe, g->dout, g->tok, LB, LT, LC, LV);

    float *ln = take(&w, n), *mean = take(&w, BT), *rstd = take(&w, BT);
    float *dln = take(&w, n), *dw = take(&w, LC), *db = take(&w, LC);
    tr_cpu_layernorm_forward(ln, mean, rstd, emb, g->lnw, g->lnb, LB, LT, LC, TR_PREC_FP32);
    tr_cpu_layernorm_backward(dln, dw, db, g->dout, emb, g->lnw, mean, rstd, LB, LT, LC,
                              TR_PREC_FP32, 0);

    float *ge = take(&w, n), *dge = take(&w, n);
    tr_cpu_gelu_forward(ge, ln, n);
    tr_cpu_gelu_backward(dge, ln, g->dout, n, TR_PREC_FP32);

    float *out = take(&w, n), *att = take(&w, natt), *datt = take(&w, natt);
    float *dqkv = take(&w, 3 * n);
    tr_cpu_attention_forward(out, att, g->qkv, LB, LT, LC, LNH, 0, NULL);
    tr_cpu_attention_backward(dqkv, datt, g->dout, out, g->qkv, att, LB, LT, LC, LNH,
                              TR_PREC_FP32, NULL);

    float *stats = take(&w, 2 * BT), *losses = take(&w, BT), *loss = take(&w, 2);
    float *dlogits = take(&w, BT * LVP);
    double L = tr_cpu_xent_padded_forward(stats, losses, g->logits, g->tok, LB, LT, LV, LVP,
                                          TR_PREC_FP32, TR_PREC_FP32);
    loss[0] = (float)L;
    loss[1] = (float)(L - (double)loss[0]); /* the rest of the double */
    tr_cpu_xent_padded_backward(dlogits, g->logits, stats, g->tok, 1.0f / (float)BT, LB, LT, LV,
                                LVP, TR_PREC_FP32, TR_PREC_FP32);
    return (size_t)(w - res);
}

static void test_determinism(void)
{
    printf("determinism: B=%d T=%d C=%d NH=%d V=%d Vp=%d\n", LB, LT, LC, LNH, LV, LVP);
    size_t BT = (size_t)LB * LT, n = BT * LC;
    big g = {tr_alloc(BT * sizeof(int), "tok"), falloc((size_t)LV * LC, "wte"),
             falloc((size_t)LT * LC, "wpe"), falloc(LC, "lnw"), falloc(LC, "lnb"),
             falloc(3 * n, "qkv"), falloc(BT * LVP, "logits"), falloc(n, "dout")};
    for (size_t i = 0; i < BT; i++)
        g.tok[i] = (int)(tr_rng_u64(12345, 61, i) % LV);
    fd_fill_uniform(g.wte, (size_t)LV * LC, -1, 1, 62);
    fd_fill_uniform(g.wpe, (size_t)LT * LC, -1, 1, 63);
    fd_fill_uniform(g.lnw, LC, 0.5f, 1.5f, 64);
    fd_fill_uniform(g.lnb, LC, -0.5f, 0.5f, 65);
    fd_fill_uniform(g.qkv, 3 * n, -1.5f, 1.5f, 66);
    fd_fill_uniform(g.logits, BT * LVP, -3, 3, 67);
    fd_fill_uniform(g.dout, n, -1, 1, 68);

    size_t cap = 16 * n + 4 * tr_cpu_attention_state_floats(LB, LT, LNH) + 4 * BT * LVP;
    float *r1 = falloc(cap, "run 1"), *r2 = falloc(cap, "run 2"), *r3 = falloc(cap, "run 3");
    size_t m1 = big_run(&g, r1), m2 = big_run(&g, r2);
    omp_set_num_threads(1);
    size_t m3 = big_run(&g, r3);
    omp_set_num_threads(2);
    CHECK(m1 <= cap && m1 == m2 && m1 == m3, "big_run sizes %zu %zu %zu (cap %zu)", m1, m2, m3,
          cap);
    CHECK(same_bits(r1, r2, m1), "two runs with 2 threads are not bit-identical");
    CHECK(same_bits(r1, r3, m1), "1 thread and 2 threads are not bit-identical");
    size_t nonfinite = 0;
    for (size_t i = 0; i < m1; i++)
        nonfinite += !isfinite(r1[i]);
    CHECK(nonfinite == 0, "%zu non-finite values in the big run", nonfinite);
    printf("  %zu floats compared\n", m1);

    tr_free(g.tok), tr_free(g.wte), tr_free(g.wpe), tr_free(g.lnw), tr_free(g.lnb);
    tr_free(g.qkv), tr_free(g.logits), tr_free(g.dout), tr_free(r1), tr_free(r2), tr_free(r3);
}

/* ---- mixed precision: rounding inside the kernels -------------------------------- */

/* Each kernel that takes a format, at bf16 and fp16, against the same kernel at fp32
 * on inputs rounded first (where it reads them "as values of format") and followed by
 * tr_cpu_round_lowp: the same bits (the GPU rounds as it loads and stores, and its
 * test compares it with these). Inputs span magnitudes from 1e-3 to 1e3 so that both
 * formats round, fp16's overflow and subnormals included. */
static void fill_wide(float *x, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) {
        float u = tr_rng_uniform(seed, 7, i) * 2.0f - 1.0f;
        x[i] = u * powf(10.0f, 6.0f * tr_rng_uniform(seed, 8, i) - 3.0f);
    }
}

static const char *fmt_name(int format) { return format == TR_PREC_BF16 ? "bf16" : "fp16"; }

static void check_fused(const char *what, int format, const float *fused, float *ref, size_t n)
{
    tr_cpu_round_lowp(ref, n, format);
    CHECK(same_bits(fused, ref, n), "%s (%s): rounding inside the kernel differs from "
          "round_lowp around it", what, fmt_name(format));
}

static void check_same(const char *what, int format, const void *a, const void *b, size_t bytes)
{
    CHECK(memcmp(a, b, bytes) == 0, "%s (%s): reading as values of the format differs from "
          "rounding first", what, fmt_name(format));
}

/* x rounded to format into a new buffer */
static float *rounded_copy(const float *x, size_t n, int format)
{
    float *r = falloc(n, "rounded copy");
    memcpy(r, x, n * sizeof *r);
    tr_cpu_round_lowp(r, n, format);
    return r;
}

/* x's values rounded to format and stored in its width (lowp_math.h) */
static void *stored_copy(const float *x, size_t n, int format)
{
    void *p = tr_alloc(n * tr_stored_bytes(format), "stored copy");
    for (size_t i = 0; i < n; i++)
        tr_stored_store(p, i, x[i], format);
    return p;
}

static float *widened(const void *p, size_t n, int format)
{
    float *x = falloc(n, "widened");
    for (size_t i = 0; i < n; i++)
        x[i] = tr_stored_load(p, i, format);
    return x;
}

/* attention_decode: the last row of attention_forward's output for every length t
 * of one sequence, in fp32 and stored in bf16 and fp16: the same float operations on
 * one row (scores and outputs from one-row BLAS products, the softmax in the same
 * order), so the same bits, unless this BLAS sums a one-row product in another order
 * than the row of a larger one (then within 1e-6). */
static void test_attention_decode(void)
{
    enum { DT = 9, DC = 12, DNH = 3 };
    float *qkv = falloc((size_t)DT * 3 * DC, "qkv"), *out = falloc((size_t)DT * DC, "out");
    float *att = falloc((size_t)DNH * DT * DT, "att"), *dec = falloc(DC, "decode out");
    for (size_t i = 0; i < (size_t)DT * 3 * DC; i++)
        qkv[i] = 2.0f * tr_rng_uniform(31, 1, i) - 1.0f;
    for (int f = TR_PREC_FP32; f <= TR_PREC_FP16; f++) {
        void *qs = f ? stored_copy(qkv, (size_t)DT * 3 * DC, f) : qkv;
        size_t es = tr_stored_bytes(f);
        void *os = f ? tr_alloc((size_t)DT * DC * es, "out") : out;
        void *ds = f ? tr_alloc(DC * es, "decode out") : dec;
        int exact = 1;
        double worst = 0;
        for (int t = 1; t <= DT; t++) {
            tr_cpu_attention_forward(os, att, qs, 1, t, DC, DNH, f, NULL);
            tr_cpu_attention_decode(ds, att, qs, t, DC, DNH, f); /* att: scratch now */
            for (int c = 0; c < DC; c++) {
                float a = tr_stored_load(ds, (size_t)c, f);
                float b = tr_stored_load(os, (size_t)(t - 1) * DC + c, f);
                exact &= a == b;
                double d = fabs((double)a - b);
                worst = d > worst ? d : worst;
            }
        }
        printf("attention_decode (%s): %s, largest difference %.3g\n", f ? fmt_name(f) : "fp32",
               exact ? "the forward's bits" : "not bit-identical", worst);
        CHECK(worst <= 1e-6, "attention_decode (%s): %.3g from the forward's last row",
              f ? fmt_name(f) : "fp32", worst);
        if (f)
            tr_free(qs), tr_free(os), tr_free(ds);
    }
    tr_free(qkv), tr_free(out), tr_free(att), tr_free(dec);
}

static void test_fused_rounding(void)
{
    enum { B = 2, T = 33, C = 64, NH = 4, V = 50, VP = 64 };
    size_t BT = (size_t)B * T, n = BT * C, n3 = 3 * n, nv = BT * VP;
    size_t natt = tr_cpu_attention_state_floats(B, T, NH), nbig = n3 > nv ? n3 : nv;
    float *x = falloc(n, "x"), *y = falloc(n, "y"), *w = falloc(C, "w"), *bias = falloc(C, "b");
    float *o1 = falloc(nbig, "fused"), *o2 = falloc(nbig, "ref"), *tmp = falloc(n, "tmp");
    float *mean = falloc(BT, "mean"), *rstd = falloc(BT, "rstd");
    float *qkv = falloc(n3, "qkv"), *att = falloc(natt, "att"), *datt = falloc(natt, "datt");
    float *st1 = falloc(2 * BT, "stats"), *st2 = falloc(2 * BT, "stats");
    float *logits = falloc(nv, "logits");
    float *g1 = falloc(2 * C, "param grads"), *g2 = falloc(2 * C, "param grads");
    float *l1 = falloc(BT, "losses"), *l2 = falloc(BT, "losses");
    double *s1 = tr_alloc(2 * BT * sizeof(double), "sums");
    double *s2 = tr_alloc(2 * BT * sizeof(double), "sums");
    int *tgt = tr_alloc(BT * sizeof(int), "targets");
    int *i1 = tr_alloc(BT * sizeof(int), "argmax"), *i2 = tr_alloc(BT * sizeof(int), "argmax");
    fill_wide(x, n, 1);
    fill_wide(y, n, 2);
    fill_wide(w, C, 3);
    fill_wide(bias, C, 4);
    for (size_t i = 0; i < n3; i++)
        qkv[i] = tr_rng_uniform(5, 1, i) - 0.5f;
    for (size_t i = 0; i < nv; i++) {
        /* logits with near-ties after rounding, for the argmax */
        logits[i] = 8.0f * tr_rng_uniform(9, 1, i) + 1e-3f * tr_rng_uniform(9, 2, i);
    }
    for (size_t i = 0; i < BT; i++)
        tgt[i] = (int)(i * 7) % V;
    for (int f = TR_PREC_BF16; f <= TR_PREC_FP16; f++) {
        float *xr = rounded_copy(x, n, f), *yr = rounded_copy(y, n, f);
        float *qkvr = rounded_copy(qkv, n3, f), *lgr = rounded_copy(logits, nv, f);
        /* the input, the residual stream, stored in the format, and the output too: its
         * 16-bit values, widened, are round_lowp's of the fp32 call on x's values */
        void *xs = stored_copy(x, n, f);
        tr_cpu_layernorm_forward(tmp, mean, rstd, xs, w, bias, B, T, C, f);
        for (size_t i = 0; i < n; i++)
            o1[i] = tr_stored_load(tmp, i, f);
        tr_cpu_layernorm_forward(o2, mean, rstd, xr, w, bias, B, T, C, TR_PREC_FP32);
        check_fused("layernorm_forward (stored)", f, o1, o2, n);
        /* backward, dout = y read as values of f, dinp overwritten and accumulated */
        memset(g1, 0, 2 * C * sizeof *g1);
        memset(g2, 0, 2 * C * sizeof *g2);
        tr_cpu_layernorm_backward(o1, g1, g1 + C, y, xs, w, mean, rstd, B, T, C, f, 0);
        tr_cpu_layernorm_backward(o2, g2, g2 + C, yr, xr, w, mean, rstd, B, T, C, TR_PREC_FP32,
                                  0);
        check_fused("layernorm_backward", f, o1, o2, n);
        check_same("layernorm_backward dweight, dbias", f, g1, g2, 2 * C * sizeof *g1);
        memcpy(o1, xr, n * sizeof *o1); /* a residual stream's gradient, of the format */
        tr_cpu_layernorm_backward(o1, g1, g1 + C, y, xs, w, mean, rstd, B, T, C, f, 1);
        tr_cpu_layernorm_backward(tmp, g2, g2 + C, yr, xr, w, mean, rstd, B, T, C,
                                  TR_PREC_FP32, 0);
        tr_cpu_residual_forward(o2, xr, tmp, n, TR_PREC_FP32);
        check_fused("layernorm_backward accumulating", f, o1, o2, n);
        /* the stream stored in the format, y (a product's output) read as values of it;
         * in place on the stream, as the model calls it */
        tr_cpu_residual_forward(xs, xs, y, n, f);
        float *xw = widened(xs, n, f);
        tr_cpu_residual_forward(o2, xr, yr, n, TR_PREC_FP32);
        check_fused("residual_forward (stored, in place)", f, xw, o2, n);
        tr_free(xw);
        /* the embeddings' fp32 sum into the stream */
        tr_cpu_narrow_stored(xs, y, n, f);
        xw = widened(xs, n, f);
        check_same("narrow_stored", f, xw, yr, n * sizeof *xw);
        tr_free(xw), tr_free(xs);
        /* out from unrounded probabilities, which are stored rounded: the fp32 call
         * leaves them unrounded, so backward gets the fused call's state on both sides */
        tr_cpu_attention_forward(o2, att, qkvr, B, T, C, NH, TR_PREC_FP32, NULL);
        void *os = tr_alloc(n * tr_stored_bytes(f), "attention out"); /* stored in f */
        void *qs = stored_copy(qkv, n3, f); /* qkv is stored in f */
        tr_cpu_attention_forward(os, att, qs, B, T, C, NH, f, NULL);
        float *ow = widened(os, n, f);
        check_fused("attention_forward (out stored)", f, ow, o2, n);
        void *ds = tr_alloc(n3 * tr_stored_bytes(f), "dqkv"); /* stored in f too */
        void *ys = stored_copy(y, n, f); /* dout stored in f */
        tr_cpu_attention_backward(ds, datt, ys, os, qs, att, B, T, C, NH, f, NULL);
        float *dw3 = widened(ds, n3, f);
        tr_cpu_attention_backward(o2, datt, yr, x, qkvr, att, B, T, C, NH, TR_PREC_FP32, NULL);
        check_fused("attention_backward (dout, dqkv stored)", f, dw3, o2, n3);
        tr_free(os), tr_free(ow), tr_free(qs), tr_free(ds), tr_free(dw3), tr_free(ys);
        /* the cross-entropy: logits read as values of f, dlogits rounded to f */
        double L1 = tr_cpu_xent_padded_forward(st1, l1, logits, tgt, B, T, V, VP, f, TR_PREC_FP32);
        double L2 = tr_cpu_xent_padded_forward(st2, l2, lgr, tgt, B, T, V, VP, TR_PREC_FP32,
                                               TR_PREC_FP32);
        check_same("xent_padded_forward statistics", f, st1, st2, 2 * BT * sizeof *st1);
        check_same("xent_padded_forward losses", f, l1, l2, BT * sizeof *l1);
        CHECK(L1 == L2, "xent_padded_forward (%s): loss %.17g against %.17g", fmt_name(f), L1,
              L2);
        tr_cpu_xent_padded_backward(o1, logits, st1, tgt, 0.37f, B, T, V, VP, f, TR_PREC_FP32);
        tr_cpu_xent_padded_backward(o2, lgr, st2, tgt, 0.37f, B, T, V, VP, TR_PREC_FP32,
                                    TR_PREC_FP32);
        check_fused("xent_padded_backward", f, o1, o2, nv);
        memcpy(o1, logits, nv * sizeof *o1); /* in place, as the model calls it */
        tr_cpu_xent_padded_backward(o1, o1, st1, tgt, 0.37f, B, T, V, VP, f, TR_PREC_FP32);
        check_same("xent_padded_backward in place", f, o1, o2, nv * sizeof *o1);
        /* the shard steps (columns [0, VP) holding vocabulary rows from 10) and the
         * accuracy's argmax on the logits in both of a backend's forms: fp32 (read as
         * values of f) and stored in f; backward last, in place on the stored ones as
         * the GPU's head backward runs it */
        for (int form = 0; form < 2; form++) {
            int lf = form ? f : TR_PREC_FP32;
            void *lg = form ? stored_copy(logits, nv, f) : logits;
            const char *what = form ? "16-bit logits" : "fp32 logits";
            tr_cpu_xent_shard_max(l1, lg, BT, VP, V - 10, f, lf);
            tr_cpu_xent_shard_max(l2, lgr, BT, VP, V - 10, TR_PREC_FP32, TR_PREC_FP32);
            check_same(form ? "xent_shard_max (16-bit)" : "xent_shard_max", f, l1, l2,
                       BT * sizeof *l1);
            tr_cpu_xent_shard_sums(s1, lg, l2, tgt, BT, VP, 10, V - 10, f, lf);
            tr_cpu_xent_shard_sums(s2, lgr, l2, tgt, BT, VP, 10, V - 10, TR_PREC_FP32,
                                   TR_PREC_FP32);
            check_same(form ? "xent_shard_sums (16-bit)" : "xent_shard_sums", f, s1, s2,
                       2 * BT * sizeof *s1);
            tr_cpu_xent_shard_finish(st1, l1, s1, l2, BT);
            tr_cpu_rows_argmax(i1, l1, lg, BT, VP, V, f, lf);
            tr_cpu_rows_argmax(i2, l2, lgr, BT, VP, V, TR_PREC_FP32, TR_PREC_FP32);
            CHECK(!memcmp(i1, i2, BT * sizeof *i1) && !memcmp(l1, l2, BT * sizeof *l1),
                  "rows_argmax (%s, %s) differs from rounding first", what, fmt_name(f));
            tr_cpu_xent_shard_backward(o2, lgr, st1, tgt, 0.37f, BT, VP, 10, V - 10,
                                       TR_PREC_FP32, TR_PREC_FP32);
            tr_cpu_round_lowp(o2, nv, f);
            tr_cpu_xent_shard_backward(form ? lg : o1, lg, st1, tgt, 0.37f, BT, VP, 10, V - 10,
                                       f, lf);
            float *d = form ? widened(lg, nv, f) : o1;
            CHECK(same_bits(d, o2, nv), "xent_shard_backward (%s, %s): rounding inside the "
                  "kernel differs from round_lowp around it", what, fmt_name(f));
            if (form)
                tr_free(d), tr_free(lg);
        }
        /* the logits stored in f (a GPU's form: logits_format): the same values as the
         * fp32 ones read as values of f, so the same bits from every reader */
        void *ls = stored_copy(logits, nv, f);
        tr_cpu_xent_padded_forward(st2, l2, lgr, tgt, B, T, V, VP, TR_PREC_FP32, TR_PREC_FP32);
        L1 = tr_cpu_xent_padded_forward(st1, l1, ls, tgt, B, T, V, VP, f, f);
        check_same("xent_padded_forward (16-bit logits) statistics", f, st1, st2,
                   2 * BT * sizeof *st1);
        CHECK(L1 == L2, "xent_padded_forward (16-bit logits, %s): loss %.17g against %.17g",
              fmt_name(f), L1, L2);
        tr_cpu_xent_padded_backward(o2, lgr, st2, tgt, 0.37f, B, T, V, VP, TR_PREC_FP32,
                                    TR_PREC_FP32);
        tr_cpu_round_lowp(o2, nv, f);
        void *dst = stored_copy(logits, nv, f);
        tr_cpu_xent_padded_backward(dst, ls, st1, tgt, 0.37f, B, T, V, VP, f, f);
        float *dw = widened(dst, nv, f);
        check_same("xent_padded_backward (16-bit dlogits)", f, dw, o2, nv * sizeof *dw);
        tr_free(dw), tr_free(dst), tr_free(ls);
        tr_free(xr), tr_free(yr), tr_free(qkvr), tr_free(lgr);
    }
    float *all[] = {x, y, w, bias, o1, o2, tmp, mean, rstd, qkv, att, datt, st1, st2,
                    logits, g1, g2, l1, l2};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        tr_free(all[i]);
    tr_free(s1), tr_free(s2), tr_free(tgt), tr_free(i1), tr_free(i2);
}

/* The MLP's hidden activations stored in the format's width (transformer_kernels.h):
 * each entry gives the bits the same math gives on their values held in fp32 memory,
 * at every format, on shapes whose products the two threads split unevenly. */
static void test_stored_hidden(void)
{
    enum { BT = 67, C = 40, F = 88 }; /* c_fc C -> F, c_proj F -> C */
    size_t nx = (size_t)BT * C, nh = (size_t)BT * F;
    float *x = falloc(nx, "x"), *wfc = falloc((size_t)F * C, "c_fc w");
    float *bfc = falloc(F, "c_fc b"), *wpr = falloc((size_t)C * F, "c_proj w");
    float *bpr = falloc(C, "c_proj b"), *dout = falloc(nx, "dout");
    float *scratch = falloc(nh, "scratch"), *pre = falloc(nh, "pre"), *out = falloc(nh, "out");
    float *y1 = falloc(nx, "y"), *y2 = falloc(nx, "y");
    float *d1 = falloc(nh, "d"), *d2 = falloc(nh, "d");
    float *g1 = falloc((size_t)C * F + C, "grads"), *g2 = falloc((size_t)C * F + C, "grads");
    float *m1 = falloc(2 * ((size_t)C * F) + C + F, "MLP grads");
    float *m2 = falloc(2 * ((size_t)C * F) + C + F, "MLP grads");
    fill_wide(x, nx, 21);
    fill_wide(dout, nx, 22);
    for (size_t i = 0; i < (size_t)F * C; i++) {
        wfc[i] = tr_rng_uniform(23, 1, i) - 0.5f;
        wpr[i] = tr_rng_uniform(24, 1, i) - 0.5f;
    }
    fill_wide(bfc, F, 25);
    fill_wide(bpr, C, 26);
    for (int f = TR_PREC_FP32; f <= TR_PREC_FP16; f++) {
        float *xr = rounded_copy(x, nx, f), *dr = rounded_copy(dout, nx, f);
        void *pre_s = tr_alloc(nh * tr_stored_bytes(f), "pre"), *out_s = tr_alloc(
            nh * tr_stored_bytes(f), "out");
        void *xs = stored_copy(x, nx, f); /* the input (ln_2's output) stored too */
        /* c_fc and GELU: pre rounded, GELU of it rounded (the four calls it stands for) */
        tr_cpu_linear_gelu_forward(pre_s, out_s, xs, wfc, bfc, BT, C, F, f, scratch, y1);
        tr_cpu_linear_forward(pre, xr, wfc, bfc, BT, C, F);
        tr_cpu_round_lowp(pre, nh, f);
        tr_cpu_gelu_forward(out, pre, nh);
        tr_cpu_round_lowp(out, nh, f);
        float *pw = widened(pre_s, nh, f), *ow = widened(out_s, nh, f);
        CHECK(same_bits(pw, pre, nh), "linear_gelu_forward pre (%s) differs", fmt_name(f));
        CHECK(same_bits(ow, out, nh), "linear_gelu_forward out (%s) differs", fmt_name(f));
        /* c_fc again with its output stored (c_attn's form): the product rounded */
        void *io_s = tr_alloc(nh * tr_stored_bytes(f), "stored product");
        tr_cpu_linear_forward_stored_io(io_s, xs, wfc, bfc, BT, C, F, f, scratch, y1);
        float *iow = widened(io_s, nh, f);
        tr_cpu_linear_forward(pre, xr, wfc, bfc, BT, C, F);
        tr_cpu_round_lowp(pre, nh, f);
        CHECK(same_bits(iow, pre, nh), "linear_forward_stored_io (%s) differs", fmt_name(f));
        tr_free(io_s), tr_free(iow);
        /* c_proj forward and backward on the stored GELU output */
        tr_cpu_linear_forward_stored(y1, out_s, wpr, bpr, BT, F, C, f, scratch);
        tr_cpu_linear_forward(y2, ow, wpr, bpr, BT, F, C);
        CHECK(same_bits(y1, y2, nx), "linear_forward_stored (%s) differs", fmt_name(f));
        for (size_t i = 0; i < (size_t)C * F + C; i++) /* gradients accumulate (+=) */
            g1[i] = g2[i] = 0.25f - tr_rng_uniform(27, 1, i);
        tr_cpu_linear_backward_stored(d1, g1, g1 + (size_t)C * F, dr, out_s, wpr, BT, F, C, f);
        tr_cpu_linear_backward(d2, g2, g2 + (size_t)C * F, dr, ow, wpr, BT, F, C);
        CHECK(same_bits(d1, d2, nh), "linear_backward_stored dinp (%s) differs", fmt_name(f));
        CHECK(same_bits(g1, g2, (size_t)C * F + C),
              "linear_backward_stored dw, db (%s) differ", fmt_name(f));
        /* and with dout stored too (c_attn's: dqkv), widened into scratch */
        void *dos = stored_copy(dout, nx, f);
        tr_cpu_linear_backward_stored_dout(d1, g1, g1 + (size_t)C * F, dos, out_s, wpr, BT, F,
                                           C, f, scratch);
        tr_cpu_linear_backward(d2, g2, g2 + (size_t)C * F, dr, ow, wpr, BT, F, C);
        CHECK(same_bits(d1, d2, nh), "linear_backward_stored_dout dinp (%s) differs",
              fmt_name(f));
        CHECK(same_bits(g1, g2, (size_t)C * F + C),
              "linear_backward_stored_dout dw, db (%s) differ", fmt_name(f));
        tr_free(dos);
        /* GELU's backward reading the stored pre, in place on the gradient as the
         * model calls it */
        tr_cpu_gelu_backward(d1, pre_s, d1, nh, f);
        tr_cpu_round_lowp(d2, nh, f); /* (dout read as values of the format) */
        tr_cpu_gelu_backward(d2, pw, d2, nh, TR_PREC_FP32);
        check_fused("gelu_backward on the stored pre", f, d1, d2, nh);
        /* with dinp stored (attention's c_proj: attention's dout), the product rounded */
        void *dis = tr_alloc(nh * tr_stored_bytes(f), "stored dinp");
        tr_cpu_linear_backward_stored_dinp(dis, g1, g1 + (size_t)C * F, dr, out_s, wpr, BT, F,
                                           C, f, scratch);
        tr_cpu_linear_backward(d2, g2, g2 + (size_t)C * F, dr, ow, wpr, BT, F, C);
        tr_cpu_round_lowp(d2, nh, f);
        float *diw = widened(dis, nh, f);
        CHECK(same_bits(diw, d2, nh), "linear_backward_stored_dinp dinp (%s) differs",
              fmt_name(f));
        CHECK(same_bits(g1, g2, (size_t)C * F + C),
              "linear_backward_stored_dinp dw, db (%s) differ", fmt_name(f));
        tr_free(dis), tr_free(diw);
        /* the MLP's backward in one entry, against its three steps on the values in
         * fp32 memory (dr, c_proj's output gradient; y, ln_2's output gradient) */
        size_t ng = (size_t)F * C + F + (size_t)C * F + C; /* c_fc's w, b; c_proj's */
        for (size_t i = 0; i < ng; i++)
            m1[i] = m2[i] = 0.25f - tr_rng_uniform(28, 1, i);
        float *fw1 = m1, *fb1 = fw1 + (size_t)F * C, *pw1 = fb1 + F, *pb1 = pw1 + (size_t)C * F;
        float *fw2 = m2, *fb2 = fw2 + (size_t)F * C, *pw2 = fb2 + F, *pb2 = pw2 + (size_t)C * F;
        tr_cpu_mlp_backward(y1, fw1, fb1, pw1, pb1, dr, xs, pre_s, out_s, wfc, wpr, BT, C, F, f,
                            scratch);
        tr_cpu_linear_backward(d2, pw2, pb2, dr, ow, wpr, BT, F, C);
        tr_cpu_round_lowp(d2, nh, f); /* GELU's backward: dout read as values of f */
        tr_cpu_gelu_backward(d2, pw, d2, nh, TR_PREC_FP32);
        tr_cpu_round_lowp(d2, nh, f); /* and its output rounded to f */
        tr_cpu_linear_backward(y2, fw2, fb2, d2, xr, wfc, BT, C, F);
        CHECK(same_bits(y1, y2, nx), "mlp_backward dinp (%s) differs", fmt_name(f));
        CHECK(same_bits(m1, m2, ng), "mlp_backward dw, db (%s) differ", fmt_name(f));
        tr_free(xr), tr_free(dr), tr_free(pre_s), tr_free(out_s), tr_free(pw), tr_free(ow);
        tr_free(xs);
    }
    /* the widths: 16 bits a value in the 16-bit formats */
    void *h = stored_copy(x, nx, TR_PREC_BF16);
    float *hw = widened(h, nx, TR_PREC_BF16), *xr = rounded_copy(x, nx, TR_PREC_BF16);
    CHECK(tr_stored_bytes(TR_PREC_BF16) == 2 && tr_stored_bytes(TR_PREC_FP16) == 2 &&
              tr_stored_bytes(TR_PREC_FP32) == 4 && same_bits(hw, xr, nx),
          "stored bf16 values are not the rounded ones");
    tr_free(h), tr_free(hw), tr_free(xr);
    float *all[] = {x, wfc, bfc, wpr, bpr, dout, scratch, pre, out, y1, y2, d1, d2, g1, g2,
                    m1, m2};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        tr_free(all[i]);
}

int main(void)
{
    tr_cpu_backend_init(2);
    test_embedding();
    test_layernorm();
    test_gelu();
    test_residual();
    test_attention();
    test_attention_blocks(2, 137, 16, 2); /* two blocks and 9 rows */
    test_attention_blocks(1, 64, 12, 3);  /* one whole block, head size 4 */
    test_attention_blocks(1, 65, 24, 2);  /* one row past it, head size 12 */
    test_attention_blocks(3, 1, 8, 1);    /* a single position */
    test_attention_decode();
    test_xent();
    test_fused_rounding();
    test_stored_hidden();
    test_determinism();
    return tr_test_finish();
}
