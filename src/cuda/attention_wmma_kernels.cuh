/* attention_wmma_kernels.cuh: the fused causal attention of bf16- and fp16-mixed runs
 * on tensor cores through WMMA (16 x 16 x 16, 16-bit in, fp32 accumulation): the same
 * three kernels as the fp32 ones of cuda_attention.cu (forward, dK/dV, dQ) and the same
 * saved state (each row's log-sum-exp). cuda_attention_tc.cu launches them.
 *
 * Why only the 16-bit mixed formats: there qkv is stored in the format F (bf16 or fp16,
 * a template argument: its values are loaded as they are) and so is dO (the kernel
 * table's contract), so their products on the tensor cores are exact, as on the CPU.
 * What is rounded here and not on the CPU is the probabilities P (of O = P V and
 * dV = P^T dO) and the score gradient dS (of dQ and dK): one rounding to F each, as the
 * mma.sync kernels round them (attention_mma_kernels.cuh). fp32 runs take the fp32
 * kernels of cuda_attention.cu.
 *
 * Shape of the work: a block of 4 warps owns 64 rows (queries in forward and dQ,
 * keys in dK/dV), each warp 16 of them, and walks the other side in tiles of 64. A
 * warp computes its 16 x 64 block of scores (or score gradients) with WMMA into
 * shared memory, applies the softmax arithmetic there on the CUDA cores (a lane pair
 * per row), writes the result back in F over the scores it came from, and
 * multiplies it into accumulators that stay in registers.
 *
 * Forward is one pass with an online softmax whose rescaling is lazy: a row's
 * probabilities are taken against a running max that moves only when a tile's max
 * exceeds it by more than LAZY (so p <= e^LAZY, harmless in fp32 sums and in F),
 * and only then are the warp's accumulators rescaled, through shared memory, since
 * WMMA does not say which row an accumulator element belongs to. After the first
 * tiles of a row that is rare.
 *
 * Device code only, written against what the includer defines first: nvcuda::wmma
 * (fragment, fill_fragment, load_matrix_sync, store_matrix_sync, mma_sync), the bf16
 * and fp16 types and __floats2bfloat162_rn, __floats2half2_rn, uint2 and make_uint2,
 * and CUDA's threadIdx, blockIdx, __syncthreads, __syncwarp, __shfl_xor_sync and
 * __any_sync. On the GPU they are CUDA's own (<mma.h>, <cuda_bf16.h>, <cuda_fp16.h>);
 * validation/unit/warp_emulator.h runs the same source on the CPU, one coroutine per
 * CUDA thread, with WMMA's collectives on a fragment layout of its own (the kernels
 * never index a fragment), so that the CPU test suite proves their tiling, masking,
 * lazy rescale and 16-bit stores against the CPU attention (test_attention_wmma_emu).
 *
 * Dropout of the probabilities (drop.threshold nonzero; transformer_kernels.h), as the
 * fp32 kernels draw it (attention_flash_kernels.cuh): a lane pair holds its row's
 * elements with their indices, so the mask's factor f multiplies P after l has summed
 * the row (forward), and backward takes P f for dV and dS = P (f dP - Dvec). Rows r and
 * r + 8 (lanes l and l + 16) by columns c and c + 8 (PAIR_COL's k and k + 2) are one
 * Philox call's group (dropout_math.h), in forward and dQ (keys) as in dK/dV
 * (queries): each lane draws half of its groups and passes the other lane its words
 * by a shuffle, one call per four of its scores (tc_dropout_mul). */
#ifndef TR_ATTENTION_WMMA_KERNELS_CUH
#define TR_ATTENTION_WMMA_KERNELS_CUH

#include "backend/dropout_math.h" /* tr_dropout_att_draw, tr_dropout_att_keep */
#include "backend/lowp_math.h"   /* tr_stored_store */
#include "backend/scalar_math.h" /* tr_expf */

#include <math.h>
#include <stddef.h>
#include <stdint.h>

namespace wmma = nvcuda::wmma;

/* The block's dynamic shared memory: WMMA's fragment pointers must be 32-byte aligned
 * (the emulator's is 128-byte aligned as well) */
