/* cpu_gemm.c: the CPU GEMM (row-major SGEMM over OpenBLAS) and the backend's
 * threading set-up.
 *
 * Threading policy: OpenMP owns the cores and OpenBLAS is kept single-threaded.
 *  - Two thread pools on the same cores fight: OpenBLAS's pthreads spin waiting for
 *    work while our OpenMP threads want the same cores, and every switch between an
 *    OpenMP loop and a BLAS call would hand the cores from one pool to the other.
 *  - The convolution calls cblas_sgemm from inside OpenMP loops (one GEMM per sample
 *    per thread); a multithreaded BLAS there would start threads x threads workers.
 *  - MPI ranks already split a node; each rank's OMP_NUM_THREADS is its share, and a
 *    library that sizes itself from the whole machine would oversubscribe it.
 * So tr_cpu_gemm parallelises a GEMM itself: it cuts C into one block per thread
 * (rows of M, or columns of N: see tr_cpu_gemm_plan) and each thread runs a
 * single-threaded cblas_sgemm on its block. The blocks are disjoint and each one
 * sums over all of K, so no thread writes what another writes and no reduction
 * across threads exists: results do not depend on scheduling. */
#include "backend/cpu_backend.h"

#include <cblas.h>
#include <omp.h>
#include <string.h>

/* Debian's and OpenBLAS's own cblas.h declare these; other CBLAS headers may not,
 * and redeclaring a function with the same prototype is harmless. */
void openblas_set_num_threads(int num_threads);
char *openblas_get_corename(void);

/* Below this many multiply-adds one call is faster than waking the team
 * (64^3: about 30 us of work on one core, comparable to a fork/join). */
#define GEMM_SPLIT_MIN_MACS (64.0 * 64.0 * 64.0)
/* A block narrower than this wastes the BLAS micro-kernel (16 x 6 / 8 x 8 tiles on
 * AVX2), so split only dimensions that give each thread at least this much. */
#define GEMM_SPLIT_MIN_EDGE 16
/* From this K on, cut along the larger of M and N (see tr_cpu_gemm_plan). */
#define GEMM_SPLIT_LONG_K 256

void tr_cpu_backend_init(int threads)
{
    openblas_set_num_threads(1);
    if (threads > 0)
        omp_set_num_threads(threads);
}

const char *tr_cpu_blas_corename(void)
{
    const char *name = openblas_get_corename();
    return name ? name : "unknown";
}

tr_gemm_split tr_cpu_gemm_plan(int M, int N, int K, int nthreads)
{
    if (nthreads <= 1 || (double)M * N * K < GEMM_SPLIT_MIN_MACS)
        return TR_GEMM_SPLIT_NONE;
    int rows = M >= nthreads * GEMM_SPLIT_MIN_EDGE, cols = N >= nthreads * GEMM_SPLIT_MIN_EDGE;
    /* Rows first (each thread's block of C is contiguous), except for a long K with
     * N > M: each thread's BLAS call packs its share of the operand along the cut and
     * all of the other one, K x (M or N) floats, so with a long K the cut along the
     * larger of M and N packs much less. Measured on the 2-core AVX2 VM: the MLP's
     * first layer, 128 x 256 x 784, 10-20 % faster cut along N; at K <= 128 (the
     * weight gradients, LeNet's layers) no gain or a loss (2x at K = 10). */
    if (rows && (!cols || M >= N || K < GEMM_SPLIT_LONG_K))
        return TR_GEMM_SPLIT_ROWS;
    if (cols)
        return TR_GEMM_SPLIT_COLS;
    return TR_GEMM_SPLIT_NONE;
}

