/* test_data.c: the data layer: the IDX reader on good and broken files it writes
 * itself (plain and gzipped), the distributed sampler's invariants, the
 * prefetching loader against the synchronous one, token shards (this project's
 * and llm.c's files under one glob pattern) and, where present, the real
 * MNIST-subset and Fashion-MNIST files. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */

#include "test_util.h"

#include "core/error.h"
#include "core/rng.h"
#include "data/idx.h"
#include "data/loader.h"
#include "data/sampler.h"
#include "data/token_set.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

static char g_dir[256];

static void path_in(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s/%s", g_dir, name);
}

/* Writes bytes to a file, through zlib when gz is set. */
static void write_file(const char *path, const void *data, size_t len, int gz)
{
    if (gz) {
        gzFile f = gzopen(path, "wb");
        if (!f || (len && gzwrite(f, data, (unsigned)len) != (int)len) || gzclose(f) != Z_OK) {
            fprintf(stderr, "cannot write %s\n", path);
            exit(2);
        }
        return;
    }
    FILE *f = fopen(path, "wb");
    if (!f || (len && fwrite(data, 1, len, f) != len) || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(2);
    }
}

static size_t put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
    return 4;
}

/* An IDX file image in memory: magic, dims, payload. Returns its length. */
static size_t make_idx(uint8_t *buf, uint32_t magic, const uint32_t *dims, int ndims,
                       const uint8_t *payload, size_t plen)
{
    size_t o = put_be32(buf, magic);
    for (int i = 0; i < ndims; i++)
        o += put_be32(buf + o, dims[i]);
    memcpy(buf + o, payload, plen);
    return o + plen;
}

enum { N = 5, H = 3, W = 4 };
static uint8_t g_pix[N * H * W], g_lab[N];
static uint8_t g_img_file[16 + N * H * W], g_lab_file[8 + N];
static size_t g_img_len, g_lab_len;

static void make_reference(void)
{
    for (int i = 0; i < N * H * W; i++)
        g_pix[i] = (uint8_t)(tr_rng_u64(7, 1, (uint64_t)i) & 0xff);
    for (int i = 0; i < N; i++)
        g_lab[i] = (uint8_t)((3 * i + 1) % 7);
    uint32_t idim[3] = {N, H, W}, ldim[1] = {N};
    g_img_len = make_idx(g_img_file, 0x00000803, idim, 3, g_pix, sizeof g_pix);
    g_lab_len = make_idx(g_lab_file, 0x00000801, ldim, 1, g_lab, sizeof g_lab);
}

static int load(tr_dataset *ds, const char *img, const char *lab, long limit, char *err)
{
    char ip[512], lp[512];
    path_in(ip, sizeof ip, img);
    path_in(lp, sizeof lp, lab);
    return tr_dataset_load_idx(ds, ip, lp, limit, err, 512);
}

static void check_good(const char *img, const char *lab, const char *what)
{
    tr_dataset ds;
    char err[512];
    int rc = load(&ds, img, lab, 0, err);
    CHECK(rc == 0, "%s: rc %d: %s", what, rc, err);
    if (rc)
        return;
    CHECK(ds.n == N && ds.c == 1 && ds.h == H && ds.w == W, "%s: shape %ld x %d x %d x %d", what,
          ds.n, ds.c, ds.h, ds.w);
    CHECK(memcmp(ds.images, g_pix, sizeof g_pix) == 0, "%s: pixels differ", what);
    int lab_ok = 1, maxl = 0;
    for (int i = 0; i < N; i++) {
        lab_ok &= ds.labels[i] == g_lab[i];
        maxl = g_lab[i] > maxl ? g_lab[i] : maxl;
    }
    CHECK(lab_ok, "%s: labels differ", what);
    CHECK(ds.max_label == maxl, "%s: max_label %d, expected %d", what, ds.max_label, maxl);
    tr_dataset_free(&ds);
}

/* Expects a failure code and a message containing each of the given words. */
static void check_bad(const char *img, const char *lab, long limit, int want_rc, const char *what,
                      const char *w1, const char *w2)
{
    tr_dataset ds;
    char err[512];
    int rc = load(&ds, img, lab, limit, err);
    CHECK(rc == want_rc, "%s: rc %d, expected %d (%s)", what, rc, want_rc, err);
    CHECK(ds.n == 0 && ds.images == NULL && ds.labels == NULL, "%s: dataset not left empty", what);
    CHECK(!w1 || strstr(err, w1), "%s: message lacks '%s': %s", what, w1, err);
    CHECK(!w2 || strstr(err, w2), "%s: message lacks '%s': %s", what, w2, err);
}

