/* cpu_conv_direct.c: direct 2-D convolution for small channel counts (LeNet's), with
 * eight samples in the lanes of each vector.
 *
 * Why not im2col + GEMM here: with 1 to 16 channels the GEMMs are tiny (LeNet's
 * conv1 forward is 6 x 784 x 25 per sample), so BLAS spends its time packing and in
 * edge cases, and im2col moves 25 floats per multiply-add column. A direct loop with
 * the samples in the lanes wastes no lane on any shape (an output row of 10 or 28
 * does not fill vectors along x, and 6 channels do not fill them along c) and keeps a
 * register tile of outputs while it runs over the taps.
 *
 * Layout: a group of up to 8 samples is packed into a "lane image" [c][y][x][8]
 * (sample s in lane s, unused lanes zero), with a zero border where the convolution
 * pads. Per group:
 *   forward   y8[co][oy][ox] = b[co] + sum_{ci,ky,kx} w[co][ci][ky][kx] x8[ci][oy+ky][ox+kx]
 *   backward  dw[co][ci][ky][kx] += sum over lanes, oy, ox of dy8[co][oy][ox] x8[ci][oy+ky][ox+kx]
 *             dx8[ci][oy+ky][ox+kx] += sum_co w[co][ci][ky][kx] dy8[co][oy][ox]
 *                   (W^T dy and col2im in one pass: see dx_lanes)
 * then the output lanes are unpacked to [B, C, H, W] by 8 x 8 transposes. Each loop
 * keeps a tile of up to 12 sums in registers (see the *_tile functions).
 *
 * Determinism: every output element is one lane's sum in a fixed order of taps, the
 * same whichever thread or group computes it. The parameter gradients are summed per
 * group of 8 samples (lanes, then a fixed lane tree), the group sums stored apart and
 * added pairwise at the end (tree_sum), one element per thread: the result does not
 * depend on the number of threads at all, only on the batch.
 *
 * Threads: one parallel region per call, groups dealt out statically; each thread
 * has its own slot of scratch for its group's lane images. */
#include "backend/cpu_backend.h"
#include "backend/cpu_simd.h"
#include "core/error.h"

#include <omp.h>
#include <string.h>

#define LANES 8
/* Register tile: up to CO_TILE output channels x OX_TILE output columns, at most 12
 * accumulators (16 vector registers, the others hold the input and weights). */
#define CO_TILE 2
#define OX_TILE 6

/* Where the direct path applies (cpu_conv.c asks): few channels, where GEMMs are too
 * small for BLAS to pay off, and a thread's lane images within about an L2 cache. */
#define DIRECT_MAX_CIN 16
#define DIRECT_MAX_COUT 64
#define DIRECT_MAX_SLOT_FLOATS ((size_t)256 * 1024)

static size_t round16(size_t n) { return (n + 15) & ~(size_t)15; }

/* ---- geometry and scratch --------------------------------------------------------- */

typedef struct layout {
    size_t x8, d8, o8, slot; /* one thread's lane images: input, output gradient, output
                                (forward) or input gradient (backward) */
    size_t part, total;      /* shared: the per-group gradient sums */
    size_t nw;               /* weights: cout cin k k */
    int groups, slots;
} layout;

static layout layout_for(const tr_conv_shape *s)
{
    layout L;
    int nt = omp_get_max_threads();
    L.nw = (size_t)s->cout * s->cin * s->k * s->k;
    L.groups = (s->B + LANES - 1) / LANES;
    L.slots = nt < L.groups ? nt : (L.groups > 0 ? L.groups : 1);
    L.x8 = round16((size_t)s->cin * (s->h + 2 * s->pad) * (s->w + 2 * s->pad) * LANES);
    L.d8 = round16((size_t)s->cout * s->ho * s->wo * LANES);
    L.o8 = L.x8 > L.d8 ? L.x8 : L.d8; /* the output, or the padded input's gradient */
    L.slot = L.x8 + L.d8 + L.o8;
    L.part = round16((size_t)L.groups * (L.nw + s->cout));
    L.total = L.part + (size_t)L.slots * L.slot;
    return L;
}

