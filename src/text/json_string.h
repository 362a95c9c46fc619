/* json_string.h: JSON string literals decoded to UTF-8, shared by the encoder.json
 * parser (json_object.c) and the JSON-lines corpus reader (jsonl.c).
 *
 * All escapes are decoded; a \uXXXX surrogate pair becomes one code point. A lone
 * surrogate is an error in strict mode (encoder.json must be exact) and becomes
 * U+FFFD in lenient mode (corpora scraped from the web hold some, and Python's json
 * module accepts them). Raw bytes other than control characters are copied as they
 * are, invalid UTF-8 included (the tokenizer keeps such bytes). */
#ifndef TR_JSON_STRING_H
#define TR_JSON_STRING_H

#include <stddef.h>

/* A growable byte buffer; zero-initialise, free p when done. */
typedef struct tr_json_buf {
    char *p;
    size_t len, cap;
} tr_json_buf;

enum { TR_JSON_STRICT = 0, TR_JSON_LENIENT = 1 };

/* s[*pos] must be '"'. Appends the decoded string to out (kept NUL-terminated; it
 * may itself contain NUL) and moves *pos past the closing quote; *replaced counts
 * the lone surrogates replaced (lenient mode; may be NULL). Returns 0, or -1 with
 * *at the offending byte's offset and msg saying what is wrong. */
int tr_json_string(const char *s, size_t len, size_t *pos, tr_json_buf *out, int mode,
                   size_t *replaced, size_t *at, char *msg, size_t msglen);

/* Appends n bytes to b (NUL-terminated). Returns 0, or -1 when out of memory. */
int tr_json_buf_put(tr_json_buf *b, const char *bytes, size_t n);

#endif
