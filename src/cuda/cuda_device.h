/* cuda_device.h: which GPU a rank uses. Compiled only when the CUDA backend is on
 * (TRAINER_HAVE_CUDA); plain C, for src/train/device_select.c and the tests.
 *
 * The rule: a rank that sees exactly one device (CUDA_VISIBLE_DEVICES, or Slurm's
 * --gpus-per-task / --gpu-bind, gave each rank its own) uses device 0; a rank that
 * sees several uses device local_rank (its rank among the ranks of its node), when
 * the node's ranks are no more than the devices. Whether two ranks of a node ended
 * on one physical GPU anyway (every rank sees the same single device) is for the
 * caller to find: it compares uuid (else pci_bus_id) over the ranks of the node. */
#ifndef TR_CUDA_DEVICE_H
#define TR_CUDA_DEVICE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tr_cuda_device {
    int index;            /* in this process's view of the devices (cudaSetDevice) */
    int visible;          /* devices this process sees */
    char pci_bus_id[32];  /* "0000:17:00.0": the physical GPU, the same in every process */
    char uuid[40];        /* the driver's UUID in hex, "" where it gave none: the GPU, or
                           * the MIG instance where the GPU is split (cuDeviceGetUuid), so
                           * ranks on two MIG slices of one GPU are not taken for sharing */
    char name[256];       /* "NVIDIA H100 80GB HBM3" */
    size_t memory_bytes;
    char host[256];       /* this node's name, for messages */
} tr_cuda_device;

/* Chooses the device of the rank that is local_rank of the local_size ranks on its
 * node (the rule above), makes it current (cudaSetDevice) and creates its context,
 * so that a GPU that cannot be used (busy in exclusive mode, broken) fails here.
 * Returns 0 with *dev filled in, or TR_EXIT_USAGE with a message for people in err
 * and whatever is known in *dev (host, visible): no usable GPU and CUDA's reason,
 * more ranks on the node than GPUs and what to change. Never aborts. */
int tr_cuda_device_choose(int local_rank, int local_size, tr_cuda_device *dev, char *err,
                          size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
