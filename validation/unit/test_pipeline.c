/* test_pipeline.c: the pipeline schedules (src/parallel/pipeline.c) for every pp up
 * to 8 and micro-batch count up to 16:
 *  - each micro-batch's forward and backward run once on every stage, forward
 *    first, each direction in ascending order (so neighbours' messages match up);
 *  - 1F1B keeps at most pp - stage micro-batches alive, GPipe all of them, and a
 *    slot is never reused before its micro-batch's backward;
 *  - no deadlock: the message protocol of src/train/train_pipeline.c is simulated
 *    with its worst-case blocking (activations sent without blocking but their slot
 *    waits until the next stage has received them, gradients sent with rendezvous:
 *    the send completes only when the previous stage sits in the matching receive),
 *    and every stage must reach the end of its schedule. */
#include "test_util.h"

#include "parallel/pipeline.h"

#include <string.h>

#define MAXPP 8
#define MAXM 16

/* where a stage is within one op: */
enum { WAIT_SLOT, RECV, SEND, DONE_OP };

typedef struct stage {
    tr_pipe_op ops[2 * MAXM];
    int nops, pc, phase, slots;
    int acts_received[MAXM]; /* by this stage, from the previous one */
} stage;

/* mutate: the last stage runs its backwards in descending order (a broken schedule
 * the simulation must catch) */
static int simulate(tr_pipe_schedule kind, int pp, int M, int mutate)
{
    stage st[MAXPP];
    int sent_act[MAXPP][MAXM]; /* stage s has posted the activation of micro i */
    memset(st, 0, sizeof st);
    memset(sent_act, 0, sizeof sent_act);
    for (int s = 0; s < pp; s++) {
        st[s].nops = tr_pipeline_ops(kind, pp, s, M, st[s].ops);
        st[s].slots = tr_pipeline_slots(kind, pp, s, M);
    }
    if (mutate) {
        stage *x = &st[pp - 1];
        for (int k = 0; k < x->nops; k++)
            if (x->ops[k].backward)
                x->ops[k].micro = M - 1 - x->ops[k].micro;
        x->slots = M; /* no slot reuse: only the order is wrong */
    }
    for (int round = 0; round < 100000; round++) {
        int moved = 0, finished = 0;
        for (int s = 0; s < pp; s++) {
            stage *x = &st[s];
            if (x->pc == x->nops) {
                finished++;
                continue;
            }
            tr_pipe_op op = x->ops[x->pc];
            int i = op.micro;
            if (!op.backward) {
                if (x->phase == WAIT_SLOT) { /* the slot's previous activation has left */
                    int prev = i - x->slots;
                    if (s == pp - 1 || prev < 0 || st[s + 1].acts_received[prev])
                        x->phase = RECV, moved = 1;
                } else if (x->phase == RECV) {
                    if (s == 0 || sent_act[s - 1][i]) {
                        if (s > 0)
                            x->acts_received[i] = 1;
                        x->phase = SEND, moved = 1;
                    }
                } else { /* compute and post the activation */
                    if (s < pp - 1)
                        sent_act[s][i] = 1;
                    x->pc++, x->phase = WAIT_SLOT, moved = 1;
                }
            } else {
                if (x->phase == WAIT_SLOT) {
                    x->phase = RECV, moved = 1;
                } else if (x->phase == RECV) {
                    /* the gradient arrives by rendezvous, completed by the sender */
                    if (s == pp - 1)
                        x->phase = SEND, moved = 1;
                } else if (x->phase == SEND) {
                    stage *prev = s > 0 ? &st[s - 1] : NULL;
                    if (!prev) {
                        x->pc++, x->phase = WAIT_SLOT, moved = 1;
                    } else if (prev->pc < prev->nops && prev->ops[prev->pc].backward &&
                               prev->ops[prev->pc].micro == i && prev->phase == RECV) {
                        prev->phase = SEND; /* its receive completes with our send */
                        x->pc++, x->phase = WAIT_SLOT, moved = 1;
                    }
                }
            }
        }
        if (finished == pp)
            return 1;
        if (!moved)
            return 0;
    }
    return 0;
}

static void check_schedule(tr_pipe_schedule kind, int pp, int M)
{
    const char *name = kind == TR_SCHED_GPIPE ? "gpipe" : "1f1b";
    for (int s = 0; s < pp; s++) {
        tr_pipe_op ops[2 * MAXM];
        int n = tr_pipeline_ops(kind, pp, s, M, ops);
        int slots = tr_pipeline_slots(kind, pp, s, M);
        CHECK(n == 2 * M, "%s pp %d M %d stage %d: %d ops", name, pp, M, s, n);
        int nf = 0, nb = 0, alive = 0, peak = 0, ok = 1;
        int fdone[MAXM] = {0}, bdone[MAXM] = {0};
        for (int k = 0; k < n; k++) {
            int i = ops[k].micro;
            if (!ops[k].backward) {
                ok &= i == nf++;                                 /* ascending */
                ok &= i < slots || bdone[i - slots];             /* slot free again */
                fdone[i] = 1;
                alive++;
            } else {
                ok &= i == nb++ && fdone[i];
                bdone[i] = 1;
                alive--;
            }
            peak = alive > peak ? alive : peak;
        }
        CHECK(ok && nf == M && nb == M, "%s pp %d M %d stage %d: order", name, pp, M, s);
        CHECK(peak <= slots, "%s pp %d M %d stage %d: %d alive > %d slots", name, pp, M, s,
              peak, slots);
        if (kind == TR_SCHED_1F1B)
            CHECK(slots <= pp - s, "1f1b pp %d stage %d keeps %d > pp - stage", pp, s, slots);
    }
    CHECK(simulate(kind, pp, M, 0), "%s pp %d M %d: the message protocol deadlocks", name, pp,
          M);
}

int main(void)
{
    for (int pp = 1; pp <= MAXPP; pp++)
        for (int M = 1; M <= MAXM; M++) {
            check_schedule(TR_SCHED_GPIPE, pp, M);
            check_schedule(TR_SCHED_1F1B, pp, M);
        }
    /* the simulation can see a deadlock: a schedule whose last stage runs its
     * backwards in descending order against the others' ascending order hangs */
    CHECK(!simulate(TR_SCHED_GPIPE, 2, 4, 1), "a mismatched gpipe order must deadlock");
    CHECK(!simulate(TR_SCHED_1F1B, 4, 8, 1), "a mismatched 1f1b order must deadlock");
    return tr_test_finish();
}
