/* attention_flash_kernels.cuh: the fused attention kernels of cuda_attention.cu (fp32
 * on the CUDA cores: fp32 runs, and bf16- and fp16-mixed where the tensor-core forms
 * do not fit), whose scheme that file's header describes, and the kernel that
 * forms backward's rowsum(dO * O) for every form.
 *
 * Device code free of CUDA headers, so that validation/unit/warp_emulator.h runs the
 * same source on the CPU (unit.test_attention_flash_emu). Written against CUDA's
 * built-ins (threadIdx, __syncthreads, __shfl_sync, __shfl_xor_sync through
 * cuda_launch.cuh's warp reductions, min) and TR_DYNAMIC_SMEM (cuda_launch.cuh on the
 * GPU, the emulator's on the CPU); the includer provides them first.
 *
 * Dropout of the probabilities (drop.threshold nonzero; transformer_kernels.h): the
 * mask's factor f of (i, j) is drawn where p is formed, in each kernel alike
 * (dropout_math.h). Forward sums the row's undropped p into l (the softmax is of the
 * scores) and p f into O; backward uses p f for dV and ds = p (f dp - Dvec): Dvec =
 * rowsum(dO * O) is still sum_j p_ij f_ij dp_ij, O being formed from p f. */
#ifndef TR_ATTENTION_FLASH_KERNELS_CUH
#define TR_ATTENTION_FLASH_KERNELS_CUH

#include "backend/dropout_math.h" /* tr_dropout_att_factor */
#include "backend/lowp_math.h"   /* tr_stored_load, tr_stored_store */
#include "backend/scalar_math.h" /* tr_expf */
#include "backend/kernels.h"     /* TR_CUDA_MAX_HEAD_SIZE */
#include "cuda/cuda_launch.cuh"  /* tr_warp_sum, tr_warp_max, TR_CUDA_BLOCK */

#include <math.h>
#include <stddef.h>

#define FA_WARPS 8
#define FA_THREADS (FA_WARPS * 32)
#define FA_MAX_HS TR_CUDA_MAX_HEAD_SIZE

/* Rows (or keys) per warp for a padded head size D: R D / 32 <= 16 per-lane
 * accumulators of each kind, which keeps the wider heads from spilling registers. */
template <int D> struct fa_rows {
    static const int R = D <= 64 ? 8 : D == 128 ? 2 : 1;
};

/* dst[r][d] (row stride ldd) = rows row0 + r, columns d < HS (row stride lds) of src,
 * a tensor stored in format (lowp_math.h: qkv, dO) whose element off is the tile's
 * row 0, column 0: the values as they are; zero for rows >= T and columns >= HS. The
 * whole block takes part. */
template <int D>
__device__ static void load_stored_tile(float *dst, int ldd, const void *src, size_t off,
                                        size_t lds, int row0, int rows, int T, int HS,
                                        int format)
{
    for (int e = threadIdx.x; e < rows * D; e += FA_THREADS) {
        int r = e / D, d = e % D, i = row0 + r;
        dst[r * ldd + d] =
            (i < T && d < HS) ? tr_stored_load(src, off + (size_t)i * lds + d, format) : 0.0f;
    }
}

/* dot of a D-vector read by all lanes alike (broadcast, 16-byte aligned) with one
 * read per lane from a padded row */
template <int D> __device__ static inline float dot_bcast(const float *a, const float *b)
{
    float s = 0.0f;
#pragma unroll
    for (int d = 0; d < D; d += 4) {
        float4 a4 = *reinterpret_cast<const float4 *>(a + d);
        s += a4.x * b[d] + a4.y * b[d + 1] + a4.z * b[d + 2] + a4.w * b[d + 3];
    }
    return s;
}

