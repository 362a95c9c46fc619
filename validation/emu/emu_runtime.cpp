/* emu_runtime.cpp: the CUDA runtime calls of the backend, on the host, for the CUDA
 * emulation build (validation/emu/README.md).
 *
 * It is strict where a GPU is: device memory is what cudaMalloc handed out, and the
 * runtime keeps a table of it, so a copy, a memset or a library call given host
 * memory where device memory belongs fails (a GPU would fault or refuse it); a
 * launch with more threads or shared memory than the GPU allows fails at the launch;
 * a destroyed stream or event is an invalid handle. New allocations hold 0xff bytes
 * (NaN as floats, as bf16 and fp16), so a kernel that reads what nobody wrote
 * shows it. Every stream runs its work at once on the calling thread, in call order:
 * one valid order of what a GPU may do, so events and stream waits only need to
 * exist.
 *
 * The device: TR_EMU_GPUS of them (default 1), each with TR_EMU_GPU_MEMORY bytes
 * (default 80 GiB; allocations beyond it fail as cudaErrorMemoryAllocation), compute
 * capability 9.0 and 227 KB of opt-in shared memory per block (an H100). */
#include "cuda.h"
#include "cuda_runtime.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/asan_interface.h>
#endif

namespace
{

struct tr_state {
    std::mutex mu;
    std::map<uintptr_t, size_t> device; /* base -> bytes, of live cudaMalloc blocks */
    std::set<uintptr_t> pinned;         /* cudaMallocHost */
    std::set<const void *> streams, events;
    std::map<const void *, size_t> smem_optin; /* kernel -> opted-in dynamic bytes */
    size_t used = 0;
    int current = 0;
    cudaError_t last = cudaSuccess;
};

tr_state &S()
{
    static tr_state s;
    return s;
}

const size_t DEFAULT_SMEM = 48 * 1024;
const size_t OPTIN_SMEM = 232448; /* an H100's cudaDevAttrMaxSharedMemoryPerBlockOptin */

long env_long(const char *name, long dflt)
{
    const char *v = getenv(name);
    return v && *v ? strtol(v, NULL, 10) : dflt;
}

int gpus() { return (int)env_long("TR_EMU_GPUS", 1); }

size_t gpu_memory() { return (size_t)env_long("TR_EMU_GPU_MEMORY", 80L << 30); }

/* e, recorded for cudaGetLastError, after a line saying what went wrong in `call` */
cudaError_t fail(cudaError_t e, const char *call, const char *problem)
{
    fprintf(stderr, "cuda emulator: %s: %s\n", call, problem);
    S().last = e;
    return e;
}

/* 1 where [p, p + n) lies inside one device block; the caller holds the lock */
int in_device(const void *p, size_t n)
{
    auto &d = S().device;
    uintptr_t a = (uintptr_t)p;
    auto it = d.upper_bound(a);
    if (it == d.begin())
        return 0;
    --it;
    return a >= it->first && a - it->first <= it->second && n <= it->second - (a - it->first);
}

double now_ms()
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return 1e3 * (double)t.tv_sec + 1e-6 * (double)t.tv_nsec;
}

struct tr_emu_event_rec {
    double ms;
    int recorded;
};

int valid_stream(cudaStream_t s)
{
    std::lock_guard<std::mutex> g(S().mu);
    return s == NULL || S().streams.count(s);
}

/* the driver's cuDeviceGetUuid, as cudaGetDriverEntryPointByVersion hands it out */
CUresult emu_device_uuid(CUuuid *u, CUdevice dev)
{
    memset(u->bytes, 0, sizeof u->bytes);
    memcpy(u->bytes, "trainer-emu-gpu", 15);
    u->bytes[15] = (char)dev;
    return CUDA_SUCCESS;
}

} /* namespace */

struct tr_emu_stream {
    int id;
};

