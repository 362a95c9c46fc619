/* cuda_classifier.cu: the MLP/CNN classifier's element-wise, pooling and softmax
 * cross-entropy kernels on the GPU, with the semantics of cpu_kernels.c
 * (convolution in cuda_conv.cu, linear layers in cuda_gemm.cu). Dimension letters
 * as in kernels.h.
 *
 * ReLU, max pooling and the cross-entropy backward evaluate the CPU's expressions
 * element by element, in the CPU's order where there is one (the pooling window's
 * scan), so they give the CPU's bits: the same outputs and the same argmax indices.
 * Max-pool backward gathers instead of scattering: each input element looks up the
 * one window that can hold it (stride k: windows do not overlap) and takes that
 * window's gradient when it was the winner, else 0. The softmax forward is a warp
 * per sample; only the order of its double sum of exponentials differs from the CPU. */
#include "cuda/cuda_common.h"
#include "cuda/cuda_ops.h"
#include "backend/lowp_math.h" /* tr_round_lowp */

#include <math.h>

/* ---- ReLU ----------------------------------------------------------------------- */

/* x < 0 ? 0 : x, as on the CPU: a NaN passes through */
__global__ static void relu_forward_kernel(float *out, const float *inp, size_t n)
{
    TR_GRID_STRIDE(i, n) out[i] = inp[i] < 0.0f ? 0.0f : inp[i];
}

/* element-wise, so dinp may be dout */
__global__ static void relu_backward_kernel(float *dinp, const float *dout, const float *out,
                                            size_t n)
{
    TR_GRID_STRIDE(i, n)
    {
        float d = dout[i];
        dinp[i] = out[i] > 0.0f ? d : 0.0f;
    }
}

void tr_cuda_relu_forward(float *out, const float *inp, size_t n)
{
    if (n == 0)
        return;
    relu_forward_kernel<<<tr_cuda_grid(n), TR_CUDA_BLOCK, 0, tr_cuda_stream()>>>(out, inp, n);
    TR_CUDA_LAUNCHED();
}

void tr_cuda_relu_backward(float *dinp, const float *dout, const float *out, size_t n)
{
    if (n == 0)
        return;
    relu_backward_kernel<<<tr_cuda_grid(n), TR_CUDA_BLOCK, 0, tr_cuda_stream()>>>(dinp, dout,
                                                                                out, n);
    TR_CUDA_LAUNCHED();
}

/* ---- max pooling (k x k, stride k) ------------------------------------------------ */

/* One thread per output: the CPU's scan of the window, row by row, the first of
 * equal values winning (a NaN never wins, except where the scan starts). */
__global__ static void maxpool_forward_kernel(float *out, int *argmax, const float *inp,
                                              size_t planes, int H, int W, int k)
{
    int Ho = H / k, Wo = W / k;
    size_t howo = (size_t)Ho * Wo;
    TR_GRID_STRIDE(i, planes * howo)
    {
        size_t p = i / howo;
        int o = (int)(i % howo), oy = o / Wo, ox = o % Wo;
        const float *x = inp + p * H * W;
        int best = oy * k * W + ox * k;
        for (int dy = 0; dy < k; dy++) {
            int row = (oy * k + dy) * W + ox * k;
            for (int dx = 0; dx < k; dx++)
                if (x[row + dx] > x[best])
                    best = row + dx;
        }
        out[i] = x[best];
        argmax[i] = best;
    }
}

/* One thread per input: dinp = dout of its window where it is the saved winner,
 * else 0 (also the trailing rows and columns no window covers). */
__global__ static void maxpool_backward_kernel(float *dinp, const float *dout,
                                               const int *argmax, size_t planes, int H, int W,
                                               int k)
{
    int Ho = H / k, Wo = W / k;
    size_t hw = (size_t)H * W, howo = (size_t)Ho * Wo;
    TR_GRID_STRIDE(i, planes * hw)
    {
        size_t p = i / hw;
        int e = (int)(i % hw), oy = e / W / k, ox = e % W / k;
        float d = 0.0f;
        if (oy < Ho && ox < Wo) {
            size_t o = p * howo + (size_t)oy * Wo + ox;
            if (argmax[o] == e)
                d = dout[o];
        }
        dinp[i] = d;
    }
}

