/* checkpoint.c: parallel-HDF5 checkpoints with checksums, written to a temporary
 * name and renamed into place; each rank writes and reads only its own part of each
 * tensor, whatever the layout (see checkpoint.h). */
#include "checkpoint.h"
#include "comm/comm_mpi.h"
#include "core/error.h"
#include "version.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <zlib.h>

/* ---- HDF5 error text ---------------------------------------------------- */

/* The innermost description on HDF5's error stack: the most specific reason. */
static herr_t walk_last(unsigned n, const H5E_error2_t *e, void *data)
{
    if (n == 0 && e->desc)
        snprintf((char *)data, 256, "%s", e->desc);
    return 0;
}

static const char *h5_why(char *buf)
{
    buf[0] = '\0';
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, walk_last, buf);
    H5Eclear2(H5E_DEFAULT);
    if (!buf[0])
        snprintf(buf, 256, "unknown HDF5 error");
    return buf;
}

static void fail(char *err, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(char *err, size_t len, const char *fmt, ...)
{
    if (err[0])
        return; /* keep the first, most direct reason */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
}

static uint32_t crc_of(const float *x, uint64_t n)
{
    uLong crc = crc32(0L, Z_NULL, 0);
    const unsigned char *p = (const unsigned char *)x;
    uint64_t bytes = n * sizeof(float);
    while (bytes) {
        uInt chunk = bytes > (1u << 30) ? (1u << 30) : (uInt)bytes;
        crc = crc32(crc, p, chunk);
        p += chunk;
        bytes -= chunk;
    }
    return (uint32_t)crc;
}

static uint64_t numel(const tr_ckpt_tensor *t)
{
    uint64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= t->dims[d];
    return n;
}

void tr_ckpt_path(char *buf, size_t len, const char *dir, long step)
{
    snprintf(buf, len, "%s/step_%08ld.h5", dir, step);
}

/* ---- attributes ----------------------------------------------------------- */

static int attr_write(hid_t obj, const char *name, hid_t type, const void *v)
{
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(obj, name, type, sp, H5P_DEFAULT, H5P_DEFAULT);
    herr_t rc = a < 0 ? -1 : H5Awrite(a, type, v);
    if (a >= 0)
        H5Aclose(a);
    H5Sclose(sp);
    return rc < 0 ? -1 : 0;
}

static int attr_str(hid_t obj, const char *name, const char *v)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, strlen(v) + 1);
    H5Tset_strpad(t, H5T_STR_NULLTERM);
    int rc = attr_write(obj, name, t, v);
    H5Tclose(t);
    return rc;
}

static int attr_i64(hid_t obj, const char *name, int64_t v)
{
    return attr_write(obj, name, H5T_NATIVE_INT64, &v);
}

static int attr_read(hid_t obj, const char *name, hid_t type, void *v)
{
    if (H5Aexists(obj, name) <= 0)
        return -1;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    herr_t rc = a < 0 ? -1 : H5Aread(a, type, v);
    if (a >= 0)
        H5Aclose(a);
    return rc < 0 ? -1 : 0;
}

static int attr_read_str(hid_t obj, const char *name, char *buf, size_t len)
{
    if (H5Aexists(obj, name) <= 0)
        return -1;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    hid_t ft = H5Aget_type(a);
    size_t sz = H5Tget_size(ft);
    int rc = -1;
    if (H5Tget_class(ft) == H5T_STRING && !H5Tis_variable_str(ft) && sz < len) {
        hid_t mt = H5Tcopy(H5T_C_S1);
        H5Tset_size(mt, sz + 1);
        memset(buf, 0, len);
        rc = H5Aread(a, mt, buf) < 0 ? -1 : 0;
        H5Tclose(mt);
    }
    H5Tclose(ft);
    H5Aclose(a);
    return rc;
}

/* ---- where a rank's elements are in the logical tensor --------------------- */

/* Columns of the matrix view [dims[0], product of the other dims]. */
static uint64_t width(const tr_ckpt_tensor *t)
{
    uint64_t w = 1;
    for (int d = 1; d < t->ndim; d++)
        w *= t->dims[d];
    return w;
}

/* The rank's blocks: its own, or the whole tensor as one. Returns how many. */
static int blocks_of(const tr_ckpt_tensor *t, tr_ckpt_block *b)
{
    if (t->nblocks <= 0) {
        b[0] = (tr_ckpt_block){0, 0, t->dims[0], width(t)};
        return 1;
    }
    memcpy(b, t->block, (size_t)t->nblocks * sizeof *b);
    return t->nblocks;
}

/* The number of local elements: what the blocks hold. */
static uint64_t local_count(const tr_ckpt_tensor *t)
{
    tr_ckpt_block b[TR_CKPT_MAX_BLOCKS];
    int nb = blocks_of(t, b);
    uint64_t n = 0;
    for (int i = 0; i < nb; i++)
        n += b[i].rows * b[i].cols;
    return n;
}

/* A rectangle of the matrix view, rows [row, row + rows) x columns [col, col + cols),
 * whose first element is local element `local`. */
typedef struct rect {
    uint64_t row, rows, col, cols, local;
} rect;

typedef int (*rect_fn)(const rect *r, void *ctx);

/* The local elements [a, e) of block b, whose first element is local element base
 * (base <= a < e <= base + its size), as at most three rectangles in local order:
 * the end of a first row, whole rows, the start of a last row. Each is one
 * hyperslab in the file, and within a block local order is row-major order. */
static int block_rects(const tr_ckpt_block *b, uint64_t base, uint64_t a, uint64_t e,
                       rect_fn fn, void *ctx)
{
    uint64_t i = a - base, end = e - base, r = i / b->cols, c = i % b->cols;
    int rc = 0;
    if (c || end - i < b->cols) {
        uint64_t m = end - i < b->cols - c ? end - i : b->cols - c;
        rc |= fn(&(rect){b->row0 + r, 1, b->col0 + c, m, base + i}, ctx);
        i += m, r++;
    }
    if (end - i >= b->cols) {
        uint64_t k = (end - i) / b->cols;
        rc |= fn(&(rect){b->row0 + r, k, b->col0, b->cols, base + i}, ctx);
        i += k * b->cols, r += k;
    }
    if (i < end)
        rc |= fn(&(rect){b->row0 + r, 1, b->col0, end - i, base + i}, ctx);
    return rc;
}

/* block_rects over every block that meets the local elements [lo, hi). */
static int range_rects(const tr_ckpt_tensor *t, uint64_t lo, uint64_t hi, rect_fn fn, void *ctx)
{
    tr_ckpt_block b[TR_CKPT_MAX_BLOCKS];
    int nb = blocks_of(t, b), rc = 0;
    uint64_t base = 0;
    for (int i = 0; i < nb; i++) {
        uint64_t n = b[i].rows * b[i].cols;
        uint64_t a = lo > base ? lo : base, e = hi < base + n ? hi : base + n;
        if (a < e)
            rc |= block_rects(&b[i], base, a, e, fn, ctx);
        base += n;
    }
    return rc;
}

