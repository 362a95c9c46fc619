/* gpu_attention_bench.c: the fused attention of bf16-mixed runs on GPT-2 124M's shapes
 * (batch 16 x 1024, 12 heads of 64, by default), each tensor-core form side by side:
 * the WMMA kernels (cuda_attention_tc.cu, the default) and the mma.sync ones
 * (attention_mma_kernels.cuh, TRAINER_CUDA_ATTENTION=mma). Per form: forward and
 * backward (the kernel table's calls, so backward includes its rowsum(dO * O) pass)
 * in ms per layer and TFLOP/s of causal attention (forward 2 products, backward 5, of
 * 2 B NH T^2 HS / 2 FLOPs each: the causal half), then ms for a whole step's 12
 * layers. Also the largest difference between the two forms' out and dqkv relative to
 * the largest value (each rounds P and dS to bf16 its own way: about 1e-2 or less).
 *
 * Not a CTest test (timings are not pass/fail): built with the CUDA backend as target
 * gpu_attention_bench. On a GPU node, from the build directory:
 *   validation/gpu_attention_bench [B [T [C [NH [LAYERS]]]]]   # 16 1024 768 12 12
 * Each figure is the best of 5 trials of at least 0.1 s after 2 untimed calls, timed
 * on the host around a stream synchronisation. Where no GPU is usable it prints why
 * and exits 77. */
#include "backend/cpu_backend.h"
#include "backend/lowp_math.h"
#include "core/rng.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_device.h"
#include "cuda/cuda_probe.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef struct shapes {
    int B, T, C, NH;
    float *lse, *scratch;
    void *qkv, *dout, *out, *dqkv; /* stored in bf16 (out, dqkv: room for fp32) */
} shapes;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void forward(const shapes *s)
{
    tr_cuda_kernels.attention_forward(s->out, s->lse, s->qkv, s->B, s->T, s->C, s->NH,
                                      TR_PREC_BF16, NULL);
}

static void backward(const shapes *s)
{
    tr_cuda_kernels.attention_backward(s->dqkv, s->scratch, s->dout, s->out, s->qkv, s->lse, s->B,
                                       s->T, s->C, s->NH, TR_PREC_BF16, NULL);
}

/* seconds per call: best of 5 trials */
static double time_it(void (*fn)(const shapes *), const shapes *s)
{
    fn(s);
    fn(s);
    tr_cuda_synchronize();
    double t0 = now();
    fn(s);
    tr_cuda_synchronize();
    double once = now() - t0, best = 1e30;
    int reps = once > 0.1 ? 1 : (int)(0.1 / (once > 1e-6 ? once : 1e-6)) + 1;
    for (int trial = 0; trial < 5; trial++) {
        t0 = now();
        for (int r = 0; r < reps; r++)
            fn(s);
        tr_cuda_synchronize();
        double t = (now() - t0) / reps;
        best = t < best ? t : best;
    }
    return best;
}

/* n values in [-1, 1) stored in bf16, 16 bits each (qkv, dout: lowp_math.h), on the
 * device */
static void *random_device_bf16(size_t n, uint64_t stream)
{
    uint16_t *h = malloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++)
        tr_stored_store(h, i, -1.0f + 2.0f * (float)tr_rng_uniform(5, stream, i), TR_PREC_BF16);
    void *d = tr_cuda_alloc(n * sizeof *h, "attention bench input");
    tr_cuda_upload(d, h, n * sizeof *h);
    free(h);
    return d;
}

/* dst = n bf16 values on the device, widened */
static void widen_bf16(float *dst, const void *d, size_t n)
{
    uint16_t *h = malloc(n * sizeof *h);
    tr_cuda_download(h, d, n * sizeof *h);
    for (size_t i = 0; i < n; i++)
        dst[i] = tr_stored_load(h, i, TR_PREC_BF16);
    free(h);
}

static double max_abs(const float *x, size_t n)
{
    double m = 0.0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs((double)x[i]));
    return m;
}

static double max_diff(const float *a, const float *b, size_t n)
{
    double m = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        m = isnan(d) ? INFINITY : fmax(m, d);
    }
    return m;
}

