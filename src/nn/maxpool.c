/* maxpool.c: k x k max pooling with stride k and no padding (PyTorch's
 * nn.MaxPool2d(k)); a trailing row or column that does not fill a window is dropped.
 *
 * Forward saves, per output, the index of the winning input within its plane (the
 * model provides saved_ints_per_sample ints per sample); backward routes each
 * output gradient to that input and gives every other input zero. */
#include "nn/layer.h"
#include "core/error.h"

#include <stdio.h>
#include <string.h>

static void maxpool_forward(tr_layer *l, const tr_kernels *k, float *out, const float *in,
                            int B)
{
    k->maxpool_forward(out, l->saved, in, B, l->in.c, l->in.h, l->in.w, l->ksize);
}

static void maxpool_backward(tr_layer *l, const tr_kernels *k, float *din, const float *dout,
                             const float *in, const float *out, int B)
{
    if (din)
        k->maxpool_backward(din, dout, l->saved, B, l->in.c, l->in.h, l->in.w, l->ksize);
}

static const tr_layer_ops maxpool_ops = {
    .kind = "maxpool",
    .forward = maxpool_forward,
    .backward = maxpool_backward,
};

tr_layer tr_maxpool_make(const char *name, tr_shape in, int ksize)
{
    if (ksize < 1 || in.h < ksize || in.w < ksize)
        tr_fatal(TR_EXIT_USAGE, "layer %s: %dx%d max pooling of a %dx%d input: the window "
                 "must be >= 1 and fit in the input", name, ksize, ksize, in.h, in.w);
    tr_layer l;
    memset(&l, 0, sizeof l);
    l.ops = &maxpool_ops;
    if (snprintf(l.name, sizeof l.name, "%s", name) >= (int)sizeof l.name)
        tr_fatal(TR_EXIT_SOFTWARE, "layer name '%s' is longer than %zu characters", name,
                 sizeof l.name - 1);
    l.in = in;
    l.out = (tr_shape){in.c, in.h / ksize, in.w / ksize};
    l.ksize = ksize;
    l.saved_ints_per_sample = tr_shape_numel(l.out);
    return l;
}
