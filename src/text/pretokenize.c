/* pretokenize.c: GPT-2's pre-tokenizer regex as a hand-written scanner.
 *
 * Every code point falls in exactly one class: space (\s), letter, number or other,
 * so the alternatives reduce to: a contraction; an optional ' ' then a run of one
 * non-space class; or a whitespace run. The regex's \s+(?!\S) backtracks one code
 * point off a whitespace run that is followed by a non-space, leaving that last space
 * to prefix the next word (" world"); a single space before a non-space is matched
 * by the plain \s+ instead. */
#include "text/pretokenize.h"

#include "text/unicode.h"

#include <string.h>

enum { C_SPACE, C_LETTER, C_NUMBER, C_OTHER };

static int class_at(const uint8_t *s, size_t len, size_t pos, size_t *n)
{
    uint32_t cp;
    *n = tr_utf8_decode(s + pos, len - pos, &cp);
    if (cp == TR_UNICODE_INVALID)
        return C_OTHER; /* raw byte, classed like U+FFFD */
    if (tr_unicode_is_js_space(cp))
        return C_SPACE;
    if (tr_unicode_is_letter(cp))
        return C_LETTER;
    if (tr_unicode_is_number(cp))
        return C_NUMBER;
    return C_OTHER;
}

/* 's 't 'm 'd (2 bytes) or 're 've 'll (3 bytes); 0 when none. Case-sensitive,
 * as in GPT-2. */
static size_t contraction(const uint8_t *s, size_t len, size_t pos)
{
    if (s[pos] != '\'' || pos + 1 >= len)
        return 0;
    uint8_t a = s[pos + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd')
        return 2;
    if (pos + 2 < len) {
        uint8_t b = s[pos + 2];
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
            return 3;
    }
    return 0;
}

static size_t run_end(const uint8_t *s, size_t len, size_t pos, int cls)
{
    size_t n;
    while (pos < len && class_at(s, len, pos, &n) == cls)
        pos += n;
    return pos;
}

size_t tr_pretokenize_next(const uint8_t *s, size_t len, size_t pos)
{
    size_t c = contraction(s, len, pos);
    if (c)
        return pos + c;
    size_t n0, n1;
    int c0 = class_at(s, len, pos, &n0);
    if (s[pos] == ' ' && pos + 1 < len) {
        int c1 = class_at(s, len, pos + 1, &n1);
        if (c1 != C_SPACE)
            return run_end(s, len, pos + 1, c1); /* " ?" then a run */
    }
    if (c0 != C_SPACE)
        return run_end(s, len, pos, c0);
    /* Whitespace run; remember where its last code point starts. */
    size_t end = pos, last = pos, count = 0, n;
    while (end < len && class_at(s, len, end, &n) == C_SPACE) {
        last = end;
        end += n;
        count++;
    }
    if (end < len && count >= 2)
        return last; /* \s+(?!\S): leave the last space for the next word */
    return end;
}

/* The code point ending just before s[end] is wholly in s[0..end) and not a space. */
static int nonspace_ends_at(const uint8_t *s, size_t end)
{
    size_t i = end - 1;
    if (s[i] < 0x80)
        return s[i] > 0x20 && s[i] < 0x7F;
    for (int k = 0; k < 3 && i > 0 && (s[i] & 0xC0) == 0x80; k++)
        i--;
    uint32_t cp;
    size_t n = tr_utf8_decode(s + i, end - i, &cp);
    return cp != TR_UNICODE_INVALID && i + n == end && !tr_unicode_is_js_space(cp);
}

/* The code point starting at s[pos] is wholly in s[0..len) and not a space. */
static int nonspace_starts_at(const uint8_t *s, size_t len, size_t pos)
{
    if (s[pos] < 0x80)
        return s[pos] > 0x20 && s[pos] < 0x7F;
    uint32_t cp;
    tr_utf8_decode(s + pos, len - pos, &cp);
    return cp != TR_UNICODE_INVALID && !tr_unicode_is_js_space(cp);
}

size_t tr_pretokenize_cut(const uint8_t *s, size_t len, size_t from)
{
    if (from < 2)
        from = 2;
    if (len <= from)
        return 0;
    /* newlines at j in [from - 1, end), latest first; q = j + 1 < len */
    for (size_t end = len - 1; end > from - 1;) {
        const uint8_t *nl = memrchr(s + from - 1, '\n', end - (from - 1));
        if (!nl)
            return 0;
        size_t j = (size_t)(nl - s);
        if (nonspace_ends_at(s, j) && nonspace_starts_at(s, len, j + 1))
            return j + 1;
        end = j;
    }
    return 0;
}
