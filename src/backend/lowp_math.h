/* lowp_math.h: bf16 and fp16 conversions, shared by the CPU and CUDA backends.
 *
 * Mixed precision (train.precision) stores parameters and activations in a 16-bit
 * format and computes in fp32. These are the one definition of the two formats'
 * rounding: round to nearest, ties to even, as the hardware converts (cvt.rn);
 * NaN stays NaN; fp16 overflows to +-inf at 65520 and keeps its subnormals (down to
 * 2^-24), so the loss scaling it needs is exercised, not hidden. Plain integer and
 * float arithmetic, compiled for the host by the C backend and for both host and
 * device by nvcc (TR_HD), so the CPU tests prove what the CUDA kernels use. */
#ifndef TR_LOWP_MATH_H
#define TR_LOWP_MATH_H

#include "backend/scalar_math.h" /* TR_HD */

#include <stdint.h>
#include <string.h>

/* train.precision; the value is also the format code the kernels take */
typedef enum { TR_PREC_FP32 = 0, TR_PREC_BF16 = 1, TR_PREC_FP16 = 2 } tr_precision;

TR_HD static inline uint32_t tr_f32_bits(float f)
{
#ifdef __CUDA_ARCH__
    return (uint32_t)__float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
#endif
}

TR_HD static inline float tr_bits_f32(uint32_t u)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

/* bf16 keeps fp32's exponent and the top 7 mantissa bits: round the low 16 bits away */
TR_HD static inline uint16_t tr_f32_to_bf16(float f)
{
    uint32_t u = tr_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it a (quiet) NaN */
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u); /* ties to even; may carry into the exponent */
    return (uint16_t)(u >> 16);
}

TR_HD static inline float tr_bf16_to_f32(uint16_t h)
{
    return tr_bits_f32((uint32_t)h << 16);
}

TR_HD static inline uint16_t tr_f32_to_f16(float f)
{
    uint32_t u = tr_f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a >= 0x7f800000u) /* inf, or NaN kept quiet */
        return (uint16_t)(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0u));
    if (a >= 0x477ff000u) /* >= 65520 rounds past 65504, the largest fp16 */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) {
        /* below 2^-14: a subnormal in units of 2^-24. Adding 0.5 (whose ulp is
         * 2^-24) lets the fp32 adder round it, ties to even; the sum's mantissa is
         * then the count of units (1024 when it rounds up to the smallest normal,
         * whose bits are the same 0x400). */
        float t = tr_bits_f32(a) + 0.5f;
        return (uint16_t)(sign | (tr_f32_bits(t) - 0x3f000000u));
    }
    /* normal: rebias the exponent by 127 - 15 and round 13 mantissa bits away */
    a += 0xc8000fffu + ((a >> 13) & 1u);
    return (uint16_t)(sign | (a >> 13));
}

TR_HD static inline float tr_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) { /* zero or subnormal: m 2^-24, exact in fp32 */
        float v = (float)m * 5.9604644775390625e-8f;
        return tr_bits_f32(tr_f32_bits(v) | sign);
    }
    if (e == 31)
        return tr_bits_f32(sign | 0x7f800000u | (m << 13));
    return tr_bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

/* f rounded to the nearest value the format holds (fp32: unchanged) */
TR_HD static inline float tr_round_lowp(float f, int format)
{
    if (format == TR_PREC_BF16)
        return tr_bf16_to_f32(tr_f32_to_bf16(f));
    if (format == TR_PREC_FP16)
        return tr_f16_to_f32(tr_f32_to_f16(f));
    return f;
}

/* A gradient as the optimizer's update reads it (kernels.h): mixed precision's
 * reduced gradient stored in the format (fp32: as it is), then unscaled and clipped
 * by factor: the bits of a round_lowp pass and a scale pass over the gradients before
 * the update, done in the update's own pass instead. (A factor of 1, where there was
 * no scale pass, multiplies exactly; without a branch the CPU's loops vectorise.) */
TR_HD static inline float tr_grad_in(float g, int format, float factor)
{
    return tr_round_lowp(g, format) * factor;
}

/* train.precision's value as a tr_precision ("bf16-mixed", "fp16-mixed", else fp32) */
static inline int tr_precision_parse(const char *name)
{
    return !strcmp(name, "bf16-mixed")   ? TR_PREC_BF16
           : !strcmp(name, "fp16-mixed") ? TR_PREC_FP16
                                         : TR_PREC_FP32;
}

