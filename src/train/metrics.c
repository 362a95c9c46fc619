/* metrics.c: metrics.csv rows and summary.json. Written by rank 0 only. */
#include "metrics.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char HEADER[] = "step,epoch,phase,loss,accuracy,lr,grad_norm,samples_per_s,elapsed_s,loss_scale\n";

FILE *tr_metrics_open(const char *dir, long resume_step)
{
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/metrics.csv", dir);
    FILE *old = resume_step > 0 ? fopen(path, "r") : NULL;
    /* Only a missing file starts afresh: one there that cannot be read (an I/O error,
     * a file system gone stale) holds the rows of the steps resumed, which a fresh
     * file would delete. */
    if (!old && resume_step > 0 && errno != ENOENT)
        return NULL;
    if (!old) {
        FILE *f = fopen(path, "w");
        if (f) {
            fputs(HEADER, f);
            fflush(f);
        }
        return f;
    }
    /* keep the header and every row of a step the checkpoint covers */
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        fclose(old);
        return NULL;
    }
    /* Whole lines of any length (a hand-edited one is not split into pieces that
     * might parse as rows). A row without its newline was cut short (a full disk, a
     * crash mid-write) and is dropped: what follows would run into it. */
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int first = 1;
    while ((n = getline(&line, &cap, old)) > 0) {
        long step;
        int whole = line[n - 1] == '\n';
        if (first) {
            fputs(line, f);
            if (!whole)
                fputc('\n', f);
        } else if (whole && sscanf(line, "%ld,", &step) == 1 && step <= resume_step) {
            fputs(line, f);
        }
        first = 0;
    }
    int unread = ferror(old) ? (errno ? errno : EIO) : 0; /* (the rows past it unread) */
    free(line);
    fclose(old);
    int bad = ferror(f);
    errno = unread;
    if (unread || fclose(f) || bad || rename(tmp, path)) {
        int e = errno ? errno : EIO;
        if (unread)
            fclose(f);
        unlink(tmp); /* metrics.csv stays as it was */
        errno = e;
        return NULL;
    }
    f = fopen(path, "a");
    return f;
}

void tr_metrics_write(FILE *f, const tr_metrics_row *r)
{
    static const FILE *failed; /* a file whose write failed: said once, then left alone */
    if (!f || f == failed)
        return;
    /* %.9g keeps every bit of a float loss, so two runs can be compared exactly */
    int n = fprintf(f, "%ld,%.6f,%s,%.9g,%.6f,%.9g,%.9g,%.1f,%.3f,%.9g\n", r->step, r->epoch,
                    r->phase, r->loss, r->accuracy, r->lr, r->grad_norm, r->samples_per_s,
                    r->elapsed_s, r->loss_scale);
    /* flushed: a crash or preemption keeps every row written so far */
    if (n < 0 || fflush(f) || ferror(f)) {
        fprintf(stderr,
                "warning: cannot write metrics.csv: %s; its rows stop at step %ld (that one may be "
                "cut short; the "
                "training, its log and summary.json go on)\n",
                strerror(errno), r->step);
        failed = f;
    }
}

FILE *tr_run_file_open(tr_run_file *rf, const char *dir, const char *name)
{
    snprintf(rf->path, sizeof rf->path, "%s/%s", dir, name);
    snprintf(rf->tmp, sizeof rf->tmp, "%s.tmp", rf->path);
    return fopen(rf->tmp, "w");
}

int tr_run_file_commit(tr_run_file *rf, FILE *f)
{
    int bad = ferror(f), e = 0;
    if (fclose(f) || bad)
        e = errno ? errno : EIO;
    else if (rename(rf->tmp, rf->path))
        e = errno;
    if (e)
        unlink(rf->tmp); /* the file before it stays as it was; no half-written copy beside */
    return e;
}

