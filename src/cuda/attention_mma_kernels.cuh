/* attention_mma_kernels.cuh: the fused causal attention of bf16- and fp16-mixed runs
 * on mma.sync (m16n8k16, 16-bit in, fp32 accumulation) with every score, probability and
 * accumulator in registers: the FlashAttention-2 scheme. The WMMA kernels of
 * cuda_attention_tc.cu compute the same thing but stage each 16 x 64 block of scores
 * through shared memory, because WMMA does not say which element of a fragment a lane
 * holds; mma.sync does (PTX ISA, "Matrix fragments for mma.m16n8k16"), so here a
 * lane knows its rows and columns and the softmax runs on the registers.
 *
 * Device code only, written against a few primitives that the includer defines first:
 *   tr_mma_16816(float d[4], const uint32_t a[4], const uint32_t b[2])  d += a b (bf16)
 *   tr_mma_16816_f16(d, a, b)  the same on fp16 operands
 *   tr_pack_bf16x2(lo, hi) / tr_pack_f16x2(lo, hi)  two floats rounded to bf16 (fp16),
 *       to nearest even, lo in bits 0-15
 *   tr_ldmatrix_x4_trans(r, row)  four 8 x 8 bf16 matrices from shared memory,
 *       transposed, lane 8 i + j naming row j of matrix i
 *   tr_cp_async16(dst, src, full)  a 16-byte global-to-shared copy (zeros where !full),
 *       tr_cp_async_commit(), tr_cp_async_wait<N>()  its commit groups
 *   TR_LDS32(p) / TR_STS32(p, v) / TR_STG32(p, v)  32-bit loads and stores at a uint16_t *
 *       (shared, shared, global)
 *   TR_DYNAMIC_SMEM(name)  the block's dynamic shared memory, as unsigned char (cuda_launch.cuh)
 * plus CUDA's threadIdx, blockIdx, __syncthreads and __shfl_xor_sync. On the GPU they
 * are mma_ops.cuh's (PTX); validation/unit/warp_emulator.h runs the same source on the
 * CPU, one coroutine per CUDA thread, so that the CPU test suite proves its index
 * arithmetic, masking and softmax against the CPU attention (test_attention_mma_emu).
 *
 * Fragment layout (lane = 4 g + t, g < 8, t < 4; two bf16 per 32-bit register, the
 * lower column in the low half):
 *   A 16 x 16:  a[0] = A[g][2t, 2t+1]   a[1] = A[g+8][2t, 2t+1]
 *               a[2] = A[g][2t+8, +9]   a[3] = A[g+8][2t+8, +9]
 *   B 16 x 8:   b[0] = B[2t, 2t+1][g]   b[1] = B[2t+8, 2t+9][g]
 *   C 16 x 8:   c[0], c[1] = C[g][2t, 2t+1]   c[2], c[3] = C[g+8][2t, 2t+1]
 * So the accumulators of two adjacent 8-column tiles of scores are, packed to bf16,
 * exactly the A fragment of the next product over those 16 columns: P never leaves
 * the registers. B fragments come from row-major [64][D] tiles: two 32-bit loads
 * where the product's k runs along a tile's rows (K for Q K^T, Q and dO for the
 * scores of backward), ldmatrix.trans where it runs down them (V for P V; dO, Q and K
 * for the gradients), so no transposed copy of a tile is stored.
 *
 * Shape of the work: as in the WMMA kernels, a block of 4 warps owns 64 rows (queries
 * in forward and dQ, keys in dK/dV), 16 per warp, and walks the other side in tiles
 * of 64. Tiles in shared memory are bf16 with rows padded by 16 bytes: the 8 rows
 * of an ldmatrix matrix (and the 8 lanes of an A-fragment load) then hit 8 different
 * bank quads. Two stages of tiles: while one is multiplied, the next tile's rows of
 * qkv and dO (16 bits in memory) arrive by cp.async into the other, so the loads
 * overlap the products. Head sizes up to 64 (D = 32 or 64): the fragments of the
 * warp's own rows stay in registers for the whole loop, which at D = 128 would spill.
 *
 * Arithmetic, against the WMMA kernels: the same products on the same 16-bit values
 * (bf16, or fp16 in fp16-mixed runs), the same one rounding of P and dS to the format,
 * and the same masking; forward's running max moves at every tile (a register rescale is cheap here), where the WMMA kernel
 * lets it lag by up to e^8. Row sums are kept per lane and added across the row's 4
 * lanes once, at the end.
 *
 * Dropout of the probabilities (drop.threshold nonzero), as the other forms draw it
 * (attention_flash_kernels.cuh): each fragment element's row and key are known where
 * the causal mask is applied, and there the mask's factor f is drawn; P f goes into O
 * and dV (l sums P), and dS = P (f dP - Dvec). A lane's rows g and g + 8 and columns
 * 2t + e and 2t + e + 8 (two neighbouring n tiles) are one of dropout_math.h's groups,
 * in P (forward, dQ) and in P^T (dK/dV) alike: one Philox call for four elements. */
