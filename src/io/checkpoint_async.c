/* checkpoint_async.c: a checkpoint whose tensor data is written while training goes
 * on (checkpoint.h, tr_ckpt_async_*).
 *
 * Why: a synchronous checkpoint stops every rank for as long as the file system
 * takes to take the data (GPT-2 124M with AdamW: 1.4 GiB, about 6 s on this
 * project's test machine), which at a checkpoint every few hundred fast GPU steps is
 * a large share of the run. Here the main thread does the collective part (checks,
 * checksums, the file's structure, which rank 0 lays out through HDF5) and copies
 * this rank's part of the tensors into a buffer of its own, then goes back to
 * training; a thread
 * writes the copy into the places HDF5 allocated with pwrite and syncs it. The
 * thread makes no MPI or HDF5 call (the library runs MPI_THREAD_FUNNELED, and HDF5
 * is not built thread-safe). The end is collective and on the main thread, as in
 * tr_ckpt_write: every rank's data synced, then the rename; until then the file is
 * DIR/NAME.tmp, which no resume reads, so a crash mid-write loses only this one. */
#include "io/checkpoint_internal.h"
#include "core/watchdog.h"
#include "io/write_behind.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* One contiguous piece of this rank's data: file offset, length in bytes, and where
 * the thread takes it from (the copy, or the caller's stable tensors) */
typedef struct piece {
    uint64_t at, len;
    const char *src;
} piece;

struct tr_ckpt_async {
    char dir[4096];
    ckpt_names nm;
    int pending;  /* started and not finished (the main thread's) */
    int joinable; /* a thread was started and not joined */
    pthread_t thread;
    atomic_int written;     /* the thread's work is done (or failed) */
    atomic_ullong progress; /* bytes written so far: the watchdog's sign of life */
    int code;               /* the thread's verdict: 0 or TR_EXIT_IOERR with err */
    char err[8192];
    double t0, bytes; /* start time; tensor bytes of the whole file */
    char *copy;       /* this rank's data, its pieces back to back */
    size_t copy_cap;
    piece *pieces;
    size_t npieces, pieces_cap;
};

tr_ckpt_async *tr_ckpt_async_new(void)
{
    tr_ckpt_async *a = tr_alloc(sizeof *a, "background checkpoint");
    atomic_init(&a->written, 0);
    atomic_init(&a->progress, 0);
    return a;
}

void tr_ckpt_async_free(tr_ckpt_async *a)
{
    if (!a)
        return;
    if (a->joinable) /* a run ending on an error: its file stays a temporary one */
        pthread_join(a->thread, NULL);
    tr_free(a->copy);
    tr_free(a->pieces);
    tr_free(a);
}

int tr_ckpt_async_pending(const tr_ckpt_async *a) { return a && a->pending; }

int tr_ckpt_async_written(const tr_ckpt_async *a)
{
    return !a || !a->pending || atomic_load(&a->written);
}

/* the first failure, as "<what> '<file>' <how>: <errno's words>" */
static void thread_fail(tr_ckpt_async *a, const char *what, const char *how, int e)
{
    if (!a->code)
        snprintf(a->err, sizeof a->err, "%s '%.4200s' %s: %s", what, a->nm.tmp, how, strerror(e));
    a->code = TR_EXIT_IOERR;
}

/* The thread: the copy into its places, then synced to stable storage */
static void *write_copy(void *arg)
{
    tr_ckpt_async *a = arg;
    int fd = open(a->nm.tmp, O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
        thread_fail(a, "cannot reopen", "for its data", errno);
    } else {
        tr_write_behind wb; /* the page cache kept to a few chunks (write_behind.h) */
        tr_write_behind_fd(&wb, fd);
        for (size_t i = 0; i < a->npieces && !a->code; i++) {
            const char *src = a->pieces[i].src;
            uint64_t done = 0, len = a->pieces[i].len;
            while (done < len) {
                size_t chunk = len - done < TR_WRITE_BEHIND_BYTES ? (size_t)(len - done)
                                                                  : (size_t)TR_WRITE_BEHIND_BYTES;
                ssize_t w = pwrite(fd, src + done, chunk, (off_t)(a->pieces[i].at + done));
                if (w < 0 && errno == EINTR)
                    continue;
                if (w <= 0) { /* 0: nothing taken, as good as a full disk */
                    thread_fail(a, "writing the data of", "failed", w < 0 ? errno : ENOSPC);
                    break;
                }
                done += (uint64_t)w;
                atomic_fetch_add(&a->progress, (unsigned long long)w);
                tr_write_behind_wrote(&wb, (uint64_t)w);
            }
        }
        if (!a->code && fdatasync(fd))
            thread_fail(a, "syncing", "failed (disk full or I/O error)", errno);
        if (close(fd) && !a->code)
            thread_fail(a, "closing", "failed", errno);
    }
    atomic_store(&a->written, 1);
    return NULL;
}

/* The copy's memory, not zeroed (the copy fills it), in transparent huge pages where
 * the kernel gives them on request (THP "madvise", Debian's default): its first
 * touch, one fault per 2 MiB instead of 512, took GPT-2 124M's first background
 * checkpoint on the test machine (a virtual one, 1.4 GiB) from 7.1 to 2.9 s. Only
 * here: the same hint for the trainer's other buffers made its steps 2-3 % slower
 * there. */
static char *alloc_copy(size_t bytes)
{
    const size_t huge = (size_t)2 << 20;
    size_t rounded = (bytes + huge - 1) & ~(huge - 1);
    char *p = aligned_alloc(huge, rounded);
    if (!p)
        tr_fatal(TR_EXIT_OSERR,
                 "out of memory allocating %.1f MiB for the copy of a checkpoint written in the "
                 "background; set [checkpoint] async = false, or use more ranks",
                 (double)bytes / 1048576.0);
#ifdef MADV_HUGEPAGE
    (void)madvise(p, rounded, MADV_HUGEPAGE); /* a hint: refused, nothing changes */
#endif
    return p;
}

/* this rank's runs of t, with where they go in the file: copied back to back, or,
 * where t stays unchanged until the write is finished (stable), as they are */
static void take_copy(tr_ckpt_async *a, const tr_ckpt_tensor *t, int n, const uint64_t *where,
                      int stable)
{
    size_t nruns = 0, total = 0;
    run *runs = ckpt_own_runs(t, n, &nruns);
    for (size_t i = 0; i < nruns; i++)
        total += runs[i].len * sizeof(float);
    if (!stable && total > a->copy_cap) {
        tr_free(a->copy);
        a->copy = alloc_copy(total);
        a->copy_cap = total;
    }
    if (nruns > a->pieces_cap) {
        tr_free(a->pieces);
        a->pieces = tr_alloc(nruns * sizeof *a->pieces, "checkpoint pieces");
        a->pieces_cap = nruns;
    }
    char *dst = a->copy;
    for (size_t i = 0; i < nruns; i++) {
        size_t len = runs[i].len * sizeof(float);
        const char *data = (const char *)ckpt_run_data(&t[runs[i].t], &runs[i]);
        if (!stable) {
            memcpy(dst, data, len);
            data = dst;
            dst += len;
        }
        a->pieces[i] = (piece){where[runs[i].t] + runs[i].off * sizeof(float), len, data};
    }
    a->npieces = nruns;
    tr_free(runs);
}

int tr_ckpt_async_start(tr_ckpt_async *a, const char *dir, const char *name,
                        const tr_ckpt_meta *meta, const tr_ckpt_tensor *t, int n, int stable,
                        tr_group *g, char *err, size_t errlen)
{
    if (a->pending)
        tr_fatal(TR_EXIT_SOFTWARE, "bug: a checkpoint started before the last one finished");
    a->t0 = tr_wtime();
    snprintf(a->dir, sizeof a->dir, "%s", dir);
    ckpt_names_of(&a->nm, dir, name, meta->step);
    uint64_t *where = tr_alloc((size_t)(n ? n : 1) * sizeof *where, "checkpoint offsets");
    int code = ckpt_write_begin(dir, &a->nm, meta, t, n, g, where, &a->bytes, err, errlen);
    if (code) {
        tr_free(where);
        return ckpt_write_end(dir, &a->nm, code, g, err, errlen); /* removes the file */
    }
    take_copy(a, t, n, where, stable);
    tr_free(where);
    a->code = 0;
    a->err[0] = '\0';
    atomic_store(&a->written, 0);
    atomic_store(&a->progress, 0);
    /* signals stay with the main thread (the thread starts with this mask) */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    a->joinable = !pthread_create(&a->thread, NULL, write_copy, a);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!a->joinable) /* no thread to be had: written now, as tr_ckpt_write would */
        write_copy(a);
    a->pending = 1;
    return 0;
}

int tr_ckpt_async_finish(tr_ckpt_async *a, tr_group *g, tr_ckpt_stats *stats, char *err,
                         size_t errlen)
{
    if (!a || !a->pending)
        return 0;
    /* the watchdog hears from this rank while its thread makes progress; a write
     * that stands still for run.hang_minutes ends the job like any other hang */
    unsigned long long seen = ~0ULL;
    while (!atomic_load(&a->written)) {
        unsigned long long now = atomic_load(&a->progress);
        if (now != seen)
            tr_watchdog_beat("the background write of a checkpoint", -1);
        seen = now;
        nanosleep(&(struct timespec){0, 5 * 1000 * 1000}, NULL);
    }
    if (a->joinable)
        pthread_join(a->thread, NULL);
    a->joinable = 0;
    a->pending = 0;
    err[0] = '\0';
    if (a->code)
        snprintf(err, errlen, "%s", a->err);
    int code = ckpt_write_end(a->dir, &a->nm, a->code, g, err, errlen);
    if (!code && stats) {
        stats->seconds = tr_wtime() - a->t0;
        stats->bytes = a->bytes;
    }
    return code;
}
