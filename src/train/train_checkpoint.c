/* train_checkpoint.c: maps the model and optimizer onto checkpoint tensors (what
 * this rank holds of each, and which part of it it writes) and applies the deck's
 * checkpoint policy. */
#include "train_checkpoint.h"
#include "core/deck.h"
#include "core/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

_Static_assert(TR_SHARD_MAX_BLOCKS <= TR_CKPT_MAX_BLOCKS,
               "a checkpoint tensor must hold every shard block of a parameter");

/* The local elements of p that belong to the logical tensor: its blocks, or all of
 * it; padding after them is never stored. */
static uint64_t block_elements(const tr_param *p)
{
    uint64_t n = 1;
    if (!p->nblocks) {
        for (int d = 0; d < p->ndim; d++)
            n *= (uint64_t)p->dims[d];
        return n;
    }
    n = 0;
    for (int b = 0; b < p->nblocks; b++)
        n += (uint64_t)p->block[b].rows * (uint64_t)p->block[b].cols;
    return n;
}

/* Band i of n of [lo, hi): how replicas share the writing of identical values. */
static void band(uint64_t lo, uint64_t hi, int i, int n, uint64_t *a, uint64_t *b)
{
    *a = lo + (hi - lo) * (uint64_t)i / (uint64_t)n;
    *b = lo + (hi - lo) * (uint64_t)(i + 1) / (uint64_t)n;
}

/* Parameters, and optimizer state without ZeRO: every rank holds all of its part.
 * The ranks holding the same values (the dp ranks, and the tp ranks too for a
 * tp_replica tensor) each own a band; a tied copy owns nothing (its twin on the
 * first stage is written), but is read like any other. */
static void own_replicated(tr_ckpt_tensor *t, const tr_param *p, float *data, const tr_world *w)
{
    t->data = data;
    t->data_lo = 0;
    t->data_hi = block_elements(p);
    int n = w->dp, i = w->dp_rank;
    if (p->tp_replica)
        n *= w->tp, i = i * w->tp + w->tp_rank;
    if (p->tied_copy)
        t->own_lo = t->own_hi = 0;
    else
        band(t->data_lo, t->data_hi, i, n, &t->own_lo, &t->own_hi);
}

/* Optimizer state under ZeRO: the rank holds the flat slice [o->lo, o->hi) of
 * state, which covers part of p, all of it or none; the dp ranks partition the
 * flat buffer, so each element's state is on one dp rank, and only the tp ranks of
 * a replicated tensor hold the same values: they split it in bands. */
static void own_sliced(tr_ckpt_tensor *t, const tr_param *p, float *state, const tr_optim *o,
                       const tr_world *w)
{
    uint64_t first = p->offset, end = first + block_elements(p);
    uint64_t lo = o->lo > first ? o->lo : first, hi = o->hi < end ? o->hi : end;
    t->data = NULL;
    t->data_lo = t->data_hi = t->own_lo = t->own_hi = 0;
    if (lo >= hi)
        return;
    t->data = state + (lo - o->lo);
    t->data_lo = lo - first;
    t->data_hi = hi - first;
    if (p->tied_copy)
        t->own_lo = t->own_hi = t->data_lo;
    else if (p->tp_replica)
        band(t->data_lo, t->data_hi, w->tp_rank, w->tp, &t->own_lo, &t->own_hi);
    else
        t->own_lo = t->data_lo, t->own_hi = t->data_hi;
}

