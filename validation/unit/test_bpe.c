/* test_bpe.c: the text pipeline: the strict JSON object parser, the GPT-2
 * pre-tokenizer, byte-level mode, token files (round trip, windows, and refusal of
 * truncated and foreign files), and, when GPT-2's files are present
 * (scripts/fetch_gpt2_bpe.sh), known ids and decode(encode(x)) == x. Ids against
 * the reference encoder are checked by validation/text/compare_with_js.sh. */
#include "test_util.h"

#include "core/error.h"
#include "text/bpe.h"
#include "text/bpe_internal.h" /* tr_bpe_force_short_merge */
#include "text/json_object.h"
#include "text/pretokenize.h"
#include "text/token_file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- JSON ----------------------------------------------------------------- */

typedef struct seen {
    char keys[8][16];
    size_t lens[8];
    int64_t vals[8];
    int n;
} seen;

static int collect(void *ctx, const char *key, size_t key_len, int64_t value, size_t offset,
                   char *err, size_t errlen)
{
    seen *s = ctx;
    (void)offset, (void)err, (void)errlen;
    if (s->n < 8 && key_len < 16) {
        memcpy(s->keys[s->n], key, key_len);
        s->lens[s->n] = key_len;
        s->vals[s->n++] = value;
    }
    return 0;
}

static int parse(const char *text, seen *s, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    return tr_json_object_parse(text, strlen(text), "t.json", collect, s, err, errlen);
}

static void test_json(void)
{
    seen s;
    char err[256];
    const char *ok = " {\"a\": 0, \"\\u00e9\\n\\\"\": 12,\n\"\\ud83d\\ude00\":-3, \"\":4} \n";
    CHECK(parse(ok, &s, err, sizeof err) == 0, "valid object rejected: %s", err);
    CHECK(s.n == 4, "%d members", s.n);
    CHECK(s.lens[0] == 1 && s.keys[0][0] == 'a' && s.vals[0] == 0, "first member");
    CHECK(s.lens[1] == 4 && !memcmp(s.keys[1], "\xc3\xa9\n\"", 4) && s.vals[1] == 12,
          "escapes decoded");
    CHECK(s.lens[2] == 4 && !memcmp(s.keys[2], "\xf0\x9f\x98\x80", 4) && s.vals[2] == -3,
          "surrogate pair joined");
    CHECK(s.lens[3] == 0 && s.vals[3] == 4, "empty key");
    CHECK(parse("{}", &s, err, sizeof err) == 0 && s.n == 0, "empty object");

    struct { const char *text, *want; } bad[] = {
        {"", "byte 0: expected '{'"},
        {"[1]", "byte 0: expected '{'"},
        {"{\"a\": 1} x", "byte 9: trailing text"},
        {"{\"a\": 1,}", "byte 8: expected a string key"},
        {"{\"a\" 1}", "byte 5: expected ':'"},
        {"{\"a\": 1.5}", "fraction"},
        {"{\"a\": 01}", "leading zero"},
        {"{\"a\": \"x\"}", "expected an integer"},
        {"{\"\\ud83d\": 1}", "high surrogate"},
        {"{\"\\ude00\": 1}", "lone low surrogate"},
        {"{\"\\x\": 1}", "unknown escape"},
        {"{\"\\u12g4\": 1}", "bad hex digit"},
        {"{\"abc", "unterminated string"},
        {"{\"a\": 1", "expected ',' or '}'"},
        {"{\"a\tb\": 1}", "control character"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        int rc = parse(bad[i].text, &s, err, sizeof err);
        CHECK(rc == -1 && strstr(err, "t.json: byte ") && strstr(err, bad[i].want),
              "bad JSON #%zu: rc %d, message \"%s\", want \"%s\"", i, rc, err, bad[i].want);
    }
}

/* ---- pre-tokenizer -------------------------------------------------------- */

/* Splits s and joins the pieces with '|' for comparison. */
static void split(const char *s, char *out, size_t cap)
{
    size_t len = strlen(s), o = 0;
    for (size_t pos = 0; pos < len;) {
        size_t end = tr_pretokenize_next((const uint8_t *)s, len, pos);
        if (o && o < cap - 1)
            out[o++] = '|';
        for (; pos < end && o < cap - 1; pos++)
            out[o++] = s[pos];
        pos = end;
    }
    out[o] = '\0';
}

static void test_pretokenize(void)
{
    struct { const char *in, *want; } cases[] = {
        {"Hello world", "Hello| world"},
        {"a   b", "a|  | b"},
        {"don't we're", "don|'t| we|'re"},
        {"x 'sy", "x| '|sy"},
        {"3.14 1,000", "3|.|14| 1|,|000"},
        {"ab  \n", "ab|  \n"},
        {"a\n\nb", "a|\n|\n|b"},       /* only ' ' prefixes a word */
        {"a \xc2\xa0" "b", "a| |\xc2\xa0|b"}, /* U+00A0 is \s but not ' ' */
        {"?!\xff\xfe" "x", "?!\xff\xfe|x"},   /* invalid bytes join punctuation */
        {"caf\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd", "caf\xc3\xa9| \xe4\xbd\xa0\xe5\xa5\xbd"},
    };
    char got[256];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        split(cases[i].in, got, sizeof got);
        CHECK(!strcmp(got, cases[i].want), "split #%zu: got \"%s\", want \"%s\"", i, got,
              cases[i].want);
    }
}

