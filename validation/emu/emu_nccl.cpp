/* emu_nccl.cpp: NCCL for the CUDA emulation build (validation/emu/README.md), on the
 * host, over MPI. The trainer dlopens it in place of libnccl (TR_NCCL_LIBRARY) and
 * calls the functions of include/nccl.h as it would call NCCL's.
 *
 * Device memory is host memory that emu_runtime.cpp hands out, and every emulated
 * stream runs its work at once on the calling thread, so an operation here is done
 * (or, for a send, handed to MPI) before the call returns; the stream argument is
 * not needed. Every buffer is checked against the runtime's table of cudaMalloc
 * blocks (tr_emu_device_span): a host pointer, or a span that runs past its block,
 * would fault on a GPU, so it is an error here too (ncclInvalidArgument, with
 * ncclGetLastError naming the call and the buffer).
 *
 * Communicators. ncclGetUniqueId writes a magic, the MPI_COMM_WORLD rank of its
 * maker (the "creator") and a serial number of that process. ncclCommInitRank meets
 * the other members at the creator: each sends it (world rank, NCCL rank, nranks),
 * and it answers every one with the world ranks of all members in NCCL rank order;
 * then the members, and only they, make an MPI communicator of exactly themselves
 * (MPI_Comm_create_group), ranked as in NCCL. So the creator must itself be a
 * member (it is in the trainer: group rank 0, or a link's lower rank); NCCL itself
 * serves the meeting from a thread of the creator, which MPI_THREAD_FUNNELED does not
 * allow here. The meeting's messages go over MPI_COMM_WORLD, because any private
 * communicator would have to be made collectively over the whole world at a moment
 * nothing here controls; they use tags from the top half of the tag space, derived
 * from the serial number, and the trainer sends no point-to-point message on
 * MPI_COMM_WORLD (its world group only runs collectives, which MPI never matches with
 * point-to-point traffic; its sends go over split communicators).
 *
 * Operations run on the communicator's own MPI communicator, so they cannot meet the
 * trainer's traffic. Every operation is posted non-blocking and then waited for:
 * outside a group at once, inside one (ncclGroupStart/End) all together at the
 * outermost ncclGroupEnd, so the operations of a group progress together as NCCL's
 * do (the trainer's uneven all-gather is a group of broadcasts from every root). MPI
 * asks that collectives on one communicator be posted in the same order on every
 * rank, which is NCCL's own rule for a communicator's operations.
 *
 * Sends never wait. A send in NCCL holds up its stream until the peer's receive runs,
 * but not the host; here the stream is the host, so a send that waited for its
 * receive could deadlock a program that NCCL runs (two ranks that each send before
 * they receive, on streams of their own: the trainer's links). So ncclSend copies the
 * data (the caller may reuse the buffer as soon as its stream moves on, which here is
 * at once) and posts MPI_Isend of the copy; finished sends are reaped at every later
 * call, and ncclCommDestroy waits for those of its communicator. Receives and
 * collectives wait on the host, as the streams they are on would wait. So a program
 * runs here wherever it runs under MPI with blocking receives and collectives and
 * sends that never wait (comm_mpi.c's make_links argues the trainer's pipeline runs
 * even where sends wait for their receives). NCCL allows one thing more: its host
 * goes on past an operation that its stream waits in, so a rank may reach its part
 * of a collective only through host work that a peer does after its own part; that
 * hangs here. The trainer starts non-blocking collectives (data-parallel buckets)
 * only in groups whose ranks run the same schedule, which cannot come to that.
 *
 * Counts above MPI's int go in pieces (reductions, broadcasts, sends, receives, all
 * cut the same way on every rank) or as one derived datatype (an all-gather's
 * blocks). TR_EMU_NCCL_MAX_COUNT lowers that limit so a test can reach those paths
 * with small buffers. */
#include "nccl.h"

/* the C API only: OpenMPI's C++ bindings do not compile warning-free */
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <memory>
#include <set>
#include <vector>

#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#ifndef TR_EMU_NCCL_MAX_COUNT
#define TR_EMU_NCCL_MAX_COUNT INT_MAX /* elements in one MPI call */
#endif

struct ncclComm {
    MPI_Comm mpi; /* exactly the members, ranked as in NCCL */
    int rank, nranks;
};

