/* test_cpu_kernels.c: the CPU kernels against naive double-precision references,
 * with 2 OpenMP threads: GEMM in all four transpose combinations on shapes that take
 * each threading path (serial, row blocks, column blocks), the linear layer on shapes
 * whose GEMMs take different paths in one call, convolution on shapes that take each
 * of its paths (direct with samples in lanes, im2col + GEMM sample-parallel or serial)
 * and each tile shape of the direct one, max pooling to the bit against a reference
 * (ties, NaN, odd sizes, the vector path's edges), the optimizer updates against
 * values worked out by hand, sum_squares, and run-to-run bit-identity of the kernels
 * that combine per-thread or per-group partial results. */
#include "backend/cpu_backend.h"
#include "backend/lowp_math.h"
#include "core/error.h"
#include "fd_check.h"
#include "test_util.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

#define U 5.960464477539063e-08 /* float unit roundoff, 2^-24 */

static float *falloc(size_t n, const char *what) { return tr_alloc(n * sizeof(float), what); }

/* ---- GEMM ----------------------------------------------------------------------- */

typedef struct gemm_case {
    int M, N, K;
    tr_gemm_split plan; /* expected with 2 threads */
} gemm_case;

/* Checks C against alpha op(A) op(B) + beta C0 computed in double, element by element,
 * with the float error bound (K + 2) u (|alpha| sum |a b| + |beta c0|). The padding
 * columns of every matrix hold NaN: a read of them would show, a write would too. */
static void check_gemm(int ta, int tb, gemm_case g, float alpha, float beta, int in_parallel)
{
    int M = g.M, N = g.N, K = g.K;
    int arows = ta ? K : M, acols = ta ? M : K, lda = acols + 3;
    int brows = tb ? N : K, bcols = tb ? K : N, ldb = bcols + 5;
    int ldc = N + 2;
    float *A = falloc((size_t)arows * lda + 1, "A"), *B = falloc((size_t)brows * ldb + 1, "B");
    float *C = falloc((size_t)M * ldc + 1, "C"), *C0 = falloc((size_t)M * ldc + 1, "C0");
    for (size_t i = 0; i < (size_t)arows * lda; i++)
        A[i] = (int)(i % lda) < acols ? tr_rng_uniform(1, 1, i) - 0.5f : NAN;
    for (size_t i = 0; i < (size_t)brows * ldb; i++)
        B[i] = (int)(i % ldb) < bcols ? tr_rng_uniform(1, 2, i) - 0.5f : NAN;
    /* beta = 0 must not read C: NaN there would show */
    for (size_t i = 0; i < (size_t)M * ldc; i++)
        C0[i] = (int)(i % ldc) >= N ? -7.0f : beta == 0.0f ? NAN : tr_rng_uniform(1, 3, i);
    memcpy(C, C0, ((size_t)M * ldc + 1) * sizeof(float));

    if (in_parallel) {
        /* called from inside a team, tr_cpu_gemm must run serially, not nest one */
#pragma omp parallel num_threads(2)
        {
            if (omp_get_thread_num() == 0)
                tr_cpu_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        }
    } else {
        tr_cpu_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    }

    long bad = 0;
    double worst = 0.0;
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < ldc; j++) {
            float c = C[(size_t)i * ldc + j];
            if (j >= N) { /* padding untouched */
                bad += c != -7.0f;
                continue;
            }
            double s = 0.0, abs_s = 0.0;
            for (int k = 0; k < K; k++) {
                double a = ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
                double b = tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
                s += a * b;
                abs_s += fabs(a * b);
            }
            double c0 = beta == 0.0f ? 0.0 : C0[(size_t)i * ldc + j];
            double ref = alpha * s + beta * c0;
            double bound = (K + 2) * U * (fabs(alpha) * abs_s + fabs(beta * c0)) + 1e-30;
            double e = fabs(c - ref) / bound;
            worst = e > worst ? e : worst;
            bad += !(e <= 1.0);
        }
    }
    CHECK(bad == 0, "gemm ta=%d tb=%d M=%d N=%d K=%d alpha=%g beta=%g%s: %ld bad elements, "
          "worst error %.3g of the bound", ta, tb, M, N, K, alpha, beta,
          in_parallel ? " (in a parallel region)" : "", bad, worst);
    tr_free(A);
    tr_free(B);
    tr_free(C);
    tr_free(C0);
}

static void test_gemm(void)
{
    const gemm_case cases[] = {
        {5, 7, 3, TR_GEMM_SPLIT_NONE},     /* tiny: one call */
        {128, 48, 64, TR_GEMM_SPLIT_ROWS}, /* even row blocks */
        {100, 50, 70, TR_GEMM_SPLIT_ROWS}, /* uneven: 56 + 44 rows */
        {8, 256, 160, TR_GEMM_SPLIT_COLS}, /* too few rows: column blocks */
        {20, 1000, 20, TR_GEMM_SPLIT_COLS},
        {64, 256, 100, TR_GEMM_SPLIT_ROWS}, /* both could be cut, short K: rows */
        {64, 256, 300, TR_GEMM_SPLIT_COLS}, /* long K: the larger of M and N, here N */
        {256, 64, 300, TR_GEMM_SPLIT_ROWS}, /* ... here M */
        {16, 24, 1000, TR_GEMM_SPLIT_NONE}, /* big enough, but no dimension to cut */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        gemm_case g = cases[c];
        CHECK(tr_cpu_gemm_plan(g.M, g.N, g.K, 2) == g.plan, "plan for %dx%dx%d is %d, expected %d",
              g.M, g.N, g.K, (int)tr_cpu_gemm_plan(g.M, g.N, g.K, 2), (int)g.plan);
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                check_gemm(ta, tb, g, 1.0f, 0.0f, 0);
                check_gemm(ta, tb, g, 0.75f, 0.5f, 0);
            }
    }
    CHECK(tr_cpu_gemm_plan(128, 48, 64, 1) == TR_GEMM_SPLIT_NONE, "one thread never splits");
    check_gemm(1, 0, cases[1], 1.0f, 1.0f, 1);
    check_gemm(0, 1, cases[3], 1.0f, 0.0f, 1);
    /* K = 0: C = beta C (CBLAS itself rejects the lda a zero K implies) */
    check_gemm(0, 0, (gemm_case){4, 6, 0, TR_GEMM_SPLIT_NONE}, 1.0f, 0.5f, 0);
    check_gemm(1, 1, (gemm_case){4, 6, 0, TR_GEMM_SPLIT_NONE}, 1.0f, 0.0f, 0);
}

