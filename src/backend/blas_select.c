/* blas_select.c: detect OpenBLAS's generic fallback kernel and re-exec with the
 * right OPENBLAS_CORETYPE for the CPU's vector extensions. */
#include "blas_select.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

char *openblas_get_corename(void);
char *openblas_get_config(void);

static char g_desc[512];

/* Kernels OpenBLAS falls back to when it does not recognise the CPU. */
static int is_generic(const char *core)
{
    static const char *generic[] = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem",
                                    "Atom", "Katmai", "Northwood", "Banias", NULL};
    for (int i = 0; generic[i]; i++)
        if (!strcasecmp(core, generic[i]))
            return 1;
    return 0;
}

static const char *best_for_cpu(void)
{
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return "Haswell";
    if (__builtin_cpu_supports("avx"))
        return "Sandybridge";
    return NULL;
}

const char *tr_blas_ensure_fast_kernel(char **argv)
{
    const char *core = openblas_get_corename();
    const char *best = best_for_cpu();
    const char *env = getenv("OPENBLAS_CORETYPE");
    /* set by our own re-exec: the kernel OpenBLAS had picked before it */
    const char *was = getenv("TRAINER_BLAS_REEXEC");
    int reexeced = was != NULL;
    if (is_generic(core) && best && !reexeced) {
        /* the user's explicit OPENBLAS_CORETYPE is kept unless it led to the fallback */
        setenv("OPENBLAS_CORETYPE", best, 1);
        setenv("TRAINER_BLAS_REEXEC", core, 1);
        execv("/proc/self/exe", argv);
        /* exec failed: carry on slowly, but say so */
        snprintf(g_desc, sizeof g_desc,
                 "OpenBLAS kernel %s (generic fallback; re-exec with OPENBLAS_CORETYPE=%s "
                 "failed: set it in the environment for a ~5x faster BLAS)",
                 core, best);
        return core;
    }
    if (is_generic(core) && best)
        snprintf(g_desc, sizeof g_desc,
                 "OpenBLAS kernel %s: still the generic fallback with OPENBLAS_CORETYPE=%s; "
                 "matrix products will be slow",
                 core, env ? env : "");
    else if (reexeced)
        snprintf(g_desc, sizeof g_desc,
                 "OpenBLAS kernel %s (set by the trainer: OpenBLAS had picked its generic %s "
                 "kernel for this CPU)",
                 core, was);
    else
        snprintf(g_desc, sizeof g_desc, "OpenBLAS kernel %s%s%s", core,
                 env ? ", OPENBLAS_CORETYPE=" : "", env ? env : "");
    /* children (tests launching tests) should decide afresh */
    unsetenv("TRAINER_BLAS_REEXEC");
    return core;
}

const char *tr_blas_describe(void) { return g_desc; }
