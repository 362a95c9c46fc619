/* cuda_attention.cu: the core of causal multi-head self-attention on the GPU, fused
 * (the FlashAttention-2 scheme): the same function as cpu_attention.c, whose header
 * has the formulas, without ever forming the T x T scores in memory.
 *
 * Why fused: the materialised form (cuBLAS score products, a softmax kernel, the
 * probabilities saved for backward) moved B*NH*T*T floats through memory several
 * times per layer. For GPT-2 124M at 16 x 1024 that is 805 MB per tensor, and an
 * H100 profile (ncu, 2026-11-22) put the attention products, the two softmax kernels
 * and the rounding of the saved probabilities at about 70 of a step's 170 ms. The
 * fused kernels read Q, K, V (and dO) tile by tile from global memory, keep the
 * scores of one tile in registers, and save only each row's log-sum-exp.
 *
 * Forward, one block per (batch row b, head h, tile of BR query rows): each warp
 * owns R query rows, each lane one key of the current 32-key tile. Per tile: the
 * lane's score s = scale q.k, the online softmax (running max m and sum l per row,
 * the accumulator rescaled by exp(m_old - m_new)), then O += p V with the lanes
 * over the head's dimensions. At the end O /= l and lse = m + log l is saved in att.
 *
 * Backward recomputes p = exp(s - lse) and needs Dvec_i = sum_j p_ij dp_ij, which is
 * rowsum(dO_i * O_i) (O is forward's output): a small kernel writes it into datt.
 * Then two kernels, each owning what it writes so no atomics are needed and results
 * are identical run to run: dK, dV per key tile (warps over keys, lanes over the
 * queries of a 32-query tile), and dQ per query tile (warps over queries, lanes over
 * keys). With ds = p (dp - Dvec) and dp = dO.v: dV_j = sum_i p_ij dO_i, dK_j = scale
 * sum_i ds_ij q_i, dQ_i = scale sum_j ds_ij k_j.
 *
 * Precision: the kernels here are fp32 on the CUDA cores, for fp32 and fp16-mixed
 * runs. bf16-mixed runs (head sizes up to 128) take the same scheme on tensor cores
 * (cuda_attention_tc.cu), which rounds the probabilities and score gradients to bf16
 * before multiplying them.
 *
 * Head sizes up to 256: HS is padded with zeros to D = 32, 64, 128 or 256 (a
 * template argument, so the per-lane arrays have a fixed size). */
#include "cuda/cuda_attention_tc.h"
#include "cuda/cuda_common.h"
#include "cuda/cuda_ops.h"

#include "backend/lowp_math.h" /* tr_precision */

#include "backend/scalar_math.h" /* tr_expf */

#include <math.h>

static int head_size(int C, int NH, const char *what)
{
    if (NH < 1 || C % NH != 0)
        tr_fatal(TR_EXIT_SOFTWARE, "%s: C = %d is not a multiple of NH = %d", what, C, NH);
    return C / NH;
}

#define FA_WARPS 8
#define FA_THREADS (FA_WARPS * 32)
#define FA_MAX_HS 256

/* Rows (or keys) per warp for a padded head size D: R D / 32 <= 16 per-lane
 * accumulators of each kind, which keeps the wider heads from spilling registers. */
template <int D> struct fa_rows {
    static const int R = D <= 64 ? 8 : D == 128 ? 2 : 1;
};

/* dst[r][d] (row stride ldd) = src rows row0 + r, columns d < HS (row stride lds),
 * read as values of format (Q, K, V and dO are: the model does not round them in a
 * pass); zero for rows >= T and columns >= HS. The whole block takes part. */
template <int D>
__device__ static void load_tile(float *dst, int ldd, const float *src, size_t lds, int row0,
                                 int rows, int T, int HS, int format)
{
    for (int e = threadIdx.x; e < rows * D; e += FA_THREADS) {
        int r = e / D, d = e % D, i = row0 + r;
        dst[r * ldd + d] =
            (i < T && d < HS) ? tr_round_lowp(src[(size_t)i * lds + d], format) : 0.0f;
    }
}

