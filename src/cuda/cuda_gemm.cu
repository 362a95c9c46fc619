/* cuda_gemm.cu: row-major GEMM over cuBLAS, and the linear layer built on it (its
 * forward through cuBLASLt's epilogues where it can: cuda_linear_lt.cu).
 *
 * cuBLAS is column-major. A row-major matrix X[r, c] with row stride ld is, read
 * column-major, the matrix X^T with leading dimension ld. So the row-major
 *   C = alpha op(A) op(B) + beta C
 * is the column-major C^T = alpha op(B)^T op(A)^T + beta C^T: swap the operands
 * (B first), swap M and N, and keep each operand's own transpose flag (the stored
 * column-major X^T is transposed exactly when the row-major call transposes X).
 * The leading dimensions are the row-major strides as given.
 *
 * Precision (set_gemm_precision, kernels.h). fp32: cublasSgemm, TF32 off
 * (cuda_context.cu), the CPU's fp32 GEMM up to summation order. bf16-mixed and
 * fp16-mixed: cublasGemmEx on the same fp32 buffers (A, B and C all CUDA_R_32F) with
 * compute type CUBLAS_COMPUTE_32F_FAST_16BF or _FAST_16F, which lets cuBLAS
 * down-convert A and B to bf16 (fp16) or to TF32 and multiply them on tensor cores,
 * accumulating in fp32 (C is read and written in fp32). The model has rounded almost
 * every input to the run's format already (tr_model_round), and such a value is exact
 * in bf16 (fp16) and in TF32 alike (TF32 has fp32's exponent and 10 mantissa bits;
 * bf16 has 7, fp16 10 and a narrower exponent), so whichever conversion cuBLAS picks
 * is exact and the products are the CPU's exact fp32 products of the same values:
 * this is the bf16 (fp16) GEMM with fp32 accumulation that the CPU emulates. Inputs
 * that the model has not rounded are rounded here, by cuBLAS, where the CPU
 * multiplies them unrounded: the classifiers' input images in their first layer.
 * (Attention's products are not cuBLAS calls: cuda_attention.cu fuses them.)
 * Given fp32 operands, cuBLAS picks TF32 kernels (an H100 profile: every product of
 * a bf16-mixed GPT-2 step), at about half the rate of its bf16 ones. So tr_cuda_gemm
 * first copies both operands, rounded the same way (exactly, for rounded values), to
 * 16-bit buffers of the backend's scratch and multiplies those (A and B CUDA_R_16BF
 * or _16F, C CUDA_R_32F, compute CUBLAS_COMPUTE_32F); an operand too large for the
 * buffers (TR_CUDA_CAST_ELEMS) keeps the fp32 path. Same products, same sums.
 * alpha and beta are host floats (the handle's pointer mode stays the default,
 * host), the scale type CUDA_R_32F that these compute types take. Algorithm
 * CUBLAS_GEMM_DEFAULT: cuBLAS's heuristic (the _TENSOR_OP variant is deprecated and
 * the same). Determinism: as for SGEMM, one stream and no atomics (cuda_context.cu).
 */
#include "cuda/cuda_common.h"
#include "cuda/cuda_ops.h"
#include "cuda/gemm_kernels.cuh"

#include "backend/lowp_math.h"   /* tr_precision */
#include "backend/scalar_math.h" /* tr_expf */

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <limits.h>
#include <stdint.h>

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

/* The run's format (tr_precision): which cuBLAS routine the products use. Host state
 * read when a GEMM is queued, so a change applies to the GEMMs queued after it. */
static int g_gemm_format = TR_PREC_FP32;

void tr_cuda_set_gemm_precision(int format)
{
    if (format != TR_PREC_FP32 && format != TR_PREC_BF16 && format != TR_PREC_FP16)
        tr_fatal(TR_EXIT_SOFTWARE, "set_gemm_precision: %d is not a tr_precision", format);
    g_gemm_format = format;
}

int tr_cuda_gemm_precision(void) { return g_gemm_format; }

/* The tensor-core compute type of a 16-bit format (see the top of this file). */
static cublasComputeType_t fast_compute_type(int format)
{
    return format == TR_PREC_BF16 ? CUBLAS_COMPUTE_32F_FAST_16BF : CUBLAS_COMPUTE_32F_FAST_16F;
}

template <typename H>
static void cast_16_as(void *dst, const float *src, int rows, int cols, int ld, cudaStream_t s)
{
    size_t n = (size_t)rows * cols;
    if (ld == cols && n % 4 == 0 && (uintptr_t)src % 16 == 0) {
        cast_packed4_kernel<H><<<tr_cuda_grid(n / 4), TR_CUDA_BLOCK, 0, s>>>(
            (H *)dst, (const float4 *)src, n / 4);
    } else {
        unsigned gx = (unsigned)((cols + TR_CUDA_BLOCK - 1) / TR_CUDA_BLOCK);
        dim3 grid(gx < 64 ? gx : 64, (unsigned)(rows < 65535 ? rows : 65535));
        cast_rows_kernel<H><<<grid, TR_CUDA_BLOCK, 0, s>>>((H *)dst, src, rows, cols, ld);
    }
    TR_CUDA_LAUNCHED();
}

void tr_cuda_cast_16(void *dst, const float *src, int rows, int cols, int ld)
{
    cudaStream_t s = tr_cuda_stream();
    if (g_gemm_format == TR_PREC_BF16)
        cast_16_as<__nv_bfloat16>(dst, src, rows, cols, ld, s);
    else
        cast_16_as<__half>(dst, src, rows, cols, ld, s);
}

