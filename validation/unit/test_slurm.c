/* test_slurm.c: the Slurm environment (core/slurm.h) from fake variables: job id and
 * array ids, restart count, Slurm's compressed task lists, the CPUs a rank may use,
 * each layout check and its message, the run directory named after the job, the
 * banner line; and the deck API it needs (tr_deck_is_set, tr_deck_set). The same
 * code inside real Slurm jobs is tested by validation/slurm/. */
#include "core/deck.h"
#include "core/error.h"
#include "core/slurm.h"
#include "test_util.h"

#include <string.h>

/* a fake environment: NULL-terminated name, value pairs */
static const char *const *g_env;

static const char *fake_get(const char *name)
{
    for (int i = 0; g_env[i]; i += 2)
        if (!strcmp(g_env[i], name))
            return g_env[i + 1];
    return NULL;
}

static void read_env(tr_slurm *s, const char *const *env)
{
    g_env = env;
    tr_slurm_read(s, fake_get);
}

/* 2 nodes x 4 tasks, 2 CPUs per task, srun-launched (SLURM_NTASKS = world size) */
static const char *const job_env[] = {
    "SLURM_JOB_ID", "4242", "SLURM_JOB_NAME", "gpt", "SLURM_JOB_PARTITION", "batch",
    "SLURM_RESTART_COUNT", "2", "SLURM_JOB_NODELIST", "n[01-02]", "SLURM_JOB_NUM_NODES", "2",
    "SLURM_NODEID", "1", "SLURM_NTASKS", "8", "SLURM_STEP_TASKS_PER_NODE", "4(x2)",
    "SLURM_TASKS_PER_NODE", "4(x2)", "SLURM_NTASKS_PER_NODE", "4", "SLURM_CPUS_PER_TASK", "2",
    "SLURM_CPUS_ON_NODE", "8", "SLURM_DISTRIBUTION", "block", NULL};

static tr_slurm_layout layout(int threads, int tp, int gpu)
{
    tr_slurm_layout l = {.ranks = 8, .ranks_on_node = 4, .threads = threads,
                         .threads_from = "OMP_NUM_THREADS=x", .tp = tp, .pp = 1, .gpu = gpu};
    return l;
}

static void test_read(void)
{
    tr_slurm s;
    const char *const none[] = {"HOME", "/root", NULL};
    read_env(&s, none);
    CHECK(!s.active, "no SLURM_JOB_ID: not a job");
    CHECK(tr_slurm_cpus_per_rank(&s, 4) == 0, "no Slurm share outside Slurm");

    read_env(&s, job_env);
    CHECK(s.active && !strcmp(s.job_id, "4242"), "job id '%s'", s.job_id);
    CHECK(s.restart_count == 2, "restart %d", s.restart_count);
    CHECK(s.nodes == 2 && s.node_id == 1 && s.ntasks == 8, "nodes %d id %d ntasks %d", s.nodes,
          s.node_id, s.ntasks);
    CHECK(s.tasks_on_node == 4 && s.cpus_per_task == 2 && s.cpus_on_node == 8,
          "tasks %d cpt %d con %d", s.tasks_on_node, s.cpus_per_task, s.cpus_on_node);
    CHECK(!strcmp(s.nodelist, "n[01-02]") && !strcmp(s.partition, "batch"), "strings");
    CHECK(tr_slurm_cpus_per_rank(&s, 4) == 2, "cpus per task");

    const char *const first[] = {"SLURM_JOBID", "7", "SLURM_CPUS_ON_NODE", "12", NULL};
    read_env(&s, first);
    CHECK(s.active && !strcmp(s.job_id, "7") && s.restart_count == 0, "old name, no restart");
    CHECK(tr_slurm_cpus_per_rank(&s, 4) == 3, "node CPUs / ranks: %d",
          tr_slurm_cpus_per_rank(&s, 4));
    CHECK(tr_slurm_cpus_per_rank(&s, 24) == 1, "at least one");

    const char *const array[] = {"SLURM_JOB_ID", "101", "SLURM_ARRAY_JOB_ID", "100",
                                 "SLURM_ARRAY_TASK_ID", "3", NULL};
    read_env(&s, array);
    CHECK(!strcmp(s.job_id, "100_3"), "array task id '%s'", s.job_id);
}

