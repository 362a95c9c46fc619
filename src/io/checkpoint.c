/* checkpoint.c: collective parallel-HDF5 checkpoints with checksums, written to a
 * temporary name and renamed into place. */
#include "checkpoint.h"
#include "comm/comm_mpi.h"
#include "core/error.h"
#include "version.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
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

/* ---- write ------------------------------------------------------------------ */

/* the write in progress: who writes and how */
typedef struct wctx {
    tr_group *g;
    int rank, size;
    int collective; /* tensor data through MPI-IO collective buffering */
} wctx;

static hid_t mpio_fapl(tr_group *g)
{
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_fapl_mpio(fapl, tr_group_mpi_comm(g), MPI_INFO_NULL);
    /* large datasets on 1 MiB boundaries: whole file-system blocks per writer */
    H5Pset_alignment(fapl, 1 << 20, 1 << 20);
    H5Pset_all_coll_metadata_ops(fapl, 1);
    H5Pset_coll_metadata_write(fapl, 1);
    return fapl;
}

/* CRC-32 of the concatenation of every rank's band, in rank order. */
static uint32_t band_crc(const wctx *w, const float *x, uint64_t n)
{
    int rank = w->rank, size = w->size;
    uint64_t mine[2] = {crc_of(x, n), n * sizeof(float)};
    uint64_t *all = calloc((size_t)size * 2, sizeof *all);
    if (!all)
        tr_fatal(TR_EXIT_OSERR, "out of memory");
    all[2 * rank] = mine[0];
    all[2 * rank + 1] = mine[1];
    tr_allreduce(all, all, (size_t)size * 2, TR_I64, TR_SUM, w->g);
    uLong crc = crc32(0L, Z_NULL, 0);
    for (int r = 0; r < size; r++)
        if (all[2 * r + 1])
            crc = crc32_combine(crc, (uLong)all[2 * r], (z_off_t)all[2 * r + 1]);
    free(all);
    return (uint32_t)crc;
}

/* This rank's band of rows of t: [lo, hi) rows of `row` elements each. */
static void band(const tr_ckpt_tensor *t, const wctx *w, uint64_t *lo, uint64_t *hi,
                 uint64_t *row)
{
    uint64_t rows = t->dims[0];
    *row = numel(t) / (rows ? rows : 1);
    *lo = rows * (uint64_t)w->rank / (uint64_t)w->size;
    *hi = rows * (uint64_t)(w->rank + 1) / (uint64_t)w->size;
}

/* Creates t's dataset with its attributes (collective) and returns where its data
 * starts in the file; the data itself is written later, by write_bands. */
static int create_tensor(hid_t f, const tr_ckpt_tensor *t, const wctx *w, uint64_t *offset,
                         char *err, size_t errlen)
{
    char why[256];
    hsize_t dims[TR_CKPT_MAX_DIMS];
    for (int d = 0; d < t->ndim; d++)
        dims[d] = t->dims[d];
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    hid_t fs = H5Screate_simple(t->ndim, dims, NULL);
    /* contiguous and allocated now, so the data has a fixed place in the file; no
     * fill values, since every byte is written next */
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_layout(dcpl, H5D_CONTIGUOUS);
    H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY);
    H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
    hid_t ds = H5Dcreate2(f, t->path, H5T_IEEE_F32LE, fs, lcpl, dcpl, H5P_DEFAULT);
    H5Pclose(dcpl);
    H5Pclose(lcpl);
    H5Sclose(fs);
    if (ds < 0) {
        fail(err, errlen, "cannot create %s: %s", t->path, h5_why(why));
        return -1;
    }
    /* attributes are collective: every rank passes the same values. The checksum of
     * the whole tensor comes from the ranks' checksums of their own bands, combined
     * in order (CRC-32 composes), so no rank reads more than it writes. */
    uint64_t lo, hi, row;
    band(t, w, &lo, &hi, &row);
    uint32_t crc = band_crc(w, t->data + lo * row, (hi - lo) * row);
    int arc = attr_str(ds, "kind", t->kind) | attr_str(ds, "layer", t->layer) |
              attr_write(ds, "crc32", H5T_NATIVE_UINT32, &crc);
    haddr_t addr = H5Dget_offset(ds);
    H5Dclose(ds);
    if (arc || addr == HADDR_UNDEF) {
        fail(err, errlen, "creating %s failed: %s", t->path, h5_why(why));
        return -1;
    }
    *offset = (uint64_t)addr;
    return 0;
}

/* The tensors' data, each rank its own contiguous band of each, straight through
 * MPI-IO into the places HDF5 allocated, then synced to stable storage. Writing
 * outside HDF5 keeps a failed write (a full disk) from leaving HDF5's collective
 * metadata operations out of step across ranks, where they would hang. */
