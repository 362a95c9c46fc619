/* cuda_probe.cu: count usable CUDA devices and explain why there are none.
 * A machine with the toolkit but no GPU answers "CUDA driver version is
 * insufficient" or "no CUDA-capable device": report that plainly. */
#include "cuda_probe.h"

#include <cuda_runtime.h>
#include <stdio.h>

extern "C" int tr_cuda_device_count(char *why, size_t len)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        snprintf(why, len, "no usable GPU: %s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
        return 0;
    }
    if (n == 0)
        snprintf(why, len, "no usable GPU: the CUDA runtime sees no device");
    else
        snprintf(why, len, "%d CUDA device%s visible", n, n == 1 ? "" : "s");
    return n;
}
