/* test_lowp.c: the bf16 and fp16 conversions of mixed precision (lowp_math.h),
 * exhaustively: every 16-bit value decodes to the number its format defines and
 * encodes back to itself, and every midpoint between two neighbours (and the points
 * one fp32 ulp either side of it) rounds to nearest, ties to even, including the
 * overflow to infinity past fp16's 65504 and the subnormals down to 2^-24. Then the
 * CPU kernel round_lowp against the scalar functions. */
#include "backend/cpu_backend.h"
#include "backend/lowp_math.h"
#include "test_util.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

/* fp16 as its definition reads: (-1)^s 2^(e-15) (1 + m/1024), subnormals 2^-14 m/1024 */
static double f16_reference(uint16_t h)
{
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0    ? ldexp(m, -24)
               : e == 31 ? (m ? NAN : INFINITY)
                         : ldexp(1024 + m, e - 25);
    return s ? -v : v;
}

static void check_bf16(void)
{
    long bad_trip = 0, bad_round = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        uint32_t mag = h & 0x7fffu;
        if (mag > 0x7f80u) { /* NaN stays NaN */
            float f = tr_bf16_to_f32((uint16_t)h);
            if (!isnan(f) || !isnan(tr_bf16_to_f32(tr_f32_to_bf16(f))))
                bad_trip++;
            continue;
        }
        if (tr_f32_to_bf16(tr_bf16_to_f32((uint16_t)h)) != h)
            bad_trip++;
        if (mag >= 0x7f80u) /* inf has no upper neighbour */
            continue;
        /* fp32 patterns between h and its upper neighbour h + 1 (by magnitude) */
        uint32_t base = h << 16;
        uint16_t even = (h & 1u) ? (uint16_t)(h + 1) : (uint16_t)h;
        if (tr_f32_to_bf16(tr_bits_f32(base | 0x8000u)) != even ||
            tr_f32_to_bf16(tr_bits_f32(base | 0x7fffu)) != h ||
            tr_f32_to_bf16(tr_bits_f32(base | 0x8001u)) != h + 1)
            bad_round++;
    }
    CHECK(bad_trip == 0, "%ld bf16 values do not survive bf16 -> fp32 -> bf16", bad_trip);
    CHECK(bad_round == 0, "%ld bf16 intervals round wrongly", bad_round);
    CHECK(tr_f32_to_bf16(INFINITY) == 0x7f80u && tr_f32_to_bf16(-INFINITY) == 0xff80u,
          "infinities");
    CHECK(tr_f32_to_bf16(3.3895314e38f) == 0x7f7fu, "the largest bf16 stays finite");
    CHECK(tr_f32_to_bf16(3.4028235e38f) == 0x7f80u, "FLT_MAX rounds to inf in bf16");
    CHECK(tr_bf16_to_f32(tr_f32_to_bf16(1.0f + 1.0f / 256)) == 1.0f, "1 + 2^-8 ties to 1");
}

static void check_fp16(void)
{
    long bad_decode = 0, bad_trip = 0, bad_round = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = tr_f16_to_f32((uint16_t)h);
        double ref = f16_reference((uint16_t)h);
        if (isnan(ref)) {
            if (!isnan(f) || !isnan(tr_f16_to_f32(tr_f32_to_f16(f))))
                bad_decode++;
            continue;
        }
        if ((double)f != ref || !!signbit(f) != (int)(h >> 15))
            bad_decode++;
        if (tr_f32_to_f16(f) != h)
            bad_trip++;
    }
    /* positive neighbours h, h + 1; 0x7bff (65504) -> 0x7c00 is the step to inf */
    for (uint32_t h = 0; h < 0x7c00u; h++) {
        for (int sign = 0; sign < 2; sign++) {
            uint16_t lo = (uint16_t)(h | (sign ? 0x8000u : 0u)), hi = (uint16_t)(lo + 1);
            double a = f16_reference((uint16_t)h);
            double b = h + 1 == 0x7c00u ? 65536.0 : f16_reference((uint16_t)(h + 1));
            float mid = (float)((a + b) / 2); /* 12 significant bits: exact in fp32 */
            if (sign)
                mid = -mid;
            uint16_t even = (h & 1u) ? hi : lo;
            float below = nextafterf(mid, 0.0f), above = nextafterf(mid, sign ? -INFINITY : INFINITY);
            if (tr_f32_to_f16(mid) != even || tr_f32_to_f16(below) != lo ||
                tr_f32_to_f16(above) != hi)
                bad_round++;
        }
    }
    CHECK(bad_decode == 0, "%ld fp16 values decode wrongly", bad_decode);
    CHECK(bad_trip == 0, "%ld fp16 values do not survive fp16 -> fp32 -> fp16", bad_trip);
    CHECK(bad_round == 0, "%ld fp16 intervals round wrongly", bad_round);
    CHECK(tr_f32_to_f16(65519.99f) == 0x7bffu, "just under 65520 rounds to 65504");
    CHECK(tr_f32_to_f16(65520.0f) == 0x7c00u, "65520 rounds to inf");
    CHECK(tr_f32_to_f16(1e10f) == 0x7c00u && tr_f32_to_f16(-1e10f) == 0xfc00u, "overflow");
    CHECK(tr_f32_to_f16(ldexpf(1, -25)) == 0, "2^-25 ties to zero");
    CHECK(tr_f32_to_f16(ldexpf(1.5f, -25)) == 1, "1.5 2^-25 rounds up to 2^-24");
    CHECK(tr_f32_to_f16(1e-30f) == 0 && tr_f32_to_f16(-1e-30f) == 0x8000u, "underflow keeps sign");
    CHECK(isnan(tr_round_lowp(NAN, TR_PREC_FP16)) && isnan(tr_round_lowp(NAN, TR_PREC_BF16)),
          "NaN stays NaN");
}

static void check_kernel(void)
{
    size_t n = 200000; /* above the kernel's threshold for threads */
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    for (int format = TR_PREC_FP32; format <= TR_PREC_FP16; format++) {
        uint64_t s = 88172645463325252ull;
        for (size_t i = 0; i < n; i++) { /* random patterns over every exponent */
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            x[i] = y[i] = tr_bits_f32((uint32_t)s);
        }
        tr_cpu_round_lowp(x, n, format);
        long bad = 0;
        for (size_t i = 0; i < n; i++) {
            float want = tr_round_lowp(y[i], format);
            if (tr_f32_bits(x[i]) != tr_f32_bits(want) && !(isnan(x[i]) && isnan(want)))
                bad++;
        }
        CHECK(bad == 0, "round_lowp format %d: %ld elements differ from the scalar rounding",
              format, bad);
    }
    free(x);
    free(y);
}

int main(void)
{
    check_bf16();
    check_fp16();
    check_kernel();
    return tr_test_finish();
}
