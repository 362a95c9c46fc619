/* test_nccl.c (MPI, one rank per GPU, at most 4): every call of comm.h on device
 * buffers, which go through NCCL, against the same call on host buffers, which go
 * through MPI, on the same data and the same groups: all-reduce (sum, max, min; f32,
 * f64, i32, i64; in place and not), the non-blocking all-reduce with tr_test and
 * tr_wait, the reduce to a root, all-gatherv (equal pieces: NCCL's all-gather;
 * uneven ones: fused broadcasts), reduce-scatterv (fused reduces to each part's rank;
 * equal and uneven parts), send/recv and isend, and bcast.
 *
 * Values are small integers, so every summation order gives the same floats and
 * the two sides must agree bit for bit.
 *
 * Stream order (comm.h): before each float call on the device the buffer is written
 * by kernels still queued on the compute stream (three 2048^3 GEMMs, about 50 GFLOP,
 * ahead of a scale by 2), and right after it a scale by 0.5 is queued there, with no
 * host wait in between; the host side (MPI) runs after that. A communication stream
 * that did not wait for the compute stream would reduce the unscaled values, and a
 * compute stream that did not wait for the communication would scale before the
 * result lands: either way the numbers differ.
 *
 * Groups: the grid's dp, tp and embedding groups (4 ranks: tp 2 x pp 2, with the
 * embedding group; 2 ranks: pp 2, its embedding group of the two; 3: dp 3; 1: all of
 * size 1), each with its NCCL communicator; the world and the pipeline group have
 * none (they carry host memory; the pipeline's device messages go over its links).
 * Point-to-point needs 2 ranks or more (one GPU: skipped, and said).
 *
 * Links (comm.h: the pipeline group's point-to-point, a communicator and a stream
 * per direction between neighbouring stages), on the pp group: neighbours that both
 * isend to each other and then receive from each other (what 1F1B does between two
 * stages, and what deadlocks on one stream: each stream's send would wait for a
 * receive queued behind the other rank's send), with messages larger than NCCL's
 * buffers so that no send can finish before its receive runs; and the message
 * protocol of src/train/train_pipeline.c replayed for the real 1F1B and GPipe
 * schedules (parallel/pipeline.h), warm-up and cool-down included, with kernels
 * standing in for the stages' forward and backward. A deadlock ends in on_gpus.sh's
 * time limit. With --pipeline every rank is a stage (pp = ranks, up to 4: the middle
 * stages have links on both sides) and only the pp group is tested.
 *
 * Launched by on_gpus.sh, which runs `test_nccl --gpus` first, without MPI: it
 * prints how many GPUs are usable, or why none is and exits 77 (CTest: skipped). */
#include "backend/kernels.h"
#include "backend/lowp_math.h" /* TR_PREC_FP32 */
#include "comm/comm.h"
#include "core/error.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_device.h"
#include "cuda/cuda_probe.h"
#include "parallel/pipeline.h"
#include "test_util.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static tr_world W;
static const tr_kernels *gpu = &tr_cuda_kernels;

/* ---- the compute stream kept busy ------------------------------------------------ */

/* The busy GEMMs' size: 2048, or TR_TEST_BUSY_DIM where the GPU is the CUDA emulator
 * (validation/emu), whose streams run each call at once, in order, so that keeping one
 * busy tests nothing and 50 GFLOP take minutes. */
static int D = 2048;
static float *g_a, *g_b, *g_c; /* [D, D] each, device */

/* The links' messages: LINK floats (16 MiB) for the crossing sends and LINK / 2 + 3 for
 * the replayed pipeline, more than NCCL's buffers between two GPUs, so that no send can
 * finish before its receive runs; or TR_TEST_LINK_FLOATS where the GPU is the CUDA
 * emulator, whose sends never wait (emu_nccl.cpp), so that the size proves nothing
 * there, and the kernels on these messages (a CUDA thread an element) took most of the
 * test's time. */
