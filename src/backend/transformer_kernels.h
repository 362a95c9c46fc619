/* transformer_kernels.h: the CPU kernels of a GPT-2 style transformer, as
 * forward/backward pairs (implemented in cpu_transformer.c and cpu_attention.c).
 *
 * Dimension letters: B batch, T time (sequence), C channels, NH heads, HS = C / NH
 * head size, V vocabulary, Vp the vocabulary padded (V <= Vp) for aligned rows.
 * Every tensor is float32 (tokens int), row-major and contiguous; each pointer
 * argument below names its shape. Outputs first, then what backward needs saved,
 * then inputs, parameters, dimensions.
 *
 * Gradient rule: parameter gradients accumulate (+=), activation gradients
 * overwrite (=). The caller owns every buffer; no kernel allocates.
 *
 * Mixed precision: a kernel that takes `format` (a tr_precision of lowp_math.h)
 * rounds the activation or activation gradient it stores to that format (fp32 leaves
 * it), exactly as tr_cpu_round_lowp would afterwards; which outputs, each kernel says.
 * Some also read an input "as values of format": as if it had been rounded in place
 * first, which the model then need not do. A matrix product's output (fp32 from the
 * BLAS) is stored that way, rounded by the kernel that reads it. On a GPU both save
 * the model a pass over the tensor; the CPU reads such inputs through a rounded copy
 * of the row or head in hand.
 *
 * Threading: OpenMP over rows (B*T) or heads (B*NH), small problems serially; the
 * BLAS is single-threaded (see cpu_gemm.c). Deterministic: no atomics, and every
 * reduction across rows (parameter gradients) is a serial loop over rows inside a
 * parallel loop over channels, so results are bit-identical run to run and do not
 * depend on the thread count. */
#ifndef TR_TRANSFORMER_KERNELS_H
#define TR_TRANSFORMER_KERNELS_H

#include "backend/dropout_math.h" /* tr_dropout */

#include <stddef.h>

/* ---- embedding: out = wte[tok] + wpe[t] ------------------------------------------
 * out [B,T,C], tok [B,T] in [0, V) (checked: a bad token is a fatal bug report),
 * wte [V,C], wpe [>=T,C]. Backward accumulates dout into the rows of dwte picked by
 * tok and into dwpe[0..T). */
void tr_cpu_embedding_forward(float *out, const int *tok, const float *wte, const float *wpe,
                              int B, int T, int C, int V);
void tr_cpu_embedding_backward(float *dwte, float *dwpe, const float *dout, const int *tok,
                               int B, int T, int C, int V);

/* ---- layernorm over C, eps 1e-5 ---------------------------------------------------
 * out, inp [B,T,C]; mean, rstd [B,T] saved for backward; weight, bias [C]. inp, the
 * residual stream, is stored in `format` (lowp_math.h: 16-bit values where it is bf16
 * or fp16; residual_forward below writes it); out is rounded to `format` and stored in
 * it too (its readers are the linear layers' _stored entries below); mean and rstd
 * stay fp32.
 * Backward: inp stored in `format` as in forward, dout read as values of `format`;
 * dweight, dbias [C] (+=); dinp [B,T,C]
 * (=), or (+=) where accumulate is set (the residual stream's gradient, which the
 * layernorm's input gradient adds into: no separate add), rounded to `format` after
 * the add. */
#define TR_LAYERNORM_EPS 1e-5f
void tr_cpu_layernorm_forward(void *out, float *mean, float *rstd, const void *inp,
                              const float *weight, const float *bias, int B, int T, int C,
                              int format);
void tr_cpu_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                               const void *inp, const float *weight, const float *mean,
                               const float *rstd, int B, int T, int C, int format,
                               int accumulate);

/* ---- GELU, tanh approximation (gelu_math.h), elementwise over n -------------------
 * Backward: dinp = gelu'(inp) dout (=), inp stored in `format` (lowp_math.h: 16-bit
 * values where it is bf16 or fp16), dout read as values of `format`, dinp rounded to
 * it; it needs the input, not the output. dinp may be dout (in place). */
void tr_cpu_gelu_forward(float *out, const float *inp, size_t n);
void tr_cpu_gelu_backward(float *dinp, const void *inp, const float *dout, size_t n,
                          int format);

