/* test_emu_cublas.cpp: checks emu_cublas.cpp, the host cuBLAS and cuBLASLt of the CUDA
 * emulation build, against references written in the plainest way, mostly in the
 * trainer's own row-major terms (cuda_gemm.cu, cuda_linear_lt.cu), so that a column-major
 * slip in the library and the same slip in the reference cannot cancel.
 *
 * Covered: every type and compute-type combination the trainer uses (cublasSgemm, its
 * strided batched form, cublasGemmEx and cublasGemmStridedBatchedEx on fp32, bf16 and
 * fp16 operands with fp32 or 16-bit C, the FAST compute types and TF32), beta == 0 with
 * NaN in C (which must not be read), beta != 0, padded leading dimensions (padding
 * neither read nor written), the cuBLASLt epilogues (DEFAULT, BIAS, GELU, GELU_AUX,
 * GELU_BIAS, GELU_AUX_BIAS, BGRADB) through the heuristic as the trainer asks it, the
 * FAST types' rounding on hand-picked ties and overflows, the statuses for unsupported
 * and invalid calls, and host (non-device) buffers refused.
 * The references accumulate each dot product with fmaf in k order, as the library
 * promises, so results are compared bit for bit.
 *
 * Built against the emulated runtime (emu_runtime.cpp, the trainer_emu_cudart
 * library: cudaMalloc and the device-memory table), with the library's source.
 * Runs in milliseconds; prints "ok" and returns 0, or the failures and 1.
 * The library's own lines on stderr during the run are the refusals the test asks for. */
#include "cublasLt.h"

#include "backend/lowp_math.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <vector>

/* ---- device memory ------------------------------------------------------------------ */

static std::vector<void *> g_device; /* freed at the end */

static void *dev_alloc(size_t bytes)
{
    void *p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess || !p) {
        printf("FAIL: cudaMalloc(%zu)\n", bytes);
        exit(1);
    }
    g_device.push_back(p);
    return p;
}

/* ---- checks ----------------------------------------------------------------------- */

static int g_failures;
static int g_checks;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        g_checks++;                                                                                \
        if (!(cond)) {                                                                             \
            g_failures++;                                                                          \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                            \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
        }                                                                                          \
    } while (0)

#define CHECK_STATUS(call, want)                                                                   \
    do {                                                                                           \
        cublasStatus_t got_ = (call);                                                              \
        CHECK(got_ == (want), "%s: got %s, want %s", #call, cublasGetStatusName(got_),             \
              cublasGetStatusName(want));                                                          \
    } while (0)

static bool same_bits(float a, float b)
{
    if (std::isnan(a) && std::isnan(b))
        return true;
    return memcmp(&a, &b, sizeof a) == 0;
}

/* ---- values ------------------------------------------------------------------------- */

static std::mt19937 g_rng(12345);

/* full fp32 mantissas, so that the FAST compute types' rounding shows */
static float rnd_value(void)
{
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    return u(g_rng);
}

static int rnd_int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(g_rng); }

static size_t bytes_of(int type) { return type == CUDA_R_32F ? 4 : 2; }

/* A host matrix of one element type, as flat elements. */
struct HostMat {
    int type;
    std::vector<uint8_t> raw;
    HostMat(int t, size_t n) : type(t), raw(n * bytes_of(t)) {}
    size_t size() const { return raw.size() / bytes_of(type); }
    float get(size_t i) const
    {
        if (type == CUDA_R_32F) {
            float f;
            memcpy(&f, &raw[i * 4], 4);
            return f;
        }
        uint16_t h;
        memcpy(&h, &raw[i * 2], 2);
        return type == CUDA_R_16BF ? tr_bf16_to_f32(h) : tr_f16_to_f32(h);
    }
    void set(size_t i, float v) /* rounded to nearest even for a 16-bit type */
    {
        if (type == CUDA_R_32F) {
            memcpy(&raw[i * 4], &v, 4);
            return;
        }
        uint16_t h = type == CUDA_R_16BF ? tr_f32_to_bf16(v) : tr_f32_to_f16(v);
        memcpy(&raw[i * 2], &h, 2);
    }
    void fill_random(void)
    {
        for (size_t i = 0; i < size(); i++)
            set(i, rnd_value());
    }
    void *to_device(void) const
    {
        void *p = dev_alloc(raw.size());
        memcpy(p, raw.data(), raw.size());
        return p;
    }
    /* element i as the device copy p holds it */
    static float get_dev(const void *p, int type, size_t i)
    {
        if (type == CUDA_R_32F)
            return ((const float *)p)[i];
        uint16_t h = ((const uint16_t *)p)[i];
        return type == CUDA_R_16BF ? tr_bf16_to_f32(h) : tr_f16_to_f32(h);
    }
};

/* what the reference stores: fp32, or rounded once to the 16-bit type */
static float stored(float v, int type)
{
    if (type == CUDA_R_16BF)
        return tr_bf16_to_f32(tr_f32_to_bf16(v));
    if (type == CUDA_R_16F)
        return tr_f16_to_f32(tr_f32_to_f16(v));
    return v;
}

/* TF32: 11 significant bits, nearest even, by scaling the significand to an integer
 * (independent of the library's bit manipulation; the test's values are normal) */
static float tf32_ref(float x)
{
    if (!std::isfinite(x) || x == 0.0f)
        return x;
    int e;
    float m = frexpf(x, &e); /* |m| in [0.5, 1) */
    return ldexpf(nearbyintf(ldexpf(m, 11)), e - 11);
}

/* what a FAST compute type makes of an fp32 input */
static float input_as(float x, int compute)
{
    switch (compute) {
    case CUBLAS_COMPUTE_32F_FAST_16BF:
        return stored(x, CUDA_R_16BF);
    case CUBLAS_COMPUTE_32F_FAST_16F:
        return stored(x, CUDA_R_16F);
    case CUBLAS_COMPUTE_32F_FAST_TF32:
        return tf32_ref(x);
    default:
        return x;
    }
}

static float gelu_ref(float x)
{
    return 0.5f * x * (1.0f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x)));
}

static const char *tname(int t)
{
    return t == CUDA_R_32F ? "32F" : t == CUDA_R_16BF ? "16BF" : t == CUDA_R_16F ? "16F" : "?";
}

static cublasOperation_t op(int t) { return t ? CUBLAS_OP_T : CUBLAS_OP_N; }

/* ---- cuBLAS: the trainer's row-major products --------------------------------------- */

/* Row-major C[M][N] = alpha op(A) op(B) + beta C, called as cuda_gemm.cu calls it
 * (operands swapped, M and N swapped), checked against the row-major definition.
 * A is [M][K] (transA: [K][M]) with row stride lda, B [K][N] ([N][K]), C [M][N]; every
 * row stride padded by `pad`, the padding holding a sentinel that must survive.
 * batch > 1: the strided batched calls, each matrix `gap` elements past the previous
 * one's end. Returns the number of elements where a FAST type's rounding changed the
 * result (so the caller can see the rounding was exercised). */
