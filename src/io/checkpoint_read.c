/* checkpoint_read.c: tr_ckpt_read. Each rank reads the elements it keeps in memory
 * through HDF5 hyperslabs; the owners' CRCs are combined and compared with the
 * file's (checkpoint.h). */
#include "io/checkpoint_internal.h"
#include "core/watchdog.h"

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The root attributes are the run's state beside its tensors, and the tensors'
 * checksums do not cover them: each is checked for its kind and its range, so a
 * damaged or hand-edited file is refused with the attribute named rather than
 * resumed at step -1 or with a loss scale of nan. */
static int attr_fail(int rc, const char *path, const char *name, const char *kind, char *err,
                     size_t errlen)
{
    if (rc == CKPT_ATTR_MISSING)
        ckpt_fail(err, errlen,
                  "'%s' lacks the root attribute '%s' that every trainer checkpoint has "
                  "(damaged, or not written by this trainer)",
                  path, name);
    else
        ckpt_fail(err, errlen, "'%s': its root attribute '%s' is not %s: the file is damaged", path,
                  name, kind);
    return -1;
}

static int meta_int(hid_t f, const char *path, const char *name, int64_t lo, int64_t hi, int64_t *v,
                    char *err, size_t errlen)
{
    int rc = ckpt_attr_read(f, name, H5T_NATIVE_INT64, v);
    if (rc)
        return attr_fail(rc, path, name, "a single integer", err, errlen);
    if (*v < lo || *v > hi) {
        ckpt_fail(err, errlen,
                  "'%s': its root attribute %s = %lld is outside %lld..%lld: the file is damaged",
                  path, name, (long long)*v, (long long)lo, (long long)hi);
        return -1;
    }
    return 0;
}

/* in [lo, hi] (so not NaN) */
static int meta_double(hid_t f, const char *path, const char *name, double lo, double hi, double *v,
                       char *err, size_t errlen)
{
    int rc = ckpt_attr_read(f, name, H5T_NATIVE_DOUBLE, v);
    if (rc)
        return attr_fail(rc, path, name, "a single floating-point number", err, errlen);
    if (!(*v >= lo && *v <= hi)) {
        ckpt_fail(err, errlen,
                  "'%s': its root attribute %s = %g is outside %g..%g: the file is "
                  "damaged",
                  path, name, *v, lo, hi);
        return -1;
    }
    return 0;
}

static int meta_str(hid_t f, const char *path, const char *name, char *buf, size_t len, char *err,
                    size_t errlen)
{
    int rc = ckpt_attr_read_str(f, name, buf, len);
    return rc ? attr_fail(rc, path, name, "a short fixed-length string", err, errlen) : 0;
}

/* attributes added by later trainers: absent means their default */
static int has(hid_t f, const char *name) { return H5Aexists(f, name) > 0; }

