/* cpu_attention.c: the core of causal multi-head self-attention on the CPU.
 *
 * Per (batch, head), with Q, K, V the head's T x HS slices of qkv (row stride 3C):
 *   S = Q K^T / sqrt(HS);  A = softmax over each row t of S[t, 0..t], 0 beyond;
 *   O = A V  (written to the head's columns of out, row stride C).
 * Backward, from dO:
 *   dA = dO V^T;  dV = A^T dO;  dS = A * (dA - rowsum(A * dA)) / sqrt(HS) (0 beyond t);
 *   dQ = dS K;  dK = dS^T Q.
 * In blocks of BQ query rows, as flash attention does: a block's scores reach only
 * the keys up to its last row (the causal half, about half the T x T products) and
 * live in a BQ x T buffer of the thread's own. Each block holds whole rows, so its
 * softmax is exact without flash attention's running rescale. Forward saves no
 * probabilities, only each row's max and 1 / sum (2 floats a row where the T x T
 * probabilities took T: 36 GiB for GPT-2 124M at 64 x 1024); backward forms the
 * probabilities again from them with the same float operations, the same bits, and
 * sums dK and dV over the blocks. The products are single-threaded cblas_sgemm calls
 * inside an OpenMP loop over the B*NH heads (the project's BLAS policy, see
 * cpu_gemm.c). Masked probabilities within a block are exact zeros, so later rows of
 * V (and K, Q) contribute 0 * v = +0 to earlier outputs and cannot change them. Each
 * head writes only its own slices of out, att and dqkv, so no two threads write the
 * same element and results are bit-identical run to run.
 * In bf16/fp16-mixed, qkv, out and dqkv are stored as 16-bit values and dO is read as
 * values of the format: each thread widens (or rounds) its head's slices into copies
 * of its own (T x HS each) before the BLAS reads them, and stores its out, dq, dk and
 * dv from such copies.
 * Dropout (transformer_kernels.h): each thread forms a block's dropped probabilities
 * A * M in a buffer of its own, drawing M element by element (dropout_math.h), in
 * forward for O and again in backward for dV and dA. */
#include "backend/transformer_kernels.h"
#include "backend/lowp_math.h" /* tr_round_lowp */
#include "backend/scalar_math.h"
#include "core/error.h"

#include <cblas.h>
#include <math.h>

/* Multiply-adds below which the heads run serially: about 20 us on one core. */
#define ATT_PAR_MIN_MACS 65536.0

static int head_size(int C, int NH, const char *what)
{
    if (NH < 1 || C % NH != 0)
        tr_fatal(TR_EXIT_SOFTWARE, "%s: C = %d is not a multiple of NH = %d", what, C, NH);
    return C / NH;
}

/* Query rows per block: a block's scores and their gradients (BQ x T floats each, 512
 * KiB at T = 1024) stay in a core's cache, and its keys end at the block's last row. */
#define BQ 64

/* The state forward saves for backward: each row's max score and 1 / (sum of the
 * exponentials), from which backward forms the same probabilities with the same float
 * operations (row_probs), bit for bit. */
enum { STATE_PER_ROW = 2 };

size_t tr_cpu_attention_state_floats(int B, int T, int NH)
{
    return (size_t)B * NH * T * STATE_PER_ROW;
}

/* p[j] = exp(s[j] - mx) * inv for j <= t (the causal part of a row), 0 beyond up to n,
 * in place: backward's probabilities, as row_softmax formed them. */
static void row_probs(float *p, int t, int n, float mx, float inv)
{
    for (int j = 0; j <= t; j++) /* vectorises */
        p[j] = tr_expf(p[j] - mx) * inv;
    for (int j = t + 1; j < n; j++)
        p[j] = 0.0f;
}

/* Softmax of row t's causal part in place (n columns, zeros after t); its max and
 * 1 / sum go to st[0], st[1]. Each probability is exp(s - max) times 1 / sum, the
 * operations row_probs repeats. */
static void row_softmax(float *a, int t, int n, float *st)
{
    float mx = a[0];
    for (int j = 1; j <= t; j++)
        mx = a[j] > mx ? a[j] : mx;
    for (int j = 0; j <= t; j++) /* vectorises; the sum below stays in order */
        a[j] = tr_expf(a[j] - mx);
    float sum = 0.0f;
    for (int j = 0; j <= t; j++)
        sum += a[j];
    float inv = 1.0f / sum; /* sum >= 1: the max term is exp(0) */
    for (int j = 0; j <= t; j++)
        a[j] *= inv;
    for (int j = t + 1; j < n; j++)
        a[j] = 0.0f;
    st[0] = mx;
    st[1] = inv;
}

