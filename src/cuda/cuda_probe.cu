/* cuda_probe.cu: count usable CUDA devices and explain why there are none.
 * A machine with the toolkit but no GPU answers "CUDA driver version is
 * insufficient" or "no CUDA-capable device": report that plainly. A node that does
 * have NVIDIA GPUs which CUDA cannot use (a driver older than this build's runtime,
 * a GPU in a bad state) is told apart: there a skipped GPU test would hide a broken
 * node, so the tests fail instead (cuda_probe.h). */
#include "cuda_probe.h"

#include <cuda_runtime.h>
#include <dirent.h>
#include <stdio.h>
#include <string.h>

/* Entries of dir whose names start with prefix and go on with a digit (or, for an
 * empty prefix, any entry but . and ..). */
static int count_entries(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0;
    size_t len = strlen(prefix);
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.')
            continue;
        if (len == 0 || (!strncmp(e->d_name, prefix, len) && e->d_name[len] >= '0' &&
                         e->d_name[len] <= '9'))
            n++;
    }
    closedir(d);
    return n;
}

extern "C" int tr_cuda_gpus_present(void)
{
    int proc = count_entries("/proc/driver/nvidia/gpus", ""), dev = count_entries("/dev", "nvidia");
    return proc > dev ? proc : dev;
}

extern "C" int tr_cuda_device_count(char *why, size_t len)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        const char *reason = e != cudaSuccess ? cudaGetErrorString(e)
                                              : "the CUDA runtime sees no device";
        const char *name = e != cudaSuccess ? cudaGetErrorName(e) : "0 devices";
        int present = tr_cuda_gpus_present(), rt = 0;
        cudaRuntimeGetVersion(&rt);
        if (present > 0) {
            snprintf(why, len, "no usable GPU: %s (%s), though the node has %d NVIDIA GPU%s "
                     "(/proc/driver/nvidia, /dev/nvidia*): this build's CUDA runtime is %d.%d; "
                     "check the driver supports it (nvidia-smi) and CUDA_VISIBLE_DEVICES",
                     reason, name, present, present == 1 ? "" : "s", rt / 1000,
                     rt % 1000 / 10);
            return -1;
        }
        snprintf(why, len, "no usable GPU: %s (%s)", reason, name);
        return 0;
    }
    snprintf(why, len, "%d CUDA device%s visible", n, n == 1 ? "" : "s");
    return n;
}
