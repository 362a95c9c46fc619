/* train_lm.c: the parts of a run particular to language models: token data, the
 * validation perplexity, the unigram baseline, and a sample of generated text. */
#include "core/error.h"
#include "core/watchdog.h"
#include "models/gpt.h"
#include "run.h"
#include "text/bpe.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The prompt's tokenizer, loaded on rank 0 only; an error is every rank's (agreed
 * by the caller), found before training rather than after it. */
static int load_tokenizer(run *r)
{
    if (r->w->rank != 0 || tr_deck_int(r->d, "sample", "length") == 0)
        return 0;
    const char *kind = tr_deck_str(r->d, "data", "tokenizer");
    char msg[2048];
    if (!strcmp(kind, "bytes")) {
        r->bpe = tr_bpe_bytes();
    } else {
        const char *encoder = tr_deck_str(r->d, "data", "encoder");
        const char *merges = tr_deck_str(r->d, "data", "merges");
        r->bpe = tr_bpe_load(encoder, merges, msg, sizeof msg);
        if (!r->bpe) {
            /* the message starts with the file it is about, then a colon (a path can be
             * the start of the other one: vocab and vocab.bpe) */
            size_t nm = strlen(merges), ne = strlen(encoder);
            int is_merges = !strncmp(msg, merges, nm) && msg[nm] == ':' &&
                            !(!strncmp(msg, encoder, ne) && msg[ne] == ':');
            const char *file = is_merges ? merges : encoder;
            tr_run_key_error(r, "data", is_merges ? "merges" : "encoder",
                             "%s (run scripts/fetch_gpt2_bpe.sh, or set [sample] length = 0)", msg);
            return access(file, R_OK) ? TR_EXIT_NOINPUT : TR_EXIT_DATA;
        }
    }
    uint32_t tv = tr_bpe_vocab_size(r->bpe), fv = r->tokens.train.vocab_size;
    if (!r->tokens.random && tv != fv)
        return tr_run_key_error(
            r, "data", "tokenizer",
            "tokenizer %s has %u tokens, but the token files were made with a vocabulary of %u: "
            "%s",
            kind, tv, fv,
            fv == 256     ? "set [data] tokenizer = bytes"
            : fv == 50257 ? "set [data] tokenizer = gpt2"
                          : "the trainer decodes GPT-2's BPE and bytes only; set [sample] length "
                            "= 0 (and every = 0) to train without samples");
    if (tv > (uint32_t)r->model.classes)
        return tr_run_key_error(r, "data", "tokenizer",
                                "tokenizer %s has %u tokens but [model] vocab_size = %d; the "
                                "sample's prompt could not be encoded",
                                kind, tv, r->model.classes);
    return 0;
}

int tr_lm_setup_data(run *r, uint64_t seed)
{
    const tr_gpt_config *c = tr_gpt_config_of(&r->model);
    int random = !strcmp(tr_deck_str(r->d, "data", "format"), "random_tokens");
    const char *which = "train";
    char msg[2048];
    int rc = tr_token_data_open(&r->tokens, tr_deck_str(r->d, "data", "train_tokens"),
                                tr_deck_str(r->d, "data", "val_tokens"), random, c->T, c->V,
                                tr_deck_int(r->d, "data", "val_limit"), seed, &which, msg,
                                sizeof msg);
    if (rc) {
        tr_run_key_error(r, "data", !strcmp(which, "train") ? "train_tokens" : "val_tokens",
                         "%s%s", msg,
                         rc == TR_EXIT_NOINPUT ? " (run scripts/prepare_text.sh, or point the "
                                                 "deck at your token files)"
                                               : "");
        return rc;
    }
    if (tr_sampler_check(r->tokens.train_windows, r->global_batch, r->w->dp, msg, sizeof msg))
        return tr_run_key_error(r, "train", "batch_size",
                                "%s (a sample is a window of seq_len + 1 = %d tokens)", msg,
                                c->T + 1);
    return load_tokenizer(r);
}

void tr_lm_evaluate(run *r, double *loss, double *acc)
{
    tr_token_data *td = &r->tokens;
    long begin, end;
    tr_shard_range(td->val_windows, r->w->dp_rank, r->w->dp, &begin, &end);
    int T = td->T;
    /* the training batch buffers are free between steps and large enough */
    int32_t *x = td->x, *y = td->y;
    double sums[2] = {0, 0}; /* loss sum, correct count */
    for (long s = begin; s < end; s += r->eval_local_batch) {
        int B = (int)(end - s < r->eval_local_batch ? end - s : r->eval_local_batch);
        for (int i = 0; i < B; i++)
            tr_token_data_val_window(td, s + i, x + (size_t)i * T, y + (size_t)i * T);
        tr_watchdog_beat("an evaluation batch", -1);
        long correct = 0;
        sums[0] += tr_pipeline_forward(r, x, y, B, &correct);
        sums[1] += (double)correct;
    }
    tr_run_sum_loss(r, sums);
    double n = (double)td->val_windows * T;
    *loss = sums[0] / n;
    *acc = sums[1] / n;
}

