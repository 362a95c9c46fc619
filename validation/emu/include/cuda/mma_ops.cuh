/* cuda/mma_ops.cuh for the CUDA emulation build: the primitives of
 * attention_mma_kernels.cuh are the warp emulator's (this file shadows src/cuda/'s). */
#include "cuda_runtime.h"
