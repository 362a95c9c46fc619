/* bpe_load.c: reads GPT-2's encoder.json and vocab.bpe into a tr_bpe.
 *
 * Both files spell bytes in GPT-2's printable alphabet (bytes_to_unicode in
 * encoder.py): the 188 printable Latin-1 bytes stand for themselves and the other 68
 * bytes for U+0100..U+0143 in byte order, so no token contains spaces or control
 * characters. Loading maps every token back to raw bytes once, so encoding never
 * builds unicode strings. */
#include "text/bpe_internal.h"

#include "text/json_object.h"
#include "text/unicode.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ALPHABET 324 /* code points of the printable alphabet are all below this */

/* unicode_to_byte[cp] = the byte GPT-2's alphabet spells as cp, or -1. */
static void build_alphabet(int16_t unicode_to_byte[ALPHABET])
{
    for (int i = 0; i < ALPHABET; i++)
        unicode_to_byte[i] = -1;
    int extra = 0;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        unicode_to_byte[printable ? b : 256 + extra++] = (int16_t)b;
    }
}

/* Spelled UTF-8 -> raw bytes in out (at most n bytes). Returns the raw length, or -1
 * with *bad the offending code point. */
static long unspell(const int16_t *u2b, const char *s, size_t n, char *out, uint32_t *bad)
{
    size_t i = 0, o = 0;
    while (i < n) {
        uint32_t cp;
        i += tr_utf8_decode((const uint8_t *)s + i, n - i, &cp);
        if (cp >= ALPHABET || u2b[cp] < 0) {
            *bad = cp;
            return -1;
        }
        out[o++] = (char)u2b[cp];
    }
    return (long)o;
}

static char *read_all(const char *path, size_t *len, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    char *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n + 65536 + 1 > cap) {
            cap = cap ? cap * 2 : 1 << 20;
            char *nb = realloc(buf, cap);
            if (!nb) {
                snprintf(err, errlen, "%s: out of memory reading it", path);
                free(buf), fclose(f);
                return NULL;
            }
            buf = nb;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0)
            break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        snprintf(err, errlen, "%s: read error", path);
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

/* ---- encoder.json --------------------------------------------------------- */

typedef struct entry {
    uint32_t off, len;
    int64_t id;
} entry;

typedef struct load_ctx {
    const int16_t *u2b;
    const char *name;
    entry *entries;
    size_t n, cap;
    char *pool;
    size_t pool_len, pool_cap;
} load_ctx;

static int on_member(void *vctx, const char *key, size_t key_len, int64_t value, size_t offset,
                     char *err, size_t errlen)
{
    load_ctx *c = vctx;
    if (value < 0 || value >= (int64_t)UINT32_MAX) {
        snprintf(err, errlen, "%s: byte %zu: id %lld out of range", c->name, offset,
                 (long long)value);
        return -1;
    }
    if (key_len == 0) { /* (before the pool, which may not exist yet) */
        snprintf(err, errlen, "%s: byte %zu: empty token", c->name, offset);
        return -1;
    }
    if (c->n == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 65536;
        entry *e = realloc(c->entries, c->cap * sizeof *e);
        if (!e)
            goto oom;
        c->entries = e;
    }
    if (c->pool_len + key_len > c->pool_cap) {
        c->pool_cap = (c->pool_cap ? c->pool_cap * 2 : 1 << 20) + key_len;
        char *p = realloc(c->pool, c->pool_cap);
        if (!p)
            goto oom;
        c->pool = p;
    }
    uint32_t bad = 0;
    long raw = unspell(c->u2b, key, key_len, c->pool + c->pool_len, &bad);
    if (raw < 0) {
        snprintf(err, errlen, "%s: byte %zu: token has U+%04X, outside GPT-2's byte alphabet",
                 c->name, offset, (unsigned)bad);
        return -1;
    }
    c->entries[c->n++] = (entry){(uint32_t)c->pool_len, (uint32_t)raw, value};
    c->pool_len += (size_t)raw;
    return 0;
oom:
    snprintf(err, errlen, "%s: out of memory", c->name);
    return -1;
}

static size_t table_size(size_t n)
{
    size_t cap = 16;
    while (cap < 2 * n)
        cap *= 2;
    return cap;
}