/* ---- byte mode ------------------------------------------------------------ */

static void test_bytes(void)
{
    tr_bpe *b = tr_bpe_bytes();
    uint32_t *ids, eot;
    size_t n, len;
    char *back;
    const char text[] = "h\xc3\xa9llo\0\xff";
    CHECK(tr_bpe_vocab_size(b) == 256, "vocab %u", tr_bpe_vocab_size(b));
    CHECK(tr_bpe_eot(b, &eot) == -1, "byte mode has no end-of-text");
    CHECK(tr_bpe_encode(b, text, sizeof text - 1, &ids, &n) == 0 && n == sizeof text - 1,
          "encode gave %zu ids", n);
    CHECK(ids[1] == 0xC3 && ids[6] == 0 && ids[7] == 0xFF, "ids are byte values");
    CHECK(tr_bpe_decode(b, ids, n, &back, &len) == 0 && len == n && !memcmp(back, text, n),
          "byte round trip");
    uint32_t badid = 256;
    char *none;
    CHECK(tr_bpe_decode(b, &badid, 1, &none, &len) == -2, "id 256 refused");
    free(back);
    free(ids);
    tr_bpe_free(b);
}

/* ---- token files ---------------------------------------------------------- */

static void write_raw(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    fwrite(p, 1, n, f);
    fclose(f);
}

static void expect_open_error(const char *path, int want_code, const char *want, const char *what)
{
    char err[512] = "";
    int code = 0;
    tr_token_file *f = tr_token_file_open(path, &code, err, sizeof err);
    CHECK(!f && code == want_code && strstr(err, path) && strstr(err, want),
          "%s: code %d, message \"%s\"", what, code, err);
    tr_token_file_close(f);
}

static void round_trip(const char *path, uint32_t vocab, uint32_t want_dtype)
{
    enum { N = 70000 };
    static uint32_t ids[N], back[N];
    char err[512];
    int code = 0;
    for (uint32_t i = 0; i < N; i++)
        ids[i] = (i * 2654435761u) % vocab;
    CHECK(tr_token_file_write(path, ids, N, vocab, err, sizeof err) == 0, "write: %s", err);
    tr_token_file *f = tr_token_file_open(path, &code, err, sizeof err);
    CHECK(f != NULL, "open: %s", err);
    if (!f)
        return;
    CHECK(tr_token_file_count(f) == N && tr_token_file_vocab_size(f) == vocab &&
              tr_token_file_dtype(f) == want_dtype,
          "header: count %llu vocab %u dtype %u", (unsigned long long)tr_token_file_count(f),
          tr_token_file_vocab_size(f), tr_token_file_dtype(f));
    CHECK(tr_token_file_read(f, 0, N, back, err, sizeof err) == 0 &&
              !memcmp(ids, back, sizeof ids),
          "whole read: %s", err);
    CHECK(tr_token_file_read(f, 12345, 100, back, err, sizeof err) == 0 &&
              !memcmp(ids + 12345, back, 100 * sizeof *back),
          "window read: %s", err);
    CHECK(tr_token_file_read(f, N - 5, 10, back, err, sizeof err) == TR_EXIT_USAGE,
          "window past the end refused");
    CHECK(tr_token_file_read(f, N, 0, back, err, sizeof err) == 0, "empty window at the end");
    tr_token_file_close(f);
}