/* The same from qkv, a tensor stored in format (lowp_math.h) whose element off is
 * the tile's row 0, column 0: the values as they are (every one is of the format). */
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
                         float scale, int format)
{
    const int R = fa_rows<D>::R, BR = FA_WARPS * R, LDK = D + 1;
    extern __shared__ float sm[];
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
__global__ static void flash_dvec_kernel(float *dvec, const float *dout, const void *out,
                                         int B, int T, int C, int NH, int HS, int format)
{
    size_t row = (size_t)blockIdx.x * (TR_CUDA_BLOCK / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= (size_t)B * T * NH)
        return;
    int h = (int)(row % NH);
    size_t bi = row / NH; /* b T + i */
    const float *a = dout + bi * C + (size_t)h * HS;
    size_t o = bi * C + (size_t)h * HS;
    float s = 0.0f;
    for (int d = lane; d < HS; d += 32) /* dO read as values of format */
        s += tr_round_lowp(a[d], format) * tr_stored_load(out, o + d, format);
    s = tr_warp_sum(s);
    if (lane == 0) {
        size_t b = bi / T, i = bi % T;
        dvec[(b * NH + h) * T + i] = s;
    }
}

/* dK, dV of one tile of BK = 8 R keys: warps over keys, lanes over 32-query tiles. */
template <int D>
__global__ static void __launch_bounds__(FA_THREADS)
    flash_dkv_kernel(void *dqkv, const float *dout, const void *qkv, const float *lse,
                     const float *dvec, int T, int C, int NH, int HS, float scale, int format)
{
    const int R = fa_rows<D>::R, BK = FA_WARPS * R, LDQ = D + 1;
    extern __shared__ float sm[];
    float *Ks = sm, *Vs = Ks + BK * D;        /* [BK][D] each */
    float *Qt = Vs + BK * D, *dOt = Qt + 32 * LDQ; /* [32][D + 1] each */
    int ntile = (T + BK - 1) / BK;
    int bh = blockIdx.x / ntile, tile = (int)(blockIdx.x % ntile); /* longest first */
    int b = bh / NH, h = bh % NH, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    size_t ld = 3 * (size_t)C;
    size_t qoff = (size_t)b * T * ld + (size_t)h * HS;
    size_t koff = qoff + C, voff = qoff + 2 * (size_t)C; /* of qkv, stored in format */
    const float *dO = dout + (size_t)b * T * C + (size_t)h * HS;
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
        load_tile<D>(dOt, LDQ, dO, C, i0, 32, T, HS, format);
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
            ds[r] = p[r] * (dp - di);
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
    flash_dq_kernel(void *dqkv, const float *dout, const void *qkv, const float *lse,
                    const float *dvec, int T, int C, int NH, int HS, float scale, int format)
{
    const int R = fa_rows<D>::R, BQ = FA_WARPS * R, LDK = D + 1;
    extern __shared__ float sm[];
    float *Qs = sm, *dOs = Qs + BQ * D;             /* [BQ][D] each */
    float *Kt = dOs + BQ * D, *Vt = Kt + 32 * LDK;  /* [32][D + 1] each */
    int ntile = (T + BQ - 1) / BQ;
    int bh = blockIdx.x / ntile;
    int tile = ntile - 1 - (int)(blockIdx.x % ntile); /* longest first */
    int b = bh / NH, h = bh % NH, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    size_t ld = 3 * (size_t)C;
    size_t qoff = (size_t)b * T * ld + (size_t)h * HS;
    size_t koff = qoff + C, voff = qoff + 2 * (size_t)C; /* of qkv, stored in format */
    const float *dO = dout + (size_t)b * T * C + (size_t)h * HS;
    int i0 = tile * BQ;
    load_stored_tile<D>(Qs, D, qkv, qoff, ld, i0, BQ, T, HS, format);
    load_tile<D>(dOs, D, dO, C, i0, BQ, T, HS, format);
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

/* Shared memory of each kernel, and the opt-in above 48 KB (once per instantiation). */
template <int D> static size_t fwd_smem(void)
{
    return sizeof(float) * ((size_t)FA_WARPS * fa_rows<D>::R * D + 32 * (D + 1));
}
template <int D> static size_t bwd_smem(void)
{
    return sizeof(float) * (2 * (size_t)FA_WARPS * fa_rows<D>::R * D + 2 * 32 * (D + 1));
}

template <int D>
static void forward_d(void *out, float *lse, const void *qkv, int B, int T, int C, int NH,
                      int HS, float scale, int format)
{
    static int opted;
    size_t smem = fwd_smem<D>();
    tr_cuda_allow_smem(flash_forward_kernel<D>, smem, &opted);
    unsigned grid = tr_cuda_tile_grid(B, NH, T, FA_WARPS * fa_rows<D>::R);
    flash_forward_kernel<D><<<grid, FA_THREADS, smem, tr_cuda_stream()>>>(out, lse, qkv, T, C,
                                                                         NH, HS, scale, format);
    TR_CUDA_LAUNCHED();
}

template <int D>
static void backward_d(void *dqkv, const float *dout, const void *qkv, const float *lse,
                       const float *dvec, int B, int T, int C, int NH, int HS, float scale,
                       int format)
{
    static int opted_kv, opted_q;
    size_t smem = bwd_smem<D>();
    unsigned grid = tr_cuda_tile_grid(B, NH, T, FA_WARPS * fa_rows<D>::R);
    tr_cuda_allow_smem(flash_dkv_kernel<D>, smem, &opted_kv);
    tr_cuda_allow_smem(flash_dq_kernel<D>, smem, &opted_q);
    flash_dkv_kernel<D><<<grid, FA_THREADS, smem, tr_cuda_stream()>>>(
        dqkv, dout, qkv, lse, dvec, T, C, NH, HS, scale, format);
    TR_CUDA_LAUNCHED();
    flash_dq_kernel<D><<<grid, FA_THREADS, smem, tr_cuda_stream()>>>(
        dqkv, dout, qkv, lse, dvec, T, C, NH, HS, scale, format);
    TR_CUDA_LAUNCHED();
}

static int padded_head(int HS, const char *what)
{
    if (HS > FA_MAX_HS)
        tr_fatal(TR_EXIT_USAGE,
                 "%s: head size %d (n_embd / n_head) is above the %d the GPU's fused attention "
                 "supports; use more heads (model.n_head) or train on the CPU",
                 what, HS, FA_MAX_HS);
    return HS <= 32 ? 32 : HS <= 64 ? 64 : HS <= 128 ? 128 : 256;
}

size_t tr_cuda_attention_state_floats(int B, int T, int NH) { return (size_t)B * NH * T; }

/* bf16-mixed runs multiply on the tensor cores (the run's format, set before the first
 * kernel, is the same in forward and backward) */
static int tensor_cores(int HS, int format)
{
    return tr_cuda_gemm_precision() == TR_PREC_BF16 && format == TR_PREC_BF16 &&
           tr_cuda_attention_tc_fits(HS);
}

/* and of the two tensor-core forms, the mma.sync one where chosen and it fits
 * (cuda_attention_tc.h); the choice holds for the run, so forward and backward agree */
static int mma_sync(int HS)
{
    return tr_cuda_attention_mma_chosen() && tr_cuda_attention_mma_fits(HS);
}

void tr_cuda_attention_forward(void *out, float *att, const void *qkv, int B, int T, int C,
                               int NH, int format)
{
    /* out is rounded to format as it is stored; the saved log-sum-exps stay fp32:
     * they are not an activation */
    int HS = head_size(C, NH, "attention_forward");
    if (B <= 0 || T <= 0)
        return;
    float scale = 1.0f / sqrtf((float)HS);
    if (tensor_cores(HS, format)) {
        if (mma_sync(HS))
            tr_cuda_attention_mma_forward(out, att, qkv, B, T, C, NH, HS, scale, format);
        else
            tr_cuda_attention_tc_forward(out, att, qkv, B, T, C, NH, HS, scale, format);
        return;
    }
    switch (padded_head(HS, "attention_forward")) {
    case 32: forward_d<32>(out, att, qkv, B, T, C, NH, HS, scale, format); break;
    case 64: forward_d<64>(out, att, qkv, B, T, C, NH, HS, scale, format); break;
    case 128: forward_d<128>(out, att, qkv, B, T, C, NH, HS, scale, format); break;
    default: forward_d<256>(out, att, qkv, B, T, C, NH, HS, scale, format); break;
    }
}

void tr_cuda_attention_backward(void *dqkv, float *datt, const float *dout, const void *out,
                                const void *qkv, const float *att, int B, int T, int C, int NH,
                                int format)
{
    int HS = head_size(C, NH, "attention_backward");
    if (B <= 0 || T <= 0)
        return;
    float scale = 1.0f / sqrtf((float)HS);
    float *dvec = datt; /* [B, NH, T] of the caller's scratch */
    size_t rows = (size_t)B * T * NH;
    const unsigned per_block = TR_CUDA_BLOCK / 32;
    flash_dvec_kernel<<<(unsigned)((rows + per_block - 1) / per_block), TR_CUDA_BLOCK, 0,
                        tr_cuda_stream()>>>(dvec, dout, out, B, T, C, NH, HS, format);
    TR_CUDA_LAUNCHED();
    if (tensor_cores(HS, format)) {
        if (mma_sync(HS))
            tr_cuda_attention_mma_backward(dqkv, dout, qkv, att, dvec, B, T, C, NH, HS, scale,
                                           format);
        else
            tr_cuda_attention_tc_backward(dqkv, dout, qkv, att, dvec, B, T, C, NH, HS, scale,
                                          format);
        return;
    }
    switch (padded_head(HS, "attention_backward")) {
    case 32: backward_d<32>(dqkv, dout, qkv, att, dvec, B, T, C, NH, HS, scale, format); break;
    case 64: backward_d<64>(dqkv, dout, qkv, att, dvec, B, T, C, NH, HS, scale, format); break;
    case 128: backward_d<128>(dqkv, dout, qkv, att, dvec, B, T, C, NH, HS, scale, format); break;
    default: backward_d<256>(dqkv, dout, qkv, att, dvec, B, T, C, NH, HS, scale, format); break;
    }
}