/* ---- activations stored in `format`: layernorm, qkv, attention and MLP outputs -----
 * A block keeps ln_1's and ln_2's outputs ([B,C] each), qkv ([B,3C]), attention's
 * output ([B,C]), and the MLP's pre = c_fc(x) and out = gelu(pre) ([B,OUT] each), for
 * backward: 14 of the 16 values per feature that it stores for each token (the
 * residual stream, layernorm's input and residual_forward's output, is the other
 * two, stored in `format` too); the head keeps ln_f's output. They are stored in the
 * format's own width (lowp_math.h), half the bytes in bf16/fp16-mixed, and only
 * layernorm_forward, attention_forward and _backward, the entries below,
 * gelu_backward and xent_linear_backward read or write them; their values are the
 * ones the fp32-memory form held (round_lowp of the same floats), so every result
 * has the bits it had when they lived in fp32 memory.
 *
 * linear_gelu_forward: inp [B,IN] stored in format; w [OUT,IN]; b [OUT] or NULL;
 * format a tr_precision. pre = tr_cpu_linear_forward(inp, w, b) rounded to format;
 * out = gelu(pre) rounded to format; both stored in format. scratch: B*OUT floats
 * (the fp32 product), scratch_in: B*IN (the input widened), which the entry
 * overwrites. One entry so that a GPU can fuse it (src/cuda/cuda_gemm.cu).
 *
 * linear_forward_stored / linear_backward_stored: tr_cpu_linear_forward and
 * tr_cpu_linear_backward on an input stored in format (c_attn's and c_fc's: the
 * layernorms' outputs; the two c_proj's: attention's and the GELU's outputs; the LM
 * head's), the same bits as
 * on its values in fp32 memory. Forward's scratch: B*IN floats it
 * overwrites. Backward's dinp [B,IN] is required: the CPU widens inp into it, takes
 * the weight and bias gradients from there, then writes the input gradient over it;
 * a GPU multiplies the 16-bit input as it is. */
void tr_cpu_linear_gelu_forward(void *pre, void *out, const void *inp, const float *w,
                                const float *b, int B, int IN, int OUT, int format,
                                float *scratch, float *scratch_in);
void tr_cpu_linear_forward_stored(float *out, const void *inp, const float *w, const float *b,
                                  int B, int IN, int OUT, int format, float *scratch);
void tr_cpu_linear_backward_stored(float *dinp, float *dw, float *db, const float *dout,
                                   const void *inp, const float *w, int B, int IN, int OUT,
                                   int format);
/* linear_forward_stored whose output [B,OUT] is stored in format too, rounded (c_attn's:
 * qkv, which only the attention entries read). scratch: B*OUT floats (the fp32
 * product), scratch_in: B*IN, both overwritten; a GPU's product stores 16 bits itself. */
void tr_cpu_linear_forward_stored_io(void *out, const void *inp, const float *w, const float *b,
                                     int B, int IN, int OUT, int format, float *scratch,
                                     float *scratch_in);
/* linear_backward_stored whose dout [B,OUT] is stored in format too (c_attn's: dqkv,
 * attention_backward's output). scratch: B*OUT floats, overwritten: the CPU widens dout
 * there; a GPU multiplies its 16 bits as they are. */
void tr_cpu_linear_backward_stored_dout(float *dinp, float *dw, float *db, const void *dout,
                                        const void *inp, const float *w, int B, int IN,
                                        int OUT, int format, float *scratch);
/* linear_backward_stored whose input gradient dinp [B,IN] is stored in format, rounded
 * (attention's c_proj: dinp is attention_backward's dout, which reads it as values of
 * the format anyway). scratch: B*IN floats, overwritten: the CPU's fp32 product goes
 * there first; a GPU's product stores 16 bits itself. */
void tr_cpu_linear_backward_stored_dinp(void *dinp, float *dw, float *db, const float *dout,
                                        const void *inp, const float *w, int B, int IN,
                                        int OUT, int format, float *scratch);

/* ---- the MLP's backward in one entry ------------------------------------------------
 * dout [B,IN] is c_proj's output gradient (read as values of format); inp [B,IN]
 * (ln_2's output), pre and hid [B,HID] (c_fc's output and GELU's) are stored in
 * format; w_fc [HID,IN], w_proj [IN,HID]. Exactly
 *   tr_cpu_linear_backward_stored(scratch, dw_proj, db_proj, dout, hid, w_proj, B, HID, IN)
 *   tr_cpu_gelu_backward(scratch, pre, scratch, B*HID)
 *   tr_cpu_linear_backward_stored(dinp, dw_fc, db_fc, scratch, inp, w_fc, B, IN, HID)
 * (each with format; db_fc and db_proj may be NULL). scratch: B*HID floats, whose
 * contents afterwards are unspecified. One entry because the hidden gradient is the
 * largest tensor of a block's backward (4C per token) and never leaves it: a GPU keeps
 * it in the format's 16 bits in scratch, written so by c_proj's product, GELU's
 * backward in place on it, read as it is by c_fc's products and bias sum (half the
 * bytes, and no 16-bit operand copy); the CPU, whose BLAS multiplies fp32, keeps it
 * in fp32 there. */
