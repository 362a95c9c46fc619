/* test_staged_comm.c (4 ranks): comm.h's calls on device memory staged through host
 * copies (comm_staged.c, TRAINER_STAGED_COMM), each against the same call on host
 * memory. The "device" is an arena that is unreadable (PROT_NONE) except inside its
 * download and upload, as the guarded CPU device's is, and no memory guard is given to
 * comm: so a call that handed device memory to MPI would die here. Each staged call
 * must give the host call's bits where it writes, leave alone what the host call
 * leaves alone (the non-roots of a reduce, the other ranks' parts of a
 * reduce-scatter), and copy through the device table: all-reduce in place and out of
 * place, non-blocking all-reduce completed by tr_wait and by polling tr_test, reduce to
 * a root, reduce-scatter and all-gather over uneven parts (16-bit values too), sends
 * and receives (blocking and not, and empty ones) and a broadcast; and, on small
 * buffers, the host all-gather of a buffer past MPI's int counts (in pieces) and sends
 * and receives past them (a derived type). */
#include "comm/comm.h"
#include "core/error.h"
#include "test_util.h"

#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

/* ---- the pretend device ------------------------------------------------------------ */

static unsigned char *g_arena;
static size_t g_arena_size, g_arena_used, g_moved; /* bytes through download/upload */

static void guard(int prot)
{
    if (mprotect(g_arena, g_arena_size, prot))
        tr_fatal(TR_EXIT_OSERR, "mprotect of the test's device arena failed");
}

static int holds(const void *p)
{
    const unsigned char *c = p;
    return c >= g_arena && c < g_arena + g_arena_size;
}

static void download(void *host, const void *dev, size_t bytes)
{
    guard(PROT_READ | PROT_WRITE);
    memcpy(host, dev, bytes);
    guard(PROT_NONE);
    g_moved += bytes;
}

static void upload(void *dev, const void *host, size_t bytes)
{
    guard(PROT_READ | PROT_WRITE);
    memcpy(dev, host, bytes);
    guard(PROT_NONE);
    g_moved += bytes;
}

/* device memory of `bytes` (16-byte aligned), holding host's bytes (host NULL: zeros) */
static void *dev_copy(const void *host, size_t bytes)
{
    unsigned char *p = g_arena + g_arena_used;
    g_arena_used += (bytes + 15) & ~(size_t)15;
    if (g_arena_used > g_arena_size)
        tr_fatal(TR_EXIT_SOFTWARE, "test_staged_comm: the arena is too small");
    if (host && bytes)
        upload(p, host, bytes);
    return p;
}

/* ---- checks -------------------------------------------------------------------------- */

static float value(int r, size_t i)
{
    uint32_t h = (uint32_t)(i * 2654435761u) ^ (uint32_t)(r * 40503u + 17u);
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    return (float)(h & 0xffff) / 4096.0f - 8.0f;
}

static float *host_values(int r, size_t n)
{
    float *x = tr_alloc((n ? n : 1) * sizeof *x, "test values");
    for (size_t i = 0; i < n; i++)
        x[i] = value(r, i);
    return x;
}

/* the device buffer's bytes equal want's (both `bytes` long) */
static void same_as(const char *what, const void *dev, const void *want, size_t bytes, int rank)
{
    unsigned char *got = tr_alloc(bytes ? bytes : 1, "test result");
    size_t before = g_moved;
    if (bytes)
        download(got, dev, bytes);
    g_moved = before; /* (the check's own copy) */
    CHECK(memcmp(got, want, bytes) == 0, "rank %d, %s: the staged call's bytes differ from the "
          "host call's", rank, what);
    tr_free(got);
}

static void moved(const char *what, size_t at_least, size_t before, int rank)
{
    CHECK(g_moved - before >= at_least, "rank %d, %s: %zu bytes through the device table, "
          "expected at least %zu (not staged?)", rank, what, g_moved - before, at_least);
}

