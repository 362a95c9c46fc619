/* attention_decode_kernels.cuh: the newest token's attention against the key-value
 * cache (kernels.h, attention_decode): one block per head. The block's threads take
 * the keys in turn for the scores (kept in the caller's scratch, NH*T floats: T may
 * be far more than shared memory holds), reduce their max and sum over the block,
 * then take the head's dimensions in turn for the output, each summing over the keys
 * in order. Sampling runs it once per layer and token: it is a few microseconds of a
 * step that reads every weight, so it is written for clarity, not peak bandwidth.
 * Included by cuda_attention.cu and by the CPU test that runs it on the warp emulator
 * (validation/unit/test_cuda_kernels_emu.cpp). */
#ifndef TR_ATTENTION_DECODE_KERNELS_CUH
#define TR_ATTENTION_DECODE_KERNELS_CUH

#include "backend/lowp_math.h"   /* tr_stored_load, tr_stored_store */
#include "backend/scalar_math.h" /* tr_expf */
#include "cuda/cuda_launch.cuh"  /* tr_block_sum, tr_block_max */

/* blockDim.x threads (a multiple of 32) for head blockIdx.x of qkv [T,3C] */
__global__ void attention_decode_kernel(void *out, float *scratch, const void *qkv, int T, int C,
                                        int HS, float scale, int format)
{
    __shared__ float red[32];
    int h = blockIdx.x;
    size_t ld = 3 * (size_t)C, q0 = (size_t)(T - 1) * ld + (size_t)h * HS;
    float *s = scratch + (size_t)h * T;
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < T; j += blockDim.x) {
        size_t k0 = (size_t)j * ld + C + (size_t)h * HS;
        float dot = 0.0f;
        for (int d = 0; d < HS; d++)
            dot += tr_stored_load(qkv, q0 + d, format) * tr_stored_load(qkv, k0 + d, format);
        s[j] = scale * dot;
        mx = s[j] > mx ? s[j] : mx;
    }
    mx = tr_block_max(mx, red);
    float sum = 0.0f;
    for (int j = threadIdx.x; j < T; j += blockDim.x) {
        s[j] = tr_expf(s[j] - mx);
        sum += s[j];
    }
    float inv = 1.0f / tr_block_sum(sum, red);
    __syncthreads(); /* every thread's s[j] written before any reads them all */
    for (int d = threadIdx.x; d < HS; d += blockDim.x) {
        size_t v0 = 2 * (size_t)C + (size_t)h * HS + d;
        float acc = 0.0f;
        for (int j = 0; j < T; j++)
            acc += s[j] * inv * tr_stored_load(qkv, (size_t)j * ld + v0, format);
        tr_stored_store(out, (size_t)h * HS + d, acc, format);
    }
}

#endif
