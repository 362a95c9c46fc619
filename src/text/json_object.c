/* json_object.c: the strict string->integer JSON object parser (see json_object.h).
 * Recursive descent over one fixed shape; the key buffer grows as needed, so keys
 * of any length are accepted. */
#include "text/json_object.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct parser {
    const char *s, *name;
    size_t len, pos;
    char *key;
    size_t key_len, key_cap;
    char *err;
    size_t errlen;
} parser;

__attribute__((format(printf, 3, 4))) static int fail_at(parser *p, size_t at, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(p->err, p->errlen, "%s: byte %zu: %s", p->name, at, msg);
    return -1;
}

static void skip_ws(parser *p)
{
    while (p->pos < p->len) {
        char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
            break;
        p->pos++;
    }
}

static int key_put(parser *p, const char *bytes, size_t n)
{
    if (p->key_len + n + 1 > p->key_cap) {
        size_t cap = p->key_cap ? p->key_cap * 2 : 64;
        while (cap < p->key_len + n + 1)
            cap *= 2;
        char *k = realloc(p->key, cap);
        if (!k)
            return fail_at(p, p->pos, "out of memory");
        p->key = k, p->key_cap = cap;
    }
    memcpy(p->key + p->key_len, bytes, n);
    p->key_len += n;
    p->key[p->key_len] = '\0';
    return 0;
}

static int put_code_point(parser *p, uint32_t cp)
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
    return key_put(p, b, n);
}

static int hex4(parser *p, uint32_t *out)
{
    if (p->len - p->pos < 4)
        return fail_at(p, p->pos, "truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p->s[p->pos + (size_t)i];
        int d = c >= '0' && c <= '9' ? c - '0'
              : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return fail_at(p, p->pos + (size_t)i, "bad hex digit '%c' in \\u escape", c);
        v = v << 4 | (uint32_t)d;
    }
    p->pos += 4;
    *out = v;
    return 0;
}

/* After "\u": one escape, or a high surrogate joined with its "\uDCxx" partner. */
static int unicode_escape(parser *p, size_t at)
{
    uint32_t cp, lo;
    if (hex4(p, &cp))
        return -1;
    if (cp >= 0xDC00 && cp <= 0xDFFF)
        return fail_at(p, at, "lone low surrogate \\u%04X", (unsigned)cp);
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        if (p->len - p->pos < 2 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u')
            return fail_at(p, at, "high surrogate \\u%04X not followed by a low one", (unsigned)cp);
        p->pos += 2;
        if (hex4(p, &lo))
            return -1;
        if (lo < 0xDC00 || lo > 0xDFFF)
            return fail_at(p, at, "high surrogate \\u%04X followed by \\u%04X", (unsigned)cp,
                           (unsigned)lo);
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    }
    return put_code_point(p, cp);
}

static int parse_string(parser *p)
{
    p->key_len = 0;
    if (key_put(p, "", 0))
        return -1;
    if (p->pos >= p->len || p->s[p->pos] != '"')
        return fail_at(p, p->pos, "expected a string key");
    p->pos++;
    for (;;) {
        if (p->pos >= p->len)
            return fail_at(p, p->pos, "unterminated string");
        size_t at = p->pos;
        unsigned char c = (unsigned char)p->s[p->pos++];
        if (c == '"')
            return 0;
        if (c < 0x20)
            return fail_at(p, at, "control character 0x%02X in a string", c);
        if (c != '\\') {
            if (key_put(p, (const char *)&c, 1))
                return -1;
            continue;
        }
        if (p->pos >= p->len)
            return fail_at(p, at, "unterminated escape");
        char e = p->s[p->pos++], out;
        switch (e) {
        case '"': out = '"'; break;
        case '\\': out = '\\'; break;
        case '/': out = '/'; break;
        case 'b': out = '\b'; break;
        case 'f': out = '\f'; break;
        case 'n': out = '\n'; break;
        case 'r': out = '\r'; break;
        case 't': out = '\t'; break;
        case 'u':
            if (unicode_escape(p, at))
                return -1;
            continue;
        default:
            return fail_at(p, at, "unknown escape \\%c", e);
        }
        if (key_put(p, &out, 1))
            return -1;
    }
}

static int parse_integer(parser *p, int64_t *out)
{
    size_t at = p->pos;
    int neg = 0;
    if (p->pos < p->len && p->s[p->pos] == '-')
        neg = 1, p->pos++;
    size_t digits = p->pos;
    int64_t v = 0;
    while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
        if (v > (INT64_MAX - 9) / 10)
            return fail_at(p, at, "integer too large");
        v = v * 10 + (p->s[p->pos++] - '0');
    }
    if (p->pos == digits)
        return fail_at(p, at, "expected an integer value");
    if (p->pos - digits > 1 && p->s[digits] == '0')
        return fail_at(p, at, "leading zero in an integer");
    if (p->pos < p->len && (p->s[p->pos] == '.' || p->s[p->pos] == 'e' || p->s[p->pos] == 'E'))
        return fail_at(p, at, "expected an integer value, found a fraction or exponent");
    *out = neg ? -v : v;
    return 0;
}

int tr_json_object_parse(const char *text, size_t len, const char *name, tr_json_member_fn fn,
                         void *ctx, char *err, size_t errlen)
{
    parser p = {.s = text, .name = name, .len = len, .err = err, .errlen = errlen};
    int rc = -1;
    skip_ws(&p);
    if (p.pos >= p.len || p.s[p.pos] != '{') {
        fail_at(&p, p.pos, "expected '{' (the file must hold one JSON object)");
        goto out;
    }
    p.pos++;
    skip_ws(&p);
    if (p.pos < p.len && p.s[p.pos] == '}') {
        p.pos++;
    } else {
        for (;;) {
            skip_ws(&p);
            size_t key_at = p.pos;
            int64_t v = 0;
            if (parse_string(&p))
                goto out;
            skip_ws(&p);
            if (p.pos >= p.len || p.s[p.pos] != ':') {
                fail_at(&p, p.pos, "expected ':' after a key");
                goto out;
            }
            p.pos++;
            skip_ws(&p);
            if (parse_integer(&p, &v))
                goto out;
            if (fn(ctx, p.key, p.key_len, v, key_at, err, errlen))
                goto out;
            skip_ws(&p);
            if (p.pos < p.len && p.s[p.pos] == ',') {
                p.pos++;
                continue;
            }
            if (p.pos < p.len && p.s[p.pos] == '}') {
                p.pos++;
                break;
            }
            fail_at(&p, p.pos, "expected ',' or '}'");
            goto out;
        }
    }
    skip_ws(&p);
    if (p.pos != p.len) {
        fail_at(&p, p.pos, "trailing text after the object");
        goto out;
    }
    rc = 0;
out:
    free(p.key);
    return rc;
}
