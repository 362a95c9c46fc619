/* scalar_math.h: per-element math shared by the CPU and CUDA backends: a
 * vectorisable exp and the optimizer updates.
 *
 * One definition of each update rule, compiled for the host by the C backend and for
 * both host and device by nvcc, so the two backends cannot drift apart and the CPU
 * one stays the oracle the CUDA one is tested against. Per-call constants (bias
 * corrections) are computed once by the caller, in double, and passed in. */
#ifndef TR_SCALAR_MATH_H
#define TR_SCALAR_MATH_H

#include <math.h>
#include <string.h>

#ifdef __CUDACC__
#define TR_HD __host__ __device__
#else
#define TR_HD
#endif

/* e^x for x already in [-87, 88]: tr_expf's body, after its clamps. */
TR_HD static inline float tr_expf_clamped(float x)
{
    /* n = round(x / ln 2): adding and subtracting 1.5 * 2^23 rounds to an integer
     * in float arithmetic alone (floorf would be a library call under the default
     * -ftrapping-math, and keep the loop scalar) */
    const float shifter = 12582912.0f;
    float n = (x * 1.44269504088896341f + shifter) - shifter;
    float r = x - n * 0.693359375f; /* ln 2 in two parts: the first is exact in n * */
    r = r + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    /* (unsigned: a NaN x makes n's int INT_MIN on x86, which a signed shift may not
     * take; the result is NaN either way) */
    unsigned bits = (unsigned)((int)n + 127) << 23;
#ifdef __CUDA_ARCH__
    return p * __int_as_float((int)bits);
#else
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
#endif
}

/* e^x for float x, clamped to [-87, 88] (no overflow, no denormal results), to
 * about 1 ulp: Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2, Cephes' degree-5
 * polynomial for e^r, and 2^n built in the exponent bits. Plain arithmetic, no libm
 * call, so a compiler vectorises loops over it (glibc's expf and tanhf stay scalar)
 * and the vector body and the scalar tail compute identical bits: results do not
 * depend on how a loop is split over threads. */
TR_HD static inline float tr_expf(float x)
{
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    return tr_expf_clamped(x);
}

/* c ? a : b, chosen by bit masks on the host: a select the compiler cannot thread a
 * path through (below). The same value as the conditional, NaNs included. */
TR_HD static inline float tr_select_bits(int c, float a, float b)
{
#ifdef __CUDA_ARCH__
    return c ? a : b;
#else
    unsigned ua, ub, m = 0u - (unsigned)(c != 0);
    memcpy(&ua, &a, sizeof ua);
    memcpy(&ub, &b, sizeof ub);
    unsigned r = (ua & m) | (ub & ~m);
    float f;
    memcpy(&f, &r, sizeof f);
    return f;
#endif
}

/* tr_expf, its clamps as tr_select_bits: the same bits, for loops that divide by
 * 1 + e^x. There GCC's jump threading gives the clamped path (x = 88) a constant,
 * y / (1 + e^88), and if-conversion then computes that quotient for every element
 * beside the real one: about 1e-38 y, a denormal for |y| < 2, which an x86 core
 * finishes in a microcode assist. GELU's forward on the CPU ran at 10 ns a value
 * instead of 1.4 (2026-11-28). On a GPU the same code as tr_expf. */
TR_HD static inline float tr_expf_select(float x)
{
    x = tr_select_bits(x < -87.0f, -87.0f, x);
    x = tr_select_bits(x > 88.0f, 88.0f, x);
    return tr_expf_clamped(x);
}

/* SGD with momentum and L2 weight decay, PyTorch's torch.optim.SGD (dampening 0,
 * no Nesterov): g' = g + wd p; buf = momentum buf + g'; p -= lr buf. PyTorch sets
 * buf = g' on the first step; our buffers start at zero, which gives the same value.
 * momentum == 0 is plain SGD and never touches buf (it may be NULL there). */
TR_HD static inline void tr_sgd_elem(float *p, float *buf, float g, float lr, float momentum,
                                     float weight_decay)
{
    float gd = g + weight_decay * *p;
    if (momentum != 0.0f) {
        *buf = momentum * *buf + gd;
        gd = *buf;
    }
    *p -= lr * gd;
}

/* Per-step constants of AdamW: PyTorch's step_size = lr / (1 - beta1^t) and
 * bc2_sqrt = sqrt(1 - beta2^t), formed in double so that late steps (beta^t near 1
 * in float) keep their precision. The betas arrive in double and 1 - beta is formed
 * in double before rounding to float, as PyTorch does with its Python floats:
 * 1.0f - 0.999f would be 1.3e-5 (relative) off 0.001. */
typedef struct tr_adamw_consts {
    float lr, beta1, beta2, eps, decay_factor; /* decay_factor = 1 - lr wd */
    float one_minus_beta1, one_minus_beta2;
    float step_size, bc2_sqrt;
} tr_adamw_consts;

static inline tr_adamw_consts tr_adamw_make_consts(float lr, double beta1, double beta2,
                                                   float eps, float weight_decay, long t)
{
    tr_adamw_consts c;
    c.lr = lr;
    c.beta1 = (float)beta1;
    c.beta2 = (float)beta2;
    c.one_minus_beta1 = (float)(1.0 - beta1);
    c.one_minus_beta2 = (float)(1.0 - beta2);
    c.eps = eps;
    c.decay_factor = (float)(1.0 - (double)lr * weight_decay);
    c.step_size = (float)(lr / (1.0 - pow(beta1, (double)t)));
    c.bc2_sqrt = (float)sqrt(1.0 - pow(beta2, (double)t));
    return c;
}

/* AdamW (Loshchilov & Hutter), PyTorch's torch.optim.AdamW, non-amsgrad:
 * p *= 1 - lr wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 * p -= lr mhat / (sqrt(vhat) + eps) with mhat = m / (1-b1^t), vhat = v / (1-b2^t),
 * written as PyTorch evaluates it: p -= step_size m / (sqrt(v) / bc2_sqrt + eps). */
TR_HD static inline void tr_adamw_elem(float *p, float *m, float *v, float g,
                                       const tr_adamw_consts *c)
{
    *p *= c->decay_factor;
    *m = c->beta1 * *m + c->one_minus_beta1 * g;
    *v = c->beta2 * *v + c->one_minus_beta2 * g * g;
    float denom = sqrtf(*v) / c->bc2_sqrt + c->eps;
    *p -= c->step_size * *m / denom;
}

#endif
