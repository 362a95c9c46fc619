/* gpu_gemm_bench.c: TFLOP/s of the GPU's matrix products on the shapes of GPT-2 124M
 * at batch 16 x 1024 (16384 rows of C = 768, 12 heads of 64, vocabulary padded to
 * 50304), in each precision the trainer asks the CUDA backend for
 * (set_gemm_precision, kernels.h): fp32 (cublasSgemm, TF32 off) and bf16-mixed /
 * fp16-mixed (cublasGemmEx on 16-bit copies of the fp32 operands, or on the fp32
 * buffers where they are too large to copy, tensor cores, fp32 accumulation). For the
 * linear layers it calls what the trainer calls: the kernel table's gemm (forward,
 * input gradient, weight gradient: the three products of linear_forward/backward),
 * copies included. Attention's six products go through
 * tr_cuda_gemm_strided_batched, one call per batch row over the heads: what cuBLAS
 * takes for them, which the trainer no longer calls (its attention is fused,
 * src/cuda/cuda_attention.cu).
 *
 * The products of one training step are its model FLOPs (the trainer's MFU
 * convention, gpt.c: 6 N per token for the N weights of the products, the tied head
 * included, plus 12 L C T for attention), but for the head's padding to 50304 rows
 * (0.03 % more). So the last lines give the time of one step's products and, with
 * a peak, the MFU a step would reach if nothing else took time: a ceiling for the
 * issue's target (MFU > 40 % in bf16 on one H100).
 *
 * Not a CTest test (timings are not pass/fail): built with the CUDA backend as
 * target gpu_gemm_bench. On a GPU node, from the build directory:
 *   cmake --build . --target gpu_gemm_bench
 *   validation/gpu_gemm_bench [B [T [PEAK_TFLOPS]]]   # defaults 16 1024 0 (no MFU line)
 * e.g. validation/gpu_gemm_bench 16 1024 989 for an H100 SXM's dense bf16 peak. It
 * needs about 6 GiB of GPU memory at the defaults and runs for about a minute. Each
 * figure is the best of 3 trials of at least 0.1 s after 2 untimed calls, timed on
 * the host around a stream synchronisation (the calls are queued back to back).
 * Inputs are random values of bf16 (the speed does not depend on them).
 *
 * Where no GPU is usable it prints why and exits 77 (the tests' "skipped"). */
#include "backend/cpu_backend.h"
#include "backend/lowp_math.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_device.h"
#include "cuda/cuda_probe.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { NMODES = 3 };
static const int modes[NMODES] = {TR_PREC_FP32, TR_PREC_BF16, TR_PREC_FP16};
static const char *mode_names[NMODES] = {"fp32", "bf16", "fp16"};

/* The model's sizes and the device buffers the products read and write. */
typedef struct model {
    int B, T, C, NH, HS, L, V, Vp;
    long BT;
    float *x, *y, *w, *dw;          /* linear: inputs [BT, 4C], outputs [BT, Vp], weights */
    float *qkv, *dqkv, *att, *datt; /* attention: [BT, 3C] twice, [B, NH, T, T] twice */
    float *o;                       /* [BT, C]: the attention's output, and its gradient */
} model;

/* One timed item: a linear's product, or one of attention's products over the batch. */
typedef struct item {
    const char *what;
    int ta, tb, M, N, K, count; /* count > 1: batched over heads, one call per batch row */
    int per_step;               /* how often one training step runs it */
    int kind;                   /* which buffers, see run_item */
} item;

enum { LIN_FWD, LIN_DINP, LIN_DW, ATT_S, ATT_O, ATT_DA, ATT_DV, ATT_DQ, ATT_DK };

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double item_flops(const item *it, const model *m)
{
    double f = 2.0 * it->M * it->N * (double)it->K;
    return it->count > 1 ? f * it->count * m->B : f;
}