/* The tensor's name and logical shape, and which blocks of it this rank holds. */
static tr_ckpt_tensor *add(tr_train_ckpt *c, const tr_layer *l, const tr_param *p,
                           const char *state)
{
    tr_ckpt_tensor *t = &c->tensors[c->ntensors++];
    memset(t, 0, sizeof *t);
    if (state)
        snprintf(t->path, sizeof t->path, "/optimizer/%s/%s/%s", state, l->name, p->name);
    else
        snprintf(t->path, sizeof t->path, "/model/%s/%s", l->name, p->name);
    snprintf(t->kind, sizeof t->kind, "%s", state ? state : "parameter");
    snprintf(t->layer, sizeof t->layer, "%s", l->name);
    t->ndim = p->ndim;
    for (int d = 0; d < p->ndim; d++)
        t->dims[d] = (uint64_t)p->dims[d];
    t->nblocks = p->nblocks;
    for (int b = 0; b < p->nblocks; b++) {
        const tr_shard_block *k = &p->block[b];
        t->block[b] = (tr_ckpt_block){(uint64_t)k->row0, (uint64_t)k->col0, (uint64_t)k->rows,
                                      (uint64_t)k->cols};
    }
    return t;
}

/* An optimizer state tensor: state is the flat buffer (m or v) of o. */
static void add_state(tr_train_ckpt *c, const tr_layer *l, const tr_param *p, const char *name,
                      float *state, const tr_model *m, const tr_optim *o, const tr_world *w)
{
    tr_ckpt_tensor *t = add(c, l, p, name);
    if (o->lo == 0 && o->hi == m->nparams)
        own_replicated(t, p, state + p->offset, w);
    else
        own_sliced(t, p, state, o, w);
}

/* The host copy the tensors of a device buffer point into (the buffer itself when
 * the device's memory is the host's). */
static float *host_view(tr_train_ckpt *c, float *device, size_t floats)
{
    if (!device || c->dev->host_memory)
        return device;
    struct tr_ckpt_mirror *mi = &c->mirror[c->nmirror++];
    mi->device = device;
    mi->bytes = floats * sizeof(float);
    mi->host = tr_alloc(mi->bytes, "checkpoint staging (host copy of device memory)");
    return mi->host;
}

void tr_train_ckpt_init(tr_train_ckpt *c, const tr_deck *d, const char *run_dir, const tr_model *m,
                        const tr_optim *o, const tr_world *w, tr_loss_scale *scaler,
                        tr_val_tracker *tracker)
{
    memset(c, 0, sizeof *c);
    const char *dir = tr_deck_str(d, "checkpoint", "dir");
    if (*dir)
        snprintf(c->dir, sizeof c->dir, "%s", dir);
    else
        snprintf(c->dir, sizeof c->dir, "%s/checkpoints", run_dir);
    c->every = tr_deck_int(d, "checkpoint", "every");
    c->keep = (int)tr_deck_int(d, "checkpoint", "keep");
    c->at_end = tr_deck_bool(d, "checkpoint", "at_end");
    c->async = tr_deck_bool(d, "checkpoint", "async");
    c->aw = c->async ? tr_ckpt_async_new() : NULL;
    c->at_start = tr_deck_bool(d, "checkpoint", "at_start");
    c->best = tr_deck_bool(d, "checkpoint", "best");
    snprintf(c->resume, sizeof c->resume, "%s", tr_deck_str(d, "checkpoint", "resume"));
    snprintf(c->init_from, sizeof c->init_from, "%s", tr_deck_str(d, "checkpoint", "init_from"));
    c->last_written = -1;
    c->last_write_time = tr_wtime();

    c->dev = m->dev;
    size_t slice = o->hi - o->lo;
    float *om = host_view(c, o->m, slice), *ov = host_view(c, o->v, slice);
    int before = c->nmirror;
    float *master = host_view(c, o->master, slice);
    float *params = master ? NULL : host_view(c, m->params, m->nparams);
    c->param_mirror = c->nmirror > before ? before : -1;
    int states = o->kind == TR_OPT_ADAMW ? 2 : 1;
    c->tensors = tr_alloc((size_t)m->ntensors * (1 + states) * sizeof *c->tensors,
                          "checkpoint tensor list");
    for (int s = -1; s < states; s++)
        for (int i = 0; i < m->nlayers; i++)
            for (int p = 0; p < m->layers[i].nparams; p++) {
                const tr_layer *l = &m->layers[i];
                const tr_param *pr = &l->params[p];
                if (s < 0 && master) /* the fp32 master weights, kept like state */
                    add_state(c, l, pr, NULL, master, m, o, w);
                else if (s < 0)
                    own_replicated(add(c, l, pr, NULL), pr, params + pr->offset, w);
                else if (o->kind == TR_OPT_SGD)
                    add_state(c, l, pr, "momentum", om, m, o, w);
                else
                    add_state(c, l, pr, s == 0 ? "adam_m" : "adam_v", s == 0 ? om : ov, m, o,
                              w);
            }
    c->nparam_tensors = m->ntensors; /* the s < 0 pass above */
    snprintf(c->meta.model, sizeof c->meta.model, "%s", m->name);
    snprintf(c->meta.optimizer, sizeof c->meta.optimizer, "%s",
             o->kind == TR_OPT_ADAMW ? "adamw" : "sgd");
    c->meta.seed = (uint64_t)tr_deck_int(d, "train", "seed");
    c->meta.collective_io = tr_deck_bool(d, "checkpoint", "collective_io");
    c->meta.ranks = w->size, c->meta.dp = w->dp, c->meta.tp = w->tp, c->meta.pp = w->pp;
    c->meta.zero = (int)tr_deck_int(d, "parallel", "zero");
    snprintf(c->meta.precision, sizeof c->meta.precision, "%s",
             tr_deck_str(d, "train", "precision"));
    c->scaler = scaler;
    c->tracker = tracker;
    c->deck_text = tr_deck_resolved_text(d);
    /* /deck is one dataset that every rank creates, so one text: rank 0's (ranks may
     * name the same deck by other paths, or write 2e1 for 20) */
    tr_comm_bcast_string(w, &c->deck_text);
}