void tr_cpu_mlp_backward(float *dinp, float *dw_fc, float *db_fc, float *dw_proj, float *db_proj,
                         const float *dout, const void *inp, const void *pre, const void *hid,
                         const float *w_fc, const float *w_proj, int B, int IN, int HID,
                         int format, float *scratch);

/* ---- residual add: out = a + b, elementwise over n ---------------------------------
 * The residual stream: out and a stored in `format` (lowp_math.h: 16-bit values where
 * it is bf16 or fp16), b (a projection's fp32 output) read as values of `format`, out
 * rounded to it. out may alias a, or b where format is fp32. No backward kernel:
 * d a = d b = dout, and on the residual stream the gradient accumulates, so the
 * caller adds into the stream's gradient (layernorm_backward's accumulate) or passes
 * the same buffer on instead of calling a kernel.
 * narrow_stored: out [n], stored in `format`, = inp rounded to it (the embeddings'
 * fp32 sum into the stream). */
void tr_cpu_residual_forward(void *out, const void *a, const float *b, size_t n, int format);
void tr_cpu_narrow_stored(void *out, const float *inp, size_t n, int format);

/* ---- dropout, elementwise over n: out = inp times the mask's factor -----------------
 * out[i] = inp[i] tr_dropout_factor(d, d->base + i) (dropout_math.h: 0 or 1 / (1 - p)),
 * fp32, out may be inp. The model drops the embeddings' sum and each projection's
 * output before the residual add, and calls it again on their gradients in backward. */
void tr_cpu_dropout(float *out, const float *inp, size_t n, const tr_dropout *d);

/* ---- causal multi-head self-attention core ----------------------------------------
 * qkv [B,T,3C]: q, k, v concatenated on the last dim, each split into NH heads of HS,
 * stored in `format` (lowp_math.h: 16-bit values in bf16/fp16; c_attn's output,
 * linear_forward_stored_io); backward's dout [B,T,C] is stored in `format` too
 * (c_proj's input gradient: linear_backward_stored_dinp).
 * out [B,T,C] = per head softmax(q k^T / sqrt(HS), causal) v, heads concatenated,
 * rounded to `format` and stored in it (lowp_math.h: 16-bit values in bf16/fp16; its
 * reader, c_proj, takes it through the linear layers' _stored entries above).
 * att [B,NH,T,2] holds what backward needs and belongs to the backend: here each
 * row's max scaled score and 1 / (sum of its exponentials), fp32, from which backward
 * forms the probabilities again, the same bits forward used (cpu_attention.c works in
 * blocks of query rows, flash attention's way); the GPU keeps each row's log-sum-exp
 * there instead (src/cuda/cuda_attention.cu).
 * Backward: dqkv [B,T,3C] (=), rounded to `format` and stored in it (as qkv; its
 * reader is linear_backward_stored_dout); out is forward's output (unused here); datt
 * is scratch the caller provides, of as many floats as att (contents on return
 * unspecified; the CPU's needs none).
 * Dropout (drop on, dropout_math.h): out = per head (A * M) v, with A the probabilities
 * (what att's state gives back) and M the mask's factors, tr_dropout_att_factor; backward draws M
 * again: dA = M * (dO v^T) before the softmax's backward, dV = (A * M)^T dO. NULL: none.
 * C % NH must be 0. */
size_t tr_cpu_attention_state_floats(int B, int T, int NH); /* B*NH*T*2 */
void tr_cpu_attention_forward(void *out, float *att, const void *qkv, int B, int T, int C,
                              int NH, int format, const tr_dropout *drop);
void tr_cpu_attention_backward(void *dqkv, float *datt, const void *dout, const void *out,
                               const void *qkv, const float *att, int B, int T, int C, int NH,
                               int format, const tr_dropout *drop);
/* The last row of attention_forward's output alone (sampling with a key-value cache):
 * out [C] for qkv [T,3C] of one sequence, both stored in format; scratch NH*T floats.
 * The same float operations as that row of the forward (its score and output products
 * are the same BLAS calls on one row). */
void tr_cpu_attention_decode(void *out, float *scratch, const void *qkv, int T, int C, int NH,
                             int format);

/* ---- a language model's logits ------------------------------------------------------
 * The CPU keeps them as fp32 floats (logits_format returns TR_PREC_FP32: the fp32
 * product, which its readers round on read), and its lm_head_forward and
 * xent_linear_backward take no other form; the readers below take either (lfmt:
 * TR_PREC_FP32, or format for logits stored in its 16-bit width, as a GPU keeps
 * them) and read the same values from both. lm_head_forward: logits [BT,Vl] = inp
 * [BT,C] (stored in format) w^T, as linear_forward_stored without a bias. */