/* f[j] = M's factor of (t, j) for j <= t of head (b, h): one Philox call for j and
 * j + 8 (dropout_math.h's groups), half of the row's other calls are row t ^ 8's */
static void row_factors(float *f, int t, const tr_dropout *d, int b, int h, int T)
{
    for (int j = 0; j <= t; j++) {
        if (j & 8)
            continue; /* drawn with j - 8 */
        uint32_t r[4];
        tr_dropout_att_draw(r, d, b, h, t, j, T);
        f[j] = tr_dropout_att_keep(d, r, t, j);
        if (j + 8 <= t)
            f[j + 8] = tr_dropout_att_keep(d, r, t, j + 8);
    }
}

/* Rows i0 .. i0 + nq - 1 of head (b, h), n columns each (ld n): Pd = P * M (zeros after
 * each row's t) and, where dP is not NULL, dP *= M over the causal part (the gradient of
 * P from that of P * M), from the same draws. */
static void dropped_rows(float *Pd, float *dP, const float *P, int i0, int nq, int n,
                         const tr_dropout *d, int b, int h, int T)
{
    for (int r = 0; r < nq; r++) {
        int t = i0 + r;
        const float *p = P + (size_t)r * n;
        float *o = Pd + (size_t)r * n;
        row_factors(o, t, d, b, h, T);
        if (dP)
            for (int j = 0; j <= t; j++)
                dP[(size_t)r * n + j] *= o[j];
        for (int j = 0; j <= t; j++)
            o[j] *= p[j];
        for (int j = t + 1; j < n; j++)
            o[j] = 0.0f;
    }
}

/* One head's T rows of HS values at element off of src, a tensor stored in format
 * (qkv: lowp_math.h), ld apart, as floats: src's own for fp32, else widened (exactly)
 * into buf (T x HS, *ld set to HS). Serially, inside the loop over heads. */
static const float *stored_head_view(float *buf, const void *src, size_t off, int *ld, int T,
                                     int HS, int format)
{
    if (!tr_is_lowp(format))
        return (const float *)src + off;
    for (int t = 0; t < T; t++)
        for (int d = 0; d < HS; d++)
            buf[(size_t)t * HS + d] = tr_stored_load(src, off + (size_t)t * *ld + d, format);
    *ld = HS;
    return buf;
}

/* Per-thread room for n head views (NULL for fp32: no copies are made) */
static float *views_alloc(int n, int T, int HS, int format)
{
    return tr_is_lowp(format) ? tr_alloc((size_t)n * T * HS * sizeof(float), "attention views")
                              : NULL;
}

/* Per-thread room for n blocks of scores (BQ rows of T) */
static float *blocks_alloc(int n, int T)
{
    int rows = T < BQ ? T : BQ;
    return tr_alloc((size_t)n * rows * T * sizeof(float), "attention blocks");
}

/* One head's T rows of HS floats (src, packed) stored in format at element off of
 * dst, rows ld apart: rounded as they are stored (serially: the caller runs inside its
 * parallel loop over heads). */
static void store_head_rows(void *dst, size_t off, int ld, const float *src, int T, int HS,
                            int format)
{
    for (int t = 0; t < T; t++)
        for (int d = 0; d < HS; d++)
            tr_stored_store(dst, off + (size_t)t * ld + d, src[(size_t)t * HS + d], format);
}

