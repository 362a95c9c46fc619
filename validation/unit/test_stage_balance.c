/* test_stage_balance.c: the split the stages' measured times choose
 * (train/stage_balance.h), on made-up times:
 *  - a block's time is the middle stages' busy time over their blocks (pp 2: stage
 *    0's), the embeddings' and the head's what the first and the last stage took
 *    beyond their blocks (never below 0);
 *  - the split is the one that minimises the busiest stage by those times, and is
 *    offered (better) only where it differs and shortens the busiest by 5 % or more;
 *  - nothing is said of one stage or of a stage that measured no time;
 *  - the "stage balance:" line says which of the three it is. */
#include "test_util.h"

#include "train/stage_balance.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static tr_gpt_config model(int L, int pp, const int *split)
{
    tr_gpt_config c = {.C = 64, .T = 32, .V = 256, .L = L, .NH = 4};
    c.layout.pp = pp;
    if (split) {
        c.nstage_blocks = pp;
        memcpy(c.stage_blocks, split, (size_t)pp * sizeof *split);
    }
    return c;
}

/* the line tr_stage_balance_print writes */
static char *line_of(const tr_stage_balance *b)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    tr_stage_balance_print(f, b);
    fclose(f);
    return text;
}

static int same(const int *a, const int *b, int n) { return !memcmp(a, b, (size_t)n * sizeof *a); }

int main(void)
{
    tr_stage_balance b;
    /* 3 blocks and 1 + the head: a block 1 s, the head 10: all four blocks first */
    tr_gpt_config c = model(4, 2, (int[]){3, 1});
    CHECK(tr_stage_balance_of(&c, 2, (double[]){3.0, 11.0}, &b) == 0, "3,1 refused");
    CHECK(fabs(b.block - 1.0) < 1e-12 && fabs(b.head - 10.0) < 1e-12, "3,1: block %g, head %g",
          b.block, b.head);
    CHECK(same(b.now, (int[]){3, 1}, 2) && same(b.counts, (int[]){4, 0}, 2),
          "3,1: now %d,%d, by time %d,%d", b.now[0], b.now[1], b.counts[0], b.counts[1]);
    CHECK(b.better && b.busiest == 11.0 && fabs(b.predicted - 10.0) < 1e-12,
          "3,1: better %d, %g -> %g", b.better, b.busiest, b.predicted);
    char *text = line_of(&b);
    CHECK(!strcmp(text, "stage balance: busy 3000.00, 11000.00 ms a step by stage (a block "
                        "1000.00 ms, the head 10000.00); parallel.stage_blocks=4,0 would make "
                        "the busiest about 10000.00 ms (now 11000.00)\n"),
          "3,1: the line: %s", text);
    free(text);

    /* a head lighter than a block: it shares the last stage, and the split by cost
     * (stage_blocks empty) is kept where the times choose it too */
    c = model(4, 2, NULL);
    int first, n0, n1;
    tr_gpt_stage_blocks(&c, 2, 0, &first, &n0);
    tr_gpt_stage_blocks(&c, 2, 1, &first, &n1);
    CHECK(n0 == 2 && n1 == 2, "by cost: %d,%d", n0, n1);
    CHECK(tr_stage_balance_of(&c, 2, (double[]){2.0, 2.1}, &b) == 0, "2,2 refused");
    CHECK(fabs(b.head - 0.1) < 1e-12 && same(b.counts, (int[]){2, 2}, 2) && !b.better,
          "2,2: head %g, by time %d,%d, better %d", b.head, b.counts[0], b.counts[1], b.better);
    text = line_of(&b);
    CHECK(strstr(text, "; these times choose this split\n") != NULL, "2,2: the line: %s", text);
    free(text);
    /* the last stage faster than its blocks: the head 0, not less */
    CHECK(tr_stage_balance_of(&c, 2, (double[]){2.0, 1.5}, &b) == 0 && b.head == 0, "a head of %g",
          b.head);

    /* another split, but less than 5 % faster: named, not offered */
    int half[] = {10, 10};
    c = model(20, 2, half);
    CHECK(tr_stage_balance_of(&c, 2, (double[]){10.0, 11.5}, &b) == 0, "10,10 refused");
    CHECK(same(b.counts, (int[]){11, 9}, 2) && !b.better && fabs(b.predicted - 11.0) < 1e-12,
          "10,10: by time %d,%d, better %d, %g", b.counts[0], b.counts[1], b.better, b.predicted);
    text = line_of(&b);
    CHECK(strstr(text, "; no split of whole blocks shortens the busiest stage by 5 % or more by "
                       "these times (parallel.stage_blocks=11,9: about 11000.00 ms, now "
                       "11500.00)\n") != NULL,
          "10,10: the line: %s", text);
    free(text);

    /* three stages: a block's time from the middle one, the embeddings' from stage 0's
     * extra (2 blocks' worth), the head's from the last's: 2,4,0 evens them at 4 */
    c = model(6, 3, (int[]){1, 3, 2});
    CHECK(tr_stage_balance_of(&c, 3, (double[]){1.0 + 2.0, 3.0, 2.0 + 4.0}, &b) == 0,
          "1,3,2 refused");
    CHECK(fabs(b.block - 1.0) < 1e-12 && fabs(b.first - 2.0) < 1e-12 &&
              fabs(b.head - 4.0) < 1e-12 && same(b.counts, (int[]){2, 4, 0}, 3) && b.better &&
              fabs(b.predicted - 4.0) < 1e-12,
          "1,3,2: block %g, embeddings %g, head %g, by time %d,%d,%d (%g)", b.block, b.first,
          b.head, b.counts[0], b.counts[1], b.counts[2], b.predicted);
    text = line_of(&b);
    CHECK(strstr(text, "(a block 1000.00 ms, the embeddings 2000.00, the head 4000.00); "
                       "parallel.stage_blocks=2,4,0 would make the busiest about 4000.00 ms "
                       "(now 6000.00)\n") != NULL,
          "1,3,2: the line: %s", text);
    free(text);

    /* nothing to say */
    CHECK(tr_stage_balance_of(&c, 1, (double[]){1.0}, &b) != 0 && b.pp == 0, "one stage");
    CHECK(tr_stage_balance_of(&c, 3, (double[]){1.0, 0.0, 2.0}, &b) != 0, "a stage of 0 s");
    text = line_of(&b);
    CHECK(!strcmp(text, ""), "no line where nothing is known: %s", text);
    free(text);
    return tr_test_finish();
}
