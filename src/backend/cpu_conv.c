/* cpu_conv.c: 2-D convolution (stride 1, square kernel, zero padding) on the CPU:
 * the choice of path (tr_cpu_conv_path), and the im2col + GEMM path.
 *
 * Few channels (up to 16 in, 64 out: LeNet's layers) go to the direct convolution of
 * cpu_conv_direct.c, eight samples to a vector; there the GEMMs of im2col would be too
 * small for BLAS (conv1: 6 x 784 x 25 per sample), and it ran 2-4x faster. Everything
 * else takes im2col + GEMM, below.
 *
 * For a sample x[cin, h, w], im2col lays the receptive fields out as
 * col[cin k k, ho wo] (row r = (c k + ky) k + kx), so that
 *   forward   y[cout, ho wo]   = W[cout, cin k k] col + b
 *   backward  dW[cout, cin k k] += dy col^T,  db += rowsum(dy)
 *             dcol = W^T dy,  dx = col2im(dcol)
 *
 * Sample-parallel path (the training batches): threads take contiguous ranges of
 * samples and work through them in chunks of a few samples, the chunk's col matrices
 * side by side, so each product is one single-threaded cblas_sgemm with N = chunk x
 * (columns per sample) instead of one small GEMM per sample (see cpu_gemm.c for why
 * OpenBLAS never threads). The chunk path computes on the padded grid (see wide_n) so
 * that im2col and col2im are long contiguous copies and adds. The weight gradient is a
 * sum over samples, so each thread accumulates into its own partial dW/db in the
 * scratch, chunk after chunk in sample order, and the partials are added to dW in
 * thread order at the end: no atomics, no race, and the same bits every run for a
 * given thread count.
 *
 * When there are fewer samples than threads (the last batch of an epoch, a B = 1
 * evaluation), sample parallelism would idle most cores, so the samples run one after
 * another and each GEMM is split across the threads by tr_cpu_gemm instead. Tiny
 * convolutions take that path too, where tr_cpu_gemm then stays on one thread: a
 * fork/join costs microseconds on an idle node and a whole scheduler time slice on a
 * busy one, more than the work.
 *
 * Scratch: sized from omp_get_max_threads() when the model asks; the thread count
 * must not grow afterwards (tr_cpu_backend_init runs first). */
#include "backend/cpu_backend.h"

#include <cblas.h>
#include <omp.h>
#include <string.h>

/* Below this many multiply-adds the samples run serially (as in cpu_gemm.c). */
#define CONV_PAR_MIN_MACS (64.0 * 64.0 * 64.0)

/* Per-thread slices start on a 64-byte line so threads never share a cache line. */
static size_t round16(size_t n) { return (n + 15) & ~(size_t)15; }

/* Samples per GEMM on the sample-parallel path: a chunk's im2col columns sit side by
 * side, so the GEMM's N is chunk ho wo rather than ho wo (LeNet's 16x150x100 GEMM per
 * sample is too small for BLAS to reach speed), while the chunk's col stays about
 * CONV_CHUNK_COL_FLOATS (in L2 with the rest of the slot). */
#define CONV_CHUNK_COL_FLOATS (64 * 1024)
#define CONV_CHUNK_MAX 16

static int chunk_for(const tr_conv_shape *s)
{
    size_t per = (size_t)s->cin * s->k * s->k * s->ho * (s->w + 2 * s->pad);
    size_t c = per ? CONV_CHUNK_COL_FLOATS / per : 1;
    return c < 1 ? 1 : (c > CONV_CHUNK_MAX ? CONV_CHUNK_MAX : (int)c);
}

typedef struct slot_sizes {
    size_t col, yb, xp, dw, db, total; /* floats, each rounded to 16 */
} slot_sizes;

/* One thread's scratch: col[cin k k, chunk L], the chunk's output (or output gradient)
 * as yb[cout, chunk L], one padded input xp (L and xp: see wide_n), and its partial dw
 * and db. The few-samples path uses only the start of col (one sample's ho wo). */
