/* idx.h: an image-classification data set in memory, read from MNIST's IDX files.
 *
 * IDX (LeCun's MNIST format): a big-endian header, magic 0x00 0x00 DTYPE NDIMS,
 * then NDIMS 32-bit big-endian sizes, then the data in C order. Images are IDX3
 * unsigned bytes [n, rows, cols] (magic 0x00000803), labels IDX1 unsigned bytes
 * [n] (magic 0x00000801). Files are read through zlib, so `.gz` and plain files
 * work alike.
 *
 * Ownership: tr_dataset_load_idx allocates images and labels; tr_dataset_free
 * releases them. Images stay as bytes (a quarter of the floats' memory); batches
 * are converted to float by tr_dataset_gather. */
#ifndef TR_DATA_IDX_H
#define TR_DATA_IDX_H

#include <stddef.h>
#include <stdint.h>

typedef struct tr_dataset {
    long n;           /* samples */
    int c, h, w;      /* channels (1 for IDX3), rows, columns */
    uint8_t *images;  /* [n, c*h*w] */
    int32_t *labels;  /* [n] */
    int max_label;    /* largest label present, for checking against the model's classes */
} tr_dataset;

/* Loads images and labels. limit > 0 keeps only the first `limit` samples (and
 * reads no further). Returns 0; TR_EXIT_NOINPUT when a file is missing or
 * unreadable; TR_EXIT_DATA when a file is malformed (wrong magic or dtype,
 * truncated, trailing bytes, absurd sizes, images and labels of different
 * counts). On failure *ds is left empty and err holds one line naming the file
 * and the problem. Never prints, never aborts on bad input, so every rank can
 * load and agree on the outcome. */
int tr_dataset_load_idx(tr_dataset *ds, const char *images_path, const char *labels_path,
                        long limit, char *err, size_t errlen);

/* Hashes for comparing copies of a data set (ranks' node-local copies, the data a
 * checkpoint was trained on): FNV-1a continued from h, over the labels as 32-bit
 * values, or over the image bytes (eight at a time as little-endian words, the tail
 * byte by byte: 47 MB of MNIST in about 10 ms). */
uint64_t tr_dataset_digest_labels(const tr_dataset *ds, uint64_t h);
uint64_t tr_dataset_digest_images(const tr_dataset *ds, uint64_t h);

/* Releases what load allocated and zeroes *ds; safe on an empty or zeroed set. */
void tr_dataset_free(tr_dataset *ds);

/* Copies samples indices[0..count) into a batch: x[i, :] = pixel / 255 as float,
 * y[i] = label. x is [count, c*h*w], y is [count]. An index outside [0, n) is a
 * bug in the caller (fatal). team: 1 to share the copy among the calling thread's
 * OpenMP team (the training thread), 0 to stay on the calling thread (the prefetch
 * thread, which must not start a team of its own on cores the training uses). */
void tr_dataset_gather(const tr_dataset *ds, const int64_t *indices, int count, float *x,
                       int32_t *y, int team);

#endif