static void test_idx_good(void)
{
    char p[512];
    path_in(p, sizeof p, "img");
    write_file(p, g_img_file, g_img_len, 0);
    path_in(p, sizeof p, "lab");
    write_file(p, g_lab_file, g_lab_len, 0);
    path_in(p, sizeof p, "img.gz");
    write_file(p, g_img_file, g_img_len, 1);
    path_in(p, sizeof p, "lab.gz");
    write_file(p, g_lab_file, g_lab_len, 1);
    check_good("img", "lab", "plain");
    check_good("img.gz", "lab.gz", "gzipped");
    check_good("img.gz", "lab", "mixed");

    tr_dataset ds;
    char err[512];
    CHECK(load(&ds, "img.gz", "lab.gz", 2, err) == 0, "limit 2: %s", err);
    CHECK(ds.n == 2 && memcmp(ds.images, g_pix, 2 * H * W) == 0 && ds.labels[1] == g_lab[1],
          "limit 2: n %ld", ds.n);
    tr_dataset_free(&ds);
    CHECK(load(&ds, "img", "lab", 100, err) == 0 && ds.n == N, "limit above n: n %ld", ds.n);

    int64_t idx[3] = {4, 0, 2};
    float x[3 * H * W];
    int32_t y[3];
    tr_dataset_gather(&ds, idx, 3, x, y, 1);
    int ok = 1;
    for (int i = 0; i < 3; i++) {
        ok &= y[i] == g_lab[idx[i]];
        for (int j = 0; j < H * W; j++)
            ok &= x[i * H * W + j] == (float)g_pix[idx[i] * H * W + j] / 255.0f;
    }
    CHECK(ok, "gather: wrong values");
    CHECK(x[0] >= 0.0f && x[0] <= 1.0f, "gather: pixel out of [0,1]");
    tr_dataset_free(&ds);
    tr_dataset_free(&ds); /* twice is harmless */
}

