/* token_file.c: write, validate and window-read token files (see token_file.h). */
#include "text/token_file.h"

#include "core/error.h"

#include <errno.h>
#include <fcntl.h>
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

static int write_tokens(FILE *f, const uint32_t *ids, size_t n, uint32_t vocab_size, size_t width,
                        const char *path, char *err, size_t errlen)
{
    uint8_t buf[1 << 16];
    size_t used = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] >= vocab_size) {
            snprintf(err, errlen, "%s: token %zu is %u, not below vocab_size %u", path, i,
                     (unsigned)ids[i], (unsigned)vocab_size);
            return TR_EXIT_DATA;
        }
        for (size_t k = 0; k < width; k++)
            buf[used++] = (uint8_t)(ids[i] >> (8 * k));
        if (used + 4 > sizeof buf || i + 1 == n) {
            if (fwrite(buf, 1, used, f) != used) {
                snprintf(err, errlen, "%s: write failed: %s", path, strerror(errno));
                return TR_EXIT_IOERR;
            }
            used = 0;
        }
    }
    return 0;
}

int tr_token_file_write(const char *path, const uint32_t *ids, size_t n, uint32_t vocab_size,
                        char *err, size_t errlen)
{
    uint32_t dtype = vocab_size <= 65536 ? TR_TOKEN_U16 : TR_TOKEN_U32;
    uint8_t h[TR_TOKEN_HEADER_BYTES] = {0};
    memcpy(h, TR_TOKEN_MAGIC, 8);
    put32(h + 8, TR_TOKEN_VERSION);
    put32(h + 12, dtype);
    put64(h + 16, n);
    put32(h + 24, vocab_size);
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 5);
    if (!tmp) {
        snprintf(err, errlen, "%s: out of memory", path);
        return TR_EXIT_OSERR;
    }
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    FILE *f = fopen(tmp, "wb");
    int rc = 0;
    if (!f) {
        snprintf(err, errlen, "%s: cannot create: %s", tmp, strerror(errno));
        free(tmp);
        return TR_EXIT_IOERR;
    }
    if (fwrite(h, 1, sizeof h, f) != sizeof h) {
        snprintf(err, errlen, "%s: write failed: %s", path, strerror(errno));
        rc = TR_EXIT_IOERR;
    }
    if (rc == 0)
        rc = write_tokens(f, ids, n, vocab_size, dtype_width(dtype), path, err, errlen);
    if (fclose(f) != 0 && rc == 0) {
        snprintf(err, errlen, "%s: write failed: %s", path, strerror(errno));
        rc = TR_EXIT_IOERR;
    }
    if (rc == 0 && rename(tmp, path) != 0) {
        snprintf(err, errlen, "%s: cannot rename %s into place: %s", path, tmp, strerror(errno));
        rc = TR_EXIT_IOERR;
    }
    if (rc != 0)
        unlink(tmp);
    free(tmp);
    return rc;
}

static tr_token_file *bad(tr_token_file *f, int *code, int c)
{
    *code = c;
    tr_token_file_close(f);
    return NULL;
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
    if (fstat(f->fd, &st) != 0 || st.st_size < (off_t)sizeof h ||
        pread(f->fd, h, sizeof h, 0) != (ssize_t)sizeof h) {
        snprintf(err, errlen, "%s: too short for a token file header (%u bytes)", path,
                 TR_TOKEN_HEADER_BYTES);
        return bad(f, code, TR_EXIT_DATA);
    }
    if (memcmp(h, TR_TOKEN_MAGIC, 8) != 0) {
        snprintf(err, errlen, "%s: not a token file (no \"%s\" magic)", path, TR_TOKEN_MAGIC);
        return bad(f, code, TR_EXIT_DATA);
    }
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
    uint64_t body = (uint64_t)st.st_size - sizeof h, width = dtype_width(f->dtype);
    if (f->count > body / width || body != f->count * width) {
        snprintf(err, errlen,
                 "%s: header says %llu tokens (%llu bytes) but the file holds %llu bytes of "
                 "tokens; truncated or corrupt",
                 path, (unsigned long long)f->count, (unsigned long long)(f->count * width),
                 (unsigned long long)body);
        return bad(f, code, TR_EXIT_DATA);
    }
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
        off_t off = (off_t)(TR_TOKEN_HEADER_BYTES + (start + done) * width);
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
