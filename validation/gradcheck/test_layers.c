/* test_layers.c: finite-difference gradient checks of every layer of src/nn, of the
 * softmax cross-entropy, and of a small conv -> relu -> maxpool -> linear -> xent
 * stack, on the CPU kernels with 2 OpenMP threads; plus the gradient rules:
 * parameter gradients accumulate, activation gradients overwrite, dinp may be NULL.
 *
 * Loss for a single layer: L = sum(out * R) for a fixed random R, so dL/dout = R.
 *
 * Choice of eps and tolerance (float32 forward, loss summed in double):
 *  - linear and conv are exactly bilinear in (input, parameters), so the central
 *    difference has no truncation error at any eps; the only error is float rounding
 *    of the outputs, about 1e-6 in L, divided by 2 eps. A large eps (0.25) makes
 *    that ~2e-6, far below the 1e-2 tolerance.
 *  - relu and maxpool are piecewise linear: inputs are distinct values 0.05 apart and
 *    at least 0.025 from zero (fd_fill_distinct), so eps = 1e-2 never crosses a kink
 *    and the difference is again exact up to rounding.
 *  - softmax cross-entropy is smooth: truncation error is eps^2/6 |L'''| ~ 2e-5 at
 *    eps = 1e-2, rounding (1e-7 of L ~ 2) / 2 eps ~ 2e-5; both well below 1e-2.
 *  - the stack is smooth except at relu/maxpool kinks. Elements whose perturbation
 *    flips a relu sign or a pooling winner are detected and skipped; a larger eps
 *    crosses more kinks (28% of the input elements at 3e-2), a smaller one raises the
 *    rounding noise, which here is larger: logits of magnitude ~5 come out of 27- and
 *    36-term float sums, so L carries ~5e-7 of noise, 2.5e-5 in the derivative at
 *    eps = 1e-2 (measured: error ~ 1/eps from 3e-2 down to 1e-3, i.e. noise, not
 *    truncation). Hence eps = 1e-2, a 5e-3 floor (absolute tolerance 5e-5, twice the
 *    noise), and up to 30% skipped: perturbing one conv weight or bias moves a whole
 *    channel of pre-activations, and any one of them may sit within eps of zero.
 * Relative error |a - n| / max(floor, |a| + |n|) < 1e-2, floor 1e-3 for single
 * layers: a wrong index or a missing term gives errors of order 1, a transposed
 * weight far more, while every rounding source above stays below 1e-3 (measured
 * worst: 3e-4). The floor turns the test absolute (1e-5) for gradients near zero,
 * where |a| + |n| says nothing about the backward's quality. */
#include "backend/cpu_backend.h"
#include "core/error.h"
#include "fd_check.h"
#include "nn/layer.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define FLOOR 1e-3
#define TOL 1e-2
#define STACK_EPS 1e-2f
#define STACK_FLOOR 5e-3
#define STACK_MAX_SKIP 0.3

static float *falloc(size_t n, const char *what) { return tr_alloc(n * sizeof(float), what); }

/* ---- one layer under L = sum(out * R) ------------------------------------------- */

typedef struct rig {
    tr_layer l;
    const tr_kernels *k;
    int B;
    size_t nin, nout;
    float *in, *out, *R, *din;
} rig;

