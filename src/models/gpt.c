/* gpt.c: a GPT-2 style decoder-only transformer.
 *
 *   x = wte[tok] + wpe[t]
 *   n_layer blocks: x = x + c_proj(attn(c_attn(ln_1(x))));  x = x + mlp(ln_2(x))
 *                   mlp = c_proj(gelu_tanh(c_fc(.)))
 *   logits = ln_f(x) wte^T            (the head is tied to the token embedding)
 *   loss = mean cross-entropy of the next token over all B*T positions
 *
 * Parameters are held by layers named as GPT-2's checkpoints name them
 * ("h.3/attn/c_attn" holds weight [3C, C] and bias [3C]; Linear weights are in
 * nn.Linear's [out, in] orientation), so the checkpoint reads
 * /model/h.3/attn/c_attn/weight. The layers are containers only: this file runs
 * the computation through the kernel table (hooks in model.h).
 *
 * The vocabulary is padded to a multiple of [model] vocab_pad rows in memory; the
 * padded rows are zero, their logits are excluded from the softmax, they get no
 * gradient, so they never change and checkpoints store only the V real rows.
 *
 * Shaped for tensor and pipeline parallelism later: each block is a unit that a
 * pipeline stage can own, c_attn and c_fc are the column-parallel linears and the
 * two c_proj the row-parallel ones. */
#include "gpt.h"
#include "core/error.h"
#include "core/rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { LN1, QKV, PROJ, LN2, FC, FCPROJ, PER_BLOCK };

typedef struct block_acts {
    float *ln1, *ln1_mean, *ln1_rstd; /* [B,T,C], [B,T], [B,T] */
    float *qkv;                       /* [B,T,3C] */
    float *atty;                      /* [B,T,C] attention output before c_proj */
    float *att;                       /* [B,NH,T,T] probabilities */
    float *res2;                      /* [B,T,C] stream after the attention half */
    float *ln2, *ln2_mean, *ln2_rstd;
    float *fch, *fch_gelu; /* [B,T,4C] */
    float *res3;           /* [B,T,C] stream after the block */
} block_acts;

typedef struct gpt {
    tr_gpt_config cfg;
    int wte, wpe, lnf, block0; /* layer indices */
    block_acts *blk;           /* [L] */
    float *encoded;            /* [B,T,C] embeddings: the stream into block 0 */
    float *lnf_out, *lnf_mean, *lnf_rstd;
    float *logits;   /* [B,T,Vp]; softmax probabilities in place after forward */
    float *losses;   /* [B,T] */
    /* backward scratch */
    float *dres, *dtmp, *dln; /* [B,T,C] */
    float *dqkv;              /* [B,T,3C] */
    float *datt;              /* [B,NH,T,T] */
    float *dfch;              /* [B,T,4C] */
    float *proj_out;          /* [B,T,C]: c_proj outputs before the residual add */
} gpt;

static tr_layer params_layer(const char *name, int nparams)
{
    tr_layer l;
    memset(&l, 0, sizeof l);
    static const tr_layer_ops holder = {.kind = "gpt"};
    l.ops = &holder;
    snprintf(l.name, sizeof l.name, "%s", name);
    l.nparams = nparams;
    return l;
}

static tr_param tensor(const char *name, int d0, int d1, int init, float std, int decay)
{
    tr_param p;
    memset(&p, 0, sizeof p);
    snprintf(p.name, sizeof p.name, "%s", name);
    p.ndim = d1 ? 2 : 1;
    p.dims[0] = d0;
    p.dims[1] = d1;
    p.numel = (size_t)d0 * (d1 ? (size_t)d1 : 1);
    p.init = init;
    p.init_std = std;
    p.decay = decay;
    return p;
}

