/* test_corpus.c: what the tokenize tool streams a corpus through: the cut that
 * leaves the ids unchanged (tr_pretokenize_cut), the corpus reader's pieces (plain,
 * gzip, JSON lines; errors), a JSON-lines record's text member, the token file
 * written as a stream and split, and a tokenizer's clones. */
#include "test_util.h"

#include "core/error.h"
#include "text/bpe.h"
#include "text/corpus_reader.h"
#include "text/jsonl.h"
#include "text/pretokenize.h"
#include "text/token_file.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

/* ---- the cut ------------------------------------------------------------- */

/* The pre-token ends of s[0..len), shifted by base, appended to ends[*n]. */
static void pretoken_ends(const uint8_t *s, size_t len, size_t base, size_t *ends, size_t *n)
{
    for (size_t pos = 0; pos < len;) {
        pos = tr_pretokenize_next(s, len, pos);
        ends[(*n)++] = base + pos;
    }
}

/* Random text from pieces that stress the pre-tokenizer at a newline: ASCII and
 * Unicode spaces, letters, digits, contractions, CJK, emoji and invalid bytes. */
static size_t random_text(uint8_t *s, size_t cap, uint64_t *state)
{
    /* clang-format off */
    static const char *atoms[] = {
        "\n", "\n", "\n", "\n\n", " ", "  ", "\t", "\r\n", "a", "word", "Word", "7", "42", "'s",
        "'ll", "'", "!", ".", "\xc2\xa0" /* NBSP */, "\xe3\x80\x80" /* ideographic space */,
        "\xe2\x80\xa8" /* line separator */, "\xe4\xb8\xad" /* CJK */,
        "\xf0\x9f\x98\x80" /* emoji */, "\xff" /* invalid */, "\xc3" /* truncated */,
        "\x80" /* stray continuation */, "\xef\xbb\xbf" /* BOM, a JS space */, "\x0b", "\x01"};
    /* clang-format on */
    size_t n = 0, natoms = sizeof atoms / sizeof atoms[0];
    for (;;) {
        *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
        const char *a = atoms[(*state >> 33) % natoms];
        size_t l = strlen(a);
        if (n + l > cap)
            return n;
        memcpy(s + n, a, l);
        n += l;
    }
}

/* For every buffer length L (a reader that has read L bytes so far) and start
 * `from`, a cut q = tr_pretokenize_cut(s, L, from) must lie in [from, L), follow a
 * newline, and split the pre-tokens of the whole text exactly: those of s[0..q)
 * then those of s[q..n). */
static void test_cut(void)
{
    enum { N = 160 };
    uint8_t s[N];
    size_t whole[N + 1], parts[N + 1], nw, np;
    uint64_t state = 12345;
    int cuts = 0, bad = 0;
    for (int trial = 0; trial < 400; trial++) {
        size_t n = random_text(s, N, &state);
        nw = 0;
        pretoken_ends(s, n, 0, whole, &nw);
        for (size_t L = 0; L <= n; L++)
            for (size_t from = 0; from <= L; from += 37) {
                size_t q = tr_pretokenize_cut(s, L, from);
                if (!q)
                    continue;
                cuts++;
                np = 0;
                pretoken_ends(s, q, 0, parts, &np);
                pretoken_ends(s + q, n - q, q, parts, &np);
                if (q < from || q >= L || q < 2 || s[q - 1] != '\n' || np != nw ||
                    memcmp(parts, whole, nw * sizeof *parts)) {
                    if (bad++ < 5)
                        fprintf(stderr, "trial %d: cut %zu of %zu bytes (buffer %zu, from %zu)\n",
                                trial, q, n, L, from);
                }
            }
    }
    CHECK(bad == 0, "%d of %d cuts change the pre-tokens", bad, cuts);
    CHECK(cuts > 10000, "only %d cuts found: the test would prove little", cuts);

    /* where none is allowed */
    const char *none[] = {"no newline at all",
                          "a \nb",
                          "a\n b",
                          "a\n\nb",
                          "a\xc2\xa0\nb",
                          "a\n\xe3\x80\x80"
                          "b",
                          "ab\n",
                          "\nab"};
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++)
        CHECK(tr_pretokenize_cut((const uint8_t *)none[i], strlen(none[i]), 0) == 0,
              "no cut in \"%s\"", none[i]);
    /* the latest one, and none before from */
    const char *two = "one\ntwo\nthree";
    CHECK(tr_pretokenize_cut((const uint8_t *)two, strlen(two), 0) == 8, "latest cut");
    CHECK(tr_pretokenize_cut((const uint8_t *)two, 7, 0) == 4, "cut in a shorter buffer");
    CHECK(tr_pretokenize_cut((const uint8_t *)two, strlen(two), 9) == 0, "none after from");
    /* a multi-byte character after the newline must be whole in the buffer */
    const char *cjk = "x\n\xe4\xb8\xad";
    CHECK(tr_pretokenize_cut((const uint8_t *)cjk, 4, 0) == 0 &&
              tr_pretokenize_cut((const uint8_t *)cjk, 5, 0) == 2,
          "a character cut by the buffer's end is not taken for a non-space");
}

