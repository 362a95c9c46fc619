/* cuda_device_memory.cu: the GPU as a tr_device (backend/device.h): one cudaMalloc
 * per rank at start-up, sized by the memory plan, handed out 256-byte aligned; the
 * transfers and fills go on the backend's one stream, so they are ordered with the
 * kernels (a download waits for everything queued before it).
 *
 * The order at start-up: the context (stream, cuBLAS handle) exists first, made by
 * device selection; the reservation then gives its first TR_CUDA_BACKEND_BYTES to
 * the context (its scratch and cuBLAS's workspace), and the model's buffers follow. */
#include "cuda/cuda_backend.h"
#include "cuda/cuda_common.h"
#include "cuda/cuda_ops.h"

#include "backend/device.h"
#include "comm/comm_nccl.h" /* tr_nccl_is_device */

#include <stdio.h>
#include <string.h>

static tr_arena g_arena;
static size_t g_free_before; /* the GPU's free memory just before the reservation */

static int gpu_reserve(size_t bytes, size_t *room, char *err, size_t errlen)
{
    if (g_arena.base)
        tr_fatal(TR_EXIT_SOFTWARE, "bug: the GPU's memory reserved twice");
    (void)tr_cuda_stream(); /* the context first: it takes its part below */
    if (bytes < TR_CUDA_BACKEND_BYTES)
        tr_fatal(TR_EXIT_SOFTWARE, "bug: a GPU reservation of %zu bytes leaves out the "
                 "backend's own %zu (the plan's backend_bytes)", bytes,
                 (size_t)TR_CUDA_BACKEND_BYTES);
    size_t gpu_total = 0;
    TR_CUDA_CHECK(cudaMemGetInfo(&g_free_before, &gpu_total));
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, tr_arena_bytes(bytes));
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        size_t free_b = 0, total_b = 0;
        (void)cudaMemGetInfo(&free_b, &total_b);
        *room = free_b;
        snprintf(err, errlen, "%.2f GiB of GPU memory asked for, %.2f GiB free of %.2f GiB",
                 (double)bytes / 1073741824.0, (double)free_b / 1073741824.0,
                 (double)total_b / 1073741824.0);
        return TR_EXIT_OSERR;
    }
    TR_CUDA_CHECK(e);
    tr_arena_init(&g_arena, p, bytes);
    /* the model's buffers start zeroed (gradients, padding rows); the backend's own
     * part, first, is scratch that each use writes before reading, as the context's
     * own cudaMalloc'd scratch of the kernel tests is never cleared: left alone, as
     * the emulation leaves a large block's pages untouched (290 MiB of the 297 MiB
     * reserved by the small GPTs of the emulated tests). Runs with that part filled
     * with NaN bytes instead gave the same losses and norms, bit for bit (GPT fp32,
     * bf16, fp16, tp 2; MLP; CNN). */
    size_t own = tr_device_round(TR_CUDA_BACKEND_BYTES);
    TR_CUDA_CHECK(cudaMemsetAsync((unsigned char *)p + own, 0, g_arena.cap - own,
                                  tr_cuda_stream()));
    tr_cuda_ctx_adopt(tr_arena_take(&g_arena, TR_CUDA_BACKEND_BYTES,
                                    "the CUDA backend (cuBLAS workspace, scratch)"),
                      TR_CUDA_BACKEND_BYTES);
    return 0;
}

static double gpu_beyond_reservation(void)
{
    size_t free_b = 0, total_b = 0;
    TR_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    return (double)g_free_before - (double)free_b - (double)g_arena.cap;
}

/* zeroed by the reservation's memset */
static void *gpu_alloc(size_t bytes, const char *what) { return tr_arena_take(&g_arena, bytes, what); }

static void gpu_free(void *) {} /* the reservation is given back whole */

static void gpu_release(void)
{
    if (g_arena.base) {
        tr_cuda_stream_wait(tr_cuda_stream());
        tr_cuda_ctx_give_back();
        tr_arena_unpoison(&g_arena);
        TR_CUDA_CHECK(cudaFree(g_arena.base));
    }
    memset(&g_arena, 0, sizeof g_arena);
}

static void gpu_zero(void *p, size_t bytes)
{
    if (bytes)
        TR_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, tr_cuda_stream()));
}

static void gpu_copy(void *dst, const void *src, size_t bytes)
{
    if (bytes && dst != src)
        TR_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, tr_cuda_stream()));
}


extern "C" const tr_device tr_gpu_device = {
    .name = "cuda",
    .k = &tr_cuda_kernels,
    .host_memory = 0,
    .reserve = gpu_reserve,
    .backend_bytes = TR_CUDA_BACKEND_BYTES,
    .beyond_reservation = gpu_beyond_reservation,
    .alloc = gpu_alloc,
    .free = gpu_free,
    .release = gpu_release,
    .zero = gpu_zero,
    .upload = tr_cuda_upload,
    .download = tr_cuda_download,
    .copy = gpu_copy,
    .peak_gflops = tr_cuda_peak_gflops,
    .holds = tr_nccl_is_device, /* (CUDA's pointer attributes) */
    .open = NULL,
    .close = NULL,
};
