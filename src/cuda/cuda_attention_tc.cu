/* cuda_attention_tc.cu: the fused causal attention of cuda_attention.cu on tensor
 * cores, for bf16-mixed runs: the same three kernels (forward, dK/dV, dQ) and the
 * same saved state (each row's log-sum-exp), with every product a bf16 WMMA
 * (16 x 16 x 16, fp32 accumulation).
 *
 * Why only bf16-mixed: there the model stores Q, K, V and dO rounded to bf16, so
 * their products on the tensor cores are exact, as on the CPU. What is rounded here
 * and not on the CPU is the probabilities P (of O = P V and dV = P^T dO) and the
 * score gradient dS (of dQ and dK): one bf16 rounding each. fp32 and fp16-mixed runs
 * take the fp32 kernels of cuda_attention.cu.
 *
 * Shape of the work: a block of 4 warps owns 64 rows (queries in forward and dQ,
 * keys in dK/dV), each warp 16 of them, and walks the other side in tiles of 64. A
 * warp computes its 16 x 64 block of scores (or score gradients) with WMMA into
 * shared memory, applies the softmax arithmetic there on the CUDA cores, writes the
 * result back as bf16, and multiplies it into accumulators that stay in registers.
 * Forward takes two passes over the keys, the first for each row's max and sum, so
 * that the second can form final probabilities and never rescale its accumulators
 * (WMMA does not say which row an accumulator element belongs to). */
#include "cuda/cuda_attention_tc.h"

#include "cuda/cuda_common.h"

#include "backend/scalar_math.h" /* tr_expf */

#include <cuda_bf16.h>
#include <math.h>
#include <mma.h>

using namespace nvcuda;

#define TC_WARPS 4
#define TC_THREADS (TC_WARPS * 32)
#define TC_TILE 64 /* rows a block owns, and the other side's tile */

typedef __nv_bfloat16 bf16;
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> frag_a;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> frag_b_row;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> frag_b_col;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> frag_acc;

/* Shared-memory layout for a padded head size D (a multiple of 16, up to 128). Row
 * strides are padded by 16 bytes (bf16) or 16 bytes (fp32) against bank conflicts;
 * every fragment pointer stays 32-byte aligned. */
template <int D> struct tc_layout {
    static const int LH = D + 8;                          /* bf16 [64][D] tiles */
    static const int LP = TC_TILE + 8;                    /* bf16 [64][64] P, dS */
    static const int LS = (D > TC_TILE ? D : TC_TILE) + 4; /* fp32 [64][64 or D] */
    static const size_t TILE_H = (size_t)TC_TILE * LH * sizeof(bf16);
    static const size_t TILE_P = (size_t)TC_TILE * LP * sizeof(bf16);
    static const size_t TILE_S = (size_t)TC_TILE * LS * sizeof(float);
    /* four bf16 tiles, two fp32 score tiles, two bf16 P/dS tiles, 2 x 64 row stats */
    static const size_t BYTES = 4 * TILE_H + 2 * TILE_S + 2 * TILE_P + 2 * TC_TILE * sizeof(float);
};

/* dst[r][d] (bf16, stride ld) = src rows row0 + r (fp32, stride lds), zero for rows
 * >= T and columns >= HS; the whole block takes part. */
template <int D>
__device__ static void load_bf16(bf16 *dst, int ld, const float *src, size_t lds, int row0,
                                 int T, int HS)
{
    for (int e = threadIdx.x; e < TC_TILE * D; e += TC_THREADS) {
        int r = e / D, d = e % D, i = row0 + r;
        dst[r * ld + d] = __float2bfloat16((i < T && d < HS) ? src[(size_t)i * lds + d] : 0.0f);
    }
}

/* S[16][64] (fp32, stride LS) = A[16][D] B[64][D]^T: A's 16 rows and B's 64 rows are
 * bf16 tiles with stride LH. One warp. */
template <int D>
__device__ static void scores_16x64(float *S, const bf16 *A, const bf16 *Bm)
{
    const int LH = tc_layout<D>::LH, LS = tc_layout<D>::LS;
#pragma unroll
    for (int n = 0; n < TC_TILE / 16; n++) {
        frag_acc c;
        wmma::fill_fragment(c, 0.0f);
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
            frag_a a;
            frag_b_col b; /* B^T read column-major is B row-major */
            wmma::load_matrix_sync(a, A + kk * 16, LH);
            wmma::load_matrix_sync(b, Bm + n * 16 * LH + kk * 16, LH);
            wmma::mma_sync(c, a, b, c);
        }
        wmma::store_matrix_sync(S + n * 16, c, LS, wmma::mem_row_major);
    }
}

