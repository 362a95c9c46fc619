/* cuda_bf16.h for the CUDA emulation build: the 16-bit types are the warp emulator's. */
#include "cuda_runtime.h"
