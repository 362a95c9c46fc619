/* checkpoint_write.c: tr_ckpt_write. The structure through HDF5 on rank 0, the data
 * straight through MPI-IO from every rank into the places HDF5 allocated, synced,
 * then renamed into place (checkpoint.h). */
#include "io/checkpoint_internal.h"
#include "core/watchdog.h"
#include "io/write_behind.h"
#include "version.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

/* the write in progress: who writes and how */
typedef struct wctx {
    tr_group *g;
    int rank, size;
    int collective; /* tensor data through MPI-IO collective buffering */
} wctx;

/* Creates tensor e's dataset with its attributes (crc included) and returns where
 * its data starts in the file; the data itself is written later, by write_runs. */
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
        ckpt_fail(err, errlen, "cannot create %s: %s", e->path, ckpt_h5_why(why));
        return -1;
    }
    int arc = ckpt_attr_str(ds, "kind", e->kind) | ckpt_attr_str(ds, "layer", e->layer) |
              ckpt_attr_write(ds, "crc32", H5T_NATIVE_UINT32, &crc);
    haddr_t addr = H5Dget_offset(ds);
    H5Dclose(ds);
    if (arc || addr == HADDR_UNDEF) {
        ckpt_fail(err, errlen, "creating %s failed: %s", e->path, ckpt_h5_why(why));
        return -1;
    }
    *offset = (uint64_t)addr;
    return 0;
}

/* One piece of a run (PIECE bytes at most: MPI counts are int, and the page cache is
 * kept to a few pieces, write_behind.h). */
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

#define PIECE TR_WRITE_BEHIND_BYTES

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
        ckpt_fail(err, errlen, "cannot reopen '%s' for its data", file);
        return -1;
    }
    MPI_File_set_errhandler(fh, MPI_ERRORS_RETURN);
    tr_write_behind wb;
    tr_write_behind_open(&wb, file);
    uint64_t calls = pieces(runs, nruns), made = 0;
    if (w->collective)
        ckpt_mpi_ok(MPI_Allreduce(MPI_IN_PLACE, &calls, 1, MPI_UINT64_T, MPI_MAX, comm),
                    "MPI_Allreduce");
    int bad = 0;
    char msg[MPI_MAX_ERROR_STRING];
    for (size_t i = 0; i < nruns && !(bad && !w->collective); i++) {
        const char *src = (const char *)ckpt_run_data(&t[runs[i].t], &runs[i]);
        uint64_t at = where[runs[i].t] + runs[i].off * sizeof(float);
        uint64_t bytes = runs[i].len * sizeof(float);
        for (uint64_t o = 0; o < bytes && !(bad && !w->collective); o += PIECE, made++) {
            uint64_t len = bad ? 0 : (bytes - o < PIECE ? bytes - o : PIECE);
            tr_watchdog_beat("a piece of a checkpoint written", -1);
            if (write_piece(fh, w->collective, at + o, src + o, len, msg) && !bad) {
                ckpt_fail(err, errlen, "writing %s to '%s' failed: %s", t[runs[i].t].path, file,
                          msg);
                bad = 1;
            } else {
                tr_write_behind_wrote(&wb, len);
            }
        }
    }
    static const char nothing[1];
    for (; w->collective && made < calls; made++)
        write_piece(fh, 1, 0, nothing, 0, msg);
    if (MPI_File_sync(fh) != MPI_SUCCESS) {
        ckpt_fail(err, errlen, "syncing '%s' failed (disk full or I/O error)", file);
        bad = 1;
    }
    tr_write_behind_close(&wb);
    MPI_File_close(&fh);
    return bad ? -1 : 0;
}

static int write_deck(hid_t f, const char *text, char *err, size_t errlen)
{
    char why[256];
    size_t len = strlen(text);
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, len ? len : 1);
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t ds = H5Dcreate2(f, "/deck", t, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    herr_t rc = -1;
    if (ds >= 0) {
        rc = H5Dwrite(ds, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, len ? text : " ");
        H5Dclose(ds);
    }
    H5Sclose(sp);
    H5Tclose(t);
    if (rc < 0)
        ckpt_fail(err, errlen, "writing /deck failed: %s", ckpt_h5_why(why));
    return rc < 0 ? -1 : 0;
}

