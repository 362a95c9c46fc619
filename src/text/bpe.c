/* bpe.c: encoding and decoding with a loaded tr_bpe (bpe_load.c fills it).
 *
 * The merge loop works on token ids rather than strings: every symbol of a piece is
 * a vocabulary token at all times (bytes start as single-byte tokens and a merge
 * makes a token), so a pair is two ids and one hash lookup gives its rank and
 * result. Each round merges every left-to-right occurrence of the lowest-ranked
 * pair, exactly as encoder.py's bpe() does. */
#include "text/bpe_internal.h"

#include "text/pretokenize.h"

#include <stdlib.h>
#include <string.h>

int tr_bpe_force_short_merge;

uint64_t tr_bpe_hash_bytes(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 0x100000001b3ULL;
    return h ^ (h >> 29);
}

uint32_t tr_bpe_vocab_find(const tr_bpe *b, const char *bytes, size_t n)
{
    size_t h = tr_bpe_hash_bytes(bytes, n) & b->vocab_mask;
    for (;;) {
        uint32_t id = b->vocab_slots[h];
        if (id == TR_BPE_EMPTY)
            return TR_BPE_EMPTY;
        if (b->tok_len[id] == n && memcmp(b->pool + b->tok_off[id], bytes, n) == 0)
            return id;
        h = (h + 1) & b->vocab_mask;
    }
}

static const tr_bpe_pair_slot *pair_find(const tr_bpe *b, uint32_t left, uint32_t right)
{
    uint64_t key = (uint64_t)left << 32 | right;
    size_t h = tr_bpe_hash_pair(key) & b->pair_mask;
    for (;;) {
        const tr_bpe_pair_slot *s = &b->pairs[h];
        if (s->key == key)
            return s;
        if (s->key == UINT64_MAX)
            return NULL;
        h = (h + 1) & b->pair_mask;
    }
}

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 256;
    while (c < need)
        c *= 2;
    void *np = realloc(*p, c * elem);
    if (!np)
        return -1;
    *p = np, *cap = c;
    return 0;
}

/* A pair of neighbouring symbols that a merge could join: its rank, and where its
 * left symbol starts in the piece. */
typedef struct tr_bpe_candidate {
    uint32_t rank;
    size_t at;
} tr_bpe_candidate;

/* The lower rank first; of one rank, the leftmost */
static int cand_before(const tr_bpe_candidate *a, const tr_bpe_candidate *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->at < b->at);
}

static void heap_push(tr_bpe_candidate *h, size_t *n, tr_bpe_candidate c)
{
    size_t i = (*n)++;
    while (i > 0 && cand_before(&c, &h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = c;
}

static tr_bpe_candidate heap_pop(tr_bpe_candidate *h, size_t *n)
{
    tr_bpe_candidate top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && cand_before(&h[c + 1], &h[c]))
            c++;
        if (!cand_before(&h[c], &last))
            break;
        h[i] = h[c];
        i = c;
    }
    if (*n)
        h[i] = last;
    return top;
}

/* Pieces at least this long merge through a heap: the rounds of merge_piece each scan
 * the whole piece, which a long run of letters (base64, DNA, minified data: no
 * pre-token boundary for a megabyte) makes quadratic (1 MB took 47 s). */
#define TR_BPE_LONG_PIECE 256

/* merge_piece's result by another road: every candidate pair in a heap by (rank,
 * position), the symbols in a list. Popping the lowest rank's leftmost pair and
 * merging it merges what encoder.py's round of that rank merges, in its order: a
 * merge makes a token that only pairs of higher rank contain (a merge's parts exist
 * before it), so no pair of the rank being merged appears meanwhile, and of two
 * overlapping occurrences the left one wins, as in its left-to-right pass. A popped
 * pair whose symbols have changed since it was pushed is passed over: its position
 * holds no symbol any more, or its pair's rank is another (ranks are one a pair).
 * O(len log len). */
