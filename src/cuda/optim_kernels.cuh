/* optim_kernels.cuh: the device code of cuda_optim.cu's parameter updates (which it
 * launches), on scalar_math.h's update rules, the CPU's own, and of its squared norm
 * (gradient clipping). Free of CUDA headers, so
 * validation/unit/test_cuda_kernels_emu.cpp runs it on the CPU under the warp
 * emulator. */
#ifndef TR_OPTIM_KERNELS_CUH
#define TR_OPTIM_KERNELS_CUH

#include "backend/lowp_math.h"
#include "backend/scalar_math.h"
#include "cuda/cuda_launch.cuh"

#include <stdint.h>

/* lowp (where not NULL) gets each updated param rounded to format: mixed precision's
 * working copy, in the update's own pass */
__global__ static void sgd_kernel(float *param, float *buf, const float *grad, size_t n,
                                  float lr, float momentum, float weight_decay, float *lowp,
                                  int format)
{
    /* momentum == 0: plain SGD, buf may be NULL and is never touched */
    TR_GRID_STRIDE(i, n)
    {
        tr_sgd_elem(&param[i], momentum != 0.0f ? &buf[i] : NULL, grad[i], lr, momentum,
                    weight_decay);
        if (lowp)
            lowp[i] = tr_round_lowp(param[i], format);
    }
}

/* AdamW on parameters [i, i + 4) of a tensor of n (fewer at its end), each gradient
 * read as tr_grad_in(g, gfmt, gfac) */
__device__ static inline void adamw_group(float *param, float *m, float *v, const float *grad,
                                          size_t n, size_t i, const tr_adamw_consts *c,
                                          float *lowp, int format, int vec, int gfmt, float gfac)
{
    if (vec && i + 4 <= n) {
        float4 p4 = *reinterpret_cast<float4 *>(param + i);
        float4 m4 = *reinterpret_cast<float4 *>(m + i);
        float4 v4 = *reinterpret_cast<float4 *>(v + i);
        float4 g4 = *reinterpret_cast<const float4 *>(grad + i);
        tr_adamw_elem(&p4.x, &m4.x, &v4.x, tr_grad_in(g4.x, gfmt, gfac), c);
        tr_adamw_elem(&p4.y, &m4.y, &v4.y, tr_grad_in(g4.y, gfmt, gfac), c);
        tr_adamw_elem(&p4.z, &m4.z, &v4.z, tr_grad_in(g4.z, gfmt, gfac), c);
        tr_adamw_elem(&p4.w, &m4.w, &v4.w, tr_grad_in(g4.w, gfmt, gfac), c);
        *reinterpret_cast<float4 *>(param + i) = p4;
        *reinterpret_cast<float4 *>(m + i) = m4;
        *reinterpret_cast<float4 *>(v + i) = v4;
        if (lowp) {
            float4 r = {tr_round_lowp(p4.x, format), tr_round_lowp(p4.y, format),
                        tr_round_lowp(p4.z, format), tr_round_lowp(p4.w, format)};
            *reinterpret_cast<float4 *>(lowp + i) = r;
        }
    } else {
        for (size_t j = i; j < i + 4 && j < n; j++) {
            tr_adamw_elem(&param[j], &m[j], &v[j], tr_grad_in(grad[j], gfmt, gfac), c);
            if (lowp)
                lowp[j] = tr_round_lowp(param[j], format);
        }
    }
}

/* Four parameters a thread, with 16-byte accesses where every pointer is aligned
 * (vec; a ZeRO slice may not be), else scalar ones: the update is bandwidth-bound,
 * 32 bytes a parameter (124 M of them in GPT-2 124M). Launch over
 * tr_cuda_grid((n + 3) / 4). */
__global__ static void adamw_kernel(float *param, float *m, float *v, const float *grad, size_t n,
                                    tr_adamw_consts c, float *lowp, int format, int vec)
{
    TR_GRID_STRIDE(g, (n + 3) / 4)
    {
        adamw_group(param, m, v, grad, n, 4 * g, &c, lowp, format, vec, TR_PREC_FP32, 1.0f);
    }
}

/* Spans of adamw_spans_kernel in one launch, passed by value (about 2.1 KB of kernel
 * parameters, under the 4 KB limit) */
#define TR_ADAMW_SPANS 32

/* One launch's spans: span k covers the launch's groups of four [start, start +
 * (n + 3) / 4), in order; c is the step's constants but for the decay factor, which
 * is each span's own (tr_adamw_make_consts' for its weight decay); the gradients are
 * read as tr_grad_in(g, grad_format, grad_factor). */
typedef struct adamw_chunk {
    tr_adamw_consts c;
    int count, grad_format;
    float grad_factor;
    size_t groups; /* of all count spans */
    struct {
        float *param, *m, *v, *lowp;
        const float *grad;
        size_t n, start;
        float decay_factor;
        int vec; /* every pointer 16-byte aligned */
    } s[TR_ADAMW_SPANS];
} adamw_chunk;

/* adamw_kernel over several tensors: each group of four finds its span (a binary
 * search over the starts) and is updated as adamw_kernel updates it, the same bits */
