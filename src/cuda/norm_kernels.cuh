/* norm_kernels.cuh: the device code of cuda_transformer.cu's layernorm, GELU and
 * residual add and dropout (which it launches). Free of CUDA headers, so
 * validation/unit/test_cuda_kernels_emu.cpp runs it on the CPU under the warp
 * emulator. */
#ifndef TR_NORM_KERNELS_CUH
#define TR_NORM_KERNELS_CUH

#include "backend/gelu_math.h"
#include "backend/lowp_math.h" /* tr_round_lowp */
#include "cuda/cuda_launch.cuh"
extern "C" {
#include "backend/transformer_kernels.h" /* TR_LAYERNORM_EPS */
}

#include <math.h>
#include <stdint.h>

/* One warp per row: C of a few hundred to a few thousand is 10-100 elements a lane,
 * and the row's sums are warp shuffles (no shared memory, no block barrier). */
#define LN_ROWS_PER_BLOCK (TR_CUDA_BLOCK / 32)

/* inp (the residual stream) and out stored in format (lowp_math.h: 16-bit values in
 * bf16/fp16-mixed) */
__global__ static void layernorm_forward_kernel(void *out, float *mean, float *rstd,
                                                const void *inp, const float *weight,
                                                const float *bias, size_t BT, int C, int format)
{
    size_t r = (size_t)blockIdx.x * LN_ROWS_PER_BLOCK + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (r >= BT)
        return;
    size_t x0 = r * C; /* the row: three passes over it, the later two from L1 */
    float s = 0.0f;
    for (int c = lane; c < C; c += 32)
        s += tr_stored_load(inp, x0 + c, format);
    float m = tr_warp_sum(s) / (float)C;
    float v = 0.0f; /* two passes, as on the CPU: no cancellation for large means */
    for (int c = lane; c < C; c += 32) {
        float dx = tr_stored_load(inp, x0 + c, format) - m;
        v += dx * dx;
    }
    v = tr_warp_sum(v);
    float rs = 1.0f / sqrtf(v / (float)C + TR_LAYERNORM_EPS);
    for (int c = lane; c < C; c += 32)
        tr_stored_store(out, x0 + c,
                        (tr_stored_load(inp, x0 + c, format) - m) * rs * weight[c] + bias[c],
                        format);
    if (lane == 0) {
        mean[r] = m;
        rstd[r] = rs;
    }
}

/* dinp = rstd (g - mean_c(g) - n mean_c(g n)), g = w dout, n = (x - mean) rstd; inp
 * stored in format, dout read as values of it, dinp (+= where accumulate) rounded to it */
__global__ static void layernorm_backward_dinp_kernel(float *dinp, const float *dout,
                                                      const void *inp, const float *weight,
                                                      const float *mean, const float *rstd,
                                                      size_t BT, int C, int format,
                                                      int accumulate)
{
    size_t r = (size_t)blockIdx.x * LN_ROWS_PER_BLOCK + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (r >= BT)
        return;
    const float *d = dout + r * C;
    float *di = dinp + r * C;
    size_t x0 = r * C;
    float m = mean[r], rs = rstd[r];
    float sg = 0.0f, sgn = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float g = weight[c] * tr_round_lowp(d[c], format);
        sg += g;
        sgn += g * (tr_stored_load(inp, x0 + c, format) - m) * rs;
    }
    sg = tr_warp_sum(sg) / (float)C;
    sgn = tr_warp_sum(sgn) / (float)C;
    for (int c = lane; c < C; c += 32) {
        float n = (tr_stored_load(inp, x0 + c, format) - m) * rs;
        float v = rs * (weight[c] * tr_round_lowp(d[c], format) - sg - n * sgn);
        /* __fadd_rn: never contracted into an FMA with v's product, as the CPU adds */
        di[c] = tr_round_lowp(accumulate ? __fadd_rn(di[c], v) : v, format);
    }
}

