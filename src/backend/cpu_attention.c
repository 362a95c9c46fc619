/* cpu_attention.c: the core of causal multi-head self-attention on the CPU.
 *
 * Per (batch, head), with Q, K, V the head's T x HS slices of qkv (row stride 3C):
 *   S = Q K^T / sqrt(HS);  A = softmax over each row t of S[t, 0..t], 0 beyond;
 *   O = A V  (written to the head's columns of out, row stride C).
 * Backward, from dO:
 *   dA = dO V^T;  dV = A^T dO;  dS = A * (dA - rowsum(A * dA)) / sqrt(HS) (0 beyond t);
 *   dQ = dS K;  dK = dS^T Q.
 * The products are single-threaded cblas_sgemm calls inside an OpenMP loop over the
 * B*NH heads (the project's BLAS policy, see cpu_gemm.c). The full T x T products are
 * formed and the future half masked: it costs up to 2x in the score GEMMs but keeps
 * every product one BLAS call. Masked probabilities are stored as exact zeros, so
 * future rows of V (and K, Q) contribute 0 * v = +0 to past outputs and cannot
 * change them. Each head writes only its own slices of out, att and dqkv, so no two
 * threads write the same element and results are bit-identical run to run.
 * In bf16/fp16-mixed, qkv, out and dqkv are stored as 16-bit values and dO is read as
 * values of the format: each thread widens (or rounds) its head's slices into copies
 * of its own (T x HS each) before the BLAS reads them, and stores its out, dq, dk and
 * dv from such copies.
 * Dropout (transformer_kernels.h): each thread forms its head's dropped probabilities
 * A * M in a T x T buffer of its own, drawing M element by element (dropout_math.h),
 * in forward for O and again in backward for dV and dA. */
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

/* Row-wise causal softmax of the T x T scores in place: row t over columns 0..t. */
static void causal_softmax(float *A, int T)
{
    for (int t = 0; t < T; t++) {
        float *a = A + (size_t)t * T;
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
        for (int j = t + 1; j < T; j++)
            a[j] = 0.0f;
    }
}

size_t tr_cpu_attention_state_floats(int B, int T, int NH)
{
    return (size_t)B * NH * T * T;
}

/* f[j] = M's factor of (t, j) for j <= t of head (b, h): one Philox call for j and
 * j + 8 (dropout_math.h's groups), half of the row's other calls are row t ^ 8's */
static void row_factors(float *f, int t, int T, const tr_dropout *d, int b, int h)
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

/* Ad = A * M for head (b, h) of the call: the causal part of each row, zeros beyond;
 * and where dA is not NULL, dA *= M over the causal part (the gradient of A from that
 * of A * M), from the same draws */
static void dropped_probs(float *Ad, float *dA, const float *A, int T, const tr_dropout *d, int b,
                          int h)
{
    for (int t = 0; t < T; t++) {
        const float *a = A + (size_t)t * T;
        float *o = Ad + (size_t)t * T;
        row_factors(o, t, T, d, b, h);
        if (dA)
            for (int j = 0; j <= t; j++)
                dA[(size_t)t * T + j] *= o[j];
        for (int j = 0; j <= t; j++)
            o[j] *= a[j];
        for (int j = t + 1; j < T; j++)
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
#pragma omp parallel if ((double)nbh * T * T * HS > ATT_PAR_MIN_MACS && nbh > 1)
    {
        /* q, k, v, and the head's output before it is stored in the format */
        float *views = views_alloc(4, T, HS, format);
        float *Ad = dropping ? tr_alloc((size_t)T * T * sizeof(float), "attention dropout")
                             : NULL;
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
            float *A = att + (size_t)bh * T * T;
            size_t o0 = (size_t)b * T * C + (size_t)h * HS; /* the head's first element */
            int lowp = tr_is_lowp(format), ldo = lowp ? HS : C;
            float *o = lowp ? views + 3 * vs : (float *)out + o0;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, HS, scale, q, ldq, k, ldk,
                        0.0f, A, T);
            causal_softmax(A, T);
            if (dropping)
                dropped_probs(Ad, NULL, A, T, drop, b, h);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, HS, T, 1.0f,
                        dropping ? Ad : A, T, v, ldv, 0.0f, o, ldo);
            /* out (stored in the format: rounded as it is stored) and the probabilities
             * stored for backward, as the model stores activations; serial spans, not
             * tr_cpu_round_lowp, whose own parallel region would nest in this one */
            if (lowp)
                store_head_rows(out, o0, C, o, T, HS, format);
            tr_round_lowp_span(A, (size_t)T * T, format);
        }
        tr_free(Ad);
        tr_free(views);
    }
}

void tr_cpu_attention_backward(void *dqkv, float *datt, const void *dout, const void *out,
                               const void *qkv, const float *att, int B, int T, int C, int NH,
                               int format, const tr_dropout *drop)
{
    (void)out; /* the saved probabilities already hold what the GPU recomputes from it */
    int HS = head_size(C, NH, "attention_backward");
    int ld = 3 * C, nbh = B * NH, dropping = tr_dropout_on(drop);
    float scale = 1.0f / sqrtf((float)HS);
#pragma omp parallel if ((double)nbh * T * T * HS > ATT_PAR_MIN_MACS && nbh > 1)
    {
        /* q, k, v, dO, and dq, dk, dv before they are stored in the format */
        float *views = views_alloc(7, T, HS, format);
        float *Ad = dropping ? tr_alloc((size_t)T * T * sizeof(float), "attention dropout")
                             : NULL;
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
            const float *A = att + (size_t)bh * T * T;
            float *dA = datt + (size_t)bh * T * T;
            const float *dO = stored_head_view(views + 3 * vs, dout,
                                               (size_t)b * T * C + (size_t)h * HS, &ldo, T, HS,
                                               format);

            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, HS, 1.0f, dO, ldo, v, ldv,
                        0.0f, dA, T);
            if (dropping) { /* dV = (A * M)^T dO; dA = M * (dO V^T) */
                dropped_probs(Ad, dA, A, T, drop, b, h);
            }
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, HS, T, 1.0f,
                        dropping ? Ad : A, T, dO, ldo, 0.0f, dv, ldg);
            /* softmax backward, in place: dA becomes dS, the gradient of the scaled scores */
            for (int t = 0; t < T; t++) {
                const float *a = A + (size_t)t * T;
                float *d = dA + (size_t)t * T;
                float s = 0.0f;
                for (int j = 0; j <= t; j++)
                    s += a[j] * d[j];
                for (int j = 0; j <= t; j++)
                    d[j] = scale * a[j] * (d[j] - s);
                for (int j = t + 1; j < T; j++)
                    d[j] = 0.0f;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, HS, T, 1.0f, dA, T, k, ldk,
                        0.0f, dq, ldg);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, HS, T, 1.0f, dA, T, q, ldq,
                        0.0f, dk, ldg);
            if (lowp) { /* dqkv stored in the format: rounded as stored */
                store_head_rows(dqkv, off, ld, dq, T, HS, format);
                store_head_rows(dqkv, off + C, ld, dk, T, HS, format);
                store_head_rows(dqkv, off + 2 * (size_t)C, ld, dv, T, HS, format);
            }
        }
        tr_free(Ad);
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