static void rig_init(rig *r, tr_layer l, int B, int distinct, uint64_t stream)
{
    memset(r, 0, sizeof *r);
    r->l = l;
    r->k = &tr_cpu_kernels;
    r->B = B;
    r->nin = (size_t)B * tr_shape_numel(l.in);
    r->nout = (size_t)B * tr_shape_numel(l.out);
    r->in = falloc(r->nin, "test input");
    r->out = falloc(r->nout, "test output");
    r->R = falloc(r->nout, "test R");
    r->din = falloc(r->nin, "test dinp");
    for (int i = 0; i < l.nparams; i++) {
        tr_param *p = &r->l.params[i];
        p->value = falloc(p->numel, "test param");
        p->grad = falloc(p->numel, "test grad");
        fd_fill_uniform(p->value, p->numel, -1.0f, 1.0f, stream + 10 + (uint64_t)i);
    }
    if (l.saved_ints_per_sample)
        r->l.saved = tr_alloc((size_t)B * l.saved_ints_per_sample * sizeof(int), "test saved");
    if (l.scratch_for) {
        r->l.scratch_floats = l.scratch_for(&r->l, r->k, B);
        r->l.scratch = falloc(r->l.scratch_floats, "test scratch");
    }
    if (distinct)
        fd_fill_distinct(r->in, r->nin, 0.05f, stream);
    else
        fd_fill_uniform(r->in, r->nin, -1.0f, 1.0f, stream);
    fd_fill_uniform(r->R, r->nout, -1.0f, 1.0f, stream + 1);
}

static void rig_free(rig *r)
{
    tr_free(r->in);
    tr_free(r->out);
    tr_free(r->R);
    tr_free(r->din);
    for (int i = 0; i < r->l.nparams; i++) {
        tr_free(r->l.params[i].value);
        tr_free(r->l.params[i].grad);
    }
    tr_free(r->l.saved);
    tr_free(r->l.scratch);
}

static double rig_loss(void *ctx)
{
    rig *r = ctx;
    r->l.ops->forward(&r->l, r->k, r->out, r->in, r->B);
    double L = 0.0;
    for (size_t i = 0; i < r->nout; i++)
        L += (double)r->out[i] * r->R[i];
    return L;
}

static void rig_zero_grads(rig *r)
{
    for (int i = 0; i < r->l.nparams; i++)
        memset(r->l.params[i].grad, 0, r->l.params[i].numel * sizeof(float));
}

static void rig_backward(rig *r, float *din)
{
    r->l.ops->backward(&r->l, r->k, din, r->R, r->in, r->out, r->B);
}

/* The full check of one layer: gradients by finite differences, then the rules. */
static void check_layer(const char *name, rig *r, float eps)
{
    printf("%s (%s, B=%d):\n", name, r->l.ops->kind, r->B);
    fd_problem prob = {.loss = rig_loss, .ctx = r};
    char what[96];

    rig_loss(r);
    rig_zero_grads(r);
    for (size_t i = 0; i < r->nin; i++)
        r->din[i] = 1e30f; /* activation gradients overwrite: no stale value survives */
    rig_backward(r, r->din);
    float *din = falloc(r->nin, "analytic din");
    memcpy(din, r->din, r->nin * sizeof(float));
    float *g[TR_LAYER_MAX_PARAMS] = {0};
    for (int i = 0; i < r->l.nparams; i++) {
        g[i] = falloc(r->l.params[i].numel, "analytic grad");
        memcpy(g[i], r->l.params[i].grad, r->l.params[i].numel * sizeof(float));
    }

    snprintf(what, sizeof what, "%s d/dinput", name);
    FD_CHECK_TENSOR(what, fd_check(&prob, r->in, din, r->nin, eps, FLOOR, TOL), 0.0);
    for (int i = 0; i < r->l.nparams; i++) {
        tr_param *p = &r->l.params[i];
        snprintf(what, sizeof what, "%s d/d%s", name, p->name);
        FD_CHECK_TENSOR(what, fd_check(&prob, p->value, g[i], p->numel, eps, FLOOR, TOL), 0.0);
    }

    /* parameter gradients accumulate: two backward passes give twice one */
    rig_loss(r);
    rig_zero_grads(r);
    rig_backward(r, r->din);
    rig_backward(r, r->din);
    for (int i = 0; i < r->l.nparams; i++) {
        tr_param *p = &r->l.params[i];
        double worst = 0.0;
        for (size_t j = 0; j < p->numel; j++) {
            double e = fabs(p->grad[j] - 2.0 * g[i][j]) / (fabs(2.0 * g[i][j]) + 1e-6);
            worst = e > worst ? e : worst;
        }
        CHECK(worst < 1e-5, "%s: %s gradient does not accumulate: worst rel err %.3g", name,
              p->name, worst);
    }
    /* dinp == NULL: allowed, and the parameter gradients are unchanged */
    rig_zero_grads(r);
    rig_backward(r, NULL);
    for (int i = 0; i < r->l.nparams; i++) {
        tr_param *p = &r->l.params[i];
        CHECK(memcmp(p->grad, g[i], p->numel * sizeof(float)) == 0,
              "%s: %s gradient differs when dinp is NULL", name, p->name);
    }
    tr_free(din);
    for (int i = 0; i < r->l.nparams; i++)
        tr_free(g[i]);
}

