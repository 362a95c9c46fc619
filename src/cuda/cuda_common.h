/* cuda_common.h: what every .cu file of the backend shares: error checks that end
 * the job with the CUDA/cuBLAS error string and file:line, the per-process context
 * (stream, cuBLAS and cuBLASLt handles, small scratch for results the host waits
 * for), launch sizes and the device-side reductions. Internal to src/cuda (C++
 * only). */
#ifndef TR_CUDA_COMMON_H
#define TR_CUDA_COMMON_H

#include "cuda/cublas_loader.h"
#include "cuda/cublaslt_loader.h"
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

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

/* Fixed number of blocks (and of partial sums) of the grid-wide reductions: the sum
 * order then depends only on n, never on the GPU, so sum_squares is reproducible
 * across GPU models too. */
#define TR_CUDA_REDUCE_BLOCKS 1024

/* cuBLAS's workspace (cublasSetWorkspace), taken from the device's reservation so
 * that cuBLAS allocates nothing of its own. cuBLAS's documentation recommends 32 MiB
 * on Hopper (sm_90) and Blackwell data-centre GPUs, 4 MiB on the others, the size of
 * the pool it would otherwise allocate itself; one size for all keeps the plan the
 * same wherever it is printed (--plan runs without a GPU), at 28 MiB too many on an
 * A100. */
#define TR_CUDA_CUBLAS_WORKSPACE ((size_t)32 << 20)

/* Column sums over many rows (bias and layernorm parameter gradients) run in two
 * kernels without atomics: row block y of RB adds its rows of each column into
 * partial row y, then one thread per column adds the RB partials in order. RB comes
 * from the shape alone (tr_cuda_row_blocks), so the order, and the sum, do too. One
 * block per 32 columns over all rows, the single-kernel form, left GPT-2's C = 768
 * columns on 24 SMs reading B*T = 16K rows each. The partials live in the scratch:
 * 2 MiB holds 64 row blocks of up to 4096 columns x 2 (weight and bias). */
#define TR_CUDA_COL_PARTIAL_FLOATS ((size_t)1 << 19)
#define TR_CUDA_COL_LANES 16       /* row lanes of a block (x 32 columns: 512 threads) */
#define TR_CUDA_MAX_ROW_BLOCKS 64

/* RB for R rows when each row block keeps `floats` partial sums: at least one row
 * per lane, at most TR_CUDA_MAX_ROW_BLOCKS, and what the scratch holds (>= 1; the
 * caller checks that one row block fits). */
static inline int tr_cuda_row_blocks(size_t R, size_t floats)
{
    size_t rb = (R + TR_CUDA_COL_LANES - 1) / TR_CUDA_COL_LANES;
    size_t fit = TR_CUDA_COL_PARTIAL_FLOATS / (floats > 0 ? floats : 1);
    rb = rb < TR_CUDA_MAX_ROW_BLOCKS ? rb : TR_CUDA_MAX_ROW_BLOCKS;
    rb = rb < fit ? rb : fit;
    return rb > 0 ? (int)rb : 1;
}

/* bf16-mixed and fp16-mixed GEMMs copy their two operands to 16-bit buffers first
 * (cuda_gemm.cu): given fp32 operands cuBLAS runs TF32 kernels, about half the speed
 * of its bf16 ones. Each buffer holds this many 16-bit values (128 MiB): GPT-2's
 * activations at B*T = 16K rows up to 4C wide fit; a larger operand (the LM head's
 * logits) keeps the fp32 path. */
#define TR_CUDA_CAST_ELEMS ((size_t)64 << 20)

/* The context's device scratch (below), each piece 256-byte aligned as the
 * reservation hands memory out. */
#define TR_CUDA_SCRATCH_BYTES                                                           \
    (((TR_CUDA_REDUCE_BLOCKS * sizeof(double) + 255) & ~(size_t)255) + 256 + 256 +       \
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
    double *d_partial;  /* [TR_CUDA_REDUCE_BLOCKS] */
    double *d_result;   /* [1] */
    unsigned *d_flag;   /* [1] */
    float *d_col_partial; /* [TR_CUDA_COL_PARTIAL_FLOATS]: column sums' partials */
    void *d_cast[2];      /* [TR_CUDA_CAST_ELEMS] 16-bit values each: GEMM operands */
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

/* ---- launch sizes ---------------------------------------------------------------- */

#define TR_CUDA_BLOCK 256

/* Blocks for an element-wise kernel over n items with a grid-stride loop: enough to
 * fill any current GPU, capped so that huge n stays a valid grid. */
static inline unsigned tr_cuda_grid(size_t n)
{
    size_t g = (n + TR_CUDA_BLOCK - 1) / TR_CUDA_BLOCK;
    const size_t cap = 65536;
    return (unsigned)(g < 1 ? 1 : g < cap ? g : cap);
}

#ifdef __CUDACC__
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

/* The body runs for i = this thread's index, then every gridDim * blockDim after,
 * while i < n: any n with the capped grid of tr_cuda_grid. */
#define TR_GRID_STRIDE(i, n)                                                           \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n);             \
         i += (size_t)gridDim.x * blockDim.x)
#endif

/* ---- device-side reductions (fixed trees: deterministic) ------------------------- */

#ifdef __CUDACC__
/* Sum over a warp, in the same pattern every time. Every lane gets the same bits:
 * at each step two partner lanes add the same two values. */
template <typename T> __device__ inline T tr_warp_sum(T v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Max over a warp, comparing as the CPU kernels do (a > b ? a : b). */
__device__ inline float tr_warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1) {
        float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = w > v ? w : v;
    }
    return v;
}

/* Sum over a block of blockDim.x threads (a multiple of 32, at most 1024, all of
 * them calling); every thread gets the same result. `shared` holds 32 values. The
 * barrier before the write lets a kernel call it again with the same buffer. */
template <typename T> __device__ inline T tr_block_sum(T v, T *shared)
{
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    v = tr_warp_sum(v);
    __syncthreads();
    if (lane == 0)
        shared[warp] = v;
    __syncthreads();
    v = lane < nwarps ? shared[lane] : T(0);
    return tr_warp_sum(v);
}

__device__ inline float tr_block_max(float v, float *shared)
{
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    v = tr_warp_max(v);
    __syncthreads();
    if (lane == 0)
        shared[warp] = v;
    __syncthreads();
    v = lane < nwarps ? shared[lane] : shared[0];
    return tr_warp_max(v);
}
#endif

#endif
