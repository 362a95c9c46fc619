/* test_cuda_kernels_emu.cpp: CUDA kernels that changed after the last GPU run, run on
 * the CPU by the warp emulator (warp_emulator.h) with the launch configurations of
 * their .cu files, against the CPU kernels: the cross-entropy's statistics, losses and
 * gradient (whole vocabulary and shards), the 16-bit operand copies (casts, the bias
 * gradient's column sums with dout's copy, the LM head's dlogits copy), layernorm
 * forward and backward (accumulating into the residual stream's gradient; the fused
 * backward against the two-kernel form too, at GPT-2's C = 768), GELU (its backward
 * on the input stored in 16 bits, and the stores of the MLP's hidden activations), the
 * residual add, the AdamW and SGD updates with mixed precision's working copy, the
 * token and position embeddings (whole and sharded), the squared norm of many
 * tensors in one wait (gradient clipping), the classifier's ReLU, max pooling and
 * softmax cross-entropy, the rows' argmax of 16-bit logits, dropout, and sampling's
 * attention of the newest token against the key-value cache.
 *
 * Where the GPU code claims the CPU's bits (the same float operations in the same
 * order: the cross-entropy's gradient from the same statistics, the copies, the
 * element-wise kernels) the check is bit for bit; where it sums in another order
 * (block reductions, column partials), within a stated tolerance. gpu.test_cuda_kernels
 * checks the same kernels on a GPU; this proves their index arithmetic, masking and
 * rounding on every build, GPU or not. */
#include "warp_emulator.h" /* first: the CUDA built-ins the kernels use */

#include "cuda/attention_decode_kernels.cuh"
#include "cuda/classifier_kernels.cuh"
#include "cuda/embedding_kernels.cuh"
#include "cuda/gemm_kernels.cuh"
#include "cuda/norm_kernels.cuh"
#include "cuda/optim_kernels.cuh"
#include "cuda/xent_kernels.cuh"

extern "C" {
#include "backend/cpu_backend.h"
#include "backend/transformer_kernels.h"
#include "core/rng.h"
}
#include "test_util.h"

#include <cmath>
#include <vector>

typedef std::vector<float> vec;
static uint64_t g_stream = 1;

static vec rand_vec(size_t n, float lo, float hi)
{
    vec v(n);
    uint64_t s = g_stream++;
    for (size_t i = 0; i < n; i++)
        v[i] = lo + (hi - lo) * (float)tr_rng_uniform(99, s, i);
    return v;
}

static const char *fmt_name(int f)
{
    return f == TR_PREC_BF16 ? "bf16" : f == TR_PREC_FP16 ? "fp16" : "fp32";
}

/* max |a - b| / max |b| (a NaN on either side is the worst) */
template <typename T> static double rel_err(const std::vector<T> &a, const std::vector<T> &b)
{
    double worst = 0.0, scale = 0.0;
    for (size_t i = 0; i < b.size(); i++) {
        scale = fmax(scale, fabs((double)b[i]));
        double d = fabs((double)a[i] - (double)b[i]);
        worst = std::isnan(d) ? INFINITY : fmax(worst, d);
    }
    return scale > 0.0 ? worst / scale : worst;
}

template <typename T>
static void check_close(const char *what, const std::vector<T> &got, const std::vector<T> &want,
                  double tol)
{
    double e = rel_err(got, want);
    printf("  %-44s rel err %.2e (tol %.0e)\n", what, e, tol);
    CHECK(e <= tol, "%s: relative error %.3e above %.0e", what, e, tol);
}

template <typename T>
static void same_bits(const char *what, const std::vector<T> &got, const std::vector<T> &want)
{
    size_t bad = 0;
    for (size_t i = 0; i < want.size(); i++)
        bad += memcmp(&got[i], &want[i], sizeof(T)) != 0;
    printf("  %-44s %zu of %zu differ (bit for bit)\n", what, bad, want.size());
    CHECK(bad == 0, "%s: %zu of %zu values differ from the CPU's bits", what, bad, want.size());
}

static std::vector<int> targets_in(size_t n, int V)
{
    std::vector<int> t(n);
    for (size_t i = 0; i < n; i++)
        t[i] = (int)(tr_rng_uniform(7, g_stream, i) * V) % V;
    g_stream++;
    return t;
}

/* ---- the cross-entropy ----------------------------------------------------------- */

/* v stored in lfmt (16-bit values in the first half of the floats' room, or v) */
static vec stored_in(const vec &v, int lfmt)
{
    vec s(v.size());
    for (size_t i = 0; i < v.size(); i++)
        tr_stored_store(s.data(), i, v[i], lfmt);
    return s;
}

/* s, stored in lfmt, widened to floats */
static vec widened(const vec &s, size_t n, int lfmt)
{
    vec w(n);
    for (size_t i = 0; i < n; i++)
        w[i] = tr_stored_load(s.data(), i, lfmt);
    return w;
}

/* The kernels on logits stored in lfmt against the CPU on the fp32 logits: the same
 * values of the format either way. */
static void test_xent_padded(int BT, int V, int Vp, int format, int lfmt)
{
    printf("xent over a padded vocabulary (%s, logits stored in %s): BT %d, V %d of %d\n",
           fmt_name(format), fmt_name(lfmt), BT, V, Vp);
    vec logits = rand_vec((size_t)BT * Vp, -6.0f, 6.0f), xs = stored_in(logits, lfmt);
    std::vector<int> tgt = targets_in(BT, V);
    vec stats(2 * BT), losses(BT), cpu_stats(2 * BT), cpu_losses(BT);
    float *st = stats.data(), *lo = losses.data();
    const float *x = logits.data();
    const void *xk = xs.data();
    const int *t = tgt.data();
    emu::launch(dim3(BT), dim3(XENT_BLOCK), 0,
                [&] { xent_padded_forward_kernel(st, lo, xk, t, V, Vp, format, lfmt); });
    tr_cpu_xent_padded_forward(cpu_stats.data(), cpu_losses.data(), x, t, 1, BT, V, Vp, format,
                               TR_PREC_FP32);
    check_close("forward stats (max, 1/sum)", stats, cpu_stats, 1e-6);
    check_close("forward losses", losses, cpu_losses, 1e-6);
    if (lfmt == format && lfmt != TR_PREC_FP32) {
        /* the constant-format instantiation: the run-time kernel's bits */
        vec stats16(2 * BT, 7.0f), losses16(BT, 7.0f);
        float *s16 = stats16.data(), *l16 = losses16.data();
        emu::launch(dim3(BT), dim3(XENT_BLOCK), 0, [&] {
            if (lfmt == TR_PREC_BF16)
                xent_padded_forward_16_kernel<TR_PREC_BF16>(s16, l16, xk, t, V, Vp);
            else
                xent_padded_forward_16_kernel<TR_PREC_FP16>(s16, l16, xk, t, V, Vp);
        });
        same_bits("forward stats (16-bit instantiation)", stats16, stats);
        same_bits("forward losses (16-bit instantiation)", losses16, losses);
    }
    /* backward from the CPU's statistics: the same float operations, so the same bits */
    float scale = 1.0f / BT;
    size_t n = (size_t)BT * Vp;
    vec d(n, 12345.0f), cpu_d(n);
    float *dp = d.data();
    const float *cs = cpu_stats.data();
    emu::launch(dim3(tr_cuda_grid(n)), dim3(TR_CUDA_BLOCK), 0, [&] {
        xent_backward_kernel(dp, xk, cs, t, scale, (size_t)BT, Vp, 0, V, format, lfmt);
    });
    tr_cpu_xent_padded_backward(cpu_d.data(), x, cs, t, scale, 1, BT, V, Vp, format,
                                TR_PREC_FP32);
    same_bits("backward dlogits", widened(d, n, lfmt), cpu_d);
    if (lfmt == TR_PREC_FP32)
        return;
    /* in place over the 16-bit logits, as the head's backward runs it */
    float *xp = xs.data();
    emu::launch(dim3(tr_cuda_grid(n)), dim3(TR_CUDA_BLOCK), 0, [&] {
        xent_backward_kernel(xp, xp, cs, t, scale, (size_t)BT, Vp, 0, V, format, lfmt);
    });
    same_bits("backward dlogits (in place)", widened(xs, n, lfmt), cpu_d);
    if (Vp % 8)
        return;
    /* the row kernel of 16-bit logits (cuda_xent.cu takes it where rows are whole 16-byte
     * chunks): out of place into a copy, then in place, a grid smaller than the rows */
    vec d16(n, 12345.0f), x16 = stored_in(logits, lfmt);
    uint16_t *d16p = (uint16_t *)d16.data(), *x16p = (uint16_t *)x16.data();
    for (int grid : {BT, 5}) {
        emu::launch(dim3(grid), dim3(TR_CUDA_BLOCK), 0, [&] {
            if (lfmt == TR_PREC_BF16)
                xent_backward_rows16_kernel<TR_PREC_BF16>(d16p, x16p, cs, t, scale, (size_t)BT,
                                                          Vp, 0, V);
            else
                xent_backward_rows16_kernel<TR_PREC_FP16>(d16p, x16p, cs, t, scale, (size_t)BT,
                                                          Vp, 0, V);
        });
        same_bits("backward dlogits (16-bit rows)", widened(d16, n, lfmt), cpu_d);
    }
    emu::launch(dim3(BT), dim3(TR_CUDA_BLOCK), 0, [&] {
        if (lfmt == TR_PREC_BF16)
            xent_backward_rows16_kernel<TR_PREC_BF16>(x16p, x16p, cs, t, scale, (size_t)BT, Vp,
                                                      0, V);
        else
            xent_backward_rows16_kernel<TR_PREC_FP16>(x16p, x16p, cs, t, scale, (size_t)BT, Vp,
                                                      0, V);
    });
    same_bits("backward dlogits (16-bit rows, in place)", widened(x16, n, lfmt), cpu_d);
}

