/* checkpoint.h: the run's full state in one parallel-HDF5 file per checkpoint.
 *
 * Layout (format "trainer-checkpoint", version 1):
 *   /                    attributes: format, format_version, model, step, epoch,
 *                        seed, optimizer, written_ranks/dp/tp/pp/zero, trainer_version,
 *                        precision, loss_scale, loss_scale_good_steps, skipped_steps,
 *                        data_digest; best_val_loss, best_val_step and
 *                        evals_since_best once the run has evaluated
 *                        (evals_since_best alone while no evaluation set a
 *                        lowest loss: NaN ones, which early_stop counts)
 *   /deck                the resolved deck text (a string dataset)
 *   /model/<layer>/<p>   every parameter at its full logical shape (float32)
 *   /optimizer/<state>/<layer>/<p>   optimizer state shaped like its parameter
 * Every tensor dataset carries the attributes kind, layer and crc32 (zlib's CRC-32
 * of the whole logical tensor's little-endian float32 bytes in row-major order).
 * The file does not depend on the layout that wrote it: any layout reads it.
 *
 * Who holds what: a rank describes, per tensor, which part of the logical tensor
 * it holds (blocks of rows and columns under tensor parallelism, a slice of the
 * flat buffer under ZeRO, all of it otherwise), which of those elements are in
 * memory, and which of them it owns. The own ranges of all ranks cover every
 * element exactly once (replicas split a tensor into bands, copies own nothing).
 * Ranks may hold different tensors (pipeline stages): the file gets the union,
 * each tensor described by the rank that owns its first element.
 *
 * Writes: rank 0 alone lays the file out through HDF5's serial driver (attributes,
 * /deck, and every dataset allocated early, so each has a fixed place in the file;
 * not parallel HDF5, whose collective close hangs when a write fails on some ranks
 * only) and the ranks learn the datasets' offsets; then each rank writes its own
 * elements straight through MPI-IO, one contiguous run of the file at a time, into
 * DIR/step_NNNNNNNN.h5.tmp; the file is synced and only then renamed into place,
 * so a crash mid-write leaves the previous checkpoint as the newest valid one.
 * A tensor's checksum is combined from the CRCs of every rank's runs (sent to one
 * rank per tensor, which orders them by offset and checks that they tile the
 * tensor exactly), so no rank touches more than it owns.
 *
 * Reads: each rank reads only the elements it keeps in memory, through HDF5
 * hyperslab selections, and checksums the ones it owns; the run CRCs are combined
 * as on write and compared with the file's. Every failure is agreed on: all ranks
 * return the same code and the same message. This module knows nothing of models:
 * the caller lists the tensors. */
#ifndef TR_CHECKPOINT_H
#define TR_CHECKPOINT_H

#include "comm/comm.h"

#include <stddef.h>
#include <stdint.h>

#define TR_CKPT_FORMAT "trainer-checkpoint"
#define TR_CKPT_VERSION 1
#define TR_CKPT_MAX_DIMS 4
/* The largest step a checkpoint may record (2^40: 35 years at 1000 steps a second),
 * so that step x batch x tokens stays far inside 64 bits */
#define TR_CKPT_MAX_STEP (INT64_C(1) << 40)

/* A rectangle of a tensor viewed as a matrix [dims[0], product of the other dims]
 * (a 1-D tensor is [n, 1]): rows [row0, row0 + rows) x columns [col0, col0 + cols). */
typedef struct tr_ckpt_block {
    uint64_t row0, col0, rows, cols;
} tr_ckpt_block;

#define TR_CKPT_MAX_BLOCKS 4

/* One tensor as this rank sees it. Its local elements are numbered 0, 1, ... over
 * the blocks one after another, each block row-major (nblocks = 0: the whole
 * logical tensor, row-major); padding a rank keeps after them is not numbered. */
