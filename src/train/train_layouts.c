/* train_layouts.c: trainer --plan --layouts: every dp x tp x pp of a run's ranks that
 * a GPT allows, each planned as --plan would plan it (train_memory.c), with its
 * traffic, pipeline use and (given the ranks' speeds) an estimated step, the best
 * first. */
#include "core/error.h"
#include "core/sysmem.h" /* tr_bytes_str */
#include "models/gpt.h"
#include "plan.h"
#include "run.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct layout_row {
    int dp, tp, pp;
    long micro;   /* micro-batches of the deck's size, or the fewest that fit */
    int raised;   /* micro is more than the deck's size gives, to fit */
    double need;  /* the largest stage's plan total */
    int fits;     /* 1, 0, or -1 where there is nothing to judge by */
    double busy;  /* tr_plan_pipeline_busy */
    double node;  /* the most a rank sends per step to ranks of its node */
    double net;   /* ... across nodes */
    double step;  /* estimated seconds a step (0: no speeds given) */
    int tp_spans; /* the tp group spans nodes */
    int deck;     /* the deck's own layout */
    /* a pipeline that fits at no micro-batch count under its split by cost (or the
     * deck's): planned at the deck's micro-batches under the split that fits, these
     * block counts a stage (nsplit of them; 0: the usual split) */
    int nsplit;
    int split[TR_GPT_MAX_STAGES];
} layout_row;

/* With speeds, fit first, then the estimated step. Without: fit, tp on a node's
 * links, the least pipeline idle, the fewest bytes across nodes, the fewest
 * model-parallel ranks (larger matrix products; tp's all-reduces wait in the step
 * where dp's overlap backward), the fewest bytes within nodes. */
static int row_order(const void *pa, const void *pb)
{
    const layout_row *a = pa, *b = pb;
    if (a->fits != b->fits)
        return b->fits - a->fits;
    if (a->step != b->step)
        return a->step < b->step ? -1 : 1;
    if (a->tp_spans != b->tp_spans)
        return a->tp_spans - b->tp_spans;
    if (fabs(a->busy - b->busy) > 1e-9)
        return a->busy > b->busy ? -1 : 1;
    if (a->net != b->net)
        return a->net < b->net ? -1 : 1;
    if (a->tp * a->pp != b->tp * b->pp)
        return a->tp * a->pp - b->tp * b->pp;
    if (a->node != b->node)
        return a->node < b->node ? -1 : 1;
    return a->tp - b->tp;
}

/* A group of `span` consecutive ranks (tp innermost, then pp, then dp; a node holds
 * `per_node` consecutive ranks) crosses nodes unless it lies within one. */
static int crosses_nodes(int span, int per_node) { return span > per_node || per_node % span != 0; }

/* row's memory, traffic, pipeline use and (with speeds) estimated step at r->micro
 * micro-batches, r standing for the layout's rank 0. The estimate: stage s computes
 * its share of the step's model FLOPs (4/3 of its blocks' with recomputation) at
 * the rank's speed, a micro-batch at a time, its tp all-reduces and pipeline
 * messages waited for inside each; the pipeline takes micro + pp - 1 of its slowest
 * stage's slots; then the tied embedding's all-reduce and the part of the dp
 * reduction that the last micro-batch's backward (2/3 of its compute) does not
 * hide. Each group's bytes go at the node's or the network's speed by where its
 * ranks lie. */