static int check_rowmajor(cublasHandle_t h, const char *what, int transA, int transB, int M, int N,
                          int K, int abtype, int ctype, int compute, float alpha, float beta,
                          int pad, int batch, bool sgemm)
{
    int ar = transA ? K : M, ac = transA ? M : K, br = transB ? N : K, bc = transB ? K : N;
    int lda = ac + pad, ldb = bc + pad, ldc = N + pad, gap = 3;
    long long sa = (long long)ar * lda + gap, sb = (long long)br * ldb + gap,
              sc = (long long)M * ldc + gap;
    HostMat A(abtype, (size_t)(sa * batch)), B(abtype, (size_t)(sb * batch)),
        C(ctype, (size_t)(sc * batch));
    A.fill_random();
    B.fill_random();
    const float sentinel = 1120.0f; /* exact in every type */
    for (size_t i = 0; i < C.size(); i++)
        C.set(i, sentinel);
    for (int b = 0; b < batch; b++)
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++)
                C.set((size_t)(b * sc + i * ldc + j), beta == 0.0f ? NAN : rnd_value());
    void *dA = A.to_device(), *dB = B.to_device(), *dC = C.to_device();
    cublasStatus_t st;
    if (sgemm && batch == 1)
        st = cublasSgemm_v2(h, op(transB), op(transA), N, M, K, &alpha, (const float *)dB, ldb,
                            (const float *)dA, lda, &beta, (float *)dC, ldc);
    else if (sgemm)
        st = cublasSgemmStridedBatched(h, op(transB), op(transA), N, M, K, &alpha,
                                       (const float *)dB, ldb, sb, (const float *)dA, lda, sa,
                                       &beta, (float *)dC, ldc, sc, batch);
    else if (batch == 1)
        st = cublasGemmEx(h, op(transB), op(transA), N, M, K, &alpha, dB, (cudaDataType)abtype, ldb,
                          dA, (cudaDataType)abtype, lda, &beta, dC, (cudaDataType)ctype, ldc,
                          (cublasComputeType_t)compute, CUBLAS_GEMM_DEFAULT);
    else
        st = cublasGemmStridedBatchedEx(h, op(transB), op(transA), N, M, K, &alpha, dB,
                                        (cudaDataType)abtype, ldb, sb, dA, (cudaDataType)abtype,
                                        lda, sa, &beta, dC, (cudaDataType)ctype, ldc, sc, batch,
                                        (cublasComputeType_t)compute, CUBLAS_GEMM_DEFAULT);
    CHECK(st == CUBLAS_STATUS_SUCCESS, "%s: status %s", what, cublasGetStatusName(st));
    int bad = 0, rounded = 0;
    for (int b = 0; b < batch; b++)
        for (int i = 0; i < M; i++)
            for (int j = 0; j < ldc; j++) {
                size_t at = (size_t)(b * sc + i * ldc + j);
                float got = HostMat::get_dev(dC, ctype, at);
                float want = sentinel;
                if (j < N) {
                    float acc = 0.0f, exact = 0.0f;
                    for (int p = 0; p < K; p++) {
                        float a = transA ? A.get((size_t)(b * sa + p * lda + i))
                                         : A.get((size_t)(b * sa + i * lda + p));
                        float x = transB ? B.get((size_t)(b * sb + j * ldb + p))
                                         : B.get((size_t)(b * sb + p * ldb + j));
                        exact = fmaf(a, x, exact);
                        if (abtype == CUDA_R_32F) {
                            a = input_as(a, compute);
                            x = input_as(x, compute);
                        }
                        acc = fmaf(a, x, acc);
                    }
                    rounded += acc != exact;
                    want = alpha * acc;
                    if (beta != 0.0f)
                        want = fmaf(beta, C.get(at), want);
                    want = stored(want, ctype);
                }
                if (!same_bits(got, want) && bad++ < 3)
                    CHECK(false, "%s: C[%d][%d][%d] = %.9g, want %.9g", what, b, i, j, got, want);
            }
    for (int b = 0; b + 1 < batch; b++) /* the gaps between batch elements */
        for (int g = 0; g < gap; g++) {
            float got = HostMat::get_dev(dC, ctype, (size_t)(b * sc + M * ldc + g));
            if (!same_bits(got, sentinel) && bad++ < 3)
                CHECK(false, "%s: the gap after batch element %d was written", what, b);
        }
    CHECK(bad == 0, "%s: %d wrong elements (%d x %d x %d, trans %d%d, batch %d)", what, bad, M, N,
          K, transA, transB, batch);
    return rounded;
}

static void test_cublas_products(cublasHandle_t h)
{
    /* fp32: cublasSgemm and its batched form, every transpose, beta 0 (NaN in C),
     * accumulating (beta 1) and general scalars */
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int pad = 0; pad < 2; pad++) {
                int M = rnd_int(1, 13), N = rnd_int(1, 13), K = rnd_int(1, 19);
                check_rowmajor(h, "sgemm beta 0", ta, tb, M, N, K, CUDA_R_32F, CUDA_R_32F,
                               CUBLAS_COMPUTE_32F, 1.0f, 0.0f, pad * 3, 1, true);
                check_rowmajor(h, "sgemm beta 1", ta, tb, M, N, K, CUDA_R_32F, CUDA_R_32F,
                               CUBLAS_COMPUTE_32F, 1.0f, 1.0f, pad * 3, 1, true);
                check_rowmajor(h, "sgemm scaled", ta, tb, M, N, K, CUDA_R_32F, CUDA_R_32F,
                               CUBLAS_COMPUTE_32F, 0.75f, -1.5f, pad * 3, 1, true);
                check_rowmajor(h, "sgemm batched", ta, tb, M, N, K, CUDA_R_32F, CUDA_R_32F,
                               CUBLAS_COMPUTE_32F, 1.0f, pad ? 0.5f : 0.0f, pad, 3, true);
            }
    /* the trainer's cublasGemmEx combinations: 16-bit copies with fp32 or 16-bit C
     * (COMPUTE_32F), and fp32 buffers under the FAST compute types */
    const int ab16[2] = {CUDA_R_16BF, CUDA_R_16F};
    for (int t : ab16)
        for (int c16 = 0; c16 < 2; c16++)
            for (int beta1 = 0; beta1 < 2; beta1++) {
                int ta = rnd_int(0, 1), tb = rnd_int(0, 1);
                char what[64];
                snprintf(what, sizeof what, "gemmex %s -> %s beta %d", tname(t),
                         tname(c16 ? t : CUDA_R_32F), beta1);
                check_rowmajor(h, what, ta, tb, rnd_int(1, 12), rnd_int(1, 12), rnd_int(1, 24), t,
                               c16 ? t : CUDA_R_32F, CUBLAS_COMPUTE_32F, 1.0f, (float)beta1,
                               rnd_int(0, 2), 1, false);
            }
    const int fast[3] = {CUBLAS_COMPUTE_32F_FAST_16BF, CUBLAS_COMPUTE_32F_FAST_16F,
                         CUBLAS_COMPUTE_32F_FAST_TF32};
    for (int c : fast) {
        int rounded = 0;
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                char what[64];
                snprintf(what, sizeof what, "gemmex fast %d trans %d%d", c, ta, tb);
                rounded += check_rowmajor(h, what, ta, tb, rnd_int(2, 12), rnd_int(2, 12),
                                          rnd_int(4, 24), CUDA_R_32F, CUDA_R_32F, c, 1.0f,
                                          (float)(ta ^ tb), rnd_int(0, 2), 1, false);
                rounded += check_rowmajor(h, "gemm strided batched ex", ta, tb, rnd_int(2, 9),
                                          rnd_int(2, 9), rnd_int(4, 16), CUDA_R_32F, CUDA_R_32F, c,
                                          1.0f, 0.0f, 1, 2, false);
            }
        CHECK(rounded > 0, "compute type %d: no result differed from fp32 inputs", c);
    }
    /* the handle's math mode governs fp32 products: TF32 when asked for, else fp32 */
    CHECK_STATUS(cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH), CUBLAS_STATUS_SUCCESS);
    int tf32 = check_rowmajor(h, "sgemm tf32 mode", 1, 0, 9, 7, 21, CUDA_R_32F, CUDA_R_32F,
                              CUBLAS_COMPUTE_32F_FAST_TF32, 1.0f, 0.0f, 0, 1, true);
    CHECK(tf32 > 0, "the TF32 math mode did not round");
    CHECK_STATUS(
        cublasSetMathMode(h, (cublasMath_t)(CUBLAS_DEFAULT_MATH |
                                            CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)),
        CUBLAS_STATUS_SUCCESS);
    check_rowmajor(h, "sgemm default mode", 1, 0, 9, 7, 21, CUDA_R_32F, CUDA_R_32F,
                   CUBLAS_COMPUTE_32F, 1.0f, 0.0f, 0, 1, true);
}

/* The FAST compute types' input rounding on values chosen by hand: ties go to even,
 * and a value past the format's largest rounds to infinity. C = op(A) with B = 1. */
