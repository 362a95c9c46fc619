/* checkpoint_internal.h: what the checkpoint files share (checkpoint.c lists them).
 * Not part of the public API: checkpoint.h is. */
#ifndef TR_CHECKPOINT_INTERNAL_H
#define TR_CHECKPOINT_INTERNAL_H

#include "io/checkpoint.h"
#include "comm/comm_mpi.h"
#include "core/error.h"

#include <hdf5.h>
#include <stddef.h>
#include <stdint.h>

/* ---- HDF5 and messages (checkpoint_hdf5.c) ----------------------------------- */

/* err gets the message unless it has one already: the first, most direct reason */
void ckpt_fail(char *err, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* fsync a file (dir = 0) or a directory (dir = 1); returns 0 or errno */
int ckpt_sync_path(const char *path, int dir);
/* The innermost description on HDF5's error stack (which it clears), in buf[256] */
const char *ckpt_h5_why(char *buf);
int ckpt_attr_write(hid_t obj, const char *name, hid_t type, const void *v);
int ckpt_attr_str(hid_t obj, const char *name, const char *v);
int ckpt_attr_i64(hid_t obj, const char *name, int64_t v);
/* Reading one attribute: 0, CKPT_ATTR_MISSING, or CKPT_ATTR_WRONG_KIND where it is
 * not a single value of type's class (an array, a string where a number belongs, a
 * float where an integer belongs, a string too long for buf) or cannot be read.
 * An array must be refused before H5Aread, which would write every element into v. */
enum { CKPT_ATTR_MISSING = -1, CKPT_ATTR_WRONG_KIND = -2 };
int ckpt_attr_read(hid_t obj, const char *name, hid_t type, void *v);
int ckpt_attr_read_str(hid_t obj, const char *name, char *buf, size_t len);
hid_t ckpt_mpio_fapl(tr_group *g);

/* ---- where a rank's elements are (checkpoint_layout.c) ------------------------ */

/* A rectangle of the matrix view, rows [row, row + rows) x columns [col, col + cols),
 * whose first element is local element `local`. */
typedef struct rect {
    uint64_t row, rows, col, cols, local;
} rect;

typedef int (*rect_fn)(const rect *r, void *ctx);

/* A contiguous piece of the file: elements [off, off + len) of the logical tensor
 * in row-major order, which are the local elements [local, local + len) of the
 * caller's tensor t. */
typedef struct run {
    int t;
    uint64_t off, local, len;
} run;

/* The product of ndim dims (1 for none): a shape's element count */
uint64_t ckpt_product(const uint64_t *dims, int ndim);
/* The rank's blocks: its own, or the whole tensor as one. Returns how many. */
int ckpt_blocks_of(const tr_ckpt_tensor *t, tr_ckpt_block *b);
int ckpt_block_rects(const tr_ckpt_block *b, uint64_t base, uint64_t a, uint64_t e, rect_fn fn,
                     void *ctx);
/* This rank's own elements of all its tensors as runs, in the caller's order */
run *ckpt_own_runs(const tr_ckpt_tensor *t, int n, size_t *count);
const float *ckpt_run_data(const tr_ckpt_tensor *t, const run *r);
/* 0, or TR_EXIT_SOFTWARE with err: a description that does not fit its shape */
int ckpt_check_descs(const tr_ckpt_tensor *t, int n, char *err, size_t errlen);

/* ---- agreement and the catalogue (checkpoint_catalogue.c) --------------------- */

/* An MPI call's failure inside an exchange ends the job (never a hang) */
void ckpt_mpi_ok(int rc, const char *what);
/* Collective: the worst code over the group, and on every rank the message of the
 * lowest rank that has it */
int ckpt_agree(tr_group *g, int code, char *err, size_t errlen);

/* What the ranks must agree on to create a tensor's dataset: a fixed-size record
 * for the all-gather. */
typedef struct cat_entry {
    char path[sizeof(((tr_ckpt_tensor *)0)->path)];
    char kind[sizeof(((tr_ckpt_tensor *)0)->kind)];
    char layer[sizeof(((tr_ckpt_tensor *)0)->layer)];
    int64_t ndim;
    uint64_t dims[TR_CKPT_MAX_DIMS];
} cat_entry;

typedef struct catalogue {
    cat_entry *e; /* every tensor of the file, in file order; the same on all ranks */
    int n;
    const cat_entry **sorted; /* e by path, for lookups */
    int *gid;                 /* the caller's tensor i is e[gid[i]] */
} catalogue;

void ckpt_cat_free(catalogue *c);
/* Collective: the catalogue, and the caller's tensors found in it (0, or
 * TR_EXIT_SOFTWARE with err, for the caller to agree on) */
int ckpt_cat_build(catalogue *c, const tr_ckpt_tensor *t, int n, tr_group *g, char *err,
                   size_t errlen);

/* ---- checksums (checkpoint_checksums.c) --------------------------------------- */

enum { CRC_OK = 0, CRC_GAP = 1, CRC_MISMATCH = 2 };

/* Collective: every catalogue tensor's CRC-32 combined from the ranks' own runs, and a
 * status (CRC_*; with expect, the file's crc32 of each caller tensor, a mismatch) */
void ckpt_checksums(const catalogue *c, const tr_ckpt_tensor *t, int n, const uint32_t *expect,
                    tr_group *g, uint32_t **crc, int **status);

/* ---- a write in parts (checkpoint_write.c), for checkpoint_async.c ------------- */

/* A checkpoint's file and the temporary name it is written under */
typedef struct ckpt_names {
    char path[4096], tmp[4200];
} ckpt_names;
/* DIR/NAME, or DIR/step_NNNNNNNN.h5 for step when name is NULL */
void ckpt_names_of(ckpt_names *nm, const char *dir, const char *name, long step);
/* Collective: all of a write but the tensor data: the descriptions checked, the
 * catalogue, the checksums, the directory and its space, the file's structure under
 * nm->tmp. where[i] gets the file offset of t[i]'s data, *bytes the tensor bytes of
 * the file. Returns 0 or the agreed code (tr_ckpt_write's) with err. */
int ckpt_write_begin(const char *dir, const ckpt_names *nm, const tr_ckpt_meta *meta,
                     const tr_ckpt_tensor *t, int n, tr_group *g, uint64_t *where, double *bytes,
                     char *err, size_t errlen);
/* Collective: the end of a write whose data this rank has written (code 0) or failed
 * to (code, err): where every rank succeeded, rank 0 syncs nm->tmp, renames it to
 * nm->path and syncs the directory; else the temporary file is removed. Returns the
 * agreed code with the same err on every rank. */
int ckpt_write_end(const char *dir, const ckpt_names *nm, int code, tr_group *g, char *err,
                   size_t errlen);

#endif
