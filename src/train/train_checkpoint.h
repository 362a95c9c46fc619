/* train_checkpoint.h: the checkpoint policy of a training run: which tensors make
 * up the state, when to write, what to resume from. The file format itself is in
 * io/checkpoint.h. */
#ifndef TR_TRAIN_CHECKPOINT_H
#define TR_TRAIN_CHECKPOINT_H

#include "comm/comm.h"
#include "core/deck.h"
#include "io/checkpoint.h"
#include "loss_scale.h"
#include "models/model.h"
#include "optim.h"
#include "val_tracker.h"

typedef struct tr_train_ckpt {
    char dir[2048];
    long every;
    int keep, at_start, at_end;
    int async;         /* checkpoint.async: periodic checkpoints in the background */
    tr_ckpt_async *aw; /* their writer (NULL when async is off) */
    long pending_step; /* the step of the one being written */
    int best; /* checkpoint.best: keep the lowest validation loss's model in best.h5 */
    char resume[TR_DECK_VALUE_MAX];
    char init_from[TR_DECK_VALUE_MAX]; /* weights to start from when nothing resumes */
    /* parameters (the first nparam_tensors), then each optimizer state: what this
     * rank holds of each (its tp blocks, its ZeRO slice of the state) and the part it
     * writes */
    tr_ckpt_tensor *tensors;
    int ntensors, nparam_tensors;
    tr_ckpt_meta meta; /* model, optimizer, seed, layout; step set per write */
    /* the data hash as trainers before images were hashed made it (the labels only;
     * token data: meta.data_digest): their checkpoints resume without the warning */
    uint64_t labels_only_digest;
    char *deck_text;   /* the resolved deck, saved in every checkpoint */
    long last_written; /* step of the newest checkpoint this run wrote or loaded */
    int last_link_failed;   /* last.h5 could not be made (warned once) */
    double last_write_time; /* tr_wtime() of this session's start or newest step file */
    tr_loss_scale *scaler; /* saved with each checkpoint, restored by a load */
    tr_val_tracker *tracker; /* the same */
    /* a device whose memory is not the host's: the tensors point into host copies
     * of its buffers, downloaded before a write and uploaded after a read */
    const tr_device *dev;
    struct tr_ckpt_mirror {
        void *device;
        float *host;
        size_t bytes;
    } mirror[4];
    int nmirror;
    int param_mirror; /* the parameters' (or master weights') mirror; -1: none */
} tr_train_ckpt;

/* The tensor list for this rank's model (its stage's layers, its shards) and its
 * optimizer state (o->lo, o->hi: its ZeRO slice), owned so that every element of
 * the file is written by exactly one rank of w. Under mixed precision the parameters
 * written and read are the fp32 master weights (sliced like the state), so a
 * checkpoint is fp32 whatever the precision, and any precision resumes from it. */
void tr_train_ckpt_init(tr_train_ckpt *c, const tr_deck *d, const char *run_dir, const tr_model *m,
                        const tr_optim *o, const tr_world *w, tr_loss_scale *scaler,
                        tr_val_tracker *tracker);
void tr_train_ckpt_free(tr_train_ckpt *c);

/* Applies [checkpoint] resume. Collective. On success *step is the step to start
 * from (0 when fresh); rank 0 says what it loaded or skipped. *reinit is set when
 * failed attempts may have overwritten tensors, which must then be initialised
 * afresh. Returns 0, or the exit code (with err) when an explicitly named
 * checkpoint cannot be used. */
int tr_train_ckpt_resume(tr_train_ckpt *c, const tr_world *w, long *step, int *reinit,
                         char *err, size_t errlen);

/* checkpoint.best, after resume = auto loaded `step`: where that step's evaluation set
 * the lowest loss (the checkpoint's tracker says so) but best.h5 is missing or holds
 * an earlier step, the run that wrote the step stopped (a crash, a kill) between its
 * checkpoint and best.h5's link to it, and the resumed run does not evaluate that
 * step again: best.h5 is made the step's state now (linked, or written where links
 * fail). Collective. Returns 0 or TR_EXIT_IOERR with err. */
int tr_train_ckpt_repair_best(tr_train_ckpt *c, const tr_world *w, long step, double epoch,
                              char *err, size_t errlen);

/* Applies [checkpoint] init_from when set and nothing was resumed: the model's
 * parameters (the master weights under mixed precision) from that file, whatever
 * layout and optimizer wrote it; the optimizer state stays fresh and the step 0.
 * Collective. Returns 0, or the exit code with err (the file missing, another model
 * or shape, a bad checksum). */
int tr_train_ckpt_init_from(tr_train_ckpt *c, const tr_world *w, char *err, size_t errlen);

/* Writes the checkpoint for `step` completed steps; prunes old ones. Collective.
 * background (with checkpoint.async): started, the data written by a thread while
 * training goes on, and finished by tr_train_ckpt_finish; otherwise written now.
 * A write still in the background is finished first. Returns 0 or TR_EXIT_IOERR
 * with err. */
int tr_train_ckpt_save(tr_train_ckpt *c, const tr_world *w, long step, double epoch, int background,
                       char *err, size_t errlen);

/* A checkpoint still being written in the background: 1 while it is (the same on
 * every rank); written: 1 once this rank's part is on disk. */
int tr_train_ckpt_pending(const tr_train_ckpt *c);
int tr_train_ckpt_written(const tr_train_ckpt *c);

/* Collective: waits for the checkpoint being written in the background (if any) on
 * every rank, then makes it visible (renamed, last.h5, keep). Returns 0 or
 * TR_EXIT_IOERR with err. */
int tr_train_ckpt_finish(tr_train_ckpt *c, const tr_world *w, char *err, size_t errlen);

/* checkpoint.best: makes DIR/best.h5 the state after `step`, whose evaluation has
 * just lowered the validation loss: a hard link to this step's checkpoint when the
 * run has just written it, else a checkpoint of its own. Collective. Returns 0 or
 * TR_EXIT_IOERR with err. */
int tr_train_ckpt_save_best(tr_train_ckpt *c, const tr_world *w, long step, double epoch, char *err,
                            size_t errlen);

#endif