/* LayerNorm: gain 1, bias 0, no decay */
static tr_layer layernorm_params(const char *name, int C)
{
    tr_layer l = params_layer(name, 2);
    l.params[0] = tensor("weight", C, 0, TR_INIT_ONES, 0, 0);
    l.params[1] = tensor("bias", C, 0, TR_INIT_ZEROS, 0, 0);
    return l;
}

/* Linear: weight N(0, std^2) with decay, bias 0 without */
static tr_layer linear_params(const char *name, int in, int out, float std)
{
    tr_layer l = params_layer(name, 2);
    l.params[0] = tensor("weight", out, in, TR_INIT_NORMAL, std, 1);
    l.params[1] = tensor("bias", out, 0, TR_INIT_ZEROS, 0, 0);
    return l;
}

static gpt *G(const tr_model *m) { return (gpt *)m->impl; }

static const tr_param *P(const tr_model *m, int layer, int i)
{
    return &m->layers[layer].params[i];
}
static int blk_layer(const gpt *g, int l, int part) { return g->block0 + l * PER_BLOCK + part; }

int tr_gpt_check_config(const tr_gpt_config *c, char *err, size_t errlen)
{
    if (c->C % c->NH) {
        snprintf(err, errlen, "[model] n_embd = %d is not divisible by n_head = %d; pick n_head "
                 "among the divisors of n_embd", c->C, c->NH);
        return TR_EXIT_USAGE;
    }
    return 0;
}

static void build_layers(tr_model *m, gpt *g)
{
    const tr_gpt_config *c = &g->cfg;
    int C = c->C;
    float std = 0.02f;
    /* GPT-2: the projections into the residual stream are scaled by 1/sqrt(2 L), as
     * 2 L of them add up on it */
    float proj_std = std / sqrtf(2.0f * (float)c->L);
    g->wte = m->nlayers;
    tr_layer wte = params_layer("wte", 1);
    wte.params[0] = tensor("weight", c->V, C, TR_INIT_NORMAL, std, 1);
    wte.params[0].numel = (size_t)c->Vp * C; /* padded rows: zero, never stored */
    tr_model_add(m, wte);
    g->wpe = m->nlayers;
    tr_layer wpe = params_layer("wpe", 1);
    wpe.params[0] = tensor("weight", c->T, C, TR_INIT_NORMAL, std, 1);
    tr_model_add(m, wpe);
    g->block0 = m->nlayers;
    char name[32];
    for (int l = 0; l < c->L; l++) {
        snprintf(name, sizeof name, "h.%d/ln_1", l);
        tr_model_add(m, layernorm_params(name, C));
        snprintf(name, sizeof name, "h.%d/attn/c_attn", l);
        tr_model_add(m, linear_params(name, C, 3 * C, std));
        snprintf(name, sizeof name, "h.%d/attn/c_proj", l);
        tr_model_add(m, linear_params(name, C, C, proj_std));
        snprintf(name, sizeof name, "h.%d/ln_2", l);
        tr_model_add(m, layernorm_params(name, C));
        snprintf(name, sizeof name, "h.%d/mlp/c_fc", l);
        tr_model_add(m, linear_params(name, C, 4 * C, std));
        snprintf(name, sizeof name, "h.%d/mlp/c_proj", l);
        tr_model_add(m, linear_params(name, 4 * C, C, proj_std));
    }
    g->lnf = m->nlayers;
    tr_model_add(m, layernorm_params("ln_f", C));
}

/* ---- buffers ------------------------------------------------------------------- */

