/* deck.c: strict parser for input decks and command-line overrides. */
#include "deck.h"
#include "error.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void add_error(tr_deck *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add_error(tr_deck *d, const char *fmt, ...)
{
    size_t used = strlen(d->errors);
    if (used + 2 >= sizeof d->errors)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->errors + used, sizeof d->errors - used - 1, fmt, ap);
    va_end(ap);
    used = strlen(d->errors);
    d->errors[used] = '\n';
    d->errors[used + 1] = '\0';
    d->nerrors++;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = '\0';
    return s;
}

/* in[] for messages and the resolved deck's comments, one line whatever it holds:
 * control characters written as C escapes (a newline as \n); cut to fit out. */
static void printable(char *out, size_t len, const char *in)
{
    size_t o = 0;
    for (; *in && o + 5 < len; in++) {
        unsigned char c = (unsigned char)*in;
        if (c >= 0x20 && c != 0x7f)
            out[o++] = (char)c;
        else if (c == '\n' || c == '\r' || c == '\t')
            o += (size_t)snprintf(out + o, len - o, "\\%c",
                                  c == '\n' ? 'n' : c == '\r' ? 'r' : 't');
        else
            o += (size_t)snprintf(out + o, len - o, "\\x%02x", c);
    }
    out[o] = '\0';
}

int tr_edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63)
        return 99;
    int row[64];
    for (size_t j = 0; j <= lb; j++)
        row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int prev = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int cur = row[j];
            int cost = tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]);
            int best = prev + cost;
            if (row[j] + 1 < best)
                best = row[j] + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            prev = cur;
        }
    }
    return row[lb];
}

static int find_key(const char *section, const char *name)
{
    for (int i = 0; i < tr_deck_nkeys; i++)
        if (!strcmp(tr_deck_keys[i].section, section) && !strcmp(tr_deck_keys[i].name, name))
            return i;
    return -1;
}

static int section_exists(const char *section)
{
    for (int i = 0; i < tr_deck_nkeys; i++)
        if (!strcmp(tr_deck_keys[i].section, section))
            return 1;
    return 0;
}

/* The closest section name, or NULL when nothing is close enough to help. */
static const char *suggest_section(const char *section)
{
    const char *best = NULL;
    /* close enough to help: a few edits, more for long names ([optimizer] -> [optim]) */
    int len = (int)strlen(section);
    int bestd = (len / 2 > 2 ? len / 2 : 2) + 1;
    for (int i = 0; i < tr_deck_nkeys; i++) {
        int dist = tr_edit_distance(section, tr_deck_keys[i].section);
        if (dist < bestd) {
            bestd = dist;
            best = tr_deck_keys[i].section;
        }
    }
    return best;
}

/* The closest key: first within the section, then the same name in any section. */
static int suggest_key(const char *section, const char *name)
{
    int best = -1, bestd = 4;
    for (int i = 0; i < tr_deck_nkeys; i++) {
        int dist = tr_edit_distance(name, tr_deck_keys[i].name);
        if (strcmp(tr_deck_keys[i].section, section))
            dist += dist == 0 ? 1 : 3; /* right name, wrong section is a good guess */
        if (dist < bestd) {
            bestd = dist;
            best = i;
        }
    }
    return best;
}

static int choice_ok(const char *choices, const char *v)
{
    size_t lv = strlen(v);
    const char *p = choices;
    while (*p) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == lv && !strncmp(p, v, len))
            return 1;
        if (!bar)
            break;
        p = bar + 1;
    }
    return 0;
}

static int parse_bool(const char *v, int *out)
{
    if (!strcmp(v, "true") || !strcmp(v, "yes") || !strcmp(v, "on") || !strcmp(v, "1")) {
        *out = 1;
        return 1;
    }
    if (!strcmp(v, "false") || !strcmp(v, "no") || !strcmp(v, "off") || !strcmp(v, "0")) {
        *out = 0;
        return 1;
    }
    return 0;
}

