/* train_pipeline.c: the language model's passes through the pipeline stages: a
 * training step's micro-batches in the schedule's order, an evaluation forward, and
 * generation. pp = 1 is the same code with no messages.
 *
 * Messages: activations go to the next stage with non-blocking sends (a slot's
 * output stays untouched until that slot comes round again, by which time the next
 * stage has long received it: it has sent that micro-batch's gradient back), and
 * gradients go back with blocking sends. Every receive is blocking. Because no
 * rank ever blocks in a send of an activation, and the schedules run each direction
 * in the same micro-batch order on every stage, every receive is eventually matched:
 * no (pp, micro_batches) deadlocks. On GPUs the same holds for NCCL, whose sends
 * and receives wait on the GPU instead of the host: each direction between two
 * stages is a stream of its own there (comm.h: links). */
#include "backend/lowp_math.h" /* tr_stored_bytes */
#include "core/error.h"
#include "core/watchdog.h"
#include "models/gpt.h"
#include "run.h"

#include <stdlib.h>
#include <string.h>

enum { TAG_ACTIVATION = 1, TAG_GRADIENT = 2 };

/* the residual stream's values for B x T tokens on this rank (its share of the rows in
 * sequence parallelism), and their type in a message: the activations are stored in
 * the precision's width (gpt.h), their gradients are fp32 */
static size_t stream_floats(const run *r, int B, int T)
{
    return tr_gpt_stage_rows(&r->model, B, T) * (size_t)tr_gpt_config_of(&r->model)->C;
}

static tr_dtype stream_type(const run *r)
{
    return tr_stored_bytes(r->model.precision) == 2 ? TR_U16 : TR_F32;
}

void tr_pipeline_step(run *r, long step, const int32_t *x, const int32_t *y, float scale,
                      double *loss_sum, long *correct)
{
    tr_model *m = &r->model;
    const tr_world *w = r->w;
    int first = w->pp_rank == 0, last = w->pp_rank == w->pp - 1;
    int B = (int)r->micro_batch, T = m->targets_per_sample;
    size_t n = stream_floats(r, B, T);
    tr_dtype st = stream_type(r);
    *loss_sum = 0;
    if (correct)
        *correct = 0;
    for (int i = 0; i < r->nops; i++) {
        tr_pipe_op op = r->ops[i];
        int s = op.micro % r->slots;
        const int32_t *xk = x + (size_t)op.micro * B * T, *yk = y + (size_t)op.micro * B * T;
        double t0 = tr_wtime();
        if (!op.backward) {
            tr_wait(&r->fwd_req[s]); /* the slot's previous output has left */
            if (!first)
                tr_recv(tr_gpt_stage_input(m, s), n, st, w->pp_rank - 1, TAG_ACTIVATION,
                        w->pp_group);
            r->t_pipe_wait += tr_wtime() - t0;
            /* dropout's masks: these rows' place in the step's global batch */
            tr_gpt_stage_train(m, s, step, (long)w->dp_rank * r->local_batch + (long)op.micro * B);
            tr_gpt_stage_forward(m, s, xk, B, T);
            if (last) {
                long ok = 0;
                *loss_sum += tr_gpt_stage_loss(m, s, yk, B, correct ? &ok : NULL);
                if (correct)
                    *correct += ok;
            } else {
                tr_isend(tr_gpt_stage_output(m, s), n, st, w->pp_rank + 1, TAG_ACTIVATION,
                         w->pp_group, &r->fwd_req[s]);
            }
            continue;
        }
        /* the step's last backward overlaps the data-parallel reduction */
        int final = i == r->nops - 1;
        if (final)
            tr_dp_begin(&r->dp);
        if (!last)
            tr_recv(tr_gpt_stage_grad(m), n, TR_F32, w->pp_rank + 1, TAG_GRADIENT, w->pp_group);
        r->t_pipe_wait += tr_wtime() - t0;
        tr_gpt_stage_backward(m, s, xk, yk, B, scale, final ? tr_dp_grads_ready : NULL, &r->dp);
        if (!first) {
            t0 = tr_wtime();
            tr_send(tr_gpt_stage_grad(m), n, TR_F32, w->pp_rank - 1, TAG_GRADIENT, w->pp_group);
            r->t_pipe_wait += tr_wtime() - t0;
        }
    }
    double t0 = tr_wtime();
    for (int s = 0; s < r->slots; s++)
        tr_wait(&r->fwd_req[s]);
    r->t_pipe_wait += tr_wtime() - t0;
}

