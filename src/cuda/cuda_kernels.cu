/* cuda_kernels.cu: the CUDA kernel table. Every entry points at a kernel of this
 * directory (cuda_ops.h): the classifier's (MLP/CNN), the GPT's and the optimizers';
 * none is NULL. Members are in the order tr_kernels declares them, as C++
 * designated initialisers require. */
#include "cuda/cuda_backend.h"
#include "cuda/cuda_ops.h"

#include <stddef.h>

extern "C" const tr_kernels tr_cuda_kernels = {
    .name = "cuda",
    .gemm = tr_cuda_gemm,
    .linear_forward = tr_cuda_linear_forward,
    .linear_backward = tr_cuda_linear_backward,
    .relu_forward = tr_cuda_relu_forward,
    .relu_backward = tr_cuda_relu_backward,
    .conv_scratch_floats = tr_cuda_conv_scratch_floats,
    .conv2d_forward = tr_cuda_conv2d_forward,
    .conv2d_backward = tr_cuda_conv2d_backward,
    .maxpool_forward = tr_cuda_maxpool_forward,
    .maxpool_backward = tr_cuda_maxpool_backward,
    .softmax_xent_forward = tr_cuda_softmax_xent_forward,
    .softmax_xent_backward = tr_cuda_softmax_xent_backward,
    .sgd_update = tr_cuda_sgd_update,
    .adamw_update = tr_cuda_adamw_update,
    .sum_squares = tr_cuda_sum_squares,
    .scale = tr_cuda_scale,
    .round_lowp = tr_cuda_round_lowp,
    .set_gemm_precision = tr_cuda_set_gemm_precision,
    .embedding_forward = tr_cuda_embedding_forward,
    .embedding_backward = tr_cuda_embedding_backward,
    .layernorm_forward = tr_cuda_layernorm_forward,
    .layernorm_backward = tr_cuda_layernorm_backward,
    .gelu_forward = tr_cuda_gelu_forward,
    .gelu_backward = tr_cuda_gelu_backward,
    .linear_gelu_forward = tr_cuda_linear_gelu_forward,
    .linear_forward_stored = tr_cuda_linear_forward_stored,
    .linear_forward_stored_io = tr_cuda_linear_forward_stored_io,
    .linear_backward_stored = tr_cuda_linear_backward_stored,
    .linear_backward_stored_dout = tr_cuda_linear_backward_stored_dout,
    .linear_backward_stored_dinp = tr_cuda_linear_backward_stored_dinp,
    .mlp_backward = tr_cuda_mlp_backward,
    .residual_forward = tr_cuda_residual_forward,
    .narrow_stored = tr_cuda_narrow_stored,
    .attention_state_floats = tr_cuda_attention_state_floats,
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
    .xent_linear_backward = tr_cuda_xent_linear_backward,
    .rows_argmax = tr_cuda_rows_argmax,
};
