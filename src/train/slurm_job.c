/* slurm_job.c: the trainer inside a Slurm job. See slurm_job.h. */
#include "slurm_job.h"
#include "core/error.h"

#include <stdlib.h>
#include <string.h>

/* "section.key" -> the deck's "FILE:LINE: " when the deck or an override set it */
static void key_prefix(const tr_deck *d, const char *key, char *out, size_t len)
{
    char section[64], name[64];
    const char *dot = strchr(key, '.');
    out[0] = '\0';
    if (!dot || (size_t)(dot - key) >= sizeof section)
        return;
    snprintf(section, sizeof section, "%.*s", (int)(dot - key), key);
    snprintf(name, sizeof name, "%s", dot + 1);
    if (!tr_deck_is_set(d, section, name))
        return;
    tr_deck_where(d, section, name, out, len - 2);
    strcat(out, ": ");
}

/* Where the threads per rank came from, as main.c's choose_threads decides. */
static void threads_origin(const tr_deck *d, char *out, size_t len)
{
    const char *env = getenv("OMP_NUM_THREADS");
    if (tr_deck_int(d, "system", "threads") > 0) {
        snprintf(out, len, "[system] threads"); /* the message starts with where */
    } else if (env && atoi(env) > 0) {
        snprintf(out, len, "OMP_NUM_THREADS=%s", env);
    } else {
        snprintf(out, len, "the default share of the node");
    }
}

int tr_slurm_job_setup(tr_slurm_job *job, tr_deck *d, const tr_world *w, int threads)
{
    memset(job, 0, sizeof *job);
    tr_slurm_read_env(&job->env);
    char msg[4096] = "", err[2048] = "", from[TR_DECK_ORIGIN_MAX + 100];
    int rc = 0;
    /* one job for all ranks, or none: ranks started outside it (mpirun over ssh
     * inside an allocation, which passes no SLURM_* variables on) would name another
     * run directory and skip the agreements below, and wait in a collective */
    char id[sizeof job->env.job_id + 8];
    snprintf(id, sizeof id, "%d:%s", job->env.active, job->env.active ? job->env.job_id : "");
    if (tr_comm_differs_from_root(w, id, strlen(id))) {
        snprintf(msg, sizeof msg,
                 "trainer: rank %d %s, and rank 0 %s: start every rank the same way (srun, or "
                 "mpirun inside the allocation passing the SLURM_* variables on)",
                 w->rank, job->env.active ? "runs in a Slurm job" : "sees no Slurm job",
                 job->env.active ? "in another or none" : "does");
        rc = TR_EXIT_USAGE;
    }
    rc = tr_comm_agree(w, rc, msg);
    if (rc || !job->env.active)
        return rc;

    /* a requeued job keeps its id, so its rerun finds its own checkpoints here */
    if (!tr_deck_is_set(d, "run", "dir")) {
        char dir[512], origin[200];
        tr_slurm_run_dir(&job->env, d->path, dir, sizeof dir);
        snprintf(origin, sizeof origin, "Slurm job %s (the deck sets no [run] dir)",
                 job->env.job_id);
        rc = tr_deck_set(d, "run", "dir", dir, origin);
        if (rc)
            snprintf(msg, sizeof msg, "%.4000s", d->errors);
    }

    threads_origin(d, from, sizeof from);
    tr_slurm_layout l = {
        .ranks = w->size,
        .ranks_on_node = w->local_size,
        .threads = threads,
        .threads_from = from,
        .tp = (int)tr_deck_int(d, "parallel", "tp"),
        .pp = (int)tr_deck_int(d, "parallel", "pp"),
        .gpu = strcmp(tr_deck_str(d, "system", "device"), "cuda") == 0,
    };
    const char *key = "";
    if (!rc) {
        rc = tr_slurm_check(&job->env, &l, err, sizeof err, job->warn, sizeof job->warn, &key);
        if (rc) {
            char prefix[TR_DECK_ORIGIN_MAX + 64];
            key_prefix(d, key, prefix, sizeof prefix);
            snprintf(msg, sizeof msg, "%s%s", *prefix ? prefix : "trainer: ", err);
        }
    }
    rc = tr_comm_agree(w, rc, msg);
    if (rc)
        return rc;
    if (w->rank == 0)
        tr_slurm_describe(&job->env, &l, job->line, sizeof job->line);
    else
        job->warn[0] = '\0';
    return 0;
}

void tr_slurm_job_print(const tr_slurm_job *job, FILE *out)
{
    if (job->line[0])
        fprintf(out, "%s\n", job->line);
    if (job->warn[0]) {
        fflush(out);
        fputs(job->warn, stderr);
        fflush(stderr);
    }
}
