/* cpu_kernels.c: the CPU kernel table and its element-wise, pooling, linear and
 * softmax cross-entropy kernels (convolution in cpu_conv.c, optimizers in
 * cpu_optim.c, GEMM in cpu_gemm.c).
 *
 * Dimension letters as in kernels.h. Loops keep the innermost index contiguous so
 * that the compiler vectorises them; the parallel loops carry an if() clause so that
 * small tensors stay on one thread, where a fork/join would cost more than the work.
 * No loop here reduces floating point across threads: each output element is
 * written by one thread, in a fixed order, so results are bit-identical run to run. */
#include "backend/cpu_backend.h"
#include "backend/cpu_row_scans.h" /* tr_row_argmax */
#include "backend/cpu_simd.h"
#include "backend/lowp_math.h"
#include "backend/transformer_kernels.h"
#include "core/error.h"

#include <math.h>
#include <omp.h>
#include <string.h>

/* Elements below which a loop runs serially: a few microseconds of simple work, about
 * what waking the team costs (16K: the MLP's 128 x 256 activations run on both
 * threads, which wait for each other less than one waits for the other). */
#define PAR_MIN_ELEMS ((size_t)1 << 14)

/* out[i, cols] = b[cols] for the rows or columns [lo, hi) that tr_cpu_gemm_range gave
 * this thread: its block of C, which its share of the GEMM then accumulates onto. */
static void bias_block(float *out, const float *b, int B, int OUT, tr_gemm_split plan, int lo,
                       int hi)
{
    if (plan == TR_GEMM_SPLIT_COLS) {
        for (int i = 0; i < B; i++)
            memcpy(out + (size_t)i * OUT + lo, b + lo, (size_t)(hi - lo) * sizeof(float));
        return;
    }
    for (int i = lo; i < hi; i++)
        memcpy(out + (size_t)i * OUT, b, (size_t)OUT * sizeof(float));
}

void tr_cpu_linear_forward(float *out, const float *inp, const float *w, const float *b, int B,
                           int IN, int OUT)
{
    /* Write the bias first and let the GEMM accumulate onto it (beta = 1): one pass
     * over out instead of a GEMM pass and then a bias pass. Each thread writes the bias
     * into its own block of out and then computes that block: one parallel region. */
    int nt = tr_cpu_threads();
    tr_gemm_split plan = tr_cpu_gemm_plan(B, OUT, IN, nt);
#pragma omp parallel num_threads(nt) if (plan != TR_GEMM_SPLIT_NONE)
    {
        int t = omp_get_thread_num(), nth = omp_get_num_threads(), lo, hi;
        tr_cpu_gemm_range(plan, t, nth, B, OUT, &lo, &hi);
        if (b && hi > lo)
            bias_block(out, b, B, OUT, plan, lo, hi);
        tr_cpu_gemm_part(plan, t, nth, 0, 1, B, OUT, IN, 1.0f, inp, IN, w, IN, b ? 1.0f : 0.0f,
                         out, OUT);
    }
}

void tr_cpu_linear_backward(float *dinp, float *dw, float *db, const float *dout,
                            const float *inp, const float *w, int B, int IN, int OUT)
{
    /* The input gradient, the weight gradient and the bias gradient in one parallel
     * region: they are independent, so no barrier between them either. */
    int nt = tr_cpu_threads();
    tr_gemm_split pin = dinp ? tr_cpu_gemm_plan(B, IN, OUT, nt) : TR_GEMM_SPLIT_NONE;
    tr_gemm_split pw = tr_cpu_gemm_plan(OUT, IN, B, nt);
    int par = pin != TR_GEMM_SPLIT_NONE || pw != TR_GEMM_SPLIT_NONE ||
              (db && (size_t)B * OUT > PAR_MIN_ELEMS);
#pragma omp parallel num_threads(nt) if (par)
    {
        int t = omp_get_thread_num(), nth = omp_get_num_threads();
        if (dinp) /* dinp[B,IN] = dout[B,OUT] w[OUT,IN] */
            tr_cpu_gemm_part(pin, t, nth, 0, 0, B, IN, OUT, 1.0f, dout, OUT, w, IN, 0.0f, dinp,
                             IN);
        /* dw[OUT,IN] += dout^T[OUT,B] inp[B,IN] */
        tr_cpu_gemm_part(pw, t, nth, 1, 0, OUT, IN, B, 1.0f, dout, OUT, inp, IN, 1.0f, dw, IN);
        /* db += the column sums of dout: each column by one thread, over the batch in
         * order, so neither the sum nor its order depends on the thread count */
        if (db) {
            int j0 = (int)((long)OUT * t / nth), j1 = (int)((long)OUT * (t + 1) / nth);
            for (int i = 0; i < B; i++) {
                const float *d = dout + (size_t)i * OUT;
                for (int j = j0; j < j1; j++)
                    db[j] += d[j];
            }
        }
    }
}

