/* train_memory.c: a run's memory plan (plan.h) from its model and layout: the check
 * every run makes before it allocates, the device's one reservation, the fewest
 * micro-batches (or the pipeline's split) that would fit when neither can, and
 * trainer --plan's report (its --layouts: train_layouts.c). */
#include "backend/cpu_backend.h"
#include "core/error.h"
#include "core/sysmem.h"
#include "models/gpt.h"
#include "plan.h"
#include "run.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* This rank's share of the model and how its stage keeps activations. */
tr_model_layout tr_run_model_layout(run *r)
{
    const tr_world *w = r->w;
    r->schedule =
        strcmp(tr_deck_str(r->d, "parallel", "schedule"), "gpipe") ? TR_SCHED_1F1B : TR_SCHED_GPIPE;
    r->slots = tr_pipeline_slots(r->schedule, w->pp, w->pp_rank, (int)r->micro);
    tr_model_layout lay = {
        .tp = w->tp,
        .tp_rank = w->tp_rank,
        .pp = w->pp,
        .pp_rank = w->pp_rank,
        .tp_group = w->tp_group,
        .slots = r->slots,
        .recompute = !strcmp(tr_deck_str(r->d, "train", "recompute"), "block"),
        .sequence_parallel = tr_deck_bool(r->d, "parallel", "sequence_parallel"),
        /* the deck's [parallel] stage_blocks splits the deck's pp; --layouts' other
         * stage counts are split by cost */
        .cost_split = w->pp != tr_deck_int(r->d, "parallel", "pp"),
    };
    return lay;
}

/* Host memory a rank's checkpoints take beyond the model's own buffers
 * (train_checkpoint.c, checkpoint_async.c), in fp32 values: a device host code
 * cannot touch (a GPU, cpu-guarded) stages the optimizer state (the rank's slice of
 * each moment, and of the master weights in mixed precision) and, in fp32, the
 * weights through host copies kept for the run, which checkpoint.async's thread
 * writes from; on the CPU,
 * checkpoint.async copies the rank's share of what a checkpoint holds (the weights
 * and each state, its dp ranks writing a band each: about 1/dp, tp-replicated
 * tensors less) for its writer thread. */
static double ckpt_host_bytes(const run *r, const tr_model *m, double slice, int master)
{
    int states = !strcmp(tr_deck_str(r->d, "optim", "name"), "adamw") ? 2 : 1;
    double n = (double)m->nparams;
    if (!r->dev->host_memory)
        return (states + master) * slice * sizeof(float) + (master ? 0 : n * sizeof(float));
    if (tr_deck_bool(r->d, "checkpoint", "async"))
        return (1 + states) * ceil(n / r->w->dp) * sizeof(float);
    return 0;
}

/* Measured with the MLP, the CNN and the 4-block GPT of inputs/ at 1 and 2 ranks and
 * 1 to 8 threads (OpenBLAS 0.3.21, Open MPI 4.1): a rank's peak resident memory
 * (summary.json's peak_rss_bytes) was 32 to 37 MiB above its plan at one thread, and
 * grew about 2.6 MiB a thread (the stack and the part of OpenBLAS's buffer that a
 * GEMM packs into); some 25 MiB of that (the libraries' pages, MPI's) is resident
 * before the memory check already. */
double tr_plan_runtime_bytes(int threads)
{
    return (36.0 + 3.0 * (threads > 0 ? threads : 1)) * 1024 * 1024;
}

/* OpenBLAS keeps in each thread's buffer what the largest product the thread ran
 * packed (tr_cpu_linear_pack_bytes): for a GPT, the head's weight gradient, [Vl, C] =
 * dlogits^T x, for which it packs kc values of the micro-batch's B T rows for each of
 * the Vl rows where C is wider than its block (p), 4 min(B T, kc) Vl bytes over the
 * threads (62 MiB for GPT-2's 50,304 on the Cooperlake kernel, kc 320 and p 640; none
 * beyond a small panel for the small GPT's C of 256); the blocks' products pack 3 to 4
 * MiB at most there. Measured with GPT-2 124M at batch 1 (one step; one and two
 * threads alike, the rows split between them): OpenBLAS's resident buffers held 13,
 * 50 and 62 MiB at seq_len 64, 256 and 1024, and the peak resident memory less the
 * plan without them was -4, +33 and +45 MiB; with them, -17 at each. The runtime's
 * fixed part was measured where this was under 2 MiB. */