void tr_train_ckpt_free(tr_train_ckpt *c)
{
    tr_ckpt_async_free(c->aw); /* a write still running (an error ended the run) is joined */
    c->aw = NULL;
    tr_free(c->tensors);
    for (int i = 0; i < c->nmirror; i++)
        tr_free(c->mirror[i].host);
    c->nmirror = 0;
    free(c->deck_text);
    c->tensors = NULL;
    c->deck_text = NULL;
}

/* Keys whose change alters what a resumed run computes. Not where it writes, how
 * often it logs or evaluates, or its layout (the banner shows the written one);
 * the seed has a warning of its own. */
static int changes_training(const tr_key_spec *k)
{
    static const char *const quiet[] = {
        "data.prefetch",    "data.unigram_baseline", "train.seed",
        "train.eval_every", "train.eval_batch_size", "train.log_every"};
    char name[96];
    snprintf(name, sizeof name, "%s.%s", k->section, k->name);
    for (size_t i = 0; i < sizeof quiet / sizeof *quiet; i++)
        if (!strcmp(name, quiet[i]))
            return 0;
    return !strcmp(k->section, "model") || !strcmp(k->section, "data") ||
           !strcmp(k->section, "train") || !strcmp(k->section, "optim");
}

/* Rank 0, after a resume: the deck keys of the training that differ from those the
 * checkpoint's run used (its resolved deck is in the file), so a resumed run that
 * does not continue the original (another learning rate, more steps and so another
 * schedule, other data) says so. */