static slot_sizes slot_for(const tr_conv_shape *s)
{
    slot_sizes z;
    size_t wide = (size_t)s->ho * (s->w + 2 * s->pad); /* see wide_n */
    size_t n = (size_t)chunk_for(s) * wide;
    z.col = round16((size_t)s->cin * s->k * s->k * n); /* >= one sample's ho wo */
    z.yb = round16((size_t)s->cout * n);
    z.xp = round16((size_t)s->cin * ((size_t)(s->h + 2 * s->pad) * (s->w + 2 * s->pad) + s->k));
    z.dw = round16((size_t)s->cout * s->cin * s->k * s->k);
    z.db = round16((size_t)s->cout);
    z.total = z.col + z.yb + z.xp + z.dw + z.db;
    return z;
}

/* Threads that take samples: never more than there are samples. */
static int sample_threads(int B)
{
    int nt = omp_get_max_threads();
    return nt < B ? nt : (B > 0 ? B : 1);
}

/* 1 when the GEMM path runs samples in parallel (per-thread partial gradients), 0
 * when it runs them serially with threaded GEMMs (few samples or little work). */
static int gemm_sample_parallel(const tr_conv_shape *s)
{
    int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
    double macs = (double)s->B * s->cout * s->cin * s->k * s->k * s->ho * s->wo;
    return nt > 1 && s->B >= nt && macs >= CONV_PAR_MIN_MACS;
}

tr_conv_path tr_cpu_conv_path(const tr_conv_shape *s)
{
    if (tr_cpu_conv_direct_ok(s))
        return TR_CONV_DIRECT;
    return gemm_sample_parallel(s) ? TR_CONV_GEMM_SAMPLES : TR_CONV_GEMM_SERIAL;
}

size_t tr_cpu_conv_scratch_floats(const tr_conv_shape *s)
{
    if (tr_cpu_conv_direct_ok(s))
        return tr_cpu_conv_direct_scratch_floats(s);
    return (size_t)sample_threads(s->B) * slot_for(s).total;
}

/* Output columns [lo, hi) whose input column ox + kx - pad lies inside [0, w). */
static void valid_cols(const tr_conv_shape *s, int kx, int *lo, int *hi)
{
    int l = s->pad - kx, h = s->w + s->pad - kx;
    l = l < 0 ? 0 : (l > s->wo ? s->wo : l);
    h = h > s->wo ? s->wo : h;
    *lo = l;
    *hi = h > l ? h : l;
}

/* Output rows [lo, hi) whose input row oy + ky - pad lies inside [0, h). */
static void valid_rows(const tr_conv_shape *s, int ky, int *lo, int *hi)
{
    int l = s->pad - ky, h = s->h + s->pad - ky;
    l = l < 0 ? 0 : (l > s->ho ? s->ho : l);
    h = h > s->ho ? s->ho : h;
    *lo = l;
    *hi = h > l ? h : l;
}

/* col rows are ld floats apart (ld = ho wo for one sample, more in a chunk). */
static void im2col(float *col, size_t ld, const float *x, const tr_conv_shape *s)
{
    int k = s->k, ho = s->ho, wo = s->wo;
    for (int c = 0; c < s->cin; c++) {
        const float *plane = x + (size_t)c * s->h * s->w;
        for (int ky = 0; ky < k; ky++) {
            int y0, y1;
            valid_rows(s, ky, &y0, &y1);
            for (int kx = 0; kx < k; kx++) {
                float *row = col + ((size_t)(c * k + ky) * k + kx) * ld;
                int lo, hi;
                valid_cols(s, kx, &lo, &hi);
                /* padding rows above and below: one zero block each */
                memset(row, 0, (size_t)y0 * wo * sizeof(float));
                memset(row + (size_t)y1 * wo, 0, (size_t)(ho - y1) * wo * sizeof(float));
                /* inside: short runs (wo is 10 to 30 here), so plain loops rather than
                 * a library call each */
                int shift = kx - s->pad;
                for (int oy = y0; oy < y1; oy++) {
                    float *r = row + (size_t)oy * wo;
                    const float *src = plane + (size_t)(oy + ky - s->pad) * s->w;
                    for (int ox = 0; ox < lo; ox++)
                        r[ox] = 0.0f;
                    for (int ox = lo; ox < hi; ox++)
                        r[ox] = src[ox + shift];
                    for (int ox = hi; ox < wo; ox++)
                        r[ox] = 0.0f;
                }
            }
        }
    }
}

