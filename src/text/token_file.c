/* token_file.c: write (at once or as a stream), validate and window-read token files
 * (see token_file.h). */
#include "text/token_file.h"

#include "core/error.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct tr_token_file {
    int fd;
    char *path;
    uint32_t dtype, vocab_size;
    uint64_t count;
    uint32_t header_bytes; /* 32, or llm.c's 1024 */
};

/* llm.c's token files (dev/data/data_common.py): 256 little-endian int32 (magic,
 * version, token count, zeros), then the tokens. Their vocabulary is the one the
 * magic names. */
enum { LLMC_HEADER_BYTES = 1024 };
static const struct {
    uint32_t magic, version, dtype, vocab_size;
    const char *name;
} llmc_formats[] = {
    {20240520u, 1, TR_TOKEN_U16, 50257, "GPT-2"},
    {20240801u, 7, TR_TOKEN_U32, 128256, "LLaMA 3"},
};

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const uint8_t *p) { return get32(p) | (uint64_t)get32(p + 4) << 32; }

static size_t dtype_width(uint32_t dtype) { return dtype == TR_TOKEN_U16 ? 2 : 4; }

/* ---- writing, as a stream ------------------------------------------------ */

struct tr_token_writer {
    int fd;
    char *path, *tmp;
    uint32_t dtype, vocab_size;
    size_t width;
    uint64_t count; /* tokens appended, buffered ones included */
    uint8_t *buf;
    size_t used;
};

enum { WRITER_BUF = 1 << 20 };

static void pack_header(uint8_t h[TR_TOKEN_HEADER_BYTES], uint32_t dtype, uint64_t count,
                        uint32_t vocab_size)
{
    memset(h, 0, TR_TOKEN_HEADER_BYTES);
    memcpy(h, TR_TOKEN_MAGIC, 8);
    put32(h + 8, TR_TOKEN_VERSION);
    put32(h + 12, dtype);
    put64(h + 16, count);
    put32(h + 24, vocab_size);
}

static int write_all(int fd, const uint8_t *p, size_t n, off_t off, const char *path, char *err,
                     size_t errlen)
{
    while (n > 0) {
        ssize_t w = pwrite(fd, p, n, off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            snprintf(err, errlen, "%s: write failed: %s", path,
                     w < 0 ? strerror(errno) : "no progress");
            return TR_EXIT_IOERR;
        }
        p += w, n -= (size_t)w, off += w;
    }
    return 0;
}

static int writer_flush(tr_token_writer *w, char *err, size_t errlen)
{
    off_t off = (off_t)(TR_TOKEN_HEADER_BYTES + (w->count - w->used / w->width) * w->width);
    int rc = write_all(w->fd, w->buf, w->used, off, w->tmp, err, errlen);
    w->used = 0;
    return rc;
}