int tr_cpu_conv_direct_ok(const tr_conv_shape *s)
{
    if (s->pad > s->k - 1 || s->cin > DIRECT_MAX_CIN || s->cout > DIRECT_MAX_COUT)
        return 0;
    tr_conv_shape one = *s;
    one.B = 1;
    return layout_for(&one).slot <= DIRECT_MAX_SLOT_FLOATS;
}

size_t tr_cpu_conv_direct_scratch_floats(const tr_conv_shape *s) { return layout_for(s).total; }

/* Threads for a call: never more than groups, and one inside a parallel region. */
static int threads_for(int groups)
{
    int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
    return nt < groups ? nt : (groups > 0 ? groups : 1);
}

/* ---- packing samples into lanes and back ----------------------------------------- */

/* dst = samples src + s stride (s < n <= 8, each [C, H, W]) in lanes, inside a zero
 * border of pad pixels: dst is [C][H + 2 pad][W + 2 pad][8], lanes n..7 zero. */
static void pack_lanes(float *dst, const float *src, size_t stride, int n, int C, int H, int W,
                       int pad)
{
    size_t hh = (size_t)H + 2 * pad, ww = (size_t)W + 2 * pad, L = LANES;
    if (pad > 0)
        for (int c = 0; c < C; c++) {
            float *pl = dst + c * hh * ww * L;
            memset(pl, 0, pad * ww * L * sizeof(float));
            memset(pl + (pad + H) * ww * L, 0, pad * ww * L * sizeof(float));
            for (size_t y = pad; y < (size_t)pad + H; y++) {
                memset(pl + y * ww * L, 0, pad * L * sizeof(float));
                memset(pl + (y * ww + pad + W) * L, 0, pad * L * sizeof(float));
            }
        }
    size_t np = (size_t)C * H * W, p = 0;
    int c = 0, y = 0, x = 0; /* coordinates of pixel p */
    for (; p + LANES <= np; p += LANES) {
        tr_v8 r[LANES];
        for (int i = 0; i < LANES; i++)
            r[i] = i < n ? v8_load(src + i * stride + p) : v8_zero();
        v8_transpose(r); /* r[j]: pixel p + j of every sample */
        for (int j = 0; j < LANES; j++) {
            v8_store(dst + ((c * hh + y + pad) * ww + x + pad) * L, r[j]);
            if (++x == W) {
                x = 0;
                if (++y == H)
                    y = 0, c++;
            }
        }
    }
    for (; p < np; p++) {
        float *d = dst + ((c * hh + y + pad) * ww + x + pad) * L;
        for (int i = 0; i < LANES; i++)
            d[i] = i < n ? src[i * stride + p] : 0.0f;
        if (++x == W) {
            x = 0;
            if (++y == H)
                y = 0, c++;
        }
    }
}

/* The inverse of pack_lanes: dst + s stride = lane s of src (s < n), each [C, H, W],
 * from the lane image src [C][H + 2 pad][W + 2 pad][8] without its border. */
static void unpack_lanes(float *dst, size_t stride, const float *src, int n, int C, int H,
                         int W, int pad)
{
    size_t hh = (size_t)H + 2 * pad, ww = (size_t)W + 2 * pad, L = LANES;
    size_t np = (size_t)C * H * W, p = 0;
    int c = 0, y = 0, x = 0; /* coordinates of pixel p */
    for (; p + LANES <= np; p += LANES) {
        tr_v8 r[LANES];
        for (int j = 0; j < LANES; j++) {
            r[j] = v8_load(src + ((c * hh + y + pad) * ww + x + pad) * L);
            if (++x == W) {
                x = 0;
                if (++y == H)
                    y = 0, c++;
            }
        }
        v8_transpose(r); /* r[s]: sample s at pixels p .. p + 7 */
        for (int i = 0; i < n; i++)
            v8_store(dst + i * stride + p, r[i]);
    }
    for (; p < np; p++) {
        const float *q = src + ((c * hh + y + pad) * ww + x + pad) * L;
        for (int i = 0; i < n; i++)
            dst[i * stride + p] = q[i];
        if (++x == W) {
            x = 0;
            if (++y == H)
                y = 0, c++;
        }
    }
}

