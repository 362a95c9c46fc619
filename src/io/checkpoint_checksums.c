/* checkpoint_checksums.c: every tensor's CRC-32, combined from every rank's runs of
 * it, so that no rank needs to hold a whole tensor (writes store it, reads compare
 * with it). */
#include "io/checkpoint_internal.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

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
        rec[at[gid % size]++] =
            (crc_rec){(uint64_t)gid, x->off, x->len, crc_of(ckpt_run_data(&t[x->t], x), x->len),
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
static void tensor_crcs(const catalogue *c, const tr_ckpt_tensor *t, const run *runs, size_t nruns,
                        const uint32_t *expect, tr_group *g, uint32_t *crc, int *status)
{
    MPI_Comm comm = tr_group_mpi_comm(g);
    int size = tr_group_size(g), rank = tr_group_rank(g);
    int *scount = tr_alloc((size_t)size * sizeof *scount, "checkpoint checksums");
    int *rcount = tr_alloc((size_t)size * sizeof *rcount, "checkpoint checksums");
    crc_rec *send = make_recs(c, t, runs, nruns, expect, size, scount);
    ckpt_mpi_ok(MPI_Alltoall(scount, 1, MPI_INT, rcount, 1, MPI_INT, comm), "MPI_Alltoall");
    int *sdispl = displacements(scount, size), *rdispl = displacements(rcount, size);
    size_t nrecv = (size_t)rdispl[size - 1] + (size_t)rcount[size - 1];
    crc_rec *recv = tr_alloc((nrecv ? nrecv : 1) * sizeof *recv, "checkpoint checksums");
    MPI_Datatype rt;
    ckpt_mpi_ok(MPI_Type_contiguous((int)sizeof(crc_rec), MPI_BYTE, &rt), "MPI_Type_contiguous");
    ckpt_mpi_ok(MPI_Type_commit(&rt), "MPI_Type_commit");
    ckpt_mpi_ok(MPI_Alltoallv(send, scount, sdispl, rt, recv, rcount, rdispl, rt, comm),
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
        int st = combine(recv + i, j - i, ckpt_product(c->e[gid].dims, (int)c->e[gid].ndim),
                         expect != NULL, &v);
        res[2 * gid] = v;
        res[2 * gid + 1] = (uint64_t)st;
        i = j;
    }
    tr_free(recv);
    /* one rank set each tensor's words, the others left zeros: a sum gathers them */
    if (c->n)
        ckpt_mpi_ok(MPI_Allreduce(MPI_IN_PLACE, res, 2 * c->n, MPI_UINT64_T, MPI_SUM, comm),
                    "MPI_Allreduce");
    for (int k = 0; k < c->n; k++) {
        crc[k] = (uint32_t)res[2 * k];
        status[k] = (int)res[2 * k + 1];
    }
    tr_free(res);
}

/* Collective: the catalogue's CRCs and statuses from this rank's own runs. */
void ckpt_checksums(const catalogue *c, const tr_ckpt_tensor *t, int n, const uint32_t *expect,
                    tr_group *g, uint32_t **crc, int **status)
{
    size_t nruns = 0;
    run *runs = ckpt_own_runs(t, n, &nruns);
    *crc = tr_alloc((size_t)(c->n ? c->n : 1) * sizeof **crc, "checkpoint checksums");
    *status = tr_alloc((size_t)(c->n ? c->n : 1) * sizeof **status, "checkpoint checksums");
    tensor_crcs(c, t, runs, nruns, expect, g, *crc, *status);
    tr_free(runs);
}
