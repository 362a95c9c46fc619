/* test_emu_nccl.cpp: the emulated NCCL (emu_nccl.cpp) against MPI, as an MPI program:
 *
 *     mpirun -np 4 test_emu_nccl [path/to/emulated/libnccl.so]
 *
 * It loads the library as comm_nccl.cu does (dlopen, then dlsym of "nccl" + name) and
 * uses it the way the trainer does: a world communicator, disjoint groups made at the
 * same time (ids made on group rank 0 and broadcast over the group's MPI
 * communicator), 2-rank links made as comm_mpi.c's make_link_pair makes them, in-place
 * all-reduces and all-gathers, the uneven all-gather as a group of broadcasts from
 * every root, pipeline traffic in which every rank sends before it receives (which
 * deadlocks if a send waits for its receive), and refusals (host pointers, bad
 * arguments). Any rank count from 1 works; 2 and 4 cover the interesting cases (at 2
 * the parity groups have one rank each). Exit status 0 when every check passed on
 * every rank.
 *
 * Device memory comes from the emulated runtime (emu_runtime.cpp, linked), whose
 * table the library checks its buffers against. TR_EMU_NCCL_LIBRARY names the
 * library to load when no path is given. The library built with -DTR_EMU_NCCL_MAX_COUNT=7 runs its
 * paths for counts beyond MPI's int on this test's buffers; the test passes against it too. */
#include "nccl.h"

/* the C API only: OpenMPI's C++ bindings do not compile warning-free */
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#ifndef TR_EMU_NCCL_LIBRARY
#define TR_EMU_NCCL_LIBRARY "libtrainer_emu_nccl.so"
#endif

/* ---- device memory ------------------------------------------------------------------ */

static void *dev_alloc(size_t bytes)
{
    void *p = NULL;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
        fprintf(stderr, "cudaMalloc of %zu bytes failed\n", bytes);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return p;
}

static void dev_free(void *p) { cudaFree(p); }

/* through the runtime, which refuses a host pointer where device memory belongs */
static void to_dev(void *d, const void *h, size_t bytes)
{
    if (cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice) != cudaSuccess)
        MPI_Abort(MPI_COMM_WORLD, 2);
}

static void from_dev(void *h, const void *d, size_t bytes)
{
    if (cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost) != cudaSuccess)
        MPI_Abort(MPI_COMM_WORLD, 2);
}

/* count elements of T in device memory, and a host mirror to fill and read */
template <typename T> struct buf {
    std::vector<T> h;
    T *d;
    explicit buf(size_t n) : h(n), d((T *)dev_alloc(n * sizeof(T))) {}
    ~buf() { dev_free(d); }
    buf(const buf &) = delete;
    buf &operator=(const buf &) = delete;
    void up() { to_dev(d, h.data(), h.size() * sizeof(T)); }
    void down() { from_dev(h.data(), d, h.size() * sizeof(T)); }
};

/* ---- the library, loaded as comm_nccl.cu loads NCCL -------------------------------- */

static struct {
    decltype(&ncclGetUniqueId) GetUniqueId;
    decltype(&ncclCommInitRank) CommInitRank;
    decltype(&ncclCommDestroy) CommDestroy;
    decltype(&ncclAllReduce) AllReduce;
    decltype(&ncclReduce) Reduce;
    decltype(&ncclBroadcast) Broadcast;
    decltype(&ncclAllGather) AllGather;
    decltype(&ncclSend) Send;
    decltype(&ncclRecv) Recv;
    decltype(&ncclGroupStart) GroupStart;
    decltype(&ncclGroupEnd) GroupEnd;
    decltype(&ncclGetErrorString) GetErrorString;
    decltype(&ncclGetLastError) GetLastError;
    decltype(&ncclCommGetAsyncError) CommGetAsyncError;
    decltype(&ncclCommAbort) CommAbort;
} nc;

static int load(const char *path)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "cannot load %s: %s\n", path, dlerror());
        return 0;
    }
    int ok = 1;