static size_t merge_long(tr_bpe *b, size_t len)
{
    if (grow((void **)&b->link, &b->link_cap, 2 * len, sizeof *b->link) ||
        grow((void **)&b->heap, &b->heap_cap, 3 * len, sizeof *b->heap))
        return 0;
    uint32_t *sym = b->sym; /* sym[i]: the symbol starting at byte i, where one does */
    size_t *prev = b->link, *next = b->link + len, none = SIZE_MAX, nh = 0;
    for (size_t i = 0; i < len; i++) {
        prev[i] = i ? i - 1 : none;
        next[i] = i + 1 < len ? i + 1 : none;
    }
    for (size_t i = 0; i + 1 < len; i++) {
        const tr_bpe_pair_slot *s = pair_find(b, sym[i], sym[i + 1]);
        if (s)
            heap_push(b->heap, &nh, (tr_bpe_candidate){s->rank, i});
    }
    while (nh) {
        tr_bpe_candidate c = heap_pop(b->heap, &nh);
        size_t i = c.at, j = next[i];
        if (sym[i] == TR_BPE_EMPTY || j == none)
            continue;
        const tr_bpe_pair_slot *s = pair_find(b, sym[i], sym[j]);
        if (!s || s->rank != c.rank)
            continue;
        sym[i] = s->merged;
        sym[j] = TR_BPE_EMPTY;
        next[i] = next[j];
        if (next[j] != none)
            prev[next[j]] = i;
        /* each merge pushes at most two pairs: the heap never outgrows 3 len */
        if (prev[i] != none && (s = pair_find(b, sym[prev[i]], sym[i])))
            heap_push(b->heap, &nh, (tr_bpe_candidate){s->rank, prev[i]});
        if (next[i] != none && (s = pair_find(b, sym[i], sym[next[i]])))
            heap_push(b->heap, &nh, (tr_bpe_candidate){s->rank, i});
    }
    size_t n = 0;
    for (size_t i = 0; i != none; i = next[i])
        sym[n++] = sym[i];
    return n;
}

/* BPE of one piece into b->sym; returns the symbol count, or 0 when out of memory. */
static size_t merge_piece(tr_bpe *b, const uint8_t *w, size_t len)
{
    if (grow((void **)&b->sym, &b->sym_cap, len, sizeof *b->sym))
        return 0;
    uint32_t *sym = b->sym;
    size_t n = len;
    for (size_t i = 0; i < n; i++)
        sym[i] = b->byte_id[w[i]];
    if (len >= TR_BPE_LONG_PIECE && !tr_bpe_force_short_merge)
        return merge_long(b, len);
    while (n > 1) {
        const tr_bpe_pair_slot *best = NULL;
        for (size_t i = 0; i + 1 < n; i++) {
            const tr_bpe_pair_slot *s = pair_find(b, sym[i], sym[i + 1]);
            if (s && (!best || s->rank < best->rank))
                best = s;
        }
        if (!best)
            break;
        uint32_t left = (uint32_t)(best->key >> 32), right = (uint32_t)best->key;
        size_t j = 0;
        for (size_t i = 0; i < n; j++) {
            if (i + 1 < n && sym[i] == left && sym[i + 1] == right) {
                sym[j] = best->merged;
                i += 2;
            } else {
                sym[j] = sym[i++];
            }
        }
        n = j;
    }
    return n;
}

static tr_bpe_cache_slot *cache_slot(tr_bpe *b, const uint8_t *w, size_t len, uint64_t h)
{
    size_t i = h & b->cache_mask;
    for (;;) {
        tr_bpe_cache_slot *s = &b->cache[i];
        if (s->word_len == 0)
            return s;
        if (s->hash == h && s->word_len == len &&
            memcmp(b->cache_words + s->word_off, w, len) == 0)
            return s;
        i = (i + 1) & b->cache_mask;
    }
}

