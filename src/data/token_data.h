/* token_data.h: a language model's data: windows of seq_len + 1 tokens.
 *
 * A token file of N tokens holds W = (N - 1) / T non-overlapping windows; window w
 * is tokens [w T, w T + T + 1): inputs its first T tokens, targets its last T (the
 * next token at each position). Training windows are sampled exactly as images
 * are (sampler.h: a seeded permutation per epoch, rank r of dp taking the r-th slice
 * of each global batch), and each rank reads only its own windows with pread, so no
 * rank ever loads a whole corpus. Validation windows are sharded contiguously over
 * the data-parallel ranks (tr_shard_range).
 *
 * The training and validation data are each a file or a set of shards
 * (token_set.h: a glob pattern), in this project's format or llm.c's.
 *
 * Random mode (data.format = random_tokens, for benchmarks): every token is drawn
 * from the counter-based RNG, uniform in [0, V), so there is no file and any number
 * of windows.
 *
 * Ownership: the struct owns its files and buffers; tr_token_data_close frees them.
 * Not thread-safe. */
#ifndef TR_DATA_TOKEN_DATA_H
#define TR_DATA_TOKEN_DATA_H

#include "data/sampler.h"
#include "data/token_set.h"

#include <stdint.h>

typedef struct tr_token_data {
    int T, V;
    int random;                /* random_tokens mode */
    uint64_t seed;
    tr_token_set train, val; /* empty in random mode */
    long train_windows, val_windows;
    uint32_t train_vocab;       /* the train file's header vocab_size */
    tr_sampler sampler;
    long local_batch;
    int dp_rank, dp_size;
    int64_t *idx;               /* [local_batch] */
    uint32_t *win;              /* [T + 1] */
    int32_t *x, *y;             /* [local_batch, T] each */
} tr_token_data;

/* Opens both files (or sets up random mode when random is set: the paths are then
 * ignored) and checks them against the model's context T and vocabulary V.
 * val_limit > 0 caps the validation windows (random mode: their number; 0 there
 * means global_batch). Returns 0, or an exit code with err naming the file and
 * the deck key's meaning ("train" or "val" in *which). */
int tr_token_data_open(tr_token_data *td, const char *train_path, const char *val_path,
                       int random, int T, int V, long val_limit, uint64_t seed,
                       const char **which, char *err, size_t errlen);
/* The training layout; global_batch and dp_size must pass tr_sampler_check. */
void tr_token_data_start(tr_token_data *td, long global_batch, int dp_rank, int dp_size,
                         int shuffle);
long tr_token_data_steps_per_epoch(const tr_token_data *td);
/* This rank's batch of step: x, y [local_batch, T]. A read error is fatal (the
 * files were checked at open; failing now means the file changed under us). */
void tr_token_data_batch(tr_token_data *td, long step, const int32_t **x, const int32_t **y);
/* Validation window w into x, y [T] each. */
void tr_token_data_val_window(tr_token_data *td, long w, int32_t *x, int32_t *y);
/* A hash of the files' contents for comparing copies: FNV-1a of up to 64 windows
 * spread evenly over the training windows, the first and the last included, then as
 * many of the validation windows in use where with_val (a set of shards whose
 * windows are a single file's has the file's hash); reading whole corpora
 * on every rank would cost a start-up more than it is worth. 0 in random mode.
 * Returns 0, or the exit code of a damaged token it read, with err and *which
 * ("train", "val") naming it: an input error every rank finds alike. */
int tr_token_data_digest(tr_token_data *td, int with_val, uint64_t *digest, const char **which,
                         char *err, size_t errlen);
/* Per-token perplexity of the validation windows' targets under the training
 * tokens' unigram distribution (add-one smoothed): the baseline a model must beat.
 * Reads both files whole in chunks (one rank; tr_token_data_count_train shares the
 * training files' reading). Returns 0 in random mode. */
double tr_token_data_unigram_perplexity(tr_token_data *td);
/* The same in parts, so that ranks share the reading: the counts of part's share
 * (of parts) of the training tokens, added to counts[V]; then, from every part's
 * counts summed, the perplexity (which reads the validation targets). Integer
 * counts: the same figure however the parts are cut. */
void tr_token_data_count_train(tr_token_data *td, int part, int parts, uint64_t *counts);
double tr_token_data_unigram_from_counts(tr_token_data *td, const uint64_t *train);
void tr_token_data_close(tr_token_data *td);

#endif