/* The four shard steps at tp = 2 (the second shard holding padding only past V). */
static void test_xent_shards(int BT, int V, int Vp, int format, int lfmt)
{
    printf("xent over 2 vocabulary shards (%s, logits stored in %s): BT %d, V %d of %d\n",
           fmt_name(format), fmt_name(lfmt), BT, V, Vp);
    int Vl = Vp / 2;
    vec logits = rand_vec((size_t)BT * Vp, -6.0f, 6.0f);
    std::vector<int> tgt = targets_in(BT, V);
    const int *t = tgt.data();
    vec gmax(BT, -INFINITY), cpu_gmax(BT, -INFINITY);
    std::vector<vec> shard(2), stored(2);
    for (int s = 0; s < 2; s++) { /* shard s's columns, [BT, Vl] */
        shard[s].resize((size_t)BT * Vl);
        for (int r = 0; r < BT; r++)
            for (int j = 0; j < Vl; j++)
                shard[s][(size_t)r * Vl + j] = logits[(size_t)r * Vp + s * Vl + j];
        stored[s] = stored_in(shard[s], lfmt);
    }
    for (int s = 0; s < 2; s++) {
        int v0 = s * Vl, nreal = V - v0 < Vl ? (V - v0 > 0 ? V - v0 : 0) : Vl;
        vec rmax(BT), cpu_rmax(BT);
        float *rm = rmax.data();
        const float *x = shard[s].data();
        const void *xk = stored[s].data();
        emu::launch(dim3(BT), dim3(XENT_BLOCK), 0,
                    [&] { xent_shard_max_kernel(rm, xk, Vl, nreal, format, lfmt); });
        tr_cpu_xent_shard_max(cpu_rmax.data(), x, BT, Vl, nreal, format, TR_PREC_FP32);
        same_bits(s ? "shard 1 max" : "shard 0 max", rmax, cpu_rmax);
        for (int r = 0; r < BT; r++)
            cpu_gmax[r] = fmaxf(cpu_gmax[r], cpu_rmax[r]);
    }
    std::vector<double> sums(2 * BT, 0.0), cpu_sums(2 * BT, 0.0);
    for (int s = 0; s < 2; s++) {
        int v0 = s * Vl, nreal = V - v0 < Vl ? (V - v0 > 0 ? V - v0 : 0) : Vl;
        std::vector<double> part(2 * BT), cpu_part(2 * BT);
        double *pp = part.data();
        const float *x = shard[s].data(), *gm = cpu_gmax.data();
        const void *xk = stored[s].data();
        emu::launch(dim3(BT), dim3(XENT_BLOCK), 0,
                    [&] { xent_shard_sums_kernel(pp, xk, gm, t, Vl, v0, nreal, format, lfmt); });
        tr_cpu_xent_shard_sums(cpu_part.data(), x, gm, t, BT, Vl, v0, nreal, format,
                               TR_PREC_FP32);
        check_close(s ? "shard 1 sums" : "shard 0 sums", part, cpu_part, 1e-12);
        for (int i = 0; i < 2 * BT; i++)
            cpu_sums[i] += cpu_part[i];
    }
    vec stats(2 * BT), losses(BT), cpu_stats(2 * BT), cpu_losses(BT);
    float *st = stats.data(), *lo = losses.data();
    const double *cs = cpu_sums.data();
    const float *gm = cpu_gmax.data();
    emu::launch(dim3(tr_cuda_grid(BT)), dim3(TR_CUDA_BLOCK), 0,
                [&] { xent_shard_finish_kernel(st, lo, cs, gm, (size_t)BT); });
    tr_cpu_xent_shard_finish(cpu_stats.data(), cpu_losses.data(), cs, gm, BT);
    same_bits("finish stats", stats, cpu_stats);
    same_bits("finish losses", losses, cpu_losses);
}

/* ---- the 16-bit operand copies ---------------------------------------------------- */

template <typename H> static uint16_t bits16(float x);
template <> uint16_t bits16<__nv_bfloat16>(float x) { return tr_f32_to_bf16(x); }
template <> uint16_t bits16<__half>(float x) { return tr_f32_to_f16(x); }

template <typename H> static std::vector<uint16_t> raw(const std::vector<H> &v)
{
    std::vector<uint16_t> r(v.size());
    memcpy(r.data(), v.data(), v.size() * 2);
    return r;
}

/* cast_16_as's two kernels, a column slice [c0, c0 + cols) of a rows x ld matrix */
template <typename H> static void test_casts(int rows, int cols, int ld, int c0)
{
    printf("16-bit copies (%s): %d x %d of %d columns from %d\n",
           sizeof(H) == 2 && bits16<H>(1.0f) == 0x3f80 ? "bf16" : "fp16", rows, cols, ld, c0);
    vec src = rand_vec((size_t)rows * ld, -3.0f, 3.0f);
    std::vector<uint16_t> want((size_t)rows * cols);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++)
            want[(size_t)r * cols + c] = bits16<H>(src[(size_t)r * ld + c0 + c]);
    std::vector<H> dst((size_t)rows * cols);
    H *d = dst.data();
    const float *s = src.data() + c0;
    unsigned gx = (unsigned)((cols + TR_CUDA_BLOCK - 1) / TR_CUDA_BLOCK);
    /* the .cu's grid, and one that makes both grid-stride loops turn */
    dim3 grids[2] = {dim3(gx < 64 ? gx : 64, (unsigned)rows), dim3(1, 3)};
    for (const dim3 &g : grids) {
        std::fill(dst.begin(), dst.end(), H{0xffff});
        emu::launch(g, dim3(TR_CUDA_BLOCK), 0,
                    [&] { cast_rows_kernel<H>(d, s, rows, cols, ld); });
        same_bits(g.y == 3 ? "cast_rows (small grid)" : "cast_rows", raw(dst), want);
    }
    if (c0 == 0 && ld == cols && (size_t)rows * cols % 4 == 0) {
        std::fill(dst.begin(), dst.end(), H{0xffff});
        size_t n4 = (size_t)rows * cols / 4;
        const float4 *s4 = reinterpret_cast<const float4 *>(src.data());
        emu::launch(dim3(tr_cuda_grid(n4)), dim3(TR_CUDA_BLOCK), 0,
                    [&] { cast_packed4_kernel<H>(d, s4, n4); });
        same_bits("cast_packed4", raw(dst), want);
    }
}