static void test_idx_bad(void)
{
    char p[512], missing[512];
    uint8_t buf[256];
    uint32_t dims[3];

    path_in(missing, sizeof missing, "no_such_file");
    check_bad("no_such_file", "lab", 0, TR_EXIT_NOINPUT, "missing images", missing,
              strerror(ENOENT));
    check_bad("img", "no_such_file", 0, TR_EXIT_NOINPUT, "missing labels", missing, "cannot open");
    check_bad(".", "lab", 0, TR_EXIT_NOINPUT, "a directory", "cannot", NULL);

    path_in(p, sizeof p, "img_trunc"); /* one pixel short */
    write_file(p, g_img_file, g_img_len - 1, 0);
    check_bad("img_trunc", "lab", 0, TR_EXIT_DATA, "truncated pixels", "truncated", "img_trunc");
    check_bad("img_trunc", "lab", 0, TR_EXIT_DATA, "truncated pixels", "expected 60 bytes",
              "got 59");
    tr_dataset ds;
    char err[512];
    int rc = load(&ds, "img_trunc", "lab", 4, err); /* the cut lies past what is read */
    CHECK(rc == 0 && ds.n == 4, "truncated past the limit: rc %d: %s", rc, err);
    tr_dataset_free(&ds);
    path_in(p, sizeof p, "img_trunc.gz");
    write_file(p, g_img_file, g_img_len - 1, 1);
    check_bad("img_trunc.gz", "lab", 0, TR_EXIT_DATA, "truncated gz", "truncated", NULL);
    path_in(p, sizeof p, "img_hdr"); /* header cut in the dims */
    write_file(p, g_img_file, 9, 0);
    check_bad("img_hdr", "lab", 0, TR_EXIT_DATA, "truncated header", "16-byte header", "got 9");
    path_in(p, sizeof p, "empty");
    write_file(p, "", 0, 0);
    check_bad("empty", "lab", 0, TR_EXIT_DATA, "empty file", "truncated", "empty");

    /* A gzip file cut in the middle of its compressed stream. */
    path_in(p, sizeof p, "img.gz");
    FILE *f = fopen(p, "rb");
    size_t glen = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f)
        fclose(f);
    path_in(p, sizeof p, "img_cut.gz");
    write_file(p, buf, glen / 2, 0);
    check_bad("img_cut.gz", "lab", 0, TR_EXIT_DATA, "gzip cut", "img_cut.gz", NULL);

    check_bad("lab", "lab", 0, TR_EXIT_DATA, "labels as images", "not an IDX3 image file",
              "magic 0x00000801, expected 0x00000803");
    check_bad("img", "img", 0, TR_EXIT_DATA, "images as labels", "not an IDX1 label file",
              "expected 0x00000801");

    dims[0] = N, dims[1] = H, dims[2] = W;
    path_in(p, sizeof p, "img_float");
    write_file(p, buf, make_idx(buf, 0x00000D03, dims, 3, g_pix, sizeof g_pix), 0);
    check_bad("img_float", "lab", 0, TR_EXIT_DATA, "float dtype", "0x0D (float)", "not supported");

    path_in(p, sizeof p, "lab4"); /* 4 labels for 5 images */
    write_file(p, buf, make_idx(buf, 0x00000801, (uint32_t[]){4}, 1, g_lab, 4), 0);
    check_bad("img", "lab4", 0, TR_EXIT_DATA, "count mismatch", "5 images", "4 labels");

    path_in(p, sizeof p, "lab_trail"); /* one more byte than declared */
    write_file(p, buf, make_idx(buf, 0x00000801, (uint32_t[]){N}, 1, g_pix, N + 1), 0);
    check_bad("img", "lab_trail", 0, TR_EXIT_DATA, "trailing bytes", "trailing", "lab_trail");

    dims[1] = 0;
    path_in(p, sizeof p, "img_zero");
    write_file(p, buf, make_idx(buf, 0x00000803, dims, 3, g_pix, sizeof g_pix), 0);
    check_bad("img_zero", "lab", 0, TR_EXIT_DATA, "zero rows", "implausible", NULL);
    dims[1] = 100000;
    path_in(p, sizeof p, "img_huge");
    write_file(p, buf, make_idx(buf, 0x00000803, dims, 3, g_pix, sizeof g_pix), 0);
    check_bad("img_huge", "lab", 0, TR_EXIT_DATA, "huge rows", "implausible", NULL);

    /* A header claiming 4 billion images must fail on the count check or on
     * truncation, without trying to allocate terabytes. */
    dims[0] = 0xFFFFFFFFu, dims[1] = 28, dims[2] = 28;
    path_in(p, sizeof p, "img_many");
    write_file(p, buf, make_idx(buf, 0x00000803, dims, 3, g_pix, sizeof g_pix), 0);
    path_in(p, sizeof p, "lab_many");
    write_file(p, buf, make_idx(buf, 0x00000801, dims, 1, g_lab, N), 0);
    check_bad("img_many", "lab_many", 0, TR_EXIT_DATA, "lying count", "truncated", NULL);
}

/* Random single-byte corruptions of a valid pair must give 0 or TR_EXIT_DATA,
 * never a crash (run under the sanitizers). */
static void test_idx_fuzz(void)
{
    uint8_t img[sizeof g_img_file], lab[sizeof g_lab_file];
    char ip[512], lp[512], err[512];
    path_in(ip, sizeof ip, "fuzz_img");
    path_in(lp, sizeof lp, "fuzz_lab");
    int bad = 0;
    for (uint64_t t = 0; t < 400; t++) {
        memcpy(img, g_img_file, g_img_len);
        memcpy(lab, g_lab_file, g_lab_len);
        uint64_t r = tr_rng_u64(99, 3, t);
        uint8_t *target = (r & 1) ? img : lab;
        size_t len = (r & 1) ? g_img_len : g_lab_len;
        size_t span = t < 200 && len > 16 ? 16 : len; /* half the trials aim at the header */
        size_t pos = (size_t)((r >> 8) % span);
        target[pos] = (uint8_t)(r >> 40);
        size_t cut = (r >> 32) % 4 == 0 ? (size_t)((r >> 48) % len) : len;
        write_file(ip, img, (r & 1) ? cut : g_img_len, (int)(t & 2));
        write_file(lp, lab, (r & 1) ? g_lab_len : cut, (int)(t & 4));
        tr_dataset ds;
        int rc = tr_dataset_load_idx(&ds, ip, lp, (long)(t % 3), err, sizeof err);
        bad += rc != 0 && rc != TR_EXIT_DATA;
        if (rc == 0)
            tr_dataset_free(&ds);
    }
    CHECK(bad == 0, "fuzz: %d loads returned neither 0 nor TR_EXIT_DATA", bad);
}