cudaDataType_t tr_cuda_type_16(void)
{
    return g_gemm_format == TR_PREC_BF16 ? CUDA_R_16BF : CUDA_R_16F;
}

/* The elements of a cast buffer the products use: all of it, except where a test
 * lowers it to reach the chunked path below at small shapes. */
static size_t g_cast_limit = TR_CUDA_CAST_ELEMS;

extern "C" void tr_cuda_set_cast_limit(size_t elems)
{
    g_cast_limit = elems && elems < TR_CUDA_CAST_ELEMS ? elems : TR_CUDA_CAST_ELEMS;
}

/* Whether a bf16/fp16-mixed product takes 16-bit copies: both stored operands fit. */
static int casts(size_t a_elems, size_t b_elems)
{
    return g_gemm_format != TR_PREC_FP32 && a_elems <= g_cast_limit && b_elems <= g_cast_limit;
}

/* The row-major product on 16-bit operands A16 and B16 (packed copies, leading
 * dimensions as copied), fp32 accumulation, C of type ct: fp32, or the 16-bit format
 * (the fp32 result rounded once, to nearest even, as it is stored). */
static void gemm_16_to(const tr_cuda_ctx *ctx, int transA, int transB, int M, int N, int K,
                       float alpha, const void *A16, int lda, const void *B16, int ldb,
                       float beta, void *C, cudaDataType_t ct, int ldc)
{
    cudaDataType_t t = tr_cuda_type_16();
    TR_CUBLAS_CHECK(cublasGemmEx(ctx->blas, op(transB), op(transA), N, M, K, &alpha, B16, t, ldb,
                                 A16, t, lda, &beta, C, ct, ldc, CUBLAS_COMPUTE_32F,
                                 CUBLAS_GEMM_DEFAULT));
}

static void gemm_16(const tr_cuda_ctx *ctx, int transA, int transB, int M, int N, int K,
                    float alpha, const void *A16, int lda, const void *B16, int ldb, float beta,
                    float *C, int ldc)
{
    gemm_16_to(ctx, transA, transB, M, N, K, alpha, A16, lda, B16, ldb, beta, C, CUDA_R_32F,
               ldc);
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
    if (g_gemm_format == TR_PREC_FP32) {
        TR_CUBLAS_CHECK(cublasSgemm(ctx->blas, op(transB), op(transA), N, M, K, &alpha, B, ldb,
                                    A, lda, &beta, C, ldc));
        return;
    }
    /* the stored shapes: A is [M,K] or, transposed, [K,M]; B is [K,N] or [N,K] */
    int ar = transA ? K : M, ac = transA ? M : K, br = transB ? N : K, bc = transB ? K : N;
    if (casts((size_t)ar * ac, (size_t)br * bc)) {
        ctx = tr_cuda_ctx_with_scratch();
        tr_cuda_cast_16(ctx->d_cast[0], A, ar, ac, lda);
        tr_cuda_cast_16(ctx->d_cast[1], B, br, bc, ldb);
        gemm_16(ctx, transA, transB, M, N, K, alpha, ctx->d_cast[0], ac, ctx->d_cast[1], bc, beta,
                C, ldc);
        return;
    }
    TR_CUBLAS_CHECK(cublasGemmEx(ctx->blas, op(transB), op(transA), N, M, K, &alpha, B,
                                 CUDA_R_32F, ldb, A, CUDA_R_32F, lda, &beta, C, CUDA_R_32F, ldc,
                                 fast_compute_type(g_gemm_format), CUBLAS_GEMM_DEFAULT));
}

extern "C" void tr_cuda_gemm_strided_batched(int transA, int transB, int M, int N, int K,
                                             float alpha, const float *A, int lda,
                                             long long strideA, const float *B, int ldb,
                                             long long strideB, float beta, float *C, int ldc,
                                             long long strideC, int count)
{
    if (M <= 0 || N <= 0 || K <= 0 || count <= 0)
        tr_fatal(TR_EXIT_SOFTWARE, "gemm_strided_batched: empty problem %d x %d x %d, %d times",
                 M, N, K, count);
    const tr_cuda_ctx *ctx = tr_cuda_ctx_get();
    if (g_gemm_format == TR_PREC_FP32) {
        TR_CUBLAS_CHECK(cublasSgemmStridedBatched(ctx->blas, op(transB), op(transA), N, M, K,
                                                  &alpha, B, ldb, strideB, A, lda, strideA,
                                                  &beta, C, ldc, strideC, count));
        return;
    }
    TR_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        ctx->blas, op(transB), op(transA), N, M, K, &alpha, B, CUDA_R_32F, ldb, strideB, A,
        CUDA_R_32F, lda, strideA, &beta, C, CUDA_R_32F, ldc, strideC, count,
        fast_compute_type(g_gemm_format), CUBLAS_GEMM_DEFAULT));
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
    /* With a bias: one cuBLASLt matmul whose epilogue adds it (cuda_linear_lt.cu). */
    if (b && tr_cuda_linear_lt(out, NULL, inp, NULL, w, b, B, IN, OUT))
        return;
    /* Without one, or the fallback where cuBLASLt has no algorithm for the problem:
     * as on the CPU, write the bias, then let the GEMM accumulate onto it (beta = 1). */
    float beta = 0.0f;
    if (b) {
        broadcast_rows_kernel<<<tr_cuda_grid((size_t)B * OUT), TR_CUDA_BLOCK, 0,
                                tr_cuda_stream()>>>(out, b, B, OUT);
        TR_CUDA_LAUNCHED();
        beta = 1.0f;
    }
    tr_cuda_gemm(0, 1, B, OUT, IN, 1.0f, inp, IN, w, IN, beta, out, OUT);
}