#ifndef TR_ATTENTION_MMA_KERNELS_CUH
#define TR_ATTENTION_MMA_KERNELS_CUH

#include "backend/dropout_math.h" /* tr_dropout_att_draw, tr_dropout_att_keep */
#include "backend/lowp_math.h"   /* tr_round_lowp */
#include "backend/scalar_math.h" /* tr_expf */
#include "cuda/cuda_launch.cuh"      /* TR_DYNAMIC_SMEM */

#include <math.h>
#include <stdint.h>

/* The 16-bit format F of a run (TR_PREC_BF16 or TR_PREC_FP16: qkv, dO, out and dqkv
 * are stored in it) picks the product and the rounding of P and dS; a constant, so
 * each instantiation has one of them. */
template <int F> __device__ static inline void mma_op(float d[4], const uint32_t a[4],
                                                      const uint32_t b[2])
{
    if (F == TR_PREC_FP16)
        tr_mma_16816_f16(d, a, b);
    else
        tr_mma_16816(d, a, b);
}
template <int F> __device__ static inline uint32_t mma_pack(float lo, float hi)
{
    return F == TR_PREC_FP16 ? tr_pack_f16x2(lo, hi) : tr_pack_bf16x2(lo, hi);
}

#define MMA_WARPS 4
#define MMA_THREADS (MMA_WARPS * 32)
#define MMA_TILE 64 /* rows a block owns, and the other side's tile */

/* How a kernel may read a tensor's rows into a tile (mma_load): */
#define MMA_LOAD_ELEMS 0 /* value by value */
#define MMA_LOAD_VEC 1   /* 4 values (8 bytes) a load */
#define MMA_LOAD_ASYNC 2 /* cp.async, 8 bf16 values (16 bytes) a copy */

/* Two stages of two [64][LD] bf16 tiles (K and V in forward and dQ, Q and dO in
 * dK/dV): one stage is multiplied while the next tile's copies land in the other. */
template <int D> struct mma_layout {
    static const int LD = D + 8;                    /* row stride in bf16: +16 bytes */
    static const unsigned ROWS = MMA_TILE * LD * 2; /* bytes of one tile */
    static const unsigned FWD_BYTES = 4 * ROWS;
    static const unsigned DQ_BYTES = 4 * ROWS;
    static const unsigned DKV_BYTES = 4 * ROWS + 2 * 2 * MMA_TILE * 4; /* + lse, D a stage */
};

/* The load mode for qkv or dO (stored in bf16; rows 3C or C apart) at t: cp.async
 * where every head's row starts 16-byte aligned and holds whole 8-value chunks, else
 * 8-byte loads where rows start 8-byte aligned, else values one by one. */
static inline int mma_load_mode(const void *t, int C, int HS)
{
    if (HS % 8 == 0 && C % 8 == 0 && (uintptr_t)t % 16 == 0)
        return MMA_LOAD_ASYNC;
    return HS % 4 == 0 && C % 4 == 0 && (uintptr_t)t % 8 == 0 ? MMA_LOAD_VEC : MMA_LOAD_ELEMS;
}

/* Values d .. d + 3 of a row of bf16 values starting at s (columns >= HS zero) as two
 * packed pairs, lo holding d and d + 1: one 8-byte load where vec. */
