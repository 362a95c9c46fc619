/* layer.h: a layer is a small struct behind a table of forward/backward functions.
 *
 * Ownership: the model owns every buffer (parameters, gradients, activations,
 * saved indices, scratch); a layer only holds views into them, set by the model
 * after it has summed up what every layer asked for. Layers never allocate.
 *
 * A layer sees per-sample shapes (tr_shape); the batch size B is given per call
 * and may be any value up to the model's maximum (micro-batches, eval batches). */
#ifndef TR_LAYER_H
#define TR_LAYER_H

#include "backend/kernels.h"
#include <stddef.h>

typedef struct tr_shape {
    int c, h, w;
} tr_shape;

static inline size_t tr_shape_numel(tr_shape s) { return (size_t)s.c * s.h * s.w; }

/* How tr_model_init_params fills a tensor (see tr_param.init). */
enum {
    TR_INIT_ZEROS = 0,
    TR_INIT_FANIN_UNIFORM = 1, /* PyTorch's Linear/Conv default: U(-1/sqrt(fan_in), +) */
    TR_INIT_ONES = 2,          /* LayerNorm gains */
    TR_INIT_NORMAL = 3,        /* N(0, init_std^2): GPT-2's initialisation */
};

#define TR_MAX_DIMS 4
#define TR_LAYER_MAX_PARAMS 2

/* A rectangle of a logical tensor viewed as a matrix [dims[0], rest] (a 1-D tensor
 * is [n, 1]): rows [row0, row0 + rows) x columns [col0, col0 + cols). */
typedef struct tr_shard_block {
    long row0, col0, rows, cols;
} tr_shard_block;

#define TR_SHARD_MAX_BLOCKS 3

/* One parameter tensor: its logical shape and its views in the flat buffers. */
typedef struct tr_param {
    char name[32]; /* "weight", "bias" */
    int ndim;
    int dims[TR_MAX_DIMS]; /* the logical shape: what checkpoints store */
    /* Floats reserved in the flat buffers: the product of dims, or more when a tensor
     * is padded for speed (the GPT's vocabulary rows); padding is zero and stays
     * zero (it never gets a gradient), so checkpoints leave it out. */
    size_t numel;
    int init; /* TR_INIT_* */
    int fan_in;
    float init_std; /* TR_INIT_NORMAL */
    int decay;  /* 1 when weight decay applies (weight matrices, not biases) */
    /* Tensor and pipeline parallelism: which part of the logical tensor this rank
     * holds. nblocks = 0: all of it, in row-major order. Otherwise the local data is
     * the blocks one after another, each row-major (a column-parallel QKV holds three
     * bands of rows, a row-parallel projection one band of columns); local elements
     * after the blocks are padding. */
    int nblocks;
    tr_shard_block block[TR_SHARD_MAX_BLOCKS];
    int tp_replica; /* every tensor-parallel rank holds the same values (LayerNorms) */
    int tied_copy;  /* a copy of a tensor another pipeline stage owns (the head's wte) */
    int gindex;     /* index in the whole model's tensor order (the init stream); set
                       by models that split (tr_model.split), else the local order */
    size_t offset; /* in the flat buffers, set by the model */
    float *value;  /* views set by the model */
    float *grad;
} tr_param;

typedef struct tr_layer tr_layer;

typedef struct tr_layer_ops {
    const char *kind;
    /* out[B, out] from in[B, in] */
    void (*forward)(tr_layer *l, const tr_kernels *k, float *out, const float *in, int B);
    /* din[B, in] (NULL for the first layer: not needed) from dout[B, out];
     * parameter gradients accumulate. in and out are what forward saw and made. */
    void (*backward)(tr_layer *l, const tr_kernels *k, float *din, const float *dout,
                     const float *in, const float *out, int B);
} tr_layer_ops;

struct tr_layer {
    const tr_layer_ops *ops;
    char name[32]; /* "fc1", "conv2": the checkpoint path component */
    tr_shape in, out;
    int nparams;
    tr_param params[TR_LAYER_MAX_PARAMS];
    size_t saved_ints_per_sample; /* e.g. maxpool's argmax: set by the constructor */
    int *saved;                   /* view: [B_max * saved_ints_per_sample], set by the model */
    size_t scratch_floats;        /* for the largest batch: set by the model via scratch_for */
    float *scratch;               /* view set by the model */
    /* how much scratch the layer needs for a batch of B (NULL: none) */
    size_t (*scratch_for)(const tr_layer *l, const tr_kernels *k, int B);
    int ksize, pad; /* conv and pool */
};

tr_layer tr_linear_make(const char *name, int in_features, int out_features);
tr_layer tr_conv2d_make(const char *name, tr_shape in, int out_channels, int ksize, int pad);
tr_layer tr_maxpool_make(const char *name, tr_shape in, int ksize);
tr_layer tr_relu_make(const char *name, tr_shape in);

#endif
