/* cuda_kernels.cu: the CUDA kernel table. Every entry the GPT and the optimizers
 * use points at a kernel of this directory (cuda_ops.h); the classifier's kernels
 * (MLP/CNN) are NULL until they are ported, listed as such so that the gaps are
 * visible here and in cuda_backend.h. Members are in the order tr_kernels declares
 * them, as C++ designated initialisers require. */
#include "cuda/cuda_backend.h"
#include "cuda/cuda_ops.h"

#include <stddef.h>

extern "C" const tr_kernels tr_cuda_kernels = {
    .name = "cuda",
    .gemm = tr_cuda_gemm,
    .linear_forward = tr_cuda_linear_forward,
    .linear_backward = tr_cuda_linear_backward,
    .relu_forward = NULL,
    .relu_backward = NULL,
    .conv_scratch_floats = NULL,
    .conv2d_forward = NULL,
    .conv2d_backward = NULL,
    .maxpool_forward = NULL,
    .maxpool_backward = NULL,
    .softmax_xent_forward = NULL,
    .softmax_xent_backward = NULL,
    .sgd_update = tr_cuda_sgd_update,
    .adamw_update = tr_cuda_adamw_update,
    .sum_squares = tr_cuda_sum_squares,
    .scale = tr_cuda_scale,
    .round_lowp = tr_cuda_round_lowp,
    .embedding_forward = tr_cuda_embedding_forward,
    .embedding_backward = tr_cuda_embedding_backward,
    .layernorm_forward = tr_cuda_layernorm_forward,
    .layernorm_backward = tr_cuda_layernorm_backward,
    .gelu_forward = tr_cuda_gelu_forward,
    .gelu_backward = tr_cuda_gelu_backward,
    .residual_forward = tr_cuda_residual_forward,
    .attention_forward = tr_cuda_attention_forward,
    .attention_backward = tr_cuda_attention_backward,
    .xent_padded_forward = tr_cuda_xent_padded_forward,
    .xent_padded_backward = tr_cuda_xent_padded_backward,
    .embedding_shard_forward = tr_cuda_embedding_shard_forward,
    .embedding_shard_backward = tr_cuda_embedding_shard_backward,
    .xent_shard_max = tr_cuda_xent_shard_max,
    .xent_shard_sums = tr_cuda_xent_shard_sums,
    .xent_shard_finish = tr_cuda_xent_shard_finish,
    .xent_shard_backward = tr_cuda_xent_shard_backward,
};