static int parse_long(const char *v, long *out)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    /* Accept 1e3-style integers too: people write lr=1e-3 and steps=1e4. Beyond a
     * long's range, either way, the value is clamped for the range check to refuse
     * (any double past 2^53 is a whole number, so 1e18 is exact). */
    if (*end == 'e' || *end == 'E' || *end == '.') {
        double dv = strtod(v, &end);
        if (*end || isnan(dv) || dv != floor(dv))
            return 0;
        *out = dv >= 0x1p63 ? LONG_MAX : dv < -0x1p63 ? LONG_MIN : (long)dv;
        return 1;
    }
    if ((errno && errno != ERANGE) || end == v || *end)
        return 0;
    *out = x;
    return 1;
}

static int parse_double(const char *v, double *out)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !isfinite(x))
        return 0;
    *out = x;
    return 1;
}

static void fmt_num(char *buf, size_t len, double x)
{
    if (x == floor(x) && fabs(x) < 1e15) {
        snprintf(buf, len, "%.0f", x);
        return;
    }
    /* the fewest digits that give x back: a range's end of 0.999999999 is not "1" */
    for (int digits = 6; digits <= 17; digits++) {
        snprintf(buf, len, "%.*g", digits, x);
        if (strtod(buf, NULL) == x)
            return;
    }
}

/* Checks one value against its spec; appends "where: message" on failure. */
static int check_value(tr_deck *d, const tr_key_spec *k, const char *v, const char *where)
{
    char lo[32], hi[32];
    fmt_num(lo, sizeof lo, k->min);
    fmt_num(hi, sizeof hi, k->max);
    switch (k->type) {
    case TR_KEY_INT:
    case TR_KEY_FLOAT: {
        int is_int = k->type == TR_KEY_INT;
        long ix = 0;
        double x = 0;
        int ok = is_int ? parse_long(v, &ix) : parse_double(v, &x);
        if (is_int)
            x = (double)ix;
        if (!ok) {
            add_error(d, "%s: [%s] %s expects %s, got '%s' (%s)", where, k->section, k->name,
                      is_int ? "an integer" : "a number", v, k->help);
            return 0;
        }
        if (x < k->min || x > k->max) {
            char val[32];
            fmt_num(val, sizeof val, x);
            add_error(d, "%s: [%s] %s = %s is out of range [%s, %s] (%s)", where, k->section,
                      k->name, is_int && ix != LONG_MAX && ix != LONG_MIN ? val : v, lo, hi,
                      k->help);
            return 0;
        }
        return 1;
    }
    case TR_KEY_BOOL: {
        int b;
        if (!parse_bool(v, &b)) {
            add_error(d, "%s: [%s] %s expects true or false, got '%s'", where, k->section, k->name,
                      v);
            return 0;
        }
        return 1;
    }
    case TR_KEY_CHOICE:
        if (!choice_ok(k->choices, v)) {
            add_error(d, "%s: [%s] %s = '%s' is not one of: %s", where, k->section, k->name, v,
                      k->choices);
            return 0;
        }
        return 1;
    case TR_KEY_INTLIST: {
        const char *p = v;
        int n = 0;
        while (*p) {
            char *end;
            long x = strtol(p, &end, 10);
            if (end == p || x < k->min || x > k->max) {
                add_error(d,
                          "%s: [%s] %s expects comma-separated integers in [%s, %s], got '%s'",
                          where, k->section, k->name, lo, hi, v);
                return 0;
            }
            n++;
            p = end;
            while (isspace((unsigned char)*p))
                p++;
            if (*p == ',')
                p++;
            else if (*p) {
                add_error(d, "%s: [%s] %s expects comma-separated integers, got '%s'", where,
                          k->section, k->name, v);
                return 0;
            }
            while (isspace((unsigned char)*p))
                p++;
        }
        if (n == 0 && k->min > 0) {
            add_error(d, "%s: [%s] %s needs at least one integer", where, k->section, k->name);
            return 0;
        }
        return 1;
    }
    case TR_KEY_STRING:
    case TR_KEY_PATH:
        return 1;
    }
    return 1;
}

