/* test_attention_mma_emu.cpp: the GPU's mma.sync attention kernels
 * (src/cuda/attention_mma_kernels.cuh), run on the CPU by the warp emulator, against
 * the CPU attention and an fp64 reference.
 *
 * The kernels are CUDA; this machine class (and CI) has no GPU. The emulator runs the
 * same source with each CUDA thread as a coroutine and mma.sync by the PTX ISA's
 * fragment layout, so what this proves is the kernels' own logic: which lane holds
 * which score, the causal mask at tile edges and ragged sequence ends, head sizes
 * padded to the kernel's width, the online softmax, the backward's two kernels and
 * the 16-bit packing. What it cannot prove is the hardware's agreement with the
 * documented layout and anything about speed: gpu.test_cuda_kernels runs the same
 * kernels on a GPU.
 *
 * Checks per shape, in bf16-mixed (and fp16-mixed for two shapes):
 *  - out and dqkv against tr_cpu_attention_forward/backward within the GPU test's
 *    tolerance for bf16 attention (2e-2 of the largest value; fp16 2.5e-3);
 *  - out, the log-sum-exps and dqkv against an fp64 reference with the inputs rounded
 *    to the format, within 4e-3 (fp16 5e-4): P and dS are rounded to it once (bf16:
 *    2^-9 relative) before their products, which is the error this leaves;
 *  - every stored value is a value of the format (out and dqkv stored in 16 bits), and
 *    nothing outside the head's columns of out and dqkv is written;
 *  - two runs with different thread schedules give the same bits (no read of shared
 *    memory races its write). */
#include "warp_emulator.h" /* first: the primitives the kernels use */

#include "cuda/attention_mma_kernels.cuh"

extern "C" {
#include "backend/transformer_kernels.h"
#include "core/rng.h"
}
#include "attention_emu_check.h"

/* the dropout of the probabilities every launch and CPU call below gets (off: 0) */
static tr_dropout g_drop;

/* The launches of src/cuda/cuda_attention_mma.cu, through the emulator: forward, then
 * rowsum(dO * O) as flash_dvec_kernel forms it, then the two backward kernels. */
template <int D, int F>
static emu_run run_kernels(const vec &qkv, const vec &dout, int B, int T, int C, int NH,
                           unsigned seed, int qkv_mode = -1)
{
    typedef mma_layout<D> L;
    int HS = C / NH, ntile = (T + MMA_TILE - 1) / MMA_TILE, fmt = F;
    unsigned grid = (unsigned)(B * NH * ntile);
    float scale = 1.0f / sqrtf((float)HS);
    emu_run r;
    r.out.assign((size_t)B * T * C, SENTINEL);
    r.lse.assign((size_t)B * NH * T, SENTINEL);
    r.dqkv.assign((size_t)B * T * 3 * C, SENTINEL);
    emu::seed_schedule(seed);
    /* out and dqkv are stored in the format, 16 bits a value: 0xffff (a NaN in bf16 and
     * fp16, which no kernel stores) marks the unwritten ones, which come back as
     * SENTINEL */
    std::vector<uint16_t> out16(r.out.size(), 0xffffu), dqkv16(r.dqkv.size(), 0xffffu);
    uint16_t *o16 = out16.data(), *d16 = dqkv16.data();
    float *out = r.out.data(), *lse = r.lse.data(), *dqkv = r.dqkv.data();
    /* qkv and dout are stored in the format */
    std::vector<uint16_t> qkv16(qkv.size()), dout16(dout.size());
    for (size_t i = 0; i < qkv.size(); i++)
        tr_stored_store(qkv16.data(), i, qkv[i], fmt);
    for (size_t i = 0; i < dout.size(); i++)
        tr_stored_store(dout16.data(), i, dout[i], fmt);
    const uint16_t *x = qkv16.data(), *dO = dout16.data();
    /* the load modes cuda_attention_mma.cu picks, or the one asked for */
    int vq = qkv_mode >= 0 ? qkv_mode : mma_load_mode(x, C, HS);
    int vo = qkv_mode >= 0 ? qkv_mode : mma_load_mode(dO, C, HS);
    emu::launch(grid, MMA_THREADS, L::FWD_BYTES, [&] {
        mma_forward_kernel<D, F>(o16, lse, x, T, C, NH, HS, scale, vq, g_drop);
    });
    for (size_t i = 0; i < out16.size(); i++)
        out[i] = out16[i] == 0xffffu ? SENTINEL : tr_stored_load(o16, i, fmt);
    vec dvec((size_t)B * NH * T);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH; h++) {
                float s = 0.0f;
                for (int d = 0; d < HS; d++) {
                    size_t o = ((size_t)b * T + t) * C + (size_t)h * HS + d;
                    s += tr_stored_load(dO, o, fmt) * out[o];
                }
                dvec[((size_t)b * NH + h) * T + t] = s;
            }
    const float *dv = dvec.data();
    emu::launch(grid, MMA_THREADS, L::DKV_BYTES, [&] {
        mma_dkv_kernel<D, F>(d16, dO, x, lse, dv, T, C, NH, HS, scale, vq, vo, g_drop);
    });
    emu::launch(grid, MMA_THREADS, L::DQ_BYTES, [&] {
        mma_dq_kernel<D, F>(d16, dO, x, lse, dv, T, C, NH, HS, scale, vq, vo, g_drop);
    });
    for (size_t i = 0; i < dqkv16.size(); i++)
        dqkv[i] = dqkv16[i] == 0xffffu ? SENTINEL : tr_stored_load(d16, i, fmt);
    return r;
}

