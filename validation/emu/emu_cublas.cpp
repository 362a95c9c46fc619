/* emu_cublas.cpp: cuBLAS and cuBLASLt on the host, for the CUDA emulation build.
 *
 * The backend's cuda_context.cu dlopens "libcublas" and "libcublasLt" and looks up
 * the calls it makes (cublas_loader.h, cublaslt_loader.h); in the emulation build
 * both paths name this one shared library, which defines every one of those symbols
 * (declared by the shim headers cublas_v2.h and cublasLt.h next to it) and calls
 * tr_emu_device_span, which the emulated runtime (emu_runtime.cpp) provides.
 *
 * What it promises, after NVIDIA's cuBLAS documentation:
 *  - column-major GEMM, C = alpha op(A) op(B) + beta C (cuBLASLt: D = alpha op(A)
 *    op(B) + beta C, then the epilogue); with beta == 0, C is not read, so it may hold
 *    NaN; alpha and beta are host floats (every compute type run here scales in fp32);
 *  - each dot product accumulated in fp32, k in order, one fmaf at a time (a GPU's
 *    FMA chain), then alpha * sum, then fmaf(beta, C, that) where beta != 0: the
 *    results are deterministic, bit for bit;
 *  - inputs CUDA_R_32F, _16F and _16BF, decoded exactly; the compute type decides
 *    what the products see: CUBLAS_COMPUTE_32F multiplies the inputs as they are,
 *    _32F_FAST_16BF / _FAST_16F round fp32 inputs to bf16 / fp16 first and
 *    _FAST_TF32 to TF32 (10 explicit mantissa bits), all to nearest even, as the
 *    tensor cores' input conversions do (cublasComputeType_t: "input conversions
 *    round to nearest even"); on the cuBLAS side the handle's math mode
 *    CUBLAS_TF32_TENSOR_OP_MATH (and the deprecated CUBLAS_TENSOR_OP_MATH, or an
 *    algorithm >= CUBLAS_GEMM_DEFAULT_TENSOR_OP) does the same to fp32 products;
 *  - outputs computed in fp32 and, for a 16-bit type, rounded once to nearest even;
 *  - only the type combinations of cublasGemmEx's table (the same rows as
 *    cublasLtMatmul's) run; the rest return CUBLAS_STATUS_NOT_SUPPORTED, and so do
 *    the documented combinations this emulator does not model (16F, 64F and 32I
 *    compute types, 8-bit and complex types);
 *  - cuBLASLt epilogues DEFAULT, BIAS (+ bias[row], in the bias type, D's unless
 *    CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE says otherwise, which must still be D's), GELU
 *    (the tanh approximation, in fp32), GELU_AUX (the GELU input stored in the aux
 *    matrix, D's type and shape, its own leading dimension), GELU_BIAS, GELU_AUX_BIAS
 *    (the bias added first) and BGRADB (the bias vector set to op(B)'s column sums,
 *    D's columns long: op(B)'s stored values added in fp32, k in order); the others
 *    return CUBLAS_STATUS_NOT_SUPPORTED;
 *  - cublasLtMatmulAlgoGetHeuristic offers one algorithm exactly where cublasLtMatmul
 *    would run the problem (the preference's alignments standing for the pointers'),
 *    and records in it the types and alignments it assumed, so a matmul given an
 *    algorithm for other types or better-aligned pointers is refused
 *    (CUBLAS_STATUS_INVALID_VALUE) as a real one refuses a problem it cannot run;
 *  - every matrix, bias and aux buffer a call reads or writes is checked against the
 *    emulated device memory (tr_emu_device_span) over exactly the bytes its shape
 *    implies (every column but the last in full, the last up to its rows); one that
 *    is not device memory, or not aligned to its elements, fails the call as a GPU's
 *    fault would (CUBLAS_STATUS_EXECUTION_FAILED), with a line on stderr, before
 *    anything is written;
 *  - streams and workspaces are recorded only: the emulated streams are synchronous,
 *    so the product is done, on the calling thread, when the call returns.
 * Every refusal prints one line on stderr ("emu_cublas: <function>: <why>"), except
 * cublasLtMatmulAlgoGetHeuristic's "no algorithm", which callers take as an ordinary
 * answer (TR_EMU_CUBLAS_TRACE=1 prints those too).
 *
 * Handles and cuBLASLt descriptors are kept in a table of live objects, so a call on
 * a destroyed or foreign one is refused instead of reading freed memory.
 *
 * Build: C++17, position independent, as a shared object, with the shim headers, the
 * warp emulator's directory (cuda_runtime.h includes warp_emulator.h) and src/ on the
 * include path; floating-point contraction off (GCC's ISO mode, -std=c++17, has it
 * off), since the epilogue's arithmetic is specified operation by operation.
 * validation/emu/test_emu_cublas.cpp is its test. */
#include "cublasLt.h" /* cublas_v2.h, cuda_runtime.h */

#include "backend/lowp_math.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

/* The entry points: C names, exported even from a build with -fvisibility=hidden (the
 * trainer finds them with dlsym). */
#define EMU_API extern "C" __attribute__((visibility("default")))

/* ---- values of the real headers this emulator needs beyond the shim's --------------- */

static const int32_t FILL_MODE_FULL = 2;    /* cublasFillMode_t CUBLAS_FILL_MODE_FULL */
static const int32_t POINTER_MODE_HOST = 0; /* cublasLtPointerMode_t */
static const int32_t TYPE_DEFAULT = -1;     /* BIAS_ and EPILOGUE_AUX_DATA_TYPE unset */
static const uint64_t ALGO_MAGIC = 0x454d55434c54414cull; /* "EMUCLTAL" */

/* ---- diagnostics -------------------------------------------------------------------- */

static void report(const char *fn, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void report(const char *fn, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "emu_cublas: %s: %s\n", fn, msg);
}

static bool trace_heuristic(void)
{
    static const bool on = [] {
        const char *v = getenv("TR_EMU_CUBLAS_TRACE");
        return v && *v && strcmp(v, "0") != 0;
    }();
    return on;
}

/* ---- the table of live objects ------------------------------------------------------ */

enum ObjKind { OBJ_BLAS = 1, OBJ_LT, OBJ_DESC, OBJ_LAYOUT, OBJ_PREF };

static std::mutex g_mu;
static std::unordered_map<const void *, int> *g_live; /* never freed: atexit-order safe */

static void live_add(const void *p, int kind)
{
    std::lock_guard<std::mutex> lock(g_mu);
    if (!g_live)
        g_live = new std::unordered_map<const void *, int>();
    (*g_live)[p] = kind;
}

static bool live_is(const void *p, int kind)
{
    std::lock_guard<std::mutex> lock(g_mu);
    if (!p || !g_live)
        return false;
    auto it = g_live->find(p);
    return it != g_live->end() && it->second == kind;
}

static bool live_remove(const void *p, int kind)
{
    std::lock_guard<std::mutex> lock(g_mu);
    if (!p || !g_live)
        return false;
    auto it = g_live->find(p);
    if (it == g_live->end() || it->second != kind)
        return false;
    g_live->erase(it);
    return true;
}

/* ---- the objects -------------------------------------------------------------------- */

struct tr_emu_cublas {
    cudaStream_t stream;
    void *workspace; /* NULL: cuBLAS's own pool (recorded only) */
    size_t workspace_bytes;
    int math;
    int atomics;
};