static void report_unknown_key(tr_deck *d, const char *where, const char *section,
                               const char *name)
{
    int s = suggest_key(section, name);
    if (s >= 0)
        add_error(d, "%s: unknown key '%s' in [%s]; did you mean [%s] %s?", where, name, section,
                  tr_deck_keys[s].section, tr_deck_keys[s].name);
    else
        add_error(d, "%s: unknown key '%s' in [%s]; `trainer --help-deck` lists the keys", where,
                  name, section);
}

static void report_unknown_section(tr_deck *d, const char *where, const char *section)
{
    const char *s = suggest_section(section);
    if (s)
        add_error(d, "%s: unknown section [%s]; did you mean [%s]?", where, section, s);
    else
        add_error(d, "%s: unknown section [%s]; `trainer --help-deck` lists the sections", where,
                  section);
}

static void set_value(tr_deck *d, int idx, const char *v, const char *where)
{
    if (strlen(v) >= TR_DECK_VALUE_MAX) {
        add_error(d, "%s: value of [%s] %s is longer than %d characters", where,
                  tr_deck_keys[idx].section, tr_deck_keys[idx].name, TR_DECK_VALUE_MAX - 1);
        return;
    }
    /* What a deck line cannot hold, an override cannot either: the resolved deck
     * (run directory, checkpoints) must read back as the same values. */
    for (const char *p = v; *p; p++) {
        if (*p == '\n' || *p == '\r') {
            add_error(d, "%s: value of [%s] %s has a line break; a value is one line", where,
                      tr_deck_keys[idx].section, tr_deck_keys[idx].name);
            return;
        }
        if ((*p == '#' || *p == ';') && p == v) {
            add_error(d, "%s: value of [%s] %s starts with '%c', which a deck reads as a comment",
                      where, tr_deck_keys[idx].section, tr_deck_keys[idx].name, *p);
            return;
        }
        if ((*p == '#' || *p == ';') && isspace((unsigned char)p[-1])) {
            add_error(d,
                      "%s: value of [%s] %s has '%c' after a space, which a deck reads as the "
                      "start of a comment; drop the space before it",
                      where, tr_deck_keys[idx].section, tr_deck_keys[idx].name, *p);
            return;
        }
    }
    if (!check_value(d, &tr_deck_keys[idx], v, where))
        return;
    snprintf(d->values[idx].text, sizeof d->values[idx].text, "%s", v);
    snprintf(d->values[idx].origin, sizeof d->values[idx].origin, "%s", where);
    d->values[idx].set = 1;
}

