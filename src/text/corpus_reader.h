/* corpus_reader.h: text files read as pieces that encode separately to the ids of
 * the whole, so the tokenize tool streams a corpus of any size through bounded
 * memory and encodes the pieces on many threads.
 *
 * Two kinds of file (plain or gzip-compressed, told apart by their bytes):
 *   text   each file is one document; a long one is cut where the pre-tokenizer
 *          allows (tr_pretokenize_cut), into pieces of about piece_bytes, the last
 *          marked doc_end;
 *   jsonl  one JSON object a line, each line a document (jsonl.h); pieces are
 *          whole lines, about piece_bytes of them.
 * A piece larger than piece_bytes comes only from a line, or a stretch of text
 * with no place to cut, that long.
 *
 * Ownership: the reader owns its open file and its carry-over; pieces belong to
 * the caller (zero-initialise; free text when done). Single-threaded. */
#ifndef TR_CORPUS_READER_H
#define TR_CORPUS_READER_H

#include <stddef.h>

typedef struct tr_corpus_piece {
    char *text;
    size_t len, cap;
    int doc_end;      /* text: the piece ends its file's document */
    const char *file; /* the file it came from (the reader's argv string) */
    long first_line;  /* jsonl: the line number (from 1) of its first line */
} tr_corpus_piece;

typedef struct tr_corpus_reader tr_corpus_reader;

/* files stay the caller's and must outlive the reader. NULL when out of memory. */
tr_corpus_reader *tr_corpus_reader_open(char *const *files, int nfiles, int jsonl,
                                        size_t piece_bytes);
/* Fills *piece with the next piece. Returns 0; -1 after the last file; or an exit
 * code with err naming the file: TR_EXIT_NOINPUT (cannot open), TR_EXIT_DATA
 * (corrupt gzip data), TR_EXIT_OSERR (out of memory). */
int tr_corpus_reader_next(tr_corpus_reader *r, tr_corpus_piece *piece, char *err, size_t errlen);
/* Bytes read from the files so far (after decompression). */
size_t tr_corpus_reader_bytes(const tr_corpus_reader *r);
void tr_corpus_reader_close(tr_corpus_reader *r);

#endif
