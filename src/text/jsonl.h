/* jsonl.h: one line of a JSON-lines corpus (one JSON object a line, as OpenWebText,
 * The Pile, RedPajama and Hugging Face's exports ship text): the string value of
 * one member, the document's text.
 *
 * The line must be one JSON object. Its members are read at the top level only;
 * the values of the others (strings, numbers, literals, nested objects and arrays)
 * are skipped by their brackets and quotes without being checked further. Where a
 * key repeats, the last value counts, as in Python's json module. */
#ifndef TR_JSONL_H
#define TR_JSONL_H

#include "text/json_string.h"

#include <stddef.h>

/* Decodes the string value of member `field` of the object in line[0..len) into
 * out (replacing its content; lenient about lone surrogates, counted in
 * *replaced). key is scratch for the keys. Returns 0; 1 when there is no such
 * member; -1 when the line is not a JSON object or the member's value is not a
 * string, with *at the byte offset and msg what is wrong. */
int tr_jsonl_member(const char *line, size_t len, const char *field, tr_json_buf *out,
                    tr_json_buf *key, size_t *replaced, size_t *at, char *msg, size_t msglen);

#endif