/* colsum_partials + tr_cuda_add_partials: dout's column sums, and its 16-bit copy;
 * and the sums of a dout stored in 16 bits (mlp_backward's hidden gradient, format) */
template <typename H> static void test_colsum(int R, int C, int format)
{
    printf("bias gradient's column sums with dout's 16-bit copy: %d x %d\n", R, C);
    vec src = rand_vec((size_t)R * C, -1.0f, 1.0f);
    int RB = tr_cuda_row_blocks((size_t)R, (size_t)C);
    vec partial((size_t)RB * C, NAN);
    std::vector<H> copy((size_t)R * C, H{0xffff});
    float *p = partial.data();
    H *cp = copy.data();
    const float *s = src.data();
    dim3 grid((unsigned)((C + 31) / 32), (unsigned)RB), block(32, TR_CUDA_COL_LANES);
    emu::launch(grid, block, 0,
                [&] { colsum_partial_kernel<H>(p, cp, s, TR_PREC_FP32, (size_t)R, C, C, RB); });
    /* sums of partials in tr_cuda_add_partials' order, against src's in double */
    auto check_sums = [&](const char *what, const vec &x) {
        std::vector<double> sum(C, 0.0), want(C, 0.0);
        for (int c = 0; c < C; c++) {
            for (int y = 0; y < RB; y++)
                sum[c] += partial[(size_t)y * C + c];
            for (int r = 0; r < R; r++)
                want[c] += x[(size_t)r * C + c];
        }
        check_close(what, sum, want, 1e-6);
    };
    check_sums("column sums (RB row blocks, in order)", src);
    std::vector<uint16_t> wcopy((size_t)R * C);
    for (size_t i = 0; i < wcopy.size(); i++)
        wcopy[i] = bits16<H>(src[i]);
    same_bits("dout's 16-bit copy", raw(copy), wcopy);
    /* the 16-bit copy as the source (no copy made): the sums of its values */
    vec widened((size_t)R * C);
    for (size_t i = 0; i < widened.size(); i++)
        widened[i] = tr_stored_load(wcopy.data(), i, format);
    std::fill(partial.begin(), partial.end(), NAN);
    const uint16_t *s16 = wcopy.data();
    emu::launch(grid, block, 0, [&] {
        colsum_partial_kernel<H>(p, (H *)NULL, s16, format, (size_t)R, C, C, RB);
    });
    check_sums("column sums of a 16-bit dout", widened);
}

/* copy_dout_16 from the logits: the 16-bit copy of dlogits' columns [o0, o0 + n) of a
 * shard (v0, nreal), against the CPU's dlogits converted */
template <typename H> static void test_xent_grad_16(int BT, int Vl, int v0, int nreal, int o0,
                                                    int n, int format)
{
    printf("LM head's dlogits copy (%s): BT %d, columns [%d, %d) of a shard of %d from %d "
           "(%d real)\n", fmt_name(format), BT, o0, o0 + n, Vl, v0, nreal);
    vec logits = rand_vec((size_t)BT * Vl, -6.0f, 6.0f);
    std::vector<int> tgt = targets_in(BT, v0 + Vl + 5);
    vec rmax(BT), stats(2 * BT), losses(BT);
    std::vector<double> sums(2 * BT);
    tr_cpu_xent_shard_max(rmax.data(), logits.data(), BT, Vl, nreal, format, TR_PREC_FP32);
    tr_cpu_xent_shard_sums(sums.data(), logits.data(), rmax.data(), tgt.data(), BT, Vl, v0, nreal,
                           format, TR_PREC_FP32);
    tr_cpu_xent_shard_finish(stats.data(), losses.data(), sums.data(), rmax.data(), BT);
    float scale = 0.37f;
    vec d((size_t)BT * Vl);
    tr_cpu_xent_shard_backward(d.data(), logits.data(), stats.data(), tgt.data(), scale, BT, Vl,
                               v0, nreal, format, TR_PREC_FP32);
    std::vector<uint16_t> want((size_t)BT * n);
    for (int r = 0; r < BT; r++)
        for (int c = 0; c < n; c++)
            want[(size_t)r * n + c] = bits16<H>(d[(size_t)r * Vl + o0 + c]);
    std::vector<H> dst((size_t)BT * n, H{0xffff});
    H *dp = dst.data();
    const float *x = logits.data(), *st = stats.data();
    const int *t = tgt.data();
    unsigned gx = (unsigned)((n + TR_CUDA_BLOCK - 1) / TR_CUDA_BLOCK);
    dim3 grids[2] = {dim3(gx < 64 ? gx : 64, (unsigned)BT), dim3(1, 2)};
    for (const dim3 &g : grids) {
        std::fill(dst.begin(), dst.end(), H{0xffff});
        emu::launch(g, dim3(TR_CUDA_BLOCK), 0, [&] {
            xent_grad_16_kernel<H>(dp, x, st, t, scale, BT, n, Vl, o0, v0, nreal, format);
        });
        same_bits(g.y == 2 ? "dlogits' copy (small grid)" : "dlogits' copy", raw(dst), want);
    }
}

/* ---- layernorm, GELU, residual ------------------------------------------------------ */

