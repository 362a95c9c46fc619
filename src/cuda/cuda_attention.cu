/* cuda_attention.cu: the core of causal multi-head self-attention on the GPU, fused
 * (the FlashAttention-2 scheme): the same function as cpu_attention.c, whose header
 * has the formulas, without ever forming the T x T scores in memory.
 *
 * Why fused: the materialised form (cuBLAS score products, a softmax kernel, the
 * probabilities saved for backward) moved B*NH*T*T floats through memory several
 * times per layer. For GPT-2 124M at 16 x 1024 that is 805 MB per tensor, and an
 * H100 profile (ncu, 2026-11-22) put the attention products, the two softmax kernels
 * and the rounding of the saved probabilities at about 70 of a step's 170 ms. The
 * fused kernels read Q, K, V (and dO) tile by tile from global memory, keep the
 * scores of one tile in registers, and save only each row's log-sum-exp.
 *
 * Forward, one block per (batch row b, head h, tile of BR query rows): each warp
 * owns R query rows, each lane one key of the current 32-key tile. Per tile: the
 * lane's score s = scale q.k, the online softmax (running max m and sum l per row,
 * the accumulator rescaled by exp(m_old - m_new)), then O += p V with the lanes
 * over the head's dimensions. At the end O /= l and lse = m + log l is saved in att.
 *
 * Backward recomputes p = exp(s - lse) and needs Dvec_i = sum_j p_ij dp_ij, which is
 * rowsum(dO_i * O_i) (O is forward's output): a small kernel writes it into datt.
 * Then two kernels, each owning what it writes so no atomics are needed and results
 * are identical run to run: dK, dV per key tile (warps over keys, lanes over the
 * queries of a 32-query tile), and dQ per query tile (warps over queries, lanes over
 * keys). With ds = p (dp - Dvec) and dp = dO.v: dV_j = sum_i p_ij dO_i, dK_j = scale
 * sum_i ds_ij q_i, dQ_i = scale sum_j ds_ij k_j.
 *
 * Precision: the kernels here are fp32 on the CUDA cores, for fp32 runs and head sizes
 * the tensor-core forms do not take. bf16- and fp16-mixed runs (head sizes up to 128)
 * take the same scheme on tensor cores (WMMA: cuda_attention_tc.cu), which rounds the
 * probabilities and score gradients to the format before multiplying them; with the
 * mma.sync form chosen (cuda_attention_tc.h), head sizes up to 64 take that, rounding
 * them alike.
 *
 * Head sizes up to 256: HS is padded with zeros to D = 32, 64, 128 or 256 (a
 * template argument, so the per-lane arrays have a fixed size). */
#include "cuda/cuda_attention_tc.h"
#include "cuda/cuda_common.h"
#include "cuda/cuda_ops.h"

#include "cuda/attention_decode_kernels.cuh"
#include "cuda/attention_flash_kernels.cuh"

#include "backend/lowp_math.h" /* tr_precision */

#include <math.h>

static int head_size(int C, int NH, const char *what)
{
    if (NH < 1 || C % NH != 0)
        tr_fatal(TR_EXIT_SOFTWARE, "%s: C = %d is not a multiple of NH = %d", what, C, NH);
    return C / NH;
}

template <int D>
static void forward_d(void *out, float *lse, const void *qkv, int B, int T, int C, int NH,
                      int HS, float scale, int format, const tr_dropout &drop)
{
    static int opted;
    size_t smem = fwd_smem<D>();
    tr_cuda_allow_smem(flash_forward_kernel<D>, smem, &opted);
    unsigned grid = tr_cuda_tile_grid(B, NH, T, FA_WARPS * fa_rows<D>::R);
    flash_forward_kernel<D><<<grid, FA_THREADS, smem, tr_cuda_stream()>>>(out, lse, qkv, T, C,
                                                                         NH, HS, scale, format,
                                                                         drop);
    TR_CUDA_LAUNCHED();
}

template <int D>
static void backward_d(void *dqkv, const void *dout, const void *qkv, const float *lse,
                       const float *dvec, int B, int T, int C, int NH, int HS, float scale,
                       int format, const tr_dropout &drop)
{
    static int opted_kv, opted_q;
    size_t smem = bwd_smem<D>();
    unsigned grid = tr_cuda_tile_grid(B, NH, T, FA_WARPS * fa_rows<D>::R);
    tr_cuda_allow_smem(flash_dkv_kernel<D>, smem, &opted_kv);
    tr_cuda_allow_smem(flash_dq_kernel<D>, smem, &opted_q);
    flash_dkv_kernel<D><<<grid, FA_THREADS, smem, tr_cuda_stream()>>>(
        dqkv, dout, qkv, lse, dvec, T, C, NH, HS, scale, format, drop);
    TR_CUDA_LAUNCHED();
    flash_dq_kernel<D><<<grid, FA_THREADS, smem, tr_cuda_stream()>>>(
        dqkv, dout, qkv, lse, dvec, T, C, NH, HS, scale, format, drop);
    TR_CUDA_LAUNCHED();
}

