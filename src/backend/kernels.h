/* kernels.h: the table of math kernels one device provides.
 *
 * Layers (src/nn) and models call only these; a backend (CPU, CUDA) fills the table.
 * The backend knows nothing of layers or models. Tensors are float32, row-major,
 * contiguous, except those an entry says are "stored in format" (void pointers:
 * 16-bit values in bf16/fp16-mixed, lowp_math.h); pointers live in the backend's
 * memory. Dimension letters:
 *   B batch, C channels, H/W height/width, K kernel size, IN/OUT features, V classes.
 * Gradient rule: parameter gradients accumulate (+=) so micro-batches add up;
 * activation gradients overwrite (=). */
#ifndef TR_KERNELS_H
#define TR_KERNELS_H

#include "backend/dropout_math.h" /* tr_dropout */

#include <stddef.h>

/* The largest head size (C / NH) the CUDA backend's fused attention takes (its kernels
 * pad heads to 32, 64, 128 or 256); the CPU's has no limit. Here, not in the CUDA
 * headers, so that a deck for a GPU is checked where it is read, in any build. */
#define TR_CUDA_MAX_HEAD_SIZE 256

/* Shape of a 2-D convolution, stride 1, square kernel, symmetric zero padding. */
typedef struct tr_conv_shape {
    int B, cin, h, w;   /* input  [B, cin, h, w] */
    int cout, k, pad;   /* weight [cout, cin, k, k], bias [cout] */
    int ho, wo;         /* output [B, cout, ho, wo], ho = h + 2 pad - k + 1 */
} tr_conv_shape;

/* One tensor's part of an AdamW step: what adamw_update takes that varies by tensor. */
typedef struct tr_adamw_span {
    float *param, *m, *v;
    const float *grad;
    float *lowp; /* the working copy, or NULL */
    size_t n;
    float weight_decay;
} tr_adamw_span;

