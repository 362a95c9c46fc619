/* slurm.c: the Slurm environment of a job, checks of the layout against it, and the
 * run directory named after the job. See slurm.h.
 *
 * Which variables mean what depends on the launcher. Under `srun` every task sees
 * its own step: SLURM_NTASKS, SLURM_STEP_TASKS_PER_NODE and SLURM_DISTRIBUTION
 * describe the ranks the trainer runs as. Under `mpirun` inside an allocation, the
 * ranks inherit the variables of the step that started OpenMPI's daemons (one task
 * per node, cyclic), which say nothing about the ranks; so the step-level checks run
 * only when SLURM_NTASKS equals the world size (srun started us), and the job-level
 * ones (CPUs and GPUs the job holds on the node) always. */
#include "slurm.h"
#include "error.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A count as Slurm writes it: a whole number, not negative, within int. Anything
 * else (never Slurm's own: an export of the user's gone wrong) counts as unset. */
static int env_int(tr_env_get get, const char *name, int fallback)
{
    const char *v = get(name);
    if (!v || !*v)
        return fallback;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (end == v || *end || errno || x < 0 || x > INT_MAX)
        return fallback;
    return (int)x;
}

static void env_str(tr_env_get get, const char *name, char *out, size_t len)
{
    const char *v = get(name);
    snprintf(out, len, "%s", v ? v : "");
}

int tr_slurm_tasks_at(const char *list, int index)
{
    /* "N" or "N(xM)" items, comma-separated */
    const char *p = list;
    long at = 0; /* nodes before this item: at most index, so never past INT_MAX */
    while (p && *p) {
        char *end;
        long n = strtol(p, &end, 10);
        if (end == p || n < 0 || n > INT_MAX)
            return 0;
        long reps = 1;
        p = end;
        if (*p == '(') {
            if (p[1] != 'x')
                return 0;
            reps = strtol(p + 2, &end, 10);
            if (end == p + 2 || *end != ')' || reps < 1 || reps > INT_MAX)
                return 0;
            p = end + 1;
        }
        if (index < at + reps)
            return (int)n;
        at += reps;
        if (*p == ',')
            p++;
        else if (*p)
            return 0;
    }
    return 0;
}

void tr_slurm_read(tr_slurm *s, tr_env_get get)
{
    memset(s, 0, sizeof *s);
    s->node_id = -1;
    const char *job = get("SLURM_JOB_ID");
    if (!job || !*job)
        job = get("SLURM_JOBID");
    if (!job || !*job)
        return;
    s->active = 1;
    const char *array = get("SLURM_ARRAY_JOB_ID"), *task = get("SLURM_ARRAY_TASK_ID");
    if (array && *array && task && *task)
        snprintf(s->job_id, sizeof s->job_id, "%s_%s", array, task);
    else
        snprintf(s->job_id, sizeof s->job_id, "%s", job);
    env_str(get, "SLURM_JOB_NAME", s->job_name, sizeof s->job_name);
    env_str(get, "SLURM_JOB_PARTITION", s->partition, sizeof s->partition);
    s->restart_count = env_int(get, "SLURM_RESTART_COUNT", 0);
    env_str(get, "SLURM_JOB_NODELIST", s->nodelist, sizeof s->nodelist);
    if (!s->nodelist[0])
        env_str(get, "SLURM_NODELIST", s->nodelist, sizeof s->nodelist);
    s->nodes = env_int(get, "SLURM_JOB_NUM_NODES", env_int(get, "SLURM_NNODES", 0));
    s->node_id = env_int(get, "SLURM_NODEID", -1);
    s->ntasks = env_int(get, "SLURM_NTASKS", env_int(get, "SLURM_NPROCS", 0));
    env_str(get, "SLURM_STEP_TASKS_PER_NODE", s->tasks_per_node, sizeof s->tasks_per_node);
    if (!s->tasks_per_node[0])
        env_str(get, "SLURM_TASKS_PER_NODE", s->tasks_per_node, sizeof s->tasks_per_node);
    s->tasks_on_node = tr_slurm_tasks_at(s->tasks_per_node, s->node_id >= 0 ? s->node_id : 0);
    s->ntasks_per_node = env_int(get, "SLURM_NTASKS_PER_NODE", 0);
    s->cpus_per_task = env_int(get, "SLURM_CPUS_PER_TASK", 0);
    s->cpus_on_node = env_int(get, "SLURM_CPUS_ON_NODE", 0);
    s->gpus_on_node = env_int(get, "SLURM_GPUS_ON_NODE", 0);
    env_str(get, "SLURM_DISTRIBUTION", s->distribution, sizeof s->distribution);
    s->step_tasks = env_int(get, "SLURM_STEP_NUM_TASKS", 0);
    env_str(get, "SLURM_MPI_TYPE", s->mpi_type, sizeof s->mpi_type);
    s->launcher_size = env_int(get, "OMPI_COMM_WORLD_SIZE", env_int(get, "PMI_SIZE", 0));
}