static int load_encoder(tr_bpe *b, const int16_t *u2b, const char *path, char *err, size_t errlen)
{
    size_t len;
    char *text = read_all(path, &len, err, errlen);
    if (!text)
        return -1;
    load_ctx c = {.u2b = u2b, .name = path};
    int rc = tr_json_object_parse(text, len, path, on_member, &c, err, errlen);
    free(text);
    if (rc == 0 && c.n == 0) {
        snprintf(err, errlen, "%s: no tokens", path);
        rc = -1;
    }
    if (rc == 0) {
        b->vocab_size = (uint32_t)c.n;
        b->pool = c.pool, c.pool = NULL;
        b->tok_off = malloc(c.n * sizeof *b->tok_off);
        b->tok_len = malloc(c.n * sizeof *b->tok_len);
        b->vocab_mask = table_size(c.n) - 1;
        b->vocab_slots = malloc((b->vocab_mask + 1) * sizeof *b->vocab_slots);
        if (!b->tok_off || !b->tok_len || !b->vocab_slots) {
            snprintf(err, errlen, "%s: out of memory", path);
            rc = -1;
        }
    }
    if (rc == 0) {
        memset(b->tok_len, 0, c.n * sizeof *b->tok_len);
        memset(b->vocab_slots, 0xFF, (b->vocab_mask + 1) * sizeof *b->vocab_slots);
        for (size_t i = 0; i < c.n && rc == 0; i++) {
            entry e = c.entries[i];
            const char *bytes = b->pool + e.off;
            if (e.id >= (int64_t)c.n || b->tok_len[e.id]) {
                snprintf(err, errlen, "%s: token #%zu: id %lld is %s; ids must be 0..%zu, each once",
                         path, i, (long long)e.id, e.id >= (int64_t)c.n ? "too large" : "repeated",
                         c.n - 1);
                rc = -1;
            } else if (tr_bpe_vocab_find(b, bytes, e.len) != TR_BPE_EMPTY) {
                snprintf(err, errlen, "%s: token #%zu (id %lld): repeated key", path, i,
                         (long long)e.id);
                rc = -1;
            } else {
                b->tok_off[e.id] = e.off, b->tok_len[e.id] = e.len;
                size_t h = tr_bpe_hash_bytes(bytes, e.len) & b->vocab_mask;
                while (b->vocab_slots[h] != TR_BPE_EMPTY)
                    h = (h + 1) & b->vocab_mask;
                b->vocab_slots[h] = (uint32_t)e.id;
            }
        }
    }
    free(c.entries);
    free(c.pool);
    return rc;
}

/* ---- vocab.bpe ------------------------------------------------------------ */

static int add_merge(tr_bpe *b, uint32_t left, uint32_t right, uint32_t rank, uint32_t merged)
{
    uint64_t key = (uint64_t)left << 32 | right;
    size_t h = tr_bpe_hash_pair(key) & b->pair_mask;
    while (b->pairs[h].key != UINT64_MAX && b->pairs[h].key != key)
        h = (h + 1) & b->pair_mask;
    /* a repeated merge takes its last rank, as dict(zip(merges, ranks)) does */
    b->pairs[h] = (tr_bpe_pair_slot){key, rank, merged};
    return 0;
}

static int merge_line(tr_bpe *b, const int16_t *u2b, const char *line, size_t n, uint32_t rank,
                      const char *path, size_t lineno, char *err, size_t errlen)
{
    const char *sp = memchr(line, ' ', n);
    if (!sp || sp == line || sp == line + n - 1 || memchr(sp + 1, ' ', (size_t)(line + n - sp - 1))) {
        snprintf(err, errlen, "%s: line %zu: expected \"left right\"", path, lineno);
        return -1;
    }
    char raw[1024];
    size_t nl = (size_t)(sp - line), nr = n - nl - 1;
    if (n > sizeof raw) {
        snprintf(err, errlen, "%s: line %zu: merge too long", path, lineno);
        return -1;
    }
    uint32_t bad = 0;
    long rl = unspell(u2b, line, nl, raw, &bad), rr = -1;
    if (rl > 0)
        rr = unspell(u2b, sp + 1, nr, raw + rl, &bad);
    if (rl <= 0 || rr <= 0) {
        snprintf(err, errlen, "%s: line %zu: U+%04X is outside GPT-2's byte alphabet", path,
                 lineno, (unsigned)bad);
        return -1;
    }
    uint32_t left = tr_bpe_vocab_find(b, raw, (size_t)rl);
    uint32_t right = tr_bpe_vocab_find(b, raw + rl, (size_t)rr);
    uint32_t merged = tr_bpe_vocab_find(b, raw, (size_t)(rl + rr));
    if (left == TR_BPE_EMPTY || right == TR_BPE_EMPTY || merged == TR_BPE_EMPTY) {
        snprintf(err, errlen, "%s: line %zu: \"%.*s\" uses or makes a token not in the encoder",
                 path, lineno, (int)n, line);
        return -1;
    }
    return add_merge(b, left, right, rank, merged);
}