static size_t LINK = (size_t)1 << 22;

static void busy_compute_stream(void)
{
    for (int i = 0; i < 3; i++)
        gpu->gemm(0, 0, D, D, D, 1.0f, g_a, D, g_b, D, 0.0f, g_c, D);
}

/* ---- values ---------------------------------------------------------------------- */

static size_t esize(tr_dtype t) { return tr_dtype_size(t); }

/* element i of rank r's data: an integer in [-30, 30] */
static long value(int r, size_t i, int salt)
{
    return (long)(((size_t)(r + 1) * 37 + i * 11 + (size_t)salt) % 61) - 30;
}

static void put(void *p, tr_dtype t, size_t i, long v)
{
    switch (t) {
    case TR_F32: ((float *)p)[i] = (float)v; break;
    case TR_F64: ((double *)p)[i] = (double)v; break;
    case TR_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    case TR_I64: ((int64_t *)p)[i] = (int64_t)v; break;
    case TR_U16: ((uint16_t *)p)[i] = tr_f32_to_bf16((float)v); break; /* moved only */
    }
}

static void fill(void *p, tr_dtype t, size_t n, int r, int salt)
{
    for (size_t i = 0; i < n; i++)
        put(p, t, i, value(r, i, salt));
}

/* a host buffer and its device twin with the same bytes */
typedef struct twin {
    void *h, *d;
    size_t bytes;
} twin;

static twin twin_new(size_t bytes)
{
    twin b = {malloc(bytes ? bytes : 1), tr_cuda_alloc(bytes, "test buffer"), bytes};
    if (!b.h)
        tr_fatal(TR_EXIT_OSERR, "test: out of host memory");
    return b;
}

static void twin_upload(twin *b) { tr_cuda_upload(b->d, b->h, b->bytes); }

static void twin_free(twin *b)
{
    free(b->h);
    tr_cuda_free(b->d);
}

/* Device result (fetched through the compute stream) equal to the host's, bit for
 * bit; names the first difference. */
static void same(const twin *b, tr_dtype t, const char *what)
{
    unsigned char *got = malloc(b->bytes ? b->bytes : 1);
    tr_cuda_download(got, b->d, b->bytes);
    size_t es = esize(t), bad = b->bytes / es;
    for (size_t i = 0; i < b->bytes / es && bad == b->bytes / es; i++)
        if (memcmp(got + i * es, (unsigned char *)b->h + i * es, es))
            bad = i;
    CHECK(bad == b->bytes / es, "[rank %d] %s: NCCL and MPI differ first at element %zu of %zu",
          W.rank, what, bad, b->bytes / es);
    free(got);
}

/* f32 only: x *= a, queued on the compute stream */
static void dev_scale(twin *b, size_t n, float a) { gpu->scale(b->d, n, a); }

static void host_scale(twin *b, size_t n, float a)
{
    for (size_t i = 0; i < n; i++)
        ((float *)b->h)[i] *= a;
}

/* ---- the calls ------------------------------------------------------------------- */

static const char *type_name(tr_dtype t)
{
    return t == TR_F32   ? "f32"
           : t == TR_F64 ? "f64"
           : t == TR_I32 ? "i32"
           : t == TR_U16 ? "u16"
                         : "i64";
}

static void test_allreduce(tr_group *g, const char *gname, tr_dtype t, tr_redop op, size_t n,
                           int in_place)
{
    char what[160];
    snprintf(what, sizeof what, "allreduce %s %s n=%zu %s on %s",
             op == TR_SUM ? "sum" : op == TR_MAX ? "max" : "min", type_name(t), n,
             in_place ? "in place" : "out of place", gname);
    size_t bytes = n * esize(t);
    twin s = twin_new(bytes), r = twin_new(bytes);
    fill(s.h, t, n, tr_group_rank(g), 1);
    fill(r.h, t, n, 99, 2); /* overwritten */
    twin_upload(&s);
    twin_upload(&r);
    twin *out = in_place ? &s : &r;
    int f32 = t == TR_F32;
    if (f32) {
        busy_compute_stream();
        dev_scale(&s, n, 2.0f);
    }
    tr_allreduce(s.d, out->d, n, t, op, g);
    if (f32) {
        dev_scale(out, n, 0.5f);
        host_scale(&s, n, 2.0f);
    }
    tr_allreduce(s.h, out->h, n, t, op, g);
    if (f32)
        host_scale(out, n, 0.5f);
    same(out, t, what);
    twin_free(&s);
    twin_free(&r);
}

