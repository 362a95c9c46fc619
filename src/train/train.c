/* train.c: one training run. Every input error is found before any work and agreed
 * on by all ranks (tr_comm_agree), so it is printed once and nobody hangs. */
#include "train.h"
#include "backend/calibrate.h"
#include "backend/lowp_math.h"
#include "core/dir_lock.h"
#include "core/error.h"
#include "core/sysmem.h"
#include "core/watchdog.h"
#include "device_select.h"
#include "metrics.h"
#include "models/gpt.h"
#include "plan.h"
#include "progress.h"
#include "rank_times.h"
#include "run.h"
#include "signals.h"
#include "tensorboard.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* "FILE:LINE: " prefix for a message about one deck key */
int tr_run_key_error(run *r, const char *section, const char *name, const char *fmt, ...)
{
    char where[1400];
    tr_deck_where(r->d, section, name, where, sizeof where);
    int n = snprintf(r->err, sizeof r->err, "%s: ", where);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err + n, sizeof r->err - (size_t)n, fmt, ap);
    va_end(ap);
    return TR_EXIT_USAGE;
}

static int check_layout(run *r)
{
    int dp = (int)tr_deck_int(r->d, "parallel", "dp");
    int tp = (int)tr_deck_int(r->d, "parallel", "tp");
    int pp = (int)tr_deck_int(r->d, "parallel", "pp");
    const char *model = tr_deck_str(r->d, "model", "name");
    if ((tp != 1 || pp != 1) && strcmp(model, "gpt"))
        return tr_run_key_error(r, "parallel", tp != 1 ? "tp" : "pp",
                         "model %s trains data-parallel only: set [parallel] tp = 1 and pp = 1 "
                         "(tensor and pipeline parallelism are for the gpt model)",
                         model);
    long bucket_kib = tr_deck_int(r->d, "parallel", "bucket_kib");
    if (bucket_kib > 0 && bucket_kib < 4)
        return tr_run_key_error(r, "parallel", "bucket_kib",
                                "bucket_kib = %ld: a bucket is at least 4 KiB (0 chooses: 256 "
                                "over MPI, 25600 over NCCL)",
                                bucket_kib);
    char msg[1024];
    if (tr_comm_check_layout(r->w->size, &dp, tp, pp, msg, sizeof msg))
        return tr_run_key_error(r, "parallel", "dp", "%s", msg);
    r->global_batch = tr_deck_int(r->d, "train", "batch_size");
    r->micro = tr_deck_int(r->d, "train", "micro_batches");
    if (r->global_batch % dp)
        return tr_run_key_error(r, "train", "batch_size",
                         "impossible layout: global batch_size %ld is not divisible by the %d "
                         "data-parallel ranks; use a multiple of %d (e.g. %ld)",
                         r->global_batch, dp, dp,
                         (r->global_batch + dp - 1) / dp * dp);
    r->local_batch = r->global_batch / dp;
    if (r->local_batch % r->micro)
        return tr_run_key_error(r, "train", "micro_batches",
                         "each rank's batch of %ld samples (batch_size %ld / %d ranks) is not "
                         "divisible into %ld micro-batches",
                         r->local_batch, r->global_batch, dp, r->micro);
    r->micro_batch = r->local_batch / r->micro;
    return 0;
}

static int load_split(run *r, tr_dataset *ds, const char *img_key, const char *lab_key,
                      long limit)
{
    const char *img = tr_deck_str(r->d, "data", img_key);
    const char *lab = tr_deck_str(r->d, "data", lab_key);
    if (!*img)
        return tr_run_key_error(r, "data", img_key, "[data] %s is not set", img_key);
    if (!*lab)
        return tr_run_key_error(r, "data", lab_key, "[data] %s is not set", lab_key);
    char msg[2048];
    int rc = tr_dataset_load_idx(ds, img, lab, limit, msg, sizeof msg);
    if (rc) {
        /* name the key whose file is at fault */
        const char *key = strstr(msg, lab) ? lab_key : img_key;
        tr_run_key_error(r, "data", key, "%s%s", msg,
                  rc == TR_EXIT_NOINPUT ? " (run scripts/prepare_data.sh, or point the deck "
                                          "at your files)"
                                        : "");
    }
    return rc;
}

static int check_data(run *r)
{
    long classes = tr_deck_int(r->d, "model", "classes");
    const tr_dataset *sets[2] = {&r->train, &r->test};
    const char *keys[2] = {"train_labels", "test_labels"};
    for (int i = 0; i < 2; i++)
        if (sets[i]->max_label >= classes)
            return tr_run_key_error(r, "data", keys[i],
                             "labels go up to %d but [model] classes = %ld; raise classes",
                             sets[i]->max_label, classes);
    if (r->global_batch > r->train.n)
        return tr_run_key_error(r, "train", "batch_size",
                         "global batch_size %ld is larger than the %ld training samples "
                         "(more ranks or a larger batch than there is data)",
                         r->global_batch, r->train.n);
    if (r->test.h != r->train.h || r->test.w != r->train.w)
        return tr_run_key_error(r, "data", "test_images",
                         "test images are %dx%d but training images are %dx%d", r->test.h,
                         r->test.w, r->train.h, r->train.w);
    return 0;
}

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
static int open_run_dir(run *r)
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
static int open_metrics(run *r)
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

