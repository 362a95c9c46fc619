/* comm_mpi.c: the comm API over MPI: world set-up, grid, agreement, collectives.
 * In a CUDA build a group may also hold an NCCL communicator (tr_comm_use_nccl);
 * the calls on device buffers then go to comm_nccl.cu (see comm.h), and everything
 * on host memory stays here. Calls on device memory of a group without NCCL go to
 * comm_staged.c once staging is on (tr_comm_stage_device_memory). */
#include "comm.h"
#include "comm_mpi.h"
#include "comm_shm.h"
#include "comm_staged.h"
#include "core/error.h"
#ifdef TRAINER_HAVE_CUDA
#include "comm_nccl.h"
#else
typedef struct tr_nccl tr_nccl; /* never made without CUDA */
#endif

#include <limits.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Links (comm.h): link[side][dir] is this rank's 2-rank communicator with its
 * neighbour below (side LINK_BELOW: group rank - 1) or above (LINK_ABOVE: rank + 1)
 * that carries the messages going up (LINK_UP: from the lower rank of the pair to
 * the upper) or down (LINK_DOWN). In a link the lower rank is 0, the upper 1. */
enum { LINK_BELOW = 0, LINK_ABOVE = 1 };
enum { LINK_UP = 0, LINK_DOWN = 1 };

struct tr_group {
    MPI_Comm comm;
    int rank, size;
    tr_nccl *nccl;       /* NULL: MPI only */
    tr_nccl *link[2][2]; /* [side][dir]; all NULL but on the pipeline group, pp > 1 */
    tr_shm *shm;         /* NULL: host all-reduces through MPI (tr_group_share_memory) */
};

static tr_group g_world_group;

_Static_assert(sizeof(MPI_Request) <= sizeof(((tr_request *)0)->storage),
               "tr_request storage too small for MPI_Request");

/* The guarded CPU device (backend/device.h): its memory is readable only while a
 * kernel or a collective runs, so every MPI call opens it (NULL otherwise). */
static void (*g_guard_open)(void), (*g_guard_close)(void);

void tr_comm_set_memory_guard(void (*open)(void), void (*close)(void))
{
    g_guard_open = open;
    g_guard_close = close;
}