double tr_pipeline_forward(run *r, const int32_t *x, const int32_t *y, int B, long *correct)
{
    tr_model *m = &r->model;
    const tr_world *w = r->w;
    int T = m->targets_per_sample;
    size_t n = stream_floats(r, B, T);
    tr_dtype st = stream_type(r);
    if (correct)
        *correct = 0;
    if (w->pp_rank > 0)
        tr_recv(tr_gpt_stage_input(m, 0), n, st, w->pp_rank - 1, TAG_ACTIVATION,
                w->pp_group);
    tr_gpt_stage_forward(m, 0, x, B, T);
    if (w->pp_rank < w->pp - 1) {
        tr_send(tr_gpt_stage_output(m, 0), n, st, w->pp_rank + 1, TAG_ACTIVATION,
                w->pp_group);
        return 0;
    }
    return tr_gpt_stage_loss(m, 0, y, B, correct);
}

void tr_pipeline_generate(run *r, int32_t *tok, int n_prompt, int n_total,
                          const tr_sampling *s)
{
    tr_model *m = &r->model;
    const tr_world *w = r->w;
    const tr_gpt_config *c = tr_gpt_config_of(m);
    int first = w->pp_rank == 0, last = w->pp_rank == w->pp - 1;
    float *full = last ? tr_alloc((size_t)c->Vp * sizeof *full, "sample logits") : NULL;
    size_t *counts = tr_alloc(2 * (size_t)w->tp * sizeof *counts, "sample gather");
    tr_dtype st = stream_type(r);
    /* every tp rank runs every row of the one sequence (a decoded token is one row) */
    int sp = tr_gpt_sequence_parallel(m, 0);
    int cached = 0; /* tokens [0, cached) are in the stages' keys and values */
    for (int n = n_prompt; n < n_total; n++) {
        tr_watchdog_beat("a sampled token", -1);
        int ctx = n < c->T ? n : c->T, row = ctx - 1; /* the newest seq_len tokens */
        /* the same answer on every stage: one row of activations between them, or all */
        int decode = tr_gpt_sample_pass(m, n, &cached) == TR_SAMPLE_DECODE;
        size_t nf = stream_floats(r, 1, decode ? 1 : ctx);
        void *in = tr_gpt_stage_input(m, 0), *out = last ? NULL : tr_gpt_stage_output(m, 0);
        if (decode) {
            in = tr_gpt_stage_row(m, in, row);
            out = out ? tr_gpt_stage_row(m, out, row) : NULL;
        }
        if (!first)
            tr_recv(in, nf, st, w->pp_rank - 1, TAG_ACTIVATION, w->pp_group);
        if (decode)
            tr_gpt_stage_decode(m, tok + row, row);
        else
            tr_gpt_stage_forward(m, 0, tok + n - ctx, 1, ctx);
        int32_t next = 0;
        if (!last) {
            tr_send(out, nf, st, w->pp_rank + 1, TAG_ACTIVATION, w->pp_group);
        } else { /* the full row of logits from the vocabulary shards */
            int v0, Vl;
            tr_gpt_stage_logits(m, row, full, &v0, &Vl);
            for (int q = 0; q < w->tp; q++)
                counts[q] = (size_t)Vl, counts[w->tp + q] = (size_t)q * Vl;
            if (w->tp > 1)
                tr_allgatherv(full, counts, counts + w->tp, TR_F32, w->tp_group);
            next = tr_pick_token(full, c->V, s, (uint64_t)n);
        }
        tr_bcast(&next, 1, TR_I32, w->pp - 1, w->pp_group);
        tok[n] = next;
    }
    tr_gpt_sequence_parallel(m, sp);
    tr_free(counts);
    tr_free(full);
}