int tr_summary_write(const char *dir, const tr_summary *s)
{
    tr_run_file rf;
    FILE *f = tr_run_file_open(&rf, dir, "summary.json");
    if (!f)
        return errno;
    /* null before any evaluation during training (and for a loss that JSON cannot
     * write: inf) */
    char best_loss[32] = "null", best_step[32] = "null", train_loss[32] = "null";
    if (isfinite(s->final_train_loss)) /* (none where this session trained no step) */
        snprintf(train_loss, sizeof train_loss, "%.6f", s->final_train_loss);
    if (s->best_val_step > 0 && isfinite(s->best_val_loss)) {
        snprintf(best_loss, sizeof best_loss, "%.9g", s->best_val_loss);
        snprintf(best_step, sizeof best_step, "%ld", s->best_val_step);
    }
    /* null where no rank had a peer to be compared with */
    char slow_rank[32] = "null", slow_host[96] = "null", slow_busy[32] = "null",
         median_busy[32] = "null";
    if (s->slowest_rank >= 0) {
        snprintf(slow_rank, sizeof slow_rank, "%d", s->slowest_rank);
        snprintf(slow_host, sizeof slow_host, "\"%s\"", s->slowest_host);
        snprintf(slow_busy, sizeof slow_busy, "%.6f", s->slowest_busy_seconds);
        snprintf(median_busy, sizeof median_busy, "%.6f", s->median_busy_seconds);
    }
    /* a GPT pipeline's stages as measured, and the split their times would choose */
    char stage_busy[TR_GPT_MAX_STAGES * 16] = "null", by_time[TR_GPT_MAX_STAGES * 4 + 2] = "null";
    const tr_stage_balance *b = &s->balance;
    if (b->pp > 1) {
        size_t k = (size_t)snprintf(stage_busy, sizeof stage_busy, "[");
        for (int i = 0; i < b->pp && k < sizeof stage_busy; i++)
            k += (size_t)snprintf(stage_busy + k, sizeof stage_busy - k, "%s%.6f", i ? ", " : "",
                                  b->busy[i]);
        if (k < sizeof stage_busy)
            snprintf(stage_busy + k, sizeof stage_busy - k, "]");
        char list[TR_GPT_MAX_STAGES * 4];
        snprintf(by_time, sizeof by_time, "\"%s\"",
                 tr_gpt_blocks_list(b->counts, b->pp, list, sizeof list));
    }
    fprintf(f,
            "{\n"
            "  \"model\": \"%s\",\n"
            "  \"test_accuracy\": %.6f,\n"
            "  \"test_loss\": %.6f,\n"
            "  \"final_train_loss\": %s,\n"
            "  \"steps\": %ld,\n"
            "  \"stopped_early\": %s,\n"
            "  \"epochs\": %.4f,\n"
            "  \"global_batch\": %ld,\n"
            "  \"parameters\": %ld,\n"
            "  \"samples_per_second\": %.1f,\n"
            "  \"gflops_per_second\": %.2f,\n"
            "  \"peak_gflops\": %.2f,\n"
            "  \"mfu\": %.4f,\n"
            "  \"tokens_per_second\": %.1f,\n"
            "  \"val_perplexity\": %.4f,\n"
            "  \"unigram_perplexity\": %.4f,\n"
            "  \"wall_seconds\": %.6f,\n"
            "  \"train_seconds\": %.6f,\n"
            "  \"comm_wait_seconds\": %.6f,\n"
            "  \"data_wait_seconds\": %.6f,\n"
            "  \"pipeline_wait_seconds\": %.6f,\n"
            "  \"setup_seconds\": %.6f,\n"
            "  \"eval_seconds\": %.6f,\n"
            "  \"checkpoint_seconds\": %.6f,\n"
            "  \"sample_seconds\": %.6f,\n"
            "  \"ranks\": %d,\n"
            "  \"dp\": %d,\n"
            "  \"tp\": %d,\n"
            "  \"pp\": %d,\n"
            "  \"zero\": %d,\n"
            "  \"peak_rss_bytes\": %.0f,\n"
            "  \"optimizer_state_bytes\": %.0f,\n"
            "  \"threads_per_rank\": %d,\n"
            "  \"precision\": \"%s\",\n"
            "  \"skipped_steps\": %ld,\n"
            "  \"loss_scale\": %.9g,\n"
            "  \"blas_core\": \"%s\",\n"
            "  \"slowest_rank\": %s,\n"
            "  \"slowest_rank_host\": %s,\n"
            "  \"slowest_rank_busy_seconds\": %s,\n"
            "  \"median_busy_seconds\": %s,\n"
            "  \"stage_busy_seconds\": %s,\n"
            "  \"stage_blocks_by_time\": %s,\n"
            "  \"best_val_loss\": %s,\n"
            "  \"best_val_step\": %s\n"
            "}\n",
            s->model, s->test_accuracy, s->test_loss, train_loss, s->steps,
            s->stopped_early ? "true" : "false", s->epochs, s->global_batch, s->parameters,
            s->samples_per_second, s->gflops_per_second, s->peak_gflops, s->mfu,
            s->tokens_per_second, s->val_perplexity, s->unigram_perplexity, s->wall_seconds,
            s->train_seconds, s->comm_wait_seconds, s->data_wait_seconds, s->pipeline_wait_seconds,
            s->setup_seconds, s->eval_seconds, s->checkpoint_seconds, s->sample_seconds, s->ranks,
            s->dp, s->tp, s->pp, s->zero, s->peak_rss_bytes, s->optimizer_state_bytes,
            s->threads_per_rank, s->precision ? s->precision : "fp32", s->skipped_steps,
            s->loss_scale, s->blas_core, slow_rank, slow_host, slow_busy, median_busy, stage_busy,
            by_time, best_loss, best_step);
    return tr_run_file_commit(&rf, f);
}

void tr_summary_print_time(FILE *f, const tr_summary *s)
{
    double rest = s->wall_seconds - s->setup_seconds - s->train_seconds - s->eval_seconds -
                  s->checkpoint_seconds - s->sample_seconds;
    fprintf(f,
            "time: %.2f s = set-up %.2f + steps %.2f (waiting for data %.2f, for the gradient "
            "sync %.2f",
            s->wall_seconds, s->setup_seconds, s->train_seconds, s->data_wait_seconds,
            s->comm_wait_seconds);
    if (s->pp > 1)
        fprintf(f, ", for the other stages %.2f", s->pipeline_wait_seconds);
    fprintf(f, ")");
    if (s->eval_seconds > 0)
        fprintf(f, " + evaluation %.2f", s->eval_seconds);
    if (s->checkpoint_seconds > 0)
        fprintf(f, " + checkpoints %.2f", s->checkpoint_seconds);
    if (s->sample_seconds > 0)
        fprintf(f, " + samples %.2f", s->sample_seconds);
    /* the loss's sum and the stop agreement of each step, metrics, progress */
    fprintf(f, " + the rest %.2f, on rank 0\n", rest > 0 ? rest : 0);
    if (s->slowest_rank >= 0) {
        char stage[48] = "";
        if (s->pp > 1)
            snprintf(stage, sizeof stage, " (pipeline stage %d)", s->slowest_stage);
        fprintf(f,
                "slowest rank: %d%s on %s, busy %.2f ms a step against a median of %.2f ms "
                "over the %d ranks doing its work (%+.0f%%)\n",
                s->slowest_rank, stage, s->slowest_host, 1e3 * s->slowest_busy_seconds,
                1e3 * s->median_busy_seconds, s->slowest_peers,
                100 * (s->slowest_busy_seconds / s->median_busy_seconds - 1));
    }
    tr_stage_balance_print(f, &s->balance);
}
