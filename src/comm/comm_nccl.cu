/* comm_nccl.cu: comm.h's collectives and point-to-point calls on device buffers,
 * with NCCL. comm_mpi.c decides which calls come here (comm_nccl.h); this file
 * knows nothing of MPI. Built only with the CUDA backend.
 *
 * Streams. Every communicator posts its operations on one stream, in the order they
 * are called. The collectives of all groups share the process's communication
 * stream: every rank calls the operations of a group in the same order, so one
 * stream per rank is enough for NCCL's rule on several communicators (operations on
 * them must not be in flight in different orders on different ranks, or their
 * kernels can wait on each other for ever). A link (comm.h: one direction of the
 * point-to-point traffic between two neighbouring pipeline stages, a 2-rank
 * communicator) has a stream of its own instead (NCCL runs one communicator's
 * operations in the order they are issued, so a communicator serves one stream):
 * a link's stream carries one FIFO that both of its ranks post in the same order,
 * independent of the other direction and of the collectives (why this never
 * deadlocks: comm_mpi.c, make_links). Every stream is
 * non-blocking and of the highest priority: the legacy default stream does not
 * serialise with it, and while backward fills the GPU the scheduler runs
 * communication kernels first.
 *
 * Each call records an event on the backend's compute stream (tr_cuda_stream) and
 * makes the communicator's stream wait for it, so NCCL reads what the kernels queued
 * before the call wrote (and a receive does not overwrite what they still read). A
 * blocking call then records `done` and makes the compute stream wait for it (the
 * host does not wait); a non-blocking one records an event of its own that tr_test
 * queries and tr_wait hands to the compute stream. Events of requests come from a
 * free list that grows to the largest number in flight at once (the first step), so
 * starting one later never allocates. cudaStreamWaitEvent takes the event's state
 * when it is called, so an event may be recorded again at once, which is what lets
 * `queued` and `done` be reused by every call on every stream. */
#include "comm/comm_nccl.h"
#include "core/error.h"
#include "cuda/cuda_common.h"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>
#include <stdio.h>
#include <string.h>

/* ---- NCCL, loaded on first use ------------------------------------------------------
 * Not linked: libnccl is over 200 MiB and the loader maps it resident into every
 * process that links it, so each rank of a CPU run of a CUDA build would carry it.
 * dlopen'ed when the first communicator is made (device = cuda) from the library
 * the build found (TR_NCCL_LIBRARY), else by its soname (LD_LIBRARY_PATH). The
 * macros below keep the calls in this file written as NCCL's own. */
static struct {
    int loaded;
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
} g_nccl;

#ifndef TR_NCCL_LIBRARY
#define TR_NCCL_LIBRARY "libnccl.so.2"
#endif