__device__ static inline void mma_fetch4(const uint16_t *s, int d, int HS, bool vec,
                                         uint32_t *lo, uint32_t *hi)
{
    if (vec && d + 4 <= HS) {
        uint2 v = *reinterpret_cast<const uint2 *>(s + d);
        *lo = v.x, *hi = v.y;
        return;
    }
    uint32_t x[4];
#pragma unroll
    for (int u = 0; u < 4; u++)
        x[u] = d + u < HS ? s[d + u] : 0u;
    *lo = x[0] | x[1] << 16;
    *hi = x[2] | x[3] << 16;
}

/* Rows row0.. of src (bf16, stride lds) into `tile` ([64][LD]) by the whole block,
 * now: each thread copies 4 consecutive columns of a row, consecutive threads the
 * next 4. Rows >= T and columns >= HS are zero. */
template <int D>
__device__ static void mma_load_now(uint16_t *tile, const uint16_t *src, size_t lds, int row0,
                                    int T, int HS, bool vec)
{
    const int LD = mma_layout<D>::LD;
    for (int e = threadIdx.x; e < MMA_TILE * D / 4; e += MMA_THREADS) {
        int r = e / (D / 4), d = e % (D / 4) * 4, i = row0 + r;
        uint32_t lo = 0, hi = 0; /* (bf16 zeros) */
        if (i < T)
            mma_fetch4(src + (size_t)i * lds, d, HS, vec, &lo, &hi);
        TR_STS32(tile + r * LD + d, lo);
        TR_STS32(tile + r * LD + d + 2, hi);
    }
}

/* The same tile in `mode`: with MMA_LOAD_ASYNC the block issues
 * cp.async copies of 16 bytes (zero-filled past T and HS) that land at the caller's
 * tr_cp_async_wait, so the next tile's loads overlap this tile's products; else now. */
template <int D>
__device__ static void mma_load(uint16_t *tile, const uint16_t *src, size_t lds, int row0,
                                int T, int HS, int mode)
{
    const int LD = mma_layout<D>::LD;
    if (mode != MMA_LOAD_ASYNC) {
        mma_load_now<D>(tile, src, lds, row0, T, HS, mode == MMA_LOAD_VEC);
        return;
    }
    for (int e = threadIdx.x; e < MMA_TILE * D / 8; e += MMA_THREADS) {
        int r = e / (D / 8), d = e % (D / 8) * 8, i = row0 + r;
        bool live = i < T && d < HS; /* HS % 8 == 0: the chunk is whole */
        tr_cp_async16(tile + r * LD + d, live ? src + (size_t)i * lds + d : src, live);
    }
}
/* The A fragments of a warp's 16 rows (from row 16 w of a [64][LD] tile), all of D. */
template <int D>
__device__ static void mma_a_frags(uint32_t a[D / 16][4], const uint16_t *tile, int w, int lane)
{
    const int LD = mma_layout<D>::LD;
    const uint16_t *p = tile + (16 * w + lane / 4) * LD + 2 * (lane % 4);
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        a[kk][0] = TR_LDS32(p + 16 * kk);
        a[kk][1] = TR_LDS32(p + 8 * LD + 16 * kk);
        a[kk][2] = TR_LDS32(p + 16 * kk + 8);
        a[kk][3] = TR_LDS32(p + 8 * LD + 16 * kk + 8);
    }
}

/* s[n] (n < 8) = the 16 x 64 product of a warp's rows (A fragments a, over D) with the
 * 64 rows of `tile` ([64][LD], read as B^T: s = A tile^T). A B fragment is two 32-bit
 * loads here, k running along the tile's rows. (One ldmatrix.x4 would fetch two of
 * them, but ptxas then keeps more registers live: dK/dV at D = 64 spilled.) */
template <int D, int F>
__device__ static void mma_scores(float s[8][4], const uint32_t a[D / 16][4],
                                  const uint16_t *tile, int lane)
{
    const int LD = mma_layout<D>::LD;
    const uint16_t *p = tile + (lane / 4) * LD + 2 * (lane % 4);
#pragma unroll
    for (int n = 0; n < 8; n++) {
        s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
            uint32_t b[2] = {TR_LDS32(p + 8 * n * LD + 16 * kk),
                             TR_LDS32(p + 8 * n * LD + 16 * kk + 8)};
            mma_op<F>(s[n], a[kk], b);
        }
    }
}

