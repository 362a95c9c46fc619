/* json_object.c: the strict string->integer JSON object parser (see json_object.h).
 * Recursive descent over one fixed shape; keys are decoded by json_string.c into a
 * buffer that grows as needed, so keys of any length are accepted. */
#include "text/json_object.h"

#include "text/json_string.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct parser {
    const char *s, *name;
    size_t len, pos;
    tr_json_buf key;
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

static int parse_string(parser *p)
{
    char msg[200];
    size_t at = p->pos;
    p->key.len = 0;
    if (p->pos >= p->len || p->s[p->pos] != '"')
        return fail_at(p, p->pos, "expected a string key");
    if (tr_json_string(p->s, p->len, &p->pos, &p->key, TR_JSON_STRICT, NULL, &at, msg, sizeof msg))
        return fail_at(p, at, "%s", msg);
    return 0;
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
            if (fn(ctx, p.key.p, p.key.len, v, key_at, err, errlen))
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
    free(p.key.p);
    return rc;
}