/* buckets of one buffer reduced in place, non-blocking, as data_parallel.c does */
static void test_iallreduce(tr_group *g, const char *gname)
{
    enum { NB = 4 };
    size_t m = ((size_t)1 << 18) + 5, n = NB * m;
    twin x = twin_new(n * sizeof(float));
    fill(x.h, TR_F32, n, tr_group_rank(g), 3);
    twin_upload(&x);
    busy_compute_stream();
    dev_scale(&x, n, 2.0f);
    tr_request hreq[NB], dreq[NB];
    memset(hreq, 0, sizeof hreq);
    memset(dreq, 0, sizeof dreq);
    for (int b = 0; b < NB; b++) {
        float *d = (float *)x.d + b * m;
        tr_iallreduce(d, d, m, TR_F32, TR_SUM, g, &dreq[b]);
        CHECK(dreq[b].active == TR_REQ_NCCL, "[rank %d] bucket %d on %s: request active = %d",
              W.rank, b, gname, dreq[b].active);
    }
    /* the first bucket by polling, as backward does between its kernels */
    double t0 = tr_wtime();
    int done = 0;
    while (!(done = tr_test(&dreq[0])) && tr_wtime() - t0 < 60)
        ;
    CHECK(done && !dreq[0].active, "[rank %d] tr_test never saw bucket 0 on %s finish", W.rank,
          gname);
    for (int b = 0; b < NB; b++) {
        tr_wait(&dreq[b]); /* a no-op for bucket 0 */
        CHECK(!dreq[b].active, "[rank %d] bucket %d still active after tr_wait", W.rank, b);
    }
    dev_scale(&x, n, 0.5f);
    host_scale(&x, n, 2.0f);
    for (int b = 0; b < NB; b++) {
        float *h = (float *)x.h + b * m;
        tr_iallreduce(h, h, m, TR_F32, TR_SUM, g, &hreq[b]);
    }
    for (int b = 0; b < NB; b++)
        tr_wait(&hreq[b]);
    host_scale(&x, n, 0.5f);
    char what[120];
    snprintf(what, sizeof what, "iallreduce of %d buckets of %zu on %s", NB, m, gname);
    same(&x, TR_F32, what);
    twin_free(&x);
}

static void test_ireduce(tr_group *g, const char *gname, int root)
{
    size_t n = 100003;
    twin x = twin_new(n * sizeof(float));
    fill(x.h, TR_F32, n, tr_group_rank(g), 4);
    twin_upload(&x);
    busy_compute_stream();
    dev_scale(&x, n, 2.0f);
    tr_request hreq = {0}, dreq = {0};
    tr_ireduce(x.d, n, TR_F32, TR_SUM, root, g, &dreq);
    tr_wait(&dreq);
    dev_scale(&x, n, 0.5f);
    host_scale(&x, n, 2.0f);
    tr_ireduce(x.h, n, TR_F32, TR_SUM, root, g, &hreq);
    tr_wait(&hreq);
    host_scale(&x, n, 0.5f);
    char what[120];
    snprintf(what, sizeof what, "ireduce to root %d on %s (others keep theirs)", root, gname);
    same(&x, TR_F32, what);
    twin_free(&x);
}