typedef struct tr_kernels {
    const char *name;

    /* C[M,N] = alpha op(A) op(B) + beta C; op transposes when trans* is nonzero.
     * Row-major; lda/ldb/ldc are row strides as stored. Uses all the rank's threads. */
    void (*gemm)(int transA, int transB, int M, int N, int K, float alpha, const float *A,
                 int lda, const float *B, int ldb, float beta, float *C, int ldc);

    /* out[B,OUT] = inp[B,IN] w[OUT,IN]^T + b[OUT] */
    void (*linear_forward)(float *out, const float *inp, const float *w, const float *b, int B,
                           int IN, int OUT);
    /* dinp[B,IN] = dout w (skipped when dinp is NULL); dw += dout^T inp; db += sum_B dout */
    void (*linear_backward)(float *dinp, float *dw, float *db, const float *dout,
                            const float *inp, const float *w, int B, int IN, int OUT);

    void (*relu_forward)(float *out, const float *inp, size_t n);
    /* dinp = dout where out > 0 else 0 (dinp may alias dout) */
    void (*relu_backward)(float *dinp, const float *dout, const float *out, size_t n);

    /* scratch: at least conv_scratch_floats(s) floats, owned by the caller */
    size_t (*conv_scratch_floats)(const tr_conv_shape *s);
    void (*conv2d_forward)(float *out, const float *inp, const float *w, const float *b,
                           const tr_conv_shape *s, float *scratch);
    /* dinp (NULL to skip) =; dw +=; db += */
    void (*conv2d_backward)(float *dinp, float *dw, float *db, const float *dout,
                            const float *inp, const float *w, const tr_conv_shape *s,
                            float *scratch);

    /* k x k window, stride k, no padding; out [B,C,H/k,W/k]; argmax saves the winner's
     * index within each input plane for backward. */
    void (*maxpool_forward)(float *out, int *argmax, const float *inp, int B, int C, int H,
                            int W, int k);
    void (*maxpool_backward)(float *dinp, const float *dout, const int *argmax, int B, int C,
                             int H, int W, int k);

    /* probs[B,V] = softmax(logits); losses[B] = -log probs[label]; the sum of losses
     * and of correct predictions (argmax == label) are returned through the pointers. */
    void (*softmax_xent_forward)(float *probs, float *losses, const float *logits,
                                 const int *labels, int B, int V, double *loss_sum,
                                 long *correct);
    /* dlogits[B,V] = scale (probs - onehot(label)) */
    void (*softmax_xent_backward)(float *dlogits, const float *probs, const int *labels,
                                  float scale, int B, int V);

    /* Optimizer updates over flat slices (one call for a whole buffer). Mixed
     * precision: where lowp is not NULL, the updated param (the fp32 master) is also
     * stored there rounded to format (a tr_precision): the model's working copy, made
     * in the update's pass rather than by a copy and a round_lowp after it. */
    void (*sgd_update)(float *param, float *momentum_buf, const float *grad, size_t n,
                       float lr, float momentum, float weight_decay, float *lowp, int format);
    /* AdamW with bias correction; t is the 1-based step number; decay is decoupled
     * (p -= lr wd p). Called per tensor so biases can pass weight_decay = 0. */
    void (*adamw_update)(float *param, float *m, float *v, const float *grad, size_t n,
                         float lr, double beta1, double beta2, float eps, float weight_decay,
                         long t, float *lowp, int format);
    /* adamw_update on each of count spans (a host array) with the step's shared
     * arguments: the bits of those calls, in fewer launches on a GPU (a model's
     * tensors, 148 for GPT-2 124M, most of them a few hundred values: one launch each
     * would cost more than its work). Each gradient is read as
     * tr_grad_in(g, grad_format, grad_factor) (lowp_math.h): rounded to grad_format
     * (mixed precision's reduced gradients; fp32: as they are), then times
     * grad_factor where it is not 1 (unscaling, clipping), the gradients in memory
     * left as they are: the bits of round_lowp and scale over the gradients before
     * the update, without their two passes over every gradient. */
    void (*adamw_update_spans)(const tr_adamw_span *s, int count, float lr, double beta1,
                               double beta2, float eps, long t, int format, int grad_format,
                               float grad_factor);
    double (*sum_squares)(const float *x, size_t n);
    /* The sum over i < count of sum_squares(x[i], n[i]), added in order in double:
     * the bits of those calls added one by one, with one wait for the result where a
     * device's caller would otherwise wait for each (the global norm of a sharded
     * model's gradients, one span a tensor). x and n are host arrays. Each value is
     * first rounded to format (fp32: as it is): the norm of the gradients that
     * adamw_update_spans reads with that grad_format, the bits of sum_squares after
     * a round_lowp of each span, without the rounding's pass. */
    double (*sum_squares_spans)(const float *const *x, const size_t *n, int count, int format);
    void (*scale)(float *x, size_t n, float a);
    /* Mixed precision: x[i] = the nearest value of `format` (a tr_precision of
     * lowp_math.h: bf16 or fp16; fp32 leaves x alone), rounded as lowp_math.h rounds.
     * Where the working copy of parameters and activations lives in fp32 memory (the
     * CPU backend) this is its 16-bit storage. */
    void (*round_lowp)(float *x, size_t n, int format);
    /* Mixed precision: the format (a tr_precision) the run stores parameters and
     * activations in, told before the first kernel (the trainer does so once, at
     * start-up; it applies to every product queued after it). From then on the
     * matrix products (gemm, linear, conv, attention) may round their inputs to
     * `format` and multiply them exactly, accumulating in fp32: the GPU does this on
     * its tensor cores. fp32 (the default) keeps fp32 products (no TF32). The CPU
     * ignores it: the inputs it multiplies are, where the model stores them, already
     * of the format, and the product of two bf16 or two fp16 values is exact in
     * fp32, so its fp32 GEMM already is a 16-bit GEMM with fp32 accumulation. Where
     * an input was not rounded (the classifiers' input images) the GPU's products
     * differ from the CPU's by that input's rounding (src/cuda/cuda_gemm.cu). */
    void (*set_gemm_precision)(int format);

    /* The transformer's kernels: shapes, saved tensors and rules as documented in
     * transformer_kernels.h (dimension letters B, T, C, NH, V, Vp there). */
    void (*embedding_forward)(float *out, const int *tok, const float *wte, const float *wpe,
                              int B, int T, int C, int V);
    void (*embedding_backward)(float *dwte, float *dwpe, const float *dout, const int *tok,
                               int B, int T, int C, int V);
    /* Activations that the model stores come out rounded to `format` (a tr_precision;
     * fp32 leaves them) where a kernel below takes one: the same bits as the kernel
     * at fp32 followed by round_lowp, without a second pass over the tensor. Inputs
     * that transformer_kernels.h says are "read as values of format" are rounded as
     * they are read, as if rounded in place before: how the model stores a matrix
     * product's output without a pass of its own. */
    /* inp (the residual stream) and out stored in format (lowp_math.h: 16 bits a value
     * in bf16/fp16-mixed) */
    void (*layernorm_forward)(void *out, float *mean, float *rstd, const void *inp,
                              const float *weight, const float *bias, int B, int T, int C,
                              int format);
    /* inp stored in format; dinp (+=) where accumulate is set: the residual stream's
     * gradient */
    void (*layernorm_backward)(float *dinp, float *dweight, float *dbias, const float *dout,
                               const void *inp, const float *weight, const float *mean,
                               const float *rstd, int B, int T, int C, int format,
                               int accumulate);
    void (*gelu_forward)(float *out, const float *inp, size_t n);
    /* inp stored in format (lowp_math.h: 16-bit values in a 16-bit format) */
    void (*gelu_backward)(float *dinp, const void *inp, const float *dout, size_t n,
                          int format);
    /* The layernorms' outputs, qkv, attention's output and the MLP's hidden
     * activations are stored in format (lowp_math.h), 16 bits a value in
     * bf16/fp16-mixed: 14 of the 16 values per feature of a token that a block keeps
     * (the residual stream's two are the other two), which only layernorm_forward,
     * attention_forward and _backward, these entries, gelu_backward and
     * xent_linear_backward touch.
     * The MLP's first half: pre = linear_forward(inp, w, b) rounded to the format, as
     * gelu_backward reads it, and out = gelu(pre) rounded to it, as c_proj reads it,
     * inp (ln_2's output) stored too: one entry, so that a GPU can make it one matmul
     * with an epilogue. scratch: B*OUT floats, scratch_in B*IN, which the entry may
     * overwrite (transformer_kernels.h). */
    void (*linear_gelu_forward)(void *pre, void *out, const void *inp, const float *w,
                                const float *b, int B, int IN, int OUT, int format,
                                float *scratch, float *scratch_in);
    /* linear_forward and linear_backward of an input stored in format (c_attn's and
     * c_fc's, the layernorms' outputs; the c_proj's, attention's and the GELU's
     * outputs; the LM head's).
     * Forward's scratch: B*IN floats it may overwrite. Backward's dinp is required;
     * the entry may use it as scratch before it writes it. */
    void (*linear_forward_stored)(float *out, const void *inp, const float *w,
                                  const float *b, int B, int IN, int OUT, int format,
                                  float *scratch);
    /* linear_forward_stored with its output stored in format as well (c_attn's, qkv):
     * scratch B*OUT and scratch_in B*IN floats the entry may overwrite */
    void (*linear_forward_stored_io)(void *out, const void *inp, const float *w,
                                     const float *b, int B, int IN, int OUT, int format,
                                     float *scratch, float *scratch_in);
    void (*linear_backward_stored)(float *dinp, float *dw, float *db, const float *dout,
                                   const void *inp, const float *w, int B, int IN, int OUT,
                                   int format);
    /* linear_backward_stored of a dout stored in format as well (c_attn's: attention's
     * dqkv); scratch: B*OUT floats the entry may overwrite */
    void (*linear_backward_stored_dout)(float *dinp, float *dw, float *db, const void *dout,
                                        const void *inp, const float *w, int B, int IN,
                                        int OUT, int format, float *scratch);
    /* linear_backward_stored with its input gradient dinp [B,IN] stored in format too
     * (attention's c_proj: attention_backward's dout); scratch: B*IN floats the entry
     * may overwrite */
    void (*linear_backward_stored_dinp)(void *dinp, float *dw, float *db, const float *dout,
                                        const void *inp, const float *w, int B, int IN,
                                        int OUT, int format, float *scratch);
    /* The MLP's backward, from c_proj's output gradient dout [B,IN] to ln_2's output
     * gradient dinp [B,IN] (=): linear_backward_stored of c_proj on hid, gelu_backward
     * on pre, linear_backward_stored of c_fc on inp (all three stored in format), in
     * one entry so that the hidden gradient [B,HID] between them lives in scratch
     * (B*HID floats) in the backend's own form: fp32 on the CPU, the format's 16 bits
     * on a GPU (transformer_kernels.h). Weight and bias gradients +=. */
    void (*mlp_backward)(float *dinp, float *dw_fc, float *db_fc, float *dw_proj,
                         float *db_proj, const float *dout, const void *inp, const void *pre,
                         const void *hid, const float *w_fc, const float *w_proj, int B,
                         int IN, int HID, int format, float *scratch);
    /* out = a + b: the residual stream, out and a stored in format, b (a product's
     * output) read as values of it; its gradients add up in layernorm_backward */
    void (*residual_forward)(void *out, const void *a, const float *b, size_t n, int format);
    /* out, stored in format, = inp rounded to it (the embeddings' sum into the stream) */
    void (*narrow_stored)(void *out, const float *inp, size_t n, int format);
    /* out[i] = inp[i] times tr_dropout_factor(d, d->base + i) (0 or 1 / (1 - p)),
     * fp32, out may be inp; d on (tr_dropout_on). The mask is drawn, never stored:
     * backward calls it again on the gradient with the same d (dropout_math.h). */
    void (*dropout)(float *out, const float *inp, size_t n, const tr_dropout *d);
    /* att (and backward's datt) is the backend's own state for backward, of
     * attention_state_floats(B, T, NH) floats each: the CPU saves each row's max score
     * and 1 / sum of exponentials there (B*NH*T*2), the GPU's fused kernels the rows'
     * log-sum-exps (B*NH*T; transformer_kernels.h); neither saves the T x T
     * probabilities, which backward forms again. qkv is stored in `format` (c_attn's output:
     * linear_forward_stored_io). out is forward's own output, stored in `format`
     * (lowp_math.h: 16 bits a value in bf16/fp16-mixed; c_proj's input, read by the
     * _stored linear entries), which backward reads; backward's dout is stored in
     * `format` (written by linear_backward_stored_dinp), and its dqkv too (read by
     * linear_backward_stored_dout). drop (NULL or off: none) drops attention's
     * probabilities after the softmax, (b, h, i, j) with tr_dropout_att_factor's mask:
     * forward multiplies V by the dropped ones, backward draws the same mask; the
     * saved state is of the probabilities before it. */
    size_t (*attention_state_floats)(int B, int T, int NH);
    void (*attention_forward)(void *out, float *att, const void *qkv, int B, int T, int C,
                              int NH, int format, const tr_dropout *drop);
    void (*attention_backward)(void *dqkv, float *datt, const void *dout, const void *out,
                               const void *qkv, const float *att, int B, int T, int C, int NH,
                               int format, const tr_dropout *drop);
    /* Sampling with a key-value cache: out [C] (stored in format) = attention_forward's
     * output row T-1 for qkv [T,3C] (one sequence, stored in format; rows 0..T-2 the
     * cached keys and values), without the other rows' work. scratch: NH*T floats,
     * overwritten. No dropout: sampling is not a training pass. */
    void (*attention_decode)(void *out, float *scratch, const void *qkv, int T, int C, int NH,
                             int format);
    /* A language model's logits [B*T,Vl] are kept in the form the backend chooses,
     * logits_format(format, C, Vl): TR_PREC_FP32 (floats holding a product's fp32
     * sums, read as values of format: the CPU's form) or format itself (stored in its
     * 16-bit width: a GPU whose products take the head's weight in one 16-bit copy,
     * half the bytes for every pass over the largest activation). The head's entries
     * below take the logits in that form, `lfmt`, and read them as values of format. */
    int (*logits_format)(int format, int C, int Vl);
    /* logits [BT,Vl] (stored in lfmt) = inp [BT,C] (stored in format) w [Vl,C]^T, no
     * bias. scratch: BT*C floats, overwritten. */
    void (*lm_head_forward)(void *logits, const void *inp, const float *w, size_t BT, int C,
                            int Vl, int format, int lfmt, float *scratch);
    /* The cross-entropy keeps each row's (max, 1 / sum of exps) in stats [B*T,2] and
     * recomputes the softmax from the logits in backward (transformer_kernels.h). */
    double (*xent_padded_forward)(float *stats, float *losses, const void *logits,
                                  const int *targets, int B, int T, int V, int Vp,
                                  int format, int lfmt);
    void (*xent_padded_backward)(void *dlogits, const void *logits, const float *stats,
                                 const int *targets, float scale, int B, int T, int V, int Vp,
                                 int format, int lfmt);
    /* The vocabulary split over tensor-parallel ranks (transformer_kernels.h). */
    void (*embedding_shard_forward)(float *out, const int *tok, const float *wte,
                                    const float *wpe, int B, int T, int C, int v0, int Vl);
    void (*embedding_shard_backward)(float *dwte, float *dwpe, const float *dout,
                                     const int *tok, int B, int T, int C, int v0, int Vl);
    void (*xent_shard_max)(float *rowmax, const void *logits, size_t BT, int Vl, int nreal,
                           int format, int lfmt);
    void (*xent_shard_sums)(double *sums, const void *logits, const float *rowmax,
                            const int *targets, size_t BT, int Vl, int v0, int nreal,
                            int format, int lfmt);
    double (*xent_shard_finish)(float *stats, float *losses, const double *sums,
                                const float *rowmax, size_t BT);
    void (*xent_shard_backward)(void *dlogits, const void *logits, const float *stats,
                                const int *targets, float scale, size_t BT, int Vl, int v0,
                                int nreal, int format, int lfmt);
    /* A language model's head backward in one entry: xent_shard_backward's dlogits
     * (v0 0 and nreal V for the whole, padded vocabulary), then linear_backward of the
     * bias-free layer that made the logits from inp [BT,C] (stored in format: the
     * final layernorm's output) with w [Vl,C] (dinp =, required; dw +=). The logits'
     * contents afterwards are unspecified: a GPU makes the gradient slice by slice
     * into its 16-bit operand copies, or over the 16-bit logits, and multiplies it
     * there (transformer_kernels.h). */
    void (*xent_linear_backward)(float *dinp, float *dw, void *logits, const float *stats,
                                 const int *targets, float scale, size_t BT, int Vl, int v0,
                                 int nreal, const void *inp, const float *w, int C,
                                 int format, int lfmt);
    /* A language model's accuracy: for each row r of x [rows, ld] (stored in lfmt),
     * idx[r] is the first index j < n of the row's largest value and val[r] that
     * value, as the scan "best = 0; if (x[j] > x[best]) best = j" finds it (NaN never
     * wins, but a NaN in column 0 stays); n = 0 gives idx -1 and val -inf. x is read
     * as values of `format`. */
    void (*rows_argmax)(int *idx, float *val, const void *x, size_t rows, int ld, int n,
                        int format, int lfmt);
} tr_kernels;

/* The CPU backend: CBLAS for GEMMs, OpenMP for the rest. */
extern const tr_kernels tr_cpu_kernels;

#endif