double tr_plan_blas_pack_bytes(const tr_model *m, int max_batch, int threads, const char *core)
{
    tr_linear_shape s[TR_MODEL_MAX_LAYERS];
    int n = tr_model_linear_shapes(m, s, TR_MODEL_MAX_LAYERS);
    threads = threads > 0 ? threads : 1;
    double most = 0;
    for (int i = 0; i < n; i++) {
        double rows = (double)max_batch * s[i].rows;
        double b = tr_cpu_linear_pack_bytes(rows < INT_MAX ? (int)rows : INT_MAX, s[i].in, s[i].out,
                                            threads, core);
        most = b > most ? b : most;
    }
    return threads * most;
}

/* Address space mapped after the check, beyond the plan's buffers (VmPeak at the
 * end less VmSize at the check less the plan, measured as above): 140 to 260 MiB at
 * one thread, 390 to 460 at two, 670 to 860 at four: per thread, OpenBLAS's buffer
 * (blas_memory_alloc maps one for each thread that calls a GEMM at once and keeps
 * it; Debian's 0.3.21 maps 128 MiB, BUFFER_SIZE 32 << 22, other builds 32 MiB), the
 * thread's malloc arena (64 MiB reserved, 128 while it is made) and its stack (8 MiB,
 * RLIMIT_STACK); besides, the threads of the data prefetcher and the checkpoint
 * writer. Where a mapping fails, OpenBLAS retries for ever: the run hangs at its
 * first GEMM, and even SIGTERM does not end it. */
double tr_plan_address_space_bytes(int threads)
{
    return (160.0 + 200.0 * (threads > 0 ? threads : 1)) * 1024 * 1024;
}

static tr_plan make_plan(run *r, tr_model *m, int max_batch)
{
    tr_plan p = {.max_batch = max_batch};
    p.mem = tr_model_plan(m, r->dev, max_batch);
    int adamw = !strcmp(tr_deck_str(r->d, "optim", "name"), "adamw");
    /* ZeRO: the state of this rank's slice only */
    int zero = (int)tr_deck_int(r->d, "parallel", "zero"), dp = r->w->dp;
    double slice =
        zero && dp > 1 ? (double)((m->nparams + (size_t)dp - 1) / (size_t)dp) : (double)m->nparams;
    int master = strcmp(tr_deck_str(r->d, "train", "precision"), "fp32") != 0;
    (void)adamw;
    p.optimizer = (double)tr_optim_device_bytes(r->d, (size_t)slice, master); /* + fp32 master */
    p.data = r->lm ? 2.0 * (double)r->local_batch * m->targets_per_sample * sizeof(int32_t)
                   : 2.0 * (double)r->local_batch * (double)r->train.c * r->train.h * r->train.w *
                         sizeof(float);
    /* every rank holds the epoch's whole permutation (sampler.h): none without a
     * shuffle, nor for random tokens, which have no sampler */
    int shuffle = tr_deck_bool(r->d, "data", "shuffle");
    p.data_order =
        r->lm ? (r->tokens.random ? 0 : (double)tr_sampler_bytes(r->tokens.train_windows, shuffle))
              : (double)tr_sampler_bytes(r->train.n, shuffle);
    p.data += p.data_order;
    p.backend = (double)r->dev->backend_bytes;
    /* at most: the windows exist only where a group's ranks share a node (setup) */
    if (r->dev->host_memory && tr_deck_bool(r->d, "parallel", "shm_allreduce"))
        p.comm = (dp > 1 ? (double)tr_shm_window_bytes(m->nparams) : 0) +
                 (r->w->tp > 1 ? (double)tr_shm_window_bytes(SIZE_MAX) : 0);
    if (r->dev->host_memory) {
        /* MPI's own buffers where a group sums through MPI (ranks on other nodes, or
         * shm_allreduce off): the dp buckets open at once (data_parallel.h), and one
         * piece (comm.h) of the largest blocking all-reduce: a tp all-reduce of a
         * micro-batch's residual stream, the tied embedding's gradient at the
         * pipeline's ends */
        const tr_gpt_config *c = tr_gpt_config_of(m);
        int shm = tr_deck_bool(r->d, "parallel", "shm_allreduce");
        int per_node = r->w->local_size > 0 ? r->w->local_size : r->w->size;
        /* dp is the outermost: its groups span nodes unless the job is on one node;
         * tp's consecutive ranks unless they lie within one */
        int dp_mpi = !shm || r->w->size > per_node;
        int tp_mpi = !shm || r->w->tp > per_node || per_node % r->w->tp != 0;
        if (dp > 1 && dp_mpi)
            p.comm_mpi += fmin((double)TR_DP_OPEN_BYTES, (double)m->nparams * sizeof(float));
        double largest = 0;
        if (c && r->w->tp > 1 && tp_mpi)
            largest = (double)max_batch * c->T * c->C * sizeof(float);
        if (c && r->w->pp > 1 && (r->w->pp_rank == 0 || r->w->pp_rank == r->w->pp - 1))
            largest = fmax(largest, (double)c->Vp / r->w->tp * c->C * sizeof(float));
        p.comm_mpi += fmin((double)TR_MPI_PIECE_BYTES, largest);
        p.comm += p.comm_mpi;
    }
#ifdef TRAINER_HAVE_CUDA
    p.gpu = r->dev == &tr_gpu_device;
#endif
    p.staged = !r->dev->host_memory;
    p.ckpt_host = ckpt_host_bytes(r, m, slice, master);
    /* (a GPU process's own host memory, the CUDA context's, is not measured) */
    if (!p.gpu) {
        p.blas_pack = tr_plan_blas_pack_bytes(m, max_batch, r->rt->plan_threads, r->rt->blas_core);
        p.runtime = tr_plan_runtime_bytes(r->rt->plan_threads) + p.blas_pack;
    }
    p.address_space = tr_plan_address_space_bytes(r->rt->plan_threads);
    p.total = (double)p.mem.parameters + p.mem.gradients + p.mem.activations + p.mem.scratch +
              p.optimizer + p.data + p.backend + p.comm + (p.gpu ? 0 : p.ckpt_host) + p.runtime;
    return p;
}

