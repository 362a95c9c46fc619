/* progress.c: step/total, epoch, loss, lr, samples/s and ETA on one line. */
#include "progress.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Under mpirun or srun a rank's stdout may be a pseudo-terminal even when the
 * launcher's own output goes to a file, so "auto" trusts isatty only when no
 * launcher started us. */
static int launched(void)
{
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("SLURM_PROCID") ||
           getenv("PMI_RANK");
}

void tr_progress_init(tr_progress *p, const char *mode, long total_steps)
{
    memset(p, 0, sizeof *p);
    if (!strcmp(mode, "off"))
        p->mode = TR_PROGRESS_OFF;
    else if (!strcmp(mode, "tty") || (!strcmp(mode, "auto") && isatty(STDOUT_FILENO) && !launched()))
        p->mode = TR_PROGRESS_TTY;
    else
        p->mode = TR_PROGRESS_LINES;
    p->total_steps = total_steps;
    p->out = stdout;
    /* about 20 lines per run in a log file (plus the first step, and one a minute
     * when steps are slow), never more than one per step */
    p->every = total_steps / 20 > 1 ? total_steps / 20 : 1;
    p->last_print = -1e30; /* so the first step is printed */
}

static void fmt_eta(char *buf, size_t len, double s)
{
    if (s < 0 || s > 1e8)
        snprintf(buf, len, "--");
    else if (s < 3600)
        snprintf(buf, len, "%dm%02ds", (int)s / 60, (int)s % 60);
    else
        snprintf(buf, len, "%dh%02dm", (int)s / 3600, ((int)s % 3600) / 60);
}

void tr_progress_update(tr_progress *p, long step, double epoch, double loss, double lr,
                        double rate, const char *unit, double mfu, double eta_s, double now)
{
    if (p->mode == TR_PROGRESS_OFF)
        return;
    int last = step == p->total_steps;
    if (p->mode == TR_PROGRESS_TTY && !last && now - p->last_print < 0.1)
        return; /* a terminal needs no more than 10 updates a second */
    if (p->mode == TR_PROGRESS_LINES && !last && step % p->every &&
        now - p->last_print < TR_PROGRESS_QUIET_S)
        return;
    p->last_print = now;
    char eta[32];
    fmt_eta(eta, sizeof eta, eta_s);
    int width = snprintf(NULL, 0, "%ld", p->total_steps);
    char util[32] = "";
    if (mfu > 0)
        snprintf(util, sizeof util, "  MFU %.1f%%", 100 * mfu);
    fprintf(p->out, "%sstep %*ld/%ld  epoch %.2f  loss %.4f  lr %.3g  %.0f %s%s  ETA %s%s",
            p->mode == TR_PROGRESS_TTY ? "\r" : "", width, step, p->total_steps, epoch, loss, lr,
            rate, unit, util, eta, p->mode == TR_PROGRESS_TTY ? "\033[K" : "\n");
    p->dirty = p->mode == TR_PROGRESS_TTY;
    fflush(p->out);
}

void tr_progress_break(tr_progress *p)
{
    if (p->dirty) {
        fputc('\n', p->out);
        p->dirty = 0;
    }
}