/* ---- the forward loop ------------------------------------------------------------- */

/* out8[co][oy][ox] (dense, cout x ho x wo lanes) = bias[co] +
 *     sum over ci, ky, kx of w[co][ci][ky][kx] in8[ci][oy + ky][ox + kx];
 * in8 is cin x hh x ww lanes of which only rows [r0, r1) may be nonzero: taps on the
 * other rows are skipped. */
typedef struct lconv {
    const float *in;
    int hh, ww, r0, r1;
    const float *w, *bias; /* bias may be NULL: zero */
    int cin, cout, k;
    float *out;
    int ho, wo;
} lconv;

/* One register tile: channels co .. co + NCO - 1, row oy, columns ox .. ox + N - 1, taps
 * on input rows ky0 .. ky1 - 1. NCO and N are constants where this is inlined; the
 * kernel size is not on purpose: with the kx loop unrolled, GCC reuses each loaded x
 * for the next kx, which needs more registers than there are (measured: 30 % slower). */
TR_INLINE void fwd_tile(const lconv *a, int co, int oy, int ox, int ky0, int ky1, int NCO, int N)
{
    tr_v8 acc[CO_TILE][OX_TILE];
    for (int c = 0; c < NCO; c++)
        for (int j = 0; j < N; j++)
            acc[c][j] = v8_set1(a->bias ? a->bias[co + c] : 0.0f);
    int k = a->k;
    size_t wco = (size_t)a->cin * k * k, plane = (size_t)a->hh * a->ww * LANES;
    const float *w = a->w + co * wco;
    for (int ci = 0; ci < a->cin; ci++)
        for (int ky = ky0; ky < ky1; ky++) {
            const float *row = a->in + ci * plane + ((size_t)(oy + ky) * a->ww + ox) * LANES;
            const float *wr = w + (ci * k + ky) * k;
            for (int kx = 0; kx < k; kx++) {
                tr_v8 wv[CO_TILE];
                for (int c = 0; c < NCO; c++)
                    wv[c] = v8_set1(wr[c * wco + kx]);
                for (int j = 0; j < N; j++) {
                    tr_v8 xv = v8_reg(v8_load(row + (kx + j) * LANES));
                    for (int c = 0; c < NCO; c++)
                        acc[c][j] = v8_fma(wv[c], xv, acc[c][j]);
                }
            }
        }
    size_t oplane = (size_t)a->ho * a->wo * LANES;
    float *o = a->out + co * oplane + ((size_t)oy * a->wo + ox) * LANES;
    for (int c = 0; c < NCO; c++)
        for (int j = 0; j < N; j++)
            v8_store(o + c * oplane + j * LANES, acc[c][j]);
}

#define FWD_CASE(n)                                                                         \
    case n:                                                                                 \
        if (nco == 2)                                                                       \
            fwd_tile(a, co, oy, ox, ky0, ky1, 2, n);                                        \
        else                                                                                \
            fwd_tile(a, co, oy, ox, ky0, ky1, 1, n);                                        \
        break;

/* A tile shape no case of a dispatch covers: a bug here, never bad input. */
static void bad_tile(const char *what, int a, int b)
{
    tr_fatal(TR_EXIT_SOFTWARE, "conv direct: no %s tile for %d x %d", what, a, b);
}

/* Width of the next of `blocks` tiles over `rest` columns: as even as possible. */
static int tile_width(int rest, int blocks) { return (rest + blocks - 1) / blocks; }

/* GCC's predictive commoning would carry the loads of x from one kx to the next,
 * which needs more registers than there are: the tile spills (measured: 15 % slower). */
#define NO_COMMONING __attribute__((optimize("no-predictive-commoning")))

