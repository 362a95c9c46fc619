/* test_stage_split.c: the GPT's split of its blocks over pipeline stages
 * (tr_gpt_stage_blocks), against every contiguous split tried by brute force:
 *  - the stages hold blocks 0..L-1 in order, each stage but the last at least one;
 *  - its busiest stage costs no more than the best split's (by the cost model the
 *    header states: a block 6 x 12 C^2 + 12 C T FLOPs a token, the head 6 C V);
 *  - the last stage holds the head alone only where that is strictly lighter than
 *    the best split giving it a block (so layouts where it is not keep their split);
 *  - tr_gpt_check_config takes pp up to n_layer + 1 and refuses more;
 *  - a split given by hand (stage_blocks) is the one taken, and one that does not
 *    name pp stages, add up to n_layer or give each stage but the last a block is
 *    refused with the split by cost to use;
 *  - under costs that rule some stages' counts out (the planner's memory limit), the
 *    least busiest split that avoids them, and none where every split has one;
 *  - the deepest model the deck takes (128 blocks) at up to pp 129, and GPT-3 175B's
 *    96 blocks at pp 16. */
#include "test_util.h"

#include "models/gpt.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define MAXL 10

static double block_cost(const tr_gpt_config *c)
{
    return 6.0 * 12.0 * c->C * c->C + 12.0 * c->C * c->T;
}

/* the lightest busiest stage over all splits of blocks [b, L) into stages s..pp-1,
 * each but the last holding at least one block (the last none if allow_empty) */
static double best_worst(const tr_gpt_config *c, int pp, int s, int b, int allow_empty)
{
    double bc = block_cost(c), hc = 6.0 * (double)c->C * c->V;
    if (s == pp - 1)
        return (c->L - b == 0 && !allow_empty) ? INFINITY : (c->L - b) * bc + hc;
    double best = INFINITY;
    for (int n = 1; b + n <= c->L; n++) {
        double rest = best_worst(c, pp, s + 1, b + n, allow_empty);
        double worst = fmax(n * bc, rest);
        best = fmin(best, worst);
    }
    return best;
}

static void check_split(int C, int T, int V, int L, int pp)
{
    tr_gpt_config c;
    memset(&c, 0, sizeof c);
    c.C = C, c.T = T, c.V = V, c.L = L, c.NH = 1;
    char at[64];
    snprintf(at, sizeof at, "C %d V %d L %d pp %d:", C, V, L, pp);
    int next = 0, empty_last = 0;
    double worst = 0;
    for (int s = 0; s < pp; s++) {
        int first, count;
        tr_gpt_stage_blocks(&c, pp, s, &first, &count);
        CHECK(first == next, "%s stage %d starts at block %d, not %d", at, s, first, next);
        CHECK(count >= 1 || s == pp - 1, "%s stage %d holds no block", at, s);
        next = first + count;
        empty_last = s == pp - 1 && count == 0;
        worst = fmax(worst, tr_gpt_stage_cost(&c, pp, s));
    }
    CHECK(next == L, "%s the stages hold blocks up to %d of %d", at, next, L);
    double best = best_worst(&c, pp, 0, 0, 1), with_block = best_worst(&c, pp, 0, 0, 0);
    CHECK(worst <= best * (1 + 1e-12), "%s busiest %.6g, the best split's %.6g", at, worst, best);
    if (empty_last)
        CHECK(best < with_block, "%s the head alone, though no lighter (%.6g)", at, with_block);
    else
        CHECK(worst <= with_block * (1 + 1e-12), "%s busiest %.6g, with a block %.6g", at, worst,
              with_block);
}

/* a cost that forbids more than `cap` blocks on stage 0 (as a memory limit would) */
static double capped(void *ctx, int stage, int blocks)
{
    int cap = *(const int *)ctx;
    return stage == 0 && blocks > cap ? INFINITY : blocks + (stage == 2 ? 0.5 : 0);
}

