/* cuda_common.h: what every .cu file of the backend shares: error checks that end
 * the job with the CUDA/cuBLAS error string and file:line, the per-process context
 * (stream, cuBLAS and cuBLASLt handles, small scratch for results the host waits
 * for) and launch helpers; with cuda_launch.cuh (launch sizes, the device-side
 * reductions), which it includes. Internal to src/cuda (C++ only). */
#ifndef TR_CUDA_COMMON_H
#define TR_CUDA_COMMON_H

#include "cuda/cublas_loader.h"
#include "cuda/cublaslt_loader.h"
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "cuda/cuda_launch.cuh"

/* ---- error checks ---------------------------------------------------------------- */

[[noreturn]] void tr_cuda_fail_at(const char *file, int line, cudaError_t e, const char *what);
[[noreturn]] void tr_cublas_fail_at(const char *file, int line, cublasStatus_t s,
                                    const char *what);

static inline void tr_cuda_check_at(const char *file, int line, cudaError_t e, const char *what)
{
    if (e != cudaSuccess)
        tr_cuda_fail_at(file, line, e, what);
}
static inline void tr_cublas_check_at(const char *file, int line, cublasStatus_t s,
                                      const char *what)
{
    if (s != CUBLAS_STATUS_SUCCESS)
        tr_cublas_fail_at(file, line, s, what);
}

#define TR_CUDA_CHECK(call) tr_cuda_check_at(__FILE__, __LINE__, (call), #call)
#define TR_CUBLAS_CHECK(call) tr_cublas_check_at(__FILE__, __LINE__, (call), #call)
/* After a <<<...>>> launch: a bad configuration is reported here, where it happened;
 * a fault inside the kernel surfaces at the next synchronising call. */
#define TR_CUDA_LAUNCHED() tr_cuda_check_at(__FILE__, __LINE__, cudaGetLastError(), "kernel launch")

/* ---- the per-process context ----------------------------------------------------- */

/* (TR_CUDA_REDUCE_BLOCKS, TR_CUDA_SPAN_CHUNK: cuda_launch.cuh) */
/* The partial sums' room in the scratch, bytes, 256-byte aligned */
#define TR_CUDA_PARTIAL_BYTES                                                           \
    ((TR_CUDA_SPAN_CHUNK * TR_CUDA_REDUCE_BLOCKS * sizeof(double) + 255) & ~(size_t)255)

/* cuBLAS's workspace (cublasSetWorkspace), taken from the device's reservation so
 * that cuBLAS allocates nothing of its own; the cuBLASLt matmuls (cuda_linear_lt.cu)
 * are given the same one, which their place on the one stream keeps from ever being
 * used by two calls at once. cuBLAS's documentation recommends 32 MiB
 * on Hopper (sm_90) and Blackwell data-centre GPUs, 4 MiB on the others, the size of
 * the pool it would otherwise allocate itself; one size for all keeps the plan the
 * same wherever it is printed (--plan runs without a GPU), at 28 MiB too many on an
 * A100. */
#define TR_CUDA_CUBLAS_WORKSPACE ((size_t)32 << 20)

/* bf16-mixed and fp16-mixed GEMMs copy their two operands to 16-bit buffers first
 * (cuda_gemm.cu): given fp32 operands cuBLAS runs TF32 kernels, about half the speed
 * of its bf16 ones. Each buffer holds this many 16-bit values (128 MiB): GPT-2's
 * activations at B*T = 16K rows up to 4C wide fit; a larger operand (the LM head's
 * logits) keeps the fp32 path. */
#define TR_CUDA_CAST_ELEMS ((size_t)64 << 20)

/* The context's device scratch (below), each piece 256-byte aligned as the
 * reservation hands memory out. */
#define TR_CUDA_SCRATCH_BYTES                                                           \
    (TR_CUDA_PARTIAL_BYTES + 256 + 256 +                                                \
     TR_CUDA_COL_PARTIAL_FLOATS * sizeof(float) + 2 * TR_CUDA_CAST_ELEMS * 2)

/* What the backend takes out of the device's reservation before the model does:
 * the figure the memory plan counts as the CUDA device's own (tr_device's
 * backend_bytes). */
#define TR_CUDA_BACKEND_BYTES (TR_CUDA_CUBLAS_WORKSPACE + TR_CUDA_SCRATCH_BYTES)

/* The scratch below is used between a kernel and the host's wait for it, so the
 * backend's entries must not be called from two host threads at once (the trainer
 * calls kernels from one thread, as with the CPU table). */
