/* test_attention_flash_emu.cpp: the GPU's fp32 fused attention kernels
 * (src/cuda/attention_flash_kernels.cuh: forward, rowsum(dO * O), dK/dV and dQ), run
 * on the CPU by the warp emulator, against the CPU attention and an fp64 reference.
 *
 * These kernels serve fp32 and fp16-mixed runs on a GPU (and bf16-mixed where the
 * tensor-core forms do not fit the head size), and the rowsum kernel serves every
 * form. This machine class (and CI) has no GPU; the emulator runs the same source
 * with each CUDA thread as a coroutine, so what this proves is the kernels' own
 * logic: tiles at ragged sequence ends, head sizes padded to each kernel width (32,
 * 64, 128, 256), the online softmax, the causal mask, and tensors stored in each
 * format (qkv, dO, out and dqkv: lowp_math.h). gpu.test_cuda_kernels runs them on a
 * GPU.
 *
 * Checks per shape and format:
 *  - every element of out, the log-sum-exps and dqkv written, nothing outside the head
 *    columns (sentinels);
 *  - out and dqkv against tr_cpu_attention_forward/backward on the same stored inputs:
 *    fp32 within 2e-5 of the largest value (other summation orders), 16-bit formats
 *    within two steps of the format (each side rounds its own sums as it stores);
 *  - out, lse and dqkv against fp64 on the inputs as stored: the same tolerances;
 *  - two runs with different thread schedules give the same bits (three shapes);
 *  - with attention dropout (model.attn_pdrop), out and dqkv against the CPU kernels
 *    given the same tr_dropout (a batch row and head offset, as a dp and tp rank's
 *    call has): the same mask drawn on both sides, within the same tolerances.
 * Five mutations (a dO offset, the rowsum's index, a missing barrier in forward and
 * in dK/dV, the causal mask) each fail 13-74 checks. */
#include "warp_emulator.h" /* first: the primitives the kernels use */

#include "cuda/attention_flash_kernels.cuh"

extern "C" {
#include "backend/transformer_kernels.h"
#include "core/rng.h"
}
#include "attention_emu_check.h"

typedef std::vector<unsigned char> bytes;

/* n values stored in format, from v */
static bytes stored(const vec &v, int format)
{
    bytes b(v.size() * tr_stored_bytes(format));
    for (size_t i = 0; i < v.size(); i++)
        tr_stored_store(b.data(), i, v[i], format);
    return b;
}

/* A tensor stored in format, filled with a marker no kernel stores (fp32: SENTINEL;
 * 16 bits: 0xffff, a NaN), read back with the unwritten elements as SENTINEL */
static bytes marked(size_t n, int format)
{
    bytes b(n * tr_stored_bytes(format), 0xff);
    if (format == TR_PREC_FP32)
        for (size_t i = 0; i < n; i++)
            memcpy(b.data() + 4 * i, &SENTINEL, 4);
    return b;
}
static vec unmarked(const bytes &b, int format)
{
    size_t n = b.size() / tr_stored_bytes(format);
    vec v(n);
    for (size_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, b.data() + 2 * i, 2);
        bool unwritten = format != TR_PREC_FP32 && h == 0xffffu;
        v[i] = unwritten ? SENTINEL : tr_stored_load(b.data(), i, format);
    }
    return v;
}

/* The launches of src/cuda/cuda_attention.cu's fused path, through the emulator */
template <int D>
static emu_run run_kernels(const vec &qkv, const vec &dout, int B, int T, int C, int NH,
                           int format, unsigned seed, const tr_dropout &drop)
{
    int HS = C / NH, BR = FA_WARPS * fa_rows<D>::R;
    unsigned grid = (unsigned)(B * NH * ((T + BR - 1) / BR));
    float scale = 1.0f / sqrtf((float)HS);
    emu::seed_schedule(seed);
    bytes q = stored(qkv, format), g = stored(dout, format); /* as c_attn and c_proj store */
    bytes out = marked((size_t)B * T * C, format), dqkv = marked(qkv.size(), format);
    emu_run r;
    r.lse.assign((size_t)B * NH * T, SENTINEL);
    vec dvec((size_t)B * NH * T, SENTINEL);
    void *o = out.data(), *d = dqkv.data();
    const void *x = q.data(), *dO = g.data();
    float *lse = r.lse.data(), *dv = dvec.data();
    emu::launch(grid, FA_THREADS, fwd_smem<D>(), [&] {
        flash_forward_kernel<D>(o, lse, x, T, C, NH, HS, scale, format, drop);
    });
    size_t rows = (size_t)B * T * NH, per_block = TR_CUDA_BLOCK / 32;
    emu::launch((unsigned)((rows + per_block - 1) / per_block), TR_CUDA_BLOCK, 0,
                [&] { flash_dvec_kernel(dv, dO, o, B, T, C, NH, HS, format); });
    emu::launch(grid, FA_THREADS, bwd_smem<D>(), [&] {
        flash_dkv_kernel<D>(d, dO, x, lse, dv, T, C, NH, HS, scale, format, drop);
    });
    emu::launch(grid, FA_THREADS, bwd_smem<D>(), [&] {
        flash_dq_kernel<D>(d, dO, x, lse, dv, T, C, NH, HS, scale, format, drop);
    });
    r.out = unmarked(out, format);
    r.dqkv = unmarked(dqkv, format);
    return r;
}