static void test_layernorm(int BT, int C, int format, int accumulate)
{
    printf("layernorm (%s%s): BT %d, C %d\n", fmt_name(format), accumulate ? ", accumulate" : "",
           BT, C);
    vec inp = rand_vec((size_t)BT * C, -2.0f, 3.0f), w = rand_vec(C, 0.5f, 1.5f);
    vec b = rand_vec(C, -0.5f, 0.5f), dout = rand_vec((size_t)BT * C, -1.0f, 1.0f);
    /* the input, the residual stream, is stored in the format (16-bit values in
     * bf16/fp16), and so is the output: compared widened */
    vec inp_stored((size_t)BT * C); /* room for either width */
    for (size_t i = 0; i < inp.size(); i++)
        tr_stored_store(inp_stored.data(), i, inp[i], format);
    vec out16((size_t)BT * C), cpu_out16((size_t)BT * C);
    vec out((size_t)BT * C), mean(BT), rstd(BT), cpu_out((size_t)BT * C), cpu_mean(BT),
        cpu_rstd(BT);
    float *o = out16.data(), *m = mean.data(), *rs = rstd.data();
    const void *x = inp_stored.data();
    const float *wp = w.data(), *bp = b.data();
    unsigned blocks = (unsigned)((BT + LN_ROWS_PER_BLOCK - 1) / LN_ROWS_PER_BLOCK);
    emu::launch(dim3(blocks), dim3(TR_CUDA_BLOCK), 0, [&] {
        layernorm_forward_kernel(o, m, rs, x, wp, bp, (size_t)BT, C, format);
    });
    tr_cpu_layernorm_forward(cpu_out16.data(), cpu_mean.data(), cpu_rstd.data(), x, wp, bp, 1,
                             BT, C, format);
    for (size_t i = 0; i < out.size(); i++) {
        out[i] = tr_stored_load(out16.data(), i, format);
        cpu_out[i] = tr_stored_load(cpu_out16.data(), i, format);
    }
    double tol = format == TR_PREC_FP32 ? 1e-5 : 8e-3; /* one 16-bit step where sums differ */
    check_close("forward out", out, cpu_out, tol);
    check_close("forward mean", mean, cpu_mean, 1e-5);
    check_close("forward rstd", rstd, cpu_rstd, 1e-5);

    /* backward from the CPU's statistics, as tr_cuda_layernorm_backward launches it */
    vec dinp0 = rand_vec((size_t)BT * C, -1.0f, 1.0f);
    for (float &v : dinp0)
        v = tr_round_lowp(v, format);
    vec dinp = dinp0, cpu_dinp = dinp0, dw(C, 0.25f), db(C, -0.5f), cpu_dw = dw, cpu_db = db;
    int RB = tr_cuda_row_blocks((size_t)BT, 2 * (size_t)C);
    vec partial((size_t)2 * RB * C, NAN);
    float *p = partial.data(), *di = dinp.data();
    const float *d = dout.data(), *cm = cpu_mean.data(), *cr = cpu_rstd.data();
    emu::launch(dim3((unsigned)((C + 31) / 32), (unsigned)RB), dim3(32, LN_LANES), 0, [&] {
        layernorm_backward_params_partial_kernel(p, d, x, cm, cr, (size_t)BT, C, RB, format);
    });
    for (int c = 0; c < C; c++) /* tr_cuda_add_partials, in order */
        for (int y = 0; y < RB; y++) {
            dw[c] += partial[(size_t)y * C + c];
            db[c] += partial[(size_t)(RB + y) * C + c];
        }
    emu::launch(dim3(blocks), dim3(TR_CUDA_BLOCK), 0, [&] {
        layernorm_backward_dinp_kernel(di, d, x, wp, cm, cr, (size_t)BT, C, format, accumulate);
    });
    tr_cpu_layernorm_backward(cpu_dinp.data(), cpu_dw.data(), cpu_db.data(), d, x, wp, cm, cr, 1,
                              BT, C, format, accumulate);
    check_close("backward dinp", dinp, cpu_dinp, tol);
    check_close("backward dweight (+= partials)", dw, cpu_dw, 1e-5);
    check_close("backward dbias (+= partials)", db, cpu_db, 1e-5);
    if (format != TR_PREC_FP32) {
        size_t bad = 0;
        for (float v : dinp)
            bad += tr_round_lowp(v, format) != v;
        CHECK(bad == 0, "backward dinp: %zu values not of the format", bad);
    }

    /* the fused kernel, as tr_cuda_layernorm_backward launches it (RB from the shape),
     * and with 3 row blocks: several rows a warp */
    int kpl = ln_fused_kpl(C);
    CHECK(kpl > 0, "fused backward: C %d has no KPL", C);
    for (int rb : {ln_fused_row_blocks((size_t)BT, C), 3}) {
        vec fdinp = dinp0, fdw(C, 0.25f), fdb(C, -0.5f), fpart((size_t)2 * rb * C, NAN);
        float *fp = fpart.data(), *fdi = fdinp.data();
        emu::launch(dim3((unsigned)rb), dim3(TR_CUDA_BLOCK), 0, [&] {
            switch (kpl) {
#define LN_FUSED(K)                                                                        \
    layernorm_backward_fused_kernel<K>(fdi, fp, d, x, wp, cm, cr, (size_t)BT, C, rb, format,   \
                                       accumulate)
            case 8: LN_FUSED(8); break;
            case 16: LN_FUSED(16); break;
            case 24: LN_FUSED(24); break;
            default: LN_FUSED(32); break;
#undef LN_FUSED
            }
        });
        for (int c = 0; c < C; c++)
            for (int y = 0; y < rb; y++) {
                fdw[c] += fpart[(size_t)y * C + c];
                fdb[c] += fpart[(size_t)(rb + y) * C + c];
            }
        printf("  fused backward, %d row blocks (KPL %d):\n", rb, kpl);
        same_bits("fused dinp (the two-kernel form's bits)", fdinp, dinp);
        check_close("fused dweight (+= partials)", fdw, cpu_dw, 1e-5);
        check_close("fused dbias (+= partials)", fdb, cpu_db, 1e-5);
    }
}

/* GELU's backward and the residual add four elements a thread: 16-byte accesses where
 * every pointer is aligned (off = 0), scalar ones else, a partial last group (n odd) */
static void test_elementwise(size_t n, int format, int off)
{
    printf("GELU and residual add (%s): n %zu, pointers %s\n", fmt_name(format), n,
           off ? "4 bytes off 16-byte alignment" : "16-byte aligned");
    vec a = rand_vec(n + 1, -4.0f, 4.0f), b = rand_vec(n + 1, -4.0f, 4.0f);
    vec got(n + 1, NAN), want(n + 1, NAN);
    float *g = got.data() + off;
    const float *ap = a.data() + off, *bp = b.data() + off;
    int v4 = tr_cuda_vec4(g, ap, bp);
    CHECK(v4 == !off, "tr_cuda_vec4: %d for pointers %s", v4, off ? "off alignment" : "aligned");
    /* a grid smaller than the groups: the grid-stride loops turn */
    size_t groups = (n + 3) / 4;
    dim3 grid(tr_cuda_grid(groups) > 3 ? 3 : tr_cuda_grid(groups));
    if (format == TR_PREC_FP32 && !off) { /* GELU's forward has no format: its output is
                                              rounded by whoever reads it */
        emu::launch(grid, dim3(TR_CUDA_BLOCK), 0, [&] { gelu_forward_kernel(g, ap, n); });
        tr_cpu_gelu_forward(want.data() + off, ap, n);
        check_close("gelu_forward", vec(got.begin(), got.begin() + n),
                    vec(want.begin(), want.begin() + n), 1e-6);
        std::fill(got.begin(), got.end(), NAN);
    }
    /* GELU's backward reads its input stored in the format: 16-bit values (8-byte
     * loads of four) where it is bf16 or fp16, starting off alignment as the rest */
    std::vector<uint16_t> a16(n + 8);
    const void *as = ap;
    if (format != TR_PREC_FP32) {
        for (size_t i = 0; i < n; i++)
            tr_stored_store(a16.data() + 4 * off, i, ap[i], format);
        as = a16.data() + 4 * off; /* a16 is 16-byte aligned by the allocator */
    }
    emu::launch(grid, dim3(TR_CUDA_BLOCK), 0,
                [&] { gelu_backward_kernel(g, as, bp, n, format, TR_PREC_FP32, v4); });
    tr_cpu_gelu_backward(want.data() + off, as, bp, n, format);
    same_bits("gelu_backward (stored input)", got, want);
    if (format != TR_PREC_FP32) {
        /* in place on a gradient stored in the format (mlp_backward's): b rounded and
         * stored, then GELU's backward over it, to the CPU's bits stored */
        std::vector<uint16_t> d16(n + 8), w16(n + 8);
        uint16_t *dp = d16.data() + 4 * off;
        for (size_t i = 0; i < n; i++) {
            tr_stored_store(dp, i, bp[i], format);
            tr_stored_store(w16.data() + 4 * off, i, want[off + i], format);
        }
        emu::launch(grid, dim3(TR_CUDA_BLOCK), 0,
                    [&] { gelu_backward_kernel(dp, as, dp, n, format, format, v4); });
        same_bits("gelu_backward in place on a 16-bit gradient", d16, w16);
    }
    /* the residual add: the stream (a, and out) stored in the format, b a product's fp32
     * output; into a buffer of its own, then in place on the stream as the model calls
     * it, against the CPU's bits */
    size_t es = tr_stored_bytes(format);
    std::vector<unsigned char> s1((n + 8) * 4, 0xff), s2((n + 8) * 4, 0xff), cpu((n + 8) * 4);
    unsigned char *o1 = s1.data() + off * 4 * es, *o2 = s2.data() + off * 4 * es;
    unsigned char *oc = cpu.data() + off * 4 * es;
    emu::launch(grid, dim3(TR_CUDA_BLOCK), 0, [&] { residual_kernel(o1, as, bp, n, format, v4); });
    std::memcpy(o2, as, n * es);
    emu::launch(grid, dim3(TR_CUDA_BLOCK), 0, [&] { residual_kernel(o2, o2, bp, n, format, v4); });
    tr_cpu_residual_forward(oc, as, bp, n, format);
    same_bits("residual (stored stream)", std::vector<unsigned char>(o1, o1 + n * es),
              std::vector<unsigned char>(oc, oc + n * es));
    same_bits("residual (in place)", std::vector<unsigned char>(o2, o2 + n * es),
              std::vector<unsigned char>(oc, oc + n * es));
    CHECK(s1[(size_t)(o1 - s1.data()) + n * es] == 0xff, "residual: wrote past n");
}