/* dweight += sum_r dout n, dbias += sum_r dout: column sums in two kernels (see
 * TR_CUDA_COL_PARTIAL_FLOATS). Block (x, y) takes channels [32 x, 32 x + 32) and
 * row block y of RB; its TR_CUDA_COL_LANES row lanes each add rows lane,
 * lane + LANES, ... of the block in order, then the lanes are added in lane order
 * into partial[y][c] (weights) and partial[RB + y][c] (biases). */
#define LN_LANES TR_CUDA_COL_LANES

__global__ static void layernorm_backward_params_partial_kernel(float *partial,
                                                                const float *dout,
                                                                const void *inp,
                                                                const float *mean,
                                                                const float *rstd, size_t BT,
                                                                int C, int RB, int format)
{
    __shared__ float pw[LN_LANES][32], pb[LN_LANES][32];
    int c = blockIdx.x * 32 + threadIdx.x;
    size_t per = (BT + RB - 1) / RB, r0 = blockIdx.y * per;
    size_t r1 = r0 + per < BT ? r0 + per : BT;
    float aw = 0.0f, ab = 0.0f;
    if (c < C)
        for (size_t r = r0 + threadIdx.y; r < r1; r += LN_LANES) {
            float d = tr_round_lowp(dout[r * C + c], format);
            aw += d * ((tr_stored_load(inp, r * C + c, format) - mean[r]) * rstd[r]);
            ab += d;
        }
    pw[threadIdx.y][threadIdx.x] = aw;
    pb[threadIdx.y][threadIdx.x] = ab;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float sw = 0.0f, sb = 0.0f;
        for (int y = 0; y < LN_LANES; y++) {
            sw += pw[y][threadIdx.x];
            sb += pb[y][threadIdx.x];
        }
        partial[(size_t)blockIdx.y * C + c] = sw;
        partial[(size_t)(RB + blockIdx.y) * C + c] = sb;
    }
}

/* The whole backward in one kernel, where C <= 32 KPL: each warp takes a row at a
 * time as layernorm_backward_dinp_kernel does (the same float operations in the same
 * order, so dinp has the same bits) and, while the row is in its registers and L1,
 * also adds dout n and dout into its lanes' KPL columns. The two-kernel form reads
 * dout and inp from memory twice, 100 MB a layernorm at GPT-2's 16 x 1024. Block y
 * of RB takes rows [y per, (y + 1) per), warp w of them rows w, w + ROWS, ...; at
 * the end the warps' sums are added in warp order into partial[y][c] (weights) and
 * partial[RB + y][c] (biases), which tr_cuda_add_partials adds in order: fixed by
 * the shape (ln_fused_row_blocks), so the sums are the same run to run. */
#define LN_FUSED_MAX_ROW_BLOCKS 256

/* RB of the fused kernel: a row per warp at least; 256 blocks at most, one wave of
 * about two blocks an SM on an H100 (132 SMs; the register sums allow two or three);
 * what the partials' scratch holds. From the shape alone, never from the GPU, so
 * the sums do not depend on the GPU either. */
static inline int ln_fused_row_blocks(size_t BT, int C)
{
    size_t rb = (BT + LN_ROWS_PER_BLOCK - 1) / LN_ROWS_PER_BLOCK;
    size_t fit = TR_CUDA_COL_PARTIAL_FLOATS / (2 * (size_t)(C > 0 ? C : 1));
    rb = rb < LN_FUSED_MAX_ROW_BLOCKS ? rb : LN_FUSED_MAX_ROW_BLOCKS;
    rb = rb < fit ? rb : fit;
    return rb > 0 ? (int)rb : 1;
}

/* KPL for C channels (columns per lane: the register sums), 0 where C is too wide
 * for them and the two-kernel form runs */
static inline int ln_fused_kpl(int C)
{
    return C <= 256 ? 8 : C <= 512 ? 16 : C <= 768 ? 24 : C <= 1024 ? 32 : 0;
}

