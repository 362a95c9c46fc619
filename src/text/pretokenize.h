/* pretokenize.h: GPT-2's pre-tokenizer, the regex
 *     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * implemented by hand over UTF-8 with JavaScript semantics (see unicode.h).
 *
 * Invalid UTF-8: each byte that does not start a valid sequence is kept as a raw
 * byte and classed like U+FFFD (neither space, letter nor number), so it joins
 * punctuation runs and BPE encodes the byte itself: decode(encode(x)) == x for any
 * bytes. The JavaScript reference only ever sees valid strings, so tests compare
 * valid UTF-8 only. */
#ifndef TR_PRETOKENIZE_H
#define TR_PRETOKENIZE_H

#include <stddef.h>
#include <stdint.h>

/* Returns the end (exclusive) of the pre-token starting at s[pos], pos < len. The
 * next pre-token starts there; the whole input is covered with no gaps. */
size_t tr_pretokenize_next(const uint8_t *s, size_t len, size_t pos);

#endif
