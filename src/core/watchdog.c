/* watchdog.c: the no-progress timer of watchdog.h. */
#include "watchdog.h"

#include "error.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static struct {
    atomic_ulong beats;         /* advanced by every beat */
    _Atomic(const char *) what; /* the last beat's activity (a literal) */
    atomic_long step;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* on CLOCK_MONOTONIC: stop wakes the thread at once */
    int running, stop;
    double timeout, tick;
    int rank;
    const char *key;
} g = {.what = "the start"};

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* "[rank R] DATE: no progress for N s (KEY = M), since WHAT STEP" + tail, to stderr
 * without stdio's lock (the main thread may hold it) */
static void say(double idle, const char *tail)
{
    char when[32] = "";
    time_t t = time(NULL);
    struct tm tm;
    if (localtime_r(&t, &tm))
        strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
    const char *what = atomic_load_explicit(&g.what, memory_order_relaxed);
    long step = atomic_load_explicit(&g.step, memory_order_relaxed);
    char at[48] = "";
    if (step >= 0)
        snprintf(at, sizeof at, " %ld", step);
    char msg[1200];
    int n =
        snprintf(msg, sizeof msg, "[rank %d] %s: no progress for %.0f s (%s = %g), since %s%s%s\n",
                 g.rank, when, idle, g.key, g.timeout / 60, what, at, tail);
    if (n > 0) {
        size_t len = (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1;
        ssize_t w = write(STDERR_FILENO, msg, len);
        (void)w; /* nothing left to do if stderr is gone */
    }
}

/* Prints and ends the process without MPI (the main thread may be inside it). */
static void expire(double idle)
{
    char tail[400];
    snprintf(tail, sizeof tail,
             ": a rank, GPU or link stopped answering, or this rank is stuck. Ending the job "
             "with exit %d rather than hold its nodes; the checkpoints written so far are "
             "intact, and a rerun resumes from the newest.",
             TR_EXIT_OSERR);
    say(idle, tail);
    tr_error_let_output_drain(); /* (not stdout's flush: the main thread may hold it) */
    _exit(TR_EXIT_OSERR);
}

/* Half the timeout gone: rank 0 says so once, so that a job whose steps (evaluation
 * batches, checkpoint pieces) are merely slow is told how to keep the watchdog from
 * ending it, before it does, and a hung one shows in its log early. */
static void half_way(double idle)
{
    char tail[400];
    snprintf(tail, sizeof tail,
             ", half of the timeout: warning: at %.0f s the job ends with exit %d. If "
             "nothing is hung and this part of the run is simply this slow, raise %s.",
             g.timeout, TR_EXIT_OSERR, g.key);
    say(idle, tail);
}

static void *watch(void *arg)
{
    (void)arg;
    unsigned long seen = atomic_load(&g.beats);
    double idle = 0, prev = now();
    int warned = g.rank != 0; /* one line a job, not one a rank */
    pthread_mutex_lock(&g.mu);
    while (!g.stop) {
        double wake = now() + g.tick;
        struct timespec ts = {.tv_sec = (time_t)wake,
                              .tv_nsec = (long)((wake - (double)(time_t)wake) * 1e9)};
        pthread_cond_timedwait(&g.cv, &g.mu, &ts);
        if (g.stop)
            break;
        double t = now(), gap = t - prev;
        prev = t;
        unsigned long b = atomic_load(&g.beats);
        if (b != seen) {
            seen = b;
            idle = 0;
            continue;
        }
        /* a wake-up far later than asked for means the process was stopped */
        idle += gap < 2 * g.tick ? gap : 2 * g.tick;
        if (idle >= g.timeout)
            expire(idle);
        if (!warned && idle >= g.timeout / 2) {
            half_way(idle);
            warned = 1;
        }
    }
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

int tr_watchdog_start(double seconds, int rank, const char *key)
{
    if (seconds <= 0 || g.running)
        return 0;
    g.timeout = seconds;
    /* about 20 looks a timeout, at most 5 s apart: a dozen wake-ups a minute at most */
    g.tick = seconds / 20 < 0.05 ? 0.05 : seconds / 20 > 5 ? 5 : seconds / 20;
    g.rank = rank;
    g.key = key;
    g.stop = 0;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g.cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&g.mu, NULL);
    int rc = pthread_create(&g.thread, NULL, watch, NULL);
    if (rc) {
        pthread_cond_destroy(&g.cv);
        pthread_mutex_destroy(&g.mu);
        return rc;
    }
    g.running = 1;
    return 0;
}

void tr_watchdog_beat(const char *what, long step)
{
    atomic_store_explicit(&g.what, what, memory_order_relaxed);
    atomic_store_explicit(&g.step, step, memory_order_relaxed);
    atomic_fetch_add_explicit(&g.beats, 1, memory_order_relaxed);
}

void tr_watchdog_stop(void)
{
    if (!g.running)
        return;
    pthread_mutex_lock(&g.mu);
    g.stop = 1;
    pthread_cond_signal(&g.cv);
    pthread_mutex_unlock(&g.mu);
    pthread_join(g.thread, NULL);
    pthread_cond_destroy(&g.cv);
    pthread_mutex_destroy(&g.mu);
    g.running = 0;
}
