/* gpt_stage_split.c: the GPT's layout checks and the pipeline's split of its blocks
 * over the stages: by hand ([parallel] stage_blocks, checked here), or by cost (a
 * block's and the head's FLOPs), or by any cost of a stage holding so many blocks
 * (the planner's memory, the measured stage times): one contiguous split whose
 * busiest stage is the lightest. Every rank computes the same split. */
#include "gpt.h"

#include "core/error.h"

#include <math.h>
#include <stdio.h>

const char *tr_gpt_blocks_list(const int *v, int n, char *buf, size_t len)
{
    size_t k = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && k < len; i++)
        k += (size_t)snprintf(buf + k, len - k, "%s%d", i ? "," : "", v[i]);
    return buf;
}

/* The deck's split ([parallel] stage_blocks): a count for each of the pp stages, adding
 * up to n_layer, none 0 but the last's (the head alone). The message suggests the split
 * by cost, which every stage count has. */
static int check_stage_blocks(const tr_gpt_config *c, int pp, char *err, size_t errlen)
{
    char given[TR_GPT_MAX_STAGES * 4], split[TR_GPT_MAX_STAGES * 4];
    tr_gpt_blocks_list(c->stage_blocks, c->nstage_blocks, given, sizeof given);
    tr_gpt_config by_cost = *c;
    by_cost.nstage_blocks = 0;
    int counts[TR_GPT_MAX_STAGES], sum = 0, empty = -1;
    for (int s = 0; s < pp; s++) {
        int first;
        tr_gpt_stage_blocks(&by_cost, pp, s, &first, &counts[s]);
    }
    tr_gpt_blocks_list(counts, pp, split, sizeof split);
    for (int s = 0; s < c->nstage_blocks; s++) {
        sum += c->stage_blocks[s];
        if (c->stage_blocks[s] == 0 && s < c->nstage_blocks - 1 && empty < 0)
            empty = s;
    }
    const char *fix = "every stage but the last holds at least one block, the last may hold "
                      "the head alone (0), and the counts add up to n_layer";
    if (c->nstage_blocks != pp)
        snprintf(err, errlen,
                 "[parallel] stage_blocks = %s names %d stage%s, but pp = %d: give one block "
                 "count a stage, first to last (%s; by cost: %s), or leave it empty to split "
                 "by cost",
                 given, c->nstage_blocks, c->nstage_blocks == 1 ? "" : "s", pp, fix, split);
    else if (sum != c->L)
        snprintf(err, errlen,
                 "[parallel] stage_blocks = %s holds %d blocks, but [model] n_layer = %d: the "
                 "counts must add up to n_layer (by cost: %s)",
                 given, sum, c->L, split);
    else if (empty >= 0)
        snprintf(err, errlen,
                 "[parallel] stage_blocks = %s leaves stage %d without a block: only the last "
                 "stage may hold none, the head alone (by cost: %s)",
                 given, empty, split);
    else
        return 0;
    return TR_EXIT_USAGE;
}

int tr_gpt_check_config(const tr_gpt_config *c, char *err, size_t errlen)
{
    if (c->C % c->NH) {
        snprintf(err, errlen,
                 "[model] n_embd = %d is not divisible by n_head = %d; pick n_head "
                 "among the divisors of n_embd",
                 c->C, c->NH);
        return TR_EXIT_USAGE;
    }
    int tp = c->layout.tp > 1 ? c->layout.tp : 1, pp = c->layout.pp > 1 ? c->layout.pp : 1;
    if (c->NH % tp) {
        snprintf(err, errlen,
                 "[parallel] tp = %d does not divide [model] n_head = %d: tensor "
                 "parallelism splits the heads; pick tp among the divisors of n_head",
                 tp, c->NH);
        return TR_EXIT_USAGE;
    }
    if (pp > c->L + 1) {
        snprintf(err, errlen,
                 "[parallel] pp = %d stages is more than the %d blocks ([model] "
                 "n_layer) and the head: every stage but the last needs at least one block; "
                 "use pp <= %d",
                 pp, c->L, c->L + 1);
        return TR_EXIT_USAGE;
    }
    return c->nstage_blocks ? check_stage_blocks(c, pp, err, errlen) : 0;
}

/* Relative costs, in FLOPs per token of a training step. */
static double block_cost(const tr_gpt_config *c)
{
    return 6.0 * 12.0 * c->C * c->C + 12.0 * c->C * c->T;
}
static double head_cost(const tr_gpt_config *c) { return 6.0 * (double)c->C * c->V; }

