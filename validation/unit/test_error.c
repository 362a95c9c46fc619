/* test_error.c: how tr_fatal ends a process (core/error.h), in child processes. On
 * the thread that installed the abort hook (MPI's thread: the library runs
 * MPI_THREAD_FUNNELED) it calls the hook, which ends the job. On any other thread
 * (the data prefetcher, an OpenMP worker) it must not call MPI: it ends the process
 * with _exit(code), running no atexit handlers under threads still at work, and the
 * launcher ends the other ranks. Without a hook (before MPI is up) it exits. Each
 * way the message names the rank (once known), the file and the line. */
#include "core/error.h"
#include "test_util.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define HOOK_CODE 99   /* the fake hook's exit code: "the hook ran" */
#define ATEXIT_CODE 98 /* an atexit handler's: "exit() ran the handlers" */

static noreturn void fake_hook(int code)
{
    fprintf(stderr, "hook(%d)\n", code);
    fflush(stderr);
    _exit(HOOK_CODE);
}

static void on_exit_handler(void) { _exit(ATEXIT_CODE); }

static void *fatal_thread(void *arg)
{
    (void)arg;
    tr_fatal(TR_EXIT_DATA, "boom from a thread %d", 7);
}

enum { MAIN_WITH_HOOK, THREAD_WITH_HOOK, NO_HOOK };

/* Runs the case in a child whose stderr goes to a file; returns its exit code and
 * leaves its stderr in err[]. */
static int run_child(int which, char *err, size_t n)
{
    char path[] = "/tmp/trainer_error.XXXXXX";
    int fd = mkstemp(path);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd, 2);
        atexit(on_exit_handler);
        if (which != NO_HOOK)
            tr_error_set_abort(fake_hook, 3);
        if (which == THREAD_WITH_HOOK) {
            pthread_t t;
            pthread_create(&t, NULL, fatal_thread, NULL);
            pthread_join(t, NULL);
            _exit(0); /* not reached */
        }
        tr_fatal(TR_EXIT_DATA, "boom from main %d", 7);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    ssize_t got = pread(fd, err, n - 1, 0);
    err[got > 0 ? got : 0] = '\0';
    close(fd);
    unlink(path);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int main(void)
{
    char err[4096];
    int code = run_child(MAIN_WITH_HOOK, err, sizeof err);
    CHECK(code == HOOK_CODE, "main thread: exit %d, want the hook's %d", code, HOOK_CODE);
    CHECK(strstr(err, "[rank 3] ") && strstr(err, "test_error.c:") &&
              strstr(err, ": boom from main 7\n") && strstr(err, "hook(65)"),
          "main thread: stderr '%s'", err);

    code = run_child(THREAD_WITH_HOOK, err, sizeof err);
    CHECK(code == TR_EXIT_DATA, "other thread: exit %d, want %d (no hook, no atexit)", code,
          TR_EXIT_DATA);
    CHECK(strstr(err, "[rank 3] ") && strstr(err, ": boom from a thread 7\n") &&
              !strstr(err, "hook("),
          "other thread: stderr '%s'", err);

    code = run_child(NO_HOOK, err, sizeof err);
    CHECK(code == ATEXIT_CODE, "no hook: exit %d, want exit() with its handlers (%d)", code,
          ATEXIT_CODE);
    CHECK(!strstr(err, "[rank") && strstr(err, "test_error.c:") &&
              strstr(err, ": boom from main 7\n"),
          "no hook: stderr '%s'", err);
    return tr_test_finish();
}
