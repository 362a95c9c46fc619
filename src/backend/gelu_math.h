/* gelu_math.h: GELU (tanh approximation) and its derivative, shared by the CPU and
 * CUDA backends.
 *
 * PyTorch's gelu(x, approximate='tanh'):
 *   gelu(x) = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
 *   gelu'(x) = 0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) sqrt(2/pi) (1 + 3 0.044715 x^2)
 * One definition, compiled for the host by the C backend and for host and device by
 * nvcc (TR_HD from scalar_math.h), so the CUDA kernels reuse what the CPU tests prove. */
#ifndef TR_GELU_MATH_H
#define TR_GELU_MATH_H

#include "backend/scalar_math.h" /* TR_HD */

#include <math.h>

#define TR_GELU_SQRT_2_OVER_PI 0.7978845608028654f /* sqrt(2 / pi) */
#define TR_GELU_COEFF 0.044715f

/* Written as x sigmoid(2u), which equals 0.5 x (1 + tanh u) exactly: 1 + tanh u =
 * 2 / (1 + e^-2u). This form has no cancellation where tanh u nears -1 (x < -3),
 * and tr_expf keeps it vectorisable; its tr_expf_select form, fast (scalar_math.h
 * says why the plain one is not, in a quotient). */
TR_HD static inline float tr_gelu(float x)
{
    float u = TR_GELU_SQRT_2_OVER_PI * (x + TR_GELU_COEFF * x * x * x);
    float g = x / (1.0f + tr_expf_select(-2.0f * u));
    return u < -40.0f ? 0.0f : g; /* the exact value underflows there: 0, as tanh gives */
}

/* d gelu / dx = 0.5 (1 + t) + 0.5 x (1 - t^2) du with t = tanh u; with
 * s = sigmoid(2u): 1 + t = 2 s and 1 - t^2 = 4 s (1 - s), where 1 - s = s e^-2u is
 * formed without cancellation. Saturates cleanly: e^-2u is clamped, never inf. */
TR_HD static inline float tr_gelu_grad(float x)
{
    float x2 = x * x;
    float u = TR_GELU_SQRT_2_OVER_PI * (x + TR_GELU_COEFF * x2 * x);
    float e = tr_expf(-2.0f * u);
    float s = 1.0f / (1.0f + e);
    float du = TR_GELU_SQRT_2_OVER_PI * (1.0f + 3.0f * TR_GELU_COEFF * x2);
    float d = s + 2.0f * x * (s * (s * e)) * du;
    return u < -40.0f ? 0.0f : d;
}

#endif
