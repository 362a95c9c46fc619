/* plan.h: what a run will need per rank, before it allocates anything: the memory
 * check of every run (exit 71 when it cannot fit) and `trainer --plan`. */
#ifndef TR_PLAN_H
#define TR_PLAN_H

#include "comm/comm.h"
#include "core/deck.h"
#include "models/model.h"

#include <stdio.h>

typedef struct tr_plan {
    tr_model_memory mem; /* parameters, gradients, activations, scratch (bytes) */
    double optimizer;    /* optimizer state bytes */
    double backend;      /* the device backend's own (CUDA: cuBLAS workspace, scratch) */
    double data;         /* batch buffers bytes, and data_order */
    double data_order;   /* the epoch's shuffle order (sampler.h): every rank holds all */
    double comm;         /* shared-memory windows of the CPU's sums on a node, and comm_mpi */
    double comm_mpi;     /* MPI's own buffers where a group sums through MPI: the dp
                          * buckets open at once, one piece of a blocking all-reduce */
    /* host memory of checkpoints beyond the model's buffers: the staging copies of
     * the weights and optimizer state of a device host code cannot touch (a GPU,
     * cpu-guarded), or the CPU's checkpoint.async copy of this rank's share */
    double ckpt_host;
    /* host memory the process itself takes beyond these buffers, the CPU's
     * (tr_plan_runtime_bytes); 0 for a GPU's plan, whose total is the GPU's */
    double runtime;
    /* of runtime: OpenBLAS's packing buffers for the model's largest fully connected
     * products, which grow with the micro-batch's rows (tr_plan_blas_pack_bytes) */
    double blas_pack;
    /* address space the process maps after the memory check beyond the buffers
     * (tr_plan_address_space_bytes), judged against RLIMIT_AS */
    double address_space;
    int staged;          /* ckpt_host is staging copies (else the async copy) */
    int gpu;             /* the device's memory is a GPU's, apart from the host's */
    double total;        /* all of the above but address_space (ckpt_host only where
                          * not a GPU's) */
    int max_batch;       /* the largest batch activations are sized for */
} tr_plan;

/* Resident memory a CPU rank of `threads` OpenMP threads takes beyond its plan's
 * buffers, but for OpenBLAS's packing of large products (tr_plan_blas_pack_bytes):
 * the libraries' pages, MPI's and HDF5's own, the threads' stacks and small products'
 * packing, as measured (train_memory.c). */
double tr_plan_runtime_bytes(int threads);
/* What OpenBLAS's packing buffers of a CPU rank of `threads` threads hold resident
 * after it trained m at micro-batches of max_batch under OpenBLAS kernel `core`: per
 * thread, the most any of m's fully connected layers packs (train_memory.c). */
double tr_plan_blas_pack_bytes(const tr_model *m, int max_batch, int threads, const char *core);
/* The address space (RLIMIT_AS, ulimit -v) a rank of `threads` OpenMP threads maps
 * after the memory check beyond its plan's buffers: the threads' stacks, malloc's
 * arenas and OpenBLAS's buffers, which cannot fail cleanly (train_memory.c). */
double tr_plan_address_space_bytes(int threads);

/* The host buffers a plan maps: the CPU's total less the runtime, or a GPU's host
 * side (its data buffers and checkpoints' host copies). */
double tr_plan_host_buffers(const tr_plan *p);

/* Prints the plan of the layout w describes from each pipeline stage's plan
 * (plans[0 .. w->pp), m being stage 0's model): memory per rank by purpose, model
 * FLOPs per step, communication per step per group, and whether the largest stage
 * fits device_memory bytes per rank (0: the node's available memory / ranks per
 * node; tr_plan_fit_room gives the figure), with fit_hint after the advice where it
 * does not. */
void tr_plan_print(const tr_plan *plans, int nstages, const tr_deck *d, const tr_model *m,
                   const tr_world *w, long global_batch, long local_batch, long micro,
                   double device_memory, const char *fit_hint, FILE *out);
/* The bytes per rank a plan's total is judged against: device_memory where given,
 * else this node's available memory / ranks per node (0: a GPU's, not judged). */
double tr_plan_fit_room(const tr_deck *d, const tr_world *w, double device_memory);

/* A pipeline's balance (pp > 1, a GPT m): each stage's share of the model FLOPs,
 * the least a stage waits on average because the busiest sets the pace, and the
 * bubble of a balanced pipeline over `micro` micro-batches. One line, for the
 * banner and the plan. */
void tr_plan_print_stage_work(const tr_model *m, int pp, long micro, FILE *out);

/* Bytes a rank of pipeline stage `stage` sends per step, p being that stage's plan
 * and m a model of the layout w, by group: its dp group's gradient reduction (ZeRO's
 * reduce and all-gather), and a GPT's tp all-reduces, pipeline messages and the tied
 * embedding's all-reduce; ring collectives. */
typedef struct tr_plan_traffic {
    double dp, tp, pp, emb;
} tr_plan_traffic;
tr_plan_traffic tr_plan_stage_traffic(const tr_plan *p, const tr_model *m, const tr_world *w,
                                      const tr_deck *d, long local_batch, long micro, int stage);
/* The least share of a step a pipeline's stage computes on average (1 where pp = 1):
 * the stages' balance of model FLOPs times micro / (micro + pp - 1). */
double tr_plan_pipeline_busy(const tr_model *m, int pp, long micro);

#endif
