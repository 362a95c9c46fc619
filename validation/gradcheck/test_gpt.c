/* test_gpt.c: the GPT model as a whole (models/gpt.c) on the CPU backend with 2
 * threads: a finite-difference check of the gradient of every parameter of every
 * tensor through the full network (embeddings, two blocks of layernorm, attention,
 * MLP and residuals, the final layernorm and the tied, padded head), plus what the
 * training loop relies on: padded vocabulary rows get no gradient, the
 * gradients-ready offsets walk down to 0, micro-batches add up to the whole batch,
 * GPT-2's initialisation (loss near ln V at step 0, N(0, 0.02) weights, residual
 * projections scaled by 1/sqrt(2 L), LayerNorm gains 1), the checkpoint-facing
 * shapes, and greedy generation being deterministic. The check runs twice: without
 * dropout, and with dropout 0.3 at every site (embeddings, attention's probabilities,
 * both residual projections) in training passes, where the masks are fixed by (seed,
 * step, global row), so the loss is a smooth function of the parameters and the same
 * finite differences judge the masked backward; there the micro-batches are rows 5
 * and 6 of a global batch, and must add up to the batch of rows 5..6, and an
 * evaluation forward (no training pass) must give the plain model's loss.
 *
 * Tiny model: L=2, NH=2, C=8, T=5, V=11 padded to Vp=16, batch B=2. For the check
 * the parameters are redrawn from U(-0.5, 0.5) (LayerNorm gains from U(0.5, 1.5)) so
 * every nonlinearity is exercised away from its near-linear start. Loss: the sum of
 * the B*T token losses (backward scale 1).
 *
 * Eps and tolerance: the error measure of test_transformer.c,
 * |a - n| / max(2e-2, |a| + |n|) < 1e-2 (1 % relative above 2e-2, 2e-4 absolute
 * below: twice that file's floor, for the noise of a whole network), and the
 * numeric derivative is a
 * Richardson extrapolation of central differences at eps 2e-2 and 1e-2. Measured
 * with a single eps, through the whole float32 network no eps served: at 3e-3 the
 * loss's rounding (~3e-6 on a sum of 10 token losses) gave derivative noise ~2e-4;
 * at 3e-2 the curvature of layernorm and softmax gave truncation errors of the
 * same size; at 1e-2 a few elements of 2000 still missed by 1.5-2.5 %. The
 * extrapolation cancels the eps^2 term, so a large eps (small noise) is accurate:
 * measured worst absolute differences ~1.1e-4, on gradients of ~3e-3, where only
 * the floor can judge them. A bug (a wrong index, a missing term, a transpose)
 * gives relative errors of order 1 on the large gradients. */
#include "backend/cpu_backend.h"
#include "backend/lowp_math.h" /* TR_PREC_BF16 */
#include "core/error.h"
#include "fd_check.h"
#include "models/gpt.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define EPS 2e-2f
#define FLOOR 2e-2
#define TOL 1e-2
enum { B = 2, T = 5, V = 11, C = 8, NH = 2, L = 2, PAD = 8 };

/* the training pass of the dropout case: step 3, rows 5.. of the global batch */
enum { DROP_STEP = 3, DROP_ROW0 = 5 };

typedef struct ctx {
    tr_model *m;
    int train; /* mark each forward a training pass (dropout) */
    int32_t tok[B * T], tgt[B * T];
} ctx;

static double loss_fn(void *p)
{
    ctx *c = p;
    if (c->train)
        tr_gpt_stage_train(c->m, 0, DROP_STEP, DROP_ROW0);
    return tr_model_forward(c->m, c->tok, c->tgt, B, NULL);
}

/* fd_check with Richardson extrapolation: D(h) and D(h/2) are central differences,
 * (4 D(h/2) - D(h)) / 3 cancels their h^2 truncation term. Through a whole network
 * of float32 a single eps is either too large (curvature of layernorm and softmax)
 * or too small (rounding of a loss summed over every position); extrapolating
 * from a large one gets both small. Same error measure as fd_check. */
static fd_result fd_check_richardson(const fd_problem *p, float *x, const float *analytic,
                                     size_t n, float eps, double floor_, double tol)
{
    fd_result r = {.n = n};
    for (size_t i = 0; i < n; i++) {
        float save = x[i];
        double d[2];
        for (int k = 0; k < 2; k++) {
            float h = k ? eps / 2 : eps, xp = save + h, xm = save - h;
            x[i] = xp;
            double lp = p->loss(p->ctx);
            x[i] = xm;
            double lm = p->loss(p->ctx);
            d[k] = (lp - lm) / ((double)xp - (double)xm);
        }
        x[i] = save;
        double num = (4 * d[1] - d[0]) / 3, a = analytic[i];
        double den = fabs(a) + fabs(num);
        double err = fabs(a - num) / (den > floor_ ? den : floor_);
        if (!(err < tol))
            r.failed++;
        if (!(err <= r.worst)) {
            r.worst = err, r.worst_at = i, r.worst_a = a, r.worst_n = num;
        }
    }
    p->loss(p->ctx);
    return r;
}

