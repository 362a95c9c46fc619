/* device.c: the CPU device and the guarded CPU device (device.h). */
#include "backend/device.h"
#include "backend/calibrate.h"
#include "core/error.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---- the CPU: host memory, nothing reserved ------------------------------------ */

static int cpu_reserve(size_t bytes, size_t *room, char *err, size_t errlen) { return 0; }
/* measured: a short GEMM timing on the rank's own threads */
static double cpu_peak(char *source, size_t n)
{
    snprintf(source, n, "measured: 1024^3 GEMMs for 0.3 s on this rank's threads");
    return tr_calibrate_peak_gflops(&tr_cpu_kernels);
}
static void *cpu_alloc(size_t bytes, const char *what) { return tr_alloc(bytes, what); }
static void cpu_release(void) {}
/* Zeroing the gradients is a pass over a megabyte or more every step: one thread
 * doing it alone leaves the rest of the team spinning at the next parallel region,
 * so large blocks are cut into 64 KiB pieces shared by the team. */
#define ZERO_PIECE ((size_t)1 << 16)
static void cpu_zero(void *p, size_t bytes)
{
    long pieces = (long)((bytes + ZERO_PIECE - 1) / ZERO_PIECE);
#pragma omp parallel for schedule(static) if (pieces >= 4)
    for (long i = 0; i < pieces; i++) {
        size_t lo = (size_t)i * ZERO_PIECE;
        memset((char *)p + lo, 0, bytes - lo < ZERO_PIECE ? bytes - lo : ZERO_PIECE);
    }
}
static void cpu_move(void *dst, const void *src, size_t bytes)
{
    if (bytes && dst != src)
        memmove(dst, src, bytes);
}

const tr_device tr_cpu_device = {
    .name = "cpu",
    .k = &tr_cpu_kernels,
    .host_memory = 1,
    .reserve = cpu_reserve,
    .alloc = cpu_alloc,
    .free = tr_free,
    .release = cpu_release,
    .zero = cpu_zero,
    .upload = cpu_move,
    .download = cpu_move,
    .copy = cpu_move,
    .peak_gflops = cpu_peak,
    .holds = NULL,
    .open = NULL,
    .close = NULL,
};

/* ---- the guarded CPU: one arena, unreadable outside kernels and transfers ------ */

static tr_arena g_arena;
static int g_depth; /* open() nesting */

static void protect(int prot)
{
    if (g_arena.base && mprotect(g_arena.base, g_arena.cap, prot))
        tr_fatal(TR_EXIT_OSERR, "mprotect of the guarded device arena: %s", strerror(errno));
}

void tr_guarded_open(void)
{
    if (g_depth++ == 0)
        protect(PROT_READ | PROT_WRITE);
}

void tr_guarded_close(void)
{
    if (g_depth <= 0)
        tr_fatal(TR_EXIT_SOFTWARE, "bug: guarded device closed more often than opened");
    if (--g_depth == 0)
        protect(PROT_NONE);
}

static int guarded_reserve(size_t bytes, size_t *room, char *err, size_t errlen)
{
    if (g_arena.base)
        tr_fatal(TR_EXIT_SOFTWARE, "bug: the guarded device reserved twice");
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t size = (tr_arena_bytes(bytes) + page - 1) / page * page;
    if (size == 0)
        size = page;
    void *p = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        *room = 0; /* address space, not memory: no figure */
        snprintf(err, errlen, "mmap of %.1f MiB failed",
                 (double)size / 1048576.0);
        return TR_EXIT_OSERR;
    }
    tr_arena_init(&g_arena, p, bytes);
    g_arena.cap = size; /* whole pages, for mprotect */
    g_depth = 0;
    return 0;
}

/* mmap's pages start zero */
static void *guarded_alloc(size_t bytes, const char *what) { return tr_arena_take(&g_arena, bytes, what); }

static void guarded_free(void *p) {}

static void guarded_release(void)
{
    if (g_arena.base) {
        tr_arena_unpoison(&g_arena);
        munmap(g_arena.base, g_arena.cap);
    }
    memset(&g_arena, 0, sizeof g_arena);
    g_depth = 0;
}

static void guarded_zero(void *p, size_t bytes)
{
    tr_guarded_open();
    memset(p, 0, bytes);
    tr_guarded_close();
}

static void guarded_move(void *dst, const void *src, size_t bytes)
{
    tr_guarded_open();
    cpu_move(dst, src, bytes);
    tr_guarded_close();
}

static int guarded_holds(const void *p)
{
    const unsigned char *c = p;
    return g_arena.base && c >= g_arena.base && c < g_arena.base + g_arena.cap;
}

const tr_device tr_guarded_device = {
    .name = "cpu-guarded",
    .k = &tr_guarded_kernels,
    .host_memory = 0,
    .reserve = guarded_reserve,
    .alloc = guarded_alloc,
    .free = guarded_free,
    .release = guarded_release,
    .zero = guarded_zero,
    .upload = guarded_move,
    .download = guarded_move,
    .copy = guarded_move,
    .peak_gflops = cpu_peak,
    .holds = guarded_holds,
    .open = tr_guarded_open,
    .close = tr_guarded_close,
};