/* ---- tensors stored in the format's own width ------------------------------------
 * Most activations live in fp32 memory holding values of the format (round_lowp,
 * kernels.h). Those that transformer_kernels.h says are "stored in format" take the
 * format's width instead: 16-bit values (bf16 or fp16 bits) where format is a 16-bit
 * one, plain floats for fp32. Half the bytes for the kernels that move them, and a
 * GPU's 16-bit matrix products read them as they are, without a copy. */

/* bytes per element of a tensor stored in format */
TR_HD static inline size_t tr_stored_bytes(int format)
{
    return format == TR_PREC_BF16 || format == TR_PREC_FP16 ? 2 : 4;
}

/* element i of p, a tensor stored in format, as a float (exact: every value of the
 * format is one) */
TR_HD static inline float tr_stored_load(const void *p, size_t i, int format)
{
    if (format == TR_PREC_BF16)
        return tr_bf16_to_f32(((const uint16_t *)p)[i]);
    if (format == TR_PREC_FP16)
        return tr_f16_to_f32(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}

/* element i of p, a tensor stored in format, = v rounded to the format */
TR_HD static inline void tr_stored_store(void *p, size_t i, float v, int format)
{
    if (format == TR_PREC_BF16)
        ((uint16_t *)p)[i] = tr_f32_to_bf16(v);
    else if (format == TR_PREC_FP16)
        ((uint16_t *)p)[i] = tr_f32_to_f16(v);
    else
        ((float *)p)[i] = v;
}

/* element i of p, a tensor stored in `stored` (the format's width, or fp32 floats),
 * as a value of format: a tensor that a backend keeps in either form (the logits:
 * kernels.h, logits_format) read the same way from both */
TR_HD static inline float tr_stored_load_as(const void *p, size_t i, int stored, int format)
{
    float v = tr_stored_load(p, i, stored);
    return stored == format ? v : tr_round_lowp(v, format);
}

/* x[0, n) rounded in place, serially: a kernel's rows just written, inside its own
 * parallel loop, while they are in cache (fp32: nothing to do) */
static inline void tr_round_lowp_span(float *x, size_t n, int format)
{
    if (format != TR_PREC_BF16 && format != TR_PREC_FP16)
        return;
    for (size_t i = 0; i < n; i++)
        x[i] = tr_round_lowp(x[i], format);
}

/* src[0, n) read as values of format: src itself for fp32, else its values rounded
 * into buf (n floats), serially. How a CPU kernel reads an input that the model
 * stores rounded but did not round in a pass (the GPU rounds such inputs on load):
 * its loops stay plain ones that vectorise. */
static inline const float *tr_lowp_view(float *buf, const float *src, size_t n, int format)
{
    if (format != TR_PREC_BF16 && format != TR_PREC_FP16)
        return src;
    for (size_t i = 0; i < n; i++)
        buf[i] = tr_round_lowp(src[i], format);
    return buf;
}

/* elements [i, i + n) of src, a tensor stored in format, as floats: src's own floats
 * for fp32, else widened (exactly) into buf (n floats), serially. How a CPU kernel
 * reads a row of a stored tensor with plain loops that vectorise. */
static inline const float *tr_stored_view(float *buf, const void *src, size_t i, size_t n,
                                          int format)
{
    if (format != TR_PREC_BF16 && format != TR_PREC_FP16)
        return (const float *)src + i;
    for (size_t j = 0; j < n; j++)
        buf[j] = tr_stored_load(src, i + j, format);
    return buf;
}

static inline int tr_is_lowp(int format)
{
    return format == TR_PREC_BF16 || format == TR_PREC_FP16;
}

/* elements [i, i + n) of src, a tensor stored in `stored`, as values of format:
 * tr_stored_view and tr_lowp_view in one, for a tensor kept in either form. buf (n
 * floats) is needed where stored or format is a 16-bit one. */
static inline const float *tr_stored_view_as(float *buf, const void *src, size_t i, size_t n,
                                             int stored, int format)
{
    if (!tr_is_lowp(stored))
        return tr_lowp_view(buf, (const float *)src + i, n, format);
    const float *x = tr_stored_view(buf, src, i, n, stored);
    if (stored != format)
        tr_round_lowp_span(buf, n, format);
    return x;
}

#endif
