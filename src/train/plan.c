/* plan.c: trainer --plan's report (plan.h). */
#include "plan.h"
#include "backend/lowp_math.h" /* tr_stored_bytes */
#include "core/sysmem.h"
#include "models/gpt.h"

#include <string.h>

static const char *B(char *buf, size_t len, double bytes) { return tr_bytes_str(buf, len, bytes); }

/* Bytes a rank sends in a ring all-reduce of `bytes` over n ranks. */
static double allreduce_sent(double bytes, int n) { return n > 1 ? 2.0 * (n - 1) / n * bytes : 0; }

static void print_memory(const tr_plan *p, const char *zero_note, int adamw, int master, int async,
                         FILE *out)
{
    char a[32], b[32];
    fprintf(out, "  parameters         %12s\n", B(a, sizeof a, (double)p->mem.parameters));
    fprintf(out, "  gradients          %12s%s\n", B(a, sizeof a, (double)p->mem.gradients),
            zero_note);
    fprintf(out, "  optimizer state    %12s  (%s%s)\n", B(a, sizeof a, p->optimizer),
            adamw ? "adamw: two moments" : "sgd: momentum",
            master ? ", fp32 master weights" : "");
    if (p->mem.logits) { /* a language model's largest activation: what micro-batches cut */
        int f = p->mem.logits_format;
        fprintf(out, "  activations        %12s  (batch %d; the logits %s of it, %s)\n",
                B(a, sizeof a, (double)p->mem.activations), p->max_batch,
                B(b, sizeof b, (double)p->mem.logits),
                f == TR_PREC_BF16 ? "bf16" : f == TR_PREC_FP16 ? "fp16" : "fp32");
    } else {
        fprintf(out, "  activations        %12s  (batch %d)\n",
                B(a, sizeof a, (double)p->mem.activations), p->max_batch);
    }
    fprintf(out, "  scratch            %12s\n", B(a, sizeof a, (double)p->mem.scratch));
    if (p->backend > 0) /* the CPU has none: its plan stays as it was */
        fprintf(out, "  backend workspace  %12s  (CUDA: cuBLAS's workspace, the backend's "
                "scratch)\n", B(a, sizeof a, p->backend));
    if (p->data_order > 0)
        fprintf(out, "  data buffers       %12s  (the epoch's shuffle order %s of it)\n",
                B(a, sizeof a, p->data), B(b, sizeof b, p->data_order));
    else
        fprintf(out, "  data buffers       %12s\n", B(a, sizeof a, p->data));
    if (p->comm > p->comm_mpi && p->comm_mpi > 0)
        fprintf(out, "  communication      %12s  (at most: shared-memory windows of the sums on "
                "a node, %s of MPI's own buffers where a group sums through MPI)\n",
                B(a, sizeof a, p->comm), B(b, sizeof b, p->comm_mpi));
    else if (p->comm_mpi > 0)
        fprintf(out, "  communication      %12s  (MPI's own buffers: the gradient buckets open "
                "at once, a piece of an all-reduce)\n", B(a, sizeof a, p->comm));
    else if (p->comm > 0)
        fprintf(out, "  communication      %12s  (shared-memory windows of the sums on a node; "
                "messages work in place)\n", B(a, sizeof a, p->comm));
    else
        fprintf(out, "  communication      %12s  (collectives and messages work in place)\n",
                B(a, sizeof a, 0));
    if (!p->gpu && p->ckpt_host > 0)
        fprintf(out, "  %-18s %12s  (%s)\n", p->staged ? "checkpoint copies" : "checkpoint copy",
                B(a, sizeof a, p->ckpt_host),
                p->staged ? "host copies of the weights and optimizer state, which host code "
                            "reads and writes for checkpoints"
                          : "checkpoint.async: this rank's share of the weights and optimizer "
                            "state, for the writer thread");
    if (p->runtime > 0)
        fprintf(out,
                "  runtime            %12s  (the process's own: libraries, MPI, thread "
                "stacks, OpenBLAS's packing buffers, %s of it for the largest layer's "
                "products; as measured)\n",
                B(a, sizeof a, p->runtime), B(b, sizeof b, p->blas_pack));
    fprintf(out, "  total              %12s\n", B(a, sizeof a, p->total));
    if (p->gpu) /* what the GPU's total leaves out, and the host must hold */
        fprintf(out,
                "  host memory        %12s  (data buffers %s; checkpoints' host copies of "
                "the weights and optimizer state%s)\n",
                B(a, sizeof a, p->data + p->ckpt_host), B(b, sizeof b, p->data),
                async ? ", which checkpoint.async writes from" : "");
}

