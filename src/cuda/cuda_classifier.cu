/* cuda_classifier.cu: the MLP/CNN classifier's element-wise, pooling and softmax
 * cross-entropy kernels on the GPU, with the semantics of cpu_kernels.c
 * (convolution in cuda_conv.cu, linear layers in cuda_gemm.cu). Dimension letters
 * as in kernels.h.
 *
 * ReLU, max pooling and the cross-entropy backward evaluate the CPU's expressions
 * element by element, in the CPU's order where there is one (the pooling window's
 * scan), so they give the CPU's bits: the same outputs and the same argmax indices.
 * Max-pool backward gathers instead of scattering: each input element looks up the
 * one window that can hold it (stride k: windows do not overlap) and takes that
 * window's gradient when it was the winner, else 0. The softmax forward is a warp
 * per sample; only the order of its double sum of exponentials differs from the CPU. */
#include "cuda/cuda_common.h"
#include "cuda/cuda_ops.h"
#include "cuda/classifier_kernels.cuh"

#include <math.h>

/* ---- ReLU ----------------------------------------------------------------------- */

void tr_cuda_relu_forward(float *out, const float *inp, size_t n)
{
    if (n == 0)
        return;
    relu_forward_kernel<<<tr_cuda_grid(n), TR_CUDA_BLOCK, 0, tr_cuda_stream()>>>(out, inp, n);
    TR_CUDA_LAUNCHED();
}

void tr_cuda_relu_backward(float *dinp, const float *dout, const float *out, size_t n)
{
    if (n == 0)
        return;
    relu_backward_kernel<<<tr_cuda_grid(n), TR_CUDA_BLOCK, 0, tr_cuda_stream()>>>(dinp, dout,
                                                                                out, n);
    TR_CUDA_LAUNCHED();
}

/* ---- max pooling (k x k, stride k) ------------------------------------------------ */

void tr_cuda_maxpool_forward(float *out, int *argmax, const float *inp, int B, int C, int H,
                             int W, int k)
{
    if (k < 1)
        tr_fatal(TR_EXIT_SOFTWARE, "maxpool_forward: window %d", k);
    size_t planes = (size_t)(B > 0 ? B : 0) * (C > 0 ? C : 0);
    size_t n = planes * (size_t)(H > 0 ? H / k : 0) * (W > 0 ? W / k : 0);
    if (n == 0)
        return;
    maxpool_forward_kernel<<<tr_cuda_grid(n), TR_CUDA_BLOCK, 0, tr_cuda_stream()>>>(
        out, argmax, inp, planes, H, W, k);
    TR_CUDA_LAUNCHED();
}

void tr_cuda_maxpool_backward(float *dinp, const float *dout, const int *argmax, int B, int C,
                              int H, int W, int k)
{
    if (k < 1)
        tr_fatal(TR_EXIT_SOFTWARE, "maxpool_backward: window %d", k);
    size_t planes = (size_t)(B > 0 ? B : 0) * (C > 0 ? C : 0);
    size_t n = planes * (size_t)(H > 0 ? H : 0) * (W > 0 ? W : 0);
    if (n == 0)
        return;
    maxpool_backward_kernel<<<tr_cuda_grid(n), TR_CUDA_BLOCK, 0, tr_cuda_stream()>>>(
        dinp, dout, argmax, planes, H, W, k);
    TR_CUDA_LAUNCHED();
}

/* ---- softmax cross-entropy -------------------------------------------------------- */

void tr_cuda_rows_argmax(int *idx, float *val, const void *x, size_t rows, int ld, int n,
                         int format, int lfmt)
{
    if (rows == 0)
        return;
    unsigned blocks = (unsigned)((rows + XENT_ROWS_PER_BLOCK - 1) / XENT_ROWS_PER_BLOCK);
    rows_argmax_kernel<<<blocks, TR_CUDA_BLOCK, 0, tr_cuda_stream()>>>(idx, val, x, rows, ld, n,
                                                                         format, lfmt);
    TR_CUDA_LAUNCHED();
}

void tr_cuda_softmax_xent_forward(float *probs, float *losses, const float *logits,
                                  const int *labels, int B, int V, double *loss_sum,
                                  long *correct)
{
    *loss_sum = 0.0;
    *correct = 0;
    if (B <= 0)
        return;
    /* a label outside [0, V) is a bug (the reader validates them): fatal, as on the
     * CPU; this waits for the stream */
    tr_cuda_check_tokens(labels, (size_t)B, V, "softmax_xent_forward (labels)");
    const tr_cuda_ctx *c = tr_cuda_ctx_with_scratch();
    TR_CUDA_CHECK(cudaMemsetAsync(c->d_flag, 0, sizeof(unsigned), c->stream));
    unsigned blocks = (unsigned)((B + XENT_ROWS_PER_BLOCK - 1) / XENT_ROWS_PER_BLOCK);
    softmax_xent_forward_kernel<<<blocks, TR_CUDA_BLOCK, 0, c->stream>>>(
        probs, losses, c->d_flag, logits, labels, B, V);
    TR_CUDA_LAUNCHED();
    TR_CUDA_CHECK(cudaMemcpyAsync(c->h_flag, c->d_flag, sizeof(unsigned), cudaMemcpyDeviceToHost,
                                  c->stream));
    /* the losses added serially in sample order, the CPU's sum; it waits for the
     * stream, so the hit count queued before it has landed too */
    *loss_sum = tr_cuda_sum_in_order(losses, (size_t)B);
    *correct = (long)*c->h_flag;
}

void tr_cuda_softmax_xent_backward(float *dlogits, const float *probs, const int *labels,
                                   float scale, int B, int V)
{
    /* No label check here: forward checked the same labels, and a bad one would only
     * miss its -1 (the comparison never indexes by it), not write out of bounds. */
    if (B <= 0 || V <= 0)
        return;
    size_t n = (size_t)B * V;
    softmax_xent_backward_kernel<<<tr_cuda_grid(n), TR_CUDA_BLOCK, 0, tr_cuda_stream()>>>(
        dlogits, probs, labels, scale, n, V);
    TR_CUDA_LAUNCHED();
}