static void test_token_file(const char *dir)
{
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/t16.tok", dir);
    round_trip(path, 50257, TR_TOKEN_U16);
    snprintf(path, sizeof path, "%s/t32.tok", dir);
    round_trip(path, 100000, TR_TOKEN_U32);

    uint32_t ids[3] = {1, 2, 3}, big = 7;
    CHECK(tr_token_file_write(path, &big, 1, 7, err, sizeof err) == TR_EXIT_DATA &&
              strstr(err, "not below vocab_size"),
          "id >= vocab_size refused: %s", err);

    /* a valid small file, then damaged copies of it */
    snprintf(path, sizeof path, "%s/small.tok", dir);
    tr_token_file_write(path, ids, 3, 10, err, sizeof err);
    unsigned char raw[64];
    FILE *f = fopen(path, "rb");
    size_t len = fread(raw, 1, sizeof raw, f);
    fclose(f);
    CHECK(len == 32 + 3 * 2 && !memcmp(raw, "TRTOKENS", 8) && raw[8] == 1 && raw[12] == 1 &&
              raw[16] == 3 && raw[24] == 10 && raw[32] == 1 && raw[33] == 0,
          "on-disk layout (%zu bytes)", len);

    snprintf(path, sizeof path, "%s/missing.tok", dir);
    expect_open_error(path, TR_EXIT_NOINPUT, "cannot open", "missing file");
    snprintf(path, sizeof path, "%s/trunc.tok", dir);
    write_raw(path, raw, len - 1);
    expect_open_error(path, TR_EXIT_DATA, "truncated", "truncated body");
    write_raw(path, raw, 20);
    expect_open_error(path, TR_EXIT_DATA, "too short", "truncated header");
    snprintf(path, sizeof path, "%s/foreign.tok", dir);
    write_raw(path, "PK\3\4 this is a zip file, not tokens......", 42);
    expect_open_error(path, TR_EXIT_DATA, "magic", "foreign file");
    unsigned char v2[64];
    memcpy(v2, raw, len);
    v2[8] = 2;
    snprintf(path, sizeof path, "%s/v2.tok", dir);
    write_raw(path, v2, len);
    expect_open_error(path, TR_EXIT_DATA, "version 2", "future version");
    memcpy(v2, raw, len);
    v2[12] = 9;
    write_raw(path, v2, len);
    expect_open_error(path, TR_EXIT_DATA, "dtype 9", "unknown dtype");
    memcpy(v2, raw, len);
    v2[32] = 200; /* token 200 in a vocabulary of 10 */
    write_raw(path, v2, len);
    int code;
    uint32_t out[3];
    tr_token_file *tf = tr_token_file_open(path, &code, err, sizeof err);
    CHECK(tf && tr_token_file_read(tf, 0, 3, out, err, sizeof err) == TR_EXIT_DATA,
          "token beyond the vocabulary refused on read");
    tr_token_file_close(tf);
}

/* ---- GPT-2 (needs the fetched files) -------------------------------------- */

static const char *strings[] = {
    "Hello world",
    "don't I'll she's we're they've I'm 'd",
    "1234567 3.14 1,000",
    "   spaces\t\ttabs\n\nnewlines  trailing   ",
    "!!! ??? ... ((x)) --- @#$%",
    "caf\xc3\xa9 \xc3\xbc\xc3\xb1 \xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96\xe7\x95\x8c "
    "\xf0\x9f\x98\x80\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd \xce\x93\xce\xb5\xce\xb9\xce\xac "
    "\xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82 \xd9\x85\xd8\xb1\xd8\xad\xd8\xa8\xd8\xa7",
    "invalid \xff\xfe bytes \xc3 and \xed\xa0\x80 surrogate \xf8\x88\x80\x80\x80 overlong \xc0\xaf",
    "<|endoftext|>",
    "",
};