/* ---- JSON lines ------------------------------------------------------------ */

static void test_jsonl(void)
{
    tr_json_buf out = {0}, key = {0};
    size_t at, replaced = 0;
    char msg[256];
    const char *ok = "{\"id\": 7, \"meta\": {\"text\": \"not this\", \"a\": [1, {\"b\": \"}\"}]},"
                     " \"url\": \"x\\\"y\", \"ok\": true, \"none\": null, \"f\": -1.5e3,"
                     " \"text\": \"caf\\u00e9\\n\\ud83d\\ude00 \\\"q\\\"\"}";
    CHECK(tr_jsonl_member(ok, strlen(ok), "text", &out, &key, &replaced, &at, msg, sizeof msg) ==
                  0 &&
              out.len == 14 && !memcmp(out.p, "caf\xc3\xa9\n\xf0\x9f\x98\x80 \"q\"", 14),
          "text member: %s (%zu bytes)", msg, out.len);
    const char *last = "{\"text\": \"first\", \"text\": \"second\"}";
    CHECK(tr_jsonl_member(last, strlen(last), "text", &out, &key, &replaced, &at, msg,
                          sizeof msg) == 0 &&
              !strcmp(out.p, "second"),
          "a repeated key: the last counts");
    const char *other = "{\"content\": \"x\"}";
    CHECK(tr_jsonl_member(other, strlen(other), "text", &out, &key, &replaced, &at, msg,
                          sizeof msg) == 1,
          "no such member");
    CHECK(tr_jsonl_member(other, strlen(other), "content", &out, &key, &replaced, &at, msg,
                          sizeof msg) == 0 &&
              !strcmp(out.p, "x"),
          "another field");
    const char *lone = "{\"text\": \"a\\ud800b\\udc00\"}";
    replaced = 0;
    CHECK(tr_jsonl_member(lone, strlen(lone), "text", &out, &key, &replaced, &at, msg,
                          sizeof msg) == 0 &&
              replaced == 2 &&
              !strcmp(out.p, "a\xef\xbf\xbd"
                             "b\xef\xbf\xbd"),
          "lone surrogates become U+FFFD: %zu", replaced);
    struct {
        const char *line, *want;
        size_t at;
    } bad[] = {
        {"[1, 2]", "expected '{'", 0},
        {"{\"text\": 5}", "member \"text\" is not a string", 9},
        {"{\"text\": \"a\" \"b\"}", "expected ',' or '}'", 13},
        {"{\"text\": \"abc", "unterminated string", 9},
        {"{\"a\": [1, 2}", "'}' closes '['", 11},
        {"{\"a\": [1, {\"b\": 2]}", "']' closes '{'", 17},
        {"{\"a\": [1, 2", "unterminated array", 6},
        {"{\"text\": \"x\"} tail", "trailing text", 14},
        {"{\"text\": \"a\\qb\"}", "unknown escape", 11},
        {"{\"text\": \"a\tb\"}", "control character", 11},
        {"{text: \"a\"}", "expected a string key", 1},
        {"{\"a\" 1}", "expected ':'", 5},
        {"{\"a\": }", "expected a value", 6},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = tr_jsonl_member(bad[i].line, strlen(bad[i].line), "text", &out, &key, &replaced,
                                 &at, msg, sizeof msg);
        CHECK(rc == -1 && strstr(msg, bad[i].want) && at == bad[i].at,
              "bad line #%zu %s: rc %d, byte %zu, \"%s\"", i, bad[i].line, rc, at, msg);
    }
    free(out.p);
    free(key.p);
}

/* ---- the corpus reader ----------------------------------------------------- */

static void write_file(const char *path, const char *text, size_t n, int gz)
{
    if (gz) {
        gzFile g = gzopen(path, "wb");
        if (!g || gzwrite(g, text, (unsigned)n) != (int)n || gzclose(g) != Z_OK)
            perror(path);
        return;
    }
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(text, 1, n, f) != n || fclose(f))
        perror(path);
}

