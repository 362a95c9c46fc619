/* token_file.h: files of token ids ("*.tok"), the tokenizer's output and the
 * language-model loader's input.
 *
 * Layout (all little-endian, 32-byte header, then the tokens):
 *   0  char[8]  magic "TRTOKENS"
 *   8  uint32   version (1)
 *  12  uint32   dtype: 1 = uint16, 2 = uint32 (append-only)
 *  16  uint64   count of tokens
 *  24  uint32   vocab_size (every token is < vocab_size)
 *  28  uint32   reserved, 0
 *  32  count tokens of the dtype's width
 * The header is packed byte by byte, never by casting a struct.
 *
 * Readers also take llm.c's token files (karpathy/llm.c dev/data: "*.bin", a
 * header of 256 little-endian int32 -- magic 20240520 and version 1 for GPT-2's
 * uint16 tokens, 20240801 and version 7 for LLaMA 3's uint32 ones -- then the
 * tokens), so shards made for llm.c train here as they are; their vocabulary is
 * the one the magic names (50257, 128256).
 *
 * Readers open the file once and read windows [start, start+n) with pread, so each
 * data-parallel rank touches only its own windows and never loads the whole file.
 * A tr_token_file is owned by its opener and closed with tr_token_file_close. */
#ifndef TR_TOKEN_FILE_H
#define TR_TOKEN_FILE_H

#include <stddef.h>
#include <stdint.h>

#define TR_TOKEN_MAGIC "TRTOKENS"
#define TR_TOKEN_VERSION 1u
#define TR_TOKEN_HEADER_BYTES 32u
enum { TR_TOKEN_U16 = 1, TR_TOKEN_U32 = 2 };

typedef struct tr_token_file tr_token_file;

/* Writes ids[0..n) to path (via path.tmp and a rename, so a reader never sees a
 * half-written file). The dtype is uint16 when vocab_size <= 65536, else uint32.
 * Returns 0, or an exit code (TR_EXIT_DATA when an id is >= vocab_size,
 * TR_EXIT_IOERR when writing fails) with err naming the file. */
int tr_token_file_write(const char *path, const uint32_t *ids, size_t n, uint32_t vocab_size,
                        char *err, size_t errlen);

/* A token file written as a stream: tokens are appended as they are made, so a
 * corpus of any size needs the memory of one piece only; the header's count is
 * written at the close, and the file appears under its name only then (path.tmp,
 * then a rename). Owned by the opener; close or abort frees it. */
typedef struct tr_token_writer tr_token_writer;
/* NULL with *code (TR_EXIT_IOERR: cannot create path.tmp) and err on failure. */
tr_token_writer *tr_token_writer_open(const char *path, uint32_t vocab_size, int *code, char *err,
                                      size_t errlen);
/* Returns 0, TR_EXIT_DATA when an id is >= vocab_size, TR_EXIT_IOERR. */
int tr_token_writer_append(tr_token_writer *w, const uint32_t *ids, size_t n, char *err,
                           size_t errlen);
uint64_t tr_token_writer_count(const tr_token_writer *w);
/* Moves tokens [keep, count) into a complete token file at tail_path (same vocab)
 * and keeps the first keep: a train/validation split of a stream whose length was
 * not known in advance. */
int tr_token_writer_split(tr_token_writer *w, uint64_t keep, const char *tail_path, char *err,
                          size_t errlen);
/* Writes the header and renames the file into place; frees w whatever the outcome
 * (on failure path.tmp is removed and the exit code returned). */
int tr_token_writer_close(tr_token_writer *w, char *err, size_t errlen);
/* Removes path.tmp and frees w (NULL is fine). */
void tr_token_writer_abort(tr_token_writer *w);

/* Opens and validates the header (magic, version, dtype, count against the file
 * size; this format or llm.c's). Returns NULL with *code = TR_EXIT_NOINPUT (cannot
 * open) or TR_EXIT_DATA (not a valid token file) and err naming the file. */
tr_token_file *tr_token_file_open(const char *path, int *code, char *err, size_t errlen);
void tr_token_file_close(tr_token_file *f);

uint64_t tr_token_file_count(const tr_token_file *f);
uint32_t tr_token_file_vocab_size(const tr_token_file *f);
uint32_t tr_token_file_dtype(const tr_token_file *f);

/* Reads tokens [start, start+n) into out as uint32. Returns 0, or an exit code with
 * err: TR_EXIT_USAGE when the window is outside the file, TR_EXIT_DATA when a token
 * is >= vocab_size, TR_EXIT_IOERR when the read fails. */
int tr_token_file_read(tr_token_file *f, uint64_t start, size_t n, uint32_t *out, char *err,
                       size_t errlen);

#endif