static void parse_text(tr_deck *d, const char *name, const char *text)
{
    char section[128] = "";
    int section_ok = 0;
    if (!strncmp(text, "\xEF\xBB\xBF", 3)) /* UTF-8's byte-order mark, which editors add */
        text += 3;
    char *copy = strdup(text);
    if (!copy)
        tr_fatal(TR_EXIT_OSERR, "out of memory reading deck %s", name);
    char *save = NULL;
    int lineno = 0;
    char *cursor = copy;
    /* strsep-like walk that keeps empty lines so line numbers stay true */
    while (cursor) {
        char *line = cursor;
        char *nl = strchr(cursor, '\n');
        if (nl) {
            *nl = '\0';
            cursor = nl + 1;
        } else {
            cursor = NULL;
        }
        lineno++;
        char where[1100];
        snprintf(where, sizeof where, "%s:%d", name, lineno);
        /* a comment starts at # or ; at the line start or after white space */
        for (char *p = line; *p; p++)
            if ((*p == '#' || *p == ';') && (p == line || isspace((unsigned char)p[-1]))) {
                *p = '\0';
                break;
            }
        char *s = trim(line);
        if (!*s)
            continue;
        if (*s == '[') {
            char *close = strchr(s, ']');
            if (!close || close[1] != '\0') {
                add_error(d, "%s: malformed section header '%s'; write [section]", where, s);
                section_ok = 0;
                continue;
            }
            *close = '\0';
            snprintf(section, sizeof section, "%s", trim(s + 1));
            section_ok = section_exists(section);
            if (!section_ok)
                report_unknown_section(d, where, section);
            continue;
        }
        char *eq = strchr(s, '=');
        if (!eq) {
            add_error(d, "%s: expected 'key = value' or '[section]', got '%s'", where, s);
            continue;
        }
        *eq = '\0';
        char *key = trim(s), *val = trim(eq + 1);
        if (!*section) {
            add_error(d, "%s: key '%s' appears before any [section] header", where, key);
            continue;
        }
        if (!section_ok)
            continue; /* already reported the section */
        int idx = find_key(section, key);
        if (idx < 0) {
            report_unknown_key(d, where, section, key);
            continue;
        }
        if (d->values[idx].set) {
            add_error(d, "%s: [%s] %s is set twice (first at %s)", where, section, key,
                      d->values[idx].origin);
            continue;
        }
        set_value(d, idx, val, where);
    }
    (void)save;
    free(copy);
}

static void apply_override(tr_deck *d, const char *arg)
{
    char where[TR_DECK_ORIGIN_MAX], shown[1000];
    printable(shown, sizeof shown, arg); /* the origin is a comment of the resolved deck */
    snprintf(where, sizeof where, "command line '%s'", shown);
    const char *eq = strchr(arg, '=');
    const char *dot = strchr(arg, '.');
    if (!eq || !dot || dot > eq) {
        add_error(d, "%s: overrides are written section.key=value", where);
        return;
    }
    char section[128], key[128];
    size_t ls = (size_t)(dot - arg), lk = (size_t)(eq - dot - 1);
    if (ls == 0 || ls >= sizeof section || lk == 0 || lk >= sizeof key) {
        add_error(d, "%s: overrides are written section.key=value", where);
        return;
    }
    memcpy(section, arg, ls);
    section[ls] = '\0';
    memcpy(key, dot + 1, lk);
    key[lk] = '\0';
    char *sec = trim(section), *k = trim(key);
    memmove(section, sec, strlen(sec) + 1);
    memmove(key, k, strlen(k) + 1);
    if (!section_exists(section)) {
        report_unknown_section(d, where, section);
        return;
    }
    int idx = find_key(section, key);
    if (idx < 0) {
        report_unknown_key(d, where, section, key);
        return;
    }
    d->values[idx].set = 0; /* an override may replace a deck value */
    char *val = strdup(eq + 1);
    if (!val)
        tr_fatal(TR_EXIT_OSERR, "out of memory");
    set_value(d, idx, trim(val), where);
    free(val);
}

int tr_deck_load_text(tr_deck *d, const char *name, const char *text, int noverrides,
                      char *const *overrides)
{
    memset(d, 0, sizeof *d);
    printable(d->path, sizeof d->path, name); /* in messages and comments: one line */
    d->values = calloc((size_t)tr_deck_nkeys, sizeof *d->values);
    if (!d->values)
        tr_fatal(TR_EXIT_OSERR, "out of memory");
    for (int i = 0; i < tr_deck_nkeys; i++)
        snprintf(d->values[i].text, sizeof d->values[i].text, "%s", tr_deck_keys[i].def);
    parse_text(d, d->path, text);
    for (int i = 0; i < noverrides; i++)
        apply_override(d, overrides[i]);
    return d->nerrors ? TR_EXIT_USAGE : 0;
}