/* What a device reserves at start-up for the plan p (the host's part aside). */
static double reserved_bytes(const tr_plan *p)
{
    return (double)p->mem.parameters + p->mem.gradients + p->mem.activations + p->mem.scratch +
           p->optimizer + p->backend;
}

tr_plan tr_run_stage_plan(run *r, int stage, long micro, int max_batch)
{
    return tr_run_split_stage_plan(r, stage, micro, max_batch, NULL);
}

tr_plan tr_run_split_stage_plan(run *r, int stage, long micro, int max_batch, const int *split)
{
    if (r->w->pp == 1 || (stage == r->w->pp_rank && micro == r->micro && !split))
        return make_plan(r, &r->model, max_batch);
    tr_world w = *r->w, *saved_w = r->w;
    long saved_micro = r->micro;
    int saved_slots = r->slots;
    w.pp_rank = stage;
    r->w = &w;
    r->micro = micro;
    tr_model_layout lay = tr_run_model_layout(r);
    lay.split = split;
    tr_model m;
    char msg[1024];
    if (tr_model_build(&m, r->model.name, r->d, (tr_shape){1, 1, 1}, &lay, msg, sizeof msg))
        tr_fatal(TR_EXIT_SOFTWARE, "bug: stage %d of a checked layout: %s", stage, msg);
    tr_plan p = make_plan(r, &m, max_batch);
    tr_model_free(&m);
    r->w = saved_w;
    r->micro = saved_micro;
    r->slots = saved_slots;
    return p;
}

/* The most any stage's ranks need at `micro` micro-batches: of the device's
 * reservation (device) or of the host (else, the whole plan). */
static double largest_stage_need(run *r, long micro, int max_batch, int device)
{
    double need = 0;
    for (int s = 0; s < r->w->pp; s++) {
        tr_plan p = tr_run_stage_plan(r, s, micro, max_batch);
        double x = device ? reserved_bytes(&p) : p.total;
        need = x > need ? x : need;
    }
    return need;
}

/* The batch activations are sized for at micro-batches of `batch`: a classifier's
 * evaluation batch, its own key, where larger. */