extern "C" {

int tr_emu_device_span(const void *p, size_t bytes)
{
    std::lock_guard<std::mutex> g(S().mu);
    return in_device(p, bytes);
}

/* ---- devices --------------------------------------------------------------------- */

cudaError_t cudaGetDeviceCount(int *count)
{
    *count = gpus();
    return *count > 0 ? cudaSuccess : cudaErrorNoDevice;
}

cudaError_t cudaGetDevice(int *device)
{
    *device = S().current;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device)
{
    if (device < 0 || device >= gpus())
        return fail(cudaErrorInvalidDevice, "cudaSetDevice", "no such device");
    S().current = device;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int device)
{
    if (device < 0 || device >= gpus())
        return fail(cudaErrorInvalidDevice, "cudaGetDeviceProperties", "no such device");
    memset(p, 0, sizeof *p);
    /* an H100's name, so that MFU takes its datasheet peak (cuda_peak.cu) rather than
     * timing 4096^3 products, minutes here */
    snprintf(p->name, sizeof p->name, "NVIDIA H100 80GB HBM3 (emulated on the CPU)");
    p->totalGlobalMem = gpu_memory();
    p->sharedMemPerBlock = DEFAULT_SMEM;
    p->sharedMemPerBlockOptin = OPTIN_SMEM;
    p->major = 9;
    p->minor = 0;
    p->multiProcessorCount = 132;
    p->warpSize = 32;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device)
{
    if (device < 0 || device >= gpus())
        return fail(cudaErrorInvalidDevice, "cudaDeviceGetAttribute", "no such device");
    if (attr != cudaDevAttrMaxSharedMemoryPerBlockOptin)
        return fail(cudaErrorInvalidValue, "cudaDeviceGetAttribute", "attribute not emulated");
    *value = (int)OPTIN_SMEM;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char *id, int len, int device)
{
    if (device < 0 || device >= gpus())
        return fail(cudaErrorInvalidDevice, "cudaDeviceGetPCIBusId", "no such device");
    snprintf(id, (size_t)len, "0000:%02x:00.0", 0x10 + device);
    return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *version)
{
    *version = 13000;
    return cudaSuccess;
}

cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **fn, unsigned version,
                                             unsigned long long flags,
                                             cudaDriverEntryPointQueryResult *status)
{
    (void)version;
    (void)flags;
    *fn = NULL;
    *status = cudaDriverEntryPointSymbolNotFound;
    if (!strcmp(symbol, "cuDeviceGetUuid")) {
        *fn = (void *)&emu_device_uuid;
        *status = cudaDriverEntryPointSuccess;
    }
    return cudaSuccess;
}

cudaError_t cudaGetLastError(void)
{
    cudaError_t e = S().last;
    S().last = cudaSuccess;
    return e;
}

const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess:
        return "no error";
    case cudaErrorInvalidValue:
        return "invalid argument";
    case cudaErrorMemoryAllocation:
        return "out of memory";
    case cudaErrorInvalidDevice:
        return "invalid device ordinal";
    case cudaErrorNoDevice:
        return "no CUDA-capable device is detected";
    case cudaErrorInvalidResourceHandle:
        return "invalid resource handle";
    case cudaErrorNotReady:
        return "device not ready";
    case cudaErrorLaunchFailure:
        return "unspecified launch failure";
    }
    return "unknown error";
}

const char *cudaGetErrorName(cudaError_t e)
{
    switch (e) {
    case cudaSuccess:
        return "cudaSuccess";
    case cudaErrorInvalidValue:
        return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
        return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidDevice:
        return "cudaErrorInvalidDevice";
    case cudaErrorNoDevice:
        return "cudaErrorNoDevice";
    case cudaErrorInvalidResourceHandle:
        return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady:
        return "cudaErrorNotReady";
    case cudaErrorLaunchFailure:
        return "cudaErrorLaunchFailure";
    }
    return "cudaErrorUnknown";
}

/* ---- memory ---------------------------------------------------------------------- */