double tr_lm_unigram_baseline(run *r, double val_loss)
{
    if (r->tokens.random || !tr_deck_bool(r->d, "data", "unigram_baseline"))
        return 0;
    /* every rank counts its share of the training tokens and rank 0 sums them: rank 0
     * alone read the whole training set (a 1 GB file: about 1.6 s of CPU) while the
     * other ranks waited; the counts are integers, so the figure is the same */
    const tr_world *w = r->w;
    int V = r->tokens.V;
    uint64_t *counts = tr_alloc((size_t)V * sizeof *counts, "unigram counts");
    memset(counts, 0, (size_t)V * sizeof *counts);
    tr_token_data_count_train(&r->tokens, w->rank, w->size, counts);
    tr_allreduce(counts, counts, (size_t)V, TR_I64, TR_SUM, w->world);
    double uni = w->rank == 0 ? tr_token_data_unigram_from_counts(&r->tokens, counts) : 0;
    tr_free(counts);
    if (w->rank != 0)
        return 0;
    printf("validation perplexity %.2f against %.2f for the unigram baseline (each token drawn "
           "from the training set's token frequencies)\n",
           exp(val_loss), uni);
    return uni;
}

/* Rank 0: the prompt's tokens (an end-of-text token for an empty prompt); *n = 0
 * when there is nothing to continue. */
static uint32_t *encode_prompt(run *r, size_t *n)
{
    const char *prompt = tr_deck_str(r->d, "sample", "prompt");
    uint32_t *ids = NULL;
    *n = 0;
    if (tr_bpe_encode(r->bpe, prompt, strlen(prompt), &ids, n))
        tr_fatal(TR_EXIT_OSERR, "out of memory");
    uint32_t eot;
    if (*n == 0 && tr_bpe_eot(r->bpe, &eot) == 0) { /* no prompt: start a document */
        free(ids);
        ids = malloc(sizeof *ids);
        if (!ids)
            tr_fatal(TR_EXIT_OSERR, "out of memory");
        ids[0] = eot;
        *n = 1;
    }
    if (*n == 0)
        printf("sample: skipped: an empty prompt and a tokenizer without an end-of-text token "
               "give nothing to continue; set [sample] prompt\n");
    return ids;
}

void tr_lm_sample(run *r, long step)
{
    long length = tr_deck_int(r->d, "sample", "length");
    /* a model split over ranks generates through all of them; a whole one on every
     * rank too, each the same text (rank 0 prints it), rather than on rank 0 while the
     * others wait for it in their next collective without a sign of life for their
     * watchdogs (run.hang_minutes ended healthy jobs that sampled long) */
    int split = r->w->tp > 1 || r->w->pp > 1;
    if (length == 0)
        return;
    size_t n = 0;
    uint32_t *ids = r->w->rank == 0 && r->bpe ? encode_prompt(r, &n) : NULL;
    int64_t n64 = (int64_t)n;
    tr_bcast(&n64, 1, TR_I64, 0, r->w->world);
    n = (size_t)n64;
    if (n == 0) {
        free(ids);
        return;
    }
    size_t total = n + (size_t)length;
    int32_t *tok = tr_alloc(total * sizeof *tok, "sample tokens");
    for (size_t i = 0; ids && i < n; i++)
        tok[i] = (int32_t)ids[i];
    tr_bcast(tok, n, TR_I32, 0, r->w->world);
    tr_sampling how = tr_sampling_from_deck(r->d);
    int32_t vocab = r->bpe ? (int32_t)tr_bpe_vocab_size(r->bpe) : 0; /* rank 0's */
    tr_bcast(&vocab, 1, TR_I32, 0, r->w->world);
    how.vocab = vocab;
    double t0 = tr_wtime();
    if (split)
        tr_pipeline_generate(r, tok, (int)n, (int)total, &how);
    else
        tr_gpt_generate(&r->model, tok, (int)n, (int)total, &how);
    double dt = tr_wtime() - t0;
    if (r->w->rank == 0) {
        uint32_t *out = malloc(total * sizeof *out);
        if (!out)
            tr_fatal(TR_EXIT_OSERR, "out of memory");
        for (size_t i = 0; i < total; i++)
            out[i] = (uint32_t)tok[i];
        char *text = NULL;
        size_t len = 0;
        int rc = tr_bpe_decode(r->bpe, out, total, &text, &len);
        char said[96];
        tr_sampling_describe(&how, said, sizeof said);
        char when[48] = "";
        if (step >= 0)
            snprintf(when, sizeof when, " at step %ld", step);
        if (rc == 0)
            printf("sample%s (%s, %ld tokens in %.1f s):\n%s\n", when, said, length, dt, text);
        else
            printf("sample: the model produced a token outside the tokenizer's vocabulary\n");
        fflush(stdout);
        free(text);
        free(out);
    }
    free(ids);
    tr_free(tok);
}

void tr_lm_free(run *r)
{
    if (r->bpe)
        tr_bpe_free(r->bpe);
    r->bpe = NULL;
}