void tr_gpt_costs(const tr_gpt_config *c, double *block, double *head)
{
    *block = block_cost(c);
    *head = head_cost(c);
}

double tr_gpt_split_min_max(int L, int pp, tr_stage_cost_fn cost_of, void *ctx, int *counts)
{
    /* the contiguous split minimising the most expensive stage: dynamic programming
     * over (stages, blocks), pp x L x L costs at most. Every stage holds a
     * block but the last, which may hold the head alone where that lightens the
     * busiest stage (a vocabulary of 50257 weighs as much as 4.5 of GPT-2 124M's
     * blocks, so at pp 4 the head and one block would set the pace) */
    if (L < 1 || L > TR_GPT_MAX_LAYERS || pp < 1 || pp > L + 1)
        tr_fatal(TR_EXIT_SOFTWARE, "bug: a split of %d blocks over %d stages", L, pp);
    /* best[s][n]: the cost of the worst of stages 0..s-1 holding blocks 0..n-1 (on the
     * heap: at 128 blocks the tables take 200 KB, and a planner's cost function may
     * build a model on the stack below this frame) */
    typedef double best_row[TR_GPT_MAX_LAYERS + 1];
    typedef int cut_row[TR_GPT_MAX_LAYERS + 1];
    best_row *best = tr_alloc((size_t)(pp + 1) * sizeof *best, "split search");
    cut_row *cut = tr_alloc((size_t)(pp + 1) * sizeof *cut, "split search");
    for (int s = 0; s <= pp; s++)
        for (int n = 0; n <= L; n++)
            best[s][n] = INFINITY, cut[s][n] = -1;
    best[0][0] = 0;
    for (int s = 1; s <= pp; s++)
        /* stages s..pp-2 need a block each after these n; the last (s = pp) may take
         * none (k = n), and is preferred so only when strictly lighter */
        for (int n = s < pp ? s : L; n <= L - (pp - 1 - s) && n <= L; n++)
            for (int k = s - 1; k < n + (s == pp); k++) { /* stage s-1: blocks k..n-1 */
                if (best[s - 1][k] == INFINITY)
                    continue;
                double worst = fmax(best[s - 1][k], cost_of(ctx, s - 1, n - k));
                if (worst < best[s][n]) {
                    best[s][n] = worst;
                    cut[s][n] = k;
                }
            }
    double least = best[pp][L];
    for (int s = pp, hi = L; least < INFINITY && s > 0; s--) {
        counts[s - 1] = hi - cut[s][hi];
        hi = cut[s][hi];
    }
    tr_free(best);
    tr_free(cut);
    return least;
}

/* tr_gpt_split_by's costs */
typedef struct split_costs {
    int pp;
    double block, first, head;
} split_costs;

static double split_cost(void *ctx, int stage, int blocks)
{
    const split_costs *k = ctx;
    return blocks * k->block + (stage == 0 ? k->first : 0) + (stage == k->pp - 1 ? k->head : 0);
}

void tr_gpt_split_by(int L, int pp, double block, double first, double head, int *counts)
{
    split_costs k = {pp, block, first, head};
    if (tr_gpt_split_min_max(L, pp, split_cost, &k, counts) == INFINITY)
        tr_fatal(TR_EXIT_SOFTWARE, "bug: no split of %d blocks over %d stages at costs %g, %g, %g",
                 L, pp, block, first, head);
}

void tr_gpt_stage_blocks(const tr_gpt_config *c, int pp, int stage, int *first, int *count)
{
    int by_cost[TR_GPT_MAX_STAGES];
    const int *counts = c->stage_blocks; /* the deck's (tr_gpt_check_config checked it) */
    if (c->nstage_blocks != pp) {
        tr_gpt_split_by(c->L, pp, block_cost(c), 0, head_cost(c), by_cost);
        counts = by_cost;
    }
    *first = 0;
    for (int s = 0; s < stage; s++)
        *first += counts[s];
    *count = counts[stage];
}

const char *tr_gpt_stage_blocks_text(const tr_gpt_config *c, int pp, int stage, char *buf,
                                     size_t len)
{
    int first, count;
    tr_gpt_stage_blocks(c, pp, stage, &first, &count);
    if (count)
        snprintf(buf, len, "blocks %d-%d", first, first + count - 1);
    else
        snprintf(buf, len, "no blocks");
    return buf;
}

double tr_gpt_stage_cost(const tr_gpt_config *c, int pp, int stage)
{
    int first, count;
    tr_gpt_stage_blocks(c, pp, stage, &first, &count);
    return count * block_cost(c) + (stage == pp - 1 ? head_cost(c) : 0);
}
