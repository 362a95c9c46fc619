/* gpt.h: the GPT-2 style transformer (model name "gpt"), see gpt.c; its layout checks
 * and the pipeline's split of its blocks: gpt_stage_split.c. */
#ifndef TR_GPT_H
#define TR_GPT_H

#include "sampling.h"

#include "model.h"

#include <stdint.h>

/* [model] n_layer's most: 128 covers the published models deepest in blocks (GPT-3
 * 175B's 96, Megatron's 1T configuration's 128) */
#define TR_GPT_MAX_LAYERS 128
/* every stage but the last holds a block: pp <= n_layer + 1; a deck's stage_blocks is
 * read up to this many, so a longer one's count is still told right */
#define TR_GPT_MAX_STAGES (TR_GPT_MAX_LAYERS + 8)

typedef struct tr_gpt_config {
    int L, NH, C, T; /* blocks, heads, width, context length */
    int V;           /* vocabulary */
    int vocab_pad;   /* rows padded to a multiple of this */
    int Vp;          /* padded vocabulary (a multiple of vocab_pad x tp), set by tr_gpt_build */
    /* dropout probabilities, Hugging Face's names: the embeddings' sum, attention's
     * probabilities, each projection's output before the residual add (0: none); the
     * masks are drawn from seed (dropout_math.h) in training passes only */
    float embd_pdrop, attn_pdrop, resid_pdrop;
    uint64_t seed;
    tr_model_layout layout; /* this rank's share; zero: the whole model */
    /* the blocks of each pipeline stage, first to last, where the deck sets them
     * ([parallel] stage_blocks); nstage_blocks 0: split by cost */
    int nstage_blocks;
    int stage_blocks[TR_GPT_MAX_STAGES];
} tr_gpt_config;

/* Checks what the deck's ranges cannot (heads dividing the width). */
int tr_gpt_check_config(const tr_gpt_config *c, char *err, size_t errlen);
/* Adds the GPT's layers and hooks to a model that tr_model_build has cleared; the
 * deck path goes through tr_model_build("gpt"), tests may call this directly. */
int tr_gpt_build(tr_model *m, const tr_gpt_config *cfg, char *err, size_t errlen);
/* The configuration of a GPT model, NULL for any other model. */
const tr_gpt_config *tr_gpt_config_of(const tr_model *m);

/* The blocks of stage `stage` of pp: [*first, *first + *count), contiguous. Those the
 * config names (stage_blocks, for pp stages), else balanced by cost (a block's FLOPs;
 * the first stage also pays the embedding, the last the head's logits); at least one
 * each but on the last stage, which may hold the head alone. Every rank computes the
 * same split. */
void tr_gpt_stage_blocks(const tr_gpt_config *c, int pp, int stage, int *first, int *count);
/* The contiguous split of L blocks over pp stages whose busiest stage costs least, a
 * block costing `block`, the embeddings on the first stage `first` and the head on the
 * last `head` (in any unit: the cost model's FLOPs above, which leave the embeddings'
 * lookup out, or measured seconds): counts[s] blocks on stage s, at least one but on
 * the last, which holds the head alone only where strictly lighter. */
void tr_gpt_split_by(int L, int pp, double block, double first, double head, int *counts);
/* The same over any cost of a stage holding `blocks` blocks (INFINITY: that stage may
 * not hold so many): the least busiest cost, with its split in counts, or INFINITY
 * where every split has a stage that may not be (counts untouched). */
typedef double (*tr_stage_cost_fn)(void *ctx, int stage, int blocks);
double tr_gpt_split_min_max(int L, int pp, tr_stage_cost_fn cost, void *ctx, int *counts);
/* That split in words for the banner and the plan: "blocks 3-5" or "no blocks". */
const char *tr_gpt_stage_blocks_text(const tr_gpt_config *c, int pp, int stage, char *buf,
                                     size_t len);
/* "5,4,3": n block counts as [parallel] stage_blocks writes them */
const char *tr_gpt_blocks_list(const int *v, int n, char *buf, size_t len);
/* The costs the split by cost weighs: a block's and the head's model FLOPs a token. */
void tr_gpt_costs(const tr_gpt_config *c, double *block, double *head);
/* The cost that split balances, of stage `stage`: model FLOPs per token of a step. */
double tr_gpt_stage_cost(const tr_gpt_config *c, int pp, int stage);

/* ---- pipeline stages ------------------------------------------------------------
 * Every layout runs the model as stages (pp = 1: one stage, the whole model). A
 * stage keeps the activations of layout.slots micro-batches, slot s holding one
 * micro-batch of up to the allocated batch. Forward of slot s: the first stage reads
 * tokens, the others the activation received into tr_gpt_stage_input(m, s); a stage
 * that is not the last leaves its output in tr_gpt_stage_output(m, s). The last
 * stage computes the loss with tr_gpt_stage_loss. Backward of slot s: the last stage
 * starts from the loss, the others from the gradient received into
 * tr_gpt_stage_grad(m); afterwards a stage that is not the first leaves the gradient
 * of its input in tr_gpt_stage_grad(m). T <= seq_len (generation uses shorter). */