/* One micro-batch of the residual stream [B, T, C] in fp32: what a tp all-reduce or a
 * pipeline gradient carries. */
static double stream_bytes(const tr_gpt_config *c, long local_batch, long micro)
{
    return (double)(local_batch / micro) * c->T * c->C * sizeof(float);
}

/* tp all-reduces per micro-batch of stage `stage`: per block two forward (after each
 * row-parallel layer), two backward (before each column-parallel layer's input
 * gradient leaves), two more when the block is recomputed; the embedding (first
 * stage) and the head (last) one each. In sequence parallelism (gpt.c), their bytes'
 * worth (a ring all-reduce sends a reduce-scatter's and an all-gather's): per block
 * forward two reduce-scatters and two all-gathers, backward two of each and the
 * layernorms' outputs gathered again, one all-reduce's worth more. */
static double tp_allreduces(const tr_gpt_config *c, int pp, int stage, int recompute, int sp)
{
    int first, nl;
    tr_gpt_stage_blocks(c, pp, stage, &first, &nl);
    return (double)nl * (4 + sp + 2 * recompute) + (stage == 0) + (stage == pp - 1);
}

static int sequence_parallel(const tr_world *w, const tr_deck *d)
{
    return w->tp > 1 && tr_deck_bool(d, "parallel", "sequence_parallel");
}

/* a pipeline's activations travel in the precision's width (gpt.h), gradients fp32 */
static double pp_activation_bytes(const tr_model *m, double stream)
{
    return stream / sizeof(float) * (double)tr_stored_bytes(m->precision);
}

/* what a rank sends between stages of a stream's bytes: in sequence parallelism its
 * tp rank's share of the rows (the largest) */
static double pp_stream_bytes(const tr_gpt_config *c, const tr_world *w, const tr_deck *d,
                              long local_batch, long micro)
{
    if (!sequence_parallel(w, d))
        return stream_bytes(c, local_batch, micro);
    double rows = ceil((double)(local_batch / micro) * c->T / w->tp);
    return rows * c->C * sizeof(float);
}

static double tied_wte_bytes(const tr_gpt_config *c, int tp)
{
    return (double)c->Vp / tp * c->C * sizeof(float);
}

static double dp_sent(const tr_plan *p, int dp, int zero)
{
    double grad = (double)p->mem.gradients, par = (double)p->mem.parameters;
    return zero && dp > 1 ? (dp - 1.0) / dp * (grad + par) : allreduce_sent(grad, dp);
}

tr_plan_traffic tr_plan_stage_traffic(const tr_plan *p, const tr_model *m, const tr_world *w,
                                      const tr_deck *d, long local_batch, long micro, int stage)
{
    tr_plan_traffic t = {.dp = dp_sent(p, w->dp, (int)tr_deck_int(d, "parallel", "zero"))};
    const tr_gpt_config *c = tr_gpt_config_of(m);
    if (!c)
        return t;
    int recompute = !strcmp(tr_deck_str(d, "train", "recompute"), "block");
    int sp = sequence_parallel(w, d);
    double stream = stream_bytes(c, local_batch, micro);
    double piped = pp_stream_bytes(c, w, d, local_batch, micro);
    if (w->tp > 1)
        t.tp =
            allreduce_sent(tp_allreduces(c, w->pp, stage, recompute, sp) * micro * stream, w->tp);
    if (w->pp > 1) {
        if (stage < w->pp - 1) /* activations forward */
            t.pp += micro * pp_activation_bytes(m, piped);
        if (stage > 0) /* gradients back */
            t.pp += micro * piped;
        if (stage == 0 || stage == w->pp - 1)
            t.emb = allreduce_sent(tied_wte_bytes(c, w->tp), 2);
    }
    return t;
}