namespace
{

const size_t MAX_COUNT = (size_t)TR_EMU_NCCL_MAX_COUNT;
static_assert(TR_EMU_NCCL_MAX_COUNT >= 1 && TR_EMU_NCCL_MAX_COUNT <= INT_MAX,
              "TR_EMU_NCCL_MAX_COUNT must fit MPI's int counts");

const uint32_t ID_MAGIC = 0x4d45434eu; /* "NCEM": an id that this library made */
const int TAG_P2P = 0;                 /* on a communicator's own MPI communicator */

/* what ncclUniqueId carries (the rest of its bytes are zero) */
struct id_body {
    uint32_t magic;
    int32_t creator;    /* MPI_COMM_WORLD rank of the process that made it */
    int32_t world_size; /* so an id from another job is refused, not waited on */
    uint32_t unused;
    uint64_t serial; /* per creator: with it, the tags of the id's meeting */
};
static_assert(sizeof(id_body) <= NCCL_UNIQUE_ID_BYTES, "id_body does not fit ncclUniqueId");

/* a send handed to MPI; the copy lives until MPI is done with it */
struct pending_send {
    ncclComm *comm;
    MPI_Request req;
    std::shared_ptr<char[]> copy; /* shared by the pieces of one send */
};

enum op_kind { OP_ALLREDUCE, OP_REDUCE, OP_BROADCAST, OP_ALLGATHER, OP_SEND, OP_RECV };

const char *const OP_NAME[] = {"ncclAllReduce", "ncclReduce", "ncclBroadcast",
                               "ncclAllGather", "ncclSend",   "ncclRecv"};

struct task {
    op_kind kind;
    ncclComm *comm;
    const void *send;
    void *recv;
    size_t count;
    ncclDataType_t type;
    ncclRedOp_t red;
    int peer; /* the root of a rooted collective, the peer of a send or receive */
};

struct type_info {
    MPI_Datatype mpi;
    size_t size;
    bool reducible; /* 16- and 8-bit floats are only moved (MPI has no such type) */
    bool floating;
};

struct state {
    std::set<ncclComm *> live;
    std::vector<pending_send> sends;
    std::vector<std::shared_ptr<char[]>> abandoned; /* aborted sends' copies: kept */
    std::vector<task> queued;                       /* the open group's operations, in call order */
    int group_depth = 0;
    ncclResult_t group_error = ncclSuccess; /* the first error in the open group */
    uint64_t next_serial = 0;
    char last_error[1024] = "";
};

state &S()
{
    static state s;
    return s;
}

/* r, after recording what went wrong for ncclGetLastError (and printing it when
 * NCCL_DEBUG asks for warnings, as NCCL does) */
ncclResult_t fail(ncclResult_t r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
ncclResult_t fail(ncclResult_t r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(S().last_error, sizeof S().last_error, fmt, ap);
    va_end(ap);
    const char *debug = getenv("NCCL_DEBUG");
    if (debug && *debug && strcasecmp(debug, "VERSION") != 0)
        fprintf(stderr, "emulated NCCL WARN %s\n", S().last_error);
    return r;
}

/* an MPI call's failure as NCCL's: the peers or the transport are at fault */
ncclResult_t mpi_fail(int rc, const char *call, const char *what)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS)
        snprintf(msg, sizeof msg, "MPI error %d", rc);
    return fail(ncclSystemError, "%s: %s failed: %s", call, what, msg);
}

#define MPI_TRY(call, what, mpicall)                                                               \
    do {                                                                                           \
        int rc_ = (mpicall);                                                                       \
        if (rc_ != MPI_SUCCESS)                                                                    \
            return mpi_fail(rc_, (call), (what));                                                  \
    } while (0)

ncclResult_t need_mpi(const char *call)
{
    int up = 0, down = 0;
    MPI_Initialized(&up);
    MPI_Finalized(&down);
    if (!up || down)
        return fail(ncclSystemError, "%s: MPI is %s; the emulated NCCL runs over MPI", call,
                    up ? "finalized" : "not initialized");
    return ncclSuccess;
}

bool type_of(ncclDataType_t t, type_info *ti)
{
    switch (t) {
    case ncclInt8:
        *ti = {MPI_INT8_T, 1, true, false};
        return true;
    case ncclUint8:
        *ti = {MPI_UINT8_T, 1, true, false};
        return true;
    case ncclInt32:
        *ti = {MPI_INT32_T, 4, true, false};
        return true;
    case ncclUint32:
        *ti = {MPI_UINT32_T, 4, true, false};
        return true;
    case ncclInt64:
        *ti = {MPI_INT64_T, 8, true, false};
        return true;
    case ncclUint64:
        *ti = {MPI_UINT64_T, 8, true, false};
        return true;
    case ncclFloat16:
    case ncclBfloat16:
        *ti = {MPI_UINT16_T, 2, false, true};
        return true;
    case ncclFloat32:
        *ti = {MPI_FLOAT, 4, true, true};
        return true;
    case ncclFloat64:
        *ti = {MPI_DOUBLE, 8, true, true};
        return true;
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
        *ti = {MPI_UINT8_T, 1, false, true};
        return true;
    default:
        return false;
    }
}