static int write_meta(hid_t f, const tr_ckpt_meta *m)
{
    int best = 0;
    if (m->best_val_step > 0) /* 0: no evaluation has set a lowest loss yet */
        best = ckpt_attr_write(f, "best_val_loss", H5T_NATIVE_DOUBLE, &m->best_val_loss) |
               ckpt_attr_i64(f, "best_val_step", m->best_val_step);
    /* without a best, the evaluations that gave none (NaN) count for early_stop too */
    if (m->best_val_step > 0 || m->evals_since_best > 0)
        best |= ckpt_attr_i64(f, "evals_since_best", m->evals_since_best);
    return best | ckpt_attr_str(f, "format", TR_CKPT_FORMAT) |
           ckpt_attr_i64(f, "format_version", TR_CKPT_VERSION) |
           ckpt_attr_str(f, "trainer_version", TR_VERSION) | ckpt_attr_str(f, "model", m->model) |
           ckpt_attr_str(f, "optimizer", m->optimizer) | ckpt_attr_i64(f, "step", m->step) |
           ckpt_attr_write(f, "epoch", H5T_NATIVE_DOUBLE, &m->epoch) |
           ckpt_attr_write(f, "seed", H5T_NATIVE_UINT64, &m->seed) |
           ckpt_attr_i64(f, "written_ranks", m->ranks) | ckpt_attr_i64(f, "written_dp", m->dp) |
           ckpt_attr_i64(f, "written_tp", m->tp) | ckpt_attr_i64(f, "written_pp", m->pp) |
           ckpt_attr_i64(f, "written_zero", m->zero) |
           ckpt_attr_str(f, "precision", m->precision[0] ? m->precision : "fp32") |
           ckpt_attr_write(f, "loss_scale", H5T_NATIVE_DOUBLE, &m->loss_scale) |
           ckpt_attr_i64(f, "loss_scale_good_steps", m->loss_scale_good) |
           ckpt_attr_i64(f, "skipped_steps", m->skipped_steps) |
           ckpt_attr_write(f, "data_digest", H5T_NATIVE_UINT64, &m->data_digest);
}

/* Tensor bytes in the file. */
static double tensor_bytes(const catalogue *c)
{
    double b = 0;
    for (int i = 0; i < c->n; i++)
        b += (double)ckpt_product(c->e[i].dims, (int)c->e[i].ndim) * sizeof(float);
    return b;
}

/* Bytes the file will take: data (large datasets aligned to 1 MiB) plus metadata. */
static double file_bytes(const catalogue *c, const char *deck)
{
    double b = (double)(1 << 20) + (deck ? strlen(deck) : 0);
    for (int i = 0; i < c->n; i++) {
        double x = (double)ckpt_product(c->e[i].dims, (int)c->e[i].ndim) * sizeof(float);
        b += x >= (1 << 20) ? x + (1 << 20) : x + 4096;
    }
    return b;
}

/* A checkpoint that cannot fit is refused before the file is created (the previous
 * one stays as it is), with the sizes, rather than failing part-way through its
 * data (which write_runs reports too: exit 74 either way). */
static int check_space(const char *dir, double need, char *err, size_t errlen)
{
    struct statvfs v;
    if (statvfs(dir, &v))
        return 0; /* unknown: try, and let the write report */
    double avail = (double)v.f_bavail * (double)v.f_frsize;
    if (avail >= need)
        return 0;
    ckpt_fail(err, errlen,
              "not enough space for a checkpoint in '%s': it needs about %.1f MiB and %.1f MiB are "
              "free (No space left on device); free space, lower [checkpoint] keep, or set "
              "[checkpoint] dir elsewhere",
              dir, need / 1048576.0, avail / 1048576.0);
    return -1;
}