template <int D>
__global__ static void __launch_bounds__(FA_THREADS)
    flash_forward_kernel(void *out, float *lse, const void *qkv, int T, int C, int NH, int HS,
                         float scale, int format, tr_dropout drop)
{
    const int R = fa_rows<D>::R, BR = FA_WARPS * R, LDK = D + 1;
    TR_DYNAMIC_SMEM(smem);
    float *sm = (float *)smem;
    float *Qs = sm;            /* [BR][D] */
    float *KV = sm + BR * D;   /* [32][D + 1]: the K tile, then the V tile */
    int ntile = (T + BR - 1) / BR;
    int bh = blockIdx.x / ntile;
    int tile = ntile - 1 - (int)(blockIdx.x % ntile); /* longest rows first */
    int b = bh / NH, h = bh % NH, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    size_t ld = 3 * (size_t)C;
    /* q, k and v of the head: elements qo, qo + C and qo + 2C of qkv */
    size_t qo = (size_t)b * T * ld + (size_t)h * HS;
    int i0 = tile * BR;
    load_stored_tile<D>(Qs, D, qkv, qo, ld, i0, BR, T, HS, format);

    float m[R], l[R], acc[R][D / 32];
#pragma unroll
    for (int r = 0; r < R; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
#pragma unroll
        for (int c = 0; c < D / 32; c++)
            acc[r][c] = 0.0f;
    }
    int last = min(i0 + BR, T) - 1; /* the tile's last row sees keys 0..last */
    for (int j0 = 0; j0 <= last; j0 += 32) {
        __syncthreads(); /* the previous V tile is read (and Qs written) */
        load_stored_tile<D>(KV, LDK, qkv, qo + C, ld, j0, 32, T, HS, format);
        __syncthreads();
        int j = j0 + lane;
        float p[R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            int i = min(i0 + warp * R + r, T - 1); /* rows past T: any valid row */
            float s = scale * dot_bcast<D>(Qs + (warp * R + r) * D, KV + lane * LDK);
            bool valid = j <= i;
            float mnew = fmaxf(m[r], tr_warp_max(valid ? s : -INFINITY));
            /* mnew is finite: key 0 is valid for every row in the first tile */
            p[r] = valid ? tr_expf(s - mnew) : 0.0f;
            float corr = m[r] == -INFINITY ? 0.0f : tr_expf(m[r] - mnew);
            l[r] = l[r] * corr + tr_warp_sum(p[r]);
            m[r] = mnew;
            if (drop.threshold && valid) /* O sums the dropped p; l the whole row */
                p[r] *= tr_dropout_att_factor(&drop, b, h, i, j, T);
#pragma unroll
            for (int c = 0; c < D / 32; c++)
                acc[r][c] *= corr;
        }
        __syncthreads();
        load_stored_tile<D>(KV, LDK, qkv, qo + 2 * (size_t)C, ld, j0, 32, T, HS, format);
        __syncthreads();
        for (int jj = 0; jj < 32; jj++) {
            const float *vr = KV + jj * LDK;
#pragma unroll
            for (int r = 0; r < R; r++) {
                float pj = __shfl_sync(0xffffffffu, p[r], jj);
#pragma unroll
                for (int c = 0; c < D / 32; c++)
                    acc[r][c] += pj * vr[lane + 32 * c];
            }
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++) {
        int i = i0 + warp * R + r;
        if (i >= T)
            continue;
        float inv = 1.0f / l[r];
        size_t o = ((size_t)b * T + i) * C + (size_t)h * HS; /* out stored in format */
#pragma unroll
        for (int c = 0; c < D / 32; c++)
            if (lane + 32 * c < HS)
                tr_stored_store(out, o + lane + 32 * c, acc[r][c] * inv, format);
        if (lane == 0)
            lse[(size_t)bh * T + i] = m[r] + logf(l[r]);
    }
}

/* dvec[bh T + i] = sum_d dO[b, i, h HS + d] O[b, i, h HS + d]: one warp per (b, i, h);
 * O, forward's output, stored in format */
__global__ static void flash_dvec_kernel(float *dvec, const void *dout, const void *out,
                                         int B, int T, int C, int NH, int HS, int format)
{
    size_t row = (size_t)blockIdx.x * (TR_CUDA_BLOCK / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= (size_t)B * T * NH)
        return;
    int h = (int)(row % NH);
    size_t bi = row / NH; /* b T + i */
    size_t o = bi * C + (size_t)h * HS;
    float s = 0.0f;
    for (int d = lane; d < HS; d += 32) /* dO and O stored in format */
        s += tr_stored_load(dout, o + d, format) * tr_stored_load(out, o + d, format);
    s = tr_warp_sum(s);
    if (lane == 0) {
        size_t b = bi / T, i = bi % T;
        dvec[(b * NH + h) * T + i] = s;
    }
}

/* dK, dV of one tile of BK = 8 R keys: warps over keys, lanes over 32-query tiles. */
template <int D>
__global__ static void __launch_bounds__(FA_THREADS)
    flash_dkv_kernel(void *dqkv, const void *dout, const void *qkv, const float *lse,
                     const float *dvec, int T, int C, int NH, int HS, float scale, int format,
                     tr_dropout drop)
{
    const int R = fa_rows<D>::R, BK = FA_WARPS * R, LDQ = D + 1;
    TR_DYNAMIC_SMEM(smem);
    float *sm = (float *)smem;
    float *Ks = sm, *Vs = Ks + BK * D;        /* [BK][D] each */
    float *Qt = Vs + BK * D, *dOt = Qt + 32 * LDQ; /* [32][D + 1] each */
    int ntile = (T + BK - 1) / BK;
    int bh = blockIdx.x / ntile, tile = (int)(blockIdx.x % ntile); /* longest first */
    int b = bh / NH, h = bh % NH, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    size_t ld = 3 * (size_t)C;
    size_t qoff = (size_t)b * T * ld + (size_t)h * HS;
    size_t koff = qoff + C, voff = qoff + 2 * (size_t)C; /* of qkv, stored in format */
    size_t ooff = (size_t)b * T * C + (size_t)h * HS; /* of dout, stored in format */
    const float *L = lse + (size_t)bh * T, *Dv = dvec + (size_t)bh * T;
    int j0 = tile * BK;
    load_stored_tile<D>(Ks, D, qkv, koff, ld, j0, BK, T, HS, format);
    load_stored_tile<D>(Vs, D, qkv, voff, ld, j0, BK, T, HS, format);

    float dk[R][D / 32], dv[R][D / 32];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int c = 0; c < D / 32; c++)
            dk[r][c] = dv[r][c] = 0.0f;
    for (int i0 = j0 / 32 * 32; i0 < T; i0 += 32) { /* queries i >= j only */
        __syncthreads();
        load_stored_tile<D>(Qt, LDQ, qkv, qoff, ld, i0, 32, T, HS, format);
        load_stored_tile<D>(dOt, LDQ, dout, ooff, C, i0, 32, T, HS, format);
        __syncthreads();
        int i = i0 + lane;
        float li = i < T ? L[i] : 0.0f, di = i < T ? Dv[i] : 0.0f;
        float p[R], ds[R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            int j = j0 + warp * R + r;
            float s = scale * dot_bcast<D>(Ks + (warp * R + r) * D, Qt + lane * LDQ);
            float dp = dot_bcast<D>(Vs + (warp * R + r) * D, dOt + lane * LDQ);
            bool valid = i < T && j <= i;
            p[r] = valid ? tr_expf(s - li) : 0.0f;
            if (drop.threshold && valid) { /* dV takes p f, ds = p (f dp - Dvec) */
                float f = tr_dropout_att_factor(&drop, b, h, i, j, T);
                ds[r] = p[r] * (f * dp - di);
                p[r] *= f;
            } else {
                ds[r] = p[r] * (dp - di);
            }
        }
        for (int ii = 0; ii < 32; ii++) {
            const float *qr = Qt + ii * LDQ, *gr = dOt + ii * LDQ;
#pragma unroll
            for (int r = 0; r < R; r++) {
                float pj = __shfl_sync(0xffffffffu, p[r], ii);
                float dsj = __shfl_sync(0xffffffffu, ds[r], ii);
#pragma unroll
                for (int c = 0; c < D / 32; c++) {
                    dv[r][c] += pj * gr[lane + 32 * c];
                    dk[r][c] += dsj * qr[lane + 32 * c];
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++) {
        int j = j0 + warp * R + r;
        if (j >= T)
            continue;
        size_t dkr = koff + (size_t)j * ld, dvr = voff + (size_t)j * ld; /* dqkv stored */
#pragma unroll
        for (int c = 0; c < D / 32; c++)
            if (lane + 32 * c < HS) {
                tr_stored_store(dqkv, dkr + lane + 32 * c, scale * dk[r][c], format);
                tr_stored_store(dqkv, dvr + lane + 32 * c, dv[r][c], format);
            }
    }
}

/* dQ of one tile of BQ = 8 R queries: warps over queries, lanes over 32-key tiles. */
template <int D>
__global__ static void __launch_bounds__(FA_THREADS)
    flash_dq_kernel(void *dqkv, const void *dout, const void *qkv, const float *lse,
                    const float *dvec, int T, int C, int NH, int HS, float scale, int format,
                    tr_dropout drop)
{
    const int R = fa_rows<D>::R, BQ = FA_WARPS * R, LDK = D + 1;
    TR_DYNAMIC_SMEM(smem);
    float *sm = (float *)smem;
    float *Qs = sm, *dOs = Qs + BQ * D;             /* [BQ][D] each */
    float *Kt = dOs + BQ * D, *Vt = Kt + 32 * LDK;  /* [32][D + 1] each */
    int ntile = (T + BQ - 1) / BQ;
    int bh = blockIdx.x / ntile;
    int tile = ntile - 1 - (int)(blockIdx.x % ntile); /* longest first */
    int b = bh / NH, h = bh % NH, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    size_t ld = 3 * (size_t)C;
    size_t qoff = (size_t)b * T * ld + (size_t)h * HS;
    size_t koff = qoff + C, voff = qoff + 2 * (size_t)C; /* of qkv, stored in format */
    size_t ooff = (size_t)b * T * C + (size_t)h * HS; /* of dout, stored in format */
    int i0 = tile * BQ;
    load_stored_tile<D>(Qs, D, qkv, qoff, ld, i0, BQ, T, HS, format);
    load_stored_tile<D>(dOs, D, dout, ooff, C, i0, BQ, T, HS, format);
    float li[R], di[R], dq[R][D / 32];
#pragma unroll
    for (int r = 0; r < R; r++) {
        int i = min(i0 + warp * R + r, T - 1);
        li[r] = lse[(size_t)bh * T + i];
        di[r] = dvec[(size_t)bh * T + i];
#pragma unroll
        for (int c = 0; c < D / 32; c++)
            dq[r][c] = 0.0f;
    }
    int last = min(i0 + BQ, T) - 1;
    for (int j0 = 0; j0 <= last; j0 += 32) {
        __syncthreads();
        load_stored_tile<D>(Kt, LDK, qkv, koff, ld, j0, 32, T, HS, format);
        load_stored_tile<D>(Vt, LDK, qkv, voff, ld, j0, 32, T, HS, format);
        __syncthreads();
        int j = j0 + lane;
        float ds[R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            int i = i0 + warp * R + r;
            float s = scale * dot_bcast<D>(Qs + (warp * R + r) * D, Kt + lane * LDK);
            float dp = dot_bcast<D>(dOs + (warp * R + r) * D, Vt + lane * LDK);
            bool valid = i < T && j <= i;
            float p = valid ? tr_expf(s - li[r]) : 0.0f;
            if (drop.threshold && valid)
                dp *= tr_dropout_att_factor(&drop, b, h, i, j, T);
            ds[r] = p * (dp - di[r]);
        }
        for (int jj = 0; jj < 32; jj++) {
            const float *kr = Kt + jj * LDK;
#pragma unroll
            for (int r = 0; r < R; r++) {
                float dsj = __shfl_sync(0xffffffffu, ds[r], jj);
#pragma unroll
                for (int c = 0; c < D / 32; c++)
                    dq[r][c] += dsj * kr[lane + 32 * c];
            }
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++) {
        int i = i0 + warp * R + r;
        if (i >= T)
            continue;
        size_t dqr = qoff + (size_t)i * ld; /* dqkv stored in format */
#pragma unroll
        for (int c = 0; c < D / 32; c++)
            if (lane + 32 * c < HS)
                tr_stored_store(dqkv, dqr + lane + 32 * c, scale * dq[r][c], format);
    }
}

/* Shared memory of each kernel (bytes) */
template <int D> static inline size_t fwd_smem(void)
{
    return sizeof(float) * ((size_t)FA_WARPS * fa_rows<D>::R * D + 32 * (D + 1));
}
template <int D> static inline size_t bwd_smem(void)
{
    return sizeof(float) * (2 * (size_t)FA_WARPS * fa_rows<D>::R * D + 2 * 32 * (D + 1));
}

#endif
