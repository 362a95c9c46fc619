/* test_vocab_parallel.c: the vocabulary-parallel kernels (cpu_vocab_parallel.c)
 * against the whole-vocabulary kernels that test_transformer.c checks by finite
 * differences. The vocabulary (V = 90 real of Vp = 96) is split over tp = 2 and 3
 * "ranks" inside this process; the sums and maxima that the trainer takes over the
 * tp group are taken here over the shards' arrays. Then every shard's piece must
 * equal the whole kernel's columns: losses and their sum, the softmax's statistics,
 * logit gradients, and for the embedding the sum of the shards' lookups and the rows of
 * the token gradient. Tolerance 1e-6 relative to the largest entry: only the order
 * of float additions differs (the sum of exponentials is split into partial sums);
 * a wrong offset or a missed padded column shows up as an error of order 1. */
#include "backend/lowp_math.h"
#include "backend/transformer_kernels.h"
#include "fd_check.h"
#include "test_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { B = 3, T = 4, BT = B * T, C = 8, V = 90, VP = 96 };

static double max_abs(const float *x, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs(x[i]));
    return m;
}

static void check_xent(int tp)
{
    static float logits[BT * VP], stats[2 * BT], losses[BT], dfull[BT * VP];
    int tgt[BT];
    fd_fill_uniform(logits, BT * VP, -3, 3, 21);
    for (int r = 0; r < BT; r++)
        tgt[r] = (r * 37 + 11) % V;
    double whole = tr_cpu_xent_padded_forward(stats, losses, logits, tgt, B, T, V, VP,
                                              TR_PREC_FP32, TR_PREC_FP32);
    tr_cpu_xent_padded_backward(dfull, logits, stats, tgt, 0.25f, B, T, V, VP, TR_PREC_FP32,
                                TR_PREC_FP32);

    int Vl = VP / tp;
    float *sh = calloc((size_t)tp * BT * Vl, sizeof *sh), *rowmax = calloc((size_t)tp * BT, 4);
    double *sums = calloc((size_t)tp * 2 * BT, sizeof *sums);
    float *sl = calloc((size_t)tp * BT, sizeof *sl), *sst = calloc((size_t)tp * 2 * BT, 4);
    float mx[BT];
    double tot[2 * BT];
    for (int q = 0; q < tp; q++) /* this rank's columns */
        for (int r = 0; r < BT; r++)
            memcpy(sh + ((size_t)q * BT + r) * Vl, logits + (size_t)r * VP + q * Vl,
                   (size_t)Vl * sizeof *sh);
    int nreal[8];
    for (int q = 0; q < tp; q++) {
        nreal[q] = V - q * Vl < 0 ? 0 : (V - q * Vl < Vl ? V - q * Vl : Vl);
        tr_cpu_xent_shard_max(rowmax + (size_t)q * BT, sh + (size_t)q * BT * Vl, BT, Vl,
                              nreal[q], TR_PREC_FP32, TR_PREC_FP32);
    }
    for (int r = 0; r < BT; r++) { /* the MAX over the tp group */
        mx[r] = -INFINITY;
        for (int q = 0; q < tp; q++)
            mx[r] = fmaxf(mx[r], rowmax[(size_t)q * BT + r]);
    }
    for (int q = 0; q < tp; q++)
        tr_cpu_xent_shard_sums(sums + (size_t)q * 2 * BT, sh + (size_t)q * BT * Vl, mx, tgt, BT,
                               Vl, q * Vl, nreal[q], TR_PREC_FP32, TR_PREC_FP32);
    for (int i = 0; i < 2 * BT; i++) { /* the SUM over the tp group */
        tot[i] = 0;
        for (int q = 0; q < tp; q++)
            tot[i] += sums[(size_t)q * 2 * BT + i];
    }
    double worst_s = 0, worst_d = 0, worst_l = 0, loss = 0;
    for (int q = 0; q < tp; q++) {
        float *p = sh + (size_t)q * BT * Vl, *st = sst + (size_t)q * 2 * BT;
        loss = tr_cpu_xent_shard_finish(st, sl + (size_t)q * BT, tot, mx, BT);
        for (int r = 0; r < BT; r++) {
            worst_l = fmax(worst_l, fabs(sl[(size_t)q * BT + r] - losses[r]));
            /* the same max; 1 / sum up to the order of the sum */
            worst_s = fmax(worst_s, fabs(st[2 * r] - stats[2 * r]) +
                                        fabs(st[2 * r + 1] - stats[2 * r + 1]) / stats[2 * r + 1]);
        }
        tr_cpu_xent_shard_backward(p, p, st, tgt, 0.25f, BT, Vl, q * Vl, nreal[q], TR_PREC_FP32,
                                   TR_PREC_FP32);
        for (int r = 0; r < BT; r++)
            for (int j = 0; j < Vl; j++)
                worst_d = fmax(worst_d,
                               fabs(p[(size_t)r * Vl + j] - dfull[(size_t)r * VP + q * Vl + j]));
    }
    printf("xent tp=%d: loss %.9g vs %.9g, worst |dloss| %.2e, |dstats| %.2e, |ddlogit| %.2e\n",
           tp, loss, whole, worst_l, worst_s, worst_d);
    CHECK(fabs(loss - whole) <= 1e-6 * fabs(whole), "tp %d: loss %.9g vs %.9g", tp, loss, whole);
    CHECK(worst_l <= 1e-6 * max_abs(losses, BT), "tp %d: losses off by %.2e", tp, worst_l);
    CHECK(worst_s <= 1e-6, "tp %d: statistics off by %.2e", tp, worst_s);
    CHECK(worst_d <= 1e-6 * max_abs(dfull, BT * VP), "tp %d: dlogits off by %.2e", tp,
          worst_d);
    free(sh), free(rowmax), free(sums), free(sl), free(sst);
}