static void gpt_buffers(tr_model *m, int max_batch, int alloc, tr_model_memory *mem)
{
    gpt *g = G(m);
    const tr_gpt_config *c = &g->cfg;
    size_t BT = (size_t)max_batch * c->T, C = (size_t)c->C;
    size_t att = (size_t)max_batch * c->NH * c->T * c->T;
    size_t *a = &mem->activations, *s = &mem->scratch;
#define BUF(n, sum, what) (float *)tr_model_buffer(alloc, (n) * sizeof(float), what, sum)
    g->encoded = BUF(BT * C, a, "activations");
    for (int l = 0; l < c->L; l++) {
        block_acts *b = &g->blk[l];
        b->ln1 = BUF(BT * C, a, "activations");
        b->ln1_mean = BUF(BT, a, "activations");
        b->ln1_rstd = BUF(BT, a, "activations");
        b->qkv = BUF(BT * 3 * C, a, "activations");
        b->atty = BUF(BT * C, a, "activations");
        b->att = BUF(att, a, "attention probabilities");
        b->res2 = BUF(BT * C, a, "activations");
        b->ln2 = BUF(BT * C, a, "activations");
        b->ln2_mean = BUF(BT, a, "activations");
        b->ln2_rstd = BUF(BT, a, "activations");
        b->fch = BUF(BT * 4 * C, a, "activations");
        b->fch_gelu = BUF(BT * 4 * C, a, "activations");
        b->res3 = BUF(BT * C, a, "activations");
    }
    g->lnf_out = BUF(BT * C, a, "activations");
    g->lnf_mean = BUF(BT, a, "activations");
    g->lnf_rstd = BUF(BT, a, "activations");
    g->logits = BUF(BT * (size_t)c->Vp, a, "logits");
    g->losses = BUF(BT, a, "losses");
    g->dres = BUF(BT * C, s, "activation gradients");
    g->dtmp = BUF(BT * C, s, "activation gradients");
    g->dln = BUF(BT * C, s, "activation gradients");
    g->dqkv = BUF(BT * 3 * C, s, "activation gradients");
    g->datt = BUF(att, s, "activation gradients");
    g->dfch = BUF(BT * 4 * C, s, "activation gradients");
    g->proj_out = BUF(BT * C, s, "activations");
#undef BUF
}

static void gpt_free(tr_model *m)
{
    gpt *g = G(m);
    if (!g)
        return;
    for (int l = 0; g->blk && l < g->cfg.L; l++) {
        block_acts *b = &g->blk[l];
        float *bufs[] = {b->ln1, b->ln1_mean, b->ln1_rstd, b->qkv,      b->atty, b->att, b->res2,
                         b->ln2, b->ln2_mean, b->ln2_rstd, b->fch, b->fch_gelu, b->res3};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
            tr_free(bufs[i]);
    }
    float *bufs[] = {g->encoded, g->lnf_out, g->lnf_mean, g->lnf_rstd, g->logits, g->losses,
                     g->dres,    g->dtmp,    g->dln,      g->dqkv,     g->datt,   g->dfch,
                     g->proj_out};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        tr_free(bufs[i]);
    free(g->blk);
    free(g);
    m->impl = NULL;
}

/* ---- forward ------------------------------------------------------------------- */