#ifdef TR_WARP_EMULATOR_H
#define TC_DYNAMIC_SMEM(name) TR_DYNAMIC_SMEM(name)
#else
#define TC_DYNAMIC_SMEM(name) extern __shared__ __align__(128) unsigned char name[]
#endif

#define TC_WARPS 4
#define TC_THREADS (TC_WARPS * 32)
#define TC_TILE 64     /* rows a block owns, and the other side's tile */
#define LAZY 8.0f      /* forward's running max moves when a tile's exceeds it by this */

/* The 16-bit type of a run's format F (TR_PREC_BF16 or TR_PREC_FP16: qkv, dO, out and
 * dqkv are stored in it, and P and dS are rounded to it), its pair, and the rounding of
 * two floats to a pair (to nearest even, as lowp_math.h rounds). */
template <int F> struct tc_types;
template <> struct tc_types<TR_PREC_BF16> {
    typedef __nv_bfloat16 E;
    typedef __nv_bfloat162 E2;
    __device__ static inline E2 pack(float lo, float hi) { return __floats2bfloat162_rn(lo, hi); }
};
template <> struct tc_types<TR_PREC_FP16> {
    typedef __half E;
    typedef __half2 E2;
    __device__ static inline E2 pack(float lo, float hi) { return __floats2half2_rn(lo, hi); }
};
template <int F>
using frag_a = wmma::fragment<wmma::matrix_a, 16, 16, 16, typename tc_types<F>::E, wmma::row_major>;
template <int F>
using frag_b_row =
    wmma::fragment<wmma::matrix_b, 16, 16, 16, typename tc_types<F>::E, wmma::row_major>;
template <int F>
using frag_b_col =
    wmma::fragment<wmma::matrix_b, 16, 16, 16, typename tc_types<F>::E, wmma::col_major>;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> frag_acc;

/* Shared-memory layout for a padded head size D (a multiple of 16, up to 128). Row
 * strides are padded by 16 bytes against bank conflicts; every fragment pointer
 * stays 32-byte aligned. A 16-bit result (P, dS) is written over the fp32 scores it
 * came from: row r of it starts where row r of the scores does, stride LP. */
template <int D> struct tc_layout {
    static const int LH = D + 8;                           /* 16-bit [64][D] tiles */
    static const int LS = (D > TC_TILE ? D : TC_TILE) + 4; /* fp32 [64][64 or D] */
    static const int LP = 2 * LS;                          /* 16-bit over fp32 rows */
    static const size_t TILE_H = (size_t)TC_TILE * LH * sizeof(uint16_t);
    static const size_t TILE_S = (size_t)TC_TILE * LS * sizeof(float);
    /* forward: Q, K, V and one score tile; backward: four 16-bit tiles, two score
     * tiles and two rows of 64 statistics */
    static const size_t FWD_BYTES = 3 * TILE_H + TILE_S;
    static const size_t BWD_BYTES = 4 * TILE_H + 2 * TILE_S + 2 * TC_TILE * sizeof(float);
};

/* dst[r][d] (16 bits, stride ld) = rows row0 + r (stride lds) of src, a tensor stored in
 * 16 bits (lowp_math.h: qkv, dO): the values' bits as they are, zero for rows >= T and
 * columns >= HS, four (8 bytes) a thread where vec. The whole block takes part. */
template <int D>
__device__ static void load_tile(void *dst, int ld, const uint16_t *src, size_t lds, int row0,
                                 int T, int HS, bool vec)
{
    uint16_t *o = reinterpret_cast<uint16_t *>(dst);
    if (vec) {
        for (int e = threadIdx.x; e < TC_TILE * D / 4; e += TC_THREADS) {
            int r = e / (D / 4), d = e % (D / 4) * 4, i = row0 + r;
            uint2 x = make_uint2(0u, 0u);
            if (i < T && d < HS)
                x = *reinterpret_cast<const uint2 *>(src + (size_t)i * lds + d);
            *reinterpret_cast<uint2 *>(o + r * ld + d) = x;
        }
        return;
    }
    for (int e = threadIdx.x; e < TC_TILE * D; e += TC_THREADS) {
        int r = e / D, d = e % D, i = row0 + r;
        o[r * ld + d] = (i < T && d < HS) ? src[(size_t)i * lds + d] : (uint16_t)0;
    }
}

