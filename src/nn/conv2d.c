/* conv2d.c: 2-D convolution, stride 1, square kernel, symmetric zero padding
 * (PyTorch's nn.Conv2d(cin, cout, k, padding=pad)).
 *
 * The layer only describes shapes; the backend does the work and says how much
 * scratch it needs (im2col buffers and per-thread gradient partials), which the
 * model allocates once for its largest batch. */
#include "nn/layer.h"
#include "core/error.h"

#include <stdio.h>
#include <string.h>

static tr_conv_shape conv_shape(const tr_layer *l, int B)
{
    return (tr_conv_shape){.B = B, .cin = l->in.c, .h = l->in.h, .w = l->in.w,
                           .cout = l->out.c, .k = l->ksize, .pad = l->pad,
                           .ho = l->out.h, .wo = l->out.w};
}

static size_t conv_scratch_for(const tr_layer *l, const tr_kernels *k, int B)
{
    tr_conv_shape s = conv_shape(l, B);
    return k->conv_scratch_floats(&s);
}

static void conv_forward(tr_layer *l, const tr_kernels *k, float *out, const float *in, int B)
{
    tr_conv_shape s = conv_shape(l, B);
    k->conv2d_forward(out, in, l->params[0].value, l->params[1].value, &s, l->scratch);
}

static void conv_backward(tr_layer *l, const tr_kernels *k, float *din, const float *dout,
                          const float *in, const float *out, int B)
{
    tr_conv_shape s = conv_shape(l, B);
    k->conv2d_backward(din, l->params[0].grad, l->params[1].grad, dout, in,
                       l->params[0].value, &s, l->scratch);
}

static const tr_layer_ops conv_ops = {
    .kind = "conv2d",
    .forward = conv_forward,
    .backward = conv_backward,
};

tr_layer tr_conv2d_make(const char *name, tr_shape in, int out_channels, int ksize, int pad)
{
    int ho = in.h + 2 * pad - ksize + 1, wo = in.w + 2 * pad - ksize + 1;
    if (in.c < 1 || out_channels < 1 || ksize < 1 || pad < 0 || ho < 1 || wo < 1)
        tr_fatal(TR_EXIT_USAGE, "layer %s: conv %d -> %d channels, %dx%d kernel, padding %d "
                 "on a %dx%d input gives no output", name, in.c, out_channels, ksize, ksize,
                 pad, in.h, in.w);
    tr_layer l;
    memset(&l, 0, sizeof l);
    l.ops = &conv_ops;
    if (snprintf(l.name, sizeof l.name, "%s", name) >= (int)sizeof l.name)
        tr_fatal(TR_EXIT_SOFTWARE, "layer name '%s' is longer than %zu characters", name,
                 sizeof l.name - 1);
    l.in = in;
    l.out = (tr_shape){out_channels, ho, wo};
    l.ksize = ksize;
    l.pad = pad;
    l.scratch_for = conv_scratch_for;
    /* PyTorch's default nn.Conv2d init: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), both tensors */
    int fan_in = in.c * ksize * ksize;
    l.nparams = 2;
    l.params[0] = (tr_param){.name = "weight", .ndim = 4,
                             .dims = {out_channels, in.c, ksize, ksize},
                             .numel = (size_t)out_channels * fan_in,
                             .init = TR_INIT_FANIN_UNIFORM, .fan_in = fan_in, .decay = 1};
    l.params[1] = (tr_param){.name = "bias", .ndim = 1, .dims = {out_channels},
                             .numel = (size_t)out_channels, .init = TR_INIT_FANIN_UNIFORM,
                             .fan_in = fan_in, .decay = 0};
    return l;
}
