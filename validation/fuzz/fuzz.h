/* fuzz.h: what the fuzz targets share.
 *
 * Each fuzz_*.c here feeds untrusted bytes to one reader of the trainer's
 * inputs (the deck, encoder.json, vocab.bpe, text to tokenize, IDX files, token
 * files, JSON-lines records, Slurm's variables) through LLVMFuzzerTestOneInput, and checks what the
 * reader promises beyond "no crash": an error is a return code with a message,
 * never an exit; what loads is self-consistent (decoding an encoding gives the
 * text back, a loaded data set's labels are in range, ...). A failed check
 * aborts, which both drivers report.
 *
 * Two drivers, the same targets:
 *  - standalone.c (every build, CTest's fuzz.* tests): the seeds in
 * seeds/<target>/ and a fixed, seeded set of mutations of them. Under the
 * AddressSanitizer build of CI this is a regression test that needs no clang.
 *  - libFuzzer (validation/fuzz/libfuzzer.sh, clang): coverage-guided search
 * for minutes a target; what it finds is fixed and its input added to the
 * seeds.
 *
 * The readers end the process through tr_fatal only on a bug or when out of
 * memory; here that exit is a finding too (libFuzzer reports an exit; the
 * standalone driver fails on it). */
#ifndef TR_FUZZ_H
#define TR_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* The entry each target defines (libFuzzer's name and signature). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A check of what the reader promises: prints the condition and aborts. */
#define FUZZ_CHECK(cond, ...)                                                                      \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz: %s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);         \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* A path naming a file that holds data[0..size) (slot 0..3: several files at
 * once). The file is in memory (memfd) where the kernel allows, else under
 * $TMPDIR; it is rewritten by the next call with the same slot. */
const char *fuzz_file(int slot, const uint8_t *data, size_t size);

/* data split at its first byte equal to sep: the part before it (*a, *na) and
 * after it (*b, *nb); with no such byte, all of it goes to a and b is empty. */
void fuzz_split(const uint8_t *data, size_t size, uint8_t sep, const uint8_t **a, size_t *na,
                const uint8_t **b, size_t *nb);

/* A NUL-terminated copy of data[0..size) (malloc'ed; the caller frees it). */
char *fuzz_cstring(const uint8_t *data, size_t size);

/* err holds a C string within its errlen bytes (a reader's message buffer) */
void fuzz_check_message(const char *err, size_t errlen, const char *what);

#endif