static void test_allgatherv(tr_group *g, const char *gname, int uneven)
{
    int size = tr_group_size(g), me = tr_group_rank(g);
    size_t counts[8], displs[8], total = 0;
    if (size > 8) { /* on_gpus.sh starts at most 4 ranks */
        CHECK(size <= 8, "allgatherv test: a group of %d ranks", size);
        return;
    }
    for (int r = 0; r < size; r++) {
        counts[r] = uneven ? 1000 + 317 * (size_t)r : 4099;
        displs[r] = total;
        total += counts[r];
    }
    if (uneven && size > 1)
        counts[1] = 0; /* an empty piece */
    twin x = twin_new(total * sizeof(float));
    for (size_t i = 0; i < total; i++)
        ((float *)x.h)[i] = -1000.0f; /* others' pieces: to be overwritten */
    for (size_t i = 0; i < counts[me]; i++)
        ((float *)x.h)[displs[me] + i] = (float)value(me, i, 5);
    twin_upload(&x);
    busy_compute_stream();
    dev_scale(&x, total, 2.0f);
    tr_allgatherv(x.d, counts, displs, TR_F32, g);
    dev_scale(&x, total, 0.5f);
    host_scale(&x, total, 2.0f);
    tr_allgatherv(x.h, counts, displs, TR_F32, g);
    host_scale(&x, total, 0.5f);
    int right = 1; /* the host side against the known answer too */
    for (int r = 0; r < size; r++)
        for (size_t i = 0; i < counts[r]; i++)
            right &= ((float *)x.h)[displs[r] + i] == (float)value(r, i, 5);
    CHECK(right, "[rank %d] MPI allgatherv on %s gave wrong pieces", W.rank, gname);
    char what[120];
    snprintf(what, sizeof what, "allgatherv %s pieces on %s", uneven ? "uneven" : "equal",
             gname);
    same(&x, TR_F32, what);
    twin_free(&x);
}

/* each rank's part summed into it in place, the others' parts left as they were
 * (sequence parallelism's row-parallel sums: gpt.c) */
static void test_reduce_scatterv(tr_group *g, const char *gname, int uneven)
{
    int size = tr_group_size(g);
    size_t counts[8], displs[8], total = 0;
    if (size > 8) {
        CHECK(size <= 8, "reduce_scatterv test: a group of %d ranks", size);
        return;
    }
    for (int r = 0; r < size; r++) {
        counts[r] = uneven ? 1000 + 317 * (size_t)r : 4099;
        displs[r] = total;
        total += counts[r];
    }
    if (uneven && size > 1)
        counts[1] = 0; /* an empty part */
    twin x = twin_new(total * sizeof(float));
    fill(x.h, TR_F32, total, tr_group_rank(g), 6);
    twin_upload(&x);
    busy_compute_stream();
    dev_scale(&x, total, 2.0f);
    tr_reduce_scatterv(x.d, counts, displs, g);
    dev_scale(&x, total, 0.5f);
    host_scale(&x, total, 2.0f);
    tr_reduce_scatterv(x.h, counts, displs, g);
    host_scale(&x, total, 0.5f);
    char what[120];
    snprintf(what, sizeof what, "reduce_scatterv of %s parts on %s", uneven ? "uneven" : "equal",
             gname);
    same(&x, TR_F32, what);
    twin_free(&x);
}

static void test_bcast(tr_group *g, const char *gname, tr_dtype t, int root)
{
    size_t n = 65537, bytes = n * esize(t);
    twin x = twin_new(bytes);
    fill(x.h, t, n, tr_group_rank(g) == root ? 7 : 8, 6); /* only root's must survive */
    twin_upload(&x);
    tr_bcast(x.d, n, t, root, g);
    tr_bcast(x.h, n, t, root, g);
    char what[120];
    snprintf(what, sizeof what, "bcast %s from root %d on %s", type_name(t), root, gname);
    same(&x, t, what);
    twin_free(&x);
}