/* Tensor-, pipeline- and embedding-group traffic of the GPT per step. */
static void print_model_parallel_comm(const tr_model *m, const tr_world *w, const tr_deck *d,
                                      long local_batch, long micro, FILE *out)
{
    const tr_gpt_config *c = tr_gpt_config_of(m);
    if (!c)
        return;
    char a[32], b[32], e[32];
    double stream = stream_bytes(c, local_batch, micro);
    int recompute = !strcmp(tr_deck_str(d, "train", "recompute"), "block");
    int sp = sequence_parallel(w, d);
    if (w->tp > 1) {
        double per_micro = tp_allreduces(c, w->pp, 0, recompute, sp);
        double bytes = per_micro * micro * stream;
        fprintf(out,
                "  tp group (%d ranks): %s%.0f all-reduces of %s per micro-batch (stage 0), "
                "%s per step, each rank sending about %s%s\n",
                w->tp, sp ? "the bytes of " : "", per_micro, B(a, sizeof a, stream),
                B(b, sizeof b, bytes), B(e, sizeof e, allreduce_sent(bytes, w->tp)),
                sp ? " (sequence parallel: as reduce-scatters and all-gathers)" : "");
    }
    if (w->pp > 1) {
        stream = pp_stream_bytes(c, w, d, local_batch, micro); /* a rank's share */
        double act = pp_activation_bytes(m, stream);
        fprintf(out,
                "  pp group (%d stages): per micro-batch %s of activations forward and %s "
                "of gradients back across each stage boundary; ",
                w->pp, B(a, sizeof a, act), B(b, sizeof b, stream));
        if (w->pp > 2) /* a middle stage sends both ways */
            fprintf(out, "%s sent per step by a middle stage\n",
                    B(e, sizeof e, micro * (act + stream)));
        else
            fprintf(out, "sent per step: %s by the first stage, %s by the last\n",
                    B(e, sizeof e, micro * act), B(b, sizeof b, micro * stream));
        fprintf(out,
                "  embedding group (first and last stage): all-reduce of the tied wte's "
                "gradient, %s per step\n",
                B(a, sizeof a, tied_wte_bytes(c, w->tp)));
        tr_plan_print_stage_work(m, w->pp, micro, out);
    }
}

double tr_plan_pipeline_busy(const tr_model *m, int pp, long micro)
{
    const tr_gpt_config *c = tr_gpt_config_of(m);
    if (!c || pp < 2)
        return 1;
    double total = 0, most = 0;
    for (int s = 0; s < pp; s++) {
        double cost = tr_gpt_stage_cost(c, pp, s);
        total += cost;
        most = cost > most ? cost : most;
    }
    /* a step lasts about micro + pp - 1 slots of the busiest stage's time, in which
     * stage s works micro of its own */
    return total / pp / most * (double)micro / (double)(micro + pp - 1);
}

void tr_plan_print_stage_work(const tr_model *m, int pp, long micro, FILE *out)
{
    const tr_gpt_config *c = tr_gpt_config_of(m);
    if (!c || pp < 2)
        return;
    double total = 0, most = 0;
    for (int s = 0; s < pp; s++) {
        double cost = tr_gpt_stage_cost(c, pp, s);
        total += cost;
        most = cost > most ? cost : most;
    }
    fprintf(out, "  stage work:");
    for (int s = 0; s < pp; s++)
        fprintf(out, "%s %d: %.0f %%", s ? "," : "", s, 100 * tr_gpt_stage_cost(c, pp, s) / total);
    /* a step lasts at least micro x the busiest stage's time, in which stage s works
     * micro x its own: the mean idle share is at least 1 - mean / most */
    fprintf(out,
            " of the model's FLOPs; the busiest sets the pace, so a stage waits at least %.0f "
            "%% of a step on average, and a balanced pipeline's bubble is %.0f %% (pp - 1 of "
            "micro_batches + pp - 1 slots; more micro-batches shrink it)\n",
            100 * (1 - total / pp / most), 100.0 * (pp - 1) / (double)(micro + pp - 1));
}