static void test_task_lists(void)
{
    CHECK(tr_slurm_tasks_at("8", 0) == 8, "single");
    CHECK(tr_slurm_tasks_at("8(x64)", 63) == 8, "repeated, last");
    CHECK(tr_slurm_tasks_at("8(x64)", 64) == 0, "out of range");
    const char *l = "2(x3),1,4(x2)";
    int want[] = {2, 2, 2, 1, 4, 4, 0};
    for (int i = 0; i < 7; i++)
        CHECK(tr_slurm_tasks_at(l, i) == want[i], "node %d: %d", i, tr_slurm_tasks_at(l, i));
    CHECK(tr_slurm_tasks_at("2(3)", 0) == 0 && tr_slurm_tasks_at("x", 0) == 0 &&
              tr_slurm_tasks_at("2(x0)", 0) == 0 && tr_slurm_tasks_at("", 0) == 0,
          "malformed lists give 0");
    /* numbers past int (found by validation/fuzz/fuzz_slurm.c): no wrap, no overflow */
    CHECK(tr_slurm_tasks_at("4294967297", 0) == 0, "a count past int");
    CHECK(tr_slurm_tasks_at("1(x4294967296)", 0) == 0, "repeats past int");
    CHECK(tr_slurm_tasks_at("1(x2147483647),3(x2147483647)", 2147483647) == 3,
          "the second item, past 2^31 - 1 nodes of the first");
}

/* Values Slurm never writes (a user's export gone wrong) count as unset, never as a
 * negative or wrapped count. */
static void test_odd_values(void)
{
    const char *const odd[] = {"SLURM_JOB_ID",       "5",    "SLURM_NTASKS",        "-211",
                               "SLURM_CPUS_PER_TASK", "8abc", "SLURM_CPUS_ON_NODE",  "99999999999",
                               "SLURM_RESTART_COUNT", "-1",   "SLURM_NODEID",        "x",
                               NULL};
    tr_slurm s;
    read_env(&s, odd);
    CHECK(s.ntasks == 0 && s.cpus_per_task == 0 && s.cpus_on_node == 0 && s.restart_count == 0 &&
              s.node_id == -1,
          "ntasks %d, cpus per task %d, on node %d, restart %d, node id %d", s.ntasks,
          s.cpus_per_task, s.cpus_on_node, s.restart_count, s.node_id);
}

