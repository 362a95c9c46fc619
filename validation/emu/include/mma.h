/* mma.h for the CUDA emulation build: nvcuda::wmma is the warp emulator's. */
#include "cuda_runtime.h"
