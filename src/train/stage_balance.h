/* stage_balance.h: the pipeline's split of the GPT's blocks, weighed by what the
 * stages measured.
 *
 * The split by cost (tr_gpt_stage_blocks) weighs a block and the head by their FLOPs,
 * which is not what they take: the head's product may run nearer the peak than a
 * block's small ones, its softmax and cross-entropy add passes over the logits, and
 * each stage's optimizer update follows its parameters. At the end of a pipelined run
 * each stage's busy time a step (the median of its ranks': rank_times.h) gives a
 * block's time (the middle stages' busy time over their blocks; at pp 2, stage 0's,
 * the embeddings counted in), the embeddings' (what stage 0 took beyond its blocks)
 * and the head's (what the last stage took beyond its blocks), and from those the
 * split of whole blocks that would even the stages: [parallel] stage_blocks to try. */
#ifndef TR_STAGE_BALANCE_H
#define TR_STAGE_BALANCE_H

#include "models/gpt.h"

#include <stdio.h>

typedef struct tr_stage_balance {
    int pp;
    double busy[TR_GPT_MAX_STAGES]; /* each stage's busy seconds a step, as measured */
    int now[TR_GPT_MAX_STAGES];     /* its blocks */
    double block, first, head;      /* estimated seconds a step: one block, the
                                     * embeddings (pp 2: in the blocks'), the head */
    int counts[TR_GPT_MAX_STAGES];  /* the split those times would even */
    double busiest, predicted;      /* the busiest stage's seconds: measured, and with counts */
    int better; /* counts differ from now and would shorten the busiest stage by 5 % or more */
} tr_stage_balance;

/* out from the stages' busy seconds a step (busy[0..pp-1]) under c's split; 0, or -1
 * where they say nothing (one stage, a stage that measured no time). */
int tr_stage_balance_of(const tr_gpt_config *c, int pp, const double *busy, tr_stage_balance *out);
/* The "stage balance:" line, e.g. "stage balance: busy 3.1, 9.8 ms a step by stage (a
 * block 1.0 ms, the head 8.8); parallel.stage_blocks=4,0 would make the busiest about
 * 8.8 ms (now 9.8)"; from 3 stages, the embeddings' time too. */
void tr_stage_balance_print(FILE *f, const tr_stage_balance *b);

#endif
