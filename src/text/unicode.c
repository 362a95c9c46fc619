/* unicode.c: UTF-8 decoding and the \s, \p{L}, \p{N} classes of GPT-2's regex.
 * Letters and numbers are a binary search over the generated range tables; ASCII
 * is answered directly because it is nearly all of English text. */
#include "text/unicode.h"

static bool in_ranges(const tr_unicode_range *r, size_t n, uint32_t cp)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp < r[mid].lo)
            hi = mid;
        else if (cp > r[mid].hi)
            lo = mid + 1;
        else
            return true;
    }
    return false;
}

bool tr_unicode_is_letter(uint32_t cp)
{
    if (cp < 0x80)
        return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
    return in_ranges(tr_unicode_letter_ranges, tr_unicode_letter_ranges_count, cp);
}

bool tr_unicode_is_number(uint32_t cp)
{
    if (cp < 0x80)
        return cp >= '0' && cp <= '9';
    return in_ranges(tr_unicode_number_ranges, tr_unicode_number_ranges_count, cp);
}

/* ECMAScript \s: WhiteSpace (TAB, VT, FF, ZWNBSP U+FEFF, and the Zs category) and
 * LineTerminator (LF, CR, U+2028, U+2029). Zs has been stable since Unicode 6.3
 * (when U+180E left it), so it is listed here rather than generated. */
bool tr_unicode_is_js_space(uint32_t cp)
{
    if (cp < 0x80)
        return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
    switch (cp) {
    case 0x00A0: case 0x1680: case 0x2028: case 0x2029: case 0x202F:
    case 0x205F: case 0x3000: case 0xFEFF:
        return true;
    default:
        return cp >= 0x2000 && cp <= 0x200A;
    }
}

size_t tr_utf8_decode(const uint8_t *s, size_t len, uint32_t *cp)
{
    uint8_t b0 = s[0];
    if (b0 < 0x80) {
        *cp = b0;
        return 1;
    }
    size_t n;
    uint32_t v, min;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        n = 2, v = b0 & 0x1F, min = 0x80;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        n = 3, v = b0 & 0x0F, min = 0x800;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        n = 4, v = b0 & 0x07, min = 0x10000;
    } else {
        *cp = TR_UNICODE_INVALID;
        return 1;
    }
    if (n > len) {
        *cp = TR_UNICODE_INVALID;
        return 1;
    }
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) {
            *cp = TR_UNICODE_INVALID;
            return 1;
        }
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) {
        *cp = TR_UNICODE_INVALID;
        return 1;
    }
    *cp = v;
    return n;
}