static const char *name(int format)
{
    return format == TR_PREC_BF16 ? "bf16" : format == TR_PREC_FP16 ? "fp16" : "fp32";
}

template <int D>
static void test_shape(int B, int T, int C, int NH, int format, bool twice, float pdrop = 0.0f)
{
    int HS = C / NH;
    printf("fused attention (emulated), D %d, %s: B=%d T=%d C=%d NH=%d (head size %d)%s\n", D,
           name(format), B, T, C, NH, HS, pdrop > 0 ? ", dropout" : "");
    /* as the rank holding global rows 3.. and heads 1.. of 2 NH at step 7 draws it */
    tr_dropout drop = tr_dropout_make(pdrop, 1234, 7, TR_STREAM_DROPOUT + 5, 3);
    drop.heads = 2 * NH;
    drop.head0 = 1;
    /* two steps of the format (relative to the largest value), or fp32's summation */
    double tol = format == TR_PREC_BF16 ? 1.6e-2 : format == TR_PREC_FP16 ? 2e-3 : 2e-5;
    vec qkv, dout;
    random_inputs(qkv, dout, B, T, C);

    emu_run r = run_kernels<D>(qkv, dout, B, T, C, NH, format, 1, drop);
    check_written(r, format);

    /* the CPU kernels on the same stored tensors */
    size_t natt = (size_t)B * NH * T * T;
    vec att(natt), datt(natt);
    bytes q = stored(qkv, format), g = stored(dout, format);
    bytes out = stored(vec(dout.size()), format), dqkv = stored(vec(qkv.size()), format);
    tr_cpu_attention_forward(out.data(), att.data(), q.data(), B, T, C, NH, format, &drop);
    tr_cpu_attention_backward(dqkv.data(), datt.data(), g.data(), out.data(), q.data(),
                              att.data(), B, T, C, NH, format, &drop);
    compare("out vs CPU kernel", r.out, unmarked(out, format), tol);
    compare("dqkv vs CPU kernel", r.dqkv, unmarked(dqkv, format), tol);
    if (pdrop > 0) { /* the fp64 reference has none: the mask must matter */
        vec out_plain, dqkv_plain;
        cpu_attention(qkv, dout, B, T, C, NH, format, NULL, out_plain, dqkv_plain);
        check_dropout_matters(r, out_plain, dqkv_plain, tol);
        return;
    }

    vec out_ref, lse_ref, dqkv_ref;
    reference(qkv, dout, B, T, C, NH, format, out_ref, lse_ref, dqkv_ref);
    compare("out vs fp64", r.out, out_ref, tol);
    compare("lse vs fp64", r.lse, lse_ref, 1e-5);
    compare("dqkv vs fp64", r.dqkv, dqkv_ref, tol);

    if (!twice)
        return;
    emu_run again = run_kernels<D>(qkv, dout, B, T, C, NH, format, 2, drop);
    CHECK(again.out == r.out && again.lse == r.lse && again.dqkv == r.dqkv,
          "another thread schedule gave different bits");
    printf("  another thread schedule: the same bits\n");
}

/* Sizes kept small: every shuffle is a switch of 32 coroutines (the emulator's cost) */
int main(void)
{
    const int F32 = TR_PREC_FP32, BF16 = TR_PREC_BF16, F16 = TR_PREC_FP16;
    test_shape<32>(1, 16, 32, 2, F32, true);    /* head size 16, padded to 32; partial tile */
    test_shape<32>(1, 70, 21, 1, F32, false);   /* head size 21: odd; T = 64 + 6 */
    test_shape<64>(1, 70, 64, 1, F32, false);   /* GPT-2's head size; 64-row tiles, ragged */
    test_shape<256>(1, 19, 200, 1, F32, false); /* head size 200: 8-row tiles */
    test_shape<32>(1, 16, 32, 2, BF16, false);
    test_shape<64>(1, 64, 48, 1, BF16, false);  /* head size 48, exactly one tile */
    test_shape<32>(1, 70, 21, 1, F16, false);
    test_shape<64>(1, 40, 64, 1, F16, false);
    test_shape<128>(1, 37, 96, 1, F16, true);   /* head size 96: 16-row tiles, ragged */
    test_shape<32>(1, 70, 32, 2, F32, false, 0.3f); /* dropout: ragged tiles */
    test_shape<64>(1, 40, 64, 1, BF16, false, 0.1f);
    printf("emulator: %ld thread switches\n", emu::M.switches);
    return tr_test_finish();
}
