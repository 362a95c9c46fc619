/* cuda_gemm.cu: row-major SGEMM over cuBLAS, and the linear layer built on it.
 *
 * cuBLAS is column-major. A row-major matrix X[r, c] with row stride ld is, read
 * column-major, the matrix X^T with leading dimension ld. So the row-major
 *   C = alpha op(A) op(B) + beta C
 * is the column-major C^T = alpha op(B)^T op(A)^T + beta C^T: swap the operands
 * (B first), swap M and N, and keep each operand's own transpose flag (the stored
 * column-major X^T is transposed exactly when the row-major call transposes X).
 * The leading dimensions are the row-major strides as given. */
#include "cuda/cuda_common.h"
#include "cuda/cuda_ops.h"

static cublasOperation_t op(int trans) { return trans ? CUBLAS_OP_T : CUBLAS_OP_N; }

/* C = beta C (beta == 0: C = 0, whatever C held, as BLAS does) for an M x N block. */
__global__ static void scale_matrix_kernel(float *C, int M, int N, int ldc, float beta)
{
    size_t n = (size_t)M * N;
    TR_GRID_STRIDE(i, n)
    {
        float *c = C + (i / N) * ldc + i % N;
        *c = beta == 0.0f ? 0.0f : beta * *c;
    }
}

void tr_cuda_gemm(int transA, int transB, int M, int N, int K, float alpha, const float *A,
                  int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    if (M <= 0 || N <= 0)
        return;
    const tr_cuda_ctx *ctx = tr_cuda_ctx_get();
    if (K <= 0) { /* nothing to multiply; cuBLAS would also reject the lda a K of 0 implies */
        scale_matrix_kernel<<<tr_cuda_grid((size_t)M * N), TR_CUDA_BLOCK, 0, ctx->stream>>>(
            C, M, N, ldc, beta);
        TR_CUDA_LAUNCHED();
        return;
    }
    TR_CUBLAS_CHECK(cublasSgemm(ctx->blas, op(transB), op(transA), N, M, K, &alpha, B, ldb, A,
                                lda, &beta, C, ldc));
}

void tr_cuda_gemm_strided_batched(int transA, int transB, int M, int N, int K, float alpha,
                                  const float *A, int lda, long long strideA, const float *B,
                                  int ldb, long long strideB, float beta, float *C, int ldc,
                                  long long strideC, int count)
{
    if (M <= 0 || N <= 0 || K <= 0 || count <= 0)
        tr_fatal(TR_EXIT_SOFTWARE, "gemm_strided_batched: empty problem %d x %d x %d, %d times",
                 M, N, K, count);
    const tr_cuda_ctx *ctx = tr_cuda_ctx_get();
    TR_CUBLAS_CHECK(cublasSgemmStridedBatched(ctx->blas, op(transB), op(transA), N, M, K, &alpha,
                                              B, ldb, strideB, A, lda, strideA, &beta, C, ldc,
                                              strideC, count));
}

/* ---- linear layer --------------------------------------------------------------- */

__global__ static void broadcast_rows_kernel(float *out, const float *b, int rows, int cols)
{
    size_t n = (size_t)rows * cols;
    TR_GRID_STRIDE(i, n)
        out[i] = b[i % cols];
}

void tr_cuda_linear_forward(float *out, const float *inp, const float *w, const float *b, int B,
                            int IN, int OUT)
{
    /* as on the CPU: write the bias, then let the GEMM accumulate onto it (beta = 1) */
    float beta = 0.0f;
    if (b) {
        broadcast_rows_kernel<<<tr_cuda_grid((size_t)B * OUT), TR_CUDA_BLOCK, 0,
                                tr_cuda_stream()>>>(out, b, B, OUT);
        TR_CUDA_LAUNCHED();
        beta = 1.0f;
    }
    tr_cuda_gemm(0, 1, B, OUT, IN, 1.0f, inp, IN, w, IN, beta, out, OUT);
}

/* Column sums without atomics: a block owns 32 adjacent columns (one coalesced
 * 128-byte row segment per warp) and COLSUM_LANES row lanes; lane y adds rows y,
 * y + COLSUM_LANES, ... in order, then lane 0 adds the lanes' sums in lane order.
 * The order depends only on R, so the result is the same every run. */
#define COLSUM_LANES 16

__global__ static void colsum_add_kernel(float *dst, const float *src, size_t R, int C, int ld)
{
    __shared__ float part[COLSUM_LANES][32];
    int c = blockIdx.x * 32 + threadIdx.x;
    float acc = 0.0f;
    if (c < C)
        for (size_t r = threadIdx.y; r < R; r += COLSUM_LANES)
            acc += src[r * ld + c];
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float s = 0.0f;
        for (int y = 0; y < COLSUM_LANES; y++)
            s += part[y][threadIdx.x];
        dst[c] += s;
    }
}

void tr_cuda_linear_backward(float *dinp, float *dw, float *db, const float *dout,
                             const float *inp, const float *w, int B, int IN, int OUT)
{
    if (dinp) /* dinp[B,IN] = dout[B,OUT] w[OUT,IN] */
        tr_cuda_gemm(0, 0, B, IN, OUT, 1.0f, dout, OUT, w, IN, 0.0f, dinp, IN);
    /* dw[OUT,IN] += dout^T[OUT,B] inp[B,IN] */
    tr_cuda_gemm(1, 0, OUT, IN, B, 1.0f, dout, OUT, inp, IN, 1.0f, dw, IN);
    if (!db || B <= 0 || OUT <= 0)
        return;
    dim3 block(32, COLSUM_LANES);
    colsum_add_kernel<<<(OUT + 31) / 32, block, 0, tr_cuda_stream()>>>(db, dout, (size_t)B, OUT,
                                                                      OUT);
    TR_CUDA_LAUNCHED();
}
