/* cuda_conv.cu: 2-D convolution (stride 1, square kernel, symmetric zero padding) on
 * the GPU as im2col + cuBLAS, with the semantics of cpu_conv.c (kernels.h: dw and db
 * "+=", dinp "=").
 *
 * Samples are taken in chunks of n (conv_chunk: the whole batch unless the scratch
 * would pass CONV_SCRATCH_MAX_FLOATS). A chunk's receptive fields lie side by side
 * in one matrix col[cin k k, n ho wo]: row r = (c k + ky) k + kx as on the CPU,
 * sample j in columns [j ho wo, (j + 1) ho wo). With N = n ho wo:
 *   forward   y_j[cout, ho wo] = W[cout, cin k k] col_j + b, one strided-batched
 *             GEMM: W shared (batch stride 0), col_j = col + j ho wo (row stride N,
 *             batch stride ho wo), y_j = out + j cout ho wo; the bias is written
 *             first and the GEMM adds onto it (beta = 1), as cpu_conv.c's forward_one.
 *   backward  dy is gathered into yb[cout, N], col's layout, and then
 *             dW[cout, cin k k] += yb col^T   one GEMM, K = N
 *             db[cout]          += rowsum(yb) one block per channel, fixed tree
 *             dcol[cin k k, N]   = W^T yb     one GEMM, into col (the dW GEMM has
 *                                              read it: same stream, in order)
 *             dx = col2im(dcol), gathered: each input element adds its k k terms
 *             in (ky, kx) order, the CPU's order, and is written once (no atomics).
 * Chunks run in sample order and dW, db take one "+=" per chunk, so every sum has
 * an order fixed by the shapes and B: results are identical run to run.
 *
 * Scratch (device floats, owned by the caller): n (cin k k + cout) ho wo, col then
 * yb; forward uses only col. n is min(B, chunk cap), so the size asked for the
 * largest batch covers every smaller one. */
#include "cuda/cuda_common.h"
#include "cuda/cuda_ops.h"

#include <limits.h>

/* Cap on one chunk's scratch (64 MiB): LeNet's layers fit 690 and 1010 samples in
 * it, each GEMM still hundreds of thousands of columns wide. */
#define CONV_SCRATCH_MAX_FLOATS ((size_t)1 << 24)

/* Floats of scratch per sample: its columns of col and of yb. */
static size_t per_sample(const tr_conv_shape *s)
{
    size_t ckk = (size_t)s->cin * s->k * s->k, howo = (size_t)s->ho * s->wo;
    return (ckk + (size_t)s->cout) * howo;
}

/* Samples per chunk: as many as the cap allows, at least 1, at most B. */
static int conv_chunk(const tr_conv_shape *s)
{
    size_t fit = CONV_SCRATCH_MAX_FLOATS / per_sample(s);
    int B = s->B > 1 ? s->B : 1;
    return fit < 1 ? 1 : (fit < (size_t)B ? (int)fit : B);
}

/* The shape must be consistent (ho, wo from h, w, k, pad) and cuBLAS takes int
 * sizes: a sample's scratch (so N = n ho wo, which the cap bounds) must fit one. */
static void check_shape(const tr_conv_shape *s, const char *what)
{
    if (s->cin < 1 || s->cout < 1 || s->k < 1 || s->pad < 0 || s->ho < 1 || s->wo < 1 ||
        s->ho != s->h + 2 * s->pad - s->k + 1 || s->wo != s->w + 2 * s->pad - s->k + 1)
        tr_fatal(TR_EXIT_SOFTWARE,
                 "%s: inconsistent shape cin %d h %d w %d cout %d k %d pad %d ho %d wo %d", what,
                 s->cin, s->h, s->w, s->cout, s->k, s->pad, s->ho, s->wo);
    if (per_sample(s) > (size_t)INT_MAX)
        tr_fatal(TR_EXIT_SOFTWARE, "%s: %zu floats of scratch per sample is more than cuBLAS "
                 "can index", what, per_sample(s));
}