/* Every rank must read the same data, from which the step count comes: node-local
 * copies that differ would give ranks other loop lengths, and the job would wait
 * forever in a collective, and copies of another content would train another model.
 * Compared: the sample (window) counts and hashes of the labels and of the images
 * (tr_dataset_digest_*), or of 64 windows spread over each token file
 * (tr_token_data_digest). The training data's part of the hash goes into
 * checkpoints (r->data_digest), for a resume to compare.
 * Collective; rc is this rank's verdict so far (kept when not 0). */
static int same_data_everywhere(run *r, int rc)
{
    /* [4]: rank 0's verdict: a rank 0 that failed has nothing to compare with (its
     * own error is agreed on next) */
    int64_t mine[5] = {0, 0, 0, 0, rc}, root[5];
    if (!rc && r->lm) {
        mine[0] = r->tokens.train_windows, mine[1] = r->tokens.val_windows;
        uint64_t train = 0, both = 0;
        const char *which;
        char msg[1500];
        rc = tr_token_data_digest(&r->tokens, 0, &train, &which, msg, sizeof msg);
        if (!rc)
            rc = tr_token_data_digest(&r->tokens, 1, &both, &which, msg, sizeof msg);
        if (rc) { /* a damaged token: an input error, agreed on by the caller */
            tr_run_key_error(r, "data", !strcmp(which, "train") ? "train_tokens" : "val_tokens",
                             "%s", msg);
            mine[4] = rc;
        }
        r->data_digest = r->labels_only_digest = train;
        mine[2] = (int64_t)both;
    } else if (!rc) {
        mine[0] = r->train.n, mine[1] = r->test.n;
        const uint64_t fnv = 0xcbf29ce484222325ULL;
        uint64_t labels = tr_dataset_digest_labels(&r->train, fnv);
        r->labels_only_digest = labels;
        r->data_digest = tr_dataset_digest_images(&r->train, labels);
        mine[2] = (int64_t)tr_dataset_digest_labels(&r->test, labels);
        mine[3] = (int64_t)tr_dataset_digest_images(&r->test, r->data_digest);
    }
    memcpy(root, mine, sizeof root);
    tr_bcast(root, 5, TR_I64, 0, r->w->world);
    if (rc || root[4] || !memcmp(root, mine, 4 * sizeof *root))
        return rc;
    const char *what = r->lm ? "training and validation windows" : "training and test samples";
    const char *other = mine[0] != root[0] || mine[1] != root[1] ? ""
                        : r->lm                                  ? ", with other tokens,"
                        : mine[2] != root[2]                     ? ", with other labels,"
                                                                 : ", with other images,";
    tr_run_key_error(r, "data", r->lm ? "train_tokens" : "train_images",
                     "rank %d reads other data than rank 0: %lld and %lld %s%s against rank "
                     "0's %lld and %lld (node-local copies that differ?); every rank must "
                     "read the same files",
                     r->w->rank, (long long)mine[0], (long long)mine[1], what, other,
                     (long long)root[0], (long long)root[1]);
    return TR_EXIT_DATA;
}

/* [checkpoint] resume; a failed explicit resume is an input error every rank shares */
static int resume(run *r, uint64_t seed)
{
    tr_train_ckpt_init(&r->ckpt, r->d, r->dir, &r->model, &r->opt, r->w, &r->scaler, &r->tracker);
    r->ckpt.meta.data_digest = r->data_digest;
    r->ckpt.labels_only_digest = r->labels_only_digest;
    int reinit = 0;
    char msg[4096];
    /* before anything reads or writes a checkpoint (a signal may ask for one at any
     * step): a directory that some rank does not see would hang the first of them */
    int rc = tr_ckpt_dir_check(r->ckpt.dir, r->w->world, msg, sizeof msg);
    if (rc) {
        int set = tr_deck_is_set(r->d, "checkpoint", "dir");
        tr_run_key_error(r, set ? "checkpoint" : "run", "dir", "%s", msg);
        return rc;
    }
    rc = tr_train_ckpt_resume(&r->ckpt, r->w, &r->start_step, &reinit, msg, sizeof msg);
    if (rc) {
        tr_run_key_error(r, "checkpoint", "resume", "%s", msg);
        return rc;
    }
    rc = tr_train_ckpt_repair_best(&r->ckpt, r->w, r->start_step,
                                   (double)r->start_step / r->steps_per_epoch, msg, sizeof msg);
    if (rc) {
        tr_run_key_error(r, "checkpoint", "best", "%s", msg);
        return rc;
    }
    /* The random initial values only where nothing resumed: a resumed checkpoint
     * replaces every parameter, and drawing them costs some 40 ns a parameter on one
     * thread (GPT-2 124M: about 5 CPU-s, shared by the dp group's ranks). A fresh
     * buffer reads as zeros, as the padding the checkpoint does not store must.
     * checkpoint.init_from replaces the parameters too, but only once it has read
     * them, so they are drawn first there as before. Every rank of the world takes
     * the same branch (the checkpoint read is collective), so the draw's all-gather
     * over the dp group is reached by all of them. */
    if (r->ckpt.last_written < 0) {
        if (reinit) { /* a failed load may have filled some tensors */
            tr_optim_reset(&r->opt);
            tr_loss_scale_init(&r->scaler, r->d);
            tr_val_tracker_init(&r->tracker, r->d);
        }
        tr_model_init_params(&r->model, seed, r->w->dp_group);
        tr_optim_take_params(&r->opt, &r->model); /* mixed precision: fp32 master weights */
    }
    /* fine-tuning: given weights instead of the random ones, when nothing resumed
     * (the master weights under mixed precision: the parameters follow, below) */
    rc = tr_train_ckpt_init_from(&r->ckpt, r->w, msg, sizeof msg);
    if (rc)
        tr_run_key_error(r, "checkpoint", "init_from", "%s", msg);
    return rc;
}