static int is_permutation(const int64_t *p, long n)
{
    char *seen = calloc((size_t)n, 1);
    int ok = seen != NULL;
    for (long i = 0; ok && i < n; i++) {
        ok = p[i] >= 0 && p[i] < n && !seen[p[i]];
        if (ok)
            seen[p[i]] = 1;
    }
    free(seen);
    return ok;
}

static void test_permutation(void)
{
    enum { NP = 1000 };
    static int64_t a[NP], b[NP], c[NP], d[NP];
    tr_sampler_permutation(a, NP, 42, 0, 1);
    tr_sampler_permutation(b, NP, 42, 0, 1);
    tr_sampler_permutation(c, NP, 42, 1, 1);
    tr_sampler_permutation(d, NP, 43, 0, 1);
    CHECK(is_permutation(a, NP) && is_permutation(c, NP), "shuffle is not a permutation");
    CHECK(memcmp(a, b, sizeof a) == 0, "same seed and epoch differ");
    CHECK(memcmp(a, c, sizeof a) != 0, "epochs 0 and 1 are identical");
    CHECK(memcmp(a, d, sizeof a) != 0, "seeds 42 and 43 are identical");
    long fixed = 0;
    for (long i = 0; i < NP; i++)
        fixed += a[i] == i;
    CHECK(fixed < 10, "%ld fixed points: not shuffled", fixed);
    tr_sampler_permutation(a, NP, 42, 3, 0);
    int ident = 1;
    for (long i = 0; i < NP; i++)
        ident &= a[i] == i;
    CHECK(ident, "shuffle off is not the identity");

    /* The draws and swaps of the shuffle as they were when 8-byte entries were the
     * only ones (values from that code): a resumed run continues its epoch only if
     * the permutation never changes. */
    static const int64_t first[8] = {783, 582, 743, 214, 376, 470, 930, 742};
    tr_sampler_permutation(a, NP, 42, 0, 1);
    CHECK(memcmp(a, first, sizeof first) == 0, "epoch 0 of seed 42 begins %lld %lld %lld ...",
          (long long)a[0], (long long)a[1], (long long)a[2]);
    enum { NB = 100000 }; /* some blocks of draws (sampler.c) */
    int64_t *big = malloc(NB * sizeof *big);
    uint32_t *big32 = malloc(NB * sizeof *big32);
    CHECK(big && big32, "out of memory");
    if (!big || !big32)
        return;
    tr_sampler_permutation(big, NB, 7, 3, 1);
    uint64_t h = 1469598103934665603ULL; /* FNV-1a over the entries */
    for (long i = 0; i < NB; i++)
        h = (h ^ (uint64_t)big[i]) * 1099511628211ULL;
    CHECK(h == 0xf15253520959f0b7ULL, "the permutation of %d (seed 7, epoch 3) changed: %llx", NB,
          (unsigned long long)h);
    /* 4-byte entries: the same permutation, at sizes around a block of draws */
    static const long sizes[] = {1, 2, 3, 4095, 4096, 4097, 8193, NB};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++)
        for (int sh = 0; sh <= 1; sh++) {
            long n = sizes[k];
            tr_sampler_permutation(big, n, 11, 2, sh);
            tr_sampler_permutation32(big32, n, 11, 2, sh);
            long bad = 0;
            for (long i = 0; i < n; i++)
                bad += big32[i] != (uint64_t)big[i];
            CHECK(bad == 0, "n %ld, shuffle %d: %ld entries of 4 bytes differ from 8", n, sh, bad);
        }
    free(big);
    free(big32);
    /* the memory plan's figure: 4 bytes an entry while indices fit 32 bits */
    CHECK(tr_sampler_bytes(103, 1) == 103 * 4, "103 samples: %zu bytes", tr_sampler_bytes(103, 1));
    CHECK(tr_sampler_bytes(103, 0) == 0, "shuffle off holds a permutation");
    CHECK(tr_sampler_bytes(1L << 32, 1) == ((size_t)4 << 32), "2^32 samples not in 4 bytes");
    CHECK(tr_sampler_bytes((1L << 32) + 1, 1) == (((size_t)1 << 32) + 1) * 8,
          "2^32 + 1 samples: indices beyond 32 bits in 4 bytes");
}

