/* relu.c: the rectifier, out = max(in, 0), element-wise over any shape.
 *
 * Backward reads the saved output rather than the input: out > 0 exactly where
 * in > 0, and the output is what the model keeps anyway. */
#include "nn/layer.h"
#include "core/error.h"

#include <stdio.h>
#include <string.h>

static void relu_forward(tr_layer *l, const tr_kernels *k, float *out, const float *in, int B)
{
    k->relu_forward(out, in, (size_t)B * tr_shape_numel(l->in));
}

static void relu_backward(tr_layer *l, const tr_kernels *k, float *din, const float *dout,
                          const float *in, const float *out, int B)
{
    if (din) /* no parameters: nothing to do when the input needs no gradient */
        k->relu_backward(din, dout, out, (size_t)B * tr_shape_numel(l->in));
}

static const tr_layer_ops relu_ops = {
    .kind = "relu",
    .forward = relu_forward,
    .backward = relu_backward,
};

tr_layer tr_relu_make(const char *name, tr_shape in)
{
    tr_layer l;
    memset(&l, 0, sizeof l);
    l.ops = &relu_ops;
    if (snprintf(l.name, sizeof l.name, "%s", name) >= (int)sizeof l.name)
        tr_fatal(TR_EXIT_SOFTWARE, "layer name '%s' is longer than %zu characters", name,
                 sizeof l.name - 1);
    l.in = in;
    l.out = in;
    return l;
}
