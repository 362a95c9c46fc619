/* cpu_kernels.c: the CPU kernel table and its element-wise, pooling, linear and
 * softmax cross-entropy kernels (convolution in cpu_conv.c, optimizers in
 * cpu_optim.c, GEMM in cpu_gemm.c).
 *
 * Dimension letters as in kernels.h. Loops keep the innermost index contiguous so
 * that the compiler vectorises them; the parallel loops carry an if() clause so that
 * small tensors stay on one thread, where a fork/join would cost more than the work.
 * No loop here reduces floating point across threads: each output element is
 * written by one thread, in a fixed order, so results are bit-identical run to run. */
#include "backend/cpu_backend.h"
#include "backend/lowp_math.h"
#include "backend/transformer_kernels.h"
#include "core/error.h"

#include <math.h>
#include <string.h>

/* Elements below which a loop runs serially: about 10 us of simple work. */
#define PAR_MIN_ELEMS ((size_t)1 << 15)
/* Column block of the bias-gradient reduction: one thread sums over the batch for
 * these columns, so the sum order never depends on the thread count. */
#define BIAS_BLOCK 256

void tr_cpu_linear_forward(float *out, const float *inp, const float *w, const float *b, int B,
                           int IN, int OUT)
{
    /* Write the bias first and let the GEMM accumulate onto it (beta = 1): one pass
     * over out instead of a GEMM pass and then a bias pass. */
    float beta = 0.0f;
    if (b) {
#pragma omp parallel for schedule(static) if ((size_t)B * OUT > PAR_MIN_ELEMS)
        for (int i = 0; i < B; i++)
            memcpy(out + (size_t)i * OUT, b, (size_t)OUT * sizeof(float));
        beta = 1.0f;
    }
    tr_cpu_gemm(0, 1, B, OUT, IN, 1.0f, inp, IN, w, IN, beta, out, OUT);
}

void tr_cpu_linear_backward(float *dinp, float *dw, float *db, const float *dout,
                            const float *inp, const float *w, int B, int IN, int OUT)
{
    if (dinp) /* dinp[B,IN] = dout[B,OUT] w[OUT,IN] */
        tr_cpu_gemm(0, 0, B, IN, OUT, 1.0f, dout, OUT, w, IN, 0.0f, dinp, IN);
    /* dw[OUT,IN] += dout^T[OUT,B] inp[B,IN] */
    tr_cpu_gemm(1, 0, OUT, IN, B, 1.0f, dout, OUT, inp, IN, 1.0f, dw, IN);
    if (!db)
        return;
    int nblk = (OUT + BIAS_BLOCK - 1) / BIAS_BLOCK;
#pragma omp parallel for schedule(static) if ((size_t)B * OUT > PAR_MIN_ELEMS && nblk > 1)
    for (int blk = 0; blk < nblk; blk++) {
        int j0 = blk * BIAS_BLOCK, j1 = j0 + BIAS_BLOCK < OUT ? j0 + BIAS_BLOCK : OUT;
        for (int i = 0; i < B; i++) {
            const float *d = dout + (size_t)i * OUT;
            for (int j = j0; j < j1; j++)
                db[j] += d[j];
        }
    }
}

void tr_cpu_relu_forward(float *out, const float *inp, size_t n)
{
    /* x < 0 ? 0 : x rather than fmaxf(x, 0): a NaN passes through, so a diverging
     * run shows up in the loss instead of being silently zeroed here. */
#pragma omp parallel for schedule(static) if (n > PAR_MIN_ELEMS)
    for (size_t i = 0; i < n; i++)
        out[i] = inp[i] < 0.0f ? 0.0f : inp[i];
}

void tr_cpu_relu_backward(float *dinp, const float *dout, const float *out, size_t n)
{
#pragma omp parallel for schedule(static) if (n > PAR_MIN_ELEMS)
    for (size_t i = 0; i < n; i++) {
        float d = dout[i]; /* loaded unconditionally so the select vectorises */
        dinp[i] = out[i] > 0.0f ? d : 0.0f;
    }
}