static void test_allreduce(tr_group *g, int me, size_t n)
{
    size_t b = n * sizeof(float);
    float *h = host_values(me, n), *want = host_values(me, n);
    tr_allreduce(want, want, n, TR_F32, TR_SUM, g); /* in place, host */
    float *d = dev_copy(h, b);
    size_t m0 = g_moved;
    tr_allreduce(d, d, n, TR_F32, TR_SUM, g);
    same_as("all-reduce in place", d, want, b, me);
    moved("all-reduce in place", n ? 2 * b : 0, m0, me);
    /* out of place: the send buffer stays */
    float *ds = dev_copy(h, b), *dr = dev_copy(h, b);
    tr_allreduce(ds, dr, n, TR_F32, TR_SUM, g);
    same_as("all-reduce out of place", dr, want, b, me);
    same_as("all-reduce out of place: its send buffer", ds, h, b, me);
    /* non-blocking, waited for; and polled */
    float *di = dev_copy(h, b);
    tr_request req = {0};
    tr_iallreduce(di, di, n, TR_F32, TR_SUM, g, &req);
    tr_wait(&req);
    CHECK(!req.active, "rank %d: a waited request is still active", me);
    same_as("non-blocking all-reduce (tr_wait)", di, want, b, me);
    float *dt = dev_copy(h, b);
    tr_request req2 = {0};
    tr_iallreduce(dt, dt, n, TR_F32, TR_SUM, g, &req2);
    while (!tr_test(&req2))
        ;
    CHECK(tr_test(&req2) == 1 && !req2.active, "rank %d: a completed request tests again", me);
    same_as("non-blocking all-reduce (tr_test)", dt, want, b, me);
    tr_free(h);
    tr_free(want);
}

/* to root 2: the root gets the host call's sum, the others keep their buffers */
static void test_reduce(tr_group *g, int me, size_t n)
{
    size_t b = n * sizeof(float);
    float *h = host_values(me, n), *want = host_values(me, n);
    tr_request r = {0};
    tr_ireduce(want, n, TR_F32, TR_SUM, 2, g, &r);
    tr_wait(&r);
    float *d = dev_copy(h, b);
    tr_request rd = {0};
    tr_ireduce(d, n, TR_F32, TR_SUM, 2, g, &rd);
    tr_wait(&rd);
    same_as(me == 2 ? "reduce: the root's sum" : "reduce: a non-root's buffer", d,
            me == 2 ? want : h, b, me);
    tr_free(h);
    tr_free(want);
}

/* uneven parts: rank r's part has 3 r + 5 elements; the host call's result where
 * it is defined (this rank's part), the buffer as it was elsewhere */
static void test_scatter_gather(tr_group *g, int me)
{
    size_t counts[4], displs[4], n = 0;
    for (int r = 0; r < 4; r++) {
        counts[r] = (size_t)(3 * r + 5);
        displs[r] = n;
        n += counts[r];
    }
    size_t b = n * sizeof(float);
    float *h = host_values(me, n), *want = host_values(me, n);
    tr_reduce_scatterv(want, counts, displs, g);
    float *d = dev_copy(h, b), *expect = host_values(me, n);
    memcpy(expect + displs[me], want + displs[me], counts[me] * sizeof(float));
    tr_reduce_scatterv(d, counts, displs, g);
    same_as("reduce-scatter", d, expect, b, me);
    /* all-gather of the parts, as floats and as 16-bit values */
    float *gw = host_values(me, n);
    tr_allgatherv(gw, counts, displs, TR_F32, g);
    float *gd = dev_copy(h, b);
    tr_allgatherv(gd, counts, displs, TR_F32, g);
    same_as("all-gather", gd, gw, b, me);
    uint16_t *u = tr_alloc(n * sizeof *u, "u16");
    for (size_t i = 0; i < n; i++)
        u[i] = (uint16_t)(i * 7 + (size_t)me * 1000);
    uint16_t *ud = dev_copy(u, n * sizeof *u);
    tr_allgatherv(u, counts, displs, TR_U16, g);
    tr_allgatherv(ud, counts, displs, TR_U16, g);
    same_as("all-gather of 16-bit values", ud, u, n * sizeof *u, me);
    tr_free(h);
    tr_free(want);
    tr_free(expect);
    tr_free(gw);
    tr_free(u);
}

