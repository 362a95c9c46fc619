/* comm_shm.h: the all-reduce of host float sums through a shared-memory window,
 * for a group whose ranks all run on one node (internal to src/comm; comm_mpi.c
 * decides when to use it).
 *
 * Why not MPI_Allreduce there: on a node, MPI moves each message through a copy
 * (or the kernel's cross-process copy, pinning pages every time), runs the reduction
 * in its own rounds and, for the non-blocking form, only progresses inside MPI
 * calls. Measured on the 2-core VM (MLP, 2 ranks x 1 thread): the gradient
 * all-reduce took about 30 % of the step. Here every rank copies its buffer once into
 * the window, sums one slice of every rank's copy, and reads the others' sums back:
 * two barriers, no messages. The sum of each element is taken in rank order
 * (((x0 + x1) + x2) + ...), so it is the same run to run and whatever the threads. */
#ifndef TR_COMM_SHM_H
#define TR_COMM_SHM_H

#include <mpi.h>
#include <stddef.h>

typedef struct tr_shm tr_shm;

/* Collective over comm. A window of 2 x chunk floats per rank, or NULL on every rank
 * (nothing made) when comm's ranks are not all on one node or any rank could not get
 * its memory: then MPI stays in charge. */
tr_shm *tr_shm_create(MPI_Comm comm, size_t chunk);

/* Collective: recv = the sum over comm's ranks of send (send == recv: in place).
 * `open` and `close` (may be NULL) bracket the call (the guarded CPU device's memory
 * is readable only between them). */
void tr_shm_allreduce_f32(tr_shm *s, const float *send, float *recv, size_t count,
                          void (*open)(void), void (*close)(void));

/* Collective, in place. Rank r's part of buf is [displs[r], displs[r] + counts[r])
 * (the parts do not overlap): reduce_scatterv leaves in each rank's part the sum over
 * the ranks (in rank order, as the all-reduce) and the rest of buf as it was;
 * allgatherv gives every rank every rank's part. */
void tr_shm_reduce_scatterv_f32(tr_shm *s, float *buf, const size_t *counts,
                                const size_t *displs, void (*open)(void), void (*close)(void));
void tr_shm_allgatherv_f32(tr_shm *s, float *buf, const size_t *counts, const size_t *displs,
                           void (*open)(void), void (*close)(void));

/* Collective; NULL is fine. */
void tr_shm_free(tr_shm *s);

#endif