/* Where linear_backward's 16-bit copy of dout's columns comes from: dout itself, or
 * (the LM head's, xent_linear_backward) the logits and the softmax's row statistics,
 * from which the copy is made as xent_shard_backward makes dlogits. */
typedef struct dout_source {
    const float *dout;   /* [B, OUT], or NULL: */
    const float *logits; /* [B, OUT] and stats [B, 2] (max, 1 / sum): dlogits = */
    const float *stats;  /* scale (softmax - onehot(target - v0)), rounded to format, */
    const int *targets;  /* on the nreal real columns; 0 past them */
    float scale;
    int v0, nreal, format;
} dout_source;

/* the 16-bit copy of dout's columns [o0, o0 + n) into dst (packed, ld n) */
static void copy_dout_16(void *dst, const dout_source *s, int B, int o0, int n, int ld)
{
    if (s->dout) {
        tr_cuda_cast_16(dst, s->dout + o0, B, n, ld);
        return;
    }
    unsigned gx = (unsigned)((n + TR_CUDA_BLOCK - 1) / TR_CUDA_BLOCK);
    dim3 grid(gx < 64 ? gx : 64, (unsigned)(B < 65535 ? B : 65535));
    if (g_gemm_format == TR_PREC_BF16)
        xent_grad_16_kernel<__nv_bfloat16><<<grid, TR_CUDA_BLOCK, 0, tr_cuda_stream()>>>(
            (__nv_bfloat16 *)dst, s->logits, s->stats, s->targets, s->scale, B, n, ld, o0, s->v0,
            s->nreal, s->format);
    else
        xent_grad_16_kernel<__half><<<grid, TR_CUDA_BLOCK, 0, tr_cuda_stream()>>>(
            (__half *)dst, s->logits, s->stats, s->targets, s->scale, B, n, ld, o0, s->v0,
            s->nreal, s->format);
    TR_CUDA_LAUNCHED();
}

/* linear_backward's products in slices of dout: where dout is too large for a cast
 * buffer but inp is not (an LM head with fp32 logits, whose dout is the B*T x V
 * logits' gradient: 800 M values at GPT-2's 16 x 1024, 3.3 GB, which would otherwise
 * multiply in TF32 at about half the speed), and for the head's gradient made from
 * the logits (one slice where it all fits). dout is taken in slices of oc columns
 * (output features), each copied to 16 bits:
 *   dinp  = sum over slices of dout[:, slice] w[slice, :]   (fp32, added slice by slice)
 *   dw[slice, :] += dout[:, slice]^T inp
 * inp is copied once, into the second buffer, and each slice of w after it; an input
 * already stored in the 16-bit format (inp16, not NULL: the LM head's, ln_f's output)
 * is multiplied as it is, and its room in the buffer stays unused. Returns 0
 * (nothing done) where even 8 columns do not fit. */
static int linear_backward_sliced(float *dinp, float *dw, const dout_source *src,
                                  const float *inp, const void *inp16, const float *w, int B,
                                  int IN, int OUT)
{
    size_t ni = ((size_t)B * IN + 7) & ~(size_t)7; /* the w slice starts 16-byte aligned */
    if (g_gemm_format == TR_PREC_FP32 || ni >= g_cast_limit)
        return 0;
    size_t oc = g_cast_limit / (size_t)B;
    if (dinp && (g_cast_limit - ni) / (size_t)IN < oc)
        oc = (g_cast_limit - ni) / (size_t)IN;
    oc &= ~(size_t)7; /* slices of whole 16-byte rows for the 16-bit copies */
    if (oc < 8)
        return 0;
    const tr_cuda_ctx *ctx = tr_cuda_ctx_with_scratch();
    void *w16 = (char *)ctx->d_cast[1] + ni * 2;
    if (!inp16) {
        tr_cuda_cast_16(ctx->d_cast[1], inp, B, IN, IN);
        inp16 = ctx->d_cast[1];
    }
    for (int o0 = 0; o0 < OUT; o0 += (int)oc) {
        int n = OUT - o0 < (int)oc ? OUT - o0 : (int)oc;
        /* (each copy is queued after the products that read the previous slice) */
        copy_dout_16(ctx->d_cast[0], src, B, o0, n, OUT);
        if (dinp) {
            tr_cuda_cast_16(w16, w + (size_t)o0 * IN, n, IN, IN);
            gemm_16(ctx, 0, 0, B, IN, n, 1.0f, ctx->d_cast[0], n, w16, IN, o0 ? 1.0f : 0.0f,
                    dinp, IN);
        }
        gemm_16(ctx, 1, 0, n, IN, B, 1.0f, ctx->d_cast[0], n, inp16, IN, 1.0f,
                dw + (size_t)o0 * IN, IN);
    }
    return 1;
}

/* The bias gradient's partial column sums of dout [B, OUT] (stored in dout_format:
 * fp32, or the 16-bit format) into the context's scratch (and, where copy16 is not
 * NULL, dout's 16-bit copy there); returns the row blocks, which tr_cuda_add_partials
 * then adds in order. */