/* A ring: each rank sends to the next and receives from the previous. Even ranks
 * send first and odd ranks receive first, so it completes under NCCL's rule (a send
 * ends only when its receive is posted) with any number of ranks. */
static void test_p2p(tr_group *g, const char *gname, int nonblocking)
{
    int size = tr_group_size(g), me = tr_group_rank(g);
    int next = (me + 1) % size, prev = (me + size - 1) % size;
    size_t n = 300007;
    twin out = twin_new(n * sizeof(float)), in = twin_new(n * sizeof(float));
    fill(out.h, TR_F32, n, me, 7);
    fill(in.h, TR_F32, n, 99, 8);
    twin_upload(&out);
    twin_upload(&in);
    busy_compute_stream();
    dev_scale(&out, n, 2.0f);
    tr_request req[2] = {{{0}, 0}, {{0}, 0}};
    for (int side = 0; side < 2; side++) { /* the device (NCCL), then the host (MPI) */
        if (side == 1)
            host_scale(&out, n, 2.0f);
        void *o = side ? out.h : out.d, *i = side ? in.h : in.d;
        for (int step = 0; step < 2; step++) {
            int sending = (step == 0) == (me % 2 == 0);
            if (sending && nonblocking)
                tr_isend(o, n, TR_F32, next, 3, g, &req[side]);
            else if (sending)
                tr_send(o, n, TR_F32, next, 3, g);
            else
                tr_recv(i, n, TR_F32, prev, 3, g);
        }
        tr_wait(&req[side]);
        if (side == 0)
            dev_scale(&in, n, 0.5f);
    }
    host_scale(&in, n, 0.5f);
    int right = 1;
    for (size_t i = 0; i < n; i++)
        right &= ((float *)in.h)[i] == (float)value(prev, i, 7);
    CHECK(right, "[rank %d] MPI ring on %s: wrong data from rank %d", W.rank, gname, prev);
    char what[120];
    snprintf(what, sizeof what, "%s ring on %s", nonblocking ? "isend/recv" : "send/recv",
             gname);
    same(&in, TR_F32, what);
    twin_free(&out);
    twin_free(&in);
}

/* ---- links ------------------------------------------------------------------------ */

/* dst = a + b on n floats: a kernel on the device, a loop on the host */
static void add(int device, float *dst, const float *a, const float *b, size_t n)
{
    if (device) {
        gpu->residual_forward(dst, a, b, n, TR_PREC_FP32);
        return;
    }
    for (size_t i = 0; i < n; i++)
        dst[i] = a[i] + b[i];
}

/* Pairs (k, k + 1) with k = offset mod 2 of the group's neighbours: each rank isends
 * ROUNDS messages to its partner, each followed at once by a receive from it. */
static void test_crossing(tr_group *g, const char *gname, int offset)
{
    enum { ROUNDS = 3 };
    int size = tr_group_size(g), me = tr_group_rank(g);
    int lower = (me - offset) % 2 == 0 ? me : me - 1;
    if (lower < 0 || lower + 1 >= size)
        return; /* no partner at this offset */
    int partner = lower == me ? me + 1 : lower;
    size_t n = LINK;
    twin out[ROUNDS], in[ROUNDS];
    tr_request req[2][ROUNDS];
    memset(req, 0, sizeof req);
    for (int k = 0; k < ROUNDS; k++) {
        out[k] = twin_new(n * sizeof(float));
        in[k] = twin_new(n * sizeof(float));
        fill(out[k].h, TR_F32, n, me, 20 + k);
        twin_upload(&out[k]);
    }
    for (int side = 0; side < 2; side++) { /* the device (NCCL links), then the host (MPI) */
        for (int k = 0; k < ROUNDS; k++) {
            if (side == 0) {
                busy_compute_stream();
                dev_scale(&out[k], n, 2.0f);
            } else {
                host_scale(&out[k], n, 2.0f);
            }
            tr_isend(side ? out[k].h : out[k].d, n, TR_F32, partner, 3, g, &req[side][k]);
            tr_recv(side ? in[k].h : in[k].d, n, TR_F32, partner, 3, g);
            if (side == 0)
                dev_scale(&in[k], n, 0.5f); /* queued at once: after the receive, on the GPU */
            else
                host_scale(&in[k], n, 0.5f);
        }
        for (int k = 0; k < ROUNDS; k++)
            tr_wait(&req[side][k]);
    }
    for (int k = 0; k < ROUNDS; k++) {
        int right = 1;
        for (size_t i = 0; i < n; i++)
            right &= ((float *)in[k].h)[i] == (float)value(partner, i, 20 + k);
        CHECK(right, "[rank %d] MPI crossing on %s: wrong data from rank %d", W.rank, gname,
              partner);
        char what[120];
        snprintf(what, sizeof what, "crossing isend+recv %d with rank %d on %s", k, partner,
                 gname);
        same(&in[k], TR_F32, what);
        twin_free(&out[k]);
        twin_free(&in[k]);
    }
}

