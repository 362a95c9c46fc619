/* cuda_peak.cu: the peak a GPU's model FLOPs utilisation is reported against.
 *
 * MFU is conventionally the model's FLOP/s over the datasheet's dense peak for the
 * precision the products run in (tensor cores for bf16/fp16-mixed, plain fp32 without
 * TF32 for fp32): that is how "40 % MFU" is meant. So the GPUs whose datasheet figure
 * is listed below get it; any other GPU gets a measured figure instead, the best of
 * a few 4096^3 GEMMs through the backend's own gemm in the run's precision (what
 * the CPU does too), and the banner says which it is. A measured peak is lower than
 * the datasheet's, so MFU against it reads higher. system.peak_gflops overrides both.
 *
 * Datasheet figures (NVIDIA's product pages; dense, i.e. without 2:4 sparsity), in
 * TFLOP/s per GPU: fp32 and bf16 (fp16 is the same on all of these). */
#include "cuda/cuda_common.h"
#include "cuda/cuda_ops.h"

#include "backend/lowp_math.h" /* tr_precision */

#include <stdio.h>
#include <string.h>

namespace {

struct datasheet {
    const char *name; /* the device name, after "NVIDIA " */
    int exact;        /* 1: the whole name; 0: a prefix (memory sizes vary) */
    double fp32, half;
};

/* more specific names first: "H100 PCIe" before "H100" */
const datasheet k_datasheets[] = {
    {"H100 PCIe", 0, 51.2, 756.5},
    {"H100 NVL", 0, 60.0, 835.5},
    {"H100", 0, 66.9, 989.4}, /* SXM5: "H100 80GB HBM3" */
    {"H200 NVL", 0, 60.0, 835.5},
    {"H200", 0, 66.9, 989.4},
    {"GH200", 0, 66.9, 989.4},
    {"A100", 0, 19.5, 312.0}, /* SXM4 and PCIe, 40 and 80 GB */
    {"A10", 1, 31.2, 125.0},
    {"L40S", 1, 91.6, 362.1},
    {"L4", 1, 30.3, 121.0},
};

const datasheet *find_datasheet(const char *device_name)
{
    const char *n = device_name;
    if (!strncmp(n, "NVIDIA ", 7))
        n += 7;
    for (const datasheet &d : k_datasheets) {
        size_t len = strlen(d.name);
        if (d.exact ? !strcmp(n, d.name) : !strncmp(n, d.name, len))
            return &d;
    }
    return nullptr;
}

__global__ void fill_kernel(float *x, size_t n, float scale)
{
    TR_GRID_STRIDE(i, n)
    x[i] = (float)(i % 13) * scale; /* small integers times a power of two: exact in bf16 */
}

/* GFLOP/s of the best of 5 timings of 4 GEMMs of 4096^3 through tr_cuda_gemm in the
 * precision set; 0 when its 192 MiB cannot be had (the model's reservation comes
 * first). A few ms of GPU time. */
double measure(void)
{
    enum { N = 4096, PER_TIMING = 4, TIMINGS = 5 };
    const size_t n = (size_t)N * N;
    float *a = nullptr;
    if (cudaMalloc(&a, 3 * n * sizeof(float)) != cudaSuccess) {
        (void)cudaGetLastError(); /* clear it: nothing failed that the run needs */
        return 0.0;
    }
    float *b = a + n, *c = b + n;
    cudaStream_t s = tr_cuda_stream();
    fill_kernel<<<tr_cuda_grid(2 * n), TR_CUDA_BLOCK, 0, s>>>(a, 2 * n, 0.125f);
    TR_CUDA_LAUNCHED();
    cudaEvent_t t0, t1;
    TR_CUDA_CHECK(cudaEventCreate(&t0));
    TR_CUDA_CHECK(cudaEventCreate(&t1));
    tr_cuda_gemm(0, 0, N, N, N, 1.0f, a, N, b, N, 0.0f, c, N); /* warm-up: cuBLAS's choice */
    float best_ms = 0.0f;
    for (int t = 0; t < TIMINGS; t++) {
        TR_CUDA_CHECK(cudaEventRecord(t0, s));
        for (int i = 0; i < PER_TIMING; i++)
            tr_cuda_gemm(0, 0, N, N, N, 1.0f, a, N, b, N, 0.0f, c, N);
        TR_CUDA_CHECK(cudaEventRecord(t1, s));
        TR_CUDA_CHECK(cudaEventSynchronize(t1));
        float ms = 0.0f;
        TR_CUDA_CHECK(cudaEventElapsedTime(&ms, t0, t1));
        if (t == 0 || ms < best_ms)
            best_ms = ms;
    }
    TR_CUDA_CHECK(cudaEventDestroy(t0));
    TR_CUDA_CHECK(cudaEventDestroy(t1));
    TR_CUDA_CHECK(cudaFree(a));
    return best_ms > 0.0f ? 2.0 * N * N * (double)N * PER_TIMING / (best_ms * 1e-3) / 1e9 : 0.0;
}

} // namespace

double tr_cuda_peak_gflops(char *source, size_t n)
{
    int format = tr_cuda_gemm_precision();
    const char *what = format == TR_PREC_FP32   ? "fp32"
                       : format == TR_PREC_BF16 ? "bf16 tensor cores"
                                                : "fp16 tensor cores";
    cudaDeviceProp p;
    TR_CUDA_CHECK(cudaGetDeviceProperties(&p, tr_cuda_ctx_get()->device));
    const datasheet *d = find_datasheet(p.name);
    if (d) {
        snprintf(source, n, "%s datasheet, %s dense", p.name, what);
        return 1e3 * (format == TR_PREC_FP32 ? d->fp32 : d->half);
    }
    double g = measure();
    if (g > 0)
        snprintf(source, n, "measured: best 4096^3 GEMM on %s, %s (not in the datasheet table "
                 "of src/cuda/cuda_peak.cu)", p.name, what);
    else
        snprintf(source, n, "unknown: %s is not in the datasheet table and no memory was "
                 "left to measure; set system.peak_gflops", p.name);
    return g;
}
