/* support.c: fuzz.h's helpers, for both drivers. memfd_create is _GNU_SOURCE's,
 * which the build defines. */
#include "fuzz.h"

#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define SLOTS 4

static int g_fd[SLOTS] = {-1, -1, -1, -1};
static char g_path[SLOTS][64];
static int g_named[SLOTS], g_cleanup;

static void remove_files(void)
{
    for (int i = 0; i < SLOTS; i++)
        if (g_named[i])
            unlink(g_path[i]);
}

const char *fuzz_file(int slot, const uint8_t *data, size_t size)
{
    FUZZ_CHECK(slot >= 0 && slot < SLOTS, "slot %d", slot);
    if (g_fd[slot] < 0) {
        int fd = memfd_create("trainer-fuzz", 0);
        if (fd >= 0) {
            snprintf(g_path[slot], sizeof g_path[slot], "/proc/self/fd/%d", fd);
            if (access(g_path[slot], R_OK) != 0) { /* no /proc: a real file instead */
                close(fd);
                fd = -1;
            }
        }
        if (fd < 0) { /* a named file, removed at exit */
            const char *dir = getenv("TMPDIR");
            snprintf(g_path[slot], sizeof g_path[slot], "%.32s/trainer-fuzz-%d-%d",
                     dir && *dir ? dir : "/tmp", (int)getpid(), slot);
            fd = open(g_path[slot], O_RDWR | O_CREAT | O_TRUNC, 0600);
            FUZZ_CHECK(fd >= 0, "cannot create %s", g_path[slot]);
            g_named[slot] = 1;
            if (!g_cleanup++)
                atexit(remove_files);
        }
        g_fd[slot] = fd;
    }
    int fd = g_fd[slot];
    FUZZ_CHECK(ftruncate(fd, 0) == 0, "ftruncate");
    size_t done = 0;
    while (done < size) {
        ssize_t w = pwrite(fd, data + done, size - done, (off_t)done);
        FUZZ_CHECK(w > 0, "write of %zu bytes", size);
        done += (size_t)w;
    }
    return g_path[slot];
}

void fuzz_split(const uint8_t *data, size_t size, uint8_t sep, const uint8_t **a, size_t *na,
                const uint8_t **b, size_t *nb)
{
    const uint8_t *p = size ? memchr(data, sep, size) : NULL;
    *a = data;
    *na = p ? (size_t)(p - data) : size;
    *b = p ? p + 1 : data + size;
    *nb = p ? size - *na - 1 : 0;
}

char *fuzz_cstring(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    FUZZ_CHECK(s != NULL, "out of memory");
    if (size)
        memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

void fuzz_check_message(const char *err, size_t errlen, const char *what)
{
    FUZZ_CHECK(memchr(err, '\0', errlen) != NULL, "%s: message not terminated", what);
    FUZZ_CHECK(err[0] != '\0', "%s: failed without a message", what);
}
