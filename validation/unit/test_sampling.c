/* test_sampling.c: the next token from a row of logits (models/sampling.h).
 *  - greedy: the largest logit, the lowest index among equal ones;
 *  - top-k: the same picks, draw for draw, as the repeated-scan selection the trainer
 *    used before (written out below), on random rows with many ties, so samples of
 *    earlier runs stay what they were; never a token outside the k best (ties at the
 *    k-th place go to the lower index); k past the vocabulary means all of it;
 *  - top-p: with probabilities 0.5, 0.3, 0.15, 0.05, p = 0.75 keeps the first two, in
 *    proportion 5:3; p = 0.5 and tiny p keep the first; p = 1 keeps all four, each at
 *    its frequency (20000 draws, within 0.015);
 *  - the same seed and draw give the same token; the description of the settings. */
#include "core/rng.h"
#include "models/sampling.h"
#include "test_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The selection of the k best by repeated scans, and the draw, as before. */
static int old_pick(const float *lg, int V, int top_k, float temperature, uint64_t seed,
                    uint64_t draw)
{
    if (top_k > V)
        top_k = V;
    int top[64];
    double w[64];
    for (int i = 0; i < top_k; i++) {
        int best = -1;
        for (int j = 0; j < V; j++) {
            int taken = 0;
            for (int q = 0; q < i && !taken; q++)
                taken = top[q] == j;
            if (!taken && (best < 0 || lg[j] > lg[best]))
                best = j;
        }
        top[i] = best;
    }
    double sum = 0;
    for (int i = 0; i < top_k; i++)
        sum += w[i] = exp(((double)lg[top[i]] - lg[top[0]]) / temperature);
    double u = tr_rng_uniform(seed, TR_STREAM_SAMPLE, draw) * sum;
    int pick = top[top_k - 1];
    for (int i = 0; i < top_k; i++) {
        u -= w[i];
        if (u < 0) {
            pick = top[i];
            break;
        }
    }
    return pick;
}

int main(void)
{
    enum { V = 300 };
    float lg[V];
    uint64_t r = 12345;
    int same = 1, inside = 1;
    for (int row = 0; row < 200; row++) {
        for (int j = 0; j < V; j++) { /* coarse values: many ties */
            r = r * 6364136223846793005ULL + 1442695040888963407ULL;
            lg[j] = (float)((r >> 33) % 23) * 0.25f - 2.0f;
        }
        int k = 1 + row % 40;
        tr_sampling s = {k, 1.0f, 0.7f + 0.01f * (float)(row % 9), (uint64_t)row, 0};
        for (uint64_t d = 0; d < 20; d++) {
            int got = tr_pick_token(lg, V, &s, d);
            same &= got == (k > 1 ? old_pick(lg, V, k, s.temperature, s.seed, d) : got);
            int better = 0; /* tokens that rank before the pick: fewer than k */
            for (int j = 0; j < V; j++)
                better += lg[j] > lg[got] || (lg[j] == lg[got] && j < got);
            inside &= better < k;
        }
    }
    CHECK(same, "top-k picks the same tokens as the repeated-scan selection");
    CHECK(inside, "top-k never picks outside the k best (ties by index)");

    float tie[6] = {1, 3, 3, 0, 3, 2};
    tr_sampling greedy = {1, 1.0f, 1.0f, 7, 0};
    CHECK(tr_pick_token(tie, 6, &greedy, 0) == 1, "greedy: the lowest index of the largest");
    tr_sampling two = {2, 1.0f, 1.0f, 7, 0};
    int seen[6] = {0};
    for (uint64_t d = 0; d < 400; d++)
        seen[tr_pick_token(tie, 6, &two, d)]++;
    CHECK(seen[1] > 100 && seen[2] > 100 && seen[1] + seen[2] == 400,
          "top-2 of a three-way tie: indices 1 and 2 only (%d, %d, %d)", seen[1], seen[2],
          seen[4]);

    /* a model vocabulary larger than the tokenizer's: its ids past the tokenizer's are
     * never drawn, however likely (greedy and sampled) */
    float wide[6] = {0, 1, 2, 3, 9, 8};
    tr_sampling narrow = {1, 1.0f, 1.0f, 7, .vocab = 4};
    CHECK(tr_pick_token(wide, 6, &narrow, 0) == 3, "greedy within the tokenizer's 4 ids");
    narrow.top_k = 6;
    int past = 0;
    for (uint64_t d = 0; d < 400; d++)
        past += tr_pick_token(wide, 6, &narrow, d) >= 4;
    CHECK(past == 0, "top-k 6 within the tokenizer's 4 ids: %d of 400 draws past them", past);

    const double p[4] = {0.5, 0.3, 0.15, 0.05};
    float pl[4];
    for (int i = 0; i < 4; i++)
        pl[i] = (float)log(p[i]);
    const struct {
        float top_p;
        double want[4];
    } cases[] = {{1.0f, {0.5, 0.3, 0.15, 0.05}},
                 {0.75f, {0.625, 0.375, 0, 0}},
                 {0.5f, {1, 0, 0, 0}},
                 {1e-6f, {1, 0, 0, 0}}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        tr_sampling s = {50, cases[c].top_p, 1.0f, 3, 0}; /* k past V: all four */
        int count[4] = {0};
        for (uint64_t d = 0; d < 20000; d++)
            count[tr_pick_token(pl, 4, &s, d)]++;
        double worst = 0;
        for (int i = 0; i < 4; i++) {
            double e = fabs(count[i] / 20000.0 - cases[c].want[i]);
            worst = e > worst ? e : worst;
            if (cases[c].want[i] == 0)
                worst = count[i] ? 1 : worst; /* outside the nucleus: never */
        }
        CHECK(worst < 0.015, "top-p %g: frequencies %d %d %d %d of 20000", cases[c].top_p,
              count[0], count[1], count[2], count[3]);
    }

    tr_sampling s = {40, 0.9f, 0.8f, 11, 0};
    CHECK(tr_pick_token(lg, V, &s, 5) == tr_pick_token(lg, V, &s, 5), "same draw, same token");
    char buf[96];
    tr_sampling_describe(&s, buf, sizeof buf);
    CHECK(!strcmp(buf, "top-k 40, top-p 0.9, temperature 0.8"), "describe: '%s'", buf);
    s.top_p = 1.0f;
    tr_sampling_describe(&s, buf, sizeof buf);
    CHECK(!strcmp(buf, "top-k 40, temperature 0.8"), "describe: '%s'", buf);
    tr_sampling_describe(&greedy, buf, sizeof buf);
    CHECK(!strcmp(buf, "greedy"), "describe: '%s'", buf);
    return tr_test_finish();
}
