/* rank_times.c: every rank's time, ranks.csv and the slowest rank (rank_times.h). */
#include "rank_times.h"

#include "core/error.h"
#include "metrics.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { ROW = sizeof(tr_rank_time) / sizeof(double), HOST_WORDS = 64 / sizeof(int64_t) };

/* The grid puts tp innermost, then pp, then dp (comm.h). */
static int tp_of(const tr_world *w, int rank) { return rank % w->tp; }
static int pp_of(const tr_world *w, int rank) { return (rank / w->tp) % w->pp; }
static int dp_of(const tr_world *w, int rank) { return rank / (w->tp * w->pp); }

/* A node name as it can go into CSV, JSON and a terminal unquoted. */
static void clean_host(char *h)
{
    for (char *c = h; *c; c++)
        if (!(*c >= 'a' && *c <= 'z') && !(*c >= 'A' && *c <= 'Z') && !(*c >= '0' && *c <= '9') &&
            *c != '.' && *c != '-' && *c != '_')
            *c = '?';
}

void tr_rank_times_gather(const tr_world *w, const tr_rank_time *mine, tr_rank_times *out)
{
    int n = w->size;
    out->n = n;
    /* a sum of slots that each rank fills alone is a gather onto every rank, through
     * the one collective every device path has for host memory */
    out->rows = tr_alloc((size_t)n * sizeof *out->rows, "rank times");
    memset(out->rows, 0, (size_t)n * sizeof *out->rows);
    out->rows[w->rank] = *mine;
    tr_allreduce(out->rows, out->rows, (size_t)n * ROW, TR_F64, TR_SUM, w->world);
    int64_t *words = tr_alloc((size_t)n * HOST_WORDS * sizeof *words, "rank hosts");
    memset(words, 0, (size_t)n * HOST_WORDS * sizeof *words);
    char host[64] = "";
    if (gethostname(host, sizeof host - 1))
        strcpy(host, "?");
    memcpy(words + (size_t)w->rank * HOST_WORDS, host, sizeof host);
    tr_allreduce(words, words, (size_t)n * HOST_WORDS, TR_I64, TR_SUM, w->world);
    out->host = tr_alloc((size_t)n * sizeof *out->host, "rank hosts");
    for (int r = 0; r < n; r++) {
        memcpy(out->host[r], words + (size_t)r * HOST_WORDS, sizeof out->host[r]);
        out->host[r][sizeof out->host[r] - 1] = 0;
        clean_host(out->host[r]);
    }
    tr_free(words);
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median busy time of stage's ranks (0 where it has none), with how many there
 * are; sorted: room for every rank's. */
static double stage_median(const tr_world *w, const tr_rank_times *t, int stage, double *sorted,
                           int *count)
{
    int m = 0;
    for (int r = 0; r < t->n; r++)
        if (pp_of(w, r) == stage)
            sorted[m++] = t->rows[r].busy;
    *count = m;
    if (m == 0)
        return 0;
    qsort(sorted, (size_t)m, sizeof *sorted, by_value);
    return m % 2 ? sorted[m / 2] : 0.5 * (sorted[m / 2 - 1] + sorted[m / 2]);
}

void tr_rank_times_straggler(const tr_world *w, const tr_rank_times *t, tr_straggler *out)
{
    memset(out, 0, sizeof *out);
    out->rank = -1;
    double *sorted = tr_alloc((size_t)t->n * sizeof *sorted, "rank times");
    double worst = 0;
    for (int stage = 0; stage < w->pp; stage++) {
        int m;
        double median = stage_median(w, t, stage, sorted, &m);
        if (m < 2 || median <= 0)
            continue;
        for (int r = 0; r < t->n; r++) {
            double ratio = t->rows[r].busy / median;
            if (pp_of(w, r) == stage && (out->rank < 0 || ratio > worst)) {
                worst = ratio;
                *out = (tr_straggler){.rank = r,
                                      .stage = stage,
                                      .peers = m,
                                      .busy = t->rows[r].busy,
                                      .median = median};
                memcpy(out->host, t->host[r], sizeof out->host);
            }
        }
    }
    tr_free(sorted);
}

void tr_rank_times_stage_busy(const tr_world *w, const tr_rank_times *t, double *busy)
{
    double *sorted = tr_alloc((size_t)t->n * sizeof *sorted, "rank times");
    for (int stage = 0; stage < w->pp; stage++) {
        int m;
        busy[stage] = stage_median(w, t, stage, sorted, &m);
    }
    tr_free(sorted);
}

int tr_rank_times_write(const char *dir, const tr_world *w, const tr_rank_times *t)
{
    tr_run_file rf;
    FILE *f = tr_run_file_open(&rf, dir, "ranks.csv");
    if (!f)
        return errno;
    fprintf(f, "rank,host,dp,pp,tp,busy_seconds_per_step,data_wait_seconds,sync_wait_seconds,"
               "pipeline_wait_seconds\n");
    for (int r = 0; r < t->n; r++) {
        const tr_rank_time *x = &t->rows[r];
        fprintf(f, "%d,%s,%d,%d,%d,%.6f,%.6f,%.6f,%.6f\n", r, t->host[r], dp_of(w, r), pp_of(w, r),
                tp_of(w, r), x->busy, x->data_wait, x->sync_wait, x->pipe_wait);
    }
    return tr_run_file_commit(&rf, f);
}

void tr_rank_times_free(tr_rank_times *t)
{
    tr_free(t->rows);
    tr_free(t->host);
    t->rows = NULL;
    t->host = NULL;
}