struct tr_emu_cublaslt {
    int unused;
};

struct tr_emu_lt_desc {
    int32_t compute, scale, pointer_mode, transa, transb, transc, fill;
    uint32_t epilogue;
    const void *bias;
    int64_t bias_stride;
    void *aux;
    int64_t aux_ld, aux_stride;
    int32_t aux_type, bias_type;
};

struct tr_emu_lt_layout {
    int32_t type;
    uint64_t rows, cols;
    int64_t ld;
};

struct tr_emu_lt_pref {
    uint32_t search_mode;
    uint64_t max_workspace;
    uint32_t reduction_mask;
    uint32_t align[4]; /* A, B, C, D */
};

/* ---- element types and conversions -------------------------------------------------- */

static size_t type_bytes(int t)
{
    return t == CUDA_R_32F ? 4 : t == CUDA_R_16F || t == CUDA_R_16BF ? 2 : 0;
}

static const char *type_name(int t)
{
    switch (t) {
    case CUDA_R_32F:
        return "CUDA_R_32F";
    case CUDA_R_16F:
        return "CUDA_R_16F";
    case CUDA_R_16BF:
        return "CUDA_R_16BF";
    case CUDA_R_64F:
        return "CUDA_R_64F";
    case CUDA_R_32I:
        return "CUDA_R_32I";
    default:
        return "a type this emulator does not know";
    }
}

/* element i of p, of type t (one of type_bytes' three), as an exact float */
static inline float load(const void *p, int t, size_t i)
{
    if (t == CUDA_R_32F)
        return static_cast<const float *>(p)[i];
    uint16_t h = static_cast<const uint16_t *>(p)[i];
    return t == CUDA_R_16BF ? tr_bf16_to_f32(h) : tr_f16_to_f32(h);
}

/* element i of p = v, rounded once to nearest even for a 16-bit type */
static inline void store(void *p, int t, size_t i, float v)
{
    if (t == CUDA_R_32F)
        static_cast<float *>(p)[i] = v;
    else if (t == CUDA_R_16BF)
        static_cast<uint16_t *>(p)[i] = tr_f32_to_bf16(v);
    else
        static_cast<uint16_t *>(p)[i] = tr_f32_to_f16(v);
}

/* What the tensor cores make of an fp32 input before multiplying it. */
enum InRound { RND_NONE, RND_BF16, RND_F16, RND_TF32 };

/* fp32 to TF32 (fp32's exponent, 10 explicit mantissa bits), nearest even. NaN stays
 * a NaN (made quiet, so that dropping low payload bits cannot turn it into inf). */
static inline float round_tf32(float f)
{
    uint32_t u = tr_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return tr_bits_f32((u | 0x00400000u) & 0xffffe000u);
    if ((u & 0x7f800000u) == 0x7f800000u) /* +-inf */
        return f;
    u += 0x0fffu + ((u >> 13) & 1u); /* ties to even; a carry may reach inf, as it should */
    return tr_bits_f32(u & 0xffffe000u);
}

static inline float round_in(float v, InRound r)
{
    switch (r) {
    case RND_BF16:
        return tr_bf16_to_f32(tr_f32_to_bf16(v));
    case RND_F16:
        return tr_f16_to_f32(tr_f32_to_f16(v));
    case RND_TF32:
        return round_tf32(v);
    default:
        return v;
    }
}

/* cuBLASLt's GELU: the tanh approximation, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715
 * x^3))) (cublasLtEpilogue_t's note), in fp32, as written. */
static inline float gelu_tanh(float x)
{
    float u = 0.7978845608f * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
}

/* ---- device memory checks ----------------------------------------------------------- */

/* The bytes a rows x cols column-major matrix with leading dimension ld spans: every
 * column but the last in full, the last up to its rows. 0 when it is empty; false
 * where the count does not fit in a size_t. */
static bool matrix_bytes(uint64_t rows, uint64_t cols, uint64_t ld, size_t es, size_t *out)
{
    if (!rows || !cols) {
        *out = 0;
        return true;
    }
    unsigned __int128 n = (unsigned __int128)(cols - 1) * ld + rows;
    n *= es;
    if (n > (unsigned __int128)SIZE_MAX)
        return false;
    *out = (size_t)n;
    return true;
}

/* Checks that p (arg, batch element `batch` or -1) is aligned to its elements and
 * that [p, p + bytes) is device memory: what a kernel's loads and stores there need.
 * Reports the first problem and returns false. */
static bool device_ok(const char *fn, const char *arg, const void *p, size_t bytes, size_t es,
                      long long batch)
{
    if (bytes == 0)
        return true;
    char where[48] = "";
    if (batch >= 0)
        snprintf(where, sizeof where, " (batch element %lld)", batch);
    if ((uintptr_t)p % es) {
        report(fn,
               "%s%s at %p is not aligned to its %zu-byte elements (a misaligned "
               "access on a GPU)",
               arg, where, p, es);
        return false;
    }
    if (!tr_emu_device_span(p, bytes)) {
        report(fn,
               "%s%s [%p, +%zu bytes) is not inside one live device allocation "
               "(host memory, freed, or past its end): the kernel would fault",
               arg, where, p, bytes);
        return false;
    }
    return true;
}

/* As device_ok for a matrix; a shape whose span overflows is refused the same way. */
static bool matrix_ok(const char *fn, const char *arg, const void *p, uint64_t rows, uint64_t cols,
                      uint64_t ld, int type, long long batch)
{
    size_t bytes;
    if (!matrix_bytes(rows, cols, ld, type_bytes(type), &bytes)) {
        report(fn,
               "%s: %llu x %llu with leading dimension %llu spans more than the address "
               "space",
               arg, (unsigned long long)rows, (unsigned long long)cols, (unsigned long long)ld);
        return false;
    }
    return device_ok(fn, arg, p, bytes, type_bytes(type), batch);
}

/* p + elems elements of es bytes, as an address only (a batch element's start) */
static const void *offset(const void *p, long long elems, size_t es)
{
    return reinterpret_cast<const void *>(reinterpret_cast<uintptr_t>(p) +
                                          (uintptr_t)((long long)es * elems));
}

/* ---- the product -------------------------------------------------------------------- */

struct Mat {
    const void *p;
    int type;
    int64_t ld;
};

struct Epilogue {
    const void *bias = nullptr; /* + bias[row] (D's rows), before GELU */
    int bias_type = 0;
    void *aux = nullptr; /* the value GELU is given, stored (D's shape, aux_ld) */
    int aux_type = 0;
    int64_t aux_ld = 0;
    bool gelu = false;
    void *bgrad = nullptr; /* BGRADB: column sums of op(B) over k (D's columns) */
    int bgrad_type = 0;
};

/* acc[0, m) = fmaf(a[p][i], bp, acc[i]) for one p: the k loop's step for m dot
 * products at once, each still its own chain in k order. Built twice on x86-64, the
 * FMA instruction inlined where the CPU has it (fmaf's result is exact either way). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define EMU_FMA_CLONES __attribute__((target_clones("fma", "default")))
#else
#define EMU_FMA_CLONES
#endif
EMU_FMA_CLONES static void fma_column(float *acc, const float *a, float bp, int64_t m)
{
    for (int64_t i = 0; i < m; i++)
        acc[i] = fmaf(a[i], bp, acc[i]);
}

/* D = alpha op(A) op(B) + beta C, then the epilogue; C is read only where beta != 0.
 * op(A) is m x k, op(B) k x n, C and D m x n, all column-major. Every buffer has been
 * checked. A and B are decoded (and rounded for the compute type) before anything is
 * written, so an output that overlaps an input still gets the product of the inputs
 * as they were. */