/* ---- linear layer ---------------------------------------------------------------- */

/* Linear forward and backward against double references, on shapes whose GEMMs take
 * different threading plans within one call (the MLP's first layer: forward cut along
 * N, weight gradient along M; its last: forward along M, weight gradient along N) and
 * serially; the gradients accumulate onto what is there, the input gradient overwrites. */
static void check_linear(int B, int IN, int OUT)
{
    float *x = falloc((size_t)B * IN, "x"), *w = falloc((size_t)OUT * IN, "w");
    float *b = falloc((size_t)OUT, "b"), *y = falloc((size_t)B * OUT, "y");
    float *dy = falloc((size_t)B * OUT, "dy"), *dx = falloc((size_t)B * IN, "dx");
    float *dw = falloc((size_t)OUT * IN, "dw"), *db = falloc((size_t)OUT, "db");
    fd_fill_uniform(x, (size_t)B * IN, -1, 1, 800);
    fd_fill_uniform(w, (size_t)OUT * IN, -1, 1, 801);
    fd_fill_uniform(b, (size_t)OUT, -1, 1, 802);
    fd_fill_uniform(dy, (size_t)B * OUT, -1, 1, 803);
    for (size_t i = 0; i < (size_t)B * IN; i++)
        dx[i] = NAN; /* overwritten */
    for (size_t i = 0; i < (size_t)OUT * IN; i++)
        dw[i] = 0.5f; /* accumulated onto */
    for (int j = 0; j < OUT; j++)
        db[j] = -0.5f;
    tr_cpu_linear_forward(y, x, w, b, B, IN, OUT);
    tr_cpu_linear_backward(dx, dw, db, dy, x, w, B, IN, OUT);
    /* error bound: (n + 2) u sum |terms| per element, as for the GEMM */
    long bad = 0;
    for (int i = 0; i < B; i++)
        for (int j = 0; j < OUT; j++) {
            double s = b[j], a = fabs(b[j]);
            for (int k = 0; k < IN; k++) {
                s += (double)x[(size_t)i * IN + k] * w[(size_t)j * IN + k];
                a += fabs((double)x[(size_t)i * IN + k] * w[(size_t)j * IN + k]);
            }
            bad += !(fabs(y[(size_t)i * OUT + j] - s) <= (IN + 2) * U * a + 1e-30);
        }
    for (int i = 0; i < B; i++)
        for (int k = 0; k < IN; k++) {
            double s = 0, a = 0;
            for (int j = 0; j < OUT; j++) {
                s += (double)dy[(size_t)i * OUT + j] * w[(size_t)j * IN + k];
                a += fabs((double)dy[(size_t)i * OUT + j] * w[(size_t)j * IN + k]);
            }
            bad += !(fabs(dx[(size_t)i * IN + k] - s) <= (OUT + 2) * U * a + 1e-30);
        }
    for (int j = 0; j < OUT; j++) {
        double sb = -0.5, ab = 0.5;
        for (int i = 0; i < B; i++) {
            sb += dy[(size_t)i * OUT + j];
            ab += fabs(dy[(size_t)i * OUT + j]);
        }
        bad += !(fabs(db[j] - sb) <= (B + 2) * U * ab);
        for (int k = 0; k < IN; k++) {
            double s = 0.5, a = 0.5;
            for (int i = 0; i < B; i++) {
                s += (double)dy[(size_t)i * OUT + j] * x[(size_t)i * IN + k];
                a += fabs((double)dy[(size_t)i * OUT + j] * x[(size_t)i * IN + k]);
            }
            bad += !(fabs(dw[(size_t)j * IN + k] - s) <= (B + 2) * U * a);
        }
    }
    CHECK(bad == 0, "linear B=%d %d -> %d: %ld elements off the reference", B, IN, OUT, bad);
    tr_free(x);
    tr_free(w);
    tr_free(b);
    tr_free(y);
    tr_free(dy);
    tr_free(dx);
    tr_free(dw);
    tr_free(db);
}

static void test_linear(void)
{
    CHECK(tr_cpu_gemm_plan(128, 256, 784, 2) == TR_GEMM_SPLIT_COLS &&
              tr_cpu_gemm_plan(256, 784, 128, 2) == TR_GEMM_SPLIT_ROWS &&
              tr_cpu_gemm_plan(128, 10, 256, 2) == TR_GEMM_SPLIT_ROWS &&
              tr_cpu_gemm_plan(10, 256, 128, 2) == TR_GEMM_SPLIT_COLS,
          "linear test shapes no longer take the plans they were chosen for");
    check_linear(128, 784, 256); /* forward cols, dinp cols, dw rows */
    check_linear(128, 256, 10);  /* forward rows, dinp rows, dw cols */
    check_linear(3, 7, 5);       /* all serial */
    check_linear(40, 300, 33);   /* uneven blocks */
}

/* ---- convolution ---------------------------------------------------------------- */

static double at(const float *x, const tr_conv_shape *s, int b, int c, int y, int xx)
{
    if (y < 0 || y >= s->h || xx < 0 || xx >= s->w)
        return 0.0;
    return x[(((size_t)b * s->cin + c) * s->h + y) * s->w + xx];
}