/* acc[D/16] += P[16][64] (bf16, stride LP) X[64][D] (bf16, stride LH). One warp. */
template <int D>
__device__ static void accumulate_16xD(frag_acc *acc, const bf16 *P, const bf16 *X)
{
    const int LH = tc_layout<D>::LH, LP = tc_layout<D>::LP;
#pragma unroll
    for (int kk = 0; kk < TC_TILE / 16; kk++) {
        frag_a a;
        wmma::load_matrix_sync(a, P + kk * 16, LP);
#pragma unroll
        for (int c = 0; c < D / 16; c++) {
            frag_b_row b;
            wmma::load_matrix_sync(b, X + kk * 16 * LH + c * 16, LH);
            wmma::mma_sync(acc[c], a, b, acc[c]);
        }
    }
}

/* The warp's 16 x D accumulators, times `scale`, to rows row0.. of dst (stride ldd,
 * rows < T, columns < HS), through the warp's fp32 scratch rows W (stride LS). */
template <int D>
__device__ static void store_rows(float *dst, size_t ldd, int row0, int T, int HS, float scale,
                                  frag_acc *acc, float *W)
{
    const int LS = tc_layout<D>::LS;
#pragma unroll
    for (int c = 0; c < D / 16; c++)
        wmma::store_matrix_sync(W + c * 16, acc[c], LS, wmma::mem_row_major);
    __syncwarp();
    int lane = threadIdx.x % 32;
    for (int e = lane; e < 16 * D; e += 32) {
        int r = e / D, d = e % D, i = row0 + r;
        if (i < T && d < HS)
            dst[(size_t)i * ldd + d] = scale * W[r * LS + d];
    }
}

/* Pointers into the dynamic shared memory of one block. */
template <int D> struct tc_smem {
    bf16 *h0, *h1, *h2, *h3; /* [64][LH] */
    float *s0, *s1;          /* [64][LS] */
    bf16 *p0, *p1;           /* [64][LP] */
    float *r0, *r1;          /* [64] */
    __device__ explicit tc_smem(unsigned char *sm)
    {
        typedef tc_layout<D> L;
        h0 = (bf16 *)sm;
        h1 = (bf16 *)(sm + L::TILE_H);
        h2 = (bf16 *)(sm + 2 * L::TILE_H);
        h3 = (bf16 *)(sm + 3 * L::TILE_H);
        s0 = (float *)(sm + 4 * L::TILE_H);
        s1 = (float *)(sm + 4 * L::TILE_H + L::TILE_S);
        p0 = (bf16 *)(sm + 4 * L::TILE_H + 2 * L::TILE_S);
        p1 = (bf16 *)(sm + 4 * L::TILE_H + 2 * L::TILE_S + L::TILE_P);
        r0 = (float *)(sm + 4 * L::TILE_H + 2 * L::TILE_S + 2 * L::TILE_P);
        r1 = r0 + TC_TILE;
    }
};

