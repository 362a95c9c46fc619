/* sampling.c: top-k / top-p token sampling (sampling.h). */
#include "sampling.h"

#include "core/deck.h"
#include "core/error.h"
#include "core/rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* Candidate a ranks before b: the larger logit, then the lower index. */
static int before(const float *lg, int a, int b)
{
    return lg[a] > lg[b] || (lg[a] == lg[b] && a < b);
}

/* The heap below keeps the k best candidates with the worst at its root. */
static void sift_down(const float *lg, int *h, int n, int i)
{
    for (;;) {
        int l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && before(lg, h[w], h[l]))
            w = l;
        if (r < n && before(lg, h[w], h[r]))
            w = r;
        if (w == i)
            return;
        int t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

/* top[0..k) := the k best indices of lg[0..V), best first: O(V log k). */
static void top_k(const float *lg, int V, int k, int *top)
{
    for (int i = 0; i < k; i++)
        top[i] = i;
    for (int i = k / 2 - 1; i >= 0; i--)
        sift_down(lg, top, k, i);
    for (int j = k; j < V; j++)
        if (before(lg, j, top[0])) { /* better than the worst kept */
            top[0] = j;
            sift_down(lg, top, k, 0);
        }
    for (int n = k - 1; n > 0; n--) { /* heap sort: the worst to the end */
        int t = top[0];
        top[0] = top[n];
        top[n] = t;
        sift_down(lg, top, n, 0);
    }
}

int tr_pick_token(const float *lg, int V, const tr_sampling *s, uint64_t draw)
{
    if (s->vocab > 0 && s->vocab < V)
        V = s->vocab;
    int k = s->top_k < V ? s->top_k : V;
    if (k <= 1) {
        int best = 0;
        for (int j = 1; j < V; j++)
            if (lg[j] > lg[best])
                best = j;
        return best;
    }
    int *top = malloc((size_t)k * sizeof *top);
    double *w = malloc((size_t)k * sizeof *w);
    if (!top || !w)
        tr_fatal(TR_EXIT_OSERR, "out of memory sampling among %d tokens", k);
    top_k(lg, V, k, top);
    double sum = 0;
    for (int i = 0; i < k; i++)
        sum += w[i] = exp(((double)lg[top[i]] - lg[top[0]]) / s->temperature);
    if (s->top_p < 1.0f) { /* the nucleus: the fewest best whose share reaches top_p */
        double need = (double)s->top_p * sum, kept = 0;
        int n = 0;
        while (n < k && (n == 0 || kept < need))
            kept += w[n++];
        k = n;
        sum = kept;
    }
    double u = tr_rng_uniform(s->seed, TR_STREAM_SAMPLE, draw) * sum;
    int pick = top[k - 1];
    for (int i = 0; i < k; i++) {
        u -= w[i];
        if (u < 0) {
            pick = top[i];
            break;
        }
    }
    free(top);
    free(w);
    return pick;
}

tr_sampling tr_sampling_from_deck(const struct tr_deck *d)
{
    tr_sampling s = {(int)tr_deck_int(d, "sample", "top_k"),
                     (float)tr_deck_float(d, "sample", "top_p"),
                     (float)tr_deck_float(d, "sample", "temperature"),
                     (uint64_t)tr_deck_int(d, "train", "seed"), 0};
    return s;
}

void tr_sampling_describe(const tr_sampling *s, char *buf, int len)
{
    if (s->top_k <= 1)
        snprintf(buf, (size_t)len, "greedy");
    else if (s->top_p < 1.0f)
        snprintf(buf, (size_t)len, "top-k %d, top-p %g, temperature %g", s->top_k, s->top_p,
                 s->temperature);
    else
        snprintf(buf, (size_t)len, "top-k %d, temperature %g", s->top_k, s->temperature);
}
