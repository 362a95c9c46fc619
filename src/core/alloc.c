/* alloc.c: tr_alloc and tr_free (error.h), memory with a purpose.
 *
 * Small blocks come from malloc and are zeroed. Large ones (TR_MAP_BYTES and up: a
 * model's parameters, gradients and optimizer state, its larger activations and data
 * buffers) are mapped from the kernel directly, aligned to 2 MiB and advised as
 * transparent huge pages:
 *  - a fresh mapping reads as zeros, so set-up writes nothing: each page is faulted
 *    in where it is first written, by the threads that compute with it (on a node of
 *    several sockets, first touch puts it near them), instead of by one memset that
 *    writes gigabytes twice (the kernel's zero page fill, then ours);
 *  - a 2 MiB page is one fault where 4 KiB pages take 512, and one TLB entry for the
 *    GEMMs' and the element-wise passes' streams. On the development VM, whose page
 *    faults are slow, GPT-2 124M's set-up went from 16-19 s to 5-7 s
 *    (docs/performance.md, "Host memory").
 * Where the kernel has no huge page to give (THP off, memory fragmented) the mapping
 * works as before with 4 KiB pages. TRAINER_HUGEPAGES=0 in the environment keeps
 * every block on malloc, zeroed at once, as before. Under AddressSanitizer every
 * block comes from malloc too, whose redzones catch a kernel running past a tensor. */
/* MADV_HUGEPAGE: _GNU_SOURCE, which CMake defines */
#include "error.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* glibc's malloc maps every block this large afresh anyway (its largest mmap
 * threshold, 64-bit): a block of it or more was a new mapping, faulted in page by page
 * by memset, each time. Smaller blocks stay with malloc, which reuses them: those that
 * kernels take and give back each call (a T x T dropout mask per head) would otherwise
 * be a mapping, a zeroing by the kernel and an unmapping (a TLB shootdown across the
 * threads) each time. */
#define TR_MAP_BYTES ((size_t)32 << 20)
#define TR_HUGE_PAGE ((size_t)2 << 20)

#if defined(__SANITIZE_ADDRESS__)
#define TR_MAP_ALLOWED 0
#else
#define TR_MAP_ALLOWED 1
#endif

/* The mapped blocks, for tr_free to tell them from malloc's: a few hundred at most
 * (a model's large buffers), made at set-up and freed at the end. */
typedef struct mapping {
    void *p;
    size_t len;
} mapping;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static mapping *g_maps;
static size_t g_nmaps, g_cap;

static int mapping_wanted(size_t bytes)
{
    if (!TR_MAP_ALLOWED || bytes < TR_MAP_BYTES)
        return 0;
    const char *e = getenv("TRAINER_HUGEPAGES");
    return !(e && strcmp(e, "0") == 0);
}

/* Maps `bytes` at a 2 MiB boundary (so every whole 2 MiB of the block can be one huge
 * page) and records it; NULL where the kernel refuses, for malloc to try. */
static void *map_block(size_t bytes)
{
    size_t page = 4096, len = (bytes + page - 1) & ~(page - 1);
    size_t span = len + TR_HUGE_PAGE;
    unsigned char *raw =
        mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED)
        return NULL;
    uintptr_t a = ((uintptr_t)raw + TR_HUGE_PAGE - 1) & ~(uintptr_t)(TR_HUGE_PAGE - 1);
    unsigned char *p = (unsigned char *)a;
    size_t head = (size_t)(p - raw), tail = span - head - len;
    if (head)
        munmap(raw, head);
    if (tail)
        munmap(p + len, tail);
#ifdef MADV_HUGEPAGE
    (void)madvise(p, len, MADV_HUGEPAGE); /* advice only: EINVAL without THP */
#endif
    pthread_mutex_lock(&g_lock);
    if (g_nmaps == g_cap) {
        size_t cap = g_cap ? 2 * g_cap : 64;
        mapping *m = realloc(g_maps, cap * sizeof *m);
        if (!m) {
            pthread_mutex_unlock(&g_lock);
            munmap(p, len);
            return NULL;
        }
        g_maps = m, g_cap = cap;
    }
    g_maps[g_nmaps++] = (mapping){p, len};
    pthread_mutex_unlock(&g_lock);
    return p;
}

/* Unmaps p if it is a mapped block; 0 if it is not one. */
static int unmap_block(void *p)
{
    pthread_mutex_lock(&g_lock);
    for (size_t i = g_nmaps; i-- > 0;) {
        if (g_maps[i].p != p)
            continue;
        size_t len = g_maps[i].len;
        g_maps[i] = g_maps[--g_nmaps];
        pthread_mutex_unlock(&g_lock);
        munmap(p, len);
        return 1;
    }
    pthread_mutex_unlock(&g_lock);
    return 0;
}

void *tr_alloc_at(const char *file, int line, size_t bytes, const char *what)
{
    if (bytes == 0)
        bytes = 64;
    if (mapping_wanted(bytes)) {
        void *p = map_block(bytes);
        if (p)
            return p; /* zeros already: a fresh anonymous mapping */
    }
    size_t rounded = (bytes + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, rounded);
    if (!p)
        tr_fatal_at(file, line, TR_EXIT_OSERR,
                    "out of memory allocating %.1f MiB for %s; reduce batch_size or model size, "
                    "or use more ranks",
                    (double)bytes / (1024.0 * 1024.0), what);
    memset(p, 0, rounded);
    return p;
}

void tr_free(void *p)
{
    if (p && !unmap_block(p))
        free(p);
}