void tr_cpu_attention_forward(void *out, float *att, const void *qkv, int B, int T, int C,
                              int NH, int format, const tr_dropout *drop)
{
    int HS = head_size(C, NH, "attention_forward");
    int nbh = B * NH, dropping = tr_dropout_on(drop);
    float scale = 1.0f / sqrtf((float)HS);
    /* the causal half: the blocks skip the keys after their last row */
#pragma omp parallel if ((double)nbh * T * T * HS / 2 > ATT_PAR_MIN_MACS && nbh > 1)
    {
        /* q, k, v, and the head's output before it is stored in the format */
        float *views = views_alloc(4, T, HS, format);
        float *P = blocks_alloc(dropping ? 2 : 1, T); /* and the dropped ones after it */
        float *Pd = dropping ? P + (size_t)(T < BQ ? T : BQ) * T : NULL;
        size_t vs = (size_t)T * HS;
#pragma omp for schedule(static)
        for (int bh = 0; bh < nbh; bh++) {
            int b = bh / NH, h = bh % NH, ldq = 3 * C, ldk = ldq, ldv = ldq;
            size_t q0 = (size_t)b * T * ldq + (size_t)h * HS;
            /* qkv stored in format */
            const float *q = stored_head_view(views, qkv, q0, &ldq, T, HS, format);
            const float *k = stored_head_view(views + vs, qkv, q0 + C, &ldk, T, HS, format);
            const float *v = stored_head_view(views + 2 * vs, qkv, q0 + 2 * C, &ldv, T, HS,
                                              format);
            float *st = att + (size_t)bh * T * STATE_PER_ROW;
            size_t o0 = (size_t)b * T * C + (size_t)h * HS; /* the head's first element */
            int lowp = tr_is_lowp(format), ldo = lowp ? HS : C;
            float *o = lowp ? views + 3 * vs : (float *)out + o0;
            for (int i0 = 0; i0 < T; i0 += BQ) {
                int nq = T - i0 < BQ ? T - i0 : BQ, n = i0 + nq; /* keys 0 .. n-1 */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, n, HS, scale,
                            q + (size_t)i0 * ldq, ldq, k, ldk, 0.0f, P, n);
                for (int r = 0; r < nq; r++)
                    row_softmax(P + (size_t)r * n, i0 + r, n, st + (size_t)(i0 + r) * 2);
                if (dropping)
                    dropped_rows(Pd, NULL, P, i0, nq, n, drop, b, h, T);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, HS, n, 1.0f,
                            dropping ? Pd : P, n, v, ldv, 0.0f, o + (size_t)i0 * ldo, ldo);
            }
            /* out stored in the format: rounded as it is stored; serial spans, not
             * tr_cpu_round_lowp, whose own parallel region would nest in this one */
            if (lowp)
                store_head_rows(out, o0, C, o, T, HS, format);
        }
        tr_free(P);
        tr_free(views);
    }
}

void tr_cpu_attention_backward(void *dqkv, float *datt, const void *dout, const void *out,
                               const void *qkv, const float *att, int B, int T, int C, int NH,
                               int format, const tr_dropout *drop)
{
    (void)out;  /* the probabilities, formed again, give rowsum(P dP) themselves */
    (void)datt; /* a block's scratch is the thread's own */
    int HS = head_size(C, NH, "attention_backward");
    int ld = 3 * C, nbh = B * NH, dropping = tr_dropout_on(drop);
    float scale = 1.0f / sqrtf((float)HS);
#pragma omp parallel if ((double)nbh * T * T * HS / 2 > ATT_PAR_MIN_MACS && nbh > 1)
    {
        /* q, k, v, dO, and dq, dk, dv before they are stored in the format */
        float *views = views_alloc(7, T, HS, format);
        /* a block's probabilities, their gradient (then the scores'), the dropped ones */
        size_t bs = (size_t)(T < BQ ? T : BQ) * T;
        float *P = blocks_alloc(dropping ? 3 : 2, T), *dP = P + bs;
        float *Pd = dropping ? P + 2 * bs : NULL;
        size_t vs = (size_t)T * HS;
#pragma omp for schedule(static)
        for (int bh = 0; bh < nbh; bh++) {
            int b = bh / NH, h = bh % NH, ldq = ld, ldk = ld, ldv = ld, ldo = C;
            int lowp = tr_is_lowp(format), ldg = lowp ? HS : ld; /* dq, dk, dv's stride */
            size_t off = (size_t)b * T * ld + (size_t)h * HS;
            /* qkv and dout stored in format */
            const float *q = stored_head_view(views, qkv, off, &ldq, T, HS, format);
            const float *k = stored_head_view(views + vs, qkv, off + C, &ldk, T, HS, format);
            const float *v = stored_head_view(views + 2 * vs, qkv, off + 2 * C, &ldv, T, HS,
                                              format);
            float *dq = lowp ? views + 4 * vs : (float *)dqkv + off;
            float *dk = lowp ? views + 5 * vs : dq + C, *dv = lowp ? views + 6 * vs : dq + 2 * C;
            const float *st = att + (size_t)bh * T * STATE_PER_ROW;
            const float *dO = stored_head_view(views + 3 * vs, dout,
                                               (size_t)b * T * C + (size_t)h * HS, &ldo, T, HS,
                                               format);
            /* dK and dV sum over the blocks of query rows */
            for (int t = 0; t < T; t++)
                for (int d = 0; d < HS; d++)
                    dk[(size_t)t * ldg + d] = dv[(size_t)t * ldg + d] = 0.0f;
            for (int i0 = 0; i0 < T; i0 += BQ) {
                int nq = T - i0 < BQ ? T - i0 : BQ, n = i0 + nq; /* keys 0 .. n-1 */
                const float *qb = q + (size_t)i0 * ldq, *dOb = dO + (size_t)i0 * ldo;
                /* forward's scores and probabilities again, the same bits */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, n, HS, scale, qb, ldq, k,
                            ldk, 0.0f, P, n);
                for (int r = 0; r < nq; r++) {
                    const float *sr = st + (size_t)(i0 + r) * 2;
                    row_probs(P + (size_t)r * n, i0 + r, n, sr[0], sr[1]);
                }
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, n, HS, 1.0f, dOb, ldo, v,
                            ldv, 0.0f, dP, n);
                if (dropping) /* dV = (P * M)^T dO; dP = M * (dO V^T) */
                    dropped_rows(Pd, dP, P, i0, nq, n, drop, b, h, T);
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, HS, nq, 1.0f,
                            dropping ? Pd : P, n, dOb, ldo, 1.0f, dv, ldg);
                /* softmax backward, in place: dP becomes dS, the scaled scores' gradient */
                for (int r = 0; r < nq; r++) {
                    int t = i0 + r;
                    const float *p = P + (size_t)r * n;
                    float *d = dP + (size_t)r * n;
                    float s = 0.0f;
                    for (int j = 0; j <= t; j++)
                        s += p[j] * d[j];
                    for (int j = 0; j <= t; j++)
                        d[j] = scale * p[j] * (d[j] - s);
                    for (int j = t + 1; j < n; j++)
                        d[j] = 0.0f;
                }
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, HS, n, 1.0f, dP, n, k,
                            ldk, 0.0f, dq + (size_t)i0 * ldg, ldg);
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, HS, nq, 1.0f, dP, n, qb,
                            ldq, 1.0f, dk, ldg);
            }
            if (lowp) { /* dqkv stored in the format: rounded as stored */
                store_head_rows(dqkv, off, ld, dq, T, HS, format);
                store_head_rows(dqkv, off + C, ld, dk, T, HS, format);
                store_head_rows(dqkv, off + 2 * (size_t)C, ld, dv, T, HS, format);
            }
        }
        tr_free(P);
        tr_free(views);
    }
}