/* Loss and accuracy on the test split, each rank taking a contiguous shard. */
static void evaluate_images(run *r, double *loss, double *acc)
{
    long begin, end;
    tr_shard_range(r->test.n, r->w->dp_rank, r->w->dp, &begin, &end);
    float *x = r->eval_x; /* host memory: the model uploads it where it computes */
    double sums[2] = {0, 0}; /* loss sum, correct count */
    int64_t idx[4096];
    for (long s = begin; s < end; s += r->eval_local_batch) {
        int B = (int)(end - s < r->eval_local_batch ? end - s : r->eval_local_batch);
        for (int i = 0; i < B; i++)
            idx[i] = s + i;
        int32_t labels[4096];
        tr_dataset_gather(&r->test, idx, B, x, labels, 1);
        tr_watchdog_beat("an evaluation batch", -1);
        long correct = 0;
        sums[0] += tr_model_forward(&r->model, x, labels, B, &correct);
        sums[1] += (double)correct;
    }
    tr_allreduce(sums, sums, 2, TR_F64, TR_SUM, r->w->dp_group);
    *loss = sums[0] / (double)r->test.n;
    *acc = sums[1] / (double)r->test.n;
}

static void evaluate(run *r, double *loss, double *acc)
{
    double t0 = tr_wtime();
    if (r->lm)
        tr_lm_evaluate(r, loss, acc);
    else
        evaluate_images(r, loss, acc);
    r->t_eval += tr_wtime() - t0;
}

/* "{0,1} {2,3} ..." : the groups of ranks that differ only in one coordinate (tp
 * stride 1, pp stride tp, dp stride tp x pp), the first few of them. */
static void print_groups(const tr_world *w, const char *what, int size, int stride)
{
    int ngroups = w->size / size, shown = ngroups < 4 ? ngroups : 4;
    printf("  %s groups:", what);
    for (int g = 0, found = 0; found < shown && g < w->size; g++) {
        /* g is the lowest rank of its group when its own coordinate is 0 */
        if ((g / stride) % size)
            continue;
        found++;
        printf(" {");
        for (int i = 0; i < size && i < 8; i++)
            printf(i ? ",%d" : "%d", g + i * stride);
        printf(size > 8 ? ",...}" : "}");
    }
    if (ngroups > shown)
        printf(" ... (%d groups)", ngroups);
    printf("\n");
}

/* what carries a group's sums (rank 0's group; the others are alike) */
static const char *summed_by(const tr_group *g)
{
    if (tr_group_has_nccl(g))
        return "NCCL";
    if (tr_comm_staging_on()) /* (the device's buffers; the host path below carries them) */
        return tr_group_shares_memory(g) ? "shared memory, device memory staged through the host"
                                         : "MPI, device memory staged through the host";
    return tr_group_shares_memory(g) ? "shared memory" : "MPI";
}

static void print_layout(const run *r)
{
    const tr_world *w = r->w;
    if (w->size == 1)
        return;
    printf("layout: %d ranks = dp %d x pp %d x tp %d (tp innermost, then pp, then dp); zero %ld",
           w->size, w->dp, w->pp, w->tp, tr_deck_int(r->d, "parallel", "zero"));
    if (r->lm)
        printf(", recompute %s", tr_deck_str(r->d, "train", "recompute"));
    if (w->pp > 1)
        printf(", schedule %s over %ld micro-batches", tr_deck_str(r->d, "parallel", "schedule"),
               r->micro);
    if (w->dp > 1)
        printf("; dp sums through %s", summed_by(w->dp_group));
    if (w->tp > 1)
        printf("; tp sums through %s", summed_by(w->tp_group));
    printf("\n");
    if (w->tp > 1)
        print_groups(w, "tp", w->tp, 1);
    if (w->pp > 1) {
        print_groups(w, "pp", w->pp, w->tp);
        const tr_gpt_config *c = tr_gpt_config_of(&r->model);
        printf("  stages:");
        for (int s = 0; s < w->pp && c; s++) {
            char blocks[48];
            printf("%s %d: %s%s%s", s ? "," : "", s,
                   tr_gpt_stage_blocks_text(c, w->pp, s, blocks, sizeof blocks),
                   s == 0 ? " + embeddings" : "", s == w->pp - 1 ? " + head" : "");
        }
        printf("\n");
        tr_plan_print_stage_work(&r->model, w->pp, r->micro, stdout);
    }
    if (w->dp > 1 && w->dp < w->size)
        print_groups(w, "dp", w->dp, w->tp * w->pp);
}

