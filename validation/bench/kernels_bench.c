/* kernels_bench.c: throughput of the CPU kernels on the shapes the shipped models use:
 * the GEMM of the MLP's first layer (M=128, N=256, K=784), the linear forward and
 * backward of the MLP 784-256-256-10 at B=128, and the two LeNet convolutions.
 *
 * Not part of CTest (timings are not pass/fail). Build and run from the repository
 * root, e.g.:
 *   gcc -std=c17 -O3 -march=x86-64-v2 -fopenmp -Isrc \
 *       -I/usr/include/x86_64-linux-gnu/openblas-pthread validation/bench/kernels_bench.c \
 *       src/backend/cpu_*.c src/core/error.c -lopenblas -lm -o /tmp/kernels_bench
 *   /tmp/kernels_bench 2                          # threads
 *   OPENBLAS_CORETYPE=Haswell /tmp/kernels_bench 2
 * Each figure is the best of 5 trials of ~0.2 s: the best is the least disturbed by
 * other processes, which is what a kernel comparison wants. */
#include "backend/cpu_backend.h"
#include "core/error.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

typedef void (*bench_fn)(void *ctx);

/* Seconds per call: best over 5 trials, each long enough to swamp timer overhead. */
static double time_it(bench_fn fn, void *ctx)
{
    for (int i = 0; i < 3; i++)
        fn(ctx);
    double t0 = omp_get_wtime();
    int reps = 0;
    for (; omp_get_wtime() - t0 < 0.05; reps++)
        fn(ctx);
    reps = reps * 4 > 1 ? reps * 4 : 1;
    double best = 1e30;
    for (int trial = 0; trial < 5; trial++) {
        double t = omp_get_wtime();
        for (int r = 0; r < reps; r++)
            fn(ctx);
        t = (omp_get_wtime() - t) / reps;
        best = t < best ? t : best;
    }
    return best;
}

static float *random_floats(size_t n)
{
    float *x = tr_alloc(n * sizeof(float), "bench buffer");
    unsigned s = 12345;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
    }
    return x;
}

/* ---- GEMM ---- */
typedef struct gemm_ctx {
    int M, N, K;
    float *A, *B, *C;
} gemm_ctx;

static void run_gemm(void *p)
{
    gemm_ctx *g = p;
    /* the MLP's layer: out[B,OUT] = inp[B,IN] w[OUT,IN]^T */
    tr_cpu_gemm(0, 1, g->M, g->N, g->K, 1.0f, g->A, g->K, g->B, g->K, 0.0f, g->C, g->N);
}

/* ---- MLP linear layers ---- */
#define NLIN 3
typedef struct mlp_ctx {
    int B, dims[NLIN + 1];
    float *w[NLIN], *b[NLIN], *dw[NLIN], *db[NLIN], *act[NLIN + 1], *dact[NLIN + 1];
} mlp_ctx;

static void run_mlp(void *p)
{
    mlp_ctx *m = p;
    for (int l = 0; l < NLIN; l++)
        tr_cpu_linear_forward(m->act[l + 1], m->act[l], m->w[l], m->b[l], m->B, m->dims[l],
                              m->dims[l + 1]);
    for (int l = NLIN - 1; l >= 0; l--)
        tr_cpu_linear_backward(l ? m->dact[l] : NULL, m->dw[l], m->db[l], m->dact[l + 1],
                               m->act[l], m->w[l], m->B, m->dims[l], m->dims[l + 1]);
}

static double mlp_flops(const mlp_ctx *m)
{
    double f = 0.0;
    for (int l = 0; l < NLIN; l++) {
        double mn = (double)m->dims[l] * m->dims[l + 1];
        f += 2.0 * m->B * mn * (l ? 3 : 2); /* forward, dW, and dinp except the first */
    }
    return f;
}

/* ---- convolution ---- */
typedef struct conv_ctx {
    tr_conv_shape s;
    float *x, *w, *b, *y, *dy, *dx, *dw, *db, *scratch;
} conv_ctx;