int tr_deck_load(tr_deck *d, const char *path, int noverrides, char *const *overrides)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        memset(d, 0, sizeof *d);
        snprintf(d->path, sizeof d->path, "%s", path);
        d->values = calloc((size_t)tr_deck_nkeys, sizeof *d->values);
        add_error(d, "%s: cannot read the deck: %s", path, strerror(errno));
        return TR_EXIT_NOINPUT;
    }
    struct stat st;
    if (!fstat(fileno(f), &st) && S_ISDIR(st.st_mode)) {
        fclose(f);
        memset(d, 0, sizeof *d);
        snprintf(d->path, sizeof d->path, "%s", path);
        d->values = calloc((size_t)tr_deck_nkeys, sizeof *d->values);
        add_error(d, "%s: is a directory, not a deck (inputs/*.in are decks)", path);
        return TR_EXIT_NOINPUT;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (n < 0 || n > (1 << 20)) {
        fclose(f);
        memset(d, 0, sizeof *d);
        d->values = calloc((size_t)tr_deck_nkeys, sizeof *d->values);
        add_error(d, "%s: not a deck (unreadable or larger than 1 MiB)", path);
        return TR_EXIT_USAGE;
    }
    char *text = malloc((size_t)n + 1);
    if (!text)
        tr_fatal(TR_EXIT_OSERR, "out of memory");
    size_t got = fread(text, 1, (size_t)n, f);
    fclose(f);
    text[got] = '\0';
    if (memchr(text, '\0', got)) {
        free(text);
        memset(d, 0, sizeof *d);
        d->values = calloc((size_t)tr_deck_nkeys, sizeof *d->values);
        add_error(d, "%s: not a deck: it contains binary data", path);
        return TR_EXIT_USAGE;
    }
    int rc = tr_deck_load_text(d, path, text, noverrides, overrides);
    free(text);
    return rc;
}

void tr_deck_free(tr_deck *d)
{
    free(d->values);
    d->values = NULL;
}

static int must_find(const char *section, const char *name, tr_key_type t)
{
    int i = find_key(section, name);
    if (i < 0)
        tr_fatal(TR_EXIT_SOFTWARE, "bug: deck key [%s] %s is not declared", section, name);
    if (tr_deck_keys[i].type != t &&
        !(t == TR_KEY_STRING && (tr_deck_keys[i].type == TR_KEY_PATH ||
                                 tr_deck_keys[i].type == TR_KEY_CHOICE)))
        tr_fatal(TR_EXIT_SOFTWARE, "bug: deck key [%s] %s read with the wrong type", section,
                 name);
    return i;
}

long tr_deck_int(const tr_deck *d, const char *section, const char *name)
{
    long x = 0;
    parse_long(d->values[must_find(section, name, TR_KEY_INT)].text, &x);
    return x;
}

double tr_deck_float(const tr_deck *d, const char *section, const char *name)
{
    double x = 0;
    parse_double(d->values[must_find(section, name, TR_KEY_FLOAT)].text, &x);
    return x;
}

int tr_deck_bool(const tr_deck *d, const char *section, const char *name)
{
    int b = 0;
    parse_bool(d->values[must_find(section, name, TR_KEY_BOOL)].text, &b);
    return b;
}

const char *tr_deck_str(const tr_deck *d, const char *section, const char *name)
{
    return d->values[must_find(section, name, TR_KEY_STRING)].text;
}

static int intlist_of(const char *p, int *out, int max)
{
    int n = 0;
    while (*p && n < max) {
        char *end;
        long x = strtol(p, &end, 10);
        if (end == p)
            break;
        out[n++] = (int)x;
        p = end;
        while (*p == ',' || isspace((unsigned char)*p))
            p++;
    }
    return n;
}

int tr_deck_intlist(const tr_deck *d, const char *section, const char *name, int *out, int max)
{
    return intlist_of(d->values[must_find(section, name, TR_KEY_INTLIST)].text, out, max);
}