static void build(tr_model *m, float pdrop)
{
    memset(m, 0, sizeof *m);
    m->name = "gpt";
    tr_gpt_config cfg = {.L = L, .NH = NH, .C = C, .T = T, .V = V, .vocab_pad = PAD,
                         .embd_pdrop = pdrop, .attn_pdrop = pdrop, .resid_pdrop = pdrop,
                         .seed = 77};
    char err[256];
    CHECK(tr_gpt_build(m, &cfg, err, sizeof err) == 0, "build: %s", err);
    tr_model_allocate(m, &tr_cpu_device, B);
}

typedef struct ready_log {
    size_t lo[64];
    int n;
} ready_log;
static void on_ready(void *p, size_t lo)
{
    ready_log *r = p;
    if (r->n < 64)
        r->lo[r->n++] = lo;
}

static void test_gradients(float pdrop)
{
    printf("gradients, dropout %.1f\n", (double)pdrop);
    tr_model m;
    build(&m, pdrop);
    ctx c = {.m = &m, .train = pdrop > 0};
    for (int i = 0; i < B * T; i++) {
        c.tok[i] = (int32_t)(tr_rng_u64(7, 1, (uint64_t)i) % V);
        c.tgt[i] = (int32_t)(tr_rng_u64(7, 2, (uint64_t)i) % V);
    }
    /* parameters away from their near-linear start */
    for (int t = 0; t < m.ntensors; t++) {
        tr_param *p = m.tensors[t];
        size_t logical = p->ndim == 2 ? (size_t)p->dims[0] * p->dims[1] : (size_t)p->dims[0];
        if (p->init == TR_INIT_ONES)
            fd_fill_uniform(p->value, logical, 0.5f, 1.5f, 100 + (uint64_t)t);
        else
            fd_fill_uniform(p->value, logical, -0.5f, 0.5f, 100 + (uint64_t)t);
    }
    memset(m.grads, 0, m.nparams * sizeof(float));
    double train_loss = loss_fn(&c);
    ready_log rl = {.n = 0};
    tr_model_backward(&m, c.tok, c.tgt, B, 1.0f, on_ready, &rl);
    float *analytic = tr_alloc(m.nparams * sizeof(float), "test");
    memcpy(analytic, m.grads, m.nparams * sizeof(float));

    /* the ready offsets: ln_f, then each block from the top, then the embeddings */
    int ok = rl.n == L + 2 && rl.lo[rl.n - 1] == 0;
    for (int i = 1; i < rl.n; i++)
        ok &= rl.lo[i] < rl.lo[i - 1];
    CHECK(ok, "gradients-ready offsets must strictly decrease to 0 (%d calls)", rl.n);

    /* padded rows of the tied embedding: no gradient */
    tr_param *wte = m.tensors[0];
    int zero = 1;
    for (size_t j = (size_t)V * C; j < wte->numel; j++)
        zero &= analytic[wte->offset + j] == 0.0f;
    CHECK(zero && wte->numel == (size_t)16 * C, "padded wte rows (%zu floats) get no gradient",
          wte->numel - (size_t)V * C);

    fd_problem p = {loss_fn, NULL, &c};
    for (int t = 0; t < m.ntensors; t++) {
        tr_param *pr = m.tensors[t];
        size_t logical = pr->ndim == 2 ? (size_t)pr->dims[0] * pr->dims[1] : (size_t)pr->dims[0];
        char what[96];
        /* the owning layer's name: tensors are in layer order, up to 2 per layer */
        const char *lname = "?";
        for (int l = 0; l < m.nlayers; l++)
            for (int q = 0; q < m.layers[l].nparams; q++)
                if (&m.layers[l].params[q] == pr)
                    lname = m.layers[l].name;
        snprintf(what, sizeof what, "%s/%s", lname, pr->name);
        FD_CHECK_TENSOR(what,
                        fd_check_richardson(&p, pr->value, analytic + pr->offset, logical, EPS,
                                            FLOOR, TOL),
                        0.0);
    }

    /* micro-batches: two backward passes of one sample each add up to the batch's (with
     * dropout: the sample's own global row, whose masks they are) */
    memset(m.grads, 0, m.nparams * sizeof(float));
    for (int b = 0; b < B; b++) {
        if (c.train)
            tr_gpt_stage_train(&m, 0, DROP_STEP, DROP_ROW0 + b);
        tr_model_forward(&m, c.tok + b * T, c.tgt + b * T, 1, NULL);
        tr_model_backward(&m, c.tok + b * T, c.tgt + b * T, 1, 1.0f, NULL, NULL);
    }
    /* relative to the largest gradient: some are zero in exact arithmetic (the key
     * bias cannot change a softmax) and only rounding is left of them */
    double diff = 0, big = 0;
    for (size_t j = 0; j < m.nparams; j++) {
        double d = fabs((double)m.grads[j] - analytic[j]);
        diff = d > diff ? d : diff;
        big = fabs(analytic[j]) > big ? fabs(analytic[j]) : big;
    }
    CHECK(diff <= 1e-5 * big, "two micro-batches of 1 vs one batch of 2: max diff %.3g, "
          "largest gradient %.3g", diff, big);
    printf("  micro-batches vs batch: max difference %.2e of the largest gradient\n",
           diff / big);
    if (c.train) { /* an unmarked forward evaluates: no dropout, the plain model's loss */
        double eval = tr_model_forward(&m, c.tok, c.tgt, B, NULL);
        tr_model plain;
        build(&plain, 0.0f);
        memcpy(plain.params, m.params, m.nparams * sizeof(float));
        double want = tr_model_forward(&plain, c.tok, c.tgt, B, NULL);
        CHECK(eval == want, "evaluation with dropout configured: loss %.9g, the plain model's "
              "%.9g", eval, want);
        CHECK(fabs(train_loss - eval) > 1e-3 * fabs(eval), "a training pass drops: loss %.6g, "
              "evaluation %.6g", train_loss, eval);
        printf("  training pass loss %.6f, evaluation %.6f (the plain model's)\n", train_loss,
               eval);
        tr_model_free(&plain);
    }
    tr_free(analytic);
    tr_model_free(&m);
}

