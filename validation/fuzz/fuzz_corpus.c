/* fuzz_corpus.c: what the tokenize tool reads a corpus with, on any bytes:
 * a JSON-lines record's text member (text/jsonl.c, text/json_string.c) and the
 * cut that lets a text be encoded in pieces (tr_pretokenize_cut).
 *
 * Checked: the record's result is 0 (its text NUL-terminated at its length), 1 (no
 * such member) or -1 with a message and an offset inside the line; every cut of
 * the bytes, as a reader holding any prefix of them would take it, splits their
 * pre-tokens exactly (those of the part before it, then those after it). */
#include "fuzz.h"

#include "text/jsonl.h"
#include "text/pretokenize.h"

#include <string.h>

/* The pre-token ends of s[0..len) shifted by base, into ends[*n]. */
static void ends_of(const uint8_t *s, size_t len, size_t base, size_t *ends, size_t *n)
{
    for (size_t pos = 0; pos < len;) {
        size_t next = tr_pretokenize_next(s, len, pos);
        FUZZ_CHECK(next > pos && next <= len, "pre-token [%zu, %zu) of %zu", pos, next, len);
        ends[(*n)++] = base + (pos = next);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tr_json_buf out = {0}, key = {0};
    size_t at = 0, replaced = 0;
    char msg[256];
    msg[0] = '\0';
    int rc = tr_jsonl_member((const char *)data, size, "text", &out, &key, &replaced, &at, msg,
                             sizeof msg);
    FUZZ_CHECK(rc >= -1 && rc <= 1, "returned %d", rc);
    if (rc == 0)
        FUZZ_CHECK(out.p && out.p[out.len] == '\0', "text of %zu bytes not terminated", out.len);
    if (rc < 0) {
        fuzz_check_message(msg, sizeof msg, "jsonl");
        FUZZ_CHECK(msg[0] && at <= size, "error at byte %zu of %zu: \"%s\"", at, size, msg);
    }
    free(out.p);
    free(key.p);

    if (size > 4096) /* the cut check is quadratic in the prefixes it tries */
        return 0;
    size_t *whole = malloc((size + 1) * sizeof *whole), *parts = malloc((size + 1) * sizeof *parts);
    size_t nw = 0;
    ends_of(data, size, 0, whole, &nw);
    for (size_t len = 0; len <= size; len += 1 + size / 64) {
        size_t q = tr_pretokenize_cut(data, len, 0), np = 0;
        if (!q)
            continue;
        FUZZ_CHECK(q >= 2 && q < len && data[q - 1] == '\n', "cut %zu of a %zu-byte buffer", q,
                   len);
        ends_of(data, q, 0, parts, &np);
        ends_of(data + q, size - q, q, parts, &np);
        FUZZ_CHECK(np == nw && !memcmp(parts, whole, nw * sizeof *whole),
                   "the cut at %zu (buffer %zu of %zu bytes) changes the pre-tokens", q, len, size);
    }
    free(whole);
    free(parts);
    return 0;
}