static void test_sampler(void)
{
    enum { NS = 103, G = 8, STEPS = 3 * (NS / G) + 5 };
    static int64_t ref[STEPS][G], got[G], perm[NS];
    tr_sampler s1;
    tr_sampler_init(&s1, NS, G, 0, 1, 5, 1);
    long spe = tr_sampler_steps_per_epoch(&s1);
    CHECK(spe == NS / G, "steps per epoch %ld", spe);
    for (long st = 0; st < STEPS; st++)
        tr_sampler_batch(&s1, st, ref[st]);
    /* Each epoch's batches are disjoint slices of that epoch's permutation. */
    for (long e = 0; e < 3; e++) {
        tr_sampler_permutation(perm, NS, 5, e, 1);
        int ok = 1;
        for (long b = 0; b < spe; b++)
            ok &= memcmp(ref[e * spe + b], perm + b * G, sizeof got) == 0;
        CHECK(ok, "epoch %ld batches are not the permutation's blocks", e);
    }
    CHECK(memcmp(ref[0], ref[spe], sizeof got) != 0, "epoch 1 repeats epoch 0");
    /* Out of order and from a fresh sampler: the same answers. */
    tr_sampler_batch(&s1, 2, got);
    CHECK(memcmp(got, ref[2], sizeof got) == 0, "revisiting step 2 differs");
    tr_sampler_free(&s1);

    for (int dp = 1; dp <= 8; dp *= 2) {
        int ok = 1;
        for (int r = 0; r < dp; r++) {
            tr_sampler s;
            tr_sampler_init(&s, NS, G, r, dp, 5, 1);
            long start = r % 2 ? spe / 2 : 0; /* odd ranks start mid-epoch, like a resume */
            for (long st = start; st < STEPS; st++) {
                tr_sampler_batch(&s, st, got);
                ok &= memcmp(got, ref[st] + r * (G / dp), (size_t)(G / dp) * sizeof *got) == 0;
            }
            tr_sampler_free(&s);
        }
        CHECK(ok, "dp=%d: ranks' slices do not make up the dp=1 global batch", dp);
    }

    /* shuffle off: the identity's slices, without a table */
    tr_sampler s0;
    tr_sampler_init(&s0, NS, G, 1, 2, 5, 0);
    CHECK(s0.perm == NULL, "shuffle off allocates a permutation");
    int ident = 1;
    for (long st = 0; st < STEPS; st++) {
        tr_sampler_batch(&s0, st, got);
        for (long k = 0; k < G / 2; k++)
            ident &= got[k] == (st % spe) * G + G / 2 + k;
    }
    CHECK(ident, "shuffle off: rank 1 of 2 does not take the identity's second halves");
    tr_sampler_free(&s0);

    char err[256];
    CHECK(tr_sampler_check(NS, G, 4, err, sizeof err) == 0, "valid layout rejected: %s", err);
    CHECK(tr_sampler_check(NS, 6, 4, err, sizeof err) == TR_EXIT_USAGE && strstr(err, "multiple"),
          "batch 6 over 4 ranks accepted: %s", err);
    CHECK(tr_sampler_check(NS, 2, 4, err, sizeof err) == TR_EXIT_USAGE, "batch below dp accepted");
    CHECK(tr_sampler_check(NS, 104, 4, err, sizeof err) == TR_EXIT_USAGE && strstr(err, "larger"),
          "batch above n accepted: %s", err);
    CHECK(tr_sampler_check(0, 8, 1, err, sizeof err) == TR_EXIT_USAGE, "empty set accepted");
}

static void test_shard_range(void)
{
    long b, e;
    tr_shard_range(10, 0, 3, &b, &e);
    CHECK(b == 0 && e == 4, "10/3 rank 0: [%ld,%ld)", b, e);
    tr_shard_range(10, 1, 3, &b, &e);
    CHECK(b == 4 && e == 7, "10/3 rank 1: [%ld,%ld)", b, e);
    tr_shard_range(10, 2, 3, &b, &e);
    CHECK(b == 7 && e == 10, "10/3 rank 2: [%ld,%ld)", b, e);
    int ok = 1;
    for (long n = 0; n < 40; n++)
        for (int size = 1; size <= 9; size++) {
            long next = 0;
            for (int r = 0; r < size; r++) {
                tr_shard_range(n, r, size, &b, &e);
                long len = e - b;
                ok &= b == next && (len == n / size || len == n / size + 1) &&
                      (len == n / size + 1) == (r < n % size);
                next = e;
            }
            ok &= next == n;
        }
    CHECK(ok, "shards are not contiguous, balanced and complete");
}

