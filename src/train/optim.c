/* optim.c: SGD with momentum and AdamW over flat buffers; warmup, then constant,
 * cosine, linear or warmup-stable-decay. */
#include "optim.h"
#include "core/error.h"

#include <math.h>
#include <string.h>

size_t tr_optim_device_bytes(const tr_deck *d, size_t n, int lowp)
{
    int buffers = 1 + !strcmp(tr_deck_str(d, "optim", "name"), "adamw") + (lowp != 0);
    return (size_t)buffers * tr_device_round(n * sizeof(float));
}

void tr_optim_init(tr_optim *o, const tr_deck *d, const tr_device *dev, size_t count, size_t lo,
                   size_t hi, long total_steps, int lowp)
{
    memset(o, 0, sizeof *o);
    o->kind = strcmp(tr_deck_str(d, "optim", "name"), "adamw") ? TR_OPT_SGD : TR_OPT_ADAMW;
    o->lr = (float)tr_deck_float(d, "optim", "lr");
    o->momentum = (float)tr_deck_float(d, "optim", "momentum");
    o->weight_decay = (float)tr_deck_float(d, "optim", "weight_decay");
    o->beta1 = tr_deck_float(d, "optim", "beta1");
    o->beta2 = tr_deck_float(d, "optim", "beta2");
    o->eps = (float)tr_deck_float(d, "optim", "eps");
    const char *sched = tr_deck_str(d, "optim", "schedule");
    o->schedule = !strcmp(sched, "cosine")   ? TR_SCHED_COSINE
                  : !strcmp(sched, "linear") ? TR_SCHED_LINEAR
                  : !strcmp(sched, "wsd")    ? TR_SCHED_WSD
                                             : TR_SCHED_CONSTANT;
    o->warmup_steps = tr_deck_int(d, "optim", "warmup_steps");
    o->decay_steps = tr_deck_int(d, "optim", "decay_steps");
    o->min_lr = (float)tr_deck_float(d, "optim", "min_lr");
    o->clip_norm = (float)tr_deck_float(d, "optim", "clip_grad_norm");
    o->total_steps = total_steps;
    o->count = count;
    o->lo = lo;
    o->hi = hi;
    size_t n = hi - lo;
    o->dev = dev;
    o->m = dev->alloc(n * sizeof(float), "optimizer state (first moment / momentum)");
    if (o->kind == TR_OPT_ADAMW)
        o->v = dev->alloc(n * sizeof(float), "optimizer state (second moment)");
    o->lowp = lowp;
    o->grad_factor = 1.0f;
    if (lowp)
        o->master = dev->alloc(n * sizeof(float), "fp32 master weights");
}

void tr_optim_take_params(tr_optim *o, tr_model *m)
{
    if (!o->master)
        return;
    o->dev->copy(o->master, m->params + o->lo, (o->hi - o->lo) * sizeof(float));
    m->k->round_lowp(m->params + o->lo, o->hi - o->lo, o->lowp);
}

void tr_optim_give_params(const tr_optim *o, tr_model *m)
{
    if (!o->master)
        return;
    o->dev->copy(m->params + o->lo, o->master, (o->hi - o->lo) * sizeof(float));
    m->k->round_lowp(m->params + o->lo, o->hi - o->lo, o->lowp);
}

void tr_optim_free(tr_optim *o)
{
    if (!o->dev)
        return;
    o->dev->free(o->m);
    o->dev->free(o->v);
    o->dev->free(o->master);
    o->m = o->v = o->master = NULL;
}

void tr_optim_reset(tr_optim *o)
{
    o->dev->zero(o->m, (o->hi - o->lo) * sizeof(float));
    if (o->v)
        o->dev->zero(o->v, (o->hi - o->lo) * sizeof(float));
}

float tr_optim_lr(const tr_optim *o, long step)
{
    if (o->warmup_steps > 0 && step < o->warmup_steps)
        return o->lr * (float)(step + 1) / (float)o->warmup_steps;
    if (o->schedule == TR_SCHED_CONSTANT)
        return o->lr;
    long span = o->total_steps - o->warmup_steps;
    if (o->schedule == TR_SCHED_WSD) {
        /* warmup-stable-decay (MiniCPM; Hägele et al. 2024, "Scaling Laws and
         * Compute-Optimal Training Beyond Fixed Training Durations"): lr until the last
         * `decay` steps, which fall to min_lr as 1 - sqrt(progress), the cooldown they
         * found best. Only the decay depends on the run's length, so a run resumed before
         * it with more steps follows the same curve and decays at its new end. */
        long decay = span < 0 ? 0 : o->decay_steps > 0 ? o->decay_steps : (span + 4) / 5;
        if (decay > span)
            decay = span > 0 ? span : 0;
        long start = o->total_steps - decay;
        if (step < start)
            return o->lr;
        double t = decay > 0 ? (double)(step - start) / (double)decay : 1.0;
        return o->min_lr + (o->lr - o->min_lr) * (float)(1.0 - sqrt(t < 1 ? t : 1));
    }
    /* reaches min_lr after the last step, as PyTorch's CosineAnnealingLR(T_max = span);
     * linear: as Hugging Face's get_linear_schedule_with_warmup after its warmup */
    double progress = span > 0 ? (double)(step - o->warmup_steps) / (double)span : 1.0;
    if (progress > 1)
        progress = 1;
    if (o->schedule == TR_SCHED_LINEAR)
        return o->min_lr + (o->lr - o->min_lr) * (float)(1.0 - progress);
    return o->min_lr + 0.5f * (o->lr - o->min_lr) * (float)(1.0 + cos(3.14159265358979323846 * progress));
}