static int colsum_partials(const tr_cuda_ctx *ctx, const void *dout, int dout_format, int B,
                           int OUT, void *copy16)
{
    int RB = tr_cuda_row_blocks((size_t)B, (size_t)OUT);
    dim3 block(32, TR_CUDA_COL_LANES), grid((unsigned)((OUT + 31) / 32), (unsigned)RB);
    if (copy16 && g_gemm_format == TR_PREC_FP16)
        colsum_partial_kernel<__half><<<grid, block, 0, ctx->stream>>>(
            ctx->d_col_partial, (__half *)copy16, dout, dout_format, (size_t)B, OUT, OUT, RB);
    else
        colsum_partial_kernel<__nv_bfloat16><<<grid, block, 0, ctx->stream>>>(
            ctx->d_col_partial, (__nv_bfloat16 *)copy16, dout, dout_format, (size_t)B, OUT,
            OUT, RB);
    TR_CUDA_LAUNCHED();
    return RB;
}

/* The bias gradient stays a kernel of its own rather than cuBLASLt's
 * CUBLASLT_EPILOGUE_BGRADB on the weight-gradient GEMM. The layout would fit: read
 * column-major, that GEMM is D = dw^T [IN x OUT] = inp^T [IN x B] times op(B) with
 * B = dout stored OUT x B and transposed (op(B) = T, which BGRADB requires), and
 * BGRADB sums op(B) over the GEMM's k (the B samples), one value per column of D:
 * db's OUT values. But the epilogue stores the sums in the bias pointer, it does not
 * add them to what is there (cublasLt.h: "Stores Bias gradient in the auxiliary
 * output"; beta scales D only), and the trainer accumulates gradients over
 * micro-batches (db += ..., kernels.h). Using it would take a scratch vector of OUT
 * floats from the memory plan and an add kernel after the GEMM: a second kernel
 * still. The column sums read dout once and add in a fixed order. */
/* linear_backward on inp, or on inp16 (not NULL: the input already in the run's
 * 16-bit format, which the caller takes only where whole_16 holds) */
static int whole_16(int B, int IN, int OUT)
{
    return B > 0 && IN > 0 && OUT > 0 && casts((size_t)B * OUT, (size_t)OUT * IN);
}

/* linear_backward with dout and the input both stored in the 16-bit format, taken as
 * they are: only the weight's copy (for the input-gradient product) must fit a cast
 * buffer, at any number of rows. (whole_16's dout bound would send c_attn's backward
 * at 32 x 1024 tokens and past, and c_fc's at 22 K rows and past, to the fp32-buffer
 * path: a TF32-rate product and widening passes, for no copy it makes.) */
static int weight_16(int B, int IN, int OUT)
{
    return B > 0 && IN > 0 && OUT > 0 && casts((size_t)OUT * IN, 0);
}

/* The products of linear_backward on 16-bit operands: d16, dout's 16-bit form (packed
 * [B, OUT]), and inp16, the input's (or, NULL, a copy of inp made here); dinp (=) of
 * type dinp_type: fp32, or the 16-bit format (mlp_backward's hidden gradient). */
static void backward_products_16(const tr_cuda_ctx *ctx, void *dinp, cudaDataType_t dinp_type,
                                 float *dw, const void *d16, const float *inp,
                                 const void *inp16, const float *w, int B, int IN, int OUT)
{
    if (dinp) {
        tr_cuda_cast_16(ctx->d_cast[1], w, OUT, IN, IN);
        gemm_16_to(ctx, 0, 0, B, IN, OUT, 1.0f, d16, OUT, ctx->d_cast[1], IN, 0.0f, dinp,
                   dinp_type, IN);
    }
    /* (queued after the product above, which has read the w copy by then); a stored
     * 16-bit input is multiplied as it is */
    if (!inp16) {
        tr_cuda_cast_16(ctx->d_cast[1], inp, B, IN, IN);
        inp16 = ctx->d_cast[1];
    }
    gemm_16(ctx, 1, 0, OUT, IN, B, 1.0f, d16, OUT, inp16, IN, 1.0f, dw, IN);
}