template <int D, int F = TR_PREC_BF16>
static void test_shape(int B, int T, int C, int NH, bool all_modes = true,
                       bool growing_keys = false)
{
    int HS = C / NH;
    printf("mma attention (emulated), D %d, %s: B=%d T=%d C=%d NH=%d (head size %d)%s%s\n", D,
           F == TR_PREC_FP16 ? "fp16" : "bf16", B, T, C, NH, HS,
           growing_keys ? ", keys growing along the sequence" : "",
           tr_dropout_on(&g_drop) ? ", dropout" : "");
    vec qkv, dout;
    random_inputs(qkv, dout, B, T, C);
    if (growing_keys)
        grow_keys(qkv, B, T, C);

    emu_run r = run_kernels<D, F>(qkv, dout, B, T, C, NH, 1);

    check_written(r, F); /* where it should be, and as values of F */

    /* the CPU kernels, as gpu.test_cuda_kernels compares them */
    vec out_cpu, dqkv_cpu;
    cpu_attention(qkv, dout, B, T, C, NH, F, &g_drop, out_cpu, dqkv_cpu);
    /* fp16 has 3 more bits than bf16: 8 times tighter */
    double tol_cpu = F == TR_PREC_FP16 ? 2.5e-3 : 2e-2, tol_ref = F == TR_PREC_FP16 ? 5e-4 : 4e-3;
    compare("out vs CPU kernel", r.out, out_cpu, tol_cpu);
    compare("dqkv vs CPU kernel", r.dqkv, dqkv_cpu, tol_cpu);
    if (tr_dropout_on(&g_drop)) { /* the fp64 reference has none: the mask must matter */
        cpu_attention(qkv, dout, B, T, C, NH, F, NULL, out_cpu, dqkv_cpu);
        check_dropout_matters(r, out_cpu, dqkv_cpu, tol_cpu);
        return;
    }

    vec out_ref, lse_ref, dqkv_ref;
    reference(qkv, dout, B, T, C, NH, F, out_ref, lse_ref, dqkv_ref);
    compare("out vs fp64", r.out, out_ref, tol_ref);
    compare("lse vs fp64", r.lse, lse_ref, 1e-5);
    /* growing keys: attention on few keys, where dqkv is a difference of nearly equal
     * terms (test_attention_wmma_emu.cpp says why): twice the tolerance */
    compare("dqkv vs fp64", r.dqkv, dqkv_ref, growing_keys ? 2 * tol_ref : tol_ref);

    emu_run again = run_kernels<D, F>(qkv, dout, B, T, C, NH, 2);
    CHECK(again.out == r.out && again.lse == r.lse && again.dqkv == r.dqkv,
          "another thread schedule gave different bits");

    /* the slower load modes (of qkv and dO) fill the same tiles: the same bits */
    if (!all_modes)
        return;
    int natural = mma_load_mode(nullptr, C, HS); /* (a null pointer is aligned) */
    for (int mode = MMA_LOAD_ELEMS; mode < natural; mode++) {
        emu_run m = run_kernels<D, F>(qkv, dout, B, T, C, NH, 3, mode);
        CHECK(m.out == r.out && m.lse == r.lse && m.dqkv == r.dqkv,
              "load mode %d gave other bits than mode %d", mode, natural);
    }
    printf("  load modes %d..%d: the same bits\n", MMA_LOAD_ELEMS, natural);
}

int main(void)
{
    test_shape<32>(2, 16, 64, 4);   /* head size 16, padded to 32; one partial tile */
    test_shape<32>(1, 70, 40, 2);   /* head size 20: 16-byte loads, padded columns */
    test_shape<32>(1, 66, 42, 2);   /* head size 21: odd, element loads; T = 64 + 2 */
    test_shape<64>(1, 130, 128, 2); /* GPT-2's head size 64; T ends 2 into a third tile */
    test_shape<64>(2, 64, 96, 2);   /* head size 48, exactly one tile */
    /* (the larger shapes in their own load mode only: time) */
    test_shape<64>(1, 200, 64, 1, false);  /* four tiles, the last partial */
    test_shape<64>(2, 129, 128, 2, false); /* batch rows and heads interleaved; 1 past 2 tiles */
    /* keys growing along the sequence: rows' running max jumps at later tiles */
    test_shape<64>(1, 200, 64, 1, false, true);
    /* fp16-mixed: fp16 operands, P and dS rounded to fp16 */
    test_shape<32, TR_PREC_FP16>(1, 70, 40, 2, false);
    test_shape<64, TR_PREC_FP16>(1, 130, 128, 2, false);
    /* dropout, as a rank holding global rows 3.. and heads 1.. of twice NH draws it */
    g_drop = tr_dropout_make(0.2f, 1234, 7, TR_STREAM_DROPOUT + 5, 3);
    g_drop.heads = 4, g_drop.head0 = 1;
    test_shape<32>(2, 67, 40, 2, false); /* ragged: groups with row or key + 8 past T */
    test_shape<64, TR_PREC_FP16>(1, 67, 128, 2, false);
    g_drop = tr_dropout_make(0.0f, 0, 0, 0, 0);
    printf("emulator: %ld thread switches\n", emu::M.switches);
    return tr_test_finish();
}
