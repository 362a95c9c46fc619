/* fuzz_idx.c: the MNIST IDX reader (data/idx.c: plain or gzip files, through
 * zlib) on any pair of files.
 *
 * Input: one byte choosing the sample limit, a 4-byte little-endian length L,
 * then L bytes of the images file and the rest as the labels file. Checked: a
 * failure is TR_EXIT_DATA with a message naming a file, and leaves the set
 * empty; a set that loads has a sane shape, labels within [0, max_label] with
 * max_label reached, at most the limit of samples, and its first and last
 * samples gather to pixels in [0, 1]. */
#include "fuzz.h"

#include "data/idx.h"

#include <math.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 5)
        return 0;
    long limit = data[0] % 4 == 0 ? 0 : data[0] % 16;
    size_t cut =
        (size_t)data[1] | (size_t)data[2] << 8 | (size_t)data[3] << 16 | (size_t)data[4] << 24;
    data += 5, size -= 5;
    cut = cut < size ? cut : size;
    char images[64], labels[64], err[512];
    snprintf(images, sizeof images, "%s", fuzz_file(0, data, cut));
    snprintf(labels, sizeof labels, "%s", fuzz_file(1, data + cut, size - cut));
    tr_dataset ds;
    memset(&ds, 0xab, sizeof ds);
    err[0] = '\0';
    int rc = tr_dataset_load_idx(&ds, images, labels, limit, err, sizeof err);
    if (rc) {
        FUZZ_CHECK(rc == 65, "returned %d: %s", rc, err);
        fuzz_check_message(err, sizeof err, "idx");
        FUZZ_CHECK(strstr(err, images) || strstr(err, labels), "names neither file: %s", err);
        FUZZ_CHECK(ds.images == NULL && ds.labels == NULL && ds.n == 0, "failed, not empty");
        tr_dataset_free(&ds);
        return 0;
    }
    FUZZ_CHECK(ds.n > 0 && (limit == 0 || ds.n <= limit), "%ld samples, limit %ld", ds.n, limit);
    FUZZ_CHECK(ds.c == 1 && ds.h > 0 && ds.w > 0, "shape %d x %d x %d", ds.c, ds.h, ds.w);
    int seen_max = -1;
    for (long i = 0; i < ds.n; i++) {
        FUZZ_CHECK(ds.labels[i] >= 0 && ds.labels[i] <= ds.max_label, "label %d, max %d",
                   ds.labels[i], ds.max_label);
        seen_max = ds.labels[i] > seen_max ? ds.labels[i] : seen_max;
    }
    FUZZ_CHECK(seen_max == ds.max_label, "max_label %d, largest label %d", ds.max_label, seen_max);
    int64_t idx[2] = {0, ds.n - 1};
    size_t dim = (size_t)ds.c * ds.h * ds.w;
    float *x = malloc(2 * dim * sizeof *x);
    int32_t y[2];
    FUZZ_CHECK(x != NULL, "out of memory");
    tr_dataset_gather(&ds, idx, 2, x, y, 0);
    for (size_t i = 0; i < 2 * dim; i++)
        FUZZ_CHECK(x[i] >= 0.0f && x[i] <= 1.0f, "pixel %g", x[i]);
    FUZZ_CHECK(y[0] == ds.labels[0] && y[1] == ds.labels[ds.n - 1], "gathered labels");
    free(x);
    tr_dataset_free(&ds);
    return 0;
}