/* A contiguous piece of the file: elements [off, off + len) of the logical tensor
 * in row-major order, which are the local elements [local, local + len) of the
 * caller's tensor t. */
typedef struct run {
    int t;
    uint64_t off, local, len;
} run;

/* Runs being listed: counted first (r == NULL), then stored. Consecutive pieces
 * that continue each other in the file and in memory become one run, so a tensor
 * held whole or in bands of rows is one run, a band of columns one per row. */
typedef struct run_list {
    run *r;
    size_t n;
    int t;
    uint64_t width;
    run cur;
    int open;
} run_list;

static void run_flush(run_list *l)
{
    if (l->open && l->r)
        l->r[l->n] = l->cur;
    l->n += (size_t)l->open;
    l->open = 0;
}

static void run_push(run_list *l, uint64_t off, uint64_t local, uint64_t len)
{
    run *c = &l->cur;
    if (l->open && c->off + c->len == off && c->local + c->len == local) {
        c->len += len;
        return;
    }
    run_flush(l);
    *c = (run){l->t, off, local, len};
    l->open = 1;
}

static int rect_runs(const rect *x, void *ctx)
{
    run_list *l = ctx;
    if (x->cols == l->width) { /* whole rows follow each other in the file */
        run_push(l, x->row * l->width, x->local, x->rows * x->cols);
        return 0;
    }
    for (uint64_t i = 0; i < x->rows; i++)
        run_push(l, (x->row + i) * l->width + x->col, x->local + i * x->cols, x->cols);
    return 0;
}

/* This rank's own elements of all its tensors as runs, in the caller's order. */
static run *own_runs(const tr_ckpt_tensor *t, int n, size_t *count)
{
    run_list l = {0};
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < n; i++) {
            l.t = i;
            l.width = width(&t[i]);
            range_rects(&t[i], t[i].own_lo, t[i].own_hi, rect_runs, &l);
            run_flush(&l);
        }
        if (pass == 0) {
            *count = l.n;
            l.r = tr_alloc((l.n ? l.n : 1) * sizeof *l.r, "checkpoint runs");
            l.n = 0;
        }
    }
    return l.r;
}

static const float *run_data(const tr_ckpt_tensor *t, const run *r)
{
    return t->data + (r->local - t->data_lo);
}

/* The caller's description must fit its own shape; anything else is a bug in the
 * caller, found here rather than as a corrupt file. */
static int check_desc(const tr_ckpt_tensor *t, char *err, size_t errlen)
{
    int ok = t->ndim >= 1 && t->ndim <= TR_CKPT_MAX_DIMS && t->nblocks >= 0 &&
             t->nblocks <= TR_CKPT_MAX_BLOCKS;
    uint64_t w = ok ? width(t) : 0;
    for (int i = 0; ok && i < t->nblocks; i++) {
        const tr_ckpt_block *b = &t->block[i];
        ok = b->row0 + b->rows <= t->dims[0] && b->col0 + b->cols <= w;
    }
    ok = ok && t->data_lo <= t->own_lo && t->own_lo <= t->own_hi && t->own_hi <= t->data_hi &&
         t->data_hi <= local_count(t) && (t->data || t->data_lo == t->data_hi);
    if (!ok)
        fail(err, errlen, "internal error: checkpoint tensor %s is described inconsistently "
             "(shape, blocks or ranges)", t->path);
    return ok ? 0 : -1;
}

static int check_descs(const tr_ckpt_tensor *t, int n, char *err, size_t errlen)
{
    for (int i = 0; i < n; i++)
        if (check_desc(&t[i], err, errlen))
            return TR_EXIT_SOFTWARE;
    return 0;
}

/* ---- agreement between ranks ------------------------------------------------- */

/* MPI failures inside an exchange are run-time faults: end the job, never hang. */
static void mpi_ok(int rc, const char *what)
{
    if (rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING] = "";
        int len = 0;
        MPI_Error_string(rc, msg, &len);
        tr_fatal(TR_EXIT_SOFTWARE, "%s failed during a checkpoint: %s", what, msg);
    }
}

/* Collective: the worst code over the group, and on every rank the message of the
 * lowest rank that has it. Ranks see different parts of the file, so only one may
 * know what is wrong; all of them report it (rank 0 prints it). */
static int agree(tr_group *g, int code, char *err, size_t errlen)
{
    MPI_Comm comm = tr_group_mpi_comm(g);
    int worst = 0, rank = tr_group_rank(g);
    mpi_ok(MPI_Allreduce(&code, &worst, 1, MPI_INT, MPI_MAX, comm), "MPI_Allreduce");
    if (!worst)
        return 0;
    int me = code == worst ? rank : INT_MAX, root = 0;
    mpi_ok(MPI_Allreduce(&me, &root, 1, MPI_INT, MPI_MIN, comm), "MPI_Allreduce");
    char msg[8192];
    if (rank == root)
        snprintf(msg, sizeof msg, "%s", err[0] ? err : "checkpoint failed");
    mpi_ok(MPI_Bcast(msg, (int)sizeof msg, MPI_CHAR, root, comm), "MPI_Bcast");
    snprintf(err, errlen, "%s", msg);
    return worst;
}

/* ---- the catalogue: every tensor of the file ------------------------------------ */

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

static void cat_free(catalogue *c)
{
    tr_free(c->e);
    tr_free(c->sorted);
    tr_free(c->gid);
    memset(c, 0, sizeof *c);
}

static uint64_t cat_numel(const cat_entry *e)
{
    uint64_t n = 1;
    for (int d = 0; d < e->ndim; d++)
        n *= e->dims[d];
    return n;
}

/* Whether this rank describes t in the catalogue: it owns the tensor's first
 * element, which exactly one rank does (an empty tensor: every rank holding it). */
static int speaks_for(const tr_ckpt_tensor *t)
{
    if (numel(t) == 0)
        return 1;
    tr_ckpt_block b[TR_CKPT_MAX_BLOCKS];
    int nb = blocks_of(t, b);
    uint64_t base = 0;
    for (int i = 0; i < nb; i++) {
        if (b[i].row0 == 0 && b[i].col0 == 0 && b[i].rows && b[i].cols)
            return t->own_lo <= base && base < t->own_hi;
        base += b[i].rows * b[i].cols;
    }
    return 0;
}

static int cmp_path(const void *a, const void *b)
{
    const cat_entry *x = *(const cat_entry *const *)a, *y = *(const cat_entry *const *)b;
    return strcmp(x->path, y->path);
}

static int cmp_entry(const void *a, const void *b)
{
    const cat_entry *x = *(const cat_entry *const *)a, *y = *(const cat_entry *const *)b;
    int c = strcmp(x->path, y->path);
    return c ? c : (x > y) - (x < y); /* equal paths: first in gathered order first */
}

static int same_shape(const cat_entry *a, const cat_entry *b)
{
    return a->ndim == b->ndim && !memcmp(a->dims, b->dims, (size_t)a->ndim * sizeof *a->dims);
}

