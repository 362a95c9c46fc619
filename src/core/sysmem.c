/* sysmem.c: available memory from /proc/meminfo and the memory cgroup; the address
 * space from RLIMIT_AS and /proc/self/status. */
#include "sysmem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* The first "KEY value" line of a file such as memory.stat; -1 when absent. */
static long long read_key(const char *path, const char *key)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[256], name[128];
    long long v, found = -1;
    while (found < 0 && fgets(line, sizeof line, f))
        if (sscanf(line, "%127s %lld", name, &v) == 2 && !strcmp(name, key))
            found = v;
    fclose(f);
    return found;
}

/* A file holding one number ("max", cgroup v2's "no limit", and anything else that
 * is not a number give -1). */
static long long read_number(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    long long v = -1;
    if (fscanf(f, "%lld", &v) != 1)
        v = -1;
    fclose(f);
    return v;
}

/* Where this process's memory cgroup is in the file system: the mount point of the
 * cgroup2 hierarchy (v2 = 1) or of the v1 hierarchy with the memory controller (v2 =
 * 0) from mountinfo (/proc/self/mountinfo), joined with the process's path in it from
 * proc_cgroup (/proc/self/cgroup), less the mount's own root, as inside a container.
 * 0 if none. */
static int memory_cgroup(const char *proc_cgroup, const char *mountinfo, char *dir, size_t len,
                         int *v2)
{
    char line[4096], rel[2048] = "", mnt[1024] = "", root[1024] = "";
    int found = 0;
    FILE *f = fopen(proc_cgroup, "r");
    if (!f)
        return 0;
    while (fgets(line, sizeof line, f)) { /* ID:controllers:path */
        char *a = strchr(line, ':'), *b = a ? strchr(a + 1, ':') : NULL;
        if (!b)
            continue;
        *a = *b = '\0'; /* line: the ID, a + 1: the controllers, b + 1: the path */
        b[1 + strcspn(b + 1, "\n")] = '\0';
        int is_v2 = !strcmp(line, "0") && a[1] == '\0';
        int is_mem = 0;
        for (char *c = strtok(a + 1, ","); c; c = strtok(NULL, ","))
            is_mem |= !strcmp(c, "memory");
        if (is_mem || (is_v2 && !found)) { /* v1's memory controller wins */
            snprintf(rel, sizeof rel, "%s", b + 1);
            *v2 = !is_mem;
            found = 1 + is_mem;
        }
    }
    fclose(f);
    if (!found || !(f = fopen(mountinfo, "r")))
        return 0;
    while (fgets(line, sizeof line, f)) {
        /* ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS ... - FSTYPE SOURCE SUPEROPTIONS */
        char r[1024], m[1024], type[64], super[1024];
        char *dash = strstr(line, " - ");
        if (!dash || sscanf(line, "%*s %*s %*s %1023s %1023s", r, m) != 2 ||
            sscanf(dash + 3, "%63s %*s %1023s", type, super) != 2)
            continue;
        int match =
            *v2 ? !strcmp(type, "cgroup2") : !strcmp(type, "cgroup") && strstr(super, "memory");
        if (match) {
            snprintf(mnt, sizeof mnt, "%s", m);
            snprintf(root, sizeof root, "%s", r);
            break;
        }
    }
    fclose(f);
    if (!mnt[0])
        return 0;
    const char *p = rel;
    size_t n = strlen(root);
    if (strcmp(root, "/") && !strncmp(rel, root, n)) /* a container's view */
        p = rel + n;
    snprintf(dir, len, "%s%s", mnt, p);
    return 1;
}

size_t tr_cgroup_room(const char *proc_cgroup, const char *mountinfo)
{
    char dir[4096], path[4200];
    int v2 = 0;
    if (!memory_cgroup(proc_cgroup, mountinfo, dir, sizeof dir, &v2))
        return 0;
    size_t room = 0;
    for (;;) {
        snprintf(path, sizeof path, "%s/%s", dir, v2 ? "memory.max" : "memory.limit_in_bytes");
        long long limit = read_number(path);
        /* v1's "unlimited" is the largest page-aligned long */
        if (limit > 0 && limit < (1LL << 60)) {
            snprintf(path, sizeof path, "%s/%s", dir,
                     v2 ? "memory.current" : "memory.usage_in_bytes");
            long long used = read_number(path);
            snprintf(path, sizeof path, "%s/memory.stat", dir);
            long long cache = read_key(path, v2 ? "inactive_file" : "total_inactive_file");
            if (used >= 0) {
                used -= cache > 0 && cache < used ? cache : 0;
                size_t left = limit > used ? (size_t)(limit - used) : 1;
                if (room == 0 || left < room)
                    room = left;
            }
        }
        char *slash = strrchr(dir, '/');
        if (!slash || slash == dir)
            break;
        *slash = '\0';
        snprintf(path, sizeof path, "%s/%s", dir, v2 ? "cgroup.controllers" : "memory.stat");
        FILE *f = fopen(path, "r"); /* left the hierarchy: stop */
        if (!f)
            break;
        fclose(f);
    }
    return room;
}

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
    size_t room = tr_cgroup_room("/proc/self/cgroup", "/proc/self/mountinfo");
    if (room && (avail == 0 || room < avail))
        avail = room;
    return avail;
}

size_t tr_mapped_bytes(const char *status)
{
    long long kib = read_key(status, "VmSize:");
    return kib > 0 ? (size_t)kib * 1024 : 0;
}

size_t tr_address_space_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) || rl.rlim_cur == RLIM_INFINITY)
        return 0;
    return (size_t)rl.rlim_cur;
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
