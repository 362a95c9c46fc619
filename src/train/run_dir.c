/* run_dir.c: a run's directory: made, locked against a second run, its resolved deck
 * written, and metrics.csv and the TensorBoard file opened where a resume left them. */
#include "backend/lowp_math.h"
#include "core/dir_lock.h"
#include "metrics.h"
#include "run.h"
#include "tensorboard.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static int mkdir_p(const char *path)
{
    char tmp[2048];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, 0775) && errno != EEXIST)
                return errno;
            *p = '/';
        }
    if (mkdir(tmp, 0775) && errno != EEXIST)
        return errno;
    return 0;
}

/* One run at a time in a run directory (core/dir_lock.h): rank 0 holds its lock for
 * the life of the process. */
static int lock_run_dir(run *r)
{
    char who[600];
    if (!tr_dir_lock(r->dir, who, sizeof who))
        return 0;
    return tr_run_key_error(
        r, "run", "dir",
        "the run directory '%s' is in use by another run (%s): two runs in one directory "
        "would overwrite each other's checkpoints and metrics.csv, and one would resume from "
        "the other's; give this run a directory of its own (run.dir=..., e.g. with the job "
        "id: a deck without [run] dir under Slurm gets runs/<deck>-<job id>)",
        r->dir, who);
}

/* Rank 0 prepares the run directory; the others wait for its verdict. */
int tr_run_open_dir(run *r)
{
    snprintf(r->dir, sizeof r->dir, "%s", tr_deck_str(r->d, "run", "dir"));
    if (!r->dir[0]) /* a slip, not a file system's failure: every rank says so */
        return tr_run_key_error(r, "run", "dir",
                                "is empty: name the run directory (default runs/default)");
    if (r->w->rank != 0)
        return 0;
    int e = mkdir_p(r->dir);
    if (!e) {
        int rc = lock_run_dir(r);
        if (rc)
            return rc;
    }
    char path[2200];
    snprintf(path, sizeof path, "%s/deck.in", r->dir);
    FILE *f = e ? NULL : fopen(path, "w");
    if (!f)
        return tr_run_key_error(r, "run", "dir", "cannot create the run directory '%s': %s", r->dir,
                                strerror(e ? e : errno)),
               TR_EXIT_IOERR;
    tr_deck_write_resolved(r->d, f);
    if (fclose(f))
        return tr_run_key_error(r, "run", "dir", "cannot write '%s': %s", path, strerror(errno)),
               TR_EXIT_IOERR;
    return 0;
}

/* After the resume decision: metrics.csv continues where the checkpoint stands. */
int tr_run_open_metrics(run *r)
{
    if (r->w->rank != 0)
        return 0;
    r->metrics = tr_metrics_open(r->dir, r->start_step);
    if (!r->metrics)
        return tr_run_key_error(r, "run", "dir", "cannot %s '%s/metrics.csv': %s",
                                r->start_step > 0 ? "continue" : "write", r->dir, strerror(errno)),
               TR_EXIT_IOERR;
    if (tr_deck_bool(r->d, "run", "tensorboard")) {
        r->tb = tr_tb_open(r->dir, r->start_step + 1, r->lm ? r->model.targets_per_sample : 0,
                           r->precision == TR_PREC_FP16);
        if (!r->tb)
            return tr_run_key_error(r, "run", "tensorboard",
                                    "cannot write TensorBoard's event file under '%s/tensorboard': "
                                    "%s (run.tensorboard = false does without it)",
                                    r->dir, strerror(errno)),
                   TR_EXIT_IOERR;
    }
    return 0;
}