static void test_checks(void)
{
    tr_slurm s;
    read_env(&s, job_env);
    char err[1024], warn[512];
    const char *key;
    tr_slurm_layout l = layout(2, 1, 0);
    CHECK(tr_slurm_check(&s, &l, err, sizeof err, warn, sizeof warn, &key) == 0 && !*warn,
          "a layout that fits: %s %s", err, warn);

    l = layout(3, 1, 0); /* 4 ranks x 3 threads > 8 CPUs */
    CHECK(tr_slurm_check(&s, &l, err, sizeof err, warn, sizeof warn, &key) == TR_EXIT_USAGE,
          "threads oversubscribe");
    CHECK(!strcmp(key, "system.threads") && strstr(err, "4 ranks x 3 threads") &&
              strstr(err, "OMP_NUM_THREADS=x") && strstr(err, "holds 8 CPUs") &&
              strstr(err, "threads = 2"),
          "message: %s", err);

    l = layout(1, 1, 0);
    l.ranks_on_node = 9;
    CHECK(tr_slurm_check(&s, &l, err, sizeof err, warn, sizeof warn, &key) == TR_EXIT_USAGE &&
              strstr(err, "9 ranks run on node 1") && strstr(err, "holds 8 CPUs"),
          "more ranks than CPUs: %s", err);

    l = layout(2, 8, 0); /* tp 8 on 4 ranks a node */
    CHECK(tr_slurm_check(&s, &l, err, sizeof err, warn, sizeof warn, &key) == TR_EXIT_USAGE &&
              !strcmp(key, "parallel.tp") && strstr(err, "tp = 8 does not divide the 4 ranks"),
          "tp across nodes: %s", err);
    l = layout(2, 4, 0);
    CHECK(tr_slurm_check(&s, &l, err, sizeof err, warn, sizeof warn, &key) == 0, "tp = node");
    const char *const cyclic[] = {"SLURM_JOB_ID", "1", "SLURM_NTASKS", "8",
                                  "SLURM_DISTRIBUTION", "cyclic", "SLURM_CPUS_ON_NODE", "8",
                                  NULL};
    tr_slurm c;
    read_env(&c, cyclic);
    CHECK(tr_slurm_check(&c, &l, err, sizeof err, warn, sizeof warn, &key) == TR_EXIT_USAGE &&
              strstr(err, "cyclically") && strstr(err, "--distribution=block"),
          "cyclic distribution splits tp groups: %s", err);
    c.ntasks = 2; /* mpirun inside the allocation: the step variables are not ours */
    CHECK(tr_slurm_check(&c, &l, err, sizeof err, warn, sizeof warn, &key) == 0,
          "mpirun: step distribution ignored: %s", err);

    /* GPUs: one rank per GPU */
    l = layout(2, 1, 1);
    CHECK(tr_slurm_check(&s, &l, err, sizeof err, warn, sizeof warn, &key) == TR_EXIT_USAGE &&
              !strcmp(key, "system.device") && strstr(err, "--gpus-per-node=4"),
          "GPU device without GPUs: %s", err);
    s.gpus_on_node = 8;
    CHECK(tr_slurm_check(&s, &l, err, sizeof err, warn, sizeof warn, &key) == TR_EXIT_USAGE &&
              strstr(err, "4 ranks on a node where Slurm job 4242 holds 8 GPUs") &&
              strstr(err, "--ntasks-per-node=8"),
          "ranks != GPUs: %s", err);
    s.gpus_on_node = 4;
    CHECK(tr_slurm_check(&s, &l, err, sizeof err, warn, sizeof warn, &key) == 0, "one per GPU");
    l = layout(2, 1, 0);
    CHECK(tr_slurm_check(&s, &l, err, sizeof err, warn, sizeof warn, &key) == 0 &&
              strstr(warn, "holds 4 GPUs per node but [system] device = cpu"),
          "idle GPUs warned: %s", warn);

    s.gpus_on_node = 0;
    s.ntasks_per_node = 8; /* the job asked for 8 a node, the step runs 4 */
    CHECK(tr_slurm_check(&s, &l, err, sizeof err, warn, sizeof warn, &key) == 0 &&
              strstr(warn, "asked for 8 tasks per node but this step runs 4"),
          "idle tasks warned: %s", warn);

    tr_slurm off = {0};
    l.threads = 1000;
    CHECK(tr_slurm_check(&off, &l, err, sizeof err, warn, sizeof warn, &key) == 0,
          "nothing to check outside Slurm");
}

/* srun's tasks that MPI started as jobs of one rank each (an MPI that does not take
 * the --mpi plugin's PMI) stop at start-up; mpirun -np 1 inside a step does not */
