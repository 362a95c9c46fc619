/* cpu_transformer.c: the element-wise and row-wise kernels of a GPT-2 style model on
 * the CPU: token + position embedding, layernorm, GELU (and linear then GELU),
 * residual add and softmax cross-entropy over a padded vocabulary (attention in
 * cpu_attention.c).
 *
 * Dimension letters and the gradient rule as in transformer_kernels.h. Row-wise work
 * runs in parallel over the B*T rows; each output element is written by one thread.
 * Parameter gradients are sums over rows: they are computed in parallel over blocks
 * of channels, each thread adding the rows serially in row order, so the sum order
 * of every element is fixed whatever the thread count and results are bit-identical
 * run to run. Parallel loops carry an if() clause: small tensors stay on one thread,
 * where a fork/join would cost more than the work. */
#include "backend/transformer_kernels.h"
#include "backend/cpu_backend.h" /* tr_cpu_linear_forward, tr_cpu_round_lowp */
#include "backend/cpu_row_scans.h"
#include "backend/gelu_math.h"
#include "backend/lowp_math.h" /* tr_round_lowp_span */
#include "core/error.h"

#include <limits.h>
#include <math.h>

/* Elements below which a loop runs serially: about 10 us of simple work. */
#define PAR_MIN_ELEMS ((size_t)1 << 15)
/* Channels per block of a parameter-gradient reduction: 32 floats are two cache
 * lines per row, enough to vectorise, and C = 768 still gives 24 blocks to share. */
#define CH_BLOCK 32

static int nblocks(int C) { return (C + CH_BLOCK - 1) / CH_BLOCK; }

/* ---- embedding ------------------------------------------------------------------ */

/* A token outside [0, V) would index past wte: the data reader validates tokens, so
 * reaching this is a bug, reported here, serially, rather than being undefined
 * behaviour inside a parallel loop. */
static void check_tokens(const int *tok, size_t n, int V, const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (tok[i] < 0 || tok[i] >= V)
            tr_fatal(TR_EXIT_SOFTWARE, "%s: token %d at position %zu is outside [0, %d)", what,
                     tok[i], i, V);
}

void tr_cpu_embedding_forward(float *out, const int *tok, const float *wte, const float *wpe,
                              int B, int T, int C, int V)
{
    check_tokens(tok, (size_t)B * T, V, "embedding_forward");
    tr_cpu_embedding_shard_forward(out, tok, wte, wpe, B, T, C, 0, V);
}

void tr_cpu_embedding_backward(float *dwte, float *dwpe, const float *dout, const int *tok,
                               int B, int T, int C, int V)
{
    check_tokens(tok, (size_t)B * T, V, "embedding_backward");
    tr_cpu_embedding_shard_backward(dwte, dwpe, dout, tok, B, T, C, 0, V);
}

/* ---- layernorm ------------------------------------------------------------------ */

void tr_cpu_layernorm_forward(void *out, float *mean, float *rstd, const void *inp,
                              const float *weight, const float *bias, int B, int T, int C,
                              int format)
{
    size_t BT = (size_t)B * T;
    int lowp = tr_is_lowp(format);
#pragma omp parallel if (BT * C > PAR_MIN_ELEMS)
    {
        float *row = lowp ? tr_alloc((size_t)C * sizeof *row, "layernorm_forward row") : NULL;
#pragma omp for schedule(static)
        for (size_t r = 0; r < BT; r++) {
            const float *x = tr_stored_view(row, inp, r * C, (size_t)C, format);
            /* two passes: the variance of x - mean does not cancel catastrophically when
             * the mean is large next to the spread, as E[x^2] - E[x]^2 would */
            float s = 0.0f;
            for (int c = 0; c < C; c++)
                s += x[c];
            float m = s / (float)C;
            float v = 0.0f;
            for (int c = 0; c < C; c++) {
                float dx = x[c] - m;
                v += dx * dx;
            }
            float rs = 1.0f / sqrtf(v / (float)C + TR_LAYERNORM_EPS); /* biased variance */
            if (lowp) { /* stored in the format, rounded as it is stored */
                for (int c = 0; c < C; c++)
                    tr_stored_store(out, r * C + c, (x[c] - m) * rs * weight[c] + bias[c], format);
            } else {
                float *o = (float *)out + r * C;
                for (int c = 0; c < C; c++)
                    o[c] = (x[c] - m) * rs * weight[c] + bias[c];
            }
            mean[r] = m;
            rstd[r] = rs;
    }
        tr_free(row);
    }
}