/* Collective. Everything known before the file is touched: the descriptions fit,
 * the catalogue, every tensor's CRC, the directory and its free space. */
static int prepare_write(const char *dir, const tr_ckpt_meta *meta, const tr_ckpt_tensor *t, int n,
                         tr_group *g, catalogue *c, uint32_t **crc, char *err, size_t errlen)
{
    int rank = tr_group_rank(g);
    int code = ckpt_agree(g, ckpt_check_descs(t, n, err, errlen), err, errlen);
    if (code)
        return code;
    code = ckpt_agree(g, ckpt_cat_build(c, t, n, g, err, errlen), err, errlen);
    if (code)
        return code;
    int *status = NULL;
    ckpt_checksums(c, t, n, NULL, g, crc, &status);
    for (int i = 0; i < c->n && !code; i++)
        if (status[i]) { /* the same verdict on every rank */
            ckpt_fail(err, errlen,
                      "internal error: the ranks' parts of %s do not cover it exactly "
                      "once",
                      c->e[i].path);
            code = TR_EXIT_SOFTWARE;
        }
    tr_free(status);
    if (code)
        return code;
    /* the directory: rank 0 creates it and checks the space, everyone learns */
    if (rank == 0 && mkdir(dir, 0775) && errno != EEXIST) {
        ckpt_fail(err, errlen, "cannot create the checkpoint directory '%s': %s", dir,
                  strerror(errno));
        code = TR_EXIT_IOERR;
    }
    if (!code && rank == 0 && check_space(dir, file_bytes(c, meta->deck_text), err, errlen))
        code = TR_EXIT_IOERR;
    return ckpt_agree(g, code, err, errlen);
}

/* Rank 0: the file's structure through HDF5's serial driver (the attributes, /deck,
 * and every tensor's dataset, contiguous and allocated at a fixed place, 1 MiB
 * aligned where large: whole file-system blocks per writer); offset[i] gets where
 * catalogue tensor i's data starts. */
static int lay_out(const char *tmp, const tr_ckpt_meta *meta, const catalogue *c,
                   const uint32_t *crc, uint64_t *offset, char *err, size_t errlen)
{
    char why[256];
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_alignment(fapl, 1 << 20, 1 << 20);
    hid_t f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    if (f < 0) {
        ckpt_fail(err, errlen, "cannot create checkpoint '%s': %s (%s)", tmp, ckpt_h5_why(why),
                  strerror(errno));
        return TR_EXIT_IOERR;
    }
    int bad = 0;
    if (write_meta(f, meta)) {
        ckpt_fail(err, errlen, "writing attributes of '%s' failed: %s", tmp, ckpt_h5_why(why));
        bad = 1;
    }
    bad |= write_deck(f, meta->deck_text ? meta->deck_text : "", err, errlen) ? 1 : 0;
    for (int i = 0; i < c->n && !bad; i++)
        bad |= create_tensor(f, &c->e[i], crc[i], &offset[i], err, errlen) ? 1 : 0;
    if (H5Fclose(f) < 0 && !bad) {
        ckpt_fail(err, errlen, "closing '%s' failed: %s (%s)", tmp, ckpt_h5_why(why),
                  strerror(errno));
        bad = 1;
    }
    return bad ? TR_EXIT_IOERR : 0;
}

/* Collective: rank 0 lays the file out alone, every rank learns the verdict and
 * where[i], the file offset of its tensor i. Not parallel HDF5: it does not recover
 * from a write that fails on some ranks only (a disk filling, an I/O error, a quota):
 * its collective close then waits in two different collectives for ever (a failed
 * write on rank 1 hung the job until run.hang_minutes). The data goes in next
 * through MPI-IO, where each rank's failure is its own (write_runs). */
