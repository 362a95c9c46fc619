/* loss_scale.h: the loss scale of mixed precision, and when a step is skipped.
 *
 * fp16 holds magnitudes from 2^-24 to 65504: small gradients underflow to zero
 * unless the loss, and with it every gradient, is multiplied by a scale first.
 * Dynamic scaling (PyTorch's GradScaler, Megatron's DynamicGradScaler) starts high;
 * a step whose gradients overflowed (inf or NaN anywhere, on any rank) is skipped
 * and the scale halved; after `window` good steps in a row it doubles. Powers of
 * two, so scaling and unscaling are exact. fp32 and bf16 (fp32's range) use 1. */
#ifndef TR_LOSS_SCALE_H
#define TR_LOSS_SCALE_H

#include "core/deck.h"

typedef struct tr_loss_scale {
    int dynamic;
    double scale;  /* multiplies the loss; the gradients come out multiplied by it */
    long window;   /* good steps in a row before doubling */
    long good;     /* good steps since the scale last changed */
    long skipped;  /* steps skipped over the whole run (the optimizer's step count is
                      the step number less these) */
} tr_loss_scale;

#define TR_LOSS_SCALE_INIT 65536.0
#define TR_LOSS_SCALE_MIN 1.0 /* below it overflow is not the loss scale's doing */

void tr_loss_scale_init(tr_loss_scale *s, const tr_deck *d);
/* After a step's gradients are reduced: finite says whether every rank's were.
 * Returns 1 when the step goes on, 0 when it is skipped (the scale then halved). */
int tr_loss_scale_update(tr_loss_scale *s, int finite);

#endif
