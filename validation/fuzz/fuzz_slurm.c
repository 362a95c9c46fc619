/* fuzz_slurm.c: reading a Slurm job from its variables (core/slurm.c) with any
 * values, and checking layouts against it.
 *
 * Input: the values of the variables below in order, separated by 0x1e bytes
 * (an empty value is set and empty; the variables past the input's last value
 * are unset); the input's first byte also picks the layout checked. Checked:
 * the numbers read are not negative (node_id: -1 or more); task lists give
 * counts of 0 or more at any index; the check's verdict is 0 or TR_EXIT_USAGE
 * with a message and a key; every string written is terminated within its
 * buffer. */
#include "fuzz.h"

#include "core/slurm.h"

#include <string.h>

static const char *const NAMES[] = {
    "SLURM_JOB_ID",         "SLURM_JOB_NAME",        "SLURM_JOB_PARTITION",
    "SLURM_RESTART_COUNT",  "SLURM_JOB_NODELIST",    "SLURM_JOB_NUM_NODES",
    "SLURM_NODEID",         "SLURM_NTASKS",          "SLURM_STEP_TASKS_PER_NODE",
    "SLURM_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE", "SLURM_CPUS_PER_TASK",
    "SLURM_CPUS_ON_NODE",   "SLURM_GPUS_ON_NODE",    "SLURM_DISTRIBUTION",
    "SLURM_ARRAY_JOB_ID",   "SLURM_ARRAY_TASK_ID",   "SLURM_JOBID",
    "SLURM_NODELIST",       "SLURM_NNODES",          "SLURM_NPROCS",
};
#define NVARS ((int)(sizeof NAMES / sizeof NAMES[0]))

static char *g_values[NVARS];

static const char *get(const char *name)
{
    for (int i = 0; i < NVARS; i++)
        if (!strcmp(NAMES[i], name))
            return g_values[i];
    return NULL;
}

static void terminated(const char *s, size_t size, const char *what)
{
    FUZZ_CHECK(memchr(s, '\0', size) != NULL, "%s not terminated", what);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *rest = data;
    size_t rest_len = size;
    int done = 0; /* no separator left: the variables after the last value are unset */
    for (int i = 0; i < NVARS; i++) {
        g_values[i] = NULL;
        if (done)
            continue;
        const uint8_t *one, *after;
        size_t one_len, after_len;
        fuzz_split(rest, rest_len, 0x1e, &one, &one_len, &after, &after_len);
        g_values[i] = fuzz_cstring(one, one_len);
        done = one_len == rest_len;
        rest = after, rest_len = after_len;
    }
    tr_slurm s;
    memset(&s, 0xab, sizeof s);
    tr_slurm_read(&s, get);
    terminated(s.job_id, sizeof s.job_id, "job_id");
    terminated(s.job_name, sizeof s.job_name, "job_name");
    terminated(s.partition, sizeof s.partition, "partition");
    terminated(s.nodelist, sizeof s.nodelist, "nodelist");
    terminated(s.tasks_per_node, sizeof s.tasks_per_node, "tasks_per_node");
    terminated(s.distribution, sizeof s.distribution, "distribution");
    FUZZ_CHECK(s.restart_count >= 0 && s.nodes >= 0 && s.node_id >= -1 && s.ntasks >= 0 &&
                   s.tasks_on_node >= 0 && s.ntasks_per_node >= 0 && s.cpus_per_task >= 0 &&
                   s.cpus_on_node >= 0 && s.gpus_on_node >= 0,
               "a negative count");
    for (int i = -1; i < 5; i++)
        FUZZ_CHECK(tr_slurm_tasks_at(s.tasks_per_node, i) >= 0, "tasks at %d", i);

    uint8_t pick = size ? data[0] : 0;
    tr_slurm_layout l = {.ranks = 1 + pick % 16,
                         .ranks_on_node = 1 + pick % 8,
                         .threads = pick % 5,
                         .threads_from = "system.threads",
                         .tp = 1 + pick % 3,
                         .pp = 1 + (pick >> 2) % 3,
                         .gpu = (pick >> 7) & 1};
    for (int r = 0; r < 3; r++)
        FUZZ_CHECK(tr_slurm_cpus_per_rank(&s, r) >= 0, "cpus per rank at %d ranks", r);
    char err[1024], warn[1024], line[2048], dir[1024];
    const char *key = NULL;
    int rc = tr_slurm_check(&s, &l, err, sizeof err, warn, sizeof warn, &key);
    FUZZ_CHECK(rc == 0 || rc == 64, "check returned %d", rc);
    terminated(warn, sizeof warn, "warn");
    if (rc) {
        fuzz_check_message(err, sizeof err, "slurm_check");
        FUZZ_CHECK(key != NULL, "no key with the error");
    }
    tr_slurm_describe(&s, &l, line, sizeof line);
    terminated(line, sizeof line, "describe");
    tr_slurm_run_dir(&s, "inputs/fuzz.in", dir, sizeof dir);
    terminated(dir, sizeof dir, "run_dir");
    for (int i = 0; i < NVARS; i++)
        free(g_values[i]);
    return 0;
}
