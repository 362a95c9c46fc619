/* fault_preload.c: a preload library (LD_PRELOAD) that makes one rank misbehave the
 * way a bad node does, for the tests of what the trainer does about it, without a
 * test hook in the trainer. A rank is chosen by the rank its launcher gave it (Open
 * MPI's OMPI_COMM_WORLD_RANK, PMIx's PMIX_RANK or MPICH Hydra's PMI_RANK); every other
 * process (mpirun included) runs as usual. Not Slurm's SLURM_PROCID: a batch script,
 * and the mpirun it starts, have SLURM_PROCID=0 too.
 *   TR_TEST_HANG_RANK=R  pthread_join never returns on rank R, as a thread stuck on a
 *                        dead file system or a GPU stuck in cudaFree leaves a rank at
 *                        the end of a run. The trainer's one join before its
 *                        watchdog stops is the data loader's, at shutdown
 *                        (mpi.hang_watchdog).
 *   TR_TEST_SLOW_RANK=R  each cblas_sgemm on rank R first sleeps TR_TEST_SLOW_US
 *                        microseconds (default 2000), as a throttled or shared node
 *                        runs slow (mpi.straggler).
 *   TR_TEST_THREAD_ENOSPC_RANK=R  pwrite from any thread but the main one fails with
 *                        ENOSPC on rank R, as a disk that fills up while a
 *                        checkpoint is written in the background (checkpoint.async:
 *                        only its writer thread writes off the main thread;
 *                        mpi.checkpoint_errors).
 *   TR_TEST_TMP_ENOSPC_RANK=R  every write to a file whose name ends in .h5.tmp (a
 *                        checkpoint being written) fails with ENOSPC on rank R, as a
 *                        disk or a quota that fills up on one node only
 *                        (mpi.checkpoint_errors).
 *   TR_TEST_CRASH_LINK_RANK=R, TR_TEST_CRASH_LINK_FROM=NAME  a hard link made from a
 *                        path ending in NAME kills rank R (SIGKILL) before it is
 *                        made, as a node failing between a step's checkpoint and
 *                        best.h5's link to it (mpi.best_checkpoint).
 *   TR_TEST_CRASH_SYMLINK_RANK=R, TR_TEST_CRASH_SYMLINK_TO=NAME  a symbolic link made
 *                        to a target ending in NAME kills rank R (SIGKILL) before it
 *                        is made, as a node failing as last.h5 is pointed at a new
 *                        checkpoint (mpi.checkpoint_errors).
 *   TR_TEST_EIO_READ_RANK=R, TR_TEST_EIO_READ_NAME=NAME  fopen for reading of a path
 *                        ending in NAME fails with EIO on rank R, as a file on a file
 *                        system gone stale or a failing disk (mpi.checkpoint_errors:
 *                        a resumed run's metrics.csv). */
#define _GNU_SOURCE
#include <cblas.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

/* this process's rank as its launcher set it, NULL in a process no launcher started
 * as a rank */
static const char *launcher_rank(void)
{
    const char *vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", NULL};
    for (int i = 0; vars[i]; i++)
        if (getenv(vars[i]))
            return getenv(vars[i]);
    return NULL;
}

static int is_rank(const char *var)
{
    const char *want = getenv(var), *rank = launcher_rank();
    return want && rank && strcmp(want, rank) == 0;
}

typedef int join_fn(pthread_t, void **);

int pthread_join(pthread_t thread, void **result)
{
    if (is_rank("TR_TEST_HANG_RANK"))
        for (;;)
            pause();
    join_fn *real = (join_fn *)dlsym(RTLD_NEXT, "pthread_join");
    return real(thread, result);
}

typedef void sgemm_fn(const enum CBLAS_ORDER, const enum CBLAS_TRANSPOSE,
                      const enum CBLAS_TRANSPOSE, const blasint, const blasint, const blasint,
                      const float, const float *, const blasint, const float *, const blasint,
                      const float, float *, const blasint);

