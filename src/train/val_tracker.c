/* val_tracker.c: the lowest validation loss so far (val_tracker.h). */
#include "val_tracker.h"

#include <math.h>

void tr_val_tracker_init(tr_val_tracker *t, const tr_deck *d)
{
    t->best_loss = 0;
    t->best_step = 0;
    t->evals_since_best = 0;
    t->patience = tr_deck_int(d, "train", "early_stop");
}

int tr_val_tracker_update(tr_val_tracker *t, long step, double loss)
{
    if (!t->best_step ? !isnan(loss) : loss < t->best_loss) {
        t->best_loss = loss;
        t->best_step = step;
        t->evals_since_best = 0;
        return 1;
    }
    t->evals_since_best++;
    return 0;
}

int tr_val_tracker_exhausted(const tr_val_tracker *t)
{
    return t->patience > 0 && t->evals_since_best >= t->patience;
}