static void run_item(const item *it, const model *m)
{
    const tr_kernels *k = &tr_cuda_kernels;
    int T = m->T, C = m->C, HS = m->HS, NH = m->NH;
    long long TT = (long long)T * T;
    switch (it->kind) {
    case LIN_FWD: /* out[BT,OUT] = inp[BT,IN] w[OUT,IN]^T */
        k->gemm(0, 1, it->M, it->N, it->K, 1.0f, m->x, it->K, m->w, it->K, 0.0f, m->y, it->N);
        return;
    case LIN_DINP: /* dinp[BT,IN] = dout[BT,OUT] w[OUT,IN] */
        k->gemm(0, 0, it->M, it->N, it->K, 1.0f, m->y, it->K, m->w, it->N, 0.0f, m->x, it->N);
        return;
    case LIN_DW: /* dw[OUT,IN] += dout^T inp */
        k->gemm(1, 0, it->M, it->N, it->K, 1.0f, m->y, it->M, m->x, it->N, 1.0f, m->dw, it->N);
        return;
    }
    for (int b = 0; b < m->B; b++) { /* as cuda_attention.cu: one batched call per row */
        const float *q = m->qkv + (size_t)b * T * 3 * C, *kk = q + C, *v = q + 2 * C;
        float *dq = m->dqkv + (size_t)b * T * 3 * C, *dk = dq + C, *dv = dq + 2 * C;
        float *a = m->att + (size_t)b * NH * TT, *da = m->datt + (size_t)b * NH * TT;
        float *o = m->o + (size_t)b * T * C;
        switch (it->kind) {
        case ATT_S:
            tr_cuda_gemm_strided_batched(0, 1, T, T, HS, 0.125f, q, 3 * C, HS, kk, 3 * C, HS,
                                         0.0f, a, T, TT, NH);
            break;
        case ATT_O:
            tr_cuda_gemm_strided_batched(0, 0, T, HS, T, 1.0f, a, T, TT, v, 3 * C, HS, 0.0f, o,
                                         C, HS, NH);
            break;
        case ATT_DA: /* o stands for dO */
            tr_cuda_gemm_strided_batched(0, 1, T, T, HS, 1.0f, o, C, HS, v, 3 * C, HS, 0.0f, da,
                                         T, TT, NH);
            break;
        case ATT_DV:
            tr_cuda_gemm_strided_batched(1, 0, T, HS, T, 1.0f, a, T, TT, o, C, HS, 0.0f, dv,
                                         3 * C, HS, NH);
            break;
        case ATT_DQ:
            tr_cuda_gemm_strided_batched(0, 0, T, HS, T, 1.0f, da, T, TT, kk, 3 * C, HS, 0.0f, dq,
                                         3 * C, HS, NH);
            break;
        case ATT_DK:
            tr_cuda_gemm_strided_batched(1, 0, T, HS, T, 1.0f, da, T, TT, q, 3 * C, HS, 0.0f, dk,
                                         3 * C, HS, NH);
            break;
        }
    }
}

/* Seconds per run of the item: best of 3 trials of >= 0.1 s, after 2 untimed runs. */
static double time_item(const item *it, const model *m)
{
    for (int i = 0; i < 2; i++)
        run_item(it, m);
    tr_cuda_synchronize();
    double t0 = now();
    run_item(it, m);
    tr_cuda_synchronize();
    double once = now() - t0;
    int reps = once > 0.1 ? 1 : (int)(0.1 / (once > 1e-6 ? once : 1e-6)) + 1;
    double best = 1e30;
    for (int trial = 0; trial < 3; trial++) {
        t0 = now();
        for (int r = 0; r < reps; r++)
            run_item(it, m);
        tr_cuda_synchronize();
        double t = (now() - t0) / reps;
        best = t < best ? t : best;
    }
    return best;
}