template <int D>
__global__ static void __launch_bounds__(TC_THREADS)
    tc_forward_kernel(float *out, float *lse, const float *qkv, int T, int C, int NH, int HS,
                      float scale)
{
    typedef tc_layout<D> L;
    extern __shared__ __align__(128) unsigned char tc_sm[];
    tc_smem<D> s(tc_sm);
    bf16 *Qs = s.h0, *Ks = s.h1, *Vs = s.h2;
    int ntile = (T + TC_TILE - 1) / TC_TILE;
    int bh = blockIdx.x / ntile, tile = ntile - 1 - (int)(blockIdx.x % ntile);
    int b = bh / NH, h = bh % NH, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    size_t ld = 3 * (size_t)C;
    const float *q = qkv + (size_t)b * T * ld + (size_t)h * HS, *k = q + C, *v = q + 2 * C;
    int i0 = tile * TC_TILE, last = min(i0 + TC_TILE, T) - 1;
    float *S = s.s0 + warp * 16 * L::LS;
    bf16 *P = s.p0 + warp * 16 * L::LP;
    load_bf16<D>(Qs, L::LH, q, ld, i0, T, HS);
    /* lane pair (2r, 2r + 1) owns row r of the warp's 16, 32 columns each */
    int r = lane / 2, half = lane % 2, i = min(i0 + warp * 16 + r, T - 1);
    float m = -INFINITY, l = 0.0f;
    for (int j0 = 0; j0 <= last; j0 += TC_TILE) { /* pass 1: row max and sum */
        __syncthreads();
        load_bf16<D>(Ks, L::LH, k, ld, j0, T, HS);
        __syncthreads();
        scores_16x64<D>(S, Qs + warp * 16 * L::LH, Ks);
        __syncwarp();
        float tmax = -INFINITY;
        for (int c = half * 32; c < half * 32 + 32; c++)
            if (j0 + c <= i)
                tmax = fmaxf(tmax, scale * S[r * L::LS + c]);
        tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
        float mnew = fmaxf(m, tmax), sum = 0.0f;
        for (int c = half * 32; c < half * 32 + 32; c++)
            if (j0 + c <= i)
                sum += tr_expf(scale * S[r * L::LS + c] - mnew);
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        l = (m == -INFINITY ? 0.0f : l * tr_expf(m - mnew)) + sum;
        m = mnew;
        __syncwarp();
    }
    float row_lse = m + logf(l);
    frag_acc acc[D / 16];
#pragma unroll
    for (int c = 0; c < D / 16; c++)
        wmma::fill_fragment(acc[c], 0.0f);
    for (int j0 = 0; j0 <= last; j0 += TC_TILE) { /* pass 2: O = P V */
        __syncthreads();
        load_bf16<D>(Ks, L::LH, k, ld, j0, T, HS);
        load_bf16<D>(Vs, L::LH, v, ld, j0, T, HS);
        __syncthreads();
        scores_16x64<D>(S, Qs + warp * 16 * L::LH, Ks);
        __syncwarp();
        for (int c = half * 32; c < half * 32 + 32; c++)
            P[r * L::LP + c] = __float2bfloat16(
                j0 + c <= i ? tr_expf(scale * S[r * L::LS + c] - row_lse) : 0.0f);
        __syncwarp();
        accumulate_16xD<D>(acc, P, Vs);
    }
    store_rows<D>(out + (size_t)b * T * C + (size_t)h * HS, C, i0 + warp * 16, T, HS, 1.0f, acc,
                  S);
    int row = i0 + warp * 16 + r;
    if (half == 0 && row < T)
        lse[(size_t)bh * T + row] = row_lse;
}