cudaError_t cudaMalloc(void **p, size_t bytes)
{
    *p = NULL;
    std::unique_lock<std::mutex> g(S().mu);
    size_t rounded = (bytes + 255) & ~(size_t)255;
    if (rounded == 0)
        rounded = 256;
    if (S().used + rounded > gpu_memory()) {
        g.unlock();
        return fail(cudaErrorMemoryAllocation, "cudaMalloc", "out of emulated memory");
    }
    void *q = aligned_alloc(256, rounded);
    if (!q) {
        g.unlock();
        return fail(cudaErrorMemoryAllocation, "cudaMalloc", "out of host memory");
    }
    /* uninitialised, as a GPU's: NaN bytes, but for a large block (the trainer's
     * reservation: the trainer clears the model's part itself, and the backend's
     * scratch, some 290 MiB mostly unused by small models, is best left untouched:
     * its pages then cost no time or memory) */
    if (rounded <= ((size_t)64 << 20))
        memset(q, 0xff, rounded);
#ifdef __SANITIZE_ADDRESS__
    /* a kernel that reads or writes past the block's end: stopped there, where the GPU
     * would not notice within the rounding */
    ASAN_POISON_MEMORY_REGION((char *)q + bytes, rounded - bytes);
#endif
    S().device[(uintptr_t)q] = bytes;
    S().used += rounded;
    *p = q;
    return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
    if (!p)
        return cudaSuccess; /* cudaFree(0): makes the context on a GPU */
    std::unique_lock<std::mutex> g(S().mu);
    auto it = S().device.find((uintptr_t)p);
    if (it == S().device.end()) {
        g.unlock();
        return fail(cudaErrorInvalidValue, "cudaFree", "not a cudaMalloc'ed pointer");
    }
    S().used -= (it->second + 255) & ~(size_t)255;
    S().device.erase(it);
    g.unlock();
    free(p);
    return cudaSuccess;
}

cudaError_t cudaMallocHost(void **p, size_t bytes)
{
    *p = malloc(bytes ? bytes : 1);
    if (!*p)
        return fail(cudaErrorMemoryAllocation, "cudaMallocHost", "out of host memory");
    std::lock_guard<std::mutex> g(S().mu);
    S().pinned.insert((uintptr_t)*p);
    return cudaSuccess;
}

cudaError_t cudaFreeHost(void *p)
{
    std::unique_lock<std::mutex> g(S().mu);
    if (p && !S().pinned.erase((uintptr_t)p)) {
        g.unlock();
        return fail(cudaErrorInvalidValue, "cudaFreeHost", "not a cudaMallocHost'ed pointer");
    }
    g.unlock();
    free(p);
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes)
{
    std::lock_guard<std::mutex> g(S().mu);
    *total_bytes = gpu_memory();
    *free_bytes = *total_bytes - S().used;
    return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes *a, const void *p)
{
    std::lock_guard<std::mutex> g(S().mu);
    memset(a, 0, sizeof *a);
    if (in_device(p, 0)) {
        a->type = cudaMemoryTypeDevice;
        a->device = S().current;
        a->devicePointer = (void *)p;
    } else if (S().pinned.count((uintptr_t)p)) {
        a->type = cudaMemoryTypeHost;
        a->hostPointer = (void *)p;
    } else {
        a->type = cudaMemoryTypeUnregistered; /* CUDA 11 on: success, unregistered */
    }
    return cudaSuccess;
}

/* The device side of a copy must be device memory (a GPU would fault on host memory
 * there); the host side may be either (unified addressing copies it all the same). */