/* A synthetic data set: sample i's pixels encode i, so a batch names its samples. */
static void make_synthetic(tr_dataset *ds, long n)
{
    ds->n = n, ds->c = 1, ds->h = 2, ds->w = 3;
    ds->images = tr_alloc((size_t)n * 6, "test images");
    ds->labels = tr_alloc((size_t)n * sizeof(int32_t), "test labels");
    for (long i = 0; i < n; i++) {
        for (int j = 0; j < 6; j++)
            ds->images[i * 6 + j] = (uint8_t)((i * 7 + j * 31) & 0xff);
        ds->labels[i] = (int32_t)(i % 10);
    }
    ds->max_label = 9;
}

/* Runs both loaders over the given steps and compares every batch bit for bit,
 * and against the sampler + gather computed directly. */
static int compare_loaders(const tr_dataset *ds, long gb, int rank, int dp, const long *steps,
                           int nsteps)
{
    tr_loader *on = tr_loader_create(ds, gb, rank, dp, 11, 1, 1);
    tr_loader *off = tr_loader_create(ds, gb, rank, dp, 11, 1, 0);
    long lb = tr_loader_local_batch(on);
    size_t xbytes = (size_t)lb * 6 * sizeof(float);
    float *xr = malloc(xbytes);
    int32_t *yr = malloc((size_t)lb * sizeof *yr);
    int64_t *idx = malloc((size_t)lb * sizeof *idx);
    tr_sampler s;
    tr_sampler_init(&s, ds->n, gb, rank, dp, 11, 1);
    int ok = tr_loader_steps_per_epoch(on) == ds->n / gb;
    for (int k = 0; k < nsteps; k++) {
        const float *x1, *x2;
        const int32_t *y1, *y2;
        tr_loader_next(on, steps[k], &x1, &y1);
        tr_loader_next(off, steps[k], &x2, &y2);
        tr_sampler_batch(&s, steps[k], idx);
        tr_dataset_gather(ds, idx, (int)lb, xr, yr, 0); /* serial: the reference */
        ok &= memcmp(x1, x2, xbytes) == 0 && memcmp(y1, y2, (size_t)lb * sizeof *y1) == 0;
        ok &= memcmp(x1, xr, xbytes) == 0 && memcmp(y1, yr, (size_t)lb * sizeof *y1) == 0;
        if (k % 5 == 3)
            /* Sometimes let the worker finish first, sometimes not. */
            nanosleep(&(struct timespec){0, 200000}, NULL);
    }
    tr_sampler_free(&s);
    free(idx);
    free(yr);
    free(xr);
    tr_loader_destroy(on);
    tr_loader_destroy(off);
    return ok;
}

static void test_loader(void)
{
    tr_dataset ds;
    make_synthetic(&ds, 50);
    long spe = 50 / 8;
    long steps[64];
    int n = 0;
    for (long s = 0; s < 2 * spe; s++)
        steps[n++] = s;
    CHECK(compare_loaders(&ds, 8, 1, 2, steps, n), "from step 0: prefetch on and off differ");
    n = 0;
    for (long s = spe / 2; s < spe / 2 + 2 * spe; s++)
        steps[n++] = s;
    CHECK(compare_loaders(&ds, 8, 3, 4, steps, n), "from mid-epoch: prefetch on and off differ");
    long jumps[] = {4, 9, 5, 5, 6, 30, 31, 0};
    CHECK(compare_loaders(&ds, 8, 0, 1, jumps, 8), "out of order: prefetch on and off differ");
    tr_loader *L = tr_loader_create(&ds, 8, 0, 1, 11, 1, 1);
    tr_loader_destroy(L); /* never asked for a batch: must still join cleanly */
    tr_loader_destroy(NULL);
    tr_dataset_free(&ds);
}

static void check_real(const char *dir, const char *prefix, const char *suffix, long want_n,
                       const char *name)
{
    char ip[1024], lp[1024], err[512];
    snprintf(ip, sizeof ip, "%s/%s-images-idx3-ubyte%s", dir, prefix, suffix);
    snprintf(lp, sizeof lp, "%s/%s-labels-idx1-ubyte%s", dir, prefix, suffix);
    if (access(ip, R_OK) != 0 || access(lp, R_OK) != 0) {
        printf("%s %s: skipped (%s not present)\n", name, prefix, ip);
        return;
    }
    tr_dataset ds;
    int rc = tr_dataset_load_idx(&ds, ip, lp, 0, err, sizeof err);
    CHECK(rc == 0, "%s: %s", name, err);
    if (rc)
        return;
    long count[10] = {0}, bad = 0;
    for (long i = 0; i < ds.n; i++) {
        if (ds.labels[i] < 0 || ds.labels[i] > 9)
            bad++;
        else
            count[ds.labels[i]]++;
    }
    CHECK(ds.n == want_n && ds.c == 1 && ds.h == 28 && ds.w == 28, "%s %s: %ld x %dx%d", name,
          prefix, ds.n, ds.h, ds.w);
    CHECK(bad == 0 && ds.max_label == 9, "%s %s: %ld labels outside 0..9", name, prefix, bad);
    int every = 1;
    for (int k = 0; k < 10; k++)
        every &= count[k] > 0;
    CHECK(every, "%s %s: a class is missing", name, prefix);
    printf("%s %s: %ld samples, 28x28, per class:", name, prefix, ds.n);
    for (int k = 0; k < 10; k++)
        printf(" %ld", count[k]);
    printf("\n");
    tr_dataset_free(&ds);
}

