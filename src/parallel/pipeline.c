/* pipeline.c: GPipe and 1F1B schedules (see pipeline.h). */
#include "pipeline.h"

int tr_pipeline_slots(tr_pipe_schedule kind, int pp, int stage, int M)
{
    if (kind == TR_SCHED_GPIPE)
        return M;
    return pp - stage < M ? pp - stage : M;
}

int tr_pipeline_ops(tr_pipe_schedule kind, int pp, int stage, int M, tr_pipe_op *ops)
{
    int n = 0;
    if (kind == TR_SCHED_GPIPE) {
        for (int i = 0; i < M; i++)
            ops[n++] = (tr_pipe_op){0, i};
        for (int i = 0; i < M; i++)
            ops[n++] = (tr_pipe_op){1, i};
        return n;
    }
    int warm = pp - stage - 1 < M ? pp - stage - 1 : M;
    int f = 0, b = 0;
    while (f < warm)
        ops[n++] = (tr_pipe_op){0, f++};
    while (f < M) { /* steady state: one forward, one backward */
        ops[n++] = (tr_pipe_op){0, f++};
        ops[n++] = (tr_pipe_op){1, b++};
    }
    while (b < M)
        ops[n++] = (tr_pipe_op){1, b++};
    return n;
}