/* S[16][64] (fp32, stride LS) = A[16][D] B[64][D]^T: A's 16 rows and B's 64 rows are
 * 16-bit tiles of F with stride LH. One warp. */
template <int D, int F>
__device__ static void scores_16x64(float *S, const typename tc_types<F>::E *A,
                                    const typename tc_types<F>::E *Bm)
{
    const int LH = tc_layout<D>::LH, LS = tc_layout<D>::LS;
#pragma unroll
    for (int n = 0; n < TC_TILE / 16; n++) {
        frag_acc c;
        wmma::fill_fragment(c, 0.0f);
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
            frag_a<F> a;
            frag_b_col<F> b; /* B^T read column-major is B row-major */
            wmma::load_matrix_sync(a, A + kk * 16, LH);
            wmma::load_matrix_sync(b, Bm + n * 16 * LH + kk * 16, LH);
            wmma::mma_sync(c, a, b, c);
        }
        wmma::store_matrix_sync(S + n * 16, c, LS, wmma::mem_row_major);
    }
}

/* acc[D/16] += P[16][64] (F, stride LP) X[64][D] (F, stride LH). One warp. */
template <int D, int F>
__device__ static void accumulate_16xD(frag_acc *acc, const typename tc_types<F>::E *P,
                                       const typename tc_types<F>::E *X)
{
    const int LH = tc_layout<D>::LH, LP = tc_layout<D>::LP;
#pragma unroll
    for (int kk = 0; kk < TC_TILE / 16; kk++) {
        frag_a<F> a;
        wmma::load_matrix_sync(a, P + kk * 16, LP);
#pragma unroll
        for (int c = 0; c < D / 16; c++) {
            frag_b_row<F> b;
            wmma::load_matrix_sync(b, X + kk * 16 * LH + c * 16, LH);
            wmma::mma_sync(acc[c], a, b, acc[c]);
        }
    }
}

/* The warp's 16 x D accumulators, row r times rscale (the calling lane pair's row) and
 * all times `scale`, to rows row0.. of the matrix at element o0 of dst (stride ldd;
 * rows < T, columns < HS), a tensor stored in `format` (lowp_math.h: dqkv and forward's
 * out; rounded as stored), through the warp's fp32 scratch rows W (stride LS). */
template <int D>
__device__ static void store_rows(void *dst, size_t o0, size_t ldd, int row0, int T, int HS,
                                  float scale, frag_acc *acc, float *W, float rscale,
                                  int format)
{
    const int LS = tc_layout<D>::LS;
    __syncwarp();
#pragma unroll
    for (int c = 0; c < D / 16; c++)
        wmma::store_matrix_sync(W + c * 16, acc[c], LS, wmma::mem_row_major);
    __syncwarp();
    int lane = threadIdx.x % 32, r = lane / 2, i = row0 + r;
    float f = scale * rscale;
    if (i < T)
        for (int d = lane % 2; d < HS; d += 2)
            tr_stored_store(dst, o0 + (size_t)i * ldd + d, f * W[r * LS + d], format);
    __syncwarp();
}

/* The lane pair (2r, 2r + 1) owns row r of a warp's 16 x 64 block; lane 2r + h takes
 * the column pairs 4k + 2h, 4k + 2h + 1 (k < 16), which spreads a warp's reads and
 * writes of a row over the shared-memory banks. */
#define PAIR_COL(k, half) (4 * (k) + 2 * (half))

/* x[2 k + e] *= the mask's factor (dropout_math.h) of a lane's score of a warp's 16 x 64
 * tile, its row r and column c0 + PAIR_COL(k, half) + e: P's (i, j) are (r, column),
 * or (column, r) where TRANS (P^T, in dK/dV); r is the row's own index, even past T
 * (lane ^ 16 must hold row r ^ 8). A group of one Philox call is rows r & ~8 and
 * r | 8 (lanes l and l ^ 16) by columns c and c + 8 (k and k + 2): the lower lane
 * draws the group at k, the upper the group at k + 8 (32 columns on), and each hands
 * the other the two words of the other's row, so a lane makes one call per four of
 * its scores (the lower and upper lanes run the same instructions, on other groups).
 * A group past T or above the diagonal is not drawn (factors 1: its scores are dead).
 * Multiplied in place: forward's scores need no second array of 32 registers. */