#define MPI_CHECK(call)                                                                   \
    do {                                                                                  \
        if (g_guard_open)                                                                 \
            g_guard_open();                                                               \
        int rc_ = (call);                                                                 \
        if (g_guard_close)                                                                \
            g_guard_close();                                                              \
        if (rc_ != MPI_SUCCESS) {                                                         \
            char msg_[MPI_MAX_ERROR_STRING];                                              \
            int len_ = 0;                                                                 \
            MPI_Error_string(rc_, msg_, &len_);                                           \
            tr_fatal_at(__FILE__, __LINE__, TR_EXIT_SOFTWARE, "%s failed: %s", #call, msg_); \
        }                                                                                 \
    } while (0)

static noreturn void abort_all(int code)
{
    MPI_Abort(MPI_COMM_WORLD, code);
    exit(code); /* not reached */
}

static MPI_Datatype mpi_type(tr_dtype t)
{
    switch (t) {
    case TR_F32: return MPI_FLOAT;
    case TR_F64: return MPI_DOUBLE;
    case TR_I64: return MPI_INT64_T;
    case TR_I32: return MPI_INT32_T;
    case TR_U16: return MPI_UINT16_T;
    }
    return MPI_FLOAT;
}

/* the type of a reduction's elements: 16-bit floats' bits must not be added as integers */
static MPI_Datatype mpi_reduce_type(tr_dtype t)
{
    if (t == TR_U16)
        tr_fatal(TR_EXIT_SOFTWARE, "bug: a reduction of 16-bit values, which are only moved");
    return mpi_type(t);
}

static MPI_Op mpi_op(tr_redop op)
{
    switch (op) {
    case TR_SUM: return MPI_SUM;
    case TR_MAX: return MPI_MAX;
    case TR_MIN: return MPI_MIN;
    }
    return MPI_SUM;
}

#ifdef TRAINER_HAVE_CUDA
static int g_nccl_on; /* tr_comm_use_nccl made the communicators */

/* The group's NCCL communicator when it has one and buf is device memory (then
 * other, a second buffer of the same call, must be device memory too); else NULL.
 * Device memory on a group without one (the world, the pipeline group) is a bug:
 * MPI would be handed memory it cannot read. */
static tr_nccl *nccl_for(const tr_group *g, const void *buf, const void *other)
{
    if (!g->nccl) {
        if (g_nccl_on && buf && tr_nccl_is_device(buf))
            tr_fatal(TR_EXIT_SOFTWARE,
                     "bug: a call on device memory over a group of %d ranks "
                     "without an NCCL communicator (the world and the pipeline group carry "
                     "host memory only)",
                     g->size);
        return NULL;
    }
    int device = tr_nccl_is_device(buf);
    if (other && other != buf && tr_nccl_is_device(other) != device)
        tr_fatal(TR_EXIT_SOFTWARE, "bug: one call with a host and a device buffer");
    return device ? g->nccl : NULL;
}

/* Point-to-point with *peer on buf: the link of that direction where the group has
 * one to that neighbour (*peer then becomes the peer's rank in the link), else as
 * nccl_for. sending: 1 for a send, 0 for a receive. */
static tr_nccl *nccl_p2p_for(const tr_group *g, const void *buf, int *peer, int sending)
{
    int above = *peer == g->rank + 1;
    if (above || *peer == g->rank - 1) {
        /* up: I send to the rank above, or receive from the rank below */
        tr_nccl *l = g->link[above][sending == above ? LINK_UP : LINK_DOWN];
        if (l && buf && tr_nccl_is_device(buf)) {
            *peer = above; /* the upper rank of a link is 1 */
            return l;
        }
    }
    return nccl_for(g, buf, NULL);
}

/* When `find` (an expression) gives an NCCL communicator: runs `call` (which names
 * it n_) and RETURNS from the calling function. Nothing at all in a build without
 * CUDA, which has no NCCL to call. */
#define NCCL_IF(find, call)                                                               \
    do {                                                                                  \
        tr_nccl *n_ = (find);                                                             \
        if (n_) {                                                                         \
            call;                                                                         \
            return;                                                                       \
        }                                                                                 \
    } while (0)
#else
#define NCCL_IF(find, call) ((void)0)
#endif
/* device buffers on a group with NCCL */
#define NCCL_IF_DEVICE(g, buf, other, call) NCCL_IF(nccl_for((g), (buf), (other)), call)
/* point-to-point: also chooses the link and rewrites peer (a parameter) for it */
#define NCCL_P2P_IF_DEVICE(g, buf, peer, sending, call)                                   \
    NCCL_IF(nccl_p2p_for((g), (buf), &(peer), (sending)), call)

static void group_from(tr_group *g, MPI_Comm c)
{
    g->comm = c;
    MPI_Comm_rank(c, &g->rank);
    MPI_Comm_size(c, &g->size);
}

void tr_comm_init(int *argc, char ***argv, tr_world *w)
{
    int provided = 0;
    /* FUNNELED: only the main thread calls MPI; OpenMP threads and the data
     * prefetcher never do. */
    MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
    memset(w, 0, sizeof *w);
    group_from(&g_world_group, MPI_COMM_WORLD);
    w->world = &g_world_group;
    w->rank = g_world_group.rank;
    w->size = g_world_group.size;
    tr_error_set_abort(abort_all, w->rank);
    /* Errors in MPI calls come back as codes so MPI_CHECK can name the call. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

    MPI_Comm local;
    MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, w->rank, MPI_INFO_NULL,
                                  &local));
    MPI_Comm_rank(local, &w->local_rank);
    MPI_Comm_size(local, &w->local_size);
    int leader = w->local_rank == 0, nodes = 0;
    MPI_CHECK(MPI_Allreduce(&leader, &nodes, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    w->node_count = nodes;
    MPI_Comm_free(&local);
    w->dp = w->size, w->tp = 1, w->pp = 1;
    w->dp_rank = w->rank;
    w->dp_group = w->tp_group = w->pp_group = w->world;
}

#ifdef TRAINER_HAVE_CUDA
/* The sides of this rank's links in the order every rank makes (and frees) them:
 * first the pairs (k, k + 1) with k even, then those with k odd. In each of the two
 * phases a rank is in one pair at most, and its partner handles the same pair in
 * the same phase, so nobody waits on a rank that is busy with another pair, and
 * the pairs of a phase are made at the same time (no chain along the pipeline). */
static void link_order(const tr_group *g, int side[2])
{
    side[0] = g->rank % 2 ? LINK_BELOW : LINK_ABOVE; /* the pair whose lower rank is even */
    side[1] = 1 - side[0];
}
#endif

static void free_nccl(tr_group *g)
{
#ifdef TRAINER_HAVE_CUDA
    int order[2];
    link_order(g, order);
    for (int i = 0; i < 2; i++)
        for (int dir = LINK_UP; dir <= LINK_DOWN; dir++) {
            tr_nccl_destroy(g->link[order[i]][dir]);
            g->link[order[i]][dir] = NULL;
        }
    tr_nccl_destroy(g->nccl);
#endif
    g->nccl = NULL;
}

static void free_shm(tr_group *g)
{
    tr_shm_free(g->shm);
    g->shm = NULL;
}

static void free_group(tr_group **g, const tr_world *w)
{
    if (*g && *g != w->world) {
        free_nccl(*g);
        free_shm(*g);
        MPI_Comm_free(&(*g)->comm);
        tr_free(*g);
    }
    *g = NULL;
}

void tr_comm_finalize(tr_world *w)
{
    /* the three may be one group (dp-only runs share the world) */
    if (w->tp_group == w->dp_group)
        w->tp_group = w->world;
    if (w->pp_group == w->dp_group || w->pp_group == w->tp_group)
        w->pp_group = w->world;
    free_group(&w->dp_group, w);
    free_group(&w->tp_group, w);
    free_group(&w->pp_group, w);
    free_group(&w->emb_group, w);
    free_nccl(w->world); /* last, as tr_comm_use_nccl made it first: same order everywhere */
    free_shm(w->world);
    MPI_Finalize();
}

int tr_comm_check_layout(int world_size, int *dp, int tp, int pp, char *err, size_t errlen)
{
    if (world_size % (tp * pp)) {
        snprintf(err, errlen,
                 "impossible layout: %d ranks cannot be split into tp=%d x pp=%d groups "
                 "(%d is not divisible by %d); change [parallel] tp/pp or the rank count",
                 world_size, tp, pp, world_size, tp * pp);
        return TR_EXIT_USAGE;
    }
    int want = world_size / (tp * pp);
    if (*dp == 0)
        *dp = want;
    if (*dp != want) {
        snprintf(err, errlen,
                 "impossible layout: dp=%d x tp=%d x pp=%d = %d ranks, but the job has %d; set "
                 "[parallel] dp = %d or 0 (auto), or start %d ranks",
                 *dp, tp, pp, *dp * tp * pp, world_size, want, *dp * tp * pp);
        return TR_EXIT_USAGE;
    }
    return 0;
}

static tr_group *split(int color, int key, const char *what)
{
    tr_group *g = tr_alloc(sizeof *g, what);
    MPI_Comm c;
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, color, key, &c));
    if (c == MPI_COMM_NULL) /* MPI_UNDEFINED: not a member */
        return g;
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    group_from(g, c);
    return g;
}