tr_token_writer *tr_token_writer_open(const char *path, uint32_t vocab_size, int *code, char *err,
                                      size_t errlen)
{
    tr_token_writer *w = calloc(1, sizeof *w);
    size_t plen = strlen(path);
    if (!w || !(w->path = strdup(path)) || !(w->tmp = malloc(plen + 5)) ||
        !(w->buf = malloc(WRITER_BUF))) {
        snprintf(err, errlen, "%s: out of memory", path);
        *code = TR_EXIT_OSERR;
        if (w)
            free(w->path), free(w->tmp), free(w);
        return NULL;
    }
    memcpy(w->tmp, path, plen);
    memcpy(w->tmp + plen, ".tmp", 5);
    w->vocab_size = vocab_size;
    w->dtype = vocab_size <= 65536 ? TR_TOKEN_U16 : TR_TOKEN_U32;
    w->width = dtype_width(w->dtype);
    w->fd = open(w->tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    uint8_t h[TR_TOKEN_HEADER_BYTES];
    pack_header(h, w->dtype, 0, vocab_size); /* the count comes at the close */
    if (w->fd < 0) {
        snprintf(err, errlen, "%s: cannot create: %s", w->tmp, strerror(errno));
        *code = TR_EXIT_IOERR;
    } else if ((*code = write_all(w->fd, h, sizeof h, 0, w->tmp, err, errlen)) == 0) {
        return w;
    }
    tr_token_writer_abort(w);
    return NULL;
}

int tr_token_writer_append(tr_token_writer *w, const uint32_t *ids, size_t n, char *err,
                           size_t errlen)
{
    for (size_t i = 0; i < n; i++) {
        if (ids[i] >= w->vocab_size) {
            snprintf(err, errlen, "%s: token %llu is %u, not below vocab_size %u", w->path,
                     (unsigned long long)w->count, (unsigned)ids[i], (unsigned)w->vocab_size);
            return TR_EXIT_DATA;
        }
        for (size_t k = 0; k < w->width; k++)
            w->buf[w->used++] = (uint8_t)(ids[i] >> (8 * k));
        w->count++;
        if (w->used + w->width > WRITER_BUF) {
            int rc = writer_flush(w, err, errlen);
            if (rc)
                return rc;
        }
    }
    return 0;
}

uint64_t tr_token_writer_count(const tr_token_writer *w) { return w->count; }

int tr_token_writer_split(tr_token_writer *w, uint64_t keep, const char *tail_path, char *err,
                          size_t errlen)
{
    int rc = writer_flush(w, err, errlen);
    if (rc)
        return rc;
    if (keep > w->count) {
        snprintf(err, errlen, "%s: cannot keep %llu of %llu tokens", w->path,
                 (unsigned long long)keep, (unsigned long long)w->count);
        return TR_EXIT_SOFTWARE;
    }
    tr_token_writer *tail = tr_token_writer_open(tail_path, w->vocab_size, &rc, err, errlen);
    if (!tail)
        return rc;
    uint32_t ids[1 << 14];
    uint8_t raw[sizeof ids];
    size_t per = sizeof ids / sizeof ids[0]; /* ids a read: raw holds them at any width */
    for (uint64_t at = keep; at < w->count && !rc;) {
        size_t n = w->count - at < per ? (size_t)(w->count - at) : per, want = n * w->width;
        off_t off = (off_t)(TR_TOKEN_HEADER_BYTES + at * w->width);
        ssize_t got = pread(w->fd, raw, want, off);
        if (got != (ssize_t)want) {
            snprintf(err, errlen, "%s: read back failed at byte %lld: %s", w->tmp, (long long)off,
                     got < 0 ? strerror(errno) : "short read");
            rc = TR_EXIT_IOERR;
            break;
        }
        for (size_t i = 0; i < n; i++)
            ids[i] = w->width == 2 ? (uint32_t)raw[2 * i] | (uint32_t)raw[2 * i + 1] << 8
                                   : get32(raw + 4 * i);
        rc = tr_token_writer_append(tail, ids, n, err, errlen);
        at += n;
    }
    if (rc) {
        tr_token_writer_abort(tail);
        return rc;
    }
    if ((rc = tr_token_writer_close(tail, err, errlen)))
        return rc;
    if (ftruncate(w->fd, (off_t)(TR_TOKEN_HEADER_BYTES + keep * w->width)) != 0) {
        snprintf(err, errlen, "%s: cannot truncate: %s", w->tmp, strerror(errno));
        return TR_EXIT_IOERR;
    }
    w->count = keep;
    return 0;
}

static void writer_free(tr_token_writer *w)
{
    if (w->fd >= 0)
        close(w->fd);
    free(w->buf);
    free(w->path);
    free(w->tmp);
    free(w);
}

int tr_token_writer_close(tr_token_writer *w, char *err, size_t errlen)
{
    uint8_t h[TR_TOKEN_HEADER_BYTES];
    pack_header(h, w->dtype, w->count, w->vocab_size);
    int rc = writer_flush(w, err, errlen);
    if (!rc)
        rc = write_all(w->fd, h, sizeof h, 0, w->tmp, err, errlen);
    if (!rc && close(w->fd) != 0) {
        snprintf(err, errlen, "%s: write failed: %s", w->tmp, strerror(errno));
        rc = TR_EXIT_IOERR;
    }
    w->fd = -1;
    if (!rc && rename(w->tmp, w->path) != 0) {
        snprintf(err, errlen, "%s: cannot rename %s into place: %s", w->path, w->tmp,
                 strerror(errno));
        rc = TR_EXIT_IOERR;
    }
    if (rc) {
        tr_token_writer_abort(w);
        return rc;
    }
    writer_free(w);
    return 0;
}

void tr_token_writer_abort(tr_token_writer *w)
{
    if (!w)
        return;
    unlink(w->tmp);
    writer_free(w);
}

int tr_token_file_write(const char *path, const uint32_t *ids, size_t n, uint32_t vocab_size,
                        char *err, size_t errlen)
{
    int rc;
    tr_token_writer *w = tr_token_writer_open(path, vocab_size, &rc, err, errlen);
    if (!w)
        return rc;
    if ((rc = tr_token_writer_append(w, ids, n, err, errlen))) {
        tr_token_writer_abort(w);
        return rc;
    }
    return tr_token_writer_close(w, err, errlen);
}

/* ---- reading ------------------------------------------------------------- */

static tr_token_file *bad(tr_token_file *f, int *code, int c)
{
    *code = c;
    tr_token_file_close(f);
    return NULL;
}

/* The body of header_bytes + count tokens fills the file exactly. */
static int size_matches(tr_token_file *f, uint64_t size, char *err, size_t errlen)
{
    uint64_t body = size - f->header_bytes, width = dtype_width(f->dtype);
    if (f->count > body / width || body != f->count * width) {
        char need[48] = ""; /* (a count past 2^64 bytes has no byte count to give) */
        if (f->count <= UINT64_MAX / width)
            snprintf(need, sizeof need, " (%llu bytes)", (unsigned long long)(f->count * width));
        snprintf(err, errlen,
                 "%s: header says %llu tokens%s but the file holds %llu bytes of tokens; "
                 "truncated or corrupt",
                 f->path, (unsigned long long)f->count, need, (unsigned long long)body);
        return 0;
    }
    return 1;
}

/* An llm.c token file, h its first 32 bytes. */
static tr_token_file *open_llmc(tr_token_file *f, const uint8_t *h, uint64_t size, int *code,
                                char *err, size_t errlen)
{
    uint32_t magic = get32(h), version = get32(h + 4), count = get32(h + 8);
    for (size_t i = 0; i < sizeof llmc_formats / sizeof llmc_formats[0]; i++) {
        if (magic != llmc_formats[i].magic)
            continue;
        if (version != llmc_formats[i].version) {
            snprintf(err, errlen, "%s: llm.c %s token file of version %u; version %u is read",
                     f->path, llmc_formats[i].name, (unsigned)version,
                     (unsigned)llmc_formats[i].version);
            return bad(f, code, TR_EXIT_DATA);
        }
        if (size < LLMC_HEADER_BYTES || count > INT32_MAX) {
            snprintf(err, errlen, "%s: llm.c token file with a %s header", f->path,
                     size < LLMC_HEADER_BYTES ? "truncated" : "negative token count in its");
            return bad(f, code, TR_EXIT_DATA);
        }
        f->header_bytes = LLMC_HEADER_BYTES;
        f->dtype = llmc_formats[i].dtype;
        f->vocab_size = llmc_formats[i].vocab_size;
        f->count = count;
        return size_matches(f, size, err, errlen) ? f : bad(f, code, TR_EXIT_DATA);
    }
    snprintf(err, errlen,
             "%s: not a token file (neither this project's \"%s\" magic nor llm.c's %u or %u)",
             f->path, TR_TOKEN_MAGIC, (unsigned)llmc_formats[0].magic,
             (unsigned)llmc_formats[1].magic);
    return bad(f, code, TR_EXIT_DATA);
}

tr_token_file *tr_token_file_open(const char *path, int *code, char *err, size_t errlen)
{
    tr_token_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        free(f);
        snprintf(err, errlen, "%s: out of memory", path);
        *code = TR_EXIT_OSERR;
        return NULL;
    }
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return bad(f, code, TR_EXIT_NOINPUT);
    }
    struct stat st;
    uint8_t h[TR_TOKEN_HEADER_BYTES];
    if (!fstat(f->fd, &st) && S_ISDIR(st.st_mode)) {
        snprintf(err, errlen,
                 "%s: is a directory; name a token file, or shards by a pattern "
                 "such as DIR/*.bin",
                 path);
        return bad(f, code, TR_EXIT_NOINPUT);
    }
    if (fstat(f->fd, &st) != 0 || st.st_size < (off_t)sizeof h ||
        pread(f->fd, h, sizeof h, 0) != (ssize_t)sizeof h) {
        snprintf(err, errlen, "%s: too short for a token file header (%u bytes)", path,
                 TR_TOKEN_HEADER_BYTES);
        return bad(f, code, TR_EXIT_DATA);
    }
    if (memcmp(h, TR_TOKEN_MAGIC, 8) != 0)
        return open_llmc(f, h, (uint64_t)st.st_size, code, err, errlen);
    f->header_bytes = TR_TOKEN_HEADER_BYTES;
    uint32_t version = get32(h + 8);
    f->dtype = get32(h + 12);
    f->count = get64(h + 16);
    f->vocab_size = get32(h + 24);
    if (version != TR_TOKEN_VERSION) {
        snprintf(err, errlen, "%s: token file version %u, this build reads version %u", path,
                 (unsigned)version, TR_TOKEN_VERSION);
        return bad(f, code, TR_EXIT_DATA);
    }
    if (f->dtype != TR_TOKEN_U16 && f->dtype != TR_TOKEN_U32) {
        snprintf(err, errlen, "%s: unknown dtype %u (1 = uint16, 2 = uint32)", path,
                 (unsigned)f->dtype);
        return bad(f, code, TR_EXIT_DATA);
    }
    if (!size_matches(f, (uint64_t)st.st_size, err, errlen))
        return bad(f, code, TR_EXIT_DATA);
    if (f->vocab_size == 0 || (f->dtype == TR_TOKEN_U16 && f->vocab_size > 65536)) {
        snprintf(err, errlen, "%s: vocab_size %u does not fit dtype %u", path,
                 (unsigned)f->vocab_size, (unsigned)f->dtype);
        return bad(f, code, TR_EXIT_DATA);
    }
    return f;
}