template <int KPL>
__global__ static void layernorm_backward_fused_kernel(float *dinp, float *partial,
                                                       const float *dout, const void *inp,
                                                       const float *weight, const float *mean,
                                                       const float *rstd, size_t BT, int C,
                                                       int RB, int format, int accumulate)
{
    __shared__ float sw[32 * KPL], sb[32 * KPL];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    size_t per = (BT + RB - 1) / RB, r0 = blockIdx.x * per;
    size_t r1 = r0 + per < BT ? r0 + per : BT;
    float aw[KPL], ab[KPL];
#pragma unroll
    for (int k = 0; k < KPL; k++)
        aw[k] = ab[k] = 0.0f;
    for (size_t r = r0 + warp; r < r1; r += LN_ROWS_PER_BLOCK) {
        const float *d = dout + r * C;
        float *di = dinp + r * C;
        size_t x0 = r * C;
        float m = mean[r], rs = rstd[r];
        float sg = 0.0f, sgn = 0.0f;
#pragma unroll
        for (int k = 0; k < KPL; k++) {
            int c = lane + 32 * k;
            if (c < C) {
                float g = weight[c] * tr_round_lowp(d[c], format);
                sg += g;
                sgn += g * (tr_stored_load(inp, x0 + c, format) - m) * rs;
            }
        }
        sg = tr_warp_sum(sg) / (float)C;
        sgn = tr_warp_sum(sgn) / (float)C;
#pragma unroll
        for (int k = 0; k < KPL; k++) {
            int c = lane + 32 * k;
            if (c < C) {
                float dv = tr_round_lowp(d[c], format);
                float n = (tr_stored_load(inp, x0 + c, format) - m) * rs;
                float v = rs * (weight[c] * dv - sg - n * sgn);
                di[c] = tr_round_lowp(accumulate ? __fadd_rn(di[c], v) : v, format);
                aw[k] += dv * n; /* as the two-kernel form: d * ((x - mean) * rstd) */
                ab[k] += dv;
            }
        }
    }
    for (int w = 0; w < LN_ROWS_PER_BLOCK; w++) { /* the warps' sums, in warp order */
        if (warp == w) {
#pragma unroll
            for (int k = 0; k < KPL; k++) {
                int c = lane + 32 * k;
                if (c < C) {
                    sw[c] = w ? sw[c] + aw[k] : aw[k];
                    sb[c] = w ? sb[c] + ab[k] : ab[k];
                }
            }
        }
        __syncthreads();
    }
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        partial[(size_t)blockIdx.x * C + c] = sw[c];
        partial[(size_t)(RB + blockIdx.x) * C + c] = sb[c];
    }
}

__global__ static void gelu_forward_kernel(float *out, const float *inp, size_t n)
{
    TR_GRID_STRIDE(i, n) out[i] = tr_gelu(inp[i]);
}

/* The element-wise kernels take four consecutive elements a thread: one 16-byte load
 * per operand and one store where every pointer is 16-byte aligned (vec: the model's
 * buffers are), else four scalar ones; the last group may be partial. The same bytes
 * in a quarter of the memory instructions, and four times the bytes in flight per
 * thread: these kernels are bandwidth-bound (GELU's backward moves 600 MB a layer at
 * GPT-2's 16 x 1024). Launch over tr_cuda_grid((n + 3) / 4). */
