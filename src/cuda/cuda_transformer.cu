/* cuda_transformer.cu: the element-wise and row-wise kernels of a GPT-2 style model
 * on the GPU: token + position embedding (whole and vocabulary-sharded), layernorm,
 * GELU and the residual add. Attention is in cuda_attention.cu, the cross-entropy in
 * cuda_xent.cu.
 *
 * Semantics as in transformer_kernels.h. Parameter gradients are sums over rows;
 * they are formed without atomics, in an order fixed by the shapes alone, so they
 * are identical run to run: the embedding gradients even add rows in the CPU's
 * order (same bits when the inputs match), layernorm's use the column-lane scheme
 * of cuda_gemm.cu's bias gradient. */
#include "cuda/cuda_common.h"
#include "cuda/cuda_ops.h"
#include "cuda/norm_kernels.cuh"

#include "backend/lowp_math.h" /* tr_round_lowp */

/* ---- embedding ------------------------------------------------------------------ */

/* out = wte[tok - v0] where this shard holds the token (else 0) + wpe[t] (when
 * given); the expression is the CPU's, so a single shard gives the same bits. */
__global__ static void embedding_forward_kernel(float *out, const int *tok, const float *wte,
                                                const float *wpe, size_t BT, int T, int C,
                                                int v0, int Vl)
{
    TR_GRID_STRIDE(i, BT * C)
    {
        size_t r = i / C;
        int c = (int)(i % C);
        long j = (long)tok[r] - v0;
        float e = j >= 0 && j < Vl ? wte[(size_t)j * C + c] : 0.0f;
        float p = wpe ? wpe[(r % T) * C + c] : 0.0f;
        out[i] = e + p;
    }
}

/* dwte rows without atomics. Block (r, slice) handles the token of row r, channels
 * [slice * blockDim, ...), but only when r is that token's first row: then it alone
 * owns the token's dwte row and adds every row holding the token, in row order,
 * onto it, exactly as the CPU loop does.
 *  - Whether r is a first row: the block scans the tokens before r, blockDim at a
 *    time (BT^2 / 2 token reads in all, spread over every block: about 0.1 ms at
 *    B*T = 16K).
 *  - The rows holding the token: the block reads the tokens from r on, blockDim at a
 *    time; each warp ballots its 32 matches into shared memory, and every thread then
 *    walks the set bits in order, so a thread's work is the token's count, not the
 *    rows after r (a loop over every later row, per thread, cost an estimated 3-10 ms
 *    per GPT-2 step at B*T = 16K).
 * Every thread stays in the loops (the ballots and barriers need the whole block);
 * only those with a channel c < C read and write. blockDim is TR_CUDA_BLOCK, a
 * multiple of 32. */
__global__ static void embedding_wte_backward_kernel(float *dwte, const float *dout,
                                                     const int *tok, int BT, int C, int v0,
                                                     int Vl)
{
    __shared__ unsigned hits[TR_CUDA_BLOCK / 32];
    int r = blockIdx.x, token = tok[r];
    long j = (long)token - v0;
    if (j < 0 || j >= Vl) /* the same for the whole block */
        return;
    int seen = 0;
    for (int i = threadIdx.x; i < r; i += blockDim.x)
        seen |= tok[i] == token;
    if (__syncthreads_or(seen))
        return;
    int c = blockIdx.y * blockDim.x + threadIdx.x, lane = threadIdx.x % 32;
    int warps = blockDim.x / 32;
    float acc = c < C ? dwte[(size_t)j * C + c] : 0.0f;
    for (int base = r; base < BT; base += blockDim.x) { /* the same trips for every thread */
        int r2 = base + threadIdx.x;
        unsigned m = __ballot_sync(0xffffffffu, r2 < BT && tok[r2] == token);
        if (lane == 0)
            hits[threadIdx.x / 32] = m;
        __syncthreads();
        if (c < C)
            for (int w = 0; w < warps; w++)
                for (unsigned bits = hits[w]; bits; bits &= bits - 1)
                    acc += dout[(size_t)(base + w * 32 + __ffs(bits) - 1) * C + c];
        __syncthreads(); /* before the next trip overwrites hits */
    }
    if (c < C)
        dwte[(size_t)j * C + c] = acc;
}

/* dwpe[t, c] += dout[b, t, c] for b = 0, 1, ...: one thread per (t, c), rows in
 * the CPU's order. */