typedef struct tr_cuda_ctx {
    int device;
    cudaStream_t stream;
    cublasHandle_t blas;
    cublasLtHandle_t lt; /* the linear layer's epilogue matmuls (cuda_linear_lt.cu) */
    /* device scratch: partial sums of a reduction, one double result, a flag; from
     * the device's reservation (tr_cuda_ctx_adopt), or cudaMalloc'ed by the first
     * tr_cuda_ctx_with_scratch in a process that reserves nothing (the kernel tests
     * and benchmarks); NULL until then */
    double *d_partial;  /* [TR_CUDA_SPAN_CHUNK][TR_CUDA_REDUCE_BLOCKS] */
    double *d_result;   /* [1] */
    unsigned *d_flag;   /* [1] */
    float *d_col_partial; /* [TR_CUDA_COL_PARTIAL_FLOATS]: column sums' partials */
    void *d_cast[2];      /* [TR_CUDA_CAST_ELEMS] 16-bit values each: GEMM operands */
    void *d_workspace;    /* [TR_CUDA_CUBLAS_WORKSPACE] bytes: cuBLAS's and cuBLASLt's */
    /* pinned host landing spots for what the host waits for */
    double *h_result;
    unsigned *h_flag;
    int *h_int;
} tr_cuda_ctx;

/* The context, created on first use (thread-safe: a C++ function-local static).
 * Its device scratch may not exist yet: kernels that use it call
 * tr_cuda_ctx_with_scratch instead. */
const tr_cuda_ctx *tr_cuda_ctx_get(void);
/* The context with its device scratch: the reservation's, or, in a process that
 * has reserved nothing, buffers of its own made by the first call. */
const tr_cuda_ctx *tr_cuda_ctx_with_scratch(void);
/* Hands the context `bytes` (TR_CUDA_BACKEND_BYTES) of the device's reservation at
 * `base` (256-byte aligned): its scratch, and cuBLAS's workspace through
 * cublasSetWorkspace. Once, before any kernel that uses the scratch (fatal
 * otherwise: that scratch would lie outside the plan). */
void tr_cuda_ctx_adopt(void *base, size_t bytes);
/* Before the reservation is freed: cuBLAS back on its own pool, no scratch (the
 * next tr_cuda_ctx_with_scratch makes its own). */
void tr_cuda_ctx_give_back(void);
static inline cudaStream_t tr_cuda_stream(void) { return tr_cuda_ctx_get()->stream; }

/* The host's wait for stream s, in place of cudaStreamSynchronize. Once a watch is
 * set (comm_nccl.cu does, with its first communicator) it polls the stream and
 * calls the watch every TR_CUDA_WATCH_MS while it waits: a rank or a link that
 * fails leaves NCCL's kernels, and a blocking synchronize behind them, waiting for
 * ever, and the watch turns NCCL's asynchronous error into a fatal one instead. */
void tr_cuda_stream_wait(cudaStream_t s);
#define TR_CUDA_WATCH_MS 100
/* The watch: returns when all is well, does not return otherwise. */
void tr_cuda_set_watch(void (*watch)(void));

/* Sums n floats of x in index order, in double, on the device, and returns the sum
 * to the host (waits for the stream): the same order, so the same value, as the
 * CPU's serial loop over the same floats. */
double tr_cuda_sum_in_order(const float *x, size_t n);
/* dst[c] += partial[0][c] + partial[1][c] + ... + partial[RB - 1][c], in that order
 * (rows of C floats): the second kernel of the column sums, on the stream. */
void tr_cuda_add_partials(float *dst, const float *partial, int C, int RB);

/* Fatal (TR_EXIT_SOFTWARE, "what: token T at position P is outside [0, V)") when a
 * token of tok[n] (device) is outside [0, V); waits for the stream. */
void tr_cuda_check_tokens(const int *tok, size_t n, int V, const char *what);

/* ---- launch helpers (the sizes: cuda_launch.cuh) --------------------------------- */

#if defined(__CUDACC__) || defined(TR_WARP_EMULATOR_H) /* nvcc, or the emulation build */
/* A kernel's dynamic shared memory above the default 48 KB must be opted into, once
 * per kernel (*done remembers it; one flag per kernel instance). */
template <typename K> static inline void tr_cuda_allow_smem(K kernel, size_t bytes, int *done)
{
    if (*done)
        return;
    TR_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)bytes));
    *done = 1;
}

/* Whether the attention kernels may load rows of q, k, v (a) and dO (b) 16 bytes at a
 * time: every row start is a multiple of 4 floats. */
static inline int tr_cuda_vec4_rows(const void *a, const void *b, int C, int HS)
{
    return HS % 4 == 0 && C % 4 == 0 && (uintptr_t)a % 16 == 0 && (uintptr_t)b % 16 == 0;
}

/* Blocks of a kernel with one block per (batch row, head, tile of `rows` positions of
 * T): the attention kernels' 1-D grid. */
static inline unsigned tr_cuda_tile_grid(int B, int NH, int T, int rows)
{
    size_t n = (size_t)B * NH * ((T + rows - 1) / rows);
    if (n > 0x7fffffffu)
        tr_fatal(TR_EXIT_SOFTWARE, "attention: %zu blocks exceed the CUDA grid", n);
    return (unsigned)n;
}
#endif

#endif