/* Reads all pieces; returns their concatenation (malloc'ed) and counts. */
static char *read_all(char **files, int nfiles, size_t piece, int *pieces, int *doc_ends,
                      size_t *len, int *rc, char *err)
{
    tr_corpus_reader *r = tr_corpus_reader_open(files, nfiles, 0, piece);
    tr_corpus_piece p = {0};
    char *all = NULL;
    *pieces = *doc_ends = 0, *len = 0;
    while ((*rc = tr_corpus_reader_next(r, &p, err, 512)) == 0) {
        all = realloc(all, *len + p.len + 1);
        memcpy(all + *len, p.text, p.len);
        *len += p.len;
        (*pieces)++;
        *doc_ends += p.doc_end;
    }
    free(p.text);
    tr_corpus_reader_close(r);
    return all;
}

static void test_reader(const char *dir)
{
    enum { N = 200000 };
    char *text = malloc(N + 1), a[600], b[600], c[600], err[512];
    uint64_t state = 99;
    size_t n = random_text((uint8_t *)text, N, &state), len;
    int pieces, ends, rc;
    snprintf(a, sizeof a, "%s/a.txt", dir);
    snprintf(b, sizeof b, "%s/b.txt.gz", dir);
    snprintf(c, sizeof c, "%s/empty.txt", dir);
    write_file(a, text, n, 0);
    write_file(b, text, n, 1);
    write_file(c, "", 0, 0);
    char *files[] = {a, b, c};
    char *all = read_all(files, 3, 4096, &pieces, &ends, &len, &rc, err);
    CHECK(rc == -1 && len == 2 * n && !memcmp(all, text, n) && !memcmp(all + n, text, n),
          "text pieces put together are the files (plain and gzip): rc %d, %zu bytes", rc, len);
    CHECK(ends == 3 && pieces > 2 * (int)(n / 8192), "%d pieces, %d document ends", pieces, ends);
    free(all);

    /* JSON lines: pieces of whole lines, numbered */
    char lines[] = "{\"text\": \"a\"}\n{\"text\": \"b\"}\n\n{\"text\": \"c\"}";
    snprintf(a, sizeof a, "%s/x.jsonl", dir);
    write_file(a, lines, strlen(lines), 0);
    tr_corpus_reader *r = tr_corpus_reader_open(files, 1, 1, 16);
    tr_corpus_piece p = {0};
    long first[8];
    int k = 0;
    while (k < 8 && tr_corpus_reader_next(r, &p, err, sizeof err) == 0)
        first[k++] = p.first_line;
    CHECK(k == 3 && first[0] == 1 && first[1] == 2 && first[2] == 4,
          "pieces of 16 bytes cut after their last newline, numbered: %d pieces", k);
    tr_corpus_reader_close(r);
    free(p.text);

    /* errors name the file */
    snprintf(c, sizeof c, "%s/missing.txt", dir);
    files[0] = c;
    all = read_all(files, 1, 4096, &pieces, &ends, &len, &rc, err);
    CHECK(rc == TR_EXIT_NOINPUT && strstr(err, c), "missing file: %d %s", rc, err);
    free(all);
    FILE *f = fopen(b, "rb"), *g;
    char *gzbytes = malloc(N + 64);
    size_t gzn = fread(gzbytes, 1, N + 64, f);
    fclose(f);
    snprintf(c, sizeof c, "%s/truncated.txt.gz", dir);
    g = fopen(c, "wb");
    fwrite(gzbytes, 1, gzn / 2, g);
    fclose(g);
    all = read_all(files, 1, 4096, &pieces, &ends, &len, &rc, err);
    CHECK(rc == TR_EXIT_DATA && strstr(err, c), "truncated gzip file: %d %s", rc, err);
    free(all);
    gzbytes[gzn / 2] ^= 0x55; /* a damaged deflate stream */
    g = fopen(c, "wb");
    fwrite(gzbytes, 1, gzn, g);
    fclose(g);
    all = read_all(files, 1, 4096, &pieces, &ends, &len, &rc, err);
    CHECK(rc == TR_EXIT_DATA && strstr(err, c), "corrupt gzip file: %d %s", rc, err);
    free(all);
    free(gzbytes);
    free(text);
}

/* ---- the token file as a stream -------------------------------------------- */