static void run_gemm(int64_t m, int64_t n, int64_t k, bool ta, bool tb, Mat a, Mat b, InRound rnd,
                     float alpha, float beta, Mat c, void *d, int dtype, int64_t ldd,
                     const Epilogue &e)
{
    if (m <= 0 || n <= 0)
        return;
    /* op(A) as k rows of m values (at[p * m + i] = op(A)[i][p]): the k loop then
     * walks whole rows; op(B) as n rows of k values (bt[j * k + p] = op(B)[p][j]) */
    std::vector<float> at((size_t)(m * k)), bt((size_t)(n * k)), acc((size_t)m);
    for (int64_t p = 0; p < k; p++)
        for (int64_t i = 0; i < m; i++)
            at[(size_t)(p * m + i)] =
                round_in(load(a.p, a.type, (size_t)(ta ? p + i * a.ld : i + p * a.ld)), rnd);
    for (int64_t j = 0; j < n; j++)
        for (int64_t p = 0; p < k; p++)
            bt[(size_t)(j * k + p)] =
                round_in(load(b.p, b.type, (size_t)(tb ? j + p * b.ld : p + j * b.ld)), rnd);
    std::vector<float> bgrad;
    if (e.bgrad) { /* op(B)'s values as stored, summed in k order */
        bgrad.assign((size_t)n, 0.0f);
        for (int64_t j = 0; j < n; j++)
            for (int64_t p = 0; p < k; p++)
                bgrad[(size_t)j] += load(b.p, b.type, (size_t)(tb ? j + p * b.ld : p + j * b.ld));
    }
    for (int64_t j = 0; j < n; j++) {
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t p = 0; p < k; p++)
            fma_column(acc.data(), &at[(size_t)(p * m)], bt[(size_t)(j * k + p)], m);
        for (int64_t i = 0; i < m; i++) {
            float v = alpha * acc[(size_t)i];
            if (beta != 0.0f)
                v = fmaf(beta, load(c.p, c.type, (size_t)(i + j * c.ld)), v);
            if (e.bias)
                v += load(e.bias, e.bias_type, (size_t)i);
            if (e.aux)
                store(e.aux, e.aux_type, (size_t)(i + j * e.aux_ld), v);
            if (e.gelu)
                v = gelu_tanh(v);
            store(d, dtype, (size_t)(i + j * ldd), v);
        }
    }
    for (int64_t j = 0; e.bgrad && j < n; j++)
        store(e.bgrad, e.bgrad_type, (size_t)j, bgrad[(size_t)j]);
}

/* ---- type tables -------------------------------------------------------------------- */

/* cublasComputeType_t's enumerants (those of cuBLAS 12/13 without a name in the shim:
 * 78 _32F_EMULATED_16BFX9, 79 _64F_EMULATED_FIXEDPOINT) */
static bool compute_known(int c)
{
    return (c >= CUBLAS_COMPUTE_16F && c <= CUBLAS_COMPUTE_32F_FAST_16BF) ||
           c == CUBLAS_COMPUTE_32F_FAST_TF32 || c == 78 || c == 79;
}

/* The compute types this emulator runs: those that scale and accumulate in fp32. */
static bool compute_emulated(int c)
{
    return c == CUBLAS_COMPUTE_32F || c == CUBLAS_COMPUTE_32F_PEDANTIC ||
           c == CUBLAS_COMPUTE_32F_FAST_16F || c == CUBLAS_COMPUTE_32F_FAST_16BF ||
           c == CUBLAS_COMPUTE_32F_FAST_TF32;
}

/* The rows of cublasGemmEx's (and cublasLtMatmul's) type table with real fp32-scaled
 * compute types: 32F / 32F_PEDANTIC take A = B in 16BF, 16F or 32F with C of the same
 * type or 32F (not 8I: not emulated); the FAST types take 32F only. The 16F, 64F and
 * 32I rows, and the complex ones, are documented but not emulated. */
static bool combination_ok(int compute, int ab, int c)
{
    switch (compute) {
    case CUBLAS_COMPUTE_32F:
    case CUBLAS_COMPUTE_32F_PEDANTIC:
        return ((ab == CUDA_R_16BF || ab == CUDA_R_16F) && (c == ab || c == CUDA_R_32F)) ||
               (ab == CUDA_R_32F && c == CUDA_R_32F);
    case CUBLAS_COMPUTE_32F_FAST_16F:
    case CUBLAS_COMPUTE_32F_FAST_16BF:
    case CUBLAS_COMPUTE_32F_FAST_TF32:
        return ab == CUDA_R_32F && c == CUDA_R_32F;
    default:
        return false;
    }
}

static InRound fast_rounding(int compute)
{
    return compute == CUBLAS_COMPUTE_32F_FAST_16BF   ? RND_BF16
           : compute == CUBLAS_COMPUTE_32F_FAST_16F  ? RND_F16
           : compute == CUBLAS_COMPUTE_32F_FAST_TF32 ? RND_TF32
                                                     : RND_NONE;
}

/* ---- cuBLAS: handle --------------------------------------------------------------- */

static tr_emu_cublas *blas_of(cublasHandle_t h) { return live_is(h, OBJ_BLAS) ? h : nullptr; }

EMU_API cublasStatus_t cublasCreate_v2(cublasHandle_t *handle)
{
    if (!handle)
        return CUBLAS_STATUS_INVALID_VALUE;
    tr_emu_cublas *h = new tr_emu_cublas();
    h->stream = nullptr;
    h->workspace = nullptr;
    h->workspace_bytes = 0;
    h->math = CUBLAS_DEFAULT_MATH;
    h->atomics = CUBLAS_ATOMICS_NOT_ALLOWED; /* cuBLAS's default */
    live_add(h, OBJ_BLAS);
    *handle = h;
    return CUBLAS_STATUS_SUCCESS;
}

EMU_API cublasStatus_t cublasDestroy_v2(cublasHandle_t handle)
{
    if (!live_remove(handle, OBJ_BLAS))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}

EMU_API cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream)
{
    tr_emu_cublas *h = blas_of(handle);
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    h->stream = stream;
    /* cuBLAS: setting the stream resets the workspace to its own pool */
    h->workspace = nullptr;
    h->workspace_bytes = 0;
    return CUBLAS_STATUS_SUCCESS;
}

