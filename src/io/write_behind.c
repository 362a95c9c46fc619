/* write_behind.c: a bounded share of a file dirty at once (write_behind.h). */
#include "io/write_behind.h"

#include <fcntl.h>
#include <unistd.h>

void tr_write_behind_open(tr_write_behind *wb, const char *path)
{
    *wb = (tr_write_behind){.fd = open(path, O_WRONLY | O_CLOEXEC), .own = 1};
}

void tr_write_behind_fd(tr_write_behind *wb, int fd) { *wb = (tr_write_behind){.fd = fd}; }

void tr_write_behind_wrote(tr_write_behind *wb, uint64_t bytes)
{
    wb->window += bytes;
    if (wb->fd < 0 || wb->window < TR_WRITE_BEHIND_BYTES)
        return;
    wb->window = 0;
    /* the whole file (offset 0, length 0): the writer's pieces need not be in order.
     * WAIT_BEFORE waits for the pages under write-back, those of the window before;
     * DONTNEED drops clean pages, which the cgroup would otherwise have to reclaim
     * itself; WRITE starts the write-back of this window without waiting for it */
#ifdef SYNC_FILE_RANGE_WRITE
    (void)sync_file_range(wb->fd, 0, 0, SYNC_FILE_RANGE_WAIT_BEFORE);
#endif
    (void)posix_fadvise(wb->fd, 0, 0, POSIX_FADV_DONTNEED);
#ifdef SYNC_FILE_RANGE_WRITE
    (void)sync_file_range(wb->fd, 0, 0, SYNC_FILE_RANGE_WRITE);
#endif
}

void tr_write_behind_close(tr_write_behind *wb)
{
    if (wb->own && wb->fd >= 0)
        close(wb->fd);
    wb->fd = -1;
}