/* ncclAvg is a sum, divided by the rank count once it is complete */
bool mpi_op_of(ncclRedOp_t r, MPI_Op *op)
{
    switch (r) {
    case ncclSum:
    case ncclAvg:
        *op = MPI_SUM;
        return true;
    case ncclProd:
        *op = MPI_PROD;
        return true;
    case ncclMax:
        *op = MPI_MAX;
        return true;
    case ncclMin:
        *op = MPI_MIN;
        return true;
    default:
        return false;
    }
}

/* [p, p + bytes) inside one live cudaMalloc block; an empty span touches nothing */
ncclResult_t check_buffer(const char *call, const char *name, const void *p, size_t bytes)
{
    if (bytes == 0 || tr_emu_device_span(p, bytes))
        return ncclSuccess;
    return fail(ncclInvalidArgument,
                "%s: %s %p (%zu bytes) is not device memory: no live cudaMalloc allocation "
                "holds all of it, and a GPU would fault on it",
                call, name, p, bytes);
}

ncclResult_t check_comm(const char *call, ncclComm *c)
{
    if (!c)
        return fail(ncclInvalidArgument, "%s: comm is NULL", call);
    if (!S().live.count(c))
        return fail(ncclInvalidArgument, "%s: comm %p is not a live communicator", call, (void *)c);
    return ncclSuccess;
}

/* every argument of o, as NCCL checks them when the call is made */
ncclResult_t check_task(const task &o)
{
    const char *call = OP_NAME[o.kind];
    ncclResult_t r = check_comm(call, o.comm);
    if (r != ncclSuccess)
        return r;
    type_info ti;
    if (!type_of(o.type, &ti))
        return fail(ncclInvalidArgument, "%s: invalid datatype %d", call, (int)o.type);
    bool reduces = o.kind == OP_ALLREDUCE || o.kind == OP_REDUCE;
    MPI_Op mop;
    if (reduces && !mpi_op_of(o.red, &mop))
        return fail(ncclInvalidArgument, "%s: invalid reduction operation %d", call, (int)o.red);
    if (reduces && !ti.reducible)
        return fail(ncclInvalidArgument,
                    "%s: the emulated NCCL does not reduce datatype %d (16- and 8-bit "
                    "floats are only moved)",
                    call, (int)o.type);
    if (reduces && o.red == ncclAvg && !ti.floating)
        return fail(ncclInvalidArgument, "%s: the emulated NCCL averages floats only", call);
    int n = o.comm->nranks, me = o.comm->rank;
    bool rooted = o.kind == OP_REDUCE || o.kind == OP_BROADCAST;
    bool p2p = o.kind == OP_SEND || o.kind == OP_RECV;
    if ((rooted || p2p) && (o.peer < 0 || o.peer >= n))
        return fail(ncclInvalidArgument, "%s: %s %d is not a rank of this %d-rank communicator",
                    call, p2p ? "peer" : "root", o.peer, n);
    size_t bytes;
    if (__builtin_mul_overflow(o.count, ti.size, &bytes))
        return fail(ncclInvalidArgument, "%s: count %zu is too large", call, o.count);
    size_t all = bytes;
    if (o.kind == OP_ALLGATHER && __builtin_mul_overflow(bytes, (size_t)n, &all))
        return fail(ncclInvalidArgument, "%s: count %zu is too large", call, o.count);
    switch (o.kind) {
    case OP_ALLREDUCE:
        r = check_buffer(call, "sendbuff", o.send, bytes);
        return r != ncclSuccess ? r : check_buffer(call, "recvbuff", o.recv, bytes);
    case OP_REDUCE: /* recvbuff only on the root */
        r = check_buffer(call, "sendbuff", o.send, bytes);
        if (r != ncclSuccess || me != o.peer)
            return r;
        return check_buffer(call, "recvbuff", o.recv, bytes);
    case OP_BROADCAST: /* sendbuff only on the root */
        if (me == o.peer && (r = check_buffer(call, "sendbuff", o.send, bytes)) != ncclSuccess)
            return r;
        return check_buffer(call, "recvbuff", o.recv, bytes);
    case OP_ALLGATHER:
        r = check_buffer(call, "sendbuff", o.send, bytes);
        return r != ncclSuccess ? r : check_buffer(call, "recvbuff", o.recv, all);
    case OP_SEND:
        return check_buffer(call, "sendbuff", o.send, bytes);
    case OP_RECV:
        return check_buffer(call, "recvbuff", o.recv, bytes);
    }
    return ncclSuccess;
}