static int load_merges(tr_bpe *b, const int16_t *u2b, const char *path, char *err, size_t errlen)
{
    size_t len;
    char *text = read_all(path, &len, err, errlen);
    if (!text)
        return -1;
    int rc = 0;
    size_t lines = 0;
    for (size_t i = 0; i < len; i++)
        lines += text[i] == '\n';
    b->pair_mask = table_size(lines + 1) - 1;
    b->pairs = malloc((b->pair_mask + 1) * sizeof *b->pairs);
    if (!b->pairs) {
        snprintf(err, errlen, "%s: out of memory", path);
        free(text);
        return -1;
    }
    memset(b->pairs, 0xFF, (b->pair_mask + 1) * sizeof *b->pairs);
    if (strncmp(text, "#version", 8) != 0) {
        snprintf(err, errlen, "%s: line 1: expected \"#version...\"", path);
        rc = -1;
    }
    size_t pos = 0, lineno = 0;
    uint32_t rank = 0;
    while (rc == 0 && pos < len) {
        const char *line = text + pos;
        const char *eol = memchr(line, '\n', len - pos);
        size_t n = eol ? (size_t)(eol - line) : len - pos;
        pos += n + (eol ? 1 : 0);
        if (++lineno == 1)
            continue;
        if (n && line[n - 1] == '\r')
            n--;
        if (n == 0) {
            if (pos < len) {
                snprintf(err, errlen, "%s: line %zu: empty line before the end", path, lineno);
                rc = -1;
            }
            continue;
        }
        rc = merge_line(b, u2b, line, n, rank++, path, lineno, err, errlen);
    }
    free(text);
    return rc;
}

static int new_cache(tr_bpe *b)
{
    /* 2^16 slots, half usable: ample for the distinct words of a corpus's head */
    b->cache_mask = (1u << 16) - 1;
    b->cache = calloc(b->cache_mask + 1, sizeof *b->cache);
    return b->cache ? 0 : -1;
}

tr_bpe *tr_bpe_load(const char *encoder_json, const char *vocab_bpe, char *err, size_t errlen)
{
    int16_t u2b[ALPHABET];
    build_alphabet(u2b);
    tr_bpe *b = calloc(1, sizeof *b);
    if (!b) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (load_encoder(b, u2b, encoder_json, err, errlen) ||
        load_merges(b, u2b, vocab_bpe, err, errlen)) {
        tr_bpe_free(b);
        return NULL;
    }
    for (int c = 0; c < 256; c++) {
        char ch = (char)c;
        b->byte_id[c] = tr_bpe_vocab_find(b, &ch, 1);
        if (b->byte_id[c] == TR_BPE_EMPTY) {
            snprintf(err, errlen, "%s: no token for byte 0x%02X", encoder_json, (unsigned)c);
            tr_bpe_free(b);
            return NULL;
        }
    }
    b->eot = tr_bpe_vocab_find(b, "<|endoftext|>", 13);
    b->have_eot = b->eot != TR_BPE_EMPTY;
    if (new_cache(b)) {
        snprintf(err, errlen, "out of memory");
        tr_bpe_free(b);
        return NULL;
    }
    return b;
}

tr_bpe *tr_bpe_clone(const tr_bpe *parent)
{
    tr_bpe *b = malloc(sizeof *b);
    if (!b)
        return NULL;
    *b = *parent;
    b->borrowed = true;
    b->cache = NULL, b->cache_used = 0;
    b->cache_words = NULL, b->cache_words_len = b->cache_words_cap = 0;
    b->cache_ids = NULL, b->cache_ids_len = b->cache_ids_cap = 0;
    b->sym = NULL, b->sym_cap = 0;
    b->link = NULL, b->link_cap = 0;
    b->heap = NULL, b->heap_cap = 0;
    if (!b->byte_mode && new_cache(b)) {
        tr_bpe_free(b);
        return NULL;
    }
    return b;
}

tr_bpe *tr_bpe_bytes(void)
{
    tr_bpe *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->byte_mode = true;
    b->vocab_size = 256;
    /* a pool of the 256 bytes, so tr_bpe_token_bytes works the same in both modes */
    b->pool = malloc(256);
    b->tok_off = malloc(256 * sizeof *b->tok_off);
    b->tok_len = malloc(256 * sizeof *b->tok_len);
    if (!b->pool || !b->tok_off || !b->tok_len) {
        tr_bpe_free(b);
        return NULL;
    }
    for (uint32_t i = 0; i < 256; i++)
        b->pool[i] = (char)i, b->tok_off[i] = i, b->tok_len[i] = 1;
    return b;
}
