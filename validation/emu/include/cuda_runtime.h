/* cuda_runtime.h for the CUDA emulation build (validation/emu/README.md): the part
 * of the CUDA runtime API the backend calls, implemented on the host by
 * emu_runtime.cpp. Device memory is host memory that the runtime keeps a table of,
 * so a copy or a pointer query that mistakes host memory for device memory (or the
 * reverse) fails as it would on a GPU; every stream runs its work at once, in order. */
#ifndef TR_EMU_CUDA_RUNTIME_H
#define TR_EMU_CUDA_RUNTIME_H

#include "warp_emulator.h" /* dim3, float4, the 16-bit types, the kernels' built-ins */

#include <stddef.h>

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidDevice = 101,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600,
    cudaErrorLaunchFailure = 719,
} cudaError_t;

typedef struct tr_emu_stream *cudaStream_t;
typedef struct tr_emu_event *cudaEvent_t;

typedef enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
} cudaMemcpyKind;

typedef enum cudaDataType_t {
    CUDA_R_32F = 0,
    CUDA_R_64F = 1,
    CUDA_R_16F = 2,
    CUDA_R_32I = 10,
    CUDA_R_16BF = 14,
} cudaDataType;

typedef enum cudaMemoryType {
    cudaMemoryTypeUnregistered = 0,
    cudaMemoryTypeHost = 1,
    cudaMemoryTypeDevice = 2,
    cudaMemoryTypeManaged = 3,
} cudaMemoryType;

typedef struct cudaPointerAttributes {
    enum cudaMemoryType type;
    int device;
    void *devicePointer;
    void *hostPointer;
} cudaPointerAttributes;

typedef struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    size_t sharedMemPerBlock;
    size_t sharedMemPerBlockOptin;
    int major, minor;
    int multiProcessorCount;
    int warpSize;
} cudaDeviceProp;

enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
enum cudaDeviceAttr { cudaDevAttrMaxSharedMemoryPerBlockOptin = 97 };
typedef enum cudaDriverEntryPointQueryResult {
    cudaDriverEntryPointSuccess = 0,
    cudaDriverEntryPointSymbolNotFound = 1,
    cudaDriverEntryPointVersionNotSufficent = 2,
} cudaDriverEntryPointQueryResult;
#define cudaEnableDefault 0x0
#define cudaStreamDefault 0x0
#define cudaStreamNonBlocking 0x1
#define cudaEventDefault 0x0
#define cudaEventDisableTiming 0x2

extern "C" {
cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int device);
cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device);
cudaError_t cudaDeviceGetPCIBusId(char *id, int len, int device);
cudaError_t cudaRuntimeGetVersion(int *version);
cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **fn, unsigned version,
                                             unsigned long long flags,
                                             cudaDriverEntryPointQueryResult *status);
cudaError_t cudaGetLastError(void);
const char *cudaGetErrorString(cudaError_t e);
const char *cudaGetErrorName(cudaError_t e);

cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaFree(void *p);
cudaError_t cudaMallocHost(void **p, size_t bytes);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes);
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes *a, const void *p);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t s);
cudaError_t cudaMemset(void *p, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t s);

cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned flags, int priority);
cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamQuery(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags);
cudaError_t cudaDeviceSynchronize(void);

cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b);

/* 1 where [p, p + bytes) lies inside one live cudaMalloc allocation (what a GPU
 * could read there); 0 otherwise. For the emulated libraries (emu_cublas.cpp,
 * emu_nccl.cpp), which check every buffer they are given with it. */
int tr_emu_device_span(const void *p, size_t bytes);

/* a kernel's attribute: checked (the size a GPU of compute capability 9.0 allows) */
cudaError_t tr_emu_func_set_attribute(const void *kernel, enum cudaFuncAttribute attr, int value);
/* checks a launch of `kernel` (called `name` in messages) as the GPU would (at most
 * 1024 threads a block, the grid's limits, dynamic shared memory above 48 KB only
 * as far as cudaFuncSetAttribute allowed it) and records a failure for
 * cudaGetLastError; 1 where the kernel may run (whole warps are the emulator's own
 * demand) */
int tr_emu_launch_ok(const void *kernel, const char *name, dim3 grid, dim3 block, size_t smem,
                     cudaStream_t s);
/* seconds on a monotonic clock */
double tr_emu_seconds(void);
/* after a launch that ran: counts it for TR_EMU_STATS (emu_runtime.cpp) */
void tr_emu_launch_done(const char *name, dim3 grid, dim3 block, double seconds);
}

/* the runtime's typed forms, as cuda_runtime.h has them */
template <typename T> static inline cudaError_t cudaMalloc(T **p, size_t bytes)
{
    return cudaMalloc((void **)p, bytes);
}
template <typename T> static inline cudaError_t cudaMallocHost(T **p, size_t bytes)
{
    return cudaMallocHost((void **)p, bytes);
}

template <typename K>
static inline cudaError_t cudaFuncSetAttribute(K *kernel, enum cudaFuncAttribute attr, int value)
{
    return tr_emu_func_set_attribute((const void *)kernel, attr, value);
}

/* What cu_to_cpp.py writes for kernel<<<grid, block, smem, stream>>>(args): the
 * kernel as every thread of the grid, under the warp emulator, now (the stream's
 * turn: every emulated stream runs its work at once). */
template <typename F>
static inline void tr_emu_launch(const void *kernel, const char *name, dim3 grid, dim3 block,
                                 size_t smem, cudaStream_t s, F body)
{
    if (!tr_emu_launch_ok(kernel, name, grid, block, smem, s))
        return;
    double t0 = tr_emu_seconds();
    emu::launch(grid, block, smem, body);
    tr_emu_launch_done(name, grid, block, tr_emu_seconds() - t0);
}
template <typename F>
static inline void tr_emu_launch(const void *kernel, const char *name, dim3 grid, dim3 block,
                                 F body)
{
    tr_emu_launch(kernel, name, grid, block, 0, (cudaStream_t)0, body);
}
template <typename F>
static inline void tr_emu_launch(const void *kernel, const char *name, dim3 grid, dim3 block,
                                 size_t smem, F body)
{
    tr_emu_launch(kernel, name, grid, block, smem, (cudaStream_t)0, body);
}

#endif
