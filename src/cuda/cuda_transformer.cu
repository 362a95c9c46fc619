/* cuda_transformer.cu: the element-wise and row-wise kernels of a GPT-2 style model
 * on the GPU: token + position embedding (whole and vocabulary-sharded), layernorm,
 * GELU, the residual add and dropout. Attention is in cuda_attention.cu, the cross-entropy in
 * cuda_xent.cu.
 *
 * Semantics as in transformer_kernels.h. Parameter gradients are sums over rows;
 * they are formed without atomics, in an order fixed by the shapes alone, so they
 * are identical run to run: the embedding gradients even add rows in the CPU's
 * order (same bits when the inputs match), layernorm's use the column-lane scheme
 * of cuda_gemm.cu's bias gradient. */
#include "cuda/cuda_common.h"
#include "cuda/cuda_ops.h"
#include "cuda/embedding_kernels.cuh"
#include "cuda/norm_kernels.cuh"

#include "backend/lowp_math.h" /* tr_round_lowp */

/* ---- embedding ------------------------------------------------------------------ */

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

void tr_cuda_dropout(float *out, const float *inp, size_t n, const tr_dropout *d)
{
    if (n == 0)
        return;
    dropout_kernel<<<tr_cuda_grid((n + 3) / 4 + 1), TR_CUDA_BLOCK, 0, tr_cuda_stream()>>>(
        out, inp, n, *d);
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