/* Gathers the descriptions of every rank's tensors (one per tensor, from the rank
 * that speaks for it): pipeline stages hold different tensors, and HDF5 creates
 * datasets only collectively. Returns a gathered array of *total entries. */
static cat_entry *cat_gather(const tr_ckpt_tensor *t, int n, tr_group *g, int *total)
{
    MPI_Comm comm = tr_group_mpi_comm(g);
    int size = tr_group_size(g), mine = 0;
    for (int i = 0; i < n; i++)
        mine += speaks_for(&t[i]);
    cat_entry *send = tr_alloc((size_t)(mine ? mine : 1) * sizeof *send, "checkpoint catalogue");
    for (int i = 0, k = 0; i < n; i++)
        if (speaks_for(&t[i])) {
            cat_entry *e = &send[k++];
            snprintf(e->path, sizeof e->path, "%s", t[i].path);
            snprintf(e->kind, sizeof e->kind, "%s", t[i].kind);
            snprintf(e->layer, sizeof e->layer, "%s", t[i].layer);
            e->ndim = t[i].ndim;
            memcpy(e->dims, t[i].dims, sizeof e->dims);
        }
    int *counts = tr_alloc((size_t)size * sizeof *counts, "checkpoint catalogue");
    int *displs = tr_alloc((size_t)size * sizeof *displs, "checkpoint catalogue");
    mpi_ok(MPI_Allgather(&mine, 1, MPI_INT, counts, 1, MPI_INT, comm), "MPI_Allgather");
    long sum = 0;
    for (int r = 0; r < size; r++) {
        displs[r] = (int)sum;
        sum += counts[r];
    }
    if (sum > INT_MAX / 2)
        tr_fatal(TR_EXIT_SOFTWARE, "too many checkpoint tensors (%ld)", sum);
    cat_entry *all = tr_alloc((size_t)(sum ? sum : 1) * sizeof *all, "checkpoint catalogue");
    MPI_Datatype et;
    mpi_ok(MPI_Type_contiguous((int)sizeof(cat_entry), MPI_BYTE, &et), "MPI_Type_contiguous");
    mpi_ok(MPI_Type_commit(&et), "MPI_Type_commit");
    mpi_ok(MPI_Allgatherv(send, mine, et, all, counts, displs, et, comm), "MPI_Allgatherv");
    MPI_Type_free(&et);
    tr_free(send);
    tr_free(counts);
    tr_free(displs);
    *total = (int)sum;
    return all;
}

/* Collective. Builds the catalogue (duplicates, from empty tensors, dropped) and
 * finds the caller's tensors in it. Returns 0 or TR_EXIT_SOFTWARE with err (a
 * caller whose own ranges miss a tensor's first element, or ranks that disagree on
 * a shape); the caller agrees on it. */
static int cat_build(catalogue *c, const tr_ckpt_tensor *t, int n, tr_group *g, char *err,
                     size_t errlen)
{
    int total = 0, bad = 0;
    memset(c, 0, sizeof *c);
    cat_entry *all = cat_gather(t, n, g, &total);
    const cat_entry **by =
        tr_alloc((size_t)(total ? total : 1) * sizeof *by, "checkpoint catalogue");
    unsigned char *keep = tr_alloc((size_t)(total ? total : 1), "checkpoint catalogue");
    for (int i = 0; i < total; i++)
        by[i] = &all[i];
    qsort(by, (size_t)total, sizeof *by, cmp_entry);
    for (int i = 0; i < total; i++) {
        int dup = i > 0 && !strcmp(by[i - 1]->path, by[i]->path);
        keep[by[i] - all] = !dup;
        if (dup && !same_shape(by[i - 1], by[i]) && !bad) {
            fail(err, errlen, "internal error: ranks give %s different shapes", by[i]->path);
            bad = TR_EXIT_SOFTWARE;
        }
    }
    c->e = tr_alloc((size_t)(total ? total : 1) * sizeof *c->e, "checkpoint catalogue");
    for (int i = 0; i < total; i++)
        if (keep[i])
            c->e[c->n++] = all[i];
    tr_free(keep);
    tr_free(all);
    for (int i = 0; i < c->n; i++)
        by[i] = &c->e[i];
    qsort(by, (size_t)c->n, sizeof *by, cmp_entry);
    c->sorted = by;
    c->gid = tr_alloc((size_t)(n ? n : 1) * sizeof *c->gid, "checkpoint catalogue");
    for (int i = 0; i < n; i++) {
        cat_entry key = {0};
        const cat_entry *k = &key, **hit;
        snprintf(key.path, sizeof key.path, "%s", t[i].path);
        hit = bsearch(&k, by, (size_t)c->n, sizeof *by, cmp_path);
        c->gid[i] = hit ? (int)(*hit - c->e) : -1;
        if (!hit && !bad) {
            fail(err, errlen, "internal error: no rank owns the first element of %s",
                 t[i].path);
            bad = TR_EXIT_SOFTWARE;
        }
    }
    return bad;
}

/* ---- checksums: combined from every rank's runs ------------------------------- */

/* A run's CRC on its way to the rank that combines its tensor. */
typedef struct crc_rec {
    uint64_t gid, off, len; /* elements of the logical tensor */
    uint32_t crc;           /* of the run's bytes */
    uint32_t expect;        /* on reads: the file's crc32 of the tensor */
} crc_rec;

static int cmp_rec(const void *a, const void *b)
{
    const crc_rec *x = a, *y = b;
    if (x->gid != y->gid)
        return x->gid < y->gid ? -1 : 1;
    return (x->off > y->off) - (x->off < y->off);
}

enum { CRC_OK = 0, CRC_GAP = 1, CRC_MISMATCH = 2 };

/* The tensor's CRC from its runs sorted by offset, which must tile it exactly:
 * CRC-32 composes, so the whole tensor's CRC needs no rank to hold the tensor. */
static int combine(const crc_rec *r, size_t n, uint64_t numel_, int check, uint32_t *crc)
{
    uLong c = crc32(0L, Z_NULL, 0);
    uint64_t at = 0;
    for (size_t i = 0; i < n; i++) {
        if (r[i].off != at)
            return CRC_GAP;
        c = crc32_combine(c, (uLong)r[i].crc, (z_off_t)(r[i].len * sizeof(float)));
        at += r[i].len;
    }
    *crc = (uint32_t)c;
    if (at != numel_)
        return CRC_GAP;
    return check && n && (uint32_t)c != r[0].expect ? CRC_MISMATCH : CRC_OK;
}

