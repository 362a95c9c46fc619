/* metrics.h: what a run leaves in its directory for people and plots:
 * metrics.csv (one row per logged step and per evaluation) and summary.json. */
#ifndef TR_METRICS_H
#define TR_METRICS_H

#include "stage_balance.h"

#include <stdio.h>

typedef struct tr_metrics_row {
    long step;      /* optimizer steps completed */
    double epoch;   /* fractional epoch */
    const char *phase; /* "train" or "eval" */
    double loss, accuracy, lr, grad_norm, samples_per_s, elapsed_s;
    double loss_scale; /* the step's loss scale: 1 but under fp16-mixed; a skipped
                          step's grad_norm is inf or nan */
} tr_metrics_row;

/* Opens DIR/metrics.csv for writing (rank 0 only); NULL with errno on failure.
 * A resumed run (resume_step > 0) keeps the rows up to resume_step and appends,
 * so the file reads as if the run had never stopped. */
FILE *tr_metrics_open(const char *dir, long resume_step);
void tr_metrics_write(FILE *f, const tr_metrics_row *r);

typedef struct tr_summary {
    const char *model, *blas_core;
    long steps, parameters;
    double epochs, test_accuracy, test_loss, final_train_loss;
    double samples_per_second, wall_seconds, train_seconds, gflops_per_second;
    double comm_wait_seconds;
    /* rank 0's session beside train_seconds (the steps, data_wait_seconds and
     * comm_wait_seconds among them): disjoint parts of wall_seconds */
    double setup_seconds, data_wait_seconds, eval_seconds, checkpoint_seconds, sample_seconds;
    double pipeline_wait_seconds; /* inside the steps too: the other stages' messages */
    /* straggler.h: the rank furthest above its stage's median busy time a step */
    int slowest_rank; /* -1: no rank had a peer */
    int slowest_stage, slowest_peers;
    double slowest_busy_seconds, median_busy_seconds;
    char slowest_host[64];
    tr_stage_balance balance;               /* a GPT pipeline's stages as measured; pp 0: none */
    double peak_gflops, mfu;                /* all ranks' peak; model FLOPs utilisation */
    double tokens_per_second;               /* language models (0 otherwise) */
    double val_perplexity, unigram_perplexity;
    int ranks, dp, tp, pp, threads_per_rank, zero;
    long global_batch;
    double peak_rss_bytes;        /* the largest peak resident memory of any rank */
    double optimizer_state_bytes; /* the largest optimizer state of any rank */
    const char *precision;        /* train.precision */
    long skipped_steps;           /* fp16-mixed: steps skipped for overflow */
    double loss_scale;            /* fp16-mixed: the loss scale at the end */
    int stopped_early;            /* train.early_stop ended training before steps */
    double best_val_loss;         /* the lowest validation loss of an evaluation, */
    long best_val_step;           /* at this step (0: no evaluation during training) */
} tr_summary;

/* A file of the run directory replaced whole, never seen half written: opens
 * DIR/NAME.tmp for writing (f->path holds DIR/NAME); NULL with errno on failure. */
typedef struct tr_run_file {
    char path[4096], tmp[4200];
} tr_run_file;
FILE *tr_run_file_open(tr_run_file *rf, const char *dir, const char *name);
/* Closes f and renames it into place; 0 or errno (the .tmp is left on failure). */
int tr_run_file_commit(tr_run_file *rf, FILE *f);

/* Writes DIR/summary.json; returns 0 or errno. */
int tr_summary_write(const char *dir, const tr_summary *s);
/* Prints the "time:" line: wall_seconds as the sum of its parts, the rest named;
 * where ranks have peers, the "slowest rank:" line; for a GPT pipeline, the "stage
 * balance:" line. */
void tr_summary_print_time(FILE *f, const tr_summary *s);

#endif
