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

/* A place to cut text into pieces that encode separately to the whole's ids: the
 * largest q in [from, len) with q >= 2 that follows a "\n" standing between two
 * non-space code points (both wholly inside s[0..len)), or 0 when there is none.
 * Why it is safe: no pre-token runs across such a newline (only whitespace runs
 * hold one, and non-space on both sides ends them), the newline is a pre-token of
 * its own whether text follows or not, and a pre-token's extent depends only on
 * the text from its start on. So s[0..q) and what follows q, encoded apart, give
 * the ids of s[0..q) and the rest encoded together: a corpus of any size streams
 * through the tokenizer in pieces, on any number of threads, with the same ids. */
size_t tr_pretokenize_cut(const uint8_t *s, size_t len, size_t from);

#endif
