/* unicode.h: the character classes of GPT-2's pre-tokenizer regex, with JavaScript
 * semantics: \s is ECMAScript WhiteSpace or LineTerminator, \p{L} and \p{N} are the
 * Unicode general categories L and N (tables generated into unicode_tables.c).
 * The tables follow Debian's Python (Unicode 14.0); a JavaScript engine with newer
 * Unicode (Node 20 here: 17.0) also calls letters those assigned since then, so text
 * in scripts added after 14.0 may pre-tokenize differently there. */
#ifndef TR_UNICODE_H
#define TR_UNICODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct tr_unicode_range {
    uint32_t lo, hi; /* inclusive */
} tr_unicode_range;

/* Generated tables (unicode_tables.c). */
extern const char tr_unicode_version[];
extern const tr_unicode_range tr_unicode_letter_ranges[];
extern const size_t tr_unicode_letter_ranges_count;
extern const tr_unicode_range tr_unicode_number_ranges[];
extern const size_t tr_unicode_number_ranges_count;

bool tr_unicode_is_letter(uint32_t cp);
bool tr_unicode_is_number(uint32_t cp);
bool tr_unicode_is_js_space(uint32_t cp);

/* Decodes one code point at s[0..len). Returns its length in bytes (1..4). A byte
 * that does not start a valid, shortest-form sequence (overlong, surrogate, beyond
 * U+10FFFF, truncated) is returned alone with *cp = TR_UNICODE_INVALID, so callers
 * can keep the raw byte. len must be > 0. */
#define TR_UNICODE_INVALID 0xFFFFFFFFu
size_t tr_utf8_decode(const uint8_t *s, size_t len, uint32_t *cp);

#endif