static int read_meta(hid_t f, const char *path, tr_ckpt_meta *m, char *err, size_t errlen)
{
    char format[64] = "", model[64] = "", opt[32] = "";
    int64_t version = 0;
    if (ckpt_attr_read_str(f, "format", format, sizeof format) || strcmp(format, TR_CKPT_FORMAT)) {
        ckpt_fail(
            err, errlen,
            "'%s' is an HDF5 file but not a trainer checkpoint (no format = \"%s\" attribute)",
            path, TR_CKPT_FORMAT);
        return -1;
    }
    int rc = ckpt_attr_read(f, "format_version", H5T_NATIVE_INT64, &version);
    if (rc)
        return attr_fail(rc, path, "format_version", "a single integer", err, errlen);
    if (version < 1 || version > TR_CKPT_VERSION) {
        ckpt_fail(err, errlen,
                  "'%s' has checkpoint format version %lld; this trainer reads versions 1 to %d",
                  path, (long long)version, TR_CKPT_VERSION);
        return -1;
    }
    int64_t step = 0, ranks = 0, dp = 0, tp = 0, pp = 0, zero = 0;
    if (meta_str(f, path, "model", model, sizeof model, err, errlen) ||
        meta_str(f, path, "optimizer", opt, sizeof opt, err, errlen) ||
        meta_int(f, path, "step", 0, TR_CKPT_MAX_STEP, &step, err, errlen) ||
        /* step / steps per epoch, and an epoch has at least one step */
        meta_double(f, path, "epoch", 0, (double)step, &m->epoch, err, errlen))
        return -1;
    rc = ckpt_attr_read(f, "seed", H5T_NATIVE_UINT64, &m->seed);
    if (rc)
        return attr_fail(rc, path, "seed", "a single integer", err, errlen);
    m->data_digest = 0; /* came later: absent, not recorded */
    rc = has(f, "data_digest") ? ckpt_attr_read(f, "data_digest", H5T_NATIVE_UINT64, &m->data_digest)
                               : 0;
    if (rc)
        return attr_fail(rc, path, "data_digest", "a single integer", err, errlen);
    /* the layout it was written at: reading does not depend on it, but one that
     * cannot have been is a damaged file */
    if (meta_int(f, path, "written_ranks", 1, INT_MAX, &ranks, err, errlen) ||
        meta_int(f, path, "written_dp", 1, ranks, &dp, err, errlen) ||
        meta_int(f, path, "written_tp", 1, ranks, &tp, err, errlen) ||
        meta_int(f, path, "written_pp", 1, ranks, &pp, err, errlen) ||
        /* written_zero came later: files without it were written without ZeRO */
        (has(f, "written_zero") && meta_int(f, path, "written_zero", 0, 2, &zero, err, errlen)))
        return -1;
    if (dp * tp > ranks || dp * tp * pp != ranks) { /* each <= ranks: no overflow */
        ckpt_fail(err, errlen,
                  "'%s': its layout attributes do not fit together (written_ranks %lld is not "
                  "dp %lld x tp %lld x pp %lld): the file is damaged",
                  path, (long long)ranks, (long long)dp, (long long)tp, (long long)pp);
        return -1;
    }
    if (strcmp(model, m->model)) {
        ckpt_fail(err, errlen, "'%s' was written for model '%s'; this deck trains '%s'", path,
                  model, m->model);
        return -1;
    }
    if (m->optimizer[0] && strcmp(opt, m->optimizer)) {
        ckpt_fail(err, errlen,
                  "'%s' holds %s optimizer state; this deck uses %s, which cannot resume from it",
                  path, opt, m->optimizer);
        return -1;
    }
    m->step = (long)step;
    m->ranks = (int)ranks, m->dp = (int)dp, m->tp = (int)tp, m->pp = (int)pp;
    m->zero = (int)zero;
    /* mixed precision's attributes came later still: absent, nothing was skipped.
     * The loss scaler counts steps, so its counts cannot pass the step. */
    int64_t good = 0, skipped = 0;
    m->loss_scale = 0; /* not recorded */
    snprintf(m->precision, sizeof m->precision, "fp32");
    if ((has(f, "precision") &&
         meta_str(f, path, "precision", m->precision, sizeof m->precision, err, errlen)) ||
        (has(f, "loss_scale") &&
         meta_double(f, path, "loss_scale", 0, DBL_MAX, &m->loss_scale, err, errlen)) ||
        (has(f, "loss_scale_good_steps") &&
         meta_int(f, path, "loss_scale_good_steps", 0, step, &good, err, errlen)) ||
        (has(f, "skipped_steps") &&
         meta_int(f, path, "skipped_steps", 0, step, &skipped, err, errlen)))
        return -1;
    if (strcmp(m->precision, "fp32") && strcmp(m->precision, "bf16-mixed") &&
        strcmp(m->precision, "fp16-mixed")) {
        ckpt_fail(err, errlen,
                  "'%s': its root attribute precision = '%s' is none of fp32, bf16-mixed, "
                  "fp16-mixed: the file is damaged",
                  path, m->precision);
        return -1;
    }
    m->loss_scale_good = (long)good;
    m->skipped_steps = (long)skipped;
    /* the validation tracker's came last: absent, no evaluation was recorded. Each
     * evaluation follows a step of its own, so neither count passes the step. */
    int64_t best_step = 0, since = 0;
    m->best_val_loss = 0;
    if (has(f, "best_val_step") &&
        (meta_int(f, path, "best_val_step", 1, step, &best_step, err, errlen) ||
         meta_int(f, path, "evals_since_best", 0, step - best_step, &since, err, errlen) ||
         meta_double(f, path, "best_val_loss", 0, HUGE_VAL, &m->best_val_loss, err, errlen)))
        return -1;
    /* evaluations before any lowest loss (NaN ones), which early_stop counts */
    if (!has(f, "best_val_step") && has(f, "evals_since_best") &&
        meta_int(f, path, "evals_since_best", 0, step, &since, err, errlen))
        return -1;
    m->best_val_step = (long)best_step;
    m->evals_since_best = (long)since;
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
    int nb = ckpt_blocks_of(t, b), rc = s.space < 0 ? -1 : 0;
    uint64_t base = 0;
    for (int i = 0; i < nb && !rc; i++) {
        uint64_t n = b[i].rows * b[i].cols;
        uint64_t a = t->data_lo > base ? t->data_lo : base;
        uint64_t e = t->data_hi < base + n ? t->data_hi : base + n;
        base += n;
        if (a >= e)
            continue;
        hsize_t count = e - a;
        tr_watchdog_beat("a piece of a checkpoint read", -1);
        hid_t ms = H5Screate_simple(1, &count, NULL);
        rc = H5Sselect_none(s.space) < 0 || ckpt_block_rects(&b[i], base - n, a, e, sel_rect, &s) ||
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
static int read_tensor(hid_t f, const char *path, const tr_ckpt_tensor *t, uint32_t *crc, char *err,
                       size_t errlen)
{
    char why[256];
    if (H5Lexists(f, t->path, H5P_DEFAULT) <= 0) {
        H5Eclear2(H5E_DEFAULT);
        ckpt_fail(err, errlen, "'%s' has no %s: written for another model or optimizer", path,
                  t->path);
        return -1;
    }
    hid_t ds = H5Dopen2(f, t->path, H5P_DEFAULT);
    if (ds < 0) {
        ckpt_fail(err, errlen, "'%s': cannot open %s: %s", path, t->path, ckpt_h5_why(why));
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
        ckpt_fail(err, errlen, "'%s': %s has shape %s, the model has %s (another model size?)",
                  path, t->path, a, b);
        H5Dclose(ds);
        return -1;
    }
    int rc = 0;
    int crc_rc = ckpt_attr_read(ds, "crc32", H5T_NATIVE_UINT32, crc);
    if (crc_rc) {
        ckpt_fail(err, errlen, "'%s': %s %s", path, t->path,
                  crc_rc == CKPT_ATTR_MISSING ? "has no crc32 attribute"
                                              : "has a crc32 attribute that is not one integer");
        rc = -1;
    } else if (read_data(ds, t)) {
        ckpt_fail(err, errlen, "'%s': reading %s failed: %s (truncated or corrupt file)", path,
                  t->path, ckpt_h5_why(why));
        rc = -1;
    }
    H5Dclose(ds);
    return rc;
}

/* H5Lvisit: counts the datasets the trainer wrote as parameters ("kind" attribute
 * "parameter"); others (a user's own data beside them) are not the model's. */
static herr_t count_parameter(hid_t g, const char *name, const H5L_info_t *info, void *count)
{
    (void)info;
    hid_t ds = H5Dopen2(g, name, H5P_DEFAULT); /* a group fails: not counted */
    if (ds >= 0) {
        char kind[32];
        if (ckpt_attr_read_str(ds, "kind", kind, sizeof kind) == 0 && !strcmp(kind, "parameter"))
            ++*(int *)count;
        H5Dclose(ds);
    }
    H5Eclear2(H5E_DEFAULT);
    return 0;
}

/* The parameter tensors the file's /model holds (0 without one). */
static int file_parameters(hid_t f)
{
    int count = 0;
    if (H5Lexists(f, "/model", H5P_DEFAULT) > 0) {
        hid_t g = H5Gopen2(f, "/model", H5P_DEFAULT);
        if (g >= 0) {
            H5Lvisit(g, H5_INDEX_NAME, H5_ITER_NATIVE, count_parameter, &count);
            H5Gclose(g);
        }
    }
    H5Eclear2(H5E_DEFAULT);
    return count;
}

/* Collective: every tensor's CRC combined from the owners' runs of what they read,
 * against the file's crc32 (expect, per caller tensor). The verdict and the
 * message are the same on every rank: the first bad tensor in file order. Before
 * that, the file's parameters (in_file of them) must all be the model's: each of the
 * model's was found in the file, so more there are another model's (a deeper one's
 * layers, which a shallower model would otherwise load without them). */
static int verify(const char *path, const tr_ckpt_tensor *t, int n, const uint32_t *expect,
                  int in_file, tr_group *g, char *err, size_t errlen)
{
    catalogue c = {0};
    int code = ckpt_agree(g, ckpt_cat_build(&c, t, n, g, err, errlen), err, errlen);
    int in_model = 0;
    for (int i = 0; !code && i < c.n; i++)
        in_model += !strcmp(c.e[i].kind, "parameter") && !strncmp(c.e[i].path, "/model/", 7);
    if (!code && in_model && in_file > in_model) {
        ckpt_fail(err, errlen,
                  "'%s' holds %d parameter tensors and this model %d: written for another "
                  "model (more layers?); h5dump -d /deck shows the deck that wrote it",
                  path, in_file, in_model);
        code = TR_EXIT_DATA;
    }
    if (!code) {
        uint32_t *crc = NULL;
        int *status = NULL;
        ckpt_checksums(&c, t, n, expect, g, &crc, &status);
        for (int i = 0; i < c.n && !code; i++)
            if (status[i] == CRC_MISMATCH) {
                ckpt_fail(err, errlen, "'%s': checksum mismatch in %s: the file is corrupt", path,
                          c.e[i].path);
                code = TR_EXIT_DATA;
            } else if (status[i]) {
                ckpt_fail(err, errlen,
                          "internal error: the ranks' parts of %s do not cover it "
                          "exactly once",
                          c.e[i].path);
                code = TR_EXIT_SOFTWARE;
            }
        tr_free(crc);
        tr_free(status);
    }
    ckpt_cat_free(&c);
    return code;
}

int tr_ckpt_read(const char *path, tr_ckpt_meta *meta, const tr_ckpt_tensor *t, int n, tr_group *g,
                 char *err, size_t errlen)
{
    char why[256];
    err[0] = '\0';
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    int code = ckpt_check_descs(t, n, err, errlen);
    struct stat st;
    if (!code && (access(path, R_OK) || stat(path, &st))) {
        ckpt_fail(err, errlen, "cannot read checkpoint '%s': %s", path, strerror(errno));
        code = TR_EXIT_NOINPUT;
    } else if (!code && S_ISDIR(st.st_mode)) { /* MPI-IO would try to read it, loudly */
        ckpt_fail(err, errlen,
                  "checkpoint '%s' is a directory: name a checkpoint file (a checkpoint "
                  "directory's last.h5 is its newest)",
                  path);
        code = TR_EXIT_NOINPUT;
    }
    /* agreed before the collective open: a rank that cannot see the file (a
     * node-local directory) must not leave the others waiting in it; nor may ranks
     * open different files of one name */
    code = ckpt_agree(g, code, err, errlen);
    if (!code) {
        int64_t size[2] = {(int64_t)st.st_size, -(int64_t)st.st_size};
        tr_allreduce(size, size, 2, TR_I64, TR_MAX, g);
        if (size[0] != -size[1]) {
            ckpt_fail(err, errlen,
                      "'%s' is not the same file on every rank (sizes %lld to %lld bytes): "
                      "node-local copies? Put checkpoints on a file system every node shares",
                      path, (long long)-size[1], (long long)size[0]);
            code = TR_EXIT_DATA;
        }
    }
    hid_t f = -1;
    if (!code) {
        /* opened collectively; each rank then reads its own tensors independently */
        hid_t fapl = ckpt_mpio_fapl(g);
        f = H5Fopen(path, H5F_ACC_RDONLY, fapl);
        H5Pclose(fapl);
        if (f < 0) {
            ckpt_fail(err, errlen,
                      "'%s' is not a readable checkpoint: %s (truncated, corrupt or not HDF5)",
                      path, ckpt_h5_why(why));
            code = TR_EXIT_DATA;
        }
    }
    code = ckpt_agree(g, code, err, errlen);
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
    int in_file = code ? 0 : file_parameters(f);
    if (H5Fclose(f) < 0 && !code) {
        ckpt_fail(err, errlen, "'%s': closing failed: %s", path, ckpt_h5_why(why));
        code = TR_EXIT_DATA;
    }
    code = ckpt_agree(g, code, err, errlen);
    if (!code)
        code = verify(path, t, n, expect, in_file, g, err, errlen);
    tr_free(expect);
    return code;
}

char *tr_ckpt_read_deck(const char *path)
{
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0)
        return NULL;
    char *text = NULL;
    hid_t ds = H5Lexists(f, "/deck", H5P_DEFAULT) > 0 ? H5Dopen2(f, "/deck", H5P_DEFAULT) : -1;
    if (ds >= 0) {
        hid_t ft = H5Dget_type(ds), space = H5Dget_space(ds);
        size_t sz = H5Tget_size(ft);
        /* one fixed-length string, as tr_ckpt_write writes it */
        if (H5Tget_class(ft) == H5T_STRING && !H5Tis_variable_str(ft) && sz > 0 &&
            H5Sget_simple_extent_npoints(space) == 1) {
            hid_t mt = H5Tcopy(H5T_C_S1);
            H5Tset_size(mt, sz + 1);
            text = calloc(sz + 1, 1);
            if (text && H5Dread(ds, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, text) < 0) {
                free(text);
                text = NULL;
            }
            H5Tclose(mt);
        }
        H5Sclose(space);
        H5Tclose(ft);
        H5Dclose(ds);
    }
    H5Eclear2(H5E_DEFAULT);
    H5Fclose(f);
    return text;
}

long tr_ckpt_read_step(const char *path)
{
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0)
        return -1;
    long long step = -1;
    hid_t a = H5Aexists(f, "step") > 0 ? H5Aopen(f, "step", H5P_DEFAULT) : -1;
    if (a >= 0) {
        hid_t space = H5Aget_space(a);
        if (H5Sget_simple_extent_npoints(space) != 1 || H5Aread(a, H5T_NATIVE_LLONG, &step) < 0)
            step = -1;
        H5Sclose(space);
        H5Aclose(a);
    }
    H5Eclear2(H5E_DEFAULT);
    H5Fclose(f);
    return step < 0 ? -1 : (long)step;
}