/* Runs the network on tok [B,T] up to the logits [B,T,Vp]; T <= seq_len. */
static void forward_logits(tr_model *m, const int32_t *tok, int B, int T)
{
    gpt *g = G(m);
    const tr_kernels *k = m->k;
    const tr_gpt_config *c = &g->cfg;
    int C = c->C, BT = B * T;
    size_t n = (size_t)BT * C;
    k->embedding_forward(g->encoded, tok, P(m, g->wte, 0)->value, P(m, g->wpe, 0)->value, B, T,
                         C, c->V);
    const float *x = g->encoded;
    for (int l = 0; l < c->L; l++) {
        block_acts *b = &g->blk[l];
        const tr_layer *lay = &m->layers[blk_layer(g, l, 0)];
        const tr_param *ln1 = lay[LN1].params, *qkv = lay[QKV].params, *proj = lay[PROJ].params;
        const tr_param *ln2 = lay[LN2].params, *fc = lay[FC].params, *fcp = lay[FCPROJ].params;
        k->layernorm_forward(b->ln1, b->ln1_mean, b->ln1_rstd, x, ln1[0].value, ln1[1].value, B,
                             T, C);
        k->linear_forward(b->qkv, b->ln1, qkv[0].value, qkv[1].value, BT, C, 3 * C);
        k->attention_forward(b->atty, b->att, b->qkv, B, T, C, c->NH);
        k->linear_forward(g->proj_out, b->atty, proj[0].value, proj[1].value, BT, C, C);
        k->residual_forward(b->res2, x, g->proj_out, n);
        k->layernorm_forward(b->ln2, b->ln2_mean, b->ln2_rstd, b->res2, ln2[0].value,
                             ln2[1].value, B, T, C);
        k->linear_forward(b->fch, b->ln2, fc[0].value, fc[1].value, BT, C, 4 * C);
        k->gelu_forward(b->fch_gelu, b->fch, (size_t)BT * 4 * C);
        k->linear_forward(g->proj_out, b->fch_gelu, fcp[0].value, fcp[1].value, BT, 4 * C, C);
        k->residual_forward(b->res3, b->res2, g->proj_out, n);
        x = b->res3;
    }
    const tr_param *lnf = m->layers[g->lnf].params;
    k->layernorm_forward(g->lnf_out, g->lnf_mean, g->lnf_rstd, x, lnf[0].value, lnf[1].value, B,
                         T, C);
    /* tied head: logits = ln_f(x) wte^T over the padded rows (zero rows: zero logits,
     * which the padded cross-entropy ignores) */
    k->linear_forward(g->logits, g->lnf_out, P(m, g->wte, 0)->value, NULL, BT, C, c->Vp);
}

static double gpt_forward(tr_model *m, const void *x, const int32_t *y, int B, long *correct)
{
    gpt *g = G(m);
    const tr_gpt_config *c = &g->cfg;
    forward_logits(m, x, B, c->T);
    double loss = m->k->xent_padded_forward(g->logits, g->losses, g->logits, y, B, c->T, c->V,
                                            c->Vp);
    if (correct) { /* next-token accuracy: the argmax of the probabilities */
        long ok = 0;
        size_t BT = (size_t)B * c->T;
#pragma omp parallel for reduction(+ : ok) schedule(static)
        for (size_t r = 0; r < BT; r++) {
            const float *p = g->logits + r * c->Vp;
            int best = 0;
            for (int j = 1; j < c->V; j++)
                if (p[j] > p[best])
                    best = j;
            ok += best == y[r];
        }
        *correct = ok;
    }
    return loss;
}

/* ---- backward ------------------------------------------------------------------ */