/* Drops the sends MPI has finished with (their copies go with them). */
ncclResult_t reap(const char *call)
{
    auto &v = S().sends;
    for (size_t i = 0; i < v.size();) {
        int done = 0;
        MPI_TRY(call, "MPI_Test of an earlier send", MPI_Test(&v[i].req, &done, MPI_STATUS_IGNORE));
        if (done) {
            v[i] = std::move(v.back());
            v.pop_back();
        } else {
            i++;
        }
    }
    return ncclSuccess;
}

/* What a batch of posted operations leaves to do: requests to wait for, and sums to
 * divide for ncclAvg once they are complete. */
struct batch {
    std::vector<MPI_Request> reqs;
    struct average {
        void *buf;
        size_t count;
        ncclDataType_t type;
        int nranks;
    };
    std::vector<average> averages;
};

/* count elements of base as one MPI element (count <= MAX_COUNT: base itself), for the
 * all-gather, whose blocks cannot be cut into pieces that MPI places rank by rank */
ncclResult_t block_type(const char *call, size_t count, const type_info &ti, MPI_Datatype *t,
                        int *n)
{
    if (count <= MAX_COUNT) {
        *t = ti.mpi;
        *n = (int)count;
        return ncclSuccess;
    }
    size_t q = count / MAX_COUNT, rest = count % MAX_COUNT;
    if (q > (size_t)INT_MAX)
        return fail(ncclInvalidArgument, "%s: count %zu is too large", call, count);
    MPI_Datatype piece, tail = MPI_DATATYPE_NULL, whole;
    MPI_TRY(call, "MPI_Type_contiguous", MPI_Type_contiguous((int)MAX_COUNT, ti.mpi, &piece));
    if (rest == 0) {
        MPI_TRY(call, "MPI_Type_contiguous", MPI_Type_contiguous((int)q, piece, &whole));
    } else {
        MPI_TRY(call, "MPI_Type_contiguous", MPI_Type_contiguous((int)rest, ti.mpi, &tail));
        int lens[2] = {(int)q, 1};
        MPI_Aint at[2] = {0, (MPI_Aint)(q * MAX_COUNT * ti.size)};
        MPI_Datatype types[2] = {piece, tail};
        MPI_TRY(call, "MPI_Type_create_struct", MPI_Type_create_struct(2, lens, at, types, &whole));
        MPI_Type_free(&tail);
    }
    MPI_Type_free(&piece);
    /* the extent is exactly the block's bytes, so rank r's block starts at r * bytes */
    MPI_TRY(call, "MPI_Type_create_resized",
            MPI_Type_create_resized(whole, 0, (MPI_Aint)(count * ti.size), t));
    MPI_Type_free(&whole);
    MPI_TRY(call, "MPI_Type_commit", MPI_Type_commit(t));
    *n = 1;
    return ncclSuccess;
}

/* Posts o (checked) to MPI: its requests into b, a send's into the pending sends. */
ncclResult_t post(const task &o, batch *b)
{
    const char *call = OP_NAME[o.kind];
    if (o.count == 0) /* every rank passes the same count, so all of them skip it */
        return ncclSuccess;
    type_info ti;
    type_of(o.type, &ti);
    MPI_Op mop = MPI_SUM;
    mpi_op_of(o.red, &mop);
    ncclComm *c = o.comm;
    size_t es = ti.size, bytes = o.count * es;
    const char *src = (const char *)o.send;
    char *dst = (char *)o.recv;
    bool root = c->rank == o.peer;
    if (o.kind == OP_ALLGATHER) {
        /* this rank's block into its place first, then in place: also right when
         * sendbuff overlaps recvbuff elsewhere (MPI forbids aliased buffers) */
        char *mine = dst + (size_t)c->rank * bytes;
        if (src != mine)
            memmove(mine, src, bytes);
        MPI_Datatype t = ti.mpi;
        int n = 0;
        ncclResult_t r = block_type(call, o.count, ti, &t, &n);
        if (r != ncclSuccess)
            return r;
        MPI_Request req;
        int rc = MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, dst, n, t, c->mpi, &req);
        if (t != ti.mpi) /* MPI keeps what a posted operation needs of it */
            MPI_Type_free(&t);
        if (rc != MPI_SUCCESS)
            return mpi_fail(rc, call, "MPI_Iallgather");
        b->reqs.push_back(req);
        return ncclSuccess;
    }
    if (o.kind == OP_BROADCAST && root && src != dst)
        memmove(dst, src, bytes);
    std::shared_ptr<char[]> copy;
    if (o.kind == OP_SEND) {
        copy.reset(new char[bytes]);
        memcpy(copy.get(), src, bytes);
    }
    for (size_t off = 0; off < o.count; off += MAX_COUNT) {
        int n = (int)std::min(MAX_COUNT, o.count - off);
        size_t at = off * es;
        MPI_Request req;
        switch (o.kind) {
        case OP_ALLREDUCE:
            MPI_TRY(call, "MPI_Iallreduce",
                    MPI_Iallreduce(src == dst ? MPI_IN_PLACE : src + at, dst + at, n, ti.mpi, mop,
                                   c->mpi, &req));
            break;
        case OP_REDUCE: /* the root's result in place when sendbuff is recvbuff */
            MPI_TRY(call, "MPI_Ireduce",
                    MPI_Ireduce(root && src == dst ? MPI_IN_PLACE : src + at,
                                root ? dst + at : NULL, n, ti.mpi, mop, o.peer, c->mpi, &req));
            break;
        case OP_BROADCAST:
            MPI_TRY(call, "MPI_Ibcast", MPI_Ibcast(dst + at, n, ti.mpi, o.peer, c->mpi, &req));
            break;
        case OP_SEND:
            MPI_TRY(call, "MPI_Isend",
                    MPI_Isend(copy.get() + at, n, ti.mpi, o.peer, TAG_P2P, c->mpi, &req));
            S().sends.push_back({c, req, copy});
            continue; /* not waited for: see the top */
        case OP_RECV:
            MPI_TRY(call, "MPI_Irecv",
                    MPI_Irecv(dst + at, n, ti.mpi, o.peer, TAG_P2P, c->mpi, &req));
            break;
        case OP_ALLGATHER:
            break; /* above */
        }
        b->reqs.push_back(req);
    }
    bool averaged = o.red == ncclAvg && (o.kind == OP_ALLREDUCE || (o.kind == OP_REDUCE && root));
    if (averaged)
        b->averages.push_back({dst, o.count, o.type, c->nranks});
    return ncclSuccess;
}