static void test_singleton_tasks(void)
{
    /* clang-format off */
    const char *const step[] = {"SLURM_JOB_ID", "77", "SLURM_NTASKS", "2", "SLURM_PROCID", "1",
                                "SLURM_STEP_NUM_TASKS", "2", "SLURM_MPI_TYPE", "pmix",
                                "SLURM_CPUS_ON_NODE", "2", NULL};
    const char *const pmi2[] = {"SLURM_JOB_ID", "77", "SLURM_STEP_NUM_TASKS", "4",
                                "SLURM_MPI_TYPE", "pmi2", "PMI_SIZE", "4", NULL};
    const char *const mpirun1[] = {"SLURM_JOB_ID", "77", "SLURM_STEP_NUM_TASKS", "2",
                                   "OMPI_COMM_WORLD_SIZE", "1", NULL};
    const char *const batch[] = {"SLURM_JOB_ID", "77", "SLURM_NTASKS", "8", "SLURM_PROCID", "0",
                                 NULL};
    tr_slurm_layout one = {.ranks = 1, .ranks_on_node = 1, .threads = 1, .threads_from = "x",
                           .tp = 1, .pp = 1, .gpu = 0};
    /* clang-format on */
    tr_slurm s;
    char err[1024], warn[512];
    const char *key;
    read_env(&s, step);
    CHECK(tr_slurm_check(&s, &one, err, sizeof err, warn, sizeof warn, &key) == TR_EXIT_USAGE &&
              strstr(err, "srun started 2 tasks") && strstr(err, "--mpi=pmix") &&
              strstr(err, "MPICH: --mpi=pmi2") && strstr(err, "SRUN_MPI"),
          "2 tasks of srun, MPI sees 1 rank: %s", err);
    read_env(&s, pmi2);
    CHECK(tr_slurm_check(&s, &one, err, sizeof err, warn, sizeof warn, &key) == TR_EXIT_USAGE &&
              strstr(err, "srun started 4 tasks") && strstr(err, "--mpi=pmi2"),
          "PMI_SIZE 4, MPI sees 1 rank: %s", err);
    read_env(&s, mpirun1);
    CHECK(tr_slurm_check(&s, &one, err, sizeof err, warn, sizeof warn, &key) == 0,
          "mpirun -np 1 inside a step of 2 tasks: %s", err);
    read_env(&s, batch);
    CHECK(tr_slurm_check(&s, &one, err, sizeof err, warn, sizeof warn, &key) == 0,
          "the trainer alone in a batch script of an 8-task job: %s", err);
    tr_slurm_layout two = one;
    two.ranks = two.ranks_on_node = 2;
    read_env(&s, step);
    CHECK(tr_slurm_check(&s, &two, err, sizeof err, warn, sizeof warn, &key) == 0,
          "2 tasks, 2 ranks: %s", err);
}

static void test_names(void)
{
    tr_slurm s;
    read_env(&s, job_env);
    char dir[256], line[1400];
    tr_slurm_run_dir(&s, "inputs/gpt2_1558m.in", dir, sizeof dir);
    CHECK(!strcmp(dir, "runs/gpt2_1558m-4242"), "%s", dir);
    tr_slurm_run_dir(&s, "/abs/deck", dir, sizeof dir);
    CHECK(!strcmp(dir, "runs/deck-4242"), "%s", dir);
    tr_slurm_layout l = layout(2, 1, 0);
    tr_slurm_describe(&s, &l, line, sizeof line);
    CHECK(strstr(line, "slurm: job 4242 (restart 2) \"gpt\" on 2 nodes n[01-02]: 8 ranks, 4 on "
                       "this node (Slurm: 4(x2)), 2 CPUs per task, partition batch"),
          "%s", line);
}

static void test_deck_api(void)
{
    tr_deck d;
    int rc = tr_deck_load_text(&d, "t.in", "[run]\nprogress = off\n", 0, NULL);
    CHECK(rc == 0, "%s", d.errors);
    CHECK(tr_deck_is_set(&d, "run", "progress") && !tr_deck_is_set(&d, "run", "dir"), "is_set");
    CHECK(tr_deck_set(&d, "run", "dir", "runs/t-1", "Slurm job 1") == 0, "set");
    char where[256];
    tr_deck_where(&d, "run", "dir", where, sizeof where);
    CHECK(!strcmp(tr_deck_str(&d, "run", "dir"), "runs/t-1") && !strcmp(where, "Slurm job 1"),
          "value and origin: %s", where);
    CHECK(tr_deck_set(&d, "train", "epochs", "many", "x") == TR_EXIT_USAGE &&
              strstr(d.errors, "x: "),
          "values are checked: %s", d.errors);
    tr_deck_free(&d);
}

int main(void)
{
    test_read();
    test_task_lists();
    test_odd_values();
    test_checks();
    test_singleton_tasks();
    test_names();
    test_deck_api();
    return tr_test_finish();
}
