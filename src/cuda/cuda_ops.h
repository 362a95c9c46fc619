/* cuda_ops.h: the CUDA backend's kernel entry points, one per tr_kernels entry it
 * implements (the table in cuda_kernels.cu points at these). Host functions taking
 * device pointers; signatures and semantics as in backend/kernels.h and
 * backend/transformer_kernels.h. Internal to src/cuda: everything else goes through
 * tr_cuda_kernels. */
#ifndef TR_CUDA_OPS_H
#define TR_CUDA_OPS_H

#include "backend/kernels.h" /* tr_conv_shape */
#include "cuda/cuda_backend.h" /* tr_cuda_gemm_strided_batched */

#include <library_types.h> /* cudaDataType_t */
#include <stddef.h>

/* cuda_gemm.cu */
void tr_cuda_gemm(int transA, int transB, int M, int N, int K, float alpha, const float *A,
                  int lda, const float *B, int ldb, float beta, float *C, int ldc);
/* tr_cuda_gemm_strided_batched: in cuda_backend.h (C-callable, for the tests) */
void tr_cuda_set_gemm_precision(int format);
int tr_cuda_gemm_precision(void); /* the tr_precision set last (fp32 at first) */
/* bf16/fp16-mixed: dst [rows][cols] packed = src [rows][cols] (row stride ld) in the
 * run's 16-bit format, on the stream; and that format's cuBLAS type */
void tr_cuda_cast_16(void *dst, const float *src, int rows, int cols, int ld);
cudaDataType_t tr_cuda_type_16(void);

/* cuda_peak.cu: GFLOP/s of this rank's GPU for MFU in the precision set, and where
 * the figure comes from in source (device.h's peak_gflops) */
double tr_cuda_peak_gflops(char *source, size_t n);
void tr_cuda_linear_forward(float *out, const float *inp, const float *w, const float *b, int B,
                            int IN, int OUT);
void tr_cuda_linear_backward(float *dinp, float *dw, float *db, const float *dout,
                             const float *inp, const float *w, int B, int IN, int OUT);
/* activations stored in format: the layernorms' outputs and the MLP's
 * (transformer_kernels.h) */
void tr_cuda_linear_gelu_forward(void *pre, void *out, const void *inp, const float *w,
                                 const float *b, int B, int IN, int OUT, int format,
                                 float *scratch, float *scratch_in);
void tr_cuda_linear_forward_stored(float *out, const void *inp, const float *w, const float *b,
                                   int B, int IN, int OUT, int format, float *scratch);
void tr_cuda_linear_forward_stored_io(void *out, const void *inp, const float *w,
                                      const float *b, int B, int IN, int OUT, int format,
                                      float *scratch, float *scratch_in);
void tr_cuda_linear_backward_stored(float *dinp, float *dw, float *db, const float *dout,
                                    const void *inp, const float *w, int B, int IN, int OUT,
                                    int format);
void tr_cuda_linear_backward_stored_dout(float *dinp, float *dw, float *db, const void *dout,
                                         const void *inp, const float *w, int B, int IN,
                                         int OUT, int format, float *scratch);
void tr_cuda_linear_backward_stored_dinp(void *dinp, float *dw, float *db, const float *dout,
                                         const void *inp, const float *w, int B, int IN,
                                         int OUT, int format, float *scratch);
void tr_cuda_mlp_backward(float *dinp, float *dw_fc, float *db_fc, float *dw_proj,
                          float *db_proj, const float *dout, const void *inp, const void *pre,
                          const void *hid, const float *w_fc, const float *w_proj, int B, int IN,
                          int HID, int format, float *scratch);

/* cuda_linear_lt.cu: out[B,OUT] = inp[B,IN] w[OUT,IN]^T (+ b[OUT] when b is not
 * NULL) as one cuBLASLt matmul in the precision of set_gemm_precision; with pre
 * [B,OUT] not NULL, pre gets that and out = gelu(pre) (the epilogue's). Returns 1
 * once queued, 0 having queued nothing where cuBLASLt has no algorithm for it (or
 * pre is given and OUT is not a multiple of 8): the caller then computes it
 * without cuBLASLt. inp16, where not NULL, is the input already in the run's 16-bit
 * format (a tensor stored in it, lowp_math.h), multiplied as it is; inp is then not
 * read, and only a 16-bit run whose w fits a cast buffer takes it. */
/* The same with inp16 given and out stored in the 16-bit format (tr_cuda_type_16);
 * the bias, where given, must be of that format (a parameter: the model rounds them) */
int tr_cuda_linear_lt_16(void *out, const void *inp16, const float *w, const float *b, int B,
                         int IN, int OUT);
int tr_cuda_linear_lt(float *out, float *pre, const float *inp, const void *inp16,
                      const float *w, const float *b, int B, int IN, int OUT);

/* cuda_classifier.cu */
void tr_cuda_relu_forward(float *out, const float *inp, size_t n);
void tr_cuda_relu_backward(float *dinp, const float *dout, const float *out, size_t n);
void tr_cuda_maxpool_forward(float *out, int *argmax, const float *inp, int B, int C, int H,
                             int W, int k);
void tr_cuda_maxpool_backward(float *dinp, const float *dout, const int *argmax, int B, int C,
                              int H, int W, int k);
void tr_cuda_softmax_xent_forward(float *probs, float *losses, const float *logits,
                                  const int *labels, int B, int V, double *loss_sum,
                                  long *correct);
void tr_cuda_softmax_xent_backward(float *dlogits, const float *probs, const int *labels,
                                   float scale, int B, int V);

void tr_cuda_rows_argmax(int *idx, float *val, const void *x, size_t rows, int ld, int n,
                         int format, int lfmt);