/* tr_allgatherv of a buffer past MPI's int counts goes as broadcasts in pieces: run
 * here with the limit lowered to 64 elements, over uneven parts of 150 to 261, as
 * floats and 16-bit values, against what each rank drew */
static void test_allgather_pieces(tr_group *g, int me)
{
    size_t counts[4], displs[4], n = 0;
    for (int r = 0; r < 4; r++) {
        counts[r] = 150 + 37 * (size_t)r;
        displs[r] = n;
        n += counts[r];
    }
    float *f = tr_alloc(n * sizeof *f, "f32");
    uint16_t *u = tr_alloc(n * sizeof *u, "u16");
    for (size_t i = 0; i < n; i++) { /* others' parts hold garbage */
        int mine = i >= displs[me] && i < displs[me] + counts[me];
        f[i] = mine ? (float)i * 0.5f : -1.0f;
        u[i] = (uint16_t)(mine ? i * 7 : 0xdead);
    }
    tr_comm_test_max_count(64);
    tr_allgatherv(f, counts, displs, TR_F32, g);
    tr_allgatherv(u, counts, displs, TR_U16, g);
    tr_comm_test_max_count(0);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += f[i] != (float)i * 0.5f || u[i] != (uint16_t)(i * 7);
    CHECK(bad == 0,
          "all-gather in pieces past the count limit: %zu of %zu elements wrong "
          "on rank %d",
          bad, n, me);
    tr_free(f);
    tr_free(u);
}

/* sends and receives past the count limit go as one message of a derived type: run
 * here with the limit lowered to 64 elements, as floats over whole pieces and a rest
 * (1000 = 15 x 64 + 40) and as 16-bit values over whole pieces only (1024), blocking
 * and not, each received whole and checked against what the sender drew */
static void test_p2p_pieces(tr_group *g, int me)
{
    const size_t nf = 1000, nu = 1024;
    int peer = me ^ 1, from = me % 2 == 0 ? me : peer;
    float *f = tr_alloc(nf * sizeof *f, "f32");
    uint16_t *u = tr_alloc(nu * sizeof *u, "u16");
    tr_comm_test_max_count(64);
    if (me % 2 == 0) {
        for (size_t i = 0; i < nf; i++)
            f[i] = (float)(i * 3 + (size_t)me) * 0.25f;
        for (size_t i = 0; i < nu; i++)
            u[i] = (uint16_t)(i * 5 + (size_t)me);
        tr_send(f, nf, TR_F32, peer, 10, g);
        tr_request r = {0};
        tr_isend(u, nu, TR_U16, peer, 11, g, &r);
        tr_wait(&r);
    } else {
        memset(f, 0xff, nf * sizeof *f);
        memset(u, 0xff, nu * sizeof *u);
        tr_recv(f, nf, TR_F32, peer, 10, g);
        tr_recv(u, nu, TR_U16, peer, 11, g);
    }
    tr_comm_test_max_count(0);
    size_t bad = 0;
    for (size_t i = 0; i < nf; i++)
        bad += f[i] != (float)(i * 3 + (size_t)from) * 0.25f;
    for (size_t i = 0; i < nu; i++)
        bad += u[i] != (uint16_t)(i * 5 + (size_t)from);
    CHECK(bad == 0, "send and receive past the count limit: %zu of %zu elements wrong on rank %d",
          bad, nf + nu, me);
    tr_free(f);
    tr_free(u);
}