template <bool TRANS>
__device__ static inline void tc_dropout_mul(float x[32], const tr_dropout &drop, int b, int h,
                                             int r, int c0, int half, int T, int lane)
{
    bool lower = lane < 16;
    int ro = r ^ 8, rb = r & ~8; /* the other lane's row; the group's first */
#pragma unroll
    for (int kk = 0; kk < 8; kk++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            if (kk & 2) /* columns + 8: group kk - 2's */
                continue;
            int c = c0 + PAIR_COL(lower ? kk : kk + 8, half) + e; /* this lane's group */
            int i = TRANS ? c : rb, j = TRANS ? rb : c;
            float own0 = 1.0f, own8 = 1.0f, other0 = 1.0f, other8 = 1.0f;
            if (i < T && j <= i + 8) {
                uint32_t w[4];
                tr_dropout_att_draw(w, &drop, b, h, i, j, T);
                own0 = TRANS ? tr_dropout_att_keep(&drop, w, c, r)
                             : tr_dropout_att_keep(&drop, w, r, c);
                own8 = TRANS ? tr_dropout_att_keep(&drop, w, c + 8, r)
                             : tr_dropout_att_keep(&drop, w, r, c + 8);
                other0 = TRANS ? tr_dropout_att_keep(&drop, w, c, ro)
                               : tr_dropout_att_keep(&drop, w, ro, c);
                other8 = TRANS ? tr_dropout_att_keep(&drop, w, c + 8, ro)
                               : tr_dropout_att_keep(&drop, w, ro, c + 8);
            }
            float in0 = __shfl_xor_sync(0xffffffffu, other0, 16);
            float in8 = __shfl_xor_sync(0xffffffffu, other8, 16);
            x[2 * kk + e] *= lower ? own0 : in0; /* group kk, this row */
            x[2 * kk + 4 + e] *= lower ? own8 : in8;
            x[2 * kk + 16 + e] *= lower ? in0 : own0; /* group kk + 8 */
            x[2 * kk + 20 + e] *= lower ? in8 : own8;
        }
}

/* f[32] = 1, times the mask's factors where drop is on (tc_dropout_mul) */
template <bool TRANS>
__device__ static inline void tc_dropout_factors(float f[32], const tr_dropout &drop, int b,
                                                 int h, int r, int c0, int half, int T, int lane)
{
#pragma unroll
    for (int e = 0; e < 32; e++)
        f[e] = 1.0f;
    if (drop.threshold)
        tc_dropout_mul<TRANS>(f, drop, b, h, r, c0, half, T, lane);
}

