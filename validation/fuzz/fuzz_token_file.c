/* fuzz_token_file.c: the token file reader (text/token_file.c: "*.tok", the
 * language model's data, and llm.c's "*.bin") on any file.
 *
 * Checked: a failure is TR_EXIT_DATA with the file named; a file that opens has
 * a known dtype and a count its size holds; reads of windows inside it give ids
 * below its vocabulary or TR_EXIT_DATA, and windows outside it are refused
 * (TR_EXIT_USAGE). */
#include "fuzz.h"

#include "text/token_file.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file(0, data, size);
    char err[512];
    int code = -1;
    err[0] = '\0';
    tr_token_file *f = tr_token_file_open(path, &code, err, sizeof err);
    if (!f) {
        FUZZ_CHECK(code == 65, "open failed with %d: %s", code, err);
        fuzz_check_message(err, sizeof err, "token_file_open");
        FUZZ_CHECK(strstr(err, path) != NULL, "message without the file: %s", err);
        return 0;
    }
    uint64_t count = tr_token_file_count(f);
    uint32_t dtype = tr_token_file_dtype(f), vocab = tr_token_file_vocab_size(f);
    FUZZ_CHECK(dtype == TR_TOKEN_U16 || dtype == TR_TOKEN_U32, "dtype %u", dtype);
    size_t width = dtype == TR_TOKEN_U16 ? 2 : 4;
    FUZZ_CHECK(count <= (size - TR_TOKEN_HEADER_BYTES) / width, "%llu tokens in %zu bytes",
               (unsigned long long)count, size);
    uint32_t out[64];
    uint64_t starts[3] = {0, count > 64 ? count - 64 : 0, count / 2};
    for (int k = 0; k < 3; k++) {
        size_t n = count - starts[k] < 64 ? (size_t)(count - starts[k]) : 64;
        int rc = tr_token_file_read(f, starts[k], n, out, err, sizeof err);
        FUZZ_CHECK(rc == 0 || rc == 65, "read [%llu, +%zu) returned %d: %s",
                   (unsigned long long)starts[k], n, rc, err);
        if (rc == 0)
            for (size_t i = 0; i < n; i++)
                FUZZ_CHECK(out[i] < vocab, "token %u, vocabulary %u", out[i], vocab);
        else
            fuzz_check_message(err, sizeof err, "token_file_read");
    }
    FUZZ_CHECK(tr_token_file_read(f, count, 1, out, err, sizeof err) == 64,
               "a read past the end is not refused");
    FUZZ_CHECK(tr_token_file_read(f, UINT64_MAX, 2, out, err, sizeof err) == 64,
               "a window that wraps around is not refused");
    tr_token_file_close(f);
    return 0;
}