/* Dropout, out of place and in place, from a base that is not a multiple of four
 * (the groups of one Philox call straddle the call's ends) and a grid smaller than the
 * groups, against the CPU's bits: the same mask, the same products. */
static void test_dropout(size_t n, uint64_t base, float p)
{
    printf("dropout: n %zu from global element %llu, p %.2f\n", n, (unsigned long long)base,
           (double)p);
    tr_dropout d = tr_dropout_make(p, 99, 12, TR_STREAM_DROPOUT + 4, base);
    vec x = rand_vec(n + 1, -4.0f, 4.0f), got(n + 1, NAN), want(n + 1, NAN);
    dim3 grid(tr_cuda_grid((n + 3) / 4 + 1) > 3 ? 3 : tr_cuda_grid((n + 3) / 4 + 1));
    const float *xp = x.data();
    float *g = got.data();
    emu::launch(grid, dim3(TR_CUDA_BLOCK), 0, [&] { dropout_kernel(g, xp, n, d); });
    tr_cpu_dropout(want.data(), x.data(), n, &d);
    same_bits("dropout", got, want); /* element n: NaN on both, unwritten */
    vec inplace(x);
    float *ip = inplace.data();
    emu::launch(grid, dim3(TR_CUDA_BLOCK), 0, [&] { dropout_kernel(ip, ip, n, d); });
    same_bits("dropout in place", vec(inplace.begin(), inplace.begin() + n),
              vec(want.begin(), want.begin() + n));
    size_t zeros = 0;
    for (size_t i = 0; i < n; i++)
        zeros += want[i] == 0.0f;
    /* binomial(n, p): 5 standard deviations */
    double mean = p * (double)n, sd = sqrt((double)n * p * (1.0 - p));
    CHECK(fabs((double)zeros - mean) <= 5 * sd + 1, "dropout zeroed %zu of %zu, expected %.0f",
          zeros, n, mean);
}

/* attention_decode: the newest token's attention over T cached keys and values (more
 * than the block's threads, so each takes several), as tr_cuda_attention_decode
 * launches it, against the CPU's on the same stored qkv; the scores' max and sum are
 * block reductions, in another order than the CPU's, and the output's sum runs over
 * the keys in order where the CPU's BLAS may block it */
static void test_attention_decode(int T, int C, int NH, int format)
{
    printf("attention_decode (%s): T %d, C %d, NH %d\n", fmt_name(format), T, C, NH);
    int HS = C / NH;
    vec qkv = stored_in(rand_vec((size_t)T * 3 * C, -2.0f, 2.0f), format);
    vec out(C, NAN), want(C, NAN), scratch((size_t)NH * T), cpu_scratch((size_t)NH * T);
    float *o = out.data(), *sc = scratch.data();
    const float *q = qkv.data();
    float scale = 1.0f / sqrtf((float)HS);
    emu::launch(dim3(NH), dim3(TR_CUDA_BLOCK), 0,
                [&] { attention_decode_kernel(o, sc, q, T, C, HS, scale, format); });
    tr_cpu_attention_decode(want.data(), cpu_scratch.data(), q, T, C, NH, format);
    check_close("out", widened(out, C, format), widened(want, C, format),
                format == TR_PREC_FP32   ? 2e-6
                : format == TR_PREC_BF16 ? 8e-3
                                         : 1e-3);
}

/* c_fc's fp32 product to the MLP's stored hidden activations (pre rounded, GELU of
 * it), GELU of a stored pre, a stored tensor widened back, and an fp32 one stored,
 * against the arithmetic of the CPU's linear_gelu_forward after its product
 * (tr_round_lowp, then tr_gelu, each stored) */
static void test_gelu_store(size_t n, int format)
{
    printf("GELU store and widen (%s): n %zu\n", fmt_name(format), n);
    size_t es = tr_stored_bytes(format);
    vec lin = rand_vec(n, -5.0f, 5.0f);
    std::vector<unsigned char> pre(n * es, 0xff), out(n * es, 0xff), cpre(n * es), cout(n * es);
    dim3 grid(tr_cuda_grid(n) > 3 ? 3 : tr_cuda_grid(n));
    emu::launch(grid, dim3(TR_CUDA_BLOCK), 0,
                [&] { gelu_store_kernel(pre.data(), out.data(), lin.data(), n, format); });
    for (size_t i = 0; i < n; i++) {
        float p = tr_round_lowp(lin[i], format);
        tr_stored_store(cpre.data(), i, p, format);
        tr_stored_store(cout.data(), i, tr_gelu(p), format);
    }
    same_bits("stored pre", pre, cpre);
    /* here the kernel's tanh is the host's, so GELU of the rounded pre has the CPU's
     * bits (a GPU's tanh may differ in the last bit, and the stored value by one step
     * of the format: gpu.test_cuda_kernels allows that) */
    same_bits("stored gelu(pre)", out, cout);
    /* GELU of a pre that the product stored itself, four values a thread or one */
    for (int v4 = 0; v4 < 2; v4++) {
        std::vector<unsigned char> out2(n * es, 0xff);
        emu::launch(dim3(tr_cuda_grid((n + 3) / 4) > 2 ? 2 : tr_cuda_grid((n + 3) / 4)),
                    dim3(TR_CUDA_BLOCK), 0,
                    [&] { gelu_stored_kernel(out2.data(), cpre.data(), n, format, v4); });
        same_bits(v4 ? "gelu of the stored pre (vec)" : "gelu of the stored pre", out2, cout);
    }
    vec got(n, NAN), want(n);
    for (size_t i = 0; i < n; i++)
        want[i] = tr_stored_load(cout.data(), i, format);
    emu::launch(grid, dim3(TR_CUDA_BLOCK), 0,
                [&] { widen_stored_kernel(got.data(), out.data(), n, format); });
    same_bits("stored gelu(pre), widened", got, want);
    /* and the other way: a product's fp32 output stored (narrowed), as tr_stored_store */
    std::fill(pre.begin(), pre.end(), 0xff);
    emu::launch(grid, dim3(TR_CUDA_BLOCK), 0,
                [&] { narrow_stored_kernel(pre.data(), lin.data(), n, format); });
    for (size_t i = 0; i < n; i++)
        tr_stored_store(cpre.data(), i, lin[i], format);
    same_bits("fp32 product stored (narrowed)", pre, cpre);
}

/* ---- the optimizers ---------------------------------------------------------------- */

/* AdamW four parameters a thread (aligned: 16-byte accesses; off: scalar), SGD one, with
 * and without the working copy, against the CPU's update: the same scalar_math.h
 * functions, so the same bits */