int main(int argc, char **argv)
{
    char why[512];
    int ngpu = tr_cuda_device_count(why, sizeof why);
    if (ngpu < 1) {
        printf("gpu_attention_bench: %s, %s: nothing to time\n", ngpu < 0 ? "failed" : "skipped",
               why);
        return ngpu < 0 ? 1 : 77;
    }
    shapes s = {.B = argc > 1 ? atoi(argv[1]) : 16,
                .T = argc > 2 ? atoi(argv[2]) : 1024,
                .C = argc > 3 ? atoi(argv[3]) : 768,
                .NH = argc > 4 ? atoi(argv[4]) : 12};
    int layers = argc > 5 ? atoi(argv[5]) : 12;
    if (s.B < 1 || s.T < 1 || s.NH < 1 || s.C < s.NH || s.C % s.NH || layers < 1) {
        fprintf(stderr, "usage: %s [B [T [C [NH [LAYERS]]]]], NH dividing C\n", argv[0]);
        return 64;
    }
    tr_cuda_device dev;
    char err[1024];
    if (tr_cuda_device_choose(0, 1, &dev, err, sizeof err)) {
        printf("gpu_attention_bench: %s: skipped\n", err);
        return 77;
    }
    tr_cuda_init(dev.index);
    tr_cpu_backend_init(1);
    tr_cuda_kernels.set_gemm_precision(TR_PREC_BF16);
    size_t bt = (size_t)s.B * s.T, nqkv = bt * 3 * s.C, nout = bt * s.C;
    s.qkv = random_device_bf16(nqkv, 1); /* stored in bf16, as c_attn stores it */
    s.dout = random_device_bf16(nout, 2); /* as c_proj's backward stores it */
    s.out = tr_cuda_alloc(nout * sizeof(float), "attention bench out");
    s.dqkv = tr_cuda_alloc(nqkv * sizeof(float), "attention bench dqkv");
    s.lse = tr_cuda_alloc(tr_cuda_kernels.attention_state_floats(s.B, s.T, s.NH) * sizeof(float),
                          "attention bench lse");
    s.scratch = tr_cuda_alloc(tr_cuda_kernels.attention_state_floats(s.B, s.T, s.NH) *
                                  sizeof(float), "attention bench scratch");
    int HS = s.C / s.NH;
    /* causal: half of each T x T product */
    double unit = 2.0 * s.B * s.NH * (double)s.T * s.T * HS / 2.0;
    printf("gpu_attention_bench: %s; bf16-mixed attention, B=%d T=%d C=%d, %d heads of %d; "
           "ms per layer (TFLOP/s), best of 5\n", dev.name, s.B, s.T, s.C, s.NH, HS);
    printf("%-8s %18s %18s %14s\n", "kernels", "forward", "backward", "x layers (ms)");
    float *res[2][2];
    for (int mma = 0; mma < 2; mma++) {
        tr_cuda_set_attention_kernel(mma);
        double f = time_it(forward, &s), b = time_it(backward, &s);
        printf("%-8s %8.3f (%6.1f) %8.3f (%6.1f) %14.2f%s\n", mma ? "mma" : "wmma", 1e3 * f,
               2.0 * unit / f / 1e12, 1e3 * b, 5.0 * unit / b / 1e12, 1e3 * layers * (f + b),
               mma && HS > 64 ? "  (head size above 64: these are the WMMA kernels)" : "");
        forward(&s);
        backward(&s);
        res[mma][0] = malloc(nout * sizeof(float));
        res[mma][1] = malloc(nqkv * sizeof(float));
        widen_bf16(res[mma][0], s.out, nout);
        widen_bf16(res[mma][1], s.dqkv, nqkv);
    }
    printf("mma against wmma, largest difference over the largest value: out %.2e, dqkv %.2e\n",
           max_diff(res[1][0], res[0][0], nout) / max_abs(res[0][0], nout),
           max_diff(res[1][1], res[0][1], nqkv) / max_abs(res[0][1], nqkv));
    tr_cuda_set_attention_kernel(0);
    return 0;
}
