/* cpu_simd.h: eight-float vectors for the hand-blocked CPU kernels (the direct
 * convolution, max pooling).
 *
 * tr_v8 is GCC's generic vector type, so the code is the same for every target the
 * build allows: with -march=x86-64-v3 (the default, CMakeLists.txt) it compiles to
 * AVX2 registers and FMA instructions, on an older -march to pairs of SSE registers
 * and a multiply then an add. The two builds may differ in the last bit (one rounding
 * per multiply-add or two), never run to run: within a build every kernel does the
 * same operations in the same order whatever the thread count.
 *
 * Loads and stores go through memcpy: any alignment, no aliasing questions, and
 * GCC turns them into single vector moves. */
#ifndef TR_CPU_SIMD_H
#define TR_CPU_SIMD_H

#include <string.h>

#if defined(__AVX__)
#include <immintrin.h>
#endif

/* Without AVX, GCC warns that passing 32-byte vectors by value would change the ABI;
 * these functions, and the kernels' helpers that take tr_v8, are static and inlined,
 * so no ABI is involved. (Silenced for the rest of the including file.) */
#if !defined(__AVX__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

typedef float tr_v8 __attribute__((vector_size(32)));
typedef int tr_v8i __attribute__((vector_size(32)));

#define TR_INLINE static inline __attribute__((always_inline))

TR_INLINE tr_v8 v8_load(const float *p)
{
    tr_v8 v;
    memcpy(&v, p, sizeof v);
    return v;
}

TR_INLINE void v8_store(float *p, tr_v8 v) { memcpy(p, &v, sizeof v); }

/* The first n (0 to 8) floats at p, the other lanes zero; reads nothing past p + n. */
TR_INLINE tr_v8 v8_load_n(const float *p, int n)
{
#if defined(__AVX__)
    __m256i m = (__m256i)((tr_v8i){0, 1, 2, 3, 4, 5, 6, 7} < n);
    return (tr_v8)_mm256_maskload_ps(p, m);
#else
    tr_v8 v = {0};
    for (int i = 0; i < n; i++)
        v[i] = p[i];
    return v;
#endif
}

/* Stores the first n (0 to 8) lanes of v at p; writes nothing past p + n. */
TR_INLINE void v8_store_n(float *p, tr_v8 v, int n)
{
#if defined(__AVX__)
    __m256i m = (__m256i)((tr_v8i){0, 1, 2, 3, 4, 5, 6, 7} < n);
    _mm256_maskstore_ps(p, m, (__m256)v);
#else
    for (int i = 0; i < n; i++)
        p[i] = v[i];
#endif
}

TR_INLINE tr_v8 v8_set1(float s) { return (tr_v8){s, s, s, s, s, s, s, s}; }

TR_INLINE tr_v8 v8_zero(void) { return (tr_v8){0}; }

/* Keeps v in a register: GCC would otherwise fold a load used by several FMAs into
 * each of them, one load per FMA, and the load ports, not the FMA units, would set
 * the pace. */
TR_INLINE tr_v8 v8_reg(tr_v8 v)
{
#if defined(__AVX__)
    __asm__("" : "+x"(v));
#endif
    return v;
}

/* a b + c, rounded once where the build has FMA */
TR_INLINE tr_v8 v8_fma(tr_v8 a, tr_v8 b, tr_v8 c)
{
#if defined(__FMA__)
    return (tr_v8)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);
#else
    return a * b + c;
#endif
}

/* Sum of the eight lanes in a fixed tree, ((0+4) + (2+6)) + ((1+5) + (3+7)): the
 * order the AVX reduction below takes, written out for the generic build. */
TR_INLINE float v8_hsum(tr_v8 v)
{
#if defined(__AVX__)
    __m128 a = _mm_add_ps(_mm256_castps256_ps128((__m256)v), _mm256_extractf128_ps((__m256)v, 1));
    __m128 b = _mm_add_ps(a, _mm_movehl_ps(a, a)); /* (0+4)+(2+6), (1+5)+(3+7) */
    return _mm_cvtss_f32(_mm_add_ss(b, _mm_movehdup_ps(b)));
#else
    return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
#endif
}

/* Transposes the 8 x 8 block r[0..8) in place: r[i][j] <-> r[j][i]. */
TR_INLINE void v8_transpose(tr_v8 r[8])
{
#if defined(__AVX__)
    __m256 t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps((__m256)r[i], (__m256)r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps((__m256)r[i], (__m256)r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
        u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = (tr_v8)_mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
        r[i + 4] = (tr_v8)_mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
    }
#else
    for (int i = 0; i < 8; i++)
        for (int j = i + 1; j < 8; j++) {
            float x = r[i][j];
            r[i][j] = r[j][i];
            r[j][i] = x;
        }
#endif
}

#endif