/* ---- softmax cross-entropy ------------------------------------------------------ */

typedef struct xent_rig {
    int B, V;
    float *logits, *probs, *losses, *dlogits;
    int *labels;
    double loss_sum;
    long correct;
} xent_rig;

static double xent_loss(void *ctx)
{
    xent_rig *x = ctx;
    tr_cpu_kernels.softmax_xent_forward(x->probs, x->losses, x->logits, x->labels, x->B, x->V,
                                        &x->loss_sum, &x->correct);
    return x->loss_sum / x->B; /* the mean: backward with scale 1/B */
}

static void test_xent(void)
{
    printf("softmax cross-entropy:\n");
    xent_rig x = {.B = 4, .V = 6};
    size_t n = (size_t)x.B * x.V;
    x.logits = falloc(n, "logits");
    x.probs = falloc(n, "probs");
    x.losses = falloc((size_t)x.B, "losses");
    x.dlogits = falloc(n, "dlogits");
    x.labels = tr_alloc((size_t)x.B * sizeof(int), "labels");
    fd_fill_uniform(x.logits, n, -2.0f, 2.0f, 300);
    int labels[4] = {0, 5, 2, 2};
    memcpy(x.labels, labels, sizeof labels);

    xent_loss(&x);
    /* forward values against a double computation */
    long correct = 0;
    double sum = 0.0, worst = 0.0;
    for (int b = 0; b < x.B; b++) {
        const float *z = x.logits + (size_t)b * x.V;
        double mx = z[0], s = 0.0, psum = 0.0;
        int am = 0;
        for (int j = 1; j < x.V; j++)
            if (z[j] > z[am])
                am = j, mx = z[j];
        for (int j = 0; j < x.V; j++)
            s += exp(z[j] - mx);
        double loss = log(s) + mx - z[x.labels[b]];
        for (int j = 0; j < x.V; j++) {
            double e = fabs(x.probs[(size_t)b * x.V + j] - exp(z[j] - mx) / s);
            worst = e > worst ? e : worst;
            psum += x.probs[(size_t)b * x.V + j];
        }
        worst = fabs(x.losses[b] - loss) > worst ? fabs(x.losses[b] - loss) : worst;
        CHECK(fabs(psum - 1.0) < 1e-6, "probs of row %d sum to %.9f", b, psum);
        sum += loss;
        correct += am == x.labels[b];
    }
    CHECK(worst < 1e-6, "softmax/xent values off by %.3g", worst);
    CHECK(fabs(x.loss_sum - sum) < 1e-5, "loss_sum %.9f, expected %.9f", x.loss_sum, sum);
    CHECK(x.correct == correct, "correct %ld, expected %ld", x.correct, correct);

    tr_cpu_kernels.softmax_xent_backward(x.dlogits, x.probs, x.labels, 1.0f / x.B, x.B, x.V);
    fd_problem prob = {.loss = xent_loss, .ctx = &x};
    FD_CHECK_TENSOR("xent d/dlogits", fd_check(&prob, x.logits, x.dlogits, n, 1e-2f, FLOOR, TOL),
                    0.0);

    /* huge logits: subtracting the max keeps everything finite */
    for (size_t i = 0; i < n; i++)
        x.logits[i] += 1000.0f;
    x.logits[1] = 2000.0f; /* sample 0, class 1 wins by 1000: its label 0 costs ~1000 */
    xent_loss(&x);
    int finite = isfinite(x.loss_sum);
    for (size_t i = 0; i < n; i++)
        finite &= isfinite(x.probs[i]);
    CHECK(finite, "softmax/xent not finite for logits near 1000");
    CHECK(fabs(x.losses[0] - (2000.0 - x.logits[0])) < 1e-2,
          "loss of a 1000-margin miss is %g, expected %g", x.losses[0], 2000.0 - x.logits[0]);

    tr_free(x.logits);
    tr_free(x.probs);
    tr_free(x.losses);
    tr_free(x.dlogits);
    tr_free(x.labels);
}