static void test_real_files(void)
{
    const char *src = getenv("TRAINER_SOURCE_DIR");
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/data/mnist", src ? src : ".");
    check_real(dir, "train", "", 8000, "mnist subset");
    check_real(dir, "t10k", "", 2000, "mnist subset");
    const char *fm = "/usr/share/datasets/fashion-mnist";
    check_real(fm, "train", ".gz", 60000, "fashion-mnist");
    check_real(fm, "t10k", ".gz", 10000, "fashion-mnist");
}

/* Removes what the tests wrote (flat directory). */
static void remove_dir(void)
{
    static const char *names[] = {
        "img",       "lab",         "img.gz",      "lab.gz",     "img_trunc", "img_trunc.gz",
        "img_hdr",   "empty",       "img_cut.gz",  "img_float",  "lab4",      "lab_trail",
        "img_zero",  "img_huge",    "img_many",    "lab_many",   "fuzz_img",  "fuzz_lab",
        "whole.tok", "shard_0.bin", "shard_1.tok", "shard_2.bin"};
    char p[512];
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        path_in(p, sizeof p, names[i]);
        remove(p);
    }
    rmdir(g_dir);
}

/* An llm.c token file (dev/data/data_common.py): 256 int32 of header, then the
 * tokens as uint16 (magic 20240520, version 1) or uint32 (20240801, version 7);
 * count_delta falsifies the header's count. */
static void write_llmc(const char *path, uint32_t magic, uint32_t version, const uint32_t *ids,
                       uint32_t n, int count_delta)
{
    int32_t h[256] = {0};
    h[0] = (int32_t)magic, h[1] = (int32_t)version, h[2] = (int32_t)n + count_delta;
    FILE *f = fopen(path, "wb");
    fwrite(h, sizeof h, 1, f); /* the host is little-endian, as llm.c's numpy writes */
    for (uint32_t i = 0; i < n; i++) {
        uint16_t v16 = (uint16_t)ids[i];
        if (version == 1)
            fwrite(&v16, 2, 1, f);
        else
            fwrite(&ids[i], 4, 1, f);
    }
    fclose(f);
}

/* Shards of one stream that overlap by one token, so their windows are the
 * stream's own: a set of them reads as the single file does. */
