/* token_set.h: one or more token files (shards) seen as one sequence of windows.
 *
 * A deck's data.train_tokens / val_tokens names a file, or a glob pattern
 * ("data/fineweb/fineweb_train_*.bin": *, ? and [...] as the shell has them) whose
 * matches, in name order, are the shards. Each file is cut into its own
 * (N_i - 1) / T windows of T + 1 tokens (a window never spans two files, which
 * hold separate documents); window w of the set is window w - first[i] of the
 * file i it falls in. A single file is exactly what it was before sets.
 *
 * Ownership: the set owns its files and paths; tr_token_set_close frees them. */
#ifndef TR_DATA_TOKEN_SET_H
#define TR_DATA_TOKEN_SET_H

#include "text/token_file.h"

#include <stddef.h>
#include <stdint.h>

typedef struct tr_token_set {
    int n;                 /* files */
    tr_token_file **files; /* [n] */
    char **paths;          /* [n] */
    long *first;           /* [n + 1]: the set's index of each file's first window;
                              first[n] = all windows */
    uint64_t tokens;       /* all files' */
    uint32_t vocab_size;   /* the largest of the files' headers */
} tr_token_set;

/* Opens the file or the pattern's matches for windows of T + 1 tokens and checks
 * them against the model's vocabulary V. what names the set in messages
 * ("training"). Returns 0, or an exit code with err naming the file or pattern:
 * TR_EXIT_USAGE (not set; tokens beyond V; no window at all), TR_EXIT_NOINPUT
 * (missing, no match), TR_EXIT_DATA (not a token file). */
int tr_token_set_open(tr_token_set *s, const char *spec, const char *what, int T, int V, char *err,
                      size_t errlen);
/* Tokens [off, off + n) of window w (off + n <= T + 1) into out; fatal on a read
 * error or a damaged token (open checked headers and sizes, not every token). */
void tr_token_set_read(tr_token_set *s, long w, int T, size_t off, size_t n, uint32_t *out);
/* The same, returning 0 or the exit code with err saying what and the fix. */
int tr_token_set_try_read(tr_token_set *s, long w, int T, size_t off, size_t n, uint32_t *out,
                          char *err, size_t errlen);
void tr_token_set_close(tr_token_set *s);

#endif
