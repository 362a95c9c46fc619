/* cuda_launch.cuh: what the CUDA kernels share that needs no CUDA header: launch
 * sizes, the grid-stride loop, dynamic shared memory and the device-side reductions.
 * cuda_common.h includes it for the backend; validation/unit/warp_emulator.h's tests
 * include it after the emulator, which defines the CUDA built-ins these use, to run
 * kernels on the CPU. */
#ifndef TR_CUDA_LAUNCH_CUH
#define TR_CUDA_LAUNCH_CUH

#include <stddef.h>

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

/* Fixed number of blocks (and of partial sums) of the grid-wide reductions: the sum
 * order then depends only on n, never on the GPU, so sum_squares is reproducible
 * across GPU models too. */
#define TR_CUDA_REDUCE_BLOCKS 1024

/* Spans of sum_squares_spans in one launch (passed by value: 512 bytes of kernel
 * parameters), each with its TR_CUDA_REDUCE_BLOCKS partial sums in the scratch. */
#define TR_CUDA_SPAN_CHUNK 32

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

/* ---- in kernels ----------------------------------------------------------------- */

#if defined(__CUDACC__) && !defined(TR_WARP_EMULATOR_H)
/* `name`, the block's dynamic shared memory as unsigned char (the emulator defines
 * its own) */
#define TR_DYNAMIC_SMEM(name) extern __shared__ __align__(16) unsigned char name[]
#endif

#if defined(__CUDACC__) || defined(TR_WARP_EMULATOR_H)
/* The body runs for i = this thread's index, then every gridDim * blockDim after,
 * while i < n: any n with the capped grid of tr_cuda_grid. */
#define TR_GRID_STRIDE(i, n)                                                           \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n);             \
         i += (size_t)gridDim.x * blockDim.x)

/* ---- device-side reductions (fixed trees: deterministic) ------------------------- */

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
