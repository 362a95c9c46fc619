/* sysmem.c: available memory from /proc/meminfo and RLIMIT_AS. */
#include "sysmem.h"

#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

size_t tr_mem_available(void)
{
    size_t avail = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        unsigned long long kib;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1) {
                avail = (size_t)kib * 1024;
                break;
            }
        fclose(f);
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        (avail == 0 || rl.rlim_cur < avail))
        avail = (size_t)rl.rlim_cur;
    return avail;
}

const char *tr_bytes_str(char *buf, size_t len, double bytes)
{
    const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024 && u < 4) {
        bytes /= 1024;
        u++;
    }
    snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", bytes, unit[u]);
    return buf;
}
