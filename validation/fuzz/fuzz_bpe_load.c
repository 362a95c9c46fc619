/* fuzz_bpe_load.c: loading a BPE vocabulary (text/bpe_load.c: encoder.json and
 * vocab.bpe, GPT-2's printable byte alphabet) from any two files.
 *
 * Input: encoder.json's bytes, a 0x1e byte, vocab.bpe's bytes. Checked: a
 * failed load names the file; a vocabulary that loads tokenizes a fixed text
 * and the input itself to ids within it, and decodes them back to the same
 * bytes. */
#include "fuzz.h"

#include "text/bpe.h"

#include <string.h>

static void round_trip(tr_bpe *b, const uint8_t *text, size_t len)
{
    uint32_t *ids = NULL;
    size_t n = 0;
    FUZZ_CHECK(tr_bpe_encode(b, (const char *)text, len, &ids, &n) == 0, "encode");
    for (size_t i = 0; i < n; i++)
        FUZZ_CHECK(ids[i] < tr_bpe_vocab_size(b), "id %u, vocabulary %u", ids[i],
                   tr_bpe_vocab_size(b));
    char *back = NULL;
    size_t back_len = 0;
    FUZZ_CHECK(tr_bpe_decode(b, ids, n, &back, &back_len) == 0, "decode");
    FUZZ_CHECK(back_len == len && (len == 0 || !memcmp(back, text, len)), "round trip");
    free(back);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *enc, *vocab;
    size_t enc_len, vocab_len;
    fuzz_split(data, size, 0x1e, &enc, &enc_len, &vocab, &vocab_len);
    char enc_path[64], vocab_path[64], err[512];
    snprintf(enc_path, sizeof enc_path, "%s", fuzz_file(0, enc, enc_len));
    snprintf(vocab_path, sizeof vocab_path, "%s", fuzz_file(1, vocab, vocab_len));
    err[0] = '\0';
    tr_bpe *b = tr_bpe_load(enc_path, vocab_path, err, sizeof err);
    if (!b) {
        fuzz_check_message(err, sizeof err, "bpe_load");
        FUZZ_CHECK(strstr(err, enc_path) || strstr(err, vocab_path) ||
                       !strcmp(err, "out of memory"),
                   "message names neither file: %s", err);
        return 0;
    }
    static const char text[] =
        "Hello world, it's 2026: \xc4\xa0the caf\xc3\xa9 \xe2\x82\xac 12\n\n";
    round_trip(b, (const uint8_t *)text, sizeof text - 1);
    round_trip(b, data, size);
    uint32_t eot;
    if (tr_bpe_eot(b, &eot) == 0)
        FUZZ_CHECK(eot < tr_bpe_vocab_size(b), "end-of-text %u", eot);
    tr_bpe_free(b);
    return 0;
}
