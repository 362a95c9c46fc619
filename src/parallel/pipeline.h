/* pipeline.h: the order in which a pipeline stage runs the forward and backward
 * passes of a step's micro-batches.
 *
 * GPipe: every forward, then every backward; a stage keeps all M micro-batches'
 * activations. 1F1B: stage s of pp first runs min(pp - s - 1, M) forwards (the
 * warm-up that fills the pipeline), then alternates one forward and one backward,
 * then drains the backwards; it keeps at most min(pp - s, M) micro-batches alive.
 * Both run each direction's micro-batches in ascending order on every stage, so the
 * messages between neighbours match up in order. Pure arithmetic: every rank
 * computes its own schedule, nobody talks. */
#ifndef TR_PIPELINE_H
#define TR_PIPELINE_H

typedef enum { TR_SCHED_GPIPE = 0, TR_SCHED_1F1B = 1 } tr_pipe_schedule;

typedef struct tr_pipe_op {
    int backward; /* 0 forward, 1 backward */
    int micro;    /* micro-batch index in [0, M) */
} tr_pipe_op;

/* Fills ops[0 .. 2M) for stage `stage` of pp; returns 2M. */
int tr_pipeline_ops(tr_pipe_schedule kind, int pp, int stage, int M, tr_pipe_op *ops);
/* Micro-batches whose activations the stage keeps at once: micro-batch i uses
 * activation slot i % slots, free again when the slot comes round. */
int tr_pipeline_slots(tr_pipe_schedule kind, int pp, int stage, int M);

#endif