/* Direct convolution in double: forward, then dx, dw and db for the given dy. */
static void naive_conv(double *y, double *dx, double *dw, double *db, const float *x,
                       const float *w, const float *bias, const float *dy,
                       const tr_conv_shape *s)
{
    int k = s->k;
    size_t nx = (size_t)s->B * s->cin * s->h * s->w;
    memset(dx, 0, nx * sizeof(double));
    memset(dw, 0, (size_t)s->cout * s->cin * k * k * sizeof(double));
    memset(db, 0, (size_t)s->cout * sizeof(double));
    for (int b = 0; b < s->B; b++)
        for (int co = 0; co < s->cout; co++)
            for (int oy = 0; oy < s->ho; oy++)
                for (int ox = 0; ox < s->wo; ox++) {
                    size_t o = (((size_t)b * s->cout + co) * s->ho + oy) * s->wo + ox;
                    double acc = bias[co];
                    for (int c = 0; c < s->cin; c++)
                        for (int ky = 0; ky < k; ky++)
                            for (int kx = 0; kx < k; kx++) {
                                size_t wi = (((size_t)co * s->cin + c) * k + ky) * k + kx;
                                int iy = oy + ky - s->pad, ix = ox + kx - s->pad;
                                acc += w[wi] * at(x, s, b, c, iy, ix);
                                dw[wi] += dy[o] * at(x, s, b, c, iy, ix);
                                if (iy >= 0 && iy < s->h && ix >= 0 && ix < s->w)
                                    dx[(((size_t)b * s->cin + c) * s->h + iy) * s->w + ix] +=
                                        dy[o] * w[wi];
                            }
                    y[o] = acc;
                    db[co] += dy[o];
                }
}

static double max_abs_diff(const float *a, const double *b, size_t n)
{
    double m = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]);
        m = d > m || d != d ? d : m;
    }
    return m;
}

static void check_conv(tr_conv_shape s, tr_conv_path path, const char *what)
{
    s.ho = s.h + 2 * s.pad - s.k + 1;
    s.wo = s.w + 2 * s.pad - s.k + 1;
    CHECK(tr_cpu_conv_path(&s) == path, "conv %s: path %d, expected %d", what,
          (int)tr_cpu_conv_path(&s), (int)path);
    size_t nx = (size_t)s.B * s.cin * s.h * s.w, ny = (size_t)s.B * s.cout * s.ho * s.wo;
    size_t nw = (size_t)s.cout * s.cin * s.k * s.k;
    float *x = falloc(nx, "x"), *w = falloc(nw, "w"), *b = falloc((size_t)s.cout, "b");
    float *y = falloc(ny, "y"), *dy = falloc(ny, "dy"), *dx = falloc(nx, "dx");
    float *dw = falloc(nw, "dw"), *db = falloc((size_t)s.cout, "db");
    float *scratch = falloc(tr_cpu_conv_scratch_floats(&s), "scratch");
    double *ry = tr_alloc(ny * sizeof(double), "ref"), *rdx = tr_alloc(nx * sizeof(double), "");
    double *rdw = tr_alloc(nw * sizeof(double), ""), *rdb = tr_alloc(s.cout * sizeof(double), "");
    fd_fill_uniform(x, nx, -1, 1, 600);
    fd_fill_uniform(w, nw, -1, 1, 601);
    fd_fill_uniform(b, (size_t)s.cout, -1, 1, 602);
    fd_fill_uniform(dy, ny, -1, 1, 603);
    for (size_t i = 0; i < nx; i++)
        dx[i] = NAN; /* overwritten */
    for (size_t i = 0; i < nw; i++)
        dw[i] = 1.0f; /* accumulated onto */
    for (int i = 0; i < s.cout; i++)
        db[i] = -1.0f;

    naive_conv(ry, rdx, rdw, rdb, x, w, b, dy, &s);
    for (size_t i = 0; i < nw; i++)
        rdw[i] += 1.0;
    for (int i = 0; i < s.cout; i++)
        rdb[i] -= 1.0;
    tr_cpu_conv2d_forward(y, x, w, b, &s, scratch);
    tr_cpu_conv2d_backward(dx, dw, db, dy, x, w, &s, scratch);
    /* sums of up to a few hundred terms of magnitude <= 1: float error well under 1e-4 */
    double ey = max_abs_diff(y, ry, ny), edx = max_abs_diff(dx, rdx, nx);
    double edw = max_abs_diff(dw, rdw, nw), edb = max_abs_diff(db, rdb, (size_t)s.cout);
    CHECK(ey < 1e-4 && edx < 1e-4 && edw < 1e-4 && edb < 1e-4,
          "conv %s: max error out %.3g dinp %.3g dw %.3g db %.3g", what, ey, edx, edw, edb);

    /* dinp NULL: same parameter gradients, to the bit */
    float *dw2 = falloc(nw, "dw2"), *db2 = falloc((size_t)s.cout, "db2");
    for (size_t i = 0; i < nw; i++)
        dw2[i] = 1.0f;
    for (int i = 0; i < s.cout; i++)
        db2[i] = -1.0f;
    tr_cpu_conv2d_backward(NULL, dw2, db2, dy, x, w, &s, scratch);
    CHECK(memcmp(dw, dw2, nw * sizeof(float)) == 0 && memcmp(db, db2, s.cout * sizeof(float)) == 0,
          "conv %s: gradients differ with dinp NULL", what);

    tr_free(x);
    tr_free(w);
    tr_free(b);
    tr_free(y);
    tr_free(dy);
    tr_free(dx);
    tr_free(dw);
    tr_free(db);
    tr_free(scratch);
    tr_free(ry);
    tr_free(rdx);
    tr_free(rdw);
    tr_free(rdb);
    tr_free(dw2);
    tr_free(db2);
}

