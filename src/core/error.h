/* error.h: error reporting and exit codes shared by every layer.
 *
 * Two kinds of failure exist and they are handled differently:
 *  - Input errors (bad deck, missing data, impossible layout) are found by every
 *    rank the same way or agreed on collectively; they are reported once, by one
 *    rank, and every rank exits with the same code. See tr_status in comm.h.
 *  - Run-time faults (out of memory, a failed MPI or I/O call) happen on one rank;
 *    tr_fatal names the rank, file and line and ends the whole job, never just one
 *    rank, so nothing hangs.
 * This file knows nothing of MPI: the abort hook is installed by comm at start-up. */
#ifndef TR_ERROR_H
#define TR_ERROR_H

#include <stddef.h>

/* C and C++ (the CUDA backend's .cu files include this too) */
#ifdef __cplusplus
#define TR_NORETURN [[noreturn]]
extern "C" {
#else
#include <stdnoreturn.h>
#define TR_NORETURN noreturn
#endif

/* Exit codes (documented in the README). Values follow sysexits.h so shells and
 * Slurm scripts can tell the classes apart. Append-only. */
enum {
    TR_EXIT_OK = 0,
    TR_EXIT_USAGE = 64,      /* bad command line, deck key or layout */
    TR_EXIT_DATA = 65,       /* data file exists but is malformed */
    TR_EXIT_NOINPUT = 66,    /* data file missing or unreadable */
    TR_EXIT_SOFTWARE = 70,   /* internal error: a bug */
    TR_EXIT_OSERR = 71,      /* out of memory, thread creation failed */
    TR_EXIT_IOERR = 74,      /* cannot write the run directory or a checkpoint */
    TR_EXIT_TEMPFAIL = 75,   /* checkpointed on a signal: resubmit me */
};

/* Fatal run-time error on this rank: prints "[rank R] file:line: message" and ends
 * the whole job through the installed abort hook (MPI_Abort once comm is up); from
 * any other thread than the hook's, by ending this process with _exit(code), which
 * the launcher turns into the end of the job. */
TR_NORETURN void tr_fatal_at(const char *file, int line, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define tr_fatal(code, ...) tr_fatal_at(__FILE__, __LINE__, (code), __VA_ARGS__)

/* Allocation that cannot fail silently: on failure it reports the size and the
 * purpose and ends the job with TR_EXIT_OSERR. Memory is zeroed and 64-byte aligned;
 * blocks of 32 MiB and more are mapped as transparent huge pages (alloc.c). Free with
 * tr_free only. */
void *tr_alloc_at(const char *file, int line, size_t bytes, const char *what);
#define tr_alloc(bytes, what) tr_alloc_at(__FILE__, __LINE__, (bytes), (what))
void tr_free(void *p);

/* Before a rank of a job ends the job (an abort, or _exit off MPI's thread): a
 * pause that lets the launcher forward what the rank wrote (error.c). */
void tr_error_let_output_drain(void);

/* Installed by comm from the thread that calls MPI: how to end all ranks, and this
 * rank's number for messages. */
typedef void (*tr_abort_fn)(int code); /* must not return */
void tr_error_set_abort(tr_abort_fn abort_fn, int rank);
int tr_error_rank(void);

#ifdef __cplusplus
}
#endif

#endif
