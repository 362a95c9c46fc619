/* attention_emu_check.h: what the emulated attention tests (test_attention_*_emu.cpp)
 * share: their random inputs, the check that every output element was written, an
 * fp64 reference of causal attention's forward and backward, the CPU kernels on the
 * same stored inputs, and relative error checks. Include after the kernels. */
#ifndef TR_ATTENTION_EMU_CHECK_H
#define TR_ATTENTION_EMU_CHECK_H

#include "backend/lowp_math.h" /* tr_round_lowp */
extern "C" {
#include "backend/transformer_kernels.h"
#include "core/rng.h"
}
#include "test_util.h"

#include <cmath>
#include <cstdio>
#include <vector>

typedef std::vector<float> vec;

static const float SENTINEL = 12345.0f; /* in every output element a kernel must not write */

struct emu_run {
    vec out, lse, dqkv;
};

/* qkv [B,T,3C] and dout [B,T,C] uniform in [-1, 1), from a stream of their own for
 * each call */
static void random_inputs(vec &qkv, vec &dout, int B, int T, int C)
{
    static uint64_t stream = 1;
    qkv.resize((size_t)B * T * 3 * C);
    dout.resize((size_t)B * T * C);
    uint64_t s1 = stream++, s2 = stream++;
    for (size_t i = 0; i < qkv.size(); i++)
        qkv[i] = -1.0f + 2.0f * (float)tr_rng_uniform(77, s1, i);
    for (size_t i = 0; i < dout.size(); i++)
        dout[i] = -1.0f + 2.0f * (float)tr_rng_uniform(77, s2, i);
}

/* Keys scaled by 1 + j / 4 along the sequence (j: the position): later tiles' scores
 * outgrow earlier ones by more than e^8, so a row's running max jumps, and the
 * forward kernels' rescale of their accumulators runs with tiny factors. */
static inline void grow_keys(vec &qkv, int B, int T, int C)
{
    for (int b = 0; b < B; b++)
        for (int j = 0; j < T; j++)
            for (int c = 0; c < C; c++)
                qkv[((size_t)b * T + j) * 3 * C + C + c] *= 1.0f + (float)j / 4.0f;
}

/* Every element of out and dqkv written (no SENTINEL) and a value of the format they
 * are stored in, every log-sum-exp written and finite */
static void check_written(const emu_run &r, int format)
{
    size_t bad_out = 0, bad_lse = 0, bad_dqkv = 0;
    for (float x : r.out)
        bad_out += x == SENTINEL || tr_round_lowp(x, format) != x;
    for (float x : r.lse)
        bad_lse += x == SENTINEL || !std::isfinite(x);
    for (float x : r.dqkv)
        bad_dqkv += x == SENTINEL || tr_round_lowp(x, format) != x;
    CHECK(bad_out == 0, "out: %zu of %zu elements unwritten or not of the format", bad_out,
          r.out.size());
    CHECK(bad_lse == 0, "lse: %zu of %zu rows unwritten or not finite", bad_lse, r.lse.size());
    CHECK(bad_dqkv == 0, "dqkv: %zu of %zu elements unwritten or not of the format", bad_dqkv,
          r.dqkv.size());
}