static void test_init_and_generation(void)
{
    tr_model m;
    build(&m, 0.0f);
    tr_model_init_params(&m, 42, NULL);
    ctx c = {.m = &m};
    for (int i = 0; i < B * T; i++) {
        c.tok[i] = (int32_t)(tr_rng_u64(8, 1, (uint64_t)i) % V);
        c.tgt[i] = (int32_t)(tr_rng_u64(8, 2, (uint64_t)i) % V);
    }
    double loss = tr_model_forward(&m, c.tok, c.tgt, B, NULL) / (B * T);
    CHECK(fabs(loss - log((double)V)) < 0.05, "initial loss %.4f, expected about ln V = %.4f",
          loss, log((double)V));
    /* shapes and init statistics, by name */
    int found = 0;
    for (int l = 0; l < m.nlayers; l++) {
        const tr_layer *ly = &m.layers[l];
        const tr_param *w = &ly->params[0];
        size_t n = w->ndim == 2 ? (size_t)w->dims[0] * w->dims[1] : (size_t)w->dims[0];
        double s = 0, s2 = 0;
        for (size_t j = 0; j < n; j++)
            s += w->value[j], s2 += (double)w->value[j] * w->value[j];
        double sd = sqrt(s2 / n - (s / n) * (s / n));
        if (!strcmp(ly->name, "h.1/mlp/c_proj")) {
            found++;
            CHECK(w->dims[0] == C && w->dims[1] == 4 * C, "c_proj weight is [C, 4C]");
            double want = 0.02 / sqrt(2.0 * L);
            CHECK(fabs(sd - want) < 0.25 * want, "h.1/mlp/c_proj std %.4f, want %.4f", sd, want);
        } else if (!strcmp(ly->name, "h.0/attn/c_attn")) {
            found++;
            CHECK(w->dims[0] == 3 * C && w->dims[1] == C, "c_attn weight is [3C, C]");
            CHECK(fabs(sd - 0.02) < 0.005, "c_attn std %.4f, want 0.02", sd);
            CHECK(ly->params[1].value[0] == 0 && !ly->params[1].decay, "biases 0, no decay");
        } else if (!strcmp(ly->name, "ln_f")) {
            found++;
            CHECK(w->value[0] == 1.0f && !w->decay, "layernorm gain 1, no decay");
        } else if (!strcmp(ly->name, "wte")) {
            found++;
            CHECK(w->dims[0] == V && w->dims[1] == C && w->decay, "wte [V, C], decayed");
            CHECK(w->value[(size_t)V * C] == 0.0f, "padded rows start at zero");
        }
    }
    CHECK(found == 4, "layers named as GPT-2's checkpoints (found %d of 4)", found);

    int32_t a[12] = {1, 2, 3}, b[12] = {1, 2, 3};
    tr_sampling greedy = {1, 1.0f, 1.0f, 1, 0}, top4 = {4, 1.0f, 1.0f, 9, 0};
    tr_gpt_generate(&m, a, 3, 12, &greedy);
    tr_gpt_generate(&m, b, 3, 12, &greedy);
    CHECK(!memcmp(a, b, sizeof a), "greedy generation is deterministic");
    int inrange = 1;
    for (int i = 0; i < 12; i++)
        inrange &= a[i] >= 0 && a[i] < V;
    CHECK(inrange, "generated tokens lie in [0, V): padded logits never win");
    tr_gpt_generate(&m, b, 3, 12, &top4);
    inrange = 1;
    for (int i = 0; i < 12; i++)
        inrange &= b[i] >= 0 && b[i] < V;
    CHECK(inrange, "top-k generation stays in [0, V)");
    tr_model_free(&m);
}

