/* corpus_reader.c: text and JSON-lines files as pieces (see corpus_reader.h).
 * zlib reads both plain and gzip-compressed files (gzread passes plain bytes
 * through). A piece is filled to piece_bytes, cut at the last safe place, and what
 * follows the cut is carried into the next piece. */
#include "text/corpus_reader.h"

#include "core/error.h"
#include "text/pretokenize.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

struct tr_corpus_reader {
    char *const *files;
    int nfiles, next_file, jsonl;
    size_t piece_bytes;
    gzFile gz;   /* the file being read, or NULL between files */
    int eof;     /* gz has no more bytes */
    long line;   /* jsonl: the line number of the carry's first line */
    char *carry; /* bytes read past the last cut */
    size_t carry_len, carry_cap;
    size_t bytes;
};

static int reserve(char **p, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 1 << 16;
    while (c < need)
        c *= 2;
    char *np = realloc(*p, c);
    if (!np)
        return -1;
    *p = np, *cap = c;
    return 0;
}

tr_corpus_reader *tr_corpus_reader_open(char *const *files, int nfiles, int jsonl,
                                        size_t piece_bytes)
{
    tr_corpus_reader *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->files = files, r->nfiles = nfiles, r->jsonl = jsonl;
    r->piece_bytes = piece_bytes ? piece_bytes : 1;
    return r;
}

/* zlib's error, without the "PATH: " that zlib puts before it (the caller's message
 * names the file once) */
static const char *gz_why(gzFile gz, const char *path, int *code)
{
    const char *why = gzerror(gz, code);
    size_t n = strlen(path);
    if (why && !strncmp(why, path, n) && !strncmp(why + n, ": ", 2))
        why += n + 2;
    return why;
}

/* Reads into piece until it holds want bytes or the file ends. */
static int fill(tr_corpus_reader *r, tr_corpus_piece *p, size_t want, char *err, size_t errlen)
{
    const char *path = r->files[r->next_file - 1];
    while (!r->eof && p->len < want) {
        /* grow by at most 64 MiB a read: want may be "all of it" */
        size_t ask = want - p->len < ((size_t)1 << 26) ? want - p->len : (size_t)1 << 26;
        if (reserve(&p->text, &p->cap, p->len + ask + 1)) {
            snprintf(err, errlen, "%s: out of memory for a piece of %zu bytes", path, p->len + ask);
            return TR_EXIT_OSERR;
        }
        int got = gzread(r->gz, p->text + p->len, (unsigned)ask);
        if (got < 0) {
            int code;
            const char *why = gz_why(r->gz, path, &code);
            snprintf(err, errlen, "%s: %s", path,
                     code == Z_ERRNO ? strerror(errno)
                     : why           ? why
                                     : "read failed");
            return code == Z_ERRNO ? TR_EXIT_NOINPUT : TR_EXIT_DATA;
        }
        if (got == 0) {
            int code;
            const char *why = gz_why(r->gz, path, &code);
            if (code != Z_OK && code != Z_BUF_ERROR) { /* Z_BUF_ERROR: a truncated .gz */
                snprintf(err, errlen, "%s: %s", path, why ? why : "read failed");
                return TR_EXIT_DATA;
            }
            if (code == Z_BUF_ERROR) {
                snprintf(err, errlen, "%s: the gzip stream ends early (truncated file?)", path);
                return TR_EXIT_DATA;
            }
            r->eof = 1;
        }
        p->len += (size_t)got;
        r->bytes += (size_t)got;
    }
    p->text[p->len] = '\0';
    return 0;
}

/* The last cut in p->text[from..len): after a newline (jsonl), or where the
 * pre-tokenizer allows (text); 0 when none. */
static size_t cut(const tr_corpus_reader *r, const tr_corpus_piece *p, size_t from)
{
    if (!r->jsonl)
        return tr_pretokenize_cut((const uint8_t *)p->text, p->len, from);
    const char *nl = p->len > from ? memrchr(p->text + from, '\n', p->len - from) : NULL;
    return nl ? (size_t)(nl - p->text) + 1 : 0;
}

static long count_lines(const char *s, size_t n)
{
    long lines = 0;
    for (const char *e = s + n; (s = memchr(s, '\n', (size_t)(e - s))); s++)
        lines++;
    return lines;
}

int tr_corpus_reader_next(tr_corpus_reader *r, tr_corpus_piece *p, char *err, size_t errlen)
{
    while (!r->gz) {
        if (r->next_file == r->nfiles)
            return -1;
        const char *path = r->files[r->next_file++];
        r->gz = gzopen(path, "rb");
        if (!r->gz) {
            snprintf(err, errlen, "%s: cannot open: %s", path,
                     errno ? strerror(errno) : "out of memory");
            return TR_EXIT_NOINPUT;
        }
        gzbuffer(r->gz, 1 << 20);
        r->eof = 0, r->line = 1, r->carry_len = 0;
    }
    p->file = r->files[r->next_file - 1];
    p->first_line = r->line;
    p->len = 0;
    if (reserve(&p->text, &p->cap, r->carry_len + 1)) {
        snprintf(err, errlen, "%s: out of memory", p->file);
        return TR_EXIT_OSERR;
    }
    if (r->carry_len)
        memcpy(p->text, r->carry, r->carry_len);
    p->len = r->carry_len;
    r->carry_len = 0;
    size_t want = r->piece_bytes, from = 0;
    for (;;) {
        int rc = fill(r, p, want, err, errlen);
        if (rc)
            return rc;
        size_t q = r->eof ? p->len : cut(r, p, from); /* at the end: all that is left */
        if (q || r->eof) {
            r->carry_len = p->len - q;
            if (reserve(&r->carry, &r->carry_cap, r->carry_len)) {
                snprintf(err, errlen, "%s: out of memory", p->file);
                return TR_EXIT_OSERR;
            }
            if (r->carry_len)
                memcpy(r->carry, p->text + q, r->carry_len);
            p->len = q;
            p->text[q] = '\0';
            p->doc_end = r->eof && r->carry_len == 0;
            if (r->jsonl)
                r->line += count_lines(p->text, p->len);
            if (p->doc_end) {
                gzclose(r->gz);
                r->gz = NULL;
            }
            return 0;
        }
        /* nowhere to cut yet: read on (a cut needs a few bytes either side) */
        from = p->len > 8 ? p->len - 8 : 0;
        want = p->len + r->piece_bytes;
    }
}

size_t tr_corpus_reader_bytes(const tr_corpus_reader *r) { return r->bytes; }

void tr_corpus_reader_close(tr_corpus_reader *r)
{
    if (!r)
        return;
    if (r->gz)
        gzclose(r->gz);
    free(r->carry);
    free(r);
}
