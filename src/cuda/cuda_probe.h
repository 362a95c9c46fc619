/* cuda_probe.h: is a usable GPU here? Compiled only when the CUDA backend is on
 * (TRAINER_HAVE_CUDA); the CPU build never needs the CUDA toolkit. */
#ifndef TR_CUDA_PROBE_H
#define TR_CUDA_PROBE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Number of visible CUDA devices; 0 with the reason in why (no driver, driver too
 * old for this runtime, no device) when none can be used. */
int tr_cuda_device_count(char *why, size_t len);

#ifdef __cplusplus
}
#endif

#endif