static void test_optim(size_t n, int off, int format)
{
    printf("optimizers (working copy %s): n %zu, pointers %s\n",
           format == TR_PREC_FP32 ? "none" : fmt_name(format), n,
           off ? "4 bytes off 16-byte alignment" : "16-byte aligned");
    vec p0 = rand_vec(n + 1, -1.0f, 1.0f), m0 = rand_vec(n + 1, -0.1f, 0.1f);
    vec v0 = rand_vec(n + 1, 0.0f, 0.01f), g0 = rand_vec(n + 1, -1.0f, 1.0f);
    vec p = p0, m = m0, v = v0, lowp(n + 1, NAN), cp = p0, cm = m0, cv = v0, clowp(n + 1, NAN);
    float *lw = format == TR_PREC_FP32 ? nullptr : lowp.data() + off;
    float *clw = format == TR_PREC_FP32 ? nullptr : clowp.data() + off;
    float *pp = p.data() + off, *mp = m.data() + off, *vp = v.data() + off;
    const float *gp = g0.data() + off;
    tr_adamw_consts c = tr_adamw_make_consts(3e-3f, 0.9, 0.95, 1e-8f, 0.1f, 7);
    int vec4 = ((uintptr_t)pp | (uintptr_t)mp | (uintptr_t)vp | (uintptr_t)gp | (uintptr_t)lw) %
                   16 == 0;
    CHECK(vec4 == !off, "adamw: 16-byte accesses %d with pointers %s", vec4,
          off ? "off alignment" : "aligned");
    size_t groups = (n + 3) / 4;
    dim3 grid(tr_cuda_grid(groups) > 2 ? 2 : tr_cuda_grid(groups));
    emu::launch(grid, dim3(TR_CUDA_BLOCK), 0,
                [&] { adamw_kernel(pp, mp, vp, gp, n, c, lw, format, vec4); });
    tr_cpu_adamw_update(cp.data() + off, cm.data() + off, cv.data() + off, gp, n, 3e-3f, 0.9, 0.95,
                        1e-8f, 0.1f, 7, clw, format);
    same_bits("adamw params", p, cp);
    same_bits("adamw m", m, cm);
    same_bits("adamw v", v, cv);
    same_bits("adamw working copy", lowp, clowp);
    /* several tensors in one launch: three spans of this buffer (a short one, an empty
     * one, the rest; each its own decay) against the CPU's call on each. With a working
     * copy, the gradients are read rounded to its format and times a clipping factor:
     * against the CPU's update of gradients rounded (round_lowp) and scaled (scale) in
     * passes of their own before it, as the trainer made them */
    p = p0, m = m0, v = v0, cp = p0, cm = m0, cv = v0;
    float gfac = format == TR_PREC_FP32 ? 1.0f : 0.37f;
    vec g1 = g0;
    tr_cpu_round_lowp(g1.data(), g1.size(), format);
    if (gfac != 1.0f)
        tr_cpu_scale(g1.data(), g1.size(), gfac);
    CHECK(format == TR_PREC_FP32 || memcmp(g1.data(), g0.data(), g1.size() * sizeof(float)),
          "the rounded and scaled gradients differ from the stored ones");
    std::fill(lowp.begin(), lowp.end(), NAN);
    std::fill(clowp.begin(), clowp.end(), NAN);
    size_t cut[4] = {0, 7, 7, n};
    float wd[3] = {0.1f, 0.3f, 0.0f};
    adamw_chunk ch;
    memset(&ch, 0, sizeof ch);
    ch.c = tr_adamw_make_consts(3e-3f, 0.9, 0.95, 1e-8f, 0.0f, 7);
    ch.grad_format = format, ch.grad_factor = gfac;
    for (int k = 0; k < 3; k++) {
        size_t a = cut[k], len = cut[k + 1] - cut[k];
        if (!len)
            continue; /* (the host skips empty spans) */
        int j = ch.count++;
        ch.s[j].param = pp + a, ch.s[j].m = mp + a, ch.s[j].v = vp + a;
        ch.s[j].grad = gp + a, ch.s[j].lowp = lw ? lw + a : nullptr;
        ch.s[j].n = len, ch.s[j].start = ch.groups;
        ch.s[j].decay_factor = tr_adamw_make_consts(3e-3f, 0.9, 0.95, 1e-8f, wd[k], 7).decay_factor;
        ch.s[j].vec = ((uintptr_t)(pp + a) | (uintptr_t)(mp + a) | (uintptr_t)(vp + a) |
                       (uintptr_t)(gp + a) | (uintptr_t)(lw ? lw + a : nullptr)) % 16 == 0;
        ch.groups += (len + 3) / 4;
        tr_cpu_adamw_update(cp.data() + off + a, cm.data() + off + a, cv.data() + off + a,
                            g1.data() + off + a, len, 3e-3f, 0.9, 0.95, 1e-8f, wd[k], 7,
                            clw ? clw + a : nullptr, format);
    }
    emu::launch(dim3(2), dim3(TR_CUDA_BLOCK), 0, [&] { adamw_spans_kernel(ch, format); });
    same_bits("adamw spans params", p, cp);
    same_bits("adamw spans m", m, cm);
    same_bits("adamw spans v", v, cv);
    same_bits("adamw spans working copy", lowp, clowp);
    for (float mom : {0.9f, 0.0f}) {
        p = p0, m = m0, cp = p0, cm = m0;
        std::fill(lowp.begin(), lowp.end(), NAN);
        std::fill(clowp.begin(), clowp.end(), NAN);
        float *buf = mom != 0.0f ? m.data() + off : nullptr;
        emu::launch(dim3(tr_cuda_grid(n) > 2 ? 2 : tr_cuda_grid(n)), dim3(TR_CUDA_BLOCK), 0,
                    [&] { sgd_kernel(pp, buf, gp, n, 0.05f, mom, 1e-4f, lw, format); });
        tr_cpu_sgd_update(cp.data() + off, mom != 0.0f ? cm.data() + off : nullptr, gp, n, 0.05f,
                          mom, 1e-4f, clw, format);
        same_bits(mom != 0.0f ? "sgd (momentum) params" : "sgd params", p, cp);
        same_bits(mom != 0.0f ? "sgd (momentum) buffer" : "sgd buffer (untouched)", m, cm);
        same_bits("sgd working copy", lowp, clowp);
    }
}

/* ---- the embeddings ----------------------------------------------------------------- */

/* Token + position embedding, forward and backward, whole (v0 0, Vl V) and one shard of
 * the vocabulary, against the CPU's, bit for bit: the forward is the same expression,
 * and the backward adds each token's rows in row order onto its dwte row, as the CPU
 * loop does. Tokens from a small vocabulary repeat (up to BT / 4 times), across the
 * ballots' 32-row words and the block's 256-row trips; C spans two channel slices. */
static void test_embedding(int B, int T, int C, int V, int v0, int Vl, int with_wpe)
{
    printf("embedding: B %d, T %d, C %d, vocabulary %d, shard [%d, %d)%s\n", B, T, C, V, v0,
           v0 + Vl, with_wpe ? ", positions" : "");
    int BT = B * T;
    std::vector<int> tok(BT);
    for (int r = 0; r < BT; r++) /* a few frequent tokens and a tail */
        tok[r] = (int)(tr_rng_uniform(7, g_stream, r) * 4.0) == 0
                     ? (int)(tr_rng_uniform(8, g_stream, r) * V)
                     : (int)(tr_rng_uniform(9, g_stream, r) * 4.0) % V;
    g_stream++;
    vec wte = rand_vec((size_t)Vl * C, -1.0f, 1.0f), wpe = rand_vec((size_t)T * C, -1.0f, 1.0f);
    const float *wp = with_wpe ? wpe.data() : nullptr;
    vec out((size_t)BT * C, NAN), want((size_t)BT * C, NAN);
    emu::launch(dim3(tr_cuda_grid((size_t)BT * C) > 3 ? 3 : tr_cuda_grid((size_t)BT * C)),
                dim3(TR_CUDA_BLOCK), 0, [&] {
                    embedding_forward_kernel(out.data(), tok.data(), wte.data(), wp, (size_t)BT,
                                             T, C, v0, Vl);
                });
    tr_cpu_embedding_shard_forward(want.data(), tok.data(), wte.data(), wp, B, T, C, v0, Vl);
    same_bits("embedding forward", out, want);

    vec dout = rand_vec((size_t)BT * C, -1.0f, 1.0f);
    vec dwte0 = rand_vec((size_t)Vl * C, -0.5f, 0.5f), dwpe0 = rand_vec((size_t)T * C, -0.5f, 0.5f);
    vec dwte = dwte0, dwpe = dwpe0, cdwte = dwte0, cdwpe = dwpe0;
    dim3 grid((unsigned)BT, (unsigned)((C + TR_CUDA_BLOCK - 1) / TR_CUDA_BLOCK));
    emu::launch(grid, dim3(TR_CUDA_BLOCK), 0, [&] {
        embedding_wte_backward_kernel(dwte.data(), dout.data(), tok.data(), BT, C, v0, Vl);
    });
    if (with_wpe)
        emu::launch(dim3(2), dim3(TR_CUDA_BLOCK), 0, [&] {
            embedding_wpe_backward_kernel(dwpe.data(), dout.data(), B, T, C);
        });
    tr_cpu_embedding_shard_backward(cdwte.data(), with_wpe ? cdwpe.data() : nullptr, dout.data(),
                                    tok.data(), B, T, C, v0, Vl);
    same_bits("embedding backward: dwte", dwte, cdwte);
    same_bits(with_wpe ? "embedding backward: dwpe" : "embedding backward: dwpe (untouched)", dwpe,
              cdwpe);
}

