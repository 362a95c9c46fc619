/* model.h: a compiled-in model: a stack of layers over flat parameter memory.
 *
 * Flat memory: every parameter tensor of the rank is a view at an offset in one
 * buffer (params), and likewise in grads and in each optimizer state buffer, so
 * gradient buckets, clipping, the optimizer and checkpoints are loops over offsets.
 * Tensors are laid out in forward order; backward therefore finishes gradients
 * from the top of the buffer down, which is what the bucketed all-reduce uses.
 *
 * Ownership: the model owns every buffer (parameters, gradients, activations,
 * saved indices, scratch); layers hold views. Everything is allocated once, in
 * tr_model_allocate, for the largest batch the run will use. */
#ifndef TR_MODEL_H
#define TR_MODEL_H

#include "backend/device.h"
#include "backend/kernels.h"
#include "comm/comm.h"
#include "core/deck.h"
#include "nn/layer.h"

#include <stdint.h>

/* a GPT has 6 parameter groups per block and 4 more (the two embeddings, ln_f, the head's
 * copy of wte): 6 x 128 blocks (gpt.h: TR_GPT_MAX_LAYERS) + 4 (gpt.c asserts it) */
#define TR_MODEL_MAX_LAYERS 772
#define TR_MODEL_MAX_TENSORS (TR_MODEL_MAX_LAYERS * TR_LAYER_MAX_PARAMS)

typedef struct tr_model tr_model;

/* Where a rank sits in a tensor x pipeline layout, and how it keeps activations; the
 * model's code is the same for every layout, its builder takes its share. All zero
 * (or NULL) is one rank holding the whole model. Models that cannot split (mlp, cnn)
 * ignore it; the trainer refuses tp/pp for them. */
typedef struct tr_model_layout {
    int tp, tp_rank;    /* tensor-parallel ranks and this rank's index */
    int pp, pp_rank;    /* pipeline stages and this rank's stage */
    tr_group *tp_group; /* the tensor-parallel collectives (tp > 1) */
    int slots;          /* micro-batches whose activations a stage keeps at once */
    int recompute;      /* 1: keep only block inputs, recompute blocks in backward */
    int sequence_parallel; /* 1 (with tp > 1): the tp ranks split the residual stream's
                            * rows between the tensor-parallel products (gpt.c) */
    int cost_split;     /* 1: blocks split over the stages by cost, whatever the deck's
                         * [parallel] stage_blocks (--layouts' other stage counts) */
    const int *split;   /* blocks of each of the pp stages, whatever the deck says (the
                         * planner trying splits); NULL: the deck's, or by cost */
} tr_model_layout;

/* Bytes of a model's buffers by purpose (the memory plan). */
typedef struct tr_model_memory {
    size_t parameters, gradients, activations, scratch;
    /* of the activations: a language model's logits (its largest activation), 0 for
     * the others, and how the backend stores them (a tr_precision: kernels.h,
     * logits_format) */
    size_t logits;
    int logits_format;
} tr_model_memory;

/* A fully connected product of a model, for the memory plan's estimate of OpenBLAS's
 * packing buffers (train_memory.c): `rows` rows a sample (a GPT's tokens, 1 for a
 * classifier's layers) of `in` features to `out`, run forward and backward. */
typedef struct tr_linear_shape {
    int rows, in, out;
} tr_linear_shape;

/* Called after each layer's backward with the lowest flat offset whose gradient is
 * now complete for this micro-batch (every offset >= lo is done). */
typedef void (*tr_grads_ready_fn)(void *ctx, size_t lo);

/* Models that are not a plain chain of layers (the GPT: a residual stream, tied
 * embeddings, token inputs) keep their parameters in layers as usual, so the flat
 * buffers, initialisation, optimizer and checkpoints treat them like any model,
 * and bring their own computation through these hooks. */
typedef struct tr_model_hooks {
    /* Activations and scratch for batches up to max_batch into m->impl; with
     * alloc = 0 only adds up the bytes in mem (the memory plan). */
    void (*buffers)(tr_model *m, int max_batch, int alloc, tr_model_memory *mem);
    double (*forward)(tr_model *m, const void *x, const int32_t *y, int B, long *correct);
    void (*backward)(tr_model *m, const void *x, const int32_t *y, int B, float loss_scale,
                     tr_grads_ready_fn ready, void *ctx);
    double (*train_flops)(const tr_model *m); /* per sample, as tr_model_train_flops */
    void (*free)(tr_model *m);                /* buffers and impl */
    /* this rank's fully connected products (tr_model_linear_shapes) */
    int (*linear_shapes)(const tr_model *m, tr_linear_shape *s, int max);
} tr_model_hooks;

struct tr_model {
    const char *name;
    tr_shape input;
    int classes;
    int nlayers;
    tr_layer layers[TR_MODEL_MAX_LAYERS];

    int ntensors;
    tr_param *tensors[TR_MODEL_MAX_TENSORS]; /* forward order */
    size_t nparams;                         /* total floats, padding included */
    size_t nparams_logical;                 /* the model's parameter count: no padding */
    float *params, *grads;

