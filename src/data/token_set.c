/* token_set.c: token files as one sequence of windows (see token_set.h). */
#include "token_set.h"

#include "core/error.h"

#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The spec's files: itself (g->gl_pathc = 0), or a glob pattern's matches in name
 * order. */
static int expand(const char *spec, glob_t *g, char *err, size_t errlen)
{
    g->gl_pathc = 0;
    if (!strpbrk(spec, "*?["))
        return 0;
    int rc = glob(spec, GLOB_ERR, NULL, g);
    if (rc == GLOB_NOMATCH) {
        snprintf(err, errlen, "no file matches the pattern '%s'", spec);
        return TR_EXIT_NOINPUT;
    }
    if (rc) {
        snprintf(err, errlen, "cannot expand the pattern '%s' (%s)", spec,
                 rc == GLOB_NOSPACE ? "out of memory" : "a directory could not be read");
        return rc == GLOB_NOSPACE ? TR_EXIT_OSERR : TR_EXIT_NOINPUT;
    }
    return 0;
}

int tr_token_set_open(tr_token_set *s, const char *spec, const char *what, int T, int V, char *err,
                      size_t errlen)
{
    memset(s, 0, sizeof *s);
    if (!*spec) {
        snprintf(err, errlen, "the %s token file is not set", what);
        return TR_EXIT_USAGE;
    }
    glob_t g;
    int rc = expand(spec, &g, err, errlen);
    if (rc)
        return rc;
    int n = g.gl_pathc ? (int)g.gl_pathc : 1;
    s->n = n;
    s->files = tr_alloc((size_t)n * sizeof *s->files, "token files");
    s->paths = tr_alloc((size_t)n * sizeof *s->paths, "token files");
    s->first = tr_alloc((size_t)(n + 1) * sizeof *s->first, "token files");
    memset(s->files, 0, (size_t)n * sizeof *s->files);
    memset(s->paths, 0, (size_t)n * sizeof *s->paths);
    s->first[0] = 0;
    for (int i = 0; i < n && !rc; i++) {
        const char *path = g.gl_pathc ? g.gl_pathv[i] : spec;
        if (!(s->paths[i] = strdup(path)))
            tr_fatal(TR_EXIT_OSERR, "out of memory");
        if (!(s->files[i] = tr_token_file_open(path, &rc, err, errlen)))
            break;
        uint32_t fv = tr_token_file_vocab_size(s->files[i]);
        uint64_t count = tr_token_file_count(s->files[i]);
        if (fv > (uint32_t)V) {
            snprintf(err, errlen,
                     "%s: tokens go up to a vocabulary of %u but [model] vocab_size = %d; set "
                     "vocab_size = %u (or tokenize with the model's vocabulary)",
                     path, fv, V, fv);
            rc = TR_EXIT_USAGE;
        } else if (i > 0 && fv != s->vocab_size) {
            /* shards of one corpus come from one tokenizer */
            snprintf(err, errlen,
                     "%s: made with a vocabulary of %u, but %s with one of %u: every file of "
                     "%s must come from the same tokenizer",
                     path, fv, s->paths[0], s->vocab_size, spec);
            rc = TR_EXIT_USAGE;
        }
        if (fv > s->vocab_size)
            s->vocab_size = fv;
        s->tokens += count;
        s->first[i + 1] = s->first[i] + (count > 0 ? (long)((count - 1) / (uint64_t)T) : 0);
    }
    if (g.gl_pathc)
        globfree(&g);
    if (!rc && s->first[s->n] < 1) {
        snprintf(err, errlen,
                 "%s: %llu tokens%s make no window of seq_len + 1 = %d tokens; use more text "
                 "or a shorter [model] seq_len",
                 spec, (unsigned long long)s->tokens, s->n > 1 ? " (in every file)" : "", T + 1);
        rc = TR_EXIT_USAGE;
    }
    if (rc)
        tr_token_set_close(s);
    return rc;
}

/* The file window w falls in: the last i with first[i] <= w. */
static int file_of(const tr_token_set *s, long w)
{
    int lo = 0, hi = s->n - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (s->first[mid] <= w)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

int tr_token_set_try_read(tr_token_set *s, long w, int T, size_t off, size_t n, uint32_t *out,
                          char *err, size_t errlen)
{
    char why[1024];
    int i = file_of(s, w);
    uint64_t start = (uint64_t)(w - s->first[i]) * (uint64_t)T + off;
    int rc = tr_token_file_read(s->files[i], start, n, out, why, sizeof why);
    if (rc == TR_EXIT_DATA)
        snprintf(err, errlen,
                 "%s: the file is damaged, or its header's vocabulary is not its tokens'; make "
                 "it again with the tokenizer that wrote it (this project's: build/tokenize, "
                 "scripts/prepare_text.sh)",
                 why);
    else if (rc)
        snprintf(err, errlen, "%s (the file changed while training?)", why);
    return rc;
}

void tr_token_set_read(tr_token_set *s, long w, int T, size_t off, size_t n, uint32_t *out)
{
    char err[1400];
    int rc = tr_token_set_try_read(s, w, T, off, n, out, err, sizeof err);
    if (rc)
        tr_fatal(rc, "%s", err);
}

void tr_token_set_close(tr_token_set *s)
{
    for (int i = 0; i < s->n; i++) {
        tr_token_file_close(s->files[i]);
        free(s->paths[i]);
    }
    tr_free(s->files);
    tr_free(s->paths);
    tr_free(s->first);
    memset(s, 0, sizeof *s);
}
