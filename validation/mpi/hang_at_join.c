/* hang_at_join.c: a preload library for hang_watchdog.sh. In the rank whose
 * OMPI_COMM_WORLD_RANK equals TR_TEST_HANG_RANK, pthread_join never returns, as a
 * thread stuck on a dead file system or a GPU stuck in cudaFree leaves a rank at the
 * end of a run; every other process (mpirun included) joins as usual. The trainer's
 * one join before its watchdog stops is the data loader's, at shutdown, so the test
 * sees whether the watchdog still watches there, without a test hook in the trainer. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int join_fn(pthread_t, void **);

int pthread_join(pthread_t thread, void **result)
{
    const char *want = getenv("TR_TEST_HANG_RANK"), *rank = getenv("OMPI_COMM_WORLD_RANK");
    if (want && rank && strcmp(want, rank) == 0)
        for (;;)
            pause();
    join_fn *real = (join_fn *)dlsym(RTLD_NEXT, "pthread_join");
    return real(thread, result);
}
