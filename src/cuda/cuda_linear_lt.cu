/* cuda_linear_lt.cu: the linear layer's forward as one cuBLASLt matmul whose
 * epilogue adds the bias (CUBLASLT_EPILOGUE_BIAS) and, for the GPT's c_fc, also
 * applies GELU and stores its input (CUBLASLT_EPILOGUE_GELU_AUX_BIAS): one kernel
 * and one pass over the output instead of a bias kernel, a GEMM reading its result
 * back (beta = 1) and a GELU kernel reading it again.
 *
 * Layout. Row-major out[B,OUT] = inp[B,IN] w[OUT,IN]^T + b is, read column-major
 * (cuda_gemm.cu), D[OUT x B] = op(A) B' with A = w stored as IN x OUT (ld IN) and
 * transposed, B' = inp stored as IN x B (ld IN), D stored OUT x B (ld OUT). The
 * bias epilogue adds a vector as long as D has rows (OUT), the same to every column
 * (every sample): exactly b. The GELU input (the "aux" matrix) has D's shape; its
 * leading dimension must be a multiple of 8, so OUT must be.
 *
 * Precision: as in cuda_gemm.cu, so the products are the same: CUBLAS_COMPUTE_32F
 * (fp32, no TF32) on fp32 A, B and D; in bf16/fp16-mixed, 16-bit copies of w and inp
 * (the backend's cast buffers; both must fit) with CUBLAS_COMPUTE_32F, or, where
 * they do not fit, _32F_FAST_16BF / _FAST_16F on the fp32 ones. An input already
 * stored in the 16-bit format (inp16: c_proj's, the MLP's GELU output) is read as it
 * is, with w's copy. D, the bias and the
 * aux matrix are fp32 (the bias's and aux's types default to D's); scale type fp32.
 * tr_cuda_linear_lt_16 stores D in the 16-bit format instead (c_attn's qkv: the fp32
 * sums plus the bias, rounded once as they are stored), with the bias's 16-bit copy,
 * made in the cast buffer that a stored input leaves free: exact, the bias being a
 * parameter, which the model keeps rounded to the format.
 * cuBLASLt's GELU is the tanh approximation (see tr_cuda_linear_gelu_forward in
 * cuda_gemm.cu for the evidence and the one difference from the CPU).
 *
 * Workspace: cuBLAS's (TR_CUDA_CUBLAS_WORKSPACE, 32 MiB, in the device's one
 * reservation: nothing is allocated after start-up), which the context hands to
 * both libraries; the one stream orders their calls, so they never use it at once.
 * cuBLASLt's own default is none, which leaves the heuristic only the algorithms
 * that need none; cuBLAS's documentation recommends 32 MiB on Hopper, PyTorch
 * measured H100's cuBLASLt slower with 1 MiB than with 32 (pytorch#101145) and now
 * shares its cuBLAS workspace with cuBLASLt the same way (pytorch#145130). Of the
 * split-K reductions only CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE is allowed: the partial
 * sums meet in fp32 in the workspace and D is rounded once, as the CPU rounds it (in
 * place or in D's type, a 16-bit D would round every partial sum). Which algorithm
 * runs changes the order of a sum, never its determinism: cuBLAS gives the same
 * bits from run to run on one GPU model (cuda_context.cu).
 *
 * Alignment: cuBLASLt's preferences assume 256-byte aligned matrices unless told
 * otherwise, and the trainer's tensors are views at any float offset of its flat
 * buffers, so each call states the alignment its pointers really have (the
 * heuristic reads the bias and aux alignment from their pointers itself).
 *
 * Fallback: where the heuristic offers no algorithm (a shape, alignment or compute
 * type this cuBLASLt has no epilogue kernel for, or a GPU it does not cover), the
 * entry returns 0 having queued nothing, and the caller takes the path without
 * cuBLASLt (cuda_gemm.cu). The heuristic's answer, algorithm or none, is kept per
 * problem (a small table), so it is asked once per shape, not per call. */
#include "cuda/cuda_common.h"
#include "cuda/cuda_ops.h"

#include "backend/lowp_math.h" /* tr_precision */

#include <stdint.h>
#include <string.h>

static cublasComputeType_t compute_type(int format)
{
    return format == TR_PREC_BF16   ? CUBLAS_COMPUTE_32F_FAST_16BF
           : format == TR_PREC_FP16 ? CUBLAS_COMPUTE_32F_FAST_16F
                                    : CUBLAS_COMPUTE_32F;
}

/* The largest power of two up to 256 that divides the address. */
static uint32_t alignment_of(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    uint32_t al = 256;
    while (al > 1 && a % al)
        al /= 2;
    return al;
}

/* ---- the heuristic's answers, per problem ----------------------------------------- */

/* Everything the heuristic's choice depends on (the leading dimensions follow from
 * the sizes). Only ints: compared with memcmp, no padding. */