__global__ static void embedding_wpe_backward_kernel(float *dwpe, const float *dout, int B,
                                                     int T, int C)
{
    TR_GRID_STRIDE(i, (size_t)T * C)
    {
        float acc = dwpe[i];
        for (int b = 0; b < B; b++)
            acc += dout[(size_t)b * T * C + i];
        dwpe[i] = acc;
    }
}

void tr_cuda_embedding_shard_forward(float *out, const int *tok, const float *wte,
                                     const float *wpe, int B, int T, int C, int v0, int Vl)
{
    size_t BT = (size_t)B * T;
    if (BT == 0 || C <= 0)
        return;
    embedding_forward_kernel<<<tr_cuda_grid(BT * C), TR_CUDA_BLOCK, 0, tr_cuda_stream()>>>(
        out, tok, wte, wpe, BT, T, C, v0, Vl);
    TR_CUDA_LAUNCHED();
}

void tr_cuda_embedding_shard_backward(float *dwte, float *dwpe, const float *dout,
                                      const int *tok, int B, int T, int C, int v0, int Vl)
{
    int BT = B * T;
    if (BT <= 0 || C <= 0)
        return;
    cudaStream_t s = tr_cuda_stream();
    dim3 grid((unsigned)BT, (unsigned)((C + TR_CUDA_BLOCK - 1) / TR_CUDA_BLOCK));
    embedding_wte_backward_kernel<<<grid, TR_CUDA_BLOCK, 0, s>>>(dwte, dout, tok, BT, C, v0, Vl);
    TR_CUDA_LAUNCHED();
    if (dwpe) {
        embedding_wpe_backward_kernel<<<tr_cuda_grid((size_t)T * C), TR_CUDA_BLOCK, 0, s>>>(
            dwpe, dout, B, T, C);
        TR_CUDA_LAUNCHED();
    }
}

void tr_cuda_embedding_forward(float *out, const int *tok, const float *wte, const float *wpe,
                               int B, int T, int C, int V)
{
    tr_cuda_check_tokens(tok, (size_t)B * T, V, "embedding_forward");
    tr_cuda_embedding_shard_forward(out, tok, wte, wpe, B, T, C, 0, V);
}

void tr_cuda_embedding_backward(float *dwte, float *dwpe, const float *dout, const int *tok,
                                int B, int T, int C, int V)
{
    tr_cuda_check_tokens(tok, (size_t)B * T, V, "embedding_backward");
    tr_cuda_embedding_shard_backward(dwte, dwpe, dout, tok, B, T, C, 0, V);
}

/* ---- layernorm ------------------------------------------------------------------ */

void tr_cuda_layernorm_forward(void *out, float *mean, float *rstd, const void *inp,
                               const float *weight, const float *bias, int B, int T, int C,
                               int format)
{
    size_t BT = (size_t)B * T;
    if (BT == 0 || C <= 0)
        return;
    unsigned blocks = (unsigned)((BT + LN_ROWS_PER_BLOCK - 1) / LN_ROWS_PER_BLOCK);
    layernorm_forward_kernel<<<blocks, TR_CUDA_BLOCK, 0, tr_cuda_stream()>>>(
        out, mean, rstd, inp, weight, bias, BT, C, format);
    TR_CUDA_LAUNCHED();
}

void tr_cuda_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                const void *inp, const float *weight, const float *mean,
                                const float *rstd, int B, int T, int C, int format,
                                int accumulate)
{
    size_t BT = (size_t)B * T;
    if (BT == 0 || C <= 0)
        return;
    const tr_cuda_ctx *ctx = tr_cuda_ctx_with_scratch();
    cudaStream_t s = ctx->stream;
    if (ln_fused_kpl(C)) { /* one pass over dout and inp (norm_kernels.cuh) */
        int RB = ln_fused_row_blocks(BT, C);
#define LN_FUSED(KPL)                                                                      \
    layernorm_backward_fused_kernel<KPL><<<(unsigned)RB, TR_CUDA_BLOCK, 0, s>>>(           \
        dinp, ctx->d_col_partial, dout, inp, weight, mean, rstd, BT, C, RB, format, accumulate)
        switch (ln_fused_kpl(C)) {
        case 8: LN_FUSED(8); break;
        case 16: LN_FUSED(16); break;
        case 24: LN_FUSED(24); break;
        default: LN_FUSED(32); break;
        }
#undef LN_FUSED
        TR_CUDA_LAUNCHED();
        tr_cuda_add_partials(dweight, ctx->d_col_partial, C, RB);
        tr_cuda_add_partials(dbias, ctx->d_col_partial + (size_t)RB * C, C, RB);
        return;
    }
    if ((size_t)C * 2 > TR_CUDA_COL_PARTIAL_FLOATS)
        tr_fatal(TR_EXIT_USAGE, "layernorm_backward: %d channels; the CUDA backend's partial "
                 "sums hold at most %zu", C, TR_CUDA_COL_PARTIAL_FLOATS / 2);
    int RB = tr_cuda_row_blocks(BT, 2 * (size_t)C);
    dim3 block(32, LN_LANES), grid((unsigned)((C + 31) / 32), (unsigned)RB);
    layernorm_backward_params_partial_kernel<<<grid, block, 0, s>>>(ctx->d_col_partial, dout, inp,
                                                                    mean, rstd, BT, C, RB,
                                                                    format);
    TR_CUDA_LAUNCHED();
    tr_cuda_add_partials(dweight, ctx->d_col_partial, C, RB);
    tr_cuda_add_partials(dbias, ctx->d_col_partial + (size_t)RB * C, C, RB);
    unsigned blocks = (unsigned)((BT + LN_ROWS_PER_BLOCK - 1) / LN_ROWS_PER_BLOCK);
    layernorm_backward_dinp_kernel<<<blocks, TR_CUDA_BLOCK, 0, s>>>(
        dinp, dout, inp, weight, mean, rstd, BT, C, format, accumulate);
    TR_CUDA_LAUNCHED();
}

