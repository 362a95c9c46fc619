/* rng.c: Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as
 * 1, 2, 3", SC'11; philox.h), the generator cuRAND and PyTorch use for counter-based
 * draws. */
#include "rng.h"
#include "philox.h"

#include <math.h>

tr_philox_out tr_philox(uint64_t key, uint64_t counter_hi, uint64_t counter_lo)
{
    tr_philox_out o;
    tr_philox4x32(o.v, key, counter_hi, counter_lo);
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