/* The factor that unscales and clips gradients of scaled norm `scaled`; returns the
 * true norm. 1 (nothing to do) leaves the fp32 path's arithmetic as it always was. */
static double unscale_factor(const tr_optim *o, double scaled, double grad_scale, float *factor)
{
    double norm = scaled / grad_scale;
    *factor = 1.0f;
    if (!isfinite(norm))
        return norm;
    if (o->clip_norm > 0 && norm > o->clip_norm)
        *factor = (float)(o->clip_norm / (norm + 1e-6) / grad_scale);
    else if (grad_scale != 1.0)
        *factor = (float)(1.0 / grad_scale);
    return norm;
}

/* The norm is of the gradients the update reads (tr_grad_in): rounded to the format
 * under mixed precision, in the norm's pass; the factor waits for the update's. */
double tr_optim_clip(tr_optim *o, const tr_kernels *k, const float *grads, size_t count,
                     double grad_scale)
{
    double sq = k->sum_squares_spans(&grads, &count, 1, o->lowp);
    return unscale_factor(o, sqrt(sq), grad_scale, &o->grad_factor);
}

/* The part [*a, *b) of tensor p (local elements) inside the flat range [lo, hi);
 * returns 0 when there is none. */
static int overlap(const tr_param *p, size_t lo, size_t hi, size_t *a, size_t *b)
{
    size_t s = p->offset > lo ? p->offset : lo;
    size_t e = p->offset + p->numel < hi ? p->offset + p->numel : hi;
    if (s >= e)
        return 0;
    *a = s - p->offset;
    *b = e - p->offset;
    return 1;
}

double tr_optim_clip_sharded(tr_optim *o, tr_model *m, size_t lo, size_t hi, int tp_rank,
                             tr_group *world, double grad_scale)
{
    /* one span a tensor, summed in one call: a GPU waits once, not once a tensor */
    const float **x = tr_alloc((size_t)m->ntensors * sizeof *x, "gradient spans");
    size_t *n = tr_alloc((size_t)m->ntensors * sizeof *n, "gradient spans");
    int count = 0;
    for (int t = 0; t < m->ntensors; t++) {
        const tr_param *p = m->tensors[t];
        size_t a, b;
        if (p->tied_copy || (p->tp_replica && tp_rank != 0) || !overlap(p, lo, hi, &a, &b))
            continue;
        x[count] = p->grad + a;
        n[count++] = b - a;
    }
    double sq = m->k->sum_squares_spans(x, n, count, o->lowp);
    tr_free(x);
    tr_free(n);
    tr_allreduce(&sq, &sq, 1, TR_F64, TR_SUM, world);
    return unscale_factor(o, sqrt(sq), grad_scale, &o->grad_factor);
}

void tr_optim_step(tr_optim *o, tr_model *m, long step, float lr)
{
    /* AdamW reads the gradients rounded and times the factor in its own pass; SGD (not
     * the large models' optimizer) takes them rounded and scaled by passes first */
    if (o->kind == TR_OPT_SGD && o->lowp)
        m->k->round_lowp(m->grads + o->lo, o->hi - o->lo, o->lowp);
    if (o->kind == TR_OPT_SGD && o->grad_factor != 1.0f)
        m->k->scale(m->grads + o->lo, o->hi - o->lo, o->grad_factor);
    /* AdamW: every tensor's part in one call (a GPU's few launches, not one a tensor) */
    tr_adamw_span *spans = o->kind == TR_OPT_SGD
                               ? NULL
                               : tr_alloc((size_t)m->ntensors * sizeof *spans, "adamw spans");
    int count = 0;
    for (int t = 0; t < m->ntensors; t++) {
        tr_param *p = m->tensors[t];
        size_t a, b;
        if (!overlap(p, o->lo, o->hi, &a, &b))
            continue;
        size_t off = p->offset + a - o->lo, n = b - a;
        float *w = o->master ? o->master + off : p->value + a;
        /* mixed precision: the parameters follow the master, rounded, in the same pass */
        float *lowp = o->master ? p->value + a : NULL;
        if (o->kind == TR_OPT_SGD) {
            m->k->sgd_update(w, o->m + off, p->grad + a, n, lr, o->momentum, o->weight_decay,
                             lowp, o->lowp);
        } else {
            /* decoupled decay on weight matrices only, not on biases */
            spans[count++] = (tr_adamw_span){w, o->m + off, o->v + off, p->grad + a, lowp, n,
                                             p->decay ? o->weight_decay : 0.0f};
        }
    }
    if (spans) {
        m->k->adamw_update_spans(spans, count, lr, o->beta1, o->beta2, o->eps, step + 1, o->lowp,
                                 o->lowp, o->grad_factor);
        tr_free(spans);
    }
    o->grad_factor = 1.0f; /* the next step's, until its norm says otherwise */
}