static void test_token_set(void)
{
    enum { T = 8, NTOK = 8 * 40 + 1 };
    uint32_t ids[NTOK], win[T + 1], got[T + 1];
    for (uint32_t i = 0; i < NTOK; i++)
        ids[i] = (i * 7919u) % 50257u;
    char whole[600], a[600], b[600], c[600], pat[600], err[1024];
    path_in(whole, sizeof whole, "whole.tok");
    path_in(a, sizeof a, "shard_0.bin");
    path_in(b, sizeof b, "shard_1.tok");
    path_in(c, sizeof c, "shard_2.bin");
    path_in(pat, sizeof pat, "shard_*");
    CHECK(tr_token_file_write(whole, ids, NTOK, 50257, err, sizeof err) == 0, "%s", err);
    /* windows [0, 13), [13, 30), [30, 40) */
    write_llmc(a, 20240520u, 1, ids, 13 * T + 1, 0);
    CHECK(tr_token_file_write(b, ids + 13 * T, 17 * T + 1, 50257, err, sizeof err) == 0, "%s", err);
    write_llmc(c, 20240520u, 1, ids + 30 * T, 10 * T + 1, 0);
    tr_token_set one, set;
    CHECK(tr_token_set_open(&one, whole, "training", T, 128256, err, sizeof err) == 0, "%s", err);
    int rc = tr_token_set_open(&set, pat, "training", T, 128256, err, sizeof err);
    CHECK(rc == 0 && set.n == 3 && set.first[3] == 40 && one.first[1] == 40 && set.first[1] == 13 &&
              set.first[2] == 30 && set.vocab_size == 50257,
          "three shards of 40 windows: rc %d %s", rc, err);
    if (rc == 0) {
        int same = 1;
        for (long w = 0; w < 40; w++) {
            tr_token_set_read(&one, w, T, 0, T + 1, win);
            tr_token_set_read(&set, w, T, 0, T + 1, got);
            same &= !memcmp(win, got, sizeof win) && !memcmp(win, ids + w * T, sizeof win);
        }
        CHECK(same, "every window of the set is the single file's");
        tr_token_set_read(&set, 29, T, 3, 4, got);
        CHECK(!memcmp(got, ids + 29 * T + 3, 4 * sizeof *got), "part of a window");
        tr_token_set_close(&set);
    }
    /* llm.c's uint32 form (LLaMA 3's vocabulary) reads the same windows */
    char d[600];
    path_in(d, sizeof d, "llama3.bin");
    write_llmc(d, 20240801u, 7, ids, NTOK, 0);
    rc = tr_token_set_open(&set, d, "training", T, 128256, err, sizeof err);
    CHECK(rc == 0 && set.first[1] == 40 && set.vocab_size == 128256, "uint32 file: rc %d %s", rc,
          err);
    if (rc == 0) {
        int same = 1;
        for (long w = 0; w < 40; w++) {
            tr_token_set_read(&one, w, T, 0, T + 1, win);
            tr_token_set_read(&set, w, T, 0, T + 1, got);
            same &= !memcmp(win, got, sizeof win);
        }
        CHECK(same, "every window of the uint32 file is the uint16 file's");
        tr_token_set_close(&set);
    }
    tr_token_set_close(&one);

    /* refusals name the file or the pattern */
    path_in(pat, sizeof pat, "none_*.bin");
    rc = tr_token_set_open(&set, pat, "training", T, 128256, err, sizeof err);
    CHECK(rc == TR_EXIT_NOINPUT && strstr(err, "no file matches the pattern") && strstr(err, pat),
          "no match: %d %s", rc, err);
    path_in(pat, sizeof pat, "shard_*");
    write_llmc(c, 20240801u, 7, ids + 30 * T, 10 * T + 1, 0); /* LLaMA 3's among GPT-2's */
    rc = tr_token_set_open(&set, pat, "training", T, 50304, err, sizeof err);
    CHECK(rc == TR_EXIT_USAGE && strstr(err, c) && strstr(err, "vocabulary of 128256"),
          "a LLaMA 3 shard for a GPT-2 vocabulary: %d %s", rc, err);
    rc = tr_token_set_open(&set, pat, "training", T, 128256, err, sizeof err);
    CHECK(rc == TR_EXIT_USAGE && strstr(err, c) && strstr(err, a) &&
              strstr(err, "must come from the same tokenizer"),
          "shards of two tokenizers: %d %s", rc, err);
    write_llmc(c, 20240520u, 2, ids, 9, 0);
    rc = tr_token_set_open(&set, pat, "training", T, 128256, err, sizeof err);
    CHECK(rc == TR_EXIT_DATA && strstr(err, c) && strstr(err, "version 2"), "version: %d %s", rc,
          err);
    write_llmc(c, 20240520u, 1, ids, 9, 5);
    rc = tr_token_set_open(&set, pat, "training", T, 128256, err, sizeof err);
    CHECK(rc == TR_EXIT_DATA && strstr(err, c) && strstr(err, "header says 14 tokens"),
          "count against size: %d %s", rc, err);
    write_llmc(c, 20240521u, 1, ids, 9, 0);
    rc = tr_token_set_open(&set, pat, "training", T, 128256, err, sizeof err);
    CHECK(rc == TR_EXIT_DATA && strstr(err, "not a token file"), "magic: %d %s", rc, err);
    write_llmc(c, 20240520u, 1, ids, 3, 0); /* no window of its own: allowed */
    rc = tr_token_set_open(&set, pat, "training", T, 128256, err, sizeof err);
    CHECK(rc == 0 && set.first[3] == 30, "a shard without a window adds none: %d %s", rc, err);
    if (rc == 0)
        tr_token_set_close(&set);
}

int main(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/tr_test_data_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 2;
    }
    make_reference();
    test_idx_good();
    test_idx_bad();
    test_idx_fuzz();
    test_permutation();
    test_sampler();
    test_shard_range();
    test_loader();
    test_token_set();
    test_real_files();
    remove_dir();
    return tr_test_finish();
}
