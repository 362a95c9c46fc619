/* philox.h: Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
 * 3", SC'11), the counter-based generator cuRAND and PyTorch use, as one inline
 * function that the host (rng.c's draws, the CPU's dropout) and the GPU (its dropout
 * kernels, compiled by nvcc) share: both backends draw the same bits for the same
 * (key, counter), so a dropout mask does not depend on where it is computed. */
#ifndef TR_PHILOX_H
#define TR_PHILOX_H

#include <stdint.h>

#ifdef __CUDACC__
#define TR_PHILOX_HD __host__ __device__
#else
#define TR_PHILOX_HD
#endif

/* out[0..4) for key and the 128-bit counter (hi, lo) */
TR_PHILOX_HD static inline void tr_philox4x32(uint32_t out[4], uint64_t key, uint64_t hi,
                                              uint64_t lo)
{
    uint32_t c0 = (uint32_t)lo, c1 = (uint32_t)(lo >> 32);
    uint32_t c2 = (uint32_t)hi, c3 = (uint32_t)(hi >> 32);
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

#endif