static void test_conv(void)
{
    const tr_conv_path D = TR_CONV_DIRECT, GS = TR_CONV_GEMM_SAMPLES, G1 = TR_CONV_GEMM_SERIAL;
    /* direct (few channels): odd widths, partial lane groups, every tile width */
    check_conv((tr_conv_shape){.B = 5, .cin = 3, .h = 12, .w = 11, .cout = 16, .k = 3, .pad = 1},
               D, "B=5 k3 pad1 (one partial lane group)");
    check_conv((tr_conv_shape){.B = 1, .cin = 3, .h = 12, .w = 11, .cout = 16, .k = 3, .pad = 1},
               D, "B=1 k3 pad1 (one lane used)");
    check_conv((tr_conv_shape){.B = 4, .cin = 2, .h = 3, .w = 1, .cout = 3, .k = 3, .pad = 2},
               D, "3x1 input k3 pad2 (windows mostly padding, odd cout)");
    check_conv((tr_conv_shape){.B = 3, .cin = 4, .h = 5, .w = 5, .cout = 2, .k = 1, .pad = 0},
               D, "k1 pad0");
    check_conv((tr_conv_shape){.B = 8, .cin = 6, .h = 12, .w = 12, .cout = 16, .k = 5, .pad = 0},
               D, "B=8 LeNet-like");
    check_conv((tr_conv_shape){.B = 23, .cin = 6, .h = 14, .w = 14, .cout = 16, .k = 5, .pad = 0},
               D, "B=23 LeNet conv2 (groups of 8, the last short)");
    check_conv((tr_conv_shape){.B = 19, .cin = 1, .h = 28, .w = 28, .cout = 6, .k = 5, .pad = 2},
               D, "B=19 LeNet conv1 pad2");
    check_conv((tr_conv_shape){.B = 9, .cin = 5, .h = 9, .w = 17, .cout = 7, .k = 7, .pad = 3},
               D, "B=9 k7 pad3 (kernel columns in two tiles)");
    check_conv((tr_conv_shape){.B = 17, .cin = 2, .h = 6, .w = 40, .cout = 5, .k = 2, .pad = 1},
               D, "B=17 k2 pad1, wide rows (even k, many column tiles)");
    check_conv((tr_conv_shape){.B = 3, .cin = 2, .h = 12, .w = 10, .cout = 3, .k = 9, .pad = 4},
               D, "k9 pad4 (kernel columns in tiles of 5 and 4)");
    check_conv((tr_conv_shape){.B = 10, .cin = 3, .h = 11, .w = 13, .cout = 4, .k = 13, .pad = 6},
               D, "k13 pad6 (three tiles of kernel columns)");
    check_conv((tr_conv_shape){.B = 2, .cin = 1, .h = 9, .w = 9, .cout = 1, .k = 8, .pad = 0},
               D, "k8 pad0, one channel each");
    /* im2col + GEMM (many channels) */
    check_conv((tr_conv_shape){.B = 4, .cin = 64, .h = 8, .w = 8, .cout = 16, .k = 1, .pad = 0},
               GS, "k1 pad0 cin 64 (col is the input), sample-parallel");
    check_conv((tr_conv_shape){.B = 1, .cin = 20, .h = 12, .w = 11, .cout = 8, .k = 3, .pad = 1},
               G1, "B=1 cin 20 k3 pad1 (serial samples, threaded GEMM)");
    check_conv((tr_conv_shape){.B = 3, .cin = 17, .h = 3, .w = 1, .cout = 3, .k = 3, .pad = 2},
               G1, "cin 17, 3x1 input k3 pad2 (little work: serial)");
    check_conv((tr_conv_shape){.B = 2, .cin = 20, .h = 5, .w = 5, .cout = 2, .k = 1, .pad = 0},
               G1, "k1 pad0 cin 20, serial (col is the input)");
    check_conv((tr_conv_shape){.B = 23, .cin = 24, .h = 14, .w = 14, .cout = 16, .k = 5, .pad = 0},
               GS, "B=23 cin 24 (several GEMM chunks per thread, the last short)");
    check_conv((tr_conv_shape){.B = 23, .cin = 17, .h = 6, .w = 6, .cout = 4, .k = 3, .pad = 1},
               GS, "B=23 cin 17 (GEMM chunks of 8 samples, the last short)");
    check_conv((tr_conv_shape){.B = 2, .cin = 1, .h = 4, .w = 4, .cout = 2, .k = 2, .pad = 2},
               G1, "pad > k - 1 (no direct path)");
}

/* ---- pooling, relu, softmax ----------------------------------------------------- */

/* The reference: first element of the window wins ties, a later one only when
 * strictly greater (so a NaN in first place stays, elsewhere never wins). */
static void naive_maxpool(float *y, int *am, const float *x, int planes, int H, int W, int k)
{
    int Ho = H / k, Wo = W / k;
    for (int p = 0; p < planes; p++)
        for (int oy = 0; oy < Ho; oy++)
            for (int ox = 0; ox < Wo; ox++) {
                const float *xp = x + (size_t)p * H * W;
                int best = oy * k * W + ox * k;
                for (int dy = 0; dy < k; dy++)
                    for (int dx = 0; dx < k; dx++) {
                        int i = (oy * k + dy) * W + ox * k + dx;
                        best = xp[i] > xp[best] ? i : best;
                    }
                y[((size_t)p * Ho + oy) * Wo + ox] = xp[best];
                am[((size_t)p * Ho + oy) * Wo + ox] = best;
            }
}

/* Pooling against the reference, to the bit, on shapes that take every path of the
 * 2 x 2 kernel (8 windows at a time, a short last group inside a plane and at its
 * end, odd sizes, planes split over threads) and k = 3; values from a small set, so
 * that windows tie, with some NaNs; and the backward must route each gradient to the
 * saved winner and zero the rest. */