#define SYM(f)                                                                                     \
    do {                                                                                           \
        nc.f = (decltype(nc.f))dlsym(h, "nccl" #f);                                                \
        if (!nc.f) {                                                                               \
            fprintf(stderr, "%s lacks nccl%s\n", path, #f);                                        \
            ok = 0;                                                                                \
        }                                                                                          \
    } while (0)
    SYM(GetUniqueId);
    SYM(CommInitRank);
    SYM(CommDestroy);
    SYM(AllReduce);
    SYM(Reduce);
    SYM(Broadcast);
    SYM(AllGather);
    SYM(Send);
    SYM(Recv);
    SYM(GroupStart);
    SYM(GroupEnd);
    SYM(GetErrorString);
    SYM(GetLastError);
    SYM(CommGetAsyncError);
    SYM(CommAbort);
#undef SYM
    return ok;
}

/* ---- checks ------------------------------------------------------------------------ */

static int g_rank, g_size, g_failed, g_checks;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        g_checks++;                                                                                \
        if (!(cond)) {                                                                             \
            g_failed++;                                                                            \
            fprintf(stderr, "rank %d: FAILED %s:%d: %s: ", g_rank, __FILE__, __LINE__, #cond);     \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

#define NCCL_OK(call)                                                                              \
    do {                                                                                           \
        ncclResult_t r_ = (call);                                                                  \
        CHECK(r_ == ncclSuccess, "%s returned %d: %s", #call, (int)r_, nc.GetLastError(NULL));     \
    } while (0)

/* elementwise comparison of two host arrays */
template <typename T>
static void expect_equal(const std::vector<T> &got, const std::vector<T> &want, const char *what)
{
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < want.size(); i++)
        if (!(got[i] == want[i]) && bad++ == 0)
            first = i;
    CHECK(got.size() == want.size() && bad == 0, "%s: %zu of %zu elements differ (first at %zu)",
          what, bad, want.size(), first);
}

/* every rank's failures so far, summed; rank 0 reports the section */
static void section(const char *name)
{
    static int before = 0;
    int mine = g_failed - before, all = 0;
    before = g_failed;
    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (g_rank == 0)
        printf("%-4s %s\n", all ? "FAIL" : "ok", name);
    fflush(stdout);
}

/* A communicator of the ranks of c, the id made on c's rank 0 and broadcast over c, as
 * comm_mpi.c's tr_comm_use_nccl does. */
static ncclComm_t make(MPI_Comm c)
{
    int rank, size;
    MPI_Comm_rank(c, &rank);
    MPI_Comm_size(c, &size);
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (rank == 0)
        NCCL_OK(nc.GetUniqueId(&id));
    MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, c);
    ncclComm_t comm = NULL;
    NCCL_OK(nc.CommInitRank(&comm, size, id, rank));
    return comm;
}

static float fval(int rank, size_t i) { return (float)rank * 1000.0f + (float)i * 0.5f; }

/* ---- the world communicator: every collective ------------------------------------- */

static void test_allreduce(ncclComm_t w, size_t n)
{
    /* float sum, out of place */
    buf<float> s(n), r(n);
    for (size_t i = 0; i < n; i++)
        s.h[i] = fval(g_rank, i);
    s.up();
    NCCL_OK(nc.AllReduce(s.d, r.d, n, ncclFloat32, ncclSum, w, NULL));
    std::vector<float> want(n);
    MPI_Allreduce(s.h.data(), want.data(), (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    r.down();
    expect_equal(r.h, want, "all-reduce float sum");

    /* int32 max, in place (comm_nccl.cu's tr_nccl_allreduce with sendbuf == recvbuf) */
    buf<int32_t> x(n);
    for (size_t i = 0; i < n; i++)
        x.h[i] = (int32_t)((g_rank * 7 + (int)i * 3) % 11) - 5;
    std::vector<int32_t> iwant(n);
    MPI_Allreduce(x.h.data(), iwant.data(), (int)n, MPI_INT32_T, MPI_MAX, MPI_COMM_WORLD);
    x.up();
    NCCL_OK(nc.AllReduce(x.d, x.d, n, ncclInt32, ncclMax, w, NULL));
    x.down();
    expect_equal(x.h, iwant, "all-reduce int32 max in place");

    /* int64 min */
    buf<int64_t> a(n), b(n);
    for (size_t i = 0; i < n; i++)
        a.h[i] = ((int64_t)1 << 40) * ((g_rank + (int64_t)i) % 5) - g_rank;
    std::vector<int64_t> lwant(n);
    MPI_Allreduce(a.h.data(), lwant.data(), (int)n, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD);
    a.up();
    NCCL_OK(nc.AllReduce(a.d, b.d, n, ncclInt64, ncclMin, w, NULL));
    b.down();
    expect_equal(b.h, lwant, "all-reduce int64 min");

    /* double average, in place: the sum over MPI, divided by the rank count */
    buf<double> d(n);
    for (size_t i = 0; i < n; i++)
        d.h[i] = (double)g_rank + 0.25 * (double)i;
    std::vector<double> dwant(n);
    MPI_Allreduce(d.h.data(), dwant.data(), (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    for (double &v : dwant)
        v /= g_size;
    d.up();
    NCCL_OK(nc.AllReduce(d.d, d.d, n, ncclFloat64, ncclAvg, w, NULL));
    d.down();
    expect_equal(d.h, dwant, "all-reduce double average");

    /* int32 product */
    for (size_t i = 0; i < n; i++)
        x.h[i] = (int32_t)((g_rank + (int)i) % 3) + 1;
    MPI_Allreduce(x.h.data(), iwant.data(), (int)n, MPI_INT32_T, MPI_PROD, MPI_COMM_WORLD);
    x.up();
    NCCL_OK(nc.AllReduce(x.d, x.d, n, ncclInt32, ncclProd, w, NULL));
    x.down();
    expect_equal(x.h, iwant, "all-reduce int32 product");
}

static void test_reduce(ncclComm_t w, size_t n)
{
    for (int root = 0; root < g_size; root++) {
        /* in place on every rank, as comm_nccl.cu's tr_nccl_reduce: the others keep buf */
        buf<float> b(n);
        for (size_t i = 0; i < n; i++)
            b.h[i] = fval(g_rank, i) + (float)root;
        std::vector<float> mine = b.h, want(n);
        MPI_Reduce(b.h.data(), want.data(), (int)n, MPI_FLOAT, MPI_SUM, root, MPI_COMM_WORLD);
        b.up();
        NCCL_OK(nc.Reduce(b.d, b.d, n, ncclFloat32, ncclSum, root, w, NULL));
        b.down();
        expect_equal(b.h, g_rank == root ? want : mine, "reduce float sum in place");

        /* out of place; recvbuff matters on the root only (NULL elsewhere) */
        buf<int64_t> s(n), r(n);
        for (size_t i = 0; i < n; i++)
            s.h[i] = (int64_t)g_rank * 100 + (int64_t)i;
        std::vector<int64_t> lwant(n);
        MPI_Reduce(s.h.data(), lwant.data(), (int)n, MPI_INT64_T, MPI_MAX, root, MPI_COMM_WORLD);
        s.up();
        NCCL_OK(nc.Reduce(s.d, g_rank == root ? r.d : NULL, n, ncclInt64, ncclMax, root, w, NULL));
        if (g_rank == root) {
            r.down();
            expect_equal(r.h, lwant, "reduce int64 max to the root");
        }
    }
}

static void test_broadcast(ncclComm_t w, size_t n)
{
    for (int root = 0; root < g_size; root++) {
        std::vector<float> want(n);
        for (size_t i = 0; i < n; i++)
            want[i] = fval(root, i);
        /* out of place: sendbuff only on the root (NULL elsewhere) */
        buf<float> s(n), r(n);
        s.h = want;
        s.up();
        NCCL_OK(nc.Broadcast(g_rank == root ? s.d : NULL, r.d, n, ncclFloat32, root, w, NULL));
        r.down();
        expect_equal(r.h, want, "broadcast out of place");
        /* in place, 16-bit values (moved only) */
        buf<uint16_t> h(n);
        std::vector<uint16_t> hwant(n);
        for (size_t i = 0; i < n; i++) {
            hwant[i] = (uint16_t)(0x3c00 + root * 64 + (int)i);
            h.h[i] = g_rank == root ? hwant[i] : 0;
        }
        h.up();
        NCCL_OK(nc.Broadcast(h.d, h.d, n, ncclFloat16, root, w, NULL));
        h.down();
        expect_equal(h.h, hwant, "broadcast float16 in place");
    }
}

static void test_allgather(ncclComm_t w, size_t n)
{
    std::vector<float> want(n * (size_t)g_size);
    for (int r = 0; r < g_size; r++)
        for (size_t i = 0; i < n; i++)
            want[(size_t)r * n + i] = fval(r, i);
    /* in place, as comm_nccl.cu's even all-gather: this rank's piece is already there */
    buf<float> b(n * (size_t)g_size);
    for (size_t i = 0; i < n; i++)
        b.h[(size_t)g_rank * n + i] = fval(g_rank, i);
    b.up();
    NCCL_OK(nc.AllGather(b.d + (size_t)g_rank * n, b.d, n, ncclFloat32, w, NULL));
    b.down();
    expect_equal(b.h, want, "all-gather in place");

    /* out of place, bfloat16 bits */
    buf<uint16_t> s(n), r(n * (size_t)g_size);
    std::vector<uint16_t> hwant(n * (size_t)g_size);
    for (size_t k = 0; k < hwant.size(); k++)
        hwant[k] = (uint16_t)(k * 31 + 7);
    for (size_t i = 0; i < n; i++)
        s.h[i] = hwant[(size_t)g_rank * n + i];
    s.up();
    NCCL_OK(nc.AllGather(s.d, r.d, n, ncclBfloat16, w, NULL));
    r.down();
    expect_equal(r.h, hwant, "all-gather bfloat16 out of place");
}

/* comm_nccl.cu's uneven all-gather: a group of in-place broadcasts, one per rank with
 * a piece (empty pieces skipped on every rank alike) */
static void test_grouped_broadcasts(ncclComm_t w)
{
    std::vector<size_t> counts((size_t)g_size), displs((size_t)g_size);
    size_t total = 0;
    for (int r = 0; r < g_size; r++) {
        counts[(size_t)r] = (size_t)((r * 5 + 3) % 9); /* 3, 8, 4, 0, 5, ... */
        displs[(size_t)r] = total;
        total += counts[(size_t)r];
    }
    buf<float> b(total);
    std::vector<float> want(total);
    for (int r = 0; r < g_size; r++)
        for (size_t i = 0; i < counts[(size_t)r]; i++)
            want[displs[(size_t)r] + i] = fval(r, i);
    for (size_t i = 0; i < counts[(size_t)g_rank]; i++)
        b.h[displs[(size_t)g_rank] + i] = fval(g_rank, i);
    b.up();
    NCCL_OK(nc.GroupStart());
    for (int r = 0; r < g_size; r++)
        if (counts[(size_t)r])
            NCCL_OK(nc.Broadcast(b.d + displs[(size_t)r], b.d + displs[(size_t)r],
                                 counts[(size_t)r], ncclFloat32, r, w, NULL));
    NCCL_OK(nc.GroupEnd());
    b.down();
    expect_equal(b.h, want, "grouped broadcasts from every root");

    /* nested: nothing runs before the outermost end */
    const size_t n = 9;
    buf<float> c(n);
    std::vector<float> cwant(n);
    for (size_t i = 0; i < n; i++) {
        cwant[i] = fval(0, i);
        c.h[i] = g_rank == 0 ? cwant[i] : -1.0f;
    }
    c.up();
    NCCL_OK(nc.GroupStart());
    NCCL_OK(nc.GroupStart());
    NCCL_OK(nc.Broadcast(c.d, c.d, n, ncclFloat32, 0, w, NULL));
    NCCL_OK(nc.GroupEnd());
    c.down();
    if (g_rank != 0)
        CHECK(c.h[0] == -1.0f, "a nested group's end ran its operations (got %g)", (double)c.h[0]);
    NCCL_OK(nc.GroupEnd());
    c.down();
    expect_equal(c.h, cwant, "nested group's broadcast");
}

/* ---- groups ------------------------------------------------------------------------ */

/* Two kinds of disjoint groups, each kind made at the same time on every rank (as
 * tr_comm_use_nccl makes dp, tp, pp groups): parity (one rank each at -np 2) and
 * halves. Each sums its members' world ranks. */
static void test_groups(void)
{
    for (int kind = 0; kind < 2; kind++) {
        int color = kind == 0 ? g_rank % 2 : g_rank < g_size / 2;
        MPI_Comm c;
        MPI_Comm_split(MPI_COMM_WORLD, color, g_rank, &c);
        int size;
        MPI_Comm_size(c, &size);
        ncclComm_t g = make(c);
        int64_t want = 0;
        for (int r = 0; r < g_size; r++)
            if ((kind == 0 ? r % 2 : r < g_size / 2) == color)
                want += r;
        buf<int64_t> b(3);
        b.h = {g_rank, 1, -g_rank};
        b.up();
        NCCL_OK(nc.AllReduce(b.d, b.d, 3, ncclInt64, ncclSum, g, NULL));
        b.down();
        CHECK(b.h[0] == want && b.h[1] == size && b.h[2] == -want,
              "group kind %d: sum %lld (want %lld), count %lld (want %d)", kind, (long long)b.h[0],
              (long long)want, (long long)b.h[1], size);
        NCCL_OK(nc.CommDestroy(g));
        MPI_Comm_free(&c);
    }
}

/* NCCL ranks in the reverse of the world's order, the id made by world rank 0 (the
 * last NCCL rank): pieces, roots and peers go by NCCL rank. */
static void test_reversed(void)
{
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (g_rank == 0)
        NCCL_OK(nc.GetUniqueId(&id));
    MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    int me = g_size - 1 - g_rank;
    ncclComm_t c = NULL;
    NCCL_OK(nc.CommInitRank(&c, g_size, id, me));
    buf<int32_t> b((size_t)g_size);
    std::vector<int32_t> want((size_t)g_size);
    for (int r = 0; r < g_size; r++)
        want[(size_t)r] = g_size - 1 - r; /* NCCL rank r's world rank */
    b.h[(size_t)me] = g_rank;
    b.up();
    NCCL_OK(nc.AllGather(b.d + me, b.d, 1, ncclInt32, c, NULL));
    b.down();
    expect_equal(b.h, want, "all-gather by NCCL rank");
    buf<int32_t> x(1);
    x.h[0] = g_rank;
    x.up();
    NCCL_OK(nc.Broadcast(x.d, x.d, 1, ncclInt32, 0, c, NULL)); /* NCCL rank 0: the last */
    x.down();
    CHECK(x.h[0] == g_size - 1, "broadcast from NCCL rank 0 gave %d", x.h[0]);
    x.h[0] = g_rank;
    x.up();
    NCCL_OK(nc.Send(x.d, 1, ncclInt32, (me + 1) % g_size, c, NULL));
    NCCL_OK(nc.Recv(x.d, 1, ncclInt32, (me + g_size - 1) % g_size, c, NULL));
    x.down();
    CHECK(x.h[0] == (g_rank + 1) % g_size, "from NCCL rank %d: world rank %d",
          (me + g_size - 1) % g_size, x.h[0]);
    NCCL_OK(nc.CommDestroy(c));
}

/* ---- links and point-to-point ------------------------------------------------------ */

enum { BELOW = 0, ABOVE = 1, UP = 0, DOWN = 1 };

/* comm_mpi.c's make_links and make_link_pair, over pp (the world's ranks) as the
 * pipeline group's communicator */
static void make_links(ncclComm_t link[2][2], MPI_Comm pp)
{
    int order[2] = {g_rank % 2 ? BELOW : ABOVE, g_rank % 2 ? ABOVE : BELOW};
    for (int i = 0; i < 2; i++) {
        int side = order[i], upper = side == BELOW;
        int peer = upper ? g_rank - 1 : g_rank + 1;
        if (peer < 0 || peer >= g_size)
            continue;
        ncclUniqueId id[2];
        if (!upper) {
            NCCL_OK(nc.GetUniqueId(&id[UP]));
            NCCL_OK(nc.GetUniqueId(&id[DOWN]));
            MPI_Send(id, (int)sizeof id, MPI_BYTE, peer, 32767, pp);
        } else {
            MPI_Recv(id, (int)sizeof id, MPI_BYTE, peer, 32767, pp, MPI_STATUS_IGNORE);
        }
        for (int dir = UP; dir <= DOWN; dir++)
            NCCL_OK(nc.CommInitRank(&link[side][dir], 2, id[dir], upper));
    }
}

/* Pipeline traffic in the worst order: every rank sends all its micro-batches both
 * ways before it receives any. Messages of 1 MiB, past MPI's eager limit, and the
 * send buffer is overwritten as soon as the send returns (the stream moved on). */
static void test_links(void)
{
    ncclComm_t link[2][2] = {{NULL, NULL}, {NULL, NULL}};
    MPI_Comm pp;
    MPI_Comm_dup(MPI_COMM_WORLD, &pp);
    make_links(link, pp);
    const size_t n = (size_t)1 << 18;
    const int micro = 3;
    bool below = g_rank > 0, above = g_rank < g_size - 1;
    buf<float> s(n), r(n);
    for (int k = 0; k < micro; k++) {
        if (above) { /* activation up: this rank is the link's lower rank (0) */
            for (size_t i = 0; i < n; i++)
                s.h[i] = fval(g_rank, i) + (float)k;
            s.up();
            NCCL_OK(nc.Send(s.d, n, ncclFloat32, 1, link[ABOVE][UP], NULL));
        }
        if (below) { /* gradient down: this rank is the upper one (1) */
            for (size_t i = 0; i < n; i++)
                s.h[i] = -fval(g_rank, i) - (float)k;
            s.up();
            NCCL_OK(nc.Send(s.d, n, ncclFloat32, 0, link[BELOW][DOWN], NULL));
        }
    }
    for (size_t i = 0; i < n; i++)
        s.h[i] = 12345.0f;
    s.up(); /* what MPI sends now would be wrong */
    std::vector<float> want(n);
    for (int k = 0; k < micro; k++) {
        if (below) {
            NCCL_OK(nc.Recv(r.d, n, ncclFloat32, 0, link[BELOW][UP], NULL));
            r.down();
            for (size_t i = 0; i < n; i++)
                want[i] = fval(g_rank - 1, i) + (float)k;
            expect_equal(r.h, want, "activation over the up link");
        }
        if (above) {
            NCCL_OK(nc.Recv(r.d, n, ncclFloat32, 1, link[ABOVE][DOWN], NULL));
            r.down();
            for (size_t i = 0; i < n; i++)
                want[i] = -fval(g_rank + 1, i) - (float)k;
            expect_equal(r.h, want, "gradient over the down link");
        }
    }
    /* freed in comm_mpi.c's free_nccl order */
    int order[2] = {g_rank % 2 ? BELOW : ABOVE, g_rank % 2 ? ABOVE : BELOW};
    for (int i = 0; i < 2; i++)
        for (int dir = UP; dir <= DOWN; dir++)
            NCCL_OK(nc.CommDestroy(link[order[i]][dir]));
    MPI_Comm_free(&pp);
}

/* A ring on the world communicator: send to the next, then receive from the one
 * before (no group: the send must not wait), then the same inside a group, then a
 * send to this rank itself. */
static void test_ring(ncclComm_t w)
{
    const size_t n = (size_t)3 << 18; /* 3 MiB */
    int next = (g_rank + 1) % g_size, prev = (g_rank + g_size - 1) % g_size;
    buf<float> s(n), r(n);
    std::vector<float> want(n);
    for (int grouped = 0; grouped < 2; grouped++) {
        for (size_t i = 0; i < n; i++) {
            s.h[i] = fval(g_rank, i) + (float)grouped;
            want[i] = fval(prev, i) + (float)grouped;
        }
        s.up();
        if (grouped)
            NCCL_OK(nc.GroupStart());
        NCCL_OK(nc.Send(s.d, n, ncclFloat32, next, w, NULL));
        NCCL_OK(nc.Recv(r.d, n, ncclFloat32, prev, w, NULL));
        if (grouped)
            NCCL_OK(nc.GroupEnd());
        r.down();
        expect_equal(r.h, want, grouped ? "grouped ring" : "ring, send before receive");
    }
    buf<int32_t> a(5), b(5);
    a.h = {1, 2, 3, 4, g_rank};
    a.up();
    NCCL_OK(nc.Send(a.d, 5, ncclInt32, g_rank, w, NULL));
    NCCL_OK(nc.Recv(b.d, 5, ncclInt32, g_rank, w, NULL));
    b.down();
    expect_equal(b.h, a.h, "send to self");
}

/* ---- refusals ---------------------------------------------------------------------- */

static bool last_error_has(const char *a, const char *b)
{
    const char *e = nc.GetLastError(NULL);
    return e && strstr(e, a) && (!b || strstr(e, b));
}

/* Every rank makes the same mistakes, so nobody is left waiting on a partner. */
static void test_refusals(ncclComm_t w)
{
    const size_t n = 16;
    buf<float> d(n);
    std::vector<float> host(n, 1.0f);

    ncclResult_t r = nc.AllReduce(host.data(), d.d, n, ncclFloat32, ncclSum, w, NULL);
    CHECK(r == ncclInvalidArgument, "host sendbuff: %d", (int)r);
    CHECK(last_error_has("ncclAllReduce", "sendbuff"), "message: %s", nc.GetLastError(NULL));

    /* one element past the allocation */
    r = nc.Broadcast(d.d, d.d + 1, n, ncclFloat32, 0, w, NULL);
    CHECK(r == ncclInvalidArgument, "span past the end: %d", (int)r);
    CHECK(last_error_has("ncclBroadcast", "recvbuff"), "message: %s", nc.GetLastError(NULL));

    r = nc.Send(host.data(), n, ncclFloat32, 0, w, NULL);
    CHECK(r == ncclInvalidArgument && last_error_has("ncclSend", "sendbuff"), "%d: %s", (int)r,
          nc.GetLastError(NULL));
    r = nc.Recv(host.data(), n, ncclFloat32, 0, w, NULL);
    CHECK(r == ncclInvalidArgument && last_error_has("ncclRecv", "recvbuff"), "%d: %s", (int)r,
          nc.GetLastError(NULL));
    r = nc.AllGather(d.d, host.data(), 1, ncclFloat32, w, NULL);
    CHECK(r == ncclInvalidArgument && last_error_has("ncclAllGather", "recvbuff"), "%d: %s", (int)r,
          nc.GetLastError(NULL));
    /* the all-gather's receive span is nranks pieces */
    buf<float> small((size_t)g_size * 4 - 1);
    r = nc.AllGather(small.d, small.d, 4, ncclFloat32, w, NULL);
    CHECK(r == ncclInvalidArgument, "all-gather into too small a buffer: %d", (int)r);

    r = nc.AllReduce(d.d, d.d, n, ncclFloat16, ncclSum, w, NULL);
    CHECK(r == ncclInvalidArgument, "16-bit reduction: %d", (int)r);
    r = nc.AllReduce(d.d, d.d, n, ncclNumTypes, ncclSum, w, NULL);
    CHECK(r == ncclInvalidArgument, "bad datatype: %d", (int)r);
    r = nc.AllReduce(d.d, d.d, n, ncclFloat32, (ncclRedOp_t)17, w, NULL);
    CHECK(r == ncclInvalidArgument, "bad operation: %d", (int)r);
    r = nc.Reduce(d.d, d.d, n, ncclFloat32, ncclSum, g_size, w, NULL);
    CHECK(r == ncclInvalidArgument, "root out of range: %d", (int)r);
    r = nc.Send(d.d, n, ncclFloat32, -1, w, NULL);
    CHECK(r == ncclInvalidArgument, "peer out of range: %d", (int)r);
    r = nc.AllReduce(d.d, d.d, n, ncclFloat32, ncclSum, NULL, NULL);
    CHECK(r == ncclInvalidArgument, "NULL comm: %d", (int)r);
    r = nc.AllReduce(d.d, d.d, n, ncclFloat32, ncclSum, (ncclComm_t)&host, NULL);
    CHECK(r == ncclInvalidArgument, "not a comm: %d", (int)r);

    /* a group with a bad call runs nothing and fails at its end */
    for (size_t i = 0; i < n; i++)
        d.h[i] = (float)g_rank;
    d.up();
    NCCL_OK(nc.GroupStart());
    NCCL_OK(nc.Broadcast(d.d, d.d, n, ncclFloat32, 0, w, NULL));
    r = nc.Broadcast(host.data(), host.data(), n, ncclFloat32, 0, w, NULL);
    CHECK(r == ncclInvalidArgument, "host buffer in a group: %d", (int)r);
    r = nc.GroupEnd();
    CHECK(r == ncclInvalidArgument, "the group's end: %d", (int)r);
    d.down();
    CHECK(d.h[0] == (float)g_rank, "the failed group ran a broadcast");
    r = nc.GroupEnd();
    CHECK(r == ncclInvalidUsage, "an end without a start: %d", (int)r);

    /* count 0: nothing to check or move, even with NULL buffers */
    NCCL_OK(nc.AllReduce(NULL, NULL, 0, ncclFloat32, ncclSum, w, NULL));
    NCCL_OK(nc.AllGather(NULL, NULL, 0, ncclFloat32, w, NULL));
    NCCL_OK(nc.Broadcast(NULL, NULL, 0, ncclFloat32, 0, w, NULL));

    /* communicators */
    ncclUniqueId id;
    NCCL_OK(nc.GetUniqueId(&id));
    ncclComm_t c = (ncclComm_t)&host;
    r = nc.CommInitRank(&c, 0, id, 0);
    CHECK(r == ncclInvalidArgument && c == NULL, "nranks 0: %d", (int)r);
    r = nc.CommInitRank(&c, 2, id, 2);
    CHECK(r == ncclInvalidArgument, "rank out of range: %d", (int)r);
    ncclUniqueId junk;
    memset(&junk, 0x5a, sizeof junk);
    r = nc.CommInitRank(&c, 1, junk, 0);
    CHECK(r == ncclInvalidArgument && last_error_has("ncclCommInitRank", NULL), "not an id: %d: %s",
          (int)r, nc.GetLastError(NULL));

    ncclResult_t async = ncclInternalError;
    NCCL_OK(nc.CommGetAsyncError(w, &async));
    CHECK(async == ncclSuccess, "async error %d", (int)async);
    CHECK(strcmp(nc.GetErrorString(ncclSuccess), "") != 0 &&
              strcmp(nc.GetErrorString(ncclInvalidArgument), "") != 0,
          "error strings");
    NCCL_OK(nc.CommDestroy(NULL));
    NCCL_OK(nc.CommAbort(NULL));
}

/* Meetings that must fail on every member, and end. */
static void test_bad_meetings(void)
{
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (g_rank == 0)
        NCCL_OK(nc.GetUniqueId(&id));
    MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    if (g_size >= 2) { /* every rank claims rank 0 */
        ncclComm_t c = NULL;
        ncclResult_t r = nc.CommInitRank(&c, g_size, id, 0);
        CHECK(r == ncclInvalidArgument && c == NULL, "rank taken twice: %d", (int)r);
    }
    if (g_rank == 0)
        NCCL_OK(nc.GetUniqueId(&id));
    MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    if (g_size >= 3) { /* the last rank counts one rank fewer */
        ncclComm_t c = NULL;
        int last = g_rank == g_size - 1;
        ncclResult_t r = nc.CommInitRank(&c, g_size - last, id, last ? 0 : g_rank);
        CHECK(r == ncclInvalidArgument && c == NULL, "nranks disagree: %d", (int)r);
    }
}

/* A one-rank communicator of its own on every rank; a send to itself that nobody
 * receives is left pending and the communicator aborted. */
static void test_abort(void)
{
    ncclUniqueId id;
    NCCL_OK(nc.GetUniqueId(&id));
    ncclComm_t c = NULL;
    NCCL_OK(nc.CommInitRank(&c, 1, id, 0));
    buf<double> b(4);
    b.h = {1, 2, 3, (double)g_rank};
    b.up();
    NCCL_OK(nc.AllReduce(b.d, b.d, 4, ncclFloat64, ncclSum, c, NULL));
    b.down();
    CHECK(b.h[3] == (double)g_rank, "one-rank all-reduce");
    buf<double> big((size_t)1 << 17);
    NCCL_OK(nc.Send(big.d, big.h.size(), ncclFloat64, 0, c, NULL));
    NCCL_OK(nc.CommAbort(c));
    ncclResult_t async = ncclSuccess, r = nc.CommGetAsyncError(c, &async);
    CHECK(r == ncclInvalidArgument, "an aborted communicator is gone: %d", (int)r);
}

int main(int argc, char **argv)
{
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    const char *path = argc > 1 ? argv[1] : TR_EMU_NCCL_LIBRARY;
    int ok = load(path), all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all) {
        MPI_Finalize();
        return 2;
    }

    /* the program's own traffic on MPI_COMM_WORLD, in flight all along, must be left
     * alone (a small tag, and one from the middle of the tag space) */
    int out[2] = {g_rank, -g_rank}, in[2] = {-1, -1};
    MPI_Request sent[2];
    int next = (g_rank + 1) % g_size, prev = (g_rank + g_size - 1) % g_size;
    MPI_Isend(&out[0], 1, MPI_INT, next, 5, MPI_COMM_WORLD, &sent[0]);
    MPI_Isend(&out[1], 1, MPI_INT, next, 16000, MPI_COMM_WORLD, &sent[1]);

    ncclComm_t w = make(MPI_COMM_WORLD);
    section("world communicator");
    for (size_t n : {(size_t)0, (size_t)1, (size_t)37, (size_t)1000}) {
        test_allreduce(w, n);
        test_reduce(w, n);
        test_broadcast(w, n);
        test_allgather(w, n);
    }
    section("all-reduce, reduce, broadcast, all-gather (in place and not)");
    test_grouped_broadcasts(w);
    section("grouped broadcasts from every root, nested groups");
    test_groups();
    section("disjoint groups made at the same time");
    test_reversed();
    section("NCCL ranks in reverse world order, the id's creator the last of them");
    test_links();
    section("links as make_link_pair makes them; every rank sends before it receives");
    test_ring(w);
    section("ring of sends and receives, grouped and not; send to self");
    test_refusals(w);
    section("refusals: host pointers, bad arguments, failed groups");
    test_bad_meetings();
    section("refused meetings end on every member");
    test_abort();
    section("one-rank communicators, abort with a pending send");

    MPI_Recv(&in[0], 1, MPI_INT, prev, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Recv(&in[1], 1, MPI_INT, prev, 16000, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Waitall(2, sent, MPI_STATUSES_IGNORE);
    CHECK(in[0] == prev && in[1] == -prev, "the program's own messages: %d %d", in[0], in[1]);
    NCCL_OK(nc.CommDestroy(w));
    section("the program's own MPI_COMM_WORLD messages untouched; destroy");

    int failed = 0, checks = 0;
    MPI_Allreduce(&g_failed, &failed, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&g_checks, &checks, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (g_rank == 0)
        printf("test_emu_nccl: %d ranks, %d checks, %d failed\n", g_size, checks, failed);
    MPI_Finalize();
    return failed ? 1 : 0;
}