/* cuda_conv.cu */
size_t tr_cuda_conv_scratch_floats(const tr_conv_shape *s);
void tr_cuda_conv2d_forward(float *out, const float *inp, const float *w, const float *b,
                            const tr_conv_shape *s, float *scratch);
void tr_cuda_conv2d_backward(float *dinp, float *dw, float *db, const float *dout,
                             const float *inp, const float *w, const tr_conv_shape *s,
                             float *scratch);

/* cuda_transformer.cu */
void tr_cuda_embedding_forward(float *out, const int *tok, const float *wte, const float *wpe,
                               int B, int T, int C, int V);
void tr_cuda_embedding_backward(float *dwte, float *dwpe, const float *dout, const int *tok,
                                int B, int T, int C, int V);
void tr_cuda_embedding_shard_forward(float *out, const int *tok, const float *wte,
                                     const float *wpe, int B, int T, int C, int v0, int Vl);
void tr_cuda_embedding_shard_backward(float *dwte, float *dwpe, const float *dout,
                                      const int *tok, int B, int T, int C, int v0, int Vl);
void tr_cuda_layernorm_forward(void *out, float *mean, float *rstd, const void *inp,
                               const float *weight, const float *bias, int B, int T, int C,
                               int format);
void tr_cuda_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                const void *inp, const float *weight, const float *mean,
                                const float *rstd, int B, int T, int C, int format,
                                int accumulate);
void tr_cuda_gelu_forward(float *out, const float *inp, size_t n);
void tr_cuda_gelu_backward(float *dinp, const void *inp, const float *dout, size_t n,
                           int format);
/* gelu_backward in place on d, a gradient stored in format itself (mlp_backward's) */
void tr_cuda_gelu_backward_stored(void *d, const void *inp, size_t n, int format);
/* pre = lin rounded to format, out = gelu(pre) rounded to it, both stored in format;
 * and dst = src (stored in format) widened to fp32 */
void tr_cuda_gelu_store(void *pre, void *out, const float *lin, size_t n, int format);
void tr_cuda_gelu_stored(void *out, const void *pre, size_t n, int format);
void tr_cuda_widen_stored(float *dst, const void *src, size_t n, int format);
/* dst, stored in format, = src rounded to it */
void tr_cuda_narrow_stored(void *dst, const float *src, size_t n, int format);
void tr_cuda_residual_forward(void *out, const void *a, const float *b, size_t n, int format);
void tr_cuda_dropout(float *out, const float *inp, size_t n, const tr_dropout *d);

/* cuda_attention.cu */
size_t tr_cuda_attention_state_floats(int B, int T, int NH); /* B*NH*T */
void tr_cuda_attention_forward(void *out, float *att, const void *qkv, int B, int T, int C,
                               int NH, int format, const tr_dropout *drop);
void tr_cuda_attention_decode(void *out, float *scratch, const void *qkv, int T, int C, int NH,
                              int format);
void tr_cuda_attention_backward(void *dqkv, float *datt, const void *dout, const void *out,
                                const void *qkv, const float *att, int B, int T, int C, int NH,
                                int format, const tr_dropout *drop);

/* cuda_xent.cu */
double tr_cuda_xent_padded_forward(float *stats, float *losses, const void *logits,
                                   const int *targets, int B, int T, int V, int Vp,
                                   int format, int lfmt);
void tr_cuda_xent_padded_backward(void *dlogits, const void *logits, const float *stats,
                                  const int *targets, float scale, int B, int T, int V, int Vp,
                                  int format, int lfmt);
void tr_cuda_xent_shard_max(float *rowmax, const void *logits, size_t BT, int Vl, int nreal,
                            int format, int lfmt);
void tr_cuda_xent_shard_sums(double *sums, const void *logits, const float *rowmax,
                             const int *targets, size_t BT, int Vl, int v0, int nreal,
                             int format, int lfmt);
double tr_cuda_xent_shard_finish(float *stats, float *losses, const double *sums,
                                 const float *rowmax, size_t BT);
void tr_cuda_xent_shard_backward(void *dlogits, const void *logits, const float *stats,
                                 const int *targets, float scale, size_t BT, int Vl, int v0,
                                 int nreal, int format, int lfmt);
/* cuda_gemm.cu: the LM head. Its logits are 16-bit where the head's weight fits one
 * 16-bit copy (logits_format); its backward makes the gradient straight into 16-bit
 * copies from fp32 logits, or over 16-bit ones */
int tr_cuda_logits_format(int format, int C, int Vl);
void tr_cuda_lm_head_forward(void *logits, const void *inp, const float *w, size_t BT, int C,
                             int Vl, int format, int lfmt, float *scratch);
void tr_cuda_xent_linear_backward(float *dinp, float *dw, void *logits, const float *stats,
                                  const int *targets, float scale, size_t BT, int Vl, int v0,
                                  int nreal, const void *inp, const float *w, int C, int format,
                                  int lfmt);

/* cuda_optim.cu */
void tr_cuda_sgd_update(float *param, float *momentum_buf, const float *grad, size_t n,
                        float lr, float momentum, float weight_decay, float *lowp, int format);
void tr_cuda_adamw_update(float *param, float *m, float *v, const float *grad, size_t n,
                          float lr, double beta1, double beta2, float eps, float weight_decay,
                          long t, float *lowp, int format);
void tr_cuda_adamw_update_spans(const tr_adamw_span *s, int count, float lr, double beta1,
                                double beta2, float eps, long t, int format, int grad_format,
                                float grad_factor);
double tr_cuda_sum_squares(const float *x, size_t n);
double tr_cuda_sum_squares_spans(const float *const *x, const size_t *n, int count, int format);
void tr_cuda_scale(float *x, size_t n, float a);
void tr_cuda_round_lowp(float *x, size_t n, int format);

#endif