/* Sampling's key-value cache (tr_gpt_stage_decode): after a forward over the first
 * k tokens of a sequence, decoding tokens k..T-1 one at a time gives each position's
 * logits as a forward over the tokens up to it does, in fp32 and with bf16 storage,
 * from k = 0 (no cache) and from k = 2; and generation with the cache picks what a
 * forward per token picks. Attention gives the forward's bits (test_transformer.c);
 * the products of one row are other BLAS calls than those of T rows, which may sum
 * in another order: measured 3e-6 relative in fp32 here, 0 with bf16 storage (the
 * rounding hides it). */
static void test_decode(int format)
{
    printf("decode with a key-value cache (%s)\n", format ? "bf16 storage" : "fp32");
    tr_model m;
    memset(&m, 0, sizeof m);
    m.name = "gpt";
    tr_gpt_config cfg = {.L = L, .NH = NH, .C = C, .T = T, .V = V, .vocab_pad = PAD, .seed = 77};
    char err[256];
    CHECK(tr_gpt_build(&m, &cfg, err, sizeof err) == 0, "build: %s", err);
    m.precision = format;
    tr_model_allocate(&m, &tr_cpu_device, B);
    tr_model_init_params(&m, 43, NULL);
    for (int t = 0; t < m.ntensors; t++) { /* logits far from ties */
        tr_param *p = m.tensors[t];
        size_t n = p->ndim == 2 ? (size_t)p->dims[0] * p->dims[1] : (size_t)p->dims[0];
        fd_fill_uniform(p->value, n, -0.5f, 0.5f, 200 + (uint64_t)t);
    }
    int32_t tok[T];
    for (int i = 0; i < T; i++)
        tok[i] = (int32_t)(tr_rng_u64(44, 1, (uint64_t)i) % V);
    float want[T][16], got[16];
    int v0, Vl;
    for (int pos = 0; pos < T; pos++) {
        tr_gpt_stage_forward(&m, 0, tok, 1, pos + 1);
        tr_gpt_stage_logits(&m, pos, want[pos], &v0, &Vl);
    }
    CHECK(tr_gpt_can_decode(&m), "the model keeps every block's activations");
    for (int k = 0; k <= 2; k += 2) {
        if (k)
            tr_gpt_stage_forward(&m, 0, tok, 1, k);
        double worst = 0;
        for (int pos = k; pos < T; pos++) {
            tr_gpt_stage_decode(&m, tok + pos, pos);
            tr_gpt_stage_logits(&m, pos, got, &v0, &Vl);
            for (int v = 0; v < V; v++) {
                double d = fabs((double)got[v] - want[pos][v]) / (fabs(want[pos][v]) + 1e-3);
                worst = d > worst ? d : worst;
            }
        }
        printf("  from %d cached tokens: largest relative difference %.3g\n", k, worst);
        CHECK(worst <= 1e-5, "decoded logits after %d cached tokens: %.3g from the forward's", k,
              worst);
    }
    /* generation: the cache's picks against a forward per token, prompt 1 and 3 */
    tr_sampling greedy = {1, 1.0f, 1.0f, 1, 0};
    for (int np = 1; np <= 3; np += 2) {
        int32_t a[T] = {1, 2, 3}, b[T];
        tr_gpt_generate(&m, a, np, T, &greedy);
        memcpy(b, a, sizeof b);
        for (int n = np; n < T; n++) { /* what generation did before the cache */
            tr_gpt_stage_forward(&m, 0, b, 1, n);
            tr_gpt_stage_logits(&m, n - 1, got, &v0, &Vl);
            b[n] = tr_pick_token(got, V, &greedy, (uint64_t)n);
        }
        CHECK(!memcmp(a, b, sizeof a),
              "generation from %d prompt tokens: the cache picks as a "
              "forward per token does",
              np);
    }
    tr_model_free(&m);
}

int main(void)
{
    tr_cpu_backend_init(2);
    test_gradients(0.0f);
    test_gradients(0.3f);
    test_init_and_generation();
    test_decode(0);
    test_decode(TR_PREC_BF16);
    return tr_test_finish();
}
