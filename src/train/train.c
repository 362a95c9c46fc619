/* train.c: one training run (tr_train_run): set-up (train_setup.c), the step loop
 * with its evaluations, checkpoints and agreement to stop, and the end of the run:
 * summary.json, ranks.csv, the "done:" and "time:" lines. */
#include "train.h"
#include "core/error.h"
#include "core/watchdog.h"
#include "metrics.h"
#include "progress.h"
#include "rank_times.h"
#include "run.h"
#include "signals.h"
#include "tensorboard.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* Model FLOPs utilisation at a rate of samples/s over the whole job: achieved
 * model FLOP/s over every rank's peak. */
static double mfu_of(const run *r, double samples_per_s)
{
    double peak = r->peak_gflops * 1e9 * r->w->size;
    return peak > 0 ? tr_model_train_flops(&r->model) * samples_per_s / peak : 0;
}

/* " (the lowest so far)" after an evaluation's line, or the lowest and, under
 * early_stop, the patience spent; "" when neither checkpoint.best nor early_stop is
 * on. */
static void describe_best(const run *r, int improved, char *buf, size_t len)
{
    const tr_val_tracker *t = &r->tracker;
    buf[0] = '\0';
    if (improved && (r->ckpt.best || t->patience))
        snprintf(buf, len, " (the lowest so far)");
    else if (t->patience)
        snprintf(buf, len, " (lowest %.4f at step %ld; %ld of %ld evaluations without a lower one)",
                 t->best_loss, t->best_step, t->evals_since_best, t->patience);
    else if (r->ckpt.best && t->best_step)
        snprintf(buf, len, " (lowest %.4f at step %ld)", t->best_loss, t->best_step);
}

/* Reasons to stop early with a checkpoint and exit 75. */
enum { STOP_NONE = 0, STOP_SLICE = 1000, STOP_TIME = 1001 }; /* or a signal number */

/* All ranks learn whether any rank must stop, whether checkpoint.every_minutes
 * calls for a checkpoint (rank 0's clock decides: *due) and whether every rank has
 * written its part of a checkpoint in the background (*written): one tiny all-reduce
 * per step. */
static int agree_stop(run *r, long steps_this_session, int *due, int *written)
{
    int why[3] = {tr_signal_pending(), 0, !tr_train_ckpt_written(&r->ckpt)};
    long slice = tr_deck_int(r->d, "run", "stop_after_steps");
    double minutes = tr_deck_float(r->d, "run", "max_minutes");
    double every = tr_deck_float(r->d, "checkpoint", "every_minutes");
    double now = tr_wtime();
    if (!why[0] && slice && steps_this_session >= slice)
        why[0] = STOP_SLICE;
    if (!why[0] && minutes > 0 && now - r->rt->start_time >= 60 * minutes)
        why[0] = STOP_TIME;
    why[1] = r->w->rank == 0 && every > 0 && now - r->ckpt.last_write_time >= 60 * every;
    tr_allreduce(why, why, 3, TR_I32, TR_MAX, r->w->world);
    *due = why[1];
    *written = !why[2];
    return why[0];
}

/* A checkpoint of the state after `step`: best.h5 (best), one in the background
 * (background, with checkpoint.async), or the step's file now; or (step < 0) the end
 * of the one in the background. Collective. */
static int save(run *r, long step, int best, int background)
{
    char msg[8192];
    double epoch = (double)step / r->steps_per_epoch, t0 = tr_wtime();
    int rc = step < 0 ? tr_train_ckpt_finish(&r->ckpt, r->w, msg, sizeof msg)
             : best   ? tr_train_ckpt_save_best(&r->ckpt, r->w, step, epoch, msg, sizeof msg)
                    : tr_train_ckpt_save(&r->ckpt, r->w, step, epoch, background, msg, sizeof msg);
    r->t_ckpt += tr_wtime() - t0;
    if (rc && r->w->rank == 0) {
        fprintf(stderr, "error: %s; stopping: training on without durable checkpoints would "
                        "risk losing the run (the previous checkpoint is intact)\n",
                msg);
        fflush(stderr);
    }
    return rc;
}

/* The session's parts of its wall time into s (rank 0's, the "time:" line), every
 * rank's busy time and waits into RUN/ranks.csv, and the slowest rank into s (every
 * rank's). Collective over the world: call it where every rank ends its session
 * together. steps_seconds: this session's steps_run steps. */
