/* comm_shm.c: the node-local all-reduce through an MPI shared-memory window (see
 * comm_shm.h for why).
 *
 * Each rank owns a segment of 2 x chunk floats in the window. One chunk of the
 * buffer goes through one half of every segment:
 *   1. every rank copies its chunk into its own half;            barrier
 *   2. rank r sums slice r of the chunk over every rank's half,
 *      in rank order, and writes it over slice r of its own half; barrier
 *   3. every rank copies slice r' from rank r''s half, for all r'.
 * No rank writes what another reads between two barriers: in 2, the others read
 * slice r of my half only after the barrier that ends 2, and I overwrite only
 * slice r. The next chunk uses the other half, so a rank may start writing it
 * (step 1) while others still read this one (step 3); the chunk after that reuses
 * this half only once everyone has passed the next chunk's barriers, that is, has
 * finished step 3 here. The halves alternate across calls too (`ops`).
 *
 * Memory ordering: the window is locked once (lock_all) and every barrier is wrapped
 * in MPI_Win_sync, the pattern MPI-3 gives for load/store access to a shared window
 * in the unified model. */
#include "comm_shm.h"
#include "core/error.h"

#include <string.h>

/* slice boundaries on 64-byte lines, so that each thread's and rank's part starts
 * aligned and vectorises whole */
#define SLICE_ALIGN 16
/* the summing loop accumulates a tile in a local array, one rank after another:
 * 4 KiB stays in L1 while every rank's tile streams through it */
#define TILE 1024
/* below this many floats a copy or a slice is not worth waking the threads */
#define PAR_MIN ((size_t)1 << 15)

struct tr_shm {
    MPI_Comm comm; /* the group's ranks, same order, all on this node */
    MPI_Win win;
    int rank, size;
    size_t chunk;
    float **seg;        /* seg[r]: rank r's 2 x chunk floats, mapped here */
    unsigned long ops;  /* chunks reduced so far: its parity picks the half */
};

static void check(int rc, const char *what)
{
    if (rc == MPI_SUCCESS)
        return;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    tr_fatal(TR_EXIT_SOFTWARE, "shared-memory all-reduce: %s failed: %s", what, msg);
}

tr_shm *tr_shm_create(MPI_Comm comm, size_t chunk)
{
    int rank, size, node_size = 0;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    MPI_Comm node;
    check(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node),
          "MPI_Comm_split_type");
    MPI_Comm_size(node, &node_size);
    int local = node_size == size, all_local = 0;
    check(MPI_Allreduce(&local, &all_local, 1, MPI_INT, MPI_MIN, comm), "MPI_Allreduce");
    if (!all_local) {
        MPI_Comm_free(&node);
        return NULL;
    }
    MPI_Comm_set_errhandler(node, MPI_ERRORS_RETURN);
    /* noncontig: each rank's segment on pages of its own (first touched by its owner) */
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "alloc_shared_noncontig", "true");
    float *base = NULL;
    MPI_Win win;
    int got = MPI_Win_allocate_shared((MPI_Aint)(2 * chunk * sizeof(float)), sizeof(float),
                                      info, node, &base, &win) == MPI_SUCCESS,
        all_got = 0;
    MPI_Info_free(&info);
    check(MPI_Allreduce(&got, &all_got, 1, MPI_INT, MPI_MIN, node), "MPI_Allreduce");
    if (!all_got) { /* e.g. a small /dev/shm: MPI_Allreduce does the work instead */
        if (got)
            MPI_Win_free(&win);
        MPI_Comm_free(&node);
        return NULL;
    }
    tr_shm *s = tr_alloc(sizeof *s, "shared-memory all-reduce");
    s->comm = node;
    s->win = win;
    s->rank = rank;
    s->size = size;
    s->chunk = chunk;
    s->ops = 0;
    s->seg = tr_alloc((size_t)size * sizeof *s->seg, "shared-memory segments");
    for (int r = 0; r < size; r++) {
        MPI_Aint bytes;
        int disp;
        check(MPI_Win_shared_query(win, r, &bytes, &disp, &s->seg[r]), "MPI_Win_shared_query");
    }
    check(MPI_Win_lock_all(MPI_MODE_NOCHECK, win), "MPI_Win_lock_all");
    return s;
}

void tr_shm_free(tr_shm *s)
{
    if (!s)
        return;
    MPI_Win_unlock_all(s->win);
    MPI_Win_free(&s->win);
    MPI_Comm_free(&s->comm);
    tr_free(s->seg);
    tr_free(s);
}

static void sync_all(tr_shm *s)
{
    check(MPI_Win_sync(s->win), "MPI_Win_sync");
    check(MPI_Barrier(s->comm), "MPI_Barrier");
    check(MPI_Win_sync(s->win), "MPI_Win_sync");
}

/* [lo, hi) of part p of n items cut in `parts`, on SLICE_ALIGN boundaries */
static void slice(size_t n, int parts, int p, size_t *lo, size_t *hi)
{
    size_t per = (n + (size_t)parts - 1) / (size_t)parts;
    per = (per + SLICE_ALIGN - 1) / SLICE_ALIGN * SLICE_ALIGN;
    size_t l = per * (size_t)p, h = l + per;
    *lo = l < n ? l : n;
    *hi = h < n ? h : n;
}

