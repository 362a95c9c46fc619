/* cuda_optim.cu: optimizer updates, the squared norm (gradient clipping), scaling
 * and mixed precision's rounding on the GPU.
 *
 * The update rules are scalar_math.h's, the very functions the CPU backend runs, so
 * the two cannot drift apart; the per-call constants (AdamW's bias corrections) are
 * made once on the host, in double, as on the CPU, and passed by value. */
#include "cuda/cuda_common.h"
#include "cuda/cuda_ops.h"
#include "cuda/optim_kernels.cuh"

#include "backend/lowp_math.h"
#include "backend/scalar_math.h"

#include <stdint.h>
#include <string.h>

__global__ static void scale_kernel(float *x, size_t n, float a)
{
    TR_GRID_STRIDE(i, n) x[i] *= a;
}

void tr_cuda_sgd_update(float *param, float *momentum_buf, const float *grad, size_t n,
                        float lr, float momentum, float weight_decay, float *lowp, int format)
{
    if (n == 0)
        return;
    sgd_kernel<<<tr_cuda_grid(n), TR_CUDA_BLOCK, 0, tr_cuda_stream()>>>(
        param, momentum_buf, grad, n, lr, momentum, weight_decay, lowp, format);
    TR_CUDA_LAUNCHED();
}

void tr_cuda_adamw_update(float *param, float *m, float *v, const float *grad, size_t n,
                          float lr, double beta1, double beta2, float eps, float weight_decay,
                          long t, float *lowp, int format)
{
    if (t < 1) /* the bias corrections 1 - beta^t would divide by zero */
        tr_fatal(TR_EXIT_SOFTWARE, "adamw_update: step %ld, steps count from 1", t);
    if (n == 0)
        return;
    tr_adamw_consts c = tr_adamw_make_consts(lr, beta1, beta2, eps, weight_decay, t);
    int vec = ((uintptr_t)param | (uintptr_t)m | (uintptr_t)v | (uintptr_t)grad |
               (uintptr_t)lowp) % 16 == 0;
    adamw_kernel<<<tr_cuda_grid((n + 3) / 4), TR_CUDA_BLOCK, 0, tr_cuda_stream()>>>(
        param, m, v, grad, n, c, lowp, format, vec);
    TR_CUDA_LAUNCHED();
}

/* Up to TR_ADAMW_SPANS tensors a launch: GPT-2 124M's 148 in 5 launches instead of
 * 148, most of which (biases, layernorms: 768 values) cost a launch's fixed time
 * rather than any bandwidth. Each span's groups of four are its own, from its start,
 * as adamw_update makes them, so the bits are the calls'. */
static void adamw_chunk_launch(adamw_chunk *ch, int format)
{
    if (!ch->count)
        return;
    adamw_spans_kernel<<<tr_cuda_grid(ch->groups), TR_CUDA_BLOCK, 0, tr_cuda_stream()>>>(*ch,
                                                                                    format);
    TR_CUDA_LAUNCHED();
    ch->count = 0;
    ch->groups = 0;
}

void tr_cuda_adamw_update_spans(const tr_adamw_span *s, int count, float lr, double beta1,
                                double beta2, float eps, long t, int format, int grad_format,
                                float grad_factor)
{
    if (t < 1) /* the bias corrections 1 - beta^t would divide by zero */
        tr_fatal(TR_EXIT_SOFTWARE, "adamw_update: step %ld, steps count from 1", t);
    adamw_chunk ch;
    memset(&ch, 0, sizeof ch);
    ch.c = tr_adamw_make_consts(lr, beta1, beta2, eps, 0.0f, t);
    ch.grad_format = grad_format;
    ch.grad_factor = grad_factor;
    for (int i = 0; i < count; i++) {
        if (s[i].n == 0)
            continue;
        int k = ch.count++;
        ch.s[k].param = s[i].param, ch.s[k].m = s[i].m, ch.s[k].v = s[i].v;
        ch.s[k].grad = s[i].grad, ch.s[k].lowp = s[i].lowp;
        ch.s[k].n = s[i].n;
        ch.s[k].start = ch.groups;
        ch.s[k].decay_factor =
            tr_adamw_make_consts(lr, beta1, beta2, eps, s[i].weight_decay, t).decay_factor;
        ch.s[k].vec = ((uintptr_t)s[i].param | (uintptr_t)s[i].m | (uintptr_t)s[i].v |
                       (uintptr_t)s[i].grad | (uintptr_t)s[i].lowp) % 16 == 0;
        ch.groups += (s[i].n + 3) / 4;
        if (ch.count == TR_ADAMW_SPANS)
            adamw_chunk_launch(&ch, format);
    }
    adamw_chunk_launch(&ch, format);
}

void tr_cuda_scale(float *x, size_t n, float a)
{
    if (n == 0)
        return;
    scale_kernel<<<tr_cuda_grid(n), TR_CUDA_BLOCK, 0, tr_cuda_stream()>>>(x, n, a);
    TR_CUDA_LAUNCHED();
}

