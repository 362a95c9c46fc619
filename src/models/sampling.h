/* sampling.h: the next token from a row of logits: greedy, or drawn from the top-k
 * and top-p (nucleus) candidates at a temperature, with the counter-based RNG, so a
 * sample is the same whatever the layout that computed the logits. */
#ifndef TR_SAMPLING_H
#define TR_SAMPLING_H

#include <stdint.h>

typedef struct tr_sampling {
    int top_k;         /* candidates: the k most likely (<= 1: greedy) */
    float top_p;       /* of those, the fewest whose probability reaches p (1: all) */
    float temperature; /* logits divided by it */
    uint64_t seed;     /* with the draw's number, the RNG's counter */
    int vocab;         /* > 0: draw among ids [0, vocab) only, the tokenizer's (a model's larger
                        * vocab_size has ids no text decodes); 0: all V */
} tr_sampling;

/* The [sample] keys top_k, top_p and temperature, and the run's seed. */
struct tr_deck;
tr_sampling tr_sampling_from_deck(const struct tr_deck *d);

/* Picks the next token from lg[0..V): the largest logit (the lowest index among equal
 * ones) when greedy; else the top_k largest (ties by index), cut to the fewest whose
 * softmax at the temperature sums to top_p of theirs, one drawn in proportion
 * (draw numbers the draws of one seed). */
int tr_pick_token(const float *lg, int V, const tr_sampling *s, uint64_t draw);

/* "greedy", or "top-k 40, top-p 0.9, temperature 0.8" (top-p left out at 1). */
void tr_sampling_describe(const tr_sampling *s, char *buf, int len);

#endif