static void test_input_rounding(cublasHandle_t h)
{
    const float inf = INFINITY;
    const float t11 = ldexpf(1.0f, -11), t8 = ldexpf(1.0f, -8);
    struct {
        int compute;
        float in[4], want[4];
    } cases[] = {
        /* TF32 and fp16 keep 10 mantissa bits: 2^-11 past 1 is a tie */
        {CUBLAS_COMPUTE_32F_FAST_TF32,
         {1.0f + t11, 1.0f + 3 * t11, -(1.0f + t11), 3.4028235e38f},
         {1.0f, 1.0f + 4 * t11, -1.0f, inf}},
        {CUBLAS_COMPUTE_32F_FAST_16F,
         {1.0f + t11, 1.0f + 3 * t11, 65520.0f, 65519.0f},
         {1.0f, 1.0f + 4 * t11, inf, 65504.0f}},
        /* bf16 keeps 7 */
        {CUBLAS_COMPUTE_32F_FAST_16BF,
         {1.0f + t8, 1.0f + 3 * t8, -(1.0f + 3 * t8), 3.4028235e38f},
         {1.0f, 1.0f + 4 * t8, -(1.0f + 4 * t8), inf}},
    };
    float *A = (float *)dev_alloc(4 * 4), *B = (float *)dev_alloc(4), *C = (float *)dev_alloc(16);
    B[0] = 1.0f;
    float one = 1.0f, zero = 0.0f;
    for (auto &c : cases) {
        memcpy(A, c.in, sizeof c.in);
        CHECK_STATUS(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 1, 1, &one, A, CUDA_R_32F, 4, B,
                                  CUDA_R_32F, 1, &zero, C, CUDA_R_32F, 4,
                                  (cublasComputeType_t)c.compute, CUBLAS_GEMM_DEFAULT),
                     CUBLAS_STATUS_SUCCESS);
        for (int i = 0; i < 4; i++)
            CHECK(same_bits(C[i], c.want[i]), "compute %d: %.9g became %.9g, want %.9g", c.compute,
                  c.in[i], C[i], c.want[i]);
    }
    /* the deprecated _TENSOR_OP algorithms make an fp32 product CUBLAS_COMPUTE_32F_FAST_16F */
    memcpy(A, cases[1].in, sizeof cases[1].in);
    CHECK_STATUS(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 1, 1, &one, A, CUDA_R_32F, 4, B,
                              CUDA_R_32F, 1, &zero, C, CUDA_R_32F, 4, CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT_TENSOR_OP),
                 CUBLAS_STATUS_SUCCESS);
    for (int i = 0; i < 4; i++)
        CHECK(same_bits(C[i], cases[1].want[i]), "_TENSOR_OP: %.9g became %.9g", cases[1].in[i],
              C[i]);
}

/* Column-major, directly: k == 0 (C = beta C), and m == 0 touching nothing. */
static void test_cublas_edges(cublasHandle_t h)
{
    float *C = (float *)dev_alloc(6 * sizeof(float));
    for (int i = 0; i < 6; i++)
        C[i] = NAN;
    float one = 1.0f, zero = 0.0f, two = 2.0f;
    CHECK_STATUS(cublasSgemm_v2(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 3, 0, &one, nullptr, 2, nullptr, 1,
                                &zero, C, 2),
                 CUBLAS_STATUS_SUCCESS);
    bool zeros = true;
    for (int i = 0; i < 6; i++)
        zeros = zeros && same_bits(C[i], 0.0f);
    CHECK(zeros, "k == 0, beta == 0 did not write zeros over NaN");
    for (int i = 0; i < 6; i++)
        C[i] = (float)i;
    CHECK_STATUS(cublasSgemm_v2(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 3, 0, &one, nullptr, 2, nullptr, 1,
                                &two, C, 2),
                 CUBLAS_STATUS_SUCCESS);
    CHECK(C[5] == 10.0f && C[1] == 2.0f, "k == 0 did not scale C by beta");
    CHECK_STATUS(cublasSgemm_v2(h, CUBLAS_OP_N, CUBLAS_OP_N, 0, 3, 4, &one, nullptr, 1, nullptr, 4,
                                &zero, nullptr, 1),
                 CUBLAS_STATUS_SUCCESS);
    CHECK_STATUS(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, nullptr, 2,
                                           4, nullptr, 2, 4, &zero, nullptr, 2, 4, 0),
                 CUBLAS_STATUS_SUCCESS);
}

/* Refusals: what cuBLAS documents as INVALID_VALUE, NOT_SUPPORTED, NOT_INITIALIZED,
 * and buffers outside device memory (EXECUTION_FAILED, with nothing written). */