NO_COMMONING static void conv_lanes(const lconv *a)
{
    int blocks = (a->wo + OX_TILE - 1) / OX_TILE;
    for (int co = 0; co < a->cout; co += CO_TILE) {
        int nco = a->cout - co < CO_TILE ? a->cout - co : CO_TILE;
        for (int oy = 0; oy < a->ho; oy++) {
            int ky0 = a->r0 - oy > 0 ? a->r0 - oy : 0;
            int ky1 = a->r1 - oy < a->k ? a->r1 - oy : a->k;
            ky1 = ky1 > ky0 ? ky1 : ky0;
            for (int b = 0, ox = 0; b < blocks; b++) {
                int n = tile_width(a->wo - ox, blocks - b);
                switch (n) {
                    FWD_CASE(1)
                    FWD_CASE(2)
                    FWD_CASE(3)
                    FWD_CASE(4)
                    FWD_CASE(5)
                    FWD_CASE(6)
                default:
                    bad_tile("forward", nco, n);
                }
                ox += n;
            }
        }
    }
}

/* ---- the weight gradient ---------------------------------------------------------- */

/* One group's dw (lane sums) into part[cout][cin][k][k]: x8 is the padded input
 * (rows [xr0, xr1) nonzero), dy8 the output gradient (dense, cout x ho x wo). */
typedef struct lgrad {
    const float *x;
    int xhh, xww, xr0, xr1;
    const float *dy;
    int cin, cout, k, ho, wo;
    float *part;
} lgrad;

/* Tile: channels co .. co + NCO - 1, input channel ci, kernel row ky, columns kx0 ..
 * kx0 + N - 1; sums over the output rows whose input row has data. */
TR_INLINE void dw_tile(const lgrad *a, int co, int ci, int ky, int kx0, int NCO, int N)
{
    tr_v8 acc[CO_TILE][OX_TILE];
    for (int c = 0; c < NCO; c++)
        for (int j = 0; j < N; j++)
            acc[c][j] = v8_zero();
    int oy0 = a->xr0 - ky > 0 ? a->xr0 - ky : 0, oy1 = a->xr1 - ky < a->ho ? a->xr1 - ky : a->ho;
    size_t dplane = (size_t)a->ho * a->wo * LANES;
    for (int oy = oy0; oy < oy1; oy++) {
        const float *xr = a->x + (((size_t)ci * a->xhh + oy + ky) * a->xww + kx0) * LANES;
        const float *d = a->dy + co * dplane + (size_t)oy * a->wo * LANES;
        for (int ox = 0; ox < a->wo; ox++) {
            tr_v8 g[CO_TILE];
            for (int c = 0; c < NCO; c++)
                g[c] = v8_load(d + c * dplane + ox * LANES);
            for (int j = 0; j < N; j++) {
                tr_v8 xv = v8_reg(v8_load(xr + (ox + j) * LANES));
                for (int c = 0; c < NCO; c++)
                    acc[c][j] = v8_fma(g[c], xv, acc[c][j]);
            }
        }
    }
    size_t kk = (size_t)a->k * a->k;
    float *p = a->part + ((size_t)co * a->cin + ci) * kk + (size_t)ky * a->k + kx0;
    for (int c = 0; c < NCO; c++)
        for (int j = 0; j < N; j++)
            p[c * a->cin * kk + j] = v8_hsum(acc[c][j]);
}

#define DW_CASE(n)                                                                          \
    case n:                                                                                 \
        if (nco == 2)                                                                       \
            dw_tile(a, co, ci, ky, kx, 2, n);                                               \
        else                                                                                \
            dw_tile(a, co, ci, ky, kx, 1, n);                                               \
        break;

NO_COMMONING static void dw_lanes(const lgrad *a)
{
    int blocks = (a->k + OX_TILE - 1) / OX_TILE;
    for (int co = 0; co < a->cout; co += CO_TILE) {
        int nco = a->cout - co < CO_TILE ? a->cout - co : CO_TILE;
        for (int ci = 0; ci < a->cin; ci++)
            for (int ky = 0; ky < a->k; ky++)
                for (int b = 0, kx = 0; b < blocks; b++) {
                    int n = tile_width(a->k - kx, blocks - b);
                    switch (n) {
                        DW_CASE(1)
                        DW_CASE(2)
                        DW_CASE(3)
                        DW_CASE(4)
                        DW_CASE(5)
                        DW_CASE(6)
                    default:
                        bad_tile("dw", nco, n);
                    }
                    kx += n;
                }
    }
}