double tr_plan_fit_room(const tr_deck *d, const tr_world *w, double device_memory)
{
    if (device_memory > 0)
        return device_memory;
    if (!strcmp(tr_deck_str(d, "system", "device"), "cuda"))
        return 0;
    size_t avail = tr_mem_available();
    return (double)avail / (w->local_size > 0 ? w->local_size : 1);
}

/* A GPU run's host memory (the largest stage's data buffers and checkpoints' host
 * copies) against this node's share, as every run checks it at start-up. */
static void print_host_fit(const tr_plan *plans, int nstages, double share, FILE *out)
{
    char a[32], b[32];
    double need = 0;
    for (int s = 0; s < nstages; s++)
        if (plans[s].data + plans[s].ckpt_host > need)
            need = plans[s].data + plans[s].ckpt_host;
    if (share <= 0)
        return;
    if (need > share)
        fprintf(out,
                "warning: the host memory does not fit on this node: %s per rank needed, %s "
                "per rank (its available memory / ranks per node; a run checks its own node's); "
                "use parallel.zero = 1, tp, pp or fewer ranks per node\n",
                B(a, sizeof a, need), B(b, sizeof b, share));
    else
        fprintf(out,
                "host memory fits: %s of %s per rank (this node's available memory / ranks "
                "per node), %.0f%%\n",
                B(a, sizeof a, need), B(b, sizeof b, share), 100.0 * need / share);
}

double tr_plan_host_buffers(const tr_plan *p)
{
    return p->gpu ? p->data + p->ckpt_host : p->total - p->runtime;
}

/* Under an address-space limit (ulimit -v), what the largest stage's rank would map
 * against it, as every run checks it at start-up (this process's mappings standing
 * for a rank's). */
static void print_address_space(const tr_plan *p, FILE *out)
{
    size_t limit = tr_address_space_limit();
    if (!limit)
        return;
    char a[32], b[32], c[32], e[32];
    double mapped = (double)tr_mapped_bytes("/proc/self/status");
    double need = mapped + tr_plan_host_buffers(p) + p->address_space;
    fprintf(out,
            "%saddress space: %s per rank (%s mapped at start-up, the buffers, %s that the "
            "threads and libraries map) against ulimit -v (RLIMIT_AS) of %s%s\n",
            need > (double)limit ? "warning: does not fit: " : "", B(a, sizeof a, need),
            B(b, sizeof b, mapped), B(c, sizeof c, p->address_space), B(e, sizeof e, (double)limit),
            need > (double)limit ? "; raise or remove the limit, or set fewer [system] threads"
                                 : "");
}