static void linear_backward_from(float *dinp, float *dw, float *db, const float *dout,
                                 const float *inp, const void *inp16, const float *w, int B,
                                 int IN, int OUT)
{
    size_t nd = (size_t)B * OUT, nw = (size_t)OUT * IN, ni = (size_t)B * IN;
    int sized = B > 0 && IN > 0 && OUT > 0; /* (tr_cuda_gemm handles the empty shapes) */
    int whole = inp16 ? whole_16(B, IN, OUT) : sized && casts(nd, nw > ni ? nw : ni);
    if (inp16 && !whole)
        tr_fatal(TR_EXIT_SOFTWARE, "bug: linear_backward on a 16-bit input that %d x %d x %d "
                 "does not fit", B, IN, OUT);
    dout_source src = {dout, NULL, NULL, NULL, 0.0f, 0, 0, TR_PREC_FP32};
    int RB = 0; /* the bias gradient's row blocks, once its partial sums are made */
    if (db && B > 0 && OUT > 0 && (size_t)OUT > TR_CUDA_COL_PARTIAL_FLOATS)
        tr_fatal(TR_EXIT_USAGE, "linear_backward: %d output features; the CUDA backend's "
                 "partial sums hold at most %zu", OUT, TR_CUDA_COL_PARTIAL_FLOATS);
    if (sized && !whole && !inp16 &&
        linear_backward_sliced(dinp, dw, &src, inp, NULL, w, B, IN, OUT)) {
        /* done in slices of dout */
    } else if (whole) {
        /* 16-bit copies, dout's made once for both products (with the bias gradient's
         * partial sums, in the same pass, where there is a bias) */
        const tr_cuda_ctx *ctx = tr_cuda_ctx_with_scratch();
        if (db)
            RB = colsum_partials(ctx, dout, TR_PREC_FP32, B, OUT, ctx->d_cast[0]);
        else
            tr_cuda_cast_16(ctx->d_cast[0], dout, B, OUT, OUT);
        backward_products_16(ctx, dinp, CUDA_R_32F, dw, ctx->d_cast[0], inp, inp16, w, B, IN,
                             OUT);
    } else {
        if (dinp) /* dinp[B,IN] = dout[B,OUT] w[OUT,IN] */
            tr_cuda_gemm(0, 0, B, IN, OUT, 1.0f, dout, OUT, w, IN, 0.0f, dinp, IN);
        /* dw[OUT,IN] += dout^T[OUT,B] inp[B,IN] */
        tr_cuda_gemm(1, 0, OUT, IN, B, 1.0f, dout, OUT, inp, IN, 1.0f, dw, IN);
    }
    if (!db || B <= 0 || OUT <= 0)
        return;
    const tr_cuda_ctx *ctx = tr_cuda_ctx_with_scratch();
    if (!RB)
        RB = colsum_partials(ctx, dout, TR_PREC_FP32, B, OUT, NULL);
    tr_cuda_add_partials(db, ctx->d_col_partial, OUT, RB);
}

void tr_cuda_linear_backward(float *dinp, float *dw, float *db, const float *dout,
                             const float *inp, const float *w, int B, int IN, int OUT)
{
    linear_backward_from(dinp, dw, db, dout, inp, NULL, w, B, IN, OUT);
}

/* ---- linear layers on an input stored in the format (transformer_kernels.h) ------- */

/* The input as it is where the run's products are of its format and the other
 * operands fit the cast buffers: no copy of it. Else (a 16-bit input of a run whose
 * products are fp32, or shapes past the buffers: not the GPT's) it is widened to
 * fp32 first, into scratch (forward) or dinp (backward), as the CPU does. */
static int takes_stored(int format) { return tr_is_lowp(format) && format == g_gemm_format; }

void tr_cuda_linear_forward_stored(float *out, const void *inp, const float *w, const float *b,
                                   int B, int IN, int OUT, int format, float *scratch)
{
    if (!tr_is_lowp(format)) {
        tr_cuda_linear_forward(out, (const float *)inp, w, b, B, IN, OUT);
        return;
    }
    if (takes_stored(format) && B > 0 && IN > 0 && OUT > 0 && casts((size_t)OUT * IN, 0)) {
        /* with a bias, cuBLASLt's epilogue adds it; else (or where it has no
         * algorithm) the bias first and the product onto it, as linear_forward */
        if (b && tr_cuda_linear_lt(out, NULL, NULL, inp, w, b, B, IN, OUT))
            return;
        const tr_cuda_ctx *ctx = tr_cuda_ctx_with_scratch();
        float beta = 0.0f;
        if (b) {
            broadcast_rows_kernel<<<tr_cuda_grid((size_t)B * OUT), TR_CUDA_BLOCK, 0,
                                    ctx->stream>>>(out, b, B, OUT);
            TR_CUDA_LAUNCHED();
            beta = 1.0f;
        }
        tr_cuda_cast_16(ctx->d_cast[0], w, OUT, IN, IN);
        gemm_16(ctx, 0, 1, B, OUT, IN, 1.0f, inp, IN, ctx->d_cast[0], IN, beta, out, OUT);
        return;
    }
    tr_cuda_widen_stored(scratch, inp, (size_t)(B > 0 ? B : 0) * (IN > 0 ? IN : 0), format);
    tr_cuda_linear_forward(out, scratch, w, b, B, IN, OUT);
}

/* The product of a stored input into out, stored in the format, written in 16 bits by
 * the product itself where the input is taken as stored (cuBLASLt's bias epilogue with
 * the bias's 16-bit copy; without a bias, cublasGemmEx with a 16-bit C): returns 1
 * once queued, 0 having queued nothing. */
static int forward_16_out(void *out, const void *inp, const float *w, const float *b, int B,
                          int IN, int OUT, int format)
{
    if (!takes_stored(format) || B <= 0 || IN <= 0 || OUT <= 0 || !casts((size_t)OUT * IN, 0))
        return 0;
    if (b)
        return tr_cuda_linear_lt_16(out, inp, w, b, B, IN, OUT);
    const tr_cuda_ctx *ctx = tr_cuda_ctx_with_scratch();
    tr_cuda_cast_16(ctx->d_cast[0], w, OUT, IN, IN);
    gemm_16_to(ctx, 0, 1, B, OUT, IN, 1.0f, inp, IN, ctx->d_cast[0], IN, 0.0f, out,
               tr_cuda_type_16(), OUT);
    return 1;
}

/* Output stored in the format too (c_attn's qkv): where the input is taken as stored,
 * the product writes 16 bits itself (cuBLASLt's bias epilogue, the bias's 16-bit copy;
 * without a bias, cublasGemmEx with a 16-bit C), the fp32 sums plus the bias rounded
 * once as the CPU rounds them: no fp32 output and no pass over it. Elsewhere the fp32
 * product in scratch, then one pass storing it. */