static long max_batch_at(const run *r, long batch)
{
    return !r->lm && r->eval_local_batch > batch ? r->eval_local_batch : batch;
}

/* (run.h; the need is largest_stage_need's) */
long tr_run_fewest_micro_that_fit(run *r, double room, int device, double *need, long *most)
{
    *most = r->micro;
    *need = 0;
    for (long k = r->micro + 1; k <= r->local_batch; k++) {
        if (r->local_batch % k)
            continue;
        *most = k;
        *need = largest_stage_need(r, k, (int)max_batch_at(r, r->local_batch / k), device);
        if (*need <= room)
            return k;
    }
    return 0;
}

/* The search of tr_run_split_that_fits: what a stage holding a number of blocks would
 * need (memoised: -1 not yet known), the most blocks each stage fits (-2 not yet
 * known, -1 none), and the FLOPs a stage weighs by. */
typedef struct fit_search {
    run *r;
    double room;
    int device, max_batch;
    double block, head;
    int cap[TR_GPT_MAX_STAGES];
    double need[TR_GPT_MAX_STAGES][TR_GPT_MAX_LAYERS + 1];
} fit_search;

/* What stage `stage` would need holding `blocks` blocks, from its model built within a
 * split that gives it so many (the other stages any valid counts: a stage's model
 * depends on its own blocks and place only); INFINITY where the others could not all
 * hold a block. */
static double stage_need(fit_search *f, int stage, int blocks)
{
    run *r = f->r;
    int pp = r->w->pp, L = tr_gpt_config_of(&r->model)->L;
    if (f->need[stage][blocks] < 0) {
        int split[TR_GPT_MAX_STAGES], rest = L - blocks;
        for (int s = 0; s < pp; s++)
            if (s != stage)
                split[s] = s < pp - 1 ? 1 : 0, rest -= split[s];
        split[stage] = blocks;
        if (rest < 0)
            return INFINITY;
        split[stage == pp - 1 ? 0 : pp - 1] += rest;
        tr_plan p = tr_run_split_stage_plan(r, stage, r->micro, f->max_batch, split);
        f->need[stage][blocks] = f->device ? reserved_bytes(&p) : p.total;
    }
    return f->need[stage][blocks];
}

/* The most blocks stage `stage` holds within the room, -1 where it holds none it may
 * (every stage but the last needs one). A stage needs more with each block it holds
 * (weights, gradients, optimizer state, activations; the rest stays), so a binary
 * search: log2(L) plans a stage instead of L (a 128-block model's --layouts at 1024
 * ranks planned every count: minutes). */
static int stage_cap(fit_search *f, int stage)
{
    if (f->cap[stage] != -2)
        return f->cap[stage];
    int pp = f->r->w->pp, L = tr_gpt_config_of(&f->r->model)->L, last = stage == pp - 1;
    int lo = last ? 0 : 1, hi = L - (pp - 1 - !last); /* the others: one block each but the last */
    if (stage_need(f, stage, lo) > f->room)
        return f->cap[stage] = -1;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (stage_need(f, stage, mid) <= f->room)
            lo = mid;
        else
            hi = mid - 1;
    }
    return f->cap[stage] = lo;
}

/* A stage's cost for the split: its FLOPs where it fits the room, else INFINITY. */
static double fitting_cost(void *ctx, int stage, int blocks)
{
    fit_search *f = ctx;
    if (blocks > stage_cap(f, stage))
        return INFINITY;
    return blocks * f->block + (stage == f->r->w->pp - 1 ? f->head : 0);
}

/* (run.h) 1F1B keeps pp - s micro-batches of activations on stage s, and the last
 * stage holds the logits: moving blocks off the fullest stage may fit what the split
 * by cost does not. */
