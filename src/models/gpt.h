/* gpt.h: the GPT-2 style transformer (model name "gpt"), see gpt.c. */
#ifndef TR_GPT_H
#define TR_GPT_H

#include "model.h"

#include <stdint.h>

typedef struct tr_gpt_config {
    int L, NH, C, T; /* blocks, heads, width, context length */
    int V;           /* vocabulary */
    int vocab_pad;   /* rows padded to a multiple of this */
    int Vp;          /* padded vocabulary, set by tr_gpt_build */
} tr_gpt_config;

/* Checks what the deck's ranges cannot (heads dividing the width). */
int tr_gpt_check_config(const tr_gpt_config *c, char *err, size_t errlen);
/* Adds the GPT's layers and hooks to a model that tr_model_build has cleared; the
 * deck path goes through tr_model_build("gpt"), tests may call this directly. */
int tr_gpt_build(tr_model *m, const tr_gpt_config *cfg, char *err, size_t errlen);
/* The configuration of a GPT model, NULL for any other model. */
const tr_gpt_config *tr_gpt_config_of(const tr_model *m);

/* Continues tokens[0..n_prompt) (n_prompt >= 1) up to n_total tokens in place,
 * each from the newest seq_len tokens: greedy for top_k = 1, else top-k sampling
 * at the temperature, seeded. Rank-local: uses only this rank's model. Returns
 * n_total. */
int tr_gpt_generate(tr_model *m, int32_t *tokens, int n_prompt, int n_total, int top_k,
                    float temperature, uint64_t seed);

#endif