/* acc[n] (n < D/8) += X (16 x 64, as 8 score-shaped accumulators, rounded to F here)
 * times the 64 x D matrix in `rows` ([64][LD], row-major). Its B fragments (k down the
 * rows) come transposed by ldmatrix.trans: matrices rows 16 kk.. and 16 kk + 8.. at
 * columns 8 n.. and 8 (n + 1).., so no transposed copy of the tile is ever stored. */
template <int D, int F>
__device__ static void mma_accumulate(float acc[D / 8][4], const float x[8][4],
                                      const uint16_t *rows, int lane)
{
    const int LD = mma_layout<D>::LD;
    const uint16_t *p = rows + (lane % 8 + 8 * (lane / 8 % 2)) * LD + 8 * (lane / 16);
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        uint32_t a[4] = {mma_pack<F>(x[2 * kk][0], x[2 * kk][1]),
                         mma_pack<F>(x[2 * kk][2], x[2 * kk][3]),
                         mma_pack<F>(x[2 * kk + 1][0], x[2 * kk + 1][1]),
                         mma_pack<F>(x[2 * kk + 1][2], x[2 * kk + 1][3])};
#pragma unroll
        for (int n = 0; n < D / 8; n += 2) {
            uint32_t b[4];
            tr_ldmatrix_x4_trans(b, p + 16 * kk * LD + 8 * n);
            mma_op<F>(acc[n], a, b);
            mma_op<F>(acc[n + 1], a, b + 2);
        }
    }
}

/* A warp's 16 x D accumulators times `scale` (and row h's by rscale[h], h = 0 for row
 * g, 1 for g + 8) to rows row0.. (< T) and columns < HS of the matrix at element o0 of
 * dst (row stride ldd), a tensor stored in format F (lowp_math.h: dqkv and forward's
 * out; rounded as stored). A lane's two adjacent values go out as one 4-byte store
 * where their offset is even. */
template <int D, int F>
__device__ static void mma_store(void *dst, size_t o0, size_t ldd, int row0, int T, int HS,
                                 const float acc[D / 8][4], float scale, const float rscale[2],
                                 int lane)
{
#pragma unroll
    for (int h = 0; h < 2; h++) {
        int i = row0 + lane / 4 + 8 * h;
        if (i >= T)
            continue;
        float f = scale * rscale[h];
#pragma unroll
        for (int n = 0; n < D / 8; n++) {
            int d = 8 * n + 2 * (lane % 4);
            size_t o = o0 + (size_t)i * ldd + d;
            float lo = f * acc[n][2 * h], hi = f * acc[n][2 * h + 1];
            if (d + 1 < HS && o % 2 == 0) {
                TR_STG32((uint16_t *)dst + o, mma_pack<F>(lo, hi));
                continue;
            }
            if (d < HS)
                tr_stored_store(dst, o, lo, F);
            if (d + 1 < HS)
                tr_stored_store(dst, o + 1, hi, F);
        }
    }
}

