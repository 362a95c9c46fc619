/* signals.c: async-signal-safe flag setting for preemption. */
#include "signals.h"

#include <signal.h>
#include <string.h>

static volatile sig_atomic_t g_signal;

static void on_signal(int sig) { g_signal = sig; }

void tr_signals_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART; /* interrupted reads and writes carry on */
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

int tr_signal_pending(void) { return (int)g_signal; }