/* With n = (x - mean) rstd and y = n w + b, per row:
 *   dinp = rstd (g - mean_c(g) - n mean_c(g n)),  g = w dout,
 * and, summed over rows, dweight += dout n, dbias += dout. dout is read as values of
 * format (a per-thread row copy, rounded); dinp is stored rounded, after the add into
 * it where accumulate is set. */
void tr_cpu_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                               const void *inp, const float *weight, const float *mean,
                               const float *rstd, int B, int T, int C, int format,
                               int accumulate)
{
    size_t BT = (size_t)B * T;
    int lowp = tr_is_lowp(format);
#pragma omp parallel if (BT * C > PAR_MIN_ELEMS)
    {
        float *row = lowp ? tr_alloc(2 * (size_t)C * sizeof *row, "layernorm_backward row")
                          : NULL;
#pragma omp for schedule(static)
        for (size_t r = 0; r < BT; r++) {
            const float *x = tr_stored_view(row ? row + C : NULL, inp, r * C, (size_t)C, format);
            const float *d = tr_lowp_view(row, dout + r * C, (size_t)C, format);
            float *di = dinp + r * C;
            float m = mean[r], rs = rstd[r];
            float sg = 0.0f, sgn = 0.0f;
            for (int c = 0; c < C; c++) {
                float g = weight[c] * d[c];
                sg += g;
                sgn += g * (x[c] - m) * rs;
            }
            sg /= (float)C;
            sgn /= (float)C;
            if (accumulate) {
                for (int c = 0; c < C; c++) {
                    float n = (x[c] - m) * rs;
                    di[c] += rs * (weight[c] * d[c] - sg - n * sgn);
                }
            } else {
                for (int c = 0; c < C; c++) {
                    float n = (x[c] - m) * rs;
                    di[c] = rs * (weight[c] * d[c] - sg - n * sgn);
                }
            }
            tr_round_lowp_span(di, (size_t)C, format);
        }
        tr_free(row);
    }

    int nb = nblocks(C);
#pragma omp parallel for schedule(static) if (BT * C > PAR_MIN_ELEMS && nb > 1)
    for (int blk = 0; blk < nb; blk++) {
        int c0 = blk * CH_BLOCK, c1 = c0 + CH_BLOCK < C ? c0 + CH_BLOCK : C;
        float dbuf[CH_BLOCK], xbuf[CH_BLOCK];
        for (size_t r = 0; r < BT; r++) {
            /* indexed from c0 */
            const float *x = tr_stored_view(xbuf, inp, r * C + c0, (size_t)(c1 - c0), format);
            const float *d = tr_lowp_view(dbuf, dout + r * C + c0, (size_t)(c1 - c0), format);
            float m = mean[r], rs = rstd[r];
            for (int c = c0; c < c1; c++) {
                dweight[c] += d[c - c0] * ((x[c - c0] - m) * rs);
                dbias[c] += d[c - c0];
            }
        }
    }
}

/* ---- GELU and residual ---------------------------------------------------------- */

void tr_cpu_gelu_forward(float *out, const float *inp, size_t n)
{
#pragma omp parallel for schedule(static) if (n > PAR_MIN_ELEMS / 8)
    for (size_t i = 0; i < n; i++)
        out[i] = tr_gelu(inp[i]);
}

/* Element-wise kernels that round their output work in blocks of this many floats: the
 * block is rounded while it is in L1, and the loop that computes it stays a plain one
 * that vectorises. */
#define ROUND_BLOCK 2048

void tr_cpu_gelu_backward(float *dinp, const void *inp, const float *dout, size_t n,
                          int format)
{
    size_t nb = (n + ROUND_BLOCK - 1) / ROUND_BLOCK;
#pragma omp parallel for schedule(static) if (n > PAR_MIN_ELEMS / 8)
    for (size_t blk = 0; blk < nb; blk++) {
        size_t i0 = blk * ROUND_BLOCK, i1 = i0 + ROUND_BLOCK < n ? i0 + ROUND_BLOCK : n;
        size_t len = i1 - i0;
        float xbuf[ROUND_BLOCK], dbuf[ROUND_BLOCK];
        const float *x = tr_stored_view(xbuf, inp, i0, len, format);
        const float *d = tr_lowp_view(dbuf, dout + i0, len, format);
        float *o = dinp + i0;
        for (size_t i = 0; i < len; i++)
            o[i] = tr_gelu_grad(x[i]) * d[i];
        tr_round_lowp_span(o, len, format);
    }
}

