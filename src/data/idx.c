/* idx.c: reads IDX3 image and IDX1 label files (plain or gzipped) into a tr_dataset,
 * and gathers batches from it.
 *
 * Input files come from users, so every field is checked and every failure is
 * returned as a code plus one line naming the file; nothing here prints or
 * aborts on bad input (the caller decides, once, for all ranks). Buffers grow as
 * bytes actually arrive rather than being sized from the header, so a corrupt
 * header that claims billions of images costs an error message, not an
 * out-of-memory abort. */
#include "idx.h"

#include "core/error.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

enum {
    IDX_DTYPE_UBYTE = 0x08,
    IDX_MAGIC_IMAGES = 0x00000803, /* ubyte, 3 dims */
    IDX_MAGIC_LABELS = 0x00000801, /* ubyte, 1 dim */
    IDX_MAX_SIDE = 4096,           /* larger images are a corrupt header, not a data set */
    IDX_READ_CHUNK = 1 << 24,      /* gzread takes an unsigned int; read in bounded pieces */
};

__attribute__((format(printf, 3, 4))) static void set_err(char *err, size_t errlen,
                                                          const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static const char *dtype_name(int dtype)
{
    switch (dtype) {
    case 0x08: return "unsigned byte";
    case 0x09: return "signed byte";
    case 0x0B: return "short";
    case 0x0C: return "int";
    case 0x0D: return "float";
    case 0x0E: return "double";
    default: return "unknown";
    }
}

static int open_idx(gzFile *gz, const char *path, char *err, size_t errlen)
{
    errno = 0;
    *gz = gzopen(path, "rb");
    if (!*gz) {
        set_err(err, errlen, "cannot open '%s': %s", path,
                errno ? strerror(errno) : "out of memory in zlib");
        return TR_EXIT_NOINPUT;
    }
    gzbuffer(*gz, 1u << 17); /* the default 8 KiB makes a 47 MB file cost thousands of reads */
    return 0;
}

/* Reads up to len bytes; *got says how many arrived (fewer at end of file or of a
 * truncated gzip stream). Fails only on an I/O error or corrupt compressed data. */
static int read_some(gzFile gz, const char *path, void *buf, size_t len, size_t *got, char *err,
                     size_t errlen)
{
    unsigned char *p = buf;
    *got = 0;
    while (*got < len) {
        size_t want = len - *got;
        unsigned n = (unsigned)(want < IDX_READ_CHUNK ? want : IDX_READ_CHUNK);
        int r = gzread(gz, p + *got, n);
        if (r < 0) {
            int zerr;
            const char *msg = gzerror(gz, &zerr);
            if (zerr == Z_ERRNO) {
                set_err(err, errlen, "cannot read '%s': %s", path, strerror(errno));
                return TR_EXIT_NOINPUT;
            }
            set_err(err, errlen, "'%s': corrupt gzip data (%s)", path, msg);
            return TR_EXIT_DATA;
        }
        if (r == 0)
            break;
        *got += (size_t)r;
    }
    return 0;
}

/* Reads and checks the magic and the dimensions. */
static int read_header(gzFile gz, const char *path, unsigned expect_magic, int ndims,
                       const char *kind, uint32_t *dims, char *err, size_t errlen)
{
    unsigned char hdr[4 + 4 * 3];
    size_t need = 4 + 4 * (size_t)ndims, got;
    int rc = read_some(gz, path, hdr, 4, &got, err, errlen);
    if (rc)
        return rc;
    if (got < 4) {
        set_err(err, errlen, "'%s': truncated: expected a 4-byte IDX magic number, got %zu bytes",
                path, got);
        return TR_EXIT_DATA;
    }
    unsigned magic =
        (unsigned)hdr[0] << 24 | (unsigned)hdr[1] << 16 | (unsigned)hdr[2] << 8 | hdr[3];
    if (hdr[0] == 0 && hdr[1] == 0 && hdr[3] == ndims && hdr[2] != IDX_DTYPE_UBYTE) {
        set_err(err, errlen,
                "'%s': IDX data type 0x%02X (%s) is not supported; expected 0x08 (unsigned byte)",
                path, hdr[2], dtype_name(hdr[2]));
        return TR_EXIT_DATA;
    }
    if (magic != expect_magic) {
        set_err(err, errlen, "'%s': not an %s file (magic 0x%08X, expected 0x%08X)", path, kind,
                magic, expect_magic);
        return TR_EXIT_DATA;
    }
    rc = read_some(gz, path, hdr + 4, need - 4, &got, err, errlen);
    if (rc)
        return rc;
    if (got < need - 4) {
        set_err(err, errlen, "'%s': truncated: expected a %zu-byte header, got %zu bytes", path,
                need, 4 + got);
        return TR_EXIT_DATA;
    }
    for (int i = 0; i < ndims; i++) {
        const unsigned char *b = hdr + 4 + 4 * i;
        dims[i] = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
    }
    return 0;
}

/* Reads exactly `need` bytes into a buffer that grows as data arrives. */
static int read_body(gzFile gz, const char *path, size_t need, const char *what, uint8_t **out,
                     char *err, size_t errlen)
{
    size_t cap = need < ((size_t)1 << 20) ? need : (size_t)1 << 20, have = 0;
    uint8_t *buf = NULL;
    for (;;) {
        uint8_t *nb = realloc(buf, cap ? cap : 1);
        if (!nb) {
            free(buf);
            tr_fatal(TR_EXIT_OSERR, "out of memory reading %zu bytes of %s from '%s'", need, what,
                     path);
        }
        buf = nb;
        size_t got;
        int rc = read_some(gz, path, buf + have, cap - have, &got, err, errlen);
        if (rc) {
            free(buf);
            return rc;
        }
        have += got;
        if (have < cap) {
            set_err(err, errlen,
                    "'%s': truncated: expected %zu bytes of %s after the header, got %zu", path,
                    need, what, have);
            free(buf);
            return TR_EXIT_DATA;
        }
        if (have == need)
            break;
        cap = cap > need / 2 ? need : cap * 2;
    }
    *out = buf;
    return 0;
}

/* After reading every declared item, anything left means the header lies. */
static int check_end(gzFile gz, const char *path, uint32_t count, const char *what, char *err,
                     size_t errlen)
{
    unsigned char extra;
    size_t got;
    int rc = read_some(gz, path, &extra, 1, &got, err, errlen);
    if (rc)
        return rc;
    if (got) {
        set_err(err, errlen, "'%s': trailing bytes after the %u %s the header declares", path,
                (unsigned)count, what);
        return TR_EXIT_DATA;
    }
    return 0;
}

static int load_labels(tr_dataset *ds, gzFile gz, const char *path, uint32_t n, long keep,
                       char *err, size_t errlen)
{
    uint8_t *raw = NULL;
    int rc = read_body(gz, path, (size_t)keep, "labels", &raw, err, errlen);
    if (!rc && keep == (long)n)
        rc = check_end(gz, path, n, "labels", err, errlen);
    if (rc) {
        free(raw);
        return rc;
    }
    ds->labels = tr_alloc((size_t)keep * sizeof(int32_t), "labels");
    ds->max_label = 0;
    for (long i = 0; i < keep; i++) {
        ds->labels[i] = raw[i];
        if (raw[i] > ds->max_label)
            ds->max_label = raw[i];
    }
    free(raw);
    return 0;
}

static int load_both(tr_dataset *ds, gzFile gi, gzFile gl, const char *images_path,
                     const char *labels_path, long limit, char *err, size_t errlen)
{
    uint32_t idim[3], ldim[1];
    int rc = read_header(gi, images_path, IDX_MAGIC_IMAGES, 3, "IDX3 image", idim, err, errlen);
    if (!rc)
        rc = read_header(gl, labels_path, IDX_MAGIC_LABELS, 1, "IDX1 label", ldim, err, errlen);
    if (rc)
        return rc;
    if (idim[0] == 0 || idim[1] == 0 || idim[2] == 0 || idim[1] > IDX_MAX_SIDE ||
        idim[2] > IDX_MAX_SIDE) {
        set_err(err, errlen, "'%s': implausible image dimensions %u x %u x %u (need n >= 1 and "
                "1..%d pixels a side)", images_path, (unsigned)idim[0], (unsigned)idim[1],
                (unsigned)idim[2], IDX_MAX_SIDE);
        return TR_EXIT_DATA;
    }
    if (idim[0] != ldim[0]) {
        set_err(err, errlen, "'%s' has %u images but '%s' has %u labels", images_path,
                (unsigned)idim[0], labels_path, (unsigned)ldim[0]);
        return TR_EXIT_DATA;
    }
    long keep = (limit > 0 && limit < (long)idim[0]) ? limit : (long)idim[0];
    rc = load_labels(ds, gl, labels_path, ldim[0], keep, err, errlen);
    if (rc)
        return rc;
    size_t pixels = (size_t)idim[1] * idim[2];
    rc = read_body(gi, images_path, (size_t)keep * pixels, "pixel data", &ds->images, err, errlen);
    if (!rc && keep == (long)idim[0])
        rc = check_end(gi, images_path, idim[0], "images", err, errlen);
    if (rc)
        return rc;
    ds->n = keep;
    ds->c = 1;
    ds->h = (int)idim[1];
    ds->w = (int)idim[2];
    return 0;
}

int tr_dataset_load_idx(tr_dataset *ds, const char *images_path, const char *labels_path,
                        long limit, char *err, size_t errlen)
{
    memset(ds, 0, sizeof *ds);
    set_err(err, errlen, "%s", "");
    gzFile gi = NULL, gl = NULL;
    int rc = open_idx(&gi, images_path, err, errlen);
    if (!rc)
        rc = open_idx(&gl, labels_path, err, errlen);
    if (!rc)
        rc = load_both(ds, gi, gl, images_path, labels_path, limit, err, errlen);
    if (gi)
        gzclose_r(gi);
    if (gl)
        gzclose_r(gl);
    if (rc)
        tr_dataset_free(ds);
    return rc;
}

#define FNV_PRIME 0x100000001b3ULL

uint64_t tr_dataset_digest_labels(const tr_dataset *ds, uint64_t h)
{
    for (long i = 0; i < ds->n; i++)
        h = (h ^ (uint64_t)(uint32_t)ds->labels[i]) * FNV_PRIME;
    return h;
}

uint64_t tr_dataset_digest_images(const tr_dataset *ds, uint64_t h)
{
    size_t bytes = (size_t)ds->n * (size_t)ds->c * (size_t)ds->h * (size_t)ds->w, i = 0;
    for (; i + 8 <= bytes; i += 8) {
        uint64_t word = 0;
        for (int k = 7; k >= 0; k--) /* little-endian whatever the host */
            word = word << 8 | ds->images[i + (size_t)k];
        h = (h ^ word) * FNV_PRIME;
    }
    for (; i < bytes; i++)
        h = (h ^ ds->images[i]) * FNV_PRIME;
    return h;
}

void tr_dataset_free(tr_dataset *ds)
{
    free(ds->images); /* grown with realloc in read_body */
    tr_free(ds->labels);
    memset(ds, 0, sizeof *ds);
}

void tr_dataset_gather(const tr_dataset *ds, const int64_t *indices, int count, float *x,
                       int32_t *y, int team)
{
    size_t dim = (size_t)ds->c * ds->h * ds->w;
    for (int i = 0; i < count; i++) /* first, on this thread: a fatal error calls MPI */
        if (indices[i] < 0 || indices[i] >= ds->n)
            tr_fatal(TR_EXIT_SOFTWARE, "sample index %lld outside the data set [0, %ld)",
                     (long long)indices[i], ds->n);
#pragma omp parallel for schedule(static) if (team && (size_t)count * dim >= ((size_t)1 << 15))
    for (int i = 0; i < count; i++) {
        int64_t k = indices[i];
        const uint8_t *src = ds->images + (size_t)k * dim;
        float *dst = x + (size_t)i * dim;
        for (size_t j = 0; j < dim; j++)
            dst[j] = (float)src[j] / 255.0f;
        y[i] = ds->labels[k];
    }
}