void tr_comm_make_grid(tr_world *w, int dp, int tp, int pp)
{
    w->dp = dp, w->tp = tp, w->pp = pp;
    w->tp_rank = w->rank % tp;
    w->pp_rank = (w->rank / tp) % pp;
    w->dp_rank = w->rank / (tp * pp);
    /* each group is the set of ranks that differ only in that coordinate */
    w->tp_group = split(w->dp_rank * pp + w->pp_rank, w->tp_rank, "tp group");
    w->pp_group = split(w->dp_rank * tp + w->tp_rank, w->pp_rank, "pp group");
    w->dp_group = split(w->pp_rank * tp + w->tp_rank, w->dp_rank, "dp group");
    if (pp > 1) { /* every rank takes part in the split; middle stages get no group */
        int ends = w->pp_rank == 0 || w->pp_rank == pp - 1;
        tr_group *g = split(ends ? w->dp_rank * tp + w->tp_rank : MPI_UNDEFINED, w->pp_rank,
                            "embedding group");
        if (ends)
            w->emb_group = g;
        else
            tr_free(g);
    }
}

int tr_comm_agree(const tr_world *w, int code, const char *message)
{
    int mine = code ? w->rank : INT_MAX, first = INT_MAX, worst = 0;
    MPI_CHECK(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    MPI_CHECK(MPI_Allreduce(&code, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    if (first == w->rank && message && *message) {
        size_t n = strlen(message);
        fprintf(stderr, "%s%s", message, message[n - 1] == '\n' ? "" : "\n");
        fflush(stderr);
    }
    return worst;
}

int tr_comm_differs_from_root(const tr_world *w, const void *bytes, size_t n)
{
    (void)w; /* the world is MPI_COMM_WORLD */
    const unsigned char *s = bytes;
    uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 0x100000001b3ULL;
    uint64_t root = h;
    MPI_CHECK(MPI_Bcast(&root, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD));
    return root != h;
}

void tr_comm_bcast_string(const tr_world *w, char **s)
{
    long long n = w->rank == 0 ? (long long)strlen(*s) : 0;
    MPI_CHECK(MPI_Bcast(&n, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD));
    if (n >= INT_MAX)
        tr_fatal(TR_EXIT_SOFTWARE, "bug: broadcast of a %lld-byte string", n);
    if (w->rank != 0) {
        free(*s);
        *s = malloc((size_t)n + 1);
        if (!*s)
            tr_fatal(TR_EXIT_OSERR, "out of memory for a %lld-byte string from rank 0", n);
    }
    MPI_CHECK(MPI_Bcast(*s, (int)n + 1, MPI_CHAR, 0, MPI_COMM_WORLD));
}

void tr_comm_node_allgather(const tr_world *w, const void *mine, size_t bytes, void *all)
{
    if (bytes > INT_MAX)
        tr_fatal(TR_EXIT_SOFTWARE, "bug: node all-gather of %zu bytes", bytes);
    /* the split of tr_comm_init again (same key), so ranks come in local_rank order */
    MPI_Comm local;
    MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, w->rank, MPI_INFO_NULL,
                                  &local));
    MPI_Comm_set_errhandler(local, MPI_ERRORS_RETURN);
    MPI_CHECK(MPI_Allgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, local));
    MPI_Comm_free(&local);
}