/* float buffer of a twin on one side */
static float *fb(twin *b, int device) { return (float *)(device ? b->d : b->h); }

/* train_pipeline.c's messages for schedule `kind` over M micro-batches, stage s of
 * the group: forward: in = x (first stage) or the activation received from s - 1,
 * out = in + bias_s, isent to s + 1 (the last stage keeps it as y); backward: grad =
 * y (last stage) or the gradient received from s + 1, grad += in (the slot's saved
 * input: a slot reused too early shows), sent to s - 1 (the first stage keeps it as
 * dx). The last stage's y and the first's dx, device against host and against the
 * closed form. */
enum { MAXM = 16 };

static void test_pipeline_replay(tr_group *g, const char *gname, tr_pipe_schedule kind, int M)
{
    int P = tr_group_size(g), s = tr_group_rank(g), first = s == 0, last = s == P - 1;
    size_t n = LINK / 2 + 3, bytes = n * sizeof(float);
    tr_pipe_op ops[2 * MAXM];
    int nops = tr_pipeline_ops(kind, P, s, M, ops), slots = tr_pipeline_slots(kind, P, s, M);
    twin in[MAXM], out[MAXM];
    for (int k = 0; k < slots; k++)
        in[k] = twin_new(bytes), out[k] = twin_new(bytes);
    twin grad = twin_new(bytes), bias = twin_new(bytes), zero = twin_new(bytes);
    twin x = twin_new(M * bytes), y = twin_new(M * bytes), dx = twin_new(M * bytes);
    fill(bias.h, TR_F32, n, s, 10);
    fill(x.h, TR_F32, (size_t)M * n, 0, 11);
    memset(zero.h, 0, bytes);
    memset(y.h, 0, M * bytes); /* the device twins start at 0 too */
    memset(dx.h, 0, M * bytes);
    twin_upload(&bias);
    twin_upload(&x);
    for (int side = 0; side < 2; side++) {
        int dev = side == 0;
        float *G = fb(&grad, dev), *B = fb(&bias, dev), *Z = fb(&zero, dev);
        tr_request req[MAXM];
        memset(req, 0, sizeof req);
        for (int k = 0; k < nops; k++) {
            int i = ops[k].micro, sl = i % slots;
            float *I = fb(&in[sl], dev), *O = fb(&out[sl], dev);
            float *Y = fb(&y, dev) + (size_t)i * n;
            if (!ops[k].backward) {
                tr_wait(&req[sl]); /* the slot's previous output has left */
                if (first)
                    add(dev, I, fb(&x, dev) + (size_t)i * n, Z, n);
                else
                    tr_recv(I, n, TR_F32, s - 1, 1, g);
                if (dev)
                    busy_compute_stream(); /* the send below must wait for it */
                add(dev, O, I, B, n);
                if (last)
                    add(dev, Y, O, Z, n);
                else
                    tr_isend(O, n, TR_F32, s + 1, 1, g, &req[sl]);
            } else {
                if (last)
                    add(dev, G, Y, Z, n);
                else
                    tr_recv(G, n, TR_F32, s + 1, 2, g);
                add(dev, G, G, I, n);
                if (first)
                    add(dev, fb(&dx, dev) + (size_t)i * n, G, Z, n);
                else
                    tr_send(G, n, TR_F32, s - 1, 2, g);
            }
        }
        for (int k = 0; k < slots; k++)
            tr_wait(&req[k]);
    }
    const char *name = kind == TR_SCHED_1F1B ? "1f1b" : "gpipe";
    char what[160];
    if (last || first) { /* the host against the closed form */
        int right = 1;
        for (int i = 0; i < M; i++)
            for (size_t j = 0; j < n; j++) {
                float xv = (float)value(0, (size_t)i * n + j, 11), acc = xv, sum_in = 0;
                for (int t = 0; t < P; t++) { /* acc: stage t's input, then its output */
                    sum_in += acc;
                    acc += (float)value(t, j, 10);
                }
                if (last)
                    right &= ((float *)y.h)[(size_t)i * n + j] == acc;
                if (first)
                    right &= ((float *)dx.h)[(size_t)i * n + j] == acc + sum_in;
            }
        CHECK(right, "[rank %d] MPI %s replay, pp %d M %d on %s: wrong results", W.rank, name, P,
              M, gname);
    }
    snprintf(what, sizeof what, "%s replay pp %d M %d on %s: last stage's outputs", name, P, M,
             gname);
    same(&y, TR_F32, what);
    snprintf(what, sizeof what, "%s replay pp %d M %d on %s: first stage's input gradients",
             name, P, M, gname);
    same(&dx, TR_F32, what);
    for (int k = 0; k < slots; k++) {
        twin_free(&in[k]);
        twin_free(&out[k]);
    }
    twin *rest[] = {&grad, &bias, &zero, &x, &y, &dx};
    for (size_t k = 0; k < sizeof rest / sizeof *rest; k++)
        twin_free(rest[k]);
}