/* dst[0, n) = src, a tensor stored in format (lowp_math.h), widened exactly to fp32 */
static void widen_stored(float *dst, const void *src, size_t n, int format)
{
#pragma omp parallel for schedule(static) if (n > PAR_MIN_ELEMS)
    for (size_t i = 0; i < n; i++)
        dst[i] = tr_stored_load(src, i, format);
}

void tr_cpu_linear_forward_stored(float *out, const void *inp, const float *w, const float *b,
                                  int B, int IN, int OUT, int format, float *scratch)
{
    if (tr_is_lowp(format)) {
        widen_stored(scratch, inp, (size_t)B * IN, format);
        inp = scratch;
    }
    tr_cpu_linear_forward(out, inp, w, b, B, IN, OUT);
}

void tr_cpu_linear_forward_stored_io(void *out, const void *inp, const float *w, const float *b,
                                     int B, int IN, int OUT, int format, float *scratch,
                                     float *scratch_in)
{
    if (!tr_is_lowp(format)) {
        tr_cpu_linear_forward(out, inp, w, b, B, IN, OUT);
        return;
    }
    tr_cpu_linear_forward_stored(scratch, inp, w, b, B, IN, OUT, format, scratch_in);
    tr_cpu_narrow_stored(out, scratch, (size_t)(B > 0 ? B : 0) * (OUT > 0 ? OUT : 0), format);
}

void tr_cpu_linear_backward_stored_dout(float *dinp, float *dw, float *db, const void *dout,
                                        const void *inp, const float *w, int B, int IN,
                                        int OUT, int format, float *scratch)
{
    if (tr_is_lowp(format)) {
        widen_stored(scratch, dout, (size_t)(B > 0 ? B : 0) * (OUT > 0 ? OUT : 0), format);
        dout = scratch;
    }
    tr_cpu_linear_backward_stored(dinp, dw, db, dout, inp, w, B, IN, OUT, format);
}

void tr_cpu_linear_backward_stored_dinp(void *dinp, float *dw, float *db, const float *dout,
                                        const void *inp, const float *w, int B, int IN,
                                        int OUT, int format, float *scratch)
{
    if (!tr_is_lowp(format)) {
        tr_cpu_linear_backward_stored(dinp, dw, db, dout, inp, w, B, IN, OUT, format);
        return;
    }
    tr_cpu_linear_backward_stored(scratch, dw, db, dout, inp, w, B, IN, OUT, format);
    tr_cpu_narrow_stored(dinp, scratch, (size_t)(B > 0 ? B : 0) * (IN > 0 ? IN : 0), format);
}

void tr_cpu_linear_backward_stored(float *dinp, float *dw, float *db, const float *dout,
                                   const void *inp, const float *w, int B, int IN, int OUT,
                                   int format)
{
    if (!tr_is_lowp(format)) {
        tr_cpu_linear_backward(dinp, dw, db, dout, inp, w, B, IN, OUT);
        return;
    }
    /* the input widened into dinp, the parameter gradients from it, then dinp over it:
     * each product split over the threads as tr_cpu_linear_backward splits it */
    widen_stored(dinp, inp, (size_t)B * IN, format);
    tr_cpu_linear_backward(NULL, dw, db, dout, dinp, w, B, IN, OUT);
    int nt = tr_cpu_threads();
    tr_gemm_split pin = tr_cpu_gemm_plan(B, IN, OUT, nt);
#pragma omp parallel num_threads(nt) if (pin != TR_GEMM_SPLIT_NONE)
    tr_cpu_gemm_part(pin, omp_get_thread_num(), omp_get_num_threads(), 0, 0, B, IN, OUT, 1.0f,
                     dout, OUT, w, IN, 0.0f, dinp, IN);
}