/* OpenBLAS's packing, measured (an LD_PRELOAD counter of the pages of its mmapped
 * buffers resident at exit, mincore; Debian's 0.3.21, each kernel forced by
 * OPENBLAS_CORETYPE). In column-major terms a row-major C [m, n] = A [m, k] B [k, n]
 * is C^T = B^T A^T, of n rows: OpenBLAS packs kc values of k (SGEMM's GEMM_Q) for up
 * to p of those rows into one panel (GEMM_P), and, where there are more than p,
 * panels of kc values for every one of the m columns too (its other panel, up to
 * GEMM_R of them, the rest of its buffer); with n <= p it reuses one small panel. It
 * keeps the buffer, so a thread's resident packing is that of the largest product it
 * ever ran: 4 min(k, kc) (n > p ? m + p : n) bytes, up to the whole buffer
 * (BUFFER_SIZE, 128 MiB in that build; mapped once a thread), within 1 MiB of the
 * measured (m = 20,000 or 50,304, k = 64 to 2,000, n = 128 to 2,049). By kernel, kc
 * and p (the p where the measured step lies between two n, the lower):
 * Cooperlake 320 and 640 (m = 50,304, k >= 320, n > 640: 61.9 MiB; n <= 640: 0.8),
 * Haswell and Zen 320 and 320, SkylakeX 448 and 448, Sandybridge 384 and 640, Nehalem
 * 512 and 448, Barcelona 224 and 448, Prescott 128 and 448, Atom 256 and 256, Core2
 * 256 and 192, Penryn 512 and 0; Dunnington filled the buffer (kc >= 666: taken as
 * 1024, the buffer bounds it). Any other kernel is taken as 512 and 0. */
#define OPENBLAS_BUFFER_BYTES (128.0 * 1024 * 1024)

typedef struct openblas_blocking {
    const char *core;
    int kc, p;
} openblas_blocking;

static openblas_blocking openblas_blocking_of(const char *core)
{
    static const openblas_blocking known[] = {
        {"Cooperlake", 320, 640}, {"Haswell", 320, 320},     {"Zen", 320, 320},
        {"SkylakeX", 448, 448},   {"Sandybridge", 384, 640}, {"Nehalem", 512, 448},
        {"Barcelona", 224, 448},  {"Prescott", 128, 448},    {"Atom", 256, 256},
        {"Core2", 256, 192},      {"Penryn", 512, 0},        {"Dunnington", 1024, 0}};
    for (size_t i = 0; core && i < sizeof known / sizeof known[0]; i++)
        if (!strcmp(core, known[i].core))
            return known[i];
    return (openblas_blocking){core, 512, 0};
}

/* thread 0's part of tr_cpu_gemm's M x N x K (the largest: blocks round up) */
static double gemm_pack_bytes(int M, int N, int K, int nthreads, openblas_blocking b)
{
    tr_gemm_split split = tr_cpu_gemm_plan(M, N, K, nthreads);
    int lo, hi;
    tr_cpu_gemm_range(split, 0, nthreads, M, N, &lo, &hi);
    /* a block of rows has all N, a block of columns all M */
    double m = split == TR_GEMM_SPLIT_COLS ? M : hi - lo;
    double n = split == TR_GEMM_SPLIT_COLS ? hi - lo : N;
    double bytes = 4.0 * (K < b.kc ? K : b.kc) * (n > b.p ? m + b.p : n);
    return bytes < OPENBLAS_BUFFER_BYTES ? bytes : OPENBLAS_BUFFER_BYTES;
}

double tr_cpu_linear_pack_bytes(int B, int in, int out, int nthreads, const char *core)
{
    openblas_blocking b = openblas_blocking_of(core);
    double fwd = gemm_pack_bytes(B, out, in, nthreads, b); /* out[B,out] = in w^T */
    double din = gemm_pack_bytes(B, in, out, nthreads, b); /* din[B,in] = dout w */
    double dw = gemm_pack_bytes(out, in, B, nthreads, b);  /* dw[out,in] = dout^T in */
    double most = fwd > din ? fwd : din;
    return most > dw ? most : dw;
}

static void sgemm_one(int transA, int transB, int M, int N, int K, float alpha,
                      const float *A, int lda, const float *B, int ldb, float beta, float *C,
                      int ldc)
{
    cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
                transB ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C,
                ldc);
}

