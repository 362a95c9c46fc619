/* cuda_attention_mma.cu: launches the mma.sync attention kernels of
 * attention_mma_kernels.cuh (bf16- and fp16-mixed, head sizes up to 64) and decides
 * whether a run takes them. Same tensors and saved state as the WMMA form
 * (cuda_attention_tc.h), so the two are interchangeable call by call. */
#include "cuda/cuda_attention_tc.h"

#include "cuda/cuda_backend.h"
#include "cuda/cuda_common.h"
#include "cuda/mma_ops.cuh" /* first: the primitives the kernels are written against */

#include "cuda/attention_mma_kernels.cuh"

#include <stdlib.h>
#include <string.h>

/* -1: not yet decided (the environment is read at the first call) */
static int g_mma_chosen = -1;

void tr_cuda_set_attention_kernel(int mma) { g_mma_chosen = mma ? 1 : 0; }

int tr_cuda_attention_mma_chosen(void)
{
    if (g_mma_chosen < 0) {
        const char *v = getenv("TRAINER_CUDA_ATTENTION");
        if (v && *v && strcmp(v, "mma") != 0 && strcmp(v, "wmma") != 0)
            tr_fatal(TR_EXIT_USAGE,
                     "TRAINER_CUDA_ATTENTION=%s: expected mma (the mma.sync kernels) or "
                     "wmma (the default)", v);
        g_mma_chosen = v && strcmp(v, "mma") == 0;
    }
    return g_mma_chosen;
}

int tr_cuda_attention_mma_fits(int HS) { return HS >= 1 && HS <= 64; }

template <int D, int F>
static void forward_d(void *out, float *lse, const uint16_t *qkv, int B, int T, int C, int NH,
                      int HS, float scale, const tr_dropout &drop)
{
    static int opted;
    size_t bytes = mma_layout<D>::FWD_BYTES;
    tr_cuda_allow_smem(mma_forward_kernel<D, F>, bytes, &opted);
    unsigned grid = tr_cuda_tile_grid(B, NH, T, MMA_TILE);
    mma_forward_kernel<D, F><<<grid, MMA_THREADS, bytes, tr_cuda_stream()>>>(
        out, lse, qkv, T, C, NH, HS, scale, mma_load_mode(qkv, C, HS), drop);
    TR_CUDA_LAUNCHED();
}

template <int D, int F>
static void backward_d(void *dqkv, const uint16_t *dout, const uint16_t *qkv, const float *lse,
                       const float *dvec, int B, int T, int C, int NH, int HS, float scale,
                       const tr_dropout &drop)
{
    static int opted_kv, opted_q;
    tr_cuda_allow_smem(mma_dkv_kernel<D, F>, mma_layout<D>::DKV_BYTES, &opted_kv);
    tr_cuda_allow_smem(mma_dq_kernel<D, F>, mma_layout<D>::DQ_BYTES, &opted_q);
    unsigned grid = tr_cuda_tile_grid(B, NH, T, MMA_TILE);
    int vq = mma_load_mode(qkv, C, HS);
    int vo = mma_load_mode(dout, C, HS); /* dO: rows C apart, stored as qkv is */
    mma_dkv_kernel<D, F><<<grid, MMA_THREADS, mma_layout<D>::DKV_BYTES, tr_cuda_stream()>>>(
        dqkv, dout, qkv, lse, dvec, T, C, NH, HS, scale, vq, vo, drop);
    TR_CUDA_LAUNCHED();
    mma_dq_kernel<D, F><<<grid, MMA_THREADS, mma_layout<D>::DQ_BYTES, tr_cuda_stream()>>>(
        dqkv, dout, qkv, lse, dvec, T, C, NH, HS, scale, vq, vo, drop);
    TR_CUDA_LAUNCHED();
}

static void check_format(int format, const char *what)
{
    if (format != TR_PREC_BF16 && format != TR_PREC_FP16)
        tr_fatal(TR_EXIT_SOFTWARE, "%s: format %d is not a 16-bit one", what, format);
}

void tr_cuda_attention_mma_forward(void *out, float *lse, const void *qkv16, int B, int T,
                                   int C, int NH, int HS, float scale, int format,
                                   const tr_dropout &drop)
{
    check_format(format, "attention_mma_forward");
    const uint16_t *qkv = (const uint16_t *)qkv16; /* stored in the format */
    int f16 = format == TR_PREC_FP16;
    if (HS <= 32 && f16)
        forward_d<32, TR_PREC_FP16>(out, lse, qkv, B, T, C, NH, HS, scale, drop);
    else if (HS <= 32)
        forward_d<32, TR_PREC_BF16>(out, lse, qkv, B, T, C, NH, HS, scale, drop);
    else if (f16)
        forward_d<64, TR_PREC_FP16>(out, lse, qkv, B, T, C, NH, HS, scale, drop);
    else
        forward_d<64, TR_PREC_BF16>(out, lse, qkv, B, T, C, NH, HS, scale, drop);
}

void tr_cuda_attention_mma_backward(void *dqkv, const void *dout16, const void *qkv16,
                                    const float *lse, const float *dvec, int B, int T, int C,
                                    int NH, int HS, float scale, int format,
                                    const tr_dropout &drop)
{
    check_format(format, "attention_mma_backward");
    /* stored in the format */
    const uint16_t *qkv = (const uint16_t *)qkv16, *dout = (const uint16_t *)dout16;
    int f16 = format == TR_PREC_FP16;
    if (HS <= 32 && f16)
        backward_d<32, TR_PREC_FP16>(dqkv, dout, qkv, lse, dvec, B, T, C, NH, HS, scale, drop);
    else if (HS <= 32)
        backward_d<32, TR_PREC_BF16>(dqkv, dout, qkv, lse, dvec, B, T, C, NH, HS, scale, drop);
    else if (f16)
        backward_d<64, TR_PREC_FP16>(dqkv, dout, qkv, lse, dvec, B, T, C, NH, HS, scale, drop);
    else
        backward_d<64, TR_PREC_BF16>(dqkv, dout, qkv, lse, dvec, B, T, C, NH, HS, scale, drop);
}