void tr_cuda_linear_forward_stored_io(void *out, const void *inp, const float *w,
                                      const float *b, int B, int IN, int OUT, int format,
                                      float *scratch, float *scratch_in)
{
    if (!tr_is_lowp(format)) {
        tr_cuda_linear_forward((float *)out, (const float *)inp, w, b, B, IN, OUT);
        return;
    }
    if (forward_16_out(out, inp, w, b, B, IN, OUT, format))
        return;
    tr_cuda_linear_forward_stored(scratch, inp, w, b, B, IN, OUT, format, scratch_in);
    tr_cuda_narrow_stored(out, scratch, (size_t)(B > 0 ? B : 0) * (OUT > 0 ? OUT : 0), format);
}

void tr_cuda_linear_backward_stored(float *dinp, float *dw, float *db, const float *dout,
                                    const void *inp, const float *w, int B, int IN, int OUT,
                                    int format)
{
    if (!tr_is_lowp(format)) {
        tr_cuda_linear_backward(dinp, dw, db, dout, (const float *)inp, w, B, IN, OUT);
        return;
    }
    if (takes_stored(format) && whole_16(B, IN, OUT)) {
        linear_backward_from(dinp, dw, db, dout, NULL, inp, w, B, IN, OUT);
        return;
    }
    /* widened into dinp; the parameter gradients from there, then dinp over it */
    tr_cuda_widen_stored(dinp, inp, (size_t)(B > 0 ? B : 0) * (IN > 0 ? IN : 0), format);
    tr_cuda_linear_backward(NULL, dw, db, dout, dinp, w, B, IN, OUT);
    tr_cuda_gemm(0, 0, B, IN, OUT, 1.0f, dout, OUT, w, IN, 0.0f, dinp, IN);
}

/* dout stored in the format too (c_attn's: attention's dqkv): where the products take
 * both stored operands as they are, the bias's column sums read dout's 16 bits and the
 * products multiply them, with no 16-bit copy of dout; elsewhere dout is widened into
 * scratch and the entry above takes it. */
void tr_cuda_linear_backward_stored_dout(float *dinp, float *dw, float *db, const void *dout,
                                         const void *inp, const float *w, int B, int IN,
                                         int OUT, int format, float *scratch)
{
    if (!tr_is_lowp(format)) {
        tr_cuda_linear_backward_stored(dinp, dw, db, (const float *)dout, inp, w, B, IN, OUT,
                                       format);
        return;
    }
    if (takes_stored(format) && weight_16(B, IN, OUT) &&
        (!db || (size_t)OUT <= TR_CUDA_COL_PARTIAL_FLOATS)) {
        const tr_cuda_ctx *ctx = tr_cuda_ctx_with_scratch();
        int RB = db ? colsum_partials(ctx, dout, format, B, OUT, NULL) : 0;
        backward_products_16(ctx, dinp, CUDA_R_32F, dw, dout, NULL, inp, w, B, IN, OUT);
        if (db)
            tr_cuda_add_partials(db, ctx->d_col_partial, OUT, RB);
        return;
    }
    tr_cuda_widen_stored(scratch, dout, (size_t)(B > 0 ? B : 0) * (OUT > 0 ? OUT : 0), format);
    tr_cuda_linear_backward_stored(dinp, dw, db, scratch, inp, w, B, IN, OUT, format);
}

/* Whether linear_backward_stored_dinp's input gradient can be written in 16 bits by
 * the product itself: the products take the stored input as it is, and dout's 16-bit
 * copy (with its bias sums) fits. */
static int dinp_16(int B, int IN, int OUT, int format, const float *db)
{
    return takes_stored(format) && whole_16(B, IN, OUT) &&
           (!db || (size_t)OUT <= TR_CUDA_COL_PARTIAL_FLOATS);
}

/* dinp_16's case: dout's 16-bit copy made with the bias's column sums in one pass, as
 * linear_backward, then the input-gradient product writing 16 bits (cublasGemmEx with
 * a 16-bit C: its fp32 sums rounded once, as the CPU rounds them on storing). */
static void backward_dinp_16(void *dinp, float *dw, float *db, const float *dout,
                             const void *inp, const float *w, int B, int IN, int OUT)
{
    const tr_cuda_ctx *ctx = tr_cuda_ctx_with_scratch();
    int RB = 0;
    if (db)
        RB = colsum_partials(ctx, dout, TR_PREC_FP32, B, OUT, ctx->d_cast[0]);
    else
        tr_cuda_cast_16(ctx->d_cast[0], dout, B, OUT, OUT);
    backward_products_16(ctx, dinp, tr_cuda_type_16(), dw, ctx->d_cast[0], NULL, inp, w, B, IN,
                         OUT);
    if (db)
        tr_cuda_add_partials(db, ctx->d_col_partial, OUT, RB);
}

/* dinp stored in the format (attention's c_proj: attention's dout): written in 16 bits
 * by the product where it can be (75 MB written instead of 150 at GPT-2's 16 x 1024,
 * and attention's three readers read half the bytes); elsewhere the fp32 product in
 * scratch, then one pass storing it. */