/* This rank's run CRCs, ordered by the rank that combines them (gid mod size). */
static crc_rec *make_recs(const catalogue *c, const tr_ckpt_tensor *t, const run *runs,
                          size_t nruns, const uint32_t *expect, int size, int *counts)
{
    crc_rec *rec = tr_alloc((nruns ? nruns : 1) * sizeof *rec, "checkpoint checksums");
    size_t *at = tr_alloc((size_t)size * sizeof *at, "checkpoint checksums");
    memset(counts, 0, (size_t)size * sizeof *counts);
    for (size_t i = 0; i < nruns; i++)
        counts[c->gid[runs[i].t] % size]++;
    for (int r = 1; r < size; r++)
        at[r] = at[r - 1] + (size_t)counts[r - 1];
    for (size_t i = 0; i < nruns; i++) {
        const run *x = &runs[i];
        int gid = c->gid[x->t];
        rec[at[gid % size]++] = (crc_rec){(uint64_t)gid, x->off, x->len,
                                          crc_of(run_data(&t[x->t], x), x->len),
                                          expect ? expect[x->t] : 0};
    }
    tr_free(at);
    return rec;
}

static int *displacements(const int *counts, int size)
{
    int *d = tr_alloc((size_t)size * sizeof *d, "checkpoint checksums");
    long sum = 0;
    for (int r = 0; r < size; r++) {
        d[r] = (int)sum;
        sum += counts[r];
        if (sum > INT_MAX)
            tr_fatal(TR_EXIT_SOFTWARE, "too many checkpoint runs for one rank (%ld)", sum);
    }
    return d;
}

/* Collective. The CRC-32 of every tensor of the catalogue, and a status (CRC_*):
 * each tensor's runs go to one rank (gid mod size), which sorts them by offset,
 * checks that they tile the tensor and combines them (with expect, on reads, it
 * also compares with the file's value); then every rank learns every result.
 * Memory: this rank's runs, the runs it combines and two words per tensor. */
static void tensor_crcs(const catalogue *c, const tr_ckpt_tensor *t, const run *runs,
                        size_t nruns, const uint32_t *expect, tr_group *g, uint32_t *crc,
                        int *status)
{
    MPI_Comm comm = tr_group_mpi_comm(g);
    int size = tr_group_size(g), rank = tr_group_rank(g);
    int *scount = tr_alloc((size_t)size * sizeof *scount, "checkpoint checksums");
    int *rcount = tr_alloc((size_t)size * sizeof *rcount, "checkpoint checksums");
    crc_rec *send = make_recs(c, t, runs, nruns, expect, size, scount);
    mpi_ok(MPI_Alltoall(scount, 1, MPI_INT, rcount, 1, MPI_INT, comm), "MPI_Alltoall");
    int *sdispl = displacements(scount, size), *rdispl = displacements(rcount, size);
    size_t nrecv = (size_t)rdispl[size - 1] + (size_t)rcount[size - 1];
    crc_rec *recv = tr_alloc((nrecv ? nrecv : 1) * sizeof *recv, "checkpoint checksums");
    MPI_Datatype rt;
    mpi_ok(MPI_Type_contiguous((int)sizeof(crc_rec), MPI_BYTE, &rt), "MPI_Type_contiguous");
    mpi_ok(MPI_Type_commit(&rt), "MPI_Type_commit");
    mpi_ok(MPI_Alltoallv(send, scount, sdispl, rt, recv, rcount, rdispl, rt, comm),
           "MPI_Alltoallv");
    MPI_Type_free(&rt);
    tr_free(send);
    tr_free(scount);
    tr_free(rcount);
    tr_free(sdispl);
    tr_free(rdispl);

    qsort(recv, nrecv, sizeof *recv, cmp_rec);
    uint64_t *res = tr_alloc((size_t)(c->n ? c->n : 1) * 2 * sizeof *res, "checkpoint checksums");
    size_t i = 0;
    for (int gid = rank; gid < c->n; gid += size) { /* the tensors this rank combines */
        while (i < nrecv && recv[i].gid < (uint64_t)gid)
            i++;
        size_t j = i;
        while (j < nrecv && recv[j].gid == (uint64_t)gid)
            j++;
        uint32_t v = 0;
        int st = combine(recv + i, j - i, cat_numel(&c->e[gid]), expect != NULL, &v);
        res[2 * gid] = v;
        res[2 * gid + 1] = (uint64_t)st;
        i = j;
    }
    tr_free(recv);
    /* one rank set each tensor's words, the others left zeros: a sum gathers them */
    if (c->n)
        mpi_ok(MPI_Allreduce(MPI_IN_PLACE, res, 2 * c->n, MPI_UINT64_T, MPI_SUM, comm),
               "MPI_Allreduce");
    for (int k = 0; k < c->n; k++) {
        crc[k] = (uint32_t)res[2 * k];
        status[k] = (int)res[2 * k + 1];
    }
    tr_free(res);
}

/* Collective: the catalogue's CRCs and statuses from this rank's own runs. */
static void checksums(const catalogue *c, const tr_ckpt_tensor *t, int n, const uint32_t *expect,
                      tr_group *g, uint32_t **crc, int **status)
{
    size_t nruns = 0;
    run *runs = own_runs(t, n, &nruns);
    *crc = tr_alloc((size_t)(c->n ? c->n : 1) * sizeof **crc, "checkpoint checksums");
    *status = tr_alloc((size_t)(c->n ? c->n : 1) * sizeof **status, "checkpoint checksums");
    tensor_crcs(c, t, runs, nruns, expect, g, *crc, *status);
    tr_free(runs);
}

/* ---- write ------------------------------------------------------------------ */

/* the write in progress: who writes and how */
typedef struct wctx {
    tr_group *g;
    int rank, size;
    int collective; /* tensor data through MPI-IO collective buffering */
} wctx;

/* Collective metadata operations make HDF5 read metadata on one rank and share it,
 * which needs every rank to make the same calls: right for writes, where every rank
 * creates every dataset, wrong for reads, where each rank opens only its tensors. */
static hid_t mpio_fapl(tr_group *g, int collective_metadata)
{
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_fapl_mpio(fapl, tr_group_mpi_comm(g), MPI_INFO_NULL);
    /* large datasets on 1 MiB boundaries: whole file-system blocks per writer */
    H5Pset_alignment(fapl, 1 << 20, 1 << 20);
    if (collective_metadata) {
        H5Pset_all_coll_metadata_ops(fapl, 1);
        H5Pset_coll_metadata_write(fapl, 1);
    }
    return fapl;
}

/* Creates tensor e's dataset with its attributes (collective: every rank passes
 * the same values, crc included) and returns where its data starts in the file;
 * the data itself is written later, by write_runs. */
static int create_tensor(hid_t f, const cat_entry *e, uint32_t crc, uint64_t *offset, char *err,
                         size_t errlen)
{
    char why[256];
    hsize_t dims[TR_CKPT_MAX_DIMS];
    for (int d = 0; d < e->ndim; d++)
        dims[d] = e->dims[d];
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    hid_t fs = H5Screate_simple((int)e->ndim, dims, NULL);
    /* contiguous and allocated now, so the data has a fixed place in the file; no
     * fill values, since every byte is written next */
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_layout(dcpl, H5D_CONTIGUOUS);
    H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY);
    H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
    hid_t ds = H5Dcreate2(f, e->path, H5T_IEEE_F32LE, fs, lcpl, dcpl, H5P_DEFAULT);
    H5Pclose(dcpl);
    H5Pclose(lcpl);
    H5Sclose(fs);
    if (ds < 0) {
        fail(err, errlen, "cannot create %s: %s", e->path, h5_why(why));
        return -1;
    }
    int arc = attr_str(ds, "kind", e->kind) | attr_str(ds, "layer", e->layer) |
              attr_write(ds, "crc32", H5T_NATIVE_UINT32, &crc);
    haddr_t addr = H5Dget_offset(ds);
    H5Dclose(ds);
    if (arc || addr == HADDR_UNDEF) {
        fail(err, errlen, "creating %s failed: %s", e->path, h5_why(why));
        return -1;
    }
    *offset = (uint64_t)addr;
    return 0;
}

