/* cuda_context.cu: the backend's per-process state (one stream, one cuBLAS and one
 * cuBLASLt handle, a little scratch), its error reporting, and the device-memory
 * calls of cuda_backend.h.
 *
 * Why one blocking stream: every kernel and cuBLAS call of the backend goes on it,
 * in program order, so the kernels need no events between them. It is created
 * blocking (not cudaStreamNonBlocking) so that it also orders against the legacy
 * default stream: a plain cudaMemcpy or cudaMemset elsewhere in the trainer, or in
 * a library, cannot overtake or be overtaken by our kernels. */
#include "cuda/cuda_backend.h"
#include "cuda/cuda_common.h"
#include "cuda/cuda_probe.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

/* ---- cuBLAS, loaded on first use (cublas_loader.h) -------------------------------- */

tr_cublas_api tr_cublas;

/* The fallback when the build's own file (TR_CUBLAS_LIBRARY, an absolute path) is not
 * on this node: the soname of the major version whose headers this was compiled
 * against, as the dynamic linker would look it up. Not the bare libcublas.so: that is
 * the development link, absent where only the runtime libraries are installed, and
 * wherever it exists it may belong to another major version (CUDA 12's next to
 * CUDA 13's), whose ABI the function pointers below need not match. */
#define TR_STR_(x) #x
#define TR_STR(x) TR_STR_(x)
#define TR_CUBLAS_SONAME "libcublas.so." TR_STR(CUBLAS_VER_MAJOR)
#define TR_CUBLASLT_SONAME "libcublasLt.so." TR_STR(CUBLAS_VER_MAJOR)

#ifndef TR_CUBLAS_LIBRARY
#define TR_CUBLAS_LIBRARY TR_CUBLAS_SONAME
#endif

