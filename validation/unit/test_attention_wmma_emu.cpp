/* test_attention_wmma_emu.cpp: the GPU's WMMA attention kernels
 * (src/cuda/attention_wmma_kernels.cuh), the default attention of bf16- and fp16-mixed
 * runs on a GPU, run on the CPU by the warp emulator, against the CPU attention and an fp64
 * reference.
 *
 * The emulator runs the same source with each CUDA thread as a coroutine and WMMA's
 * loads, stores and products as warp collectives on a fragment layout of its own, so
 * what this proves is the kernels' own logic: the tiles and their zero padding (head
 * sizes padded to 32, 64 or 128, ragged sequence ends), the causal mask at tile edges,
 * the lane pairs' rows, the lazy rescale of forward's online softmax, the 16-bit P and
 * dS written over their scores, the barriers between them, and the 16-bit stores of out
 * and dqkv. What it cannot prove is the speed, or that the GPU's WMMA agrees with its
 * documentation: gpu.test_cuda_kernels runs the same kernels on a GPU.
 *
 * Checks per shape, in bf16-mixed (and fp16-mixed for three shapes):
 *  - out and dqkv against tr_cpu_attention_forward/backward within the GPU test's
 *    tolerance for bf16 attention (2e-2 of the largest value; fp16 2.5e-3);
 *  - out, the log-sum-exps and dqkv against an fp64 reference with the inputs rounded
 *    to the format, within 4e-3 (fp16 5e-4): P and dS are rounded to it once before
 *    their products;
 *  - every stored value is a value of the format, nothing outside the head's columns is
 *    written;
 *  - two runs with different thread schedules give the same bits;
 *  - the element-wise tile loads give the bits of the 8-byte ones.
 * And one shape whose keys grow along the sequence, so that rows' running maxima jump
 * by more than forward's LAZY margin at later tiles: the rescale of the accumulators
 * through shared memory runs (the test counts the rows it must rescale). And two shapes
 * with attention dropout (model.attn_pdrop), against the CPU kernels given the same
 * tr_dropout (a dp and tp rank's call: batch row and head offsets), which must draw
 * the same mask: out and dqkv within the same tolerance, and the dropout must change
 * most outputs. */
#include "warp_emulator.h" /* first: the primitives the kernels use */

#include "cuda/attention_wmma_kernels.cuh"

extern "C" {
#include "backend/transformer_kernels.h"
#include "core/rng.h"
}
#include "attention_emu_check.h"

/* the dropout of the probabilities every launch and CPU call below gets (off: 0) */
static tr_dropout g_drop;

/* The launches of src/cuda/cuda_attention_tc.cu, through the emulator: forward, then
 * rowsum(dO * O) as flash_dvec_kernel forms it, then the two backward kernels. vec: the
 * 8-byte tile loads (-1: where cuda_attention_tc.cu would take them). */
template <int D, int F>
static emu_run run_kernels(const vec &qkv, const vec &dout, int B, int T, int C, int NH,
                           unsigned seed, int vec_loads = -1)
{
    typedef tc_layout<D> L;
    int HS = C / NH, ntile = (T + TC_TILE - 1) / TC_TILE;
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
    float *out = r.out.data(), *lse = r.lse.data();
    std::vector<uint16_t> qkv16(qkv.size()), dout16(dout.size());
    for (size_t i = 0; i < qkv.size(); i++)
        tr_stored_store(qkv16.data(), i, qkv[i], F);
    for (size_t i = 0; i < dout.size(); i++)
        tr_stored_store(dout16.data(), i, dout[i], F);
    const uint16_t *x = qkv16.data(), *dO = dout16.data();
    /* tr_cuda_vec4_rows: (std::vector's buffers are 16-byte aligned) */
    int v8 = vec_loads >= 0 ? vec_loads : HS % 4 == 0 && C % 4 == 0;
    emu::launch(grid, TC_THREADS, L::FWD_BYTES,
                [&] { tc_forward_kernel<D, F>(o16, lse, x, T, C, NH, HS, scale, v8, g_drop); });
    for (size_t i = 0; i < out16.size(); i++)
        out[i] = out16[i] == 0xffffu ? SENTINEL : tr_stored_load(o16, i, F);
    vec dvec((size_t)B * NH * T);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH; h++) {
                float s = 0.0f;
                for (int d = 0; d < HS; d++) {
                    size_t o = ((size_t)b * T + t) * C + (size_t)h * HS + d;
                    s += tr_stored_load(dO, o, F) * out[o];
                }
                dvec[((size_t)b * NH + h) * T + t] = s;
            }
    const float *dv = dvec.data();
    emu::launch(grid, TC_THREADS, L::BWD_BYTES,
                [&] { tc_dkv_kernel<D, F>(d16, dO, x, lse, dv, T, C, NH, HS, scale, v8, g_drop); });
    emu::launch(grid, TC_THREADS, L::BWD_BYTES,
                [&] { tc_dq_kernel<D, F>(d16, dO, x, lse, dv, T, C, NH, HS, scale, v8, g_drop); });
    for (size_t i = 0; i < dqkv16.size(); i++)
        r.dqkv[i] = dqkv16[i] == 0xffffu ? SENTINEL : tr_stored_load(d16, i, F);
    return r;
}

