/* bpe.h: GPT-2's byte-level BPE tokenizer, producing the ids of GPT-2's own encoder
 * (openai/gpt-2 encoder.py; checked against the gpt-3-encoder npm package by
 * validation/text/compare_with_js.sh), and a byte-level mode for small experiments.
 *
 * Encoding: the UTF-8 text is split by GPT-2's pre-tokenizer regex (pretokenize.h,
 * which also says how invalid UTF-8 is treated), each piece's bytes start as one
 * symbol each, and the adjacent pair of lowest merge rank is merged everywhere in
 * the piece until no pair has a rank. Work is on raw bytes: the printable-unicode
 * alphabet GPT-2 uses in encoder.json and vocab.bpe is undone when the files load.
 * "<|endoftext|>" in the text is encoded as ordinary text, as GPT-2 does; append
 * tr_bpe_eot() yourself between documents.
 *
 * Ownership: tr_bpe_load/tr_bpe_bytes return a tokenizer the caller frees with
 * tr_bpe_free. Encoding updates a per-word cache inside it, so one tr_bpe must not be
 * used by two threads at once (tr_bpe_clone gives each thread its own); decoding
 * does not touch it. */
#ifndef TR_BPE_H
#define TR_BPE_H

#include <stddef.h>
#include <stdint.h>

typedef struct tr_bpe tr_bpe;

#define TR_GPT2_EOT 50256u /* "<|endoftext|>" */

/* Loads encoder.json (token string -> id; ids must be exactly 0..N-1) and vocab.bpe
 * (first line "#version...", then one "left right" merge a line, by rank). Returns
 * NULL with err = "FILE: byte/line N: what is wrong" on failure. */
tr_bpe *tr_bpe_load(const char *encoder_json, const char *vocab_bpe, char *err, size_t errlen);
/* A tokenizer for another thread: it shares parent's vocabulary and merges (read
 * only) and has its own cache and scratch. Free it with tr_bpe_free before the
 * parent. NULL when out of memory. */
tr_bpe *tr_bpe_clone(const tr_bpe *parent);
/* Byte-level tokenizer: vocabulary 256, token = byte value, no end-of-text token. */
tr_bpe *tr_bpe_bytes(void);
void tr_bpe_free(tr_bpe *b);

uint32_t tr_bpe_vocab_size(const tr_bpe *b);
/* The end-of-text id; returns -1 for the byte-level tokenizer, which has none. */
int tr_bpe_eot(const tr_bpe *b, uint32_t *id);

/* Encodes utf8[0..len) into a new malloc'ed array *ids of *n ids (the caller frees
 * it). Returns 0, or -1 when out of memory. */
int tr_bpe_encode(tr_bpe *b, const char *utf8, size_t len, uint32_t **ids, size_t *n);
/* The same, appending to a growable array (*ids of *n used, *cap allocated; may be
 * NULL/0/0 at first), so a tool can encode many files into one buffer. */
int tr_bpe_encode_append(tr_bpe *b, const char *utf8, size_t len, uint32_t **ids, size_t *n,
                         size_t *cap);

/* Decodes ids into a new malloc'ed byte string *out of *out_len bytes (NUL-terminated
 * for convenience; the caller frees it). Returns 0, -1 when out of memory, or -2
 * when an id is not in the vocabulary. */
int tr_bpe_decode(const tr_bpe *b, const uint32_t *ids, size_t n, char **out, size_t *out_len);
/* The bytes of one token (not NUL-terminated) and their count; NULL for a bad id. */
const char *tr_bpe_token_bytes(const tr_bpe *b, uint32_t id, size_t *len);

#endif