void cblas_sgemm(const enum CBLAS_ORDER order, const enum CBLAS_TRANSPOSE ta,
                 const enum CBLAS_TRANSPOSE tb, const blasint m, const blasint n, const blasint k,
                 const float alpha, const float *a, const blasint lda, const float *b,
                 const blasint ldb, const float beta, float *c, const blasint ldc)
{
    if (is_rank("TR_TEST_SLOW_RANK")) {
        const char *us = getenv("TR_TEST_SLOW_US");
        usleep(us ? (useconds_t)atol(us) : 2000);
    }
    sgemm_fn *real = (sgemm_fn *)dlsym(RTLD_NEXT, "cblas_sgemm");
    real(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* TR_TEST_TMP_ENOSPC_RANK: fd is a checkpoint being written on the chosen rank */
static int full_checkpoint(int fd)
{
    if (!is_rank("TR_TEST_TMP_ENOSPC_RANK"))
        return 0;
    char link[64], path[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    return n > 7 && !memcmp(path + n - 7, ".h5.tmp", 7);
}

typedef ssize_t pwrite_fn(int, const void *, size_t, off_t);

static ssize_t pwrite_or_full(const char *name, int fd, const void *buf, size_t n, off_t at)
{
    if ((is_rank("TR_TEST_THREAD_ENOSPC_RANK") && syscall(SYS_gettid) != getpid()) ||
        full_checkpoint(fd)) {
        errno = ENOSPC;
        return -1;
    }
    pwrite_fn *real = (pwrite_fn *)dlsym(RTLD_NEXT, name);
    return real(fd, buf, n, at);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t at)
{
    return pwrite_or_full("pwrite", fd, buf, n, at);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t at)
{
    return pwrite_or_full("pwrite64", fd, buf, n, at);
}

typedef ssize_t pwritev_fn(int, const struct iovec *, int, off_t);

static ssize_t pwritev_or_full(const char *name, int fd, const struct iovec *v, int count, off_t at)
{
    if (full_checkpoint(fd)) {
        errno = ENOSPC;
        return -1;
    }
    pwritev_fn *real = (pwritev_fn *)dlsym(RTLD_NEXT, name);
    return real(fd, v, count, at);
}

/* MPI-IO's writes (OpenMPI's fbtl) */
ssize_t pwritev(int fd, const struct iovec *v, int count, off_t at)
{
    return pwritev_or_full("pwritev", fd, v, count, at);
}

ssize_t pwritev64(int fd, const struct iovec *v, int count, off_t at)
{
    return pwritev_or_full("pwritev64", fd, v, count, at);
}

typedef ssize_t write_fn(int, const void *, size_t);

ssize_t write(int fd, const void *buf, size_t n)
{
    if (full_checkpoint(fd)) {
        errno = ENOSPC;
        return -1;
    }
    write_fn *real = (write_fn *)dlsym(RTLD_NEXT, "write");
    return real(fd, buf, n);
}

typedef int link_fn(const char *, const char *);

/* SIGKILL to this process where it is the rank rank_var names and path ends in the
 * name name_var gives */
static void crash_at(const char *rank_var, const char *name_var, const char *path)
{
    const char *name = getenv(name_var);
    size_t n = name ? strlen(name) : 0, len = strlen(path);
    if (is_rank(rank_var) && n && len >= n && !strcmp(path + len - n, name))
        raise(SIGKILL);
}

int link(const char *from, const char *to)
{
    crash_at("TR_TEST_CRASH_LINK_RANK", "TR_TEST_CRASH_LINK_FROM", from);
    link_fn *real = (link_fn *)dlsym(RTLD_NEXT, "link");
    return real(from, to);
}

typedef int symlink_fn(const char *, const char *);

int symlink(const char *target, const char *path)
{
    crash_at("TR_TEST_CRASH_SYMLINK_RANK", "TR_TEST_CRASH_SYMLINK_TO", target);
    symlink_fn *real = (symlink_fn *)dlsym(RTLD_NEXT, "symlink");
    return real(target, path);
}

typedef FILE *fopen_fn(const char *, const char *);

/* TR_TEST_EIO_READ_RANK: path, opened for reading on the chosen rank, ends in the name */
static int unreadable(const char *path, const char *mode)
{
    const char *name = getenv("TR_TEST_EIO_READ_NAME");
    size_t n = name ? strlen(name) : 0, len = strlen(path);
    return is_rank("TR_TEST_EIO_READ_RANK") && mode[0] == 'r' && !strchr(mode, '+') && n &&
           len >= n && !strcmp(path + len - n, name);
}

/* the real `sym` (fopen or fopen64), or EIO where unreadable */
static FILE *fopen_or_eio(const char *sym, const char *path, const char *mode)
{
    if (unreadable(path, mode)) {
        errno = EIO;
        return NULL;
    }
    fopen_fn *real = (fopen_fn *)dlsym(RTLD_NEXT, sym);
    return real(path, mode);
}

FILE *fopen(const char *path, const char *mode) { return fopen_or_eio("fopen", path, mode); }

FILE *fopen64(const char *path, const char *mode) { return fopen_or_eio("fopen64", path, mode); }
