/* loss_scale.c: dynamic loss scaling for fp16-mixed (see loss_scale.h). */
#include "loss_scale.h"

#include <string.h>

void tr_loss_scale_init(tr_loss_scale *s, const tr_deck *d)
{
    memset(s, 0, sizeof *s);
    s->scale = 1.0;
    s->window = tr_deck_int(d, "train", "loss_scale_window");
    if (strcmp(tr_deck_str(d, "train", "precision"), "fp16-mixed"))
        return;
    double fixed = tr_deck_float(d, "train", "loss_scale");
    s->dynamic = fixed == 0;
    s->scale = s->dynamic ? TR_LOSS_SCALE_INIT : fixed;
}

int tr_loss_scale_update(tr_loss_scale *s, int finite)
{
    if (!s->dynamic)
        return 1; /* a fixed scale (or none) never skips: tr_run_train_step stops the run instead */
    if (!finite) {
        s->skipped++;
        s->good = 0;
        if (s->scale > TR_LOSS_SCALE_MIN)
            s->scale *= 0.5;
        return 0;
    }
    if (++s->good >= s->window) {
        s->good = 0;
        s->scale *= 2.0;
    }
    return 1;
}