static void test_cublas_refusals(cublasHandle_t h)
{
    const int n = 4;
    float *A = (float *)dev_alloc(n * n * 4), *B = (float *)dev_alloc(n * n * 4);
    float *C = (float *)dev_alloc(n * n * 4);
    uint16_t *H = (uint16_t *)dev_alloc(n * n * 2), *H2 = (uint16_t *)dev_alloc(n * n * 2);
    for (int i = 0; i < n * n; i++) {
        A[i] = B[i] = 1.0f;
        C[i] = -7.0f;
        H[i] = H2[i] = 0;
    }
    float one = 1.0f, zero = 0.0f;
    const cublasOperation_t N = CUBLAS_OP_N;
    /* INVALID_VALUE */
    CHECK_STATUS(cublasSgemm_v2(h, N, N, -1, n, n, &one, A, n, B, n, &zero, C, n),
                 CUBLAS_STATUS_INVALID_VALUE);
    CHECK_STATUS(cublasSgemm_v2(h, N, N, n, n, n, &one, A, n - 1, B, n, &zero, C, n),
                 CUBLAS_STATUS_INVALID_VALUE);
    CHECK_STATUS(cublasSgemm_v2(h, CUBLAS_OP_T, N, n, n, 2, &one, A, 1, B, n, &zero, C, n),
                 CUBLAS_STATUS_INVALID_VALUE); /* op(A) = A^T: lda >= k */
    CHECK_STATUS(cublasSgemm_v2(h, N, CUBLAS_OP_T, n, 3, n, &one, A, n, B, 2, &zero, C, n),
                 CUBLAS_STATUS_INVALID_VALUE); /* op(B) = B^T: ldb >= n */
    CHECK_STATUS(cublasSgemm_v2(h, N, N, n, n, n, &one, A, n, B, n, &zero, C, n - 1),
                 CUBLAS_STATUS_INVALID_VALUE);
    CHECK_STATUS(cublasSgemm_v2(h, (cublasOperation_t)5, N, n, n, n, &one, A, n, B, n, &zero, C, n),
                 CUBLAS_STATUS_INVALID_VALUE);
    CHECK_STATUS(cublasSgemm_v2(h, N, N, n, n, n, nullptr, A, n, B, n, &zero, C, n),
                 CUBLAS_STATUS_INVALID_VALUE);
    CHECK_STATUS(cublasSgemm_v2(h, N, N, n, n, n, &one, A, n, B, n, &one, nullptr, n),
                 CUBLAS_STATUS_INVALID_VALUE);
    CHECK_STATUS(
        cublasSgemmStridedBatched(h, N, N, n, n, n, &one, A, n, 0, B, n, 0, &zero, C, n, 0, -1),
        CUBLAS_STATUS_INVALID_VALUE);
    CHECK_STATUS(cublasGemmEx(h, N, N, n, n, n, &one, A, CUDA_R_32F, n, B, CUDA_R_32F, n, &zero, C,
                              CUDA_R_32F, n, (cublasComputeType_t)12345, CUBLAS_GEMM_DEFAULT),
                 CUBLAS_STATUS_INVALID_VALUE);
    /* NOT_SUPPORTED: combinations outside cublasGemmEx's table, or not emulated */
    struct {
        int a, b, c, compute;
    } bad[] = {
        {CUDA_R_16BF, CUDA_R_16F, CUDA_R_32F, CUBLAS_COMPUTE_32F},  /* A and B differ */
        {CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16F, CUBLAS_COMPUTE_32F}, /* C of the other type */
        {CUDA_R_32F, CUDA_R_32F, CUDA_R_16BF, CUBLAS_COMPUTE_32F},  /* 32F in, 16BF out */
        {CUDA_R_16BF, CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_16BF}, /* FAST: 32F */
        {CUDA_R_32F, CUDA_R_32F, CUDA_R_16F, CUBLAS_COMPUTE_32F_FAST_16F},
        {CUDA_R_16F, CUDA_R_16F, CUDA_R_16F, CUBLAS_COMPUTE_16F}, /* not emulated */
        {CUDA_R_64F, CUDA_R_64F, CUDA_R_64F, CUBLAS_COMPUTE_64F},
    };
    for (auto &c : bad) {
        const void *a = c.a == CUDA_R_32F ? (const void *)A : H,
                   *b = c.b == CUDA_R_32F ? (const void *)B : H2;
        void *cc = c.c == CUDA_R_32F ? (void *)C : H;
        cublasStatus_t st = cublasGemmEx(h, N, N, n, n, n, &one, a, (cudaDataType)c.a, n, b,
                                         (cudaDataType)c.b, n, &zero, cc, (cudaDataType)c.c, n,
                                         (cublasComputeType_t)c.compute, CUBLAS_GEMM_DEFAULT);
        CHECK(st == CUBLAS_STATUS_NOT_SUPPORTED, "GemmEx %d %d %d compute %d: %s", c.a, c.b, c.c,
              c.compute, cublasGetStatusName(st));
    }
    CHECK_STATUS(cublasGemmEx(h, N, N, n, n, n, &one, A, CUDA_R_32F, n, B, CUDA_R_32F, n, &zero, C,
                              CUDA_R_32F, n, CUBLAS_COMPUTE_32F, (cublasGemmAlgo_t)50),
                 CUBLAS_STATUS_NOT_SUPPORTED);
    bool untouched = true;
    for (int i = 0; i < n * n; i++)
        untouched = untouched && C[i] == -7.0f;
    CHECK(untouched, "a refused call wrote C");
    /* NOT_INITIALIZED */
    CHECK_STATUS(cublasSgemm_v2(nullptr, N, N, n, n, n, &one, A, n, B, n, &zero, C, n),
                 CUBLAS_STATUS_NOT_INITIALIZED);
    CHECK_STATUS(cublasGemmEx(nullptr, N, N, n, n, n, &one, A, CUDA_R_32F, n, B, CUDA_R_32F, n,
                              &zero, C, CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 CUBLAS_STATUS_NOT_INITIALIZED);
    CHECK_STATUS(cublasSetStream_v2(nullptr, nullptr), CUBLAS_STATUS_NOT_INITIALIZED);
    CHECK_STATUS(cublasSetMathMode(nullptr, CUBLAS_DEFAULT_MATH), CUBLAS_STATUS_NOT_INITIALIZED);
    cublasHandle_t gone;
    CHECK_STATUS(cublasCreate_v2(&gone), CUBLAS_STATUS_SUCCESS);
    CHECK_STATUS(cublasDestroy_v2(gone), CUBLAS_STATUS_SUCCESS);
    CHECK_STATUS(cublasSgemm_v2(gone, N, N, n, n, n, &one, A, n, B, n, &zero, C, n),
                 CUBLAS_STATUS_NOT_INITIALIZED);
    CHECK_STATUS(cublasDestroy_v2(gone), CUBLAS_STATUS_NOT_INITIALIZED);
    /* the handle's settings */
    CHECK_STATUS(cublasSetWorkspace_v2(h, (char *)C + 4, 64), CUBLAS_STATUS_INVALID_VALUE);
    CHECK_STATUS(cublasSetWorkspace_v2(h, C, 64), CUBLAS_STATUS_SUCCESS);
    CHECK_STATUS(cublasSetStream_v2(h, nullptr), CUBLAS_STATUS_SUCCESS);
    CHECK_STATUS(cublasSetMathMode(h, (cublasMath_t)7), CUBLAS_STATUS_INVALID_VALUE);
    CHECK_STATUS(cublasSetAtomicsMode(h, (cublasAtomicsMode_t)2), CUBLAS_STATUS_INVALID_VALUE);
    CHECK_STATUS(cublasSetAtomicsMode(h, CUBLAS_ATOMICS_NOT_ALLOWED), CUBLAS_STATUS_SUCCESS);
    /* host memory, or past an allocation's end: the GPU would fault */
    std::vector<float> host(n * n, 1.0f);
    CHECK_STATUS(cublasSgemm_v2(h, N, N, n, n, n, &one, host.data(), n, B, n, &zero, C, n),
                 CUBLAS_STATUS_EXECUTION_FAILED);
    CHECK_STATUS(cublasSgemm_v2(h, N, N, n, n, n, &one, A, n, host.data(), n, &zero, C, n),
                 CUBLAS_STATUS_EXECUTION_FAILED);
    CHECK_STATUS(cublasGemmEx(h, N, N, n, n, n, &one, A, CUDA_R_32F, n, B, CUDA_R_32F, n, &zero,
                              host.data(), CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 CUBLAS_STATUS_EXECUTION_FAILED);
    /* ldc n + 1: the last column ends past C's n * n floats (exactly at the end: fine) */
    CHECK_STATUS(cublasSgemm_v2(h, N, N, n, n, n, &one, A, n, B, n, &zero, C, n + 1),
                 CUBLAS_STATUS_EXECUTION_FAILED);
    CHECK_STATUS(cublasSgemm_v2(h, N, N, n - 1, n, n, &one, A, n, B, n, &zero, C, n),
                 CUBLAS_STATUS_SUCCESS);
    {
        /* the last column counts only up to its rows: buffers cut exactly there suffice */
        const int m = 3, nn = 4, k = 2, lda = 5, ldb = 4, ldc = 6;
        size_t na = (k - 1) * lda + m, nb = (nn - 1) * ldb + k, nc = (nn - 1) * ldc + m;
        float *tA = (float *)dev_alloc(na * 4), *tB = (float *)dev_alloc(nb * 4);
        float *tC = (float *)dev_alloc(nc * 4);
        std::fill(tA, tA + na, 1.0f);
        std::fill(tB, tB + nb, 1.0f);
        CHECK_STATUS(cublasSgemm_v2(h, N, N, m, nn, k, &one, tA, lda, tB, ldb, &zero, tC, ldc),
                     CUBLAS_STATUS_SUCCESS);
        CHECK(tC[nc - 1] == 2.0f, "the tight product: %g", tC[nc - 1]);
        CHECK_STATUS(cublasSgemm_v2(h, N, N, m + 1, nn, k, &one, tA, lda, tB, ldb, &zero, tC, ldc),
                     CUBLAS_STATUS_EXECUTION_FAILED); /* one row more: A and C too short */
    }
    for (int i = 0; i < n * n; i++)
        C[i] = -7.0f;
    /* a batch whose last element is past the end: nothing written, not even the first */
    CHECK_STATUS(
        cublasSgemmStridedBatched(h, N, N, 2, 2, 2, &one, A, 2, 4, B, 2, 4, &zero, C, 2, 8, 3),
        CUBLAS_STATUS_EXECUTION_FAILED);
    CHECK(C[0] == -7.0f, "a batched call that faulted wrote its first element");
    CHECK_STATUS(
        cublasSgemm_v2(h, N, N, n, n, n, &one, (float *)((char *)A + 2), n, B, n, &zero, C, n),
        CUBLAS_STATUS_EXECUTION_FAILED); /* misaligned floats */
    CHECK(strcmp(cublasGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED), "CUBLAS_STATUS_NOT_SUPPORTED") ==
              0,
          "status name");
    CHECK(strlen(cublasGetStatusString(CUBLAS_STATUS_EXECUTION_FAILED)) > 0, "status string");
}

/* ---- cuBLASLt: the trainer's linear layer ------------------------------------------- */

struct LinearCase {
    const char *name;
    int compute;
    int in_type;  /* A and B (w and inp) */
    int out_type; /* D (and C, bias, aux) */
    uint32_t epilogue;
    bool bias_type_said; /* CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE set (to D's type) */
    int aux_pad;         /* aux leading dimension OUT + aux_pad */
    bool with_algo;      /* the heuristic's algorithm, else NULL (implicit heuristic) */
    float beta;          /* != 0: C separate, out of place, with its own leading dimension */
};

static void set_desc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void *v,
                     size_t n)
{
    CHECK_STATUS(cublasLtMatmulDescSetAttribute(d, a, v, n), CUBLAS_STATUS_SUCCESS);
}

static void set_pref(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t a,
                     uint32_t v)
{
    CHECK_STATUS(cublasLtMatmulPreferenceSetAttribute(p, a, &v, sizeof v), CUBLAS_STATUS_SUCCESS);
}

/* The heuristic, asked as cuda_linear_lt.cu asks it (32 MiB of workspace, reductions in
 * the compute type only, the alignments given): the status, *count and *algo. */