void tr_token_file_close(tr_token_file *f)
{
    if (!f)
        return;
    if (f->fd >= 0)
        close(f->fd);
    free(f->path);
    free(f);
}

uint64_t tr_token_file_count(const tr_token_file *f) { return f->count; }
uint32_t tr_token_file_vocab_size(const tr_token_file *f) { return f->vocab_size; }
uint32_t tr_token_file_dtype(const tr_token_file *f) { return f->dtype; }

int tr_token_file_read(tr_token_file *f, uint64_t start, size_t n, uint32_t *out, char *err,
                       size_t errlen)
{
    if (start > f->count || n > f->count - start) {
        snprintf(err, errlen, "%s: window [%llu, %llu) is outside the file's %llu tokens", f->path,
                 (unsigned long long)start, (unsigned long long)(start + n),
                 (unsigned long long)f->count);
        return TR_EXIT_USAGE;
    }
    size_t width = dtype_width(f->dtype);
    uint8_t buf[1 << 16];
    size_t done = 0;
    while (done < n) {
        size_t chunk = n - done < sizeof buf / width ? n - done : sizeof buf / width;
        size_t want = chunk * width, got = 0;
        off_t off = (off_t)(f->header_bytes + (start + done) * width);
        while (got < want) {
            ssize_t r = pread(f->fd, buf + got, want - got, off + (off_t)got);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0) {
                snprintf(err, errlen, "%s: read failed at byte %lld: %s", f->path,
                         (long long)(off + (off_t)got), r < 0 ? strerror(errno) : "end of file");
                return TR_EXIT_IOERR;
            }
            got += (size_t)r;
        }
        for (size_t i = 0; i < chunk; i++) {
            const uint8_t *p = buf + i * width;
            uint32_t v = width == 2 ? (uint32_t)p[0] | (uint32_t)p[1] << 8 : get32(p);
            if (v >= f->vocab_size) {
                snprintf(err, errlen, "%s: token %llu is %u, not below vocab_size %u", f->path,
                         (unsigned long long)(start + done + i), (unsigned)v,
                         (unsigned)f->vocab_size);
                return TR_EXIT_DATA;
            }
            out[done + i] = v;
        }
        done += chunk;
    }
    return 0;
}
