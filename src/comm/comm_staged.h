/* comm_staged.h: comm.h's calls on device memory through host copies over MPI, for
 * comm_mpi.c, which routes a call here when tr_staged says so (staging is on, the
 * buffer is device memory, and its group has no NCCL communicator). Nothing else
 * includes this. */
#ifndef TR_COMM_STAGED_H
#define TR_COMM_STAGED_H

#include "comm.h"

/* Whether a call on buf (and other, a second buffer of the same call, or NULL) is
 * staged: staging is on and buf is device memory (other must then be too). */
int tr_staged(const void *buf, const void *other);

void tr_staged_allreduce(const void *sendbuf, void *recvbuf, size_t count, tr_dtype dtype,
                         tr_redop op, tr_group *g);
void tr_staged_iallreduce(const void *sendbuf, void *recvbuf, size_t count, tr_dtype dtype,
                          tr_redop op, tr_group *g, tr_request *req);
void tr_staged_ireduce(void *buf, size_t count, tr_dtype dtype, tr_redop op, int root,
                       tr_group *g, tr_request *req);
void tr_staged_reduce_scatterv(float *buf, const size_t *counts, const size_t *displs,
                               tr_group *g);
void tr_staged_allgatherv(void *buf, const size_t *counts, const size_t *displs,
                          tr_dtype dtype, tr_group *g);
void tr_staged_send(const void *buf, size_t count, tr_dtype dtype, int peer, int tag,
                    tr_group *g);
void tr_staged_isend(const void *buf, size_t count, tr_dtype dtype, int peer, int tag,
                     tr_group *g, tr_request *req);
void tr_staged_recv(void *buf, size_t count, tr_dtype dtype, int peer, int tag, tr_group *g);
void tr_staged_bcast(void *buf, size_t count, tr_dtype dtype, int root, tr_group *g);
/* a request of the calls above (active == TR_REQ_STAGED): tr_test's and tr_wait's */
int tr_staged_test(tr_request *req);
void tr_staged_wait(tr_request *req);

#endif
