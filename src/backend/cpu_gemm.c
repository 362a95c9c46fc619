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
 * (rows of M when there are enough, else columns of N) and each thread runs a
 * single-threaded cblas_sgemm on its block. The blocks are disjoint and each one
 * sums over all of K, so no thread writes what another writes and no reduction
 * across threads exists: results do not depend on scheduling. */
#include "backend/cpu_backend.h"

#include <cblas.h>
#include <omp.h>

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
    if (M >= nthreads * GEMM_SPLIT_MIN_EDGE)
        return TR_GEMM_SPLIT_ROWS; /* rows first: a row block of C reads a contiguous
                                      slice of A (when not transposed) and all of B */
    if (N >= nthreads * GEMM_SPLIT_MIN_EDGE)
        return TR_GEMM_SPLIT_COLS;
    return TR_GEMM_SPLIT_NONE;
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

void tr_cpu_gemm(int transA, int transB, int M, int N, int K, float alpha, const float *A,
                 int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    if (M <= 0 || N <= 0)
        return;
    if (K <= 0) { /* C = beta C; CBLAS rejects lda < 1 that a K of 0 implies */
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++)
                C[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[(size_t)i * ldc + j];
        return;
    }
    /* Inside a parallel region (a caller already owns the threads) do not nest. */
    int nthreads = omp_in_parallel() ? 1 : omp_get_max_threads();
    tr_gemm_split plan = tr_cpu_gemm_plan(M, N, K, nthreads);
    if (plan == TR_GEMM_SPLIT_NONE) {
        sgemm_one(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
#pragma omp parallel num_threads(nthreads)
    {
        int nth = omp_get_num_threads(), t = omp_get_thread_num(), lo, hi;
        if (plan == TR_GEMM_SPLIT_ROWS) {
            block_range(M, t, nth, 8, &lo, &hi);
            if (hi > lo) {
                const float *a = transA ? A + lo : A + (size_t)lo * lda;
                sgemm_one(transA, transB, hi - lo, N, K, alpha, a, lda, B, ldb, beta,
                          C + (size_t)lo * ldc, ldc);
            }
        } else {
            block_range(N, t, nth, 8, &lo, &hi);
            if (hi > lo) {
                const float *b = transB ? B + (size_t)lo * ldb : B + lo;
                sgemm_one(transA, transB, M, hi - lo, K, alpha, A, lda, b, ldb, beta, C + lo,
                          ldc);
            }
        }
    }
}