static void measure_layout(run *r, layout_row *row)
{
    const int *split = row->nsplit ? row->split : NULL;
    const tr_runtime *rt = r->rt;
    const tr_world *w = r->w;
    const tr_gpt_config *c = tr_gpt_config_of(&r->model);
    int g = w->local_size > 0 ? w->local_size : w->size;
    double bw[2] = {rt->plan_node_gbps * 1e9, rt->plan_network_gbps * 1e9}; /* node, net */
    int x_tp = crosses_nodes(w->tp, g), x_pp = crosses_nodes(w->tp * w->pp, g),
        x_dp = crosses_nodes(w->size, g);
    double flops = tr_model_train_flops(&r->model) * (double)r->global_batch / (w->dp * w->tp);
    if (!strcmp(tr_deck_str(r->d, "train", "recompute"), "block"))
        flops *= 4.0 / 3.0;
    double cost_sum = 0, slot = 0, tail = 0;
    for (int s = 0; s < w->pp; s++)
        cost_sum += w->pp > 1 ? tr_gpt_stage_cost(c, w->pp, s) : 1;
    row->need = row->node = row->net = 0;
    for (int s = 0; s < w->pp; s++) {
        tr_plan p =
            tr_run_split_stage_plan(r, s, r->micro, (int)(r->local_batch / r->micro), split);
        tr_plan_traffic t =
            tr_plan_stage_traffic(&p, &r->model, w, r->d, r->local_batch, r->micro, s);
        row->need = p.total > row->need ? p.total : row->need;
        double net = (x_tp ? t.tp : 0) + (x_pp ? t.pp + t.emb : 0) + (x_dp ? t.dp : 0);
        double node = t.tp + t.pp + t.emb + t.dp - net;
        row->net = net > row->net ? net : row->net;
        row->node = node > row->node ? node : row->node;
        if (rt->plan_tflops <= 0)
            continue;
        double share = w->pp > 1 ? tr_gpt_stage_cost(c, w->pp, s) / cost_sum : 1;
        double compute = flops * share / (rt->plan_tflops * 1e12);
        double inside = (compute + t.tp / bw[x_tp] + t.pp / bw[x_pp]) / r->micro;
        double hidden = 2.0 / 3.0 * compute / r->micro, dp = t.dp > 0 ? t.dp / bw[x_dp] : 0;
        double after = (t.emb > 0 ? t.emb / bw[x_pp] : 0) + (dp > hidden ? dp - hidden : 0);
        slot = inside > slot ? inside : slot;
        tail = after > tail ? after : tail;
    }
    row->step = rt->plan_tflops > 0 ? (r->micro + w->pp - 1) * slot + tail : 0;
    row->busy = tr_plan_pipeline_busy(&r->model, w->pp, r->micro);
    row->micro = r->micro;
}

/* The layout dp x tp x pp of the run's ranks at micro-batches of the deck's size (or
 * the largest that divides the rank's batch), or where those do not fit `room`, at
 * the fewest micro-batches that do, or where none does, a pipeline at the deck's
 * count under the split of its blocks that fits (tr_run_split_that_fits): r's world,
 * batch and model stand for that layout's rank 0 while it is worked out. */
static layout_row plan_layout(run *r, int dp, int tp, int pp, double room)
{
    tr_world w = *r->w, *saved_w = r->w;
    long saved[4] = {r->local_batch, r->micro, r->micro_batch, r->eval_local_batch};
    int saved_slots = r->slots;
    tr_model saved_model = r->model;
    w.dp = dp, w.tp = tp, w.pp = pp, w.dp_rank = w.tp_rank = w.pp_rank = 0;
    r->w = &w;
    r->local_batch = r->global_batch / dp;
    long mbs = saved[2] < r->local_batch ? saved[2] : r->local_batch;
    while (r->local_batch % mbs)
        mbs--;
    r->eval_local_batch = mbs; /* a language model evaluates as it trains */
    layout_row row = {.dp = dp, .tp = tp, .pp = pp, .fits = -1};
    row.tp_spans = crosses_nodes(tp, w.local_size > 0 ? w.local_size : w.size);
    long deck_micro = r->local_batch / mbs, micro = deck_micro;
    for (int pass = 0; pass < 2 && micro; pass++) {
        /* stage 0's model at this count (its slots follow it), which tr_run_stage_plan takes
         * for this rank's own stage */
        r->micro = micro;
        r->micro_batch = r->local_batch / micro;
        tr_model_layout lay = tr_run_model_layout(r);
        lay.split = row.nsplit ? row.split : NULL;
        char msg[1024];
        if (tr_model_build(&r->model, saved_model.name, r->d, (tr_shape){1, 1, 1}, &lay, msg,
                           sizeof msg))
            tr_fatal(TR_EXIT_SOFTWARE, "bug: layout dp %d x tp %d x pp %d: %s", dp, tp, pp, msg);
        measure_layout(r, &row);
        row.raised = micro != deck_micro;
        if (room > 0)
            row.fits = row.need <= room;
        /* where it does not fit, once more at the fewest micro-batches that do, or where
         * none does, at this count under a split of the blocks that fits */
        double need;
        long most, next = 0;
        if (room > 0 && !row.fits && !row.nsplit) {
            next = tr_run_fewest_micro_that_fit(r, room, 0, &need, &most);
            if (!next && pp > 1 && tr_run_split_that_fits(r, room, 0, row.split, &need)) {
                row.nsplit = pp;
                next = micro;
            }
        }
        micro = next;
        tr_model_free(&r->model);
    }
    r->model = saved_model;
    r->w = saved_w;
    r->local_batch = saved[0], r->micro = saved[1], r->micro_batch = saved[2];
    r->eval_local_batch = saved[3];
    r->slots = saved_slots;
    return row;
}