/* ---- the squared norm of many spans ------------------------------------------------- */

/* tr_cuda_sum_squares_spans' walk and kernels against the one-span kernels run span by
 * span and added in order on the host, which the spans form claims to equal bit for
 * bit; and against the sum in long double. The GPU's grid of TR_CUDA_REDUCE_BLOCKS
 * blocks of TR_CUDA_BLOCK threads is cut to `blocks` of 32 here (the emulator runs
 * every thread), the same in both forms, so the same order. The spans' values are
 * read rounded to format: the one-span kernels take a copy of the buffer that
 * round_lowp has rounded, as the trainer's gradients were. */
static void test_sum_squares_spans(int count, int blocks, int format)
{
    printf("sum of squares: %d spans (%d chunks at most), %d blocks of 32, values read as %s\n",
           count, (count + TR_CUDA_SPAN_CHUNK - 1) / TR_CUDA_SPAN_CHUNK, blocks, fmt_name(format));
    vec all = rand_vec(40000, -2.0f, 2.0f), rounded = all;
    tr_cpu_round_lowp(rounded.data(), rounded.size(), format);
    std::vector<const float *> x(count);
    std::vector<size_t> n(count);
    size_t at = 0;
    for (int i = 0; i < count; i++) {
        n[i] = i % 7 == 3 ? 0 : i % 5 == 0 ? 1 + (size_t)i * 37 : (size_t)(i * 13 % 29);
        x[i] = all.data() + at;
        at += n[i] + (size_t)(i % 3); /* some spans start off 16-byte alignment */
    }
    CHECK(at <= all.size(), "spans fit the buffer: %zu", at);
    std::vector<double> partial((size_t)TR_CUDA_SPAN_CHUNK * TR_CUDA_REDUCE_BLOCKS, NAN);
    double total = NAN;
    int chunks = 0;
    int any = for_span_chunks(x.data(), n.data(), count, [&](const span_chunk &ch, int k, int first) {
        chunks++;
        emu::launch(dim3((unsigned)blocks, (unsigned)k), dim3(32), 0,
                    [&] { span_squares_partial_kernel(partial.data(), ch, format); });
        emu::launch(dim3(1), dim3((unsigned)blocks), 0,
                    [&] { add_span_sums_kernel(&total, partial.data(), k, first, (unsigned)blocks); });
    });
    double want = 0.0;
    long double exact = 0.0L;
    int nonempty = 0;
    for (int i = 0; i < count; i++) {
        const float *r = rounded.data() + (x[i] - all.data());
        for (size_t j = 0; j < n[i]; j++)
            exact += (long double)r[j] * r[j];
        if (!n[i])
            continue;
        nonempty++;
        std::vector<double> p1((size_t)TR_CUDA_REDUCE_BLOCKS, NAN);
        double one = NAN;
        emu::launch(dim3((unsigned)blocks), dim3(32), 0,
                    [&] { sum_squares_partial_kernel(p1.data(), r, n[i]); });
        emu::launch(dim3(1), dim3((unsigned)blocks), 0, [&] { sum_partials_kernel(&one, p1.data()); });
        want += one;
    }
    int want_chunks = (nonempty + TR_CUDA_SPAN_CHUNK - 1) / TR_CUDA_SPAN_CHUNK;
    CHECK(any == (nonempty > 0) && chunks == want_chunks, "%d chunks (want %d), any %d", chunks,
          want_chunks, any);
    if (!nonempty)
        return;
    CHECK(!memcmp(&total, &want, sizeof total), "spans %.17g, one by one %.17g", total, want);
    double rel = fabs((double)((long double)total - exact)) / (double)exact;
    CHECK(rel < 1e-13, "spans %.17g, long double %.17Lg (relative %.2e)", total, exact, rel);
}

/* ---- the classifier (MLP, CNN) and the rows' argmax ------------------------------ */

/* a grid-stride kernel's grid, cut to 3 blocks so the stride is taken too */
static dim3 strided_grid(size_t n)
{
    unsigned g = tr_cuda_grid(n);
    return dim3(g > 3 ? 3 : g);
}

/* ReLU and k x k max pooling against the CPU, bit for bit (the pooling's argmax
 * indices too), on inputs with ties inside windows and NaNs, where the scan's order
 * decides: the first of equal values wins, a NaN only where the scan starts. */
static void test_relu_pool(int B, int C, int H, int W, int k)
{
    printf("relu and %dx%d max pooling: %d x %d x %d x %d\n", k, k, B, C, H, W);
    size_t n = (size_t)B * C * H * W, planes = (size_t)B * C;
    vec x = rand_vec(n, -1.0f, 1.0f);
    for (size_t i = 0; i < n; i += 5)
        x[i] = 0.75f; /* ties */
    for (size_t i = 3; i < n; i += 31)
        x[i] = NAN;
    vec out(n, 7.0f), want(n, 7.0f);
    emu::launch(strided_grid(n), dim3(TR_CUDA_BLOCK), 0,
                [&] { relu_forward_kernel(out.data(), x.data(), n); });
    tr_cpu_relu_forward(want.data(), x.data(), n);
    same_bits("relu forward", out, want);
    vec dout = rand_vec(n, -1.0f, 1.0f), din(n, 7.0f), cdin(n, 7.0f);
    emu::launch(strided_grid(n), dim3(TR_CUDA_BLOCK), 0,
                [&] { relu_backward_kernel(din.data(), dout.data(), want.data(), n); });
    tr_cpu_relu_backward(cdin.data(), dout.data(), want.data(), n);
    same_bits("relu backward", din, cdin);

    size_t no = planes * (size_t)(H / k) * (W / k);
    vec po(no, 7.0f), cpo(no, 7.0f);
    std::vector<int> am(no, -5), cam(no, -5);
    emu::launch(strided_grid(no), dim3(TR_CUDA_BLOCK), 0, [&] {
        maxpool_forward_kernel(po.data(), am.data(), x.data(), planes, H, W, k);
    });
    tr_cpu_maxpool_forward(cpo.data(), cam.data(), x.data(), B, C, H, W, k);
    same_bits("maxpool forward", po, cpo);
    same_bits("maxpool forward: argmax", am, cam);
    vec pd = rand_vec(no, -1.0f, 1.0f), dx(n, 7.0f), cdx(n, 7.0f);
    emu::launch(strided_grid(n), dim3(TR_CUDA_BLOCK), 0, [&] {
        maxpool_backward_kernel(dx.data(), pd.data(), cam.data(), planes, H, W, k);
    });
    tr_cpu_maxpool_backward(cdx.data(), pd.data(), cam.data(), B, C, H, W, k);
    same_bits("maxpool backward", dx, cdx);
}

/* The classifier's softmax cross-entropy: probabilities and losses within 1e-6 of the
 * CPU's (the double sum of exponentials goes in another order), the hit count exact
 * with tied maxima (the first index wins, so a label on the second is a miss) and a
 * row starting with NaN; the backward bit for bit from the same probabilities. */
