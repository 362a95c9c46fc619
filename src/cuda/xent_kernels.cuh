/* xent_kernels.cuh: the device code of cuda_xent.cu (which launches it): the softmax
 * cross-entropy over a padded vocabulary and the vocabulary shards' steps. Free of
 * CUDA headers, so validation/unit/test_cuda_kernels_emu.cpp runs it on the CPU under
 * the warp emulator. */
#ifndef TR_XENT_KERNELS_CUH
#define TR_XENT_KERNELS_CUH

#include "backend/lowp_math.h"   /* tr_round_lowp, tr_stored_load_as */
#include "backend/scalar_math.h" /* tr_expf */
#include "cuda/cuda_launch.cuh"

#include <math.h>
#include <stdint.h>

#define XENT_BLOCK 512 /* threads of the block-per-row kernels */

/* The logits of every kernel here are stored in lfmt (fp32, or the format's 16-bit
 * width: kernels.h, logits_format) and read as values of format. */

/* The sum of exp(x - mx) over elements [x0, x0 + n) of the logits (as values of
 * format) of a block-per-row kernel, in double, to every thread. */
__device__ static double sum_exp(const void *x, size_t x0, int n, float mx, double *shared,
                                 int format, int lfmt)
{
    double s = 0.0;
    for (int j = threadIdx.x; j < n; j += blockDim.x)
        s += tr_expf(tr_stored_load_as(x, x0 + j, lfmt, format) - mx);
    return tr_block_sum(s, shared);
}

/* the max of elements [x0, x0 + n) as stored (fp32 logits unrounded) */
__device__ static float row_max(const void *x, size_t x0, int n, float *shared, int lfmt)
{
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        float v = tr_stored_load(x, x0 + j, lfmt);
        mx = v > mx ? v : mx;
    }
    return tr_block_max(mx, shared);
}

/* One pass over the row: each thread keeps a running max and a sum of exponentials
 * rescaled when its max grows (an online softmax), and the block combines them (each
 * thread's sum times exp(its max - the row's), added in double in a fixed tree). The
 * probabilities are not written: backward recomputes them from the row's max and
 * 1 / sum (stats). A GPT-2 row is 50 K logits, 3.3 GB a step at 16 x 1024 in fp32
 * (1.6 GB in 16 bits): a pass over them is about 1.1 ms of an H100's bandwidth (0.5),
 * writing them another. */
/* The kernel's body; LF and F, where not -1, are lfmt and format as constants (a GPU's
 * 16-bit logits of the run's format): the same float operations on the same elements
 * in the same order, without the run-time formats' branches in the loop over the row
 * (the instructions, rather than the bytes, set a pass's time over 50 K 16-bit logits
 * a row). */
template <int LF, int F>
__device__ static inline void xent_padded_forward_row(float *stats, float *losses,
                                                      const void *logits, const int *targets,
                                                      int V, int Vp, int format, int lfmt)
{
    __shared__ float fsh[32];
    __shared__ double dsh[32];
    if (LF >= 0)
        lfmt = LF;
    if (F >= 0)
        format = F;
    size_t r = blockIdx.x, x0 = r * Vp;
    float m = -INFINITY, s = 0.0f;
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        float xj = tr_stored_load_as(logits, x0 + j, lfmt, format); /* values of format */
        if (xj > m) {
            s = s * tr_expf(m - xj) + 1.0f; /* m = -inf at first: 0 * tiny + 1 */
            m = xj;
        } else {
            s += tr_expf(xj - m);
        }
    }
    float mx = tr_block_max(m, fsh);
    /* a thread without columns has s = 0: it adds 0 */
    double sum = tr_block_sum((double)s * tr_expf(m - mx), dsh);
    /* -log softmax[target] = log(sum) - (x[target] - max): exact where p underflows */
    if (threadIdx.x == 0) {
        float xtarget = tr_stored_load_as(logits, x0 + targets[r], lfmt, format);
        stats[2 * r] = mx;
        stats[2 * r + 1] = (float)(1.0 / sum);
        losses[r] = (float)(log(sum) - ((double)xtarget - mx));
    }
}

__global__ static void xent_padded_forward_kernel(float *stats, float *losses,
                                                  const void *logits, const int *targets,
                                                  int V, int Vp, int format, int lfmt)
{
    xent_padded_forward_row<-1, -1>(stats, losses, logits, targets, V, Vp, format, lfmt);
}

/* logits stored in the format F itself (lfmt == format == F, a 16-bit one) */
template <int F>
__global__ static void xent_padded_forward_16_kernel(float *stats, float *losses,
                                                     const void *logits, const int *targets,
                                                     int V, int Vp)
{
    xent_padded_forward_row<F, F>(stats, losses, logits, targets, V, Vp, F, F);
}

/* dlogits (stored in lfmt too) = scale (softmax - onehot(target)) on real columns,
 * rounded to format, 0 on padded ones, the softmax recomputed from the logits (as
 * values of format) and the row's stats as the CPU recomputes it; element-wise, so
 * dlogits may be logits */
