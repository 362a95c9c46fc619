/* test_checkpoint_shards.c (4 ranks): a checkpoint written at one layout reads back
 * at any other. Synthetic tensors (a QKV-like weight split in three blocks of rows,
 * a weight split by columns, a replicated 1-D tensor, a padded embedding with a tied
 * copy, ZeRO-like slices of a flat buffer, one held by half the ranks only, a 3-D
 * tensor in flat bands) are written at "tp 2 x dp 2" and read at tp 4, at tp 2 in
 * two 2-rank groups at once, and whole on single ranks; every element must equal
 * its known value, the crc32 attributes must equal zlib's CRC of the whole tensor
 * and those of the same tensors written whole from one rank, and a flipped byte,
 * a missing tensor or overlapping own ranges must fail on every rank with the same
 * message, without hanging. */
#include "comm/comm.h"
#include "comm/comm_mpi.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "test_util.h"

#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

enum { NT = 8, QKV = 0, PROJ, LN, WTE, ZA, ZB, PROJ_M, CONV };

static const struct {
    const char *path;
    int ndim;
    uint64_t dims[3];
} spec[NT] = {
    {"/model/qkv/weight", 2, {12, 8}},  {"/model/proj/weight", 2, {8, 12}},
    {"/model/ln/bias", 1, {10}},        {"/model/wte/weight", 2, {6, 5}},
    {"/optimizer/adam_m/a/weight", 2, {7, 3}}, {"/optimizer/adam_m/b/weight", 2, {5, 4}},
    {"/optimizer/adam_m/proj/weight", 2, {8, 12}}, {"/model/conv/weight", 3, {3, 4, 5}},
};

#define SENTINEL (-12345.5f)
#define PAD 10 /* floats of padding after the elements of padded tensors */

/* the known value of tensor k's logical element g: exact in float32 */
static float value(int k, uint64_t g) { return (float)(k * 1000 + (int)g) + 0.25f; }

static uint64_t spec_numel(int k)
{
    uint64_t n = 1;
    for (int d = 0; d < spec[k].ndim; d++)
        n *= spec[k].dims[d];
    return n;
}

/* What one rank holds in one layout: up to NT + 1 tensors and their memory. */
typedef struct layout {
    tr_ckpt_tensor t[NT + 1];
    int which[NT + 1]; /* spec index, or -1 for an extra tensor */
    float *mem[NT + 1];
    uint64_t memlen[NT + 1];
    int n;
} layout;

/* The logical element of local element j (as tr_param_global_index). */
static uint64_t global_index(const tr_ckpt_tensor *t, uint64_t j)
{
    if (!t->nblocks)
        return j;
    uint64_t w = 1;
    for (int d = 1; d < t->ndim; d++)
        w *= t->dims[d];
    for (int b = 0; b < t->nblocks; b++) {
        const tr_ckpt_block *k = &t->block[b];
        if (j < k->rows * k->cols)
            return (k->row0 + j / k->cols) * w + k->col0 + j % k->cols;
        j -= k->rows * k->cols;
    }
    return UINT64_MAX;
}

/* Adds spec tensor k: blocks (nb of them, 0 = whole), local data [dlo, dhi) with
 * pad floats after it, own [olo, ohi). Memory is the sentinel; fill() sets values. */
static tr_ckpt_tensor *hold(layout *L, int k, int nb, const tr_ckpt_block *b, uint64_t dlo,
                            uint64_t dhi, uint64_t olo, uint64_t ohi, uint64_t pad)
{
    tr_ckpt_tensor *t = &L->t[L->n];
    memset(t, 0, sizeof *t);
    snprintf(t->path, sizeof t->path, "%s", spec[k].path);
    snprintf(t->kind, sizeof t->kind, "%s", strstr(t->path, "/optimizer") ? "adam_m" : "parameter");
    snprintf(t->layer, sizeof t->layer, "layer%d", k);
    t->ndim = spec[k].ndim;
    memcpy(t->dims, spec[k].dims, sizeof spec[k].dims);
    t->nblocks = nb;
    if (nb)
        memcpy(t->block, b, (size_t)nb * sizeof *b);
    t->data_lo = dlo, t->data_hi = dhi, t->own_lo = olo, t->own_hi = ohi;
    L->memlen[L->n] = dhi - dlo + pad;
    L->mem[L->n] = tr_alloc((L->memlen[L->n] ? L->memlen[L->n] : 1) * sizeof(float), "test");
    for (uint64_t i = 0; i < L->memlen[L->n]; i++)
        L->mem[L->n][i] = SENTINEL;
    t->data = dhi > dlo ? L->mem[L->n] : NULL;
    L->which[L->n] = k;
    L->n++;
    return t;
}

