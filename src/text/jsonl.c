/* jsonl.c: the text member of a JSON-lines record (see jsonl.h). */
#include "text/jsonl.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef struct scan {
    const char *s;
    size_t len, pos;
    size_t *at;
    char *msg;
    size_t msglen;
} scan;

__attribute__((format(printf, 3, 4))) static int fail(scan *x, size_t at, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->msg, x->msglen, fmt, ap);
    va_end(ap);
    *x->at = at;
    return -1;
}

static void skip_ws(scan *x)
{
    while (x->pos < x->len && (x->s[x->pos] == ' ' || x->s[x->pos] == '\t' ||
                               x->s[x->pos] == '\n' || x->s[x->pos] == '\r'))
        x->pos++;
}

/* Past the closing quote of the string at x->pos (a '"'), escapes not decoded. */
static int skip_string(scan *x)
{
    size_t at = x->pos++;
    while (x->pos < x->len) {
        char c = x->s[x->pos++];
        if (c == '"')
            return 0;
        if (c == '\\')
            x->pos++;
    }
    return fail(x, at, "unterminated string");
}

/* Past one value: a string, or a nested object or array by its brackets (strings
 * inside skipped whole), or a number or literal up to the next delimiter. */
static int skip_value(scan *x)
{
    size_t at = x->pos;
    if (x->pos >= x->len)
        return fail(x, at, "expected a value");
    char c = x->s[x->pos];
    if (c == '"')
        return skip_string(x);
    if (c == '{' || c == '[') {
        char open[256]; /* the brackets not yet closed */
        size_t depth = 0;
        while (x->pos < x->len) {
            c = x->s[x->pos];
            if (c == '"') {
                if (skip_string(x))
                    return -1;
                continue;
            }
            if (c == '{' || c == '[') {
                if (depth == sizeof open)
                    return fail(x, x->pos, "nested deeper than %zu", sizeof open);
                open[depth++] = c;
            } else if (c == '}' || c == ']') {
                char want = open[depth - 1] == '{' ? '}' : ']';
                if (c != want)
                    return fail(x, x->pos, "'%c' closes '%c'", c, open[depth - 1]);
                if (--depth == 0) {
                    x->pos++;
                    return 0;
                }
            }
            x->pos++;
        }
        return fail(x, at, "unterminated %s", x->s[at] == '{' ? "object" : "array");
    }
    while (x->pos < x->len && !strchr(",}] \t\r\n", x->s[x->pos]))
        x->pos++;
    return x->pos > at ? 0 : fail(x, at, "expected a value");
}

int tr_jsonl_member(const char *line, size_t len, const char *field, tr_json_buf *out,
                    tr_json_buf *key, size_t *replaced, size_t *at, char *msg, size_t msglen)
{
    scan x = {line, len, 0, at, msg, msglen};
    size_t flen = strlen(field);
    int found = 0;
    skip_ws(&x);
    if (x.pos >= len || line[x.pos] != '{')
        return fail(&x, x.pos, "expected '{' (each line must hold one JSON object)");
    x.pos++;
    skip_ws(&x);
    if (x.pos < len && line[x.pos] == '}') {
        x.pos++;
    } else {
        for (;;) {
            skip_ws(&x);
            if (x.pos >= len || line[x.pos] != '"')
                return fail(&x, x.pos, "expected a string key");
            key->len = 0;
            if (tr_json_string(line, len, &x.pos, key, TR_JSON_LENIENT, NULL, at, msg, msglen))
                return -1;
            skip_ws(&x);
            if (x.pos >= len || line[x.pos] != ':')
                return fail(&x, x.pos, "expected ':' after a key");
            x.pos++;
            skip_ws(&x);
            if (key->len == flen && memcmp(key->p, field, flen) == 0) {
                if (x.pos >= len || line[x.pos] != '"')
                    return fail(&x, x.pos, "member \"%s\" is not a string", field);
                out->len = 0;
                if (tr_json_string(line, len, &x.pos, out, TR_JSON_LENIENT, replaced, at, msg,
                                   msglen))
                    return -1;
                found = 1;
            } else if (skip_value(&x)) {
                return -1;
            }
            skip_ws(&x);
            if (x.pos < len && line[x.pos] == ',') {
                x.pos++;
                continue;
            }
            if (x.pos < len && line[x.pos] == '}') {
                x.pos++;
                break;
            }
            return fail(&x, x.pos, "expected ',' or '}'");
        }
    }
    skip_ws(&x);
    if (x.pos != len)
        return fail(&x, x.pos, "trailing text after the object");
    return found ? 0 : 1;
}