void tr_cpu_relu_forward(float *out, const float *inp, size_t n)
{
    /* x < 0 ? 0 : x rather than fmaxf(x, 0): a NaN passes through, so a diverging
     * run shows up in the loss instead of being silently zeroed here. */
#pragma omp parallel for schedule(static) if (n > PAR_MIN_ELEMS)
    for (size_t i = 0; i < n; i++)
        out[i] = inp[i] < 0.0f ? 0.0f : inp[i];
}

void tr_cpu_relu_backward(float *dinp, const float *dout, const float *out, size_t n)
{
#pragma omp parallel for schedule(static) if (n > PAR_MIN_ELEMS)
    for (size_t i = 0; i < n; i++) {
        float d = dout[i]; /* loaded unconditionally so the select vectorises */
        dinp[i] = out[i] > 0.0f ? d : 0.0f;
    }
}

/* 2 x 2 windows over rows r0 and r1 of a plane, 8 windows at a time: the even and
 * odd columns of each row are split into vectors and compared lane-wise, so a window
 * costs a few vector operations instead of three unpredictable branches. Order and
 * ties as the general loop: (0,0), (0,1), (1,0), (1,1), a later element only when
 * strictly greater (a NaN never wins, nor loses its place once it holds it). `base`
 * is r0's index in the plane, W the plane's width.
 * A last group of fewer than 8 windows still loads 16 columns and stores 8 results
 * where that stays inside the plane (xend, yend: the ends of its input and output):
 * the loads then read the next rows, and the extra results land on the next row's
 * outputs, which the next call overwrites (rows go in order, a plane on one thread).
 * Elsewhere (a plane's last rows) it reads and writes only its own elements; the
 * masked store is slow on AMD, hence not used on every row. */
__attribute__((optimize("no-tree-loop-distribute-patterns"))) /* no memcpy calls */
static void maxpool2_rows(float *y, int *am, const float *r0, const float *r1, int Wo,
                          int base, int W, const float *xend, const float *yend)
{
    const tr_v8i even = {0, 2, 4, 6, 8, 10, 12, 14}, odd = even + 1;
    for (int ox = 0; ox < Wo; ox += 8) {
        int n = Wo - ox < 8 ? Wo - ox : 8, lo = 2 * n < 8 ? 2 * n : 8, hi = 2 * n - lo;
        const float *p0 = r0 + 2 * ox, *p1 = r1 + 2 * ox;
        int spill = p1 + 16 <= xend && y + ox + 8 <= yend;
        tr_v8 a0, a1, b0, b1;
        if (n == 8 || spill) {
            a0 = v8_load(p0), a1 = v8_load(p0 + 8), b0 = v8_load(p1), b1 = v8_load(p1 + 8);
        } else {
            a0 = v8_load_n(p0, lo), a1 = v8_load_n(p0 + 8, hi);
            b0 = v8_load_n(p1, lo), b1 = v8_load_n(p1 + 8, hi);
        }
        tr_v8 c[4] = {__builtin_shuffle(a0, a1, even), __builtin_shuffle(a0, a1, odd),
                      __builtin_shuffle(b0, b1, even), __builtin_shuffle(b0, b1, odd)};
        tr_v8i i0 = base + 2 * (ox + (tr_v8i){0, 1, 2, 3, 4, 5, 6, 7});
        tr_v8i off[4] = {i0, i0 + 1, i0 + W, i0 + W + 1};
        tr_v8 m = c[0];
        tr_v8i best = off[0];
        for (int e = 1; e < 4; e++) {
            tr_v8i gt = c[e] > m; /* all ones where strictly greater */
            m = (tr_v8)(((tr_v8i)c[e] & gt) | ((tr_v8i)m & ~gt));
            best = (off[e] & gt) | (best & ~gt);
        }
        if (n == 8 || spill) {
            v8_store(y + ox, m);
            memcpy(am + ox, &best, sizeof best);
        } else {
            for (int i = 0; i < n; i++) {
                y[ox + i] = m[i];
                am[ox + i] = best[i];
            }
        }
    }
}

