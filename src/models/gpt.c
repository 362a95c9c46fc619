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
 * Layouts (tr_model_layout). Pipeline: a rank builds only its stage's blocks (which
 * blocks, and the layout's checks: gpt_stage_split.c), the first stage the
 * embeddings, the last ln_f and a copy of wte for the tied head (the trainer sums
 * the two copies' gradients, so they stay equal). Tensor
 * parallel, Megatron-style: c_attn and c_fc are column-parallel (a rank holds the
 * rows of its heads of q, k and v, and its band of the MLP's hidden units), the two
 * c_proj row-parallel (the matching columns; their outputs are summed over the tp
 * ranks, the bias added once); the embedding and the head are split over the
 * vocabulary, and the cross-entropy reduces row statistics instead of gathering
 * logits. LayerNorms, wpe and the row-parallel biases are replicated: their inputs
 * and gradients are the same on every tp rank, so they stay equal without talking.
 * Sequence parallelism (layout.sequence_parallel, at tp > 1) splits the tokens
 * between the tensor-parallel products too (see "sequence parallelism" below).
 * Each tensor records which rectangles of the logical tensor it holds (tr_param
 * blocks) and its index in the whole model, so initialisation and checkpoints see
 * the logical tensors whatever the layout. */
#include "gpt.h"
#include "backend/lowp_math.h" /* tr_round_lowp_span */
#include "core/error.h"
#include "core/rng.h"
#include "core/watchdog.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(TR_MODEL_MAX_LAYERS >= 6 * TR_GPT_MAX_LAYERS + 4,
               "model.h: TR_MODEL_MAX_LAYERS holds fewer layers than the deepest GPT has");

enum { LN1, QKV, PROJ, LN2, FC, FCPROJ, PER_BLOCK };

/* Dropout sites (their Philox streams: TR_STREAM_DROPOUT + site): the embeddings, and
 * per block l: 1 + 3 l + one of these */
enum { SITE_ATTN, SITE_ATTN_RESID, SITE_MLP_RESID, SITES_PER_BLOCK };

/* A slot's pass: marked for training by tr_gpt_stage_train, taken by its forward. */
typedef struct slot_pass {
    int marked, train;
    long step, row0;
} slot_pass;

/* One block's activations for one slot (pointers into buffers of max_batch rows; in
 * sequence parallelism ln1, res2, ln2 and res3 and the layernorms' statistics hold this
 * rank's rows only, from its first). */
typedef struct block_acts {
    void *ln1;                        /* [B,T,C] stored in stored_format */
    float *ln1_mean, *ln1_rstd;       /* [B,T], [B,T] */
    void *qkv;                        /* [B,T,3Cl]: this rank's heads of q, k, v, as ln1 */
    void *atty;                       /* [B,T,Cl] attention output before c_proj, as ln1 */
    float *att;                       /* [B,NHl,T,T] probabilities */
    void *res2;                       /* [B,T,C] stream after the attention half, as ln1 */
    void *ln2;                        /* as ln1 */
    float *ln2_mean, *ln2_rstd;
    void *fch, *fch_gelu;  /* [B,T,Fl], stored in stored_format (transformer_kernels.h) */
    void *res3;            /* [B,T,C] stream after the block, as ln1 */
} block_acts;

typedef struct gpt {
    tr_gpt_config cfg;
    /* this rank's share: heads NHl of width Cl = C/tp, MLP units Fl = 4C/tp,
     * vocabulary rows [v0, v0 + Vl) of which nreal are real */
    int tp, tp_rank, Cl, NHl, Fl, Vl, v0, nreal;
    int first, last;   /* the stage holds the embeddings / the head */
    int l0, nl;        /* blocks [l0, l0 + nl) */
    int slots, recompute;
    slot_pass *pass; /* [slots] */
    /* m->precision when the buffers were laid out: the layernorms' outputs and the
     * MLP's activations are stored in its width (transformer_kernels.h) */
    int stored_format;
    int wte, wpe, lnf, head_wte, block0; /* layer indices, -1 where absent */
    /* sequence parallelism: sp where the layout asks for it (tp > 1), sp_on while the
     * passes run with it (not generation's); the ranks' parts of a pass's rows in
     * elements, counts then offsets; a layernorm's output gathered over the tp ranks
     * for the product that reads it ([B,T,C] stored in stored_format) */
    int sp, sp_on;
    size_t *sp_parts; /* [2 tp] */
    void *lnfull;
    block_acts *blk;   /* [nl * slots]; with recompute only res3 is kept */
    block_acts work;   /* recompute: one block's activations, rebuilt in backward */
    void **encoded;    /* [slots] of [B,T,C]: the stream into the stage's first block,
                        * stored in stored_format */
    void **lnf_out;    /* [slots] of [B,T,C] stored in stored_format */
    float **lnf_mean, **lnf_rstd;
    void **logits;     /* [slots] of [B,T,Vl], stored in lfmt */
    int lfmt;          /* the backend's form of the logits (kernels.h, logits_format) */
    float **xstats;    /* [slots] of [B,T,2]: the softmax's row max and 1 / sum of exps */
    float *losses;     /* [B,T] */
    float *rowmax;     /* [B,T]  vocab-parallel cross-entropy */
    double *xsums;     /* [B,T,2] */
    /* backward scratch */
    float *dres, *dln;        /* [B,T,C] */
    float *dqkv; /* [B,T,3Cl]: fp32 scratch in forward; in backward stored in the format */
    float *datt;              /* [B,NHl,T,T] */
    float *dfch;              /* [B,T,Fl] */
    float *proj_out;          /* [B,T,C]: c_proj outputs before the residual add */
    /* a device whose memory is not the host's: each slot's tokens and targets as
     * uploaded by its forward and loss, for its backward; and the row maxima of the
     * logits (index, value) that the accuracy downloads */
    int32_t **tok, **tgt;     /* [slots] of [B,T] */
    int32_t *amax;            /* [B,T] */
    float *amax_val;          /* [B,T] */
    /* every buffer, for freeing */
    const tr_device *dev;
    float **bufs;
    int nbufs, capbufs;
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

/* Restricts p to the given rectangles of its logical matrix view. */
static void shard(tr_param *p, int nblocks, const tr_shard_block *b)
{
    p->nblocks = nblocks;
    p->numel = 0;
    for (int i = 0; i < nblocks; i++) {
        p->block[i] = b[i];
        p->numel += (size_t)b[i].rows * (size_t)b[i].cols;
    }
}

/* Column-parallel: the rows of this rank's band in each of `parts` equal parts (q,
 * k and v of c_attn: 3 parts; c_fc: 1). */
static void shard_rows(tr_param *p, int parts, int tp, int rank)
{
    tr_shard_block b[TR_SHARD_MAX_BLOCKS];
    long part = p->dims[0] / parts, band = part / tp;
    long cols = p->ndim > 1 ? p->dims[1] : 1;
    for (int i = 0; i < parts; i++)
        b[i] = (tr_shard_block){i * part + rank * band, 0, band, cols};
    shard(p, parts, b);
}

/* Row-parallel: this rank's band of columns (of the input features). */
static void shard_cols(tr_param *p, int tp, int rank)
{
    long band = p->dims[1] / tp;
    tr_shard_block b = {0, rank * band, p->dims[0], band};
    shard(p, 1, &b);
}

/* LayerNorm: gain 1, bias 0, no decay; replicated over tp */
static tr_layer layernorm_params(const char *name, int C, int gindex)
{
    tr_layer l = params_layer(name, 2);
    l.params[0] = tensor("weight", C, 0, TR_INIT_ONES, 0, 0);
    l.params[1] = tensor("bias", C, 0, TR_INIT_ZEROS, 0, 0);
    for (int i = 0; i < 2; i++) {
        l.params[i].tp_replica = 1;
        l.params[i].gindex = gindex + i;
    }
    return l;
}

/* Linear: weight N(0, std^2) with decay, bias 0 without */
static tr_layer linear_params(const char *name, int in, int out, float std, int gindex)
{
    tr_layer l = params_layer(name, 2);
    l.params[0] = tensor("weight", out, in, TR_INIT_NORMAL, std, 1);
    l.params[1] = tensor("bias", out, 0, TR_INIT_ZEROS, 0, 0);
    l.params[0].gindex = gindex;
    l.params[1].gindex = gindex + 1;
    return l;
}

/* The token embedding, this rank's vocabulary rows (also the head's copy). */
static tr_layer wte_params(const gpt *g, int copy)
{
    const tr_gpt_config *c = &g->cfg;
    tr_layer l = params_layer("wte", 1);
    tr_param *p = &l.params[0];
    *p = tensor("weight", c->V, c->C, TR_INIT_NORMAL, 0.02f, 1);
    /* a rank whose rows are all padding (a vocabulary smaller than the padded rows
     * before its shard) holds none of the tensor: an empty block at its end */
    tr_shard_block b = {g->v0 < c->V ? g->v0 : c->V, 0, g->nreal, c->C};
    shard(p, 1, &b);
    p->numel = (size_t)g->Vl * c->C; /* padded rows: zero, never stored */
    p->tied_copy = copy;
    p->gindex = 0;
    return l;
}

static gpt *G(const tr_model *m) { return (gpt *)m->impl; }

static const tr_param *P(const tr_model *m, int layer, int i)
{
    return &m->layers[layer].params[i];
}
/* local block i (0 <= i < nl) */
static int blk_layer(const gpt *g, int i, int part) { return g->block0 + i * PER_BLOCK + part; }

/* Row r of a tensor of rows of `width` values stored in `format`. */
static void *row_of(const void *base, size_t r, size_t width, int format)
{
    return (char *)base + r * width * tr_stored_bytes(format);
}

static void build_layers(tr_model *m, gpt *g)
{
    const tr_gpt_config *c = &g->cfg;
    int C = c->C, L = c->L, tp = g->tp, r = g->tp_rank;
    float std = 0.02f;
    /* GPT-2: the projections into the residual stream are scaled by 1/sqrt(2 L), as
     * 2 L of them add up on it */
    float proj_std = std / sqrtf(2.0f * (float)L);
    g->wte = g->wpe = g->lnf = g->head_wte = -1;
    if (g->first) {
        g->wte = m->nlayers;
        tr_model_add(m, wte_params(g, 0));
        g->wpe = m->nlayers;
        tr_layer wpe = params_layer("wpe", 1);
        wpe.params[0] = tensor("weight", c->T, C, TR_INIT_NORMAL, std, 1);
        wpe.params[0].tp_replica = 1;
        wpe.params[0].gindex = 1;
        tr_model_add(m, wpe);
    }
    g->block0 = m->nlayers;
    char name[32];
    for (int l = g->l0; l < g->l0 + g->nl; l++) {
        int gi = 2 + 12 * l; /* the tensor index in the whole model */
        snprintf(name, sizeof name, "h.%d/ln_1", l);
        tr_model_add(m, layernorm_params(name, C, gi));
        snprintf(name, sizeof name, "h.%d/attn/c_attn", l);
        tr_layer qkv = linear_params(name, C, 3 * C, std, gi + 2);
        snprintf(name, sizeof name, "h.%d/attn/c_proj", l);
        tr_layer proj = linear_params(name, C, C, proj_std, gi + 4);
        snprintf(name, sizeof name, "h.%d/mlp/c_fc", l);
        tr_layer fc = linear_params(name, C, 4 * C, std, gi + 8);
        snprintf(name, sizeof name, "h.%d/mlp/c_proj", l);
        tr_layer fcp = linear_params(name, 4 * C, C, proj_std, gi + 10);
        proj.params[1].tp_replica = fcp.params[1].tp_replica = 1;
        if (tp > 1) {
            shard_rows(&qkv.params[0], 3, tp, r);
            shard_rows(&qkv.params[1], 3, tp, r);
            shard_cols(&proj.params[0], tp, r);
            shard_rows(&fc.params[0], 1, tp, r);
            shard_rows(&fc.params[1], 1, tp, r);
            shard_cols(&fcp.params[0], tp, r);
        }
        tr_model_add(m, qkv);
        tr_model_add(m, proj);
        snprintf(name, sizeof name, "h.%d/ln_2", l);
        tr_model_add(m, layernorm_params(name, C, gi + 6));
        tr_model_add(m, fc);
        tr_model_add(m, fcp);
    }
    if (g->last) {
        g->lnf = m->nlayers;
        tr_model_add(m, layernorm_params("ln_f", C, 2 + 12 * L));
        /* the head's copy of wte sits at the top of the flat buffer, where backward
         * completes gradients first */
        if (!g->first) {
            g->head_wte = m->nlayers;
            tr_model_add(m, wte_params(g, 1));
        } else {
            g->head_wte = g->wte;
        }
    }
    /* the whole model's parameter count, whatever this rank holds */
    m->nparams_logical = (size_t)c->V * C + (size_t)c->T * C + 2 * (size_t)C +
                         (size_t)L * (12 * (size_t)C * C + 13 * (size_t)C);
}

/* ---- buffers ------------------------------------------------------------------- */

static float *buf(const tr_model *m, int alloc, size_t n, size_t *sum, const char *what)
{
    gpt *g = G(m);
    float *p = tr_model_buffer(m, alloc, n * sizeof(float), what, sum);
    if (!p)
        return NULL;
    if (g->nbufs == g->capbufs) {
        g->capbufs = g->capbufs ? 2 * g->capbufs : 64;
        g->bufs = realloc(g->bufs, (size_t)g->capbufs * sizeof *g->bufs);
        if (!g->bufs)
            tr_fatal(TR_EXIT_OSERR, "out of memory");
    }
    return g->bufs[g->nbufs++] = p;
}

/* One block's activations for max_batch rows, BT (of which the rank keeps `rows` of the
 * stream, sequence parallelism's share); with `only_res3` just its output. */
static void block_buffers(const tr_model *m, block_acts *b, size_t BT, size_t rows, size_t att,
                          int alloc, int only_res3, size_t *a)
{
    const gpt *g = G(m);
    size_t C = (size_t)g->cfg.C;
    /* the activations stored in the format's width (transformer_kernels.h), in floats'
     * worth, rounded up */
    size_t es = tr_stored_bytes(m->precision), lnc = (rows * C * es + 3) / sizeof(float);
    b->res3 = buf(m, alloc, lnc, a, "activations");
    if (only_res3)
        return;
    b->ln1 = buf(m, alloc, lnc, a, "activations");
    b->ln1_mean = buf(m, alloc, rows, a, "activations");
    b->ln1_rstd = buf(m, alloc, rows, a, "activations");
    b->qkv = buf(m, alloc, (BT * 3 * (size_t)g->Cl * es + 3) / sizeof(float), a, "activations");
    b->atty = buf(m, alloc, (BT * (size_t)g->Cl * es + 3) / sizeof(float), a, "activations");
    b->att = buf(m, alloc, att, a, "attention state");
    b->res2 = buf(m, alloc, lnc, a, "activations");
    b->ln2 = buf(m, alloc, lnc, a, "activations");
    b->ln2_mean = buf(m, alloc, rows, a, "activations");
    b->ln2_rstd = buf(m, alloc, rows, a, "activations");
    size_t hidden = (BT * (size_t)g->Fl * es + 3) / sizeof(float);
    b->fch = buf(m, alloc, hidden, a, "activations");
    b->fch_gelu = buf(m, alloc, hidden, a, "activations");
}

static void gpt_buffers(tr_model *m, int max_batch, int alloc, tr_model_memory *mem)
{
    gpt *g = G(m);
    const tr_gpt_config *c = &g->cfg;
    size_t BT = (size_t)max_batch * c->T, C = (size_t)c->C;
    /* the backend's saved attention state: a few floats a row of each head (the
     * CPU's max and 1 / sum, the GPU's log-sum-exp), never the T x T probabilities */
    size_t att = m->dev->k->attention_state_floats(max_batch, c->T, g->NHl);
    size_t *a = &mem->activations, *s = &mem->scratch;
    /* the stream's rows a rank keeps: in sequence parallelism its share of max_batch's
     * (the largest share), or a whole sequence's, for generation, which runs without */
    size_t T = (size_t)c->T, share = (BT + (size_t)g->tp - 1) / (size_t)g->tp;
    size_t rows = g->sp ? (share > T ? share : T) : BT;
    size_t stream = (rows * C * tr_stored_bytes(m->precision) + 3) / sizeof(float);
    int S = g->slots;
    if (alloc)
        g->dev = m->dev;
    g->stored_format = m->precision;
    g->lfmt = m->dev->k->logits_format(m->precision, c->C, g->Vl);
    mem->logits_format = g->lfmt;
    size_t logits = (BT * (size_t)g->Vl * tr_stored_bytes(g->lfmt) + 3) / sizeof(float);
    for (int i = 0; i < g->nl * S; i++)
        block_buffers(m, &g->blk[i], BT, rows, att, alloc, g->recompute, a);
    if (g->recompute) /* one block's worth, rebuilt for each block in backward */
        block_buffers(m, &g->work, BT, rows, att, alloc, 0, s);
    if (g->sp && g->nl) /* a layernorm's output of every row, gathered */
        g->lnfull = buf(m, alloc, (BT * C * tr_stored_bytes(m->precision) + 3) / sizeof(float), s,
                        "activations");
    for (int i = 0; i < S; i++) {
        g->encoded[i] = buf(m, alloc, stream, a, "activations");
        if (!g->last)
            continue;
        /* every row: the head reads them all */
        g->lnf_out[i] = buf(m, alloc, (BT * C * tr_stored_bytes(m->precision) + 3) / sizeof(float),
                            a, "activations");
        g->lnf_mean[i] = buf(m, alloc, rows, a, "activations");
        g->lnf_rstd[i] = buf(m, alloc, rows, a, "activations");
        size_t before = *a;
        g->logits[i] = buf(m, alloc, logits, a, "logits");
        mem->logits += *a - before;
        g->xstats[i] = buf(m, alloc, 2 * BT, a, "cross-entropy statistics");
    }
    if (g->last) {
        g->losses = buf(m, alloc, BT, a, "losses");
        g->rowmax = buf(m, alloc, BT, s, "cross-entropy statistics");
        g->xsums = (double *)buf(m, alloc, 2 * BT * sizeof(double) / sizeof(float), s,
                                 "cross-entropy statistics");
    }
    g->dres = buf(m, alloc, BT * C, s, "activation gradients");
    g->dln = buf(m, alloc, BT * C, s, "activation gradients");
    g->dqkv = buf(m, alloc, BT * 3 * (size_t)g->Cl, s, "activation gradients");
    g->datt = buf(m, alloc, att, s, "activation gradients");
    g->dfch = buf(m, alloc, BT * (size_t)g->Fl, s, "activation gradients");
    g->proj_out = buf(m, alloc, BT * C, s, "activations");
    if (!m->dev->host_memory) { /* int32 buffers, sized in floats (the same 4 bytes) */
        for (int i = 0; i < S; i++) {
            g->tok[i] = (int32_t *)buf(m, alloc, BT, a, "tokens");
            if (g->last)
                g->tgt[i] = (int32_t *)buf(m, alloc, BT, a, "targets");
        }
        if (g->last) {
            g->amax = (int32_t *)buf(m, alloc, BT, s, "accuracy");
            g->amax_val = buf(m, alloc, BT, s, "accuracy");
        }
    }
}

static void gpt_free(tr_model *m)
{
    gpt *g = G(m);
    if (!g)
        return;
    for (int i = 0; i < g->nbufs; i++)
        g->dev->free(g->bufs[i]);
    free(g->bufs);
    free(g->blk);
    free(g->encoded);
    free(g->lnf_out);
    free(g->lnf_mean);
    free(g->lnf_rstd);
    free(g->logits);
    free(g->xstats);
    free(g->tok);
    free(g->tgt);
    free(g->pass);
    free(g->sp_parts);
    free(g);
    m->impl = NULL;
}

/* ---- tensor-parallel collectives ----------------------------------------------- */

/* Sums partial results over the tensor-parallel ranks (row-parallel outputs, the
 * input gradients of column-parallel layers, vocabulary-split embeddings). */
static void tp_sum(const gpt *g, float *x, size_t n)
{
    if (g->tp > 1)
        tr_allreduce(x, x, n, TR_F32, TR_SUM, g->cfg.layout.tp_group);
}

/* ---- sequence parallelism -------------------------------------------------------
 * Megatron's (Korthikanti et al. 2022): between the tensor-parallel products, tp rank
 * q keeps rows [B T q / tp, B T (q + 1) / tp) of a pass's B x T tokens. A row-parallel
 * product's partial sums are reduce-scattered instead of all-reduced, so that each
 * rank adds its rows' bias, dropout and residual, and normalises them; a layernorm's
 * output is all-gathered before the column-parallel product that reads it (and again
 * in backward, for the weight gradient), and so is the gradient of a row-parallel
 * product's output. The same bytes as the all-reduces forward (a ring all-reduce is a
 * reduce-scatter and an all-gather), half as many again backward; in return the
 * element-wise work is done once instead of tp times, and the residual stream, the
 * layernorms' outputs kept for backward and the pipeline's messages take 1/tp of the
 * room. The layernorms' weight gradients are then each rank's rows' share: summed
 * over tp at the step's last backward (sum_replica_grads). */
typedef struct row_span {
    size_t r0, n; /* this rank's rows of the pass: [r0, r0 + n) */
} row_span;

static row_span pass_rows(const gpt *g, size_t BT)
{
    if (!g->sp_on)
        return (row_span){0, BT};
    size_t r0 = BT * (size_t)g->tp_rank / (size_t)g->tp;
    return (row_span){r0, BT * (size_t)(g->tp_rank + 1) / (size_t)g->tp - r0};
}

/* every rank's part of BT rows of width C, in elements: counts, then offsets */
static const size_t *sp_parts_of(const gpt *g, size_t BT)
{
    size_t C = (size_t)g->cfg.C, tp = (size_t)g->tp;
    for (size_t q = 0; q < tp; q++) {
        size_t r0 = BT * q / tp, r1 = BT * (q + 1) / tp;
        g->sp_parts[q] = (r1 - r0) * C;
        g->sp_parts[tp + q] = r0 * C;
    }
    return g->sp_parts;
}

/* A row-parallel product's partial sums x [BT, C]: summed over tp, every row
 * (tp_sum) or in sequence parallelism this rank's (the others' left as they were). */
static void tp_combine(const gpt *g, float *x, size_t BT)
{
    if (!g->sp_on) {
        tp_sum(g, x, BT * (size_t)g->cfg.C);
        return;
    }
    const size_t *p = sp_parts_of(g, BT);
    tr_reduce_scatterv(x, p, p + g->tp, g->cfg.layout.tp_group);
}

/* Every rank's rows of x [BT, C], each rank's own in place: moved, never summed, so
 * 16-bit values go as they are. */
static void sp_gather(const gpt *g, void *x, size_t BT, tr_dtype type)
{
    const size_t *p = sp_parts_of(g, BT);
    tr_allgatherv(x, p, p + g->tp, type, g->cfg.layout.tp_group);
}

static tr_dtype stored_type(const tr_model *m)
{
    return tr_stored_bytes(m->precision) == 2 ? TR_U16 : TR_F32;
}

/* A layernorm's output `ln` (this rank's rows) over all BT rows, for the
 * column-parallel product that reads it: ln itself, or in sequence parallelism
 * gathered into lnfull. */
static const void *ln_all_rows(const tr_model *m, const void *ln, size_t BT)
{
    const gpt *g = G(m);
    if (!g->sp_on)
        return ln;
    row_span r = pass_rows(g, BT);
    size_t C = (size_t)g->cfg.C;
    m->dev->copy(row_of(g->lnfull, r.r0, C, m->precision), ln,
                 r.n * C * tr_stored_bytes(m->precision));
    sp_gather(g, g->lnfull, BT, stored_type(m));
    return g->lnfull;
}

/* The gradient of a row-parallel product's output over all BT rows, from the
 * stream's (g->dres, this rank's rows) through the site's dropout mask (drawn again):
 * dres itself where neither applies, else in proj_out, which forward is done with. */
static const float *proj_grad(const tr_model *m, size_t BT, const tr_dropout *d)
{
    const gpt *g = G(m);
    row_span r = pass_rows(g, BT);
    size_t n = r.n * (size_t)g->cfg.C;
    float *part = g->proj_out + r.r0 * (size_t)g->cfg.C;
    if (tr_dropout_on(d))
        m->k->dropout(part, g->dres, n, d);
    else if (g->sp_on)
        m->dev->copy(part, g->dres, n * sizeof *part);
    else
        return g->dres;
    if (g->sp_on)
        sp_gather(g, g->proj_out, BT, TR_F32);
    return g->proj_out;
}

/* In sequence parallelism, at the step's last backward: a layernorm's gradients,
 * each rank's rows' share of every micro-batch's, summed over tp (before the
 * data-parallel buckets read them), so that every tp rank holds the whole. */
static void sum_replica_grads(const tr_model *m, int layer, int last_backward)
{
    const gpt *g = G(m);
    if (!g->sp_on || !last_backward)
        return;
    /* weight and bias lie back to back in the flat buffer (model.c): one sum */
    const tr_layer *l = &m->layers[layer];
    tp_sum(g, l->params[0].grad, l->params[0].numel + l->params[1].numel);
}

/* ---- dropout ------------------------------------------------------------------- */

/* Site `site`'s dropout in slot's pass (off where it is not training or p is 0), for a
 * tensor of `per_row` elements per batch row: the call's element 0 is element row0
 * per_row + skip of the global batch's (skip: where this rank's rows start, in sequence
 * parallelism). Attention's (per_row 1) numbers its rows so, and its heads as the
 * model's (dropout_math.h). */
static tr_dropout site_dropout_from(const gpt *g, int slot, int site, float p, uint64_t per_row,
                                    uint64_t skip)
{
    const slot_pass *s = &g->pass[slot];
    int on = s->train && p > 0.0f;
    tr_dropout d = tr_dropout_make(on ? p : 0.0f, g->cfg.seed, on ? (uint64_t)s->step : 0,
                                   TR_STREAM_DROPOUT + (uint32_t)site,
                                   on ? (uint64_t)s->row0 * per_row + skip : 0);
    d.heads = g->cfg.NH;
    d.head0 = g->tp_rank * g->NHl;
    return d;
}

static tr_dropout site_dropout(const gpt *g, int slot, int site, float p, uint64_t per_row)
{
    return site_dropout_from(g, slot, site, p, per_row, 0);
}

/* Local block i's three sites in slot's pass, indexed by SITE_* (T positions a row;
 * the residual stream's from this rank's rows r) */
static void block_dropouts(const gpt *g, int slot, int i, int T, row_span r,
                           tr_dropout d[SITES_PER_BLOCK])
{
    const tr_gpt_config *c = &g->cfg;
    int site0 = 1 + SITES_PER_BLOCK * (g->l0 + i);
    uint64_t row = (uint64_t)T * (uint64_t)c->C; /* the residual stream's values a row */
    uint64_t skip = (uint64_t)r.r0 * (uint64_t)c->C;
    d[SITE_ATTN] = site_dropout(g, slot, site0 + SITE_ATTN, c->attn_pdrop, 1);
    d[SITE_ATTN_RESID] =
        site_dropout_from(g, slot, site0 + SITE_ATTN_RESID, c->resid_pdrop, row, skip);
    d[SITE_MLP_RESID] =
        site_dropout_from(g, slot, site0 + SITE_MLP_RESID, c->resid_pdrop, row, skip);
}

void tr_gpt_stage_train(tr_model *m, int slot, long step, long row0)
{
    gpt *g = G(m);
    if (slot < 0 || slot >= g->slots || step < 0 || row0 < 0)
        tr_fatal(TR_EXIT_SOFTWARE, "bug: training pass of slot %d, step %ld, row %ld", slot,
                 step, row0);
    g->pass[slot] = (slot_pass){1, 1, step, row0};
}

/* ---- forward ------------------------------------------------------------------- */

/* Local block i on x_in [B,T,C] into a (a->res3 is its output). */
static void block_forward(tr_model *m, int i, int slot, const block_acts *b, const void *x,
                          int B, int T)
{
    gpt *g = G(m);
    const tr_kernels *k = m->k;
    int C = g->cfg.C, BT = B * T, Cl = g->Cl, Fl = g->Fl;
    /* the stream's rows this rank computes (all but in sequence parallelism), and
     * where their sums land in proj_out */
    row_span r = pass_rows(g, (size_t)BT);
    size_t n = r.n * (size_t)C;
    float *part = g->proj_out + r.r0 * (size_t)C;
    const tr_layer *lay = &m->layers[blk_layer(g, i, 0)];
    const tr_param *ln1 = lay[LN1].params, *qkv = lay[QKV].params, *proj = lay[PROJ].params;
    const tr_param *ln2 = lay[LN2].params, *fc = lay[FC].params, *fcp = lay[FCPROJ].params;
    /* the row-parallel biases are added once, by tp rank 0, before the sum */
    int bias_here = g->tp_rank == 0;
    /* mixed precision: every stored output is of the storage format (the layernorm
     * statistics stay fp32): rounded by the kernel that stores it; a product's output
     * (proj_out) by every kernel that reads it ("read as values of format",
     * transformer_kernels.h). The residual stream (x, res2, res3) is stored in the
     * format's width, as the layernorms' outputs are. */
    k->layernorm_forward(b->ln1, b->ln1_mean, b->ln1_rstd, x, ln1[0].value, ln1[1].value, 1,
                         (int)r.n, C, m->precision);
    /* ln_1's and ln_2's outputs, qkv, attention's and the MLP's activations are stored
     * in the format's width; dln, dqkv and dfch, free until backward, are the fp32
     * scratch of their readers and writers */
    k->linear_forward_stored_io(b->qkv, ln_all_rows(m, b->ln1, (size_t)BT), qkv[0].value,
                                qkv[1].value, BT, C, 3 * Cl, m->precision, g->dqkv, g->dln);
    /* att is the backend's state for backward, stored (rounded) by the kernel itself */
    tr_dropout d[SITES_PER_BLOCK];
    block_dropouts(g, slot, i, T, r, d);
    k->attention_forward(b->atty, b->att, b->qkv, B, T, Cl, g->NHl, m->precision,
                         &d[SITE_ATTN]);
    k->linear_forward_stored(g->proj_out, b->atty, proj[0].value,
                             bias_here ? proj[1].value : NULL, BT, Cl, C, m->precision, g->dln);
    tp_combine(g, g->proj_out, (size_t)BT);
    /* dropped after the tp sum: every tp rank draws the same mask for a row */
    if (tr_dropout_on(&d[SITE_ATTN_RESID]))
        k->dropout(part, part, n, &d[SITE_ATTN_RESID]);
    k->residual_forward(b->res2, x, part, n, m->precision);
    k->layernorm_forward(b->ln2, b->ln2_mean, b->ln2_rstd, b->res2, ln2[0].value, ln2[1].value, 1,
                         (int)r.n, C, m->precision);
    k->linear_gelu_forward(b->fch, b->fch_gelu, ln_all_rows(m, b->ln2, (size_t)BT), fc[0].value,
                           fc[1].value, BT, C, Fl, m->precision, g->dfch, g->dln);
    k->linear_forward_stored(g->proj_out, b->fch_gelu, fcp[0].value,
                             bias_here ? fcp[1].value : NULL, BT, Fl, C, m->precision, g->dfch);
    tp_combine(g, g->proj_out, (size_t)BT);
    if (tr_dropout_on(&d[SITE_MLP_RESID]))
        k->dropout(part, part, n, &d[SITE_MLP_RESID]);
    k->residual_forward(b->res3, b->res2, part, n, m->precision);
}

/* Where block i of slot s keeps its activations for the forward pass. */
static block_acts acts_for(const gpt *g, int i, int s)
{
    block_acts b = g->recompute ? g->work : g->blk[i * g->slots + s];
    b.res3 = g->blk[i * g->slots + s].res3;
    return b;
}

static const void *block_input(const gpt *g, int i, int s)
{
    return i ? g->blk[(i - 1) * g->slots + s].res3 : g->encoded[s];
}

static void check_slot(const tr_model *m, int slot, int B, int T)
{
    const gpt *g = G(m);
    if (slot < 0 || slot >= g->slots || B > m->max_batch || T > g->cfg.T || T < 1)
        tr_fatal(TR_EXIT_SOFTWARE, "bug: slot %d of %d, batch %d of %d, T %d of %d", slot,
                 g->slots, B, m->max_batch, T, g->cfg.T);
    if (m->precision != g->stored_format) /* the stored buffers' width was chosen by it */
        tr_fatal(TR_EXIT_SOFTWARE, "bug: precision %d, buffers laid out for %d", m->precision,
                 g->stored_format);
}

void tr_gpt_stage_forward(tr_model *m, int slot, const int32_t *tok, int B, int T)
{
    gpt *g = G(m);
    const tr_kernels *k = m->k;
    int C = g->cfg.C, BT = B * T;
    check_slot(m, slot, B, T);
    /* a training pass where tr_gpt_stage_train marked it, else an evaluation */
    g->pass[slot].train = g->pass[slot].marked;
    g->pass[slot].marked = 0;
    row_span r = pass_rows(g, (size_t)BT);
    size_t n = r.n * (size_t)C;
    if (g->first) { /* its tokens stay where backward finds them */
        tok = tr_model_upload(m, g->tok[slot], tok, (size_t)BT * sizeof *tok);
        /* the fp32 sum in proj_out (free until the first block), stored into the stream */
        if (g->tp == 1) {
            k->embedding_forward(g->proj_out, tok, P(m, g->wte, 0)->value,
                                 P(m, g->wpe, 0)->value, B, T, C, g->cfg.V);
        } else {
            /* each rank looks up the tokens it holds; wpe is added once */
            k->embedding_shard_forward(g->proj_out, tok, P(m, g->wte, 0)->value,
                                       g->tp_rank == 0 ? P(m, g->wpe, 0)->value : NULL, B, T,
                                       C, g->v0, g->Vl);
            tp_combine(g, g->proj_out, (size_t)BT);
        }
        float *part = g->proj_out + r.r0 * C; /* this rank's rows */
        tr_dropout d =
            site_dropout_from(g, slot, 0, g->cfg.embd_pdrop, (uint64_t)T * C, (uint64_t)r.r0 * C);
        if (tr_dropout_on(&d))
            k->dropout(part, part, n, &d);
        k->narrow_stored(g->encoded[slot], part, n, m->precision);
    }
    for (int i = 0; i < g->nl; i++) {
        block_acts b = acts_for(g, i, slot);
        block_forward(m, i, slot, &b, block_input(g, i, slot), B, T);
    }
    if (!g->last)
        return;
    const void *x = g->nl ? g->blk[(g->nl - 1) * g->slots + slot].res3 : g->encoded[slot];
    const tr_param *lnf = m->layers[g->lnf].params;
    k->layernorm_forward(row_of(g->lnf_out[slot], r.r0, C, m->precision), g->lnf_mean[slot],
                         g->lnf_rstd[slot], x, lnf[0].value, lnf[1].value, 1, (int)r.n, C,
                         m->precision);
    if (g->sp_on) /* the head reads every row */
        sp_gather(g, g->lnf_out[slot], (size_t)BT, stored_type(m));
    /* tied head: logits = ln_f(x) wte^T over this rank's rows (padded rows are zero:
     * zero logits, which the cross-entropy ignores) */
    /* the logits, in the backend's form, are read as values of the format by the
     * loss, the accuracy and tr_gpt_stage_logits; the loss is fp32 math */
    k->lm_head_forward(g->logits[slot], g->lnf_out[slot], P(m, g->head_wte, 0)->value,
                       (size_t)BT, C, g->Vl, m->precision, g->lfmt, g->dln);
}

int tr_gpt_can_decode(const tr_model *m) { return !G(m)->recompute; }

/* Block i's forward of the one row pos of slot 0 (as block_forward's, which the
 * comments there explain), its attention over the keys and values of rows 0..pos. */
static void block_decode(tr_model *m, int i, int pos)
{
    gpt *g = G(m);
    const tr_kernels *k = m->k;
    int C = g->cfg.C, Cl = g->Cl, Fl = g->Fl, f = m->precision;
    const block_acts *b = &g->blk[i * g->slots];
    const tr_layer *lay = &m->layers[blk_layer(g, i, 0)];
    const tr_param *ln1 = lay[LN1].params, *qkv = lay[QKV].params, *proj = lay[PROJ].params;
    const tr_param *ln2 = lay[LN2].params, *fc = lay[FC].params, *fcp = lay[FCPROJ].params;
    int bias_here = g->tp_rank == 0;
    const void *x = row_of(block_input(g, i, 0), pos, C, f);
    void *ln1r = row_of(b->ln1, pos, C, f), *qkvr = row_of(b->qkv, pos, 3 * (size_t)Cl, f);
    void *attyr = row_of(b->atty, pos, Cl, f), *res2r = row_of(b->res2, pos, C, f);
    void *ln2r = row_of(b->ln2, pos, C, f), *fchr = row_of(b->fch, pos, Fl, f);
    void *gelur = row_of(b->fch_gelu, pos, Fl, f);
    k->layernorm_forward(ln1r, b->ln1_mean + pos, b->ln1_rstd + pos, x, ln1[0].value, ln1[1].value,
                         1, 1, C, f);
    k->linear_forward_stored_io(qkvr, ln1r, qkv[0].value, qkv[1].value, 1, C, 3 * Cl, f, g->dqkv,
                                g->dln);
    /* scratch: NHl * (pos + 1) scores, within datt */
    k->attention_decode(attyr, g->datt, b->qkv, pos + 1, Cl, g->NHl, f);
    k->linear_forward_stored(g->proj_out, attyr, proj[0].value, bias_here ? proj[1].value : NULL, 1,
                             Cl, C, f, g->dln);
    tp_sum(g, g->proj_out, (size_t)C);
    k->residual_forward(res2r, x, g->proj_out, (size_t)C, f);
    k->layernorm_forward(ln2r, b->ln2_mean + pos, b->ln2_rstd + pos, res2r, ln2[0].value,
                         ln2[1].value, 1, 1, C, f);
    k->linear_gelu_forward(fchr, gelur, ln2r, fc[0].value, fc[1].value, 1, C, Fl, f, g->dfch,
                           g->dln);
    k->linear_forward_stored(g->proj_out, gelur, fcp[0].value, bias_here ? fcp[1].value : NULL, 1,
                             Fl, C, f, g->dfch);
    tp_sum(g, g->proj_out, (size_t)C);
    k->residual_forward(row_of(b->res3, pos, C, f), res2r, g->proj_out, (size_t)C, f);
}

void tr_gpt_stage_decode(tr_model *m, const int32_t *tok, int pos)
{
    gpt *g = G(m);
    const tr_kernels *k = m->k;
    int C = g->cfg.C, f = m->precision;
    check_slot(m, 0, 1, pos + 1);
    if (g->sp_on)
        tr_fatal(TR_EXIT_SOFTWARE, "bug: decoding in sequence parallelism");
    if (g->recompute)
        tr_fatal(TR_EXIT_SOFTWARE, "bug: decoding without the activations of every block");
    g->pass[0].train = g->pass[0].marked = 0; /* no dropout */
    if (g->first) {
        tok = tr_model_upload(m, g->tok[0] ? g->tok[0] + pos : NULL, tok, sizeof *tok);
        /* position pos's row of wpe: the table from that row on, for a "sequence" of 1 */
        const float *wpe = P(m, g->wpe, 0)->value + (size_t)pos * C;
        if (g->tp == 1) {
            k->embedding_forward(g->proj_out, tok, P(m, g->wte, 0)->value, wpe, 1, 1, C, g->cfg.V);
        } else {
            k->embedding_shard_forward(g->proj_out, tok, P(m, g->wte, 0)->value,
                                       g->tp_rank == 0 ? wpe : NULL, 1, 1, C, g->v0, g->Vl);
            tp_sum(g, g->proj_out, (size_t)C);
        }
        k->narrow_stored(row_of(g->encoded[0], pos, C, f), g->proj_out, (size_t)C, f);
    }
    for (int i = 0; i < g->nl; i++)
        block_decode(m, i, pos);
    if (!g->last)
        return;
    const void *x = g->nl ? g->blk[(g->nl - 1) * g->slots].res3 : g->encoded[0];
    const tr_param *lnf = m->layers[g->lnf].params;
    void *lnfr = row_of(g->lnf_out[0], pos, C, f);
    k->layernorm_forward(lnfr, g->lnf_mean[0] + pos, g->lnf_rstd[0] + pos, row_of(x, pos, C, f),
                         lnf[0].value, lnf[1].value, 1, 1, C, f);
    k->lm_head_forward(row_of(g->logits[0], pos, g->Vl, g->lfmt), lnfr, P(m, g->head_wte, 0)->value,
                       1, C, g->Vl, f, g->lfmt, g->dln);
}

void *tr_gpt_stage_row(tr_model *m, void *stream, int row)
{
    return row_of(stream, (size_t)row, G(m)->cfg.C, m->precision);
}

/* Next-token accuracy: the argmax over the real vocabulary of each row (the kernel
 * finds it where the logits are; only the row maxima come to the host). */
static long count_correct(const tr_model *m, int slot, const int32_t *y, size_t BT)
{
    gpt *g = G(m);
    int32_t *idx = tr_alloc(BT * sizeof *idx, "accuracy");
    float *val = tr_alloc(2 * BT * sizeof *val, "accuracy");
    int n = g->tp == 1 ? g->cfg.V : g->nreal;
    if (m->dev->host_memory) {
        m->k->rows_argmax(idx, val, g->logits[slot], BT, g->Vl, n, m->precision, g->lfmt);
    } else {
        m->k->rows_argmax(g->amax, g->amax_val, g->logits[slot], BT, g->Vl, n, m->precision,
                          g->lfmt);
        m->dev->download(idx, g->amax, BT * sizeof *idx);
        m->dev->download(val, g->amax_val, BT * sizeof *val);
    }
    if (g->tp > 1) {
        /* split vocabulary: each rank's best (value, lowest index), then the best of
         * those; a rank without real rows offers -inf */
        for (size_t r = 0; r < BT; r++)
            idx[r] = g->v0 + idx[r];
        tr_allreduce(val, val + BT, BT, TR_F32, TR_MAX, g->cfg.layout.tp_group);
        for (size_t r = 0; r < BT; r++)
            if (val[r] != val[BT + r] || !g->nreal)
                idx[r] = INT32_MAX;
        tr_allreduce(idx, idx, BT, TR_I32, TR_MIN, g->cfg.layout.tp_group);
    }
    long ok = 0;
    for (size_t r = 0; r < BT; r++)
        ok += idx[r] == y[r];
    tr_free(idx);
    tr_free(val);
    return ok;
}

double tr_gpt_stage_loss(tr_model *m, int slot, const int32_t *y, int B, long *correct)
{
    gpt *g = G(m);
    const tr_kernels *k = m->k;
    const tr_gpt_config *c = &g->cfg;
    size_t BT = (size_t)B * c->T;
    const void *lg = g->logits[slot];
    if (correct)
        *correct = count_correct(m, slot, y, BT);
    const int32_t *yd = tr_model_upload(m, g->tgt[slot], y, BT * sizeof *y); /* for backward too */
    if (g->tp == 1)
        return k->xent_padded_forward(g->xstats[slot], g->losses, lg, yd, B, c->T, c->V, g->Vl,
                                      m->precision, g->lfmt);
    for (size_t r = 0; r < BT; r++)
        if (y[r] < 0 || y[r] >= c->V)
            tr_fatal(TR_EXIT_SOFTWARE, "cross-entropy: target %d at %zu is outside [0, %d)",
                     y[r], r, c->V);
    k->xent_shard_max(g->rowmax, lg, BT, g->Vl, g->nreal, m->precision, g->lfmt);
    tr_allreduce(g->rowmax, g->rowmax, BT, TR_F32, TR_MAX, c->layout.tp_group);
    k->xent_shard_sums(g->xsums, lg, g->rowmax, yd, BT, g->Vl, g->v0, g->nreal, m->precision,
                       g->lfmt);
    tr_allreduce(g->xsums, g->xsums, 2 * BT, TR_F64, TR_SUM, c->layout.tp_group);
    return k->xent_shard_finish(g->xstats[slot], g->losses, g->xsums, g->rowmax, BT);
}

static double gpt_forward(tr_model *m, const void *x, const int32_t *y, int B, long *correct)
{
    tr_gpt_stage_forward(m, 0, x, B, G(m)->cfg.T);
    return tr_gpt_stage_loss(m, 0, y, B, correct);
}

/* ---- backward ------------------------------------------------------------------ */

/* Local block i of slot s: g->dres holds the gradient of its output and gets the
 * gradient of its input. */
static void block_backward(tr_model *m, int i, int s, int B, int T)
{
    gpt *g = G(m);
    const tr_kernels *k = m->k;
    int C = g->cfg.C, BT = B * T, Cl = g->Cl, Fl = g->Fl;
    row_span r = pass_rows(g, (size_t)BT); /* this rank's rows of the stream and of dres */
    float *dln_part = g->dln + r.r0 * (size_t)C;
    const tr_layer *lay = &m->layers[blk_layer(g, i, 0)];
    const tr_param *ln1 = lay[LN1].params, *qkv = lay[QKV].params, *proj = lay[PROJ].params;
    const tr_param *ln2 = lay[LN2].params, *fc = lay[FC].params, *fcp = lay[FCPROJ].params;
    const void *x_in = block_input(g, i, s);
    block_acts b;
    if (g->recompute) { /* rebuild the block's activations from its input */
        b = g->work;
        block_forward(m, i, s, &b, x_in, B, T);
    } else {
        b = g->blk[i * g->slots + s];
    }
    /* MLP half: res3 = res2 + c_proj(gelu(c_fc(ln_2(res2)))) */
    /* mixed precision: activation gradients are of the format, rounded by the kernel
     * that stores them, or a product's (dln) by the kernels that read them; the
     * layernorms' input gradients add into dres (the residual's backward). The hidden
     * gradient lives in dfch, in the backend's form (transformer_kernels.h). */
    /* resid dropout: the projections' output gradients are dres through the same mask
     * (drawn again), in proj_out, which forward is done with (proj_grad) */
    tr_dropout d[SITES_PER_BLOCK];
    block_dropouts(g, s, i, T, r, d);
    const float *dproj = proj_grad(m, (size_t)BT, &d[SITE_MLP_RESID]);
    k->mlp_backward(g->dln, fc[0].grad, fc[1].grad, fcp[0].grad, fcp[1].grad, dproj,
                    ln_all_rows(m, b.ln2, (size_t)BT), b.fch, b.fch_gelu, fc[0].value, fcp[0].value,
                    BT, C, Fl, m->precision, g->dfch);
    tp_combine(g, g->dln, (size_t)BT);
    k->layernorm_backward(g->dres, ln2[0].grad, ln2[1].grad, dln_part, b.res2, ln2[0].value,
                          b.ln2_mean, b.ln2_rstd, 1, (int)r.n, C, m->precision, 1);
    /* attention half: res2 = x_in + c_proj(attn(c_attn(ln_1(x_in)))) */
    /* attention's tensors are stored in the format, its output gradient too (c_proj's
     * input gradient, in dfch, which the MLP's backward has freed; dln is the CPU's
     * fp32 scratch for it), and so is dqkv, whose widening to fp32 on the CPU goes to
     * dfch again once attention's backward is done with it */
    dproj = proj_grad(m, (size_t)BT, &d[SITE_ATTN_RESID]);
    k->linear_backward_stored_dinp(g->dfch, proj[0].grad, proj[1].grad, dproj, b.atty,
                                   proj[0].value, BT, Cl, C, m->precision, g->dln);
    k->attention_backward(g->dqkv, g->datt, g->dfch, b.atty, b.qkv, b.att, B, T, Cl, g->NHl,
                          m->precision, &d[SITE_ATTN]);
    k->linear_backward_stored_dout(g->dln, qkv[0].grad, qkv[1].grad, g->dqkv,
                                   ln_all_rows(m, b.ln1, (size_t)BT), qkv[0].value, BT, C, 3 * Cl,
                                   m->precision, g->dfch);
    tp_combine(g, g->dln, (size_t)BT);
    k->layernorm_backward(g->dres, ln1[0].grad, ln1[1].grad, dln_part, x_in, ln1[0].value,
                          b.ln1_mean, b.ln1_rstd, 1, (int)r.n, C, m->precision, 1);
}

void tr_gpt_stage_backward(tr_model *m, int slot, const int32_t *tok, const int32_t *y, int B,
                           float loss_scale, tr_grads_ready_fn ready, void *ctx)
{
    gpt *g = G(m);
    const tr_kernels *k = m->k;
    const tr_gpt_config *c = &g->cfg;
    int C = c->C, T = c->T, BT = B * T;
    check_slot(m, slot, B, T);
    if (!m->dev->host_memory) /* what this slot's forward and loss uploaded */
        tok = g->tok[slot], y = g->tgt[slot];
    row_span r = pass_rows(g, (size_t)BT);
    int last_backward = ready != NULL; /* the step's (gpt.h) */
    if (g->last) {
        const tr_param *wte = P(m, g->head_wte, 0);
        /* the whole vocabulary: v0 0, its V real columns of Vl */
        int v0 = g->tp == 1 ? 0 : g->v0, nreal = g->tp == 1 ? c->V : g->nreal;
        k->xent_linear_backward(g->dln, wte->grad, g->logits[slot], g->xstats[slot], y,
                                loss_scale, (size_t)BT, g->Vl, v0, nreal, g->lnf_out[slot],
                                wte->value, C, m->precision, g->lfmt);
        tp_combine(g, g->dln, (size_t)BT);
        const tr_param *lnf = m->layers[g->lnf].params;
        const void *x_last =
            g->nl ? g->blk[(g->nl - 1) * g->slots + slot].res3 : g->encoded[slot];
        k->layernorm_backward(g->dres, lnf[0].grad, lnf[1].grad, g->dln + r.r0 * C, x_last,
                              lnf[0].value, g->lnf_mean[slot], g->lnf_rstd[slot], 1, (int)r.n, C,
                              m->precision, 0);
        sum_replica_grads(m, g->lnf, last_backward);
        if (ready)
            ready(ctx, lnf[0].offset);
    }
    /* g->dres is the gradient of the residual stream, walking down */
    for (int i = g->nl - 1; i >= 0; i--) {
        block_backward(m, i, slot, B, T);
        sum_replica_grads(m, blk_layer(g, i, LN1), last_backward);
        sum_replica_grads(m, blk_layer(g, i, LN2), last_backward);
        if (ready)
            ready(ctx, m->layers[blk_layer(g, i, LN1)].params[0].offset);
    }
    if (g->first) {
        const tr_param *wte = P(m, g->wte, 0), *wpe = P(m, g->wpe, 0);
        /* the embeddings' gradient through forward's mask, of every row */
        tr_dropout d =
            site_dropout_from(g, slot, 0, c->embd_pdrop, (uint64_t)T * C, (uint64_t)r.r0 * C);
        const float *demb = proj_grad(m, (size_t)BT, &d);
        /* the shard entry at tp 1 too (the whole vocabulary: v0 0, V rows), without
         * embedding_backward's check of the tokens, which this slot's forward made of
         * these very tokens: on a GPU, a host wait fewer a step */
        int whole = g->tp == 1;
        k->embedding_shard_backward(wte->grad, wpe->grad, demb, tok, B, T, C, whole ? 0 : g->v0,
                                    whole ? c->V : g->Vl);
        if (ready)
            ready(ctx, 0);
    }
}

static void gpt_backward(tr_model *m, const void *xv, const int32_t *y, int B, float loss_scale,
                         tr_grads_ready_fn ready, void *ctx)
{
    tr_gpt_stage_backward(m, 0, xv, y, B, loss_scale, ready, ctx);
}

void *tr_gpt_stage_input(tr_model *m, int slot) { return G(m)->encoded[slot]; }

size_t tr_gpt_stage_rows(const tr_model *m, int B, int T)
{
    return pass_rows(G(m), (size_t)B * (size_t)T).n;
}

int tr_gpt_sequence_parallel(tr_model *m, int on)
{
    gpt *g = G(m);
    int was = g->sp_on;
    g->sp_on = g->sp && on;
    return was;
}
void *tr_gpt_stage_output(tr_model *m, int slot)
{
    gpt *g = G(m);
    return g->blk[(g->nl - 1) * g->slots + slot].res3;
}
float *tr_gpt_stage_grad(tr_model *m) { return G(m)->dres; }

void tr_gpt_stage_logits(tr_model *m, int row, float *full, int *v0, int *Vl)
{
    gpt *g = G(m);
    *v0 = g->v0;
    *Vl = g->Vl;
    size_t bytes = tr_stored_bytes(g->lfmt), n = (size_t)g->Vl;
    void *raw = full + g->v0;
    m->dev->download(raw, (const char *)g->logits[0] + (size_t)row * n * bytes, n * bytes);
    /* read as values of the format, as the loss reads them; 16-bit logits widened in
     * place from the end (float j covers 16-bit values 2j and 2j + 1, read by then) */
    for (size_t j = n; j-- > 0;)
        full[g->v0 + j] = tr_stored_load_as(raw, j, g->lfmt, m->precision);
}

void tr_gpt_tied_range(const tr_model *m, size_t *lo, size_t *hi)
{
    const gpt *g = G(m);
    int l = g->first ? g->wte : g->head_wte;
    *lo = *hi = 0;
    if (l >= 0) {
        *lo = m->layers[l].params[0].offset;
        *hi = *lo + m->layers[l].params[0].numel;
    }
}

/* Model FLOPs per sample (sequence) of a training step, PaLM's convention (Chowdhery
 * et al. 2022, appendix B): 6 N per token for the N weights of the matrix products
 * (the tied head V x C included, embeddings lookups and biases not) plus 12 L C T per
 * token for attention's two T x T products, forward and backward, without halving
 * for the causal mask. Recomputation is not counted: it is model FLOPs. The whole
 * model's, whatever part of it this rank holds. */
static double gpt_train_flops(const tr_model *m)
{
    const tr_gpt_config *c = &G(m)->cfg;
    double C = c->C, L = c->L, T = c->T;
    double N = L * 12.0 * C * C + (double)c->V * C;
    return T * (6.0 * N + 12.0 * L * C * T);
}

/* A block's four products (its qkv, attention and MLP projections, this rank's share
 * of each) where the stage has blocks, and the head's where it holds it: the head of
 * a tied vocabulary, [Vl, C], is the largest (OpenBLAS packs its weight gradient's
 * Vl rows, train_memory.c). */
static int gpt_linear_shapes(const tr_model *m, tr_linear_shape *s, int max)
{
    const gpt *g = G(m);
    int T = g->cfg.T, C = g->cfg.C, n = 0;
    const tr_linear_shape all[5] = {
        {T, C, 3 * g->Cl}, {T, g->Cl, C}, {T, C, g->Fl}, {T, g->Fl, C}, {T, C, g->Vl}};
    for (int i = g->nl > 0 ? 0 : 4; i < (g->last ? 5 : 4) && n < max; i++)
        s[n++] = all[i];
    return n;
}

static const tr_model_hooks gpt_hooks = {
    .buffers = gpt_buffers,
    .forward = gpt_forward,
    .backward = gpt_backward,
    .train_flops = gpt_train_flops,
    .free = gpt_free,
    .linear_shapes = gpt_linear_shapes,
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
    tr_model_layout *lo = &g->cfg.layout;
    lo->tp = lo->tp > 1 ? lo->tp : 1;
    lo->pp = lo->pp > 1 ? lo->pp : 1;
    lo->slots = lo->slots > 1 ? lo->slots : 1;
    g->tp = lo->tp, g->tp_rank = lo->tp_rank;
    g->slots = lo->slots, g->recompute = lo->recompute;
    g->sp = g->sp_on = lo->sequence_parallel && g->tp > 1;
    /* the vocabulary split evenly: pad to a multiple of vocab_pad x tp */
    int pad = cfg->vocab_pad * g->tp;
    g->cfg.Vp = (cfg->V + pad - 1) / pad * pad;
    g->Cl = cfg->C / g->tp, g->NHl = cfg->NH / g->tp, g->Fl = 4 * cfg->C / g->tp;
    g->Vl = g->cfg.Vp / g->tp, g->v0 = g->tp_rank * g->Vl;
    g->nreal = cfg->V - g->v0 < 0 ? 0 : (cfg->V - g->v0 < g->Vl ? cfg->V - g->v0 : g->Vl);
    g->first = lo->pp_rank == 0, g->last = lo->pp_rank == lo->pp - 1;
    tr_gpt_stage_blocks(&g->cfg, lo->pp, lo->pp_rank, &g->l0, &g->nl);
    g->blk = calloc((size_t)g->nl * g->slots + 1, sizeof *g->blk);
    size_t S = (size_t)g->slots;
    g->encoded = calloc(S, sizeof(void *));
    g->lnf_out = calloc(S, sizeof(void *));
    g->lnf_mean = calloc(S, sizeof(float *));
    g->lnf_rstd = calloc(S, sizeof(float *));
    g->logits = calloc(S, sizeof(void *));
    g->xstats = calloc(S, sizeof(float *));
    g->tok = calloc(S, sizeof(int32_t *));
    g->tgt = calloc(S, sizeof(int32_t *));
    g->pass = calloc(S, sizeof *g->pass);
    g->sp_parts = calloc(2 * (size_t)g->tp, sizeof *g->sp_parts);
    if (!g->sp_parts || !g->blk || !g->encoded || !g->lnf_out || !g->lnf_mean || !g->lnf_rstd ||
        !g->logits || !g->xstats || !g->tok || !g->tgt || !g->pass)
        tr_fatal(TR_EXIT_OSERR, "out of memory");
    m->impl = g;
    m->hooks = &gpt_hooks;
    m->split = 1;
    m->input_tokens = 1;
    m->targets_per_sample = cfg->T;
    m->input = (tr_shape){cfg->T, 1, 1};
    build_layers(m, g);
    m->classes = cfg->V;
    return 0;
}

static int build_from_deck(tr_model *m, const tr_deck *d, tr_shape input,
                           const tr_model_layout *layout, char *err, size_t errlen)
{
    (void)input;
    tr_gpt_config c = {
        .L = (int)tr_deck_int(d, "model", "n_layer"),
        .NH = (int)tr_deck_int(d, "model", "n_head"),
        .C = (int)tr_deck_int(d, "model", "n_embd"),
        .T = (int)tr_deck_int(d, "model", "seq_len"),
        .V = (int)tr_deck_int(d, "model", "vocab_size"),
        .vocab_pad = (int)tr_deck_int(d, "model", "vocab_pad"),
        .embd_pdrop = (float)tr_deck_float(d, "model", "embd_pdrop"),
        .attn_pdrop = (float)tr_deck_float(d, "model", "attn_pdrop"),
        .resid_pdrop = (float)tr_deck_float(d, "model", "resid_pdrop"),
        .seed = (uint64_t)tr_deck_int(d, "train", "seed"),
        .layout = *layout,
    };
    /* the deck's split, for its own pp (--layouts plans the others by cost) */
    if (layout->split) {
        c.nstage_blocks = layout->pp > 1 ? layout->pp : 1;
        memcpy(c.stage_blocks, layout->split, (size_t)c.nstage_blocks * sizeof *c.stage_blocks);
    } else if (!layout->cost_split)
        c.nstage_blocks =
            tr_deck_intlist(d, "parallel", "stage_blocks", c.stage_blocks, TR_GPT_MAX_STAGES);
    /* a GPU's limit, found here rather than at the first forward pass after set-up
     * (and by --plan, which allocates nothing) */
    if (!strcmp(tr_deck_str(d, "system", "device"), "cuda") && c.NH > 0 && c.C % c.NH == 0 &&
        c.C / c.NH > TR_CUDA_MAX_HEAD_SIZE) {
        int nh = c.NH;
        while (c.C % nh || c.C / nh > TR_CUDA_MAX_HEAD_SIZE)
            nh++;
        snprintf(err, errlen,
                 "[model] n_head = %d makes heads of %d (n_embd / n_head), above the %d the "
                 "GPU's fused attention takes: use n_head = %d or more (dividing n_embd = %d), "
                 "or [system] device = cpu",
                 c.NH, c.C / c.NH, TR_CUDA_MAX_HEAD_SIZE, nh, c.C);
        return TR_EXIT_USAGE;
    }
    return tr_gpt_build(m, &c, err, errlen);
}

const tr_model_def tr_model_gpt = {
    "gpt",
    "GPT-2 style transformer: n_layer pre-LN blocks, tied head; sizes from [model] n_layer, "
    "n_head, n_embd, seq_len, vocab_size",
    build_from_deck};

/* ---- generation ---------------------------------------------------------------- */

int tr_gpt_sample_pass(const tr_model *m, int n, int *cached)
{
    const gpt *g = G(m);
    if (tr_gpt_can_decode(m) && *cached == n - 1 && n <= g->cfg.T) {
        *cached = n;
        return TR_SAMPLE_DECODE;
    }
    /* a full window: positions 0..n-1 (cached from now on) until it slides */
    *cached = n <= g->cfg.T ? n : -1;
    return TR_SAMPLE_FORWARD;
}

int tr_gpt_generate(tr_model *m, int32_t *tokens, int n_prompt, int n_total,
                    const tr_sampling *s)
{
    gpt *g = G(m);
    const tr_gpt_config *c = &g->cfg;
    if (m->max_batch < 1)
        tr_fatal(TR_EXIT_SOFTWARE, "bug: generation before the model is allocated");
    if (g->tp > 1 || c->layout.pp > 1)
        tr_fatal(TR_EXIT_SOFTWARE, "bug: tr_gpt_generate on a rank that holds part of the "
                 "model; the trainer generates through its stages");
    float *full = tr_alloc((size_t)g->Vl * sizeof *full, "sample logits");
    int cached = 0; /* tokens [0, cached) are in slot 0's keys and values */
    for (int n = n_prompt; n < n_total; n++) {
        tr_watchdog_beat("a sampled token", -1);
        int ctx = n < c->T ? n : c->T, row = ctx - 1; /* the newest seq_len tokens */
        if (tr_gpt_sample_pass(m, n, &cached) == TR_SAMPLE_DECODE)
            tr_gpt_stage_decode(m, tokens + row, row);
        else
            tr_gpt_stage_forward(m, 0, tokens + n - ctx, 1, ctx);
        int v0, Vl;
        tr_gpt_stage_logits(m, row, full, &v0, &Vl);
        tokens[n] = tr_pick_token(full, c->V, s, (uint64_t)n);
    }
    tr_free(full);
    return n_total;
}