static cublasStatus_t heuristic(cublasLtHandle_t lt, cublasLtMatmulDesc_t d,
                                cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                cublasLtMatrixLayout_t dd, const uint32_t align[4], int *count,
                                cublasLtMatmulAlgo_t *algo)
{
    cublasLtMatmulPreference_t pref;
    CHECK_STATUS(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
    uint64_t ws = (uint64_t)32 << 20;
    CHECK_STATUS(cublasLtMatmulPreferenceSetAttribute(
                     pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
                 CUBLAS_STATUS_SUCCESS);
    set_pref(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
             CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE);
    set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align[0]);
    set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align[1]);
    set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align[2]);
    set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align[3]);
    cublasLtMatmulHeuristicResult_t r;
    memset(&r, 0, sizeof r);
    *count = -1;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, d, a, b, dd, dd, pref, 1, &r, count);
    CHECK_STATUS(cublasLtMatmulPreferenceDestroy(pref), CUBLAS_STATUS_SUCCESS);
    if (st == CUBLAS_STATUS_SUCCESS && *count == 1)
        CHECK(r.state == CUBLAS_STATUS_SUCCESS && r.workspaceSize <= ws,
              "heuristic result state %d, workspace %zu", (int)r.state, r.workspaceSize);
    if (algo)
        *algo = r.algo;
    return st;
}

/* Row-major out[B][OUT] = inp[B][IN] w[OUT][IN]^T (+ bias[OUT]) (then GELU, its input
 * kept in pre), through one cuBLASLt matmul laid out as make_problem does: A = w as
 * IN x OUT transposed, B = inp as IN x B, D = out as OUT x B. */