int tr_run_split_that_fits(run *r, double room, int device, int *counts, double *need)
{
    const tr_gpt_config *c = tr_gpt_config_of(&r->model);
    int pp = r->w->pp;
    if (!c || pp < 2 || room <= 0 ||
        largest_stage_need(r, r->micro, (int)max_batch_at(r, r->micro_batch), device) <= room)
        return 0; /* (--plan asks whether or not the run fits) */
    fit_search *f = tr_alloc(sizeof *f, "split search");
    f->r = r, f->room = room, f->device = device;
    f->max_batch = (int)max_batch_at(r, r->micro_batch);
    tr_gpt_costs(c, &f->block, &f->head);
    for (int s = 0; s < pp; s++) {
        f->cap[s] = -2;
        for (int n = 0; n <= c->L; n++)
            f->need[s][n] = -1;
    }
    int found = tr_gpt_split_min_max(c->L, pp, fitting_cost, f, counts) < INFINITY, same = 1;
    *need = 0;
    for (int s = 0; found && s < pp; s++) {
        int first, n;
        tr_gpt_stage_blocks(c, pp, s, &first, &n);
        same &= n == counts[s];
        double x = stage_need(f, s, counts[s]); /* (probed by the search: within the room) */
        found &= x <= room;
        *need = x > *need ? x : *need;
    }
    tr_free(f);
    return found && !same;
}

/* For an out-of-memory message: sequence parallelism, where a GPT's tp ranks run
 * without it (it keeps 1/tp of the stream's activations) */
static const char *sp_advice(const run *r)
{
    return r->lm && r->w->tp > 1 && !tr_deck_bool(r->d, "parallel", "sequence_parallel")
               ? ", or parallel.sequence_parallel = true"
               : "";
}

/* For an out-of-memory message: tr_run_fewest_micro_that_fit in words, or that none does,
 * then (a GPT's) how to compare every layout of these ranks. Empty where there is
 * nothing to say. */
static void micro_batches_hint(run *r, double room, int device, char *out, size_t len)
{
    out[0] = '\0';
    if (room <= 0)
        return;
    char a[32];
    const char *who = r->w->pp > 1 ? "the largest stage's ranks" : "a rank";
    double need;
    long n, k = tr_run_fewest_micro_that_fit(r, room, device, &need, &n);
    size_t used = 0;
    if (k) {
        used = (size_t)snprintf(out, len,
                                "; at [train] micro_batches = %ld (micro-batches of %ld) %s "
                                "would need %s",
                                k, r->local_batch / k, who, tr_bytes_str(a, sizeof a, need));
    } else {
        /* none fits: what the most micro-batches would still need; where the deck's
         * already hold one sample each, its own need, so that the message does not
         * leave "raise micro_batches" as the only advice */
        long batch = r->local_batch / n;
        if (n == r->micro)
            need = largest_stage_need(r, n, (int)max_batch_at(r, batch), device);
        char e[96] = "";
        if (!r->lm && r->eval_local_batch > batch)
            snprintf(e, sizeof e, ", evaluated in batches of %ld ([train] eval_batch_size)",
                     r->eval_local_batch);
        used = (size_t)snprintf(out, len,
                                "; more micro-batches do not make it fit: at [train] "
                                "micro_batches = %ld (micro-batches of %ld%s) %s would still "
                                "need %s",
                                n, batch, e, who, tr_bytes_str(a, sizeof a, need));
    }
    if (!r->lm || used >= len) /* a classifier has one layout: data-parallel */
        return;
    int split[TR_GPT_MAX_STAGES];
    if (tr_run_split_that_fits(r, room, device, split, &need)) {
        char list[TR_GPT_MAX_STAGES * 4];
        used += (size_t)snprintf(out + used, len - used,
                                 "; or, at the deck's micro_batches, parallel.stage_blocks=%s "
                                 "(the fullest stage would need %s; the stages' FLOPs:",
                                 tr_gpt_blocks_list(split, r->w->pp, list, sizeof list),
                                 tr_bytes_str(a, sizeof a, need));
        const tr_gpt_config *c = tr_gpt_config_of(&r->model);
        double block, head, total = 0;
        tr_gpt_costs(c, &block, &head);
        total = c->L * block + head;
        for (int s = 0; s < r->w->pp && used < len; s++)
            used +=
                (size_t)snprintf(out + used, len - used, "%s %.0f %%", s ? "," : "",
                                 100 * (split[s] * block + (s == r->w->pp - 1 ? head : 0)) / total);
        if (used < len)
            used += (size_t)snprintf(out + used, len - used, ")");
        if (used >= len)
            return;
    }
    if (r->rt->plan_ranks)
        snprintf(out + used, len - used, "; --layouts compares every dp x tp x pp of these ranks");
    else
        snprintf(out + used, len - used,
                 "; trainer --plan %s --ranks %d --ranks-per-node %d --layouts (and this run's "
                 "overrides) compares every dp x tp x pp of these ranks",
                 r->d->path, r->w->size, r->w->local_size);
}

