/* train_banner.c: what rank 0 prints of a run before its first step (the layout
 * and its groups, the model, the data, the run, MFU's peak) and, after it, the
 * device memory beyond the plan. */
#include "core/sysmem.h"
#include "device_select.h"
#include "models/gpt.h"
#include "plan.h"
#include "run.h"

#include <stdio.h>
#include <string.h>

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
    if (w->tp > 1 && r->lm && tr_deck_bool(r->d, "parallel", "sequence_parallel"))
        printf(", sequence parallel (a tp rank keeps 1/%d of the tokens between products)", w->tp);
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
        printf("%s\n", c && c->nstage_blocks ? " (by [parallel] stage_blocks)" : "");
        tr_plan_print_stage_work(&r->model, w->pp, r->micro, stdout);
    }
    if (w->dp > 1 && w->dp < w->size)
        print_groups(w, "dp", w->dp, w->tp * w->pp);
}

void tr_run_print_banner(run *r)
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
void tr_run_report_beyond_plan(run *r)
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