static void report_deck_changes(const char *path, const char *now_text)
{
    char *was_text = tr_ckpt_read_deck(path);
    if (!was_text || !now_text) {
        free(was_text);
        return;
    }
    tr_deck was, now;
    char name[4200];
    snprintf(name, sizeof name, "%s:/deck", path);
    int bad = tr_deck_load_text(&was, name, was_text, 0, NULL);
    free(was_text);
    if (bad) {
        char *nl = strchr(was.errors, '\n');
        printf("note: the deck stored in %s does not load with this trainer (%.*s): its keys "
               "are not compared with this run's\n",
               path, nl ? (int)(nl - was.errors) : (int)strlen(was.errors), was.errors);
        tr_deck_free(&was);
        return;
    }
    if (tr_deck_load_text(&now, "this run's deck", now_text, 0, NULL)) {
        tr_deck_free(&was);
        tr_deck_free(&now);
        return;
    }
    int n = 0;
    for (int i = 0; i < tr_deck_nkeys; i++)
        n += changes_training(&tr_deck_keys[i]) && !tr_deck_same_value(&was, &now, i);
    if (n)
        printf("note: %d deck key%s differ%s from the run that wrote the checkpoint (this run "
               "uses its own):\n",
               n, n == 1 ? "" : "s", n == 1 ? "s" : "");
    for (int i = 0; i < tr_deck_nkeys; i++)
        if (changes_training(&tr_deck_keys[i]) && !tr_deck_same_value(&was, &now, i))
            printf("  [%s] %s = %s (checkpoint: %s)\n", tr_deck_keys[i].section,
                   tr_deck_keys[i].name, now.values[i].text, was.values[i].text);
    tr_deck_free(&was);
    tr_deck_free(&now);
}

static int load(tr_train_ckpt *c, const tr_world *w, const char *path, long *step, char *err,
                size_t errlen)
{
    tr_ckpt_meta meta = c->meta;
    int rc = tr_ckpt_read(path, &meta, c->tensors, c->ntensors, w->world, err, errlen);
    if (rc)
        return rc;
    for (int i = 0; i < c->nmirror; i++)
        c->dev->upload(c->mirror[i].device, c->mirror[i].host, c->mirror[i].bytes);
    *step = meta.step;
    c->last_written = meta.step;
    /* the scaler goes on where it was; a file of another precision (whose scale is
     * 1: fp32, bf16) or without one (older) leaves this run's initial scale */
    c->scaler->skipped = meta.skipped_steps;
    if (meta.loss_scale > 0 && c->scaler->dynamic && !strcmp(meta.precision, "fp16-mixed")) {
        c->scaler->scale = meta.loss_scale;
        c->scaler->good = meta.loss_scale_good;
    }
    /* the best model and the early stop go on from where the run was */
    c->tracker->best_loss = meta.best_val_loss;
    c->tracker->best_step = meta.best_val_step;
    c->tracker->evals_since_best = meta.evals_since_best;
    if (w->rank == 0) {
        printf("resumed from %s: step %ld, epoch %.2f (written at %d rank%s: dp %d, tp %d, pp "
               "%d, zero %d)\n",
               path, meta.step, meta.epoch, meta.ranks, meta.ranks == 1 ? "" : "s", meta.dp,
               meta.tp, meta.pp, meta.zero);
        if (meta.seed != c->meta.seed)
            printf("warning: the checkpoint was written with seed %llu and this deck has %llu: "
                   "the data order after step %ld differs from the original run\n",
                   (unsigned long long)meta.seed, (unsigned long long)c->meta.seed, meta.step);
        if (meta.data_digest && c->meta.data_digest && meta.data_digest != c->meta.data_digest &&
            meta.data_digest != c->labels_only_digest)
            printf("warning: the training data differ from those of the run that wrote the "
                   "checkpoint (its data_digest %#llx, this run's %#llx: a hash of the labels "
                   "and images, or of 64 windows of the token file): the resumed run trains on "
                   "other data than the original\n",
                   (unsigned long long)meta.data_digest, (unsigned long long)c->meta.data_digest);
        if (meta.best_val_step > 0 && (c->best || c->tracker->patience))
            printf("lowest validation loss so far: %.6g at step %ld (%ld evaluation%s since)\n",
                   meta.best_val_loss, meta.best_val_step, meta.evals_since_best,
                   meta.evals_since_best == 1 ? "" : "s");
        /* a best.h5 of a later step: the branch's that a run resumed from an older file
         * left, or this run's own, written on its own after an evaluation between its
         * newest checkpoint and a crash (mpi.chaos meets it) */
        char best[4200];
        snprintf(best, sizeof best, "%s/%s", c->dir, TR_CKPT_BEST);
        long best_step = c->best && access(best, F_OK) == 0 ? tr_ckpt_read_step(best) : -1;
        if (best_step > meta.step)
            printf("warning: %s holds step %ld's model, past the step resumed from: written "
                   "after the checkpoint resumed from (by this run before it stopped, or by "
                   "the run this one branched from); it stays until an evaluation of this run "
                   "sets a new lowest loss\n",
                   best, best_step);
        report_deck_changes(path, c->deck_text);
        fflush(stdout);
    }
    return 0;
}