void tr_cpu_attention_decode(void *out, float *scratch, const void *qkv, int T, int C, int NH,
                             int format)
{
    int HS = head_size(C, NH, "attention_decode");
    float scale = 1.0f / sqrtf((float)HS);
    size_t q0 = (size_t)(T - 1) * 3 * C; /* the newest row */
#pragma omp parallel if ((double)NH * T * HS > ATT_PAR_MIN_MACS && NH > 1)
    {
        /* q (one row), k, v and the head's output before it is stored in the format */
        float *views = views_alloc(4, T, HS, format);
        size_t vs = (size_t)T * HS;
#pragma omp for schedule(static)
        for (int h = 0; h < NH; h++) {
            int ldq = 3 * C, ldk = ldq, ldv = ldq;
            const float *q = stored_head_view(views, qkv, q0 + (size_t)h * HS, &ldq, 1, HS, format);
            const float *k =
                stored_head_view(views + vs, qkv, (size_t)h * HS + C, &ldk, T, HS, format);
            const float *v =
                stored_head_view(views + 2 * vs, qkv, (size_t)h * HS + 2 * C, &ldv, T, HS, format);
            float *a = scratch + (size_t)h * T, *o = views ? views + 3 * vs : (float *)out + h * HS;
            /* forward's products and softmax, on its row T-1 only */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, 1, T, HS, scale, q, ldq, k, ldk,
                        0.0f, a, T);
            float mx = a[0];
            for (int j = 1; j < T; j++)
                mx = a[j] > mx ? a[j] : mx;
            for (int j = 0; j < T; j++)
                a[j] = tr_expf(a[j] - mx);
            float sum = 0.0f;
            for (int j = 0; j < T; j++)
                sum += a[j];
            float inv = 1.0f / sum;
            for (int j = 0; j < T; j++)
                a[j] *= inv;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 1, HS, T, 1.0f, a, T, v, ldv,
                        0.0f, o, HS);
            if (views)
                store_head_rows(out, (size_t)h * HS, C, o, 1, HS, format);
        }
        tr_free(views);
    }
}
