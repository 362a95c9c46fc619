/* main.c: argv, the deck, start-up banner and exit codes. Every rank runs this. */
#include "backend/blas_select.h"
#include "backend/cpu_backend.h"
#include "comm/comm.h"
#include "core/deck.h"
#include "core/error.h"
#include "core/slurm.h"
#include "models/model.h"
#include "train/signals.h"
#include "train/slurm_job.h"
#include "train/train.h"
#include "version.h"
#ifdef TRAINER_HAVE_CUDA
#include "cuda/cuda_probe.h"
#endif

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *out)
{
    fprintf(out,
            "usage: trainer DECK [section.key=value ...]\n"
            "       mpirun -np N trainer DECK [overrides]     (srun under Slurm)\n"
            "\n"
            "Trains a compiled-in model as the input deck DECK says; any deck key can be\n"
            "overridden after it, e.g. train.epochs=2 optim.lr=0.1 run.dir=runs/try2.\n"
            "\n"
            "  --help          this text\n"
            "  --help-deck     every deck key with its type, default and meaning\n"
            "  --list-models   the compiled-in models\n"
            "  --version       version and build\n"
            "  --plan DECK [--ranks N] [--ranks-per-node N] [--device-memory 80GiB] [overrides]\n"
            "                  per-rank memory, FLOPs and communication of a layout, without\n"
            "                  training (N ranks: 1 unless given; one process, no mpirun)\n"
            "  --plan DECK --ranks N --layouts [--tflops T --node-gbps B --network-gbps B] ...\n"
            "                  every dp x tp x pp of N ranks (a GPT's): each one's memory, fit,\n"
            "                  pipeline use and traffic, the best first; given a rank's model\n"
            "                  TFLOP/s and GB/s within and across nodes, its estimated step\n"
            "\n"
            "Exit codes: 0 done; 64 bad command line, deck or layout; 65 malformed data,\n"
            "or training diverged (a loss that is not finite); 66 missing data or deck;\n"
            "70 internal error; 71 out of memory, a failed collective or no progress for\n"
            "run.hang_minutes; 74 cannot write the run directory or a checkpoint;\n"
            "75 checkpointed on a signal, run.stop_after_steps or run.max_minutes (run\n"
            "again to resume).\n");
}

/* "80GiB", "512MiB", "1.5e9" -> bytes; -1 when malformed (nan and inf too) */
static double parse_bytes(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || !isfinite(v) || v < 0)
        return -1;
    const char *units[] = {"", "B", "KiB", "MiB", "GiB", "TiB", "KB", "MB", "GB", "TB"};
    const double scale[] = {1, 1, 1024.0, 1048576.0, 1073741824.0, 1099511627776.0,
                            1e3, 1e6, 1e9, 1e12};
    for (int i = 0; i < 10; i++)
        if (!strcmp(end, units[i]))
            return v * scale[i];
    return -1;
}

/* "4" -> 4 in *out; 0 when not a whole number in [0, INT_MAX] ("4x", "1e3", "-1") */
static int parse_count(const char *s, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno || v < 0 || v > INT_MAX)
        return 0;
    *out = (int)v;
    return 1;
}

/* trainer --plan DECK [options] [overrides]: takes the options out of argv, leaving
 * "trainer DECK overrides"; returns 0 or TR_EXIT_USAGE with a message printed. */