static int write_bands(const char *file, const tr_ckpt_tensor *t, int n, const uint64_t *offset,
                       const wctx *w, char *err, size_t errlen)
{
    MPI_Comm comm = tr_group_mpi_comm(w->g);
    MPI_File fh;
    int rc = MPI_File_open(comm, file, MPI_MODE_WRONLY, MPI_INFO_NULL, &fh);
    if (rc != MPI_SUCCESS) {
        fail(err, errlen, "cannot reopen '%s' for its data", file);
        return -1;
    }
    MPI_File_set_errhandler(fh, MPI_ERRORS_RETURN);
    int bad = 0;
    const uint64_t chunk = (uint64_t)1 << 30; /* MPI counts are int */
    for (int i = 0; i < n; i++) {
        uint64_t lo, hi, row;
        band(&t[i], w, &lo, &hi, &row);
        const char *src = (const char *)(t[i].data + lo * row);
        uint64_t bytes = (hi - lo) * row * sizeof(float);
        uint64_t at = offset[i] + lo * row * sizeof(float);
        /* collective mode: every rank makes the same number of calls */
        uint64_t total = numel(&t[i]) * sizeof(float), calls = (total + chunk - 1) / chunk;
        for (uint64_t c = 0; c < (w->collective ? calls : (bytes + chunk - 1) / chunk); c++) {
            uint64_t off = c * chunk, len = off < bytes ? (bytes - off < chunk ? bytes - off : chunk) : 0;
            MPI_Status st;
            rc = w->collective
                     ? MPI_File_write_at_all(fh, (MPI_Offset)(at + off), src + off, (int)len,
                                             MPI_BYTE, &st)
                     : MPI_File_write_at(fh, (MPI_Offset)(at + off), src + off, (int)len,
                                         MPI_BYTE, &st);
            int done = 0;
            MPI_Get_count(&st, MPI_BYTE, &done);
            if (rc != MPI_SUCCESS || (uint64_t)done != len) {
                char msg[MPI_MAX_ERROR_STRING] = "short write";
                int ml = 0;
                if (rc != MPI_SUCCESS)
                    MPI_Error_string(rc, msg, &ml);
                fail(err, errlen, "writing %s to '%s' failed: %s", t[i].path, file, msg);
                bad = 1;
                break;
            }
        }
        if (bad && !w->collective)
            break;
    }
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
           attr_i64(f, "written_tp", m->tp) | attr_i64(f, "written_pp", m->pp);
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

/* Bytes the file will take: data (large datasets aligned to 1 MiB) plus metadata. */
static double file_bytes(const tr_ckpt_tensor *t, int n, const char *deck)
{
    double b = (double)(1 << 20) + (deck ? strlen(deck) : 0);
    for (int i = 0; i < n; i++) {
        double x = (double)numel(&t[i]) * sizeof(float);
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

int tr_ckpt_write(const char *dir, const tr_ckpt_meta *meta, const tr_ckpt_tensor *t, int n,
                  tr_group *g, tr_ckpt_stats *stats, char *err, size_t errlen)
{
    double t0 = tr_wtime();
    int rank = tr_group_rank(g), size = tr_group_size(g);
    char path[4096], tmp[4200], why[256];
    tr_ckpt_path(path, sizeof path, dir, meta->step);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    err[0] = '\0';
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);

    /* the directory: rank 0 creates it, everyone learns whether that worked */
    int bad = 0;
    if (rank == 0 && mkdir(dir, 0775) && errno != EEXIST) {
        fail(err, errlen, "cannot create the checkpoint directory '%s': %s", dir,
             strerror(errno));
        bad = 1;
    }
    if (!bad && rank == 0 && check_space(dir, file_bytes(t, n, meta->deck_text), err, errlen))
        bad = 1;
    tr_bcast(&bad, 1, TR_I32, 0, g);
    if (bad) {
        if (rank)
            snprintf(err, errlen, "cannot write a checkpoint in '%s' (see rank 0)", dir);
        return TR_EXIT_IOERR;
    }

    wctx w = {g, rank, size, meta->collective_io};
    hid_t fapl = mpio_fapl(g);
    hid_t f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    bad = 0;
    if (f < 0) {
        fail(err, errlen, "cannot create checkpoint '%s': %s (%s)", tmp, h5_why(why),
             strerror(errno));
        bad = 1;
    }
    tr_allreduce(&bad, &bad, 1, TR_I32, TR_MAX, g);
    if (bad) {
        if (f >= 0)
            H5Fclose(f);
        if (rank == 0)
            unlink(tmp);
        fail(err, errlen, "cannot create checkpoint '%s'", tmp);
        return TR_EXIT_IOERR;
    }
    /* 1. the structure, attributes and checksums, through HDF5 (collective) */
    double bytes = 0;
    uint64_t *offset = tr_alloc((size_t)(n > 0 ? n : 1) * sizeof *offset, "checkpoint offsets");
    bad = write_meta(f, meta) ? (fail(err, errlen, "writing attributes of '%s' failed: %s", tmp,
                                      h5_why(why)),
                                 1)
                              : 0;
    bad |= write_deck(f, meta->deck_text ? meta->deck_text : "", rank, err, errlen) ? 1 : 0;
    for (int i = 0; i < n; i++) {
        bad |= create_tensor(f, &t[i], &w, &offset[i], err, errlen) ? 1 : 0;
        bytes += (double)numel(&t[i]) * sizeof(float);
    }
    if (H5Fclose(f) < 0) {
        fail(err, errlen, "closing '%s' failed: %s", tmp, h5_why(why));
        bad = 1;
    }
    /* 2. the data, each rank its part, through MPI-IO (collective open and close) */
    tr_allreduce(&bad, &bad, 1, TR_I32, TR_MAX, g);
    if (!bad)
        bad = write_bands(tmp, t, n, offset, &w, err, errlen) ? 1 : 0;
    tr_free(offset);
    /* durable before visible: sync the data, rename, sync the directory entry */
    if (!bad && rank == 0) {
        int e = sync_path(tmp, 0);
        if (!e && rename(tmp, path))
            e = errno;
        if (!e)
            e = sync_path(dir, 1);
        if (e) {
            fail(err, errlen, "cannot make checkpoint '%s' durable: %s", path, strerror(e));
            bad = 1;
        }
    }
    tr_allreduce(&bad, &bad, 1, TR_I32, TR_MAX, g);
    if (bad) {
        if (rank == 0)
            unlink(tmp);
        fail(err, errlen, "writing checkpoint '%s' failed on another rank", path);
        return TR_EXIT_IOERR;
    }
    if (stats) {
        stats->seconds = tr_wtime() - t0;
        stats->bytes = bytes;
    }
    return 0;
}

/* ---- read ------------------------------------------------------------------- */

static int read_meta(hid_t f, const char *path, tr_ckpt_meta *m, char *err, size_t errlen)
{
    char format[64] = "", model[64] = "", opt[32] = "";
    int64_t version = 0, step = 0, ranks = 0, dp = 0, tp = 0, pp = 0;
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

static int read_tensor(hid_t f, const char *path, const tr_ckpt_tensor *t, char *err,
                       size_t errlen)
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
    uint32_t crc = 0;
    int rc = 0;
    if (attr_read(ds, "crc32", H5T_NATIVE_UINT32, &crc)) {
        fail(err, errlen, "'%s': %s has no crc32 attribute", path, t->path);
        rc = -1;
    } else if (H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, t->data) < 0) {
        fail(err, errlen, "'%s': reading %s failed: %s (truncated or corrupt file)", path,
             t->path, h5_why(why));
        rc = -1;
    } else if (crc_of(t->data, numel(t)) != crc) {
        fail(err, errlen, "'%s': checksum mismatch in %s: the file is corrupt", path, t->path);
        rc = -1;
    }
    H5Dclose(ds);
    return rc;
}

int tr_ckpt_read(const char *path, tr_ckpt_meta *meta, const tr_ckpt_tensor *t, int n,
                 tr_group *g, char *err, size_t errlen)
{
    char why[256];
    err[0] = '\0';
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    int code = 0;
    if (access(path, R_OK)) {
        fail(err, errlen, "cannot read checkpoint '%s': %s", path, strerror(errno));
        code = TR_EXIT_NOINPUT;
    }
    hid_t f = -1;
    if (!code) {
        /* every rank needs every (replicated) tensor: independent reads of the file,
         * opened collectively */
        hid_t fapl = mpio_fapl(g);
        f = H5Fopen(path, H5F_ACC_RDONLY, fapl);
        H5Pclose(fapl);
        if (f < 0) {
            fail(err, errlen, "'%s' is not a readable checkpoint: %s (truncated, corrupt or not HDF5)",
                 path, h5_why(why));
            code = TR_EXIT_DATA;
        }
    }
    /* every rank reads the same file and reaches the same verdict; agree anyway */
    tr_allreduce(&code, &code, 1, TR_I32, TR_MAX, g);
    if (code) {
        if (f >= 0)
            H5Fclose(f);
        fail(err, errlen, "cannot open checkpoint '%s' on another rank", path);
        return code;
    }
    if (read_meta(f, path, meta, err, errlen))
        code = TR_EXIT_DATA;
    for (int i = 0; !code && i < n; i++)
        if (read_tensor(f, path, &t[i], err, errlen))
            code = TR_EXIT_DATA;
    if (H5Fclose(f) < 0 && !code) {
        fail(err, errlen, "'%s': closing failed: %s", path, h5_why(why));
        code = TR_EXIT_DATA;
    }
    tr_allreduce(&code, &code, 1, TR_I32, TR_MAX, g);
    if (code)
        fail(err, errlen, "checkpoint '%s' failed its checks on another rank", path);
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
