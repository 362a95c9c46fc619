/* sampler.h: which samples each data-parallel rank trains on at each step.
 *
 * Every epoch is a permutation of [0, n) computed from (seed, epoch) alone, so it
 * is the same on every rank, at every rank count, and after a resume. The global
 * batch of step s is a contiguous block of that permutation; rank r of dp takes
 * the r-th of dp equal slices of it. Hence the global batch (its samples and
 * their order) does not depend on dp: only who computes which slice does.
 *
 *   steps_per_epoch = n / G          (the last partial batch is dropped)
 *   epoch = s / steps_per_epoch,  b = s % steps_per_epoch
 *   rank r's batch = perm_epoch[b*G + r*(G/dp) .. b*G + (r+1)*(G/dp))
 *
 * Shuffle: Fisher-Yates, for i = n-1 down to 1 swap perm[i] with perm[j],
 * j = tr_rng_u64(seed, TR_STREAM_SHUFFLE + epoch, i) mod (i+1). (The modulo bias
 * is below n / 2^64: immaterial.) With shuffle off the permutation is the
 * identity. Epochs must stay below 2^20 so the stream ids do not reach the next
 * purpose's range.
 *
 * Ownership: the sampler owns its permutation buffer (n entries, allocated by
 * init, freed by free; none with shuffle off). An entry takes 4 bytes where every
 * index fits in 32 bits, 8 above (156 M windows: 0.62 GB a rank instead of 1.25 GB);
 * both hold the same permutation. Not
 * thread-safe: one thread uses a sampler at a time. */
#ifndef TR_DATA_SAMPLER_H
#define TR_DATA_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

typedef struct tr_sampler {
    long n, global_batch, local_batch, steps_per_epoch;
    int dp_rank, dp_size, shuffle;
    uint64_t seed;
    long epoch; /* the epoch whose permutation perm holds; -1 before the first */
    void *perm; /* [n]: uint32_t entries, or int64_t where wide; NULL with shuffle off */
    int wide;
} tr_sampler;

/* The most samples whose indices 4-byte entries hold. */
#define TR_SAMPLER_NARROW_MAX ((uint64_t)UINT32_MAX + 1)

/* Checks that a layout can be sampled: n >= 1, 1 <= dp_size, global_batch a
 * multiple of dp_size and no larger than n. Returns 0, or TR_EXIT_USAGE with a
 * message in err. Pure, so every rank reaches the same verdict; init treats a
 * layout that fails this as a bug. */
int tr_sampler_check(long n, long global_batch, int dp_size, char *err, size_t errlen);

void tr_sampler_init(tr_sampler *s, long n, long global_batch, int dp_rank, int dp_size,
                     uint64_t seed, int shuffle);
long tr_sampler_steps_per_epoch(const tr_sampler *s);
/* This rank's local batch (global_batch / dp_size indices into the data set) for
 * global step `step` >= 0. Recomputes the permutation when the epoch changes,
 * so steps are cheapest in increasing order but any order gives the same answer. */
void tr_sampler_batch(tr_sampler *s, long step, int64_t *indices);
void tr_sampler_free(tr_sampler *s);

/* The permutation of [0, n) for an epoch (what tr_sampler_batch slices); the same
 * in 4-byte entries, for n up to TR_SAMPLER_NARROW_MAX. */
void tr_sampler_permutation(int64_t *perm, long n, uint64_t seed, long epoch, int shuffle);
void tr_sampler_permutation32(uint32_t *perm, long n, uint64_t seed, long epoch, int shuffle);
/* Bytes a sampler of n samples holds for its permutation (the memory plan's). */
size_t tr_sampler_bytes(long n, int shuffle);

/* Evaluation sharding: rank's contiguous share [*begin, *end) of [0, n), balanced
 * so the first n % size ranks hold one extra item. Every item is in exactly one
 * share, none is dropped. */
void tr_shard_range(long n, int rank, int size, long *begin, long *end);

#endif
