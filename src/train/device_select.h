/* device_select.h: [system] device, set up before any other work: the CPU needs
 * nothing more, and a GPU per rank is chosen and checked on every node. */
#ifndef TR_DEVICE_SELECT_H
#define TR_DEVICE_SELECT_H

#include "comm/comm.h"
#include "core/deck.h"

/* Collective over the world. device = cpu or cpu-guarded: returns 0 at once. device = cuda: in a
 * build without CUDA, TR_EXIT_USAGE and how to build with it; in a CUDA build, each
 * rank's GPU (cuda_device.h's rule, then no two ranks of a node on one physical GPU)
 * becomes its current device and the CUDA backend's, or TR_EXIT_USAGE says why not
 * (no usable GPU, more ranks than GPUs on a node, a GPU shared) and what to change.
 * Any error is printed once, by one rank, and every rank returns the same code. */
int tr_device_select(const tr_deck *d, const tr_world *w);

/* TRAINER_STAGED_COMM=1 in the environment of every rank: for tests of parallel
 * layouts on fewer GPUs than ranks, collectives on device memory go through host
 * copies over MPI (comm.h, tr_comm_stage_device_memory) instead of NCCL, and ranks may
 * share a GPU. Also on cpu-guarded, whose tests prove that path without a GPU.
 * tr_device_select refuses (TR_EXIT_USAGE) a value other than 0 or 1, or ranks that
 * differ; this is what they agreed on then (0 before). */
int tr_staged_comm(void);

#endif