/* dx = col2im(col): the adjoint of im2col; overlapping windows add up. */
static void col2im(float *dx, const float *col, size_t ld, const tr_conv_shape *s)
{
    int k = s->k, ho = s->ho, wo = s->wo;
    memset(dx, 0, (size_t)s->cin * s->h * s->w * sizeof(float));
    for (int c = 0; c < s->cin; c++) {
        float *plane = dx + (size_t)c * s->h * s->w;
        for (int ky = 0; ky < k; ky++) {
            for (int kx = 0; kx < k; kx++) {
                const float *row = col + ((size_t)(c * k + ky) * k + kx) * ld;
                int lo, hi;
                valid_cols(s, kx, &lo, &hi);
                for (int oy = 0; oy < ho; oy++) {
                    int iy = oy + ky - s->pad;
                    if (iy < 0 || iy >= s->h)
                        continue;
                    const float *r = row + (size_t)oy * wo + lo;
                    float *d = plane + (size_t)iy * s->w + (lo + kx - s->pad);
                    for (int i = 0; i < hi - lo; i++)
                        d[i] += r[i];
                }
            }
        }
    }
}

/* C = op(A) op(B) + beta C: split over the threads (few-samples path), or one
 * single-threaded BLAS call from inside the sample-parallel region. */
static void conv_gemm(int threaded, int ta, int tb, int M, int N, int K, const float *A,
                      int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    if (threaded)
        tr_cpu_gemm(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
    else
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
                    tb ? CblasTrans : CblasNoTrans, M, N, K, 1.0f, A, lda, B, ldb, beta, C,
                    ldc);
}

/* A 1x1 unpadded convolution's col is the input itself. */
static int col_is_input(const tr_conv_shape *s) { return s->k == 1 && s->pad == 0; }

/* y[cout, ho wo] = W col + b for one sample; threaded GEMM only on the few-samples path. */
static void forward_one(float *y, const float *x, const float *w, const float *b,
                        const tr_conv_shape *s, float *col, int threaded_gemm)
{
    int ckk = s->cin * s->k * s->k, howo = s->ho * s->wo;
    const float *c = x;
    if (!col_is_input(s)) {
        im2col(col, (size_t)howo, x, s);
        c = col;
    }
    if (b)
        for (int co = 0; co < s->cout; co++)
            for (int i = 0; i < howo; i++)
                y[(size_t)co * howo + i] = b[co];
    conv_gemm(threaded_gemm, 0, 0, s->cout, howo, ckk, w, ckk, c, howo, b ? 1.0f : 0.0f, y,
              howo);
}

/* The chunked path works on the padded grid: a sample's input is copied into a zero
 * border, xp[cin, hp, wp] (hp = h + 2 pad, wp = w + 2 pad), and the output is computed
 * for every column of it, ho x wp per sample, of which columns wo .. wp-1 are garbage
 * that is dropped (forward) or given a zero gradient (backward). In exchange, the
 * im2col row of (c, ky, kx) is one contiguous run, xp_c[ky wp + kx ..][0 .. ho wp), a
 * single memcpy instead of ho short copies with edge tests, and col2im is one long
 * vector add per row: with wo = 10 to 28 the short copies cost more than the GEMM. */
static size_t wide_n(const tr_conv_shape *s) { return (size_t)s->ho * (s->w + 2 * s->pad); }

/* Floats of one padded channel, with k - 1 zeros after it for the last row's reads. */
static size_t pad_plane(const tr_conv_shape *s)
{
    return (size_t)(s->h + 2 * s->pad) * (s->w + 2 * s->pad) + s->k;
}