static int plan_args(int *argc, char **argv, tr_runtime *rt)
{
    int n = 1;
    rt->plan_ranks = 1;
    for (int i = 2; i < *argc; i++) {
        const char *a = argv[i];
        int more = i + 1 < *argc;
        if ((!strcmp(a, "--ranks") || !strcmp(a, "--ranks-per-node")) && more) {
            int *to = !strcmp(a, "--ranks") ? &rt->plan_ranks : &rt->plan_ranks_per_node;
            if (!parse_count(argv[++i], to)) {
                fprintf(stderr, "trainer --plan: %s '%s' is not a whole number\n", a, argv[i]);
                return TR_EXIT_USAGE;
            }
        } else if (!strcmp(a, "--device-memory") && more) {
            rt->plan_device_memory = parse_bytes(argv[++i]);
            if (rt->plan_device_memory <= 0) {
                fprintf(stderr, "trainer --plan: --device-memory '%s' is not a size like "
                                "80GiB, 512MiB or 1e9\n", argv[i]);
                return TR_EXIT_USAGE;
            }
        } else if (!strcmp(a, "--layouts")) {
            rt->plan_layouts = 1;
        } else if ((!strcmp(a, "--tflops") || !strcmp(a, "--node-gbps") ||
                    !strcmp(a, "--network-gbps")) &&
                   more) {
            double *to = !strcmp(a, "--tflops")      ? &rt->plan_tflops
                         : !strcmp(a, "--node-gbps") ? &rt->plan_node_gbps
                                                     : &rt->plan_network_gbps;
            char *end;
            *to = strtod(argv[++i], &end);
            if (end == argv[i] || *end || !isfinite(*to) || *to <= 0) {
                fprintf(stderr, "trainer --plan: %s '%s' is not a positive number\n", a, argv[i]);
                return TR_EXIT_USAGE;
            }
        } else if (a[0] == '-' && a[1] == '-') {
            fprintf(stderr, "trainer --plan: unknown option '%s' (or it lacks its value)\n", a);
            return TR_EXIT_USAGE;
        } else {
            argv[n++] = argv[i];
        }
    }
    if (rt->plan_ranks < 1 || rt->plan_ranks_per_node < 0 || n < 2) {
        fprintf(stderr, "trainer --plan: needs a deck and --ranks N >= 1; see trainer --help\n");
        return TR_EXIT_USAGE;
    }
    /* the estimate needs the network's speed only where some group may cross nodes */
    int g = rt->plan_ranks_per_node ? rt->plan_ranks_per_node : rt->plan_ranks;
    int one_node = rt->plan_ranks <= g && g % rt->plan_ranks == 0;
    int speeds = (rt->plan_tflops > 0) + (rt->plan_node_gbps > 0) + (rt->plan_network_gbps > 0);
    if (speeds && (!rt->plan_layouts || rt->plan_tflops <= 0 || rt->plan_node_gbps <= 0 ||
                   (!one_node && rt->plan_network_gbps <= 0))) {
        fprintf(stderr, "trainer --plan: --tflops, --node-gbps and --network-gbps estimate "
                        "--layouts' steps together (--network-gbps may be left out where every "
                        "rank is on one node); see trainer --help\n");
        return TR_EXIT_USAGE;
    }
    if (one_node && rt->plan_network_gbps <= 0)
        rt->plan_network_gbps = rt->plan_node_gbps; /* no group crosses a node */
    argv[n] = NULL;
    *argc = n;
    return 0;
}

/* The launcher's rank before MPI is up, so informational flags print once. */
static int launcher_rank(void)
{
    const char *vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID", NULL};
    for (int i = 0; vars[i]; i++)
        if (getenv(vars[i]))
            return atoi(getenv(vars[i]));
    return 0;
}

static int info_flag(int argc, char **argv)
{
    if (argc < 2)
        return -1;
    const char *a = argv[1];
    FILE *out = launcher_rank() == 0 ? stdout : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
        if (out)
            usage(out);
    } else if (!strcmp(a, "--version")) {
        char gpus[600] = "CPU-only build";
#ifdef TRAINER_HAVE_CUDA
        char why[512];
        tr_cuda_device_count(why, sizeof why);
        snprintf(gpus, sizeof gpus, "CUDA probe compiled in: %s", why);
#endif
        if (out)
            printf("trainer %s (%s build, C17, OpenMP %d)\n%s\n%s\n", TR_VERSION,
                   TR_BUILD_TYPE, _OPENMP, tr_blas_describe(), gpus);
    } else if (!strcmp(a, "--list-models")) {
        for (int i = 0; out && tr_models[i]; i++)
            printf("%-6s %s\n", tr_models[i]->name, tr_models[i]->summary);
    } else if (!strcmp(a, "--help-deck")) {
        if (out)
            tr_deck_print_reference(stdout);
    } else {
        return -1;
    }
    return 0;
}

/* Threads per rank: the deck's value, else OMP_NUM_THREADS (taken as it is: jobs/launch.sh
 * sets it to Slurm's --cpus-per-task), else this rank's share of the node (cores / ranks
 * on the node), never more than the cores it may run on. */