int tr_cpu_logits_format(int format, int C, int Vl);
void tr_cpu_lm_head_forward(void *logits, const void *inp, const float *w, size_t BT, int C,
                            int Vl, int format, int lfmt, float *scratch);

/* ---- softmax cross-entropy over a padded vocabulary -------------------------------
 * logits [B*T,Vp] (stored in lfmt), read as values of `format`: only columns [0, V)
 * are real; padded columns never touch the loss and get gradient 0. targets [B*T] in
 * [0, V) (checked).
 * losses [B*T] = -log softmax(logits[row, 0..V))[target]. Returns the sum of losses,
 * added serially in row order (in double). The softmax itself is not stored: stats
 * [B*T,2] keeps each row's max m and 1 / (sum of exp(x - m)) (a float), from which
 * backward recomputes it with the same two float operations, exp(x - m) (1 / sum),
 * so the probabilities are the bits the forward pass had.
 * Backward: dlogits [B*T,Vp] (=, stored in lfmt) = scale (softmax - onehot(target))
 * on real columns, rounded to `format`, 0 on padded ones; dlogits may be logits (in
 * place). scale is typically 1 / (B*T). */
double tr_cpu_xent_padded_forward(float *stats, float *losses, const void *logits,
                                  const int *targets, int B, int T, int V, int Vp,
                                  int format, int lfmt);
void tr_cpu_xent_padded_backward(void *dlogits, const void *logits, const float *stats,
                                 const int *targets, float scale, int B, int T, int V, int Vp,
                                 int format, int lfmt);

/* ---- the vocabulary split over tensor-parallel ranks (cpu_vocab_parallel.c) --------
 * This rank holds vocabulary rows [v0, v0 + Vl); the first nreal of them are real.
 * Embedding: out [B,T,C] = wte[tok - v0] for the tokens held (zero rows for the
 * others) + wpe[t] when wpe is not NULL; the sum over the ranks is the lookup.
 * Backward accumulates into the held rows of dwte, and into dwpe when not NULL.
 * Cross-entropy over logits [BT,Vl] (stored in lfmt, read as values of `format`) in
 * four steps, the caller reducing over the ranks in between: shard_max -> rowmax [BT] (take the MAX
 * over ranks); shard_sums -> sums [BT,2] = (sum of exp(logits - rowmax) over the held
 * real columns, target logit - rowmax or 0 where another rank holds the target)
 * (take the SUM over ranks); shard_finish -> stats [BT,2] (as above: rowmax and
 * 1 / sum) and losses [BT], returns their sum in row order; shard_backward ->
 * dlogits (=), as xent_padded_backward on the held columns (v0 0 and nreal V, Vl Vp:
 * the whole padded vocabulary). */
void tr_cpu_embedding_shard_forward(float *out, const int *tok, const float *wte,
                                    const float *wpe, int B, int T, int C, int v0, int Vl);
void tr_cpu_embedding_shard_backward(float *dwte, float *dwpe, const float *dout,
                                     const int *tok, int B, int T, int C, int v0, int Vl);
void tr_cpu_xent_shard_max(float *rowmax, const void *logits, size_t BT, int Vl, int nreal,
                           int format, int lfmt);
void tr_cpu_xent_shard_sums(double *sums, const void *logits, const float *rowmax,
                            const int *targets, size_t BT, int Vl, int v0, int nreal,
                            int format, int lfmt);
double tr_cpu_xent_shard_finish(float *stats, float *losses, const double *sums,
                                const float *rowmax, size_t BT);
void tr_cpu_xent_shard_backward(void *dlogits, const void *logits, const float *stats,
                                const int *targets, float scale, size_t BT, int Vl, int v0,
                                int nreal, int format, int lfmt);

/* ---- the LM head's backward: the cross-entropy's, then the tied linear layer's ------
 * Exactly tr_cpu_xent_shard_backward(logits, logits, stats, ...) (in place) and
 * tr_cpu_linear_backward_stored(dinp, dw, NULL, logits, inp, w, BT, C, Vl, format)
 * (inp, ln_f's output, stored in format; dinp required): one entry so
 * that a GPU can make the 16-bit copies of dlogits its products take straight from
 * the logits, without writing (and reading back) dlogits, 3.3 GB at GPT-2's 16 x
 * 1024, or, where it keeps the logits in 16 bits, write dlogits over them and
 * multiply them as they are. The logits' contents afterwards are unspecified. The
 * CPU's logits are fp32 (lfmt TR_PREC_FP32). */
void tr_cpu_xent_linear_backward(float *dinp, float *dw, void *logits, const float *stats,
                                 const int *targets, float scale, size_t BT, int Vl, int v0,
                                 int nreal, const void *inp, const float *w, int C, int format,
                                 int lfmt);

#endif
