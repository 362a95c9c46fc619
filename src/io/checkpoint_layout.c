/* checkpoint_layout.c: where a rank's elements are in a logical tensor: its blocks,
 * the rectangles (hyperslabs) a range of its local elements makes, and the
 * contiguous runs of the file its own elements fill; and the check that a caller's
 * description fits its shape. */
#include "io/checkpoint_internal.h"

#include <string.h>

uint64_t ckpt_product(const uint64_t *dims, int ndim)
{
    uint64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= dims[d];
    return n;
}

/* Columns of the matrix view [dims[0], product of the other dims]. */
static uint64_t width(const tr_ckpt_tensor *t)
{
    return ckpt_product(t->dims + 1, t->ndim - 1);
}

/* The rank's blocks: its own, or the whole tensor as one. Returns how many. */
int ckpt_blocks_of(const tr_ckpt_tensor *t, tr_ckpt_block *b)
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
    int nb = ckpt_blocks_of(t, b);
    uint64_t n = 0;
    for (int i = 0; i < nb; i++)
        n += b[i].rows * b[i].cols;
    return n;
}

/* The local elements [a, e) of block b, whose first element is local element base
 * (base <= a < e <= base + its size), as at most three rectangles in local order:
 * the end of a first row, whole rows, the start of a last row. Each is one
 * hyperslab in the file, and within a block local order is row-major order. */
int ckpt_block_rects(const tr_ckpt_block *b, uint64_t base, uint64_t a, uint64_t e, rect_fn fn,
                     void *ctx)
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
    int nb = ckpt_blocks_of(t, b), rc = 0;
    uint64_t base = 0;
    for (int i = 0; i < nb; i++) {
        uint64_t n = b[i].rows * b[i].cols;
        uint64_t a = lo > base ? lo : base, e = hi < base + n ? hi : base + n;
        if (a < e)
            rc |= ckpt_block_rects(&b[i], base, a, e, fn, ctx);
        base += n;
    }
    return rc;
}

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
run *ckpt_own_runs(const tr_ckpt_tensor *t, int n, size_t *count)
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

const float *ckpt_run_data(const tr_ckpt_tensor *t, const run *r)
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
        ckpt_fail(err, errlen,
                  "internal error: checkpoint tensor %s is described inconsistently "
                  "(shape, blocks or ranges)",
                  t->path);
    return ok ? 0 : -1;
}

int ckpt_check_descs(const tr_ckpt_tensor *t, int n, char *err, size_t errlen)
{
    for (int i = 0; i < n; i++)
        if (check_desc(&t[i], err, errlen))
            return TR_EXIT_SOFTWARE;
    return 0;
}