#ifdef TRAINER_HAVE_CUDA
/* The two links (up, down) between this rank and its neighbour on `side`: the lower
 * rank of the pair makes both ids and sends them to the upper (tag: nothing else is
 * in flight on the group while it is set up), and both make the links, up first. */
static void make_link_pair(tr_group *g, int side)
{
    enum { TAG_LINK_IDS = 32767 }; /* the largest tag MPI always allows */
    unsigned char id[2][TR_NCCL_ID_BYTES];
    int upper = side == LINK_BELOW; /* this rank is the pair's upper one */
    int peer = upper ? g->rank - 1 : g->rank + 1;
    if (!upper) {
        tr_nccl_unique_id(id[LINK_UP]);
        tr_nccl_unique_id(id[LINK_DOWN]);
        MPI_CHECK(MPI_Send(id, (int)sizeof id, MPI_BYTE, peer, TAG_LINK_IDS, g->comm));
    } else {
        MPI_CHECK(MPI_Recv(id, (int)sizeof id, MPI_BYTE, peer, TAG_LINK_IDS, g->comm,
                           MPI_STATUS_IGNORE));
    }
    for (int dir = LINK_UP; dir <= LINK_DOWN; dir++)
        g->link[side][dir] = tr_nccl_create(id[dir], 2, upper, 1);
}

/* Links between neighbouring ranks of g (the pipeline group): one 2-rank NCCL
 * communicator, with its own stream, per direction of each neighbouring pair.
 *
 * Why: a send in NCCL ends only once the peer's receive runs, and holds up its stream
 * until then. With one stream for both directions, 1F1B deadlocks: stage s queues
 * the activation of micro-batch i+1 for s+1 and then the receive of i's gradient,
 * while s+1 queues the send of i's gradient and then the receive of i+1's
 * activation; each stream waits in its send for a receive queued behind the other
 * rank's send. With a stream per direction each stream holds one kind of operation
 * (sends on one side, receives on the other) of one FIFO that both ranks post in
 * the same order (train_pipeline.c: each direction in micro-batch order).
 *
 * Why that cannot deadlock: every wait on the GPU is one the host program already
 * has under MPI with its worst-case blocking (a send completes only when the
 * receive is posted): a link's operation waits for the compute stream's work queued
 * before the call, and for the link's earlier operations, which MPI matches in the
 * same order (it does not overtake between one pair and tag); the compute stream
 * waits for a receive or a blocking send where the host would block in it, and for
 * an isend at tr_wait. So if every rank gets through the schedule under MPI with
 * rendezvous sends (validation/unit/test_pipeline.c simulates exactly that for every
 * pp <= 8 and up to 16 micro-batches), every NCCL operation eventually runs. (NCCL
 * may also hold up the host in a link's first operation until the peer's first one
 * on it, to connect. The simulation covers that too: a first receive blocks under
 * MPI anyway, and a stage's first isend of an activation meets the receive that the
 * next stage posts before anything else in its schedule.)
 *
 * What NCCL asks of communicators used concurrently (NCCL's guide, "Using multiple
 * NCCL communicators concurrently": their kernels must all fit on the GPU together,
 * and nothing may synchronise the whole device while one of them waits): at most
 * five NCCL operations are in flight per rank, one on each stream (the collectives'
 * and up to four links), and the trainer's device memory is one allocation made
 * before the first step (no cudaMalloc or cudaFree, which synchronise the device,
 * until the end). */