/* db part: per channel, the lanes' sums over the output pixels, then the lane tree */
static void db_lanes(float *part, const lgrad *a)
{
    size_t dplane = (size_t)a->ho * a->wo;
    for (int co = 0; co < a->cout; co++) {
        const float *d = a->dy + co * dplane * LANES;
        tr_v8 acc = v8_zero();
        for (size_t i = 0; i < dplane; i++)
            acc += v8_load(d + i * LANES);
        part[co] = v8_hsum(acc);
    }
}

/* ---- the input gradient ----------------------------------------------------------- */

/* dx8 += col2im(W^T dy8), the two fused: for a block of kernel taps (ci, ky, kx0 ..
 * kx0 + NK - 1) and NT output pixels (oy, ox ..), the sums over co stay in registers,
 * then go straight to the input pixels they belong to, (oy + ky, ox + kx + j) of the
 * padded dx8 (taps kx and pixels j with the same kx + j add up in increasing j).
 * Unlike running the forward loop on a zero-padded dy8 with flipped weights, no
 * multiply-add falls on padding: at LeNet's conv2 that would be half of them. */
typedef struct ldx {
    const float *dy; /* output gradient lanes, dense: cout x ho x wo */
    const float *w;  /* [cout][cin][k][k] */
    int cin, cout, k, ho, wo;
    float *dx; /* input gradient lanes inside a border of pad: cin x hh x ww */
    int hh, ww;
} ldx;

TR_INLINE void dx_tile(const ldx *a, int ci, int ky, int kx0, int oy, int ox, int NK, int NT)
{
    tr_v8 acc[OX_TILE][OX_TILE]; /* [kx][j], NK NT <= 12 */
    for (int t = 0; t < NK; t++)
        for (int j = 0; j < NT; j++)
            acc[t][j] = v8_zero();
    size_t wco = (size_t)a->cin * a->k * a->k, dplane = (size_t)a->ho * a->wo * LANES;
    const float *wr = a->w + ((size_t)ci * a->k + ky) * a->k + kx0;
    const float *d = a->dy + ((size_t)oy * a->wo + ox) * LANES;
    for (int co = 0; co < a->cout; co++) {
        tr_v8 g[OX_TILE];
        for (int j = 0; j < NT; j++)
            g[j] = v8_reg(v8_load(d + co * dplane + j * LANES));
        for (int t = 0; t < NK; t++) {
            tr_v8 wv = v8_set1(wr[co * wco + t]);
            for (int j = 0; j < NT; j++)
                acc[t][j] = v8_fma(wv, g[j], acc[t][j]);
        }
    }
    float *x = a->dx + (((size_t)ci * a->hh + oy + ky) * a->ww + ox + kx0) * LANES;
    for (int c = 0; c < NK + NT - 1; c++) {
        tr_v8 sum = v8_load(x + c * LANES);
        for (int j = 0; j < NT; j++)
            if (c - j >= 0 && c - j < NK)
                sum += acc[c - j][j];
        v8_store(x + c * LANES, sum);
    }
}

/* Pixels per tile for NK taps: NK NT <= 12 accumulators. */
static int dx_pixels(int nk) { return nk <= 2 ? OX_TILE : 12 / nk; }

/* All taps for pixels ox .. ox + NT - 1 of row oy when one block of NK = k taps covers a
 * kernel row: NK and NT constant where inlined, one dispatch per pixel tile. */
TR_INLINE void dx_pixel_tile(const ldx *a, int oy, int ox, int NK, int NT)
{
    for (int ci = 0; ci < a->cin; ci++)
        for (int ky = 0; ky < a->k; ky++)
            dx_tile(a, ci, ky, 0, oy, ox, NK, NT);
}

#define DX_CASE(nk, nt)                                                                     \
    case (nk) * 8 + (nt):                                                                   \
        dx_pixel_tile(a, oy, ox, nk, nt);                                                   \
        break;