void tr_gpt_stage_forward(tr_model *m, int slot, const int32_t *tok, int B, int T);
/* Makes slot's next forward, and the backward of that slot after it, a training pass
 * of step `step` whose rows are rows row0.. of the step's global batch (over every
 * data-parallel rank and micro-batch): the config's dropout applies, its masks drawn
 * for those global rows, so they are the same at any layout. A forward not so marked
 * (evaluation, generation) has no dropout. */
void tr_gpt_stage_train(tr_model *m, int slot, long step, long row0);
double tr_gpt_stage_loss(tr_model *m, int slot, const int32_t *y, int B, long *correct);
/* `ready` is given on the step's last backward only (the data-parallel buckets start
 * from it); in sequence parallelism that backward also sums the layernorms' gradients
 * over the tp ranks (each rank's rows' share until then). */
void tr_gpt_stage_backward(tr_model *m, int slot, const int32_t *tok, const int32_t *y, int B,
                           float loss_scale, tr_grads_ready_fn ready, void *ctx);
/* the residual stream [B,T,C], stored in the model's precision (lowp_math.h: 16 bits a
 * value in bf16/fp16-mixed: tr_stored_bytes(m->precision) each); its gradient fp32. In
 * sequence parallelism a rank holds tr_gpt_stage_rows of its B x T rows: those of its
 * tp rank's share, which the same tp rank of the next stage holds too. */
void *tr_gpt_stage_input(tr_model *m, int slot);
void *tr_gpt_stage_output(tr_model *m, int slot);
float *tr_gpt_stage_grad(tr_model *m); /* [B,T,C] */
size_t tr_gpt_stage_rows(const tr_model *m, int B, int T);
/* Sequence parallelism (layout.sequence_parallel at tp > 1) on or off for the passes
 * that follow; returns whether it was on. Generation turns it off (a decoded token is
 * one row); a model without it stays without. */
int tr_gpt_sequence_parallel(tr_model *m, int on);
/* Last stage: the logits of row `row` of slot 0 after a forward, this rank's
 * vocabulary shard [v0, v0 + Vl) (*v0, *Vl set), copied to full[v0, v0 + Vl) in host
 * memory. */
void tr_gpt_stage_logits(tr_model *m, int row, float *full, int *v0, int *Vl);
/* The flat range of the tied token embedding on this stage ([0, 0) if none): its
 * gradient is summed between the first and the last stage. */
void tr_gpt_tied_range(const tr_model *m, size_t *lo, size_t *hi);

/* Sampling with a key-value cache: after a forward of slot 0 over tokens 0..pos-1 of
 * one sequence (B = 1, or a decode of each), runs token tok[0] at position pos
 * (< seq_len) through the stage alone, its attention reading the keys and values that
 * slot 0's activations hold for the earlier positions. Row pos of every activation
 * (the stage's input and output streams, tr_gpt_stage_row; the logits row,
 * tr_gpt_stage_logits) is then what a forward over 0..pos would have made, up to
 * the order of the sums in the products of one row (on the CPU, attention gives the
 * forward's bits; fp32 logits differ by some 1e-6 relative). Not with
 * train.recompute = block, which keeps no block's keys and values (tr_gpt_can_decode). */
int tr_gpt_can_decode(const tr_model *m);
void tr_gpt_stage_decode(tr_model *m, const int32_t *tok, int pos);
/* Row `row` of a stream buffer (tr_gpt_stage_input, _output): [B,T,C] stored in the
 * model's format */
void *tr_gpt_stage_row(tr_model *m, void *stream, int row);
/* How sampling computes the logits of token n - 1 (to pick token n): a decode of
 * that token at position n - 1 when the tokens before it are cached (*cached, the
 * count, is n - 1) and the window has not slid (n <= seq_len), else a forward of the
 * whole window, after which its positions are cached while it starts at token 0.
 * Every rank of a pipeline asks with the same n and gets the same answer. */
enum { TR_SAMPLE_FORWARD, TR_SAMPLE_DECODE };
int tr_gpt_sample_pass(const tr_model *m, int n, int *cached);

/* Continues tokens[0..n_prompt) (n_prompt >= 1) up to n_total tokens in place,
 * each from the newest seq_len tokens, picked as s says (sampling.h; token n is draw
 * n). Rank-local: uses only this rank's model. Returns n_total. */
int tr_gpt_generate(tr_model *m, int32_t *tokens, int n_prompt, int n_total,
                    const tr_sampling *s);

#endif