void tr_cublas_load(void)
{
    if (tr_cublas.Create)
        return;
    void *h = dlopen(TR_CUBLAS_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        h = dlopen(TR_CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        tr_fatal(TR_EXIT_OSERR, "cannot load cuBLAS (%s, or %s on LD_LIBRARY_PATH): %s",
                 TR_CUBLAS_LIBRARY, TR_CUBLAS_SONAME, dlerror());
    tr_cublas_api a;
    const struct {
        void **slot;
        const char *name;
    } syms[] = {
        {(void **)&a.Create, "cublasCreate_v2"},
        {(void **)&a.SetStream, "cublasSetStream_v2"},
        {(void **)&a.SetWorkspace, "cublasSetWorkspace_v2"},
        {(void **)&a.Sgemm, "cublasSgemm_v2"},
        {(void **)&a.SetMathMode, "cublasSetMathMode"},
        {(void **)&a.SetAtomicsMode, "cublasSetAtomicsMode"},
        {(void **)&a.SgemmStridedBatched, "cublasSgemmStridedBatched"},
        {(void **)&a.GemmEx, "cublasGemmEx"},
        {(void **)&a.GemmStridedBatchedEx, "cublasGemmStridedBatchedEx"},
        {(void **)&a.GetStatusString, "cublasGetStatusString"},
        {(void **)&a.GetStatusName, "cublasGetStatusName"},
    };
    for (const auto &s : syms)
        if (!(*s.slot = dlsym(h, s.name)))
            tr_fatal(TR_EXIT_OSERR, "cuBLAS library %s lacks %s", TR_CUBLAS_LIBRARY, s.name);
    tr_cublas = a; /* Create last of all: it marks the table loaded */
}

/* ---- cuBLASLt, the same way (cublaslt_loader.h) ---------------------------------- */

tr_cublaslt_api tr_cublaslt;

#ifndef TR_CUBLASLT_LIBRARY
#define TR_CUBLASLT_LIBRARY TR_CUBLASLT_SONAME
#endif

void tr_cublaslt_load(void)
{
    if (tr_cublaslt.Create)
        return;
    /* libcublas itself depends on this library, so after tr_cublas_load it is
     * usually mapped already and dlopen only finds it */
    void *h = dlopen(TR_CUBLASLT_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        h = dlopen(TR_CUBLASLT_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        tr_fatal(TR_EXIT_OSERR, "cannot load cuBLASLt (%s, or %s on LD_LIBRARY_PATH): %s",
                 TR_CUBLASLT_LIBRARY, TR_CUBLASLT_SONAME, dlerror());
    tr_cublaslt_api a;
    const struct {
        void **slot;
        const char *name;
    } syms[] = {
        {(void **)&a.Create, "cublasLtCreate"},
        {(void **)&a.Matmul, "cublasLtMatmul"},
        {(void **)&a.MatmulDescCreate, "cublasLtMatmulDescCreate"},
        {(void **)&a.MatmulDescDestroy, "cublasLtMatmulDescDestroy"},
        {(void **)&a.MatmulDescSetAttribute, "cublasLtMatmulDescSetAttribute"},
        {(void **)&a.MatrixLayoutCreate, "cublasLtMatrixLayoutCreate"},
        {(void **)&a.MatrixLayoutDestroy, "cublasLtMatrixLayoutDestroy"},
        {(void **)&a.MatmulPreferenceCreate, "cublasLtMatmulPreferenceCreate"},
        {(void **)&a.MatmulPreferenceDestroy, "cublasLtMatmulPreferenceDestroy"},
        {(void **)&a.MatmulPreferenceSetAttribute, "cublasLtMatmulPreferenceSetAttribute"},
        {(void **)&a.MatmulAlgoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic"},
    };
    for (const auto &s : syms)
        if (!(*s.slot = dlsym(h, s.name)))
            tr_fatal(TR_EXIT_OSERR, "cuBLASLt library %s lacks %s", TR_CUBLASLT_LIBRARY, s.name);
    tr_cublaslt = a; /* Create last of all: it marks the table loaded */
}

/* ---- errors -------------------------------------------------------------------- */

void tr_cuda_fail_at(const char *file, int line, cudaError_t e, const char *what)
{
    int code = e == cudaErrorMemoryAllocation ? TR_EXIT_OSERR : TR_EXIT_SOFTWARE;
    tr_fatal_at(file, line, code, "CUDA error %s (%s) in %s", cudaGetErrorString(e),
                cudaGetErrorName(e), what);
}

void tr_cublas_fail_at(const char *file, int line, cublasStatus_t s, const char *what)
{
    int code = s == CUBLAS_STATUS_ALLOC_FAILED ? TR_EXIT_OSERR : TR_EXIT_SOFTWARE;
    tr_fatal_at(file, line, code, "cuBLAS error %s (%s) in %s", cublasGetStatusString(s),
                cublasGetStatusName(s), what);
}

/* ---- the context ---------------------------------------------------------------- */

static tr_cuda_ctx make_ctx(int device)
{
    char why[512];
    if (tr_cuda_device_count(why, sizeof why) < 1)
        tr_fatal(TR_EXIT_SOFTWARE, "the CUDA backend was asked for but there is %s", why);
    tr_cuda_ctx c = {};
    if (device >= 0)
        TR_CUDA_CHECK(cudaSetDevice(device));
    TR_CUDA_CHECK(cudaGetDevice(&c.device));
    TR_CUDA_CHECK(cudaStreamCreate(&c.stream)); /* blocking: see the top of this file */
    tr_cublas_load();
    TR_CUBLAS_CHECK(cublasCreate(&c.blas));
    TR_CUBLAS_CHECK(cublasSetStream(c.blas, c.stream));
    /* fp32 products in fp32: the default math mode, stated so that nobody turns on
     * TF32 (10-bit mantissa) by accident; the CPU comparison tests assume fp32. It
     * governs cublasSgemm*, which fp32 runs use. Mixed precision's tensor cores are
     * asked for per call instead, by the compute type of cublasGemmEx (cuda_gemm.cu),
     * which this mode does not override. The products that write a 16-bit C
     * (cuda_gemm.cu: the logits, attention's output gradient, the MLP's hidden
     * gradient) promise fp32 sums rounded once, as the CPU rounds them: the flag keeps
     * any split-K reduction of theirs in fp32, the accumulator's type, rather than in
     * C's (cublas_api.h), as cuBLASLt's calls do by allowing only the compute type's
     * reduction scheme. */
    int math = CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
    TR_CUBLAS_CHECK(cublasSetMathMode(c.blas, (cublasMath_t)math));
    /* no atomics inside cuBLAS either: its results stay identical run to run (cuBLAS
     * promises bit-wise equal results from run to run on GPUs of one architecture and
     * SM count with one toolkit, while one stream is active, as here; the atomics mode
     * is the stated exception) */
    TR_CUBLAS_CHECK(cublasSetAtomicsMode(c.blas, CUBLAS_ATOMICS_NOT_ALLOWED));
    /* cuBLASLt: its own handle (host state only; the stream and the workspace,
     * cuBLAS's, are given per call: cuda_linear_lt.cu) */
    tr_cublaslt_load();
    TR_CUBLAS_CHECK(cublasLtCreate(&c.lt));
    /* the device scratch and cuBLAS's workspace come later, from the device's
     * reservation (tr_cuda_ctx_adopt), which is sized after this context exists;
     * the pinned host buffers are host memory, outside any device plan */
    TR_CUDA_CHECK(cudaMallocHost(&c.h_result, sizeof(double)));
    TR_CUDA_CHECK(cudaMallocHost(&c.h_flag, sizeof(unsigned)));
    TR_CUDA_CHECK(cudaMallocHost(&c.h_int, sizeof(int)));
    return c;
}

/* The device the context is to be made on (-1: the current one); read only by the
 * first tr_cuda_ctx_get. */
static int g_requested_device = -1;

static tr_cuda_ctx *the_ctx(void)
{
    /* C++ runs this initialiser once, and other threads wait for it. The context
     * lives until the process ends: the driver reclaims it then, and destroying the
     * handle from an atexit handler after the driver shut down would fail. */
    static tr_cuda_ctx ctx = make_ctx(g_requested_device);
    return &ctx;
}

const tr_cuda_ctx *tr_cuda_ctx_get(void) { return the_ctx(); }

/* Where the scratch came from: none yet, the reservation, or the context's own. */
static enum { SCRATCH_NONE, SCRATCH_ADOPTED, SCRATCH_OWN } g_scratch;

/* Lays the scratch out from base (256-byte aligned) in TR_CUDA_BACKEND_BYTES: the
 * scratch, then the workspace of cuBLAS (cuBLAS then allocates none of its own: its
 * documentation wants the pointer 256-byte aligned; cublasSetStream would reset it
 * to cuBLAS's own pool, so the stream was set first, in make_ctx, and is never set
 * again) and of cuBLASLt. */
static void place_scratch(tr_cuda_ctx *c, unsigned char *base)
{
    size_t partial = TR_CUDA_PARTIAL_BYTES;
    c->d_partial = (double *)base;
    c->d_result = (double *)(base + partial);
    c->d_flag = (unsigned *)(base + partial + 256);
    c->d_col_partial = (float *)(base + partial + 512);
    unsigned char *cast = base + partial + 512 + TR_CUDA_COL_PARTIAL_FLOATS * sizeof(float);
    c->d_cast[0] = cast;
    c->d_cast[1] = cast + TR_CUDA_CAST_ELEMS * 2;
    c->d_workspace = base + TR_CUDA_SCRATCH_BYTES;
    TR_CUBLAS_CHECK(cublasSetWorkspace(c->blas, c->d_workspace, TR_CUDA_CUBLAS_WORKSPACE));
}

void tr_cuda_ctx_adopt(void *base, size_t bytes)
{
    tr_cuda_ctx *c = the_ctx();
    if (g_scratch == SCRATCH_ADOPTED)
        tr_fatal(TR_EXIT_SOFTWARE, "bug: a second reservation handed to the CUDA context "
                 "before the first was given back");
    if (g_scratch == SCRATCH_OWN) {
        /* a kernel needed scratch before the reservation existed: its own buffer goes
         * (at start-up, where cudaFree's device-wide synchronisation costs nothing),
         * rather than stopping a run over the order of start-up steps */
        TR_CUDA_CHECK(cudaStreamSynchronize(c->stream));
        TR_CUDA_CHECK(cudaFree(c->d_partial));
        g_scratch = SCRATCH_NONE;
    }
    if (bytes < TR_CUDA_BACKEND_BYTES || (uintptr_t)base % 256)
        tr_fatal(TR_EXIT_SOFTWARE, "bug: the CUDA context was handed %zu bytes at %p, needs %zu "
                 "256-byte aligned", bytes, base, (size_t)TR_CUDA_BACKEND_BYTES);
    place_scratch(c, (unsigned char *)base);
    g_scratch = SCRATCH_ADOPTED;
}

void tr_cuda_ctx_give_back(void)
{
    tr_cuda_ctx *c = the_ctx();
    if (g_scratch != SCRATCH_ADOPTED)
        return;
    /* cublasSetStream resets the handle to cuBLAS's own workspace pool (its
     * documentation), so no later call can use the freed one */
    TR_CUBLAS_CHECK(cublasSetStream(c->blas, c->stream));
    c->d_partial = c->d_result = NULL;
    c->d_flag = NULL;
    c->d_col_partial = NULL;
    c->d_cast[0] = c->d_cast[1] = NULL;
    c->d_workspace = NULL;
    g_scratch = SCRATCH_NONE;
}

const tr_cuda_ctx *tr_cuda_ctx_with_scratch(void)
{
    tr_cuda_ctx *c = the_ctx();
    if (g_scratch == SCRATCH_NONE) {
        /* no reservation in this process (the kernel tests, the benchmarks): buffers
         * of its own, kept until the process ends, laid out as a reservation's (the
         * workspaces too), so the tests call cuBLAS and cuBLASLt as the trainer does */
        void *p = NULL;
        TR_CUDA_CHECK(cudaMalloc(&p, TR_CUDA_BACKEND_BYTES));
        place_scratch(c, (unsigned char *)p);
        g_scratch = SCRATCH_OWN;
    }
    return c;
}

extern "C" void tr_cuda_init(int device)
{
    g_requested_device = device;
    const tr_cuda_ctx *c = tr_cuda_ctx_get();
    if (device >= 0 && c->device != device)
        tr_fatal(TR_EXIT_SOFTWARE,
                 "tr_cuda_init(%d): the CUDA backend is already set up on device %d", device,
                 c->device);
}

/* ---- device memory -------------------------------------------------------------- */

extern "C" void *tr_cuda_alloc(size_t bytes, const char *what)
{
    cudaStream_t s = tr_cuda_stream();
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 256);
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError(); /* clear it: the job ends, but say why first */
        size_t free_b = 0, total_b = 0;
        (void)cudaMemGetInfo(&free_b, &total_b);
        tr_fatal(TR_EXIT_OSERR,
                 "out of GPU memory allocating %.1f MiB for %s (%.1f of %.1f MiB free); "
                 "reduce batch_size or model size, or use more ranks",
                 (double)bytes / 1048576.0, what, (double)free_b / 1048576.0,
                 (double)total_b / 1048576.0);
    }
    TR_CUDA_CHECK(e);
    /* zeroed, as tr_alloc is: gradient buffers start at 0 and accumulate */
    TR_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, s));
    TR_CUDA_CHECK(cudaStreamSynchronize(s));
    return p;
}

extern "C" void tr_cuda_free(void *p)
{
    if (p)
        TR_CUDA_CHECK(cudaFree(p));
}

static void (*g_watch)(void);

void tr_cuda_set_watch(void (*watch)(void)) { g_watch = watch; }

static double seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void tr_cuda_stream_wait(cudaStream_t s)
{
    if (!g_watch) {
        TR_CUDA_CHECK(cudaStreamSynchronize(s));
        return;
    }
    /* spin for the first 100 us (most waits are short: a copy, a reduction), then
     * sleep 20 us between queries, which is the most a finished wait is late by */
    double start = seconds_now(), next_watch = start + 1e-3 * TR_CUDA_WATCH_MS;
    for (;;) {
        cudaError_t e = cudaStreamQuery(s);
        if (e == cudaSuccess)
            return;
        if (e != cudaErrorNotReady)
            TR_CUDA_CHECK(e);
        double now = seconds_now();
        if (now >= next_watch) {
            g_watch();
            next_watch = now + 1e-3 * TR_CUDA_WATCH_MS;
        }
        if (now - start > 1e-4) {
            struct timespec nap = {0, 20000};
            nanosleep(&nap, NULL);
        }
    }
}

/* Both copies wait for the stream (with the watch) BEFORE the copy too: the host
 * buffers are pageable, and a copy between pageable memory and the device may hold
 * the host inside cudaMemcpyAsync until the stream's earlier work is done (CUDA's
 * "API synchronization behavior"), where a communicator's failure would go unseen
 * until run.hang_minutes. They wait for the stream afterwards anyway, so this costs
 * no overlap. */
extern "C" void tr_cuda_upload(void *dst_device, const void *src_host, size_t bytes)
{
    cudaStream_t s = tr_cuda_stream();
    tr_cuda_stream_wait(s);
    TR_CUDA_CHECK(cudaMemcpyAsync(dst_device, src_host, bytes, cudaMemcpyHostToDevice, s));
    tr_cuda_stream_wait(s);
}

extern "C" void tr_cuda_download(void *dst_host, const void *src_device, size_t bytes)
{
    cudaStream_t s = tr_cuda_stream();
    tr_cuda_stream_wait(s);
    TR_CUDA_CHECK(cudaMemcpyAsync(dst_host, src_device, bytes, cudaMemcpyDeviceToHost, s));
    tr_cuda_stream_wait(s);
}

extern "C" void tr_cuda_synchronize(void)
{
    tr_cuda_stream_wait(tr_cuda_stream());
}

/* ---- small helpers the kernels share -------------------------------------------- */

/* The CPU's loop, so the CPU's rounding: thread 0 adds every value in order. The
 * block stages the values in shared memory, TR_CUDA_BLOCK at a time with coalesced
 * loads, so thread 0's chain waits on double adds, not on a global load per value
 * (which at GPT-2's B*T = 16K rows, once per step, was of the order of a
 * millisecond). Launched with TR_CUDA_BLOCK threads. */
__global__ static void sum_in_order_kernel(double *result, const float *x, size_t n)
{
    __shared__ float chunk[TR_CUDA_BLOCK];
    double s = 0.0;
    for (size_t base = 0; base < n; base += TR_CUDA_BLOCK) {
        size_t i = base + threadIdx.x, m = n - base < TR_CUDA_BLOCK ? n - base : TR_CUDA_BLOCK;
        if (i < n)
            chunk[threadIdx.x] = x[i];
        __syncthreads();
        if (threadIdx.x == 0)
            for (size_t k = 0; k < m; k++)
                s += chunk[k];
        __syncthreads(); /* before the next chunk overwrites this one */
    }
    if (threadIdx.x == 0)
        *result = s;
}

double tr_cuda_sum_in_order(const float *x, size_t n)
{
    const tr_cuda_ctx *c = tr_cuda_ctx_with_scratch();
    sum_in_order_kernel<<<1, TR_CUDA_BLOCK, 0, c->stream>>>(c->d_result, x, n);
    TR_CUDA_LAUNCHED();
    TR_CUDA_CHECK(cudaMemcpyAsync(c->h_result, c->d_result, sizeof(double),
                                  cudaMemcpyDeviceToHost, c->stream));
    tr_cuda_stream_wait(c->stream);
    return *c->h_result;
}

__global__ static void add_partials_kernel(float *dst, const float *partial, int C, int RB)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    float s = 0.0f;
    for (int y = 0; y < RB; y++)
        s += partial[(size_t)y * C + c];
    dst[c] += s;
}