/* fp64 attention on inputs rounded to format: out, lse and dq, dk, dv */
static void reference(const vec &qkv, const vec &dout, int B, int T, int C, int NH, int format,
                      vec &out, vec &lse, vec &dqkv)
{
    int HS = C / NH, ld = 3 * C;
    double scale = 1.0 / sqrt((double)HS);
    out.assign((size_t)B * T * C, 0.0f);
    lse.assign((size_t)B * NH * T, 0.0f);
    dqkv.assign((size_t)B * T * 3 * C, 0.0f);
    auto bf = [format](float v) { return (double)tr_round_lowp(v, format); };
    std::vector<double> P((size_t)T * T), dS((size_t)T * T), O((size_t)T * HS);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            auto q = [&](int i, int d) { return bf(qkv[((size_t)b * T + i) * ld + h * HS + d]); };
            auto k = [&](int i, int d) {
                return bf(qkv[((size_t)b * T + i) * ld + C + h * HS + d]);
            };
            auto v = [&](int i, int d) {
                return bf(qkv[((size_t)b * T + i) * ld + 2 * C + h * HS + d]);
            };
            auto g = [&](int i, int d) { return bf(dout[((size_t)b * T + i) * C + h * HS + d]); };
            for (int i = 0; i < T; i++) {
                double m = -INFINITY, l = 0.0;
                for (int j = 0; j <= i; j++) {
                    double s = 0.0;
                    for (int d = 0; d < HS; d++)
                        s += q(i, d) * k(j, d);
                    P[(size_t)i * T + j] = s * scale;
                    m = fmax(m, s * scale);
                }
                for (int j = 0; j <= i; j++)
                    l += exp(P[(size_t)i * T + j] - m);
                for (int j = 0; j <= i; j++)
                    P[(size_t)i * T + j] = exp(P[(size_t)i * T + j] - m) / l;
                lse[((size_t)b * NH + h) * T + i] = (float)(m + log(l));
                for (int d = 0; d < HS; d++) {
                    double o = 0.0;
                    for (int j = 0; j <= i; j++)
                        o += P[(size_t)i * T + j] * v(j, d);
                    O[(size_t)i * HS + d] = o;
                    out[((size_t)b * T + i) * C + h * HS + d] = (float)o;
                }
            }
            for (int i = 0; i < T; i++) {
                double Di = 0.0;
                for (int d = 0; d < HS; d++)
                    Di += g(i, d) * O[(size_t)i * HS + d];
                for (int j = 0; j <= i; j++) {
                    double dp = 0.0;
                    for (int d = 0; d < HS; d++)
                        dp += g(i, d) * v(j, d);
                    dS[(size_t)i * T + j] = P[(size_t)i * T + j] * (dp - Di);
                }
            }
            for (int i = 0; i < T; i++)
                for (int d = 0; d < HS; d++) {
                    double dq = 0.0, dk = 0.0, dv = 0.0;
                    for (int j = 0; j <= i; j++)
                        dq += dS[(size_t)i * T + j] * k(j, d);
                    for (int t = i; t < T; t++) {
                        dk += dS[(size_t)t * T + i] * q(t, d);
                        dv += P[(size_t)t * T + i] * g(t, d);
                    }
                    size_t o = ((size_t)b * T + i) * ld + h * HS + d;
                    dqkv[o] = (float)(dq * scale);
                    dqkv[o + C] = (float)(dk * scale);
                    dqkv[o + 2 * C] = (float)dv;
                }
        }
}

static double max_abs(const vec &a)
{
    double m = 0.0;
    for (float x : a)
        m = fmax(m, fabs((double)x));
    return m;
}

/* max |got - want| / max |want|; a NaN is the worst error */
static double rel_err(const vec &got, const vec &want)
{
    double worst = 0.0, scale = max_abs(want);
    for (size_t i = 0; i < got.size(); i++) {
        double d = fabs((double)got[i] - want[i]);
        worst = std::isnan(d) ? INFINITY : fmax(worst, d);
    }
    return scale > 0.0 ? worst / scale : worst;
}

static void compare(const char *what, const vec &got, const vec &want, double tol)
{
    double e = rel_err(got, want);
    printf("  %-36s rel err %.2e (tol %.0e)\n", what, e, tol);
    CHECK(e <= tol, "%s: relative error %.3e above %.0e", what, e, tol);
}

/* out [B,T,C] and dqkv of tr_cpu_attention_forward and _backward (with drop: NULL for
 * none) on qkv and dout stored in format (as a run stores them), read back as values */
static void cpu_attention(const vec &qkv, const vec &dout, int B, int T, int C, int NH,
                          int format, const tr_dropout *drop, vec &out, vec &dqkv)
{
    size_t natt = (size_t)B * NH * T * T, es = tr_stored_bytes(format);
    vec att(natt), datt(natt);
    typedef std::vector<unsigned char> bytes;
    bytes q16(qkv.size() * es), g16(dout.size() * es), o16(dout.size() * es), d16(qkv.size() * es);
    for (size_t i = 0; i < qkv.size(); i++)
        tr_stored_store(q16.data(), i, qkv[i], format);
    for (size_t i = 0; i < dout.size(); i++)
        tr_stored_store(g16.data(), i, dout[i], format);
    tr_cpu_attention_forward(o16.data(), att.data(), q16.data(), B, T, C, NH, format, drop);
    tr_cpu_attention_backward(d16.data(), datt.data(), g16.data(), o16.data(), q16.data(),
                              att.data(), B, T, C, NH, format, drop);
    out.resize(dout.size());
    dqkv.resize(qkv.size());
    for (size_t i = 0; i < out.size(); i++)
        out[i] = tr_stored_load(o16.data(), i, format);
    for (size_t i = 0; i < dqkv.size(); i++)
        dqkv[i] = tr_stored_load(d16.data(), i, format);
}

/* A run with dropout against the CPU kernels' out and dqkv without it: a mask that
 * drops nothing (or is not applied) leaves them within the kernels' tolerance tol of
 * those; dropped, they must be at least 5 tol away */
static void check_dropout_matters(const emu_run &dropped, const vec &out_plain,
                                  const vec &dqkv_plain, double tol)
{
    double eo = rel_err(dropped.out, out_plain), ed = rel_err(dropped.dqkv, dqkv_plain);
    printf("  without dropout: out rel err %.2e, dqkv %.2e (must exceed %.0e)\n", eo, ed,
           5 * tol);
    CHECK(eo > 5 * tol && ed > 5 * tol, "dropout moved out by %.2e, dqkv by %.2e only", eo, ed);
}

#endif