static void layout_free(layout *L)
{
    for (int i = 0; i < L->n; i++)
        tr_free(L->mem[i]);
    L->n = 0;
}

static void fill(layout *L)
{
    for (int i = 0; i < L->n; i++)
        for (uint64_t j = L->t[i].data_lo; j < L->t[i].data_hi; j++)
            L->t[i].data[j - L->t[i].data_lo] = value(L->which[i], global_index(&L->t[i], j));
}

/* Every element read equals its value; padding is untouched. Returns mismatches. */
static int check_values(const layout *L, const char *what)
{
    int bad = 0;
    for (int i = 0; i < L->n; i++) {
        const tr_ckpt_tensor *t = &L->t[i];
        for (uint64_t j = 0; j < L->memlen[i]; j++) {
            uint64_t local = t->data_lo + j;
            float want = local < t->data_hi ? value(L->which[i], global_index(t, local)) : SENTINEL;
            if (L->mem[i][j] != want && bad++ < 5)
                fprintf(stderr, "[rank %d] %s: %s local element %llu is %g, expected %g\n",
                        tr_error_rank(), what, t->path, (unsigned long long)local,
                        (double)L->mem[i][j], (double)want);
        }
    }
    return bad;
}

static void band(uint64_t n, int i, int parts, uint64_t *lo, uint64_t *hi)
{
    *lo = n * (uint64_t)i / (uint64_t)parts;
    *hi = n * (uint64_t)(i + 1) / (uint64_t)parts;
}

/* Column-parallel QKV [12, 8] at tp ranks: three bands of rows, rank r's share of each. */
static int qkv_blocks(int tp, int r, tr_ckpt_block *b)
{
    uint64_t c = 4, per = c / (uint64_t)tp;
    for (int k = 0; k < 3; k++)
        b[k] = (tr_ckpt_block){(uint64_t)k * c + (uint64_t)r * per, 0, per, 8};
    return 3;
}

/* Row-parallel [8, 12]: rank r's band of columns. */
static int col_block(int tp, int r, tr_ckpt_block *b)
{
    uint64_t lo, hi;
    band(12, r, tp, &lo, &hi);
    b[0] = (tr_ckpt_block){0, lo, 8, hi - lo};
    return 1;
}

/* A ZeRO slice: the flat buffer [first, first + n) of a tensor against the rank's
 * slice [lo, hi): the local range it covers (empty when none). */
static void slice(uint64_t first, uint64_t n, uint64_t lo, uint64_t hi, uint64_t *a, uint64_t *b)
{
    uint64_t x = lo > first ? lo : first, y = hi < first + n ? hi : first + n;
    if (x >= y)
        x = y = 0;
    else
        x -= first, y -= first;
    *a = x, *b = y;
}

/* Write layout: 4 ranks as tp 2 x dp 2 (tp innermost), ZeRO over the 4 for a and
 * b, over the 2 dp ranks for proj's state, the 3-D tensor on "stage 1" only. */