/* ---- conv -> relu -> maxpool -> linear -> xent ---------------------------------- */

enum { NL = 4 };

typedef struct stack {
    rig r[NL]; /* the rigs own each layer's buffers; r[i].in is unused past layer 0 */
    float *act[NL];
    xent_rig x;
    float *mask0;    /* relu sign pattern at the unperturbed point */
    int *argmax0;    /* pooling winners at the unperturbed point */
    int kink;
} stack;

static double stack_loss(void *ctx)
{
    stack *s = ctx;
    const float *in = s->r[0].in;
    for (int i = 0; i < NL; i++) {
        s->r[i].l.ops->forward(&s->r[i].l, s->r[i].k, s->act[i], in, s->r[i].B);
        in = s->act[i];
    }
    s->x.logits = s->act[NL - 1];
    double L = xent_loss(&s->x);
    if (s->mask0) { /* compare the piecewise-linear choices with the unperturbed ones */
        s->kink = 0;
        for (size_t i = 0; i < s->r[1].nout; i++)
            s->kink |= (s->act[0][i] > 0.0f) != (s->mask0[i] > 0.0f);
        size_t na = (size_t)s->r[2].B * s->r[2].l.saved_ints_per_sample;
        s->kink |= memcmp(s->argmax0, s->r[2].l.saved, na * sizeof(int)) != 0;
    }
    return L;
}

static int stack_kinked(void *ctx) { return ((stack *)ctx)->kink; }

