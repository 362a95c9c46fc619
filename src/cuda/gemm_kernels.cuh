/* gemm_kernels.cuh: the device code of cuda_gemm.cu's 16-bit operand copies (which
 * it launches): the casts, the bias gradient's column sums that also write dout's
 * copy, and the LM head's dlogits copy made straight from the logits. Free of CUDA
 * headers but cuda_bf16.h/cuda_fp16.h (the emulator defines those types), so
 * validation/unit/test_cuda_kernels_emu.cpp runs it on the CPU under the warp
 * emulator. */
#ifndef TR_GEMM_KERNELS_CUH
#define TR_GEMM_KERNELS_CUH

#include "backend/lowp_math.h"   /* tr_round_lowp */
#include "backend/scalar_math.h" /* tr_expf */
#include "cuda/cuda_launch.cuh"

#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

/* x in bf16 or fp16, rounded to nearest even as tr_round_lowp rounds (exact for the
 * values the model has rounded) */
template <typename H> __device__ static inline H to_16(float x);
template <> __device__ inline __nv_bfloat16 to_16<__nv_bfloat16>(float x)
{
    return __float2bfloat16_rn(x);
}
template <> __device__ inline __half to_16<__half>(float x) { return __float2half_rn(x); }

/* dst [rows][cols] (packed) = src [rows][cols] (row stride ld) in bf16 or fp16: all of
 * a packed matrix four floats a thread, or strided rows */
template <typename H>
__global__ static void cast_packed4_kernel(H *dst, const float4 *src, size_t n4)
{
    TR_GRID_STRIDE(i, n4)
    {
        float4 v = src[i];
        dst[4 * i] = to_16<H>(v.x);
        dst[4 * i + 1] = to_16<H>(v.y);
        dst[4 * i + 2] = to_16<H>(v.z);
        dst[4 * i + 3] = to_16<H>(v.w);
    }
}

/* Strided rows (a column slice of a wider matrix): rows over the grid's y, columns
 * over x, so no thread divides an index (a 64-bit division per element would cost
 * more than the copy of the LM head's 800 M logits). */
template <typename H>
__global__ static void cast_rows_kernel(H *dst, const float *src, int rows, int cols, int ld)
{
    for (int r = blockIdx.y; r < rows; r += gridDim.y)
        for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += blockDim.x * gridDim.x)
            dst[(size_t)r * cols + c] = to_16<H>(src[(size_t)r * ld + c]);
}

/* Column sums of src[R, C] (leading dimension ld; stored in src_format, lowp_math.h:
 * fp32, or 16-bit values in bf16/fp16), the first of the two kernels of
 * TR_CUDA_COL_PARTIAL_FLOATS: block (x, y) owns 32 adjacent columns (one coalesced
 * 128-byte row segment per warp) of row block y of RB; lane y' of its
 * TR_CUDA_COL_LANES adds the block's rows y', y' + LANES, ... in order, then the
 * lanes' sums are added in lane order into partial[y][c]. The blocks visit every
 * element once, so where copy is not NULL they also write src's 16-bit copy there
 * (packed, C wide) as they read it: the bias gradient and the copy of dout that the
 * weight products take, in one pass over dout instead of two. */
template <typename H>
__global__ static void colsum_partial_kernel(float *partial, H *copy, const void *src,
                                             int src_format, size_t R, int C, int ld, int RB)
{
    __shared__ float part[TR_CUDA_COL_LANES][32];
    int c = blockIdx.x * 32 + threadIdx.x;
    size_t per = (R + RB - 1) / RB, r0 = blockIdx.y * per, r1 = r0 + per < R ? r0 + per : R;
    float acc = 0.0f;
    if (c < C)
        for (size_t r = r0 + threadIdx.y; r < r1; r += TR_CUDA_COL_LANES) {
            float v = tr_stored_load(src, r * ld + c, src_format);
            acc += v;
            if (copy)
                copy[r * C + c] = to_16<H>(v);
        }
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float s = 0.0f;
        for (int y = 0; y < TR_CUDA_COL_LANES; y++)
            s += part[y][threadIdx.x];
        partial[(size_t)blockIdx.y * C + c] = s;
    }
}

/* dst [B][n] (16-bit, packed) = d[:, o0:o0 + n) of the B x ld matrix xent_backward would
 * store (cuda_xent.cu: the same arithmetic), rows over the grid's y as cast_rows_kernel */
template <typename H>
__global__ static void xent_grad_16_kernel(H *dst, const float *logits, const float *stats,
                                           const int *targets, float scale, int rows, int n,
                                           int ld, int o0, int v0, int nreal, int format)
{
    for (int r = blockIdx.y; r < rows; r += gridDim.y) {
        long t = (long)targets[r] - v0;
        float mx = stats[2 * r], inv = stats[2 * r + 1];
        for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < n; c += blockDim.x * gridDim.x) {
            int j = o0 + c;
            float d = 0.0f;
            if (j < nreal) {
                float x = tr_round_lowp(logits[(size_t)r * ld + j], format);
                float p = __fmul_rn(tr_expf(x - mx), inv);
                d = tr_round_lowp(scale * (p - (j == t ? 1.0f : 0.0f)), format);
            }
            dst[(size_t)r * n + c] = to_16<H>(d);
        }
    }
}

#endif