static void make_links(tr_group *g)
{
    int order[2];
    link_order(g, order);
    for (int i = 0; i < 2; i++) {
        int side = order[i];
        int peer = side == LINK_ABOVE ? g->rank + 1 : g->rank - 1;
        if (peer >= 0 && peer < g->size && !g->link[side][LINK_UP])
            make_link_pair(g, side);
    }
}
#endif

int tr_comm_use_nccl(tr_world *w, char *err, size_t errlen)
{
#ifndef TRAINER_HAVE_CUDA
    (void)w;
    snprintf(err, errlen, "NCCL needs the CUDA backend, and this trainer was built without "
                          "CUDA; rebuild with cmake -DTRAINER_CUDA=ON");
    return TR_EXIT_USAGE;
#else
    /* Making a communicator waits for all of its ranks. Every rank goes through the
     * kinds in this order and the groups of one kind are disjoint, so nobody waits
     * on a rank that is busy with another kind. A group seen twice (dp, tp and pp
     * are the world until tr_comm_make_grid) is made once. Only the groups that sum
     * device memory get one: the world's calls (losses, agreements, timings) and the
     * pipeline group's (its messages go over the links below; a sampled token) are
     * on host memory, and a communicator of all of a large job's ranks would cost
     * its start-up time and memory for nothing (nccl_for stops a device call on them). */
    tr_group *groups[] = {w->dp_group, w->tp_group, w->emb_group};
    for (size_t i = 0; i < sizeof groups / sizeof *groups; i++) {
        tr_group *g = groups[i];
        if (!g || g->nccl)
            continue;
        unsigned char id[TR_NCCL_ID_BYTES];
        if (g->rank == 0)
            tr_nccl_unique_id(id);
        MPI_CHECK(MPI_Bcast(id, (int)sizeof id, MPI_BYTE, 0, g->comm));
        /* ncclCommInitRank blocks without calling MPI, and some MPIs (HPC-X with
         * HCOLL) may leave a broadcast's progress to a later MPI call: the barrier
         * finishes it on every rank first (NVIDIA/cuDecomp#24 hung without it) */
        MPI_CHECK(MPI_Barrier(g->comm));
        g->nccl = tr_nccl_create(id, g->size, g->rank, 0);
    }
    if (w->pp > 1) /* after every group's communicator, on every rank */
        make_links(w->pp_group);
    g_nccl_on = 1;
    return 0;
#endif
}

int tr_group_has_nccl(const tr_group *g) { return g->nccl != NULL; }

/* A window of 2 x 2 MiB per rank at most: buffers larger than a chunk go through it
 * in pieces, and 8 ranks of a node then hold 32 MiB of shared memory. */
#define SHM_CHUNK ((size_t)1 << 19)
/* Below this many floats an all-reduce is a matter of latency, which MPI's small-
 * message path handles as well as two barriers. */
#define SHM_MIN_COUNT ((size_t)1024)

static size_t shm_chunk(size_t max_count)
{
    return max_count < SHM_CHUNK ? (max_count ? max_count : 1) : SHM_CHUNK;
}

size_t tr_shm_window_bytes(size_t max_count) { return 2 * shm_chunk(max_count) * sizeof(float); }

int tr_group_share_memory(tr_group *g, size_t max_count)
{
    if (g->size > 1 && !g->shm)
        g->shm = tr_shm_create(g->comm, shm_chunk(max_count));
    return g->shm != NULL;
}

int tr_group_shares_memory(const tr_group *g) { return g->shm != NULL; }
int tr_group_size(const tr_group *g) { return g->size; }
MPI_Comm tr_group_mpi_comm(const tr_group *g) { return g->comm; }
int tr_group_rank(const tr_group *g) { return g->rank; }

/* MPI counts are int: large buffers go in pieces. */
#define CHUNK ((size_t)1 << 30)
/* the largest count or displacement the all-gather and the point-to-point calls give
 * MPI as such (tests lower it) */
static size_t g_max_count = INT_MAX;

void tr_comm_test_max_count(size_t n) { g_max_count = n ? n : INT_MAX; }