static void maxpool2_plane(float *y, int *am, const float *x, int H, int W)
{
    int Ho = H / 2, Wo = W / 2;
    const float *xend = x + (size_t)H * W, *yend = y + (size_t)Ho * Wo;
    for (int oy = 0; oy < Ho; oy++) {
        const float *r0 = x + (size_t)2 * oy * W;
        maxpool2_rows(y + (size_t)oy * Wo, am + (size_t)oy * Wo, r0, r0 + W, Wo, 2 * oy * W,
                      W, xend, yend);
    }
}

/* Any k: the first element of the window wins ties, as in PyTorch. */
static void maxpool_plane(float *y, int *am, const float *x, int H, int W, int k)
{
    int Ho = H / k, Wo = W / k;
    for (int oy = 0; oy < Ho; oy++) {
        for (int ox = 0; ox < Wo; ox++) {
            int best = oy * k * W + ox * k;
            for (int dy = 0; dy < k; dy++) {
                int row = (oy * k + dy) * W + ox * k;
                for (int dx = 0; dx < k; dx++)
                    if (x[row + dx] > x[best])
                        best = row + dx;
            }
            y[oy * Wo + ox] = x[best];
            am[oy * Wo + ox] = best;
        }
    }
}

void tr_cpu_maxpool_forward(float *out, int *argmax, const float *inp, int B, int C, int H,
                            int W, int k)
{
    int Ho = H / k, Wo = W / k;
    long planes = (long)B * C;
#pragma omp parallel for schedule(static) if ((size_t)planes * H * W > PAR_MIN_ELEMS)
    for (long p = 0; p < planes; p++) {
        const float *x = inp + (size_t)p * H * W;
        float *y = out + (size_t)p * Ho * Wo;
        int *am = argmax + (size_t)p * Ho * Wo;
        if (k == 2)
            maxpool2_plane(y, am, x, H, W);
        else
            maxpool_plane(y, am, x, H, W, k);
    }
}

/* 8 windows' gradients into r0[0 .. 16) and r1[0 .. 16): the window's winner (am, an
 * index in the plane; i0 is r0's first window's) gets g, the other three zero. The
 * winner's value is moved bit for bit (a mask, no arithmetic), as a scatter would. */
static void maxpool2_back8(float *r0, float *r1, tr_v8 g, tr_v8i am, int i0, int W)
{
    const tr_v8i lo = {0, 8, 1, 9, 2, 10, 3, 11}, hi = lo + 4;
    tr_v8i gv = (tr_v8i)g, i = i0 + 2 * (tr_v8i){0, 1, 2, 3, 4, 5, 6, 7};
    tr_v8i e0 = gv & (am == i), e1 = gv & (am == i + 1), e2 = gv & (am == i + W);
    tr_v8i e3 = gv & (am == i + W + 1);
    v8_store(r0, (tr_v8)__builtin_shuffle(e0, e1, lo));
    v8_store(r0 + 8, (tr_v8)__builtin_shuffle(e0, e1, hi));
    v8_store(r1, (tr_v8)__builtin_shuffle(e2, e3, lo));
    v8_store(r1 + 8, (tr_v8)__builtin_shuffle(e2, e3, hi));
}

/* One plane, 2 x 2 windows, rows of at least 8 of them: every input written once, 8
 * windows at a time, instead of zeroing the plane and scattering (half the time at
 * LeNet's 28 x 28). A row ends on a group that overlaps the one before: the same
 * values written twice. Columns and rows no window covers: zero. Shorter rows keep
 * the scatter, which writes less than 16-column groups would. */
static void maxpool2_plane_backward(float *dx, const float *dy, const int *am, int H, int W)
{
    int Ho = H / 2, Wo = W / 2;
    for (int oy = 0; oy < Ho; oy++) {
        float *r0 = dx + (size_t)2 * oy * W, *r1 = r0 + W;
        const float *g = dy + (size_t)oy * Wo;
        const int *a = am + (size_t)oy * Wo, base = 2 * oy * W;
        for (int ox = 0; ox < Wo; ox += 8) {
            int o = ox + 8 <= Wo ? ox : Wo - 8;
            tr_v8i av;
            memcpy(&av, a + o, sizeof av);
            maxpool2_back8(r0 + 2 * o, r1 + 2 * o, v8_load(g + o), av, base + 2 * o, W);
        }
        if (W & 1)
            r0[W - 1] = r1[W - 1] = 0.0f;
    }
    if (H & 1)
        memset(dx + (size_t)(H - 1) * W, 0, (size_t)W * sizeof(float));
}

