/* checkpoint.h: the run's full state in one parallel-HDF5 file per checkpoint.
 *
 * Layout (format "trainer-checkpoint", version 1):
 *   /                    attributes: format, format_version, model, step, epoch,
 *                        seed, optimizer, written_ranks/dp/tp/pp, trainer_version
 *   /deck                the resolved deck text (a string dataset)
 *   /model/<layer>/<p>   every parameter at its full logical shape (float32)
 *   /optimizer/<state>/<layer>/<p>   optimizer state shaped like its parameter
 * Every tensor dataset carries the attributes kind, layer and crc32 (zlib's CRC-32
 * of its little-endian float32 bytes in row-major order).
 *
 * Writes are collective through MPI-IO: each rank writes only its hyperslab (a
 * band of rows) of each tensor, into DIR/step_NNNNNNNN.h5.tmp; the file is flushed,
 * synced and only then renamed into place, so a crash mid-write leaves the
 * previous checkpoint as the newest valid one. This module knows nothing of
 * models: the caller lists the tensors. */
#ifndef TR_CHECKPOINT_H
#define TR_CHECKPOINT_H

#include "comm/comm.h"

#include <stddef.h>
#include <stdint.h>

#define TR_CKPT_FORMAT "trainer-checkpoint"
#define TR_CKPT_VERSION 1
#define TR_CKPT_MAX_DIMS 4

typedef struct tr_ckpt_tensor {
    char path[160]; /* "/model/fc1/weight" */
    char kind[32];  /* "parameter", "momentum", "adam_m", "adam_v" */
    char layer[32];
    int ndim;
    uint64_t dims[TR_CKPT_MAX_DIMS];
    float *data; /* the full logical tensor, present on every rank (data parallel) */
} tr_ckpt_tensor;

typedef struct tr_ckpt_meta {
    char model[32];
    char optimizer[16];
    long step;     /* optimizer steps completed */
    double epoch;
    uint64_t seed;
    int ranks, dp, tp, pp; /* the layout it was written at */
    const char *deck_text; /* on write */
    int collective_io;     /* on write: MPI-IO collective buffering for tensor data */
} tr_ckpt_meta;

typedef struct tr_ckpt_stats {
    double seconds; /* open to rename, all ranks */
    double bytes;   /* tensor bytes in the file */
} tr_ckpt_stats;

/* DIR/step_NNNNNNNN.h5 */
void tr_ckpt_path(char *buf, size_t len, const char *dir, long step);

/* Collective over g. Returns 0, or TR_EXIT_IOERR with err set on every rank; a
 * failed write removes its temporary file and leaves older checkpoints alone. */
int tr_ckpt_write(const char *dir, const tr_ckpt_meta *meta, const tr_ckpt_tensor *t, int n,
                  tr_group *g, tr_ckpt_stats *stats, char *err, size_t errlen);

/* Collective over g. Checks format, version, model, optimizer, every tensor's
 * presence, shape and checksum, then fills the tensors. On failure returns
 * TR_EXIT_DATA (or TR_EXIT_NOINPUT when the file cannot be opened) with err
 * naming the file and the problem, and the tensors are unspecified. */
int tr_ckpt_read(const char *path, tr_ckpt_meta *meta, const tr_ckpt_tensor *t, int n,
                 tr_group *g, char *err, size_t errlen);

/* Checkpoint files in dir, newest step first; returns the count (at most max).
 * Temporary files of interrupted writes are not listed. Rank-local. */
int tr_ckpt_list(const char *dir, long *steps, int max);

/* Deletes all but the newest `keep` checkpoints and stale temporary files (call on
 * one rank). */
void tr_ckpt_prune(const char *dir, int keep);

#endif