typedef struct lt_key {
    int format, cast, stored, out16, epilogue, m, n, k;
    uint32_t align_w, align_inp, align_out, align_bias, align_aux;
} lt_key;

typedef struct lt_answer {
    lt_key key;
    int found; /* 0: no algorithm, take the fallback */
    cublasLtMatmulAlgo_t algo;
} lt_answer;

/* A GPT has a handful of linear shapes per stage (and the tests a few more); past
 * this many the heuristic is simply asked every time. */
#define LT_ANSWERS 64
static lt_answer g_answers[LT_ANSWERS];
static int g_nanswers;
static long g_fused, g_refused; /* matmuls run here; calls that found no algorithm */

static const lt_answer *find_answer(const lt_key *key)
{
    for (int i = 0; i < g_nanswers; i++)
        if (!memcmp(&g_answers[i].key, key, sizeof *key))
            return &g_answers[i];
    return NULL;
}

static void keep_answer(const lt_key *key, int found, const cublasLtMatmulAlgo_t *algo)
{
    if (g_nanswers == LT_ANSWERS)
        return;
    lt_answer *a = &g_answers[g_nanswers++];
    memset(a, 0, sizeof *a);
    a->key = *key;
    a->found = found;
    if (found)
        a->algo = *algo;
}

/* ---- one problem's descriptors ---------------------------------------------------- */

typedef struct lt_problem {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, d; /* w, inp, out (and pre, which has out's shape) */
} lt_problem;

static void set_desc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                     const void *value, size_t size)
{
    TR_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, attr, value, size));
}

static lt_problem make_problem(int format, int cast, int out16, uint32_t epilogue, float *pre,
                               const void *bias, int B, int IN, int OUT)
{
    lt_problem p;
    cublasComputeType_t ct = cast ? CUBLAS_COMPUTE_32F : compute_type(format);
    cudaDataType_t in_type = cast ? tr_cuda_type_16() : CUDA_R_32F;
    TR_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, ct, CUDA_R_32F));
    int32_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    set_desc(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    set_desc(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    set_desc(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue);
    if (bias)
        set_desc(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    if (bias && out16) { /* D's type, which is also the default: said, not assumed */
        int32_t bt = (int32_t)tr_cuda_type_16();
        set_desc(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt);
    }
    if (pre) {
        int64_t ld = OUT;
        set_desc(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &pre, sizeof pre);
        set_desc(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld);
    }
    TR_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, in_type, IN, OUT, IN));
    TR_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, in_type, IN, B, IN));
    TR_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.d, out16 ? tr_cuda_type_16() : CUDA_R_32F, OUT,
                                               B, OUT));
    return p;
}

static void free_problem(lt_problem *p)
{
    TR_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->a));
    TR_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->b));
    TR_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->d));
    TR_CUBLAS_CHECK(cublasLtMatmulDescDestroy(p->desc));
}

static void set_pref(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
                     const void *value, size_t size)
{
    TR_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, value, size));
}

/* Asks the heuristic for its best algorithm: 1 and *algo, or 0 where it has none.
 * Any refusal counts as "none" (the fallback is always correct); the path the
 * calls take is visible to the tests (tr_cuda_linear_lt_counts). */
static int ask_heuristic(const tr_cuda_ctx *c, const lt_problem *p, const lt_key *key,
                         cublasLtMatmulAlgo_t *algo)
{
    cublasLtMatmulPreference_t pref;
    TR_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t workspace = TR_CUDA_CUBLAS_WORKSPACE;
    uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE; /* and none: see the top */
    set_pref(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof workspace);
    set_pref(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &scheme, sizeof scheme);
    set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &key->align_w, sizeof(uint32_t));
    set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &key->align_inp,
             sizeof(uint32_t));
    set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &key->align_out,
             sizeof(uint32_t));
    set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &key->align_out,
             sizeof(uint32_t));
    cublasLtMatmulHeuristicResult_t r;
    memset(&r, 0, sizeof r);
    int got = 0;
    cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(c->lt, p->desc, p->a, p->b, p->d, p->d,
                                                      pref, 1, &r, &got);
    TR_CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    if (s != CUBLAS_STATUS_SUCCESS || got < 1 || r.state != CUBLAS_STATUS_SUCCESS ||
        r.workspaceSize > workspace)
        return 0;
    *algo = r.algo;
    return 1;
}

extern "C" void tr_cuda_linear_lt_counts(long *fused, long *refused)
{
    *fused = g_fused;
    *refused = g_refused;
}

/* tr_cuda_linear_lt, and tr_cuda_linear_lt_16 where out16 is set (then inp16 is given
 * and pre is NULL) */