static void print_banner(run *r)
{
    if (r->w->rank)
        return;
    print_layout(r);
    printf("model %s: %zu parameters, %d layers", r->model.name, r->model.nparams_logical,
           r->model.nlayers);
    const tr_gpt_config *gc = tr_gpt_config_of(&r->model);
    if (gc && (gc->embd_pdrop > 0 || gc->attn_pdrop > 0 || gc->resid_pdrop > 0))
        printf("; dropout in training steps: embeddings %g, attention %g, residual %g",
               (double)gc->embd_pdrop, (double)gc->attn_pdrop, (double)gc->resid_pdrop);
    printf("\n");
    if (r->lm)
        printf("data: %ld train, %ld validation windows of %d tokens%s; global batch %ld = %d "
               "rank%s x %ld (%ld micro-batch%s of %ld)\n",
               r->tokens.train_windows, r->tokens.val_windows, r->model.targets_per_sample,
               r->tokens.random ? " (random tokens: a benchmark, not training)" : "",
               r->global_batch, r->w->dp, r->w->dp == 1 ? "" : "s", r->local_batch, r->micro,
               r->micro == 1 ? "" : "es", r->micro_batch);
    else
        printf("data: %ld train, %ld test samples of %dx%dx%d; global batch %ld = %d rank%s x %ld "
               "(%ld micro-batch%s of %ld)\n",
               r->train.n, r->test.n, r->train.c, r->train.h, r->train.w, r->global_batch, r->w->dp,
               r->w->dp == 1 ? "" : "s", r->local_batch, r->micro, r->micro == 1 ? "" : "es",
               r->micro_batch);
    printf("run: %ld step%s (%ld per epoch), directory %s\n", r->total_steps,
           r->total_steps == 1 ? "" : "s", r->steps_per_epoch, r->dir);
    char unused[2048];
    if (tr_deck_unused_keys(r->d, unused, sizeof unused)) /* "note: " before each line */
        for (char *line = strtok(unused, "\n"); line; line = strtok(NULL, "\n"))
            printf("note: %s\n", line);
    if (r->start_step >= r->total_steps && r->ckpt.last_written >= 0)
        printf("note: resumed at step %ld, at or past this run's last step: nothing to train, "
               "the model is evaluated (raise train.steps or train.epochs to go on)\n",
               r->start_step);
    else if (tr_val_tracker_exhausted(&r->tracker))
        printf("note: resumed at step %ld, where train.early_stop = %ld had ended this run (the "
               "validation loss last fell at step %ld): nothing to train, the model is evaluated "
               "(raise early_stop to go on)\n",
               r->start_step, r->tracker.patience, r->tracker.best_step);
    else if (r->start_step >= r->total_steps) /* 0 steps asked for: evaluate (and sample) */
        printf("note: 0 training steps: the model is evaluated as %s\n",
               r->ckpt.init_from[0] ? "checkpoint.init_from gives it" : "initialised");
    /* every model's progress line shows MFU: say against what */
    printf("mfu: against %.1f GFLOP/s per rank (%s)\n", r->peak_gflops, r->peak_source);
    fflush(stdout);
}

/* After the session's first step, on a device that can tell (CUDA): how much
 * memory the largest rank's GPU holds beyond the plan's reservation, which is what
 * the libraries and the driver took on their own (kernel code loaded on first use,
 * ...); gpu.trainer_on_gpu checks it stays small. Collective. */
static void report_beyond_plan(run *r)
{
    /* (not where ranks share a GPU: its memory in use counts the others' too) */
    if (!r->dev->beyond_reservation || tr_staged_comm())
        return;
    double mine = r->dev->beyond_reservation(), most = 0;
    tr_allreduce(&mine, &most, 1, TR_F64, TR_MAX, r->w->world);
    if (r->w->rank == 0) {
        char a[32];
        printf("device memory: %s in use beyond the plan's reservation after the first "
               "step (largest rank)\n",
               tr_bytes_str(a, sizeof a, most > 0 ? most : 0));
        fflush(stdout);
    }
}

/* setup's answer when it has printed a plan instead of preparing a run */
#define PLAN_DONE (-1)