static void test_gpt2(const char *gpt2, const char *dir)
{
    char enc[600], merges[600], err[1024];
    snprintf(enc, sizeof enc, "%s/encoder.json", gpt2);
    snprintf(merges, sizeof merges, "%s/vocab.bpe", gpt2);
    if (access(enc, R_OK) || access(merges, R_OK)) {
        printf("skipping GPT-2 checks: %s missing (run scripts/fetch_gpt2_bpe.sh)\n", enc);
        return;
    }
    tr_bpe *b = tr_bpe_load(enc, merges, err, sizeof err);
    CHECK(b != NULL, "load: %s", err);
    if (!b)
        return;
    uint32_t eot = 0, *ids;
    size_t n, len;
    char *back;
    CHECK(tr_bpe_vocab_size(b) == 50257, "vocab %u", tr_bpe_vocab_size(b));
    CHECK(tr_bpe_eot(b, &eot) == 0 && eot == TR_GPT2_EOT, "eot %u", eot);
    CHECK(tr_bpe_encode(b, "Hello world", 11, &ids, &n) == 0 && n == 2 && ids[0] == 15496 &&
              ids[1] == 995,
          "\"Hello world\" -> %zu ids", n);
    free(ids);
    for (size_t i = 0; i < sizeof strings / sizeof strings[0]; i++) {
        size_t sl = strlen(strings[i]);
        for (int pass = 0; pass < 2; pass++) { /* the second pass hits the cache */
            CHECK(tr_bpe_encode(b, strings[i], sl, &ids, &n) == 0, "encode #%zu", i);
            CHECK(tr_bpe_decode(b, ids, n, &back, &len) == 0 && len == sl &&
                      !memcmp(back, strings[i], sl),
                  "round trip #%zu pass %d", i, pass);
            free(back);
            free(ids);
        }
    }
    /* long pieces (no pre-token boundary for thousands of bytes) merge through a heap;
     * their ids must be those of the round-by-round merge of short ones */
    const char *alphabets[] = {"abcdefghijklmnopqrstuvwxyz", "aeiou", "ab", "0123456789",
                               "thequickbrownfox",           "ACGT"};
    int same = 1, long_ones = 0;
    uint64_t r = 7;
    char *text = malloc(5000);
    for (int t = 0; t < 60 && text; t++) {
        const char *a = alphabets[t % 6];
        size_t al = strlen(a), tl = 257 + (size_t)(t * 4723 % 4700);
        for (size_t i = 0; i < tl; i++) {
            r = r * 6364136223846793005ULL + 1442695040888963407ULL;
            text[i] = a[(r >> 33) % al];
        }
        uint32_t *fast = NULL, *slow = NULL;
        size_t nf = 0, ns = 0;
        tr_bpe_force_short_merge = 0;
        int rf = tr_bpe_encode(b, text, tl, &fast, &nf);
        tr_bpe_force_short_merge = 1;
        int rs = tr_bpe_encode(b, text, tl, &slow, &ns);
        tr_bpe_force_short_merge = 0;
        same &= rf == 0 && rs == 0 && nf == ns && !memcmp(fast, slow, nf * sizeof *fast);
        long_ones += nf > 1;
        free(fast);
        free(slow);
    }
    free(text);
    CHECK(same && long_ones == 60, "60 long pieces: the heap's ids are the rounds' (%d merged)",
          long_ones);
    tr_bpe_free(b);

    /* load errors name the file */
    char bad[600];
    snprintf(bad, sizeof bad, "%s/bad_encoder.json", dir);
    write_raw(bad, "{\"a\": 0, \"b\": 0}", 16);
    b = tr_bpe_load(bad, merges, err, sizeof err);
    CHECK(!b && strstr(err, bad) && strstr(err, "repeated"), "repeated id: %s", err);
    tr_bpe_free(b);
    b = tr_bpe_load(enc, bad, err, sizeof err);
    CHECK(!b && strstr(err, bad) && strstr(err, "#version"), "merges without #version: %s", err);
    tr_bpe_free(b);
    /* an empty key first of all (found by validation/fuzz/fuzz_bpe_load.c: it reached
     * the key pool before the pool existed) */
    write_raw(bad, "{\"\": 3, \"a\": 0}", 15);
    b = tr_bpe_load(bad, merges, err, sizeof err);
    CHECK(!b && strstr(err, bad) && strstr(err, "byte 1: empty token"), "empty key: %s", err);
    tr_bpe_free(b);
}

int main(void)
{
    char dir[] = "/tmp/test_bpe.XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_json();
    test_pretokenize();
    test_bytes();
    test_token_file(dir);

    char gpt2[512];
    const char *data = getenv("TRAINER_DATA_DIR"), *src = getenv("TRAINER_SOURCE_DIR");
    if (data)
        snprintf(gpt2, sizeof gpt2, "%s/gpt2", data);
    else
        snprintf(gpt2, sizeof gpt2, "%s/data/gpt2", src ? src : ".");
    test_gpt2(gpt2, dir);

    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return tr_test_finish();
}