static void layout_write(layout *L, int rank)
{
    int tp = rank % 2, dp = rank / 2;
    tr_ckpt_block b[3];
    uint64_t lo, hi, a, e;
    int nb = qkv_blocks(2, tp, b);
    band(48, dp, 2, &lo, &hi);
    hold(L, QKV, nb, b, 0, 48, lo, hi, 0);
    nb = col_block(2, tp, b);
    hold(L, PROJ, nb, b, 0, 48, lo, hi, 0);
    band(10, rank, 4, &lo, &hi);
    hold(L, LN, 0, NULL, 0, 10, lo, hi, 0);
    if (rank < 2) /* stage 0 owns the embedding; stage 1's is a tied copy */
        band(30, rank, 2, &lo, &hi);
    else
        lo = hi = 0;
    hold(L, WTE, 0, NULL, 0, 30, lo, hi, PAD);
    band(41, rank, 4, &lo, &hi); /* a and b: one flat buffer of 21 + 20 */
    slice(0, 21, lo, hi, &a, &e);
    hold(L, ZA, 0, NULL, a, e, a, e, 0);
    slice(21, 20, lo, hi, &a, &e);
    hold(L, ZB, 0, NULL, a, e, a, e, 0);
    band(53, dp, 2, &lo, &hi); /* proj's state after 5 other floats, over the dp ranks */
    slice(5, 48, lo, hi, &a, &e);
    nb = col_block(2, tp, b);
    hold(L, PROJ_M, nb, b, a, e, a, e, 0);
    if (rank >= 2) {
        band(60, rank - 2, 2, &lo, &hi);
        hold(L, CONV, 0, NULL, 0, 60, lo, hi, 0);
    }
}

/* Read layout: 4 ranks as tp 4; data ranges wider than the own ones for conv. */
static void layout_tp4(layout *L, int r)
{
    tr_ckpt_block b[3];
    uint64_t lo, hi;
    int nb = qkv_blocks(4, r, b);
    hold(L, QKV, nb, b, 0, 24, 0, 24, 0);
    nb = col_block(4, r, b);
    hold(L, PROJ, nb, b, 0, 24, 0, 24, 0);
    band(10, r, 4, &lo, &hi);
    hold(L, LN, 0, NULL, 0, 10, lo, hi, 0);
    band(30, r, 4, &lo, &hi);
    hold(L, WTE, 0, NULL, 0, 30, lo, hi, PAD);
    band(21, r, 4, &lo, &hi);
    hold(L, ZA, 0, NULL, 0, 21, lo, hi, 0);
    band(20, r, 4, &lo, &hi);
    hold(L, ZB, 0, NULL, 0, 20, lo, hi, 0);
    nb = col_block(4, r, b);
    hold(L, PROJ_M, nb, b, 0, 24, 0, 24, 0);
    uint64_t own = (uint64_t)r * 15; /* reads 7 elements before and 4 after its own 15 */
    uint64_t dlo = own >= 7 ? own - 7 : 0, dhi = own + 19 < 60 ? own + 19 : 60;
    hold(L, CONV, 0, NULL, dlo, dhi, own, own + 15, 0);
}

/* Read layout: 2 ranks as tp 2, ZeRO over the 2 for a and b, a tied copy on rank 1. */
static void layout_tp2(layout *L, int r)
{
    tr_ckpt_block b[3];
    uint64_t lo, hi, a, e;
    int nb = qkv_blocks(2, r, b);
    hold(L, QKV, nb, b, 0, 48, 0, 48, 0);
    nb = col_block(2, r, b);
    hold(L, PROJ, nb, b, 0, 48, 0, 48, 0);
    band(10, r, 2, &lo, &hi);
    hold(L, LN, 0, NULL, 0, 10, lo, hi, 0);
    hold(L, WTE, 0, NULL, 0, 30, 0, r ? 0 : 30, PAD);
    band(41, r, 2, &lo, &hi);
    slice(0, 21, lo, hi, &a, &e);
    hold(L, ZA, 0, NULL, a, e, a, e, 0);
    slice(21, 20, lo, hi, &a, &e);
    hold(L, ZB, 0, NULL, a, e, a, e, 0);
    nb = col_block(2, r, b);
    hold(L, PROJ_M, nb, b, 0, 48, 0, 48, 0);
    band(60, r, 2, &lo, &hi);
    hold(L, CONV, 0, NULL, 0, 60, lo, hi, 0);
}

/* One rank holding everything whole. */
static void layout_whole(layout *L)
{
    for (int k = 0; k < NT; k++) {
        uint64_t n = spec_numel(k);
        hold(L, k, 0, NULL, 0, n, 0, n, k == WTE ? PAD : 0);
    }
}

static tr_ckpt_meta meta_for(const char *deck)
{
    tr_ckpt_meta m = {0};
    snprintf(m.model, sizeof m.model, "synthetic");
    snprintf(m.optimizer, sizeof m.optimizer, "adamw");
    m.step = 1, m.epoch = 0.5, m.seed = 7;
    /* a layout recorded as a run of 8 ranks would (the reader checks dp x tp x pp = ranks);
     * these 4 ranks only stand in for its tensors */
    m.ranks = 8, m.dp = 2, m.tp = 2, m.pp = 2, m.zero = 1;
    m.deck_text = deck;
    return m;
}

