/* dir_lock.c: an flock on DIR/.lock held for the life of the process (dir_lock.h). */
#include "dir_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* The locks this process holds: flock conflicts between two descriptions of one file
 * even in one process, so a directory named twice (checkpoint.dir = the run
 * directory) must be recognised, by device and inode, not locked again. */
enum { MAX_HELD = 8 };
static struct {
    dev_t dev;
    ino_t ino;
} held[MAX_HELD];
static int nheld;

static int already_held(int fd)
{
    struct stat st;
    if (fstat(fd, &st))
        return 0;
    for (int i = 0; i < nheld; i++)
        if (held[i].dev == st.st_dev && held[i].ino == st.st_ino)
            return 1;
    return 0;
}

static void remember(int fd)
{
    struct stat st;
    if (nheld < MAX_HELD && fstat(fd, &st) == 0) {
        held[nheld].dev = st.st_dev;
        held[nheld].ino = st.st_ino;
        nheld++;
    }
}

/* "Slurm job 123_4, pid 567 on node01\n" */
static int holder_label(char *who, size_t len)
{
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    const char *job = getenv("SLURM_JOB_ID");
    const char *arr = getenv("SLURM_ARRAY_JOB_ID"), *task = getenv("SLURM_ARRAY_TASK_ID");
    int n;
    if (arr && *arr && task && *task)
        n = snprintf(who, len, "Slurm job %s_%s, ", arr, task);
    else if (job && *job)
        n = snprintf(who, len, "Slurm job %s, ", job);
    else
        n = 0;
    n += snprintf(who + n, len - (size_t)n, "pid %ld on %s\n", (long)getpid(), host);
    return n;
}

int tr_dir_lock(const char *dir, char *holder, size_t holder_len)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/.lock", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0664);
    if (fd < 0)
        return 0;
    if (already_held(fd)) {
        close(fd);
        return 0;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
        char who[600];
        int n = holder_label(who, sizeof who);
        if (ftruncate(fd, 0) == 0 && pwrite(fd, who, (size_t)n, 0) < 0) {
            /* only a label for the message of a second run: not worth failing */
        }
        remember(fd);
        return 0; /* fd stays open: closing it would drop the lock */
    }
    int e = errno;
    char who[600] = "";
    ssize_t k = pread(fd, who, sizeof who - 1, 0);
    close(fd);
    if (e != EWOULDBLOCK && e != EAGAIN)
        return 0; /* no flock on this file system: unguarded */
    who[k > 0 ? k : 0] = '\0';
    who[strcspn(who, "\n")] = '\0';
    snprintf(holder, holder_len, "%s", *who ? who : "its holder unknown");
    return 1;
}