void tr_cpu_maxpool_forward(float *out, int *argmax, const float *inp, int B, int C, int H,
                            int W, int k)
{
    int Ho = H / k, Wo = W / k;
    long planes = (long)B * C;
#pragma omp parallel for schedule(static) if ((size_t)planes * H * W > PAR_MIN_ELEMS)
    for (long p = 0; p < planes; p++) {
        const float *x = inp + (size_t)p * H * W;
        float *y = out + (size_t)p * Ho * Wo;
        int *am = argmax + (size_t)p * Ho * Wo;
        for (int oy = 0; oy < Ho; oy++) {
            for (int ox = 0; ox < Wo; ox++) {
                int best = oy * k * W + ox * k; /* first element wins ties, as in PyTorch */
                for (int dy = 0; dy < k; dy++) {
                    int row = (oy * k + dy) * W + ox * k;
                    for (int dx = 0; dx < k; dx++)
                        if (x[row + dx] > x[best])
                            best = row + dx;
                }
                y[oy * Wo + ox] = x[best];
                am[oy * Wo + ox] = best;
            }
        }
    }
}

void tr_cpu_maxpool_backward(float *dinp, const float *dout, const int *argmax, int B, int C,
                             int H, int W, int k)
{
    int Ho = H / k, Wo = W / k;
    long planes = (long)B * C;
#pragma omp parallel for schedule(static) if ((size_t)planes * H * W > PAR_MIN_ELEMS)
    for (long p = 0; p < planes; p++) {
        float *dx = dinp + (size_t)p * H * W;
        const float *dy = dout + (size_t)p * Ho * Wo;
        const int *am = argmax + (size_t)p * Ho * Wo;
        memset(dx, 0, (size_t)H * W * sizeof(float));
        /* windows do not overlap (stride k), so each input gets at most one term */
        for (int o = 0; o < Ho * Wo; o++)
            dx[am[o]] = dy[o];
    }
}

void tr_cpu_softmax_xent_forward(float *probs, float *losses, const float *logits,
                                 const int *labels, int B, int V, double *loss_sum,
                                 long *correct)
{
    /* A label outside [0, V) would index past the row: the data reader validates
     * labels, so reaching this is a bug, and it is checked here, serially, rather
     * than being undefined behaviour inside the parallel loop. */
    for (int i = 0; i < B; i++)
        if (labels[i] < 0 || labels[i] >= V)
            tr_fatal(TR_EXIT_SOFTWARE, "softmax_xent: label %d of sample %d is outside [0, %d)",
                     labels[i], i, V);
    long hits = 0; /* an integer sum is exact, so reduction order cannot matter */
#pragma omp parallel for schedule(static) reduction(+ : hits) if ((size_t)B * V > PAR_MIN_ELEMS)
    for (int i = 0; i < B; i++) {
        const float *x = logits + (size_t)i * V;
        float *p = probs + (size_t)i * V;
        int amax = 0;
        for (int j = 1; j < V; j++)
            if (x[j] > x[amax])
                amax = j;
        float mx = x[amax]; /* subtracting the max keeps every exp in (0, 1] */
        double sum = 0.0;
        for (int j = 0; j < V; j++) {
            p[j] = expf(x[j] - mx);
            sum += p[j];
        }
        float inv = (float)(1.0 / sum);
        for (int j = 0; j < V; j++)
            p[j] *= inv;
        /* -log softmax[label] = log(sum) - (x[label] - max), exact even when the
         * probability underflows to zero */
        losses[i] = (float)(log(sum) - ((double)x[labels[i]] - mx));
        hits += amax == labels[i];
    }
    double total = 0.0; /* serial, in sample order: the same sum every run */
    for (int i = 0; i < B; i++)
        total += losses[i];
    *loss_sum = total;
    *correct = hits;
}

