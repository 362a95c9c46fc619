/* cpu_vocab_parallel.c: the token embedding and the softmax cross-entropy when the
 * vocabulary is split over tensor-parallel ranks (Megatron's vocab-parallel layers).
 *
 * A rank holds rows [v0, v0 + Vl) of the padded vocabulary, of which the first
 * nreal are real tokens (the rest pad the split). The embedding looks up only the
 * tokens it holds and writes zero rows for the others, so a sum over the ranks is
 * the full lookup. The cross-entropy never gathers logits: each rank reduces its
 * columns to a row maximum, then to a sum of exponentials and the target's logit,
 * and the caller sums those over the ranks between the calls (the comm layer, not
 * the kernels, talks to other ranks). Determinism as in cpu_transformer.c. */
#include "backend/transformer_kernels.h"
#include "backend/cpu_backend.h" /* tr_cpu_linear_backward */
#include "backend/cpu_row_scans.h"
#include "backend/lowp_math.h" /* tr_round_lowp_span */
#include "backend/scalar_math.h"
#include "core/error.h"

#include <math.h>

#define PAR_MIN_ELEMS ((size_t)1 << 15)
#define CH_BLOCK 32

void tr_cpu_embedding_shard_forward(float *out, const int *tok, const float *wte,
                                    const float *wpe, int B, int T, int C, int v0, int Vl)
{
    size_t BT = (size_t)B * T;
#pragma omp parallel for schedule(static) if (BT * C > PAR_MIN_ELEMS)
    for (size_t r = 0; r < BT; r++) {
        long j = (long)tok[r] - v0;
        const float *e = j >= 0 && j < Vl ? wte + (size_t)j * C : NULL;
        const float *p = wpe ? wpe + (r % (size_t)T) * C : NULL;
        float *o = out + r * C;
        for (int c = 0; c < C; c++)
            o[c] = (e ? e[c] : 0.0f) + (p ? p[c] : 0.0f);
    }
}

void tr_cpu_embedding_shard_backward(float *dwte, float *dwpe, const float *dout,
                                     const int *tok, int B, int T, int C, int v0, int Vl)
{
    size_t BT = (size_t)B * T;
    /* two rows may hold the same token and every batch row has the same positions:
     * split the channels, each thread adding rows in row order */
    int nb = (C + CH_BLOCK - 1) / CH_BLOCK;
#pragma omp parallel for schedule(static) if (BT * C > PAR_MIN_ELEMS && nb > 1)
    for (int blk = 0; blk < nb; blk++) {
        int c0 = blk * CH_BLOCK, c1 = c0 + CH_BLOCK < C ? c0 + CH_BLOCK : C;
        for (size_t r = 0; r < BT; r++) {
            const float *d = dout + r * C;
            long j = (long)tok[r] - v0;
            if (j >= 0 && j < Vl) {
                float *gt = dwte + (size_t)j * C;
                for (int c = c0; c < c1; c++)
                    gt[c] += d[c];
            }
            if (dwpe) {
                float *gp = dwpe + (r % (size_t)T) * C;
                for (int c = c0; c < c1; c++)
                    gp[c] += d[c];
            }
        }
    }
}

/* Both read the logits as values of format (rounding being monotonic, the max of the
 * rounded values is the rounded max). */
void tr_cpu_xent_shard_max(float *rowmax, const void *logits, size_t BT, int Vl, int nreal,
                           int format, int lfmt)
{
    int wide = !tr_is_lowp(lfmt);
    size_t n = (size_t)(nreal > 0 ? nreal : 0);
#pragma omp parallel if (BT * (size_t)Vl > PAR_MIN_ELEMS)
    {
        float *row = !wide && n ? tr_alloc(n * sizeof *row, "xent_shard_max row") : NULL;
#pragma omp for schedule(static)
        for (size_t r = 0; r < BT; r++) {
            /* the fp32 logits as they are, their max rounded once */
            const float *x = wide ? (const float *)logits + r * Vl
                                  : tr_stored_view(row, logits, r * Vl, n, lfmt);
            float mx = tr_row_max(-INFINITY, x, n);
            rowmax[r] = tr_round_lowp(mx, format);
        }
        tr_free(row);
    }
}