static void test_maxpool_shapes(void)
{
    const int shapes[][5] = {/* B, C, H, W, k */
                             {2, 3, 28, 28, 2}, {128, 6, 28, 28, 2}, {3, 16, 10, 10, 2},
                             {64, 16, 10, 10, 2}, {2, 2, 5, 5, 2}, {1, 1, 2, 2, 2},
                             {2, 3, 7, 33, 2}, {1, 2, 4, 2, 2}, {3, 2, 9, 9, 3},
                             {2, 1, 3, 17, 2}};
    for (size_t c = 0; c < sizeof shapes / sizeof *shapes; c++) {
        int B = shapes[c][0], C = shapes[c][1], H = shapes[c][2], W = shapes[c][3];
        int k = shapes[c][4], Ho = H / k, Wo = W / k, planes = B * C;
        size_t nx = (size_t)planes * H * W, ny = (size_t)planes * Ho * Wo;
        float *x = falloc(nx, "x"), *y = falloc(ny + 8, "y"), *ry = falloc(ny, "ry");
        float *dy = falloc(ny, "dy"), *dx = falloc(nx, "dx");
        int *am = tr_alloc((ny + 8) * sizeof(int), "am"), *ram = tr_alloc(ny * sizeof(int), "");
        for (size_t i = 0; i < nx; i++) { /* 7 values: many ties; NaN about 1 in 50 */
            float u = tr_rng_uniform(7, c, i);
            x[i] = u < 0.02f ? NAN : (float)((int)(u * 7.0f) - 3);
        }
        fd_fill_uniform(dy, ny, -1, 1, 700 + c);
        for (int i = 0; i < 8; i++) { /* guards after the output: never written */
            y[ny + i] = -7.0f;
            am[ny + i] = -7;
        }
        tr_cpu_maxpool_forward(y, am, x, B, C, H, W, k);
        naive_maxpool(ry, ram, x, planes, H, W, k);
        long bad = 0;
        for (size_t i = 0; i < ny; i++)
            bad += am[i] != ram[i] || memcmp(&y[i], &ry[i], sizeof(float)) != 0;
        for (int i = 0; i < 8; i++)
            bad += y[ny + i] != -7.0f || am[ny + i] != -7;
        CHECK(bad == 0, "maxpool %dx%dx%dx%d k%d: %ld outputs differ from the reference", B, C,
              H, W, k, bad);
        for (size_t i = 0; i < nx; i++)
            dx[i] = NAN;
        tr_cpu_maxpool_backward(dx, dy, am, B, C, H, W, k);
        bad = 0;
        for (int p = 0; p < planes; p++)
            for (int i = 0; i < H * W; i++) {
                float want = 0.0f;
                for (int o = 0; o < Ho * Wo; o++)
                    if (ram[(size_t)p * Ho * Wo + o] == i)
                        want = dy[(size_t)p * Ho * Wo + o];
                bad += dx[(size_t)p * H * W + i] != want;
            }
        CHECK(bad == 0, "maxpool backward %dx%dx%dx%d k%d: %ld inputs wrong", B, C, H, W, k,
              bad);
        tr_free(x);
        tr_free(y);
        tr_free(ry);
        tr_free(dy);
        tr_free(dx);
        tr_free(am);
        tr_free(ram);
    }
}

static void test_maxpool(void)
{
    /* 1 x 1 x 5 x 5, k 2: the last row and column are dropped; the first window is a
     * tie (all 3), and the first element must win it */
    float x[25] = {3, 3, 0, 1, 9,  3, 3, 2, 0, 9,  -1, -2, -3, -4, 9,
                   -5, -0.5f, -6, -7, 9,  9, 9, 9, 9, 9};
    float y[4], dy[4] = {1, 2, 3, 4}, dx[25];
    int am[4];
    tr_cpu_maxpool_forward(y, am, x, 1, 1, 5, 5, 2);
    CHECK(y[0] == 3 && y[1] == 2 && y[2] == -0.5f && y[3] == -3, "maxpool values %g %g %g %g",
          y[0], y[1], y[2], y[3]);
    CHECK(am[0] == 0 && am[1] == 7 && am[2] == 16 && am[3] == 12, "maxpool argmax %d %d %d %d",
          am[0], am[1], am[2], am[3]);
    for (int i = 0; i < 25; i++)
        dx[i] = NAN;
    tr_cpu_maxpool_backward(dx, dy, am, 1, 1, 5, 5, 2);
    float sum = 0.0f;
    for (int i = 0; i < 25; i++)
        sum += dx[i];
    CHECK(dx[0] == 1 && dx[7] == 2 && dx[16] == 3 && dx[12] == 4 && sum == 10,
          "maxpool backward routes to the winners only (sum %g)", sum);

    test_maxpool_shapes();

    float r[4] = {-1.0f, 0.0f, 2.0f, NAN}, ro[4], rd[4] = {5, 6, 7, 8};
    tr_cpu_relu_forward(ro, r, 4);
    CHECK(ro[0] == 0 && ro[1] == 0 && ro[2] == 2 && isnan(ro[3]), "relu forward, NaN passes");
    tr_cpu_relu_backward(rd, rd, ro, 4); /* in place */
    CHECK(rd[0] == 0 && rd[1] == 0 && rd[2] == 7 && rd[3] == 0, "relu backward in place");
}

/* ---- optimizers ----------------------------------------------------------------- */

static int close_to(double a, double b, double rel) { return fabs(a - b) <= rel * fabs(b); }