#define DX_CASES_2(nk) DX_CASE(nk, 1) DX_CASE(nk, 2)
#define DX_CASES_3(nk) DX_CASES_2(nk) DX_CASE(nk, 3)
#define DX_CASES_4(nk) DX_CASES_3(nk) DX_CASE(nk, 4)
#define DX_CASES_6(nk) DX_CASES_4(nk) DX_CASE(nk, 5) DX_CASE(nk, 6)

/* Kernels wider than OX_TILE: the taps of each kernel row in blocks, one dispatch per
 * block (nt <= dx_pixels of every block: dx_lanes sizes it on the widest). */
#define DXB_CASE(nk, nt)                                                                    \
    case (nk) * 8 + (nt):                                                                   \
        dx_tile(a, ci, ky, kx, oy, ox, nk, nt);                                             \
        break;
#define DXB_CASES_2(nk) DXB_CASE(nk, 1) DXB_CASE(nk, 2)
#define DXB_CASES_3(nk) DXB_CASES_2(nk) DXB_CASE(nk, 3)

static void dx_wide_kernel(const ldx *a, int oy, int ox, int nt)
{
    int blocks = (a->k + OX_TILE - 1) / OX_TILE;
    for (int ci = 0; ci < a->cin; ci++)
        for (int ky = 0; ky < a->k; ky++)
            for (int b = 0, kx = 0; b < blocks; b++) {
                int nk = tile_width(a->k - kx, blocks - b);
                switch (nk * 8 + nt) { /* 3 <= nk <= 6 when k > 6 */
                    DXB_CASES_3(3)
                    DXB_CASES_3(4)
                    DXB_CASES_2(5)
                    DXB_CASES_2(6)
                default:
                    bad_tile("dx", nk, nt);
                }
                kx += nk;
            }
}

/* dx8 (zeroed here) = the input gradient of one group. Pixel tiles outermost: a tile's
 * dy8 vectors and the dx8 rows it feeds stay in L1 while every tap passes over them. */
NO_COMMONING static void dx_lanes(const ldx *a)
{
    memset(a->dx, 0, (size_t)a->cin * a->hh * a->ww * LANES * sizeof(float));
    int nk0 = tile_width(a->k, (a->k + OX_TILE - 1) / OX_TILE); /* the widest tap block */
    int nt = dx_pixels(nk0), blocks = (a->wo + nt - 1) / nt;
    for (int b = 0, ox = 0; b < blocks; b++) {
        int n = tile_width(a->wo - ox, blocks - b);
        for (int oy = 0; oy < a->ho; oy++) {
            if (a->k > OX_TILE) {
                dx_wide_kernel(a, oy, ox, n);
                continue;
            }
            switch (a->k * 8 + n) {
                DX_CASES_6(1)
                DX_CASES_6(2)
                DX_CASES_4(3)
                DX_CASES_3(4)
                DX_CASES_2(5)
                DX_CASES_2(6)
            default:
                bad_tile("dx", a->k, n);
            }
        }
        ox += n;
    }
}

/* ---- entry points ----------------------------------------------------------------- */

void tr_cpu_conv_direct_forward(float *out, const float *inp, const float *w, const float *b,
                                const tr_conv_shape *s, float *scratch)
{
    layout L = layout_for(s);
    size_t in_n = (size_t)s->cin * s->h * s->w, out_n = (size_t)s->cout * s->ho * s->wo;
    float *slots = scratch + L.part;
#pragma omp parallel num_threads(threads_for(L.groups))
    {
        float *x8 = slots + (size_t)omp_get_thread_num() * L.slot, *o8 = x8 + L.x8 + L.d8;
        lconv a = {.in = x8, .hh = s->h + 2 * s->pad, .ww = s->w + 2 * s->pad,
                   .r0 = s->pad, .r1 = s->pad + s->h, .w = w, .bias = b, .cin = s->cin,
                   .cout = s->cout, .k = s->k, .out = o8, .ho = s->ho, .wo = s->wo};
#pragma omp for schedule(static)
        for (int g = 0; g < L.groups; g++) {
            int n = s->B - g * LANES < LANES ? s->B - g * LANES : LANES;
            pack_lanes(x8, inp + g * LANES * in_n, in_n, n, s->cin, s->h, s->w, s->pad);
            conv_lanes(&a);
            unpack_lanes(out + g * LANES * out_n, out_n, o8, n, s->cout, s->ho, s->wo, 0);
        }
    }
}

