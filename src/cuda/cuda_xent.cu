/* cuda_xent.cu: softmax cross-entropy on the GPU, over a padded vocabulary and over
 * the vocabulary split between tensor-parallel ranks (the four shard steps), with
 * the semantics of cpu_transformer.c and cpu_vocab_parallel.c.
 *
 * One block per row of logits: the row's max and sum are block reductions in a
 * fixed tree (deterministic). Sums of exponentials are taken in double as on the
 * CPU; only their order differs, so the statistics and losses match to rounding.
 * The total loss the host gets back is added serially in row order on the device
 * (tr_cuda_sum_in_order): the CPU's order. The forward pass stores no
 * probabilities; backward recomputes them (dlogits may be the logits: every element
 * is read and written by the same thread). */
#include "cuda/cuda_common.h"
#include "cuda/cuda_ops.h"
#include "cuda/xent_kernels.cuh"

/* ---- padded vocabulary ---------------------------------------------------------- */

double tr_cuda_xent_padded_forward(float *stats, float *losses, const void *logits,
                                   const int *targets, int B, int T, int V, int Vp, int format,
                                   int lfmt)
{
    size_t BT = (size_t)B * T;
    if (V < 1 || V > Vp)
        tr_fatal(TR_EXIT_SOFTWARE, "xent_padded_forward: V = %d not in [1, Vp = %d]", V, Vp);
    tr_cuda_check_tokens(targets, BT, V, "xent_padded_forward");
    if (BT == 0)
        return 0.0;
    if (lfmt == format && format == TR_PREC_BF16)
        xent_padded_forward_16_kernel<TR_PREC_BF16><<<(unsigned)BT, XENT_BLOCK, 0,
                                                      tr_cuda_stream()>>>(stats, losses, logits,
                                                                          targets, V, Vp);
    else if (lfmt == format && format == TR_PREC_FP16)
        xent_padded_forward_16_kernel<TR_PREC_FP16><<<(unsigned)BT, XENT_BLOCK, 0,
                                                      tr_cuda_stream()>>>(stats, losses, logits,
                                                                          targets, V, Vp);
    else
        xent_padded_forward_kernel<<<(unsigned)BT, XENT_BLOCK, 0, tr_cuda_stream()>>>(
            stats, losses, logits, targets, V, Vp, format, lfmt);
    TR_CUDA_LAUNCHED();
    return tr_cuda_sum_in_order(losses, BT);
}

void tr_cuda_xent_padded_backward(void *dlogits, const void *logits, const float *stats,
                                  const int *targets, float scale, int B, int T, int V, int Vp,
                                  int format, int lfmt)
{
    size_t BT = (size_t)B * T;
    tr_cuda_check_tokens(targets, BT, V, "xent_padded_backward");
    tr_cuda_xent_shard_backward(dlogits, logits, stats, targets, scale, BT, Vp, 0, V, format,
                                lfmt);
}

/* ---- vocabulary split over tensor-parallel ranks -------------------------------- */

void tr_cuda_xent_shard_max(float *rowmax, const void *logits, size_t BT, int Vl, int nreal,
                            int format, int lfmt)
{
    if (BT == 0)
        return;
    xent_shard_max_kernel<<<(unsigned)BT, XENT_BLOCK, 0, tr_cuda_stream()>>>(rowmax, logits, Vl,
                                                                           nreal, format, lfmt);
    TR_CUDA_LAUNCHED();
}

void tr_cuda_xent_shard_sums(double *sums, const void *logits, const float *rowmax,
                             const int *targets, size_t BT, int Vl, int v0, int nreal,
                             int format, int lfmt)
{
    if (BT == 0)
        return;
    xent_shard_sums_kernel<<<(unsigned)BT, XENT_BLOCK, 0, tr_cuda_stream()>>>(
        sums, logits, rowmax, targets, Vl, v0, nreal, format, lfmt);
    TR_CUDA_LAUNCHED();
}

double tr_cuda_xent_shard_finish(float *stats, float *losses, const double *sums,
                                 const float *rowmax, size_t BT)
{
    if (BT == 0)
        return 0.0;
    xent_shard_finish_kernel<<<tr_cuda_grid(BT), TR_CUDA_BLOCK, 0, tr_cuda_stream()>>>(
        stats, losses, sums, rowmax, BT);
    TR_CUDA_LAUNCHED();
    return tr_cuda_sum_in_order(losses, BT);
}

void tr_cuda_xent_shard_backward(void *dlogits, const void *logits, const float *stats,
                                 const int *targets, float scale, size_t BT, int Vl, int v0,
                                 int nreal, int format, int lfmt)
{
    if (BT == 0 || Vl <= 0)
        return;
    if (tr_is_lowp(format) && lfmt == format && Vl % 8 == 0 &&
        ((uintptr_t)logits | (uintptr_t)dlogits) % 16 == 0) {
        /* 16-bit logits in rows of whole 16-byte chunks (GPT-2's 50304): a row a block */
        unsigned blocks = (unsigned)(BT < 65535 ? BT : 65535);
        if (format == TR_PREC_BF16)
            xent_backward_rows16_kernel<TR_PREC_BF16><<<blocks, TR_CUDA_BLOCK, 0,
                                                        tr_cuda_stream()>>>(
                (uint16_t *)dlogits, (const uint16_t *)logits, stats, targets, scale, BT, Vl,
                v0, nreal);
        else
            xent_backward_rows16_kernel<TR_PREC_FP16><<<blocks, TR_CUDA_BLOCK, 0,
                                                        tr_cuda_stream()>>>(
                (uint16_t *)dlogits, (const uint16_t *)logits, stats, targets, scale, BT, Vl,
                v0, nreal);
        TR_CUDA_LAUNCHED();
        return;
    }
    xent_backward_kernel<<<tr_cuda_grid(BT * Vl), TR_CUDA_BLOCK, 0, tr_cuda_stream()>>>(
        dlogits, logits, stats, targets, scale, BT, Vl, v0, nreal, format, lfmt);
    TR_CUDA_LAUNCHED();
}