void tr_cuda_maxpool_forward(float *out, int *argmax, const float *inp, int B, int C, int H,
                             int W, int k)
{
    if (k < 1)
        tr_fatal(TR_EXIT_SOFTWARE, "maxpool_forward: window %d", k);
    size_t planes = (size_t)(B > 0 ? B : 0) * (C > 0 ? C : 0);
    size_t n = planes * (size_t)(H > 0 ? H / k : 0) * (W > 0 ? W / k : 0);
    if (n == 0)
        return;
    maxpool_forward_kernel<<<tr_cuda_grid(n), TR_CUDA_BLOCK, 0, tr_cuda_stream()>>>(
        out, argmax, inp, planes, H, W, k);
    TR_CUDA_LAUNCHED();
}

void tr_cuda_maxpool_backward(float *dinp, const float *dout, const int *argmax, int B, int C,
                              int H, int W, int k)
{
    if (k < 1)
        tr_fatal(TR_EXIT_SOFTWARE, "maxpool_backward: window %d", k);
    size_t planes = (size_t)(B > 0 ? B : 0) * (C > 0 ? C : 0);
    size_t n = planes * (size_t)(H > 0 ? H : 0) * (W > 0 ? W : 0);
    if (n == 0)
        return;
    maxpool_backward_kernel<<<tr_cuda_grid(n), TR_CUDA_BLOCK, 0, tr_cuda_stream()>>>(
        dinp, dout, argmax, planes, H, W, k);
    TR_CUDA_LAUNCHED();
}

/* ---- softmax cross-entropy -------------------------------------------------------- */

#define XENT_ROWS_PER_BLOCK (TR_CUDA_BLOCK / 32)

/* The better of two (value, index) candidates for the CPU's argmax scan: the larger
 * value, the smaller index between equal values; index -1 is no candidate (NaNs are
 * never candidates). A selection by a total order, so any tree gives the scan's
 * answer. */
__device__ static void argmax_merge(float *bv, int *bi, float ov, int oi)
{
    if (oi >= 0 && (*bi < 0 || ov > *bv || (ov == *bv && oi < *bi))) {
        *bv = ov;
        *bi = oi;
    }
}

/* A warp per sample: probs = softmax(x), losses = log(sum) - (x[label] - max), and
 * the hit count (an integer atomic: exact in any order). The CPU's arithmetic:
 * exponentials in float, their sum in double, one float reciprocal. probs must not
 * be logits (x[label] is read last), as on the CPU. */
__global__ static void softmax_xent_forward_kernel(float *probs, float *losses,
                                                   unsigned *hits, const float *logits,
                                                   const int *labels, int B, int V)
{
    int row = blockIdx.x * XENT_ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= B) /* the same for the whole warp, so the shuffles below see 32 lanes */
        return;
    const float *x = logits + (size_t)row * V;
    float *p = probs + (size_t)row * V;
    /* the CPU's scan keeps index 0 when x[0] is NaN; otherwise it ends on the first
     * index of the largest non-NaN value */
    float bv = 0.0f;
    int bi = -1;
    for (int j = lane; j < V; j += 32)
        if (x[j] == x[j])
            argmax_merge(&bv, &bi, x[j], j);
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        argmax_merge(&bv, &bi, ov, oi);
    }
    int amax = bi < 0 || x[0] != x[0] ? 0 : bi;
    float mx = x[amax];
    double sum = 0.0;
    for (int j = lane; j < V; j += 32) {
        float e = expf(x[j] - mx);
        p[j] = e;
        sum += e;
    }
    sum = tr_warp_sum(sum);
    float inv = (float)(1.0 / sum);
    for (int j = lane; j < V; j += 32) /* each lane scales what it wrote */
        p[j] *= inv;
    if (lane == 0) {
        int label = labels[row];
        losses[row] = (float)(log(sum) - ((double)x[label] - mx));
        if (amax == label)
            atomicAdd(hits, 1u);
    }
}

/* A warp per row: the CPU scan's argmax (argmax_merge over non-NaN values, index 0
 * when x[0] is NaN) and its value, x (stored in lfmt) read as values of format; n = 0
 * gives -1 and -inf. */