static void test_writer(const char *dir)
{
    char path[600], tail[600], tmp[700], err[1024];
    snprintf(path, sizeof path, "%s/s.train.tok", dir);
    snprintf(tail, sizeof tail, "%s/s.val.tok", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    enum { N = 1500000 }; /* more than the writer's buffer of uint16 tokens */
    uint32_t *ids = malloc(N * sizeof *ids), *back = malloc(N * sizeof *back);
    for (uint32_t i = 0; i < N; i++)
        ids[i] = (i * 2654435761u) % 50257;
    int rc;
    tr_token_writer *w = tr_token_writer_open(path, 50257, &rc, err, sizeof err);
    CHECK(w != NULL, "open: %s", err);
    if (!w)
        return;
    for (size_t at = 0; at < N; at += 99991)
        CHECK(tr_token_writer_append(w, ids + at, N - at < 99991 ? N - at : 99991, err,
                                     sizeof err) == 0,
              "append: %s", err);
    CHECK(access(path, F_OK) != 0, "no file under the name before the close");
    CHECK(tr_token_writer_count(w) == N, "count");
    uint64_t keep = 1234567;
    CHECK(tr_token_writer_split(w, keep, tail, err, sizeof err) == 0, "split: %s", err);
    CHECK(tr_token_writer_close(w, err, sizeof err) == 0, "close: %s", err);
    CHECK(access(tmp, F_OK) != 0, "no .tmp left");
    tr_token_file *h = tr_token_file_open(path, &rc, err, sizeof err), *t;
    t = tr_token_file_open(tail, &rc, err, sizeof err);
    CHECK(h && t && tr_token_file_count(h) == keep && tr_token_file_count(t) == N - keep,
          "the two files' counts");
    if (h && t) {
        CHECK(tr_token_file_read(h, 0, keep, back, err, sizeof err) == 0 &&
                  tr_token_file_read(t, 0, N - keep, back + keep, err, sizeof err) == 0 &&
                  !memcmp(back, ids, N * sizeof *ids),
              "the stream's tokens, split at keep");
    }
    tr_token_file_close(h);
    tr_token_file_close(t);

    /* an id out of range: refused; abort leaves nothing */
    w = tr_token_writer_open(path, 10, &rc, err, sizeof err);
    uint32_t eleven = 11;
    CHECK(w && tr_token_writer_append(w, &eleven, 1, err, sizeof err) == TR_EXIT_DATA &&
              strstr(err, "not below vocab_size 10"),
          "id 11 of 10: %s", err);
    tr_token_writer_abort(w);
    CHECK(access(tmp, F_OK) != 0, "abort removes the .tmp");
    snprintf(tmp, sizeof tmp, "%s/no/such/dir/x.tok", dir);
    w = tr_token_writer_open(tmp, 10, &rc, err, sizeof err);
    CHECK(!w && rc == TR_EXIT_IOERR && strstr(err, "cannot create"), "unwritable: %s", err);
    free(ids);
    free(back);
}

/* ---- clones (needs GPT-2's files) ------------------------------------------ */

static void test_clone(void)
{
    char enc[600], merges[600], err[1024];
    const char *data = getenv("TRAINER_DATA_DIR"), *src = getenv("TRAINER_SOURCE_DIR");
    snprintf(enc, sizeof enc, "%s/%sgpt2/encoder.json",
             data  ? data
             : src ? src
                   : ".",
             data ? "" : "data/");
    snprintf(merges, sizeof merges, "%s/%sgpt2/vocab.bpe",
             data  ? data
             : src ? src
                   : ".",
             data ? "" : "data/");
    if (access(enc, R_OK) || access(merges, R_OK)) {
        printf("skipping the clone check: %s missing (scripts/fetch_gpt2_bpe.sh)\n", enc);
        return;
    }
    tr_bpe *b = tr_bpe_load(enc, merges, err, sizeof err), *c = b ? tr_bpe_clone(b) : NULL;
    CHECK(b && c, "load and clone: %s", err);
    if (!c)
        return;
    const char *text =
        "The clone's cache is its own; its vocabulary is the parent's. 1234 \xe4\xb8\xad";
    uint32_t *x, *y;
    size_t nx, ny;
    for (int pass = 0; pass < 2; pass++) {
        CHECK(tr_bpe_encode(b, text, strlen(text), &x, &nx) == 0 &&
                  tr_bpe_encode(c, text, strlen(text), &y, &ny) == 0 && nx == ny &&
                  !memcmp(x, y, nx * sizeof *x),
              "the clone encodes as the parent (pass %d)", pass);
        free(x);
        free(y);
    }
    uint32_t e1, e2;
    CHECK(tr_bpe_eot(c, &e2) == 0 && tr_bpe_eot(b, &e1) == 0 && e1 == e2, "end-of-text");
    tr_bpe_free(c);
    tr_bpe_free(b);
}

int main(void)
{
    char dir[] = "/tmp/test_corpus.XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_cut();
    test_jsonl();
    test_reader(dir);
    test_writer(dir);
    test_clone();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return tr_test_finish();
}