/* ---- GELU and residual ---------------------------------------------------------- */

void tr_cuda_gelu_forward(float *out, const float *inp, size_t n)
{
    if (n == 0)
        return;
    gelu_forward_kernel<<<tr_cuda_grid(n), TR_CUDA_BLOCK, 0, tr_cuda_stream()>>>(out, inp, n);
    TR_CUDA_LAUNCHED();
}

void tr_cuda_gelu_backward(float *dinp, const void *inp, const float *dout, size_t n,
                           int format)
{
    if (n == 0)
        return;
    gelu_backward_kernel<<<tr_cuda_grid((n + 3) / 4), TR_CUDA_BLOCK, 0, tr_cuda_stream()>>>(
        dinp, inp, dout, n, format, TR_PREC_FP32, tr_cuda_vec4(dinp, inp, dout));
    TR_CUDA_LAUNCHED();
}

void tr_cuda_gelu_backward_stored(void *d, const void *inp, size_t n, int format)
{
    if (n == 0)
        return;
    gelu_backward_kernel<<<tr_cuda_grid((n + 3) / 4), TR_CUDA_BLOCK, 0, tr_cuda_stream()>>>(
        d, inp, d, n, format, format, tr_cuda_vec4(d, inp, d));
    TR_CUDA_LAUNCHED();
}

void tr_cuda_gelu_store(void *pre, void *out, const float *lin, size_t n, int format)
{
    if (n == 0)
        return;
    gelu_store_kernel<<<tr_cuda_grid(n), TR_CUDA_BLOCK, 0, tr_cuda_stream()>>>(pre, out, lin, n,
                                                                                format);
    TR_CUDA_LAUNCHED();
}

void tr_cuda_gelu_stored(void *out, const void *pre, size_t n, int format)
{
    if (n == 0)
        return;
    gelu_stored_kernel<<<tr_cuda_grid((n + 3) / 4), TR_CUDA_BLOCK, 0, tr_cuda_stream()>>>(
        out, pre, n, format, tr_cuda_vec4(out, pre, out));
    TR_CUDA_LAUNCHED();
}

void tr_cuda_widen_stored(float *dst, const void *src, size_t n, int format)
{
    if (n == 0)
        return;
    widen_stored_kernel<<<tr_cuda_grid(n), TR_CUDA_BLOCK, 0, tr_cuda_stream()>>>(dst, src, n,
                                                                                  format);
    TR_CUDA_LAUNCHED();
}

void tr_cuda_narrow_stored(void *dst, const float *src, size_t n, int format)
{
    if (n == 0)
        return;
    narrow_stored_kernel<<<tr_cuda_grid(n), TR_CUDA_BLOCK, 0, tr_cuda_stream()>>>(dst, src, n,
                                                                                  format);
    TR_CUDA_LAUNCHED();
}

void tr_cuda_residual_forward(void *out, const void *a, const float *b, size_t n, int format)
{
    if (n == 0)
        return;
    residual_kernel<<<tr_cuda_grid((n + 3) / 4), TR_CUDA_BLOCK, 0, tr_cuda_stream()>>>(
        out, a, b, n, format, tr_cuda_vec4(out, a, b));
    TR_CUDA_LAUNCHED();
}