static int read_as(const char *file, layout *L, tr_group *g, tr_ckpt_meta *m, char *err,
                   size_t errlen)
{
    *m = meta_for(NULL);
    return tr_ckpt_read(file, m, L->t, L->n, g, err, errlen);
}

/* A read that must succeed with every value right. */
static void expect_read(const char *file, long step, layout *L, tr_group *g, const char *what)
{
    char err[4096];
    tr_ckpt_meta m;
    int rc = read_as(file, L, g, &m, err, sizeof err);
    CHECK(rc == 0, "%s: read failed: %d %s", what, rc, err);
    CHECK(!rc && !check_values(L, what), "%s: values differ", what);
    CHECK(m.step == step && m.zero == 1 && m.dp == 2 && m.tp == 2 && m.pp == 2,
          "%s: meta step %ld zero %d dp %d tp %d pp %d", what, m.step, m.zero, m.dp, m.tp, m.pp);
}

/* A call that must fail with `code` and the same message, containing `pattern`,
 * on every rank of g. */
static void expect_same_failure(int rc, int code, const char *err, const char *pattern,
                                tr_group *g, const char *what)
{
    CHECK(rc == code, "%s: exit %d, expected %d (%s)", what, rc, code, err);
    CHECK(strstr(err, pattern) != NULL, "%s: message '%s' lacks '%s'", what, err, pattern);
    char first[4096];
    snprintf(first, sizeof first, "%s", err);
    MPI_Bcast(first, (int)sizeof first, MPI_CHAR, 0, tr_group_mpi_comm(g));
    CHECK(!strcmp(first, err), "%s: rank 0 says '%s', this rank '%s'", what, first, err);
}

/* zlib's CRC-32 of tensor k's values in row-major order. */
static uint32_t crc_of_spec(int k)
{
    uint64_t n = spec_numel(k);
    float *x = tr_alloc(n * sizeof *x, "test");
    for (uint64_t i = 0; i < n; i++)
        x[i] = value(k, i);
    uint32_t c = (uint32_t)crc32(crc32(0L, Z_NULL, 0), (const Bytef *)x, (uInt)(n * sizeof *x));
    tr_free(x);
    return c;
}

/* Serial look at a file: a dataset's crc32 attribute, or its data offset. */
static uint32_t attr_crc(hid_t f, const char *path)
{
    uint32_t c = 0;
    hid_t ds = H5Dopen2(f, path, H5P_DEFAULT);
    hid_t a = H5Aopen(ds, "crc32", H5P_DEFAULT);
    H5Aread(a, H5T_NATIVE_UINT32, &c);
    H5Aclose(a);
    H5Dclose(ds);
    return c;
}

/* Rank 0 only: the crc32 attributes of file a are zlib's CRCs of the values, and
 * equal those of file b (the same tensors written whole by one rank). */