size_t tr_cuda_conv_scratch_floats(const tr_conv_shape *s)
{
    check_shape(s, "conv_scratch_floats");
    return (size_t)conv_chunk(s) * per_sample(s);
}

/* ---- the layout kernels ----------------------------------------------------------- */

/* col[r, j ho wo + oy wo + ox] = x_j[c, oy + ky - pad, ox + kx - pad], 0 in the
 * padding, for the n samples at x; one thread per element of col (writes coalesced). */
__global__ static void im2col_kernel(float *col, const float *x, tr_conv_shape s, int n)
{
    size_t howo = (size_t)s.ho * s.wo, N = (size_t)n * howo;
    TR_GRID_STRIDE(i, (size_t)s.cin * s.k * s.k * N)
    {
        size_t r = i / N, q = i % N, j = q / howo, p = q % howo;
        int kx = (int)(r % s.k), ky = (int)(r / s.k % s.k), c = (int)(r / ((size_t)s.k * s.k));
        int iy = (int)(p / s.wo) + ky - s.pad, ix = (int)(p % s.wo) + kx - s.pad;
        bool inside = iy >= 0 && iy < s.h && ix >= 0 && ix < s.w;
        col[i] = inside ? x[((j * s.cin + c) * s.h + iy) * s.w + ix] : 0.0f;
    }
}

/* dx_j[c, iy, ix] = sum over (ky, kx), in that order, of dcol[r, j ho wo + oy wo + ox]
 * with oy = iy + pad - ky, ox = ix + pad - kx inside the output: the adjoint of
 * im2col, gathered (one thread per input element, written once: "="). */
__global__ static void col2im_kernel(float *dx, const float *dcol, tr_conv_shape s, int n)
{
    size_t howo = (size_t)s.ho * s.wo, N = (size_t)n * howo;
    TR_GRID_STRIDE(i, (size_t)n * s.cin * s.h * s.w)
    {
        int ix = (int)(i % s.w), iy = (int)(i / s.w % s.h);
        size_t jc = i / ((size_t)s.h * s.w);
        int c = (int)(jc % s.cin);
        size_t j = jc / s.cin;
        const float *base = dcol + j * howo;
        float acc = 0.0f;
        for (int ky = 0; ky < s.k; ky++) {
            int oy = iy + s.pad - ky;
            if (oy < 0 || oy >= s.ho)
                continue;
            for (int kx = 0; kx < s.k; kx++) {
                int ox = ix + s.pad - kx;
                if (ox < 0 || ox >= s.wo)
                    continue;
                size_t r = ((size_t)c * s.k + ky) * s.k + kx;
                acc += base[r * N + (size_t)oy * s.wo + ox];
            }
        }
        dx[i] = acc;
    }
}

/* yb[co, j ho wo + p] = dy_j[co, p] for the n samples at dy */
__global__ static void gather_dout_kernel(float *yb, const float *dy, tr_conv_shape s, int n)
{
    size_t howo = (size_t)s.ho * s.wo, N = (size_t)n * howo;
    TR_GRID_STRIDE(i, (size_t)s.cout * N)
    {
        size_t co = i / N, q = i % N, j = q / howo, p = q % howo;
        yb[i] = dy[(j * s.cout + co) * howo + p];
    }
}

/* y_j[co, p] = b[co] for the n samples at y */
__global__ static void bias_fill_kernel(float *y, const float *b, tr_conv_shape s, int n)
{
    size_t howo = (size_t)s.ho * s.wo;
    TR_GRID_STRIDE(i, (size_t)n * s.cout * howo)
        y[i] = b[i / howo % s.cout];
}

/* db[co] += sum of yb[co, 0 .. N): one block per channel, each thread adding every
 * blockDim-th element in order, then the block tree: the order depends on N alone. */
__global__ static void bias_grad_kernel(float *db, const float *yb, size_t N)
{
    __shared__ float sh[32];
    const float *row = yb + blockIdx.x * N;
    float acc = 0.0f;
    for (size_t q = threadIdx.x; q < N; q += blockDim.x)
        acc += row[q];
    acc = tr_block_sum(acc, sh);
    if (threadIdx.x == 0)
        db[blockIdx.x] += acc;
}