static void nccl_load(void)
{
    if (g_nccl.loaded)
        return;
    void *h = dlopen(TR_NCCL_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        tr_fatal(TR_EXIT_OSERR, "cannot load NCCL (%s, or libnccl.so.2 on LD_LIBRARY_PATH): %s",
                 TR_NCCL_LIBRARY, dlerror());
#define TR_NCCL_SYM(f)                                                                  \
    do {                                                                                \
        g_nccl.f = (decltype(g_nccl.f))dlsym(h, "nccl" #f);                             \
        if (!g_nccl.f)                                                                  \
            tr_fatal(TR_EXIT_OSERR, "NCCL library %s lacks nccl%s", TR_NCCL_LIBRARY, #f); \
    } while (0)
    TR_NCCL_SYM(GetUniqueId);
    TR_NCCL_SYM(CommInitRank);
    TR_NCCL_SYM(CommDestroy);
    TR_NCCL_SYM(AllReduce);
    TR_NCCL_SYM(Reduce);
    TR_NCCL_SYM(Broadcast);
    TR_NCCL_SYM(AllGather);
    TR_NCCL_SYM(Send);
    TR_NCCL_SYM(Recv);
    TR_NCCL_SYM(GroupStart);
    TR_NCCL_SYM(GroupEnd);
    TR_NCCL_SYM(GetErrorString);
    TR_NCCL_SYM(GetLastError);
    TR_NCCL_SYM(CommGetAsyncError);
    TR_NCCL_SYM(CommAbort);
#undef TR_NCCL_SYM
    g_nccl.loaded = 1;
}

#define ncclGetUniqueId g_nccl.GetUniqueId
#define ncclCommInitRank g_nccl.CommInitRank
#define ncclCommDestroy g_nccl.CommDestroy
#define ncclAllReduce g_nccl.AllReduce
#define ncclReduce g_nccl.Reduce
#define ncclBroadcast g_nccl.Broadcast
#define ncclAllGather g_nccl.AllGather
#define ncclSend g_nccl.Send
#define ncclRecv g_nccl.Recv
#define ncclGroupStart g_nccl.GroupStart
#define ncclGroupEnd g_nccl.GroupEnd
#define ncclGetErrorString g_nccl.GetErrorString
#define ncclGetLastError g_nccl.GetLastError
#define ncclCommGetAsyncError g_nccl.CommGetAsyncError
#define ncclCommAbort g_nccl.CommAbort

static_assert(sizeof(ncclUniqueId) == TR_NCCL_ID_BYTES, "TR_NCCL_ID_BYTES is not NCCL's");
static_assert(sizeof(cudaEvent_t) <= sizeof(((tr_request *)0)->storage),
              "tr_request storage too small for a CUDA event");

struct tr_nccl {
    ncclComm_t comm;
    int rank, size;
    cudaStream_t stream; /* g.stream, or its own (own_stream) */
    int own_stream;
    tr_nccl *next; /* the live communicators, for the watch */
};

static tr_nccl *g_live;

/* ---- errors ---------------------------------------------------------------------- */

[[noreturn]] static void nccl_fail_at(const char *file, int line, ncclResult_t r,
                                      const char *what)
{
    const char *detail = ncclGetLastError(NULL); /* the comm argument is unused */
    tr_fatal_at(file, line, TR_EXIT_SOFTWARE, "NCCL error '%s' in %s%s%s",
                ncclGetErrorString(r), what, detail && *detail ? ": " : "",
                detail ? detail : "");
}

static inline void nccl_check_at(const char *file, int line, ncclResult_t r, const char *what)
{
    if (r != ncclSuccess)
        nccl_fail_at(file, line, r, what);
}

#define NCCL_CHECK(call) nccl_check_at(__FILE__, __LINE__, (call), #call)

/* ---- the process's communication stream and events -------------------------------- */

static struct {
    int ready;
    int device;
    cudaStream_t stream; /* the collectives of every group, in call order */
    cudaEvent_t queued;  /* the compute stream's work before a call */
    cudaEvent_t done;    /* the end of a blocking call */
    cudaEvent_t *spare;  /* free events for requests: [nspare] of [cap] */
    int nspare, cap;
} g;

static cudaEvent_t new_event(void)
{
    cudaEvent_t e;
    TR_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
}

/* A communication stream: non-blocking, of the highest priority (see the top). */
static cudaStream_t new_stream(void)
{
    int least = 0, greatest = 0;
    cudaStream_t s;
    TR_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    TR_CUDA_CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, greatest));
    return s;
}

static void setup_once(void)
{
    if (g.ready)
        return;
    /* the backend's context (made here on the current device if it is not yet):
     * communicators, streams and events all live on its device */
    g.device = tr_cuda_ctx_get()->device;
    TR_CUDA_CHECK(cudaSetDevice(g.device));
    g.stream = new_stream();
    g.queued = new_event();
    g.done = new_event();
    g.ready = 1;
}

static cudaEvent_t take_event(void)
{
    return g.nspare ? g.spare[--g.nspare] : new_event();
}

static void give_event(cudaEvent_t e)
{
    if (g.nspare == g.cap) {
        int cap = g.cap ? 2 * g.cap : 64;
        cudaEvent_t *s = (cudaEvent_t *)tr_alloc((size_t)cap * sizeof *s, "NCCL request events");
        if (g.nspare)
            memcpy(s, g.spare, (size_t)g.nspare * sizeof *s);
        tr_free(g.spare);
        g.spare = s;
        g.cap = cap;
    }
    g.spare[g.nspare++] = e;
}

/* c's stream, after the compute stream's work so far. */
static cudaStream_t begin(const tr_nccl *c)
{
    TR_CUDA_CHECK(cudaEventRecord(g.queued, tr_cuda_stream()));
    TR_CUDA_CHECK(cudaStreamWaitEvent(c->stream, g.queued, 0));
    return c->stream;
}

/* After the NCCL call on c: blocking (req NULL), the compute stream waits for it;
 * else req holds an event recorded after it. */
static void finish(const tr_nccl *c, tr_request *req)
{
    if (!req) {
        TR_CUDA_CHECK(cudaEventRecord(g.done, c->stream));
        TR_CUDA_CHECK(cudaStreamWaitEvent(tr_cuda_stream(), g.done, 0));
        return;
    }
    cudaEvent_t e = take_event();
    TR_CUDA_CHECK(cudaEventRecord(e, c->stream));
    memcpy(req->storage, &e, sizeof e);
    req->active = TR_REQ_NCCL;
}

/* ---- types ----------------------------------------------------------------------- */

static ncclDataType_t nccl_type(tr_dtype t)
{
    switch (t) {
    case TR_F32: return ncclFloat32;
    case TR_F64: return ncclFloat64;
    case TR_I64: return ncclInt64;
    case TR_I32: return ncclInt32;
    case TR_U16: return ncclFloat16; /* moved only: any 16-bit type moves the same bits */
    }
    tr_fatal(TR_EXIT_SOFTWARE, "bug: element type %d has no NCCL type", (int)t);
}

static ncclRedOp_t nccl_op(tr_redop op)
{
    switch (op) {
    case TR_SUM: return ncclSum;
    case TR_MAX: return ncclMax;
    case TR_MIN: return ncclMin;
    }
    tr_fatal(TR_EXIT_SOFTWARE, "bug: reduction %d has no NCCL operation", (int)op);
}

/* the type of a reduction's elements: 16-bit floats' bits must not be reduced */
static ncclDataType_t nccl_reduce_type(tr_dtype t)
{
    if (t == TR_U16)
        tr_fatal(TR_EXIT_SOFTWARE, "bug: a reduction of 16-bit values, which are only moved");
    return nccl_type(t);
}

/* ---- communicators --------------------------------------------------------------- */

extern "C" void tr_nccl_unique_id(void *id)
{
    ncclUniqueId uid;
    nccl_load();
    NCCL_CHECK(ncclGetUniqueId(&uid));
    memcpy(id, &uid, sizeof uid);
}

/* The watch of every host wait (tr_cuda_stream_wait): a communicator whose peer or
 * link failed reports it here, asynchronously, while its kernels wait for data that
 * will never come. Every live communicator is then aborted (which ends its kernels,
 * so nothing is left waiting on the GPU) and the job stops with NCCL's error rather
 * than hanging. */
static void nccl_watch(void)
{
    for (tr_nccl *c = g_live; c; c = c->next) {
        ncclResult_t async = ncclSuccess, r = ncclCommGetAsyncError(c->comm, &async);
        if (r == ncclSuccess && (async == ncclSuccess || async == ncclInProgress))
            continue;
        ncclResult_t bad = r != ncclSuccess ? r : async;
        const char *detail = ncclGetLastError(NULL);
        char msg[512];
        snprintf(msg, sizeof msg, "NCCL failed during a collective of %d ranks (this rank %d): "
                 "'%s'%s%s; a rank, a GPU or the network between them is gone, so the job "
                 "stops (resume it from the last checkpoint)", c->size, c->rank,
                 ncclGetErrorString(bad), detail && *detail ? ": " : "", detail ? detail : "");
        for (tr_nccl *a = g_live; a; a = a->next)
            (void)ncclCommAbort(a->comm);
        g_live = NULL;
        tr_fatal(TR_EXIT_OSERR, "%s", msg);
    }
}

extern "C" tr_nccl *tr_nccl_create(const void *id, int size, int rank, int own_stream)
{
    setup_once();
    TR_CUDA_CHECK(cudaSetDevice(g.device)); /* NCCL binds a communicator to the current one */
    ncclUniqueId uid;
    memcpy(&uid, id, sizeof uid);
    tr_nccl *c = (tr_nccl *)tr_alloc(sizeof *c, "NCCL communicator");
    nccl_load();
    NCCL_CHECK(ncclCommInitRank(&c->comm, size, uid, rank));
    c->rank = rank;
    c->size = size;
    c->own_stream = own_stream;
    c->stream = own_stream ? new_stream() : g.stream;
    c->next = g_live;
    g_live = c;
    tr_cuda_set_watch(nccl_watch);
    return c;
}

extern "C" void tr_nccl_destroy(tr_nccl *c)
{
    if (!c)
        return;
    tr_cuda_stream_wait(c->stream);
    for (tr_nccl **p = &g_live; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            break;
        }
    if (!g_live)
        tr_cuda_set_watch(NULL);
    NCCL_CHECK(ncclCommDestroy(c->comm));
    if (c->own_stream) /* after the communicator: nothing of NCCL's is left on it */
        TR_CUDA_CHECK(cudaStreamDestroy(c->stream));
    tr_free(c);
}

extern "C" int tr_nccl_is_device(const void *p)
{
    cudaPointerAttributes a;
    cudaError_t e = cudaPointerGetAttributes(&a, p);
    if (e == cudaErrorInvalidValue) { /* a pointer CUDA has never heard of: host memory */
        (void)cudaGetLastError();
        return 0;
    }
    TR_CUDA_CHECK(e);
    /* managed memory counts as host: MPI reads it like any other host memory */
    return a.type == cudaMemoryTypeDevice;
}

/* ---- operations ------------------------------------------------------------------ */

extern "C" void tr_nccl_allreduce(tr_nccl *c, const void *sendbuf, void *recvbuf, size_t count,
                                  tr_dtype dtype, tr_redop op, tr_request *req)
{
    cudaStream_t s = begin(c);
    NCCL_CHECK(ncclAllReduce(sendbuf, recvbuf, count, nccl_reduce_type(dtype), nccl_op(op),
                             c->comm, s));
    finish(c, req);
}

extern "C" void tr_nccl_reduce(tr_nccl *c, void *buf, size_t count, tr_dtype dtype, tr_redop op,
                               int root, tr_request *req)
{
    cudaStream_t s = begin(c);
    /* in place on root; the other ranks' recvbuff is ignored, so their buf stays */
    NCCL_CHECK(ncclReduce(buf, buf, count, nccl_reduce_type(dtype), nccl_op(op), root, c->comm, s));
    finish(c, req);
}

extern "C" void tr_nccl_allgatherv(tr_nccl *c, void *buf, const size_t *counts,
                                   const size_t *displs, tr_dtype dtype)
{
    char *b = (char *)buf;
    size_t es = tr_dtype_size(dtype);
    int even = 1; /* equal pieces, in rank order, back to back: NCCL's own all-gather */
    for (int r = 0; r < c->size; r++)
        if (counts[r] != counts[0] || displs[r] != (size_t)r * counts[0])
            even = 0;
    cudaStream_t s = begin(c);
    if (even) {
        /* in place: this rank's piece already sits at recvbuff + rank * count */
        NCCL_CHECK(ncclAllGather(b + displs[c->rank] * es, b, counts[0], nccl_type(dtype),
                                 c->comm, s));
    } else {
        /* NCCL has no all-gather of uneven pieces: each rank broadcasts its own, all
         * of them fused into one operation */
        NCCL_CHECK(ncclGroupStart());
        for (int r = 0; r < c->size; r++)
            if (counts[r]) /* the same on every rank, so every rank skips the same */
                NCCL_CHECK(ncclBroadcast(b + displs[r] * es, b + displs[r] * es, counts[r],
                                         nccl_type(dtype), r, c->comm, s));
        NCCL_CHECK(ncclGroupEnd());
    }
    finish(c, NULL);
}

extern "C" void tr_nccl_reduce_scatterv(tr_nccl *c, float *buf, const size_t *counts,
                                       const size_t *displs)
{
    cudaStream_t s = begin(c);
    /* each part reduced in place to its rank, fused into one operation: pieces of any
     * size, with the calls this file already loads (a reduce's recvbuff is ignored
     * on the other ranks, so their copy of a part stays as it was) */
    NCCL_CHECK(ncclGroupStart());
    for (int r = 0; r < c->size; r++)
        if (counts[r]) /* the same on every rank, so every rank skips the same */
            NCCL_CHECK(ncclReduce(buf + displs[r], buf + displs[r], counts[r], ncclFloat32,
                                  ncclSum, r, c->comm, s));
    NCCL_CHECK(ncclGroupEnd());
    finish(c, NULL);
}

extern "C" void tr_nccl_send(tr_nccl *c, const void *buf, size_t count, tr_dtype dtype,
                             int peer, tr_request *req)
{
    cudaStream_t s = begin(c);
    NCCL_CHECK(ncclSend(buf, count, nccl_type(dtype), peer, c->comm, s));
    finish(c, req);
}

extern "C" void tr_nccl_recv(tr_nccl *c, void *buf, size_t count, tr_dtype dtype, int peer)
{
    cudaStream_t s = begin(c);
    NCCL_CHECK(ncclRecv(buf, count, nccl_type(dtype), peer, c->comm, s));
    finish(c, NULL);
}

extern "C" void tr_nccl_bcast(tr_nccl *c, void *buf, size_t count, tr_dtype dtype, int root)
{
    cudaStream_t s = begin(c);
    NCCL_CHECK(ncclBroadcast(buf, buf, count, nccl_type(dtype), root, c->comm, s));
    finish(c, NULL);
}

/* ---- requests -------------------------------------------------------------------- */

static cudaEvent_t event_of(const tr_request *req)
{
    cudaEvent_t e;
    memcpy(&e, req->storage, sizeof e);
    return e;
}

extern "C" int tr_nccl_test(tr_request *req)
{
    cudaEvent_t e = event_of(req);
    cudaError_t r = cudaEventQuery(e);
    if (r == cudaErrorNotReady) {
        (void)cudaGetLastError(); /* "not yet" is an answer, not an error to report later */
        return 0;
    }
    TR_CUDA_CHECK(r);
    /* finished on the GPU: whatever is queued from now on runs after it */
    give_event(e);
    req->active = 0;
    return 1;
}

extern "C" void tr_nccl_wait(tr_request *req)
{
    cudaEvent_t e = event_of(req);
    TR_CUDA_CHECK(cudaStreamWaitEvent(tr_cuda_stream(), e, 0));
    give_event(e);
    req->active = 0;
}