__global__ static void xent_backward_kernel(void *dlogits, const void *logits,
                                            const float *stats, const int *targets,
                                            float scale, size_t BT, int W, int v0, int nreal,
                                            int format, int lfmt)
{
    TR_GRID_STRIDE(i, BT * W)
    {
        size_t r = i / W;
        int j = (int)(i % W);
        long t = (long)targets[r] - v0;
        float d = 0.0f;
        if (j < nreal) {
            /* __fmul_rn: p rounded as the CPU rounds it, never fused into the next op */
            float x = tr_stored_load_as(logits, i, lfmt, format);
            float p = __fmul_rn(tr_expf(x - stats[2 * r]), stats[2 * r + 1]);
            d = tr_round_lowp(scale * (p - (j == t ? 1.0f : 0.0f)), format);
        }
        tr_stored_store(dlogits, i, d, lfmt);
    }
}

/* xent_backward_kernel where the logits (and dlogits) are stored in the 16-bit format F
 * itself (a GPU's logits_format) and every row starts 16 bytes aligned (W a multiple of
 * 8, both pointers 16-byte aligned): a block per row, eight values a thread per 16-byte
 * load and store, the row's statistics and target read once a row, F a constant. Each
 * element takes xent_backward_kernel's float operations, so dlogits has its bits (the
 * value rounded to F once: rounding a value of F to F again changes nothing). The
 * grid-stride form spends most of its instructions per element on finding the element's
 * row and column (a division), the run-time format's branches, 2-byte accesses and a
 * second rounding; at GPT-2's 16 x 1024 x 50304 (824 M values) those instructions,
 * rather than its 3.3 GB of traffic, would set its time. dlogits may be logits: each
 * 16 bytes are read before they are written, by one thread. */
template <int F>
__global__ static void xent_backward_rows16_kernel(uint16_t *dlogits, const uint16_t *logits,
                                                   const float *stats, const int *targets,
                                                   float scale, size_t BT, int W, int v0,
                                                   int nreal)
{
    int nv = W / 8;
    for (size_t r = blockIdx.x; r < BT; r += gridDim.x) {
        float mx = stats[2 * r], inv = stats[2 * r + 1];
        long t = (long)targets[r] - v0;
        const uint4 *src = reinterpret_cast<const uint4 *>(logits + r * (size_t)W);
        uint4 *dst = reinterpret_cast<uint4 *>(dlogits + r * (size_t)W);
        for (int v = threadIdx.x; v < nv; v += blockDim.x) {
            uint4 u = src[v];
            uint32_t in[4] = {u.x, u.y, u.z, u.w}, out[4];
#pragma unroll
            for (int k = 0; k < 8; k++) {
                int j = 8 * v + k;
                uint16_t h = (uint16_t)(in[k / 2] >> (16 * (k % 2))), o = 0;
                if (j < nreal) {
                    float x = F == TR_PREC_BF16 ? tr_bf16_to_f32(h) : tr_f16_to_f32(h);
                    /* __fmul_rn: p rounded as the CPU rounds it, never fused */
                    float p = __fmul_rn(tr_expf(x - mx), inv);
                    float d = scale * (p - (j == t ? 1.0f : 0.0f));
                    o = F == TR_PREC_BF16 ? tr_f32_to_bf16(d) : tr_f32_to_f16(d);
                }
                if (k % 2)
                    out[k / 2] |= (uint32_t)o << 16;
                else
                    out[k / 2] = o;
            }
            uint4 w;
            w.x = out[0], w.y = out[1], w.z = out[2], w.w = out[3];
            dst[v] = w;
        }
    }
}

/* the max of the values of format is the max rounded: rounding is monotonic */
__global__ static void xent_shard_max_kernel(float *rowmax, const void *logits, int Vl,
                                             int nreal, int format, int lfmt)
{
    __shared__ float fsh[32];
    size_t r = blockIdx.x;
    float mx = row_max(logits, r * Vl, nreal, fsh, lfmt);
    if (threadIdx.x == 0)
        rowmax[r] = tr_round_lowp(mx, format);
}

/* sums[r] = (sum of exp(x - rowmax) over the held real columns, the target's
 * x - rowmax where this shard holds the target, else 0) */
__global__ static void xent_shard_sums_kernel(double *sums, const void *logits,
                                              const float *rowmax, const int *targets, int Vl,
                                              int v0, int nreal, int format, int lfmt)
{
    __shared__ double dsh[32];
    size_t r = blockIdx.x, x0 = r * Vl;
    float mx = rowmax[r];
    double s = sum_exp(logits, x0, nreal, mx, dsh, format, lfmt);
    if (threadIdx.x == 0) {
        long t = (long)targets[r] - v0;
        sums[2 * r] = s;
        sums[2 * r + 1] =
            t >= 0 && t < nreal ? (double)tr_stored_load_as(logits, x0 + t, lfmt, format) - mx
                                : 0.0;
    }
}

__global__ static void xent_shard_finish_kernel(float *stats, float *losses, const double *sums,
                                                const float *rowmax, size_t BT)
{
    TR_GRID_STRIDE(r, BT)
    {
        stats[2 * r] = rowmax[r];
        stats[2 * r + 1] = (float)(1.0 / sums[2 * r]);
        losses[r] = (float)(log(sums[2 * r]) - sums[2 * r + 1]);
    }
}

#endif