static void test_stack(void)
{
    printf("stack conv(3->4, k3, pad1) relu maxpool2 linear(36->5) xent:\n");
    const int B = 3;
    stack s;
    memset(&s, 0, sizeof s);
    tr_shape in = {3, 6, 6};
    tr_layer ls[NL];
    ls[0] = tr_conv2d_make("conv", in, 4, 3, 1);
    ls[1] = tr_relu_make("relu", ls[0].out);
    ls[2] = tr_maxpool_make("pool", ls[1].out, 2);
    ls[3] = tr_linear_make("fc", (int)tr_shape_numel(ls[2].out), 5);
    for (int i = 0; i < NL; i++) {
        rig_init(&s.r[i], ls[i], B, 0, 400 + 20 * (uint64_t)i);
        s.act[i] = s.r[i].out;
    }
    int labels[3] = {1, 4, 0};
    s.x = (xent_rig){.B = B, .V = 5};
    s.x.probs = falloc((size_t)B * 5, "probs");
    s.x.losses = falloc((size_t)B, "losses");
    s.x.dlogits = falloc((size_t)B * 5, "dlogits");
    s.x.labels = tr_alloc(sizeof labels, "labels");
    memcpy(s.x.labels, labels, sizeof labels);

    /* analytic: back through the stack, dinp of layer i into the din of rig i */
    stack_loss(&s);
    for (int i = 0; i < NL; i++)
        rig_zero_grads(&s.r[i]);
    tr_cpu_kernels.softmax_xent_backward(s.x.dlogits, s.x.probs, s.x.labels, 1.0f / B, B, 5);
    const float *dout = s.x.dlogits;
    for (int i = NL - 1; i >= 0; i--) {
        const float *lin = i ? s.act[i - 1] : s.r[0].in;
        s.r[i].l.ops->backward(&s.r[i].l, s.r[i].k, s.r[i].din, dout, lin, s.act[i], B);
        dout = s.r[i].din;
    }
    s.mask0 = falloc(s.r[0].nout, "relu mask");
    memcpy(s.mask0, s.act[0], s.r[0].nout * sizeof(float));
    size_t na = (size_t)B * s.r[2].l.saved_ints_per_sample;
    s.argmax0 = tr_alloc(na * sizeof(int), "argmax copy");
    memcpy(s.argmax0, s.r[2].l.saved, na * sizeof(int));

    fd_problem prob = {.loss = stack_loss, .kinked = stack_kinked, .ctx = &s};
    FD_CHECK_TENSOR("stack d/dinput",
                    fd_check(&prob, s.r[0].in, s.r[0].din, s.r[0].nin, STACK_EPS, STACK_FLOOR,
                             TOL),
                    STACK_MAX_SKIP);
    int layers_with_params[2] = {0, 3};
    for (int t = 0; t < 2; t++) {
        tr_layer *l = &s.r[layers_with_params[t]].l;
        for (int i = 0; i < l->nparams; i++) {
            char what[96];
            snprintf(what, sizeof what, "stack d/d%s.%s", l->name, l->params[i].name);
            FD_CHECK_TENSOR(what, fd_check(&prob, l->params[i].value, l->params[i].grad,
                                           l->params[i].numel, STACK_EPS, STACK_FLOOR, TOL),
                            STACK_MAX_SKIP);
        }
    }
    for (int i = 0; i < NL; i++)
        rig_free(&s.r[i]);
    tr_free(s.mask0);
    tr_free(s.argmax0);
    tr_free(s.x.probs);
    tr_free(s.x.losses);
    tr_free(s.x.dlogits);
    tr_free(s.x.labels);
}

/* ---- constructors --------------------------------------------------------------- */

static void test_shapes(void)
{
    tr_layer l = tr_linear_make("fc1", 784, 256);
    CHECK(l.nparams == 2 && l.params[0].dims[0] == 256 && l.params[0].dims[1] == 784 &&
              l.params[0].numel == 784 * 256 && l.params[0].fan_in == 784 &&
              l.params[0].decay == 1 && l.params[1].numel == 256 && l.params[1].decay == 0 &&
              l.params[1].fan_in == 784 && l.params[0].init == TR_INIT_FANIN_UNIFORM,
          "linear parameter specs");
    CHECK(strcmp(l.name, "fc1") == 0 && strcmp(l.params[0].name, "weight") == 0 &&
              strcmp(l.params[1].name, "bias") == 0,
          "linear names");
    l = tr_conv2d_make("conv1", (tr_shape){1, 28, 28}, 8, 5, 2);
    CHECK(l.out.c == 8 && l.out.h == 28 && l.out.w == 28 && l.params[0].ndim == 4 &&
              l.params[0].dims[3] == 5 && l.params[0].fan_in == 25 && l.params[1].fan_in == 25 &&
              l.params[0].numel == 200 && l.scratch_for != NULL,
          "conv2d shapes and specs");
    l = tr_maxpool_make("pool1", (tr_shape){8, 7, 7}, 2);
    CHECK(l.out.c == 8 && l.out.h == 3 && l.out.w == 3 && l.saved_ints_per_sample == 72 &&
              l.nparams == 0,
          "maxpool shape");
    l = tr_relu_make("relu1", (tr_shape){8, 7, 7});
    CHECK(l.out.c == 8 && l.out.h == 7 && l.out.w == 7 && l.nparams == 0, "relu shape");
}