int tr_train_ckpt_resume(tr_train_ckpt *c, const tr_world *w, long *step, int *reinit,
                         char *err, size_t errlen)
{
    *step = 0;
    *reinit = 0;
    err[0] = '\0';
    if (!strcmp(c->resume, "none"))
        return 0;
    if (strcmp(c->resume, "auto"))
        return load(c, w, c->resume, step, err, errlen); /* a named file must work */
    /* auto: the checkpoint last.h5 names, the newest this directory's runs wrote, then
     * the others newest first (a step past it is another branch's: a run resumed from
     * an older file went on from there); rank 0 lists so every rank tries the same */
    long *listed = NULL;
    int n = w->rank == 0 ? tr_ckpt_list(c->dir, &listed) : 0;
    long last = n ? tr_ckpt_last_step(c->dir) : -1;
    for (int i = 1; i < n && last >= 0; i++)
        if (listed[i] == last) { /* to the front, the rest in order */
            memmove(listed + 1, listed, (size_t)i * sizeof *listed);
            listed[0] = last;
            break;
        }
    tr_bcast(&n, 1, TR_I32, 0, w->world);
    long *steps = tr_alloc((size_t)(n ? n : 1) * sizeof *steps, "the checkpoint list");
    if (listed)
        memcpy(steps, listed, (size_t)n * sizeof *steps);
    free(listed);
    tr_bcast(steps, (size_t)n, TR_I64, 0, w->world);
    int loaded = 0;
    for (int i = 0; i < n && !loaded; i++) {
        char path[4096];
        tr_ckpt_path(path, sizeof path, c->dir, steps[i]);
        loaded = !load(c, w, path, step, err, errlen);
        if (!loaded && w->rank == 0) {
            printf("warning: skipping checkpoint: %s; %s\n", err,
                   i + 1 < n ? "trying the next one" : "no other one left");
            fflush(stdout);
        }
    }
    tr_free(steps);
    if (loaded)
        return 0;
    if (n && w->rank == 0) {
        printf("warning: no valid checkpoint in %s: starting from step 0\n", c->dir);
        fflush(stdout);
    }
    err[0] = '\0';
    *reinit = n > 0; /* a failed load may have filled some tensors */
    return 0;
}

int tr_train_ckpt_repair_best(tr_train_ckpt *c, const tr_world *w, long step, double epoch,
                              char *err, size_t errlen)
{
    /* rank 0 looks (-2: nothing to look at): resumed by auto, from the step whose
     * evaluation set the lowest loss */
    long held = -2;
    char best[4200];
    snprintf(best, sizeof best, "%s/%s", c->dir, TR_CKPT_BEST);
    if (w->rank == 0 && c->best && !strcmp(c->resume, "auto") && c->last_written == step &&
        step > 0 && c->tracker->best_step == step)
        held = access(best, F_OK) == 0 ? tr_ckpt_read_step(best) : -1;
    tr_bcast(&held, 1, TR_I64, 0, w->world);
    /* (a later step's: a branch's, which stays, as load() says) */
    if (held == -2 || held >= step)
        return 0;
    if (w->rank == 0) {
        char had[64] = "is missing";
        if (held >= 0)
            snprintf(had, sizeof had, "holds step %ld's model", held);
        printf("note: %s %s, but step %ld's evaluation set the lowest loss (the run that wrote "
               "step %ld stopped before best.h5 followed): made step %ld's now\n",
               best, had, step, step, step);
        fflush(stdout);
    }
    return tr_train_ckpt_save_best(c, w, step, epoch, err, errlen);
}

