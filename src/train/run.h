/* run.h: the state of one training run, shared by the files of src/train that
 * implement it (train.c: the step loop and the end of a run; train_setup.c: set-up
 * and teardown; train_step.c: one step; train_banner.c: what rank 0 prints before
 * the first step; train_lm.c: what is particular to language models). Internal to
 * src/train. */
#ifndef TR_TRAIN_RUN_H
#define TR_TRAIN_RUN_H

#include "data/idx.h"
#include "data/loader.h"
#include "data/token_data.h"
#include "loss_scale.h"
#include "models/model.h"
#include "models/sampling.h"
#include "optim.h"
#include "parallel/data_parallel.h"
#include "parallel/pipeline.h"
#include "plan.h"
#include "train.h"
#include "train_checkpoint.h"
#include "val_tracker.h"

#include <stdio.h>

typedef struct run {
    const tr_deck *d;
    tr_world *w;
    const tr_runtime *rt;
    tr_dataset train, test;  /* images (data.format = idx) */
    tr_token_data tokens;     /* token windows (language models) */
    int lm;                   /* the model reads tokens */
    uint64_t data_digest;     /* the training data's hash (same_data_everywhere), 0: none */
    uint64_t labels_only_digest; /* images: the labels' part alone, as older trainers hashed */
    tr_model model;
    tr_optim opt;
    tr_dp dp;
    tr_loader *loader;
    tr_train_ckpt ckpt;
    long start_step; /* 0, or the step a checkpoint brought us to */
    long global_batch, local_batch, micro, micro_batch, eval_local_batch;
    long steps_per_epoch, total_steps;
    char dir[2048];
    FILE *metrics;
    struct tr_tb *tb;   /* rank 0, with run.tensorboard: the TensorBoard event file */
    double peak_gflops; /* per rank, for MFU */
    char peak_source[256]; /* where rank 0's figure comes from, for the banner */
    struct tr_bpe *bpe;  /* rank 0, when [sample] length > 0: the prompt's tokenizer */
    /* the language model's pipeline (every layout; pp = 1 is one stage) */
    tr_pipe_schedule schedule;
    tr_pipe_op *ops; /* this stage's order of a step's passes */
    int nops, slots;
    tr_request *fwd_req; /* [slots]: activations on their way to the next stage */
    int sharded; /* tp, pp or ZeRO: norms and losses are put together from parts */
    const tr_device *dev;   /* system.device: where the model's memory and math are */
    float *eval_x;          /* host staging of an evaluation batch (classifiers) */
    int precision;          /* train.precision as a tr_precision (lowp_math.h) */
    tr_loss_scale scaler;   /* fp16-mixed's loss scale (1 otherwise) */
    tr_val_tracker tracker; /* the lowest validation loss: checkpoint.best, early_stop */
    /* where this rank's session went, in seconds (summary.json, the "time:" line):
     * set-up, waiting for a batch inside the steps, evaluation, checkpoint writes and
     * the samples during training (tr_lm_sample) */
    double t_setup, t_data, t_eval, t_ckpt, t_sample;
    double t_pipe_wait; /* inside the steps: blocked on the neighbour stages' messages */
    char err[4096];
} run;

