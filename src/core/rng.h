/* rng.h: counter-based random numbers (Philox-4x32-10).
 *
 * A value depends only on (key, counter), never on call order or on which rank
 * asks, so a parameter's initial value is the same at every layout and a resumed
 * run draws exactly what an uninterrupted one would. Convention in this code:
 * key = (seed, stream) where stream names the purpose (a tensor id, the epoch's
 * shuffle, ...), counter = (element index, 0). */
#ifndef TR_RNG_H
#define TR_RNG_H

#include <stdint.h>

typedef struct tr_philox_out {
    uint32_t v[4];
} tr_philox_out;

tr_philox_out tr_philox(uint64_t key, uint64_t counter_hi, uint64_t counter_lo);

/* A uniform float in [0, 1) for (seed, stream, index). */
float tr_rng_uniform(uint64_t seed, uint64_t stream, uint64_t index);
/* A standard normal float for (seed, stream, index): Box-Muller on two 32-bit
 * uniforms of one Philox block, so it is as reproducible as the uniforms. */
float tr_rng_normal(uint64_t seed, uint64_t stream, uint64_t index);
/* A uniform 64-bit integer for (seed, stream, index). */
uint64_t tr_rng_u64(uint64_t seed, uint64_t stream, uint64_t index);

/* Stream ids. Append-only: they decide every run's numbers. */
enum {
    TR_STREAM_INIT = 1u << 20,    /* + parameter tensor index */
    TR_STREAM_SHUFFLE = 2u << 20, /* + epoch */
    TR_STREAM_TOKENS = 3u << 20,  /* random-token benchmark data: + 0 train, + 1 eval */
    TR_STREAM_SAMPLE = 4u << 20,  /* text generation's top-k draws */
    TR_STREAM_DROPOUT = 5u << 20, /* + the site (gpt.c), counter hi word: + step << 32 */
};

#endif