/* [lo, hi) of thread t of nth over n items, blocks rounded up to `align` so that the
 * boundaries fall on micro-kernel tiles; trailing threads may get nothing. */
static void block_range(int n, int t, int nth, int align, int *lo, int *hi)
{
    int blk = (n + nth - 1) / nth;
    blk = (blk + align - 1) / align * align;
    long l = (long)t * blk, h = l + blk;
    *lo = (int)(l < n ? l : n);
    *hi = (int)(h < n ? h : n);
}

void tr_cpu_gemm_range(tr_gemm_split plan, int t, int nth, int M, int N, int *lo, int *hi)
{
    if (plan == TR_GEMM_SPLIT_NONE) { /* all of it to thread 0 */
        *lo = 0;
        *hi = t == 0 ? (M > 0 ? M : 0) : 0;
        return;
    }
    block_range(plan == TR_GEMM_SPLIT_ROWS ? M : N, t, nth, 8, lo, hi);
}

void tr_cpu_gemm_part(tr_gemm_split plan, int t, int nth, int transA, int transB, int M, int N,
                      int K, float alpha, const float *A, int lda, const float *B, int ldb,
                      float beta, float *C, int ldc)
{
    int lo, hi;
    tr_cpu_gemm_range(plan, t, nth, M, N, &lo, &hi);
    if (hi <= lo || N <= 0)
        return;
    if (K <= 0) { /* C = beta C; CBLAS rejects lda < 1 that a K of 0 implies */
        int r0 = plan == TR_GEMM_SPLIT_COLS ? 0 : lo, r1 = plan == TR_GEMM_SPLIT_COLS ? M : hi;
        int c0 = plan == TR_GEMM_SPLIT_COLS ? lo : 0, c1 = plan == TR_GEMM_SPLIT_COLS ? hi : N;
        for (int i = r0; i < r1; i++)
            for (int j = c0; j < c1; j++)
                C[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[(size_t)i * ldc + j];
        return;
    }
    if (plan != TR_GEMM_SPLIT_COLS) { /* rows lo .. hi - 1 (all of them when NONE) */
        const float *a = transA ? A + lo : A + (size_t)lo * lda;
        sgemm_one(transA, transB, hi - lo, N, K, alpha, a, lda, B, ldb, beta,
                  C + (size_t)lo * ldc, ldc);
    } else {
        const float *b = transB ? B + (size_t)lo * ldb : B + lo;
        sgemm_one(transA, transB, M, hi - lo, K, alpha, A, lda, b, ldb, beta, C + lo, ldc);
    }
}

int tr_cpu_threads(void) { return omp_in_parallel() ? 1 : omp_get_max_threads(); }

void tr_cpu_gemm(int transA, int transB, int M, int N, int K, float alpha, const float *A,
                 int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    if (M <= 0 || N <= 0)
        return;
    /* Inside a parallel region (a caller already owns the threads) do not nest. */
    int nthreads = tr_cpu_threads();
    tr_gemm_split plan = K > 0 ? tr_cpu_gemm_plan(M, N, K, nthreads) : TR_GEMM_SPLIT_NONE;
    if (plan == TR_GEMM_SPLIT_NONE) {
        tr_cpu_gemm_part(plan, 0, 1, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C,
                         ldc);
        return;
    }
#pragma omp parallel num_threads(nthreads)
    tr_cpu_gemm_part(plan, omp_get_thread_num(), omp_get_num_threads(), transA, transB, M, N, K,
                     alpha, A, lda, B, ldb, beta, C, ldc);
}

/* Mixed precision changes nothing here. A bf16 (fp16) value has 8 (11) significant
 * bits, so the product of two has at most 16 (22) and is exact in fp32's 24: the fp32
 * GEMM of inputs the model has rounded is the bf16 (fp16) GEMM with fp32 accumulation
 * that a GPU's tensor cores compute, up to the order of the additions. */
void tr_cpu_set_gemm_precision(int format) { (void)format; }