template <int D, int F>
__global__ static void __launch_bounds__(TC_THREADS)
    tc_forward_kernel(void *out, float *lse, const uint16_t *qkv, int T, int C, int NH, int HS,
                      float scale, int vec, tr_dropout drop)
{
    typedef tc_layout<D> L;
    typedef typename tc_types<F>::E E;
    TC_DYNAMIC_SMEM(tc_sm);
    E *Qs = (E *)tc_sm, *Ks = (E *)(tc_sm + L::TILE_H);
    E *Vs = (E *)(tc_sm + 2 * L::TILE_H);
    int ntile = (T + TC_TILE - 1) / TC_TILE;
    int bh = blockIdx.x / ntile, tile = ntile - 1 - (int)(blockIdx.x % ntile);
    int b = bh / NH, h = bh % NH, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    size_t ld = 3 * (size_t)C;
    const uint16_t *q = qkv + (size_t)b * T * ld + (size_t)h * HS, *k = q + C, *v = q + 2 * C;
    int i0 = tile * TC_TILE, last = min(i0 + TC_TILE, T) - 1;
    float *S = (float *)(tc_sm + 3 * L::TILE_H) + warp * 16 * L::LS;
    E *P = (E *)S;
    load_tile<D>(Qs, L::LH, q, ld, i0, T, HS, vec);
    int r = lane / 2, half = lane % 2, i = min(i0 + warp * 16 + r, T - 1);
    float m = -INFINITY, l = 0.0f; /* the row's running max and sum */
    frag_acc acc[D / 16];
#pragma unroll
    for (int c = 0; c < D / 16; c++)
        wmma::fill_fragment(acc[c], 0.0f);
    for (int j0 = 0; j0 <= last; j0 += TC_TILE) {
        __syncthreads(); /* the last tile's K and V are read (and Q is written) */
        load_tile<D>(Ks, L::LH, k, ld, j0, T, HS, vec);
        load_tile<D>(Vs, L::LH, v, ld, j0, T, HS, vec);
        __syncthreads();
        scores_16x64<D, F>(S, Qs + warp * 16 * L::LH, Ks);
        __syncwarp();
        float sv[32], tmax = -INFINITY;
#pragma unroll
        for (int kk = 0; kk < 16; kk++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int c = PAIR_COL(kk, half) + e;
                float x = j0 + c <= i ? scale * S[r * L::LS + c] : -INFINITY;
                sv[2 * kk + e] = x;
                tmax = fmaxf(tmax, x);
            }
        tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
        bool grow = tmax > m + LAZY; /* false for a row the whole tile is masked for */
        if (__any_sync(0xffffffffu, grow && m != -INFINITY)) {
            /* rescale the warp's accumulators: row r by exp(m - tmax) where it grows */
            const int LS = L::LS;
            __syncwarp(); /* every lane has read its scores: S is free */
#pragma unroll
            for (int c = 0; c < D / 16; c++)
                wmma::store_matrix_sync(S + c * 16, acc[c], LS, wmma::mem_row_major);
            __syncwarp();
            float corr = grow && m != -INFINITY ? tr_expf(m - tmax) : 1.0f;
            for (int d = half; d < D; d += 2)
                S[r * LS + d] *= corr;
            l *= corr;
            __syncwarp();
#pragma unroll
            for (int c = 0; c < D / 16; c++)
                wmma::load_matrix_sync(acc[c], S + c * 16, LS, wmma::mem_row_major);
        }
        if (grow)
            m = tmax;
        float psum = 0.0f;
#pragma unroll
        for (int e = 0; e < 32; e++) {
            sv[e] = sv[e] == -INFINITY ? 0.0f : tr_expf(sv[e] - m);
            psum += sv[e];
        }
        l += psum + __shfl_xor_sync(0xffffffffu, psum, 1);
        if (drop.threshold) /* O sums the dropped P; l the whole row */
            tc_dropout_mul<false>(sv, drop, b, h, i0 + warp * 16 + r, j0, half, T, lane);
        __syncwarp(); /* all scores read (and any rescale done) before P overwrites them */
#pragma unroll
        for (int kk = 0; kk < 16; kk++)
            *reinterpret_cast<typename tc_types<F>::E2 *>(P + r * L::LP + PAIR_COL(kk, half)) =
                tc_types<F>::pack(sv[2 * kk], sv[2 * kk + 1]);
        __syncwarp();
        accumulate_16xD<D, F>(acc, P, Vs);
    }
    store_rows<D>(out, (size_t)b * T * C + (size_t)h * HS, C, i0 + warp * 16, T, HS, 1.0f, acc, S,
                  1.0f / l, F);
    int row = i0 + warp * 16 + r;
    if (half == 0 && row < T)
        lse[(size_t)bh * T + row] = m + logf(l);
}