/* ranks 0-1 and 2-3 exchange: the even rank sends (blocking, then non-blocking), the
 * odd one receives into device memory; then an empty message each way */
static void test_p2p(tr_group *g, int me, size_t n)
{
    size_t b = n * sizeof(float);
    int peer = me ^ 1;
    float *h = host_values(me, n), *from_peer = host_values(peer, n);
    float *d = dev_copy(h, b);
    if (me % 2 == 0) {
        tr_send(d, n, TR_F32, peer, 7, g);
        tr_request r = {0};
        tr_isend(d, n, TR_F32, peer, 8, g, &r);
        tr_wait(&r);
        same_as("a send's buffer", d, h, b, me);
    } else {
        float *r1 = dev_copy(NULL, b), *r2 = dev_copy(NULL, b);
        tr_recv(r1, n, TR_F32, peer, 7, g);
        tr_recv(r2, n, TR_F32, peer, 8, g);
        same_as("a receive (of a send)", r1, from_peer, b, me);
        same_as("a receive (of a non-blocking send)", r2, from_peer, b, me);
    }
    if (me % 2 == 0)
        tr_send(d, 0, TR_F32, peer, 9, g);
    else
        tr_recv(d, 0, TR_F32, peer, 9, g);
    tr_free(h);
    tr_free(from_peer);
}

static void test_bcast(tr_group *g, int me, size_t n)
{
    size_t b = n * sizeof(float);
    float *h = host_values(me, n), *want = host_values(1, n);
    float *d = dev_copy(h, b);
    tr_bcast(d, n, TR_F32, 1, g);
    same_as("broadcast from rank 1", d, want, b, me);
    tr_free(h);
    tr_free(want);
}

int main(int argc, char **argv)
{
    tr_world w;
    tr_comm_init(&argc, &argv, &w);
    if (w.size != 4) {
        if (w.rank == 0)
            fprintf(stderr, "test_staged_comm: run on 4 ranks (got %d)\n", w.size);
        tr_comm_finalize(&w);
        return 1;
    }
    g_arena_size = (size_t)4 << 20;
    g_arena = mmap(NULL, g_arena_size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(g_arena != MAP_FAILED, "mmap of the arena");
    tr_comm_stage_device_memory(&(tr_comm_staging){holds, download, upload});
    CHECK(tr_comm_staging_on(), "staging is not on");

    for (int pass = 0; pass < 2; pass++) { /* through MPI, then the node's shared memory */
        size_t sizes[3] = {0, 1, 5000};
        for (int k = 0; k < 3; k++) {
            test_allreduce(w.world, w.rank, sizes[k]);
            test_reduce(w.world, w.rank, sizes[k]);
            test_p2p(w.world, w.rank, sizes[k]);
            test_bcast(w.world, w.rank, sizes[k]);
        }
        test_scatter_gather(w.world, w.rank);
        if (pass == 0) {
            test_allgather_pieces(w.world, w.rank);
            test_p2p_pieces(w.world, w.rank);
        }
        g_arena_used = 0;
        if (pass == 0)
            CHECK(tr_group_share_memory(w.world, 3000) == 1, "4 ranks of one node: no window");
    }
    /* host memory is never staged */
    size_t before = g_moved;
    float x = 1.0f, sum = 0.0f;
    tr_allreduce(&x, &sum, 1, TR_F32, TR_SUM, w.world);
    CHECK(sum == 4.0f && g_moved == before, "a host all-reduce went through the device table");

    tr_comm_stage_device_memory(NULL);
    CHECK(!tr_comm_staging_on(), "staging is still on");
    int failed = tr_test_failed, any = 0;
    tr_allreduce(&failed, &any, 1, TR_I32, TR_MAX, w.world);
    int rc = tr_test_finish();
    munmap(g_arena, g_arena_size);
    tr_comm_finalize(&w);
    return rc || any;
}