/* trainer --plan: every pipeline stage's plan (tp rank 0 of each: the tp ranks hold
 * equal shares), each from the model that stage would build. */
void tr_run_print_plan(run *r, int max_batch)
{
    int pp = r->w->pp;
    tr_plan *plans = tr_alloc((size_t)pp * sizeof *plans, "plan");
    for (int s = 0; s < pp; s++) /* the plan stands for rank 0: stage 0 */
        plans[s] = tr_run_stage_plan(r, s, r->micro, max_batch);
    /* judged as the plan judges it: its total against the room per rank */
    char hint[1536];
    micro_batches_hint(r, tr_plan_fit_room(r->d, r->w, r->rt->plan_device_memory), 0, hint,
                       sizeof hint);
    tr_plan_print(plans, pp, r->d, &r->model, r->w, r->global_batch, r->local_batch, r->micro,
                  r->rt->plan_device_memory, hint, stdout);
    tr_free(plans);
}

/* Refuses, with numbers, a run whose buffers and threads cannot fit under this
 * process's address-space limit (RLIMIT_AS, a process's own, not divided among
 * ranks): the limit less what is mapped already (VmSize) against the plan's host
 * buffers and the address space mapped after this check (tr_plan_address_space_bytes).
 * Before the GEMMs, which would hang where a mapping fails. 0 where it fits or no
 * limit is set. */
static int check_address_space(run *r, const tr_plan *p)
{
    size_t limit = tr_address_space_limit();
    if (!limit)
        return 0;
    double mapped = (double)tr_mapped_bytes("/proc/self/status");
    double buffers = tr_plan_host_buffers(p), later = p->address_space;
    if (mapped + buffers + later <= (double)limit)
        return 0;
    char a[32], b[32], c[32], d[32], e[32], f[32];
    snprintf(r->err, sizeof r->err,
             "out of address space: ulimit -v (RLIMIT_AS) allows this process %s of virtual "
             "memory, %s of which is mapped already (libraries, MPI), and the run needs %s more: "
             "its %s %s (trainer --plan) and about %s that its %d thread%s and the libraries "
             "map as they start (OpenBLAS's buffer, malloc's arena and a stack a thread); raise "
             "the limit to at least %s (ulimit -v %.0f, in KiB) or remove it (ulimit -v "
             "unlimited), or set fewer [system] threads or a smaller plan",
             tr_bytes_str(a, sizeof a, (double)limit), tr_bytes_str(b, sizeof b, mapped),
             tr_bytes_str(c, sizeof c, buffers + later), p->gpu ? "host buffers" : "buffers",
             tr_bytes_str(d, sizeof d, buffers), tr_bytes_str(e, sizeof e, later), r->rt->threads,
             r->rt->threads == 1 ? "" : "s", tr_bytes_str(f, sizeof f, mapped + buffers + later),
             ceil((mapped + buffers + later) / 1024));
    return TR_EXIT_OSERR;
}

/* Refuses, with numbers, a run whose buffers cannot fit in this rank's share of the
 * node's memory, or under its address-space limit, before anything is allocated. */