static cudaError_t copy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                        cudaStream_t s, const char *call)
{
    if (!valid_stream(s))
        return fail(cudaErrorInvalidResourceHandle, call, "a destroyed or unknown stream");
    std::unique_lock<std::mutex> g(S().mu);
    int dst_dev = in_device(dst, bytes), src_dev = in_device(src, bytes);
    int need_dst = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    int need_src = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    g.unlock();
    if (kind > cudaMemcpyDefault)
        return fail(cudaErrorInvalidValue, call, "no such copy kind");
    if ((need_dst && !dst_dev) || (need_src && !src_dev)) {
        fprintf(stderr,
                "cuda emulator: %s of %zu bytes (kind %d): the %s is not inside one "
                "device allocation\n",
                call, bytes, (int)kind, need_dst && !dst_dev ? "destination" : "source");
        S().last = cudaErrorInvalidValue;
        return cudaErrorInvalidValue;
    }
    if (bytes)
        memmove(dst, src, bytes);
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind)
{
    return copy(dst, src, bytes, kind, NULL, "cudaMemcpy");
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t s)
{
    return copy(dst, src, bytes, kind, s, "cudaMemcpyAsync");
}

static cudaError_t set(void *p, int value, size_t bytes, cudaStream_t s, const char *call)
{
    if (!valid_stream(s))
        return fail(cudaErrorInvalidResourceHandle, call, "a destroyed or unknown stream");
    if (!tr_emu_device_span(p, bytes))
        return fail(cudaErrorInvalidValue, call, "the memory is not inside one device allocation");
    memset(p, value, bytes);
    return cudaSuccess;
}

cudaError_t cudaMemset(void *p, int value, size_t bytes)
{
    return set(p, value, bytes, NULL, "cudaMemset");
}

cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t s)
{
    return set(p, value, bytes, s, "cudaMemsetAsync");
}

/* ---- streams and events ---------------------------------------------------------- */

cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned flags, int priority)
{
    (void)flags;
    (void)priority;
    static int next;
    *s = new tr_emu_stream{++next};
    std::lock_guard<std::mutex> g(S().mu);
    S().streams.insert(*s);
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    return cudaStreamCreateWithPriority(s, flags, 0);
}

cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithPriority(s, 0, 0); }

cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest)
{
    *least = 0;
    *greatest = -5;
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    std::unique_lock<std::mutex> g(S().mu);
    if (!s || !S().streams.erase(s)) {
        g.unlock();
        return fail(cudaErrorInvalidResourceHandle, "cudaStreamDestroy",
                    "a destroyed or unknown stream");
    }
    g.unlock();
    delete s;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    if (!valid_stream(s))
        return fail(cudaErrorInvalidResourceHandle, "cudaStreamSynchronize",
                    "a destroyed or unknown stream");
    return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t s) { return cudaStreamSynchronize(s); }

static int valid_event(cudaEvent_t e)
{
    std::lock_guard<std::mutex> g(S().mu);
    return S().events.count(e) != 0;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags)
{
    (void)flags;
    if (!valid_stream(s) || !valid_event(e))
        return fail(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent",
                    "a destroyed or unknown stream or event");
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
    (void)flags;
    *e = (cudaEvent_t) new tr_emu_event_rec{0, 0};
    std::lock_guard<std::mutex> g(S().mu);
    S().events.insert(*e);
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    std::unique_lock<std::mutex> g(S().mu);
    if (!S().events.erase(e)) {
        g.unlock();
        return fail(cudaErrorInvalidResourceHandle, "cudaEventDestroy",
                    "a destroyed or unknown event");
    }
    g.unlock();
    delete (tr_emu_event_rec *)e;
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    if (!valid_stream(s) || !valid_event(e))
        return fail(cudaErrorInvalidResourceHandle, "cudaEventRecord",
                    "a destroyed or unknown stream or event");
    tr_emu_event_rec *r = (tr_emu_event_rec *)e;
    r->ms = now_ms();
    r->recorded = 1;
    return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t e)
{
    if (!valid_event(e))
        return fail(cudaErrorInvalidResourceHandle, "cudaEventQuery",
                    "a destroyed or unknown event");
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) { return cudaEventQuery(e); }

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    if (!valid_event(a) || !valid_event(b))
        return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime",
                    "a destroyed or unknown event");
    const tr_emu_event_rec *x = (const tr_emu_event_rec *)a, *y = (const tr_emu_event_rec *)b;
    if (!x->recorded || !y->recorded)
        return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime",
                    "an event never recorded");
    *ms = (float)(y->ms - x->ms);
    return cudaSuccess;
}

