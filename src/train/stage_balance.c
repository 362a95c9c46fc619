/* stage_balance.c: a split of the blocks by the stages' measured times (stage_balance.h). */
#include "stage_balance.h"

#include <string.h>

/* the busiest stage of a split, by the estimated times */
static double busiest_of(const tr_stage_balance *b, const int *counts)
{
    double most = 0;
    for (int s = 0; s < b->pp; s++) {
        double t = counts[s] * b->block + (s == 0 ? b->first : 0) + (s == b->pp - 1 ? b->head : 0);
        most = t > most ? t : most;
    }
    return most;
}

int tr_stage_balance_of(const tr_gpt_config *c, int pp, const double *busy, tr_stage_balance *out)
{
    memset(out, 0, sizeof *out);
    if (pp < 2 || pp > c->L + 1)
        return -1;
    int blocks = 0; /* of the middle stages (pp 2: stage 0): each holds one at least */
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
        if (s < pp - 1 && (s > 0 || pp == 2))
            blocks += out->now[s], seconds += busy[s];
    }
    out->pp = pp;
    out->block = seconds / blocks;
    /* the ends' extras: what their stages took beyond their blocks (never below 0) */
    double first = pp > 2 ? busy[0] - out->now[0] * out->block : 0;
    double head = busy[pp - 1] - out->now[pp - 1] * out->block;
    out->first = first > 0 ? first : 0;
    out->head = head > 0 ? head : 0;
    tr_gpt_split_by(c->L, pp, out->block, out->first, out->head, out->counts);
    out->predicted = busiest_of(out, out->counts);
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
    fprintf(f, " ms a step by stage (a block %.2f ms", 1e3 * b->block);
    if (b->pp > 2)
        fprintf(f, ", the embeddings %.2f", 1e3 * b->first);
    fprintf(f, ", the head %.2f); ", 1e3 * b->head);
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