static void check_linear(cublasLtHandle_t lt, const LinearCase &c, int Bn, int IN, int OUT)
{
    uint32_t e = c.epilogue;
    bool has_bias = e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_BIAS ||
                    e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    bool has_gelu = e == CUBLASLT_EPILOGUE_GELU || e == CUBLASLT_EPILOGUE_GELU_AUX ||
                    e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    bool has_aux = e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    int aux_ld = OUT + c.aux_pad, ldc = OUT + 5;
    HostMat inp(c.in_type, (size_t)Bn * IN), w(c.in_type, (size_t)OUT * IN);
    HostMat bias(c.out_type, (size_t)OUT), out(c.out_type, (size_t)Bn * OUT);
    HostMat pre(c.out_type, (size_t)Bn * aux_ld), cin(c.out_type, (size_t)Bn * ldc);
    inp.fill_random();
    w.fill_random();
    bias.fill_random();
    cin.fill_random();
    for (size_t i = 0; i < out.size(); i++)
        out.set(i, NAN); /* beta == 0: D is not read */
    for (size_t i = 0; i < pre.size(); i++)
        pre.set(i, 768.0f); /* the aux padding must survive */
    void *d_inp = inp.to_device(), *d_w = w.to_device(), *d_bias = bias.to_device();
    void *d_out = out.to_device(), *d_pre = pre.to_device(), *d_c = cin.to_device();
    cublasLtMatmulDesc_t desc;
    CHECK_STATUS(cublasLtMatmulDescCreate(&desc, (cublasComputeType_t)c.compute, CUDA_R_32F),
                 CUBLAS_STATUS_SUCCESS);
    int32_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    set_desc(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    set_desc(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    set_desc(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e);
    if (has_bias)
        set_desc(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &d_bias, sizeof d_bias);
    if (c.bias_type_said) {
        int32_t bt = c.out_type;
        set_desc(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt);
    }
    if (has_aux) {
        int64_t ld = aux_ld;
        set_desc(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &d_pre, sizeof d_pre);
        set_desc(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld);
    }
    cublasLtMatrixLayout_t la, lb, ld, lc;
    CHECK_STATUS(cublasLtMatrixLayoutCreate(&la, (cudaDataType)c.in_type, IN, OUT, IN),
                 CUBLAS_STATUS_SUCCESS);
    CHECK_STATUS(cublasLtMatrixLayoutCreate(&lb, (cudaDataType)c.in_type, IN, Bn, IN),
                 CUBLAS_STATUS_SUCCESS);
    CHECK_STATUS(cublasLtMatrixLayoutCreate(&ld, (cudaDataType)c.out_type, OUT, Bn, OUT),
                 CUBLAS_STATUS_SUCCESS);
    CHECK_STATUS(cublasLtMatrixLayoutCreate(&lc, (cudaDataType)c.out_type, OUT, Bn, ldc),
                 CUBLAS_STATUS_SUCCESS);
    uint32_t align[4] = {256, 256, 256, 256}; /* cudaMalloc's */
    int count = 0;
    cublasLtMatmulAlgo_t algo;
    cublasStatus_t st = heuristic(lt, desc, la, lb, ld, align, &count, &algo);
    CHECK(st == CUBLAS_STATUS_SUCCESS && count == 1, "%s: heuristic %s, %d algorithms", c.name,
          cublasGetStatusName(st), count);
    float one = 1.0f, beta = c.beta;
    bool sep = beta != 0.0f;
    st = cublasLtMatmul(lt, desc, &one, d_w, la, d_inp, lb, &beta, sep ? d_c : d_out, sep ? lc : ld,
                        d_out, ld, c.with_algo ? &algo : nullptr, nullptr, 0, nullptr);
    CHECK(st == CUBLAS_STATUS_SUCCESS, "%s: matmul %s", c.name, cublasGetStatusName(st));
    int bad = 0;
    for (int b = 0; b < Bn; b++)
        for (int o = 0; o < OUT; o++) {
            float acc = 0.0f;
            for (int i = 0; i < IN; i++) {
                float x = inp.get((size_t)(b * IN + i)), y = w.get((size_t)(o * IN + i));
                if (c.in_type == CUDA_R_32F) {
                    x = input_as(x, c.compute);
                    y = input_as(y, c.compute);
                }
                acc = fmaf(y, x, acc);
            }
            float v = acc;
            if (sep)
                v = fmaf(beta, cin.get((size_t)(b * ldc + o)), v);
            if (has_bias)
                v += bias.get((size_t)o);
            float want_pre = stored(v, c.out_type);
            float want = stored(has_gelu ? gelu_ref(v) : v, c.out_type);
            float got = HostMat::get_dev(d_out, c.out_type, (size_t)(b * OUT + o));
            if (!same_bits(got, want) && bad++ < 3)
                CHECK(false, "%s: out[%d][%d] = %.9g, want %.9g", c.name, b, o, got, want);
            if (has_aux) {
                float gp = HostMat::get_dev(d_pre, c.out_type, (size_t)(b * aux_ld + o));
                if (!same_bits(gp, want_pre) && bad++ < 3)
                    CHECK(false, "%s: pre[%d][%d] = %.9g, want %.9g", c.name, b, o, gp, want_pre);
            }
        }
    for (int b = 0; b < Bn; b++)
        for (int o = OUT; o < aux_ld; o++) {
            float gp = HostMat::get_dev(d_pre, c.out_type, (size_t)(b * aux_ld + o));
            if (!same_bits(gp, 768.0f) && bad++ < 3)
                CHECK(false, "%s: aux padding [%d][%d] written", c.name, b, o);
        }
    CHECK(bad == 0, "%s: %d wrong (B %d, IN %d, OUT %d)", c.name, bad, Bn, IN, OUT);
    CHECK_STATUS(cublasLtMatrixLayoutDestroy(la), CUBLAS_STATUS_SUCCESS);
    CHECK_STATUS(cublasLtMatrixLayoutDestroy(lb), CUBLAS_STATUS_SUCCESS);
    CHECK_STATUS(cublasLtMatrixLayoutDestroy(ld), CUBLAS_STATUS_SUCCESS);
    CHECK_STATUS(cublasLtMatrixLayoutDestroy(lc), CUBLAS_STATUS_SUCCESS);
    CHECK_STATUS(cublasLtMatmulDescDestroy(desc), CUBLAS_STATUS_SUCCESS);
}

static void test_lt_linear(cublasLtHandle_t lt)
{
    const uint32_t DEF = CUBLASLT_EPILOGUE_DEFAULT, BIAS = CUBLASLT_EPILOGUE_BIAS,
                   GELU = CUBLASLT_EPILOGUE_GELU, GAUX = CUBLASLT_EPILOGUE_GELU_AUX,
                   GBIAS = CUBLASLT_EPILOGUE_GELU_BIAS, GAB = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    const int F32 = CUBLAS_COMPUTE_32F, BF = CUBLAS_COMPUTE_32F_FAST_16BF,
              HF = CUBLAS_COMPUTE_32F_FAST_16F, TF = CUBLAS_COMPUTE_32F_FAST_TF32;
    const LinearCase cases[] = {
        /* fp32 runs: COMPUTE_32F on fp32, every epilogue */
        {"fp32 default", F32, CUDA_R_32F, CUDA_R_32F, DEF, false, 0, true, 0.0f},
        {"fp32 bias", F32, CUDA_R_32F, CUDA_R_32F, BIAS, false, 0, true, 0.0f},
        {"fp32 gelu", F32, CUDA_R_32F, CUDA_R_32F, GELU, false, 0, true, 0.0f},
        {"fp32 gelu_aux", F32, CUDA_R_32F, CUDA_R_32F, GAUX, false, 8, true, 0.0f},
        {"fp32 gelu_bias", F32, CUDA_R_32F, CUDA_R_32F, GBIAS, false, 0, true, 0.0f},
        {"fp32 gelu_aux_bias", F32, CUDA_R_32F, CUDA_R_32F, GAB, false, 0, true, 0.0f},
        {"fp32 gelu_aux_bias ld+8", F32, CUDA_R_32F, CUDA_R_32F, GAB, false, 8, false, 0.0f},
        {"fp32 bias beta", F32, CUDA_R_32F, CUDA_R_32F, BIAS, false, 0, true, 0.5f},
        /* mixed precision on fp32 buffers: the FAST compute types */
        {"fast16bf bias", BF, CUDA_R_32F, CUDA_R_32F, BIAS, false, 0, true, 0.0f},
        {"fast16bf gelu_aux_bias", BF, CUDA_R_32F, CUDA_R_32F, GAB, false, 0, true, 0.0f},
        {"fast16f bias", HF, CUDA_R_32F, CUDA_R_32F, BIAS, false, 0, true, 0.0f},
        {"fasttf32 bias", TF, CUDA_R_32F, CUDA_R_32F, BIAS, false, 0, false, 0.0f},
        /* 16-bit copies with fp32 D */
        {"bf16->fp32 bias", F32, CUDA_R_16BF, CUDA_R_32F, BIAS, false, 0, true, 0.0f},
        {"fp16->fp32 bias", F32, CUDA_R_16F, CUDA_R_32F, BIAS, false, 0, true, 0.0f},
        {"bf16->fp32 gelu_aux_bias", F32, CUDA_R_16BF, CUDA_R_32F, GAB, false, 0, true, 0.0f},
        /* 16-bit D with its 16-bit bias (tr_cuda_linear_lt_16), said and defaulted */
        {"bf16->bf16 bias said", F32, CUDA_R_16BF, CUDA_R_16BF, BIAS, true, 0, true, 0.0f},
        {"fp16->fp16 bias said", F32, CUDA_R_16F, CUDA_R_16F, BIAS, true, 0, true, 0.0f},
        {"bf16->bf16 bias default", F32, CUDA_R_16BF, CUDA_R_16BF, BIAS, false, 0, true, 0.0f},
        {"bf16->bf16 gelu_aux_bias", F32, CUDA_R_16BF, CUDA_R_16BF, GAB, false, 8, true, 0.0f},
        {"fp16->fp16 default beta", F32, CUDA_R_16F, CUDA_R_16F, DEF, false, 0, true, 1.0f},
    };
    for (const LinearCase &c : cases)
        check_linear(lt, c, rnd_int(1, 9), rnd_int(1, 40), 8 * rnd_int(1, 4));
}

/* BGRADB as the trainer's comment (cuda_gemm.cu) lays the weight gradient out:
 * D = dw^T [IN x OUT] = inp^T [IN x B] times op(B) with B = dout stored OUT x B and
 * transposed; the bias gradient is db[o] = sum over the samples of dout[b][o]. */
static void test_lt_bgradb(cublasLtHandle_t lt)
{
    int Bn = 7, IN = 5, OUT = 6;
    HostMat inp(CUDA_R_32F, (size_t)Bn * IN), dout(CUDA_R_32F, (size_t)Bn * OUT);
    inp.fill_random();
    dout.fill_random();
    void *d_inp = inp.to_device(), *d_dout = dout.to_device();
    float *d_dw = (float *)dev_alloc((size_t)OUT * IN * 4), *d_db = (float *)dev_alloc(OUT * 4);
    cublasLtMatmulDesc_t desc;
    CHECK_STATUS(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                 CUBLAS_STATUS_SUCCESS);
    int32_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_T;
    uint32_t e = CUBLASLT_EPILOGUE_BGRADB;
    set_desc(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    set_desc(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    set_desc(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e);
    set_desc(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &d_db, sizeof d_db);
    cublasLtMatrixLayout_t la, lb, ld;
    CHECK_STATUS(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, IN, Bn, IN), CUBLAS_STATUS_SUCCESS);
    CHECK_STATUS(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, OUT, Bn, OUT), CUBLAS_STATUS_SUCCESS);
    CHECK_STATUS(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, IN, OUT, IN), CUBLAS_STATUS_SUCCESS);
    uint32_t align[4] = {16, 16, 16, 16};
    int count = 0;
    cublasLtMatmulAlgo_t algo;
    CHECK_STATUS(heuristic(lt, desc, la, lb, ld, align, &count, &algo), CUBLAS_STATUS_SUCCESS);
    float one = 1.0f, zero = 0.0f;
    CHECK_STATUS(cublasLtMatmul(lt, desc, &one, d_inp, la, d_dout, lb, &zero, d_dw, ld, d_dw, ld,
                                &algo, nullptr, 0, nullptr),
                 CUBLAS_STATUS_SUCCESS);
    int bad = 0;
    for (int o = 0; o < OUT; o++) {
        float db = 0.0f;
        for (int b = 0; b < Bn; b++)
            db += dout.get((size_t)(b * OUT + o));
        if (!same_bits(d_db[o], db))
            bad++;
        for (int i = 0; i < IN; i++) {
            float acc = 0.0f;
            for (int b = 0; b < Bn; b++)
                acc = fmaf(inp.get((size_t)(b * IN + i)), dout.get((size_t)(b * OUT + o)), acc);
            if (!same_bits(d_dw[o * IN + i], acc))
                bad++;
        }
    }
    CHECK(bad == 0, "BGRADB: %d wrong values", bad);
    CHECK_STATUS(cublasLtMatrixLayoutDestroy(la), CUBLAS_STATUS_SUCCESS);
    CHECK_STATUS(cublasLtMatrixLayoutDestroy(lb), CUBLAS_STATUS_SUCCESS);
    CHECK_STATUS(cublasLtMatrixLayoutDestroy(ld), CUBLAS_STATUS_SUCCESS);
    CHECK_STATUS(cublasLtMatmulDescDestroy(desc), CUBLAS_STATUS_SUCCESS);
}

/* ---- cuBLASLt: refusals ------------------------------------------------------------- */

/* One problem to vary: out[B][OUT] = inp w^T + b, fp32 unless said otherwise. */
struct LtProblem {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, d;
    void *w, *inp, *out, *bias, *pre;
    int Bn, IN, OUT;
};

static LtProblem make_lt(int compute, int in_type, int out_type, uint32_t epilogue, int Bn, int IN,
                         int OUT)
{
    LtProblem p;
    p.Bn = Bn;
    p.IN = IN;
    p.OUT = OUT;
    p.w = dev_alloc((size_t)OUT * IN * 4);
    p.inp = dev_alloc((size_t)Bn * IN * 4);
    p.out = dev_alloc((size_t)Bn * OUT * 4);
    p.bias = dev_alloc((size_t)OUT * 4);
    p.pre = dev_alloc((size_t)Bn * OUT * 4);
    memset(p.w, 0, (size_t)OUT * IN * 4);
    memset(p.inp, 0, (size_t)Bn * IN * 4);
    memset(p.bias, 0, (size_t)OUT * 4);
    CHECK_STATUS(cublasLtMatmulDescCreate(&p.desc, (cublasComputeType_t)compute, CUDA_R_32F),
                 CUBLAS_STATUS_SUCCESS);
    int32_t ta = CUBLAS_OP_T;
    set_desc(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    set_desc(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue);
    set_desc(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p.bias, sizeof p.bias);
    int64_t ld = OUT;
    set_desc(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &p.pre, sizeof p.pre);
    set_desc(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld);
    CHECK_STATUS(cublasLtMatrixLayoutCreate(&p.a, (cudaDataType)in_type, IN, OUT, IN),
                 CUBLAS_STATUS_SUCCESS);
    CHECK_STATUS(cublasLtMatrixLayoutCreate(&p.b, (cudaDataType)in_type, IN, Bn, IN),
                 CUBLAS_STATUS_SUCCESS);
    CHECK_STATUS(cublasLtMatrixLayoutCreate(&p.d, (cudaDataType)out_type, OUT, Bn, OUT),
                 CUBLAS_STATUS_SUCCESS);
    return p;
}

static void free_lt(LtProblem &p)
{
    CHECK_STATUS(cublasLtMatrixLayoutDestroy(p.a), CUBLAS_STATUS_SUCCESS);
    CHECK_STATUS(cublasLtMatrixLayoutDestroy(p.b), CUBLAS_STATUS_SUCCESS);
    CHECK_STATUS(cublasLtMatrixLayoutDestroy(p.d), CUBLAS_STATUS_SUCCESS);
    CHECK_STATUS(cublasLtMatmulDescDestroy(p.desc), CUBLAS_STATUS_SUCCESS);
}

static cublasStatus_t run_lt(cublasLtHandle_t lt, LtProblem &p, const cublasLtMatmulAlgo_t *algo,
                             void *workspace = nullptr, size_t workspace_bytes = 0)
{
    float one = 1.0f, zero = 0.0f;
    return cublasLtMatmul(lt, p.desc, &one, p.w, p.a, p.inp, p.b, &zero, p.out, p.d, p.out, p.d,
                          algo, workspace, workspace_bytes, nullptr);
}

/* the heuristic refuses with `want` and no algorithm */
static void expect_no_algo(cublasLtHandle_t lt, LtProblem &p, cublasStatus_t want, const char *what,
                           const uint32_t *align = nullptr)
{
    const uint32_t a256[4] = {256, 256, 256, 256};
    int count = -1;
    cublasStatus_t st = heuristic(lt, p.desc, p.a, p.b, p.d, align ? align : a256, &count, nullptr);
    CHECK(st == want && count == 0, "%s: heuristic %s with %d algorithms, want %s and none", what,
          cublasGetStatusName(st), count, cublasGetStatusName(want));
}

static void test_lt_refusals(cublasLtHandle_t lt)
{
    const cublasStatus_t NS = CUBLAS_STATUS_NOT_SUPPORTED, IV = CUBLAS_STATUS_INVALID_VALUE;
    /* epilogues not emulated */
    for (uint32_t e :
         {(uint32_t)CUBLASLT_EPILOGUE_RELU, (uint32_t)CUBLASLT_EPILOGUE_RELU_AUX,
          (uint32_t)CUBLASLT_EPILOGUE_DGELU, (uint32_t)CUBLASLT_EPILOGUE_BGRADA, 12345u}) {
        LtProblem p = make_lt(CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_32F, e, 3, 8, 8);
        expect_no_algo(lt, p, NS, "epilogue");
        CHECK_STATUS(run_lt(lt, p, nullptr), NS);
        free_lt(p);
    }
    {
        /* aux leading dimension not a multiple of 8, or short of D's rows */
        LtProblem p = make_lt(CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_32F,
                              CUBLASLT_EPILOGUE_GELU_AUX_BIAS, 3, 8, 12);
        expect_no_algo(lt, p, IV, "aux ld 12");
        int64_t ld = 8;
        set_desc(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld);
        expect_no_algo(lt, p, IV, "aux ld 8 < 12 rows");
        ld = 16;
        set_desc(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld);
        int count;
        const uint32_t a256[4] = {256, 256, 256, 256};
        CHECK_STATUS(heuristic(lt, p.desc, p.a, p.b, p.d, a256, &count, nullptr),
                     CUBLAS_STATUS_SUCCESS);
        /* the aux type may not be set outside FP8 */
        int32_t t = CUDA_R_32F;
        set_desc(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &t, sizeof t);
        expect_no_algo(lt, p, IV, "aux type set");
        free_lt(p);
    }
    {
        /* a bias of another type than D's */
        LtProblem p =
            make_lt(CUBLAS_COMPUTE_32F, CUDA_R_16BF, CUDA_R_16BF, CUBLASLT_EPILOGUE_BIAS, 3, 8, 8);
        int32_t t = CUDA_R_32F;
        set_desc(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &t, sizeof t);
        expect_no_algo(lt, p, NS, "32F bias with 16BF D");
        CHECK_STATUS(run_lt(lt, p, nullptr), NS);
        free_lt(p);
    }
    {
        /* type combinations: FAST on 16-bit, mixed A/B, 32F in to 16-bit out, 16F compute */
        LtProblem p = make_lt(CUBLAS_COMPUTE_32F_FAST_16BF, CUDA_R_16BF, CUDA_R_32F,
                              CUBLASLT_EPILOGUE_DEFAULT, 3, 8, 8);
        expect_no_algo(lt, p, NS, "FAST_16BF on 16BF");
        free_lt(p);
        p = make_lt(CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUBLASLT_EPILOGUE_DEFAULT, 3, 8,
                    8);
        expect_no_algo(lt, p, NS, "32F to 16BF");
        free_lt(p);
        p = make_lt(CUBLAS_COMPUTE_16F, CUDA_R_16F, CUDA_R_16F, CUBLASLT_EPILOGUE_DEFAULT, 3, 8, 8);
        expect_no_algo(lt, p, NS, "COMPUTE_16F");
        free_lt(p);
        p = make_lt(CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_32F, CUBLASLT_EPILOGUE_DEFAULT, 3, 8, 8);
        cublasLtMatrixLayout_t b16;
        CHECK_STATUS(cublasLtMatrixLayoutCreate(&b16, CUDA_R_16BF, 8, 3, 8), CUBLAS_STATUS_SUCCESS);
        std::swap(p.b, b16);
        expect_no_algo(lt, p, NS, "A 32F, B 16BF");
        std::swap(p.b, b16);
        CHECK_STATUS(cublasLtMatrixLayoutDestroy(b16), CUBLAS_STATUS_SUCCESS);
        /* alignments no kernel takes: 2-byte fp32 matrices (preference), a bias off by 2 */
        const uint32_t a2[4] = {2, 256, 256, 256};
        expect_no_algo(lt, p, NS, "A aligned to 2", a2);
        free_lt(p);
        p = make_lt(CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_32F, CUBLASLT_EPILOGUE_BIAS, 3, 8, 8);
        void *odd = (char *)p.bias + 2;
        set_desc(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &odd, sizeof odd);
        expect_no_algo(lt, p, NS, "bias aligned to 2");
        free_lt(p);
    }
    {
        /* shapes that do not agree; a layout whose ld is short of its rows */
        LtProblem p =
            make_lt(CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_32F, CUBLASLT_EPILOGUE_DEFAULT, 3, 8, 8);
        int32_t tn = CUBLAS_OP_N; /* op(A) becomes IN x OUT = 8 x 8 still; make k differ: */
        cublasLtMatrixLayout_t bad_b;
        CHECK_STATUS(cublasLtMatrixLayoutCreate(&bad_b, CUDA_R_32F, 7, 3, 8),
                     CUBLAS_STATUS_SUCCESS);
        std::swap(p.b, bad_b);
        expect_no_algo(lt, p, IV, "k disagrees");
        CHECK_STATUS(run_lt(lt, p, nullptr), IV);
        std::swap(p.b, bad_b);
        CHECK_STATUS(cublasLtMatrixLayoutDestroy(bad_b), CUBLAS_STATUS_SUCCESS);
        set_desc(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tn, sizeof tn);
        int32_t bogus = 9;
        set_desc(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &bogus, sizeof bogus);
        expect_no_algo(lt, p, IV, "TRANSA 9");
        free_lt(p);
        cublasLtMatrixLayout_t l;
        CHECK_STATUS(cublasLtMatrixLayoutCreate(&l, CUDA_R_32F, 8, 3, 7), IV);
        CHECK_STATUS(cublasLtMatrixLayoutCreate(&l, CUDA_R_32F, 8, 3, -1), IV);
    }
    {
        /* attribute sizes */
        cublasLtMatmulDesc_t d;
        CHECK_STATUS(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                     CUBLAS_STATUS_SUCCESS);
        int64_t big = 1;
        int32_t small = 1;
        void *ptr = nullptr;
        CHECK_STATUS(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &big, 8), IV);
        CHECK_STATUS(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &big, 8), IV);
        CHECK_STATUS(
            cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &small, 4), IV);
        CHECK_STATUS(
            cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &small, 4), IV);
        CHECK_STATUS(
            cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &big, 8), IV);
        CHECK_STATUS(
            cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &ptr, sizeof ptr),
            CUBLAS_STATUS_SUCCESS);
        CHECK_STATUS(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, nullptr, 4),
                     IV);
        CHECK_STATUS(cublasLtMatmulDescDestroy(d), CUBLAS_STATUS_SUCCESS);
        /* a destroyed descriptor is no descriptor */
        CHECK_STATUS(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &small, 4), IV);
        cublasLtMatmulPreference_t pref;
        CHECK_STATUS(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
        CHECK_STATUS(cublasLtMatmulPreferenceSetAttribute(
                         pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &small, 4),
                     IV);
        CHECK_STATUS(cublasLtMatmulPreferenceSetAttribute(
                         pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &big, 8),
                     IV);
        CHECK_STATUS(cublasLtMatmulPreferenceDestroy(pref), CUBLAS_STATUS_SUCCESS);
    }
    {
        /* the heuristic's own arguments; a NULL handle */
        LtProblem p =
            make_lt(CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_32F, CUBLASLT_EPILOGUE_BIAS, 3, 8, 8);
        cublasLtMatmulPreference_t pref;
        CHECK_STATUS(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
        cublasLtMatmulHeuristicResult_t r;
        int count = -1;
        CHECK_STATUS(
            cublasLtMatmulAlgoGetHeuristic(lt, p.desc, p.a, p.b, p.d, p.d, pref, 0, &r, &count),
            IV);
        CHECK_STATUS(cublasLtMatmulAlgoGetHeuristic(nullptr, p.desc, p.a, p.b, p.d, p.d, pref, 1,
                                                    &r, &count),
                     CUBLAS_STATUS_NOT_INITIALIZED);
        CHECK_STATUS(run_lt(nullptr, p, nullptr), CUBLAS_STATUS_NOT_INITIALIZED);
        CHECK_STATUS(cublasLtMatmulPreferenceDestroy(pref), CUBLAS_STATUS_SUCCESS);
        /* an algorithm chosen for 256-byte alignment, given a pointer aligned to 4; one
         * that did not come from the heuristic */
        const uint32_t a256[4] = {256, 256, 256, 256};
        cublasLtMatmulAlgo_t algo;
        CHECK_STATUS(heuristic(lt, p.desc, p.a, p.b, p.d, a256, &count, &algo),
                     CUBLAS_STATUS_SUCCESS);
        CHECK_STATUS(run_lt(lt, p, &algo), CUBLAS_STATUS_SUCCESS);
        void *w = p.w;
        p.w = dev_alloc((size_t)p.OUT * p.IN * 4 + 4);
        p.w = (char *)p.w + 4;
        CHECK_STATUS(run_lt(lt, p, &algo), IV);
        CHECK_STATUS(run_lt(lt, p, nullptr), CUBLAS_STATUS_SUCCESS); /* implicit heuristic */
        p.w = w;
        cublasLtMatmulAlgo_t foreign;
        memset(&foreign, 0, sizeof foreign);
        CHECK_STATUS(run_lt(lt, p, &foreign), IV);
        /* the bias pointer missing for a bias epilogue */
        void *none = nullptr;
        set_desc(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &none, sizeof none);
        CHECK_STATUS(run_lt(lt, p, nullptr), IV);
        /* host buffers: bias, then A, then the aux matrix */
        std::vector<float> host((size_t)p.OUT * p.IN * 4, 0.0f);
        void *hp = host.data();
        set_desc(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &hp, sizeof hp);
        for (int i = 0; i < p.Bn * p.OUT; i++)
            ((float *)p.out)[i] = -3.0f;
        CHECK_STATUS(run_lt(lt, p, nullptr), CUBLAS_STATUS_EXECUTION_FAILED);
        CHECK(((float *)p.out)[0] == -3.0f, "a matmul that faulted wrote D");
        set_desc(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p.bias, sizeof p.bias);
        p.w = hp;
        CHECK_STATUS(run_lt(lt, p, nullptr), CUBLAS_STATUS_EXECUTION_FAILED);
        p.w = w;
        uint32_t gab = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
        set_desc(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &gab, sizeof gab);
        CHECK_STATUS(run_lt(lt, p, nullptr), CUBLAS_STATUS_SUCCESS);
        set_desc(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &hp, sizeof hp);
        CHECK_STATUS(run_lt(lt, p, nullptr), CUBLAS_STATUS_EXECUTION_FAILED);
        /* an aux matrix whose leading dimension runs past its allocation; one cut just
         * after its last column's rows */
        int64_t ld = 16;
        set_desc(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &p.pre, sizeof p.pre);
        set_desc(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld);
        CHECK_STATUS(run_lt(lt, p, nullptr), CUBLAS_STATUS_EXECUTION_FAILED);
        void *tight = dev_alloc((size_t)((p.Bn - 1) * ld + p.OUT) * 4);
        set_desc(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &tight, sizeof tight);
        CHECK_STATUS(run_lt(lt, p, nullptr), CUBLAS_STATUS_SUCCESS);
        /* a workspace (cuda_linear_lt.cu gives cuBLAS's): device memory, 256-byte
         * aligned, holding no operand; host memory faults, a short allocation too */
        void *ws = dev_alloc(4096);
        CHECK_STATUS(run_lt(lt, p, nullptr, ws, 4096), CUBLAS_STATUS_SUCCESS);
        alignas(256) static unsigned char host_ws[4096];
        CHECK_STATUS(run_lt(lt, p, nullptr, host_ws, 4096), CUBLAS_STATUS_EXECUTION_FAILED);
        CHECK_STATUS(run_lt(lt, p, nullptr, ws, 8192), CUBLAS_STATUS_EXECUTION_FAILED);
        CHECK_STATUS(run_lt(lt, p, nullptr, (char *)ws + 16, 256), IV);
        void *inp = p.inp; /* the input inside the workspace */
        p.inp = ws;
        CHECK_STATUS(run_lt(lt, p, nullptr, ws, 4096), IV);
        p.inp = inp;
        set_desc(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &ws, sizeof ws);
        CHECK_STATUS(run_lt(lt, p, nullptr, ws, 4096), IV); /* the aux matrix in it */
        free_lt(p);
    }
}