void tr_allreduce(const void *sendbuf, void *recvbuf, size_t count, tr_dtype dtype, tr_redop op,
                  tr_group *g)
{
    NCCL_IF_DEVICE(g, recvbuf, sendbuf,
                   tr_nccl_allreduce(n_, sendbuf, recvbuf, count, dtype, op, NULL));
    if (tr_staged(recvbuf, sendbuf)) {
        tr_staged_allreduce(sendbuf, recvbuf, count, dtype, op, g);
        return;
    }
    if (g->shm && dtype == TR_F32 && op == TR_SUM && count >= SHM_MIN_COUNT) {
        tr_shm_allreduce_f32(g->shm, sendbuf, recvbuf, count, g_guard_open, g_guard_close);
        return;
    }
    size_t es = tr_dtype_size(dtype);
    /* in pieces of TR_MPI_PIECE_BYTES: MPI reduces through a buffer of its own as large
     * as the message (Open MPI's reduce-scatter/all-gather: the whole message), which
     * for the pipeline's tied embedding (GPT-2 124M: 147 MiB) the plan did not count */
    size_t piece = TR_MPI_PIECE_BYTES / es;
    for (size_t off = 0; off < count; off += piece) {
        int n = (int)(count - off < piece ? count - off : piece);
        const void *s = sendbuf == recvbuf ? MPI_IN_PLACE : (const char *)sendbuf + off * es;
        MPI_CHECK(MPI_Allreduce(s, (char *)recvbuf + off * es, n, mpi_reduce_type(dtype),
                                mpi_op(op), g->comm));
    }
}

void tr_iallreduce(const void *sendbuf, void *recvbuf, size_t count, tr_dtype dtype,
                   tr_redop op, tr_group *g, tr_request *req)
{
    NCCL_IF_DEVICE(g, recvbuf, sendbuf,
                   tr_nccl_allreduce(n_, sendbuf, recvbuf, count, dtype, op, req));
    if (tr_staged(recvbuf, sendbuf)) {
        tr_staged_iallreduce(sendbuf, recvbuf, count, dtype, op, g, req);
        return;
    }
    if (count > CHUNK)
        tr_fatal(TR_EXIT_SOFTWARE, "bug: non-blocking all-reduce of %zu elements; use buckets",
                 count);
    MPI_Request *r = (MPI_Request *)req->storage;
    const void *s = sendbuf == recvbuf ? MPI_IN_PLACE : sendbuf;
    MPI_CHECK(MPI_Iallreduce(s, recvbuf, (int)count, mpi_reduce_type(dtype), mpi_op(op),
                             g->comm, r));
    req->active = TR_REQ_MPI;
}

int tr_test(tr_request *req)
{
    if (!req->active)
        return 1;
#ifdef TRAINER_HAVE_CUDA
    if (req->active == TR_REQ_NCCL)
        return tr_nccl_test(req);
#endif
    if (req->active == TR_REQ_STAGED)
        return tr_staged_test(req);
    int done = 0;
    MPI_CHECK(MPI_Test((MPI_Request *)req->storage, &done, MPI_STATUS_IGNORE));
    if (done)
        req->active = 0;
    return done;
}

void tr_wait(tr_request *req)
{
    if (!req->active)
        return;
#ifdef TRAINER_HAVE_CUDA
    if (req->active == TR_REQ_NCCL) {
        tr_nccl_wait(req);
        return;
    }
#endif
    if (req->active == TR_REQ_STAGED) {
        tr_staged_wait(req);
        return;
    }
    MPI_CHECK(MPI_Wait((MPI_Request *)req->storage, MPI_STATUS_IGNORE));
    req->active = 0;
}

void tr_ireduce(void *buf, size_t count, tr_dtype dtype, tr_redop op, int root, tr_group *g,
                tr_request *req)
{
    NCCL_IF_DEVICE(g, buf, NULL, tr_nccl_reduce(n_, buf, count, dtype, op, root, req));
    if (tr_staged(buf, NULL)) {
        tr_staged_ireduce(buf, count, dtype, op, root, g, req);
        return;
    }
    if (count > CHUNK)
        tr_fatal(TR_EXIT_SOFTWARE, "bug: non-blocking reduce of %zu elements; use buckets",
                 count);
    MPI_Request *r = (MPI_Request *)req->storage;
    const void *s = g->rank == root ? MPI_IN_PLACE : buf;
    MPI_CHECK(MPI_Ireduce(s, buf, (int)count, mpi_reduce_type(dtype), mpi_op(op), root,
                          g->comm, r));
    req->active = TR_REQ_MPI;
}

