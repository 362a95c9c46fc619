/* slurm.h: the trainer as a Slurm job: what the job is and what it asked for.
 *
 * Slurm describes a job to its tasks in environment variables (SLURM_JOB_ID,
 * SLURM_RESTART_COUNT, SLURM_JOB_NODELIST, SLURM_TASKS_PER_NODE, ...). This file
 * reads them into a struct, checks the trainer's layout against them and names the
 * run directory after the job. Pure: variables come through a getter (getenv in the
 * trainer, a table in the unit tests), no MPI, no printing; train/slurm_job.c is the
 * glue that agrees on the verdict over all ranks. */
#ifndef TR_SLURM_H
#define TR_SLURM_H

#include <stddef.h>

typedef const char *(*tr_env_get)(const char *name);

typedef struct tr_slurm {
    int active;              /* SLURM_JOB_ID is set: running inside a Slurm job */
    char job_id[64];         /* "1234", or "1234_7" for task 7 of job array 1234 */
    char job_name[128];
    char partition[128];
    int restart_count;       /* SLURM_RESTART_COUNT: 0 first, n after n requeues */
    char nodelist[512];      /* SLURM_JOB_NODELIST as Slurm writes it: "gpu[001-064]" */
    int nodes;               /* SLURM_JOB_NUM_NODES */
    int node_id;             /* SLURM_NODEID: this node's index in the step, -1 unknown */
    int ntasks;              /* SLURM_NTASKS: tasks of the step (srun) or job; 0 unknown */
    char tasks_per_node[256]; /* SLURM_STEP_TASKS_PER_NODE or SLURM_TASKS_PER_NODE, "8(x64)" */
    int tasks_on_node;       /* that list at node_id; 0 unknown */
    int ntasks_per_node;     /* SLURM_NTASKS_PER_NODE (--ntasks-per-node); 0 not asked */
    int cpus_per_task;       /* SLURM_CPUS_PER_TASK (--cpus-per-task); 0 not asked */
    int cpus_on_node;        /* SLURM_CPUS_ON_NODE: CPUs the job holds on this node */
    int gpus_on_node;        /* SLURM_GPUS_ON_NODE: GPUs the job holds on this node */
    char distribution[64];   /* SLURM_DISTRIBUTION: "block", "cyclic", ... or "" */
    int step_tasks;          /* SLURM_STEP_NUM_TASKS: tasks srun started in this step; 0
                              * outside one (a batch script, mpirun's local ranks) */
    char mpi_type[32];       /* SLURM_MPI_TYPE: srun's --mpi plugin, or "" */
    int launcher_size;       /* the job size another launcher gave this process: Open
                              * MPI's OMPI_COMM_WORLD_SIZE, else PMI_SIZE; 0 none */
} tr_slurm;

/* Fills s from the variables (s->active = 0 and the rest zero outside Slurm). */
void tr_slurm_read(tr_slurm *s, tr_env_get get);

/* The same from this process's environment (getenv). */
void tr_slurm_read_env(tr_slurm *s);

/* Tasks on node `index` of a Slurm task count list such as "2(x3),1" (Slurm's
 * compressed form: 2 tasks on each of 3 nodes, then 1); 0 when out of range or
 * malformed. */
int tr_slurm_tasks_at(const char *list, int index);

/* CPUs each rank may use under Slurm: --cpus-per-task, else the job's CPUs on this
 * node / ranks on the node; 0 outside Slurm (or not said). Caps the default
 * [system] threads so a rank never runs more threads than Slurm gave it. */
int tr_slurm_cpus_per_rank(const tr_slurm *s, int ranks_on_node);

/* What the trainer is about to run, to check against the job. */
typedef struct tr_slurm_layout {
    int ranks;         /* world size */
    int ranks_on_node; /* ranks sharing this rank's node (MPI's view) */
    int threads;       /* OpenMP threads per rank */
    const char *threads_from; /* where that number came from, for the message */
    int tp, pp;
    int gpu;           /* [system] device uses GPUs: one rank per GPU */
} tr_slurm_layout;

/* Checks the layout against the job on this node. Returns 0, or TR_EXIT_USAGE with
 * what is wrong and what to change in err (a full sentence, no location prefix);
 * notes that do not stop the run (GPUs held but unused, tasks left idle) go to
 * warn (empty when none). `key` is set to the deck key the error is about
 * ("system.threads", "parallel.tp", ...) or "" when it is about the job. */
int tr_slurm_check(const tr_slurm *s, const tr_slurm_layout *l, char *err, size_t errlen,
                   char *warn, size_t warnlen, const char **key);

/* The run directory of a job whose deck did not set [run] dir: "runs/<deck name>-<job
 * id>" (deck name = the deck's file name without directory and ".in"). A requeued
 * job keeps its id, so its rerun finds its own checkpoints. */
void tr_slurm_run_dir(const tr_slurm *s, const char *deck_path, char *out, size_t len);

/* One line for the banner: "slurm: job 1234 (restart 1) "name" on 2 nodes n[1-2]: 16
 * ranks, 8 on this node (Slurm: 8(x2)), 2 CPUs per task, 8 GPUs per node, ..." */
void tr_slurm_describe(const tr_slurm *s, const tr_slurm_layout *l, char *out, size_t len);

#endif