static void copy_floats(float *dst, const float *src, size_t n)
{
    long pieces = (long)((n + TILE * 16 - 1) / (TILE * 16));
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (long i = 0; i < pieces; i++) {
        size_t lo = (size_t)i * TILE * 16, len = n - lo < TILE * 16 ? n - lo : TILE * 16;
        memcpy(dst + lo, src + lo, len * sizeof(float));
    }
}

/* [lo, hi) of half `half` of every segment, summed in rank order into dst[0, hi - lo) */
static void sum_range(const tr_shm *s, size_t half, size_t lo, size_t hi, float *dst)
{
    long tiles = (long)((hi - lo + TILE - 1) / TILE);
#pragma omp parallel for schedule(static) if (hi - lo >= PAR_MIN)
    for (long t = 0; t < tiles; t++) {
        size_t a = lo + (size_t)t * TILE, n = hi - a < TILE ? hi - a : TILE;
        float acc[TILE];
        const float *x0 = s->seg[0] + half + a;
        for (size_t i = 0; i < n; i++)
            acc[i] = x0[i];
        for (int r = 1; r < s->size; r++) {
            const float *x = s->seg[r] + half + a;
            for (size_t i = 0; i < n; i++)
                acc[i] += x[i];
        }
        memcpy(dst + (a - lo), acc, n * sizeof(float));
    }
}

/* The next chunk's half of every segment (they alternate, see the top). */
static size_t next_half(tr_shm *s) { return (s->ops++ & 1) * s->chunk; }

/* The part [*a, *b) of rank r's part of the buffer, [displs[r], + counts[r]), that
 * falls in the chunk [off, off + n), relative to off; 0 when there is none. */
static int part_in_chunk(const size_t *counts, const size_t *displs, int r, size_t off,
                         size_t n, size_t *a, size_t *b)
{
    size_t lo = displs[r] > off ? displs[r] : off;
    size_t hi = displs[r] + counts[r] < off + n ? displs[r] + counts[r] : off + n;
    if (lo >= hi)
        return 0;
    *a = lo - off;
    *b = hi - off;
    return 1;
}

/* the extent of the parts: every element of [0, end) belongs to a part or to none */
static size_t parts_end(const tr_shm *s, const size_t *counts, const size_t *displs)
{
    size_t end = 0;
    for (int r = 0; r < s->size; r++)
        if (displs[r] + counts[r] > end)
            end = displs[r] + counts[r];
    return end;
}

void tr_shm_allreduce_f32(tr_shm *s, const float *send, float *recv, size_t count,
                          void (*open)(void), void (*close)(void))
{
    if (open)
        open();
    for (size_t off = 0; off < count; off += s->chunk) {
        size_t n = count - off < s->chunk ? count - off : s->chunk;
        size_t half = next_half(s), lo, hi;
        copy_floats(s->seg[s->rank] + half, send + off, n);
        sync_all(s);
        slice(n, s->size, s->rank, &lo, &hi);
        sum_range(s, half, lo, hi, s->seg[s->rank] + half + lo);
        sync_all(s);
        for (int r = 0; r < s->size; r++) {
            slice(n, s->size, r, &lo, &hi);
            copy_floats(recv + off + lo, s->seg[r] + half + lo, hi - lo);
        }
    }
    if (close)
        close();
}

/* One barrier per chunk is enough for the two below: what is read after it (every
 * half) is not written again before the barrier of the chunk after next, and the
 * results go to each rank's own buffer, which nobody else reads. */
void tr_shm_reduce_scatterv_f32(tr_shm *s, float *buf, const size_t *counts,
                                const size_t *displs, void (*open)(void),
                                void (*close)(void))
{
    size_t count = parts_end(s, counts, displs);
    if (open)
        open();
    for (size_t off = 0; off < count; off += s->chunk) {
        size_t n = count - off < s->chunk ? count - off : s->chunk;
        size_t half = next_half(s), a, b;
        copy_floats(s->seg[s->rank] + half, buf + off, n);
        sync_all(s);
        if (part_in_chunk(counts, displs, s->rank, off, n, &a, &b))
            sum_range(s, half, a, b, buf + off + a);
    }
    if (close)
        close();
}

void tr_shm_allgatherv_f32(tr_shm *s, float *buf, const size_t *counts, const size_t *displs,
                           void (*open)(void), void (*close)(void))
{
    size_t count = parts_end(s, counts, displs);
    if (open)
        open();
    for (size_t off = 0; off < count; off += s->chunk) {
        size_t n = count - off < s->chunk ? count - off : s->chunk;
        size_t half = next_half(s), a, b;
        if (part_in_chunk(counts, displs, s->rank, off, n, &a, &b))
            copy_floats(s->seg[s->rank] + half + a, buf + off + a, b - a);
        sync_all(s);
        for (int r = 0; r < s->size; r++)
            if (r != s->rank && part_in_chunk(counts, displs, r, off, n, &a, &b))
                copy_floats(buf + off + a, s->seg[r] + half + a, b - a);
    }
    if (close)
        close();
}
