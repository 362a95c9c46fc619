/* library_types.h for the CUDA emulation build: cudaDataType is in cuda_runtime.h. */
#include "cuda_runtime.h"