void tr_cpu_maxpool_backward(float *dinp, const float *dout, const int *argmax, int B, int C,
                             int H, int W, int k)
{
    int Ho = H / k, Wo = W / k;
    long planes = (long)B * C;
#pragma omp parallel for schedule(static) if ((size_t)planes * H * W > PAR_MIN_ELEMS)
    for (long p = 0; p < planes; p++) {
        float *dx = dinp + (size_t)p * H * W;
        const float *dy = dout + (size_t)p * Ho * Wo;
        const int *am = argmax + (size_t)p * Ho * Wo;
        if (k == 2 && Wo >= 8) {
            maxpool2_plane_backward(dx, dy, am, H, W);
            continue;
        }
        memset(dx, 0, (size_t)H * W * sizeof(float));
        /* windows do not overlap (stride k), so each input gets at most one term */
        for (int o = 0; o < Ho * Wo; o++)
            dx[am[o]] = dy[o];
    }
}

void tr_cpu_softmax_xent_forward(float *probs, float *losses, const float *logits,
                                 const int *labels, int B, int V, double *loss_sum,
                                 long *correct)
{
    /* A label outside [0, V) would index past the row: the data reader validates
     * labels, so reaching this is a bug, and it is checked here, serially, rather
     * than being undefined behaviour inside the parallel loop. */
    for (int i = 0; i < B; i++)
        if (labels[i] < 0 || labels[i] >= V)
            tr_fatal(TR_EXIT_SOFTWARE, "softmax_xent: label %d of sample %d is outside [0, %d)",
                     labels[i], i, V);
    long hits = 0; /* an integer sum is exact, so reduction order cannot matter */
#pragma omp parallel for schedule(static) reduction(+ : hits) if ((size_t)B * V > PAR_MIN_ELEMS)
    for (int i = 0; i < B; i++) {
        const float *x = logits + (size_t)i * V;
        float *p = probs + (size_t)i * V;
        int amax = 0;
        for (int j = 1; j < V; j++)
            if (x[j] > x[amax])
                amax = j;
        float mx = x[amax]; /* subtracting the max keeps every exp in (0, 1] */
        double sum = 0.0;
        for (int j = 0; j < V; j++) {
            p[j] = expf(x[j] - mx);
            sum += p[j];
        }
        float inv = (float)(1.0 / sum);
        for (int j = 0; j < V; j++)
            p[j] *= inv;
        /* -log softmax[label] = log(sum) - (x[label] - max), exact even when the
         * probability underflows to zero */
        losses[i] = (float)(log(sum) - ((double)x[labels[i]] - mx));
        hits += amax == labels[i];
    }
    double total = 0.0; /* serial, in sample order: the same sum every run */
    for (int i = 0; i < B; i++)
        total += losses[i];
    *loss_sum = total;
    *correct = hits;
}

void tr_cpu_softmax_xent_backward(float *dlogits, const float *probs, const int *labels,
                                  float scale, int B, int V)
{
#pragma omp parallel for schedule(static) if ((size_t)B * V > PAR_MIN_ELEMS)
    for (int i = 0; i < B; i++) {
        const float *p = probs + (size_t)i * V;
        float *d = dlogits + (size_t)i * V;
        for (int j = 0; j < V; j++)
            d[j] = scale * p[j];
        d[labels[i]] = scale * (p[labels[i]] - 1.0f);
    }
}

void tr_cpu_scale(float *x, size_t n, float a)
{
#pragma omp parallel for schedule(static) if (n > PAR_MIN_ELEMS)
    for (size_t i = 0; i < n; i++)
        x[i] *= a;
}

void tr_cpu_round_lowp(float *x, size_t n, int format)
{
    if (format == TR_PREC_FP32)
        return;
#pragma omp parallel for schedule(static) if (n > PAR_MIN_ELEMS)
    for (size_t i = 0; i < n; i++)
        x[i] = tr_round_lowp(x[i], format);
}

