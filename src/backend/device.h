/* device.h: where a rank's model memory lives and how data gets in and out of it.
 *
 * The model, optimizer and gradient buffers live in device memory: ordinary host
 * memory on the CPU, GPU memory under CUDA. Code outside the kernels never reads or
 * writes them directly; it goes through this table (upload, download, zero, copy)
 * or through the collectives of comm.h. The CPU's table is plain memcpy/memset, so
 * the trainer runs one code path everywhere.
 *
 * The guarded CPU device (system.device = cpu-guarded) checks that rule without a
 * GPU: its memory is one arena that is unreadable (mprotect PROT_NONE) except while
 * a kernel, a transfer of this table or a collective runs, so host code that would
 * read GPU memory dies at once with SIGSEGV. Slow (two mprotect calls per kernel);
 * for tests.
 *
 * Memory is reserved once, up front, with the size the memory plan computed
 * (reserve), and handed out from there (alloc), so a run that does not fit fails at
 * start-up with the plan's numbers rather than in the middle of a step. */
#ifndef TR_DEVICE_H
#define TR_DEVICE_H

#include "backend/kernels.h"
#include "core/error.h"

#include <stddef.h>

typedef struct tr_device {
    const char *name;
    const tr_kernels *k;
    int host_memory; /* its memory is the host's: host code may use it directly */
    /* Reserves `bytes` of device memory for the allocations to come; 0, or an exit
     * code with err set (out of memory) and *room the bytes it could have had (0:
     * unknown), from which the message works out what would fit. The CPU reserves
     * nothing. */
    int (*reserve)(size_t bytes, size_t *room, char *err, size_t errlen);
    /* Bytes the backend itself takes out of the reservation, first, and that the
     * memory plan counts on a line of their own (CUDA: cuBLAS's workspace and the
     * context's scratch); 0 for the CPU devices. */
    size_t backend_bytes;
    /* Device memory in use beyond the reservation now, counted from just before it
     * was made (the libraries' and the driver's own: kernel code loaded on first
     * use, ...), for the report after the first step; NULL where there is no such
     * figure (the CPU devices). */
    double (*beyond_reservation)(void);
    void *(*alloc)(size_t bytes, const char *what); /* zeroed, 256-byte aligned */
    void (*free)(void *p);
    void (*release)(void); /* gives the reservation back; every alloc is then gone */
    void (*zero)(void *p, size_t bytes);
    void (*upload)(void *dst, const void *host_src, size_t bytes);
    void (*download)(void *host_dst, const void *src, size_t bytes);
    void (*copy)(void *dst, const void *src, size_t bytes); /* within the device */
    /* Peak GFLOP/s of one rank's share of the device for MFU, in the precision its
     * products run in (set_gemm_precision comes first), with where the figure comes
     * from in source[n] for the banner; 0: unknown. */
    double (*peak_gflops)(char *source, size_t n);
    /* Whether p is this device's memory (comm.h's staging asks); NULL where its
     * memory is the host's (the CPU). */
    int (*holds)(const void *p);
    /* Collectives on device memory run between these (guarded device; else NULL). */
    void (*open)(void);
    void (*close)(void);
} tr_device;

#ifdef __cplusplus
extern "C" {
#endif
extern const tr_device tr_cpu_device;
extern const tr_device tr_guarded_device;
#ifdef TRAINER_HAVE_CUDA
extern const tr_device tr_gpu_device; /* src/cuda/cuda_device_memory.cu */
#endif

/* Bytes a reservation needs for allocations of these sizes: each is rounded up to
 * the 256-byte alignment. */
static inline size_t tr_device_round(size_t bytes) { return (bytes + 255) & ~(size_t)255; }

/* Under AddressSanitizer, in the arenas of host memory (the guarded device, the CUDA
 * emulation), every allocation is followed by TR_ARENA_REDZONE poisoned bytes, and
 * its rounding to 256 bytes is poisoned too: a kernel that runs past its tensor's end
 * is stopped and named there, where a GPU would silently write the next tensor. The
 * plan's figures stay as they are: `size` and `used` count the plan's bytes, and the
 * reservation itself is tr_arena_bytes(size), the gaps' room added. nvcc's host pass
 * is left out: its device pointers have no shadow memory. */
#if defined(__SANITIZE_ADDRESS__) && !defined(__CUDACC__)
#include <sanitizer/asan_interface.h>
#define TR_ARENA_REDZONE ((size_t)256)
#else
#define TR_ARENA_REDZONE ((size_t)0)
#endif

/* A reservation handed out in order, never reused (the devices that reserve). */
typedef struct tr_arena {
    unsigned char *base;
    size_t size, used; /* the plan's bytes: reserved, handed out */
    size_t cap, gaps;  /* the reservation's bytes, the redzones handed out */
} tr_arena;

/* The bytes to reserve for a plan of `size` bytes: each allocation takes at least
 * 256 of them, and a redzone after it. */
static inline size_t tr_arena_bytes(size_t size)
{
    return size + (size / 256 + 1) * TR_ARENA_REDZONE;
}

static inline void tr_arena_init(tr_arena *a, void *base, size_t size)
{
    a->base = (unsigned char *)base;
    a->size = size;
    a->cap = tr_arena_bytes(size);
    a->used = a->gaps = 0;
}

static inline void *tr_arena_take(tr_arena *a, size_t bytes, const char *what)
{
    size_t n = tr_device_round(bytes ? bytes : 1);
    if (!a->base || a->used + n > a->size)
        tr_fatal(TR_EXIT_SOFTWARE,
                 "bug: the memory plan reserved %zu bytes of device memory, %s needs %zu more "
                 "after %zu", a->size, what, n, a->used);
    unsigned char *p = a->base + a->used + a->gaps;
    a->used += n;
#if defined(__SANITIZE_ADDRESS__) && !defined(__CUDACC__)
    ASAN_POISON_MEMORY_REGION(p + bytes, n - bytes + TR_ARENA_REDZONE);
    a->gaps += TR_ARENA_REDZONE;
#endif
    return p;
}

/* Before the reservation is given back: its memory may be reused by code that knows
 * nothing of the redzones. */
static inline void tr_arena_unpoison(const tr_arena *a)
{
#if defined(__SANITIZE_ADDRESS__) && !defined(__CUDACC__)
    if (a->base)
        ASAN_UNPOISON_MEMORY_REGION(a->base, a->cap);
#else
    (void)a;
#endif
}

/* The guarded device's arena: readable between open and close (they nest). */
void tr_guarded_open(void);
void tr_guarded_close(void);
extern const tr_kernels tr_guarded_kernels;
/* Its own entries where a backend may keep a tensor in a form of its own: it keeps a
 * language model's logits as a GPU does, in the format's 16 bits in bf16/fp16-mixed
 * runs, so the model's code for 16-bit logits runs on the CPU too
 * (device_guarded_logits.c); the kernel table's contract, kernels.h. */
int tr_guarded_logits_format(int format, int C, int Vl);
void tr_guarded_lm_head_forward(void *logits, const void *inp, const float *w, size_t BT, int C,
                                int Vl, int format, int lfmt, float *scratch);
void tr_guarded_xent_linear_backward(float *dinp, float *dw, void *logits, const float *stats,
                                     const int *targets, float scale, size_t BT, int Vl, int v0,
                                     int nreal, const void *inp, const float *w, int C,
                                     int format, int lfmt);
#ifdef __cplusplus
}
#endif

#endif