int tr_train_ckpt_init_from(tr_train_ckpt *c, const tr_world *w, char *err, size_t errlen)
{
    err[0] = '\0';
    if (!c->init_from[0] || c->last_written >= 0) /* unset, or a checkpoint resumed */
        return 0;
    tr_ckpt_meta meta = c->meta;
    meta.optimizer[0] = '\0'; /* any optimizer's file: its state is not read */
    int rc = tr_ckpt_read(c->init_from, &meta, c->tensors, c->nparam_tensors, w->world, err,
                          errlen);
    size_t used = strlen(err);
    if (rc && strstr(err, "/model/wpe/weight has shape") && used < errlen) /* every rank */
        snprintf(err + used, errlen - used,
                 "; for a shorter model.seq_len than the weights', tools/gpt2_hf.py import "
                 "--seq-len T keeps the first T positions");
    if (rc)
        return rc;
    if (c->param_mirror >= 0) {
        const struct tr_ckpt_mirror *mi = &c->mirror[c->param_mirror];
        c->dev->upload(mi->device, mi->host, mi->bytes);
    }
    if (w->rank == 0) {
        printf("initialised the model's parameters from %s (model %s, written at step %ld by %d "
               "rank%s); the optimizer starts fresh at step 0\n",
               c->init_from, meta.model, meta.step, meta.ranks, meta.ranks == 1 ? "" : "s");
        fflush(stdout);
    }
    return 0;
}

/* The run's state after `step`, for a checkpoint */
static tr_ckpt_meta state_meta(const tr_train_ckpt *c, long step, double epoch)
{
    tr_ckpt_meta meta = c->meta;
    meta.step = step;
    meta.epoch = epoch;
    meta.deck_text = c->deck_text;
    meta.loss_scale = c->scaler->scale;
    meta.loss_scale_good = c->scaler->good;
    meta.skipped_steps = c->scaler->skipped;
    meta.best_val_loss = c->tracker->best_loss;
    meta.best_val_step = c->tracker->best_step;
    meta.evals_since_best = c->tracker->evals_since_best;
    for (int i = 0; i < c->nmirror; i++)
        c->dev->download(c->mirror[i].host, c->mirror[i].device, c->mirror[i].bytes);
    return meta;
}

/* rank 0: "checkpoint PATH: how much in how long", and how it was written */
static void say_written(const tr_train_ckpt *c, const char *name, long step,
                        const tr_ckpt_stats *st, const char *how)
{
    char path[4096];
    if (name)
        snprintf(path, sizeof path, "%s/%s", c->dir, name);
    else
        tr_ckpt_path(path, sizeof path, c->dir, step);
    printf("checkpoint %s: %.1f MiB in %.2f s (%.0f MiB/s)%s\n", path, st->bytes / 1048576.0,
           st->seconds, st->bytes / 1048576.0 / (st->seconds > 0 ? st->seconds : 1e-9), how);
    fflush(stdout);
}

/* Writes the run's state after `step` to DIR/NAME (NULL: the step's own name);
 * rank 0 prints it. */
static int write_state(tr_train_ckpt *c, const tr_world *w, const char *name, long step,
                       double epoch, char *err, size_t errlen)
{
    tr_ckpt_meta meta = state_meta(c, step, epoch);
    tr_ckpt_stats st = {0};
    int rc =
        tr_ckpt_write(c->dir, name, &meta, c->tensors, c->ntensors, w->world, &st, err, errlen);
    if (!rc && w->rank == 0)
        say_written(c, name, step, &st, "");
    return rc;
}