/* The max (or sum) of a row over the 4 lanes that hold it. */
__device__ static inline float mma_row_max(float x)
{
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ static inline float mma_row_sum(float x)
{
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

/* Stage st's two tiles: [0] K, Q (dK/dV); [1] V, dO */
__device__ static inline uint16_t *mma_stage(unsigned char *sm, unsigned rows, int st, int t)
{
    return (uint16_t *)(sm + (2 * st + t) * rows);
}

/* x[n][e] *= the mask's factor (dropout_math.h) of a lane's score s[n][e] of a warp's
 * 16 x 64 tile, row r0 + 8 (e >> 1) and column c0 + 8 n + 2 (lane % 4) + (e & 1): P's
 * (i, j) are (row, column), or (column, row) where TRANS (P^T, in dK/dV). Rows r0,
 * r0 + 8 and columns c, c + 8 (tiles n and n + 1) are one Philox call's group; x is
 * left as it is where every element of a group is dead (past T or above the
 * diagonal). (Multiplied in place: forward's scores need no second array.) */
template <bool TRANS>
__device__ static inline void mma_dropout_mul(float x[8][4], const tr_dropout &drop, int b, int h,
                                              int r0, int c0, int T, int lane)
{
#pragma unroll
    for (int n = 0; n < 8; n += 2)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            int c = c0 + 8 * n + 2 * (lane % 4) + e;
            int i = TRANS ? c : r0, j = TRANS ? r0 : c; /* the group's first element */
            if (i >= T || j > i + 8)
                continue;
            uint32_t w[4];
            tr_dropout_att_draw(w, &drop, b, h, i, j, T);
#pragma unroll
            for (int hh = 0; hh < 2; hh++) {
                int r = r0 + 8 * hh;
                x[n][2 * hh + e] *= TRANS ? tr_dropout_att_keep(&drop, w, c, r)
                                          : tr_dropout_att_keep(&drop, w, r, c);
                x[n + 1][2 * hh + e] *= TRANS ? tr_dropout_att_keep(&drop, w, c + 8, r)
                                              : tr_dropout_att_keep(&drop, w, r, c + 8);
            }
        }
}

/* f[8][4] = 1, times the mask's factors where drop is on (mma_dropout_mul) */
template <bool TRANS>
__device__ static inline void mma_dropout_factors(float f[8][4], const tr_dropout &drop, int b,
                                                  int h, int r0, int c0, int T, int lane)
{
#pragma unroll
    for (int n = 0; n < 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            f[n][e] = 1.0f;
    if (drop.threshold)
        mma_dropout_mul<TRANS>(f, drop, b, h, r0, c0, T, lane);
}

/* Forward of 64 queries: out = softmax(scale q k^T, causal) v and each row's
 * log-sum-exp (lse [B*NH, T]), as tc_forward_kernel. Blocks: B*NH x query tiles,
 * the last (longest) tiles first. vq: qkv's load mode (mma_load_mode). */
template <int D, int F>
__global__ static void __launch_bounds__(MMA_THREADS)
    mma_forward_kernel(void *out, float *lse, const uint16_t *qkv, int T, int C, int NH, int HS,
                       float scale, int vq, tr_dropout drop)
{
    typedef mma_layout<D> L;
    TR_DYNAMIC_SMEM(sm);
    int ntile = (T + MMA_TILE - 1) / MMA_TILE;
    int bh = blockIdx.x / ntile, tile = ntile - 1 - (int)(blockIdx.x % ntile);
    int b = bh / NH, h = bh % NH, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    size_t ld = 3 * (size_t)C;
    const uint16_t *q = qkv + (size_t)b * T * ld + (size_t)h * HS, *k = q + C, *v = q + 2 * C;
    int i0 = tile * MMA_TILE, nkt = tile + 1; /* key tiles 0 .. tile */
    /* the queries staged through stage 1's K tile; key tile 0 into stage 0 */
    mma_load<D>(mma_stage(sm, L::ROWS, 1, 0), q, ld, i0, T, HS, vq);
    mma_load<D>(mma_stage(sm, L::ROWS, 0, 0), k, ld, 0, T, HS, vq);
    mma_load<D>(mma_stage(sm, L::ROWS, 0, 1), v, ld, 0, T, HS, vq);
    tr_cp_async_commit();
    tr_cp_async_wait<0>();
    __syncthreads();
    uint32_t qf[D / 16][4];
    mma_a_frags<D>(qf, mma_stage(sm, L::ROWS, 1, 0), warp, lane);
    int row[2], imask[2]; /* this lane's two rows, and the rows their masks use */
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, o[D / 8][4];
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
        row[hh] = i0 + 16 * warp + lane / 4 + 8 * hh;
        imask[hh] = row[hh] < T ? row[hh] : T - 1; /* rows past T: any finite row */
    }
#pragma unroll
    for (int n = 0; n < D / 8; n++)
        o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    for (int jt = 0; jt < nkt; jt++) {
        int st = jt & 1, j0 = jt * MMA_TILE;
        __syncthreads(); /* the other stage is read: the last tile, or the queries */
        if (jt + 1 < nkt) {
            mma_load<D>(mma_stage(sm, L::ROWS, st ^ 1, 0), k, ld, j0 + MMA_TILE, T, HS, vq);
            mma_load<D>(mma_stage(sm, L::ROWS, st ^ 1, 1), v, ld, j0 + MMA_TILE, T, HS, vq);
        }
        tr_cp_async_commit(); /* (maybe empty: every step waits for all but one group) */
        tr_cp_async_wait<1>(); /* this tile's copies have landed */
        __syncthreads();
        float s[8][4];
        mma_scores<D, F>(s, qf, mma_stage(sm, L::ROWS, st, 0), lane);
        /* every row sees key j0 <= its row (j0 <= i0), so each tile max is finite */
        float tmax[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int n = 0; n < 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int j = j0 + 8 * n + 2 * (lane % 4) + (e & 1), hh = e >> 1;
                s[n][e] = j <= imask[hh] ? scale * s[n][e] : -INFINITY;
                tmax[hh] = fmaxf(tmax[hh], s[n][e]);
            }
        float corr[2];
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            float mnew = fmaxf(m[hh], mma_row_max(tmax[hh]));
            corr[hh] = m[hh] == -INFINITY ? 0.0f : tr_expf(m[hh] - mnew);
            m[hh] = mnew;
            l[hh] *= corr[hh];
        }
#pragma unroll
        for (int n = 0; n < D / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                o[n][e] *= corr[e >> 1];
#pragma unroll
        for (int n = 0; n < 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float p = s[n][e] == -INFINITY ? 0.0f : tr_expf(s[n][e] - m[e >> 1]);
                s[n][e] = p;
                l[e >> 1] += p;
            }
        if (drop.threshold) /* O sums the dropped P; l the whole row */
            mma_dropout_mul<false>(s, drop, b, h, row[0], j0, T, lane);
        mma_accumulate<D, F>(o, s, mma_stage(sm, L::ROWS, st, 1), lane);
    }
    float inv[2];
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
        l[hh] = mma_row_sum(l[hh]);
        inv[hh] = 1.0f / l[hh];
    }
    mma_store<D, F>(out, (size_t)b * T * C + (size_t)h * HS, C, i0 + 16 * warp, T, HS, o,
                 1.0f, inv, lane);
#pragma unroll
    for (int hh = 0; hh < 2; hh++)
        if (lane % 4 == 0 && row[hh] < T)
            lse[(size_t)bh * T + row[hh]] = m[hh] + logf(l[hh]);
}

