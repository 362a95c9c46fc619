/* cuda_attention.cu: the core of causal multi-head self-attention on the GPU, the
 * same computation as cpu_attention.c (read its header for the formulas):
 *   S = Q K^T / sqrt(HS);  A = causal softmax(S) (saved, 0 above the diagonal);
 *   O = A V;  backward: dA = dO V^T, dV = A^T dO, dS = A (dA - rowsum(A dA)) / sqrt(HS),
 *   dQ = dS K, dK = dS^T Q.
 *
 * The products are cuBLAS strided-batched GEMMs over the NH heads of one batch
 * row: head h's Q, K, V, O and dQ, dK, dV are the column slices [h HS, (h+1) HS) of
 * rows with stride 3C (or C), so consecutive heads are HS floats apart, while the
 * heads' T x T att blocks are T*T apart. Heads of different batch rows are not a
 * constant stride from each other (the stride changes at every NH-th head), hence
 * one batched call per batch row. Each head writes only its own slices, so the
 * batched outputs never overlap. As on the CPU the full T x T scores are formed and
 * the future half masked to exact zeros, which then contribute nothing. */
#include "cuda/cuda_common.h"
#include "cuda/cuda_ops.h"

#include "backend/scalar_math.h" /* tr_expf */

#include <math.h>

static int head_size(int C, int NH, const char *what)
{
    if (NH < 1 || C % NH != 0)
        tr_fatal(TR_EXIT_SOFTWARE, "%s: C = %d is not a multiple of NH = %d", what, C, NH);
    return C / NH;
}

/* Rows of the att tensor a block of the row kernels handles: one warp a row. */
#define ROWS_PER_BLOCK (TR_CUDA_BLOCK / 32)

/* Causal softmax in place over rows of T x T blocks: row t keeps columns 0..t. */
__global__ static void causal_softmax_kernel(float *att, size_t rows, int T)
{
    size_t row = (size_t)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= rows)
        return;
    int t = (int)(row % T);
    float *a = att + row * T;
    float mx = -INFINITY;
    for (int j = lane; j <= t; j += 32)
        mx = a[j] > mx ? a[j] : mx;
    mx = tr_warp_max(mx);
    float sum = 0.0f;
    for (int j = lane; j <= t; j += 32) {
        float e = tr_expf(a[j] - mx);
        a[j] = e;
        sum += e;
    }
    float inv = 1.0f / tr_warp_sum(sum); /* sum >= 1: the max term is exp(0) */
    for (int j = lane; j <= t; j += 32)
        a[j] *= inv;
    for (int j = t + 1 + lane; j < T; j += 32)
        a[j] = 0.0f;
}

/* Softmax backward in place: dA becomes dS = scale A (dA - sum_j A dA), 0 beyond t. */
__global__ static void causal_softmax_backward_kernel(float *datt, const float *att,
                                                      size_t rows, int T, float scale)
{
    size_t row = (size_t)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= rows)
        return;
    int t = (int)(row % T);
    const float *a = att + row * T;
    float *d = datt + row * T;
    float s = 0.0f;
    for (int j = lane; j <= t; j += 32)
        s += a[j] * d[j];
    s = tr_warp_sum(s);
    for (int j = lane; j <= t; j += 32)
        d[j] = scale * a[j] * (d[j] - s);
    for (int j = t + 1 + lane; j < T; j += 32)
        d[j] = 0.0f;
}

static unsigned row_blocks(size_t rows)
{
    return (unsigned)((rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);
}

void tr_cuda_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C,
                               int NH)
{
    int HS = head_size(C, NH, "attention_forward");
    if (B <= 0 || T <= 0)
        return;
    int ld = 3 * C;
    long long TT = (long long)T * T;
    float scale = 1.0f / sqrtf((float)HS);
    for (int b = 0; b < B; b++) { /* S = scale Q K^T */
        const float *q = qkv + (size_t)b * T * ld, *k = q + C;
        tr_cuda_gemm_strided_batched(0, 1, T, T, HS, scale, q, ld, HS, k, ld, HS, 0.0f,
                                     att + (size_t)b * NH * TT, T, TT, NH);
    }
    size_t rows = (size_t)B * NH * T;
    causal_softmax_kernel<<<row_blocks(rows), TR_CUDA_BLOCK, 0, tr_cuda_stream()>>>(att, rows, T);
    TR_CUDA_LAUNCHED();
    for (int b = 0; b < B; b++) { /* O = A V */
        const float *v = qkv + (size_t)b * T * ld + 2 * C;
        tr_cuda_gemm_strided_batched(0, 0, T, HS, T, 1.0f, att + (size_t)b * NH * TT, T, TT, v,
                                     ld, HS, 0.0f, out + (size_t)b * T * C, C, HS, NH);
    }
}

void tr_cuda_attention_backward(float *dqkv, float *datt, const float *dout, const float *qkv,
                                const float *att, int B, int T, int C, int NH)
{
    int HS = head_size(C, NH, "attention_backward");
    if (B <= 0 || T <= 0)
        return;
    int ld = 3 * C;
    long long TT = (long long)T * T;
    float scale = 1.0f / sqrtf((float)HS);
    for (int b = 0; b < B; b++) {
        const float *v = qkv + (size_t)b * T * ld + 2 * C;
        const float *dO = dout + (size_t)b * T * C;
        const float *A = att + (size_t)b * NH * TT;
        float *dA = datt + (size_t)b * NH * TT;
        float *dv = dqkv + (size_t)b * T * ld + 2 * C;
        /* dA = dO V^T */
        tr_cuda_gemm_strided_batched(0, 1, T, T, HS, 1.0f, dO, C, HS, v, ld, HS, 0.0f, dA, T, TT,
                                     NH);
        /* dV = A^T dO */
        tr_cuda_gemm_strided_batched(1, 0, T, HS, T, 1.0f, A, T, TT, dO, C, HS, 0.0f, dv, ld, HS,
                                     NH);
    }
    size_t rows = (size_t)B * NH * T;
    causal_softmax_backward_kernel<<<row_blocks(rows), TR_CUDA_BLOCK, 0, tr_cuda_stream()>>>(
        datt, att, rows, T, scale);
    TR_CUDA_LAUNCHED();
    for (int b = 0; b < B; b++) {
        const float *q = qkv + (size_t)b * T * ld, *k = q + C;
        const float *dS = datt + (size_t)b * NH * TT;
        float *dq = dqkv + (size_t)b * T * ld, *dk = dq + C;
        /* dQ = dS K */
        tr_cuda_gemm_strided_batched(0, 0, T, HS, T, 1.0f, dS, T, TT, k, ld, HS, 0.0f, dq, ld, HS,
                                     NH);
        /* dK = dS^T Q */
        tr_cuda_gemm_strided_batched(1, 0, T, HS, T, 1.0f, dS, T, TT, q, ld, HS, 0.0f, dk, ld, HS,
                                     NH);
    }
}