/* Waits for b's requests, then finishes the averages. */
ncclResult_t complete(const char *call, batch *b)
{
    if (!b->reqs.empty())
        MPI_TRY(call, "waiting for the operations (MPI_Waitall)",
                MPI_Waitall((int)b->reqs.size(), b->reqs.data(), MPI_STATUSES_IGNORE));
    for (const auto &a : b->averages) {
        if (a.type == ncclFloat32) {
            float *p = (float *)a.buf;
            for (size_t i = 0; i < a.count; i++)
                p[i] /= (float)a.nranks;
        } else {
            double *p = (double *)a.buf;
            for (size_t i = 0; i < a.count; i++)
                p[i] /= (double)a.nranks;
        }
    }
    return ncclSuccess;
}

/* An operation: queued inside a group, else done now. */
ncclResult_t submit(const task &o)
{
    const char *call = OP_NAME[o.kind];
    ncclResult_t r = need_mpi(call);
    if (r == ncclSuccess)
        r = check_task(o);
    if (r != ncclSuccess) {
        if (S().group_depth > 0 && S().group_error == ncclSuccess)
            S().group_error = r;
        return r;
    }
    if (S().group_depth > 0) {
        S().queued.push_back(o);
        return ncclSuccess;
    }
    if ((r = reap(call)) != ncclSuccess)
        return r;
    batch b;
    if ((r = post(o, &b)) != ncclSuccess)
        return r;
    return complete(call, &b);
}

/* The tags of an id's meeting on MPI_COMM_WORLD: an even one for the members' joins,
 * the next for the creator's answers, from the top half of the tag space (the
 * trainer sends nothing on MPI_COMM_WORLD; the half keeps clear of small tags that a
 * test or a later caller might use there). Ids take their tags in turn, numbered by
 * serial and creator, so no two ids of a job share tags until about MPI_TAG_UB / 4
 * of them have been made; the tag also names the communicator's creation
 * (MPI_Comm_create_group), which needs no more than that. */
ncclResult_t meeting_tags(const char *call, const id_body &id, int *join, int *answer)
{
    int *ub = NULL, found = 0;
    MPI_TRY(call, "MPI_Comm_get_attr(MPI_TAG_UB)",
            MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &found));
    int top = found && ub ? *ub : 32767; /* MPI promises at least 32767 */
    int base = top / 2, pairs = (top - base) / 2;
    uint64_t key = id.serial * (uint64_t)id.world_size + (uint64_t)id.creator;
    *join = base + 2 * (int)(key % (uint64_t)pairs);
    *answer = *join + 1;
    return ncclSuccess;
}

enum { MEET_OK = 0, MEET_NRANKS = 1, MEET_RANK = 2 };

/* The world ranks of all members in NCCL rank order, through the creator (see the
 * top). Every member gets an answer, a refusal included, so nobody is left waiting
 * on a meeting that failed. */