/* Query tile i0's rows of lse and dvec into Lt and Dt (64 floats each; 0 past T) */
__device__ static void mma_load_rowstats(float *Lt, float *Dt, const float *lse,
                                         const float *dvec, size_t bh, int T, int i0)
{
    for (int e = threadIdx.x; e < MMA_TILE; e += MMA_THREADS) {
        int i = i0 + e;
        Lt[e] = i < T ? lse[bh * T + i] : 0.0f;
        Dt[e] = i < T ? dvec[bh * T + i] : 0.0f;
    }
}

/* dK, dV of 64 keys (16 per warp), over the query tiles at and after them; dvec [B*NH,
 * T] = rowsum(dO * O). As tc_dkv_kernel: P^T = exp(scale K Q^T - lse), dS^T = P^T *
 * (V dO^T - dvec); dV = P^T dO, dK = scale dS^T Q. vq: qkv's load mode; vo: dO's. */
template <int D, int F>
__global__ static void __launch_bounds__(MMA_THREADS)
    mma_dkv_kernel(void *dqkv, const uint16_t *dout, const uint16_t *qkv, const float *lse,
                   const float *dvec, int T, int C, int NH, int HS, float scale, int vq, int vo,
                   tr_dropout drop)
{
    typedef mma_layout<D> L;
    TR_DYNAMIC_SMEM(sm);
    float *stats = (float *)(sm + 4 * L::ROWS); /* stage st: lse at 2 st, dvec 2 st + 1 */
    int ntile = (T + MMA_TILE - 1) / MMA_TILE;
    int bh = blockIdx.x / ntile, tile = (int)(blockIdx.x % ntile); /* longest first */
    int b = bh / NH, h = bh % NH, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    size_t ld = 3 * (size_t)C;
    size_t qoff = (size_t)b * T * ld + (size_t)h * HS;
    const uint16_t *q = qkv + qoff, *k = q + C, *v = q + 2 * C;
    const uint16_t *dO = dout + (size_t)b * T * C + (size_t)h * HS;
    int j0 = tile * MMA_TILE, nqt = ntile - tile; /* query tiles tile .. ntile - 1 */
    /* the block's keys' K and V staged through stage 1; query tile j0 into stage 0 */
    mma_load<D>(mma_stage(sm, L::ROWS, 1, 0), k, ld, j0, T, HS, vq);
    mma_load<D>(mma_stage(sm, L::ROWS, 1, 1), v, ld, j0, T, HS, vq);
    mma_load<D>(mma_stage(sm, L::ROWS, 0, 0), q, ld, j0, T, HS, vq);
    mma_load<D>(mma_stage(sm, L::ROWS, 0, 1), dO, C, j0, T, HS, vo);
    mma_load_rowstats(stats, stats + MMA_TILE, lse, dvec, bh, T, j0);
    tr_cp_async_commit();
    tr_cp_async_wait<0>();
    __syncthreads();
    uint32_t kf[D / 16][4], vf[D / 16][4];
    mma_a_frags<D>(kf, mma_stage(sm, L::ROWS, 1, 0), warp, lane);
    mma_a_frags<D>(vf, mma_stage(sm, L::ROWS, 1, 1), warp, lane);
    float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
    for (int n = 0; n < D / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            dk[n][e] = dv[n][e] = 0.0f;
    int key[2] = {j0 + 16 * warp + lane / 4, j0 + 16 * warp + lane / 4 + 8};
    for (int it = 0; it < nqt; it++) {
        int st = it & 1, i0 = j0 + it * MMA_TILE;
        __syncthreads(); /* the other stage is read: the last tile, or K and V */
        if (it + 1 < nqt) {
            int nx = st ^ 1, i1 = i0 + MMA_TILE;
            mma_load<D>(mma_stage(sm, L::ROWS, nx, 0), q, ld, i1, T, HS, vq);
            mma_load<D>(mma_stage(sm, L::ROWS, nx, 1), dO, C, i1, T, HS, vo);
            mma_load_rowstats(stats + 2 * nx * MMA_TILE, stats + (2 * nx + 1) * MMA_TILE, lse,
                              dvec, bh, T, i1);
        }
        tr_cp_async_commit();
        tr_cp_async_wait<1>(); /* this tile's copies have landed */
        __syncthreads();
        const uint16_t *Qs = mma_stage(sm, L::ROWS, st, 0), *dOs = mma_stage(sm, L::ROWS, st, 1);
        const float *Lt = stats + 2 * st * MMA_TILE, *Dt = Lt + MMA_TILE;
        float p[8][4], ds[8][4], f[8][4];
        mma_scores<D, F>(p, kf, Qs, lane);  /* S^T: keys x queries */
        mma_scores<D, F>(ds, vf, dOs, lane); /* dP^T = V dO^T */
        mma_dropout_factors<true>(f, drop, b, h, key[0], i0, T, lane);
#pragma unroll
        for (int n = 0; n < 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int c = 8 * n + 2 * (lane % 4) + (e & 1), i = i0 + c;
                bool live = i < T && key[e >> 1] <= i;
                float pe = live ? tr_expf(scale * p[n][e] - Lt[c]) : 0.0f;
                float fe = live ? f[n][e] : 1.0f;
                p[n][e] = pe * fe;
                ds[n][e] = pe * (fe * ds[n][e] - Dt[c]);
            }
        mma_accumulate<D, F>(dv, p, dOs, lane); /* dV += P^T dO */
        mma_accumulate<D, F>(dk, ds, Qs, lane); /* dK += dS^T Q (scale at the end) */
    }
    const float one[2] = {1.0f, 1.0f};
    mma_store<D, F>(dqkv, qoff + C, ld, j0 + 16 * warp, T, HS, dk, scale, one, lane);
    mma_store<D, F>(dqkv, qoff + 2 * (size_t)C, ld, j0 + 16 * warp, T, HS, dv, 1.0f, one,
                    lane);
}

/* dQ of 64 queries (16 per warp), over the key tiles up to them: dS = P * (dO V^T -
 * dvec), dQ = scale dS K. */
template <int D, int F>
__global__ static void __launch_bounds__(MMA_THREADS)
    mma_dq_kernel(void *dqkv, const uint16_t *dout, const uint16_t *qkv, const float *lse,
                  const float *dvec, int T, int C, int NH, int HS, float scale, int vq, int vo,
                  tr_dropout drop)
{
    typedef mma_layout<D> L;
    TR_DYNAMIC_SMEM(sm);
    int ntile = (T + MMA_TILE - 1) / MMA_TILE;
    int bh = blockIdx.x / ntile, tile = ntile - 1 - (int)(blockIdx.x % ntile);
    int b = bh / NH, h = bh % NH, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    size_t ld = 3 * (size_t)C;
    size_t qoff = (size_t)b * T * ld + (size_t)h * HS;
    const uint16_t *q = qkv + qoff, *k = q + C, *v = q + 2 * C;
    const uint16_t *dO = dout + (size_t)b * T * C + (size_t)h * HS;
    int i0 = tile * MMA_TILE, nkt = tile + 1; /* key tiles 0 .. tile */
    /* the block's queries' Q and dO staged through stage 1; key tile 0 into stage 0 */
    mma_load<D>(mma_stage(sm, L::ROWS, 1, 0), q, ld, i0, T, HS, vq);
    mma_load<D>(mma_stage(sm, L::ROWS, 1, 1), dO, C, i0, T, HS, vo);
    mma_load<D>(mma_stage(sm, L::ROWS, 0, 0), k, ld, 0, T, HS, vq);
    mma_load<D>(mma_stage(sm, L::ROWS, 0, 1), v, ld, 0, T, HS, vq);
    tr_cp_async_commit();
    tr_cp_async_wait<0>();
    __syncthreads();
    uint32_t qf[D / 16][4], of[D / 16][4];
    mma_a_frags<D>(qf, mma_stage(sm, L::ROWS, 1, 0), warp, lane);
    mma_a_frags<D>(of, mma_stage(sm, L::ROWS, 1, 1), warp, lane);
    int row[2];
    float li[2], di[2], dq[D / 8][4];
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
        row[hh] = i0 + 16 * warp + lane / 4 + 8 * hh;
        int ic = row[hh] < T ? row[hh] : T - 1;
        li[hh] = lse[(size_t)bh * T + ic];
        di[hh] = dvec[(size_t)bh * T + ic];
    }
#pragma unroll
    for (int n = 0; n < D / 8; n++)
        dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;
    for (int jt = 0; jt < nkt; jt++) {
        int st = jt & 1, j0 = jt * MMA_TILE;
        __syncthreads(); /* the other stage is read: the last tile, or Q and dO */
        if (jt + 1 < nkt) {
            mma_load<D>(mma_stage(sm, L::ROWS, st ^ 1, 0), k, ld, j0 + MMA_TILE, T, HS, vq);
            mma_load<D>(mma_stage(sm, L::ROWS, st ^ 1, 1), v, ld, j0 + MMA_TILE, T, HS, vq);
        }
        tr_cp_async_commit();
        tr_cp_async_wait<1>(); /* this tile's copies have landed */
        __syncthreads();
        const uint16_t *Ks = mma_stage(sm, L::ROWS, st, 0);
        float p[8][4], ds[8][4];
        mma_scores<D, F>(p, qf, Ks, lane);                                /* S = Q K^T */
        mma_scores<D, F>(ds, of, mma_stage(sm, L::ROWS, st, 1), lane);    /* dP = dO V^T */
        float f[8][4];
        mma_dropout_factors<false>(f, drop, b, h, row[0], j0, T, lane);
#pragma unroll
        for (int n = 0; n < 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int j = j0 + 8 * n + 2 * (lane % 4) + (e & 1), hh = e >> 1;
                bool live = row[hh] < T && j <= row[hh];
                float pe = live ? tr_expf(scale * p[n][e] - li[hh]) : 0.0f;
                ds[n][e] = pe * ((live ? f[n][e] : 1.0f) * ds[n][e] - di[hh]);
            }
        mma_accumulate<D, F>(dq, ds, Ks, lane); /* dQ += dS K (scale at the end) */
    }
    const float one[2] = {1.0f, 1.0f};
    mma_store<D, F>(dqkv, qoff, ld, i0 + 16 * warp, T, HS, dq, scale, one, lane);
}

#endif
