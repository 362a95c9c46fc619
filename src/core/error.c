/* error.c: fatal errors with rank, file and line. */
#include "error.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static tr_abort_fn g_abort;
static pthread_t g_abort_thread; /* the thread that installed it: MPI's, FUNNELED */
static int g_rank = -1;

void tr_error_set_abort(tr_abort_fn abort_fn, int rank)
{
    g_abort = abort_fn;
    g_abort_thread = pthread_self();
    g_rank = rank;
}

int tr_error_rank(void) { return g_rank; }

/* What a rank wrote must reach the user before its job is torn down: the launcher
 * forwards each rank's output through pipes, on its own time, and MPICH's Hydra, told
 * of an abort or an exit, dropped what it had not yet forwarded, the message and the
 * rank's earlier lines alike (7 of 40 runs of a data error at step time, 2 ranks; 0
 * of 100 with this pause). The job is ending anyway, and the other ranks wait for
 * nothing from this one. */
void tr_error_let_output_drain(void) { usleep(300000); }

noreturn void tr_fatal_at(const char *file, int line, int code, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (g_rank >= 0)
        fprintf(stderr, "[rank %d] %s:%d: %s\n", g_rank, file, line, msg);
    else
        fprintf(stderr, "%s:%d: %s\n", file, line, msg);
    fflush(stderr);
    if (g_abort) {
        fflush(stdout);
        tr_error_let_output_drain();
    }
    /* The hook calls MPI, which only the thread that installed it may (the library
     * runs MPI_THREAD_FUNNELED), and exit() would run atexit handlers under threads
     * still at work. Another thread (the data prefetcher, an OpenMP worker) ends the
     * process at once instead; the launcher then ends the other ranks, as it does for
     * any rank that dies (mpirun; srun's step, whose other tasks it kills). */
    if (g_abort && !pthread_equal(pthread_self(), g_abort_thread))
        _exit(code);
    if (g_abort)
        g_abort(code);
    exit(code);
}