static void check_crcs(const char *a, const char *b)
{
    hid_t fa = H5Fopen(a, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t fb = H5Fopen(b, H5F_ACC_RDONLY, H5P_DEFAULT);
    CHECK(fa >= 0 && fb >= 0, "cannot open %s or %s serially", a, b);
    if (fa < 0 || fb < 0)
        return;
    for (int k = 0; k < NT; k++) {
        uint32_t want = crc_of_spec(k);
        uint32_t ca = attr_crc(fa, spec[k].path), cb = attr_crc(fb, spec[k].path);
        CHECK(ca == want, "%s: crc32 attribute %08x, zlib says %08x", spec[k].path, ca, want);
        CHECK(cb == want, "%s (written whole): crc32 %08x, zlib says %08x", spec[k].path, cb, want);
    }
    int64_t zero = -1;
    hid_t at = H5Aopen(fa, "written_zero", H5P_DEFAULT);
    H5Aread(at, H5T_NATIVE_INT64, &zero);
    H5Aclose(at);
    CHECK(zero == 1, "written_zero is %lld", (long long)zero);
    H5Fclose(fa);
    H5Fclose(fb);
}

/* Rank 0 only: a copy of src with one byte of tensor `path` flipped. */
static void corrupt_copy(const char *src, const char *dst, const char *path, uint64_t at)
{
    hid_t f = H5Fopen(src, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t ds = H5Dopen2(f, path, H5P_DEFAULT);
    haddr_t off = H5Dget_offset(ds);
    H5Dclose(ds);
    H5Fclose(f);
    FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
    CHECK(in && out && off != HADDR_UNDEF, "cannot copy %s", src);
    if (!in || !out) {
        if (in)
            fclose(in);
        if (out)
            fclose(out);
        return;
    }
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        fwrite(buf, 1, n, out);
    fclose(in);
    fclose(out);
    FILE *x = fopen(dst, "r+b");
    fseek(x, (long)(off + at), SEEK_SET);
    int c = fgetc(x);
    fseek(x, (long)(off + at), SEEK_SET);
    fputc(c ^ 0x10, x);
    fclose(x);
}

static void write_as(const char *dir, long step, layout *L, tr_group *g, int collective)
{
    char err[4096];
    tr_ckpt_meta m = meta_for("[synthetic]\n");
    m.step = step;
    m.collective_io = collective;
    /* step 3's: two evaluations so far and no lowest loss (both NaN), which
     * early_stop counts: the file must keep the count without a best */
    if (step == 3)
        m.evals_since_best = 2;
    fill(L);
    int rc = tr_ckpt_write(dir, NULL, &m, L->t, L->n, g, NULL, err, sizeof err);
    CHECK(rc == 0, "write of step %ld failed: %s", step, err);
}

int main(int argc, char **argv)
{
    tr_world w;
    tr_comm_init(&argc, &argv, &w);
    if (w.size != 4) {
        if (w.rank == 0)
            fprintf(stderr, "test_checkpoint_shards needs 4 ranks\n");
        tr_comm_finalize(&w);
        return 1;
    }
    /* tp 2 x pp 2: tp_group = 2-rank groups {0,1} and {2,3}; dp_group = the rank alone */
    tr_comm_make_grid(&w, 1, 2, 2);
    char dir[256] = "/tmp/trainer_ckpt_shards.XXXXXX";
    if (w.rank == 0 && !mkdtemp(dir))
        dir[0] = '\0';
    MPI_Bcast(dir, (int)sizeof dir, MPI_CHAR, 0, tr_group_mpi_comm(w.world));
    CHECK(dir[0], "cannot make a temporary directory");
    char f1[512], f2[512], f3[512], bad1[512], bad2[512];
    snprintf(f1, sizeof f1, "%s/step_00000001.h5", dir);
    snprintf(f2, sizeof f2, "%s/whole/step_00000001.h5", dir);
    snprintf(f3, sizeof f3, "%s/step_00000003.h5", dir);
    snprintf(bad1, sizeof bad1, "%s/flipped_proj.h5", dir);
    snprintf(bad2, sizeof bad2, "%s/flipped_conv.h5", dir);
    layout L = {0};

    /* (a) written at tp 2 x dp 2, independently and with collective I/O */
    layout_write(&L, w.rank);
    write_as(dir, 1, &L, w.world, 0);
    write_as(dir, 3, &L, w.world, 1);
    layout_free(&L);
    /* the same tensors written whole by one rank */
    if (w.rank == 0) {
        char whole[512];
        snprintf(whole, sizeof whole, "%s/whole", dir);
        layout_whole(&L);
        write_as(whole, 1, &L, w.dp_group, 0);
        layout_free(&L);
    }
    tr_barrier(w.world);

    /* (b) read back at other layouts */
    layout_tp4(&L, w.rank);
    expect_read(f1, 1, &L, w.world, "tp 4");
    layout_free(&L);
    layout_tp2(&L, w.tp_rank);
    expect_read(f1, 1, &L, w.tp_group, "tp 2 (two groups at once)");
    layout_free(&L);
    layout_whole(&L);
    expect_read(f1, 1, &L, w.dp_group, "whole on one rank");
    layout_free(&L);
    layout_whole(&L);
    expect_read(f3, 3, &L, w.dp_group, "whole on one rank, written with collective I/O");
    {
        tr_ckpt_meta m3;
        char err3[4096];
        int rc3 = read_as(f3, &L, w.dp_group, &m3, err3, sizeof err3);
        CHECK(rc3 == 0 && m3.best_val_step == 0 && m3.evals_since_best == 2,
              "evaluations without a lowest loss: best step %ld, %ld since (expected 0, 2): %s",
              m3.best_val_step, m3.evals_since_best, err3);
    }
    layout_free(&L);
    layout_write(&L, w.rank);
    expect_read(f2, 1, &L, w.world, "tp 2 x dp 2 from the file written whole");
    layout_free(&L);

    /* (c) checksums against zlib and against the whole-tensor writer */
    if (w.rank == 0) {
        check_crcs(f1, f2);
        check_crcs(f3, f2);
        corrupt_copy(f1, bad1, spec[PROJ].path, 4 * 13 + 1);
        corrupt_copy(f1, bad2, spec[CONV].path, 4 * 44 + 2);
    }
    tr_barrier(w.world);

    /* (d) a flipped byte: the same failure on every rank of every group */
    char err[4096];
    tr_ckpt_meta m;
    layout_tp4(&L, w.rank);
    int rc = read_as(bad1, &L, w.world, &m, err, sizeof err);
    expect_same_failure(rc, TR_EXIT_DATA, err, "checksum mismatch in /model/proj/weight", w.world,
                        "flipped byte, tp 4");
    rc = read_as(bad2, &L, w.world, &m, err, sizeof err);
    expect_same_failure(rc, TR_EXIT_DATA, err, "checksum mismatch in /model/conv/weight", w.world,
                        "flipped byte in the 3-D tensor, tp 4");
    layout_free(&L);
    layout_tp2(&L, w.tp_rank);
    rc = read_as(bad1, &L, w.tp_group, &m, err, sizeof err);
    expect_same_failure(rc, TR_EXIT_DATA, err, "checksum mismatch in /model/proj/weight",
                        w.tp_group, "flipped byte, tp 2");
    layout_free(&L);

    /* a tensor only rank 3 holds, missing from the file: every rank says so */
    layout_tp4(&L, w.rank);
    if (w.rank == 3) {
        tr_ckpt_tensor *x = hold(&L, LN, 0, NULL, 0, 10, 0, 10, 0);
        snprintf(x->path, sizeof x->path, "/model/nope/bias");
        L.which[L.n - 1] = -1;
    }
    rc = read_as(f1, &L, w.world, &m, err, sizeof err);
    expect_same_failure(rc, TR_EXIT_DATA, err, "has no /model/nope/bias", w.world,
                        "missing tensor on one rank");
    layout_free(&L);

    /* own ranges that overlap: refused before any file is made */
    layout_tp4(&L, w.rank);
    L.t[LN].own_lo = 0, L.t[LN].own_hi = 10;
    fill(&L);
    tr_ckpt_meta wm = meta_for("");
    wm.step = 9;
    rc = tr_ckpt_write(dir, NULL, &wm, L.t, L.n, w.world, NULL, err, sizeof err);
    expect_same_failure(rc, TR_EXIT_SOFTWARE, err, "/model/ln/bias do not cover it exactly once",
                        w.world, "overlapping own ranges");
    layout_free(&L);
    char f9[512];
    snprintf(f9, sizeof f9, "%s/step_00000009.h5", dir);
    CHECK(access(f9, F_OK) != 0, "a refused write left %s", f9);

    tr_barrier(w.world);
    if (w.rank == 0) {
        const char *files[] = {f1, f3, bad1, bad2};
        for (int i = 0; i < 4; i++)
            unlink(files[i]);
        unlink(f2);
        char whole[512];
        snprintf(whole, sizeof whole, "%s/whole", dir);
        rmdir(whole);
        rmdir(dir);
    }
    /* one closing line for all ranks: the sums over them */
    int counts[2] = {tr_test_passed, tr_test_failed};
    tr_allreduce(counts, counts, 2, TR_I32, TR_SUM, w.world);
    tr_test_passed = counts[0], tr_test_failed = counts[1];
    int code = 0;
    if (w.rank == 0)
        code = tr_test_finish();
    tr_bcast(&code, 1, TR_I32, 0, w.world);
    tr_comm_finalize(&w);
    return code;
}