void tr_reduce_scatterv(float *buf, const size_t *counts, const size_t *displs, tr_group *g)
{
    NCCL_IF_DEVICE(g, buf, NULL, tr_nccl_reduce_scatterv(n_, buf, counts, displs));
    if (tr_staged(buf, NULL)) {
        tr_staged_reduce_scatterv(buf, counts, displs, g);
        return;
    }
    if (g->shm) {
        tr_shm_reduce_scatterv_f32(g->shm, buf, counts, displs, g_guard_open, g_guard_close);
        return;
    }
    /* each part to its rank. Non-blocking and waited for at once, not MPI_Reduce: MPICH
     * 4.0.2 to 4.1.1 (Debian 12's MPICH) crash in a blocking MPI_Reduce whose root is
     * not rank 0 and passes MPI_IN_PLACE, on ranks that share a node (pmodels/mpich
     * #6540, fixed in 4.1.2); MPI_Ireduce takes another path. */
    for (int r = 0; r < g->size; r++)
        for (size_t off = 0; off < counts[r]; off += CHUNK) {
            int n = (int)(counts[r] - off < CHUNK ? counts[r] - off : CHUNK);
            float *p = buf + displs[r] + off;
            MPI_Request req;
            MPI_CHECK(MPI_Ireduce(g->rank == r ? MPI_IN_PLACE : p, p, n, MPI_FLOAT, MPI_SUM, r,
                                  g->comm, &req));
            MPI_CHECK(MPI_Wait(&req, MPI_STATUS_IGNORE));
        }
}

/* 16-bit values (sequence parallelism's layernorm outputs in bf16/fp16) through the
 * shared-memory window, which moves floats: where every part starts and ends on a
 * float, as pairs of values (an even width of rows makes them so); 0 where not. An
 * all-gather only copies, so the pairs arrive as they were. */
static int shm_allgatherv_u16(tr_group *g, void *buf, const size_t *counts, const size_t *displs)
{
    for (int r = 0; r < g->size; r++)
        if (counts[r] % 2 || displs[r] % 2)
            return 0;
    size_t *pairs = tr_alloc(2 * (size_t)g->size * sizeof *pairs, "all-gather pairs");
    for (int r = 0; r < g->size; r++) {
        pairs[r] = counts[r] / 2;
        pairs[g->size + r] = displs[r] / 2;
    }
    tr_shm_allgatherv_f32(g->shm, buf, pairs, pairs + g->size, g_guard_open, g_guard_close);
    tr_free(pairs);
    return 1;
}

void tr_allgatherv(void *buf, const size_t *counts, const size_t *displs, tr_dtype dtype,
                   tr_group *g)
{
    NCCL_IF_DEVICE(g, buf, NULL, tr_nccl_allgatherv(n_, buf, counts, displs, dtype));
    if (tr_staged(buf, NULL)) {
        tr_staged_allgatherv(buf, counts, displs, dtype, g);
        return;
    }
    if (g->shm && dtype == TR_F32) {
        tr_shm_allgatherv_f32(g->shm, buf, counts, displs, g_guard_open, g_guard_close);
        return;
    }
    if (g->shm && dtype == TR_U16 && shm_allgatherv_u16(g, buf, counts, displs))
        return;
    int fits = 1;
    for (int r = 0; r < g->size; r++)
        fits &= counts[r] <= g_max_count && displs[r] <= g_max_count;
    if (!fits) {
        /* MPI-3's int counts and displacements: a buffer past 2^31 elements (a model of
         * more than 2.1 billion parameters a replica, whose initial values the ranks
         * draw a slice each) goes as each rank's broadcast of its part, in pieces */
        size_t es = tr_dtype_size(dtype), piece = CHUNK < g_max_count ? CHUNK : g_max_count;
        for (int r = 0; r < g->size; r++)
            for (size_t off = 0; off < counts[r]; off += piece) {
                int n = (int)(counts[r] - off < piece ? counts[r] - off : piece);
                MPI_CHECK(MPI_Bcast((char *)buf + (displs[r] + off) * es, n, mpi_type(dtype), r,
                                    g->comm));
            }
        return;
    }
    int *c = tr_alloc(2 * (size_t)g->size * sizeof *c, "all-gather counts");
    for (int r = 0; r < g->size; r++) {
        c[r] = (int)counts[r];
        c[g->size + r] = (int)displs[r];
    }
    MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, c, c + g->size,
                             mpi_type(dtype), g->comm));
    tr_free(c);
}