/* Rows whose running max, as forward keeps it (moved only by more than LAZY), moves
 * after their first tile: the rows whose accumulators forward must rescale. */
template <int F> static size_t rows_rescaled(const vec &qkv, int B, int T, int C, int NH)
{
    int HS = C / NH;
    float scale = 1.0f / sqrtf((float)HS);
    size_t n = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                float m = -INFINITY;
                for (int j0 = 0; j0 <= i; j0 += TC_TILE) {
                    float tmax = -INFINITY;
                    for (int j = j0; j < j0 + TC_TILE && j <= i; j++) {
                        float s = 0.0f;
                        for (int d = 0; d < HS; d++)
                            s += tr_round_lowp(qkv[((size_t)b * T + i) * 3 * C + h * HS + d], F) *
                                 tr_round_lowp(qkv[((size_t)b * T + j) * 3 * C + C + h * HS + d],
                                               F);
                        tmax = fmaxf(tmax, scale * s);
                    }
                    if (tmax > m + LAZY) {
                        n += m != -INFINITY;
                        m = tmax;
                    }
                }
            }
    return n;
}

template <int D, int F = TR_PREC_BF16>
static void test_shape(int B, int T, int C, int NH, bool growing_keys = false)
{
    int HS = C / NH;
    printf("wmma attention (emulated), D %d, %s: B=%d T=%d C=%d NH=%d (head size %d)%s%s\n", D,
           F == TR_PREC_FP16 ? "fp16" : "bf16", B, T, C, NH, HS,
           growing_keys ? ", keys growing along the sequence" : "",
           tr_dropout_on(&g_drop) ? ", dropout" : "");
    vec qkv, dout;
    random_inputs(qkv, dout, B, T, C);
    if (growing_keys) {
        grow_keys(qkv, B, T, C);
        size_t n = rows_rescaled<F>(qkv, B, T, C, NH);
        printf("  rows forward rescales: %zu of %d\n", n, B * NH * T);
        CHECK(n > 0, "the growing keys moved no row's max by more than LAZY");
    }

    emu_run r = run_kernels<D, F>(qkv, dout, B, T, C, NH, 1);
    check_written(r, F);

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
    /* Keys growing along the sequence make rows' attention sit on few keys, where the
     * fp64 reference's dqkv is a difference of nearly equal terms: dP_ij - D_i with D_i
     * = rowsum(dO O) taken from O as stored (bf16, as a run stores it), near dO V_j when
     * P_ij is near 1; and dQ = scale sum_j dS_j K_j with sum_j dS_j = 0 and keys up to
     * 51 times the first ones. The bf16 roundings of O and dS grow against the result
     * there: twice the tolerance (measured: 4.2e-3). */
    compare("dqkv vs fp64", r.dqkv, dqkv_ref, growing_keys ? 2 * tol_ref : tol_ref);

    emu_run again = run_kernels<D, F>(qkv, dout, B, T, C, NH, 2);
    CHECK(again.out == r.out && again.lse == r.lse && again.dqkv == r.dqkv,
          "another thread schedule gave different bits");
    if (HS % 4 == 0 && C % 4 == 0) {
        emu_run elems = run_kernels<D, F>(qkv, dout, B, T, C, NH, 3, 0);
        CHECK(elems.out == r.out && elems.lse == r.lse && elems.dqkv == r.dqkv,
              "the element-wise tile loads gave other bits than the 8-byte ones");
        printf("  element-wise and 8-byte tile loads: the same bits\n");
    }
}

int main(void)
{
    test_shape<32>(2, 16, 64, 4);    /* head size 16, padded to 32; one partial tile */
    test_shape<32>(1, 70, 40, 2);    /* head size 20: 8-byte loads, padded columns */
    test_shape<32>(1, 66, 42, 2);    /* head size 21: element loads; T = 64 + 2 */
    test_shape<64>(1, 130, 128, 2);  /* GPT-2's head size 64; T ends 2 into a third tile */
    test_shape<64>(2, 64, 96, 2);    /* head size 48, exactly one tile; two batch rows */
    test_shape<128>(1, 80, 192, 2);  /* head size 96, padded to 128 */
    test_shape<128>(1, 65, 128, 1);  /* head size 128; one past a tile */
    test_shape<64>(1, 200, 64, 1, true); /* the lazy rescale, over four tiles */
    /* fp16-mixed: fp16 operands, P and dS rounded to fp16 */
    test_shape<32, TR_PREC_FP16>(1, 70, 40, 2);
    test_shape<64, TR_PREC_FP16>(1, 130, 128, 2);
    test_shape<128, TR_PREC_FP16>(1, 65, 128, 1);
    /* dropout, as a rank holding global rows 3.. and heads 1.. of twice NH draws it */
    g_drop = tr_dropout_make(0.2f, 1234, 7, TR_STREAM_DROPOUT + 5, 3);
    g_drop.heads = 4, g_drop.head0 = 1;
    test_shape<32>(2, 67, 40, 2); /* ragged tiles: Philox groups (i, j .. i + 8, j + 8)
                                   * whose row or key + 8 lies past T */
    test_shape<64, TR_PREC_FP16>(1, 67, 128, 2);
    g_drop = tr_dropout_make(0.0f, 0, 0, 0, 0);
    printf("emulator: %ld thread switches\n", emu::M.switches);
    return tr_test_finish();
}