/* ---- train_setup.c ---- */
/* Sets r->err to "FILE:LINE: message" about one deck key; returns TR_EXIT_USAGE. */
int tr_run_key_error(run *r, const char *section, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* tr_run_setup's answer when it has printed a plan instead of preparing a run */
#define TR_RUN_PLAN_DONE (-1)
/* The run r->d describes made ready to train, up to the banner: 0, TR_RUN_PLAN_DONE,
 * or an exit code every rank agreed on (r->err says why). Collective. */
int tr_run_setup(run *r);
/* Frees what this rank holds, whatever tr_run_setup reached; stops the watchdog. */
void tr_run_teardown(run *r);

/* ---- run_dir.c ---- */
/* Rank 0 makes and locks r->dir ([run] dir) and writes the resolved deck there; the
 * others only check the key. 0, or an exit code with r->err. Not collective. */
int tr_run_open_dir(run *r);
/* Rank 0, after the resume decision: metrics.csv continued from r->start_step, and
 * the TensorBoard events where [run] tensorboard asks. 0, or an exit code. */
int tr_run_open_metrics(run *r);

/* ---- train_banner.c ---- */
/* Rank 0: the layout, model, data and run lines before the first step. */
void tr_run_print_banner(run *r);
/* After the session's first step, where the device can tell: its memory beyond the
 * plan's reservation (largest rank). Collective. */
void tr_run_report_beyond_plan(run *r);

/* ---- train_step.c ---- */
/* What tr_run_train_step did with its gradients. */
enum { TR_RUN_STEP_SKIPPED = 0, TR_RUN_STEP_UPDATED = 1, TR_RUN_STEP_DIVERGED = 2 };
/* Step `step` (0-based): the batch's forward and backward, the gradients reduced and
 * the update made; counts on a logged step only. */
int tr_run_train_step(run *r, long step, int logged, double *loss_sum, long *correct, double *gnorm,
                      float *lr);
/* Rank 0: the error of a step whose loss or gradients are not finite. */
void tr_run_diverged(const run *r, long done, double loss, double gnorm, int norm_taken);
/* The global batch's loss sum and correct count from every rank's part (only the
 * pipelines' last stages hold losses). Collective over the world. */
void tr_run_sum_loss(const run *r, double sums[2]);
/* Loss and accuracy on the test (validation) split, adding to r->t_eval. Collective. */
void tr_run_evaluate(run *r, double *loss, double *acc);

/* ---- train_memory.c ---- */
/* This rank's share of the model and how its stage keeps activations (the
 * pipeline's slots follow [parallel] schedule and r->micro). */
tr_model_layout tr_run_model_layout(run *r);
/* Before anything is allocated, each with the plan's numbers and the fewest
 * micro-batches that would fit in r->err: 0, or TR_EXIT_OSERR where this rank's
 * share of the node's memory cannot hold the plan; then the device's reservation
 * at the plan's size (its failure's code). Activations for batches up to
 * max_batch. */
int tr_run_check_memory(run *r, int max_batch);
int tr_run_reserve(run *r, int max_batch);
/* trainer --plan: every pipeline stage's plan of the layout set up. */
void tr_run_print_plan(run *r, int max_batch);
/* The plan of a rank of pipeline stage `stage` (of this rank's tp rank: the tp ranks
 * hold equal shares) at `micro` micro-batches, from the model that stage would
 * build: its slots, the micro-batches whose activations it keeps, follow the
 * schedule and the count. This rank's own model where that is the same. */
tr_plan tr_run_stage_plan(run *r, int stage, long micro, int max_batch);
/* The same under another split of the blocks (split: pp counts, as [parallel]
 * stage_blocks takes them; NULL: the run's). */
tr_plan tr_run_split_stage_plan(run *r, int stage, long micro, int max_batch, const int *split);
/* A GPT pipeline's split of the blocks under which every stage fits `room` (of the
 * device's reservation, or of the host) at r->micro micro-batches, the one whose
 * busiest stage has the fewest FLOPs, in counts, with the most a stage then needs in
 * *need: 1; 0 where the run's own split fits, none does, or the search finds that
 * one. For the out-of-memory messages and --layouts. */
int tr_run_split_that_fits(run *r, double room, int device, int *counts, double *need);
/* The fewest [train] micro_batches (a divisor of the rank's batch, above the deck's)
 * at which every rank (the largest stage's, in a pipeline) would need no more than
 * `room` bytes of the device's reservation (device) or of the host (else), with that
 * need in *need; else 0, with *need and *most what the most micro-batches would
 * still need (GPipe keeps every micro-batch's activations; a classifier's evaluation
 * batch stays). Every rank works out the same answer. */
long tr_run_fewest_micro_that_fit(run *r, double room, int device, double *need, long *most);

/* ---- train_layouts.c ---- */
/* trainer --plan --layouts: each dp x tp x pp of the run's ranks a GPT allows, with
 * its largest stage's memory, whether it fits, the pipeline's least busy share and
 * the most a rank sends per step, the best first; another model's one layout is
 * said to be the plan that follows. */
void tr_run_print_layouts(run *r);

/* ---- train_lm.c ---- */
/* Opens the token data for the built model and checks the layout against it. */
int tr_lm_setup_data(run *r, uint64_t seed);
/* Validation loss (mean per token) and next-token accuracy over the val windows. */
void tr_lm_evaluate(run *r, double *loss, double *acc);
/* Collective (every rank counts a share of the training tokens): the validation
 * perplexity of the training set's unigram distribution on rank 0 (0 elsewhere, and
 * when off or in random mode), printed there beside the model's. */
double tr_lm_unigram_baseline(run *r, double val_loss);
/* Prints (rank 0) [sample] length tokens generated after the prompt (nothing when
 * 0): after training (step < 0), or during it after `step` steps (sample.every).
 * Every rank of a split model takes part. It touches no state of training (slot 0's
 * activations only, which the next forward rebuilds), so a run with samples trains
 * exactly as one without. */
void tr_lm_sample(run *r, long step);
void tr_lm_free(run *r);

/* ---- train_pipeline.c ---- */
/* Step `step`'s forward and backward of every micro-batch of x/y in the schedule's
 * order (training passes: dropout applies); the last backward starts the dp buckets.
 * The loss sum and correct count are this rank's (non-zero on the last stage only);
 * correct NULL: the accuracy is not counted (a pass over the logits saved). */
void tr_pipeline_step(run *r, long step, const int32_t *x, const int32_t *y, float scale,
                      double *loss_sum, long *correct);
/* Forward only of B samples (evaluation): the loss sum on the last stage, else 0. */
double tr_pipeline_forward(run *r, const int32_t *x, const int32_t *y, int B, long *correct);
/* Generation through the stages, every rank of the pipeline taking part; tok[0 ..
 * n_prompt) must be the same on all of them. */
void tr_pipeline_generate(run *r, int32_t *tok, int n_prompt, int n_total,
                          const tr_sampling *s);

#endif