void tr_cpu_softmax_xent_backward(float *dlogits, const float *probs, const int *labels,
                                  float scale, int B, int V)
{
#pragma omp parallel for schedule(static) if ((size_t)B * V > PAR_MIN_ELEMS)
    for (int i = 0; i < B; i++) {
        const float *p = probs + (size_t)i * V;
        float *d = dlogits + (size_t)i * V;
        for (int j = 0; j < V; j++)
            d[j] = scale * p[j];
        d[labels[i]] = scale * (p[labels[i]] - 1.0f);
    }
}

void tr_cpu_scale(float *x, size_t n, float a)
{
#pragma omp parallel for schedule(static) if (n > PAR_MIN_ELEMS)
    for (size_t i = 0; i < n; i++)
        x[i] *= a;
}

void tr_cpu_round_lowp(float *x, size_t n, int format)
{
    if (format == TR_PREC_FP32)
        return;
#pragma omp parallel for schedule(static) if (n > PAR_MIN_ELEMS)
    for (size_t i = 0; i < n; i++)
        x[i] = tr_round_lowp(x[i], format);
}

void tr_cpu_rows_argmax(int *idx, float *val, const float *x, size_t rows, int ld, int n)
{
#pragma omp parallel for schedule(static) if (rows * (size_t)n > PAR_MIN_ELEMS)
    for (size_t r = 0; r < rows; r++) {
        const float *p = x + r * (size_t)ld;
        int best = 0;
        for (int j = 1; j < n; j++)
            if (p[j] > p[best])
                best = j;
        idx[r] = n ? best : -1;
        val[r] = n ? p[best] : -INFINITY;
    }
}

const tr_kernels tr_cpu_kernels = {
    .name = "cpu",
    .gemm = tr_cpu_gemm,
    .linear_forward = tr_cpu_linear_forward,
    .linear_backward = tr_cpu_linear_backward,
    .relu_forward = tr_cpu_relu_forward,
    .relu_backward = tr_cpu_relu_backward,
    .conv_scratch_floats = tr_cpu_conv_scratch_floats,
    .conv2d_forward = tr_cpu_conv2d_forward,
    .conv2d_backward = tr_cpu_conv2d_backward,
    .maxpool_forward = tr_cpu_maxpool_forward,
    .maxpool_backward = tr_cpu_maxpool_backward,
    .softmax_xent_forward = tr_cpu_softmax_xent_forward,
    .softmax_xent_backward = tr_cpu_softmax_xent_backward,
    .sgd_update = tr_cpu_sgd_update,
    .adamw_update = tr_cpu_adamw_update,
    .sum_squares = tr_cpu_sum_squares,
    .scale = tr_cpu_scale,
    .round_lowp = tr_cpu_round_lowp,
    .embedding_forward = tr_cpu_embedding_forward,
    .embedding_backward = tr_cpu_embedding_backward,
    .layernorm_forward = tr_cpu_layernorm_forward,
    .layernorm_backward = tr_cpu_layernorm_backward,
    .gelu_forward = tr_cpu_gelu_forward,
    .gelu_backward = tr_cpu_gelu_backward,
    .residual_forward = tr_cpu_residual_forward,
    .attention_forward = tr_cpu_attention_forward,
    .attention_backward = tr_cpu_attention_backward,
    .xent_padded_forward = tr_cpu_xent_padded_forward,
    .xent_padded_backward = tr_cpu_xent_padded_backward,
    .embedding_shard_forward = tr_cpu_embedding_shard_forward,
    .embedding_shard_backward = tr_cpu_embedding_shard_backward,
    .xent_shard_max = tr_cpu_xent_shard_max,
    .xent_shard_sums = tr_cpu_xent_shard_sums,
    .xent_shard_finish = tr_cpu_xent_shard_finish,
    .xent_shard_backward = tr_cpu_xent_shard_backward,
    .rows_argmax = tr_cpu_rows_argmax,
};