static void gpt_backward(tr_model *m, const void *xv, const int32_t *y, int B, float loss_scale,
                         tr_grads_ready_fn ready, void *ctx)
{
    gpt *g = G(m);
    const tr_kernels *k = m->k;
    const tr_gpt_config *c = &g->cfg;
    const int32_t *tok = xv;
    int C = c->C, T = c->T, BT = B * T;
    size_t n = (size_t)BT * C;
    const tr_param *wte = P(m, g->wte, 0);
    /* dlogits in place of the probabilities */
    k->xent_padded_backward(g->logits, g->logits, y, loss_scale, B, T, c->V, c->Vp);
    k->linear_backward(g->dln, wte->grad, NULL, g->logits, g->lnf_out, wte->value, BT, C, c->Vp);
    const tr_param *lnf = m->layers[g->lnf].params;
    const float *x_last = c->L ? g->blk[c->L - 1].res3 : g->encoded;
    k->layernorm_backward(g->dres, lnf[0].grad, lnf[1].grad, g->dln, x_last, lnf[0].value,
                          g->lnf_mean, g->lnf_rstd, B, T, C);
    if (ready)
        ready(ctx, lnf[0].offset);
    /* g->dres is the gradient of the residual stream, walking down */
    for (int l = c->L - 1; l >= 0; l--) {
        block_acts *b = &g->blk[l];
        const tr_layer *lay = &m->layers[blk_layer(g, l, 0)];
        const tr_param *ln1 = lay[LN1].params, *qkv = lay[QKV].params, *proj = lay[PROJ].params;
        const tr_param *ln2 = lay[LN2].params, *fc = lay[FC].params, *fcp = lay[FCPROJ].params;
        const float *x_in = l ? g->blk[l - 1].res3 : g->encoded;
        /* MLP half: res3 = res2 + c_proj(gelu(c_fc(ln_2(res2)))) */
        k->linear_backward(g->dfch, fcp[0].grad, fcp[1].grad, g->dres, b->fch_gelu,
                           fcp[0].value, BT, 4 * C, C);
        k->gelu_backward(g->dfch, b->fch, g->dfch, (size_t)BT * 4 * C);
        k->linear_backward(g->dln, fc[0].grad, fc[1].grad, g->dfch, b->ln2, fc[0].value, BT, C,
                           4 * C);
        k->layernorm_backward(g->dtmp, ln2[0].grad, ln2[1].grad, g->dln, b->res2, ln2[0].value,
                              b->ln2_mean, b->ln2_rstd, B, T, C);
        k->residual_forward(g->dres, g->dres, g->dtmp, n);
        /* attention half: res2 = x_in + c_proj(attn(c_attn(ln_1(x_in)))) */
        k->linear_backward(g->dln, proj[0].grad, proj[1].grad, g->dres, b->atty, proj[0].value,
                           BT, C, C);
        k->attention_backward(g->dqkv, g->datt, g->dln, b->qkv, b->att, B, T, C, c->NH);
        k->linear_backward(g->dln, qkv[0].grad, qkv[1].grad, g->dqkv, b->ln1, qkv[0].value, BT,
                           C, 3 * C);
        k->layernorm_backward(g->dtmp, ln1[0].grad, ln1[1].grad, g->dln, x_in, ln1[0].value,
                              b->ln1_mean, b->ln1_rstd, B, T, C);
        k->residual_forward(g->dres, g->dres, g->dtmp, n);
        if (ready)
            ready(ctx, ln1[0].offset);
    }
    k->embedding_backward(wte->grad, P(m, g->wpe, 0)->grad, g->dres, tok, B, T, C, c->V);
    if (ready)
        ready(ctx, 0);
}

/* Model FLOPs per sample (sequence) of a training step, PaLM's convention (Chowdhery
 * et al. 2022, appendix B): 6 N per token for the N weights of the matrix products
 * (the tied head V x C included, embeddings lookups and biases not) plus 12 L C T per
 * token for attention's two T x T products, forward and backward, without halving
 * for the causal mask. Recomputation is not counted: it is model FLOPs. */
static double gpt_train_flops(const tr_model *m)
{
    const tr_gpt_config *c = &G(m)->cfg;
    double C = c->C, L = c->L, T = c->T;
    double N = L * 12.0 * C * C + (double)c->V * C;
    return T * (6.0 * N + 12.0 * L * C * T);
}

static const tr_model_hooks gpt_hooks = {
    .buffers = gpt_buffers,
    .forward = gpt_forward,
    .backward = gpt_backward,
    .train_flops = gpt_train_flops,
    .free = gpt_free,
};

const tr_gpt_config *tr_gpt_config_of(const tr_model *m)
{
    return m->hooks == &gpt_hooks ? &G(m)->cfg : NULL;
}

int tr_gpt_build(tr_model *m, const tr_gpt_config *cfg, char *err, size_t errlen)
{
    int rc = tr_gpt_check_config(cfg, err, errlen);
    if (rc)
        return rc;
    gpt *g = calloc(1, sizeof *g);
    if (!g)
        tr_fatal(TR_EXIT_OSERR, "out of memory");
    g->cfg = *cfg;
    g->cfg.Vp = (cfg->V + cfg->vocab_pad - 1) / cfg->vocab_pad * cfg->vocab_pad;
    g->blk = calloc((size_t)cfg->L, sizeof *g->blk);
    if (!g->blk)
        tr_fatal(TR_EXIT_OSERR, "out of memory");
    m->impl = g;
    m->hooks = &gpt_hooks;
    m->input_tokens = 1;
    m->targets_per_sample = cfg->T;
    m->input = (tr_shape){cfg->T, 1, 1};
    build_layers(m, g);
    m->classes = cfg->V;
    return 0;
}

