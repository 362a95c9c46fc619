/* dir_lock.h: one run at a time in a directory. Two runs in one run or checkpoint
 * directory (the tasks of a Slurm job array with a deck that names the directory, a
 * second submission while the first runs) would overwrite each other's files, and one
 * would resume from, prune or delete the unfinished checkpoint of the other. */
#ifndef TR_DIR_LOCK_H
#define TR_DIR_LOCK_H

#include <stddef.h>

/* Takes an flock on DIR/.lock for the life of the process (the kernel drops it when
 * the process ends, however it ends: no stale lock after a crash or SIGKILL) and
 * writes into it who holds it (Slurm job, pid, host). Returns 0 when this process
 * holds it, already held it (the same directory named twice) or cannot guard the
 * directory (no flock on its file system, no lock file: an unwritable directory is
 * for the caller's own write to report); 1 when another process holds it, its label
 * in holder ("its holder unknown" where the file says nothing). */
int tr_dir_lock(const char *dir, char *holder, size_t holder_len);

#endif
