/* optim.h: optimizers over the model's flat buffers, learning-rate schedules,
 * and gradient clipping by global norm. */
#ifndef TR_OPTIM_H
#define TR_OPTIM_H

#include "core/deck.h"
#include "models/model.h"

typedef enum { TR_OPT_SGD = 0, TR_OPT_ADAMW = 1 } tr_opt_kind;
typedef enum {
    TR_SCHED_CONSTANT = 0,
    TR_SCHED_COSINE = 1,
    TR_SCHED_LINEAR = 2,
    TR_SCHED_WSD = 3
} tr_sched_kind;

typedef struct tr_optim {
    tr_opt_kind kind;
    float lr, momentum, weight_decay, eps;
    double beta1, beta2; /* double: see tr_adamw_make_consts */
    tr_sched_kind schedule;
    long warmup_steps, total_steps;
    long decay_steps; /* wsd: the final steps of the decay; 0: a fifth of those after warmup */
    float min_lr;
    float clip_norm; /* 0: off */
    /* state, flat like the parameters: sgd uses m (momentum buffer), adamw m and v.
     * Under ZeRO a rank holds the state of its slice [lo, hi) of the flat buffer
     * only: m[i - lo] belongs to flat element i. Without ZeRO lo = 0, hi = count. */
    float *m, *v;
    size_t count;
    size_t lo, hi;
    /* Mixed precision (lowp: a tr_precision of lowp_math.h, 0 = fp32): the fp32
     * master weights of [lo, hi), which the updates change; the model's parameters
     * are their rounding to lowp. NULL at fp32, where the parameters are the master. */
    int lowp;
    float *master;
    /* what the next update multiplies the gradients by (unscaling and clipping:
     * tr_optim_clip's), 1 where nothing is to be done; back to 1 after each update */
    float grad_factor;
    const tr_device *dev; /* where the state lives: the model's device */
} tr_optim;

/* State for the flat range [lo, hi) of count parameters (all of them: 0, count);
 * lowp != 0 adds fp32 master weights. */
void tr_optim_init(tr_optim *o, const tr_deck *d, const tr_device *dev, size_t count, size_t lo,
                   size_t hi, long total_steps, int lowp);
/* Device bytes tr_optim_init reserves for a slice of n elements. */
size_t tr_optim_device_bytes(const tr_deck *d, size_t n, int lowp);
/* Mixed precision: the master weights take the model's fp32 parameters of [lo, hi)
 * (after initialisation or a checkpoint's load), and the parameters become their
 * rounding to lowp (this rank's slice; under ZeRO all-gather the rest). Nothing at
 * fp32. */
void tr_optim_take_params(tr_optim *o, tr_model *m);
/* The other way: the parameters of [lo, hi) become the master weights' rounding
 * (after an update, or a checkpoint's load into the master weights). */
void tr_optim_give_params(const tr_optim *o, tr_model *m);
void tr_optim_free(tr_optim *o);
/* Zeroes the state, as before the first step. */
void tr_optim_reset(tr_optim *o);
/* The learning rate at 0-based step. */
float tr_optim_lr(const tr_optim *o, long step);
/* grads hold grad_scale times the gradients (the loss scale; 1 without), in fp32
 * under mixed precision too (summed over micro-batches and ranks): returns the norm of
 * the gradients before clipping, as the update reads them (rounded to lowp), and sets
 * grad_factor, which the next tr_optim_step applies as it reads them: 1 / grad_scale,
 * times the clipping factor when clipping is on. A norm that is not finite leaves
 * the factor at 1 (the step is skipped or its loss shows it). The gradients in memory
 * are left as they are. */
double tr_optim_clip(tr_optim *o, const tr_kernels *k, const float *grads, size_t count,
                     double grad_scale);
/* The gradient norm of the logical model when ranks hold parts of it: this rank adds
 * the squares of its flat range [lo, hi) of each tensor it answers for (tensors
 * replicated over tp on tp rank 0 only, the head's tied copy never), summed over
 * world (each rounded to lowp, as tr_optim_clip). Sets grad_factor as tr_optim_clip
 * does, for the optimizer's slice [o->lo, o->hi). */
double tr_optim_clip_sharded(tr_optim *o, tr_model *m, size_t lo, size_t hi, int tp_rank,
                             tr_group *world, double grad_scale);
/* One update of every tensor (its part in [o->lo, o->hi)) at 0-based step (updates
 * done before this one: AdamW's bias correction) with learning rate lr. Mixed
 * precision updates the master weights and rounds them into the parameters. The
 * gradients are taken rounded to lowp and times grad_factor: mixed precision stores
 * the step's gradients, accumulated in fp32 over micro-batches and summed in fp32
 * over the data-parallel group, in its format once the sum is complete (also at dp 1),
 * as one rank rounds the whole batch's, so whether an fp16 gradient overflows does
 * not depend on the layout (rounding each rank's share before the sum would, and the
 * pipeline's two tied-embedding copies overflow where their sum does not). */
void tr_optim_step(tr_optim *o, tr_model *m, long step, float lr);

#endif