static int setup(run *r)
{
    /* [system] device first: a GPU job without usable GPUs stops before any work
     * (a plan allocates nothing and is made anywhere, so it skips this) */
    int rc = r->rt->plan_ranks ? 0 : tr_device_select(r->d, r->w);
    if (rc)
        return rc;
    const char *device = tr_deck_str(r->d, "system", "device");
#ifndef TRAINER_HAVE_CUDA
    /* a plan skips tr_device_select, but it cannot plan a GPU it has no model of:
     * the CPU device's figures (fp32 logits, no backend workspace, no host-memory
     * line) would pass for the GPU's */
    if (r->rt->plan_ranks && !strcmp(device, "cuda"))
        return tr_comm_agree(
            r->w,
            tr_run_key_error(r, "system", "device",
                             "[system] device = cuda, but this trainer was built without CUDA, "
                             "so it cannot plan a GPU's memory: plan with a CUDA build "
                             "(cmake -DTRAINER_CUDA=ON; README, Building), or set device = cpu"),
            r->err);
#endif
    r->dev = &tr_cpu_device;
    if (!strcmp(device, "cpu-guarded"))
        r->dev = &tr_guarded_device;
    tr_comm_set_memory_guard(r->dev->open, r->dev->close);
#ifdef TRAINER_HAVE_CUDA
    if (!strcmp(device, "cuda"))
        r->dev = &tr_gpu_device;
#endif
    /* the device's matrix products follow the precision (kernels.h: tensor cores on a
     * GPU), set before its first kernel */
    const char *prec = tr_deck_str(r->d, "train", "precision");
    r->precision = tr_precision_parse(prec);
    r->dev->k->set_gemm_precision(r->precision);
    rc = check_layout(r);
    if (rc && r->rt->plan_layouts) { /* --layouts plans the others from this one */
        size_t n = strlen(r->err);
        snprintf(r->err + n, sizeof r->err - n,
                 " (--layouts starts from the deck's layout, which must be possible at %d "
                 "ranks: add parallel.dp=0 parallel.tp=1 parallel.pp=1, and a batch_size "
                 "and micro_batches they divide)",
                 r->w->size);
    }
    rc = tr_comm_agree(r->w, rc, r->err);
    if (rc)
        return rc;
    int tp = (int)tr_deck_int(r->d, "parallel", "tp"), pp = (int)tr_deck_int(r->d, "parallel", "pp");
    if (r->rt->plan_ranks) /* one process standing for rank 0 of the planned layout */
        r->w->dp = r->w->size / (tp * pp), r->w->tp = tp, r->w->pp = pp, r->w->dp_rank = 0;
    else
        tr_comm_make_grid(r->w, r->w->size / (tp * pp), tp, pp);
    if (!r->rt->plan_ranks && r->dev->holds && tr_staged_comm()) {
        /* for tests: device memory's collectives through host copies, no NCCL; and
         * MPI itself gets no access to the guarded device's memory, so a call on it
         * that is not staged dies there */
        tr_comm_stage_device_memory(&(tr_comm_staging){r->dev->holds, r->dev->download,
                                                       r->dev->upload});
        tr_comm_set_memory_guard(NULL, NULL);
    } else if (!rc && !r->rt->plan_ranks &&
               !strcmp(tr_deck_str(r->d, "system", "device"), "cuda")) {
        /* pp > 1 too: the pipeline's messages go over links, a stream per direction */
        rc = tr_comm_use_nccl(r->w, r->err, sizeof r->err);
        rc = tr_comm_agree(r->w, rc, r->err);
        if (rc)
            return rc;
    }

    r->err[0] = '\0';
    uint64_t seed = (uint64_t)tr_deck_int(r->d, "train", "seed");
    const char *model = tr_deck_str(r->d, "model", "name");
    const char *format = tr_deck_str(r->d, "data", "format");
    r->lm = !strcmp(model, "gpt");
    if (r->lm != (strcmp(format, "idx") != 0)) {
        rc = tr_run_key_error(r, "data", "format",
                              "model %s reads %s, but [data] format = %s; set format = %s",
                              model, r->lm ? "tokens" : "images", format,
                              r->lm ? "tokens (or random_tokens for a benchmark)" : "idx");
    } else if (r->lm) {
        char msg[1024];
        tr_model_layout lay = tr_run_model_layout(r);
        if (tr_model_build(&r->model, model, r->d, (tr_shape){1, 1, 1}, &lay, msg, sizeof msg))
            rc = tr_run_key_error(r, strstr(msg, "[parallel]") ? "parallel" : "model",
                                  strstr(msg, "[parallel] tp") ? "tp"
                                  : strstr(msg, "[parallel] pp") ? "pp"
                                                                 : "n_head",
                                  "%s", msg);
        if (!rc)
            rc = tr_lm_setup_data(r, seed);
    } else {
        rc = load_split(r, &r->train, "train_images", "train_labels",
                        tr_deck_int(r->d, "data", "train_limit"));
        if (!rc)
            rc = load_split(r, &r->test, "test_images", "test_labels", 0);
        if (!rc)
            rc = check_data(r);
    }
    rc = same_data_everywhere(r, rc);
    if (!rc && !r->lm) {
        char msg[1024];
        tr_shape input = {r->train.c, r->train.h, r->train.w};
        if (tr_model_build(&r->model, tr_deck_str(r->d, "model", "name"), r->d, input, NULL, msg,
                           sizeof msg)) {
            /* where the message names a key first ("[model] hidden ..."), its line */
            char section[32] = "model", key[64] = "name";
            if (sscanf(msg, "[%31[a-z]] %63[a-z_0-9]", section, key) != 2)
                snprintf(section, sizeof section, "model"), snprintf(key, sizeof key, "name");
            rc = tr_run_key_error(r, section, key, "%s", msg);
        }
    }
    rc = tr_comm_agree(r->w, rc, r->err);
    if (rc)
        return rc;

    rc = r->rt->plan_ranks ? 0 : open_run_dir(r); /* a plan writes nothing */
    rc = tr_comm_agree(r->w, rc, r->err);
    if (rc)
        return rc;

    if (r->lm) {
        tr_token_data_start(&r->tokens, r->global_batch, r->w->dp_rank, r->w->dp,
                            tr_deck_bool(r->d, "data", "shuffle"));
        r->steps_per_epoch = tr_token_data_steps_per_epoch(&r->tokens);
    } else {
        r->loader = tr_loader_create(&r->train, r->global_batch, r->w->dp_rank, r->w->dp, seed,
                                     tr_deck_bool(r->d, "data", "shuffle"),
                                     tr_deck_bool(r->d, "data", "prefetch"));
        r->steps_per_epoch = tr_loader_steps_per_epoch(r->loader);
    }
    long steps = tr_deck_int(r->d, "train", "steps");
    r->total_steps = steps ? steps : tr_deck_int(r->d, "train", "epochs") * r->steps_per_epoch;
    long eval_every = tr_deck_int(r->d, "train", "eval_every");
    long patience = tr_deck_int(r->d, "train", "early_stop");
    if (patience && (!eval_every || eval_every >= r->total_steps)) {
        rc = tr_run_key_error(r, "train", "early_stop",
                              "[train] early_stop = %ld needs evaluations during training to "
                              "compare, and eval_every = %ld gives %s; set eval_every below the "
                              "run's %ld steps (e.g. %ld), or early_stop = 0",
                              patience, eval_every,
                              eval_every ? "only the final one" : "none before the end",
                              r->total_steps, r->total_steps / 10 ? r->total_steps / 10 : 1);
        return tr_comm_agree(r->w, rc, r->err);
    }

    long eval_global = tr_deck_int(r->d, "train", "eval_batch_size");
    r->eval_local_batch = (eval_global + r->w->dp - 1) / r->w->dp;
    if (r->eval_local_batch > 4096)
        r->eval_local_batch = 4096;
    /* no larger than a rank's share of the test set: memory for batches it never has */
    long shard = r->lm ? 0 : (r->test.n + r->w->dp - 1) / r->w->dp;
    if (shard > 0 && r->eval_local_batch > shard)
        r->eval_local_batch = shard;
    if (r->lm && r->eval_local_batch > r->micro_batch)
        r->eval_local_batch = r->micro_batch; /* sequences are large: eval as trained */
    long max_batch = r->micro_batch > r->eval_local_batch ? r->micro_batch : r->eval_local_batch;
    if (r->rt->plan_ranks) {
        if (r->rt->plan_layouts)
            tr_run_print_layouts(r);
        if (!r->rt->plan_layouts || !r->lm)
            tr_run_print_plan(r, (int)max_batch);
        return PLAN_DONE;
    }
    rc = tr_comm_agree(r->w, tr_run_check_memory(r, (int)max_batch), r->err);
    if (rc)
        return rc;
    rc = tr_comm_agree(r->w, tr_run_reserve(r, (int)max_batch), r->err);
    if (rc)
        return rc;
    tr_model_allocate(&r->model, r->dev, (int)max_batch);
    if (!r->lm)
        r->eval_x = tr_alloc((size_t)r->eval_local_batch * tr_shape_numel(r->model.input) *
                                 sizeof(float), "evaluation batch");
    /* the initial values are drawn in resume, where no checkpoint gives them */
    tr_loss_scale_init(&r->scaler, r->d);
    tr_val_tracker_init(&r->tracker, r->d);
    int zero = (int)tr_deck_int(r->d, "parallel", "zero");
    size_t olo = 0, ohi = r->model.nparams; /* ZeRO: this rank's slice of the state */
    if (zero)
        tr_dp_slice(r->model.nparams, r->w->dp, r->w->dp_rank, &olo, &ohi);
    tr_optim_init(&r->opt, r->d, r->dev, r->model.nparams, olo, ohi, r->total_steps,
                  r->precision);
    r->sharded = r->w->tp > 1 || r->w->pp > 1 || (zero && r->w->dp > 1);
    rc = resume(r, seed);
    if (!rc)
        rc = open_metrics(r);
    rc = tr_comm_agree(r->w, rc, r->err);
    if (rc)
        return rc;
    /* CPU ranks on one node sum gradients (and tp activations) in shared memory */
    if (r->dev->host_memory && tr_deck_bool(r->d, "parallel", "shm_allreduce")) {
        tr_group_share_memory(r->w->dp_group, r->model.nparams);
        if (r->w->tp > 1)
            tr_group_share_memory(r->w->tp_group, SIZE_MAX);
    }
    size_t bucket = (size_t)tr_deck_int(r->d, "parallel", "bucket_kib") * 1024 / sizeof(float);
    if (!bucket) /* NCCL: some 20 buckets for GPT-2 124M, not 1900 latency-bound ones */
        bucket = (tr_group_has_nccl(r->w->dp_group) ? 25600 : 256) * (size_t)1024 / sizeof(float);
    tr_dp_init(&r->dp, r->w->dp_group, r->dev, r->model.grads, r->model.nparams, bucket, zero);
    if (r->precision) {
        /* a checkpoint loaded the master weights: the parameters are their rounding */
        tr_optim_give_params(&r->opt, &r->model);
        tr_dp_gather_params(&r->dp, r->model.params);
    }
    if (r->lm) {
        size_t lo, hi;
        tr_gpt_tied_range(&r->model, &lo, &hi);
        if (r->w->emb_group) /* the tied embedding's copies are summed first */
            tr_dp_hold(&r->dp, lo, hi);
        r->ops = tr_alloc(2 * (size_t)r->micro * sizeof *r->ops, "pipeline schedule");
        r->nops = tr_pipeline_ops(r->schedule, r->w->pp, r->w->pp_rank, (int)r->micro, r->ops);
        r->fwd_req = tr_alloc((size_t)r->slots * sizeof *r->fwd_req, "pipeline requests");
        memset(r->fwd_req, 0, (size_t)r->slots * sizeof *r->fwd_req);
    }
    r->peak_gflops = tr_deck_float(r->d, "system", "peak_gflops");
    snprintf(r->peak_source, sizeof r->peak_source, "set by [system] peak_gflops");
    if (r->peak_gflops <= 0) {
        /* every rank measures its own share of the node at once, as it will train */
        tr_barrier(r->w->world);
        double mine = r->dev->peak_gflops(r->peak_source, sizeof r->peak_source), sum = 0;
        tr_allreduce(&mine, &sum, 1, TR_F64, TR_SUM, r->w->world);
        r->peak_gflops = sum / r->w->size;
    }
    print_banner(r);
    return 0;
}