/* xp[cin, pad_plane] = x[cin, h, w] inside a zero border */
static void pad_input(float *xp, const float *x, const tr_conv_shape *s)
{
    int wp = s->w + 2 * s->pad;
    size_t pp = pad_plane(s);
    memset(xp, 0, (size_t)s->cin * pp * sizeof(float));
    for (int c = 0; c < s->cin; c++)
        for (int y = 0; y < s->h; y++)
            memcpy(xp + c * pp + (size_t)(y + s->pad) * wp + s->pad,
                   x + ((size_t)c * s->h + y) * s->w, (size_t)s->w * sizeof(float));
}

/* col rows (ld apart) for one sample from its padded input */
static void im2col_wide(float *col, size_t ld, const float *xp, const tr_conv_shape *s)
{
    int k = s->k, wp = s->w + 2 * s->pad;
    size_t L = wide_n(s), pp = pad_plane(s);
    for (int c = 0; c < s->cin; c++)
        for (int ky = 0; ky < k; ky++)
            for (int kx = 0; kx < k; kx++)
                memcpy(col + ((size_t)(c * k + ky) * k + kx) * ld,
                       xp + c * pp + (size_t)ky * wp + kx, L * sizeof(float));
}

/* dx = col2im(dcol) for one sample via the padded grid (xp is scratch). dcol's garbage
 * columns are W^T 0 = 0, so adding them changes nothing. */
static void col2im_wide(float *dx, const float *dcol, size_t ld, float *xp,
                        const tr_conv_shape *s)
{
    int k = s->k, wp = s->w + 2 * s->pad;
    size_t L = wide_n(s), pp = pad_plane(s);
    memset(xp, 0, (size_t)s->cin * pp * sizeof(float));
    for (int c = 0; c < s->cin; c++)
        for (int ky = 0; ky < k; ky++)
            for (int kx = 0; kx < k; kx++) {
                const float *r = dcol + ((size_t)(c * k + ky) * k + kx) * ld;
                float *d = xp + c * pp + (size_t)ky * wp + kx;
                for (size_t i = 0; i < L; i++)
                    d[i] += r[i];
            }
    for (int c = 0; c < s->cin; c++)
        for (int y = 0; y < s->h; y++)
            memcpy(dx + ((size_t)c * s->h + y) * s->w,
                   xp + c * pp + (size_t)(y + s->pad) * wp + s->pad,
                   (size_t)s->w * sizeof(float));
}

/* Slot views for the chunked path. */
typedef struct chunk_bufs {
    float *col, *yb, *xp;
} chunk_bufs;

static chunk_bufs chunk_views(float *slot, const tr_conv_shape *s)
{
    slot_sizes z = slot_for(s);
    chunk_bufs v = {slot, slot + z.col, slot + z.col + z.yb};
    return v;
}

/* col[cin k k, n L] for samples x[0 .. n) */
static void im2col_chunk(chunk_bufs v, const float *x, const tr_conv_shape *s, int n)
{
    size_t in_n = (size_t)s->cin * s->h * s->w, L = wide_n(s);
    for (int j = 0; j < n; j++) {
        pad_input(v.xp, x + j * in_n, s);
        im2col_wide(v.col + j * L, (size_t)n * L, v.xp, s);
    }
}

/* n samples (n <= chunk_for(s)) in one GEMM, on one thread:
 * yb[cout, n L] = W col[cin k k, n L], then y = yb + b, valid columns only, to NCHW. */