/* ---- kernels --------------------------------------------------------------------- */

cudaError_t tr_emu_func_set_attribute(const void *kernel, enum cudaFuncAttribute attr, int value)
{
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 ||
        (size_t)value > OPTIN_SMEM)
        return fail(cudaErrorInvalidValue, "cudaFuncSetAttribute",
                    "dynamic shared memory beyond the GPU's opt-in limit");
    std::lock_guard<std::mutex> g(S().mu);
    S().smem_optin[kernel] = (size_t)value;
    return cudaSuccess;
}

int tr_emu_launch_ok(const void *kernel, const char *name, dim3 grid, dim3 block, size_t smem,
                     cudaStream_t s)
{
    size_t threads = (size_t)block.x * block.y * block.z;
    const char *bad = NULL;
    if (!valid_stream(s))
        bad = "a destroyed or unknown stream";
    else if (threads == 0 || threads > 1024 || block.z > 64)
        bad = "a block of no threads or of more than 1024";
    else if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 0x7fffffffu || grid.y > 65535 ||
             grid.z > 65535)
        bad = "a grid outside the GPU's limits";
    else if (smem > DEFAULT_SMEM) {
        std::lock_guard<std::mutex> g(S().mu);
        auto it = S().smem_optin.find(kernel);
        if (it == S().smem_optin.end() || it->second < smem)
            bad = "more dynamic shared memory than the kernel was allowed "
                  "(cudaFuncSetAttribute)";
    }
    if (bad) {
        fprintf(stderr,
                "cuda emulator: launch of %s, grid (%u, %u, %u), block (%u, %u, %u), "
                "%zu bytes of shared memory: %s\n",
                name, grid.x, grid.y, grid.z, block.x, block.y, block.z, smem, bad);
        S().last = cudaErrorInvalidValue;
        return 0;
    }
    return 1;
}

double tr_emu_seconds(void) { return 1e-3 * now_ms(); }

/* TR_EMU_STATS=1: at exit, each kernel's launches, CUDA threads and time, the most
 * expensive first (what to shrink when an emulated test is slow) */
namespace
{
struct kernel_stats {
    long launches = 0;
    double threads = 0, seconds = 0;
};
std::map<std::string, kernel_stats> *g_stats;

void print_stats(void)
{
    std::vector<std::pair<std::string, kernel_stats>> v(g_stats->begin(), g_stats->end());
    std::sort(v.begin(), v.end(),
              [](const auto &a, const auto &b) { return a.second.seconds > b.second.seconds; });
    fprintf(stderr, "cuda emulator: %-40s %9s %14s %9s\n", "kernel", "launches", "threads",
            "seconds");
    for (const auto &k : v)
        fprintf(stderr, "cuda emulator: %-40s %9ld %14.0f %9.3f\n", k.first.c_str(),
                k.second.launches, k.second.threads, k.second.seconds);
}
} /* namespace */

void tr_emu_launch_done(const char *name, dim3 grid, dim3 block, double seconds)
{
    static int on = -1;
    if (on < 0) {
        on = env_long("TR_EMU_STATS", 0) != 0;
        if (on) {
            g_stats = new std::map<std::string, kernel_stats>;
            atexit(print_stats);
        }
    }
    if (!on)
        return;
    kernel_stats &k = (*g_stats)[name];
    k.launches++;
    k.threads += (double)grid.x * grid.y * grid.z * block.x * block.y * block.z;
    k.seconds += seconds;
}

} /* extern "C" */
