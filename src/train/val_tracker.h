/* val_tracker.h: the lowest validation loss so far, for checkpoint.best (keep that
 * model in best.h5) and train.early_stop (end training when it stops falling), as
 * PyTorch Lightning's ModelCheckpoint(monitor="val_loss") and EarlyStopping(patience)
 * do. Saved in every checkpoint and restored by a resume, so a preempted run keeps
 * the same best model and stops at the same step as one that never stopped. */
#ifndef TR_VAL_TRACKER_H
#define TR_VAL_TRACKER_H

#include "core/deck.h"

typedef struct tr_val_tracker {
    double best_loss;      /* the lowest validation loss of an evaluation so far */
    long best_step;        /* the step of that evaluation; 0 before the first (each
                              evaluation follows a training step) */
    long evals_since_best; /* evaluations since then that did not lower it */
    long patience;         /* train.early_stop: stop after this many (0 = never) */
} tr_val_tracker;

void tr_val_tracker_init(tr_val_tracker *t, const tr_deck *d);
/* An evaluation at `step` gave `loss`. Returns 1 when it is the lowest so far
 * (strictly; a NaN never is), else 0 and counts it against the patience. */
int tr_val_tracker_update(tr_val_tracker *t, long step, double loss);
/* Whether train.early_stop's patience has run out. */
int tr_val_tracker_exhausted(const tr_val_tracker *t);

#endif
