/* model.c: flat parameter layout, allocation, initialisation, forward and backward
 * of a layer stack ending in softmax cross-entropy. */
#include "model.h"
#include "backend/lowp_math.h" /* tr_precision_parse */
#include "core/error.h"
#include "core/rng.h"
#include "parallel/data_parallel.h" /* tr_dp_slice */

#include <math.h>
#include <string.h>

extern const tr_model_def tr_model_mlp, tr_model_cnn, tr_model_gpt;
const tr_model_def *const tr_models[] = {&tr_model_mlp, &tr_model_cnn, &tr_model_gpt, NULL};

const tr_model_def *tr_model_find(const char *name)
{
    for (int i = 0; tr_models[i]; i++)
        if (!strcmp(tr_models[i]->name, name))
            return tr_models[i];
    return NULL;
}

void tr_model_add(tr_model *m, tr_layer layer)
{
    if (m->nlayers == TR_MODEL_MAX_LAYERS)
        tr_fatal(TR_EXIT_SOFTWARE, "bug: model %s has more than %d layers", m->name,
                 TR_MODEL_MAX_LAYERS);
    m->layers[m->nlayers++] = layer;
}

int tr_model_build(tr_model *m, const char *name, const tr_deck *d, tr_shape input,
                   const tr_model_layout *layout, char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    const tr_model_def *def = tr_model_find(name);
    if (!def) {
        snprintf(err, errlen, "unknown model '%s' (trainer --list-models)", name);
        return TR_EXIT_USAGE;
    }
    m->name = def->name;
    m->input = input;
    m->targets_per_sample = 1;
    /* known before the buffers are laid out: some are stored in the format's width */
    m->precision = tr_precision_parse(tr_deck_str(d, "train", "precision"));
    static const tr_model_layout whole = {0};
    int rc = def->build(m, d, input, layout ? layout : &whole, err, errlen);
    if (rc) {
        if (m->hooks && m->hooks->free)
            m->hooks->free(m);
        return rc;
    }
    if (m->hooks)
        return 0; /* its layers only hold parameters */
    /* the stack must chain: each layer's input is the previous layer's output */
    tr_shape cur = input;
    for (int i = 0; i < m->nlayers; i++) {
        tr_layer *l = &m->layers[i];
        if (tr_shape_numel(l->in) != tr_shape_numel(cur))
            tr_fatal(TR_EXIT_SOFTWARE, "bug: model %s layer %s expects %zu inputs, gets %zu",
                     m->name, l->name, tr_shape_numel(l->in), tr_shape_numel(cur));
        cur = l->out;
    }
    m->classes = (int)tr_shape_numel(cur);
    return 0;
}

/* One walk for both planning and allocating, so the plan cannot drift from what
 * is allocated: with alloc == 0 it only adds up the bytes. */
void *tr_model_buffer(const tr_model *m, int alloc, size_t bytes, const char *what, size_t *sum)
{
    *sum += tr_device_round(bytes);
    return alloc ? m->dev->alloc(bytes, what) : NULL;
}

const void *tr_model_upload(const tr_model *m, void *dst, const void *x, size_t n)
{
    if (m->dev->host_memory)
        return x;
    m->dev->upload(dst, x, n);
    return dst;
}

static void layout_params(tr_model *m)
{
    size_t off = 0;
    m->ntensors = 0;
    if (!m->split) /* a split model's builder counted the whole model */
        m->nparams_logical = 0;
    for (int i = 0; i < m->nlayers; i++)
        for (int p = 0; p < m->layers[i].nparams; p++) {
            tr_param *t = &m->layers[i].params[p];
            t->offset = off;
            off += t->numel;
            if (!m->split)
                t->gindex = m->ntensors;
            size_t logical = 1;
            for (int d = 0; d < t->ndim; d++)
                logical *= (size_t)t->dims[d];
            if (!m->split)
                m->nparams_logical += logical;
            m->tensors[m->ntensors++] = t;
        }
    m->nparams = off;
}

