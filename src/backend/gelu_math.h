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

TR_HD static inline float tr_gelu(float x)
{
    float u = TR_GELU_SQRT_2_OVER_PI * (x + TR_GELU_COEFF * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
}

/* d gelu / dx. 1 - tanh^2 rather than 1/cosh^2: coshf overflows for |u| > 89,
 * where tanh is exactly +-1 and the term is correctly zero. */
TR_HD static inline float tr_gelu_grad(float x)
{
    float x2 = x * x;
    float u = TR_GELU_SQRT_2_OVER_PI * (x + TR_GELU_COEFF * x2 * x);
    float t = tanhf(u);
    float du = TR_GELU_SQRT_2_OVER_PI * (1.0f + 3.0f * TR_GELU_COEFF * x2);
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}

#endif
