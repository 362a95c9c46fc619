/* comm_staged.c: the calls of comm.h on device memory through host copies over MPI
 * (tr_comm_stage_device_memory). Each call copies its device buffer to a host buffer,
 * makes the same call on that (comm_mpi.c's host path: MPI, or the node's shared
 * memory), and copies the result back; so staged runs have the host path's arithmetic
 * and order. A non-blocking call starts its host call at once and copies back when
 * tr_test or tr_wait finds it complete. */
#include "comm.h"
#include "comm_staged.h"
#include "core/error.h"

#include <string.h>

static tr_comm_staging g_stage; /* is_device NULL: off */

void tr_comm_stage_device_memory(const tr_comm_staging *s)
{
    if (s)
        g_stage = *s;
    else
        memset(&g_stage, 0, sizeof g_stage);
}

int tr_comm_staging_on(void) { return g_stage.is_device != NULL; }

int tr_staged(const void *buf, const void *other)
{
    if (!g_stage.is_device || !buf)
        return 0;
    int device = g_stage.is_device(buf);
    if (other && other != buf && g_stage.is_device(other) != device)
        tr_fatal(TR_EXIT_SOFTWARE, "bug: a collective on one device and one host buffer");
    return device;
}

/* a host buffer of `bytes` (at least 1), with the device's bytes where `from` is given */
static void *host_copy(const void *from, size_t bytes)
{
    void *h = tr_alloc(bytes ? bytes : 1, "a staged collective's host buffer");
    if (from && bytes)
        g_stage.download(h, from, bytes);
    return h;
}

static void copy_back(void *device, const void *host, size_t bytes)
{
    if (bytes)
        g_stage.upload(device, host, bytes);
}

/* the elements [0, end) that a call with these counts and displacements touches */
static size_t extent(const size_t *counts, const size_t *displs, int size)
{
    size_t end = 0;
    for (int r = 0; r < size; r++)
        if (counts[r] && displs[r] + counts[r] > end)
            end = displs[r] + counts[r];
    return end;
}

void tr_staged_allreduce(const void *sendbuf, void *recvbuf, size_t count, tr_dtype dtype,
                         tr_redop op, tr_group *g)
{
    size_t bytes = count * tr_dtype_size(dtype);
    void *h = host_copy(sendbuf, bytes);
    tr_allreduce(h, h, count, dtype, op, g);
    copy_back(recvbuf, h, bytes);
    tr_free(h);
}

/* ---- non-blocking calls ----------------------------------------------------------- */

/* What a staged request holds until it completes: the host call's own request, the
 * host buffer, and where (if anywhere) its contents go back. */
typedef struct staged_op {
    tr_request inner;
    void *host, *device; /* device NULL: nothing to copy back */
    size_t bytes;
} staged_op;

_Static_assert(sizeof(staged_op *) <= sizeof(((tr_request *)0)->storage),
               "tr_request storage too small for a staged operation");

static staged_op *new_op(void *host, void *device, size_t bytes)
{
    staged_op *op = tr_alloc(sizeof *op, "a staged collective");
    memset(&op->inner, 0, sizeof op->inner);
    op->host = host, op->device = device, op->bytes = bytes;
    return op;
}

static void start(tr_request *req, staged_op *op)
{
    memcpy(req->storage, &op, sizeof op);
    req->active = TR_REQ_STAGED;
}

static staged_op *op_of(const tr_request *req)
{
    staged_op *op;
    memcpy(&op, req->storage, sizeof op);
    return op;
}

static void finish(tr_request *req)
{
    staged_op *op = op_of(req);
    if (op->device)
        copy_back(op->device, op->host, op->bytes);
    tr_free(op->host);
    tr_free(op);
    req->active = 0;
}

int tr_staged_test(tr_request *req)
{
    if (!tr_test(&op_of(req)->inner))
        return 0;
    finish(req);
    return 1;
}

void tr_staged_wait(tr_request *req)
{
    tr_wait(&op_of(req)->inner);
    finish(req);
}

void tr_staged_iallreduce(const void *sendbuf, void *recvbuf, size_t count, tr_dtype dtype,
                          tr_redop op, tr_group *g, tr_request *req)
{
    size_t bytes = count * tr_dtype_size(dtype);
    staged_op *s = new_op(host_copy(sendbuf, bytes), recvbuf, bytes);
    tr_iallreduce(s->host, s->host, count, dtype, op, g, &s->inner);
    start(req, s);
}

void tr_staged_ireduce(void *buf, size_t count, tr_dtype dtype, tr_redop op, int root,
                       tr_group *g, tr_request *req)
{
    size_t bytes = count * tr_dtype_size(dtype);
    /* only the root's buffer gets the result (the others' are left as they were) */
    staged_op *s = new_op(host_copy(buf, bytes), tr_group_rank(g) == root ? buf : NULL, bytes);
    tr_ireduce(s->host, count, dtype, op, root, g, &s->inner);
    start(req, s);
}

void tr_staged_isend(const void *buf, size_t count, tr_dtype dtype, int peer, int tag,
                     tr_group *g, tr_request *req)
{
    size_t bytes = count * tr_dtype_size(dtype);
    staged_op *s = new_op(host_copy(buf, bytes), NULL, bytes);
    tr_isend(s->host, count, dtype, peer, tag, g, &s->inner);
    start(req, s);
}

/* ---- blocking calls ---------------------------------------------------------------- */

void tr_staged_reduce_scatterv(float *buf, const size_t *counts, const size_t *displs,
                               tr_group *g)
{
    size_t n = extent(counts, displs, tr_group_size(g));
    float *h = host_copy(buf, n * sizeof *h);
    tr_reduce_scatterv(h, counts, displs, g);
    int r = tr_group_rank(g); /* only this rank's part is defined */
    copy_back(buf + displs[r], h + displs[r], counts[r] * sizeof *h);
    tr_free(h);
}

void tr_staged_allgatherv(void *buf, const size_t *counts, const size_t *displs,
                          tr_dtype dtype, tr_group *g)
{
    size_t es = tr_dtype_size(dtype), bytes = extent(counts, displs, tr_group_size(g)) * es;
    void *h = host_copy(buf, bytes);
    tr_allgatherv(h, counts, displs, dtype, g);
    copy_back(buf, h, bytes);
    tr_free(h);
}

void tr_staged_send(const void *buf, size_t count, tr_dtype dtype, int peer, int tag,
                    tr_group *g)
{
    size_t bytes = count * tr_dtype_size(dtype);
    void *h = host_copy(buf, bytes);
    tr_send(h, count, dtype, peer, tag, g);
    tr_free(h);
}

void tr_staged_recv(void *buf, size_t count, tr_dtype dtype, int peer, int tag, tr_group *g)
{
    size_t bytes = count * tr_dtype_size(dtype);
    void *h = host_copy(NULL, bytes);
    tr_recv(h, count, dtype, peer, tag, g);
    copy_back(buf, h, bytes);
    tr_free(h);
}

void tr_staged_bcast(void *buf, size_t count, tr_dtype dtype, int root, tr_group *g)
{
    size_t bytes = count * tr_dtype_size(dtype);
    int is_root = tr_group_rank(g) == root;
    void *h = host_copy(is_root ? buf : NULL, bytes);
    tr_bcast(h, count, dtype, root, g);
    if (!is_root)
        copy_back(buf, h, bytes);
    tr_free(h);
}