void tr_plan_print(const tr_plan *plans, int nstages, const tr_deck *d, const tr_model *m,
                   const tr_world *w, long global_batch, long local_batch, long micro,
                   double device_memory, const char *fit_hint, FILE *out)
{
    char a[32], b[32], c[32];
    int adamw = !strcmp(tr_deck_str(d, "optim", "name"), "adamw");
    int zero = (int)tr_deck_int(d, "parallel", "zero");
    fprintf(out, "plan: model %s, %zu parameters; %d rank%s = dp %d x tp %d x pp %d, %d per node\n",
            m->name, m->nparams_logical, w->size, w->size == 1 ? "" : "s", w->dp, w->tp, w->pp,
            w->local_size);
    fprintf(out, "batch: global %ld, %ld per data-parallel rank in %ld micro-batch%s of %ld\n",
            global_batch, local_batch, micro, micro == 1 ? "" : "es", local_batch / micro);
    if (w->tp > 1 || w->pp > 1 || zero)
        fprintf(out, "layout: zero %d, pipeline schedule %s, recompute %s\n", zero,
                tr_deck_str(d, "parallel", "schedule"), tr_deck_str(d, "train", "recompute"));
    const char *zero_note = zero == 2 && w->dp > 1
                                ? "  (zero 2: the owned slice accumulates; the rest is backward's "
                                  "workspace)"
                                : "";
    /* the stage that needs the most decides whether the layout fits */
    int worst = 0;
    for (int s = 1; s < nstages; s++)
        if (plans[s].total > plans[worst].total)
            worst = s;
    if (nstages == 1) {
        fprintf(out, "memory per rank:\n");
    } else {
        const tr_gpt_config *gc = tr_gpt_config_of(m);
        fprintf(out, "memory per rank by pipeline stage%s:\n",
                gc && gc->nstage_blocks ? " (blocks by [parallel] stage_blocks)" : "");
        for (int s = 0; s < nstages; s++) {
            char blocks[48] = "";
            if (gc)
                tr_gpt_stage_blocks_text(gc, w->pp, s, blocks, sizeof blocks);
            fprintf(out, "  stage %-3d %-14s %12s%s%s\n", s, blocks, B(a, sizeof a, plans[s].total),
                    s == 0 ? "  (+ embeddings)" : "", s == nstages - 1 ? "  (+ head)" : "");
        }
        fprintf(out, "stage %d, the largest:\n", worst);
    }
    print_memory(&plans[worst], zero_note, adamw,
                 strcmp(tr_deck_str(d, "train", "precision"), "fp32") != 0,
                 tr_deck_bool(d, "checkpoint", "async"), out);
    const tr_plan *p = &plans[0];
    /* model FLOPs: per sample of a training step, times this rank's samples */
    double flops = tr_model_train_flops(m) * (double)local_batch;
    int mp = w->tp * w->pp;
    fprintf(out, "compute per step: %.3g GFLOP per rank, %.3g GFLOP in all (model FLOPs)\n",
            flops / mp / 1e9, flops * w->dp / 1e9);
    fprintf(out, "communication per step:\n");
    double grad = (double)p->mem.gradients;
    if (w->dp > 1 && zero)
        fprintf(out,
                "  dp group (%d ranks): gradients (%s) reduced to the rank owning each slice, "
                "then parameters all-gathered; each rank sending about %s\n",
                w->dp, B(a, sizeof a, grad), B(b, sizeof b, dp_sent(p, w->dp, zero)));
    else if (w->dp > 1)
        fprintf(out,
                "  dp group (%d ranks): all-reduce of %s of gradients, each rank sending about "
                "%s\n",
                w->dp, B(a, sizeof a, grad), B(b, sizeof b, dp_sent(p, w->dp, zero)));
    else
        fprintf(out, "  dp group: none (one data-parallel rank)\n");
    print_model_parallel_comm(m, w, d, local_batch, micro, out);
    size_t avail = tr_mem_available();
    double host_share = avail ? (double)avail / (w->local_size > 0 ? w->local_size : 1) : 0;
    if (plans[worst].gpu)
        print_host_fit(plans, nstages, host_share, out);
    print_address_space(&plans[worst], out);
    double cap = tr_plan_fit_room(d, w, device_memory);
    const char *what =
        device_memory > 0 ? "--device-memory" : "this node's available memory / ranks per node";
    if (cap <= 0 && !strcmp(tr_deck_str(d, "system", "device"), "cuda")) {
        /* the plan is the GPU's memory, which the host's says nothing about; the run
         * itself checks the GPU's free memory when it reserves the plan */
        fprintf(out, "fits: not checked: a GPU's plan needs the GPU's memory, e.g. "
                     "--device-memory 80GiB\n");
        return;
    }
    if (cap <= 0)
        return;
    double need = plans[worst].total;
    if (need > cap) /* (tp, pp, recomputation and sequence parallelism are the GPT's) */
        fprintf(out,
                "warning: does not fit: %s per rank needed, %s per rank (%s); raise "
                "[train] micro_batches, lower batch_size, use more ranks%s%s%s\n",
                B(a, sizeof a, need), B(b, sizeof b, cap), what,
                tr_gpt_config_of(m) ? ", tp or pp, parallel.zero = 1, or train.recompute = block"
                                    : " or parallel.zero = 1",
                tr_gpt_config_of(m) && w->tp > 1 && !sequence_parallel(w, d)
                    ? ", or parallel.sequence_parallel = true"
                    : "",
                fit_hint ? fit_hint : "");
    else
        fprintf(out, "fits: %s of %s per rank (%s), %.0f%%\n", B(a, sizeof a, need),
                B(c, sizeof c, cap), what, 100.0 * need / cap);
}