static int padded_head(int HS, const char *what)
{
    if (HS > FA_MAX_HS)
        tr_fatal(TR_EXIT_USAGE,
                 "%s: head size %d (n_embd / n_head) is above the %d the GPU's fused attention "
                 "supports; use more heads (model.n_head) or train on the CPU",
                 what, HS, FA_MAX_HS);
    return HS <= 32 ? 32 : HS <= 64 ? 64 : HS <= 128 ? 128 : 256;
}

size_t tr_cuda_attention_state_floats(int B, int T, int NH) { return (size_t)B * NH * T; }

enum { FORM_FLASH, FORM_WMMA, FORM_MMA };

/* Which form runs. The tensor-core ones where the run's products are of its 16-bit
 * format (set before the first kernel: the same in forward and backward): the
 * mma.sync kernels where chosen and the head size fits (cuda_attention_tc.h; the
 * choice holds for the run), else WMMA (where the GPU grants its shared memory); both
 * take bf16 and fp16. Else the fp32 kernels here. Each form drops
 * attention's probabilities alike (model.attn_pdrop; dropout_math.h). */
static int attention_form(int HS, int format)
{
    if (!tr_is_lowp(format) || tr_cuda_gemm_precision() != format)
        return FORM_FLASH;
    if (tr_cuda_attention_mma_chosen() && tr_cuda_attention_mma_fits(HS))
        return FORM_MMA;
    if (tr_cuda_attention_tc_fits(HS))
        return FORM_WMMA;
    return FORM_FLASH;
}

void tr_cuda_attention_forward(void *out, float *att, const void *qkv, int B, int T, int C,
                               int NH, int format, const tr_dropout *drop)
{
    /* out is rounded to format as it is stored; the saved log-sum-exps stay fp32:
     * they are not an activation */
    int HS = head_size(C, NH, "attention_forward");
    if (B <= 0 || T <= 0)
        return;
    float scale = 1.0f / sqrtf((float)HS);
    int form = attention_form(HS, format);
    tr_dropout d = tr_dropout_on(drop) ? *drop : tr_dropout_make(0.0f, 0, 0, 0, 0);
    if (form == FORM_MMA) {
        tr_cuda_attention_mma_forward(out, att, qkv, B, T, C, NH, HS, scale, format, d);
        return;
    }
    if (form == FORM_WMMA) {
        tr_cuda_attention_tc_forward(out, att, qkv, B, T, C, NH, HS, scale, format, d);
        return;
    }
    switch (padded_head(HS, "attention_forward")) {
    case 32: forward_d<32>(out, att, qkv, B, T, C, NH, HS, scale, format, d); break;
    case 64: forward_d<64>(out, att, qkv, B, T, C, NH, HS, scale, format, d); break;
    case 128: forward_d<128>(out, att, qkv, B, T, C, NH, HS, scale, format, d); break;
    default: forward_d<256>(out, att, qkv, B, T, C, NH, HS, scale, format, d); break;
    }
}

void tr_cuda_attention_decode(void *out, float *scratch, const void *qkv, int T, int C, int NH,
                              int format)
{
    int HS = head_size(C, NH, "attention_decode");
    if (T <= 0)
        return;
    attention_decode_kernel<<<(unsigned)NH, TR_CUDA_BLOCK, 0, tr_cuda_stream()>>>(
        out, scratch, qkv, T, C, HS, 1.0f / sqrtf((float)HS), format);
    TR_CUDA_LAUNCHED();
}

void tr_cuda_attention_backward(void *dqkv, float *datt, const void *dout, const void *out,
                                const void *qkv, const float *att, int B, int T, int C, int NH,
                                int format, const tr_dropout *drop)
{
    int HS = head_size(C, NH, "attention_backward");
    if (B <= 0 || T <= 0)
        return;
    float scale = 1.0f / sqrtf((float)HS);
    float *dvec = datt; /* [B, NH, T] of the caller's scratch */
    size_t rows = (size_t)B * T * NH;
    const unsigned per_block = TR_CUDA_BLOCK / 32;
    flash_dvec_kernel<<<(unsigned)((rows + per_block - 1) / per_block), TR_CUDA_BLOCK, 0,
                        tr_cuda_stream()>>>(dvec, dout, out, B, T, C, NH, HS, format);
    TR_CUDA_LAUNCHED();
    int form = attention_form(HS, format);
    tr_dropout d = tr_dropout_on(drop) ? *drop : tr_dropout_make(0.0f, 0, 0, 0, 0);
    if (form == FORM_MMA) {
        tr_cuda_attention_mma_backward(dqkv, dout, qkv, att, dvec, B, T, C, NH, HS, scale,
                                       format, d);
        return;
    }
    if (form == FORM_WMMA) {
        tr_cuda_attention_tc_backward(dqkv, dout, qkv, att, dvec, B, T, C, NH, HS, scale,
                                      format, d);
        return;
    }
    switch (padded_head(HS, "attention_backward")) {
    case 32: backward_d<32>(dqkv, dout, qkv, att, dvec, B, T, C, NH, HS, scale, format, d); break;
    case 64: backward_d<64>(dqkv, dout, qkv, att, dvec, B, T, C, NH, HS, scale, format, d); break;
    case 128: backward_d<128>(dqkv, dout, qkv, att, dvec, B, T, C, NH, HS, scale, format, d); break;
    default: backward_d<256>(dqkv, dout, qkv, att, dvec, B, T, C, NH, HS, scale, format, d); break;
    }
}
