/* token_data.c: windows of tokens for language-model training (token_data.h). */
#include "token_data.h"
#include "core/error.h"
#include "core/rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* random mode: an "epoch" long enough never to end */
#define RANDOM_WINDOWS (1L << 40)

int tr_token_data_open(tr_token_data *td, const char *train_path, const char *val_path,
                       int random, int T, int V, long val_limit, uint64_t seed,
                       const char **which, char *err, size_t errlen)
{
    memset(td, 0, sizeof *td);
    td->T = T, td->V = V, td->random = random, td->seed = seed;
    td->win = tr_alloc((size_t)(T + 1) * sizeof *td->win, "token window");
    if (random) {
        td->train_windows = RANDOM_WINDOWS;
        td->val_windows = val_limit; /* 0: set to the global batch by start */
        td->train_vocab = (uint32_t)V;
        return 0;
    }
    *which = "train";
    int rc = tr_token_set_open(&td->train, train_path, "training", T, V, err, errlen);
    if (rc)
        return rc;
    *which = "val";
    rc = tr_token_set_open(&td->val, val_path, "validation", T, V, err, errlen);
    if (rc)
        return rc;
    if (td->val.vocab_size != td->train.vocab_size) {
        snprintf(err, errlen,
                 "%s was made with a vocabulary of %u, but the training tokens (%s) with one of "
                 "%u: validate on text of the training data's tokenizer",
                 val_path, (unsigned)td->val.vocab_size, train_path,
                 (unsigned)td->train.vocab_size);
        return TR_EXIT_USAGE;
    }
    td->train_windows = td->train.first[td->train.n];
    td->val_windows = td->val.first[td->val.n];
    td->train_vocab = td->train.vocab_size;
    if (val_limit > 0 && val_limit < td->val_windows)
        td->val_windows = val_limit;
    return 0;
}

void tr_token_data_start(tr_token_data *td, long global_batch, int dp_rank, int dp_size,
                         int shuffle)
{
    td->local_batch = global_batch / dp_size;
    td->dp_rank = dp_rank, td->dp_size = dp_size;
    if (td->random) {
        td->sampler.global_batch = global_batch;
        td->sampler.local_batch = td->local_batch;
        td->sampler.steps_per_epoch = RANDOM_WINDOWS / global_batch;
        if (td->val_windows == 0)
            td->val_windows = global_batch;
    } else {
        tr_sampler_init(&td->sampler, td->train_windows, global_batch, dp_rank, dp_size,
                        td->seed, shuffle);
    }
    size_t n = (size_t)td->local_batch * td->T;
    td->idx = tr_alloc((size_t)td->local_batch * sizeof *td->idx, "batch indices");
    td->x = tr_alloc(n * sizeof *td->x, "token batch");
    td->y = tr_alloc(n * sizeof *td->y, "token batch");
}

long tr_token_data_steps_per_epoch(const tr_token_data *td) { return td->sampler.steps_per_epoch; }

/* Window w of a set, or of the random stream (stream 0 train, 1 validation). */
static void window(tr_token_data *td, tr_token_set *set, uint64_t stream, long w, int32_t *x,
                   int32_t *y)
{
    int T = td->T;
    if (td->random) {
        for (int i = 0; i <= T; i++)
            td->win[i] = (uint32_t)(tr_rng_u64(td->seed, TR_STREAM_TOKENS + stream,
                                               (uint64_t)w * (uint64_t)(T + 1) + (uint64_t)i) %
                                    (uint64_t)td->V);
    } else {
        tr_token_set_read(set, w, T, 0, (size_t)T + 1, td->win);
    }
    for (int i = 0; i < T; i++) {
        x[i] = (int32_t)td->win[i];
        y[i] = (int32_t)td->win[i + 1];
    }
}

void tr_token_data_batch(tr_token_data *td, long step, const int32_t **x, const int32_t **y)
{
    if (td->random) {
        long first = step * td->sampler.global_batch + (long)td->dp_rank * td->local_batch;
        for (long i = 0; i < td->local_batch; i++)
            td->idx[i] = first + i;
    } else {
        tr_sampler_batch(&td->sampler, step, td->idx);
    }
    for (long i = 0; i < td->local_batch; i++)
        window(td, &td->train, 0, td->idx[i], td->x + i * td->T, td->y + i * td->T);
    *x = td->x;
    *y = td->y;
}

void tr_token_data_val_window(tr_token_data *td, long w, int32_t *x, int32_t *y)
{
    window(td, &td->val, 1, w, x, y);
}

/* FNV-1a, continued from h, of up to 64 windows spread evenly over the first
 * `windows` of a set, the first and the last included. */
