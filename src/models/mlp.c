/* mlp.c: the multi-layer perceptron: linear + ReLU per hidden width, then a linear
 * classifier. Widths come from [model] hidden (default 784-256-256-10). */
#include "model.h"
#include "core/error.h"

#include <stdio.h>

static int build_mlp(tr_model *m, const tr_deck *d, tr_shape input,
                     const tr_model_layout *layout, char *err, size_t errlen)
{
    (void)layout; /* data parallel only: the trainer refuses tp and pp for it */
    int hidden[9];
    int n = tr_deck_intlist(d, "model", "hidden", hidden, 9); /* 9: one too many */
    if (n > 8) {
        snprintf(err, errlen,
                 "[model] hidden lists more than 8 widths; the mlp takes at most 8 "
                 "hidden layers");
        return TR_EXIT_USAGE;
    }
    int width = (int)tr_shape_numel(input);
    char name[32];
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof name, "fc%d", i + 1);
        tr_model_add(m, tr_linear_make(name, width, hidden[i]));
        snprintf(name, sizeof name, "relu%d", i + 1);
        tr_model_add(m, tr_relu_make(name, (tr_shape){hidden[i], 1, 1}));
        width = hidden[i];
    }
    snprintf(name, sizeof name, "fc%d", n + 1);
    tr_model_add(m, tr_linear_make(name, width, (int)tr_deck_int(d, "model", "classes")));
    return 0;
}

const tr_model_def tr_model_mlp = {
    "mlp", "multi-layer perceptron, ReLU; widths from [model] hidden (784-256-256-10)",
    build_mlp};