static void run_conv(void *p)
{
    conv_ctx *c = p;
    tr_cpu_conv2d_forward(c->y, c->x, c->w, c->b, &c->s, c->scratch);
    tr_cpu_conv2d_backward(c->dx, c->dw, c->db, c->dy, c->x, c->w, &c->s, c->scratch);
}

static void bench_conv(int B, int cin, int hw, int cout, int k, int pad, const char *name)
{
    conv_ctx c = {.s = {.B = B, .cin = cin, .h = hw, .w = hw, .cout = cout, .k = k, .pad = pad}};
    c.s.ho = c.s.wo = hw + 2 * pad - k + 1;
    size_t nx = (size_t)B * cin * hw * hw, ny = (size_t)B * cout * c.s.ho * c.s.wo;
    size_t nw = (size_t)cout * cin * k * k;
    c.x = random_floats(nx);
    c.dx = random_floats(nx);
    c.y = random_floats(ny);
    c.dy = random_floats(ny);
    c.w = random_floats(nw);
    c.dw = random_floats(nw);
    c.b = random_floats((size_t)cout);
    c.db = random_floats((size_t)cout);
    c.scratch = tr_alloc(tr_cpu_conv_scratch_floats(&c.s) * sizeof(float), "scratch");
    double t = time_it(run_conv, &c);
    double flops = 2.0 * ny * cin * k * k * 3.0; /* forward, dW, dinp */
    printf("%-44s %8.3f ms %7.1f GFLOP/s\n", name, t * 1e3, flops / t * 1e-9);
    tr_free(c.x);
    tr_free(c.dx);
    tr_free(c.y);
    tr_free(c.dy);
    tr_free(c.w);
    tr_free(c.dw);
    tr_free(c.b);
    tr_free(c.db);
    tr_free(c.scratch);
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    tr_cpu_backend_init(threads);
    const char *ct = getenv("OPENBLAS_CORETYPE");
    printf("threads %d, OPENBLAS_CORETYPE=%s, OpenBLAS core %s\n", omp_get_max_threads(),
           ct ? ct : "(unset)", tr_cpu_blas_corename());

    gemm_ctx g = {128, 256, 784, NULL, NULL, NULL};
    g.A = random_floats((size_t)g.M * g.K);
    g.B = random_floats((size_t)g.N * g.K);
    g.C = random_floats((size_t)g.M * g.N);
    double t = time_it(run_gemm, &g);
    printf("%-44s %8.3f ms %7.1f GFLOP/s\n", "gemm 128x256x784 (NT)", t * 1e3,
           2.0 * g.M * g.N * g.K / t * 1e-9);
    omp_set_num_threads(1);
    t = time_it(run_gemm, &g);
    printf("%-44s %8.3f ms %7.1f GFLOP/s\n", "gemm 128x256x784 (NT), 1 thread", t * 1e3,
           2.0 * g.M * g.N * g.K / t * 1e-9);
    omp_set_num_threads(threads);

    mlp_ctx m = {.B = 128, .dims = {784, 256, 256, 10}};
    for (int l = 0; l <= NLIN; l++) {
        m.act[l] = random_floats((size_t)m.B * m.dims[l]);
        m.dact[l] = random_floats((size_t)m.B * m.dims[l]);
    }
    for (int l = 0; l < NLIN; l++) {
        size_t n = (size_t)m.dims[l] * m.dims[l + 1];
        m.w[l] = random_floats(n);
        m.dw[l] = random_floats(n);
        m.b[l] = random_floats((size_t)m.dims[l + 1]);
        m.db[l] = random_floats((size_t)m.dims[l + 1]);
    }
    t = time_it(run_mlp, &m);
    printf("%-44s %8.3f ms %7.1f GFLOP/s\n", "MLP 784-256-256-10 B=128 linear fwd+bwd", t * 1e3,
           mlp_flops(&m) / t * 1e-9);

    bench_conv(128, 1, 28, 6, 5, 2, "LeNet conv1 1->6 k5 pad2 28x28 B=128 f+b");
    bench_conv(128, 6, 14, 16, 5, 0, "LeNet conv2 6->16 k5 14x14 B=128 f+b");
    return 0;
}