static void test_links(tr_group *g, const char *gname)
{
    if (tr_group_size(g) < 2)
        return;
    test_crossing(g, gname, 0);
    test_crossing(g, gname, 1);
    const int ms[] = {1, 3, 8};
    for (size_t k = 0; k < sizeof ms / sizeof *ms; k++)
        test_pipeline_replay(g, gname, TR_SCHED_1F1B, ms[k]);
    test_pipeline_replay(g, gname, TR_SCHED_GPIPE, 4);
}

static void test_group(tr_group *g, const char *gname)
{
    CHECK(tr_group_has_nccl(g), "[rank %d] %s has no NCCL communicator", W.rank, gname);
    const tr_dtype types[4] = {TR_F32, TR_F64, TR_I32, TR_I64};
    for (int i = 0; i < 4; i++)
        test_allreduce(g, gname, types[i], TR_SUM, 1000, i % 2);
    test_allreduce(g, gname, TR_F32, TR_SUM, ((size_t)1 << 20) + 3, 1);
    test_allreduce(g, gname, TR_F32, TR_SUM, 1, 0);
    test_allreduce(g, gname, TR_F32, TR_MAX, 4097, 1);
    test_allreduce(g, gname, TR_I32, TR_MAX, 4097, 0);
    test_allreduce(g, gname, TR_F64, TR_MIN, 4097, 1);
    test_iallreduce(g, gname);
    test_ireduce(g, gname, tr_group_size(g) - 1);
    test_ireduce(g, gname, 0);
    test_allgatherv(g, gname, 0);
    test_allgatherv(g, gname, 1);
    test_reduce_scatterv(g, gname, 0);
    test_reduce_scatterv(g, gname, 1);
    test_bcast(g, gname, TR_F32, 0);
    test_bcast(g, gname, TR_I64, tr_group_size(g) - 1);
    test_bcast(g, gname, TR_U16, 0); /* the pipeline's 16-bit activations */
    if (tr_group_size(g) > 1) {
        test_p2p(g, gname, 0);
        test_p2p(g, gname, 1);
    }
}

