/* linear.c: the fully connected layer, out = in W^T + b (PyTorch's nn.Linear).
 *
 * The input is taken flat: a [c, h, w] activation from a convolution feeds a linear
 * layer of in_features = c h w without a copy, since both are row-major per sample. */
#include "nn/layer.h"
#include "core/error.h"

#include <stdio.h>
#include <string.h>

static void linear_forward(tr_layer *l, const tr_kernels *k, float *out, const float *in, int B)
{
    k->linear_forward(out, in, l->params[0].value, l->params[1].value, B, l->in.c, l->out.c);
}

static void linear_backward(tr_layer *l, const tr_kernels *k, float *din, const float *dout,
                            const float *in, const float *out, int B)
{
    k->linear_backward(din, l->params[0].grad, l->params[1].grad, dout, in, l->params[0].value,
                       B, l->in.c, l->out.c);
}

static const tr_layer_ops linear_ops = {
    .kind = "linear",
    .forward = linear_forward,
    .backward = linear_backward,
};

tr_layer tr_linear_make(const char *name, int in_features, int out_features)
{
    if (in_features < 1 || out_features < 1)
        tr_fatal(TR_EXIT_USAGE, "layer %s: linear %d -> %d features: both must be >= 1", name,
                 in_features, out_features);
    tr_layer l;
    memset(&l, 0, sizeof l);
    l.ops = &linear_ops;
    if (snprintf(l.name, sizeof l.name, "%s", name) >= (int)sizeof l.name)
        tr_fatal(TR_EXIT_SOFTWARE, "layer name '%s' is longer than %zu characters", name,
                 sizeof l.name - 1);
    l.in = (tr_shape){in_features, 1, 1};
    l.out = (tr_shape){out_features, 1, 1};
    /* PyTorch's default nn.Linear init: both tensors U(-1/sqrt(in), 1/sqrt(in)) */
    l.nparams = 2;
    l.params[0] = (tr_param){.name = "weight", .ndim = 2, .dims = {out_features, in_features},
                             .numel = (size_t)out_features * in_features,
                             .init = TR_INIT_FANIN_UNIFORM, .fan_in = in_features, .decay = 1};
    l.params[1] = (tr_param){.name = "bias", .ndim = 1, .dims = {out_features},
                             .numel = (size_t)out_features, .init = TR_INIT_FANIN_UNIFORM,
                             .fan_in = in_features, .decay = 0};
    return l;
}