/* Frees what this rank holds. Watched: each step is this rank's own (no collective),
 * so one that never returns (a GPU stuck in cudaFree, a prefetch thread stuck on a
 * dead file system) ends the job by the watchdog instead of leaving the other ranks
 * in MPI_Finalize until the time limit. The watchdog stops at the end, before the
 * communicators are freed and MPI_Finalize, which wait for the other ranks, and rank
 * 0 may still be sampling (tr_lm_sample of a model it holds whole) for longer than
 * run.hang_minutes. */
static void teardown(run *r)
{
    tr_watchdog_beat("the start of shutdown (freeing its loader, files, memory, device)", -1);
    if (r->loader)
        tr_loader_destroy(r->loader);
    if (r->metrics)
        fclose(r->metrics);
    tr_tb_close(r->tb);
    tr_train_ckpt_free(&r->ckpt);
    tr_dp_free(&r->dp);
    tr_free(r->ops);
    tr_free(r->fwd_req);
    tr_optim_free(&r->opt);
    tr_model_free(&r->model);
    tr_free(r->eval_x);
    if (r->dev)
        r->dev->release();
    if (r->lm) {
        tr_token_data_close(&r->tokens);
        tr_lm_free(r);
    }
    tr_dataset_free(&r->train);
    tr_dataset_free(&r->test);
    tr_watchdog_stop();
}

