/* classifier_kernels.cuh: the device code of cuda_classifier.cu (which launches it):
 * the MLP/CNN classifier's ReLU, max pooling and softmax cross-entropy, and the rows'
 * argmax that the GPT's accuracy and sampler take of its logits. Free of CUDA
 * headers, so validation/unit/test_cuda_kernels_emu.cpp runs it on the CPU under the
 * warp emulator against the CPU's kernels. */
#ifndef TR_CLASSIFIER_KERNELS_CUH
#define TR_CLASSIFIER_KERNELS_CUH

#include "backend/lowp_math.h" /* tr_stored_load_as */
#include "cuda/cuda_launch.cuh"

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

/* ---- softmax cross-entropy and the rows' argmax ------------------------------------ */

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

#endif