static void test_optim(void)
{
    /* SGD, lr 0.1, momentum 0.9, wd 0.01, p0 = 1, g = 0.5 twice:
     *   g' = 0.5 + 0.01 * 1 = 0.51; buf = 0.51; p = 1 - 0.051 = 0.949
     *   g' = 0.5 + 0.00949 = 0.50949; buf = 0.459 + 0.50949 = 0.96849;
     *   p = 0.949 - 0.096849 = 0.852151 */
    float p = 1.0f, buf = 0.0f, g = 0.5f;
    tr_cpu_sgd_update(&p, &buf, &g, 1, 0.1f, 0.9f, 0.01f, NULL, 0);
    CHECK(close_to(p, 0.949, 1e-6) && close_to(buf, 0.51, 1e-6), "sgd step 1: p %.9g buf %.9g",
          p, buf);
    tr_cpu_sgd_update(&p, &buf, &g, 1, 0.1f, 0.9f, 0.01f, NULL, 0);
    CHECK(close_to(p, 0.852151, 1e-6) && close_to(buf, 0.96849, 1e-6),
          "sgd step 2: p %.9g buf %.9g", p, buf);
    /* plain SGD: p = 1 - 0.1 * 0.51 = 0.949, then 0.949 - 0.1 * 0.50949 = 0.898051 */
    p = 1.0f;
    tr_cpu_sgd_update(&p, NULL, &g, 1, 0.1f, 0.0f, 0.01f, NULL, 0);
    tr_cpu_sgd_update(&p, NULL, &g, 1, 0.1f, 0.0f, 0.01f, NULL, 0);
    CHECK(close_to(p, 0.898051, 1e-6), "plain sgd: p %.9g", p);

    /* AdamW, lr 0.1, betas (0.9, 0.999), eps 1e-8, wd 0.01, p0 = 1:
     * t=1, g=0.5:   p = 0.999; m = 0.05; v = 0.00025; mhat = 0.5; vhat = 0.25;
     *               p = 0.999 - 0.1 * 0.5 / (0.5 + 1e-8) = 0.899000002
     * t=2, g=-0.25: p = 0.899000002 * 0.999 = 0.898101002; m = 0.02; v = 0.00031225;
     *               mhat = 0.02 / 0.19 = 0.1052632; vhat = 0.00031225 / 0.001999 = 0.1562031;
     *               p = 0.898101002 - 0.1 * 0.1052632 / 0.3952254 = 0.8714673 */
    float m = 0.0f, v = 0.0f;
    p = 1.0f;
    tr_cpu_adamw_update(&p, &m, &v, &g, 1, 0.1f, 0.9f, 0.999f, 1e-8f, 0.01f, 1, NULL, 0);
    /* v to 3e-5 only: 0.999f is 0.999000013, so 1 - beta2 is 1.3e-5 below 0.001 */
    CHECK(close_to(p, 0.899000002, 1e-6) && close_to(m, 0.05, 1e-6) && close_to(v, 0.00025, 3e-5),
          "adamw step 1: p %.9g m %.9g v %.9g", p, m, v);
    g = -0.25f;
    tr_cpu_adamw_update(&p, &m, &v, &g, 1, 0.1f, 0.9f, 0.999f, 1e-8f, 0.01f, 2, NULL, 0);
    CHECK(close_to(p, 0.8714672987, 1e-6) && close_to(m, 0.02, 1e-6) &&
              close_to(v, 0.00031225, 3e-5),
          "adamw step 2: p %.9g m %.9g v %.9g", p, m, v);
    /* spans: each tensor's call, its own weight decay (and none for an empty one) */
    float sp[5] = {1, -2, 3, 0.5f, 7}, sm[5] = {0}, sv[5] = {0}, sg[5] = {0.1f, 0.2f, -1, 2, 9};
    float cp[5] = {1, -2, 3, 0.5f, 7}, cm[5] = {0}, cv[5] = {0};
    tr_adamw_span spans[3] = {{sp, sm, sv, sg, NULL, 3, 0.1f},
                              {sp + 3, sm + 3, sv + 3, sg + 3, NULL, 0, 0.5f},
                              {sp + 3, sm + 3, sv + 3, sg + 3, NULL, 2, 0.0f}};
    tr_cpu_adamw_update_spans(spans, 3, 0.01f, 0.9, 0.95, 1e-8f, 3, TR_PREC_FP32, TR_PREC_FP32,
                              1.0f);
    tr_cpu_adamw_update(cp, cm, cv, sg, 3, 0.01f, 0.9, 0.95, 1e-8f, 0.1f, 3, NULL, 0);
    tr_cpu_adamw_update(cp + 3, cm + 3, cv + 3, sg + 3, 2, 0.01f, 0.9, 0.95, 1e-8f, 0.0f, 3,
                        NULL, 0);
    CHECK(!memcmp(sp, cp, sizeof sp) && !memcmp(sm, cm, sizeof sm) && !memcmp(sv, cv, sizeof sv),
          "adamw_update_spans differs from the calls one by one");
    /* the gradients read rounded to a format and times a factor: the bits of the calls
     * on gradients that round_lowp and scale made so first (the trainer's passes before
     * it read them in the update), the gradients in memory left as they were */
    const int gfmt[2] = {TR_PREC_BF16, TR_PREC_FP16};
    for (int f = 0; f < 2; f++) {
        float gr[5] = {0.1f, 0.2f, -1.0009f, 2.0003f, 9.01f}, g0[5];
        memcpy(g0, gr, sizeof gr);
        for (int i = 0; i < 5; i++) {
            sp[i] = cp[i] = 0.25f * (float)i - 0.6f;
            sm[i] = cm[i] = 0.01f * (float)i;
            sv[i] = cv[i] = 0.002f * (float)i;
        }
        tr_adamw_span gs[2] = {{sp, sm, sv, gr, NULL, 3, 0.1f},
                               {sp + 3, sm + 3, sv + 3, gr + 3, NULL, 2, 0.0f}};
        tr_cpu_adamw_update_spans(gs, 2, 0.01f, 0.9, 0.95, 1e-8f, 3, TR_PREC_FP32, gfmt[f], 0.3f);
        CHECK(!memcmp(gr, g0, sizeof gr), "adamw_update_spans changed the gradients");
        tr_cpu_round_lowp(g0, 5, gfmt[f]);
        tr_cpu_scale(g0, 5, 0.3f);
        tr_cpu_adamw_update(cp, cm, cv, g0, 3, 0.01f, 0.9, 0.95, 1e-8f, 0.1f, 3, NULL, 0);
        tr_cpu_adamw_update(cp + 3, cm + 3, cv + 3, g0 + 3, 2, 0.01f, 0.9, 0.95, 1e-8f, 0.0f, 3,
                            NULL, 0);
        CHECK(!memcmp(sp, cp, sizeof sp) && !memcmp(sm, cm, sizeof sm) &&
                  !memcmp(sv, cv, sizeof sv),
              "adamw_update_spans reading %s gradients times 0.3 differs from the calls on "
              "gradients rounded and scaled first",
              gfmt[f] == TR_PREC_BF16 ? "bf16" : "fp16");
    }

    /* a large slice (threaded) against the formulas written out in double, with the
     * hyperparameters as the kernels see them (floats) */
    const double lr = 0.01f, mom = 0.8f, wd = 0.05f, b1 = 0.9f, b2 = 0.99f, awd = 0.1f;
    size_t n = 100003;
    float *pp = falloc(n, "p"), *bb = falloc(n, "buf"), *gg = falloc(n, "g");
    float *mm = falloc(n, "m"), *vv = falloc(n, "v");
    fd_fill_uniform(pp, n, -1, 1, 700);
    fd_fill_uniform(bb, n, -1, 1, 701);
    fd_fill_uniform(gg, n, -1, 1, 702);
    fd_fill_uniform(mm, n, -0.1f, 0.1f, 703);
    fd_fill_uniform(vv, n, 0.0f, 0.01f, 704);
    long bad_sgd = 0, bad_adam = 0;
    double *ref = tr_alloc(n * 2 * sizeof(double), "ref");
    for (size_t i = 0; i < n; i++) {
        double gd = gg[i] + wd * pp[i], nb = mom * bb[i] + gd;
        ref[2 * i] = pp[i] - lr * nb;
        double mi = b1 * mm[i] + (1 - b1) * gg[i], vi = b2 * vv[i] + (1 - b2) * gg[i] * gg[i];
        double pd = pp[i] * (1.0 - lr * awd);
        ref[2 * i + 1] = pd - lr * (mi / (1 - pow(b1, 7))) / (sqrt(vi / (1 - pow(b2, 7))) + 1e-8);
    }
    float *p2 = falloc(n, "p2");
    memcpy(p2, pp, n * sizeof(float));
    /* with mixed precision's working copy: the updated params rounded, in the same call */
    float *lp = falloc(n, "sgd lowp"), *lp2 = falloc(n, "adamw lowp");
    tr_cpu_sgd_update(pp, bb, gg, n, (float)lr, (float)mom, (float)wd, lp, TR_PREC_BF16);
    tr_cpu_adamw_update(p2, mm, vv, gg, n, (float)lr, (float)b1, (float)b2, 1e-8f, (float)awd, 7,
                        lp2, TR_PREC_FP16);
    long bad_lowp = 0;
    for (size_t i = 0; i < n; i++)
        bad_lowp += lp[i] != tr_round_lowp(pp[i], TR_PREC_BF16) ||
                    lp2[i] != tr_round_lowp(p2[i], TR_PREC_FP16);
    CHECK(bad_lowp == 0, "sgd/adamw working copies: %ld of %zu not the rounded params", bad_lowp,
          n);
    tr_free(lp);
    tr_free(lp2);
    for (size_t i = 0; i < n; i++) {
        /* a few float roundings of values <= 1: 1e-6 of (|p| + 0.01) */
        bad_sgd += !(fabs(pp[i] - ref[2 * i]) <= 1e-6 * (fabs(ref[2 * i]) + 1e-2));
        bad_adam += !(fabs(p2[i] - ref[2 * i + 1]) <= 1e-6 * (fabs(ref[2 * i + 1]) + 1e-2));
    }
    CHECK(bad_sgd == 0, "sgd over %zu elements: %ld off", n, bad_sgd);
    CHECK(bad_adam == 0, "adamw over %zu elements: %ld off", n, bad_adam);
    tr_free(pp);
    tr_free(bb);
    tr_free(gg);
    tr_free(mm);
    tr_free(vv);
    tr_free(ref);
    tr_free(p2);
}

