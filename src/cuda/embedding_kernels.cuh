/* embedding_kernels.cuh: the device code of cuda_transformer.cu's token and position
 * embedding, forward and backward, whole or vocabulary-sharded (which it launches).
 * Free of CUDA headers, so validation/unit/test_cuda_kernels_emu.cpp runs it on the
 * CPU under the warp emulator against the CPU's kernels, bit for bit. */
#ifndef TR_EMBEDDING_KERNELS_CUH
#define TR_EMBEDDING_KERNELS_CUH

#include "cuda/cuda_launch.cuh"

/* out = wte[tok - v0] where this shard holds the token (else 0) + wpe[t] (when
 * given); the expression is the CPU's, so a single shard gives the same bits. */
__global__ static void embedding_forward_kernel(float *out, const int *tok, const float *wte,
                                                const float *wpe, size_t BT, int T, int C,
                                                int v0, int Vl)
{
    TR_GRID_STRIDE(i, BT * C)
    {
        size_t r = i / C;
        int c = (int)(i % C);
        long j = (long)tok[r] - v0;
        float e = j >= 0 && j < Vl ? wte[(size_t)j * C + c] : 0.0f;
        float p = wpe ? wpe[(r % T) * C + c] : 0.0f;
        out[i] = e + p;
    }
}

/* dwte rows without atomics. Block (r, slice) handles the token of row r, channels
 * [slice * blockDim, ...), but only when r is that token's first row: then it alone
 * owns the token's dwte row and adds every row holding the token, in row order,
 * onto it, exactly as the CPU loop does.
 *  - Whether r is a first row: the block scans the tokens before r, blockDim at a
 *    time (BT^2 / 2 token reads in all, spread over every block: about 0.1 ms at
 *    B*T = 16K).
 *  - The rows holding the token: the block reads the tokens from r on, blockDim at a
 *    time; each warp ballots its 32 matches into shared memory, and every thread then
 *    walks the set bits in order, so a thread's work is the token's count, not the
 *    rows after r (a loop over every later row, per thread, cost an estimated 3-10 ms
 *    per GPT-2 step at B*T = 16K).
 * Every thread stays in the loops (the ballots and barriers need the whole block);
 * only those with a channel c < C read and write. blockDim is TR_CUDA_BLOCK, a
 * multiple of 32. */
__global__ static void embedding_wte_backward_kernel(float *dwte, const float *dout,
                                                     const int *tok, int BT, int C, int v0,
                                                     int Vl)
{
    __shared__ unsigned hits[TR_CUDA_BLOCK / 32];
    int r = blockIdx.x, token = tok[r];
    long j = (long)token - v0;
    if (j < 0 || j >= Vl) /* the same for the whole block */
        return;
    int seen = 0;
    for (int i = threadIdx.x; i < r; i += blockDim.x)
        seen |= tok[i] == token;
    if (__syncthreads_or(seen))
        return;
    int c = blockIdx.y * blockDim.x + threadIdx.x, lane = threadIdx.x % 32;
    int warps = blockDim.x / 32;
    float acc = c < C ? dwte[(size_t)j * C + c] : 0.0f;
    for (int base = r; base < BT; base += blockDim.x) { /* the same trips for every thread */
        int r2 = base + threadIdx.x;
        unsigned m = __ballot_sync(0xffffffffu, r2 < BT && tok[r2] == token);
        if (lane == 0)
            hits[threadIdx.x / 32] = m;
        __syncthreads();
        if (c < C)
            for (int w = 0; w < warps; w++)
                for (unsigned bits = hits[w]; bits; bits &= bits - 1)
                    acc += dout[(size_t)(base + w * 32 + __ffs(bits) - 1) * C + c];
        __syncthreads(); /* before the next trip overwrites hits */
    }
    if (c < C)
        dwte[(size_t)j * C + c] = acc;
}

/* dwpe[t, c] += dout[b, t, c] for b = 0, 1, ...: one thread per (t, c), rows in
 * the CPU's order. */
__global__ static void embedding_wpe_backward_kernel(float *dwpe, const float *dout, int B,
                                                     int T, int C)
{
    TR_GRID_STRIDE(i, (size_t)T * C)
    {
        float acc = dwpe[i];
        for (int b = 0; b < B; b++)
            acc += dout[(size_t)b * T * C + i];
        dwpe[i] = acc;
    }
}

#endif