ncclResult_t meet(const char *call, const id_body &id, int nranks, int rank, int me,
                  std::vector<int> *members, int *tag)
{
    int tag_join, tag_answer;
    ncclResult_t r = meeting_tags(call, id, &tag_join, &tag_answer);
    if (r != ncclSuccess)
        return r;
    *tag = tag_join;
    std::vector<int> answer; /* {outcome, nranks, world rank of NCCL rank 0, 1, ...} */
    if (me == id.creator) {
        std::vector<int> world((size_t)nranks, -1), joined;
        world[(size_t)rank] = me;
        int outcome = MEET_OK;
        for (int i = 1; i < nranks; i++) {
            int j[3]; /* world rank, NCCL rank, nranks */
            MPI_Status st;
            MPI_TRY(call, "MPI_Recv of a member's join",
                    MPI_Recv(j, 3, MPI_INT, MPI_ANY_SOURCE, tag_join, MPI_COMM_WORLD, &st));
            joined.push_back(st.MPI_SOURCE);
            if (j[2] != nranks)
                outcome = outcome ? outcome : MEET_NRANKS;
            else if (j[1] < 0 || j[1] >= nranks || world[(size_t)j[1]] != -1)
                outcome = outcome ? outcome : MEET_RANK;
            else
                world[(size_t)j[1]] = st.MPI_SOURCE;
        }
        answer.push_back(outcome);
        answer.push_back(nranks);
        answer.insert(answer.end(), world.begin(), world.end());
        std::vector<MPI_Request> reqs(joined.size());
        for (size_t i = 0; i < joined.size(); i++)
            MPI_TRY(call, "MPI_Isend of the members' list",
                    MPI_Isend(answer.data(), (int)answer.size(), MPI_INT, joined[i], tag_answer,
                              MPI_COMM_WORLD, &reqs[i]));
        if (!reqs.empty())
            MPI_TRY(call, "MPI_Waitall of the members' lists",
                    MPI_Waitall((int)reqs.size(), reqs.data(), MPI_STATUSES_IGNORE));
    } else {
        int j[3] = {me, rank, nranks};
        MPI_Request req;
        MPI_Status st;
        int len = 0;
        MPI_TRY(call, "MPI_Isend of the join to the id's creator",
                MPI_Isend(j, 3, MPI_INT, id.creator, tag_join, MPI_COMM_WORLD, &req));
        /* the creator's nranks may differ from ours: its answer's length tells */
        MPI_TRY(call, "MPI_Probe for the creator's answer",
                MPI_Probe(id.creator, tag_answer, MPI_COMM_WORLD, &st));
        MPI_TRY(call, "MPI_Get_count", MPI_Get_count(&st, MPI_INT, &len));
        answer.resize((size_t)std::max(len, 2));
        MPI_TRY(call, "MPI_Recv of the creator's answer",
                MPI_Recv(answer.data(), len, MPI_INT, id.creator, tag_answer, MPI_COMM_WORLD,
                         MPI_STATUS_IGNORE));
        MPI_TRY(call, "MPI_Wait for the join", MPI_Wait(&req, MPI_STATUS_IGNORE));
    }
    if (answer[0] == MEET_NRANKS || answer[1] != nranks)
        return fail(ncclInvalidArgument,
                    "%s: the ranks of the communicator of id (creator world rank %d, serial "
                    "%llu) disagree on nranks (this rank: %d, its creator: %d)",
                    call, id.creator, (unsigned long long)id.serial, nranks, answer[1]);
    if (answer[0] != MEET_OK)
        return fail(ncclInvalidArgument,
                    "%s: two ranks of the communicator of id (creator world rank %d, serial "
                    "%llu) gave the same NCCL rank",
                    call, id.creator, (unsigned long long)id.serial);
    members->assign(answer.begin() + 2, answer.end());
    return ncclSuccess;
}

ncclResult_t make_comm(const char *call, const id_body &id, int nranks, int rank, MPI_Comm *out)
{
    int me = 0;
    MPI_TRY(call, "MPI_Comm_rank", MPI_Comm_rank(MPI_COMM_WORLD, &me));
    if (nranks == 1) { /* nobody to meet */
        MPI_TRY(call, "MPI_Comm_dup(MPI_COMM_SELF)", MPI_Comm_dup(MPI_COMM_SELF, out));
    } else {
        std::vector<int> members;
        int tag = 0;
        ncclResult_t r = meet(call, id, nranks, rank, me, &members, &tag);
        if (r != ncclSuccess)
            return r;
        MPI_Group world, group;
        MPI_TRY(call, "MPI_Comm_group", MPI_Comm_group(MPI_COMM_WORLD, &world));
        int rc = MPI_Group_incl(world, nranks, members.data(), &group);
        MPI_Group_free(&world);
        if (rc != MPI_SUCCESS)
            return mpi_fail(rc, call, "MPI_Group_incl");
        /* collective over the members only: the rest of the world goes on */
        rc = MPI_Comm_create_group(MPI_COMM_WORLD, group, tag, out);
        MPI_Group_free(&group);
        if (rc != MPI_SUCCESS)
            return mpi_fail(rc, call, "MPI_Comm_create_group");
    }
    /* failures come back as codes, which every call here turns into NCCL's */
    MPI_TRY(call, "MPI_Comm_set_errhandler", MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN));
    int got_rank = -1, got_size = -1;
    MPI_Comm_rank(*out, &got_rank);
    MPI_Comm_size(*out, &got_size);
    if (got_rank != rank || got_size != nranks) {
        MPI_Comm_free(out);
        return fail(ncclInternalError, "%s: made rank %d of %d, not %d of %d", call, got_rank,
                    got_size, rank, nranks);
    }
    return ncclSuccess;
}