int main(void)
{
    tr_cpu_backend_init(2);
    test_shapes();

    rig r;
    rig_init(&r, tr_linear_make("linear", 7, 5), 3, 0, 100);
    check_layer("linear", &r, 0.25f);
    rig_free(&r);

    rig_init(&r, tr_conv2d_make("conv", (tr_shape){3, 6, 6}, 4, 3, 0), 2, 0, 120);
    check_layer("conv k3 pad0", &r, 0.25f);
    rig_free(&r);
    rig_init(&r, tr_conv2d_make("conv", (tr_shape){3, 6, 6}, 2, 5, 2), 3, 0, 140);
    check_layer("conv k5 pad2", &r, 0.25f);
    rig_free(&r);
    rig_init(&r, tr_conv2d_make("conv", (tr_shape){3, 6, 6}, 2, 3, 2), 2, 0, 160);
    check_layer("conv k3 pad2", &r, 0.25f);
    rig_free(&r);
    rig_init(&r, tr_conv2d_make("conv", (tr_shape){3, 5, 4}, 3, 1, 0), 2, 0, 180);
    check_layer("conv k1 pad0", &r, 0.25f);
    rig_free(&r);
    /* the shapes above (few channels) take the direct path with samples in vector
     * lanes; this one fills more than one group of 8 samples, whose gradient sums are
     * added at the end */
    rig_init(&r, tr_conv2d_make("conv", (tr_shape){2, 10, 10}, 16, 5, 2), 11, 0, 200);
    tr_conv_shape cs = {.B = 11, .cin = 2, .h = 10, .w = 10, .cout = 16, .k = 5, .pad = 2,
                        .ho = 10, .wo = 10};
    CHECK(tr_cpu_conv_path(&cs) == TR_CONV_DIRECT, "conv gradcheck misses the direct path");
    check_layer("conv k5 pad2 B=11 direct, two lane groups", &r, 0.25f);
    rig_free(&r);
    /* many input channels: im2col + GEMM, samples in turn (little work) and samples in
     * parallel with per-thread gradient partials. Sums of 150-180 terms over 2048
     * outputs carry more rounding noise in L; the layer is bilinear, so a larger eps
     * (1) divides that noise down without any truncation error. */
    rig_init(&r, tr_conv2d_make("conv", (tr_shape){17, 5, 4}, 3, 3, 1), 2, 0, 210);
    cs = (tr_conv_shape){.B = 2, .cin = 17, .h = 5, .w = 4, .cout = 3, .k = 3, .pad = 1,
                         .ho = 5, .wo = 4};
    CHECK(tr_cpu_conv_path(&cs) == TR_CONV_GEMM_SERIAL, "conv gradcheck misses the serial "
          "GEMM path");
    check_layer("conv cin 17 k3 pad1 B=2 im2col serial", &r, 1.0f);
    rig_free(&r);
    rig_init(&r, tr_conv2d_make("conv", (tr_shape){20, 8, 8}, 8, 3, 1), 4, 0, 230);
    cs = (tr_conv_shape){.B = 4, .cin = 20, .h = 8, .w = 8, .cout = 8, .k = 3, .pad = 1,
                         .ho = 8, .wo = 8};
    CHECK(tr_cpu_conv_path(&cs) == TR_CONV_GEMM_SAMPLES, "conv gradcheck misses the "
          "sample-parallel GEMM path");
    check_layer("conv cin 20 k3 pad1 B=4 im2col sample-parallel", &r, 1.0f);
    rig_free(&r);

    rig_init(&r, tr_maxpool_make("pool", (tr_shape){3, 6, 6}, 2), 2, 1, 220);
    check_layer("maxpool k2", &r, 1e-2f);
    rig_free(&r);
    rig_init(&r, tr_maxpool_make("pool", (tr_shape){2, 7, 7}, 3), 2, 1, 240);
    check_layer("maxpool k3 on 7x7", &r, 1e-2f);
    rig_free(&r);

    rig_init(&r, tr_relu_make("relu", (tr_shape){3, 6, 6}), 2, 1, 260);
    check_layer("relu", &r, 1e-2f);
    rig_free(&r);

    test_xent();
    test_stack();
    return tr_test_finish();
}