/* ---- reductions and determinism ------------------------------------------------- */

static void test_sum_squares(void)
{
    const size_t sizes[] = {0, 1, 7, 4095, 4096, 4097, 1500000};
    float *x = falloc(1500000, "x");
    fd_fill_uniform(x, 1500000, -2, 2, 800);
    for (size_t c = 0; c < sizeof sizes / sizeof sizes[0]; c++) {
        size_t n = sizes[c];
        long double ref = 0.0L;
        for (size_t i = 0; i < n; i++)
            ref += (long double)x[i] * x[i];
        double got2 = tr_cpu_sum_squares(x, n);
        omp_set_num_threads(1);
        double got1 = tr_cpu_sum_squares(x, n);
        omp_set_num_threads(2);
        CHECK(fabsl(got2 - ref) <= 1e-12L * ref, "sum_squares n=%zu: %.17g, expected %.17Lg", n,
              got2, ref);
        CHECK(memcmp(&got1, &got2, sizeof got1) == 0,
              "sum_squares n=%zu: %.17g on 1 thread, %.17g on 2", n, got1, got2);
    }
    /* spans (a sharded model's tensors): the calls' sums added in order, the same bits;
     * empty spans add nothing, no spans sum to 0 */
    const float *xs[5] = {x + 10, x, x + 4097, x + 7, x + 200000};
    size_t ns[5] = {4097, 0, 1300000, 1, 33};
    double one_by_one = 0.0;
    for (int i = 0; i < 5; i++)
        one_by_one += tr_cpu_sum_squares(xs[i], ns[i]);
    double spans = tr_cpu_sum_squares_spans(xs, ns, 5, TR_PREC_FP32);
    CHECK(memcmp(&spans, &one_by_one, sizeof spans) == 0,
          "sum_squares_spans: %.17g, the calls one by one %.17g", spans, one_by_one);
    CHECK(tr_cpu_sum_squares_spans(xs, ns, 0, TR_PREC_FP32) == 0.0,
          "sum_squares_spans of no spans");
    /* read as values of a 16-bit format: the sums of a copy that round_lowp rounded */
    for (int f = TR_PREC_BF16; f <= TR_PREC_FP16; f++) {
        float *r = falloc(1500000, "x rounded");
        memcpy(r, x, 1500000 * sizeof(float));
        tr_cpu_round_lowp(r, 1500000, f);
        double want = 0.0;
        for (int i = 0; i < 5; i++)
            want += tr_cpu_sum_squares(r + (xs[i] - x), ns[i]);
        double got = tr_cpu_sum_squares_spans(xs, ns, 5, f);
        CHECK(memcmp(&got, &want, sizeof got) == 0 && got != one_by_one,
              "sum_squares_spans read as format %d: %.17g, of the rounded copy %.17g (fp32 "
              "%.17g)",
              f, got, want, one_by_one);
        tr_free(r);
    }
    float y[3] = {1, -2, 4};
    tr_cpu_scale(y, 3, -0.5f);
    CHECK(y[0] == -0.5f && y[1] == 1.0f && y[2] == -2.0f, "scale");
    tr_free(x);
}

