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

#endif