/* dK, dV of 64 keys (16 per warp), over the query tiles at and after them. */
template <int D, int F>
__global__ static void __launch_bounds__(TC_THREADS)
    tc_dkv_kernel(void *dqkv, const uint16_t *dout, const uint16_t *qkv, const float *lse,
                  const float *dvec, int T, int C, int NH, int HS, float scale, int vec,
                  tr_dropout drop)
{
    typedef tc_layout<D> L;
    typedef typename tc_types<F>::E E;
    TC_DYNAMIC_SMEM(tc_sm);
    E *Ks = (E *)tc_sm, *Vs = (E *)(tc_sm + L::TILE_H);
    E *Qt = (E *)(tc_sm + 2 * L::TILE_H), *dOt = (E *)(tc_sm + 3 * L::TILE_H);
    float *S = (float *)(tc_sm + 4 * L::TILE_H), *G = S + TC_TILE * L::LS;
    float *Lt = G + TC_TILE * L::LS, *Dt = Lt + TC_TILE;
    int ntile = (T + TC_TILE - 1) / TC_TILE;
    int bh = blockIdx.x / ntile, tile = (int)(blockIdx.x % ntile); /* longest first */
    int b = bh / NH, h = bh % NH, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    size_t ld = 3 * (size_t)C;
    size_t qoff = (size_t)b * T * ld + (size_t)h * HS;
    const uint16_t *q = qkv + qoff, *k = q + C, *v = q + 2 * C;
    const uint16_t *dO = dout + (size_t)b * T * C + (size_t)h * HS; /* stored in F */
    int j0 = tile * TC_TILE;
    S += warp * 16 * L::LS;
    G += warp * 16 * L::LS;
    E *P = (E *)S, *dS = (E *)G;
    load_tile<D>(Ks, L::LH, k, ld, j0, T, HS, vec);
    load_tile<D>(Vs, L::LH, v, ld, j0, T, HS, vec);
    frag_acc dk[D / 16], dv[D / 16];
#pragma unroll
    for (int c = 0; c < D / 16; c++) {
        wmma::fill_fragment(dk[c], 0.0f);
        wmma::fill_fragment(dv[c], 0.0f);
    }
    int r = lane / 2, half = lane % 2, j = j0 + warp * 16 + r; /* this lane pair's key */
    for (int i0 = j0; i0 < T; i0 += TC_TILE) {
        __syncthreads();
        load_tile<D>(Qt, L::LH, q, ld, i0, T, HS, vec);
        load_tile<D>(dOt, L::LH, dO, C, i0, T, HS, vec);
        for (int e = threadIdx.x; e < TC_TILE; e += TC_THREADS) {
            int i = i0 + e;
            Lt[e] = i < T ? lse[(size_t)bh * T + i] : 0.0f;
            Dt[e] = i < T ? dvec[(size_t)bh * T + i] : 0.0f;
        }
        __syncthreads();
        scores_16x64<D, F>(S, Ks + warp * 16 * L::LH, Qt);  /* S^T: keys x queries */
        scores_16x64<D, F>(G, Vs + warp * 16 * L::LH, dOt); /* dP^T = V dO^T */
        __syncwarp();
        typename tc_types<F>::E2 pp[16], dd[16];
        float f[32];
        tc_dropout_factors<true>(f, drop, b, h, j, i0, half, T, lane);
#pragma unroll
        for (int kk = 0; kk < 16; kk++) {
            float p2[2], d2[2];
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int c = PAIR_COL(kk, half) + e, i = i0 + c;
                bool live = i < T && j <= i;
                float p = live ? tr_expf(scale * S[r * L::LS + c] - Lt[c]) : 0.0f;
                float fe = drop.threshold && live ? f[2 * kk + e] : 1.0f;
                p2[e] = p * fe;
                d2[e] = p * (fe * G[r * L::LS + c] - Dt[c]);
            }
            pp[kk] = tc_types<F>::pack(p2[0], p2[1]);
            dd[kk] = tc_types<F>::pack(d2[0], d2[1]);
        }
        __syncwarp(); /* all scores read before P and dS overwrite them */
#pragma unroll
        for (int kk = 0; kk < 16; kk++) {
            *reinterpret_cast<typename tc_types<F>::E2 *>(P + r * L::LP + PAIR_COL(kk, half)) =
                pp[kk];
            *reinterpret_cast<typename tc_types<F>::E2 *>(dS + r * L::LP + PAIR_COL(kk, half)) =
                dd[kk];
        }
        __syncwarp();
        accumulate_16xD<D, F>(dv, P, dOt); /* dV += P^T dO */
        accumulate_16xD<D, F>(dk, dS, Qt); /* dK += dS^T Q (scale at the end) */
    }
    store_rows<D>(dqkv, qoff + C, ld, j0 + warp * 16, T, HS, scale, dk, S, 1.0f, F);
    store_rows<D>(dqkv, qoff + 2 * (size_t)C, ld, j0 + warp * 16, T, HS, 1.0f, dv, S, 1.0f, F);
}

