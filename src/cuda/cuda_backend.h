/* cuda_backend.h: the CUDA kernel table and the few device-memory calls a C caller
 * needs to use it. Compiled only when the CUDA backend is on (TRAINER_HAVE_CUDA).
 *
 * tr_cuda_kernels fills the tr_kernels table (backend/kernels.h) with the same
 * semantics as tr_cpu_kernels (shapes, "+=" for parameter gradients, "=" for
 * activation gradients, the in-place cases transformer_kernels.h allows), except:
 *  - Every tensor pointer is a device pointer: floats, the int tokens, targets and
 *    labels, maxpool's int argmax, the conv scratch (conv_scratch_floats says how
 *    many floats; the caller allocates them on the device), and xent_shard_sums'
 *    double sums [BT,2] (the caller all-reduces them on the device). The results
 *    softmax_xent_forward returns through loss_sum and correct are host pointers.
 *  - Kernels are queued on the backend's one stream and return before they finish.
 *    The entries that return a result to the host (xent_padded_forward,
 *    xent_shard_finish, sum_squares, softmax_xent_forward) wait for the stream, as
 *    do the ones that validate tokens, targets or labels on the way in
 *    (embedding_forward/backward, xent_padded_forward/backward,
 *    softmax_xent_forward: one outside [0, V) is a fatal bug report, as on the CPU).
 *  - GEMMs (linear layers, convolutions, attention) are cuBLAS fp32 (no TF32), so
 *    results match the CPU to rounding, not bit for bit (the linear layers' forward
 *    is one cuBLASLt matmul with a bias or bias-and-GELU epilogue where cuBLASLt
 *    has an algorithm for it: cuda_linear_lt.cu); after set_gemm_precision
 *    with bf16 or fp16 they run on tensor cores with fp32 accumulation, which is
 *    the CPU's computation for inputs already of that format (cuda_gemm.cu says
 *    which inputs are not and get rounded there). Reductions use fixed orders:
 *    results are identical run to run on the same GPU model, and no floating-point
 *    atomics are used anywhere.
 *
 * Every entry of the table is filled: the MLP/CNN classifier's (cuda_classifier.cu,
 * cuda_conv.cu), the GPT's and the optimizers'.
 *
 * Device and stream: one cuBLAS handle, one cuBLASLt handle and one stream per
 * process, created on first use on the device current then, or explicitly by
 * tr_cuda_init. Every CUDA or cuBLAS failure ends the job through tr_fatal with the
 * error string and file:line. */
#ifndef TR_CUDA_BACKEND_H
#define TR_CUDA_BACKEND_H

#include "backend/kernels.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

extern const tr_kernels tr_cuda_kernels;

/* Selects `device` (cudaSetDevice; < 0 keeps the current one) and creates the
 * stream and cuBLAS handle if they do not exist yet. Optional: the first kernel
 * call does it on the current device. Calling it again with another device after
 * the handle exists is a bug (the handle is bound to its device) and is fatal. */
void tr_cuda_init(int device);

/* Device memory, zeroed, 256-byte aligned; out of memory is fatal (TR_EXIT_OSERR)
 * with the size and `what`. */
void *tr_cuda_alloc(size_t bytes, const char *what);
void tr_cuda_free(void *p);
/* Copies in stream order; both return once the copy is done, so host buffers can be
 * reused at once and a download sees every kernel queued before it. */
void tr_cuda_upload(void *dst_device, const void *src_host, size_t bytes);
void tr_cuda_download(void *dst_host, const void *src_device, size_t bytes);
/* Waits for every kernel queued so far. */
void tr_cuda_synchronize(void);

/* The strided-batched GEMM the attention kernels are made of, for the tests and
 * benchmarks (the trainer reaches it through the table): row-major
 * C_i = alpha op(A_i) op(B_i) + beta C_i for i < count, X_i = X + i stride_X, device
 * pointers, the precision of set_gemm_precision as the table's gemm. An empty problem
 * (M, N, K or count < 1) is fatal. */
/* For the tests: the 16-bit operand buffers' elements the products use, lowered so
 * that small shapes take the paths of GPT-2's largest operands (the LM head's
 * gradient in slices, cuda_gemm.cu); 0 restores the whole buffer. */
void tr_cuda_set_cast_limit(size_t elems);
/* For the tests and benchmarks: nonzero takes the mma.sync attention kernels where they
 * fit (bf16- and fp16-mixed, head size <= 64), zero the others (WMMA, head size <= 128,
 * else the fp32 kernels); without a call, the
 * environment's TRAINER_CUDA_ATTENTION decides (cuda_attention_mma.cu). */
void tr_cuda_set_attention_kernel(int mma);
void tr_cuda_gemm_strided_batched(int transA, int transB, int M, int N, int K, float alpha,
                                  const float *A, int lda, long long strideA, const float *B,
                                  int ldb, long long strideB, float beta, float *C, int ldc,
                                  long long strideC, int count);

/* For the tests: how many linear-layer matmuls ran through cuBLASLt's epilogues
 * (fused) and how many calls found no cuBLASLt algorithm and took the path without
 * it (refused), since the process started (cuda_linear_lt.cu). */
void tr_cuda_linear_lt_counts(long *fused, long *refused);

#ifdef __cplusplus
}
#endif

#endif