static void check_embedding(int tp)
{
    static float wte[VP * C], wpe[T * C], out[BT * C], dout[BT * C], dwte[VP * C], dwpe[T * C];
    static float sum[BT * C], part[BT * C], dwte_q[VP * C], dwpe_q[T * C];
    int tok[BT];
    fd_fill_uniform(wte, VP * C, -1, 1, 31);
    fd_fill_uniform(wpe, T * C, -1, 1, 32);
    fd_fill_uniform(dout, BT * C, -1, 1, 33);
    for (int r = 0; r < BT; r++)
        tok[r] = (r * 53 + 7) % V;
    tr_cpu_embedding_forward(out, tok, wte, wpe, B, T, C, V);
    memset(dwte, 0, sizeof dwte);
    memset(dwpe, 0, sizeof dwpe);
    tr_cpu_embedding_backward(dwte, dwpe, dout, tok, B, T, C, V);
    int Vl = VP / tp;
    memset(sum, 0, sizeof sum);
    double worst_w = 0, worst_p = 0;
    for (int q = 0; q < tp; q++) {
        /* wpe is added by one rank only, as the trainer does */
        tr_cpu_embedding_shard_forward(part, tok, wte + (size_t)q * Vl * C, q ? NULL : wpe, B, T,
                                       C, q * Vl, Vl);
        for (int i = 0; i < BT * C; i++)
            sum[i] += part[i];
        memset(dwte_q, 0, sizeof dwte_q);
        memset(dwpe_q, 0, sizeof dwpe_q);
        tr_cpu_embedding_shard_backward(dwte_q, dwpe_q, dout, tok, B, T, C, q * Vl, Vl);
        for (int i = 0; i < Vl * C; i++)
            worst_w = fmax(worst_w, fabs(dwte_q[i] - dwte[(size_t)q * Vl * C + i]));
        for (int i = 0; i < T * C; i++)
            worst_p = fmax(worst_p, fabs(dwpe_q[i] - dwpe[i]));
    }
    double worst_o = 0;
    for (int i = 0; i < BT * C; i++)
        worst_o = fmax(worst_o, fabs(sum[i] - out[i]));
    printf("embedding tp=%d: worst |dout| %.2e, |ddwte| %.2e, |ddwpe| %.2e\n", tp, worst_o,
           worst_w, worst_p);
    CHECK(worst_o == 0, "tp %d: the shards' lookups sum to the lookup (off by %.2e)", tp,
          worst_o);
    CHECK(worst_w == 0 && worst_p == 0, "tp %d: token/position gradients off by %.2e/%.2e", tp,
          worst_w, worst_p);
}

int main(void)
{
    for (int tp = 2; tp <= 3; tp++) {
        check_xent(tp);
        check_embedding(tp);
    }
    return tr_test_finish();
}