static int choose_threads(const tr_deck *d, int local_size)
{
    long t = tr_deck_int(d, "system", "threads");
    if (t > 0)
        return (int)t;
    const char *env = getenv("OMP_NUM_THREADS");
    if (env && atoi(env) > 0)
        return atoi(env);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t set;
    long allowed = cores;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        allowed = CPU_COUNT(&set);
    long share = cores / (local_size > 0 ? local_size : 1);
    if (share > allowed)
        share = allowed;
    tr_slurm job; /* under Slurm, no more than the CPUs the job gave each rank */
    tr_slurm_read_env(&job);
    int given = tr_slurm_cpus_per_rank(&job, local_size);
    if (given > 0 && share > given)
        share = given;
    return share > 0 ? (int)share : 1;
}

/* More threads on rank 0's node than it has cores (OMP_NUM_THREADS or [system] threads
 * set for one rank per node, then run with several): every thread waits for the
 * slowest at each parallel loop, so a step can take many times as long. A warning, not
 * an error: the user may know better (hyper-threads, a deliberate test). Where
 * OMP_WAIT_POLICY is unset it also names passive: libgomp's threads then spin at each
 * loop's end (each process sees no more threads than its cores, so libgomp does not
 * shorten the spin) in the time the other ranks' threads need; measured on 2 cores,
 * the MLP at 8 ranks x 2 threads trained 230 samples/s unset and 44 K passive
 * (docs/performance.md, "Threads and OMP_WAIT_POLICY"). libgomp reads the variable as
 * it loads, so the trainer cannot set it. */
static void warn_oversubscribed(const tr_deck *d, const tr_world *w, int threads)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    long n = w->local_size > 0 ? w->local_size : 1;
    if (cores <= 0 || threads == 1 || n * threads <= cores)
        return; /* (more ranks than cores, a thread each: the ranks' own choice) */
    const char *env = getenv("OMP_NUM_THREADS");
    char from[64];
    if (tr_deck_int(d, "system", "threads") > 0)
        snprintf(from, sizeof from, "[system] threads");
    else
        snprintf(from, sizeof from, "OMP_NUM_THREADS=%.40s", env ? env : "?");
    const char *wait = getenv("OMP_WAIT_POLICY");
    fprintf(stderr,
            "warning: %ld rank%s x %d threads (%s) = %ld threads on a node of %ld cores: the "
            "threads fight over the cores and each step waits for the slowest; set [system] "
            "threads = %ld, or 0 without OMP_NUM_THREADS (a share of the node per rank)%s\n",
            n, n == 1 ? "" : "s", threads, from, n * threads, cores, cores / n > 0 ? cores / n : 1,
            wait && *wait ? ""
                          : "; else export OMP_WAIT_POLICY=passive (unset, the idle threads "
                            "spin in the time the others need: many times slower)");
}

/* Every rank must train the same deck: ranks given other overrides (an MPMD command
 * line, a deck edited while the job started) would disagree on the step count and
 * wait forever in a collective. The resolved texts are compared by hash; where one
 * differs from rank 0's, its values are compared key by key with rank 0's (the same
 * value written another way, or the deck named by another path, is no difference),
 * and the first key that differs is named. Collective; 0 or TR_EXIT_USAGE. */
static int same_deck_everywhere(const tr_deck *d, tr_world *w)
{
    char *text = tr_deck_resolved_text(d);
    int differs = tr_comm_differs_from_root(w, text, strlen(text)), any = 0;
    tr_allreduce(&differs, &any, 1, TR_I32, TR_MAX, w->world);
    char msg[TR_DECK_VALUE_MAX * 2 + 400] = "";
    int rc = 0;
    if (any) {
        char *root = w->rank == 0 ? strdup(text) : NULL;
        tr_comm_bcast_string(w, &root);
        tr_deck r;
        if (differs && tr_deck_load_text(&r, "rank 0's deck", root, 0, NULL)) {
            rc = TR_EXIT_USAGE; /* cannot happen: rank 0 loaded it */
            snprintf(msg, sizeof msg, "trainer: rank %d was given another deck than rank 0",
                     w->rank);
        } else if (differs) {
            for (int i = 0; i < tr_deck_nkeys && !rc; i++)
                if (!tr_deck_same_value(&r, d, i)) {
                    snprintf(msg, sizeof msg,
                             "trainer: rank %d was given another deck than rank 0: [%s] %s = %s "
                             "there, %s on rank 0 (other overrides, or the deck file changed "
                             "while the ranks started); start every rank with the same deck and "
                             "overrides",
                             w->rank, tr_deck_keys[i].section, tr_deck_keys[i].name,
                             d->values[i].text, r.values[i].text);
                    rc = TR_EXIT_USAGE;
                }
        }
        if (differs)
            tr_deck_free(&r);
        free(root);
    }
    free(text);
    return tr_comm_agree(w, rc, msg);
}