/* dQ of 64 queries (16 per warp), over the key tiles up to them. */
template <int D, int F>
__global__ static void __launch_bounds__(TC_THREADS)
    tc_dq_kernel(void *dqkv, const uint16_t *dout, const uint16_t *qkv, const float *lse,
                 const float *dvec, int T, int C, int NH, int HS, float scale, int vec,
                 tr_dropout drop)
{
    typedef tc_layout<D> L;
    typedef typename tc_types<F>::E E;
    TC_DYNAMIC_SMEM(tc_sm);
    E *Qs = (E *)tc_sm, *dOs = (E *)(tc_sm + L::TILE_H);
    E *Kt = (E *)(tc_sm + 2 * L::TILE_H), *Vt = (E *)(tc_sm + 3 * L::TILE_H);
    float *S = (float *)(tc_sm + 4 * L::TILE_H), *G = S + TC_TILE * L::LS;
    int ntile = (T + TC_TILE - 1) / TC_TILE;
    int bh = blockIdx.x / ntile, tile = ntile - 1 - (int)(blockIdx.x % ntile);
    int b = bh / NH, h = bh % NH, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    size_t ld = 3 * (size_t)C;
    size_t qoff = (size_t)b * T * ld + (size_t)h * HS;
    const uint16_t *q = qkv + qoff, *k = q + C, *v = q + 2 * C;
    const uint16_t *dO = dout + (size_t)b * T * C + (size_t)h * HS; /* stored in F */
    int i0 = tile * TC_TILE, last = min(i0 + TC_TILE, T) - 1;
    S += warp * 16 * L::LS;
    G += warp * 16 * L::LS;
    E *dS = (E *)S;
    load_tile<D>(Qs, L::LH, q, ld, i0, T, HS, vec);
    load_tile<D>(dOs, L::LH, dO, C, i0, T, HS, vec);
    int r = lane / 2, half = lane % 2, i = i0 + warp * 16 + r;
    int ic = min(i, T - 1);
    float li = lse[(size_t)bh * T + ic], di = dvec[(size_t)bh * T + ic];
    frag_acc dq[D / 16];
#pragma unroll
    for (int c = 0; c < D / 16; c++)
        wmma::fill_fragment(dq[c], 0.0f);
    for (int j0 = 0; j0 <= last; j0 += TC_TILE) {
        __syncthreads();
        load_tile<D>(Kt, L::LH, k, ld, j0, T, HS, vec);
        load_tile<D>(Vt, L::LH, v, ld, j0, T, HS, vec);
        __syncthreads();
        scores_16x64<D, F>(S, Qs + warp * 16 * L::LH, Kt);
        scores_16x64<D, F>(G, dOs + warp * 16 * L::LH, Vt); /* dP = dO V^T */
        __syncwarp();
        typename tc_types<F>::E2 dd[16];
        float f[32];
        tc_dropout_factors<false>(f, drop, b, h, i, j0, half, T, lane);
#pragma unroll
        for (int kk = 0; kk < 16; kk++) {
            float d2[2];
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int c = PAIR_COL(kk, half) + e, jj = j0 + c;
                bool live = i < T && jj <= i;
                float p = live ? tr_expf(scale * S[r * L::LS + c] - li) : 0.0f;
                d2[e] = p * ((live ? f[2 * kk + e] : 1.0f) * G[r * L::LS + c] - di);
            }
            dd[kk] = tc_types<F>::pack(d2[0], d2[1]);
        }
        __syncwarp(); /* all scores read before dS overwrites them */
#pragma unroll
        for (int kk = 0; kk < 16; kk++)
            *reinterpret_cast<typename tc_types<F>::E2 *>(dS + r * L::LP + PAIR_COL(kk, half)) =
                dd[kk];
        __syncwarp();
        accumulate_16xD<D, F>(dq, dS, Kt); /* dQ += dS K (scale at the end) */
    }
    store_rows<D>(dqkv, qoff, ld, i0 + warp * 16, T, HS, scale, dq, S, 1.0f, F);
}

#endif
