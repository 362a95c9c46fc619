/* signals.c: async-signal-safe flag setting for preemption. */
#include "signals.h"

#include <signal.h>
#include <string.h>
#include <time.h>

static volatile sig_atomic_t g_signal;
static struct timespec g_when; /* first signal; clock_gettime is async-signal-safe */

static void on_signal(int sig)
{
    if (!g_signal)
        clock_gettime(CLOCK_MONOTONIC, &g_when);
    g_signal = sig;
}

double tr_signal_age(void)
{
    if (!g_signal)
        return -1;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - g_when.tv_sec) + 1e-9 * (double)(now.tv_nsec - g_when.tv_nsec);
}

void tr_signals_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART; /* interrupted reads and writes carry on */
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGUSR2, &sa, NULL); /* as USR1: jobs/launch.sh forwards both, and a site's
                                      --signal may name either */
    sigaction(SIGTERM, &sa, NULL);
}

int tr_signal_pending(void) { return (int)g_signal; }