__global__ static void adamw_spans_kernel(adamw_chunk ch, int format)
{
    TR_GRID_STRIDE(g, ch.groups)
    {
        int lo = 0, hi = ch.count - 1; /* the last span starting at or before g */
        while (lo < hi) {
            int mid = (lo + hi + 1) / 2;
            if (ch.s[mid].start <= g)
                lo = mid;
            else
                hi = mid - 1;
        }
        tr_adamw_consts c = ch.c;
        c.decay_factor = ch.s[lo].decay_factor;
        adamw_group(ch.s[lo].param, ch.s[lo].m, ch.s[lo].v, ch.s[lo].grad, ch.s[lo].n,
                    4 * (g - ch.s[lo].start), &c, ch.s[lo].lowp, format, ch.s[lo].vec,
                    ch.grad_format, ch.grad_factor);
    }
}

/* ---- the squared norm (gradient clipping): two passes, a fixed grid --------------- */

/* Pass 1: TR_CUDA_REDUCE_BLOCKS blocks (never more or fewer, whatever the GPU), each
 * thread adding every (grid size)-th element in double, then a block tree. Which
 * thread adds which element, and in what order, depends only on n. */
__global__ static void sum_squares_partial_kernel(double *partial, const float *x, size_t n)
{
    __shared__ double sh[32];
    if (blockIdx.x * (size_t)blockDim.x >= n) { /* no element here: its tree would give 0 */
        if (threadIdx.x == 0)
            partial[blockIdx.x] = 0.0;
        return;
    }
    double s = 0.0;
    TR_GRID_STRIDE(i, n) s += (double)x[i] * x[i];
    s = tr_block_sum(s, sh);
    if (threadIdx.x == 0)
        partial[blockIdx.x] = s;
}

/* Pass 2: one block of TR_CUDA_REDUCE_BLOCKS threads adds the partial sums. */
__global__ static void sum_partials_kernel(double *result, const double *partial)
{
    __shared__ double sh[32];
    double s = tr_block_sum(partial[threadIdx.x], sh);
    if (threadIdx.x == 0)
        *result = s;
}

/* ---- the sum of squares of many spans, with one wait ------------------------------ */

/* Each span's sum exactly as the two passes above make it (the same grid over its
 * elements, the same trees); the host's sum of them, in span order in double, made on
 * the device. A launch takes TR_CUDA_SPAN_CHUNK spans (blockIdx.y), by value. The
 * partial sums of span k of a launch sit at k * TR_CUDA_REDUCE_BLOCKS: a grid of
 * fewer blocks (the emulator's test) keeps the same places. */
typedef struct span_chunk {
    const float *x[TR_CUDA_SPAN_CHUNK];
    size_t n[TR_CUDA_SPAN_CHUNK];
} span_chunk;

/* (each value rounded to format first: tr_grad_in's rounding, the norm of the
 * gradients an update reads) */
__global__ static void span_squares_partial_kernel(double *partial, span_chunk c, int format)
{
    __shared__ double sh[32];
    const float *x = c.x[blockIdx.y];
    size_t n = c.n[blockIdx.y];
    /* a block past a short span's elements (most of the grid for a bias) stores the 0
     * its tree would give, without the tree: the same bits, less work */
    if (blockIdx.x * (size_t)blockDim.x >= n) {
        if (threadIdx.x == 0)
            partial[(size_t)blockIdx.y * TR_CUDA_REDUCE_BLOCKS + blockIdx.x] = 0.0;
        return;
    }
    double s = 0.0;
    TR_GRID_STRIDE(i, n)
    {
        double r = tr_round_lowp(x[i], format);
        s += r * r;
    }
    s = tr_block_sum(s, sh);
    if (threadIdx.x == 0)
        partial[(size_t)blockIdx.y * TR_CUDA_REDUCE_BLOCKS + blockIdx.x] = s;
}

/* *total (0 where first) + each of the count spans' sums, in order (every thread adds
 * the same values; thread 0 stores). The partial sums' grid had `used` blocks: the
 * others, which would have held 0, are taken as 0. */
__global__ static void add_span_sums_kernel(double *total, const double *partial, int count,
                                            int first, unsigned used)
{
    __shared__ double sh[32];
    double t = first ? 0.0 : *total;
    for (int k = 0; k < count; k++)
        t += tr_block_sum(
            threadIdx.x < used ? partial[(size_t)k * TR_CUDA_REDUCE_BLOCKS + threadIdx.x] : 0.0,
            sh);
    if (threadIdx.x == 0)
        *total = t;
}

/* The host's walk of tr_cuda_sum_squares_spans: the spans of x[0..count) that hold
 * elements, TR_CUDA_SPAN_CHUNK a chunk, each chunk handed to add(chunk, k, first): k
 * spans, first where the chunk starts the total. Returns 0 where no span has an
 * element (nothing handed over). */
template <typename Add>
static int for_span_chunks(const float *const *x, const size_t *n, int count, Add add)
{
    span_chunk ch;
    int k = 0, first = 1;
    for (int i = 0; i < count; i++) {
        if (n[i] == 0)
            continue;
        ch.x[k] = x[i];
        ch.n[k++] = n[i];
        if (k == TR_CUDA_SPAN_CHUNK) {
            add(ch, k, first);
            k = 0, first = 0;
        }
    }
    if (k) {
        add(ch, k, first);
        first = 0;
    }
    return !first;
}

#endif
