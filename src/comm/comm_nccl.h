/* comm_nccl.h: the NCCL side of comm.h, for comm_mpi.c (and tr_nccl_is_device for the
 * CUDA device's table, backend/device.h's holds). Implemented in
 * comm_nccl.cu, which exists only in a build with the CUDA backend
 * (TRAINER_HAVE_CUDA); comm_mpi.c includes this header and calls it only there.
 *
 * Plain C: no CUDA or NCCL type appears here, so comm_mpi.c compiles with gcc and
 * without the CUDA headers, and comm_nccl.cu knows nothing of MPI (the unique id
 * travels as bytes that comm_mpi.c broadcasts).
 *
 * Semantics (the stream rules) are those that comm.h states for device buffers. The
 * process has one communication stream for the collectives of every group, made by
 * the first tr_nccl_create on the device the backend's compute stream lives on; a
 * link (comm.h) is a communicator with a stream of its own. */
#ifndef TR_COMM_NCCL_H
#define TR_COMM_NCCL_H

#include "comm.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* sizeof(ncclUniqueId) (NCCL_UNIQUE_ID_BYTES), checked at compile time */
#define TR_NCCL_ID_BYTES 128

typedef struct tr_nccl tr_nccl; /* one group's communicator */

/* Rank 0 of a group: a new unique id into id[TR_NCCL_ID_BYTES]. */
void tr_nccl_unique_id(void *id);
/* Every rank of the group, with the id rank 0 made: the communicator (collective
 * over the group, blocking until all its ranks have called it). own_stream 0: its
 * operations go on the process's communication stream; 1: on a stream of its own,
 * made here (a link: two ranks, one direction of point-to-point traffic). */
tr_nccl *tr_nccl_create(const void *id, int size, int rank, int own_stream);
/* Waits for the communicator's stream, then frees the communicator (and its own
 * stream). Every rank of the group calls it, groups in the same order on every rank. */
void tr_nccl_destroy(tr_nccl *c);

/* 1 when p is device memory (cudaMalloc), 0 for host memory of any kind. */
int tr_nccl_is_device(const void *p);

void tr_nccl_allreduce(tr_nccl *c, const void *sendbuf, void *recvbuf, size_t count,
                       tr_dtype dtype, tr_redop op, tr_request *req);
void tr_nccl_reduce(tr_nccl *c, void *buf, size_t count, tr_dtype dtype, tr_redop op, int root,
                    tr_request *req);
void tr_nccl_allgatherv(tr_nccl *c, void *buf, const size_t *counts, const size_t *displs,
                        tr_dtype dtype);
/* fp32 sums of each rank's part [displs[r], + counts[r]) left in place on rank r */
void tr_nccl_reduce_scatterv(tr_nccl *c, float *buf, const size_t *counts, const size_t *displs);
void tr_nccl_send(tr_nccl *c, const void *buf, size_t count, tr_dtype dtype, int peer,
                  tr_request *req);
void tr_nccl_recv(tr_nccl *c, void *buf, size_t count, tr_dtype dtype, int peer);
void tr_nccl_bcast(tr_nccl *c, void *buf, size_t count, tr_dtype dtype, int root);
/* The calls above that take a request are blocking when req is NULL (comm.h's
 * blocking rule) and non-blocking otherwise (req->active = TR_REQ_NCCL). */

/* For requests with active == TR_REQ_NCCL: 1 when finished (the request is then
 * inactive); tr_nccl_wait makes the compute stream wait for it. */
int tr_nccl_test(tr_request *req);
void tr_nccl_wait(tr_request *req);

#ifdef __cplusplus
}
#endif

#endif