int main(int argc, char **argv)
{
    char why[512];
    int ngpu = tr_cuda_device_count(why, sizeof why);
    if (argc > 1 && !strcmp(argv[1], "--gpus")) { /* on_gpus.sh, before mpiexec */
        if (ngpu < 1) { /* -1: the node has GPUs CUDA cannot use, a failure (cuda_probe.h) */
            printf("%s: %s\n", ngpu < 0 ? "FAIL" : "SKIPPED", why);
            return ngpu < 0 ? 1 : 77;
        }
        if (ngpu < 2 && argc > 2 && !strcmp(argv[2], "--pipeline")) {
            printf("SKIPPED: one GPU: a pipeline needs two ranks, one per GPU\n");
            return 77;
        }
        printf("%d\n", ngpu);
        return 0;
    }
    tr_comm_init(&argc, &argv, &W);
    tr_cuda_device dev;
    char err[2048] = "";
    int rc = tr_cuda_device_choose(W.local_rank, W.local_size, &dev, err, sizeof err);
    if (tr_comm_agree(&W, rc, err)) {
        tr_comm_finalize(&W);
        return 1;
    }
    tr_cuda_init(dev.index);
    if (W.rank == 0)
        printf("%d rank%s, rank 0 on %s (PCI %s)\n", W.size, W.size == 1 ? "" : "s", dev.name,
               dev.pci_bus_id);
    const char *busy = getenv("TR_TEST_BUSY_DIM");
    if (busy && atoi(busy) > 0)
        D = atoi(busy);
    const char *link = getenv("TR_TEST_LINK_FLOATS");
    if (link && atol(link) > 0)
        LINK = (size_t)atol(link);
    g_a = tr_cuda_alloc((size_t)D * D * sizeof(float), "busy A");
    g_b = tr_cuda_alloc((size_t)D * D * sizeof(float), "busy B");
    g_c = tr_cuda_alloc((size_t)D * D * sizeof(float), "busy C");

    int pipeline = argc > 1 && !strcmp(argv[1], "--pipeline");
    if (pipeline && W.size < 2) {
        printf("SKIPPED: one GPU: a pipeline needs two ranks\n");
        tr_comm_finalize(&W);
        return 77;
    }
    int pp = pipeline ? W.size : W.size % 2 == 0 ? 2 : 1, tp = W.size == 4 && !pipeline ? 2 : 1;
    tr_comm_make_grid(&W, W.size / (tp * pp), tp, pp);
    rc = tr_comm_use_nccl(&W, err, sizeof err);
    CHECK(rc == 0, "tr_comm_use_nccl: %s", err);
    CHECK(!tr_group_has_nccl(W.world) && !tr_group_has_nccl(W.pp_group),
          "[rank %d] the world and the pp group have no NCCL communicator", W.rank);
    if (!pipeline) {
        test_group(W.dp_group, "dp group");
        test_group(W.tp_group, "tp group");
    }
    test_links(W.pp_group, "pp group");
    if (W.emb_group && !pipeline)
        test_group(W.emb_group, "embedding group");
    if (W.size == 1 && W.rank == 0)
        printf("one GPU: point-to-point not tested (it needs two ranks)\n");

    int counts[2] = {tr_test_passed, tr_test_failed}; /* host: MPI */
    tr_allreduce(counts, counts, 2, TR_I32, TR_SUM, W.world);
    if (W.rank == 0)
        printf("%d passed, %d failed (all %d ranks)\n", counts[0], counts[1], W.size);
    tr_cuda_free(g_a);
    tr_cuda_free(g_b);
    tr_cuda_free(g_c);
    tr_comm_finalize(&W);
    return counts[1] ? 1 : 0;
}