int main(void)
{
    fprintf(stderr, "test_emu_cublas: the emu_cublas lines below are refusals the test asks "
                    "for\n");
    cublasHandle_t h;
    cublasLtHandle_t lt;
    CHECK_STATUS(cublasCreate_v2(&h), CUBLAS_STATUS_SUCCESS);
    CHECK_STATUS(cublasLtCreate(&lt), CUBLAS_STATUS_SUCCESS);
    /* the trainer's set-up (cuda_context.cu) */
    CHECK_STATUS(cublasSetStream_v2(h, nullptr), CUBLAS_STATUS_SUCCESS);
    CHECK_STATUS(
        cublasSetMathMode(h, (cublasMath_t)(CUBLAS_DEFAULT_MATH |
                                            CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)),
        CUBLAS_STATUS_SUCCESS);
    CHECK_STATUS(cublasSetAtomicsMode(h, CUBLAS_ATOMICS_NOT_ALLOWED), CUBLAS_STATUS_SUCCESS);
    CHECK_STATUS(cublasSetWorkspace_v2(h, dev_alloc(4096), 4096), CUBLAS_STATUS_SUCCESS);

    test_cublas_products(h);
    test_input_rounding(h);
    test_cublas_edges(h);
    test_cublas_refusals(h);
    test_lt_linear(lt);
    test_lt_bgradb(lt);
    test_lt_refusals(lt);

    CHECK_STATUS(cublasLtDestroy(lt), CUBLAS_STATUS_SUCCESS);
    CHECK_STATUS(cublasDestroy_v2(h), CUBLAS_STATUS_SUCCESS);
    for (void *p : g_device)
        cudaFree(p);
    if (g_failures) {
        printf("%d of %d checks failed\n", g_failures, g_checks);
        return 1;
    }
    printf("ok (%d checks)\n", g_checks);
    return 0;
}
