/* plan.c: trainer --plan's report (plan.h). */
#include "plan.h"
#include "core/sysmem.h"

#include <string.h>

static const char *B(char *buf, size_t len, double bytes) { return tr_bytes_str(buf, len, bytes); }

void tr_plan_print(const tr_plan *p, const tr_deck *d, const tr_model *m, const tr_world *w,
                   long global_batch, long local_batch, long micro, double device_memory,
                   FILE *out)
{
    char a[32], b[32], c[32];
    int adamw = !strcmp(tr_deck_str(d, "optim", "name"), "adamw");
    fprintf(out, "plan: model %s, %zu parameters; %d ranks = dp %d x tp %d x pp %d, %d per node\n",
            m->name, m->nparams_logical, w->size, w->dp, w->tp, w->pp, w->local_size);
    fprintf(out, "batch: global %ld, %ld per data-parallel rank in %ld micro-batch%s of %ld\n",
            global_batch, local_batch, micro, micro == 1 ? "" : "es", local_batch / micro);
    fprintf(out, "memory per rank:\n");
    fprintf(out, "  parameters         %12s\n", B(a, sizeof a, (double)p->mem.parameters));
    fprintf(out, "  gradients          %12s\n", B(a, sizeof a, (double)p->mem.gradients));
    fprintf(out, "  optimizer state    %12s  (%s)\n", B(a, sizeof a, p->optimizer),
            adamw ? "adamw: two moments" : "sgd: momentum");
    fprintf(out, "  activations        %12s  (batch %d)\n",
            B(a, sizeof a, (double)p->mem.activations), p->max_batch);
    fprintf(out, "  scratch            %12s\n", B(a, sizeof a, (double)p->mem.scratch));
    fprintf(out, "  data buffers       %12s\n", B(a, sizeof a, p->data));
    fprintf(out, "  communication      %12s  (gradients are all-reduced in place)\n",
            B(a, sizeof a, 0));
    fprintf(out, "  total              %12s\n", B(a, sizeof a, p->total));
    /* model FLOPs: per sample of a training step, times this rank's samples */
    double flops = tr_model_train_flops(m) * (double)local_batch;
    fprintf(out, "compute per step: %.3g GFLOP per rank, %.3g GFLOP in all (model FLOPs)\n",
            flops / 1e9, flops * w->dp / 1e9);
    /* a ring (or Rabenseifner) all-reduce sends and receives 2 (n - 1) / n of the data */
    double grad = (double)p->mem.gradients;
    if (w->dp > 1)
        fprintf(out,
                "communication per step: dp group (%d ranks): all-reduce of %s of gradients, "
                "each rank sending about %s\n",
                w->dp, B(a, sizeof a, grad), B(b, sizeof b, 2.0 * (w->dp - 1) / w->dp * grad));
    else
        fprintf(out, "communication per step: none (one data-parallel rank)\n");
    double cap = device_memory;
    const char *what = "--device-memory";
    if (cap <= 0) {
        size_t avail = tr_mem_available();
        cap = avail ? (double)avail / (w->local_size > 0 ? w->local_size : 1) : 0;
        what = "this node's available memory / ranks per node";
    }
    if (cap <= 0)
        return;
    if (p->total > cap)
        fprintf(out,
                "warning: does not fit: %s per rank needed, %s per rank (%s); raise "
                "[train] micro_batches, lower batch_size, or use more ranks\n",
                B(a, sizeof a, p->total), B(b, sizeof b, cap), what);
    else
        fprintf(out, "fits: %s of %s per rank (%s), %.0f%%\n", B(a, sizeof a, p->total),
                B(c, sizeof c, cap), what, 100.0 * p->total / cap);
}