EMU_API cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void *workspace, size_t bytes)
{
    tr_emu_cublas *h = blas_of(handle);
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (workspace && (uintptr_t)workspace % 256) { /* cuBLAS requires 256-byte alignment */
        report("cublasSetWorkspace_v2", "workspace %p is not 256-byte aligned", workspace);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    h->workspace = workspace;
    h->workspace_bytes = bytes;
    return CUBLAS_STATUS_SUCCESS;
}

EMU_API cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode)
{
    tr_emu_cublas *h = blas_of(handle);
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    int m = (int)mode;
    int base = m & ~(int)CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
    if (base < CUBLAS_DEFAULT_MATH || base > CUBLAS_TF32_TENSOR_OP_MATH) {
        report("cublasSetMathMode", "math mode %d is not one this emulator knows", m);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    h->math = m;
    return CUBLAS_STATUS_SUCCESS;
}

EMU_API cublasStatus_t cublasSetAtomicsMode(cublasHandle_t handle, cublasAtomicsMode_t mode)
{
    tr_emu_cublas *h = blas_of(handle);
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (mode != CUBLAS_ATOMICS_NOT_ALLOWED && mode != CUBLAS_ATOMICS_ALLOWED)
        return CUBLAS_STATUS_INVALID_VALUE;
    h->atomics = (int)mode; /* no atomics here either way: results are deterministic */
    return CUBLAS_STATUS_SUCCESS;
}

/* ---- cuBLAS: the GEMMs -------------------------------------------------------------- */

/* One operand of a cuBLAS GEMM: its pointer, type, leading dimension and (strided
 * batched) the elements from one batch element to the next. */
struct GemmOperand {
    const void *p;
    int type, ld;
    long long stride;
};

/* What an fp32-input product under compute type `compute` rounds its inputs to, with
 * the handle's math mode and the algorithm: CUBLAS_TF32_TENSOR_OP_MATH lets
 * single-precision products use TF32 (inputs rounded to nearest even) and the
 * deprecated CUBLAS_TENSOR_OP_MATH, like an algorithm >= 99 (..._TENSOR_OP), makes
 * them CUBLAS_COMPUTE_32F_FAST_16F (cublasMath_t, cublasGemmAlgo_t). _PEDANTIC
 * computes as prescribed. 16-bit inputs are always multiplied as they are. */
static InRound gemm_rounding(int compute, int in_type, int math, int algo)
{
    if (in_type != CUDA_R_32F)
        return RND_NONE;
    if (algo >= CUBLAS_GEMM_DEFAULT_TENSOR_OP &&
        (compute == CUBLAS_COMPUTE_32F || compute == CUBLAS_COMPUTE_32F_FAST_TF32))
        return RND_F16;
    if (compute == CUBLAS_COMPUTE_32F) {
        int base = math & ~(int)CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
        return base == CUBLAS_TF32_TENSOR_OP_MATH ? RND_TF32
               : base == CUBLAS_TENSOR_OP_MATH    ? RND_F16
                                                  : RND_NONE;
    }
    return fast_rounding(compute);
}

static cublasStatus_t gemm(const char *fn, cublasHandle_t handle, int transa, int transb, int m,
                           int n, int k, const void *alpha_p, const void *beta_p, GemmOperand a,
                           GemmOperand b, GemmOperand c, int batch, int compute, int algo)
{
    tr_emu_cublas *h = blas_of(handle);
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    /* the argument checks cuBLAS documents as CUBLAS_STATUS_INVALID_VALUE */
    if (m < 0 || n < 0 || k < 0 || batch < 0) {
        report(fn, "m %d, n %d, k %d, batchCount %d: none may be negative", m, n, k, batch);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    for (int t : {transa, transb})
        if (t != CUBLAS_OP_N && t != CUBLAS_OP_T && t != CUBLAS_OP_C) {
            report(fn, "operation %d is not CUBLAS_OP_N, _T or _C", t);
            return CUBLAS_STATUS_INVALID_VALUE;
        }
    bool ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N; /* C = T: real data */
    int ar = ta ? k : m, ac = ta ? m : k;                        /* A and B as stored */
    int br = tb ? n : k, bc = tb ? k : n;
    if (a.ld < (ar > 1 ? ar : 1) || b.ld < (br > 1 ? br : 1) || c.ld < (m > 1 ? m : 1)) {
        report(fn, "leading dimensions lda %d, ldb %d, ldc %d: need at least %d, %d, %d", a.ld,
               b.ld, c.ld, ar > 1 ? ar : 1, br > 1 ? br : 1, m > 1 ? m : 1);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (!alpha_p || !beta_p) {
        report(fn, "alpha or beta is NULL");
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (!compute_known(compute)) {
        report(fn, "compute type %d is not a cublasComputeType_t", compute);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    /* the combinations of the type table; algorithms DEFAULT, ALGO0..23 (no effect
     * since Ampere) and the deprecated _TENSOR_OP ones */
    if (a.type != b.type || !combination_ok(compute, a.type, c.type)) {
        report(fn, "A %s, B %s, C %s with compute type %d: not a supported combination%s",
               type_name(a.type), type_name(b.type), type_name(c.type), compute,
               compute_emulated(compute) ? "" : " (this compute type is not emulated)");
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (!(algo == CUBLAS_GEMM_DEFAULT ||
          (algo >= CUBLAS_GEMM_ALGO0 && algo <= CUBLAS_GEMM_ALGO23) ||
          (algo >= CUBLAS_GEMM_DEFAULT_TENSOR_OP && algo <= CUBLAS_GEMM_ALGO15_TENSOR_OP))) {
        report(fn, "algorithm %d is not supported", algo);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    /* every compute type run here scales in fp32: alpha and beta are host floats (the
     * handle's pointer mode is the default, host) */
    float alpha = *static_cast<const float *>(alpha_p);
    float beta = *static_cast<const float *>(beta_p);
    if (!c.p && beta != 0.0f) {
        report(fn, "C is NULL and beta is not zero");
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (m == 0 || n == 0 || batch == 0)
        return CUBLAS_STATUS_SUCCESS;
    size_t ae = type_bytes(a.type), be = type_bytes(b.type), ce = type_bytes(c.type);
    /* every buffer of every batch element first: a fault writes nothing */
    for (int i = 0; i < batch; i++) {
        long long bi = batch > 1 ? i : -1;
        if (k > 0 &&
            (!matrix_ok(fn, "A", offset(a.p, a.stride * i, ae), ar, ac, a.ld, a.type, bi) ||
             !matrix_ok(fn, "B", offset(b.p, b.stride * i, be), br, bc, b.ld, b.type, bi)))
            return CUBLAS_STATUS_EXECUTION_FAILED;
        if (!matrix_ok(fn, "C", offset(c.p, c.stride * i, ce), m, n, c.ld, c.type, bi))
            return CUBLAS_STATUS_EXECUTION_FAILED;
    }
    InRound rnd = gemm_rounding(compute, a.type, h->math, algo);
    Epilogue none;
    try {
        for (int i = 0; i < batch; i++) {
            void *ci = const_cast<void *>(offset(c.p, c.stride * i, ce));
            run_gemm(m, n, k, ta, tb, Mat{offset(a.p, a.stride * i, ae), a.type, a.ld},
                     Mat{offset(b.p, b.stride * i, be), b.type, b.ld}, rnd, alpha, beta,
                     Mat{ci, c.type, c.ld}, ci, c.type, c.ld, none);
        }
    } catch (const std::bad_alloc &) { /* the decoded operands did not fit in host memory */
        report(fn, "out of host memory for a %d x %d x %d product", m, n, k);
        return CUBLAS_STATUS_ALLOC_FAILED;
    }
    return CUBLAS_STATUS_SUCCESS;
}

EMU_API cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa,
                                      cublasOperation_t transb, int m, int n, int k,
                                      const float *alpha, const float *A, int lda, const float *B,
                                      int ldb, const float *beta, float *C, int ldc)
{
    return gemm("cublasSgemm_v2", handle, transa, transb, m, n, k, alpha, beta,
                GemmOperand{A, CUDA_R_32F, lda, 0}, GemmOperand{B, CUDA_R_32F, ldb, 0},
                GemmOperand{C, CUDA_R_32F, ldc, 0}, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

EMU_API cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
                                                 cublasOperation_t transb, int m, int n, int k,
                                                 const float *alpha, const float *A, int lda,
                                                 long long strideA, const float *B, int ldb,
                                                 long long strideB, const float *beta, float *C,
                                                 int ldc, long long strideC, int batchCount)
{
    return gemm("cublasSgemmStridedBatched", handle, transa, transb, m, n, k, alpha, beta,
                GemmOperand{A, CUDA_R_32F, lda, strideA}, GemmOperand{B, CUDA_R_32F, ldb, strideB},
                GemmOperand{C, CUDA_R_32F, ldc, strideC}, batchCount, CUBLAS_COMPUTE_32F,
                CUBLAS_GEMM_DEFAULT);
}

EMU_API cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                                    cublasOperation_t transb, int m, int n, int k,
                                    const void *alpha, const void *A, cudaDataType Atype, int lda,
                                    const void *B, cudaDataType Btype, int ldb, const void *beta,
                                    void *C, cudaDataType Ctype, int ldc,
                                    cublasComputeType_t computeType, cublasGemmAlgo_t algo)
{
    return gemm("cublasGemmEx", handle, transa, transb, m, n, k, alpha, beta,
                GemmOperand{A, Atype, lda, 0}, GemmOperand{B, Btype, ldb, 0},
                GemmOperand{C, Ctype, ldc, 0}, 1, computeType, algo);
}

EMU_API cublasStatus_t cublasGemmStridedBatchedEx(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
    const void *alpha, const void *A, cudaDataType Atype, int lda, long long strideA, const void *B,
    cudaDataType Btype, int ldb, long long strideB, const void *beta, void *C, cudaDataType Ctype,
    int ldc, long long strideC, int batchCount, cublasComputeType_t computeType,
    cublasGemmAlgo_t algo)
{
    return gemm("cublasGemmStridedBatchedEx", handle, transa, transb, m, n, k, alpha, beta,
                GemmOperand{A, Atype, lda, strideA}, GemmOperand{B, Btype, ldb, strideB},
                GemmOperand{C, Ctype, ldc, strideC}, batchCount, computeType, algo);
}

EMU_API const char *cublasGetStatusName(cublasStatus_t status)
{
    switch (status) {
    case CUBLAS_STATUS_SUCCESS:
        return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
        return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
        return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
        return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
        return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
        return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
        return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
        return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
        return "CUBLAS_STATUS_NOT_SUPPORTED";
    default:
        return "CUBLAS_STATUS_UNKNOWN";
    }
}

EMU_API const char *cublasGetStatusString(cublasStatus_t status)
{
    switch (status) {
    case CUBLAS_STATUS_SUCCESS:
        return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED:
        return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED:
        return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE:
        return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH:
        return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR:
        return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED:
        return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR:
        return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED:
        return "the requested functionality is not supported";
    default:
        return "unknown error";
    }
}

/* ---- cuBLASLt: handle and descriptors ----------------------------------------------- */

EMU_API cublasStatus_t cublasLtCreate(cublasLtHandle_t *handle)
{
    if (!handle)
        return CUBLAS_STATUS_INVALID_VALUE;
    tr_emu_cublaslt *h = new tr_emu_cublaslt();
    live_add(h, OBJ_LT);
    *handle = h;
    return CUBLAS_STATUS_SUCCESS;
}

EMU_API cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle)
{
    if (!live_remove(handle, OBJ_LT))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}

EMU_API cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *desc,
                                                cublasComputeType_t computeType,
                                                cudaDataType_t scaleType)
{
    if (!desc)
        return CUBLAS_STATUS_INVALID_VALUE;
    tr_emu_lt_desc *d = new tr_emu_lt_desc();
    d->compute = computeType;
    d->scale = scaleType;
    d->pointer_mode = POINTER_MODE_HOST;
    d->transa = d->transb = d->transc = CUBLAS_OP_N;
    d->fill = FILL_MODE_FULL;
    d->epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    d->bias = nullptr;
    d->bias_stride = 0;
    d->aux = nullptr;
    d->aux_ld = d->aux_stride = 0;
    d->aux_type = d->bias_type = TYPE_DEFAULT; /* -1: D's type (both attributes' default) */
    live_add(d, OBJ_DESC);
    *desc = d;
    return CUBLAS_STATUS_SUCCESS;
}

EMU_API cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc)
{
    if (!desc)
        return CUBLAS_STATUS_SUCCESS;
    if (!live_remove(desc, OBJ_DESC))
        return CUBLAS_STATUS_INVALID_VALUE;
    delete desc;
    return CUBLAS_STATUS_SUCCESS;
}

/* Copies the attribute's value where its documented size is the one given. */
template <typename T>
static cublasStatus_t set_value(const char *fn, int attr, T *dst, const void *buf, size_t size)
{
    if (size != sizeof(T)) {
        report(fn, "attribute %d takes %zu bytes, not %zu", attr, sizeof(T), size);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    memcpy(dst, buf, sizeof(T));
    return CUBLAS_STATUS_SUCCESS;
}

EMU_API cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                                      cublasLtMatmulDescAttributes_t attr,
                                                      const void *buf, size_t size)
{
    const char *fn = "cublasLtMatmulDescSetAttribute";
    if (!live_is(desc, OBJ_DESC) || !buf) {
        report(fn, "%s", !buf ? "the value is NULL" : "not a live matmul descriptor");
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    tr_emu_lt_desc *d = desc;
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE:
        return set_value(fn, attr, &d->compute, buf, size);
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE:
        return set_value(fn, attr, &d->scale, buf, size);
    case CUBLASLT_MATMUL_DESC_POINTER_MODE:
        return set_value(fn, attr, &d->pointer_mode, buf, size);
    case CUBLASLT_MATMUL_DESC_TRANSA:
        return set_value(fn, attr, &d->transa, buf, size);
    case CUBLASLT_MATMUL_DESC_TRANSB:
        return set_value(fn, attr, &d->transb, buf, size);
    case CUBLASLT_MATMUL_DESC_TRANSC:
        return set_value(fn, attr, &d->transc, buf, size);
    case CUBLASLT_MATMUL_DESC_FILL_MODE:
        return set_value(fn, attr, &d->fill, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
        return set_value(fn, attr, &d->epilogue, buf, size);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
        return set_value(fn, attr, &d->bias, buf, size);
    case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE:
        return set_value(fn, attr, &d->bias_stride, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
        return set_value(fn, attr, &d->aux, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
        return set_value(fn, attr, &d->aux_ld, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE:
        return set_value(fn, attr, &d->aux_stride, buf, size);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
        return set_value(fn, attr, &d->bias_type, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE:
        return set_value(fn, attr, &d->aux_type, buf, size);
    default:
        report(fn, "attribute %d is not one this emulator implements", (int)attr);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
}

EMU_API cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *layout, cudaDataType type,
                                                  uint64_t rows, uint64_t cols, int64_t ld)
{
    if (!layout)
        return CUBLAS_STATUS_INVALID_VALUE;
    /* CUBLASLT_MATRIX_LAYOUT_LD: non-negative, and at least the rows (column order)
     * so that the columns do not overlap */
    if (ld < 0 || (uint64_t)ld < rows) {
        report("cublasLtMatrixLayoutCreate",
               "leading dimension %lld is less than the %llu "
               "rows",
               (long long)ld, (unsigned long long)rows);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    tr_emu_lt_layout *l = new tr_emu_lt_layout();
    l->type = type;
    l->rows = rows;
    l->cols = cols;
    l->ld = ld;
    live_add(l, OBJ_LAYOUT);
    *layout = l;
    return CUBLAS_STATUS_SUCCESS;
}

EMU_API cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout)
{
    if (!layout)
        return CUBLAS_STATUS_SUCCESS;
    if (!live_remove(layout, OBJ_LAYOUT))
        return CUBLAS_STATUS_INVALID_VALUE;
    delete layout;
    return CUBLAS_STATUS_SUCCESS;
}

EMU_API cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref)
{
    if (!pref)
        return CUBLAS_STATUS_INVALID_VALUE;
    tr_emu_lt_pref *p = new tr_emu_lt_pref();
    p->search_mode = 0;                                 /* CUBLASLT_SEARCH_BEST_FIT */
    p->max_workspace = 0;                               /* no workspace allowed */
    p->reduction_mask = CUBLASLT_REDUCTION_SCHEME_MASK; /* all schemes allowed */
    for (uint32_t &a : p->align)
        a = 256; /* the documented default minimum alignments */
    live_add(p, OBJ_PREF);
    *pref = p;
    return CUBLAS_STATUS_SUCCESS;
}

EMU_API cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref)
{
    if (!pref)
        return CUBLAS_STATUS_SUCCESS;
    if (!live_remove(pref, OBJ_PREF))
        return CUBLAS_STATUS_INVALID_VALUE;
    delete pref;
    return CUBLAS_STATUS_SUCCESS;
}

EMU_API cublasStatus_t cublasLtMatmulPreferenceSetAttribute(
    cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
    size_t size)
{
    const char *fn = "cublasLtMatmulPreferenceSetAttribute";
    if (!live_is(pref, OBJ_PREF) || !buf) {
        report(fn, "%s", !buf ? "the value is NULL" : "not a live preference");
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    tr_emu_lt_pref *p = pref;
    switch (attr) {
    case CUBLASLT_MATMUL_PREF_SEARCH_MODE:
        return set_value(fn, attr, &p->search_mode, buf, size);
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
        return set_value(fn, attr, &p->max_workspace, buf, size);
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK:
        return set_value(fn, attr, &p->reduction_mask, buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
        return set_value(fn, attr, &p->align[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES],
                         buf, size);
    default:
        report(fn, "attribute %d is not one this emulator implements", (int)attr);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
}

/* ---- cuBLASLt: the problem ---------------------------------------------------------- */

/* The largest power of two up to 256 that divides the address (NULL: 256). */
static uint32_t alignment_of(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    uint32_t al = 256;
    while (al > 1 && a % al)
        al /= 2;
    return al;
}

/* One matmul as the checks resolved it. */
struct LtPlan {
    int64_t m, n, k;
    bool ta, tb;
    InRound rnd;
    bool bias_in, gelu, aux, bgradb;
    int bias_type, aux_type;
};

/* The epilogues run here; the ReLU ones (whose aux is a bit mask), the gradients of
 * ReLU and GELU, and BGRADA are not emulated. */
static bool epilogue_emulated(uint32_t e)
{
    switch (e) {
    case CUBLASLT_EPILOGUE_DEFAULT:
    case CUBLASLT_EPILOGUE_BIAS:
    case CUBLASLT_EPILOGUE_GELU:
    case CUBLASLT_EPILOGUE_GELU_AUX:
    case CUBLASLT_EPILOGUE_GELU_BIAS:
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
    case CUBLASLT_EPILOGUE_BGRADB:
        return true;
    default:
        return false;
    }
}

/* The checks cublasLtMatmul and its heuristic share: what the descriptors ask for,
 * whether it is a valid problem (else CUBLAS_STATUS_INVALID_VALUE) and whether it is
 * one this emulator, like cuBLASLt, has an algorithm for (else
 * CUBLAS_STATUS_NOT_SUPPORTED). align: the A, B, C, D alignments the algorithm may
 * assume (the preference's, or the pointers'); the bias and aux alignments are read
 * from the descriptor's pointers, as cuBLASLt's heuristic reads them. `why` gets the
 * reason for a refusal. */
static cublasStatus_t lt_plan(const tr_emu_lt_desc *d, const tr_emu_lt_layout *A,
                              const tr_emu_lt_layout *B, const tr_emu_lt_layout *C,
                              const tr_emu_lt_layout *D, const uint32_t align[4], LtPlan *p,
                              char *why, size_t wn)
{
    if (!compute_emulated(d->compute) || d->scale != CUDA_R_32F) {
        snprintf(why, wn,
                 "compute type %d with scale type %d is not emulated (32F-based "
                 "compute types with a CUDA_R_32F scale are)",
                 d->compute, d->scale);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (d->pointer_mode != POINTER_MODE_HOST || d->transc != CUBLAS_OP_N ||
        d->fill != FILL_MODE_FULL) {
        snprintf(why, wn,
                 "pointer mode %d, TRANSC %d, fill mode %d: only host scalars, "
                 "CUBLAS_OP_N and the full fill mode are emulated",
                 d->pointer_mode, d->transc, d->fill);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    for (int32_t t : {d->transa, d->transb})
        if (t != CUBLAS_OP_N && t != CUBLAS_OP_T && t != CUBLAS_OP_C) {
            snprintf(why, wn, "operation %d is not CUBLAS_OP_N, _T or _C", t);
            return CUBLAS_STATUS_INVALID_VALUE;
        }
    p->ta = d->transa != CUBLAS_OP_N;
    p->tb = d->transb != CUBLAS_OP_N;
    /* shapes: op(A) m x k, op(B) k x n, C and D m x n */
    uint64_t m = D->rows, n = D->cols;
    uint64_t am = p->ta ? A->cols : A->rows, ak = p->ta ? A->rows : A->cols;
    uint64_t bk = p->tb ? B->cols : B->rows, bn = p->tb ? B->rows : B->cols;
    if (am != m || bn != n || ak != bk || C->rows != m || C->cols != n) {
        snprintf(why, wn,
                 "shapes do not agree: op(A) %llu x %llu, op(B) %llu x %llu, C %llu x "
                 "%llu, D %llu x %llu",
                 (unsigned long long)am, (unsigned long long)ak, (unsigned long long)bk,
                 (unsigned long long)bn, (unsigned long long)C->rows, (unsigned long long)C->cols,
                 (unsigned long long)m, (unsigned long long)n);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    for (const tr_emu_lt_layout *l : {A, B, C, D})
        if (l->rows > INT32_MAX || l->cols > INT32_MAX) { /* "normally only int32_t" */
            snprintf(why, wn, "a %llu x %llu matrix: sizes past INT32_MAX are not emulated",
                     (unsigned long long)l->rows, (unsigned long long)l->cols);
            return CUBLAS_STATUS_NOT_SUPPORTED;
        }
    if (C->type != D->type) { /* out of place: "the same data type" */
        snprintf(why, wn, "C is %s but D is %s", type_name(C->type), type_name(D->type));
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (A->type != B->type || !combination_ok(d->compute, A->type, D->type)) {
        snprintf(why, wn,
                 "A %s, B %s, C/D %s with compute type %d: not a supported "
                 "combination",
                 type_name(A->type), type_name(B->type), type_name(D->type), d->compute);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    p->m = (int64_t)m;
    p->n = (int64_t)n;
    p->k = (int64_t)ak;
    p->rnd = A->type == CUDA_R_32F ? fast_rounding(d->compute) : RND_NONE;
    uint32_t e = d->epilogue;
    if (!epilogue_emulated(e)) {
        snprintf(why, wn, "epilogue %u is not emulated", e);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    p->bgradb = e == CUBLASLT_EPILOGUE_BGRADB;
    p->bias_in = !p->bgradb && (e & CUBLASLT_EPILOGUE_BIAS);
    p->gelu = !p->bgradb && (e & CUBLASLT_EPILOGUE_GELU);
    p->aux = !p->bgradb && (e & 128);
    /* the bias (or, BGRADB, its gradient): CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE unset
     * (-1) means D's type, the only bias type the type table gives these rows */
    p->bias_type = d->bias_type == TYPE_DEFAULT ? D->type : d->bias_type;
    if (p->bias_in || p->bgradb) {
        if (p->bias_type != D->type) {
            snprintf(why, wn, "a %s bias with a %s D: the type table gives D's type only",
                     type_name(p->bias_type), type_name(D->type));
            return CUBLAS_STATUS_NOT_SUPPORTED;
        }
        if (alignment_of(d->bias) < type_bytes(p->bias_type)) {
            snprintf(why, wn, "bias %p is not aligned to its elements", d->bias);
            return CUBLAS_STATUS_NOT_SUPPORTED;
        }
    }
    /* the aux matrix: D's type (the attribute must stay unset outside FP8), a leading
     * dimension of at least D's rows and a multiple of 8 */
    if (p->aux) {
        if (d->aux_type != TYPE_DEFAULT) {
            snprintf(why, wn, "EPILOGUE_AUX_DATA_TYPE %d set: only FP8 outputs may set it",
                     d->aux_type);
            return CUBLAS_STATUS_INVALID_VALUE;
        }
        if (d->aux_ld < (int64_t)m || d->aux_ld % 8) {
            snprintf(why, wn,
                     "aux leading dimension %lld: must be at least D's %llu rows and "
                     "a multiple of 8",
                     (long long)d->aux_ld, (unsigned long long)m);
            return CUBLAS_STATUS_INVALID_VALUE;
        }
        if (alignment_of(d->aux) < type_bytes(D->type)) {
            snprintf(why, wn, "aux %p is not aligned to its elements", d->aux);
            return CUBLAS_STATUS_NOT_SUPPORTED;
        }
    }
    p->aux_type = D->type;
    /* the alignments an algorithm may assume: at least an element of each matrix */
    const tr_emu_lt_layout *mats[4] = {A, B, C, D};
    for (int i = 0; i < 4; i++) {
        size_t es = type_bytes(mats[i]->type);
        if (align[i] < es || align[i] % es) {
            snprintf(why, wn, "%c aligned to %u bytes: no kernel takes %zu-byte elements so",
                     "ABCD"[i], align[i], es);
            return CUBLAS_STATUS_NOT_SUPPORTED;
        }
    }
    return CUBLAS_STATUS_SUCCESS;
}

/* What an algorithm records: the types it was chosen for and the alignments it may
 * assume, so that a call giving it anything else is refused, as a real algorithm
 * refuses a problem it cannot run. */
static void algo_encode(cublasLtMatmulAlgo_t *a, const tr_emu_lt_desc *d, const tr_emu_lt_layout *A,
                        const tr_emu_lt_layout *D, const uint32_t align[4])
{
    memset(a, 0, sizeof *a);
    a->data[0] = ALGO_MAGIC;
    a->data[1] = (uint64_t)(uint32_t)d->compute | (uint64_t)(uint32_t)d->scale << 32;
    a->data[2] = (uint64_t)(uint32_t)A->type | (uint64_t)(uint32_t)D->type << 32;
    for (int i = 0; i < 4; i++)
        a->data[3] |= (uint64_t)(align[i] < 256 ? align[i] : 256) << (16 * i);
    a->data[4] = (uint64_t)alignment_of(d->bias) | (uint64_t)alignment_of(d->aux) << 16;
}

static bool algo_fits(const cublasLtMatmulAlgo_t *a, const tr_emu_lt_desc *d,
                      const tr_emu_lt_layout *A, const tr_emu_lt_layout *D, const uint32_t align[4],
                      char *why, size_t wn)
{
    if (a->data[0] != ALGO_MAGIC) {
        snprintf(why, wn, "the algorithm did not come from cublasLtMatmulAlgoGetHeuristic");
        return false;
    }
    cublasLtMatmulAlgo_t now;
    algo_encode(&now, d, A, D, align);
    if (a->data[1] != now.data[1] || a->data[2] != now.data[2]) {
        snprintf(why, wn, "the algorithm was chosen for other compute or data types");
        return false;
    }
    for (int i = 0; i < 6; i++) {
        uint64_t want = (i < 4 ? a->data[3] >> (16 * i) : a->data[4] >> (16 * (i - 4))) & 0xffff;
        uint64_t have = (i < 4 ? now.data[3] >> (16 * i) : now.data[4] >> (16 * (i - 4))) & 0xffff;
        if (have < want) {
            static const char *names[6] = {"A", "B", "C", "D", "bias", "aux"};
            snprintf(why, wn, "%s is aligned to %llu bytes; the algorithm was chosen for %llu",
                     names[i], (unsigned long long)have, (unsigned long long)want);
            return false;
        }
    }
    return true;
}

EMU_API cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t Adesc,
    cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
    cublasLtMatmulPreference_t pref, int requestedAlgoCount,
    cublasLtMatmulHeuristicResult_t heuristicResultsArray[], int *returnAlgoCount)
{
    const char *fn = "cublasLtMatmulAlgoGetHeuristic";
    if (!live_is(handle, OBJ_LT))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (returnAlgoCount)
        *returnAlgoCount = 0;
    if (!live_is(desc, OBJ_DESC) || !live_is(Adesc, OBJ_LAYOUT) || !live_is(Bdesc, OBJ_LAYOUT) ||
        !live_is(Cdesc, OBJ_LAYOUT) || !live_is(Ddesc, OBJ_LAYOUT) || !live_is(pref, OBJ_PREF) ||
        requestedAlgoCount <= 0 || !heuristicResultsArray || !returnAlgoCount) {
        report(fn,
               "a descriptor, the preference or the results are not valid, or "
               "requestedAlgoCount %d is not positive",
               requestedAlgoCount);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    LtPlan plan;
    char why[256];
    cublasStatus_t st =
        lt_plan(desc, Adesc, Bdesc, Cdesc, Ddesc, pref->align, &plan, why, sizeof why);
    if (st != CUBLAS_STATUS_SUCCESS) {
        /* no algorithm: cuBLASLt answers CUBLAS_STATUS_NOT_SUPPORTED with none returned
         * (an invalid problem keeps its CUBLAS_STATUS_INVALID_VALUE) */
        if (trace_heuristic())
            report(fn, "no algorithm: %s", why);
        return st;
    }
    cublasLtMatmulHeuristicResult_t &r = heuristicResultsArray[0];
    memset(&r, 0, sizeof r);
    algo_encode(&r.algo, desc, Adesc, Ddesc, pref->align);
    r.workspaceSize = 0; /* within any MAX_WORKSPACE_BYTES, no reduction scheme */
    r.state = CUBLAS_STATUS_SUCCESS;
    r.wavesCount = 1.0f;
    *returnAlgoCount = 1;
    return CUBLAS_STATUS_SUCCESS;
}

EMU_API cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                      const void *alpha, const void *A,
                                      cublasLtMatrixLayout_t Adesc, const void *B,
                                      cublasLtMatrixLayout_t Bdesc, const void *beta, const void *C,
                                      cublasLtMatrixLayout_t Cdesc, void *D,
                                      cublasLtMatrixLayout_t Ddesc,
                                      const cublasLtMatmulAlgo_t *algo, void *workspace,
                                      size_t workspaceSizeInBytes, cudaStream_t stream)
{
    const char *fn = "cublasLtMatmul";
    (void)stream; /* the emulated streams are synchronous: the work is done on return */
    /* the algorithms here need no workspace: one given is checked, not used */
    if (!live_is(handle, OBJ_LT))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!Cdesc) /* "If Cdesc is omitted, this function assumes it to be equal to Ddesc" */
        Cdesc = Ddesc;
    if (!live_is(desc, OBJ_DESC) || !live_is(Adesc, OBJ_LAYOUT) || !live_is(Bdesc, OBJ_LAYOUT) ||
        !live_is(Cdesc, OBJ_LAYOUT) || !live_is(Ddesc, OBJ_LAYOUT) || !alpha || !beta) {
        report(fn, "a descriptor is not valid, or alpha or beta is NULL");
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (workspace && (uintptr_t)workspace % 256) {
        report(fn, "workspace %p is not 256-byte aligned", workspace);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    /* a workspace the algorithm may write: device memory (a GPU would fault on host
     * memory) that holds none of the operands (which it would overwrite) */
    if (workspaceSizeInBytes && !tr_emu_device_span(workspace, workspaceSizeInBytes)) {
        report(fn,
               "workspace [%p, +%zu bytes) is not inside one live device allocation: the "
               "kernel would fault",
               workspace, workspaceSizeInBytes);
        return CUBLAS_STATUS_EXECUTION_FAILED;
    }
    const void *operands[] = {A, B, C, D, desc ? desc->bias : NULL, desc ? desc->aux : NULL};
    for (const void *op : operands) {
        const char *w = static_cast<const char *>(workspace), *o = static_cast<const char *>(op);
        if (workspaceSizeInBytes && op && o >= w && o < w + workspaceSizeInBytes) {
            report(fn, "an operand at %p lies in the workspace %p (%zu bytes)", op, workspace,
                   workspaceSizeInBytes);
            return CUBLAS_STATUS_INVALID_VALUE;
        }
    }
    const tr_emu_lt_desc *d = desc;
    uint32_t align[4] = {alignment_of(A), alignment_of(B), alignment_of(C), alignment_of(D)};
    LtPlan plan;
    char why[256];
    cublasStatus_t st = lt_plan(d, Adesc, Bdesc, Cdesc, Ddesc, align, &plan, why, sizeof why);
    if (st != CUBLAS_STATUS_SUCCESS) {
        report(fn, "%s", why);
        return st;
    }
    if (algo && !algo_fits(algo, d, Adesc, Ddesc, align, why, sizeof why)) {
        report(fn, "%s", why);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    /* the scale type is CUDA_R_32F (lt_plan): alpha and beta are host floats */
    float a = *static_cast<const float *>(alpha), b = *static_cast<const float *>(beta);
    if (b != 0.0f && !C) {
        report(fn, "C is NULL and beta is not zero");
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (C == D && b != 0.0f && Cdesc->ld != Ddesc->ld) { /* in place: Cdesc == Ddesc */
        report(fn, "C is D in place but its leading dimension %lld is not D's %lld",
               (long long)Cdesc->ld, (long long)Ddesc->ld);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if ((plan.bias_in || plan.bgradb) && !d->bias) {
        report(fn, "epilogue %u needs CUBLASLT_MATMUL_DESC_BIAS_POINTER", d->epilogue);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (plan.aux && !d->aux) {
        report(fn, "epilogue %u needs CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER", d->epilogue);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    /* every buffer the kernel would touch, before anything is written */
    if (plan.k > 0 &&
        (!matrix_ok(fn, "A", A, Adesc->rows, Adesc->cols, Adesc->ld, Adesc->type, -1) ||
         !matrix_ok(fn, "B", B, Bdesc->rows, Bdesc->cols, Bdesc->ld, Bdesc->type, -1)))
        return CUBLAS_STATUS_EXECUTION_FAILED;
    if (b != 0.0f && !matrix_ok(fn, "C", C, Cdesc->rows, Cdesc->cols, Cdesc->ld, Cdesc->type, -1))
        return CUBLAS_STATUS_EXECUTION_FAILED;
    if (!matrix_ok(fn, "D", D, Ddesc->rows, Ddesc->cols, Ddesc->ld, Ddesc->type, -1))
        return CUBLAS_STATUS_EXECUTION_FAILED;
    if ((plan.bias_in || plan.bgradb) &&
        !matrix_ok(fn, "bias", d->bias, (uint64_t)(plan.bgradb ? plan.n : plan.m), 1,
                   (uint64_t)(plan.bgradb ? plan.n : plan.m), plan.bias_type, -1))
        return CUBLAS_STATUS_EXECUTION_FAILED;
    if (plan.aux && !matrix_ok(fn, "aux", d->aux, (uint64_t)plan.m, (uint64_t)plan.n,
                               (uint64_t)d->aux_ld, plan.aux_type, -1))
        return CUBLAS_STATUS_EXECUTION_FAILED;
    Epilogue e;
    if (plan.bias_in) {
        e.bias = d->bias;
        e.bias_type = plan.bias_type;
    }
    if (plan.bgradb) {
        e.bgrad = const_cast<void *>(d->bias);
        e.bgrad_type = plan.bias_type;
    }
    if (plan.aux) {
        e.aux = d->aux;
        e.aux_type = plan.aux_type;
        e.aux_ld = d->aux_ld;
    }
    e.gelu = plan.gelu;
    try {
        run_gemm(plan.m, plan.n, plan.k, plan.ta, plan.tb, Mat{A, Adesc->type, Adesc->ld},
                 Mat{B, Bdesc->type, Bdesc->ld}, plan.rnd, a, b, Mat{C, Cdesc->type, Cdesc->ld}, D,
                 Ddesc->type, Ddesc->ld, e);
    } catch (const std::bad_alloc &) {
        report(fn, "out of host memory for a %lld x %lld x %lld product", (long long)plan.m,
               (long long)plan.n, (long long)plan.k);
        return CUBLAS_STATUS_ALLOC_FAILED;
    }
    return CUBLAS_STATUS_SUCCESS;
}