static int linear_lt(void *out, int out16, float *pre, const float *inp, const void *inp16,
                     const float *w, const float *b, int B, int IN, int OUT)
{
    if (B <= 0 || IN <= 0 || OUT <= 0 || (pre && OUT % 8)) { /* aux ld: a multiple of 8 */
        g_refused++;
        return 0;
    }
    /* the context first: it loads cuBLASLt, whose calls the descriptors below use;
     * with its scratch, which holds the workspace (and the 16-bit copies) */
    const tr_cuda_ctx *c = tr_cuda_ctx_with_scratch();
    uint32_t epilogue = pre ? (b ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX)
                            : (b ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT);
    lt_key key;
    memset(&key, 0, sizeof key);
    key.format = tr_cuda_gemm_precision();
    key.stored = inp16 != NULL;
    key.cast = key.format != TR_PREC_FP32 && (size_t)OUT * IN <= TR_CUDA_CAST_ELEMS &&
               (key.stored || (size_t)B * IN <= TR_CUDA_CAST_ELEMS);
    if (key.stored && !key.cast) { /* a 16-bit input wants a 16-bit copy of w */
        g_refused++;
        return 0;
    }
    key.out16 = out16;
    if (out16 && (!key.stored || pre)) /* (its bias's copy goes where inp's would) */
        tr_fatal(TR_EXIT_SOFTWARE, "bug: a 16-bit linear output needs a 16-bit input");
    const void *wa = key.cast ? c->d_cast[0] : (const void *)w;
    const void *ia = key.stored ? inp16 : key.cast ? c->d_cast[1] : (const void *)inp;
    key.epilogue = (int)epilogue;
    key.m = OUT;
    key.n = B;
    key.k = IN;
    key.align_w = alignment_of(wa);
    key.align_inp = alignment_of(ia);
    key.align_out = alignment_of(out);
    const void *bias = out16 && b ? c->d_cast[1] : (const void *)b; /* the copy: below */
    key.align_bias = b ? alignment_of(bias) : 0;
    key.align_aux = pre ? alignment_of(pre) : 0;
    /* The heuristic is documented to read the bias and aux alignments from the
     * pointers, but kernels it picked have faulted on a bias short of 16 bytes
     * (pytorch/pytorch#194497, marian-dev#778); such a bias or aux takes the unfused
     * path instead (every shipped layout's are 16-byte aligned). */
    if ((b && key.align_bias < 16) || (pre && key.align_aux < 16)) {
        g_refused++;
        return 0;
    }
    const lt_answer *known = find_answer(&key);
    if (known && !known->found) {
        g_refused++;
        return 0;
    }
    lt_problem p = make_problem(key.format, key.cast, out16, epilogue, pre, b ? bias : NULL, B,
                                IN, OUT);
    cublasLtMatmulAlgo_t algo;
    memset(&algo, 0, sizeof algo);
    int found = known ? 1 : ask_heuristic(c, &p, &key, &algo);
    if (known)
        algo = known->algo;
    else
        keep_answer(&key, found, &algo);
    if (found) {
        if (key.cast) {
            tr_cuda_cast_16(c->d_cast[0], w, OUT, IN, IN);
            if (!key.stored)
                tr_cuda_cast_16(c->d_cast[1], inp, B, IN, IN);
            else if (out16 && b)
                tr_cuda_cast_16(c->d_cast[1], b, 1, OUT, OUT);
        }
        const float alpha = 1.0f, beta = 0.0f; /* C is not read: D = op(A) B' + bias */
        cublasStatus_t st = cublasLtMatmul(c->lt, p.desc, &alpha, wa, p.a, ia, p.b, &beta, out,
                                           p.d, out, p.d, &algo, c->d_workspace,
                                           TR_CUDA_CUBLAS_WORKSPACE, c->stream);
        /* An algorithm the heuristic offered but the call refuses (checked before any
         * launch: NOT_SUPPORTED, INVALID_VALUE) leaves nothing queued: the fallback
         * takes this call and every later one of the shape (PyTorch does the same,
         * pytorch#150243). A failure on the device stays fatal. */
        if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE) {
            lt_answer *a = (lt_answer *)find_answer(&key);
            if (a)
                a->found = 0;
            found = 0;
            g_refused++;
        } else {
            TR_CUBLAS_CHECK(st);
            g_fused++;
        }
    } else {
        g_refused++;
    }
    free_problem(&p); /* host descriptors: the queued matmul no longer needs them */
    return found;
}

int tr_cuda_linear_lt(float *out, float *pre, const float *inp, const void *inp16,
                      const float *w, const float *b, int B, int IN, int OUT)
{
    return linear_lt(out, 0, pre, inp, inp16, w, b, B, IN, OUT);
}

int tr_cuda_linear_lt_16(void *out, const void *inp16, const float *w, const float *b, int B,
                         int IN, int OUT)
{
    return linear_lt(out, 1, NULL, NULL, inp16, w, b, B, IN, OUT);
}