static void forward_chunk(float *y, const float *x, const float *w, const float *b,
                          const tr_conv_shape *s, int n, float *slot)
{
    chunk_bufs v = chunk_views(slot, s);
    int ckk = s->cin * s->k * s->k, howo = s->ho * s->wo, wp = s->w + 2 * s->pad;
    size_t L = wide_n(s), N = (size_t)n * L, out_n = (size_t)s->cout * howo;
    im2col_chunk(v, x, s, n);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s->cout, (int)N, ckk, 1.0f, w, ckk,
                v.col, (int)N, 0.0f, v.yb, (int)N);
    for (int j = 0; j < n; j++)
        for (int co = 0; co < s->cout; co++) {
            const float *r = v.yb + co * N + j * L;
            float *d = y + j * out_n + (size_t)co * howo;
            float bc = b ? b[co] : 0.0f;
            for (int oy = 0; oy < s->ho; oy++)
                for (int ox = 0; ox < s->wo; ox++)
                    d[oy * s->wo + ox] = r[(size_t)oy * wp + ox] + bc;
        }
}

void tr_cpu_conv2d_forward(float *out, const float *inp, const float *w, const float *b,
                           const tr_conv_shape *s, float *scratch)
{
    size_t in_n = (size_t)s->cin * s->h * s->w, out_n = (size_t)s->cout * s->ho * s->wo;
    size_t slot = slot_for(s).total;
    int chunk = chunk_for(s);
    if (tr_cpu_conv_direct_ok(s)) {
        tr_cpu_conv_direct_forward(out, inp, w, b, s, scratch);
        return;
    }
    if (!gemm_sample_parallel(s)) {
        for (int i = 0; i < s->B; i++)
            forward_one(out + i * out_n, inp + i * in_n, w, b, s, scratch, 1);
        return;
    }
#pragma omp parallel num_threads(sample_threads(s->B))
    {
        int nth = omp_get_num_threads(), t = omp_get_thread_num();
        int b0 = (int)((long)s->B * t / nth), b1 = (int)((long)s->B * (t + 1) / nth);
        float *col = scratch + (size_t)t * slot;
        for (int i = b0; i < b1; i += chunk)
            forward_chunk(out + i * out_n, inp + i * in_n, w, b, s,
                          b1 - i < chunk ? b1 - i : chunk, col);
    }
}

/* Sum of n floats in eight interleaved lanes, added up in a fixed tree: the
 * compiler may vectorise it (one running sum could not be reordered), and the
 * order, hence the result, never changes. */
static float row_sum(const float *r, int n)
{
    float a[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            a[j] += r[i + j];
    for (int j = 0; i < n; i++, j++)
        a[j] += r[i];
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

/* One sample's backward: dw += dy col^T, db += rowsum(dy), dx = col2im(W^T dy). */
static void backward_one(float *dx, float *dw, float *db, const float *dy, const float *x,
                         const float *w, const tr_conv_shape *s, float *col, int threaded_gemm)
{
    int ckk = s->cin * s->k * s->k, howo = s->ho * s->wo;
    const float *c = x;
    if (!col_is_input(s)) {
        im2col(col, (size_t)howo, x, s);
        c = col;
    }
    conv_gemm(threaded_gemm, 0, 1, s->cout, ckk, howo, dy, howo, c, howo, 1.0f, dw, ckk);
    if (db)
        for (int co = 0; co < s->cout; co++)
            db[co] += row_sum(dy + (size_t)co * howo, howo);
    if (!dx)
        return;
    /* dcol = W^T dy; with a 1x1 unpadded kernel dcol is dx itself */
    float *dcol = col_is_input(s) ? dx : col;
    conv_gemm(threaded_gemm, 1, 0, ckk, howo, s->cout, w, ckk, dy, howo, 0.0f, dcol, howo);
    if (dcol != dx)
        col2im(dx, dcol, (size_t)howo, s);
}

/* The backward of forward_chunk, on one thread: dy laid out on the wide grid as
 * yb[cout, n L] with zeros in the garbage columns, dw += yb col^T and db += rowsum(yb)
 * over the whole chunk, dcol = W^T yb (into col, which the dw GEMM no longer needs),
 * dx = col2im(dcol) per sample. */
static void backward_chunk(float *dx, float *dw, float *db, const float *dy, const float *x,
                           const float *w, const tr_conv_shape *s, int n, float *slot)
{
    chunk_bufs v = chunk_views(slot, s);
    int ckk = s->cin * s->k * s->k, howo = s->ho * s->wo, wp = s->w + 2 * s->pad;
    size_t L = wide_n(s), N = (size_t)n * L;
    size_t in_n = (size_t)s->cin * s->h * s->w, out_n = (size_t)s->cout * howo;
    im2col_chunk(v, x, s, n);
    for (int j = 0; j < n; j++)
        for (int co = 0; co < s->cout; co++) {
            float *d = v.yb + co * N + j * L;
            const float *r = dy + j * out_n + (size_t)co * howo;
            for (int oy = 0; oy < s->ho; oy++) {
                float *dr = d + (size_t)oy * wp;
                memcpy(dr, r + oy * s->wo, (size_t)s->wo * sizeof(float));
                for (int ox = s->wo; ox < wp; ox++)
                    dr[ox] = 0.0f;
            }
        }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s->cout, ckk, (int)N, 1.0f, v.yb,
                (int)N, v.col, (int)N, 1.0f, dw, ckk);
    if (db)
        for (int co = 0; co < s->cout; co++)
            db[co] += row_sum(v.yb + co * N, (int)N);
    if (!dx)
        return;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, ckk, (int)N, s->cout, 1.0f, w, ckk,
                v.yb, (int)N, 0.0f, v.col, (int)N);
    for (int j = 0; j < n; j++)
        col2im_wide(dx + j * in_n, v.col + j * L, N, v.xp, s);
}