typedef struct tr_ckpt_tensor {
    char path[160]; /* "/model/fc1/weight" */
    char kind[32];  /* "parameter", "momentum", "adam_m", "adam_v" */
    char layer[32];
    int ndim;
    uint64_t dims[TR_CKPT_MAX_DIMS]; /* the logical shape, as stored */
    int nblocks;                     /* 0: the whole tensor */
    tr_ckpt_block block[TR_CKPT_MAX_BLOCKS];
    /* local elements [data_lo, data_hi) are in memory at data (data[0] is element
     * data_lo): a read fills exactly these; may be empty (data unused) */
    float *data;
    uint64_t data_lo, data_hi;
    /* local elements [own_lo, own_hi), within the data range, that this rank writes
     * and checksums; over all ranks the own ranges partition the logical tensor */
    uint64_t own_lo, own_hi;
} tr_ckpt_tensor;

typedef struct tr_ckpt_meta {
    char model[32];
    char optimizer[16];
    long step;     /* optimizer steps completed */
    double epoch;
    uint64_t seed;
    int ranks, dp, tp, pp; /* the layout it was written at */
    int zero;              /* ZeRO stage it was written at (0 in older files) */
    /* mixed precision: the run's train.precision ("fp32" in older files; the tensors
     * are the fp32 master weights either way) and its loss scaler: scale (0 when not
     * recorded), good steps since it last changed, steps skipped so far */
    char precision[16];
    double loss_scale;
    long loss_scale_good, skipped_steps;
    /* a hash of the training data (the labels, or windows of the token file: the
     * trainer's same_data_everywhere); 0 where not recorded (older files, random data) */
    uint64_t data_digest;
    /* the lowest validation loss of the run so far, the step that gave it (0: none
     * recorded: no evaluation yet, or an older file) and the evaluations since then
     * that did not lower it (train/val_tracker.h) */
    double best_val_loss;
    long best_val_step, evals_since_best;
    const char *deck_text; /* on write */
    int collective_io;     /* on write: MPI-IO collective buffering for tensor data */
} tr_ckpt_meta;

typedef struct tr_ckpt_stats {
    double seconds; /* open to rename, all ranks */
    double bytes;   /* tensor bytes in the file */
} tr_ckpt_stats;

/* DIR/step_NNNNNNNN.h5 */
void tr_ckpt_path(char *buf, size_t len, const char *dir, long step);

/* Writes DIR/NAME, or DIR/step_NNNNNNNN.h5 for meta->step when name is NULL.
 * Collective over g (every rank of the run, whatever tensors it holds). Returns 0,
 * or TR_EXIT_IOERR with the same err on every rank (TR_EXIT_SOFTWARE when the
 * ranks' descriptions do not fit together: a bug in the caller); a failed write
 * removes its temporary file and leaves older checkpoints alone. meta->collective_io
 * makes every rank issue the same number of collective MPI-IO writes (the most any
 * rank needs; the others add empty ones). */
int tr_ckpt_write(const char *dir, const char *name, const tr_ckpt_meta *meta,
                  const tr_ckpt_tensor *t, int n, tr_group *g, tr_ckpt_stats *stats, char *err,
                  size_t errlen);

/* A checkpoint written in the background ([checkpoint] async): tr_ckpt_async_start
 * does what tr_ckpt_write does before the tensor data (collective: the checks, the
 * checksums, the file's structure) and copies this rank's data, so the caller may
 * change its tensors on return; a thread of this rank writes the copy and syncs it,
 * with no MPI or HDF5 call; tr_ckpt_async_finish (collective) waits for every rank's
 * thread and then syncs and renames the file into place as tr_ckpt_write does. Until
 * then it is DIR/NAME.tmp, which nothing resumes from. The copy (this rank's part of
 * the file) is kept for the next write. A caller whose tensors stay unchanged until
 * the finish (a GPU run's host copies, made for checkpoints only) says so with
 * `stable`: the thread writes from them, and no copy is made. */
typedef struct tr_ckpt_async tr_ckpt_async;
tr_ckpt_async *tr_ckpt_async_new(void);
/* Waits for a thread still writing (its file stays a temporary one) and frees a. */
void tr_ckpt_async_free(tr_ckpt_async *a);
/* Returns 0 with the write under way, or tr_ckpt_write's codes (nothing is left). */
int tr_ckpt_async_start(tr_ckpt_async *a, const char *dir, const char *name,
                        const tr_ckpt_meta *meta, const tr_ckpt_tensor *t, int n, int stable,
                        tr_group *g, char *err, size_t errlen);