/* dK, dV of 64 keys (16 per warp), over the query tiles at and after them. */
template <int D>
__global__ static void __launch_bounds__(TC_THREADS)
    tc_dkv_kernel(float *dqkv, const float *dout, const float *qkv, const float *lse,
                  const float *dvec, int T, int C, int NH, int HS, float scale)
{
    typedef tc_layout<D> L;
    extern __shared__ __align__(128) unsigned char tc_sm[];
    tc_smem<D> s(tc_sm);
    bf16 *Ks = s.h0, *Vs = s.h1, *Qt = s.h2, *dOt = s.h3;
    float *Lt = s.r0, *Dt = s.r1;
    int ntile = (T + TC_TILE - 1) / TC_TILE;
    int bh = blockIdx.x / ntile, tile = (int)(blockIdx.x % ntile);
    int b = bh / NH, h = bh % NH, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    size_t ld = 3 * (size_t)C;
    size_t qoff = (size_t)b * T * ld + (size_t)h * HS;
    const float *q = qkv + qoff, *k = q + C, *v = q + 2 * C;
    const float *dO = dout + (size_t)b * T * C + (size_t)h * HS;
    int j0 = tile * TC_TILE;
    float *S = s.s0 + warp * 16 * L::LS, *G = s.s1 + warp * 16 * L::LS;
    bf16 *P = s.p0 + warp * 16 * L::LP, *dS = s.p1 + warp * 16 * L::LP;
    load_bf16<D>(Ks, L::LH, k, ld, j0, T, HS);
    load_bf16<D>(Vs, L::LH, v, ld, j0, T, HS);
    frag_acc dk[D / 16], dv[D / 16];
#pragma unroll
    for (int c = 0; c < D / 16; c++) {
        wmma::fill_fragment(dk[c], 0.0f);
        wmma::fill_fragment(dv[c], 0.0f);
    }
    int r = lane / 2, half = lane % 2, j = j0 + warp * 16 + r; /* this lane pair's key */
    for (int i0 = j0; i0 < T; i0 += TC_TILE) {
        __syncthreads();
        load_bf16<D>(Qt, L::LH, q, ld, i0, T, HS);
        load_bf16<D>(dOt, L::LH, dO, C, i0, T, HS);
        for (int e = threadIdx.x; e < TC_TILE; e += TC_THREADS) {
            int i = i0 + e;
            Lt[e] = i < T ? lse[(size_t)bh * T + i] : 0.0f;
            Dt[e] = i < T ? dvec[(size_t)bh * T + i] : 0.0f;
        }
        __syncthreads();
        scores_16x64<D>(S, Ks + warp * 16 * L::LH, Qt);  /* S^T: keys x queries */
        scores_16x64<D>(G, Vs + warp * 16 * L::LH, dOt); /* dP^T = V dO^T */
        __syncwarp();
        for (int c = half * 32; c < half * 32 + 32; c++) {
            int i = i0 + c;
            float p = (i < T && j <= i) ? tr_expf(scale * S[r * L::LS + c] - Lt[c]) : 0.0f;
            P[r * L::LP + c] = __float2bfloat16(p);
            dS[r * L::LP + c] = __float2bfloat16(p * (G[r * L::LS + c] - Dt[c]));
        }
        __syncwarp();
        accumulate_16xD<D>(dv, P, dOt); /* dV += P^T dO */
        accumulate_16xD<D>(dk, dS, Qt); /* dK += dS^T Q (scale at the end) */
    }
    float *dk_rows = dqkv + qoff + C, *dv_rows = dk_rows + C;
    store_rows<D>(dk_rows, ld, j0 + warp * 16, T, HS, scale, dk, S);
    __syncwarp();
    store_rows<D>(dv_rows, ld, j0 + warp * 16, T, HS, 1.0f, dv, S);
}

/* dQ of 64 queries (16 per warp), over the key tiles up to them. */
template <int D>
__global__ static void __launch_bounds__(TC_THREADS)
    tc_dq_kernel(float *dqkv, const float *dout, const float *qkv, const float *lse,
                 const float *dvec, int T, int C, int NH, int HS, float scale)
{
    typedef tc_layout<D> L;
    extern __shared__ __align__(128) unsigned char tc_sm[];
    tc_smem<D> s(tc_sm);
    bf16 *Qs = s.h0, *dOs = s.h1, *Kt = s.h2, *Vt = s.h3;
    int ntile = (T + TC_TILE - 1) / TC_TILE;
    int bh = blockIdx.x / ntile, tile = ntile - 1 - (int)(blockIdx.x % ntile);
    int b = bh / NH, h = bh % NH, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    size_t ld = 3 * (size_t)C;
    size_t qoff = (size_t)b * T * ld + (size_t)h * HS;
    const float *q = qkv + qoff, *k = q + C, *v = q + 2 * C;
    const float *dO = dout + (size_t)b * T * C + (size_t)h * HS;
    int i0 = tile * TC_TILE, last = min(i0 + TC_TILE, T) - 1;
    float *S = s.s0 + warp * 16 * L::LS, *G = s.s1 + warp * 16 * L::LS;
    bf16 *dS = s.p1 + warp * 16 * L::LP;
    load_bf16<D>(Qs, L::LH, q, ld, i0, T, HS);
    load_bf16<D>(dOs, L::LH, dO, C, i0, T, HS);
    int r = lane / 2, half = lane % 2, i = i0 + warp * 16 + r;
    int ic = min(i, T - 1);
    float li = lse[(size_t)bh * T + ic], di = dvec[(size_t)bh * T + ic];
    frag_acc dq[D / 16];
#pragma unroll
    for (int c = 0; c < D / 16; c++)
        wmma::fill_fragment(dq[c], 0.0f);
    for (int j0 = 0; j0 <= last; j0 += TC_TILE) {
        __syncthreads();
        load_bf16<D>(Kt, L::LH, k, ld, j0, T, HS);
        load_bf16<D>(Vt, L::LH, v, ld, j0, T, HS);
        __syncthreads();
        scores_16x64<D>(S, Qs + warp * 16 * L::LH, Kt);
        scores_16x64<D>(G, dOs + warp * 16 * L::LH, Vt); /* dP = dO V^T */
        __syncwarp();
        for (int c = half * 32; c < half * 32 + 32; c++) {
            int jj = j0 + c;
            float p = (i < T && jj <= i) ? tr_expf(scale * S[r * L::LS + c] - li) : 0.0f;
            dS[r * L::LP + c] = __float2bfloat16(p * (G[r * L::LS + c] - di));
        }
        __syncwarp();
        accumulate_16xD<D>(dq, dS, Kt); /* dQ += dS K (scale at the end) */
    }
    store_rows<D>(dqkv + qoff, ld, i0 + warp * 16, T, HS, scale, dq, S);
}

