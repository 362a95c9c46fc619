/* rng.c: Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as
 * 1, 2, 3", SC'11), the generator cuRAND and PyTorch use for counter-based draws. */
#include "rng.h"

#include <math.h>

static inline uint32_t mulhilo(uint32_t a, uint32_t b, uint32_t *hi)
{
    uint64_t p = (uint64_t)a * b;
    *hi = (uint32_t)(p >> 32);
    return (uint32_t)p;
}

tr_philox_out tr_philox(uint64_t key, uint64_t counter_hi, uint64_t counter_lo)
{
    uint32_t c0 = (uint32_t)counter_lo, c1 = (uint32_t)(counter_lo >> 32);
    uint32_t c2 = (uint32_t)counter_hi, c3 = (uint32_t)(counter_hi >> 32);
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int round = 0; round < 10; round++) {
        uint32_t hi0, hi1;
        uint32_t lo0 = mulhilo(0xD2511F53u, c0, &hi0);
        uint32_t lo1 = mulhilo(0xCD9E8D57u, c2, &hi1);
        uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
        c0 = n0, c1 = n1, c2 = n2, c3 = n3;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    tr_philox_out o = {{c0, c1, c2, c3}};
    return o;
}

uint64_t tr_rng_u64(uint64_t seed, uint64_t stream, uint64_t index)
{
    tr_philox_out o = tr_philox(seed, stream, index);
    return ((uint64_t)o.v[1] << 32) | o.v[0];
}

float tr_rng_normal(uint64_t seed, uint64_t stream, uint64_t index)
{
    tr_philox_out o = tr_philox(seed, stream, index);
    /* u1 in (0, 1] so the log is finite; u2 in [0, 1) */
    double u1 = ((double)o.v[0] + 1.0) * (1.0 / 4294967296.0);
    double u2 = (double)o.v[1] * (1.0 / 4294967296.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

float tr_rng_uniform(uint64_t seed, uint64_t stream, uint64_t index)
{
    tr_philox_out o = tr_philox(seed, stream, index);
    return (float)(o.v[0] >> 8) * (1.0f / 16777216.0f); /* 24 bits: exact in float */
}