static tr_model_memory buffers(tr_model *m, int max_batch, int alloc)
{
    const tr_kernels *k = m->dev->k;
    tr_model_memory mem = {0};
    size_t B = (size_t)max_batch;
    /* 1. the flat parameter buffers, tensors in forward order */
    layout_params(m);
    m->params = tr_model_buffer(m, alloc, m->nparams * sizeof(float), "parameters", &mem.parameters);
    m->grads = tr_model_buffer(m, alloc, m->nparams * sizeof(float), "gradients", &mem.gradients);
    for (int t = 0; alloc && t < m->ntensors; t++) {
        m->tensors[t]->value = m->params + m->tensors[t]->offset;
        m->tensors[t]->grad = m->grads + m->tensors[t]->offset;
    }
    /* 2. activations, saved indices and scratch for the largest batch */
    if (m->hooks) {
        m->hooks->buffers(m, max_batch, alloc, &mem);
        return mem;
    }
    size_t widest = tr_shape_numel(m->input);
    if (!m->dev->host_memory) { /* where the host's inputs are uploaded */
        m->in_x = tr_model_buffer(m, alloc, B * widest * sizeof(float), "inputs", &mem.activations);
        m->in_y = tr_model_buffer(m, alloc, B * sizeof(int32_t), "labels", &mem.activations);
    }
    for (int i = 0; i < m->nlayers; i++) {
        tr_layer *l = &m->layers[i];
        size_t outn = tr_shape_numel(l->out);
        if (outn > widest)
            widest = outn;
        m->acts[i] = tr_model_buffer(m, alloc, B * outn * sizeof(float), "activations", &mem.activations);
        if (l->saved_ints_per_sample)
            l->saved = tr_model_buffer(m, alloc, B * l->saved_ints_per_sample * sizeof(int), "saved indices",
                              &mem.activations);
        if (l->scratch_for) {
            l->scratch_floats = l->scratch_for(l, k, max_batch);
            l->scratch =
                tr_model_buffer(m, alloc, l->scratch_floats * sizeof(float), "layer scratch", &mem.scratch);
        }
    }
    for (int j = 0; j < 2; j++)
        m->dact[j] =
            tr_model_buffer(m, alloc, B * widest * sizeof(float), "activation grads", &mem.activations);
    m->probs = tr_model_buffer(m, alloc, B * m->classes * sizeof(float), "probabilities", &mem.activations);
    m->losses = tr_model_buffer(m, alloc, B * sizeof(float), "losses", &mem.activations);
    return mem;
}

tr_model_memory tr_model_plan(tr_model *m, const tr_device *dev, int max_batch)
{
    const tr_device *had = m->dev;
    m->dev = dev;
    tr_model_memory mem = buffers(m, max_batch, 0);
    m->dev = had;
    return mem;
}

void tr_model_allocate(tr_model *m, const tr_device *dev, int max_batch)
{
    m->dev = dev;
    m->k = dev->k;
    m->max_batch = max_batch;
    buffers(m, max_batch, 1);
}

/* The logical (unsharded) element index of local element j of p, or -1 for padding. */
long tr_param_global_index(const tr_param *p, size_t j)
{
    size_t logical = 1;
    for (int d = 0; d < p->ndim; d++)
        logical *= (size_t)p->dims[d];
    if (!p->nblocks)
        return j < logical ? (long)j : -1;
    long width = p->ndim > 1 ? (long)(logical / (size_t)p->dims[0]) : 1;
    for (int b = 0; b < p->nblocks; b++) {
        const tr_shard_block *k = &p->block[b];
        size_t n = (size_t)k->rows * (size_t)k->cols;
        if (j < n)
            return (k->row0 + (long)(j / (size_t)k->cols)) * width + k->col0 +
                   (long)(j % (size_t)k->cols);
        j -= n;
    }
    return -1;
}

/* The initial values of flat elements [lo, hi) into out[0, hi - lo): each depends only
 * on (seed, tensor, logical index), so any thread or rank may draw it, and every
 * layout draws the same values for the same element. The tensors tile the flat
 * buffer in order (layout_params). */