__global__ static void rows_argmax_kernel(int *idx, float *val, const void *x, size_t rows,
                                          int ld, int n, int format, int lfmt)
{
    size_t row = (size_t)blockIdx.x * XENT_ROWS_PER_BLOCK + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= rows) /* the same for the whole warp */
        return;
    size_t p = row * (size_t)ld;
    float bv = 0.0f;
    int bi = -1;
    for (int j = lane; j < n; j += 32) {
        float v = tr_stored_load_as(x, p + j, lfmt, format);
        if (v == v)
            argmax_merge(&bv, &bi, v, j);
    }
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        argmax_merge(&bv, &bi, ov, oi);
    }
    if (lane == 0) {
        float x0 = n ? tr_stored_load(x, p, lfmt) : 0.0f;
        int best = n == 0 ? -1 : (bi < 0 || x0 != x0 ? 0 : bi);
        idx[row] = best;
        val[row] = best < 0 ? -INFINITY : tr_stored_load_as(x, p + best, lfmt, format);
    }
}

void tr_cuda_rows_argmax(int *idx, float *val, const void *x, size_t rows, int ld, int n,
                         int format, int lfmt)
{
    if (rows == 0)
        return;
    unsigned blocks = (unsigned)((rows + XENT_ROWS_PER_BLOCK - 1) / XENT_ROWS_PER_BLOCK);
    rows_argmax_kernel<<<blocks, TR_CUDA_BLOCK, 0, tr_cuda_stream()>>>(idx, val, x, rows, ld, n,
                                                                         format, lfmt);
    TR_CUDA_LAUNCHED();
}

/* dlogits = scale (probs - onehot(label)): the CPU's two expressions, element-wise */
__global__ static void softmax_xent_backward_kernel(float *dlogits, const float *probs,
                                                    const int *labels, float scale, size_t n,
                                                    int V)
{
    TR_GRID_STRIDE(i, n)
    {
        float p = probs[i];
        dlogits[i] = (int)(i % V) == labels[i / V] ? scale * (p - 1.0f) : scale * p;
    }
}

void tr_cuda_softmax_xent_forward(float *probs, float *losses, const float *logits,
                                  const int *labels, int B, int V, double *loss_sum,
                                  long *correct)
{
    *loss_sum = 0.0;
    *correct = 0;
    if (B <= 0)
        return;
    /* a label outside [0, V) is a bug (the reader validates them): fatal, as on the
     * CPU; this waits for the stream */
    tr_cuda_check_tokens(labels, (size_t)B, V, "softmax_xent_forward (labels)");
    const tr_cuda_ctx *c = tr_cuda_ctx_with_scratch();
    TR_CUDA_CHECK(cudaMemsetAsync(c->d_flag, 0, sizeof(unsigned), c->stream));
    unsigned blocks = (unsigned)((B + XENT_ROWS_PER_BLOCK - 1) / XENT_ROWS_PER_BLOCK);
    softmax_xent_forward_kernel<<<blocks, TR_CUDA_BLOCK, 0, c->stream>>>(
        probs, losses, c->d_flag, logits, labels, B, V);
    TR_CUDA_LAUNCHED();
    TR_CUDA_CHECK(cudaMemcpyAsync(c->h_flag, c->d_flag, sizeof(unsigned), cudaMemcpyDeviceToHost,
                                  c->stream));
    /* the losses added serially in sample order, the CPU's sum; it waits for the
     * stream, so the hit count queued before it has landed too */
    *loss_sum = tr_cuda_sum_in_order(losses, (size_t)B);
    *correct = (long)*c->h_flag;
}

void tr_cuda_softmax_xent_backward(float *dlogits, const float *probs, const int *labels,
                                   float scale, int B, int V)
{
    /* No label check here: forward checked the same labels, and a bad one would only
     * miss its -1 (the comparison never indexes by it), not write out of bounds. */
    if (B <= 0 || V <= 0)
        return;
    size_t n = (size_t)B * V;
    softmax_xent_backward_kernel<<<tr_cuda_grid(n), TR_CUDA_BLOCK, 0, tr_cuda_stream()>>>(
        dlogits, probs, labels, scale, n, V);
    TR_CUDA_LAUNCHED();
}