int main(void)
{
    /* widths from a head far lighter than a block to one worth many of them */
    const int C[] = {16, 64, 256, 768};
    const int V[] = {256, 4096, 50257};
    int head_alone = 0;
    for (int ci = 0; ci < 4; ci++)
        for (int vi = 0; vi < 3; vi++)
            for (int L = 1; L <= MAXL; L++)
                for (int pp = 1; pp <= L + 1; pp++) {
                    check_split(C[ci], 64, V[vi], L, pp);
                    tr_gpt_config c = {.C = C[ci], .T = 64, .V = V[vi], .L = L, .NH = 1};
                    int first, count;
                    tr_gpt_stage_blocks(&c, pp, pp - 1, &first, &count);
                    head_alone += pp > 1 && count == 0;
                }
    CHECK(head_alone > 0, "no case above puts the head alone"); /* some must */

    /* GPT-2 124M at pp 4: three stages of four blocks, the head (4.5 blocks) alone */
    tr_gpt_config g = {.C = 768, .T = 1024, .V = 50257, .L = 12, .NH = 12};
    int first, count;
    tr_gpt_stage_blocks(&g, 4, 3, &first, &count);
    CHECK(count == 0 && first == 12, "124M pp 4: last stage %d + %d", first, count);
    tr_gpt_stage_blocks(&g, 4, 2, &first, &count);
    CHECK(first == 8 && count == 4, "124M pp 4: stage 2 %d + %d", first, count);
    /* ...and at pp 2 the head shares the last stage: blocks 0-7, then 8-11 + head */
    tr_gpt_stage_blocks(&g, 2, 1, &first, &count);
    CHECK(first == 8 && count == 4, "124M pp 2: stage 1 %d + %d", first, count);

    char err[512];
    g.layout.pp = 13;
    CHECK(tr_gpt_check_config(&g, err, sizeof err) == 0, "pp 13 on 12 blocks refused: %s", err);
    g.layout.pp = 14;
    CHECK(tr_gpt_check_config(&g, err, sizeof err) != 0, "pp 14 on 12 blocks taken");
    CHECK(strstr(err, "use pp <= 13") != NULL, "the message: %s", err);

    /* a split set by hand ([parallel] stage_blocks) is the one taken, and checked */
    g.layout.pp = 3;
    int given[] = {2, 10, 0};
    memcpy(g.stage_blocks, given, sizeof given);
    g.nstage_blocks = 3;
    CHECK(tr_gpt_check_config(&g, err, sizeof err) == 0, "2,10,0 at pp 3 refused: %s", err);
    for (int s = 0, next = 0; s < 3; s++) {
        tr_gpt_stage_blocks(&g, 3, s, &first, &count);
        CHECK(first == next && count == given[s], "2,10,0: stage %d %d + %d", s, first, count);
        next += count;
    }
    char text[48];
    tr_gpt_stage_blocks_text(&g, 3, 1, text, sizeof text);
    CHECK(!strcmp(text, "blocks 2-11"), "2,10,0: stage 1 is '%s'", text);
    CHECK(tr_gpt_stage_cost(&g, 3, 2) == 6.0 * 768 * 50257, "2,10,0: the last stage's cost");
    g.stage_blocks[1] = 9; /* 11 of 12 blocks */
    CHECK(tr_gpt_check_config(&g, err, sizeof err) != 0, "2,9,0 of 12 blocks taken");
    CHECK(strstr(err, "holds 11 blocks, but [model] n_layer = 12") && strstr(err, "by cost: "),
          "the message: %s", err);
    g.stage_blocks[0] = 0, g.stage_blocks[1] = 6, g.stage_blocks[2] = 6; /* stage 0 empty */
    CHECK(tr_gpt_check_config(&g, err, sizeof err) != 0, "0,6,6 taken");
    CHECK(strstr(err, "leaves stage 0 without a block"), "the message: %s", err);
    g.layout.pp = 2; /* three counts for two stages */
    CHECK(tr_gpt_check_config(&g, err, sizeof err) != 0, "3 counts at pp 2 taken");
    CHECK(strstr(err, "names 3 stages, but pp = 2") && strstr(err, "by cost: 8,4"),
          "the message: %s", err);
    g.layout.pp = 1, g.nstage_blocks = 1, g.stage_blocks[0] = 12; /* one stage, all */
    CHECK(tr_gpt_check_config(&g, err, sizeof err) == 0, "12 at pp 1 refused: %s", err);
    tr_gpt_stage_blocks(&g, 1, 0, &first, &count);
    CHECK(first == 0 && count == 12, "12 at pp 1: %d + %d", first, count);

    /* the split under costs that rule some stages out: 6 blocks over 3 stages, the
     * last's head half a block; unbounded 2,2,2 (2.5); stage 0 at most 1: 1,3,2 or
     * 1,2,3 would cost 3 and 3.5, 1,3,2 is taken; nothing fits stage 0 at 0 */
    int split[3], cap = 9;
    CHECK(tr_gpt_split_min_max(6, 3, capped, &cap, split) == 2.5 && split[0] == 2 &&
              split[1] == 2 && split[2] == 2,
          "unbounded: %d,%d,%d", split[0], split[1], split[2]);
    cap = 1;
    CHECK(tr_gpt_split_min_max(6, 3, capped, &cap, split) == 3 && split[0] == 1 && split[1] == 3 &&
              split[2] == 2,
          "stage 0 at most 1: %d,%d,%d", split[0], split[1], split[2]);
    cap = 0;
    split[0] = -7;
    CHECK(tr_gpt_split_min_max(6, 3, capped, &cap, split) == INFINITY && split[0] == -7,
          "stage 0 at most 0: a split found");

    /* the deepest model the deck takes (n_layer = TR_GPT_MAX_LAYERS): pp up to one stage
     * a block and the head alone; GPT-3 175B's 96 blocks at pp 16, six a stage (its
     * head weighs a third of a block, so the last stage keeps six too) */
    tr_gpt_config d = {.C = 64, .T = 64, .V = 50257, .L = TR_GPT_MAX_LAYERS, .NH = 1};
    d.layout.pp = TR_GPT_MAX_LAYERS + 1;
    CHECK(tr_gpt_check_config(&d, err, sizeof err) == 0, "pp %d on %d blocks refused: %s",
          d.layout.pp, d.L, err);
    for (int s = 0; s < d.layout.pp; s++) {
        tr_gpt_stage_blocks(&d, d.layout.pp, s, &first, &count);
        CHECK(first == s && count == (s < d.L), "%d blocks at pp %d: stage %d %d + %d", d.L,
              d.layout.pp, s, first, count);
    }
    d.layout.pp = TR_GPT_MAX_LAYERS + 2;
    CHECK(tr_gpt_check_config(&d, err, sizeof err) != 0, "pp %d on %d blocks taken", d.layout.pp,
          d.L);
    check_split(64, 64, 256, TR_GPT_MAX_LAYERS, 4); /* (the brute force takes L^(pp-1) steps) */
    tr_gpt_config gpt3 = {.C = 12288, .T = 2048, .V = 50257, .L = 96, .NH = 96};
    int blocks = 0;
    for (int s = 0; s < 16; s++) {
        tr_gpt_stage_blocks(&gpt3, 16, s, &first, &count);
        CHECK(first == blocks && count == 6, "175B pp 16: stage %d %d + %d", s, first, count);
        blocks += count;
    }
    return tr_test_finish();
}
