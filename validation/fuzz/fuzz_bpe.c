/* fuzz_bpe.c: GPT-2's tokenizer (text/bpe.c, text/pretokenize.c,
 * text/unicode.c) on any bytes, valid UTF-8 or not.
 *
 * The vocabulary is GPT-2's own where its files are found ($TRAINER_BPE_DIR,
 * else data/gpt2 of the source tree, as scripts/fetch_gpt2_bpe.sh leaves them),
 * else the byte-level one. Checked: every id is in the vocabulary; decoding
 * gives the bytes back (the tokenizer is byte-level, so any input round-trips);
 * encoding again, now through the tokenizer's word cache, gives the same ids;
 * encoding in two calls of tr_bpe_encode_append at a pre-token boundary gives
 * the same ids as one call. */
#include "fuzz.h"

#include "text/bpe.h"
#include "text/pretokenize.h"

#include <string.h>

static tr_bpe *g_bpe;

static tr_bpe *tokenizer(void)
{
    if (g_bpe)
        return g_bpe;
    char enc[1024], vocab[1024], err[512];
    const char *dir = getenv("TRAINER_BPE_DIR");
    if (dir && *dir) {
        snprintf(enc, sizeof enc, "%s/encoder.json", dir);
        snprintf(vocab, sizeof vocab, "%s/vocab.bpe", dir);
    } else {
        snprintf(enc, sizeof enc, "%s/data/gpt2/encoder.json", TRAINER_SOURCE_DIR);
        snprintf(vocab, sizeof vocab, "%s/data/gpt2/vocab.bpe", TRAINER_SOURCE_DIR);
    }
    g_bpe = tr_bpe_load(enc, vocab, err, sizeof err);
    if (g_bpe) {
        fprintf(stderr, "fuzz_bpe: GPT-2's vocabulary (%s)\n", enc);
    } else {
        fprintf(stderr, "fuzz_bpe: byte-level vocabulary (%s)\n", err);
        g_bpe = tr_bpe_bytes();
    }
    FUZZ_CHECK(g_bpe != NULL, "no tokenizer");
    return g_bpe;
}

static void same_ids(const uint32_t *a, size_t na, const uint32_t *b, size_t nb, const char *what)
{
    FUZZ_CHECK(na == nb && (na == 0 || !memcmp(a, b, na * sizeof *a)), "%s: %zu ids, then %zu",
               what, na, nb);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tr_bpe *b = tokenizer();
    uint32_t *ids = NULL, *again = NULL, *parts = NULL;
    size_t n = 0, n2 = 0, np = 0, cap = 0;
    FUZZ_CHECK(tr_bpe_encode(b, (const char *)data, size, &ids, &n) == 0, "encode");
    FUZZ_CHECK(n <= size, "%zu ids for %zu bytes", n, size);
    uint32_t vocab = tr_bpe_vocab_size(b);
    for (size_t i = 0; i < n; i++)
        FUZZ_CHECK(ids[i] < vocab, "id %u at %zu, vocabulary %u", ids[i], i, vocab);

    char *text = NULL;
    size_t len = 0;
    FUZZ_CHECK(tr_bpe_decode(b, ids, n, &text, &len) == 0, "decode");
    FUZZ_CHECK(len == size && (size == 0 || !memcmp(text, data, size)),
               "decoding gives %zu bytes back for %zu, or other bytes", len, size);
    free(text);

    FUZZ_CHECK(tr_bpe_encode(b, (const char *)data, size, &again, &n2) == 0, "encode again");
    same_ids(ids, n, again, n2, "encoding twice (the word cache)");

    /* the first pre-token, then the rest, appended: pieces after the first do not
     * look back, so the ids are the same as the whole text's */
    size_t cut = size ? tr_pretokenize_next(data, size, 0) : 0;
    FUZZ_CHECK(cut <= size && (size == 0 || cut > 0), "first piece ends at %zu of %zu", cut, size);
    FUZZ_CHECK(tr_bpe_encode_append(b, (const char *)data + cut, size - cut, &parts, &np, &cap) ==
                   0,
               "encode the rest");
    size_t rest = np;
    uint32_t *first = NULL;
    size_t nf = 0;
    FUZZ_CHECK(tr_bpe_encode(b, (const char *)data, cut, &first, &nf) == 0, "encode the first");
    FUZZ_CHECK(nf <= n && (nf == 0 || !memcmp(first, ids, nf * sizeof *ids)),
               "the first piece's ids differ");
    same_ids(n ? ids + nf : ids, n - nf, parts, rest, "the rest after the first piece");
    free(first);
    free(ids);
    free(again);
    free(parts);
    return 0;
}