/* One piece of a run: at most 1 GiB, since MPI counts are int. */
static int write_piece(MPI_File fh, int collective, uint64_t at, const void *src, uint64_t len,
                       char *msg)
{
    MPI_Status st;
    int rc = collective ? MPI_File_write_at_all(fh, (MPI_Offset)at, src, (int)len, MPI_BYTE, &st)
                        : MPI_File_write_at(fh, (MPI_Offset)at, src, (int)len, MPI_BYTE, &st);
    int done = 0, ml = 0;
    MPI_Get_count(&st, MPI_BYTE, &done);
    if (rc == MPI_SUCCESS && (uint64_t)done == len)
        return 0;
    snprintf(msg, MPI_MAX_ERROR_STRING, "short write");
    if (rc != MPI_SUCCESS)
        MPI_Error_string(rc, msg, &ml);
    return -1;
}

#define PIECE ((uint64_t)1 << 30)

static uint64_t pieces(const run *runs, size_t n)
{
    uint64_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += (runs[i].len * sizeof(float) + PIECE - 1) / PIECE;
    return k;
}

/* Each rank's own runs straight through MPI-IO into the places HDF5 allocated
 * (where[i]: the file offset of the caller's tensor i), then synced to stable
 * storage. Writing outside HDF5 keeps a failed write (a full disk) from leaving
 * HDF5's collective metadata operations out of step across ranks, where they would
 * hang. Collective mode: every rank makes as many calls as the rank with the most
 * pieces, the others empty ones; after a failure a rank goes on with empty ones. */
static int write_runs(const char *file, const tr_ckpt_tensor *t, const run *runs, size_t nruns,
                      const uint64_t *where, const wctx *w, char *err, size_t errlen)
{
    MPI_Comm comm = tr_group_mpi_comm(w->g);
    MPI_File fh;
    if (MPI_File_open(comm, file, MPI_MODE_WRONLY, MPI_INFO_NULL, &fh) != MPI_SUCCESS) {
        fail(err, errlen, "cannot reopen '%s' for its data", file);
        return -1;
    }
    MPI_File_set_errhandler(fh, MPI_ERRORS_RETURN);
    uint64_t calls = pieces(runs, nruns), made = 0;
    if (w->collective)
        mpi_ok(MPI_Allreduce(MPI_IN_PLACE, &calls, 1, MPI_UINT64_T, MPI_MAX, comm),
               "MPI_Allreduce");
    int bad = 0;
    char msg[MPI_MAX_ERROR_STRING];
    for (size_t i = 0; i < nruns && !(bad && !w->collective); i++) {
        const char *src = (const char *)run_data(&t[runs[i].t], &runs[i]);
        uint64_t at = where[runs[i].t] + runs[i].off * sizeof(float);
        uint64_t bytes = runs[i].len * sizeof(float);
        for (uint64_t o = 0; o < bytes && !(bad && !w->collective); o += PIECE, made++) {
            uint64_t len = bad ? 0 : (bytes - o < PIECE ? bytes - o : PIECE);
            if (write_piece(fh, w->collective, at + o, src + o, len, msg) && !bad) {
                fail(err, errlen, "writing %s to '%s' failed: %s", t[runs[i].t].path, file, msg);
                bad = 1;
            }
        }
    }
    static const char nothing[1];
    for (; w->collective && made < calls; made++)
        write_piece(fh, 1, 0, nothing, 0, msg);
    if (MPI_File_sync(fh) != MPI_SUCCESS) {
        fail(err, errlen, "syncing '%s' failed (disk full or I/O error)", file);
        bad = 1;
    }
    MPI_File_close(&fh);
    return bad ? -1 : 0;
}

static int write_deck(hid_t f, const char *text, int rank, char *err, size_t errlen)
{
    char why[256];
    size_t len = strlen(text);
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, len ? len : 1);
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t ds = H5Dcreate2(f, "/deck", t, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    herr_t rc = -1;
    if (ds >= 0) {
        hid_t sel = H5Scopy(sp);
        if (rank)
            H5Sselect_none(sel);
        hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
        H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE);
        rc = H5Dwrite(ds, t, sel, sel, dxpl, len ? text : " ");
        H5Pclose(dxpl);
        H5Sclose(sel);
        H5Dclose(ds);
    }
    H5Sclose(sp);
    H5Tclose(t);
    if (rc < 0)
        fail(err, errlen, "writing /deck failed: %s", h5_why(why));
    return rc < 0 ? -1 : 0;
}

static int write_meta(hid_t f, const tr_ckpt_meta *m)
{
    return attr_str(f, "format", TR_CKPT_FORMAT) | attr_i64(f, "format_version", TR_CKPT_VERSION) |
           attr_str(f, "trainer_version", TR_VERSION) | attr_str(f, "model", m->model) |
           attr_str(f, "optimizer", m->optimizer) | attr_i64(f, "step", m->step) |
           attr_write(f, "epoch", H5T_NATIVE_DOUBLE, &m->epoch) |
           attr_write(f, "seed", H5T_NATIVE_UINT64, &m->seed) |
           attr_i64(f, "written_ranks", m->ranks) | attr_i64(f, "written_dp", m->dp) |
           attr_i64(f, "written_tp", m->tp) | attr_i64(f, "written_pp", m->pp) |
           attr_i64(f, "written_zero", m->zero) |
           attr_str(f, "precision", m->precision[0] ? m->precision : "fp32") |
           attr_write(f, "loss_scale", H5T_NATIVE_DOUBLE, &m->loss_scale) |
           attr_i64(f, "loss_scale_good_steps", m->loss_scale_good) |
           attr_i64(f, "skipped_steps", m->skipped_steps);
}

/* fsync a path (file or directory); returns errno or 0 */
static int sync_path(const char *path, int dir)
{
    int fd = open(path, dir ? O_RDONLY | O_DIRECTORY : O_RDWR);
    if (fd < 0)
        return errno;
    int rc = fsync(fd) ? errno : 0;
    close(fd);
    return rc;
}

/* Tensor bytes in the file. */
static double tensor_bytes(const catalogue *c)
{
    double b = 0;
    for (int i = 0; i < c->n; i++)
        b += (double)cat_numel(&c->e[i]) * sizeof(float);
    return b;
}