/* n floats of random bf16 values in [-0.5, 0.5), uploaded a block at a time */
static float *device_random(size_t n, const char *what)
{
    float *d = tr_cuda_alloc(n * sizeof(float), what);
    enum { BLOCK = 1 << 22 };
    static float *host;
    if (!host) {
        host = malloc(BLOCK * sizeof(float));
        unsigned s = 12345;
        for (size_t i = 0; i < BLOCK; i++) {
            s = s * 1664525u + 1013904223u;
            host[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
        }
        tr_cpu_round_lowp(host, BLOCK, TR_PREC_BF16);
    }
    for (size_t at = 0; at < n; at += BLOCK)
        tr_cuda_upload(d + at, host, (n - at < BLOCK ? n - at : BLOCK) * sizeof(float));
    return d;
}

static void make_model(model *m, int B, int T)
{
    *m = (model){.B = B, .T = T, .C = 768, .NH = 12, .HS = 64, .L = 12, .V = 50257,
                 .Vp = 50304};
    m->BT = (long)B * T;
    size_t bt = (size_t)m->BT, C = (size_t)m->C;
    size_t natt = (size_t)B * m->NH * T * T;
    m->x = device_random(bt * 4 * C, "linear inputs");
    m->y = device_random(bt * (size_t)m->Vp, "linear outputs");
    m->w = device_random((size_t)m->Vp * C, "weights");
    m->dw = device_random((size_t)m->Vp * C, "weight gradients");
    m->qkv = device_random(bt * 3 * C, "qkv");
    m->dqkv = device_random(bt * 3 * C, "dqkv");
    m->att = device_random(natt, "att");
    m->datt = device_random(natt, "datt");
    m->o = device_random(bt * C, "attention output");
}

static void free_model(model *m)
{
    float *all[] = {m->x, m->y, m->w, m->dw, m->qkv, m->dqkv, m->att, m->datt, m->o};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        tr_cuda_free(all[i]);
}

/* The linears (IN -> OUT, how many per step) and the attention's six products. */
static int make_items(const model *m, item *it)
{
    static const char *names[][3] = {
        {"qkv forward", "qkv dinp", "qkv dW"},
        {"attn proj forward", "attn proj dinp", "attn proj dW"},
        {"mlp fc forward", "mlp fc dinp", "mlp fc dW"},
        {"mlp proj forward", "mlp proj dinp", "mlp proj dW"},
        {"lm head forward", "lm head dinp", "lm head dW"},
    };
    int C = m->C, BT = (int)m->BT;
    int lin[][3] = {{C, 3 * C, m->L}, {C, C, m->L}, {C, 4 * C, m->L}, {4 * C, C, m->L},
                    {C, m->Vp, 1}};
    int n = 0;
    for (int l = 0; l < 5; l++) {
        int IN = lin[l][0], OUT = lin[l][1], per = lin[l][2];
        it[n++] = (item){names[l][0], 0, 1, BT, OUT, IN, 1, per, LIN_FWD};
        it[n++] = (item){names[l][1], 0, 0, BT, IN, OUT, 1, per, LIN_DINP};
        it[n++] = (item){names[l][2], 1, 0, OUT, IN, BT, 1, per, LIN_DW};
    }
    int T = m->T, HS = m->HS, NH = m->NH, L = m->L;
    it[n++] = (item){"attn S = Q K^T", 0, 1, T, T, HS, NH, L, ATT_S};
    it[n++] = (item){"attn O = A V", 0, 0, T, HS, T, NH, L, ATT_O};
    it[n++] = (item){"attn dA = dO V^T", 0, 1, T, T, HS, NH, L, ATT_DA};
    it[n++] = (item){"attn dV = A^T dO", 1, 0, T, HS, T, NH, L, ATT_DV};
    it[n++] = (item){"attn dQ = dS K", 0, 0, T, HS, T, NH, L, ATT_DQ};
    it[n++] = (item){"attn dK = dS^T Q", 1, 0, T, HS, T, NH, L, ATT_DK};
    return n;
}

int main(int argc, char **argv)
{
    char why[512];
    int ngpu = tr_cuda_device_count(why, sizeof why);
    if (ngpu < 1) { /* -1: the node has GPUs CUDA cannot use (cuda_probe.h) */
        printf("gpu_gemm_bench: %s, %s: nothing to time\n", ngpu < 0 ? "failed" : "skipped", why);
        return ngpu < 0 ? 1 : 77;
    }
    int B = argc > 1 ? atoi(argv[1]) : 16, T = argc > 2 ? atoi(argv[2]) : 1024;
    double peak = argc > 3 ? atof(argv[3]) : 0.0;
    if (B < 1 || T < 1) {
        fprintf(stderr, "usage: %s [B [T [PEAK_TFLOPS]]] with B, T >= 1\n", argv[0]);
        return 64;
    }
    tr_cuda_device dev;
    char err[1024];
    if (tr_cuda_device_choose(0, 1, &dev, err, sizeof err)) {
        printf("gpu_gemm_bench: %s: skipped\n", err);
        return 77;
    }
    tr_cuda_init(dev.index);
    tr_cpu_backend_init(1);
    model m;
    make_model(&m, B, T);
    item items[32];
    int n = make_items(&m, items);
    printf("gpu_gemm_bench: %s (%.0f GiB); GPT-2 124M's products at B=%d T=%d (%ld rows), "
           "C=%d, %d heads, vocabulary %d; TFLOP/s, best of 3\n",
           dev.name, (double)dev.memory_bytes / 1073741824.0, B, T, m.BT, m.C, m.NH, m.Vp);
    printf("%-20s %-24s %5s", "product", "M x N x K (x batch)", "/step");
    for (int k = 0; k < NMODES; k++)
        printf(" %9s", mode_names[k]);
    printf(" %9s\n", "bf16/fp32");
    double step_s[NMODES] = {0}, step_flops = 0.0;
    for (int i = 0; i < n; i++) {
        const item *it = &items[i];
        char shape[64];
        if (it->count > 1)
            snprintf(shape, sizeof shape, "%dx%dx%d (x%d x%d)", it->M, it->N, it->K, it->count, B);
        else
            snprintf(shape, sizeof shape, "%dx%dx%d", it->M, it->N, it->K);
        printf("%-20s %-24s %5d", it->what, shape, it->per_step);
        double f = item_flops(it, &m), tf[NMODES];
        for (int k = 0; k < NMODES; k++) {
            tr_cuda_kernels.set_gemm_precision(modes[k]);
            double s = time_item(it, &m);
            tf[k] = f / s * 1e-12;
            step_s[k] += s * it->per_step;
            printf(" %9.1f", tf[k]);
            fflush(stdout);
        }
        step_flops += f * it->per_step;
        printf(" %8.2fx\n", tf[1] / tf[0]);
    }
    tr_cuda_kernels.set_gemm_precision(TR_PREC_FP32);
    /* gpt.c's model FLOPs of a step: BT (6 N + 12 L C T), N = 12 L C^2 + V C */
    double C = m.C, L = m.L, N = L * 12.0 * C * C + (double)m.V * C;
    double model_flops = (double)m.BT * (6.0 * N + 12.0 * L * C * m.T);
    printf("one training step: %.3f TFLOP of products, %.3f TFLOP of model FLOPs\n",
           step_flops * 1e-12, model_flops * 1e-12);
    for (int k = 0; k < NMODES; k++) {
        printf("  %s: %8.1f ms, %6.1f TFLOP/s, %9.0f tokens/s if nothing else took time",
               mode_names[k], step_s[k] * 1e3, step_flops / step_s[k] * 1e-12,
               (double)m.BT / step_s[k]);
        if (peak > 0)
            printf(", MFU %.1f%% of %.0f TFLOP/s", 100.0 * model_flops / step_s[k] * 1e-12 / peak,
                   peak);
        printf("\n");
    }
    free_model(&m);
    return 0;
}
