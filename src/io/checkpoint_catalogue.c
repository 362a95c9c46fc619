/* checkpoint_catalogue.c: what the ranks agree on: the worst failure code and its
 * message, and the catalogue of every tensor of the file (pipeline stages hold
 * different tensors, and rank 0, which lays the file out, creates every dataset). */
#include "io/checkpoint_internal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- agreement between ranks ------------------------------------------------- */

/* MPI failures inside an exchange are run-time faults: end the job, never hang. */
void ckpt_mpi_ok(int rc, const char *what)
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
int ckpt_agree(tr_group *g, int code, char *err, size_t errlen)
{
    MPI_Comm comm = tr_group_mpi_comm(g);
    int worst = 0, rank = tr_group_rank(g);
    ckpt_mpi_ok(MPI_Allreduce(&code, &worst, 1, MPI_INT, MPI_MAX, comm), "MPI_Allreduce");
    if (!worst)
        return 0;
    int me = code == worst ? rank : INT_MAX, root = 0;
    ckpt_mpi_ok(MPI_Allreduce(&me, &root, 1, MPI_INT, MPI_MIN, comm), "MPI_Allreduce");
    char msg[8192];
    if (rank == root)
        snprintf(msg, sizeof msg, "%s", err[0] ? err : "checkpoint failed");
    ckpt_mpi_ok(MPI_Bcast(msg, (int)sizeof msg, MPI_CHAR, root, comm), "MPI_Bcast");
    snprintf(err, errlen, "%s", msg);
    return worst;
}

/* ---- the catalogue: every tensor of the file ------------------------------------ */

void ckpt_cat_free(catalogue *c)
{
    tr_free(c->e);
    tr_free(c->sorted);
    tr_free(c->gid);
    memset(c, 0, sizeof *c);
}

/* Whether this rank describes t in the catalogue: it owns the tensor's first
 * element, which exactly one rank does (an empty tensor: every rank holding it). */
static int speaks_for(const tr_ckpt_tensor *t)
{
    if (ckpt_product(t->dims, t->ndim) == 0)
        return 1;
    tr_ckpt_block b[TR_CKPT_MAX_BLOCKS];
    int nb = ckpt_blocks_of(t, b);
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
    ckpt_mpi_ok(MPI_Allgather(&mine, 1, MPI_INT, counts, 1, MPI_INT, comm), "MPI_Allgather");
    long sum = 0;
    for (int r = 0; r < size; r++) {
        displs[r] = (int)sum;
        sum += counts[r];
    }
    if (sum > INT_MAX / 2)
        tr_fatal(TR_EXIT_SOFTWARE, "too many checkpoint tensors (%ld)", sum);
    cat_entry *all = tr_alloc((size_t)(sum ? sum : 1) * sizeof *all, "checkpoint catalogue");
    MPI_Datatype et;
    ckpt_mpi_ok(MPI_Type_contiguous((int)sizeof(cat_entry), MPI_BYTE, &et), "MPI_Type_contiguous");
    ckpt_mpi_ok(MPI_Type_commit(&et), "MPI_Type_commit");
    ckpt_mpi_ok(MPI_Allgatherv(send, mine, et, all, counts, displs, et, comm), "MPI_Allgatherv");
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
int ckpt_cat_build(catalogue *c, const tr_ckpt_tensor *t, int n, tr_group *g, char *err,
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
            ckpt_fail(err, errlen, "internal error: ranks give %s different shapes", by[i]->path);
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
            ckpt_fail(err, errlen, "internal error: no rank owns the first element of %s",
                      t[i].path);
            bad = TR_EXIT_SOFTWARE;
        }
    }
    return bad;
}