/* After the step file of `step` became durable: the newest, and old ones pruned.
 * last.h5 first: keep may delete the file it named until now, and a crash between
 * the two would leave it dangling, so that resume = auto took the newest step file,
 * which is another run's where a branch or a resume = none run shares the directory
 * with later steps (mpi.checkpoint_errors). */
static void written(tr_train_ckpt *c, const tr_world *w, long step)
{
    c->last_written = step;
    if (w->rank == 0) {
        int e = tr_ckpt_point_last(c->dir, step);
        if (e && !c->last_link_failed) /* once: the checkpoints themselves are fine */
            fprintf(stderr, "warning: cannot point %s/%s at the newest checkpoint: %s\n", c->dir,
                    TR_CKPT_LAST, strerror(e));
        if (e)
            c->last_link_failed = 1;
        tr_ckpt_prune(c->dir, c->keep, step);
    }
}

int tr_train_ckpt_pending(const tr_train_ckpt *c) { return tr_ckpt_async_pending(c->aw); }

int tr_train_ckpt_written(const tr_train_ckpt *c) { return tr_ckpt_async_written(c->aw); }

int tr_train_ckpt_finish(tr_train_ckpt *c, const tr_world *w, char *err, size_t errlen)
{
    if (!tr_ckpt_async_pending(c->aw))
        return 0;
    tr_ckpt_stats st = {0};
    int rc = tr_ckpt_async_finish(c->aw, w->world, &st, err, errlen);
    if (rc)
        return rc;
    if (w->rank == 0)
        say_written(c, NULL, c->pending_step, &st, ", written in the background");
    written(c, w, c->pending_step);
    return 0;
}

int tr_train_ckpt_save(tr_train_ckpt *c, const tr_world *w, long step, double epoch, int background,
                       char *err, size_t errlen)
{
    int rc = tr_train_ckpt_finish(c, w, err, errlen);
    if (rc)
        return rc;
    if (background && c->aw) {
        double t0 = tr_wtime();
        tr_ckpt_meta meta = state_meta(c, step, epoch);
        /* a GPU's tensors are host copies made for checkpoints, downloaded again only
         * after this one is finished (state_meta, after tr_train_ckpt_finish): the
         * thread writes them as they are, and no second copy is made */
        rc = tr_ckpt_async_start(c->aw, c->dir, NULL, &meta, c->tensors, c->ntensors,
                                 !c->dev->host_memory, w->world, err, errlen);
        if (rc)
            return rc;
        c->pending_step = step;
        c->last_write_time = tr_wtime();
        if (w->rank == 0) {
            char path[4096];
            tr_ckpt_path(path, sizeof path, c->dir, step);
            printf("checkpoint %s: started in the background (%.2f s of training time)\n", path,
                   tr_wtime() - t0);
            fflush(stdout);
        }
        return 0;
    }
    rc = write_state(c, w, NULL, step, epoch, err, errlen);
    if (rc)
        return rc;
    c->last_write_time = tr_wtime();
    written(c, w, step);
    return 0;
}

int tr_train_ckpt_save_best(tr_train_ckpt *c, const tr_world *w, long step, double epoch, char *err,
                            size_t errlen)
{
    /* this step's checkpoint, just written, holds the same state: a second name for
     * it costs no I/O (keep may prune its first name later; the file stays); one in
     * the background is finished first */
    int rc = tr_train_ckpt_finish(c, w, err, errlen);
    if (rc)
        return rc;
    int linked = 0;
    if (c->last_written == step && w->rank == 0)
        linked = !tr_ckpt_link(c->dir, step, TR_CKPT_BEST);
    tr_bcast(&linked, 1, TR_I32, 0, w->world);
    if (!linked)
        return write_state(c, w, TR_CKPT_BEST, step, epoch, err, errlen);
    if (w->rank == 0) {
        char path[4096];
        tr_ckpt_path(path, sizeof path, c->dir, step);
        printf("checkpoint %s/%s: linked to %s\n", c->dir, TR_CKPT_BEST, path);
        fflush(stdout);
    }
    return 0;
}