void tr_cpu_xent_shard_sums(double *sums, const void *logits, const float *rowmax,
                            const int *targets, size_t BT, int Vl, int v0, int nreal, int format,
                            int lfmt)
{
    int lowp = tr_is_lowp(format) || tr_is_lowp(lfmt);
    size_t n = (size_t)(nreal > 0 ? nreal : 0);
#pragma omp parallel if (BT * (size_t)Vl > PAR_MIN_ELEMS)
    {
        float *e = n ? tr_alloc(n * sizeof *e, "xent_shard_sums row") : NULL;
        float *row = lowp && n ? tr_alloc(n * sizeof *row, "xent_shard_sums row") : NULL;
#pragma omp for schedule(static)
        for (size_t r = 0; r < BT; r++) {
            const float *x = tr_stored_view_as(row, logits, r * Vl, n, lfmt, format);
            float mx = rowmax[r];
            long t = (long)targets[r] - v0;
            sums[2 * r + 1] = t >= 0 && t < nreal ? (double)x[t] - mx : 0.0;
            for (int j = 0; j < nreal; j++)
                e[j] = tr_expf(x[j] - mx);
            sums[2 * r] = tr_row_sum_double(e, n);
        }
        tr_free(row);
        tr_free(e);
    }
}

double tr_cpu_xent_shard_finish(float *stats, float *losses, const double *sums,
                                const float *rowmax, size_t BT)
{
    double total = 0.0; /* serial, in row order */
    for (size_t r = 0; r < BT; r++) {
        stats[2 * r] = rowmax[r];
        stats[2 * r + 1] = (float)(1.0 / sums[2 * r]);
        losses[r] = (float)(log(sums[2 * r]) - sums[2 * r + 1]);
        total += losses[r];
    }
    return total;
}

void tr_cpu_xent_linear_backward(float *dinp, float *dw, void *logits, const float *stats,
                                 const int *targets, float scale, size_t BT, int Vl, int v0,
                                 int nreal, const void *inp, const float *w, int C, int format,
                                 int lfmt)
{
    if (lfmt != TR_PREC_FP32)
        tr_fatal(TR_EXIT_SOFTWARE, "bug: xent_linear_backward: the CPU keeps fp32 logits, not "
                 "format %d", lfmt);
    tr_cpu_xent_shard_backward(logits, logits, stats, targets, scale, BT, Vl, v0, nreal, format,
                               lfmt);
    tr_cpu_linear_backward_stored(dinp, dw, NULL, logits, inp, w, (int)BT, C, Vl, format);
}

/* the softmax recomputed as the forward pass left it: exp(x - max) (1 / sum), the two
 * float operations it took there */
void tr_cpu_xent_shard_backward(void *dlogits, const void *logits, const float *stats,
                                const int *targets, float scale, size_t BT, int Vl, int v0,
                                int nreal, int format, int lfmt)
{
    int lowp = tr_is_lowp(format) || tr_is_lowp(lfmt), wide = !tr_is_lowp(lfmt);
    size_t n = (size_t)(nreal > 0 ? nreal : 0);
#pragma omp parallel if (BT * (size_t)Vl > PAR_MIN_ELEMS)
    {
        float *row = lowp && n ? tr_alloc(n * sizeof *row, "xent backward row") : NULL;
        /* 16-bit dlogits: the row made in fp32 here, then stored */
        float *drow = !wide ? tr_alloc((size_t)Vl * sizeof *drow, "xent backward row") : NULL;
#pragma omp for schedule(static)
        for (size_t r = 0; r < BT; r++) {
            /* x may be d (in place): each x[j] is read before d[j] is written */
            const float *x = tr_stored_view_as(row, logits, r * Vl, n, lfmt, format);
            float *d = wide ? (float *)dlogits + r * Vl : drow;
            float mx = stats[2 * r], inv = stats[2 * r + 1];
            long t = (long)targets[r] - v0;
            for (int j = 0; j < nreal; j++) {
                float p = tr_expf(x[j] - mx) * inv;
                d[j] = scale * (p - (j == t ? 1.0f : 0.0f));
            }
            tr_round_lowp_span(d, n, format);
            for (int j = nreal; j < Vl; j++)
                d[j] = 0.0f;
            if (!wide)
                for (int j = 0; j < Vl; j++)
                    tr_stored_store(dlogits, r * Vl + j, d[j], lfmt);
        }
        tr_free(drow);
        tr_free(row);
    }
}