static inline int tr_cuda_vec4(const void *a, const void *b, const void *c)
{
    return ((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) % 16 == 0;
}

/* inp and dout read as values of format, dinp rounded to it */
__device__ static inline float gelu_backward_1(float x, float d, int format)
{
    return tr_round_lowp(tr_gelu_grad(tr_round_lowp(x, format)) * tr_round_lowp(d, format),
                         format);
}

/* Elements i .. i + 3 (i a multiple of 4) of a tensor stored in format (lowp_math.h)
 * whose start is 16-byte aligned: one 16-byte load of floats, or one 8-byte load of
 * four 16-bit values. */
__device__ static inline float4 load4_stored(const void *p, size_t i, int format)
{
    if (tr_stored_bytes(format) == 4)
        return *reinterpret_cast<const float4 *>((const float *)p + i);
    /* little-endian: the lower half of each word is the earlier value */
    uint2 u = *reinterpret_cast<const uint2 *>((const uint16_t *)p + i);
    uint16_t h[4] = {(uint16_t)(u.x & 0xffffu), (uint16_t)(u.x >> 16), (uint16_t)(u.y & 0xffffu),
                     (uint16_t)(u.y >> 16)};
    float4 x;
    x.x = tr_stored_load(h, 0, format);
    x.y = tr_stored_load(h, 1, format);
    x.z = tr_stored_load(h, 2, format);
    x.w = tr_stored_load(h, 3, format);
    return x;
}

/* Elements i .. i + 3 (i a multiple of 4) of v into a tensor stored in format whose
 * start is 16-byte aligned: one 16-byte store of floats, or one 8-byte store of four
 * 16-bit values (load4_stored's layout). The values are of the format already. */
__device__ static inline void store4_stored(void *p, size_t i, float4 v, int format)
{
    if (tr_stored_bytes(format) == 4) {
        *reinterpret_cast<float4 *>((float *)p + i) = v;
        return;
    }
    uint16_t h[4];
    tr_stored_store(h, 0, v.x, format);
    tr_stored_store(h, 1, v.y, format);
    tr_stored_store(h, 2, v.z, format);
    tr_stored_store(h, 3, v.w, format);
    uint2 u;
    u.x = (unsigned)h[0] | (unsigned)h[1] << 16;
    u.y = (unsigned)h[2] | (unsigned)h[3] << 16;
    *reinterpret_cast<uint2 *>((uint16_t *)p + i) = u;
}

/* inp stored in format (the MLP's pre-activation: transformer_kernels.h); dout and
 * dinp stored in gfmt: fp32 (gelu_backward: dout a product's output, read as values of
 * format) or format itself (mlp_backward's hidden gradient, 16 bits a value in
 * bf16/fp16-mixed). dinp may be dout: each element is read before it is written, by
 * one thread. vec: every pointer 16-byte aligned (tr_cuda_vec4). */
__global__ static void gelu_backward_kernel(void *dinp, const void *inp, const void *dout,
                                            size_t n, int format, int gfmt, int vec)
{
    TR_GRID_STRIDE(g, (n + 3) / 4)
    {
        size_t i = 4 * g;
        if (vec && i + 4 <= n) {
            float4 x = load4_stored(inp, i, format), d = load4_stored(dout, i, gfmt), r;
            r.x = gelu_backward_1(x.x, d.x, format);
            r.y = gelu_backward_1(x.y, d.y, format);
            r.z = gelu_backward_1(x.z, d.z, format);
            r.w = gelu_backward_1(x.w, d.w, format);
            store4_stored(dinp, i, r, gfmt);
        } else {
            for (size_t j = i; j < i + 4 && j < n; j++)
                tr_stored_store(dinp, j,
                                gelu_backward_1(tr_stored_load(inp, j, format),
                                                tr_stored_load(dout, j, gfmt), format),
                                gfmt);
        }
    }
}

/* The MLP's hidden activations from c_fc's fp32 product lin (bias added): pre = lin
 * rounded to format and out = gelu(pre) rounded to it, both stored in format: the
 * CPU's tr_cpu_linear_gelu_forward after its product. */
__global__ static void gelu_store_kernel(void *pre, void *out, const float *lin, size_t n,
                                         int format)
{
    TR_GRID_STRIDE(i, n)
    {
        float p = tr_round_lowp(lin[i], format);
        tr_stored_store(pre, i, p, format);
        tr_stored_store(out, i, tr_gelu(p), format);
    }
}

/* out = gelu(pre) rounded to format, both stored in it (vec: both 16-byte aligned):
 * the MLP's activation from c_fc's product where that product stored pre in 16 bits
 * itself (the CPU's tr_cpu_linear_gelu_forward after its rounded product) */
__global__ static void gelu_stored_kernel(void *out, const void *pre, size_t n, int format,
                                          int vec)
{
    TR_GRID_STRIDE(g, (n + 3) / 4)
    {
        size_t i = 4 * g;
        if (vec && i + 4 <= n) {
            float4 x = load4_stored(pre, i, format), r;
            r.x = tr_round_lowp(tr_gelu(x.x), format);
            r.y = tr_round_lowp(tr_gelu(x.y), format);
            r.z = tr_round_lowp(tr_gelu(x.z), format);
            r.w = tr_round_lowp(tr_gelu(x.w), format);
            store4_stored(out, i, r, format);
        } else {
            for (size_t j = i; j < i + 4 && j < n; j++)
                tr_stored_store(out, j, tr_gelu(tr_stored_load(pre, j, format)), format);
        }
    }
}

/* dst = src, a tensor stored in format, widened (exactly) to fp32 */
__global__ static void widen_stored_kernel(float *dst, const void *src, size_t n, int format)
{
    TR_GRID_STRIDE(i, n) dst[i] = tr_stored_load(src, i, format);
}

/* dst, a tensor stored in format, = src rounded to it (the store of a product's fp32
 * output where the product could not store 16 bits itself) */
__global__ static void narrow_stored_kernel(void *dst, const float *src, size_t n, int format)
{
    TR_GRID_STRIDE(i, n) tr_stored_store(dst, i, src[i], format);
}

__device__ static inline float residual_1(float a, float b, int format)
{
    return tr_round_lowp(tr_round_lowp(a, format) + tr_round_lowp(b, format), format);
}

/* out = a + b: the residual stream, out and a stored in format, b (a product's fp32
 * output) read as values of it. out may alias a (or b at fp32): each element is read
 * before it is written, by one thread. vec: every pointer 16-byte aligned. */
__global__ static void residual_kernel(void *out, const void *a, const float *b, size_t n,
                                       int format, int vec)
{
    TR_GRID_STRIDE(g, (n + 3) / 4)
    {
        size_t i = 4 * g;
        if (vec && i + 4 <= n) {
            float4 x = load4_stored(a, i, format);
            float4 y = *reinterpret_cast<const float4 *>(b + i), r;
            r.x = residual_1(x.x, y.x, format);
            r.y = residual_1(x.y, y.y, format);
            r.z = residual_1(x.z, y.z, format);
            r.w = residual_1(x.w, y.w, format);
            store4_stored(out, i, r, format);
        } else {
            for (size_t j = i; j < i + 4 && j < n; j++)
                tr_stored_store(out, j, residual_1(tr_stored_load(a, j, format), b[j], format),
                                format);
        }
    }
}

/* out[i] = inp[i] times dropout's factor (dropout_math.h), out may be inp: one thread
 * per group of four global indices, one Philox call each, the CPU's grouping
 * (tr_cpu_dropout), so both draw and apply the same bits */
__global__ static void dropout_kernel(float *out, const float *inp, size_t n, tr_dropout d)
{
    uint64_t g0 = d.base >> 2, ng = ((d.base + n - 1) >> 2) - g0 + 1;
    TR_GRID_STRIDE(k, ng)
    {
        uint32_t r[4];
        tr_philox4x32(r, d.seed, d.stream, g0 + k);
#pragma unroll
        for (int w = 0; w < 4; w++) {
            uint64_t e = (g0 + k) * 4 + (uint64_t)w;
            if (e < d.base || e - d.base >= n)
                continue;
            size_t i = (size_t)(e - d.base);
            out[i] = inp[i] * (r[w] < d.threshold ? 0.0f : d.scale);
        }
    }
}

#endif