static int int_order(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

/* x appended to v[0 .. *n) unless there already */
static void add_once(int *v, int *n, int x)
{
    for (int i = 0; i < *n; i++)
        if (v[i] == x)
            return;
    v[(*n)++] = x;
}

/* "2, 4 and 8" of n values */
static void list_values(const int *v, int n, char *out, size_t len)
{
    size_t k = 0;
    out[0] = '\0';
    for (int i = 0; i < n && k < len; i++)
        k += (size_t)snprintf(out + k, len - k, "%s%d",
                              i == 0       ? ""
                              : i == n - 1 ? " and "
                                           : ", ",
                              v[i]);
}

void tr_run_print_layouts(run *r)
{
    const tr_gpt_config *c = tr_gpt_config_of(&r->model);
    int n = r->w->size, per_node = r->w->local_size;
    if (!c) {
        printf("layouts: model %s trains data-parallel only, so the one layout of %d rank%s is "
               "dp %d; its plan:\n",
               r->model.name, n, n == 1 ? "" : "s", n);
        return;
    }
    double room = tr_plan_fit_room(r->d, r->w, r->rt->plan_device_memory);
    int divisors = 0; /* at most divisors^2 (tp, pp) pairs */
    for (int k = 1; k <= n; k++)
        divisors += n % k == 0;
    layout_row *rows = tr_alloc((size_t)divisors * (size_t)divisors * sizeof *rows, "layouts");
    /* the values left out, each once: at most one per divisor of n */
    int *bad = tr_alloc(3 * (size_t)divisors * sizeof *bad, "layouts");
    int *bad_tp = bad, *bad_pp = bad + divisors, *bad_dp = bad + 2 * divisors;
    int nrows = 0, nbad_tp = 0, nbad_pp = 0, nbad_dp = 0;
    for (int tp = 1; tp <= n; tp++) {
        if (n % tp)
            continue;
        if (c->NH % tp) {
            add_once(bad_tp, &nbad_tp, tp);
            continue;
        }
        for (int pp = 1; pp <= n / tp; pp++) {
            if ((n / tp) % pp)
                continue;
            int dp = n / (tp * pp);
            if (pp > c->L + 1) {
                add_once(bad_pp, &nbad_pp, pp);
                continue;
            }
            if (r->global_batch % dp) {
                add_once(bad_dp, &nbad_dp, dp);
                continue;
            }
            layout_row row = plan_layout(r, dp, tp, pp, room);
            row.deck = dp == r->w->dp && tp == r->w->tp && pp == r->w->pp;
            rows[nrows++] = row;
        }
    }
    qsort(rows, (size_t)nrows, sizeof *rows, row_order);
    qsort(bad_tp, (size_t)nbad_tp, sizeof *bad, int_order);
    qsort(bad_pp, (size_t)nbad_pp, sizeof *bad, int_order);
    qsort(bad_dp, (size_t)nbad_dp, sizeof *bad, int_order);
    const tr_runtime *rt = r->rt;
    int speeds = rt->plan_tflops > 0;
    char a[32], b[32], e[32];
    /* the deck's split of the blocks holds at its own stage count only */
    char split[TR_GPT_MAX_STAGES * 4 + 96] = "", given[TR_GPT_MAX_STAGES * 4];
    if (c && c->nstage_blocks)
        snprintf(split, sizeof split,
                 "; stage_blocks %s at pp %d, other stage counts split by cost",
                 tr_gpt_blocks_list(c->stage_blocks, c->nstage_blocks, given, sizeof given),
                 c->nstage_blocks);
    printf("layouts of %d rank%s, %d per node: model %s, %zu parameters; global batch %ld in "
           "micro-batches of %ld (the deck's size, or the largest that divides a rank's "
           "batch); zero %ld, recompute %s, schedule %s, %s%s, as the deck sets them%s\n",
           n, n == 1 ? "" : "s", per_node, r->model.name, r->model.nparams_logical, r->global_batch,
           r->micro_batch, (long)tr_deck_int(r->d, "parallel", "zero"),
           tr_deck_str(r->d, "train", "recompute"), tr_deck_str(r->d, "parallel", "schedule"),
           tr_deck_str(r->d, "train", "precision"),
           tr_deck_bool(r->d, "parallel", "sequence_parallel") ? ", sequence parallel at tp > 1"
                                                                 : "",
           split);
    if (speeds)
        printf("estimated at %g TFLOP/s of model FLOPs a rank, %g GB/s a rank within a node "
               "and %g GB/s across nodes (--tflops, --node-gbps, --network-gbps)\n",
               rt->plan_tflops, rt->plan_node_gbps, rt->plan_network_gbps);
    printf("      dp    tp    pp   micro  memory/rank  fits   busy   sent: in node  across "
           "nodes%s\n",
           speeds ? "   est. step  tokens/s" : "");
    for (int i = 0; i < nrows; i++) {
        const layout_row *w = &rows[i];
        char fit[32], est[64] = "";
        if (w->fits < 0)
            snprintf(fit, sizeof fit, "?");
        else if (w->fits)
            snprintf(fit, sizeof fit, "%.0f %%", 100 * w->need / room);
        else
            snprintf(fit, sizeof fit, "no");
        if (speeds) {
            double tok = (double)r->global_batch * c->T / w->step;
            char t[24], v[24];
            if (w->step < 1)
                snprintf(t, sizeof t, "%.1f ms", 1e3 * w->step);
            else
                snprintf(t, sizeof t, "%.2f s", w->step);
            if (tok >= 1e6)
                snprintf(v, sizeof v, "%.2f M", tok / 1e6);
            else if (tok >= 1e3)
                snprintf(v, sizeof v, "%.1f k", tok / 1e3);
            else
                snprintf(v, sizeof v, "%.0f", tok);
            snprintf(est, sizeof est, "  %10s  %8s", t, v);
        }
        char blocks[TR_GPT_MAX_STAGES * 4 + 16] = "", counts[TR_GPT_MAX_STAGES * 4];
        if (w->nsplit)
            snprintf(blocks, sizeof blocks, "  stage_blocks %s",
                     tr_gpt_blocks_list(w->split, w->nsplit, counts, sizeof counts));
        printf("  %s %5d %5d %5d %6ld%s %12s  %5s  %3.0f %% %14s %13s%s%s%s\n", w->deck ? "*" : " ",
               w->dp, w->tp, w->pp, w->micro, w->raised ? "+" : " ",
               tr_bytes_str(a, sizeof a, w->need), fit, 100 * w->busy,
               tr_bytes_str(b, sizeof b, w->node), tr_bytes_str(e, sizeof e, w->net), est,
               w->tp_spans ? "  tp spans nodes" : "", blocks);
    }
    int splits = 0;
    for (int i = 0; i < nrows; i++)
        splits += rows[i].nsplit > 0;
    char list[256];
    if (nbad_tp) {
        list_values(bad_tp, nbad_tp, list, sizeof list);
        printf("left out: tp %s (tp must divide [model] n_head = %d)\n", list, c->NH);
    }
    if (nbad_pp) {
        list_values(bad_pp, nbad_pp, list, sizeof list);
        printf("left out: pp %s (more stages than the %d blocks and the head)\n", list, c->L);
    }
    if (nbad_dp) {
        list_values(bad_dp, nbad_dp, list, sizeof list);
        printf("left out: dp %s ([train] batch_size = %ld is not divisible by it)\n", list,
               r->global_batch);
    }
    if (room > 0)
        printf("fits: the largest stage's memory (trainer --plan's total) against %s per rank "
               "(%s); micro+: more micro-batches than the deck's size gives, the fewest that "
               "fit\n",
               tr_bytes_str(a, sizeof a, room),
               rt->plan_device_memory > 0 ? "--device-memory"
                                          : "this node's available memory / ranks per node");
    else
        printf("fits: not judged: a GPU's plan needs the GPU's memory, e.g. --device-memory "
               "80GiB\n");
    if (splits)
        printf("stage_blocks: a pipeline that fits at no micro-batch count with its blocks "
               "split %s, planned at the deck's micro-batches under the split that fits whose "
               "busiest stage has the fewest FLOPs (set it as [parallel] stage_blocks)\n",
               c->nstage_blocks ? "as the deck says or by cost" : "by cost");
    printf("busy: the least share of a step a rank computes, by the stages' balance of model "
           "FLOPs and the pipeline's bubble (pp - 1 of micro + pp - 1 slots); sent: the most "
           "bytes a rank sends per step to ranks of its node and across nodes (dp, tp, pp and "
           "embedding groups, ring collectives; ranks dealt to nodes in order, tp innermost, "
           "then pp, then dp)\n");
    if (speeds)
        printf("order: layouts that fit, then the estimated step (a pipeline of its slowest "
               "stage's compute and waits for tp and pp messages, then what backward leaves "
               "of the dp reduction: see docs/parallelism.md); * the deck's layout\n");
    else
        printf("order: layouts that fit, tp groups within a node (tp sends per block: it wants "
               "the node's links), the busiest, the fewest bytes across nodes, the fewest "
               "model-parallel ranks (tp x pp: larger matrix products, and tp's all-reduces "
               "wait in the step where dp's overlap backward), the fewest bytes in nodes; * "
               "the deck's layout; --tflops, --node-gbps and --network-gbps order them by an "
               "estimated step instead\n");
    printf("one layout's whole plan: trainer --plan DECK --ranks %d parallel.tp=T "
           "parallel.pp=P\n",
           n);
    tr_free(bad);
    tr_free(rows);
}
