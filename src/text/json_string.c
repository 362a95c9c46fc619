/* json_string.c: JSON string literals to UTF-8 (see json_string.h). Runs of plain
 * bytes are copied at once, so a corpus line decodes at memcpy speed between its
 * escapes. */
#include "text/json_string.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tr_json_buf_put(tr_json_buf *b, const char *bytes, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 64;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p)
            return -1;
        b->p = p, b->cap = cap;
    }
    memcpy(b->p + b->len, bytes, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

typedef struct lexer {
    const char *s;
    size_t len, pos;
    size_t *at;
    char *msg;
    size_t msglen;
} lexer;

__attribute__((format(printf, 3, 4))) static int fail(lexer *x, size_t at, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->msg, x->msglen, fmt, ap);
    va_end(ap);
    *x->at = at;
    return -1;
}

static int put_code_point(lexer *x, tr_json_buf *out, uint32_t cp)
{
    char b[4];
    size_t n;
    if (cp < 0x80) {
        b[0] = (char)cp, n = 1;
    } else if (cp < 0x800) {
        b[0] = (char)(0xC0 | cp >> 6), b[1] = (char)(0x80 | (cp & 0x3F)), n = 2;
    } else if (cp < 0x10000) {
        b[0] = (char)(0xE0 | cp >> 12), b[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        b[2] = (char)(0x80 | (cp & 0x3F)), n = 3;
    } else {
        b[0] = (char)(0xF0 | cp >> 18), b[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        b[2] = (char)(0x80 | ((cp >> 6) & 0x3F)), b[3] = (char)(0x80 | (cp & 0x3F)), n = 4;
    }
    return tr_json_buf_put(out, b, n) ? fail(x, x->pos, "out of memory") : 0;
}

static int hex4(lexer *x, uint32_t *out)
{
    if (x->len - x->pos < 4)
        return fail(x, x->pos, "truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        char c = x->s[x->pos + (size_t)i];
        /* clang-format off */
        int d = c >= '0' && c <= '9' ? c - '0'
              : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        /* clang-format on */
        if (d < 0)
            return fail(x, x->pos + (size_t)i, "bad hex digit '%c' in \\u escape", c);
        v = v << 4 | (uint32_t)d;
    }
    x->pos += 4;
    *out = v;
    return 0;
}

/* After "\u": one escape, or a high surrogate joined with its "\uDCxx" partner. */
static int unicode_escape(lexer *x, tr_json_buf *out, size_t at, int mode, size_t *replaced)
{
    uint32_t cp, lo;
    if (hex4(x, &cp))
        return -1;
    int lone = cp >= 0xDC00 && cp <= 0xDFFF;
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        if (x->len - x->pos >= 6 && x->s[x->pos] == '\\' && x->s[x->pos + 1] == 'u') {
            size_t save = x->pos;
            x->pos += 2;
            if (hex4(x, &lo))
                return -1;
            if (lo >= 0xDC00 && lo <= 0xDFFF)
                return put_code_point(x, out, 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00));
            if (mode == TR_JSON_STRICT)
                return fail(x, at, "high surrogate \\u%04X followed by \\u%04X", (unsigned)cp,
                            (unsigned)lo);
            x->pos = save; /* the next escape is decoded on its own */
        } else if (mode == TR_JSON_STRICT) {
            return fail(x, at, "high surrogate \\u%04X not followed by a low one", (unsigned)cp);
        }
        lone = 1;
    }
    if (lone) {
        if (mode == TR_JSON_STRICT)
            return fail(x, at, "lone low surrogate \\u%04X", (unsigned)cp);
        if (replaced)
            ++*replaced;
        cp = 0xFFFD;
    }
    return put_code_point(x, out, cp);
}

int tr_json_string(const char *s, size_t len, size_t *pos, tr_json_buf *out, int mode,
                   size_t *replaced, size_t *at, char *msg, size_t msglen)
{
    lexer x = {s, len, *pos, at, msg, msglen};
    if (x.pos >= len || s[x.pos] != '"')
        return fail(&x, x.pos, "expected a string");
    size_t open = x.pos++;
    if (tr_json_buf_put(out, "", 0))
        return fail(&x, x.pos, "out of memory");
    for (;;) {
        size_t run = x.pos; /* plain bytes up to the next quote, backslash or control */
        while (x.pos < len) {
            unsigned char c = (unsigned char)s[x.pos];
            if (c == '"' || c == '\\' || c < 0x20)
                break;
            x.pos++;
        }
        if (x.pos > run && tr_json_buf_put(out, s + run, x.pos - run))
            return fail(&x, run, "out of memory");
        if (x.pos >= len)
            return fail(&x, open, "unterminated string");
        size_t esc = x.pos;
        unsigned char c = (unsigned char)s[x.pos++];
        if (c == '"') {
            *pos = x.pos;
            return 0;
        }
        if (c < 0x20)
            return fail(&x, esc, "control character 0x%02X in a string", c);
        if (x.pos >= len)
            return fail(&x, esc, "unterminated escape");
        char e = s[x.pos++], o;
        /* clang-format off */
        switch (e) {
        case '"': o = '"'; break;
        case '\\': o = '\\'; break;
        case '/': o = '/'; break;
        case 'b': o = '\b'; break;
        case 'f': o = '\f'; break;
        case 'n': o = '\n'; break;
        case 'r': o = '\r'; break;
        case 't': o = '\t'; break;
        case 'u':
            if (unicode_escape(&x, out, esc, mode, replaced))
                return -1;
            continue;
        default:
            return fail(&x, esc, "unknown escape \\%c", e);
        }
        /* clang-format on */
        if (tr_json_buf_put(out, &o, 1))
            return fail(&x, esc, "out of memory");
    }
}