void tr_cuda_linear_backward_stored_dinp(void *dinp, float *dw, float *db, const float *dout,
                                         const void *inp, const float *w, int B, int IN,
                                         int OUT, int format, float *scratch)
{
    if (!tr_is_lowp(format)) {
        tr_cuda_linear_backward_stored((float *)dinp, dw, db, dout, inp, w, B, IN, OUT,
                                       format);
        return;
    }
    if (dinp_16(B, IN, OUT, format, db)) {
        backward_dinp_16(dinp, dw, db, dout, inp, w, B, IN, OUT);
        return;
    }
    tr_cuda_linear_backward_stored(scratch, dw, db, dout, inp, w, B, IN, OUT, format);
    tr_cuda_narrow_stored(dinp, scratch, (size_t)(B > 0 ? B : 0) * (IN > 0 ? IN : 0), format);
}

/* ---- the MLP's backward ----------------------------------------------------------- */

/* bf16/fp16-mixed, where the products are of the format and fit the cast buffers: the
 * hidden gradient [B, HID] lives in the format's 16 bits at scratch
 * (transformer_kernels.h). c_proj's input-gradient product writes it so (cuBLAS
 * rounds its fp32 sums once, as the CPU's GELU backward rounds them on reading),
 * GELU's backward works on it in place, and c_fc's bias sums and products read it as
 * it is, without the 16-bit copy an fp32 gradient needs. Against the three entries on
 * an fp32 gradient: at GPT-2's 16 x 1024 (HID 3072), 1.1 GB of a layer's traffic on
 * it becomes 0.6 GB. Elsewhere, the three entries. */
void tr_cuda_mlp_backward(float *dinp, float *dw_fc, float *db_fc, float *dw_proj,
                          float *db_proj, const float *dout, const void *inp, const void *pre,
                          const void *hid, const float *w_fc, const float *w_proj, int B, int IN,
                          int HID, int format, float *scratch)
{
    size_t nh = (size_t)(B > 0 ? B : 0) * (HID > 0 ? HID : 0);
    if (!dinp_16(B, HID, IN, format, db_proj) || !weight_16(B, IN, HID) ||
        (size_t)HID > TR_CUDA_COL_PARTIAL_FLOATS) {
        tr_cuda_linear_backward_stored(scratch, dw_proj, db_proj, dout, hid, w_proj, B, HID, IN,
                                       format);
        tr_cuda_gelu_backward(scratch, pre, scratch, nh, format);
        tr_cuda_linear_backward_stored(dinp, dw_fc, db_fc, scratch, inp, w_fc, B, IN, HID,
                                       format);
        return;
    }
    void *dh = scratch; /* 16 bits a value */
    /* c_proj (HID -> IN), its input gradient written in 16 bits */
    backward_dinp_16(dh, dw_proj, db_proj, dout, hid, w_proj, B, HID, IN);
    tr_cuda_gelu_backward_stored(dh, pre, nh, format);
    const tr_cuda_ctx *ctx = tr_cuda_ctx_with_scratch();
    int RB = 0;
    /* c_fc (IN -> HID) on the 16-bit gradient as it is */
    if (db_fc)
        RB = colsum_partials(ctx, dh, format, B, HID, NULL);
    backward_products_16(ctx, dinp, CUDA_R_32F, dw_fc, dh, NULL, inp, w_fc, B, IN, HID);
    if (db_fc)
        tr_cuda_add_partials(db_fc, ctx->d_col_partial, HID, RB);
}

/* ---- the LM head ------------------------------------------------------------------ */

/* Whether the head keeps 16-bit logits: the run's products are of its 16-bit format
 * and the head's weight [Vl, C] fits one cast buffer (GPT-2's: 39 M values of 64 M;
 * a larger vocabulary shard keeps fp32 logits and the sliced backward below). */
static int head_16(int format, int C, int Vl)
{
    return takes_stored(format) && C > 0 && Vl > 0 && casts((size_t)Vl * C, 0);
}

/* 16-bit logits: the product stores them itself, its fp32 sums rounded once as the
 * readers would round fp32 logits, and every pass over them (the cross-entropy's,
 * the accuracy's, the head's backward) moves half the bytes: 1.6 GB each at GPT-2's
 * 16 x 1024 instead of 3.3, and half the memory, 6 GiB less at 64 x 1024. */
int tr_cuda_logits_format(int format, int C, int Vl)
{
    return head_16(format, C, Vl) ? format : TR_PREC_FP32;
}

void tr_cuda_lm_head_forward(void *logits, const void *inp, const float *w, size_t BT, int C,
                             int Vl, int format, int lfmt, float *scratch)
{
    if (BT > (size_t)INT_MAX)
        tr_fatal(TR_EXIT_SOFTWARE, "lm_head_forward: %zu rows", BT);
    if (!tr_is_lowp(lfmt)) {
        tr_cuda_linear_forward_stored((float *)logits, inp, w, NULL, (int)BT, C, Vl, format,
                                      scratch);
        return;
    }
    if (BT == 0)
        return;
    if (lfmt != format || !head_16(format, C, Vl) ||
        !forward_16_out(logits, inp, w, NULL, (int)BT, C, Vl, format))
        tr_fatal(TR_EXIT_SOFTWARE, "bug: lm_head_forward: 16-bit logits that the products "
                 "cannot store (%zu x %d x %d)", BT, C, Vl);
}