int tr_run_check_memory(run *r, int max_batch)
{
    tr_plan p = make_plan(r, &r->model, max_batch);
    int as = check_address_space(r, &p);
    if (as)
        return as;
    size_t avail = tr_mem_available();
    int ranks = r->w->local_size > 0 ? r->w->local_size : 1;
    double share = (double)avail / ranks;
    int async = tr_deck_bool(r->d, "checkpoint", "async");
    char a[32], b[32], c[32], d[32], e[32], f[32], g[32], h[32];
    if (p.gpu) {
        /* A GPU's plan is GPU memory, which the reservation right after checks against
         * the GPU's own free memory, with the plan's numbers; judging it against the
         * host's would refuse runs that fit (an 80 GiB GPU beside 32 GiB of host
         * memory per rank). The host holds the data buffers and the checkpoints'
         * copies, which are judged here. */
        double need = p.data + p.ckpt_host;
        if (avail == 0 || need <= share)
            return 0;
        snprintf(r->err, sizeof r->err,
                 "out of host memory: each rank of this GPU run needs %s of the host's (host "
                 "copies of the weights and optimizer state for checkpoints %s, data buffers "
                 "%s) but has about %s (%s available to the job on this node / %d rank%s); use "
                 "parallel.zero = 1 (a rank then copies its slice of the optimizer state), tp, "
                 "pp or fewer ranks per node",
                 tr_bytes_str(a, sizeof a, need), tr_bytes_str(b, sizeof b, p.ckpt_host),
                 tr_bytes_str(c, sizeof c, p.data), tr_bytes_str(d, sizeof d, share),
                 tr_bytes_str(e, sizeof e, (double)avail), ranks, ranks == 1 ? "" : "s");
        return TR_EXIT_OSERR;
    }
    tr_model_memory mem = p.mem;
    if (avail == 0 || p.total <= share)
        return 0;
    char copy[160] = "", hint[1536];
    micro_batches_hint(r, share, 0, hint, sizeof hint);
    size_t used = 0;
    if (p.ckpt_host > 0)
        used = (size_t)snprintf(copy, sizeof copy, ", %s %s",
                                p.staged ? "checkpoints' host copies" : "checkpoint.async's copy",
                                tr_bytes_str(h, sizeof h, p.ckpt_host));
    if (p.runtime > 0 && used < sizeof copy)
        snprintf(copy + used, sizeof copy - used,
                 ", runtime %s (libraries, MPI, threads, OpenBLAS's packing)",
                 tr_bytes_str(h, sizeof h, p.runtime));
    snprintf(r->err, sizeof r->err,
             "out of memory: each rank needs %s (parameters %s, gradients %s, optimizer state "
             "%s, activations and scratch %s at batch %d%s) but has about %s (%s available to the "
             "job on this node / %d rank%s); reduce [train] batch_size or the model, raise "
             "[train] micro_batches, or run fewer ranks per node%s%s%s",
             tr_bytes_str(a, sizeof a, p.total), tr_bytes_str(b, sizeof b, (double)mem.parameters),
             tr_bytes_str(c, sizeof c, (double)mem.gradients),
             tr_bytes_str(d, sizeof d, p.optimizer),
             tr_bytes_str(e, sizeof e, (double)(mem.activations + mem.scratch)), max_batch, copy,
             tr_bytes_str(f, sizeof f, share), tr_bytes_str(g, sizeof g, (double)avail), ranks,
             ranks == 1 ? "" : "s", async && !p.staged ? ", or set checkpoint.async = false" : "",
             sp_advice(r), hint);
    return TR_EXIT_OSERR;
}

/* The device's memory, reserved once at the plan's size; an error names the plan's
 * numbers and what to change. */
int tr_run_reserve(run *r, int max_batch)
{
    tr_plan p = make_plan(r, &r->model, max_batch);
    size_t bytes = (size_t)reserved_bytes(&p), room = 0;
    char why[512] = "";
    int e = r->dev->reserve(bytes, &room, why, sizeof why);
    if (e) {
        char a[32], b[32], c[32], d2[32], e2[32], own[96] = "", hint[1536];
        micro_batches_hint(r, (double)room, 1, hint, sizeof hint);
        if (p.backend > 0) /* a fixed size: not one of the things to change */
            snprintf(own, sizeof own, ", backend workspace %s (cuBLAS's, fixed)",
                     tr_bytes_str(e2, sizeof e2, p.backend));
        snprintf(r->err, sizeof r->err,
                 "out of %s memory: %s; the plan (trainer --plan) per rank: parameters %s, "
                 "gradients %s, optimizer state %s, activations and scratch %s at batch "
                 "%d%s; reduce [train] batch_size or the model, raise [train] "
                 "micro_batches, use parallel.zero = 1%s%s%s",
                 r->dev->name, why, tr_bytes_str(a, sizeof a, (double)p.mem.parameters),
                 tr_bytes_str(b, sizeof b, (double)p.mem.gradients),
                 tr_bytes_str(c, sizeof c, p.optimizer),
                 tr_bytes_str(d2, sizeof d2, (double)(p.mem.activations + p.mem.scratch)),
                 max_batch, own,
                 r->lm ? ", tp or more ranks, or train.recompute = block" : " or more ranks",
                 sp_advice(r), hint);
    }
    return e;
}
