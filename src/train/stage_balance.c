/* stage_balance.c: a split of the blocks by the stages' measured times (stage_balance.h). */
#include "stage_balance.h"

#include <string.h>

/* the busiest stage of a split, by the estimated times */
static double busiest_of(const int *counts, int pp, double block, double head)
{
    double most = 0;
    for (int s = 0; s < pp; s++) {
        double t = counts[s] * block + (s == pp - 1 ? head : 0);
        most = t > most ? t : most;
    }
    return most;
}

int tr_stage_balance_of(const tr_gpt_config *c, int pp, const double *busy, tr_stage_balance *out)
{
    memset(out, 0, sizeof *out);
    if (pp < 2 || pp > c->L + 1)
        return -1;
    out->pp = pp;
    int blocks = 0; /* of the stages before the last: each holds one at least */
    double seconds = 0;
    for (int s = 0; s < pp; s++) {
        if (!(busy[s] > 0)) {
            memset(out, 0, sizeof *out); /* pp 0: nothing to print */
            return -1;
        }
        out->busy[s] = busy[s];
        out->busiest = busy[s] > out->busiest ? busy[s] : out->busiest;
        int first;
        tr_gpt_stage_blocks(c, pp, s, &first, &out->now[s]);
        if (s < pp - 1)
            blocks += out->now[s], seconds += busy[s];
    }
    /* the embedding's lookup rides on stage 0's blocks, as the cost model has it */
    out->block = seconds / blocks;
    double head = busy[pp - 1] - out->now[pp - 1] * out->block;
    out->head = head > 0 ? head : 0;
    tr_gpt_split_by(c->L, pp, out->block, out->head, out->counts);
    out->predicted = busiest_of(out->counts, pp, out->block, out->head);
    out->better = memcmp(out->counts, out->now, (size_t)pp * sizeof *out->now) != 0 &&
                  out->predicted <= 0.95 * out->busiest;
    return 0;
}

void tr_stage_balance_print(FILE *f, const tr_stage_balance *b)
{
    if (b->pp < 2)
        return;
    char counts[TR_GPT_MAX_STAGES * 4];
    tr_gpt_blocks_list(b->counts, b->pp, counts, sizeof counts);
    fprintf(f, "stage balance: busy");
    for (int s = 0; s < b->pp; s++)
        fprintf(f, "%s %.2f", s ? "," : "", 1e3 * b->busy[s]);
    fprintf(f, " ms a step by stage (a block %.2f ms, the head %.2f); ", 1e3 * b->block,
            1e3 * b->head);
    if (b->better)
        fprintf(f, "parallel.stage_blocks=%s would make the busiest about %.2f ms (now %.2f)\n",
                counts, 1e3 * b->predicted, 1e3 * b->busiest);
    else if (!memcmp(b->counts, b->now, (size_t)b->pp * sizeof *b->now))
        fprintf(f, "these times choose this split\n");
    else
        fprintf(f,
                "no split of whole blocks shortens the busiest stage by 5 %% or more by these "
                "times (parallel.stage_blocks=%s: about %.2f ms, now %.2f)\n",
                counts, 1e3 * b->predicted, 1e3 * b->busiest);
}
