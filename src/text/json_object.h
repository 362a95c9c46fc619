/* json_object.h: a small, strict parser for JSON files of one shape, an object of
 * string keys and integer values ({"!": 0, "\u0120the": 262, ...}), as GPT-2's
 * encoder.json is. Keys are decoded to UTF-8 (all escapes, \uXXXX surrogate pairs
 * joined; a lone surrogate is an error). Values are integers without fraction or
 * exponent. Anything else, and trailing text after the object, is an error that
 * names the file and the byte offset. Duplicate keys are the caller's to judge. */
#ifndef TR_JSON_OBJECT_H
#define TR_JSON_OBJECT_H

#include <stddef.h>
#include <stdint.h>

/* Called once per member, in file order. key is NUL-terminated UTF-8 (it may also
 * contain NUL, hence key_len) and valid only during the call. offset is the key's
 * byte offset, for messages. Return 0 to go on; non-zero stops the parse, which
 * then returns -1 with the callback's err message. */
typedef int (*tr_json_member_fn)(void *ctx, const char *key, size_t key_len, int64_t value,
                                 size_t offset, char *err, size_t errlen);

/* Parses text[0..len); name is the file name used in messages ("FILE: byte N: ...").
 * Returns 0, or -1 with err filled. */
int tr_json_object_parse(const char *text, size_t len, const char *name, tr_json_member_fn fn,
                         void *ctx, char *err, size_t errlen);

#endif
