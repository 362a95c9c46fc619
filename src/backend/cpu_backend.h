/* cpu_backend.h: the CPU backend's entry points and the kernels behind tr_cpu_kernels.
 *
 * Threading policy: OpenMP owns the cores, OpenBLAS runs single-threaded in whichever
 * thread calls it. tr_cpu_backend_init(threads) sets both once, at start-up, before
 * any model is allocated (conv scratch is sized from omp_get_max_threads(), so the
 * thread count must not grow after tr_model_allocate). The kernels are exposed here
 * (not only through the table) so that the files of the backend can share them and
 * tests can call them directly; everything else should go through tr_cpu_kernels.
 *
 * Determinism: with the same thread count every kernel gives bit-identical results
 * run to run. No floating-point atomics and no reductions whose order depends on
 * scheduling; where threads produce partial sums they are added in thread order. */
#ifndef TR_CPU_BACKEND_H
#define TR_CPU_BACKEND_H

#include "backend/kernels.h"

#include <stddef.h>

/* OpenBLAS to one thread, OpenMP to `threads` (<= 0: leave OpenMP's default). */
void tr_cpu_backend_init(int threads);
/* The CPU kernel OpenBLAS dispatched to ("Haswell", "Zen", ...), for the run log. */
const char *tr_cpu_blas_corename(void);

/* How tr_cpu_gemm divides C among threads; exposed so tests can force each path. */
typedef enum {
    TR_GEMM_SPLIT_NONE = 0, /* one cblas_sgemm call in the calling thread */
    TR_GEMM_SPLIT_ROWS = 1, /* blocks of rows of C (M) */
    TR_GEMM_SPLIT_COLS = 2, /* blocks of columns of C (N) */
} tr_gemm_split;
tr_gemm_split tr_cpu_gemm_plan(int M, int N, int K, int nthreads);
/* Bytes of its packing buffer that OpenBLAS (kernel `core`, tr_cpu_blas_corename)
 * leaves resident in the thread that runs the largest part (thread 0) of a linear
 * layer of B rows, in -> out features, forward and backward, split over nthreads as
 * tr_cpu_linear_forward and _backward split it: the memory plan's estimate (each of
 * the nthreads threads keeps its own buffer). */
double tr_cpu_linear_pack_bytes(int B, int in, int out, int nthreads, const char *core);

void tr_cpu_gemm(int transA, int transB, int M, int N, int K, float alpha, const float *A,
                 int lda, const float *B, int ldb, float beta, float *C, int ldc);
/* Threads a kernel may start here: omp_get_max_threads(), or 1 inside a parallel
 * region (no nesting). */
int tr_cpu_threads(void);
/* For kernels that run several GEMMs (and their own loops) in one parallel region:
 * the rows (ROWS, NONE) or columns (COLS) [lo, hi) of C that thread t of nth computes
 * under `plan` (NONE: all rows to thread 0), and that share of tr_cpu_gemm's work.
 * The blocks are those tr_cpu_gemm uses, so the results are the same bits. */
void tr_cpu_gemm_range(tr_gemm_split plan, int t, int nth, int M, int N, int *lo, int *hi);
void tr_cpu_gemm_part(tr_gemm_split plan, int t, int nth, int transA, int transB, int M, int N,
                      int K, float alpha, const float *A, int lda, const float *B, int ldb,
                      float beta, float *C, int ldc);
/* Does nothing: the CPU's fp32 GEMM of bf16/fp16 values is already the 16-bit GEMM
 * with fp32 accumulation that set_gemm_precision asks for (kernels.h). */
void tr_cpu_set_gemm_precision(int format);

/* cpu_kernels.c */
void tr_cpu_linear_forward(float *out, const float *inp, const float *w, const float *b, int B,
                           int IN, int OUT);
void tr_cpu_linear_backward(float *dinp, float *dw, float *db, const float *dout,
                            const float *inp, const float *w, int B, int IN, int OUT);
void tr_cpu_relu_forward(float *out, const float *inp, size_t n);
void tr_cpu_relu_backward(float *dinp, const float *dout, const float *out, size_t n);
void tr_cpu_maxpool_forward(float *out, int *argmax, const float *inp, int B, int C, int H,
                            int W, int k);
void tr_cpu_maxpool_backward(float *dinp, const float *dout, const int *argmax, int B, int C,
                             int H, int W, int k);
void tr_cpu_softmax_xent_forward(float *probs, float *losses, const float *logits,
                                 const int *labels, int B, int V, double *loss_sum,
                                 long *correct);
void tr_cpu_softmax_xent_backward(float *dlogits, const float *probs, const int *labels,
                                  float scale, int B, int V);
void tr_cpu_scale(float *x, size_t n, float a);
void tr_cpu_round_lowp(float *x, size_t n, int format);
void tr_cpu_rows_argmax(int *idx, float *val, const void *x, size_t rows, int ld, int n,
                        int format, int lfmt);

/* cpu_conv.c */
/* How a convolution runs; exposed so tests can force each path. */
typedef enum {
    TR_CONV_DIRECT = 0,       /* few channels: direct loops, 8 samples in the lanes
                                 (cpu_conv_direct.c); gradient sums per group of 8 */
    TR_CONV_GEMM_SAMPLES = 1, /* im2col + GEMM, threads take samples (per-thread
                                 partial gradients) */
    TR_CONV_GEMM_SERIAL = 2,  /* im2col + GEMM, samples in turn, GEMMs split over
                                 threads (few samples or little work) */
} tr_conv_path;
tr_conv_path tr_cpu_conv_path(const tr_conv_shape *s);
size_t tr_cpu_conv_scratch_floats(const tr_conv_shape *s);
void tr_cpu_conv2d_forward(float *out, const float *inp, const float *w, const float *b,
                           const tr_conv_shape *s, float *scratch);
void tr_cpu_conv2d_backward(float *dinp, float *dw, float *db, const float *dout,
                            const float *inp, const float *w, const tr_conv_shape *s,
                            float *scratch);

/* cpu_conv_direct.c (through cpu_conv.c, which picks the path) */
int tr_cpu_conv_direct_ok(const tr_conv_shape *s);
size_t tr_cpu_conv_direct_scratch_floats(const tr_conv_shape *s);
void tr_cpu_conv_direct_forward(float *out, const float *inp, const float *w, const float *b,
                                const tr_conv_shape *s, float *scratch);
void tr_cpu_conv_direct_backward(float *dinp, float *dw, float *db, const float *dout,
                                 const float *inp, const float *w, const tr_conv_shape *s,
                                 float *scratch);

/* cpu_optim.c */
void tr_cpu_sgd_update(float *param, float *momentum_buf, const float *grad, size_t n,
                       float lr, float momentum, float weight_decay, float *lowp, int format);
void tr_cpu_adamw_update(float *param, float *m, float *v, const float *grad, size_t n,
                         float lr, double beta1, double beta2, float eps, float weight_decay,
                         long t, float *lowp, int format);
void tr_cpu_adamw_update_spans(const tr_adamw_span *s, int count, float lr, double beta1,
                               double beta2, float eps, long t, int format, int grad_format,
                               float grad_factor);
double tr_cpu_sum_squares(const float *x, size_t n);
double tr_cpu_sum_squares_spans(const float *const *x, const size_t *n, int count, int format);

#endif