static const char *process_env(const char *name) { return getenv(name); }

void tr_slurm_read_env(tr_slurm *s) { tr_slurm_read(s, process_env); }

int tr_slurm_cpus_per_rank(const tr_slurm *s, int ranks_on_node)
{
    if (!s->active)
        return 0;
    if (s->cpus_per_task > 0)
        return s->cpus_per_task;
    if (s->cpus_on_node > 0 && ranks_on_node > 0)
        return s->cpus_on_node / ranks_on_node > 0 ? s->cpus_on_node / ranks_on_node : 1;
    return 0;
}

#define SAY(buf, len, ...) snprintf(buf, len, __VA_ARGS__)

int tr_slurm_check(const tr_slurm *s, const tr_slurm_layout *l, char *err, size_t errlen,
                   char *warn, size_t warnlen, const char **key)
{
    err[0] = warn[0] = '\0';
    *key = "";
    if (!s->active)
        return 0;
    int srun = s->ntasks == l->ranks; /* the step variables describe our ranks */
    int n = l->ranks_on_node;

    /* srun started several tasks, but MPI made this one a job of its own: the MPI
     * library did not take the PMI that srun's --mpi plugin offers (MPICH under
     * --mpi=pmix, Open MPI under pmi2), so every task would train the whole model
     * alone. Not where another launcher says 1 (mpirun -np 1 inside a step). */
    if (l->ranks == 1 && s->step_tasks > 1 && s->launcher_size != 1) {
        SAY(err, errlen,
            "srun started %d tasks in this step of Slurm job %s, but MPI made this one a job "
            "of 1 rank: the MPI library did not take srun's PMI (--mpi=%s); start the "
            "trainer with the plugin your MPI takes (Open MPI: srun --mpi=pmix, MPICH: "
            "--mpi=pmi2, Cray MPICH: --mpi=cray_shasta; `srun --mpi=list` lists them; "
            "jobs/launch.sh: SRUN_MPI)",
            s->step_tasks, s->job_id, s->mpi_type[0] ? s->mpi_type : "none");
        return TR_EXIT_USAGE;
    }

    /* CPUs: every thread of every rank on the node needs a core of the job's */
    long threads = (long)n * l->threads;
    if (s->cpus_on_node > 0 && n > s->cpus_on_node) {
        SAY(err, errlen,
            "%d ranks run on node %d of Slurm job %s, but the job holds %d CPUs there: start at "
            "most %d tasks per node (srun --ntasks-per-node), or ask for more CPUs",
            n, s->node_id > 0 ? s->node_id : 0, s->job_id, s->cpus_on_node, s->cpus_on_node);
        return TR_EXIT_USAGE;
    }
    if (s->cpus_on_node > 0 && threads > s->cpus_on_node) {
        *key = "system.threads";
        SAY(err, errlen,
            "%d ranks x %d threads (%s) = %ld threads on a node where Slurm job %s holds %d "
            "CPUs: the threads would fight over the cores; set [system] threads = %d or 0 "
            "(0 takes Slurm's share: --cpus-per-task, else the node's CPUs / ranks), or ask "
            "for --cpus-per-task=%d",
            n, l->threads, l->threads_from, threads, s->job_id, s->cpus_on_node,
            s->cpus_on_node / n, l->threads);
        return TR_EXIT_USAGE;
    }

    /* GPUs: one rank per GPU */
    if (l->gpu && s->gpus_on_node == 0) {
        *key = "system.device";
        SAY(err, errlen,
            "[system] device runs on GPUs but Slurm job %s holds none on this node: ask for "
            "--gpus-per-node=%d (one per rank)",
            s->job_id, n);
        return TR_EXIT_USAGE;
    }
    if (l->gpu && s->gpus_on_node != n) {
        *key = "system.device";
        SAY(err, errlen,
            "%d ranks on a node where Slurm job %s holds %d GPUs: the trainer runs one rank "
            "per GPU; start --ntasks-per-node=%d (or ask for --gpus-per-node=%d)",
            n, s->job_id, s->gpus_on_node, s->gpus_on_node, n);
        return TR_EXIT_USAGE;
    }

    /* tensor parallelism all-reduces in every layer: a group stays inside a node */
    if (l->tp > 1 && n % l->tp) {
        *key = "parallel.tp";
        SAY(err, errlen,
            "[parallel] tp = %d does not divide the %d ranks on this node of Slurm job %s: a "
            "tensor-parallel group (consecutive ranks) must sit inside one node; use a tp that "
            "divides %d, or start a multiple of %d tasks per node",
            l->tp, n, s->job_id, n, l->tp);
        return TR_EXIT_USAGE;
    }
    if (l->tp > 1 && srun && !strncmp(s->distribution, "cyclic", 6)) {
        *key = "parallel.tp";
        SAY(err, errlen,
            "srun deals ranks to nodes cyclically (SLURM_DISTRIBUTION=%s), so the "
            "tensor-parallel groups of [parallel] tp = %d (consecutive ranks) would span "
            "nodes; launch with srun --distribution=block (Slurm's default)",
            s->distribution, l->tp);
        return TR_EXIT_USAGE;
    }

    /* what does not stop the run */
    size_t used = 0;
    if (!l->gpu && s->gpus_on_node > 0)
        used += (size_t)SAY(warn + used, warnlen - used,
                            "warning: Slurm job %s holds %d GPU%s per node but [system] device = "
                            "cpu: they stay idle\n",
                            s->job_id, s->gpus_on_node, s->gpus_on_node == 1 ? "" : "s");
    if (srun && used < warnlen && s->ntasks_per_node > n)
        SAY(warn + used, warnlen - used,
            "warning: Slurm job %s asked for %d tasks per node but this step runs %d ranks on "
            "the node: the rest of its CPUs and GPUs stay idle\n",
            s->job_id, s->ntasks_per_node, n);
    return 0;
}