/* ---- forward and backward --------------------------------------------------------- */

void tr_cuda_conv2d_forward(float *out, const float *inp, const float *w, const float *b,
                            const tr_conv_shape *s, float *scratch)
{
    if (s->B <= 0)
        return;
    check_shape(s, "conv2d_forward");
    cudaStream_t st = tr_cuda_stream();
    int ckk = s->cin * s->k * s->k, howo = s->ho * s->wo, chunk = conv_chunk(s);
    size_t in_n = (size_t)s->cin * s->h * s->w, out_n = (size_t)s->cout * howo;
    float *col = scratch;
    for (int j0 = 0; j0 < s->B; j0 += chunk) {
        int n = s->B - j0 < chunk ? s->B - j0 : chunk;
        size_t N = (size_t)n * howo;
        float *y = out + j0 * out_n;
        im2col_kernel<<<tr_cuda_grid((size_t)ckk * N), TR_CUDA_BLOCK, 0, st>>>(
            col, inp + j0 * in_n, *s, n);
        TR_CUDA_LAUNCHED();
        if (b) {
            bias_fill_kernel<<<tr_cuda_grid(n * out_n), TR_CUDA_BLOCK, 0, st>>>(y, b, *s, n);
            TR_CUDA_LAUNCHED();
        }
        /* y_j[cout, howo] = W[cout, ckk] col_j[ckk, howo] (+ the bias already there) */
        tr_cuda_gemm_strided_batched(0, 0, s->cout, howo, ckk, 1.0f, w, ckk, 0, col, (int)N,
                                     howo, b ? 1.0f : 0.0f, y, howo, (long long)out_n, n);
    }
}

void tr_cuda_conv2d_backward(float *dinp, float *dw, float *db, const float *dout,
                             const float *inp, const float *w, const tr_conv_shape *s,
                             float *scratch)
{
    if (s->B <= 0)
        return;
    check_shape(s, "conv2d_backward");
    cudaStream_t st = tr_cuda_stream();
    int ckk = s->cin * s->k * s->k, howo = s->ho * s->wo, chunk = conv_chunk(s);
    size_t in_n = (size_t)s->cin * s->h * s->w, out_n = (size_t)s->cout * howo;
    float *col = scratch, *yb = scratch + (size_t)chunk * ckk * howo;
    for (int j0 = 0; j0 < s->B; j0 += chunk) {
        int n = s->B - j0 < chunk ? s->B - j0 : chunk;
        size_t N = (size_t)n * howo;
        im2col_kernel<<<tr_cuda_grid((size_t)ckk * N), TR_CUDA_BLOCK, 0, st>>>(
            col, inp + j0 * in_n, *s, n);
        TR_CUDA_LAUNCHED();
        gather_dout_kernel<<<tr_cuda_grid((size_t)s->cout * N), TR_CUDA_BLOCK, 0, st>>>(
            yb, dout + j0 * out_n, *s, n);
        TR_CUDA_LAUNCHED();
        /* dW[cout, ckk] += yb[cout, N] col[ckk, N]^T */
        tr_cuda_gemm(0, 1, s->cout, ckk, (int)N, 1.0f, yb, (int)N, col, (int)N, 1.0f, dw, ckk);
        if (db) {
            bias_grad_kernel<<<(unsigned)s->cout, TR_CUDA_BLOCK, 0, st>>>(db, yb, N);
            TR_CUDA_LAUNCHED();
        }
        if (!dinp)
            continue;
        /* dcol[ckk, N] = W[cout, ckk]^T yb[cout, N], over col, then dx = col2im(dcol) */
        tr_cuda_gemm(1, 0, ckk, (int)N, s->cout, 1.0f, w, ckk, yb, (int)N, 0.0f, col, (int)N);
        col2im_kernel<<<tr_cuda_grid((size_t)n * in_n), TR_CUDA_BLOCK, 0, st>>>(
            dinp + j0 * in_n, col, *s, n);
        TR_CUDA_LAUNCHED();
    }
}