static void session_times(run *r, double steps_seconds, long steps_run, double wall, tr_summary *s)
{
    const tr_world *w = r->w;
    s->wall_seconds = wall;
    s->setup_seconds = r->t_setup;
    s->train_seconds = steps_seconds;
    s->data_wait_seconds = r->t_data;
    s->comm_wait_seconds = r->dp.comm_wait_s;
    s->pipeline_wait_seconds = r->t_pipe_wait;
    s->eval_seconds = r->t_eval;
    s->checkpoint_seconds = r->t_ckpt;
    s->sample_seconds = r->t_sample;
    s->ranks = w->size;
    s->pp = w->pp;
    s->slowest_rank = -1;
    if (steps_run <= 0)
        return;
    tr_rank_time mine = {.busy = (steps_seconds - r->t_data - r->dp.comm_wait_s - r->t_pipe_wait) /
                                 (double)steps_run,
                         .data_wait = r->t_data,
                         .sync_wait = r->dp.comm_wait_s,
                         .pipe_wait = r->t_pipe_wait};
    tr_rank_times times;
    tr_rank_times_gather(w, &mine, &times);
    tr_straggler slow;
    tr_rank_times_straggler(w, &times, &slow);
    const tr_gpt_config *gc = tr_gpt_config_of(&r->model);
    if (gc && w->pp > 1) {
        double busy[TR_GPT_MAX_STAGES];
        tr_rank_times_stage_busy(w, &times, busy);
        tr_stage_balance_of(gc, w->pp, busy, &s->balance);
    }
    int e = w->rank == 0 ? tr_rank_times_write(r->dir, w, &times) : 0;
    if (e)
        fprintf(stderr, "warning: cannot write %s/ranks.csv: %s\n", r->dir, strerror(e));
    tr_rank_times_free(&times);
    s->slowest_rank = slow.rank;
    s->slowest_stage = slow.stage;
    s->slowest_peers = slow.peers;
    s->slowest_busy_seconds = slow.busy;
    s->median_busy_seconds = slow.median;
    memcpy(s->slowest_host, slow.host, sizeof s->slowest_host);
}

