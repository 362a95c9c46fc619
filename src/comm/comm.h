/* comm.h: collectives on the rank's groups, the process grid, and agreement on errors.
 *
 * The only layer that calls MPI (and NCCL). Its API is shaped like NCCL's (sendbuf, recvbuf,
 * count, dtype, op, group), in place when the two buffers are the same, so the GPU
 * backend can put NCCL behind the same calls. Groups are made once, at start-up.
 *
 * Process grid: world = dp x pp x tp, tp innermost (consecutive ranks share a TP
 * group, so it sits inside a node), then pp, then dp.
 *
 * NCCL (a CUDA build, after tr_comm_use_nccl): a group that has an NCCL communicator
 * runs the collectives and point-to-point calls below with NCCL when the buffers are
 * device memory (cudaMalloc), and with MPI when they are host memory; groups without
 * one always use MPI. tr_comm_agree, tr_barrier and tr_comm_node_allgather are
 * always MPI. Every rank of a group must pass the same kind of memory to a call.
 * On device buffers:
 *  - All collectives run on one communication stream per process, in the order the
 *    calls are made, so operations on different groups can never wait on each other
 *    in different orders on different ranks (NCCL's rule for several communicators).
 *  - Point-to-point calls between neighbours of the pipeline group (ranks r and
 *    r + 1 of w->pp_group, pp > 1) go over links: per pair and direction, a 2-rank
 *    NCCL communicator with a stream of its own. Other point-to-point calls use the
 *    group's communicator on the communication stream.
 *  - Each call first waits (on the GPU) for the work queued so far on the backend's
 *    compute stream (tr_cuda_stream), so it reads what that work wrote (and a
 *    receive does not overwrite what that work still reads).
 *  - Blocking calls return at once to the host; the compute stream waits for their
 *    result, so any later work on it (kernels, tr_cuda_download) sees the result.
 *  - Non-blocking ones return a request: tr_test asks whether it has finished,
 *    tr_wait makes the compute stream wait for it (the host does not wait). Until
 *    then the buffer must not be touched, as with MPI.
 *  - Point-to-point: tags are ignored; the messages from one rank to another match
 *    in the order they were sent, and a send finishes only once the peer has posted
 *    its receive (both are NCCL operations that block their stream, not the host).
 *    Over a link each direction is a stream of its own, so the two ranks need only
 *    post each direction's messages in the same order, as MPI would match them (a
 *    send up never waits behind a receive from above, as in 1F1B); elsewhere one
 *    stream holds both directions, so both ranks must issue all their sends and
 *    receives to each other in the same order.
 *  - Every NCCL or CUDA failure ends the job (tr_fatal) with NCCL's message. */
#ifndef TR_COMM_H
#define TR_COMM_H

#include <stddef.h>