int main(int argc, char **argv)
{
    const char *core = tr_blas_ensure_fast_kernel(argv);
    int info = info_flag(argc, argv);
    if (info >= 0)
        return info;
    tr_runtime rt = {0};
    if (argc >= 2 && !strcmp(argv[1], "--plan")) {
        int prc = plan_args(&argc, argv, &rt);
        if (prc)
            return prc;
    }
    if (argc < 2 || argv[1][0] == '-') {
        if (launcher_rank() == 0) {
            if (argc >= 2)
                fprintf(stderr, "trainer: unknown option '%s'\n\n", argv[1]);
            usage(stderr);
        }
        return TR_EXIT_USAGE;
    }

    tr_signals_install(); /* a Slurm signal during start-up stops at the first step */
    tr_world w;
    tr_comm_init(&argc, &argv, &w);
    rt.start_time = tr_wtime();
    /* jobs/launch.sh names a file here to tell a trainer that ran from a job step that
     * never started (srun returns 0 when every task fails to launch) */
    const char *started = getenv("TR_STARTED_FILE");
    if (started && *started && w.rank == 0) {
        FILE *f = fopen(started, "w");
        if (f)
            fclose(f);
    }
    rt.blas_core = core;

    tr_deck deck;
    int rc = tr_deck_load(&deck, argv[1], argc - 2, argv + 2);
    /* every rank parsed the same text; agree anyway so the message prints once */
    rc = tr_comm_agree(&w, rc, deck.errors);
    if (rc) {
        if (w.rank == 0 && deck.nerrors) /* (another rank's own deck: its message alone) */
            fprintf(stderr, "trainer: %d problem%s in the deck; `trainer --help-deck` lists every "
                            "key\n",
                    deck.nerrors, deck.nerrors == 1 ? "" : "s");
        tr_deck_free(&deck);
        tr_comm_finalize(&w);
        return rc;
    }

    rc = same_deck_everywhere(&deck, &w);
    if (rc) {
        tr_deck_free(&deck);
        tr_comm_finalize(&w);
        return rc;
    }

    rt.threads = choose_threads(&deck, w.local_size);
    /* a plan stands for one of --ranks-per-node ranks (else --ranks) on this node: its
     * threads are that rank's share, as the run's would be */
    rt.plan_threads =
        rt.plan_ranks
            ? choose_threads(&deck, rt.plan_ranks_per_node ? rt.plan_ranks_per_node : rt.plan_ranks)
            : rt.threads;
    tr_slurm_job job; /* job id, run directory, the layout against the allocation */
    rc = tr_slurm_job_setup(&job, &deck, &w, rt.threads);
    if (rc) {
        tr_deck_free(&deck);
        tr_comm_finalize(&w);
        return rc;
    }
    tr_cpu_backend_init(rt.threads);
    if (w.rank == 0 && !job.env.active) /* (under Slurm, its own check refused it) */
        warn_oversubscribed(&deck, &w, rt.threads);
    if (w.rank == 0) {
        printf("trainer %s: %d rank%s on %d node%s, %d thread%s per rank; %s\n", TR_VERSION,
               w.size, w.size == 1 ? "" : "s", w.node_count, w.node_count == 1 ? "" : "s",
               rt.threads, rt.threads == 1 ? "" : "s", tr_blas_describe());
        printf("deck %s\n", argv[1]);
        tr_slurm_job_print(&job, stdout);
        fflush(stdout);
    }
    rc = tr_train_run(&deck, &w, &rt);
    tr_deck_free(&deck);
    tr_comm_finalize(&w);
    return rc;
}