static void draw_initial_values(const tr_model *m, uint64_t seed, size_t lo, size_t hi, float *out)
{
    for (int t = 0; t < m->ntensors; t++) {
        const tr_param *p = m->tensors[t];
        size_t a = lo > p->offset ? lo : p->offset;
        size_t b = hi < p->offset + p->numel ? hi : p->offset + p->numel;
        if (a >= b)
            continue;
        float *value = out + (a - lo);
        uint64_t stream = TR_STREAM_INIT + (uint64_t)p->gindex;
        float bound = p->init == TR_INIT_FANIN_UNIFORM ? 1.0f / sqrtf((float)p->fan_in) : 0;
        size_t j0 = a - p->offset, n = b - a;
#pragma omp parallel for schedule(static) if (n > 65536)
        for (size_t k = 0; k < n; k++) {
            long g = tr_param_global_index(p, j0 + k);
            float v = 0.0f; /* padding beyond the logical shape is zero and stays zero */
            if (g >= 0 && p->init == TR_INIT_ONES)
                v = 1.0f;
            else if (g >= 0 && p->init == TR_INIT_NORMAL)
                v = p->init_std * tr_rng_normal(seed, stream, (uint64_t)g);
            else if (g >= 0 && p->init == TR_INIT_FANIN_UNIFORM)
                /* PyTorch's default for Linear and Conv2d: U(-1/sqrt(fan_in), +) */
                v = bound * (2.0f * tr_rng_uniform(seed, stream, (uint64_t)g) - 1.0f);
            value[k] = v;
        }
    }
}

/* Host floats a device without host memory draws at a time before uploading them:
 * the staging stays small (it was the widest tensor: 322 MB at GPT-2 1558M). */
#define INIT_STAGING_FLOATS ((size_t)4 << 20)

void tr_model_init_params(tr_model *m, uint64_t seed, tr_group *replicas)
{
    /* Every rank of `replicas` holds the same flat buffer: each draws its slice (ZeRO's
     * split) where it lies, and one in-place all-gather gives every rank the rest.
     * Drawing costs some 40 ns a value a thread (GPT-2 124M: about 5 CPU-s), which
     * every rank paid for the whole model before. */
    int n = replicas ? tr_group_size(replicas) : 1, me = replicas ? tr_group_rank(replicas) : 0;
    size_t lo, hi;
    tr_dp_slice(m->nparams, n, me, &lo, &hi);
    if (m->dev->host_memory) {
        draw_initial_values(m, seed, lo, hi, m->params + lo);
    } else {
        size_t cap = hi - lo < INIT_STAGING_FLOATS ? hi - lo : INIT_STAGING_FLOATS;
        float *host = tr_alloc((cap ? cap : 1) * sizeof(float), "initial values");
        for (size_t a = lo; a < hi; a += cap) {
            size_t b = hi - a < cap ? hi : a + cap;
            draw_initial_values(m, seed, a, b, host);
            m->dev->upload(m->params + a, host, (b - a) * sizeof(float));
        }
        tr_free(host);
    }
    if (n == 1)
        return;
    size_t *parts = tr_alloc(2 * (size_t)n * sizeof *parts, "initial values' slices");
    for (int r = 0; r < n; r++) {
        size_t rlo, rhi;
        tr_dp_slice(m->nparams, n, r, &rlo, &rhi);
        parts[r] = rhi - rlo;
        parts[n + r] = rlo;
    }
    tr_allgatherv(m->params, parts, parts + n, TR_F32, replicas);
    tr_free(parts);
}

void tr_model_free(tr_model *m)
{
    if (m->hooks && m->hooks->free)
        m->hooks->free(m);
    void (*dfree)(void *) = m->dev ? m->dev->free : tr_free; /* nothing allocated: NULLs */
    dfree(m->params);
    dfree(m->grads);
    for (int i = 0; i < m->nlayers; i++) {
        dfree(m->acts[i]);
        dfree(m->layers[i].saved);
        dfree(m->layers[i].scratch);
    }
    dfree(m->dact[0]);
    dfree(m->dact[1]);
    dfree(m->probs);
    dfree(m->losses);
    dfree(m->in_x);
    dfree(m->in_y);
    memset(m, 0, sizeof *m);
}