void tr_slurm_run_dir(const tr_slurm *s, const char *deck_path, char *out, size_t len)
{
    const char *base = strrchr(deck_path, '/');
    base = base ? base + 1 : deck_path;
    size_t n = strlen(base);
    if (n > 3 && !strcmp(base + n - 3, ".in"))
        n -= 3;
    if (n == 0 || n > 200)
        base = "run", n = 3;
    snprintf(out, len, "runs/%.*s-%s", (int)n, base, s->job_id);
}

void tr_slurm_describe(const tr_slurm *s, const tr_slurm_layout *l, char *out, size_t len)
{
    char restart[48] = "", slurm_tasks[300] = "", cpus[48] = "", gpus[48] = "", part[160] = "";
    if (s->restart_count)
        snprintf(restart, sizeof restart, " (restart %d)", s->restart_count);
    if (s->ntasks == l->ranks && s->tasks_per_node[0])
        snprintf(slurm_tasks, sizeof slurm_tasks, " (Slurm: %s)", s->tasks_per_node);
    if (s->cpus_per_task)
        snprintf(cpus, sizeof cpus, ", %d CPUs per task", s->cpus_per_task);
    else if (s->cpus_on_node)
        snprintf(cpus, sizeof cpus, ", %d CPUs on the node", s->cpus_on_node);
    if (s->gpus_on_node)
        snprintf(gpus, sizeof gpus, ", %d GPU%s per node", s->gpus_on_node,
                 s->gpus_on_node == 1 ? "" : "s");
    if (s->partition[0])
        snprintf(part, sizeof part, ", partition %s", s->partition);
    snprintf(out, len, "slurm: job %s%s \"%s\" on %d node%s %s: %d ranks, %d on this node%s%s%s%s",
             s->job_id, restart, s->job_name, s->nodes, s->nodes == 1 ? "" : "s", s->nodelist,
             l->ranks, l->ranks_on_node, slurm_tasks, cpus, gpus, part);
}
