/* train_step.c: one training step of a run (its gradients reduced, clipped and
 * applied), what a step that diverged prints, the global batch's loss sum, and one
 * evaluation of the model. */
#include "core/watchdog.h"
#include "models/gpt.h"
#include "run.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

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

void tr_run_evaluate(run *r, double *loss, double *acc)
{
    double t0 = tr_wtime();
    if (r->lm)
        tr_lm_evaluate(r, loss, acc);
    else
        evaluate_images(r, loss, acc);
    r->t_eval += tr_wtime() - t0;
}

/* One optimizer step: micro-batches accumulate, the last one's backward overlaps
 * the gradient all-reduce. Returns this rank's loss sum and correct count (counted on
 * a logged step only: the GPT's is a pass over its logits, and on a GPU a wait for
 * the device; 0 otherwise), and TR_RUN_STEP_SKIPPED when fp16-mixed's dynamic loss scaling
 * skipped the update (its gradients overflowed), TR_RUN_STEP_DIVERGED (no update) when the
 * gradients' norm was taken and is not finite otherwise. */
int tr_run_train_step(run *r, long step, int logged, double *loss_sum, long *correct, double *gnorm,
                      float *lr)
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
     * retry with, so the run stops with the weights it has (see tr_run_diverged) */
    if (need_norm && !r->scaler.dynamic && !isfinite(*gnorm))
        return TR_RUN_STEP_DIVERGED;
    if (!tr_loss_scale_update(&r->scaler, isfinite(*gnorm)))
        return TR_RUN_STEP_SKIPPED;
    /* AdamW's bias correction counts the updates made, not the steps skipped */
    tr_optim_step(&r->opt, m, step - r->scaler.skipped, *lr);
    tr_dp_gather_params(&r->dp, m->params);
    return TR_RUN_STEP_UPDATED;
}

/* A step whose loss or gradients are no longer finite: rank 0 says so and what to
 * change; the caller stops before any evaluation or checkpoint of that state, so the
 * checkpoints on disk (every earlier one) stay the last finite ones. norm_taken: the
 * gradients' norm was taken (and not finite: the update was not made). */
void tr_run_diverged(const run *r, long done, double loss, double gnorm, int norm_taken)
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
