/* comm_mpi.h: the MPI communicator under a group, for the one other place that
 * calls MPI: src/io, whose checkpoints write through MPI-IO and read through parallel
 * HDF5 (checkpoint_internal.h). Nothing else includes this. */
#ifndef TR_COMM_MPI_H
#define TR_COMM_MPI_H

#include "comm.h"

#include <mpi.h>

MPI_Comm tr_group_mpi_comm(const tr_group *g);

#endif