static int write_structure(const char *tmp, const tr_ckpt_meta *meta, const catalogue *c,
                           const uint32_t *crc, int n, uint64_t *where, tr_group *g, char *err,
                           size_t errlen)
{
    uint64_t *offset = tr_alloc((size_t)(c->n ? c->n : 1) * sizeof *offset, "checkpoint offsets");
    int code = tr_group_rank(g) == 0 ? lay_out(tmp, meta, c, crc, offset, err, errlen) : 0;
    code = ckpt_agree(g, code, err, errlen);
    if (!code) {
        tr_bcast(offset, (size_t)c->n, TR_I64, 0, g);
        for (int i = 0; i < n; i++)
            where[i] = offset[c->gid[i]];
    }
    tr_free(offset);
    return code;
}

void ckpt_names_of(ckpt_names *nm, const char *dir, const char *name, long step)
{
    if (name)
        snprintf(nm->path, sizeof nm->path, "%s/%s", dir, name);
    else
        tr_ckpt_path(nm->path, sizeof nm->path, dir, step);
    snprintf(nm->tmp, sizeof nm->tmp, "%s.tmp", nm->path);
}

int ckpt_write_begin(const char *dir, const ckpt_names *nm, const tr_ckpt_meta *meta,
                     const tr_ckpt_tensor *t, int n, tr_group *g, uint64_t *where, double *bytes,
                     char *err, size_t errlen)
{
    err[0] = '\0';
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    catalogue c = {0};
    uint32_t *crc = NULL;
    int code = prepare_write(dir, meta, t, n, g, &c, &crc, err, errlen);
    /* the structure, attributes and checksums: rank 0 through HDF5, the offsets to all */
    if (!code)
        code = write_structure(nm->tmp, meta, &c, crc, n, where, g, err, errlen);
    *bytes = tensor_bytes(&c);
    tr_free(crc);
    ckpt_cat_free(&c);
    return code;
}

int ckpt_write_end(const char *dir, const ckpt_names *nm, int code, tr_group *g, char *err,
                   size_t errlen)
{
    int rank = tr_group_rank(g);
    /* every rank's data first: durable before visible */
    code = ckpt_agree(g, code, err, errlen);
    /* sync the file, rename, sync the directory entry */
    if (!code && rank == 0) {
        int e = ckpt_sync_path(nm->tmp, 0);
        if (!e && rename(nm->tmp, nm->path))
            e = errno;
        if (!e)
            e = ckpt_sync_path(dir, 1);
        if (e) {
            ckpt_fail(err, errlen, "cannot make checkpoint '%s' durable: %s", nm->path,
                      strerror(e));
            code = TR_EXIT_IOERR;
        }
    }
    code = ckpt_agree(g, code, err, errlen);
    if (code && rank == 0)
        unlink(nm->tmp);
    return code;
}

int tr_ckpt_write(const char *dir, const char *name, const tr_ckpt_meta *meta,
                  const tr_ckpt_tensor *t, int n, tr_group *g, tr_ckpt_stats *stats, char *err,
                  size_t errlen)
{
    double t0 = tr_wtime(), bytes = 0;
    ckpt_names nm;
    ckpt_names_of(&nm, dir, name, meta->step);
    uint64_t *where = tr_alloc((size_t)(n ? n : 1) * sizeof *where, "checkpoint offsets");
    int code = ckpt_write_begin(dir, &nm, meta, t, n, g, where, &bytes, err, errlen);
    /* the data, each rank its own runs, through MPI-IO (collective open and close) */
    if (!code) {
        wctx w = {g, tr_group_rank(g), tr_group_size(g), meta->collective_io};
        size_t nruns = 0;
        run *runs = ckpt_own_runs(t, n, &nruns);
        code = write_runs(nm.tmp, t, runs, nruns, where, &w, err, errlen) ? TR_EXIT_IOERR : 0;
        tr_free(runs);
    }
    code = ckpt_write_end(dir, &nm, code, g, err, errlen);
    if (!code && stats) {
        stats->seconds = tr_wtime() - t0;
        stats->bytes = bytes;
    }
    tr_free(where);
    return code;
}