/* A point-to-point message of count elements as (MPI datatype, int count): the base
 * type itself up to g_max_count, else one element of a derived type spanning the whole
 * message (whole pieces of CHUNK elements, then the rest), so that a pipeline's
 * activations past 2^31 elements (e.g. a micro-batch of 16 x 8192 tokens of a 16384-wide
 * model) still go as one message with one request. The caller frees the type with
 * message_type_free once the call has been made: MPI keeps a type that a pending
 * operation uses until that operation completes. */
static int message_type(size_t count, tr_dtype dtype, MPI_Datatype *type)
{
    MPI_Datatype base = mpi_type(dtype);
    if (count <= g_max_count) {
        *type = base;
        return (int)count;
    }
    size_t piece = CHUNK < g_max_count ? CHUNK : g_max_count;
    size_t pieces = count / piece, rest = count % piece;
    MPI_Datatype chunk, body;
    MPI_CHECK(MPI_Type_contiguous((int)piece, base, &chunk));
    MPI_CHECK(MPI_Type_contiguous((int)pieces, chunk, &body));
    MPI_Aint lb, extent;
    MPI_CHECK(MPI_Type_get_extent(base, &lb, &extent));
    int lens[2] = {1, (int)rest};
    MPI_Aint displs[2] = {0, (MPI_Aint)(pieces * piece) * extent};
    MPI_Datatype types[2] = {body, base};
    MPI_CHECK(MPI_Type_create_struct(rest ? 2 : 1, lens, displs, types, type));
    MPI_CHECK(MPI_Type_commit(type));
    MPI_CHECK(MPI_Type_free(&chunk));
    MPI_CHECK(MPI_Type_free(&body));
    return 1;
}

static void message_type_free(MPI_Datatype type, tr_dtype dtype)
{
    if (type != mpi_type(dtype))
        MPI_CHECK(MPI_Type_free(&type));
}

void tr_send(const void *buf, size_t count, tr_dtype dtype, int peer, int tag, tr_group *g)
{
    NCCL_P2P_IF_DEVICE(g, buf, peer, 1, tr_nccl_send(n_, buf, count, dtype, peer, NULL));
    if (tr_staged(buf, NULL)) {
        tr_staged_send(buf, count, dtype, peer, tag, g);
        return;
    }
    MPI_Datatype type;
    int n = message_type(count, dtype, &type);
    MPI_CHECK(MPI_Send(buf, n, type, peer, tag, g->comm));
    message_type_free(type, dtype);
}

void tr_isend(const void *buf, size_t count, tr_dtype dtype, int peer, int tag, tr_group *g,
              tr_request *req)
{
    NCCL_P2P_IF_DEVICE(g, buf, peer, 1, tr_nccl_send(n_, buf, count, dtype, peer, req));
    if (tr_staged(buf, NULL)) {
        tr_staged_isend(buf, count, dtype, peer, tag, g, req);
        return;
    }
    MPI_Datatype type;
    int n = message_type(count, dtype, &type);
    MPI_CHECK(MPI_Isend(buf, n, type, peer, tag, g->comm, (MPI_Request *)req->storage));
    message_type_free(type, dtype);
    req->active = TR_REQ_MPI;
}

void tr_recv(void *buf, size_t count, tr_dtype dtype, int peer, int tag, tr_group *g)
{
    NCCL_P2P_IF_DEVICE(g, buf, peer, 0, tr_nccl_recv(n_, buf, count, dtype, peer));
    if (tr_staged(buf, NULL)) {
        tr_staged_recv(buf, count, dtype, peer, tag, g);
        return;
    }
    MPI_Datatype type;
    int n = message_type(count, dtype, &type);
    MPI_CHECK(MPI_Recv(buf, n, type, peer, tag, g->comm, MPI_STATUS_IGNORE));
    message_type_free(type, dtype);
}

void tr_bcast(void *buf, size_t count, tr_dtype dtype, int root, tr_group *g)
{
    NCCL_IF_DEVICE(g, buf, NULL, tr_nccl_bcast(n_, buf, count, dtype, root));
    if (tr_staged(buf, NULL)) {
        tr_staged_bcast(buf, count, dtype, root, g);
        return;
    }
    size_t es = tr_dtype_size(dtype);
    for (size_t off = 0; off < count; off += CHUNK) {
        int n = (int)(count - off < CHUNK ? count - off : CHUNK);
        MPI_CHECK(MPI_Bcast((char *)buf + off * es, n, mpi_type(dtype), root, g->comm));
    }
}

void tr_barrier(tr_group *g) { MPI_CHECK(MPI_Barrier(g->comm)); }

double tr_wtime(void) { return MPI_Wtime(); }