/* Kernels that split work over threads, three times on the same input: same bits. */
static void test_determinism(void)
{
    tr_conv_shape s = {.B = 9, .cin = 3, .h = 12, .w = 12, .cout = 8, .k = 3, .pad = 1};
    s.ho = s.h;
    s.wo = s.w;
    CHECK(tr_cpu_conv_path(&s) == TR_CONV_DIRECT, "determinism test misses the direct path");
    size_t nx = (size_t)s.B * s.cin * s.h * s.w, ny = (size_t)s.B * s.cout * s.h * s.w;
    size_t nw = (size_t)s.cout * s.cin * 9;
    float *x = falloc(nx, "x"), *w = falloc(nw, "w"), *dy = falloc(ny, "dy");
    float *scratch = falloc(tr_cpu_conv_scratch_floats(&s), "scratch");
    float *dx[3], *dw[3], *db[3];
    fd_fill_uniform(x, nx, -1, 1, 900);
    fd_fill_uniform(w, nw, -1, 1, 901);
    fd_fill_uniform(dy, ny, -1, 1, 902);
    for (int r = 0; r < 3; r++) {
        dx[r] = falloc(nx, "dx");
        dw[r] = falloc(nw, "dw");
        db[r] = falloc((size_t)s.cout, "db");
        tr_cpu_conv2d_backward(dx[r], dw[r], db[r], dy, x, w, &s, scratch);
    }
    int same = 1;
    for (int r = 1; r < 3; r++)
        same &= memcmp(dx[0], dx[r], nx * 4) == 0 && memcmp(dw[0], dw[r], nw * 4) == 0 &&
                memcmp(db[0], db[r], (size_t)s.cout * 4) == 0;
    CHECK(same, "conv2d_backward differs between identical runs");
    for (int r = 0; r < 3; r++) {
        tr_free(dx[r]);
        tr_free(dw[r]);
        tr_free(db[r]);
    }
    tr_free(x);
    tr_free(w);
    tr_free(dy);
    tr_free(scratch);

    /* linear backward with a wide bias (several column blocks, threaded) */
    int B = 64, IN = 300, OUT = 600;
    float *in = falloc((size_t)B * IN, "in"), *lw = falloc((size_t)OUT * IN, "w");
    float *d = falloc((size_t)B * OUT, "dout"), *g[2], *gb[2];
    fd_fill_uniform(in, (size_t)B * IN, -1, 1, 903);
    fd_fill_uniform(lw, (size_t)OUT * IN, -1, 1, 904);
    fd_fill_uniform(d, (size_t)B * OUT, -1, 1, 905);
    for (int r = 0; r < 2; r++) {
        g[r] = falloc((size_t)OUT * IN, "dw");
        gb[r] = falloc((size_t)OUT, "db");
        tr_cpu_linear_backward(NULL, g[r], gb[r], d, in, lw, B, IN, OUT);
    }
    CHECK(memcmp(g[0], g[1], (size_t)OUT * IN * 4) == 0 && memcmp(gb[0], gb[1], OUT * 4) == 0,
          "linear_backward differs between identical runs");
    double worst = 0.0;
    for (int j = 0; j < OUT; j++) {
        double ref = 0.0;
        for (int i = 0; i < B; i++)
            ref += d[(size_t)i * OUT + j];
        worst = fabs(gb[0][j] - ref) > worst ? fabs(gb[0][j] - ref) : worst;
    }
    CHECK(worst < 1e-5, "linear bias gradient off by %.3g", worst);
    for (int r = 0; r < 2; r++) {
        tr_free(g[r]);
        tr_free(gb[r]);
    }
    tr_free(in);
    tr_free(lw);
    tr_free(d);
}

int main(void)
{
    tr_cpu_backend_init(2);
    printf("OpenBLAS core: %s, OpenMP threads: %d\n", tr_cpu_blas_corename(),
           omp_get_max_threads());
    test_gemm();
    test_linear();
    test_conv();
    test_maxpool();
    test_optim();
    test_sum_squares();
    test_determinism();
    return tr_test_finish();
}
