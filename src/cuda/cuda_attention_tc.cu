/* cuda_attention_tc.cu: launches the WMMA attention kernels of
 * attention_wmma_kernels.cuh (bf16- and fp16-mixed, head sizes up to 128) and says where
 * they fit. */
#include "cuda/cuda_attention_tc.h"

#include "cuda/cuda_common.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h> /* first: what the kernels are written against */

#include "cuda/attention_wmma_kernels.cuh"

template <int D, int F>
static void tc_forward_d(void *out, float *lse, const uint16_t *qkv, int B, int T, int C, int NH,
                         int HS, float scale, const tr_dropout &drop)
{
    static int opted;
    size_t bytes = tc_layout<D>::FWD_BYTES;
    tr_cuda_allow_smem(tc_forward_kernel<D, F>, bytes, &opted);
    unsigned grid = tr_cuda_tile_grid(B, NH, T, TC_TILE);
    tc_forward_kernel<D, F><<<grid, TC_THREADS, bytes, tr_cuda_stream()>>>(
        out, lse, qkv, T, C, NH, HS, scale, tr_cuda_vec4_rows(qkv, qkv, C, HS), drop);
    TR_CUDA_LAUNCHED();
}

template <int D, int F>
static void tc_backward_d(void *dqkv, const uint16_t *dout, const uint16_t *qkv, const float *lse,
                          const float *dvec, int B, int T, int C, int NH, int HS, float scale,
                          const tr_dropout &drop)
{
    static int opted_kv, opted_q;
    size_t bytes = tc_layout<D>::BWD_BYTES;
    tr_cuda_allow_smem(tc_dkv_kernel<D, F>, bytes, &opted_kv);
    tr_cuda_allow_smem(tc_dq_kernel<D, F>, bytes, &opted_q);
    unsigned grid = tr_cuda_tile_grid(B, NH, T, TC_TILE);
    int vec = tr_cuda_vec4_rows(qkv, dout, C, HS);
    tc_dkv_kernel<D, F><<<grid, TC_THREADS, bytes, tr_cuda_stream()>>>(
        dqkv, dout, qkv, lse, dvec, T, C, NH, HS, scale, vec, drop);
    TR_CUDA_LAUNCHED();
    tc_dq_kernel<D, F><<<grid, TC_THREADS, bytes, tr_cuda_stream()>>>(
        dqkv, dout, qkv, lse, dvec, T, C, NH, HS, scale, vec, drop);
    TR_CUDA_LAUNCHED();
}

/* the format's instantiation: bf16 or fp16 (cuda_attention.cu calls with no other) */
static void check_format(int format, const char *what)
{
    if (format != TR_PREC_BF16 && format != TR_PREC_FP16)
        tr_fatal(TR_EXIT_SOFTWARE, "%s: format %d is not a 16-bit format", what, format);
}

template <int D>
static void tc_forward_f(void *out, float *lse, const uint16_t *qkv, int B, int T, int C, int NH,
                         int HS, float scale, int format, const tr_dropout &drop)
{
    if (format == TR_PREC_FP16)
        tc_forward_d<D, TR_PREC_FP16>(out, lse, qkv, B, T, C, NH, HS, scale, drop);
    else
        tc_forward_d<D, TR_PREC_BF16>(out, lse, qkv, B, T, C, NH, HS, scale, drop);
}

template <int D>
static void tc_backward_f(void *dqkv, const uint16_t *dout, const uint16_t *qkv, const float *lse,
                          const float *dvec, int B, int T, int C, int NH, int HS, float scale,
                          int format, const tr_dropout &drop)
{
    if (format == TR_PREC_FP16)
        tc_backward_d<D, TR_PREC_FP16>(dqkv, dout, qkv, lse, dvec, B, T, C, NH, HS, scale, drop);
    else
        tc_backward_d<D, TR_PREC_BF16>(dqkv, dout, qkv, lse, dvec, B, T, C, NH, HS, scale, drop);
}

/* Head sizes up to 128, where the GPU lets a block have the backward kernels' shared
 * memory (137 KB at 128: an A100 or H100 does, a GPU of compute capability 8.6 or
 * 8.9, with 99 KB, does not, and takes the fp32 kernels instead). */
int tr_cuda_attention_tc_fits(int HS)
{
    if (HS < 1 || HS > 128)
        return 0;
    static int optin = -1; /* the device's opt-in limit, asked once */
    if (optin < 0) {
        int dev = 0;
        TR_CUDA_CHECK(cudaGetDevice(&dev));
        TR_CUDA_CHECK(
            cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    }
    size_t need = HS <= 32   ? tc_layout<32>::BWD_BYTES
                  : HS <= 64 ? tc_layout<64>::BWD_BYTES
                             : tc_layout<128>::BWD_BYTES;
    return need <= (size_t)optin;
}

void tr_cuda_attention_tc_forward(void *out, float *lse, const void *qkv16, int B, int T,
                                  int C, int NH, int HS, float scale, int format,
                                  const tr_dropout &drop)
{
    const uint16_t *qkv = (const uint16_t *)qkv16;
    check_format(format, "attention_tc_forward");
    if (HS <= 32)
        tc_forward_f<32>(out, lse, qkv, B, T, C, NH, HS, scale, format, drop);
    else if (HS <= 64)
        tc_forward_f<64>(out, lse, qkv, B, T, C, NH, HS, scale, format, drop);
    else
        tc_forward_f<128>(out, lse, qkv, B, T, C, NH, HS, scale, format, drop);
}

void tr_cuda_attention_tc_backward(void *dqkv, const void *dout16, const void *qkv16,
                                   const float *lse, const float *dvec, int B, int T, int C,
                                   int NH, int HS, float scale, int format,
                                   const tr_dropout &drop)
{
    const uint16_t *qkv = (const uint16_t *)qkv16, *dout = (const uint16_t *)dout16;
    check_format(format, "attention_tc_backward");
    if (HS <= 32)
        tc_backward_f<32>(dqkv, dout, qkv, lse, dvec, B, T, C, NH, HS, scale, format, drop);
    else if (HS <= 64)
        tc_backward_f<64>(dqkv, dout, qkv, lse, dvec, B, T, C, NH, HS, scale, format, drop);
    else
        tc_backward_f<128>(dqkv, dout, qkv, lse, dvec, B, T, C, NH, HS, scale, format, drop);
}