int tr_train_run(const tr_deck *d, tr_world *w, const tr_runtime *rt)
{
    run *r = calloc(1, sizeof *r);
    if (!r)
        tr_fatal(TR_EXIT_OSERR, "out of memory");
    r->d = d, r->w = w, r->rt = rt;
    tr_world planned; /* trainer --plan: this process stands for rank 0 of the layout */
    if (rt->plan_ranks) {
        planned = *w;
        planned.size = rt->plan_ranks;
        planned.local_size = rt->plan_ranks_per_node ? rt->plan_ranks_per_node : rt->plan_ranks;
        planned.dp_group = w->world;
        r->w = &planned;
    }
    tr_signals_install();
    /* a plan computes nothing and waits for nobody */
    double hang = rt->plan_ranks ? 0 : 60 * tr_deck_float(d, "run", "hang_minutes");
    int werr = tr_watchdog_start(hang, w->rank, "run.hang_minutes");
    if (werr)
        tr_fatal(TR_EXIT_OSERR, "cannot start the hang watchdog thread: %s (set "
                 "run.hang_minutes = 0 to run without it)", strerror(werr));
    tr_watchdog_beat("the start of set-up", -1);
    int rc = tr_run_setup(r);
    r->t_setup = tr_wtime() - rt->start_time;
    if (rc) {
        tr_run_teardown(r);
        free(r);
        return rc == TR_RUN_PLAN_DONE ? 0 : rc;
    }
    tr_progress prog;
    tr_progress_init(&prog, tr_deck_str(d, "run", "progress"), r->total_steps);
    if (w->rank)
        prog.mode = TR_PROGRESS_OFF;
    long log_every = tr_deck_int(d, "train", "log_every");
    long eval_every = tr_deck_int(d, "train", "eval_every");
    long sample_every = tr_deck_int(d, "sample", "every");
    double t_train = 0, t_first = 0, last_loss = 0;
    long samples_done = 0, steps_run = 0;
    double test_loss = 0, test_acc = 0;
    int evaluated = 0;
    /* a run resumed where early_stop had ended it trains no further */
    int stopped_early = tr_val_tracker_exhausted(&r->tracker);
    /* the step of the model at the end: resumed at or past the last step (or where
     * early_stop had ended the run), the resumed one's */
    long end_step =
        stopped_early || r->start_step >= r->total_steps ? r->start_step : r->total_steps;
    double targets_per_step = (double)r->global_batch * r->model.targets_per_sample;
    if (r->ckpt.at_start && r->start_step == 0) {
        rc = save(r, 0, 0, 0);
        if (rc) {
            tr_run_teardown(r);
            free(r);
            return rc;
        }
    }
    for (long step = r->start_step; step < r->total_steps && !stopped_early; step++) {
        tr_watchdog_beat("the start of training step", step + 1);
        double t0 = tr_wtime();
        double loss_sum, gnorm;
        long correct;
        float lr;
        double used_scale = r->scaler.scale;
        int logged = (step + 1) % log_every == 0 || step + 1 == r->total_steps;
        int did = tr_run_train_step(r, step, logged, &loss_sum, &correct, &gnorm, &lr);
        if (did == TR_RUN_STEP_SKIPPED && w->rank == 0) {
            tr_progress_break(&prog);
            printf("fp16: gradients overflowed at step %ld: update skipped, loss scale %g -> "
                   "%g\n",
                   step + 1, used_scale, r->scaler.scale);
            fflush(stdout);
        }
        double t1 = tr_wtime();
        steps_run++;
        if (step == r->start_step)
            tr_run_report_beyond_plan(r);
        /* the rate leaves out the session's first step (first touch of every buffer,
         * thread start-up) once there is a second one to measure */
        if (step > r->start_step || r->total_steps - r->start_step == 1) {
            t_train += t1 - t0;
            samples_done += r->global_batch;
        } else {
            t_first = t1 - t0;
        }
        long done = step + 1;
        double epoch = (double)done / (double)r->steps_per_epoch;
        double rate = samples_done ? samples_done / (t_train > 0 ? t_train : 1e-9)
                                   : r->global_batch / (t_first > 0 ? t_first : 1e-9);
        /* the global batch's loss, for the progress line and metrics.csv: two doubles */
        double sums[2] = {loss_sum, (double)correct};
        tr_run_sum_loss(r, sums);
        last_loss = sums[0] / targets_per_step;
        if (logged) {
            tr_metrics_row row = {done, epoch, "train", last_loss, sums[1] / targets_per_step,
                                  lr, gnorm, rate, t1 - rt->start_time, used_scale};
            tr_metrics_write(r->metrics, &row);
            tr_tb_row(r->tb, &row);
        }
        double eta = (r->total_steps - done) / (rate / r->global_batch);
        tr_progress_update(&prog, done, epoch, last_loss, lr,
                           r->lm ? rate * r->model.targets_per_sample : rate,
                           r->lm ? "tokens/s" : "samples/s", mfu_of(r, rate), eta, t1);
        /* every rank has the same loss and norm, so all stop here together */
        if (did == TR_RUN_STEP_DIVERGED || (did == TR_RUN_STEP_UPDATED && !isfinite(last_loss))) {
            tr_progress_break(&prog);
            tr_run_diverged(r, done, last_loss, gnorm, did == TR_RUN_STEP_DIVERGED);
            save(r, -1, 0, 0); /* one of an earlier step in the background: made visible */
            rc = TR_EXIT_DATA;
            break;
        }
        int improved = 0;
        if ((eval_every && done % eval_every == 0) || done == r->total_steps) {
            tr_run_evaluate(r, &test_loss, &test_acc);
            evaluated = 1;
            /* rank 0's loss decides for every rank: sums reduced in another order could
             * differ in the last bit */
            tr_bcast(&test_loss, 1, TR_F64, 0, w->world);
            improved = tr_val_tracker_update(&r->tracker, done, test_loss);
            stopped_early = done < r->total_steps && tr_val_tracker_exhausted(&r->tracker);
            tr_metrics_row row = {done, epoch, "eval", test_loss, test_acc, lr, 0, rate,
                                  tr_wtime() - rt->start_time, r->scaler.scale};
            tr_metrics_write(r->metrics, &row);
            tr_tb_row(r->tb, &row);
            if (w->rank == 0 && done != r->total_steps) {
                tr_progress_break(&prog);
                char best[160];
                describe_best(r, improved, best, sizeof best);
                if (r->lm)
                    printf("eval at step %ld: val loss %.4f, perplexity %.2f, next-token "
                           "accuracy %.2f%%%s\n",
                           done, test_loss, exp(test_loss), 100 * test_acc, best);
                else
                    printf("eval at step %ld: test loss %.4f, accuracy %.2f%%%s\n", done, test_loss,
                           100 * test_acc, best);
            }
        }
        int timed = 0, written = 0;
        int sig = done < r->total_steps && !stopped_early
                      ? agree_stop(r, done - r->start_step, &timed, &written)
                      : 0;
        /* not on the way out: a signal's grace time is for the checkpoint */
        if (r->lm && sample_every && done % sample_every == 0 && done < r->total_steps &&
            !stopped_early && !sig) {
            tr_progress_break(&prog);
            double ts = tr_wtime();
            tr_lm_sample(r, done);
            r->t_sample += tr_wtime() - ts;
        }
        /* a checkpoint written in the background is made visible at the first step's
         * end where every rank's part is on disk */
        if (written && tr_train_ckpt_pending(&r->ckpt)) {
            tr_progress_break(&prog);
            rc = save(r, -1, 0, 0);
            if (rc)
                break;
        }
        int periodic = (r->ckpt.every && done % r->ckpt.every == 0) || timed;
        int final = (done == r->total_steps || stopped_early) && r->ckpt.at_end;
        if (periodic || final || sig) {
            tr_progress_break(&prog);
            /* the last one, or one on the way out: written before the run goes on */
            rc = save(r, done, 0, !final && !sig && !stopped_early);
            if (rc)
                break;
        }
        if (improved && r->ckpt.best) {
            tr_progress_break(&prog);
            rc = save(r, done, 1, 0);
            if (rc)
                break;
        }
        if (stopped_early) {
            end_step = done;
            if (w->rank == 0)
                printf("early stop at step %ld: %ld evaluations in a row without a validation "
                       "loss below %.6g (step %ld; train.early_stop = %ld)\n",
                       done, r->tracker.evals_since_best, r->tracker.best_loss,
                       r->tracker.best_step, r->tracker.patience);
        }
        if (sig) {
            /* the rank that got the signal says how long the stop took */
            double age = tr_signal_age(), worst = age;
            tr_allreduce(&worst, &worst, 1, TR_F64, TR_MAX, w->world);
            char took[64] = "";
            if (worst >= 0)
                snprintf(took, sizeof took, " %.3f s after the signal,", worst);
            /* a named checkpoint.resume (or none) would start the same command over */
            char hint[TR_DECK_VALUE_MAX + 128] = "run again to resume";
            char dir_from[64];
            tr_deck_where(r->d, "run", "dir", dir_from, sizeof dir_from);
            if (strcmp(r->ckpt.resume, "auto"))
                snprintf(hint, sizeof hint,
                         "to resume, run again with checkpoint.resume = auto: resume = %s "
                         "would start it over",
                         r->ckpt.resume);
            else if (!strncmp(dir_from, "Slurm job", 9)) /* runs/<deck>-<job id> */
                snprintf(hint, sizeof hint,
                         "a requeue of this Slurm job resumes; a new job resumes with "
                         "run.dir=%.900s, the run directory named after this job",
                         r->dir);
            if (w->rank == 0)
                printf("%s: checkpointed at step %ld,%s exiting with %d (%s)\n",
                       sig == STOP_SLICE  ? "run.stop_after_steps reached"
                       : sig == STOP_TIME ? "run.max_minutes reached"
                       : sig == SIGUSR1   ? "SIGUSR1"
                       : sig == SIGUSR2   ? "SIGUSR2"
                       : sig == SIGTERM   ? "SIGTERM"
                                          : "signal",
                       done, took, TR_EXIT_TEMPFAIL, hint);
            /* a session cut short (a Slurm time limit, preemption) says where its
             * time went too, and which rank was slow */
            tr_summary s = {0};
            session_times(r, t_train + t_first, steps_run, tr_wtime() - rt->start_time, &s);
            if (w->rank == 0) {
                tr_summary_print_time(stdout, &s);
                fflush(stdout);
            }
            rc = TR_EXIT_TEMPFAIL;
            break;
        }
    }
    if (!rc) /* one still in the background (at_end off): made visible, not lost */
        rc = save(r, -1, 0, 0);
    if (rc) {
        tr_progress_break(&prog);
        tr_run_teardown(r);
        free(r);
        return rc;
    }
    if (!evaluated) { /* nothing trained (0 steps, or resumed at or past the last): the
                       * model is still reported */
        tr_run_evaluate(r, &test_loss, &test_acc);
        /* a resumed run's metrics.csv has its evaluation at that step already */
        if (r->start_step == 0) {
            tr_metrics_row row = {.phase = "eval",
                                  .loss = test_loss,
                                  .accuracy = test_acc,
                                  .lr = tr_optim_lr(&r->opt, 0),
                                  .elapsed_s = tr_wtime() - rt->start_time,
                                  .loss_scale = r->scaler.scale};
            tr_metrics_write(r->metrics, &row);
            tr_tb_row(r->tb, &row);
        }
    }
    tr_progress_break(&prog);
    double wall = tr_wtime() - rt->start_time;
    double rate = samples_done / (t_train > 0 ? t_train : 1e-9);
    /* memory as measured: the worst rank's peak resident set and optimizer state */
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double mem[2] = {(double)ru.ru_maxrss * 1024.0,
                     (double)(r->opt.hi - r->opt.lo) * sizeof(float) * (r->opt.v ? 2 : 1) +
                         (double)(r->opt.hi - r->opt.lo) * sizeof(float) * (r->opt.master != NULL)};
    tr_allreduce(mem, mem, 2, TR_F64, TR_MAX, w->world);
    tr_summary s = {0};
    session_times(r, t_train + t_first, steps_run, wall, &s);
    if (r->lm) /* collective: every rank reads a share of the training tokens */
        s.unigram_perplexity = tr_lm_unigram_baseline(r, test_loss);
    if (w->rank == 0) {
        s.model = r->model.name;
        s.blas_core = rt->blas_core;
        s.steps = end_step;
        s.stopped_early = end_step < r->total_steps;
        s.best_val_loss = r->tracker.best_loss;
        s.best_val_step = r->tracker.best_step;
        s.parameters = (long)r->model.nparams_logical;
        s.epochs = (double)end_step / r->steps_per_epoch;
        s.test_accuracy = test_acc;
        s.test_loss = test_loss;
        s.final_train_loss = steps_run ? last_loss : NAN; /* null: no step this session */
        s.samples_per_second = rate;
        s.gflops_per_second = tr_model_train_flops(&r->model) * rate / 1e9;
        s.peak_gflops = r->peak_gflops * w->size;
        s.mfu = mfu_of(r, rate);
        if (r->lm) {
            s.tokens_per_second = rate * r->model.targets_per_sample;
            s.val_perplexity = exp(test_loss);
        }
        s.dp = w->dp, s.tp = w->tp;
        s.zero = (int)tr_deck_int(d, "parallel", "zero");
        s.peak_rss_bytes = mem[0];
        s.optimizer_state_bytes = mem[1];
        s.threads_per_rank = rt->threads;
        s.precision = tr_deck_str(d, "train", "precision");
        s.skipped_steps = r->scaler.skipped;
        s.loss_scale = r->scaler.scale;
        s.global_batch = r->global_batch;
        int e = tr_summary_write(r->dir, &s);
        if (e)
            fprintf(stderr, "warning: cannot write %s/summary.json: %s\n", r->dir, strerror(e));
        if (!samples_done && r->lm) /* nothing trained: no rates to report */
            printf("done: no training step in %.1f s, val loss %.4f, perplexity %.2f, next-token "
                   "accuracy %.2f%%\n",
                   wall, test_loss, s.val_perplexity, 100 * test_acc);
        else if (!samples_done)
            printf("done: no training step in %.1f s, test loss %.4f, test accuracy %.2f%%\n",
                   wall, test_loss, 100 * test_acc);
        else if (r->lm)
            printf("done: %ld step%s in %.1f s, %.0f tokens/s (%.1f GFLOP/s, MFU %.1f%% of "
                   "%.1f), val loss %.4f, perplexity %.2f, next-token accuracy %.2f%%\n",
                   end_step, end_step == 1 ? "" : "s", wall, s.tokens_per_second,
                   s.gflops_per_second, 100 * s.mfu, s.peak_gflops, test_loss, s.val_perplexity,
                   100 * test_acc);
        else
            printf("done: %ld step%s in %.1f s, %.0f samples/s (%.1f GFLOP/s), test loss %.4f, "
                   "test accuracy %.2f%%\n",
                   end_step, end_step == 1 ? "" : "s", wall, rate, s.gflops_per_second, test_loss,
                   100 * test_acc);
        tr_summary_print_time(stdout, &s);
        fflush(stdout);
    }
    if (r->lm)
        tr_lm_sample(r, -1);
    tr_run_teardown(r);
    free(r);
    return 0;
}