bool queued_on(const ncclComm *c)
{
    for (const task &o : S().queued)
        if (o.comm == c)
            return true;
    return false;
}

} /* namespace */

extern "C" {

const char *ncclGetErrorString(ncclResult_t result)
{
    switch (result) {
    case ncclSuccess:
        return "success";
    case ncclUnhandledCudaError:
        return "a CUDA call failed";
    case ncclSystemError:
        return "a system or MPI call failed (see ncclGetLastError)";
    case ncclInternalError:
        return "internal error of the emulated NCCL";
    case ncclInvalidArgument:
        return "invalid argument (see ncclGetLastError)";
    case ncclInvalidUsage:
        return "invalid usage (see ncclGetLastError)";
    case ncclRemoteError:
        return "a remote rank or the network failed";
    case ncclInProgress:
        return "operation in progress";
    default:
        return "unknown NCCL result code";
    }
}

/* the comm argument is unused, as in NCCL */
const char *ncclGetLastError(ncclComm_t comm)
{
    (void)comm;
    return S().last_error;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId)
{
    const char *call = "ncclGetUniqueId";
    if (!uniqueId)
        return fail(ncclInvalidArgument, "%s: uniqueId is NULL", call);
    ncclResult_t r = need_mpi(call);
    if (r != ncclSuccess)
        return r;
    id_body b = {};
    b.magic = ID_MAGIC;
    MPI_TRY(call, "MPI_Comm_rank", MPI_Comm_rank(MPI_COMM_WORLD, &b.creator));
    MPI_TRY(call, "MPI_Comm_size", MPI_Comm_size(MPI_COMM_WORLD, &b.world_size));
    b.serial = S().next_serial++;
    memset(uniqueId, 0, sizeof *uniqueId);
    memcpy(uniqueId->internal, &b, sizeof b);
    return ncclSuccess;
}

/* Collective over the members only (see the top). Inside a group it runs at once
 * all the same: one process holds one rank here, so there is no second rank of this
 * process for it to wait on, which is what NCCL's grouped init is for. */
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)
{
    const char *call = "ncclCommInitRank";
    if (!comm)
        return fail(ncclInvalidArgument, "%s: comm is NULL", call);
    *comm = NULL;
    ncclResult_t r = need_mpi(call);
    if (r != ncclSuccess)
        return r;
    if (nranks < 1)
        return fail(ncclInvalidArgument, "%s: nranks %d is below 1", call, nranks);
    if (rank < 0 || rank >= nranks)
        return fail(ncclInvalidArgument, "%s: rank %d is not in [0, %d)", call, rank, nranks);
    id_body id;
    memcpy(&id, commId.internal, sizeof id);
    int world = 0;
    MPI_TRY(call, "MPI_Comm_size", MPI_Comm_size(MPI_COMM_WORLD, &world));
    if (id.magic != ID_MAGIC)
        return fail(ncclInvalidArgument,
                    "%s: the id was not made by ncclGetUniqueId of the "
                    "emulated NCCL (or was not passed on whole)",
                    call);
    if (id.world_size != world || id.creator < 0 || id.creator >= world)
        return fail(ncclInvalidArgument,
                    "%s: the id comes from another MPI job (its creator is "
                    "world rank %d of %d; this job has %d ranks)",
                    call, id.creator, id.world_size, world);
    if (nranks > world)
        return fail(ncclInvalidArgument,
                    "%s: nranks %d exceeds the %d MPI processes (the "
                    "emulated NCCL holds one rank per process)",
                    call, nranks, world);
    if ((r = reap(call)) != ncclSuccess)
        return r;
    MPI_Comm mpi;
    if ((r = make_comm(call, id, nranks, rank, &mpi)) != ncclSuccess)
        return r;
    ncclComm *c = new ncclComm{mpi, rank, nranks};
    S().live.insert(c);
    *comm = c;
    return ncclSuccess;
}