/* Whether the texts x and y give key the same value (1e3 and 1000, yes and true) */
static int same_value(int key, const char *x, const char *y)
{
    switch (tr_deck_keys[key].type) {
    case TR_KEY_INT: {
        long p = 0, q = 0;
        parse_long(x, &p), parse_long(y, &q);
        return p == q;
    }
    case TR_KEY_FLOAT: {
        double p = 0, q = 0;
        parse_double(x, &p), parse_double(y, &q);
        return p == q;
    }
    case TR_KEY_BOOL: {
        int p = 0, q = 0;
        parse_bool(x, &p), parse_bool(y, &q);
        return p == q;
    }
    case TR_KEY_INTLIST: {
        int p[64], q[64];
        int n = intlist_of(x, p, 64);
        return n == intlist_of(y, q, 64) && !memcmp(p, q, (size_t)n * sizeof *p);
    }
    default:
        return !strcmp(x, y);
    }
}

int tr_deck_same_value(const tr_deck *a, const tr_deck *b, int key)
{
    return same_value(key, a->values[key].text, b->values[key].text);
}

int tr_deck_is_set(const tr_deck *d, const char *section, const char *name)
{
    int i = find_key(section, name);
    if (i < 0)
        tr_fatal(TR_EXIT_SOFTWARE, "bug: deck key [%s] %s is not declared", section, name);
    return d->values[i].set;
}

int tr_deck_set(tr_deck *d, const char *section, const char *name, const char *value,
                const char *origin)
{
    int i = find_key(section, name);
    if (i < 0)
        tr_fatal(TR_EXIT_SOFTWARE, "bug: deck key [%s] %s is not declared", section, name);
    int before = d->nerrors;
    set_value(d, i, value, origin);
    return d->nerrors > before ? TR_EXIT_USAGE : 0;
}

/* The keys whose help starts with a scope (and, where key is set, that key only):
 * used only where the deciding key has (or, used_if_equal 0, has not) the value. A
 * key is unused where any rule that matches it says so (the first such names it). */
static const struct scope_rule {
    const char *prefix, *section, *name, *value;
    int used_if_equal;
    const char *where; /* for the message */
    const char *key;
} scope_rules[] = {
    {"gpt: ", "model", "name", "gpt", 1, "model.name = gpt", NULL},
    {"mlp: ", "model", "name", "mlp", 1, "model.name = mlp", NULL},
    {"mlp, cnn: ", "model", "name", "gpt", 0, "model.name = mlp or cnn", NULL},
    {"idx: ", "data", "format", "idx", 1, "data.format = idx", NULL},
    {"wsd: ", "optim", "schedule", "wsd", 1, "optim.schedule = wsd", NULL},
    {"gpt, with tp > 1: ", "model", "name", "gpt", 1, "model.name = gpt", NULL},
    {"gpt, with tp > 1: ", "parallel", "tp", "1", 0, "parallel.tp > 1", NULL},
    /* random_tokens reads no files */
    {"tokens: ", "data", "format", "tokens", 1, "data.format = tokens", "train_tokens"},
    {"tokens: ", "data", "format", "tokens", 1, "data.format = tokens", "val_tokens"},
    {"tokens: ", "data", "format", "idx", 0, "data.format = tokens or random_tokens", NULL},
    /* greedy sampling draws nothing */
    {"gpt: ", "sample", "top_k", "1", 0, "sample.top_k > 1", "top_p"},
    {"gpt: ", "sample", "top_k", "1", 0, "sample.top_k > 1", "temperature"},
};

/* The rule that scopes key k and leaves it unused in d, or NULL */
static const struct scope_rule *unused_by(const tr_deck *d, const tr_key_spec *k)
{
    for (size_t r = 0; r < sizeof scope_rules / sizeof scope_rules[0]; r++) {
        const struct scope_rule *s = &scope_rules[r];
        if (strncmp(k->help, s->prefix, strlen(s->prefix)) || (s->key && strcmp(k->name, s->key)))
            continue;
        int key = find_key(s->section, s->name);
        int equal = same_value(key, d->values[key].text, s->value);
        if (equal != s->used_if_equal)
            return s;
    }
    return NULL;
}

