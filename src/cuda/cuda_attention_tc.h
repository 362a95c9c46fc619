/* cuda_attention_tc.h: the tensor-core forms of the fused attention kernels, which
 * cuda_attention.cu calls in 16-bit mixed runs: WMMA (cuda_attention_tc.cu) and
 * mma.sync with register-resident softmax (cuda_attention_mma.cu), both bf16 and
 * fp16. Same tensors as tr_cuda_attention_forward/backward; lse [B,NH,T] the rows'
 * log-sum-exps, dvec [B,NH,T] backward's rowsum(dO * O), both computed by the
 * caller's conventions; qkv, dout, out and dqkv stored in `format` (a tr_precision,
 * lowp_math.h: 16 bits a value), out and dqkv rounded to it as they are stored; drop
 * the dropout of the probabilities (off: threshold 0), as tr_cuda_attention_forward's. */
#ifndef TR_CUDA_ATTENTION_TC_H
#define TR_CUDA_ATTENTION_TC_H

#include "backend/dropout_math.h" /* tr_dropout */

/* nonzero where the kernels take this head size (n_embd / n_head) */
int tr_cuda_attention_tc_fits(int HS);
void tr_cuda_attention_tc_forward(void *out, float *lse, const void *qkv, int B, int T, int C,
                                  int NH, int HS, float scale, int format,
                                  const tr_dropout &drop);
void tr_cuda_attention_tc_backward(void *dqkv, const void *dout, const void *qkv,
                                   const float *lse, const float *dvec, int B, int T, int C,
                                   int NH, int HS, float scale, int format,
                                   const tr_dropout &drop);

/* The mma.sync form: head sizes up to 64 (GPT-2's at every size), bf16- and
 * fp16-mixed (qkv, dout, out and dqkv stored in `format`). It has passed the
 * CPU test suite's emulation (test_attention_mma_emu) but has not yet run on a GPU, so
 * it is taken only where chosen: TRAINER_CUDA_ATTENTION=mma in the environment, or
 * tr_cuda_set_attention_kernel (cuda_backend.h). */
int tr_cuda_attention_mma_fits(int HS);
int tr_cuda_attention_mma_chosen(void);
void tr_cuda_attention_mma_forward(void *out, float *lse, const void *qkv, int B, int T, int C,
                                   int NH, int HS, float scale, int format,
                                   const tr_dropout &drop);
void tr_cuda_attention_mma_backward(void *dqkv, const void *dout, const void *qkv,
                                    const float *lse, const float *dvec, int B, int T, int C,
                                    int NH, int HS, float scale, int format,
                                    const tr_dropout &drop);

#endif
