/* test_val_tracker.c: the lowest validation loss so far (train/val_tracker.h), which
 * decides checkpoint.best's writes and train.early_stop's step: only a strictly lower
 * loss is the best (an equal one counts against the patience, as in Lightning's
 * EarlyStopping with min_delta 0); a NaN loss never is, not even the first; the
 * patience runs out after exactly that many evaluations without a lower loss; 0 =
 * never. */
#include "test_util.h"
#include "train/val_tracker.h"

#include <math.h>

static void tracker(tr_val_tracker *t, const char *patience)
{
    tr_deck d;
    char text[64];
    snprintf(text, sizeof text, "[train]\nearly_stop = %s\n", patience);
    CHECK(tr_deck_load_text(&d, "test", text, 0, NULL) == 0, "deck: %s", d.errors);
    tr_val_tracker_init(t, &d);
    tr_deck_free(&d);
}

int main(void)
{
    tr_val_tracker t;
    tracker(&t, "2");
    CHECK(t.patience == 2 && t.best_step == 0 && !tr_val_tracker_exhausted(&t), "fresh");
    CHECK(!tr_val_tracker_update(&t, 5, NAN), "a NaN first loss is not a best");
    CHECK(t.best_step == 0 && t.evals_since_best == 1, "the NaN counts: %ld", t.evals_since_best);
    CHECK(tr_val_tracker_update(&t, 10, 2.5), "the first number is the best");
    CHECK(t.best_step == 10 && t.best_loss == 2.5 && t.evals_since_best == 0, "kept");
    CHECK(!tr_val_tracker_update(&t, 15, 2.5), "an equal loss is not lower");
    CHECK(!tr_val_tracker_exhausted(&t), "1 of 2");
    CHECK(tr_val_tracker_update(&t, 20, 2.25), "a lower loss is");
    CHECK(t.best_step == 20 && t.evals_since_best == 0, "and resets the count");
    CHECK(!tr_val_tracker_update(&t, 25, NAN), "a NaN later is not lower");
    CHECK(!tr_val_tracker_update(&t, 30, 3.0), "a higher loss is not lower");
    CHECK(tr_val_tracker_exhausted(&t), "2 of 2: out of patience");
    CHECK(t.best_step == 20 && t.best_loss == 2.25, "the best stays");

    tracker(&t, "0");
    for (long s = 1; s <= 100; s++)
        tr_val_tracker_update(&t, s, 1.0);
    CHECK(!tr_val_tracker_exhausted(&t) && t.evals_since_best == 99,
          "early_stop = 0 never stops (and still counts: %ld)", t.evals_since_best);
    return tr_test_finish();
}
