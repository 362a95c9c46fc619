/* cnn.c: the LeNet-5 style convolutional network:
 * conv 1->6 5x5 pad 2, ReLU, maxpool 2; conv 6->16 5x5, ReLU, maxpool 2;
 * fc 400->120, ReLU; fc 120->84, ReLU; fc 84->classes. */
#include "model.h"
#include "core/error.h"

#include <stdio.h>

static int build_cnn(tr_model *m, const tr_deck *d, tr_shape input,
                     const tr_model_layout *layout, char *err, size_t errlen)
{
    (void)layout; /* data parallel only: the trainer refuses tp and pp for it */
    if (input.h != 28 || input.w != 28) {
        snprintf(err, errlen,
                 "model cnn expects 28x28 images (MNIST layout), the data has %dx%dx%d", input.c,
                 input.h, input.w);
        return TR_EXIT_USAGE;
    }
    tr_layer c1 = tr_conv2d_make("conv1", input, 6, 5, 2);
    tr_model_add(m, c1);
    tr_model_add(m, tr_relu_make("relu1", c1.out));
    tr_layer p1 = tr_maxpool_make("pool1", c1.out, 2);
    tr_model_add(m, p1);
    tr_layer c2 = tr_conv2d_make("conv2", p1.out, 16, 5, 0);
    tr_model_add(m, c2);
    tr_model_add(m, tr_relu_make("relu2", c2.out));
    tr_layer p2 = tr_maxpool_make("pool2", c2.out, 2);
    tr_model_add(m, p2);
    int flat = (int)tr_shape_numel(p2.out); /* 16 x 5 x 5 = 400 */
    tr_model_add(m, tr_linear_make("fc1", flat, 120));
    tr_model_add(m, tr_relu_make("relu3", (tr_shape){120, 1, 1}));
    tr_model_add(m, tr_linear_make("fc2", 120, 84));
    tr_model_add(m, tr_relu_make("relu4", (tr_shape){84, 1, 1}));
    tr_model_add(m, tr_linear_make("fc3", 84, (int)tr_deck_int(d, "model", "classes")));
    return 0;
}

const tr_model_def tr_model_cnn = {
    "cnn", "LeNet-5 style: 2 x (conv 5x5, ReLU, maxpool 2), fc 400-120-84-classes", build_cnn};