/* C, and C++ for comm_nccl.cu, which shares the types */
#ifdef __cplusplus
#define TR_ALIGNAS(n) alignas(n)
extern "C" {
#else
#define TR_ALIGNAS(n) _Alignas(n)
#endif

typedef struct tr_group tr_group; /* opaque: an MPI communicator and its size/rank */

/* TR_U16: 16-bit values (bf16 or fp16 bits) that are moved, never reduced: sends,
 * receives and broadcasts only */
typedef enum { TR_F32 = 0, TR_F64 = 1, TR_I64 = 2, TR_I32 = 3, TR_U16 = 4 } tr_dtype;
typedef enum { TR_SUM = 0, TR_MAX = 1, TR_MIN = 2 } tr_redop;

static inline size_t tr_dtype_size(tr_dtype t)
{
    return t == TR_U16 ? 2 : t == TR_F32 || t == TR_I32 ? 4 : 8;
}

/* A pending non-blocking operation. Storage is inline so starting one never
 * allocates (buckets start in the middle of backward). Zero-initialise a new one. */
typedef struct tr_request {
    TR_ALIGNAS(8) unsigned char storage[32]; /* an MPI_Request, or NCCL's CUDA event */
    int active; /* 0: none pending; TR_REQ_MPI, TR_REQ_NCCL or TR_REQ_STAGED: which one runs it */
} tr_request;
enum { TR_REQ_MPI = 1, TR_REQ_NCCL = 2, TR_REQ_STAGED = 3 };

typedef struct tr_world {
    int rank, size;             /* in MPI_COMM_WORLD */
    int local_rank, local_size; /* ranks sharing this node */
    int node_count;
    int dp, tp, pp;
    int dp_rank, tp_rank, pp_rank;
    tr_group *world, *dp_group, *tp_group, *pp_group;
    /* pp > 1: the first and the last stage of one pipeline (same dp and tp
     * coordinates), which both hold the tied token embedding; NULL elsewhere */
    tr_group *emb_group;
} tr_world;

/* MPI_Init and the node-local split; installs the abort hook of error.h. */
void tr_comm_init(int *argc, char ***argv, tr_world *w);
/* Frees the groups and finalizes MPI; every rank calls it before exiting. */
void tr_comm_finalize(tr_world *w);

/* Checks dp x tp x pp against the world size and makes the groups. dp = 0 means
 * "whatever is left". Returns 0, or TR_EXIT_USAGE with a message in err. Pure
 * arithmetic first, so every rank reaches the same verdict without talking. */
int tr_comm_check_layout(int world_size, int *dp, int tp, int pp, char *err, size_t errlen);
void tr_comm_make_grid(tr_world *w, int dp, int tp, int pp);

/* Collective agreement on an input error: every rank passes its own verdict (0 or
 * an exit code, and a message). Returns the largest code over the world; the lowest
 * rank with an error prints its message once to stderr. Never hangs, never aborts. */
int tr_comm_agree(const tr_world *w, int code, const char *message);

/* 1 where this rank's bytes differ from rank 0's (compared by a 64-bit hash), else 0.
 * Collective over the world: the check behind "every rank must be given the same
 * deck, environment and data", whose breach would otherwise surface as ranks that
 * disagree on the step count and wait forever in a collective. */
int tr_comm_differs_from_root(const tr_world *w, const void *bytes, size_t n);
/* Rank 0's NUL-terminated string *s (malloc'd) replaces every other rank's, which is
 * freed and allocated again (malloc). Collective over the world. */
void tr_comm_bcast_string(const tr_world *w, char **s);

/* Gathers `bytes` bytes of `mine` from every rank of this node (the ranks that
 * local_rank and local_size count) into all[local_rank * bytes], on every rank.
 * Collective over the world; MPI, host memory. */
void tr_comm_node_allgather(const tr_world *w, const void *mine, size_t bytes, void *all);

/* Gives every group of the world (world, dp, tp, pp and, where it exists, emb) an
 * NCCL communicator on this rank's current CUDA device, from an ncclUniqueId that
 * the group's rank 0 makes and broadcasts over the group with MPI, and creates the
 * communication stream; where pp > 1, also the pipeline group's links (above),
 * from ids that the lower rank of each pair sends to the upper one, each with its
 * stream. tr_comm_finalize frees them. Call it after tr_comm_make_grid (the groups
 * must exist) and
 * after the device is chosen (device_select.c); collective over the world. Groups
 * that already have one are left as they are. Returns 0, or TR_EXIT_USAGE with a
 * message in err in a build without CUDA; any NCCL or CUDA failure is fatal. */
int tr_comm_use_nccl(tr_world *w, char *err, size_t errlen);

int tr_group_size(const tr_group *g);
int tr_group_rank(const tr_group *g);
/* 1 when the group has an NCCL communicator (device buffers go through NCCL) */
int tr_group_has_nccl(const tr_group *g);

/* Host all-reduces of float sums on this group (at least 1024 floats) through a
 * shared-memory window instead of MPI, where every rank of the group runs on one node
 * (comm_shm.h says why). Collective over g; max_count, the largest all-reduce
 * expected, only sizes the window (larger ones go through it in pieces). Returns 1
 * when the group now reduces through shared memory, 0 when it cannot (ranks on other
 * nodes, a group of one, no shared memory to be had): then MPI does, as before.
 * Every rank of the group gets the same answer. tr_comm_finalize frees the window.
 * The sum of each element is taken in group-rank order: reproducible run to run. */
int tr_group_share_memory(tr_group *g, size_t max_count);
/* the shared memory each rank of such a group holds for max_count (at most 4 MiB) */
size_t tr_shm_window_bytes(size_t max_count);
/* Tests only: the largest count or displacement tr_allgatherv, tr_send, tr_isend and
 * tr_recv hand MPI as such (0: MPI's INT_MAX), so their paths for buffers past 2^31
 * elements run on small ones. */
void tr_comm_test_max_count(size_t n);
int tr_group_shares_memory(const tr_group *g);

/* The most a blocking all-reduce over MPI sends in one call: MPI's own buffers for it
 * (as large as the message) stay within this, which the plan counts. */
#define TR_MPI_PIECE_BYTES ((size_t)32 << 20)
void tr_allreduce(const void *sendbuf, void *recvbuf, size_t count, tr_dtype dtype, tr_redop op,
                  tr_group *g);
/* Non-blocking all-reduce; call tr_test now and then so MPI makes progress while
 * the caller computes (MPI progresses inside MPI calls only), and tr_wait at the end. */
void tr_iallreduce(const void *sendbuf, void *recvbuf, size_t count, tr_dtype dtype,
                   tr_redop op, tr_group *g, tr_request *req);
int tr_test(tr_request *req); /* 1 when complete */
void tr_wait(tr_request *req);
/* In place on root: the sum (op) over the group lands in root's buf; the other
 * ranks' buf is left as it was. */
void tr_ireduce(void *buf, size_t count, tr_dtype dtype, tr_redop op, int root, tr_group *g,
                tr_request *req);
/* In place, host memory, float sums: rank r's part of buf, [displs[r], displs[r] +
 * counts[r]) (parts do not overlap), ends as the sum of that part over the group;
 * the rest of buf is left as it was. ZeRO's gradients on the CPU. */
void tr_reduce_scatterv(float *buf, const size_t *counts, const size_t *displs, tr_group *g);
/* In place: rank r of the group contributes buf[displs[r], displs[r] + counts[r]) and
 * every rank ends with all of buf. */
void tr_allgatherv(void *buf, const size_t *counts, const size_t *displs, tr_dtype dtype,
                   tr_group *g);
/* Point-to-point between the ranks of a group (pipeline stages): tag keeps the
 * streams of one pair apart (activations, gradients). */
void tr_send(const void *buf, size_t count, tr_dtype dtype, int peer, int tag, tr_group *g);
void tr_isend(const void *buf, size_t count, tr_dtype dtype, int peer, int tag, tr_group *g,
              tr_request *req);
void tr_recv(void *buf, size_t count, tr_dtype dtype, int peer, int tag, tr_group *g);
void tr_bcast(void *buf, size_t count, tr_dtype dtype, int root, tr_group *g);
void tr_barrier(tr_group *g);
/* Device memory that host code may touch only between open() and close() (the
 * guarded CPU device of backend/device.h): every MPI call is made between them.
 * NULL, NULL (the default) for none. */
void tr_comm_set_memory_guard(void (*open)(void), void (*close)(void));

/* Staged device memory (comm_staged.c), for testing parallel layouts where NCCL cannot
 * run: several ranks on one GPU (NCCL refuses one device twice in a communicator), and
 * the guarded CPU device, which proves this path without a GPU. Once set, every call
 * above on device memory (is_device) of a group without an NCCL communicator copies
 * its buffer to the host (download), makes the host call (MPI, or the node's shared
 * memory) and copies the result back (upload): the host path's arithmetic, and slow.
 * A non-blocking call completes its copy back in tr_test or tr_wait; the host then
 * waits for it. NULL turns it off (the default). */
typedef struct tr_comm_staging {
    int (*is_device)(const void *p);
    void (*download)(void *host_dst, const void *device_src, size_t bytes);
    void (*upload)(void *device_dst, const void *host_src, size_t bytes);
} tr_comm_staging;
void tr_comm_stage_device_memory(const tr_comm_staging *s);
int tr_comm_staging_on(void);

double tr_wtime(void);

#ifdef __cplusplus
}
#endif

#endif