/* What train_step did with its gradients. */
enum { STEP_SKIPPED = 0, STEP_UPDATED = 1, STEP_DIVERGED = 2 };

/* One optimizer step: micro-batches accumulate, the last one's backward overlaps
 * the gradient all-reduce. Returns this rank's loss sum and correct count (counted on
 * a logged step only: the GPT's is a pass over its logits, and on a GPU a wait for
 * the device; 0 otherwise), and STEP_SKIPPED when fp16-mixed's dynamic loss scaling
 * skipped the update (its gradients overflowed), STEP_DIVERGED (no update) when the
 * gradients' norm was taken and is not finite otherwise. */
static int train_step(run *r, long step, int logged, double *loss_sum, long *correct,
                      double *gnorm, float *lr)
{
    const void *x;
    const int32_t *y;
    tr_model *m = &r->model;
    size_t in = tr_shape_numel(m->input), in_bytes = sizeof(float);
    double t0 = tr_wtime();
    if (r->lm) {
        const int32_t *tok;
        tr_token_data_batch(&r->tokens, step, &tok, &y);
        x = tok;
        in_bytes = sizeof(int32_t);
    } else {
        const float *px;
        tr_loader_next(r->loader, step, &px, &y);
        x = px;
    }
    r->t_data += tr_wtime() - t0;
    m->dev->zero(m->grads, m->nparams * sizeof(float));
    size_t tps = (size_t)m->targets_per_sample;
    /* the mean over every target of the global batch, times the loss scale */
    float scale = (float)(r->scaler.scale / ((double)r->global_batch * (double)tps));
    *loss_sum = 0;
    *correct = 0;
    long *count = logged ? correct : NULL; /* the accuracy only where it is written */
    if (r->lm) {
        tr_pipeline_step(r, step, x, y, scale, loss_sum, count);
    } else {
        for (long k = 0; k < r->micro; k++) {
            const void *xk = (const char *)x + (size_t)k * r->micro_batch * in * in_bytes;
            const int32_t *yk = y + (size_t)k * r->micro_batch * tps;
            long ok = 0;
            *loss_sum += tr_model_forward(m, xk, yk, (int)r->micro_batch, count ? &ok : NULL);
            *correct += ok;
            int last = k == r->micro - 1;
            if (last)
                tr_dp_begin(&r->dp);
            tr_model_backward(m, xk, yk, (int)r->micro_batch, scale,
                              last ? tr_dp_grads_ready : NULL, &r->dp);
        }
    }
    if (r->w->emb_group) { /* the two copies of the tied embedding: one gradient */
        size_t lo, hi;
        tr_gpt_tied_range(m, &lo, &hi);
        tr_allreduce(m->grads + lo, m->grads + lo, hi - lo, TR_F32, TR_SUM, r->w->emb_group);
    }
    tr_dp_finish(&r->dp);
    /* the norm is the same on every rank (reduced, or of reduced gradients), so every
     * rank takes the same decision on an overflow */
    double gs = r->scaler.scale;
    /* The norm is a pass over every gradient (and an all-reduce when sharded): taken
     * where it changes the update (clipping, unscaling, overflow) or is logged. The
     * decision depends on the step alone, so every rank takes the same one. */
    int need_norm = logged || r->opt.clip_norm > 0 || gs != 1.0 || r->scaler.dynamic;
    *gnorm = 0;
    if (need_norm && r->sharded)
        *gnorm = tr_optim_clip_sharded(&r->opt, m, r->dp.lo, r->dp.hi, r->w->tp_rank,
                                       r->w->world, gs);
    else if (need_norm)
        *gnorm = tr_optim_clip(&r->opt, m->k, m->grads, m->nparams, gs);
    *lr = tr_optim_lr(&r->opt, step);
    /* an update with inf or NaN would make every weight NaN: no loss scaling to
     * retry with, so the run stops with the weights it has (see diverged) */
    if (need_norm && !r->scaler.dynamic && !isfinite(*gnorm))
        return STEP_DIVERGED;
    if (!tr_loss_scale_update(&r->scaler, isfinite(*gnorm)))
        return STEP_SKIPPED;
    /* AdamW's bias correction counts the updates made, not the steps skipped */
    tr_optim_step(&r->opt, m, step - r->scaler.skipped, *lr);
    tr_dp_gather_params(&r->dp, m->params);
    return STEP_UPDATED;
}