void tr_cpu_linear_gelu_forward(void *pre, void *out, const void *inp, const float *w,
                                const float *b, int B, int IN, int OUT, int format,
                                float *scratch, float *scratch_in)
{
    size_t n = (size_t)B * OUT;
    if (!tr_is_lowp(format)) { /* fp32: the product in pre itself, GELU from it */
        tr_cpu_linear_forward(pre, inp, w, b, B, IN, OUT);
        tr_cpu_gelu_forward(out, pre, n);
        return;
    }
    tr_cpu_linear_forward_stored(scratch, inp, w, b, B, IN, OUT, format, scratch_in);
    size_t nb = (n + ROUND_BLOCK - 1) / ROUND_BLOCK;
#pragma omp parallel for schedule(static) if (n > PAR_MIN_ELEMS / 8)
    for (size_t blk = 0; blk < nb; blk++) {
        size_t i0 = blk * ROUND_BLOCK, i1 = i0 + ROUND_BLOCK < n ? i0 + ROUND_BLOCK : n;
        float p[ROUND_BLOCK], g[ROUND_BLOCK];
        for (size_t i = i0; i < i1; i++)
            p[i - i0] = tr_round_lowp(scratch[i], format);
        for (size_t i = 0; i < i1 - i0; i++) /* a plain loop, as tr_cpu_gelu_forward's */
            g[i] = tr_gelu(p[i]);
        for (size_t i = i0; i < i1; i++) {
            tr_stored_store(pre, i, p[i - i0], format);
            tr_stored_store(out, i, g[i - i0], format);
        }
    }
}

void tr_cpu_mlp_backward(float *dinp, float *dw_fc, float *db_fc, float *dw_proj, float *db_proj,
                         const float *dout, const void *inp, const void *pre, const void *hid,
                         const float *w_fc, const float *w_proj, int B, int IN, int HID,
                         int format, float *scratch)
{
    tr_cpu_linear_backward_stored(scratch, dw_proj, db_proj, dout, hid, w_proj, B, HID, IN,
                                  format);
    tr_cpu_gelu_backward(scratch, pre, scratch, (size_t)(B > 0 ? B : 0) * (HID > 0 ? HID : 0),
                         format);
    tr_cpu_linear_backward_stored(dinp, dw_fc, db_fc, scratch, inp, w_fc, B, IN, HID, format);
}

/* Backward of out = a + b is da = db = dout: nothing to compute. The residual
 * stream's gradient accumulates, so the model adds dout into (or hands on) the
 * stream's gradient buffer instead of calling a kernel. */
void tr_cpu_residual_forward(void *out, const void *a, const float *b, size_t n, int format)
{
    size_t nb = (n + ROUND_BLOCK - 1) / ROUND_BLOCK;
    int lowp = tr_is_lowp(format);
#pragma omp parallel for schedule(static) if (n > PAR_MIN_ELEMS)
    for (size_t blk = 0; blk < nb; blk++) {
        size_t i0 = blk * ROUND_BLOCK, i1 = i0 + ROUND_BLOCK < n ? i0 + ROUND_BLOCK : n;
        size_t len = i1 - i0;
        float abuf[ROUND_BLOCK], bbuf[ROUND_BLOCK], obuf[ROUND_BLOCK];
        /* the block is read whole before any of it is written: out may alias a */
        const float *ar = tr_stored_view(abuf, a, i0, len, format);
        const float *br = tr_lowp_view(bbuf, b + i0, len, format);
        float *o = lowp ? obuf : (float *)out + i0;
        for (size_t i = 0; i < len; i++)
            o[i] = ar[i] + br[i];
        if (lowp)
            for (size_t i = 0; i < len; i++)
                tr_stored_store(out, i0 + i, o[i], format);
    }
}

void tr_cpu_narrow_stored(void *out, const float *inp, size_t n, int format)
{
#pragma omp parallel for schedule(static) if (n > PAR_MIN_ELEMS)
    for (size_t i = 0; i < n; i++)
        tr_stored_store(out, i, inp[i], format);
}

/* Four elements per Philox call (dropout_math.h): the groups of four global indices
 * that meet [base, base + n), each thread its own groups. */