template <typename K> static void allow_smem(K kernel, size_t bytes, int *done)
{
    if (*done)
        return;
    TR_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)bytes));
    *done = 1;
}

static unsigned tc_grid(int B, int NH, int T)
{
    size_t n = (size_t)B * NH * ((T + TC_TILE - 1) / TC_TILE);
    if (n > 0x7fffffffu)
        tr_fatal(TR_EXIT_SOFTWARE, "attention: %zu blocks exceed the CUDA grid", n);
    return (unsigned)n;
}

template <int D>
static void tc_forward_d(float *out, float *lse, const float *qkv, int B, int T, int C, int NH,
                         int HS, float scale)
{
    static int opted;
    allow_smem(tc_forward_kernel<D>, tc_layout<D>::BYTES, &opted);
    tc_forward_kernel<D><<<tc_grid(B, NH, T), TC_THREADS, tc_layout<D>::BYTES,
                           tr_cuda_stream()>>>(out, lse, qkv, T, C, NH, HS, scale);
    TR_CUDA_LAUNCHED();
}

template <int D>
static void tc_backward_d(float *dqkv, const float *dout, const float *qkv, const float *lse,
                          const float *dvec, int B, int T, int C, int NH, int HS, float scale)
{
    static int opted_kv, opted_q;
    size_t bytes = tc_layout<D>::BYTES;
    allow_smem(tc_dkv_kernel<D>, bytes, &opted_kv);
    allow_smem(tc_dq_kernel<D>, bytes, &opted_q);
    unsigned grid = tc_grid(B, NH, T);
    tc_dkv_kernel<D><<<grid, TC_THREADS, bytes, tr_cuda_stream()>>>(dqkv, dout, qkv, lse, dvec,
                                                                  T, C, NH, HS, scale);
    TR_CUDA_LAUNCHED();
    tc_dq_kernel<D><<<grid, TC_THREADS, bytes, tr_cuda_stream()>>>(dqkv, dout, qkv, lse, dvec, T,
                                                                 C, NH, HS, scale);
    TR_CUDA_LAUNCHED();
}

int tr_cuda_attention_tc_fits(int HS) { return HS >= 1 && HS <= 128; }

void tr_cuda_attention_tc_forward(float *out, float *lse, const float *qkv, int B, int T, int C,
                                  int NH, int HS, float scale)
{
    if (HS <= 32)
        tc_forward_d<32>(out, lse, qkv, B, T, C, NH, HS, scale);
    else if (HS <= 64)
        tc_forward_d<64>(out, lse, qkv, B, T, C, NH, HS, scale);
    else
        tc_forward_d<128>(out, lse, qkv, B, T, C, NH, HS, scale);
}

void tr_cuda_attention_tc_backward(float *dqkv, const float *dout, const float *qkv,
                                   const float *lse, const float *dvec, int B, int T, int C,
                                   int NH, int HS, float scale)
{
    if (HS <= 32)
        tc_backward_d<32>(dqkv, dout, qkv, lse, dvec, B, T, C, NH, HS, scale);
    else if (HS <= 64)
        tc_backward_d<64>(dqkv, dout, qkv, lse, dvec, B, T, C, NH, HS, scale);
    else
        tc_backward_d<128>(dqkv, dout, qkv, lse, dvec, B, T, C, NH, HS, scale);
}