/* Remembers a piece's ids when there is room; failing to cache is not an error. */
static void cache_put(tr_bpe *b, tr_bpe_cache_slot *s, const uint8_t *w, size_t len, uint64_t h,
                      size_t n)
{
    if (b->cache_used >= (b->cache_mask + 1) / 2 || len > 256 ||
        b->cache_words_len + len > UINT32_MAX || b->cache_ids_len + n > UINT32_MAX ||
        grow((void **)&b->cache_words, &b->cache_words_cap, b->cache_words_len + len, 1) ||
        grow((void **)&b->cache_ids, &b->cache_ids_cap, b->cache_ids_len + n, sizeof(uint32_t)))
        return;
    memcpy(b->cache_words + b->cache_words_len, w, len);
    memcpy(b->cache_ids + b->cache_ids_len, b->sym, n * sizeof(uint32_t));
    *s = (tr_bpe_cache_slot){h, (uint32_t)b->cache_words_len, (uint32_t)len,
                             (uint32_t)b->cache_ids_len, (uint32_t)n};
    b->cache_words_len += len;
    b->cache_ids_len += n;
    b->cache_used++;
}

int tr_bpe_encode_append(tr_bpe *b, const char *utf8, size_t len, uint32_t **ids, size_t *n,
                         size_t *cap)
{
    const uint8_t *s = (const uint8_t *)utf8;
    if (b->byte_mode) {
        if (grow((void **)ids, cap, *n + len, sizeof **ids))
            return -1;
        for (size_t i = 0; i < len; i++)
            (*ids)[(*n)++] = s[i];
        return 0;
    }
    for (size_t pos = 0; pos < len;) {
        size_t end = tr_pretokenize_next(s, len, pos);
        const uint8_t *w = s + pos;
        size_t wl = end - pos;
        pos = end;
        uint64_t h = tr_bpe_hash_bytes(w, wl);
        tr_bpe_cache_slot *slot = cache_slot(b, w, wl, h);
        const uint32_t *out;
        size_t m;
        if (slot->word_len) {
            out = b->cache_ids + slot->ids_off;
            m = slot->ids_n;
        } else {
            m = merge_piece(b, w, wl);
            if (m == 0)
                return -1;
            cache_put(b, slot, w, wl, h, m);
            out = b->sym;
        }
        if (grow((void **)ids, cap, *n + m, sizeof **ids))
            return -1;
        memcpy(*ids + *n, out, m * sizeof **ids);
        *n += m;
    }
    return 0;
}

int tr_bpe_encode(tr_bpe *b, const char *utf8, size_t len, uint32_t **ids, size_t *n)
{
    size_t cap = 0;
    *ids = NULL;
    *n = 0;
    if (tr_bpe_encode_append(b, utf8, len, ids, n, &cap)) {
        free(*ids);
        *ids = NULL;
        *n = 0;
        return -1;
    }
    return 0;
}

const char *tr_bpe_token_bytes(const tr_bpe *b, uint32_t id, size_t *len)
{
    if (id >= b->vocab_size)
        return NULL;
    *len = b->tok_len[id];
    return b->pool + b->tok_off[id];
}

int tr_bpe_decode(const tr_bpe *b, const uint32_t *ids, size_t n, char **out, size_t *out_len)
{
    size_t total = 0, l;
    *out = NULL;
    *out_len = 0;
    for (size_t i = 0; i < n; i++) {
        if (!tr_bpe_token_bytes(b, ids[i], &l))
            return -2;
        total += l;
    }
    char *s = malloc(total + 1);
    if (!s)
        return -1;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        const char *t = tr_bpe_token_bytes(b, ids[i], &l);
        memcpy(s + o, t, l);
        o += l;
    }
    s[o] = '\0';
    *out = s;
    *out_len = o;
    return 0;
}

uint32_t tr_bpe_vocab_size(const tr_bpe *b) { return b->vocab_size; }

int tr_bpe_eot(const tr_bpe *b, uint32_t *id)
{
    if (!b->have_eot)
        return -1;
    *id = b->eot;
    return 0;
}

void tr_bpe_free(tr_bpe *b)
{
    if (!b)
        return;
    if (!b->borrowed) {
        free(b->pool);
        free(b->tok_off);
        free(b->tok_len);
        free(b->vocab_slots);
        free(b->pairs);
    }
    free(b->cache);
    free(b->cache_words);
    free(b->cache_ids);
    free(b->sym);
    free(b->link);
    free(b->heap);
    free(b);
}
