/* cuda_probe.h: is a usable GPU here? Compiled only when the CUDA backend is on
 * (TRAINER_HAVE_CUDA); the CPU build never needs the CUDA toolkit. */
#ifndef TR_CUDA_PROBE_H
#define TR_CUDA_PROBE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Number of visible CUDA devices. None usable: 0 with the reason in why ("no usable
 * GPU: ..."), or -1 where the node nevertheless has NVIDIA GPUs (the driver is too
 * old for this runtime, CUDA_VISIBLE_DEVICES names none, a GPU is in a bad state):
 * the GPU tests skip on 0 and fail on -1, so a broken GPU node is not reported as a
 * machine without GPUs. */
int tr_cuda_device_count(char *why, size_t len);
/* NVIDIA GPUs the kernel driver shows (/proc/driver/nvidia/gpus, /dev/nvidiaN),
 * whether or not CUDA can use them. */
int tr_cuda_gpus_present(void);

#ifdef __cplusplus
}
#endif

#endif