void tr_cpu_dropout(float *out, const float *inp, size_t n, const tr_dropout *d)
{
    if (!n)
        return;
    uint64_t g0 = d->base >> 2, ng = ((d->base + n - 1) >> 2) - g0 + 1;
#pragma omp parallel for schedule(static) if (n > PAR_MIN_ELEMS)
    for (uint64_t k = 0; k < ng; k++) {
        uint32_t r[4];
        tr_philox4x32(r, d->seed, d->stream, g0 + k);
        for (int w = 0; w < 4; w++) {
            uint64_t e = (g0 + k) * 4 + (uint64_t)w;
            if (e < d->base || e - d->base >= n)
                continue;
            size_t i = (size_t)(e - d->base);
            out[i] = inp[i] * (r[w] < d->threshold ? 0.0f : d->scale);
        }
    }
}

/* ---- a language model's logits --------------------------------------------------- */

/* fp32: the product as linear_forward_stored leaves it, rounded where it is read (a
 * 16-bit copy would save memory here, not time: the CPU's math is fp32) */
int tr_cpu_logits_format(int format, int C, int Vl)
{
    (void)format, (void)C, (void)Vl;
    return TR_PREC_FP32;
}

void tr_cpu_lm_head_forward(void *logits, const void *inp, const float *w, size_t BT, int C,
                            int Vl, int format, int lfmt, float *scratch)
{
    if (lfmt != TR_PREC_FP32)
        tr_fatal(TR_EXIT_SOFTWARE, "bug: lm_head_forward: the CPU keeps fp32 logits, not "
                 "format %d", lfmt);
    if (BT > (size_t)INT_MAX)
        tr_fatal(TR_EXIT_SOFTWARE, "lm_head_forward: %zu rows", BT);
    tr_cpu_linear_forward_stored(logits, inp, w, NULL, (int)BT, C, Vl, format, scratch);
}

/* ---- softmax cross-entropy over a padded vocabulary ----------------------------- */

double tr_cpu_xent_padded_forward(float *stats, float *losses, const void *logits,
                                  const int *targets, int B, int T, int V, int Vp, int format,
                                  int lfmt)
{
    size_t BT = (size_t)B * T;
    if (V < 1 || V > Vp)
        tr_fatal(TR_EXIT_SOFTWARE, "xent_padded_forward: V = %d not in [1, Vp = %d]", V, Vp);
    check_tokens(targets, BT, V, "xent_padded_forward");
    int lowp = tr_is_lowp(format) || tr_is_lowp(lfmt);
#pragma omp parallel if (BT * Vp > PAR_MIN_ELEMS)
    {
        float *e = tr_alloc((size_t)V * sizeof *e, "xent_padded_forward row");
        float *row = lowp ? tr_alloc((size_t)V * sizeof *row, "xent_padded_forward row") : NULL;
#pragma omp for schedule(static)
        for (size_t r = 0; r < BT; r++) {
            /* the logits as values of format */
            const float *x = tr_stored_view_as(row, logits, r * Vp, (size_t)V, lfmt, format);
            float mx = tr_row_max(x[0], x, (size_t)V);
            /* -log softmax[target] = log(sum) - (x[target] - max), exact even where the
             * probability underflows */
            double xt = (double)x[targets[r]] - mx;
            /* subtracting the max keeps every exp in (0, 1]; tr_expf vectorises (libm's
             * expf would not), the sum in double in a fixed order: the same every run */
            for (int j = 0; j < V; j++)
                e[j] = tr_expf(x[j] - mx);
            double sum = tr_row_sum_double(e, (size_t)V);
            stats[2 * r] = mx;
            stats[2 * r + 1] = (float)(1.0 / sum);
            losses[r] = (float)(log(sum) - xt);
        }
        tr_free(row);
        tr_free(e);
    }
    double total = 0.0; /* serial, in row order: the same sum every run */
    for (size_t r = 0; r < BT; r++)
        total += losses[r];
    return total;
}

void tr_cpu_xent_padded_backward(void *dlogits, const void *logits, const float *stats,
                                 const int *targets, float scale, int B, int T, int V, int Vp,
                                 int format, int lfmt)
{
    size_t BT = (size_t)B * T;
    check_tokens(targets, BT, V, "xent_padded_backward");
    tr_cpu_xent_shard_backward(dlogits, logits, stats, targets, scale, BT, Vp, 0, V, format,
                               lfmt);
}