/* Bytes the file will take: data (large datasets aligned to 1 MiB) plus metadata. */
static double file_bytes(const catalogue *c, const char *deck)
{
    double b = (double)(1 << 20) + (deck ? strlen(deck) : 0);
    for (int i = 0; i < c->n; i++) {
        double x = (double)cat_numel(&c->e[i]) * sizeof(float);
        b += x >= (1 << 20) ? x + (1 << 20) : x + 4096;
    }
    return b;
}

/* Parallel HDF5 does not recover from a write that fails on some ranks: its
 * collective close can then wait forever. So a checkpoint that cannot fit is
 * refused before the file is created (the previous one stays as it is). */
static int check_space(const char *dir, double need, char *err, size_t errlen)
{
    struct statvfs v;
    if (statvfs(dir, &v))
        return 0; /* unknown: try, and let the write report */
    double avail = (double)v.f_bavail * (double)v.f_frsize;
    if (avail >= need)
        return 0;
    fail(err, errlen,
         "not enough space for a checkpoint in '%s': it needs about %.1f MiB and %.1f MiB are "
         "free (No space left on device); free space, lower [checkpoint] keep, or set "
         "[checkpoint] dir elsewhere",
         dir, need / 1048576.0, avail / 1048576.0);
    return -1;
}

/* Collective. Everything known before the file is touched: the descriptions fit,
 * the catalogue, every tensor's CRC, the directory and its free space. */
static int prepare_write(const char *dir, const tr_ckpt_meta *meta, const tr_ckpt_tensor *t,
                         int n, tr_group *g, catalogue *c, uint32_t **crc, char *err,
                         size_t errlen)
{
    int rank = tr_group_rank(g);
    int code = agree(g, check_descs(t, n, err, errlen), err, errlen);
    if (code)
        return code;
    code = agree(g, cat_build(c, t, n, g, err, errlen), err, errlen);
    if (code)
        return code;
    int *status = NULL;
    checksums(c, t, n, NULL, g, crc, &status);
    for (int i = 0; i < c->n && !code; i++)
        if (status[i]) { /* the same verdict on every rank */
            fail(err, errlen, "internal error: the ranks' parts of %s do not cover it exactly "
                 "once", c->e[i].path);
            code = TR_EXIT_SOFTWARE;
        }
    tr_free(status);
    if (code)
        return code;
    /* the directory: rank 0 creates it and checks the space, everyone learns */
    if (rank == 0 && mkdir(dir, 0775) && errno != EEXIST) {
        fail(err, errlen, "cannot create the checkpoint directory '%s': %s", dir,
             strerror(errno));
        code = TR_EXIT_IOERR;
    }
    if (!code && rank == 0 && check_space(dir, file_bytes(c, meta->deck_text), err, errlen))
        code = TR_EXIT_IOERR;
    return agree(g, code, err, errlen);
}

/* Collective: the structure, attributes and checksums through HDF5; where[i] gets
 * the file offset of the caller's tensor i. */
static int write_structure(const char *tmp, const tr_ckpt_meta *meta, const catalogue *c,
                           const uint32_t *crc, int n, uint64_t *where, tr_group *g, char *err,
                           size_t errlen)
{
    char why[256];
    int rank = tr_group_rank(g), bad = 0;
    hid_t fapl = mpio_fapl(g, 1);
    hid_t f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    if (f < 0)
        fail(err, errlen, "cannot create checkpoint '%s': %s (%s)", tmp, h5_why(why),
             strerror(errno));
    if (agree(g, f < 0 ? TR_EXIT_IOERR : 0, err, errlen)) {
        if (f >= 0)
            H5Fclose(f);
        return TR_EXIT_IOERR;
    }
    uint64_t *offset = tr_alloc((size_t)(c->n ? c->n : 1) * sizeof *offset, "checkpoint offsets");
    if (write_meta(f, meta)) {
        fail(err, errlen, "writing attributes of '%s' failed: %s", tmp, h5_why(why));
        bad = 1;
    }
    bad |= write_deck(f, meta->deck_text ? meta->deck_text : "", rank, err, errlen) ? 1 : 0;
    for (int i = 0; i < c->n; i++)
        bad |= create_tensor(f, &c->e[i], crc[i], &offset[i], err, errlen) ? 1 : 0;
    if (H5Fclose(f) < 0) {
        fail(err, errlen, "closing '%s' failed: %s", tmp, h5_why(why));
        bad = 1;
    }
    for (int i = 0; i < n; i++)
        where[i] = offset[c->gid[i]];
    tr_free(offset);
    return agree(g, bad ? TR_EXIT_IOERR : 0, err, errlen);
}

int tr_ckpt_write(const char *dir, const tr_ckpt_meta *meta, const tr_ckpt_tensor *t, int n,
                  tr_group *g, tr_ckpt_stats *stats, char *err, size_t errlen)
{
    double t0 = tr_wtime();
    int rank = tr_group_rank(g), size = tr_group_size(g);
    char path[4096], tmp[4200];
    tr_ckpt_path(path, sizeof path, dir, meta->step);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    err[0] = '\0';
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);

    catalogue c = {0};
    uint32_t *crc = NULL;
    int code = prepare_write(dir, meta, t, n, g, &c, &crc, err, errlen);
    uint64_t *where = tr_alloc((size_t)(n ? n : 1) * sizeof *where, "checkpoint offsets");
    /* 1. the structure, attributes and checksums, through HDF5 (collective) */
    if (!code)
        code = write_structure(tmp, meta, &c, crc, n, where, g, err, errlen);
    /* 2. the data, each rank its own runs, through MPI-IO (collective open and close) */
    if (!code) {
        wctx w = {g, rank, size, meta->collective_io};
        size_t nruns = 0;
        run *runs = own_runs(t, n, &nruns);
        code = write_runs(tmp, t, runs, nruns, where, &w, err, errlen) ? TR_EXIT_IOERR : 0;
        tr_free(runs);
    }
    /* durable before visible: sync the data, rename, sync the directory entry */
    if (!code && rank == 0) {
        int e = sync_path(tmp, 0);
        if (!e && rename(tmp, path))
            e = errno;
        if (!e)
            e = sync_path(dir, 1);
        if (e) {
            fail(err, errlen, "cannot make checkpoint '%s' durable: %s", path, strerror(e));
            code = TR_EXIT_IOERR;
        }
    }
    code = agree(g, code, err, errlen);
    if (code && rank == 0)
        unlink(tmp);
    if (!code && stats) {
        stats->seconds = tr_wtime() - t0;
        stats->bytes = tensor_bytes(&c);
    }
    tr_free(where);
    tr_free(crc);
    cat_free(&c);
    return code;
}

/* ---- read ------------------------------------------------------------------- */

