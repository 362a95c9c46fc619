/* train_setup.c: a run's set-up and teardown, in phases (tr_run_setup): the device
 * chosen, the layout and data checked, the model built, the run directory opened
 * (run_dir.c), the steps counted, memory checked and reserved, the resume decision,
 * the optimizer and gradient reduction made; and what a rank holds freed at the end.
 * Every input error is found before any work and agreed on by all ranks
 * (tr_comm_agree), so it is printed once and nobody hangs. */
#include "backend/lowp_math.h"
#include "core/error.h"
#include "core/watchdog.h"
#include "device_select.h"
#include "models/gpt.h"
#include "run.h"
#include "tensorboard.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* [system] device: chosen (a GPU job without usable GPUs stops here), its matrix
 * products set to the precision. */
static int choose_device(run *r)
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
    return 0;
}

/* The layout checked against the ranks and the batch, the grid of groups made, and
 * on GPUs their NCCL communicators (or the tests' staging through host copies). */
static int make_layout(run *r)
{
    int rc = check_layout(r);
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
    return 0;
}

/* The data read and checked and the model built, the same on every rank. */
static int build_model_and_data(run *r, uint64_t seed)
{
    r->err[0] = '\0';
    int rc = 0;
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
                                  strstr(msg, "[parallel] tp")             ? "tp"
                                  : strstr(msg, "[parallel] stage_blocks") ? "stage_blocks"
                                  : strstr(msg, "[parallel] pp")           ? "pp"
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
    return 0;
}

/* The loader or the token windows started, and the run's length in steps checked. */
static int count_steps(run *r, uint64_t seed)
{
    int rc;
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
    /* random tokens never end an epoch (token_data.c): counted in epochs, such a run
     * would train some 2^40 windows, for ever in practice (epochs = 0 trains nothing:
     * an evaluation or a sample alone) */
    if (!steps && r->total_steps && r->lm && r->tokens.random) {
        rc = tr_run_key_error(r, "train", "steps",
                              "[train] steps = 0 counts the run in epochs (%ld), and "
                              "data.format = random_tokens (a benchmark) has none to count; "
                              "set [train] steps, e.g. steps = 20",
                              tr_deck_int(r->d, "train", "epochs"));
        return tr_comm_agree(r->w, rc, r->err);
    }
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
    return 0;
}

/* The evaluation batch a rank takes, and so the largest batch activations are sized
 * for. */
static long size_batches(run *r)
{
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
    return max_batch;
}

/* The plan's memory checked and reserved, the model and optimizer allocated, then a
 * checkpoint resumed (or the initial weights drawn) and the metrics opened. */
static int allocate_and_resume(run *r, long max_batch, uint64_t seed)
{
    int rc = tr_comm_agree(r->w, tr_run_check_memory(r, (int)max_batch), r->err);
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
        rc = tr_run_open_metrics(r);
    rc = tr_comm_agree(r->w, rc, r->err);
    if (rc)
        return rc;
    return 0;
}

/* The gradient reduction: shared-memory windows on a node, buckets, the parameters
 * gathered from ZeRO's slices, the pipeline's schedule. */
static void start_reductions(run *r)
{
    int zero = (int)tr_deck_int(r->d, "parallel", "zero");
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
}

/* The peak MFU is measured against: set, or each rank's device measured at once. */
static void measure_peak(run *r)
{
    r->peak_gflops = tr_deck_float(r->d, "system", "peak_gflops");
    snprintf(r->peak_source, sizeof r->peak_source, "set by [system] peak_gflops");
    if (r->peak_gflops <= 0) {
        /* every rank measures its own share of the node at once, as it will train */
        tr_barrier(r->w->world);
        double mine = r->dev->peak_gflops(r->peak_source, sizeof r->peak_source), sum = 0;
        tr_allreduce(&mine, &sum, 1, TR_F64, TR_SUM, r->w->world);
        r->peak_gflops = sum / r->w->size;
    }
}

int tr_run_setup(run *r)
{
    int rc = choose_device(r);
    if (rc)
        return rc;
    rc = make_layout(r);
    if (rc)
        return rc;
    uint64_t seed = (uint64_t)tr_deck_int(r->d, "train", "seed");
    rc = build_model_and_data(r, seed);
    if (rc)
        return rc;
    rc = r->rt->plan_ranks ? 0 : tr_run_open_dir(r); /* a plan writes nothing */
    rc = tr_comm_agree(r->w, rc, r->err);
    if (rc)
        return rc;
    rc = count_steps(r, seed);
    if (rc)
        return rc;
    long max_batch = size_batches(r);
    if (r->rt->plan_ranks) {
        if (r->rt->plan_layouts)
            tr_run_print_layouts(r);
        if (!r->rt->plan_layouts || !r->lm)
            tr_run_print_plan(r, (int)max_batch);
        return TR_RUN_PLAN_DONE;
    }
    rc = allocate_and_resume(r, max_batch, seed);
    if (rc)
        return rc;
    start_reductions(r);
    measure_peak(r);
    tr_run_print_banner(r);
    return 0;
}

/* Frees what this rank holds. Watched: each step is this rank's own (no collective),
 * so one that never returns (a GPU stuck in cudaFree, a prefetch thread stuck on a
 * dead file system) ends the job by the watchdog instead of leaving the other ranks
 * in MPI_Finalize until the time limit. The watchdog stops at the end, before the
 * communicators are freed and MPI_Finalize, which wait for the other ranks, and rank
 * 0 may still be sampling (tr_lm_sample of a model it holds whole) for longer than
 * run.hang_minutes. */
void tr_run_teardown(run *r)
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