static int digest_set(tr_token_data *td, tr_token_set *set, long windows, uint64_t *h, char *err,
                      size_t errlen)
{
    enum { SAMPLES = 64 };
    long n = windows < SAMPLES ? windows : SAMPLES;
    for (long k = 0; k < n; k++) {
        long w = n > 1 ? (long)((uint64_t)k * (uint64_t)(windows - 1) / (uint64_t)(n - 1)) : 0;
        int rc = tr_token_set_try_read(set, w, td->T, 0, (size_t)td->T + 1, td->win, err, errlen);
        if (rc)
            return rc;
        for (int i = 0; i <= td->T; i++)
            *h = (*h ^ td->win[i]) * 0x100000001b3ULL;
    }
    return 0;
}

int tr_token_data_digest(tr_token_data *td, int with_val, uint64_t *digest, const char **which,
                         char *err, size_t errlen)
{
    *digest = 0;
    *which = "train";
    if (td->random)
        return 0;
    uint64_t h = 0xcbf29ce484222325ULL;
    int rc = digest_set(td, &td->train, td->train_windows, &h, err, errlen);
    if (!rc && with_val) {
        *which = "val";
        rc = digest_set(td, &td->val, td->val_windows, &h, err, errlen);
    }
    *digest = h;
    return rc;
}

/* Counts every token of f into counts[V] (chunked reads). */
static uint64_t count_tokens(tr_token_data *td, tr_token_file *f, uint64_t first, uint64_t n,
                             uint64_t *counts)
{
    enum { CHUNK = 1 << 16 };
    uint32_t *buf = tr_alloc(CHUNK * sizeof *buf, "unigram counts");
    char err[1024];
    for (uint64_t s = 0; s < n; s += CHUNK) {
        size_t m = n - s < CHUNK ? (size_t)(n - s) : CHUNK;
        int rc = tr_token_file_read(f, first + s, m, buf, err, sizeof err);
        if (rc)
            tr_fatal(rc, "%s", err);
        for (size_t i = 0; i < m; i++)
            counts[buf[i] < (uint32_t)td->V ? buf[i] : 0]++;
    }
    tr_free(buf);
    return n;
}

void tr_token_data_count_train(tr_token_data *td, int part, int parts, uint64_t *counts)
{
    if (td->random)
        return;
    /* part's share [lo, hi) of the set's tokens, its files one after another */
    uint64_t all = 0;
    for (int i = 0; i < td->train.n; i++)
        all += tr_token_file_count(td->train.files[i]);
    uint64_t lo = all * (uint64_t)part / (uint64_t)parts;
    uint64_t hi = all * (uint64_t)(part + 1) / (uint64_t)parts;
    uint64_t at = 0; /* the set's index of file i's first token */
    for (int i = 0; i < td->train.n && at < hi; i++) {
        uint64_t n = tr_token_file_count(td->train.files[i]);
        uint64_t a = lo > at ? lo - at : 0, b = hi - at < n ? hi - at : n;
        if (a < b)
            count_tokens(td, td->train.files[i], a, b - a, counts);
        at += n;
    }
}

double tr_token_data_unigram_from_counts(tr_token_data *td, const uint64_t *train)
{
    if (td->random)
        return 0;
    uint64_t *val = tr_alloc((size_t)td->V * sizeof *val, "unigram counts");
    memset(val, 0, (size_t)td->V * sizeof *val);
    uint64_t ntrain = 0;
    for (int i = 0; i < td->train.n; i++)
        ntrain += tr_token_file_count(td->train.files[i]);
    /* the targets of the evaluated windows: in each file, tokens 1 .. windows * T */
    for (int i = 0; i < td->val.n && td->val.first[i] < td->val_windows; i++) {
        long hi = td->val.first[i + 1] < td->val_windows ? td->val.first[i + 1] : td->val_windows;
        count_tokens(td, td->val.files[i], 1, (uint64_t)(hi - td->val.first[i]) * (uint64_t)td->T,
                     val);
    }
    /* add-one smoothing over the vocabulary the training file declares */
    double denom = (double)ntrain + td->train_vocab, nll = 0, nval = 0;
    for (int t = 0; t < td->V; t++)
        if (val[t]) {
            nll -= (double)val[t] * log(((double)train[t] + 1.0) / denom);
            nval += (double)val[t];
        }
    tr_free(val);
    return nval > 0 ? exp(nll / nval) : 0;
}

double tr_token_data_unigram_perplexity(tr_token_data *td)
{
    if (td->random)
        return 0;
    uint64_t *train = tr_alloc((size_t)td->V * sizeof *train, "unigram counts");
    memset(train, 0, (size_t)td->V * sizeof *train);
    tr_token_data_count_train(td, 0, 1, train);
    double p = tr_token_data_unigram_from_counts(td, train);
    tr_free(train);
    return p;
}

void tr_token_data_close(tr_token_data *td)
{
    tr_token_set_close(&td->train);
    tr_token_set_close(&td->val);
    if (!td->random && td->sampler.perm)
        tr_sampler_free(&td->sampler);
    tr_free(td->idx);
    tr_free(td->x);
    tr_free(td->y);
    tr_free(td->win);
    memset(td, 0, sizeof *td);
}