static int build_from_deck(tr_model *m, const tr_deck *d, tr_shape input, char *err,
                           size_t errlen)
{
    (void)input;
    tr_gpt_config c = {
        .L = (int)tr_deck_int(d, "model", "n_layer"),
        .NH = (int)tr_deck_int(d, "model", "n_head"),
        .C = (int)tr_deck_int(d, "model", "n_embd"),
        .T = (int)tr_deck_int(d, "model", "seq_len"),
        .V = (int)tr_deck_int(d, "model", "vocab_size"),
        .vocab_pad = (int)tr_deck_int(d, "model", "vocab_pad"),
    };
    return tr_gpt_build(m, &c, err, errlen);
}

const tr_model_def tr_model_gpt = {
    "gpt",
    "GPT-2 style transformer: n_layer pre-LN blocks, tied head; sizes from [model] n_layer, "
    "n_head, n_embd, seq_len, vocab_size",
    build_from_deck};

/* ---- generation ---------------------------------------------------------------- */

/* The next token after ctx[0..n) (n <= seq_len): greedy for top_k = 1, else drawn
 * from the top_k most likely at the given temperature with the counter-based RNG. */
static int next_token(tr_model *m, const int32_t *ctx, int n, int top_k, float temperature,
                      uint64_t seed, uint64_t draw)
{
    gpt *g = G(m);
    const tr_gpt_config *c = &g->cfg;
    forward_logits(m, ctx, 1, n);
    const float *lg = g->logits + (size_t)(n - 1) * c->Vp;
    if (top_k <= 1) {
        int best = 0;
        for (int j = 1; j < c->V; j++)
            if (lg[j] > lg[best])
                best = j;
        return best;
    }
    if (top_k > c->V)
        top_k = c->V;
    /* selection of the k largest by repeated scans: k is small */
    int *top = malloc((size_t)top_k * sizeof *top);
    double *w = malloc((size_t)top_k * sizeof *w);
    if (!top || !w)
        tr_fatal(TR_EXIT_OSERR, "out of memory");
    for (int i = 0; i < top_k; i++) {
        int best = -1;
        for (int j = 0; j < c->V; j++) {
            int taken = 0;
            for (int q = 0; q < i && !taken; q++)
                taken = top[q] == j;
            if (!taken && (best < 0 || lg[j] > lg[best]))
                best = j;
        }
        top[i] = best;
    }
    double sum = 0;
    for (int i = 0; i < top_k; i++)
        sum += w[i] = exp(((double)lg[top[i]] - lg[top[0]]) / temperature);
    double u = tr_rng_uniform(seed, TR_STREAM_SAMPLE, draw) * sum;
    int pick = top[top_k - 1];
    for (int i = 0; i < top_k; i++) {
        u -= w[i];
        if (u < 0) {
            pick = top[i];
            break;
        }
    }
    free(top);
    free(w);
    return pick;
}

int tr_gpt_generate(tr_model *m, int32_t *tokens, int n_prompt, int n_total, int top_k,
                    float temperature, uint64_t seed)
{
    const tr_gpt_config *c = &G(m)->cfg;
    if (m->max_batch < 1)
        tr_fatal(TR_EXIT_SOFTWARE, "bug: generation before the model is allocated");
    for (int n = n_prompt; n < n_total; n++) {
        int ctx = n < c->T ? n : c->T; /* the newest seq_len tokens */
        tokens[n] = next_token(m, tokens + n - ctx, ctx, top_k, temperature, seed, (uint64_t)n);
    }
    return n_total;
}