/* xent_linear_backward. With 16-bit logits: dlogits written over them, rounded to the
 * format as ever (element-wise, each read before it is written), and multiplied as
 * they are by the two products, which need nothing but the weight's 16-bit copy: one
 * pass reading and writing 2 bytes a value, no slices. With fp32 logits in
 * bf16/fp16-mixed (the products' format), the 16-bit copies of dlogits are made
 * straight from the logits and the softmax's statistics, slice by slice, so dlogits
 * is never stored: the cross-entropy's backward pass over B*T x Vl floats (read and
 * write, 6.6 GB at GPT-2's 16 x 1024) is saved. Elsewhere, or where the slices do not
 * fit, the two kernels one after the other, dlogits over the logits. */
void tr_cuda_xent_linear_backward(float *dinp, float *dw, void *logits, const float *stats,
                                  const int *targets, float scale, size_t BT, int Vl, int v0,
                                  int nreal, const void *inp, const float *w, int C, int format,
                                  int lfmt)
{
    if (tr_is_lowp(lfmt)) {
        if (lfmt != format || !head_16(format, C, Vl) || BT > (size_t)INT_MAX)
            tr_fatal(TR_EXIT_SOFTWARE, "bug: xent_linear_backward: 16-bit logits that the "
                     "products cannot take (%zu x %d x %d)", BT, C, Vl);
        if (BT == 0)
            return;
        tr_cuda_xent_shard_backward(logits, logits, stats, targets, scale, BT, Vl, v0, nreal,
                                    format, lfmt);
        /* inp, ln_f's output, is stored in the format: multiplied as it is */
        backward_products_16(tr_cuda_ctx_with_scratch(), dinp, CUDA_R_32F, dw, logits, NULL, inp,
                             w, (int)BT, C, Vl);
        return;
    }
    float *lg = (float *)logits;
    dout_source src = {NULL, lg, stats, targets, scale, v0, nreal, format};
    if (BT > 0 && BT <= (size_t)INT_MAX && Vl > 0 && C > 0 && format == g_gemm_format &&
        tr_is_lowp(format) &&
        linear_backward_sliced(dinp, dw, &src, NULL, inp, w, (int)BT, C, Vl))
        return;
    tr_cuda_xent_shard_backward(lg, lg, stats, targets, scale, BT, Vl, v0, nreal, format,
                                TR_PREC_FP32);
    tr_cuda_linear_backward_stored(dinp, dw, NULL, lg, inp, w, (int)BT, C, Vl, format);
}

/* ---- c_fc and GELU -------------------------------------------------------------- */

/* fp32: one cuBLASLt matmul with CUBLASLT_EPILOGUE_GELU_AUX_BIAS: pre = the linear
 * layer's output (the aux matrix, which gelu_backward reads), out = GELU(pre).
 *
 * Why this GELU is the model's: the model uses the tanh approximation,
 * 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (gelu_math.h, PyTorch's
 * approximate='tanh', GPT-2's). cuBLASLt's documentation and header name the
 * epilogue "GELU" without a formula; that it is the tanh approximation is what
 * PyTorch states and relies on (pytorch/pytorch#104061 switched its own fallback
 * paths of _addmm_activation to approximate='tanh' to match the cuBLASLt epilogue),
 * what NVIDIA Transformer Engine and llm.c pair it with, and what independent
 * measurements show (within ~5e-6 of the tanh form in fp32, ~5e-4 away from the erf
 * form). The two are the same function up to rounding; the GPU test compares them
 * (validation/gpu/test_cuda_linear_lt.c).
 * Where cuBLASLt has no algorithm (or OUT is not a multiple of 8): the product, then
 * GELU's kernel.
 *
 * bf16/fp16-mixed: pre and out are stored in the format, 16 bits a value, and so is
 * inp (ln_2's output: transformer_kernels.h), which the product multiplies as it is.
 * The product writes pre in 16 bits itself (its fp32 sums plus the bias rounded once,
 * as linear_forward_stored_io writes qkv), and one pass reads it and stores GELU of
 * it, rounded: the CPU's arithmetic after its product. Against an fp32 product in
 * scratch and a pass storing both tensors from it, 6 bytes a value less (about 300 MB
 * a layer at GPT-2's 16 x 1024). Where the product cannot store 16 bits (shapes past
 * the cast buffers, fp32 products), that older path. (cuBLASLt's GELU_AUX epilogue
 * with 16-bit outputs is not used: its GELU would take the unrounded pre, and llm.c
 * measured its bf16 GELU epilogues slower than a separate kernel, karpathy/llm.c#338.)
 * c_proj then multiplies out as it is stored (linear_forward_stored), and
 * gelu_backward reads pre in 16 bits. */
void tr_cuda_linear_gelu_forward(void *pre, void *out, const void *inp, const float *w,
                                 const float *b, int B, int IN, int OUT, int format,
                                 float *scratch, float *scratch_in)
{
    size_t n = (size_t)(B > 0 ? B : 0) * (OUT > 0 ? OUT : 0);
    if (tr_is_lowp(format)) {
        if (forward_16_out(pre, inp, w, b, B, IN, OUT, format)) {
            tr_cuda_gelu_stored(out, pre, n, format);
            return;
        }
        tr_cuda_linear_forward_stored(scratch, inp, w, b, B, IN, OUT, format, scratch_in);
        tr_cuda_gelu_store(pre, out, scratch, n, format);
        return;
    }
    float *p = (float *)pre, *o = (float *)out;
    const float *x = (const float *)inp;
    if (!tr_cuda_linear_lt(o, p, x, NULL, w, b, B, IN, OUT)) {
        tr_cuda_linear_forward(p, x, w, b, B, IN, OUT);
        tr_cuda_gelu_forward(o, p, n);
    }
}