/* dst[i] += src_t[i] for t = 0 .. nth-1 in that order, over this thread's share of i:
 * the order of the additions is fixed, so the sum is the same whatever ran first. */
static void add_partials(float *dst, const float *first, size_t stride, int nth, size_t n,
                         int t)
{
    size_t lo = n * t / nth, hi = n * (t + 1) / nth;
    for (int p = 0; p < nth; p++) {
        const float *src = first + (size_t)p * stride;
        for (size_t i = lo; i < hi; i++)
            dst[i] += src[i];
    }
}

void tr_cpu_conv2d_backward(float *dinp, float *dw, float *db, const float *dout,
                            const float *inp, const float *w, const tr_conv_shape *s,
                            float *scratch)
{
    size_t in_n = (size_t)s->cin * s->h * s->w, out_n = (size_t)s->cout * s->ho * s->wo;
    size_t dw_n = (size_t)s->cout * s->cin * s->k * s->k;
    slot_sizes z = slot_for(s);
    if (tr_cpu_conv_direct_ok(s)) {
        tr_cpu_conv_direct_backward(dinp, dw, db, dout, inp, w, s, scratch);
        return;
    }
    if (!gemm_sample_parallel(s)) {
        /* few samples: straight into dw/db, in sample order, GEMMs split over threads */
        for (int i = 0; i < s->B; i++)
            backward_one(dinp ? dinp + i * in_n : NULL, dw, db, dout + i * out_n,
                         inp + i * in_n, w, s, scratch, 1);
        return;
    }
#pragma omp parallel num_threads(sample_threads(s->B))
    {
        int nth = omp_get_num_threads(), t = omp_get_thread_num();
        int b0 = (int)((long)s->B * t / nth), b1 = (int)((long)s->B * (t + 1) / nth);
        float *col = scratch + (size_t)t * z.total;
        float *pdw = col + z.col + z.yb + z.xp, *pdb = pdw + z.dw;
        int chunk = chunk_for(s);
        memset(pdw, 0, (z.dw + z.db) * sizeof(float));
        for (int i = b0; i < b1; i += chunk)
            backward_chunk(dinp ? dinp + i * in_n : NULL, pdw, db ? pdb : NULL,
                           dout + i * out_n, inp + i * in_n, w, s,
                           b1 - i < chunk ? b1 - i : chunk, col);
#pragma omp barrier
        size_t pdw_at = z.col + z.yb + z.xp;
        add_partials(dw, scratch + pdw_at, z.total, nth, dw_n, t);
        if (db)
            add_partials(db, scratch + pdw_at + z.dw, z.total, nth, (size_t)s->cout, t);
    }
}