    int max_batch;
    float *acts[TR_MODEL_MAX_LAYERS]; /* acts[i]: output of layer i, [max_batch, out] */
    float *dact[2];                   /* ping-pong activation gradients */
    float *probs, *losses;            /* [max_batch, classes], [max_batch] */
    /* Every buffer above lives in dev's memory, and k is dev's kernel table. Inputs
     * arrive in host memory; a device whose memory is not the host's gets them
     * uploaded into in_x / in_y (the classifier's; the GPT keeps its own per slot). */
    const tr_device *dev;
    const tr_kernels *k;
    void *in_x;
    int32_t *in_y;
    /* Mixed precision: the format (tr_precision, lowp_math.h) activations and their
     * gradients are stored in; 0 = fp32. The math stays fp32: each kernel's output is
     * rounded to it where it is stored, as a 16-bit tensor would hold it; the GPT's
     * MLP activations take the format's width (transformer_kernels.h). Set by
     * tr_model_build from train.precision, before the buffers are laid out. */
    int precision;

    /* Inputs: images (float [B, c*h*w]) or tokens (int32 [B, seq_len]); a sample
     * has targets_per_sample labels (1 for a classifier, seq_len for a language
     * model), so the loss is a mean over B * targets_per_sample. */
    int input_tokens;
    int targets_per_sample;
    const tr_model_hooks *hooks; /* NULL: a chain of layers */
    int split; /* the builder set each tensor's gindex and shard (tp/pp layouts) */
    void *impl;                  /* the hooks' state */
};

typedef struct tr_model_def {
    const char *name;
    const char *summary;
    /* Adds the layers for the deck's settings; returns 0 or TR_EXIT_USAGE with err. */
    int (*build)(tr_model *m, const tr_deck *d, tr_shape input, const tr_model_layout *layout,
                 char *err, size_t errlen);
} tr_model_def;

/* The compiled-in models, NULL-terminated (trainer --list-models). */
extern const tr_model_def *const tr_models[];
const tr_model_def *tr_model_find(const char *name);

/* Adds a layer; the model's builders use it. Fatal when the model is full. */
void tr_model_add(tr_model *m, tr_layer layer);

/* Builds the named model for inputs of the given shape. No allocation yet. */
int tr_model_build(tr_model *m, const char *name, const tr_deck *d, tr_shape input,
                   const tr_model_layout *layout, char *err, size_t errlen);
/* Bytes tr_model_allocate would take, by purpose. */
/* Bytes for one buffer of m's device: adds what the device reserves for it to *sum
 * and allocates when alloc is set (NULL when not), so a plan and an allocation are
 * one walk and cannot drift apart. */
void *tr_model_buffer(const tr_model *m, int alloc, size_t bytes, const char *what, size_t *sum);
/* The plan for dev (its kernels size their scratch). */
tr_model_memory tr_model_plan(tr_model *m, const tr_device *dev, int max_batch);
/* Lays out the flat buffers and allocates everything for batches up to max_batch in
 * dev's memory (reserved beforehand: device.h). */
void tr_model_allocate(tr_model *m, const tr_device *dev, int max_batch);
/* Inputs of n bytes at host address x, where m's kernels can read them: x itself on
 * a device with host memory, else a copy in dst (device memory). */
const void *tr_model_upload(const tr_model *m, void *dst, const void *x, size_t n);
/* The logical element index of p's local element j (shards map through their
 * blocks), or -1 for padding. */
long tr_param_global_index(const tr_param *p, size_t j);
/* Counter-based initialisation: tensor i's element j depends only on (seed, i, j).
 * replicas: the ranks that hold the same parameters as this one (its data-parallel
 * group), each of which draws a share and all-gathers the rest, collectively; NULL
 * draws them all here. */
void tr_model_init_params(tr_model *m, uint64_t seed, tr_group *replicas);
void tr_model_free(tr_model *m);

/* Forward of B samples x (see input_tokens) to logits; loss and accuracy through the
 * softmax cross-entropy: returns the sum of losses and counts correct predictions. */
double tr_model_forward(tr_model *m, const void *x, const int32_t *y, int B, long *correct);
/* Backward of the last forward. loss_scale multiplies dL/dlogits (1 / global batch
 * for a mean over the global batch). Gradients accumulate into m->grads. */
void tr_model_backward(tr_model *m, const void *x, const int32_t *y, int B, float loss_scale,
                       tr_grads_ready_fn ready, void *ctx);

/* x, n floats of an activation or activation gradient just computed, as the model's
 * storage format holds it (nothing at fp32). */
static inline void tr_model_round(const tr_model *m, float *x, size_t n)
{
    if (m->precision)
        m->k->round_lowp(x, n, m->precision);
}

/* Floating-point operations of one forward pass of one sample (multiply-add = 2). */
double tr_model_forward_flops(const tr_model *m);
/* Of one training step per sample: forward, weight gradients, and input gradients
 * of every layer but the first (whose input gradient is never computed). */
double tr_model_train_flops(const tr_model *m);
/* This rank's fully connected products into s, at most max (TR_MODEL_MAX_LAYERS holds
 * any model's); returns how many. */
int tr_model_linear_shapes(const tr_model *m, tr_linear_shape *s, int max);

#endif