/* After the communicator's sends have been received: NCCL's destroy, too, comes after
 * the streams that carry them (comm_nccl.cu waits for the stream first). */
ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    const char *call = "ncclCommDestroy";
    if (!comm) /* as NCCL: nothing to do */
        return ncclSuccess;
    ncclResult_t r = check_comm(call, comm);
    if (r == ncclSuccess)
        r = need_mpi(call);
    if (r != ncclSuccess)
        return r;
    if (queued_on(comm))
        return fail(ncclInvalidUsage, "%s: the open group still holds operations on comm", call);
    auto &v = S().sends;
    for (size_t i = 0; i < v.size();) {
        if (v[i].comm != comm) {
            i++;
            continue;
        }
        MPI_TRY(call, "MPI_Wait for a send", MPI_Wait(&v[i].req, MPI_STATUS_IGNORE));
        v[i] = std::move(v.back());
        v.pop_back();
    }
    S().live.erase(comm);
    int rc = MPI_Comm_free(&comm->mpi);
    delete comm;
    return rc == MPI_SUCCESS ? ncclSuccess : mpi_fail(rc, call, "MPI_Comm_free");
}

/* Gives the communicator up without waiting for anyone: its sends are cancelled and
 * let go (their copies are left behind on purpose, as MPI may still read them), and
 * its MPI communicator is not freed, as MPI_Comm_free is collective over ranks that
 * may be gone. Meant for a process on its way out, as in the trainer. */
ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    const char *call = "ncclCommAbort";
    if (!comm)
        return ncclSuccess;
    ncclResult_t r = check_comm(call, comm);
    if (r != ncclSuccess)
        return r;
    auto &v = S().sends;
    for (size_t i = 0; i < v.size();) {
        if (v[i].comm != comm) {
            i++;
            continue;
        }
        MPI_Cancel(&v[i].req);
        MPI_Request_free(&v[i].req);
        S().abandoned.push_back(std::move(v[i].copy)); /* kept: see above */
        v[i] = std::move(v.back());
        v.pop_back();
    }
    auto &q = S().queued;
    q.erase(std::remove_if(q.begin(), q.end(), [comm](const task &o) { return o.comm == comm; }),
            q.end());
    S().live.erase(comm);
    delete comm;
    return ncclSuccess;
}

/* Nothing runs in the background here: an operation's failure is its call's result. */
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
    const char *call = "ncclCommGetAsyncError";
    if (!asyncError)
        return fail(ncclInvalidArgument, "%s: asyncError is NULL", call);
    ncclResult_t r = check_comm(call, comm);
    if (r != ncclSuccess)
        return r;
    *asyncError = ncclSuccess;
    return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream)
{
    (void)stream;
    return submit({OP_ALLREDUCE, comm, sendbuff, recvbuff, count, datatype, op, 0});
}

ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream)
{
    (void)stream;
    return submit({OP_REDUCE, comm, sendbuff, recvbuff, count, datatype, op, root});
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream)
{
    (void)stream;
    return submit({OP_BROADCAST, comm, sendbuff, recvbuff, count, datatype, ncclSum, root});
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
    (void)stream;
    return submit({OP_ALLGATHER, comm, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0});
}

ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream)
{
    (void)stream;
    return submit({OP_SEND, comm, sendbuff, NULL, count, datatype, ncclSum, peer});
}

ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream)
{
    (void)stream;
    return submit({OP_RECV, comm, NULL, recvbuff, count, datatype, ncclSum, peer});
}

ncclResult_t ncclGroupStart(void)
{
    S().group_depth++;
    return ncclSuccess;
}

/* The outermost end runs the group: every operation posted, in call order, then all
 * waited for together (sends excepted, as everywhere). A group in which a call failed
 * runs nothing and returns that call's error, as NCCL's does. */
ncclResult_t ncclGroupEnd(void)
{
    const char *call = "ncclGroupEnd";
    state &s = S();
    if (s.group_depth == 0)
        return fail(ncclInvalidUsage, "%s: no group is open (ncclGroupStart)", call);
    if (--s.group_depth > 0)
        return ncclSuccess;
    std::vector<task> ops;
    ops.swap(s.queued);
    ncclResult_t r = s.group_error;
    s.group_error = ncclSuccess;
    if (r != ncclSuccess || ops.empty())
        return r;
    if ((r = need_mpi(call)) != ncclSuccess || (r = reap(call)) != ncclSuccess)
        return r;
    batch b;
    for (const task &o : ops)
        if ((r = post(o, &b)) != ncclSuccess)
            return r;
    return complete(call, &b);
}

} /* extern "C" */