static void test_softmax_xent(int B, int V)
{
    printf("softmax cross-entropy: B %d, V %d\n", B, V);
    vec logits = rand_vec((size_t)B * V, -4.0f, 4.0f);
    std::vector<int> labels = targets_in((size_t)B, V);
    for (int r = 0; r < B; r += 3) { /* a tie for the maximum at columns 1 and V - 2 */
        logits[(size_t)r * V + 1] = logits[(size_t)r * V + V - 2] = 9.0f;
        labels[r] = r % 2 ? 1 : V - 2;
    }
    logits[(size_t)(B - 1) * V] = NAN; /* the CPU's scan keeps index 0 */
    labels[B - 1] = 0;
    vec probs((size_t)B * V, 7.0f), losses(B, 7.0f), cprobs((size_t)B * V), closses(B);
    unsigned hits = 0;
    unsigned blocks = (unsigned)((B + XENT_ROWS_PER_BLOCK - 1) / XENT_ROWS_PER_BLOCK);
    emu::launch(dim3(blocks), dim3(TR_CUDA_BLOCK), 0, [&] {
        softmax_xent_forward_kernel(probs.data(), losses.data(), &hits, logits.data(),
                                    labels.data(), B, V);
    });
    double loss_sum = 0.0;
    long correct = 0;
    tr_cpu_softmax_xent_forward(cprobs.data(), closses.data(), logits.data(), labels.data(), B,
                                V, &loss_sum, &correct);
    vec fin(B - 1), cfin(B - 1); /* the NaN row is NaN on both sides */
    std::copy(losses.begin(), losses.end() - 1, fin.begin());
    std::copy(closses.begin(), closses.end() - 1, cfin.begin());
    vec fp(probs.begin(), probs.end() - V), cfp(cprobs.begin(), cprobs.end() - V);
    check_close("softmax forward: probabilities", fp, cfp, 1e-6);
    check_close("softmax forward: losses", fin, cfin, 1e-6);
    CHECK(std::isnan(losses[B - 1]) && std::isnan(closses[B - 1]), "NaN row: %g, %g",
          losses[B - 1], closses[B - 1]);
    printf("  hits %u, the CPU's %ld\n", hits, correct);
    CHECK((long)hits == correct, "hits %u, the CPU's %ld", hits, correct);
    size_t n = (size_t)B * V;
    vec dl(n, 7.0f), cdl(n, 7.0f);
    float scale = 1.0f / (float)B;
    emu::launch(strided_grid(n), dim3(TR_CUDA_BLOCK), 0, [&] {
        softmax_xent_backward_kernel(dl.data(), cprobs.data(), labels.data(), scale, n, V);
    });
    tr_cpu_softmax_xent_backward(cdl.data(), cprobs.data(), labels.data(), scale, B, V);
    same_bits("softmax backward", dl, cdl);
}

/* The rows' argmax of logits stored in lfmt, read as values of format (the GPT's
 * accuracy and sampler), against the CPU's scan bit for bit: index and value, with
 * ties (the first wins), NaNs (never win; index 0 when the row starts with one) and
 * n = 0 (-1 and -inf). */
static void test_rows_argmax(int rows, int ld, int n, int format, int lfmt)
{
    printf("rows' argmax: %d rows of %d (of %d), %s read as %s\n", rows, n, ld, fmt_name(lfmt),
           fmt_name(format));
    vec x = rand_vec((size_t)rows * ld, -3.0f, 3.0f);
    for (int r = 0; r < rows && n > 2; r++) {
        float *row = &x[(size_t)r * ld];
        if (r % 3 == 0)
            row[n / 2] = row[n - 1] = 5.0f;
        if (r % 5 == 1)
            row[0] = NAN;
        if (r % 7 == 2)
            row[n / 3] = NAN;
    }
    vec stored = stored_in(x, lfmt), val(rows, 7.0f), cval(rows, 7.0f);
    std::vector<int> idx(rows, -5), cidx(rows, -5);
    unsigned blocks = (unsigned)((rows + XENT_ROWS_PER_BLOCK - 1) / XENT_ROWS_PER_BLOCK);
    emu::launch(dim3(blocks), dim3(TR_CUDA_BLOCK), 0, [&] {
        rows_argmax_kernel(idx.data(), val.data(), stored.data(), (size_t)rows, ld, n, format,
                           lfmt);
    });
    tr_cpu_rows_argmax(cidx.data(), cval.data(), stored.data(), (size_t)rows, ld, n, format, lfmt);
    same_bits("rows' argmax: index", idx, cidx);
    same_bits("rows' argmax: value", val, cval);
}

int main(void)
{
    for (int f = TR_PREC_FP32; f <= TR_PREC_FP16; f++) {
        test_xent_padded(37, 300, 320, f, TR_PREC_FP32);
        test_xent_shards(19, 290, 320, f, TR_PREC_FP32);
        if (f != TR_PREC_FP32) { /* the logits stored in the format (a GPU's) */
            test_xent_padded(37, 300, 320, f, f);
            test_xent_shards(19, 290, 320, f, f);
        }
        test_layernorm(45, 100, f, 0);
        test_layernorm(45, 100, f, 1);
        test_layernorm(37, 768, f, 1); /* GPT-2's C: 24 columns a lane */
        test_elementwise(5001, f, 0);
        test_elementwise(4098, f, 1);
        test_gelu_store(1224, f);
    }
    test_optim(4099, 0, TR_PREC_BF16);
    test_optim(4098, 1, TR_PREC_FP16);
    test_optim(1001, 0, TR_PREC_FP32);
    test_casts<__nv_bfloat16>(7, 300, 300, 0);
    test_casts<__half>(5, 260, 700, 33);
    test_colsum<__nv_bfloat16>(70, 100, TR_PREC_BF16);
    test_colsum<__half>(1100, 40, TR_PREC_FP16);
    test_xent_grad_16<__nv_bfloat16>(9, 320, 0, 300, 17, 280, TR_PREC_BF16);
    test_xent_grad_16<__half>(9, 320, 320, 0, 0, 320, TR_PREC_FP16);    /* padding only */
    test_xent_grad_16<__nv_bfloat16>(9, 320, 320, 100, 60, 260, TR_PREC_BF16); /* target held */
    test_embedding(3, 200, 300, 50, 0, 50, 1);  /* 600 rows: three 256-row trips */
    test_embedding(2, 40, 70, 50, 20, 17, 0);   /* a shard: tokens outside it add nothing */
    test_sum_squares_spans(71, 32, TR_PREC_FP32); /* three chunks, the last of 7 spans */
    test_sum_squares_spans(71, 32, TR_PREC_BF16);
    test_sum_squares_spans(6, 64, TR_PREC_FP16);
    test_sum_squares_spans(0, 32, TR_PREC_FP32); /* nothing: no launch, 0 */
    test_relu_pool(2, 3, 13, 11, 2); /* odd sizes: a trailing row and column no window covers */
    test_relu_pool(1, 2, 12, 12, 3);
    test_softmax_xent(21, 37);
    test_softmax_xent(9, 1000);
    for (int f = TR_PREC_FP32; f <= TR_PREC_FP16; f++) {
        test_rows_argmax(19, 330, 300, f, TR_PREC_FP32); /* a padded vocabulary */
        if (f != TR_PREC_FP32)
            test_rows_argmax(19, 330, 300, f, f);
    }
    test_rows_argmax(5, 64, 0, TR_PREC_BF16, TR_PREC_BF16); /* nothing to choose from */
    test_dropout(5001, 3, 0.1f);
    test_dropout(4096, 1 << 20, 0.5f);
    test_dropout(3, 6, 0.5f);
    test_attention_decode(300, 24, 3, TR_PREC_FP32); /* more keys than threads */
    test_attention_decode(1, 16, 2, TR_PREC_BF16);   /* the first token: itself alone */
    test_attention_decode(37, 96, 3, TR_PREC_FP16);  /* HS 32 */
    printf("emulator: %ld thread switches\n", emu::M.switches);
    return tr_test_finish();
}
