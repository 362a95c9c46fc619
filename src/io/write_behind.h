/* write_behind.h: a large file written with a bounded amount of it dirty in the
 * page cache at once. The kernel charges a file's dirty pages to the memory cgroup of
 * the process that wrote them (a batch job's: Slurm's --mem), and it cannot reclaim
 * them until they reach the disk: a checkpoint written whole before its sync had all
 * of it dirty at once (192 MiB dirty or under write-back in the writer's cgroup
 * during a 184 MiB write; 37 to 53 MiB with this), which pushed a rank whose limit
 * its plan fitted over that limit, to be killed inside the write. */
#ifndef TR_WRITE_BEHIND_H
#define TR_WRITE_BEHIND_H

#include <stdint.h>

/* The most a writer hands the kernel in one call, and the bytes after which it
 * starts their write-back: at most about twice this is dirty or under write-back at
 * once (the window being written and the one before, still going to the disk). */
#define TR_WRITE_BEHIND_BYTES ((uint64_t)16 << 20)

typedef struct tr_write_behind {
    int fd;          /* the file (-1: nothing to do) */
    int own;         /* fd was opened by tr_write_behind_open, and is closed with it */
    uint64_t window; /* bytes written since the last write-back started */
} tr_write_behind;

/* On the file that another layer writes (MPI-IO): a descriptor of its own, which
 * names the same pages. Where the file cannot be opened, the calls do nothing. */
void tr_write_behind_open(tr_write_behind *wb, const char *path);
/* On a descriptor the caller writes through and closes itself. */
void tr_write_behind_fd(tr_write_behind *wb, int fd);
/* After `bytes` more of the file were written: once a window's worth is, waits for
 * the write-back started at the window before, drops those pages (clean now) from
 * the cache, and starts the write-back of what is dirty. Hints only: where the file
 * system does not take them, the data is written as before and the caller's own
 * sync makes it durable. */
void tr_write_behind_wrote(tr_write_behind *wb, uint64_t bytes);
void tr_write_behind_close(tr_write_behind *wb);

#endif