void tr_cuda_add_partials(float *dst, const float *partial, int C, int RB)
{
    if (C <= 0)
        return;
    add_partials_kernel<<<(unsigned)((C + TR_CUDA_BLOCK - 1) / TR_CUDA_BLOCK), TR_CUDA_BLOCK, 0,
                          tr_cuda_stream()>>>(dst, partial, C, RB);
    TR_CUDA_LAUNCHED();
}

/* The smallest bad position wins (an integer atomicMin: the same answer whatever
 * the order), so the report names the first bad token as the CPU check does. */
__global__ static void check_tokens_kernel(unsigned *first_bad, const int *tok, size_t n, int V)
{
    TR_GRID_STRIDE(i, n)
        if (tok[i] < 0 || tok[i] >= V)
            atomicMin(first_bad, (unsigned)i);
}

void tr_cuda_check_tokens(const int *tok, size_t n, int V, const char *what)
{
    if (n == 0)
        return;
    if (n >= UINT_MAX)
        tr_fatal(TR_EXIT_SOFTWARE, "%s: %zu tokens are more than the check can index", what, n);
    const tr_cuda_ctx *c = tr_cuda_ctx_with_scratch();
    TR_CUDA_CHECK(cudaMemsetAsync(c->d_flag, 0xff, sizeof(unsigned), c->stream)); /* UINT_MAX */
    check_tokens_kernel<<<tr_cuda_grid(n), TR_CUDA_BLOCK, 0, c->stream>>>(c->d_flag, tok, n, V);
    TR_CUDA_LAUNCHED();
    TR_CUDA_CHECK(cudaMemcpyAsync(c->h_flag, c->d_flag, sizeof(unsigned), cudaMemcpyDeviceToHost,
                                  c->stream));
    tr_cuda_stream_wait(c->stream);
    unsigned bad = *c->h_flag;
    if (bad == UINT_MAX)
        return;
    TR_CUDA_CHECK(cudaMemcpyAsync(c->h_int, tok + bad, sizeof(int), cudaMemcpyDeviceToHost,
                                  c->stream));
    tr_cuda_stream_wait(c->stream);
    tr_fatal(TR_EXIT_SOFTWARE, "%s: token %d at position %u is outside [0, %d)", what, *c->h_int,
             bad, V);
}