void tr_cpu_rows_argmax(int *idx, float *val, const void *x, size_t rows, int ld, int n,
                        int format, int lfmt)
{
    if (n <= 0) {
        for (size_t r = 0; r < rows; r++) {
            idx[r] = -1;
            val[r] = -INFINITY;
        }
        return;
    }
    int view = tr_is_lowp(format) || tr_is_lowp(lfmt); /* a row of fp32 values first */
#pragma omp parallel if (rows * (size_t)n > PAR_MIN_ELEMS)
    {
        float *buf = view ? tr_alloc((size_t)n * sizeof *buf, "rows_argmax row") : NULL;
#pragma omp for schedule(static)
        for (size_t r = 0; r < rows; r++) {
            const float *row = tr_stored_view_as(buf, x, r * (size_t)ld, (size_t)n, lfmt, format);
            idx[r] = (int)tr_row_argmax(row, (size_t)n, &val[r]);
        }
        tr_free(buf);
    }
}

const tr_kernels tr_cpu_kernels = {
    .name = "cpu",
    .gemm = tr_cpu_gemm,
    .linear_forward = tr_cpu_linear_forward,
    .linear_backward = tr_cpu_linear_backward,
    .relu_forward = tr_cpu_relu_forward,
    .relu_backward = tr_cpu_relu_backward,
    .conv_scratch_floats = tr_cpu_conv_scratch_floats,
    .conv2d_forward = tr_cpu_conv2d_forward,
    .conv2d_backward = tr_cpu_conv2d_backward,
    .maxpool_forward = tr_cpu_maxpool_forward,
    .maxpool_backward = tr_cpu_maxpool_backward,
    .softmax_xent_forward = tr_cpu_softmax_xent_forward,
    .softmax_xent_backward = tr_cpu_softmax_xent_backward,
    .sgd_update = tr_cpu_sgd_update,
    .adamw_update = tr_cpu_adamw_update,
    .adamw_update_spans = tr_cpu_adamw_update_spans,
    .sum_squares = tr_cpu_sum_squares,
    .sum_squares_spans = tr_cpu_sum_squares_spans,
    .scale = tr_cpu_scale,
    .round_lowp = tr_cpu_round_lowp,
    .set_gemm_precision = tr_cpu_set_gemm_precision,
    .embedding_forward = tr_cpu_embedding_forward,
    .embedding_backward = tr_cpu_embedding_backward,
    .layernorm_forward = tr_cpu_layernorm_forward,
    .layernorm_backward = tr_cpu_layernorm_backward,
    .gelu_forward = tr_cpu_gelu_forward,
    .gelu_backward = tr_cpu_gelu_backward,
    .linear_gelu_forward = tr_cpu_linear_gelu_forward,
    .linear_forward_stored = tr_cpu_linear_forward_stored,
    .linear_forward_stored_io = tr_cpu_linear_forward_stored_io,
    .linear_backward_stored = tr_cpu_linear_backward_stored,
    .linear_backward_stored_dinp = tr_cpu_linear_backward_stored_dinp,
    .linear_backward_stored_dout = tr_cpu_linear_backward_stored_dout,
    .mlp_backward = tr_cpu_mlp_backward,
    .residual_forward = tr_cpu_residual_forward,
    .narrow_stored = tr_cpu_narrow_stored,
    .dropout = tr_cpu_dropout,
    .attention_state_floats = tr_cpu_attention_state_floats,
    .attention_forward = tr_cpu_attention_forward,
    .attention_backward = tr_cpu_attention_backward,
    .attention_decode = tr_cpu_attention_decode,
    .logits_format = tr_cpu_logits_format,
    .lm_head_forward = tr_cpu_lm_head_forward,
    .xent_padded_forward = tr_cpu_xent_padded_forward,
    .xent_padded_backward = tr_cpu_xent_padded_backward,
    .embedding_shard_forward = tr_cpu_embedding_shard_forward,
    .embedding_shard_backward = tr_cpu_embedding_shard_backward,
    .xent_shard_max = tr_cpu_xent_shard_max,
    .xent_shard_sums = tr_cpu_xent_shard_sums,
    .xent_shard_finish = tr_cpu_xent_shard_finish,
    .xent_shard_backward = tr_cpu_xent_shard_backward,
    .xent_linear_backward = tr_cpu_xent_linear_backward,
    .rows_argmax = tr_cpu_rows_argmax,
};