__global__ static void round_lowp_kernel(float *x, size_t n, int format)
{
    TR_GRID_STRIDE(i, n) x[i] = tr_round_lowp(x[i], format);
}

/* The same four floats a thread: 16-byte accesses. A pass over an activation is
 * bound by memory bandwidth alone, and a bf16-mixed GPT step makes some 240 of them
 * (an H100 profile put them at 22 of 128 ms), so their width matters. */
__global__ static void round_lowp4_kernel(float4 *x, size_t n4, int format)
{
    TR_GRID_STRIDE(i, n4)
    {
        float4 v = x[i];
        v.x = tr_round_lowp(v.x, format);
        v.y = tr_round_lowp(v.y, format);
        v.z = tr_round_lowp(v.z, format);
        v.w = tr_round_lowp(v.w, format);
        x[i] = v;
    }
}

void tr_cuda_round_lowp(float *x, size_t n, int format)
{
    if (n == 0 || format == TR_PREC_FP32)
        return;
    size_t n4 = (uintptr_t)x % 16 == 0 ? n / 4 : 0, rest = n - 4 * n4;
    if (n4) {
        round_lowp4_kernel<<<tr_cuda_grid(n4), TR_CUDA_BLOCK, 0, tr_cuda_stream()>>>(
            (float4 *)x, n4, format);
        TR_CUDA_LAUNCHED();
    }
    if (rest) {
        round_lowp_kernel<<<tr_cuda_grid(rest), TR_CUDA_BLOCK, 0, tr_cuda_stream()>>>(
            x + 4 * n4, rest, format);
        TR_CUDA_LAUNCHED();
    }
}

/* The global norm of a sharded model's gradients is one span a tensor: GPT-2 124M's
 * 148, 1.5B's 580. One wait for them all, not one each (each wait leaves the GPU idle
 * for a copy, the host's wake-up and the next launches: some 20 us). Empty spans add
 * nothing (tr_cuda_sum_squares returns 0 for them without a kernel). */
/* the k spans of ch, their sums added to the device's total. Where every span is short
 * enough for one element a thread, the grid stops after the longest span's last
 * element: each element has the thread it has in the full grid, and the blocks left
 * out would each have stored 0 (a GPT-2 bias of 768 values: 3 blocks of the 1024). */
static void add_spans(const tr_cuda_ctx *c, const span_chunk *ch, int k, int first, int format)
{
    size_t longest = 0;
    for (int i = 0; i < k; i++)
        longest = ch->n[i] > longest ? ch->n[i] : longest;
    unsigned used = longest >= (size_t)TR_CUDA_REDUCE_BLOCKS * TR_CUDA_BLOCK
                        ? TR_CUDA_REDUCE_BLOCKS
                        : (unsigned)((longest + TR_CUDA_BLOCK - 1) / TR_CUDA_BLOCK);
    dim3 grid(used, (unsigned)k);
    span_squares_partial_kernel<<<grid, TR_CUDA_BLOCK, 0, c->stream>>>(c->d_partial, *ch,
                                                                        format);
    TR_CUDA_LAUNCHED();
    add_span_sums_kernel<<<1, TR_CUDA_REDUCE_BLOCKS, 0, c->stream>>>(c->d_result, c->d_partial,
                                                                      k, first, used);
    TR_CUDA_LAUNCHED();
}

double tr_cuda_sum_squares_spans(const float *const *x, const size_t *n, int count, int format)
{
    const tr_cuda_ctx *c = tr_cuda_ctx_with_scratch();
    if (!for_span_chunks(x, n, count, [c, format](const span_chunk &ch, int k, int first) {
            add_spans(c, &ch, k, first, format);
        }))
        return 0.0; /* no elements */
    TR_CUDA_CHECK(cudaMemcpyAsync(c->h_result, c->d_result, sizeof(double),
                                  cudaMemcpyDeviceToHost, c->stream));
    tr_cuda_stream_wait(c->stream);
    return *c->h_result;
}

double tr_cuda_sum_squares(const float *x, size_t n)
{
    const tr_cuda_ctx *c = tr_cuda_ctx_with_scratch();
    if (n == 0)
        return 0.0;
    sum_squares_partial_kernel<<<TR_CUDA_REDUCE_BLOCKS, TR_CUDA_BLOCK, 0, c->stream>>>(
        c->d_partial, x, n);
    TR_CUDA_LAUNCHED();
    sum_partials_kernel<<<1, TR_CUDA_REDUCE_BLOCKS, 0, c->stream>>>(c->d_result, c->d_partial);
    TR_CUDA_LAUNCHED();
    TR_CUDA_CHECK(cudaMemcpyAsync(c->h_result, c->d_result, sizeof(double),
                                  cudaMemcpyDeviceToHost, c->stream));
    tr_cuda_stream_wait(c->stream);
    return *c->h_result;
}