static int read_meta(hid_t f, const char *path, tr_ckpt_meta *m, char *err, size_t errlen)
{
    char format[64] = "", model[64] = "", opt[32] = "";
    int64_t version = 0, step = 0, ranks = 0, dp = 0, tp = 0, pp = 0, zero = 0;
    if (attr_read_str(f, "format", format, sizeof format) || strcmp(format, TR_CKPT_FORMAT)) {
        fail(err, errlen, "'%s' is an HDF5 file but not a trainer checkpoint (no format = \"%s\" attribute)",
             path, TR_CKPT_FORMAT);
        return -1;
    }
    if (attr_read(f, "format_version", H5T_NATIVE_INT64, &version) || version < 1 ||
        version > TR_CKPT_VERSION) {
        fail(err, errlen,
             "'%s' has checkpoint format version %lld; this trainer reads versions 1 to %d",
             path, (long long)version, TR_CKPT_VERSION);
        return -1;
    }
    if (attr_read_str(f, "model", model, sizeof model) ||
        attr_read_str(f, "optimizer", opt, sizeof opt) ||
        attr_read(f, "step", H5T_NATIVE_INT64, &step) ||
        attr_read(f, "epoch", H5T_NATIVE_DOUBLE, &m->epoch) ||
        attr_read(f, "seed", H5T_NATIVE_UINT64, &m->seed) ||
        attr_read(f, "written_ranks", H5T_NATIVE_INT64, &ranks) ||
        attr_read(f, "written_dp", H5T_NATIVE_INT64, &dp) ||
        attr_read(f, "written_tp", H5T_NATIVE_INT64, &tp) ||
        attr_read(f, "written_pp", H5T_NATIVE_INT64, &pp)) {
        fail(err, errlen, "'%s' lacks some of the checkpoint's root attributes", path);
        return -1;
    }
    /* written_zero came later: files without it were written without ZeRO */
    if (H5Aexists(f, "written_zero") > 0 && attr_read(f, "written_zero", H5T_NATIVE_INT64, &zero)) {
        fail(err, errlen, "'%s': cannot read its written_zero attribute", path);
        return -1;
    }
    if (strcmp(model, m->model)) {
        fail(err, errlen, "'%s' was written for model '%s'; this deck trains '%s'", path, model,
             m->model);
        return -1;
    }
    if (strcmp(opt, m->optimizer)) {
        fail(err, errlen,
             "'%s' holds %s optimizer state; this deck uses %s, which cannot resume from it",
             path, opt, m->optimizer);
        return -1;
    }
    m->step = (long)step;
    m->ranks = (int)ranks, m->dp = (int)dp, m->tp = (int)tp, m->pp = (int)pp;
    m->zero = (int)zero;
    /* mixed precision's attributes came later still: absent, nothing was skipped */
    int64_t good = 0, skipped = 0;
    m->loss_scale = 0;
    snprintf(m->precision, sizeof m->precision, "fp32");
    if ((H5Aexists(f, "precision") > 0 &&
         attr_read_str(f, "precision", m->precision, sizeof m->precision)) ||
        (H5Aexists(f, "loss_scale") > 0 &&
         attr_read(f, "loss_scale", H5T_NATIVE_DOUBLE, &m->loss_scale)) ||
        (H5Aexists(f, "loss_scale_good_steps") > 0 &&
         attr_read(f, "loss_scale_good_steps", H5T_NATIVE_INT64, &good)) ||
        (H5Aexists(f, "skipped_steps") > 0 &&
         attr_read(f, "skipped_steps", H5T_NATIVE_INT64, &skipped))) {
        fail(err, errlen, "'%s': cannot read its precision or loss-scale attributes", path);
        return -1;
    }
    m->loss_scale_good = (long)good;
    m->skipped_steps = (long)skipped;
    return 0;
}

static void dims_str(char *buf, size_t len, int nd, const hsize_t *d)
{
    size_t used = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < nd && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, i ? ", %llu" : "%llu",
                                 (unsigned long long)d[i]);
    if (used < len)
        snprintf(buf + used, len - used, "]");
}

/* A selection being built in a dataset's file space of nd dims. */
typedef struct sel {
    hid_t space;
    int nd;
    hsize_t dims[TR_CKPT_MAX_DIMS];
    hsize_t start[TR_CKPT_MAX_DIMS], count[TR_CKPT_MAX_DIMS];
} sel;

static int sel_box(sel *s)
{
    return H5Sselect_hyperslab(s->space, H5S_SELECT_OR, s->start, NULL, s->count, NULL) < 0 ? -1
                                                                                            : 0;
}

/* Adds the flat range [lo, hi) of dims d..nd-1 (the earlier dims already fixed in
 * start/count) as boxes: a flat range of an N-D block is an end piece, whole
 * slabs, and a start piece, at most 2N - 1 boxes. */
static int sel_flat(sel *s, int d, uint64_t lo, uint64_t hi)
{
    if (lo >= hi)
        return 0;
    uint64_t inner = 1;
    for (int e = d + 1; e < s->nd; e++)
        inner *= s->dims[e];
    uint64_t i0 = lo / inner, i1 = hi / inner;
    int rc = 0;
    if (lo % inner) { /* the end of slab i0 */
        uint64_t end = (i0 + 1) * inner < hi ? (i0 + 1) * inner : hi;
        s->start[d] = i0, s->count[d] = 1;
        rc |= sel_flat(s, d + 1, lo - i0 * inner, end - i0 * inner);
        if (end == hi)
            return rc;
        i0++;
    }
    if (i1 > i0) { /* whole slabs */
        s->start[d] = i0, s->count[d] = i1 - i0;
        for (int e = d + 1; e < s->nd; e++)
            s->start[e] = 0, s->count[e] = s->dims[e];
        rc |= sel_box(s);
    }
    if (hi % inner) { /* the start of slab i1 */
        s->start[d] = i1, s->count[d] = 1;
        rc |= sel_flat(s, d + 1, 0, hi - i1 * inner);
    }
    return rc;
}

/* A rectangle of the matrix view: its rows in dim 0, its columns as a flat range of
 * the other dims. */
static int sel_rect(const rect *x, void *ctx)
{
    sel *s = ctx;
    s->start[0] = x->row, s->count[0] = x->rows;
    if (s->nd == 1)
        return sel_box(s);
    return sel_flat(s, 1, x->col, x->col + x->cols);
}

/* Reads t's local elements [data_lo, data_hi) and nothing else: one hyperslab read
 * per block, since HDF5 delivers a selection's elements in row-major order and
 * within a block that is the local order. */
static int read_data(hid_t ds, const tr_ckpt_tensor *t)
{
    sel s = {.space = H5Dget_space(ds), .nd = t->ndim};
    for (int d = 0; d < t->ndim; d++)
        s.dims[d] = t->dims[d];
    tr_ckpt_block b[TR_CKPT_MAX_BLOCKS];
    int nb = blocks_of(t, b), rc = s.space < 0 ? -1 : 0;
    uint64_t base = 0;
    for (int i = 0; i < nb && !rc; i++) {
        uint64_t n = b[i].rows * b[i].cols;
        uint64_t a = t->data_lo > base ? t->data_lo : base;
        uint64_t e = t->data_hi < base + n ? t->data_hi : base + n;
        base += n;
        if (a >= e)
            continue;
        hsize_t count = e - a;
        hid_t ms = H5Screate_simple(1, &count, NULL);
        rc = H5Sselect_none(s.space) < 0 || block_rects(&b[i], base - n, a, e, sel_rect, &s) ||
                     H5Dread(ds, H5T_NATIVE_FLOAT, ms, s.space, H5P_DEFAULT,
                             t->data + (a - t->data_lo)) < 0
                 ? -1
                 : 0;
        H5Sclose(ms);
    }
    if (s.space >= 0)
        H5Sclose(s.space);
    return rc;
}