int tr_deck_unused_keys(const tr_deck *d, char *buf, size_t len)
{
    int count = 0;
    size_t used = 0;
    if (len)
        buf[0] = '\0';
    for (int i = 0; i < tr_deck_nkeys; i++) {
        const tr_key_spec *k = &tr_deck_keys[i];
        /* a default, set or not, says nothing: a resolved deck (deck.in) sets them all */
        const struct scope_rule *s =
            d->values[i].set && !same_value(i, d->values[i].text, k->def) ? unused_by(d, k) : NULL;
        if (!s)
            continue;
        count++;
        if (used + 1 >= len) /* full: count the rest only */
            continue;
        int n = snprintf(buf + used, len - used,
                         "[%s] %s = %s (%s) applies where %s; this run has %s.%s = %s and "
                         "ignores it\n",
                         k->section, k->name, d->values[i].text, d->values[i].origin, s->where,
                         s->section, s->name, d->values[find_key(s->section, s->name)].text);
        used += n < 0 ? 0 : (size_t)n < len - used ? (size_t)n : len - used - 1;
    }
    return count;
}

void tr_deck_where(const tr_deck *d, const char *section, const char *name, char *buf, size_t len)
{
    int i = find_key(section, name);
    if (i >= 0 && d->values[i].set)
        snprintf(buf, len, "%s", d->values[i].origin);
    else
        snprintf(buf, len, "%s (default of [%s] %s)", d->path, section, name);
}

static const char *type_name(const tr_key_spec *k)
{
    switch (k->type) {
    case TR_KEY_INT: return "integer";
    case TR_KEY_FLOAT: return "number";
    case TR_KEY_BOOL: return "true|false";
    case TR_KEY_STRING: return "text";
    case TR_KEY_PATH: return "path";
    case TR_KEY_CHOICE: return k->choices;
    case TR_KEY_INTLIST: return "integer list";
    }
    return "?";
}

void tr_deck_print_reference(FILE *out)
{
    fprintf(out, "Input deck reference: every key, its type, default and help.\n"
                 "Write `[section]` then `key = value`; override on the command line as "
                 "section.key=value.\n");
    const char *cur = "";
    for (int i = 0; i < tr_deck_nkeys; i++) {
        const tr_key_spec *k = &tr_deck_keys[i];
        if (strcmp(cur, k->section)) {
            fprintf(out, "\n[%s]\n", k->section);
            cur = k->section;
        }
        char range[96] = "";
        if (k->type == TR_KEY_INT || k->type == TR_KEY_FLOAT || k->type == TR_KEY_INTLIST) {
            char lo[32], hi[32];
            fmt_num(lo, sizeof lo, k->min);
            fmt_num(hi, sizeof hi, k->max);
            snprintf(range, sizeof range, " in [%s, %s]", lo, hi);
        }
        fprintf(out, "  %-16s %s%s, default '%s'\n  %-16s %s\n", k->name, type_name(k), range,
                k->def, "", k->help);
    }
}

void tr_deck_write_resolved(const tr_deck *d, FILE *out)
{
    fprintf(out, "# Resolved deck: every key with the value this run used.\n"
                 "# Source: %s. Keys marked 'set at' came from the deck or the command line.\n",
            d->path);
    const char *cur = "";
    for (int i = 0; i < tr_deck_nkeys; i++) {
        const tr_key_spec *k = &tr_deck_keys[i];
        if (strcmp(cur, k->section)) {
            fprintf(out, "\n[%s]\n", k->section);
            cur = k->section;
        }
        if (d->values[i].set)
            fprintf(out, "%s = %s   # set at %s\n", k->name, d->values[i].text,
                    d->values[i].origin);
        else
            fprintf(out, "%s = %s\n", k->name, d->values[i].text);
    }
}

char *tr_deck_resolved_text(const tr_deck *d)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        tr_fatal(TR_EXIT_OSERR, "out of memory for the resolved deck");
    tr_deck_write_resolved(d, f);
    fclose(f);
    return buf;
}