double tr_model_forward(tr_model *m, const void *x, const int32_t *y, int B, long *correct)
{
    if (B > m->max_batch)
        tr_fatal(TR_EXIT_SOFTWARE, "bug: batch %d exceeds the allocated %d", B, m->max_batch);
    if (m->hooks)
        return m->hooks->forward(m, x, y, B, correct);
    const float *in = tr_model_upload(m, m->in_x, x, (size_t)B * tr_shape_numel(m->input) * sizeof(float));
    y = tr_model_upload(m, m->in_y, y, (size_t)B * sizeof(int32_t));
    for (int i = 0; i < m->nlayers; i++) {
        m->layers[i].ops->forward(&m->layers[i], m->k, m->acts[i], in, B);
        tr_model_round(m, m->acts[i], (size_t)B * tr_shape_numel(m->layers[i].out));
        in = m->acts[i];
    }
    double loss_sum = 0;
    long ok = 0;
    m->k->softmax_xent_forward(m->probs, m->losses, in, y, B, m->classes, &loss_sum, &ok);
    if (correct)
        *correct = ok;
    return loss_sum;
}

void tr_model_backward(tr_model *m, const void *x, const int32_t *y, int B, float loss_scale,
                       tr_grads_ready_fn ready, void *ctx)
{
    if (m->hooks) {
        m->hooks->backward(m, x, y, B, loss_scale, ready, ctx);
        return;
    }
    int cur = 0;
    if (!m->dev->host_memory) /* the forward's uploads: this is its batch */
        x = m->in_x, y = m->in_y;
    m->k->softmax_xent_backward(m->dact[cur], m->probs, y, loss_scale, B, m->classes);
    tr_model_round(m, m->dact[cur], (size_t)B * m->classes);
    for (int i = m->nlayers - 1; i >= 0; i--) {
        tr_layer *l = &m->layers[i];
        const float *in = i ? m->acts[i - 1] : (const float *)x;
        float *din = i ? m->dact[cur ^ 1] : NULL;
        l->ops->backward(l, m->k, din, m->dact[cur], in, m->acts[i], B);
        if (din)
            tr_model_round(m, din, (size_t)B * tr_shape_numel(l->in));
        cur ^= 1;
        if (ready && l->nparams)
            ready(ctx, l->params[0].offset);
    }
}

static double layer_flops(const tr_layer *l)
{
    if (!strcmp(l->ops->kind, "linear"))
        return 2.0 * tr_shape_numel(l->in) * tr_shape_numel(l->out);
    if (!strcmp(l->ops->kind, "conv2d"))
        return 2.0 * l->in.c * l->ksize * l->ksize * (double)tr_shape_numel(l->out);
    return 0;
}

double tr_model_forward_flops(const tr_model *m)
{
    if (m->hooks) /* a training step is a forward and a backward of twice its cost */
        return m->hooks->train_flops(m) / 3.0;
    double f = 0;
    for (int i = 0; i < m->nlayers; i++)
        f += layer_flops(&m->layers[i]);
    return f;
}

int tr_model_linear_shapes(const tr_model *m, tr_linear_shape *s, int max)
{
    if (m->hooks)
        return m->hooks->linear_shapes ? m->hooks->linear_shapes(m, s, max) : 0;
    int n = 0;
    for (int i = 0; i < m->nlayers && n < max; i++)
        if (!strcmp(m->layers[i].ops->kind, "linear"))
            s[n++] = (tr_linear_shape){1, m->layers[i].in.c, m->layers[i].out.c};
    return n;
}

double tr_model_train_flops(const tr_model *m)
{
    if (m->hooks)
        return m->hooks->train_flops(m);
    double f = 0;
    for (int i = 0; i < m->nlayers; i++)
        f += layer_flops(&m->layers[i]) * (i == 0 ? 2.0 : 3.0);
    return f;
}