/* Checks t's presence and shape, reads its crc32 attribute into *crc and its data
 * range. Rank-local: each rank opens only its own tensors. */
static int read_tensor(hid_t f, const char *path, const tr_ckpt_tensor *t, uint32_t *crc,
                       char *err, size_t errlen)
{
    char why[256];
    if (H5Lexists(f, t->path, H5P_DEFAULT) <= 0) {
        H5Eclear2(H5E_DEFAULT);
        fail(err, errlen, "'%s' has no %s: written for another model or optimizer", path,
             t->path);
        return -1;
    }
    hid_t ds = H5Dopen2(f, t->path, H5P_DEFAULT);
    if (ds < 0) {
        fail(err, errlen, "'%s': cannot open %s: %s", path, t->path, h5_why(why));
        return -1;
    }
    hid_t fs = H5Dget_space(ds);
    hsize_t dims[8];
    int nd = H5Sget_simple_extent_ndims(fs);
    int same = nd == t->ndim;
    if (nd > 0 && nd <= 8)
        H5Sget_simple_extent_dims(fs, dims, NULL);
    for (int d = 0; same && d < nd; d++)
        same = dims[d] == t->dims[d];
    H5Sclose(fs);
    if (!same) {
        char a[128], b[128];
        hsize_t want[TR_CKPT_MAX_DIMS];
        for (int d = 0; d < t->ndim; d++)
            want[d] = t->dims[d];
        dims_str(a, sizeof a, nd > 0 && nd <= 8 ? nd : 0, dims);
        dims_str(b, sizeof b, t->ndim, want);
        fail(err, errlen, "'%s': %s has shape %s, the model has %s (another model size?)", path,
             t->path, a, b);
        H5Dclose(ds);
        return -1;
    }
    int rc = 0;
    if (attr_read(ds, "crc32", H5T_NATIVE_UINT32, crc)) {
        fail(err, errlen, "'%s': %s has no crc32 attribute", path, t->path);
        rc = -1;
    } else if (read_data(ds, t)) {
        fail(err, errlen, "'%s': reading %s failed: %s (truncated or corrupt file)", path,
             t->path, h5_why(why));
        rc = -1;
    }
    H5Dclose(ds);
    return rc;
}

/* Collective: every tensor's CRC combined from the owners' runs of what they read,
 * against the file's crc32 (expect, per caller tensor). The verdict and the
 * message are the same on every rank: the first bad tensor in file order. */
static int verify(const char *path, const tr_ckpt_tensor *t, int n, const uint32_t *expect,
                  tr_group *g, char *err, size_t errlen)
{
    catalogue c = {0};
    int code = agree(g, cat_build(&c, t, n, g, err, errlen), err, errlen);
    if (!code) {
        uint32_t *crc = NULL;
        int *status = NULL;
        checksums(&c, t, n, expect, g, &crc, &status);
        for (int i = 0; i < c.n && !code; i++)
            if (status[i] == CRC_MISMATCH) {
                fail(err, errlen, "'%s': checksum mismatch in %s: the file is corrupt", path,
                     c.e[i].path);
                code = TR_EXIT_DATA;
            } else if (status[i]) {
                fail(err, errlen, "internal error: the ranks' parts of %s do not cover it "
                     "exactly once", c.e[i].path);
                code = TR_EXIT_SOFTWARE;
            }
        tr_free(crc);
        tr_free(status);
    }
    cat_free(&c);
    return code;
}

int tr_ckpt_read(const char *path, tr_ckpt_meta *meta, const tr_ckpt_tensor *t, int n,
                 tr_group *g, char *err, size_t errlen)
{
    char why[256];
    err[0] = '\0';
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    int code = check_descs(t, n, err, errlen);
    if (!code && access(path, R_OK)) {
        fail(err, errlen, "cannot read checkpoint '%s': %s", path, strerror(errno));
        code = TR_EXIT_NOINPUT;
    }
    hid_t f = -1;
    if (!code) {
        /* opened collectively; each rank then reads its own tensors independently */
        hid_t fapl = mpio_fapl(g, 0);
        f = H5Fopen(path, H5F_ACC_RDONLY, fapl);
        H5Pclose(fapl);
        if (f < 0) {
            fail(err, errlen, "'%s' is not a readable checkpoint: %s (truncated, corrupt or not HDF5)",
                 path, h5_why(why));
            code = TR_EXIT_DATA;
        }
    }
    code = agree(g, code, err, errlen);
    if (code) {
        if (f >= 0)
            H5Fclose(f);
        return code;
    }
    uint32_t *expect = tr_alloc((size_t)(n ? n : 1) * sizeof *expect, "checkpoint checksums");
    if (read_meta(f, path, meta, err, errlen))
        code = TR_EXIT_DATA;
    for (int i = 0; !code && i < n; i++)
        if (read_tensor(f, path, &t[i], &expect[i], err, errlen))
            code = TR_EXIT_DATA;
    if (H5Fclose(f) < 0 && !code) {
        fail(err, errlen, "'%s': closing failed: %s", path, h5_why(why));
        code = TR_EXIT_DATA;
    }
    code = agree(g, code, err, errlen);
    if (!code)
        code = verify(path, t, n, expect, g, err, errlen);
    tr_free(expect);
    return code;
}

/* ---- directory ---------------------------------------------------------------- */

static int parse_step(const char *name, long *step)
{
    char tail[8];
    long s;
    if (sscanf(name, "step_%ld.h5%7s", &s, tail) == 1 && s >= 0 &&
        strlen(name) >= strlen("step_00000000.h5")) {
        *step = s;
        return 1;
    }
    return 0;
}

static int cmp_desc(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;
    return (x < y) - (x > y);
}

int tr_ckpt_list(const char *dir, long *steps, int max)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < max) {
        long s;
        if (parse_step(e->d_name, &s))
            steps[n++] = s;
    }
    closedir(d);
    qsort(steps, (size_t)n, sizeof *steps, cmp_desc);
    return n;
}

void tr_ckpt_prune(const char *dir, int keep)
{
    long steps[4096];
    int n = tr_ckpt_list(dir, steps, 4096);
    char path[4096];
    for (int i = keep; keep > 0 && i < n; i++) {
        tr_ckpt_path(path, sizeof path, dir, steps[i]);
        unlink(path);
    }
    /* temporary files of writes that never finished */
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (!strncmp(e->d_name, "step_", 5) && len > 7 && !strcmp(e->d_name + len - 7, ".h5.tmp")) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
    }
    closedir(d);
}