/* A step whose loss or gradients are no longer finite: rank 0 says so and what to
 * change; the caller stops before any evaluation or checkpoint of that state, so the
 * checkpoints on disk (every earlier one) stay the last finite ones. norm_taken: the
 * gradients' norm was taken (and not finite: the update was not made). */
static void diverged(const run *r, long done, double loss, double gnorm, int norm_taken)
{
    if (r->w->rank)
        return;
    char why[96], l[32];
    if (isnan(loss)) /* rather than printf's "-nan" */
        snprintf(l, sizeof l, "NaN");
    else
        snprintf(l, sizeof l, "%g", loss);
    if (norm_taken)
        snprintf(why, sizeof why, "the gradients' norm is %s (the loss %s)",
                 isnan(gnorm) ? "NaN" : "inf", l);
    else
        snprintf(why, sizeof why, "the loss is %s", l);
    char newest[96] = "none of this run's checkpoints was written before it";
    if (r->ckpt.last_written >= 0)
        snprintf(newest, sizeof newest, "the newest checkpoint, step %ld's, is the last finite one",
                 r->ckpt.last_written);
    int fixed_fp16 =
        !strcmp(tr_deck_str(r->d, "train", "precision"), "fp16-mixed") && !r->scaler.dynamic;
    fprintf(stderr,
            "error: training diverged at step %ld: %s; stopped without evaluating or "
            "checkpointing that state (%s): %slower optim.lr, raise optim.warmup_steps or set "
            "optim.clip_grad_norm\n",
            done, why, newest,
            fixed_fp16 ? "let fp16-mixed scale the loss dynamically (train.loss_scale = 0), "
                         "or lower its fixed train.loss_scale; or "
                       : "");
    fflush(stderr);
}

/* The global batch's loss sum and correct count from this rank's: the last stage's
 * tp rank 0 of every pipeline answers (all tp ranks have the same), summed. */
void tr_run_sum_loss(const run *r, double sums[2])
{
    const tr_world *w = r->w;
    if (w->pp_rank != w->pp - 1 || w->tp_rank != 0)
        sums[0] = sums[1] = 0;
    tr_allreduce(sums, sums, 2, TR_F64, TR_SUM, w->world);
}

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
    int rc = setup(r);
    r->t_setup = tr_wtime() - rt->start_time;
    if (rc) {
        teardown(r);
        free(r);
        return rc == PLAN_DONE ? 0 : rc;
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
            teardown(r);
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
        int did = train_step(r, step, logged, &loss_sum, &correct, &gnorm, &lr);
        if (did == STEP_SKIPPED && w->rank == 0) {
            tr_progress_break(&prog);
            printf("fp16: gradients overflowed at step %ld: update skipped, loss scale %g -> "
                   "%g\n",
                   step + 1, used_scale, r->scaler.scale);
            fflush(stdout);
        }
        double t1 = tr_wtime();
        steps_run++;
        if (step == r->start_step)
            report_beyond_plan(r);
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
        if (did == STEP_DIVERGED || (did == STEP_UPDATED && !isfinite(last_loss))) {
            tr_progress_break(&prog);
            diverged(r, done, last_loss, gnorm, did == STEP_DIVERGED);
            save(r, -1, 0, 0); /* one of an earlier step in the background: made visible */
            rc = TR_EXIT_DATA;
            break;
        }
        int improved = 0;
        if ((eval_every && done % eval_every == 0) || done == r->total_steps) {
            evaluate(r, &test_loss, &test_acc);
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
        teardown(r);
        free(r);
        return rc;
    }
    if (!evaluated) { /* nothing trained (0 steps, or resumed at or past the last): the
                       * model is still reported */
        evaluate(r, &test_loss, &test_acc);
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
    teardown(r);
    free(r);
    return 0;
}