/* 1 while a write is started and not finished (the same on every rank). */
int tr_ckpt_async_pending(const tr_ckpt_async *a);
/* 1 once this rank's thread is done (or failed), or nothing is pending. */
int tr_ckpt_async_written(const tr_ckpt_async *a);
/* Collective over the start's g; nothing pending: 0. Returns 0 with stats (seconds
 * from the start to the rename) or TR_EXIT_IOERR with the same err on every rank,
 * the temporary file removed. */
int tr_ckpt_async_finish(tr_ckpt_async *a, tr_group *g, tr_ckpt_stats *stats, char *err,
                         size_t errlen);

/* Collective over g. Checks format, version, model, optimizer (not when
 * meta->optimizer is "": a caller that reads only parameters), every tensor's
 * presence, shape and checksum, and fills each tensor's data range (and nothing
 * else: padding is left alone). On failure returns TR_EXIT_DATA (TR_EXIT_NOINPUT
 * when the file cannot be opened, TR_EXIT_SOFTWARE when the descriptions do not
 * fit together) with the same err on every rank, naming the file and the problem,
 * and the tensors are unspecified. */
int tr_ckpt_read(const char *path, tr_ckpt_meta *meta, const tr_ckpt_tensor *t, int n,
                 tr_group *g, char *err, size_t errlen);

/* Collective over g: rank 0 makes dir (its parent must exist) and writes a probe
 * file there; every rank reads it back. Returns 0, or TR_EXIT_IOERR (rank 0 cannot
 * make or write it) or TR_EXIT_USAGE (some rank does not see it: the directory is
 * node-local), with the same message on every rank. Checkpoints are written and
 * read by all ranks together, so a run checks this before it resumes or writes.
 * Rank 0 also deletes the temporary files a killed run's writes left there. */
int tr_ckpt_dir_check(const char *dir, tr_group *g, char *err, size_t errlen);

/* The resolved deck of the run that wrote path (its /deck), allocated (free() it),
 * or NULL when the file has none that reads as one fixed-length string. Rank-local:
 * opens the file on its own, without MPI-IO. */
char *tr_ckpt_read_deck(const char *path);
/* The step attribute of the checkpoint at path (one rank, serial HDF5), or -1 when
 * the file or the attribute cannot be read. */
long tr_ckpt_read_step(const char *path);

/* Every checkpoint file in dir, newest step first, into *steps (allocated; free()
 * it; NULL when none); returns the count. Temporary files of interrupted writes
 * are not listed. Rank-local. */
int tr_ckpt_list(const char *dir, long **steps);

/* The step of the checkpoint TR_CKPT_LAST names in dir (the newest that runs in this
 * directory wrote), or -1: no link, not a step file's name, or the file is gone. */
long tr_ckpt_last_step(const char *dir);

/* Deletes all but the newest `keep` checkpoints of steps up to `newest` (the one
 * just written), and stale temporary files (call on one rank). Checkpoints of later
 * steps belong to another run and other names (TR_CKPT_BEST, TR_CKPT_LAST) are left
 * alone. */
void tr_ckpt_prune(const char *dir, int keep, long newest);

/* The name of checkpoint.best's file in the checkpoint directory. */
#define TR_CKPT_BEST "best.h5"
/* A symbolic link to the newest checkpoint a run wrote, for tools and decks that
 * want a name that does not change (init_from, gpt2_hf.py export, h5dump). */
#define TR_CKPT_LAST "last.h5"

/* Gives DIR/step_NNNNNNNN.h5 of `step` a second name DIR/NAME in one atomic step
 * (a hard link, renamed into place and synced), replacing what had that name;
 * pruning the step's own name later leaves the file under NAME. Rank-local; returns
 * 0, or errno (a file system without hard links: write the file instead). */
int tr_ckpt_link(const char *dir, long step, const char *name);

/* Points DIR/last.h5 at step's file (a relative symbolic link, renamed into place).
 * Rank-local; returns 0 or errno (a file system without symbolic links). */
int tr_ckpt_point_last(const char *dir, long step);

#endif