/* One group's backward: its dw and db sums into part, its input gradient to dinp. */
static void backward_group(float *dinp, float *part, const float *dout, const float *inp,
                           const float *w, const tr_conv_shape *s, const layout *L,
                           float *slot, int n)
{
    float *x8 = slot, *d8 = slot + L->x8, *o8 = d8 + L->d8;
    size_t in_n = (size_t)s->cin * s->h * s->w, out_n = (size_t)s->cout * s->ho * s->wo;
    int hh = s->h + 2 * s->pad, ww = s->w + 2 * s->pad;
    pack_lanes(x8, inp, in_n, n, s->cin, s->h, s->w, s->pad);
    pack_lanes(d8, dout, out_n, n, s->cout, s->ho, s->wo, 0);
    lgrad g = {.x = x8, .xhh = hh, .xww = ww, .xr0 = s->pad, .xr1 = s->pad + s->h, .dy = d8,
               .cin = s->cin, .cout = s->cout, .k = s->k, .ho = s->ho, .wo = s->wo,
               .part = part};
    dw_lanes(&g);
    db_lanes(part + L->nw, &g);
    if (!dinp)
        return;
    ldx a = {.dy = d8, .w = w, .cin = s->cin, .cout = s->cout, .k = s->k, .ho = s->ho,
             .wo = s->wo, .dx = o8, .hh = hh, .ww = ww};
    dx_lanes(&a);
    unpack_lanes(dinp, in_n, o8, n, s->cin, s->h, s->w, s->pad);
}

/* Sum of x[g stride], g < n, as a binary tree cut at powers of two: ((x0 + x1) + (x2 +
 * x3)) + ... (x is overwritten). Pairwise summation is more accurate than a running
 * sum, and the tree does not depend on how the batch is split over ranks whose
 * shares are a power-of-two number of groups: a rank's sum is a subtree, and an
 * all-reduce by recursive doubling adds the subtrees as this tree does, so the ranks
 * at 1, 2, 4 or 8 reproduce one rank's sums where the batch splits that way. */
static float tree_sum(float *x, size_t stride, int n)
{
    for (int width = 1; width < n; width *= 2)
        for (int g = 0; g + width < n; g += 2 * width)
            x[g * stride] += x[(g + width) * stride];
    return n > 0 ? x[0] : 0.0f;
}

void tr_cpu_conv_direct_backward(float *dinp, float *dw, float *db, const float *dout,
                                 const float *inp, const float *w, const tr_conv_shape *s,
                                 float *scratch)
{
    layout L = layout_for(s);
    size_t in_n = (size_t)s->cin * s->h * s->w, out_n = (size_t)s->cout * s->ho * s->wo;
    size_t per = L.nw + s->cout; /* one group's sums: dw, then db */
    float *part = scratch, *slots = part + L.part;
#pragma omp parallel num_threads(threads_for(L.groups))
    {
        float *slot = slots + (size_t)omp_get_thread_num() * L.slot;
#pragma omp for schedule(static)
        for (int g = 0; g < L.groups; g++) {
            int n = s->B - g * LANES < LANES ? s->B - g * LANES : LANES;
            backward_group(dinp ? dinp + g * LANES * in_n : NULL, part + g * per,
                           dout + g * LANES * out_n, inp + g * LANES * in_n, w, s, &L, slot,
                           n);
        }
        /* the groups' sums added pairwise, each element by one thread */
#pragma omp for schedule(static)
        for (size_t i = 0; i < per; i++) {
            float sum = tree_sum(part + i, per, L.groups);
            if (i < L.nw)
                dw[i] += sum;
            else if (db)
                db[i - L.nw] += sum;
        }
    }
}
