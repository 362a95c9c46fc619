/* bpe_internal.h: the tr_bpe struct and its hash tables, shared by bpe_load.c
 * (which fills them from the files) and bpe.c (which encodes and decodes).
 * Not part of the public API. */
#ifndef TR_BPE_INTERNAL_H
#define TR_BPE_INTERNAL_H

#include "text/bpe.h"

#include <stdbool.h>

#define TR_BPE_EMPTY UINT32_MAX

/* One merge: the pair (left, right) of token ids, its rank and the id it makes. */
typedef struct tr_bpe_pair_slot {
    uint64_t key; /* left << 32 | right; UINT64_MAX when empty */
    uint32_t rank, merged;
} tr_bpe_pair_slot;

/* A cached piece: its bytes and ids live in the cache pools. */
typedef struct tr_bpe_cache_slot {
    uint64_t hash;
    uint32_t word_off, word_len, ids_off, ids_n; /* word_len == 0: empty slot */
} tr_bpe_cache_slot;

struct tr_bpe {
    bool byte_mode;
    bool borrowed; /* a clone: the tables below, up to the cache, are its parent's */
    uint32_t vocab_size;
    /* token bytes: id -> pool[tok_off[id] .. + tok_len[id]] */
    char *pool;
    uint32_t *tok_off, *tok_len;
    uint32_t *vocab_slots; /* open addressing, token bytes -> id */
    size_t vocab_mask;
    tr_bpe_pair_slot *pairs; /* open addressing, pair -> merge */
    size_t pair_mask;
    uint32_t byte_id[256];    /* the single-byte tokens */
    bool have_eot;
    uint32_t eot;
    /* per-piece cache: a fixed table that stops taking entries when half full */
    tr_bpe_cache_slot *cache;
    size_t cache_mask, cache_used;
    char *cache_words;
    size_t cache_words_len, cache_words_cap;
    uint32_t *cache_ids;
    size_t cache_ids_len, cache_ids_cap;
    /* scratch for one piece's symbols */
    uint32_t *sym;
    size_t sym_cap;
    /* scratch of a long piece's merge (bpe.c, merge_long): its symbols' neighbours
     * and the heap of its candidate pairs */
    size_t *link;
    size_t link_cap;
    struct tr_bpe_candidate *heap;
    size_t heap_cap;
};

/* For tests: nonzero makes every piece merge round by round, as short ones do (the
 * heap that long ones take must give the same ids). */
extern int tr_bpe_force_short_merge;

uint64_t tr_bpe_hash_bytes(const void *p, size_t n);
static inline uint64_t tr_bpe_hash_pair(uint64_t key)
{
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdULL;
    key ^= key >> 33;
    return key;
}
/* id of the token with these bytes, or TR_BPE_EMPTY. */
uint32_t tr_bpe_vocab_find(const tr_bpe *b, const char *bytes, size_t n);

#endif
