/* test_sysmem.c: the room under a job's memory cgroup limit (core/sysmem.h), on fake
 * /proc/self/cgroup and /proc/self/mountinfo files and a fake cgroup tree in a
 * temporary directory: cgroup v2 (a limit on the job, none on its step, the
 * inactive file cache not counted), v1's memory hierarchy beside a v2 mount
 * (Debian's hybrid layout), a container's cgroup root, usage past the limit, and no
 * limit at all; the address space mapped, from a status file. What a real cgroup
 * does is checked by mpi.bad_input and e2e.memory_cgroup. */
#include "core/sysmem.h"
#include "test_util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char root[256];

/* writes text to root/rel (printf-style), making nothing but the file */
static void put(const char *rel, const char *fmt, ...)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        exit(1);
    }
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fclose(f);
}

static void dir(const char *rel)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    if (mkdir(path, 0700)) {
        perror(path);
        exit(1);
    }
}

static size_t room(void)
{
    char cg[512], mi[512];
    snprintf(cg, sizeof cg, "%s/proc_cgroup", root);
    snprintf(mi, sizeof mi, "%s/mountinfo", root);
    return tr_cgroup_room(cg, mi);
}

int main(void)
{
    snprintf(root, sizeof root, "/tmp/test_sysmem.XXXXXX");
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }

    /* v2: the job limited to 1,000,000 bytes, using 300,000 of which 100,000 are
     * inactive file cache; its step unlimited and using less */
    dir("v2");
    put("v2/cgroup.controllers", "memory pids\n");
    dir("v2/job");
    put("v2/job/cgroup.controllers", "memory\n");
    put("v2/job/memory.max", "1000000\n");
    put("v2/job/memory.current", "300000\n");
    put("v2/job/memory.stat", "anon 150000\nfile 150000\ninactive_file 100000\n");
    dir("v2/job/step");
    put("v2/job/step/cgroup.controllers", "memory\n");
    put("v2/job/step/memory.max", "max\n");
    put("v2/job/step/memory.current", "250000\n");
    put("v2/job/step/memory.stat", "inactive_file 0\n");
    put("proc_cgroup", "0::/job/step\n");
    put("mountinfo",
        "22 1 0:21 / /proc rw,nosuid - proc proc rw\n"
        "30 22 0:27 / %s/v2 rw,nosuid,nodev shared:9 - cgroup2 cgroup2 rw,nsdelegate\n",
        root);
    CHECK(room() == 800000, "v2: %zu, expected 1000000 - (300000 - 100000)", room());

    /* a tighter limit on the step wins */
    put("v2/job/step/memory.max", "400000\n");
    CHECK(room() == 150000, "v2, step limited: %zu, expected 400000 - 250000", room());

    /* usage past the limit (reclaim pending): no room, but not "no limit" */
    put("v2/job/step/memory.max", "200000\n");
    CHECK(room() == 1, "v2, usage past the limit: %zu, expected 1", room());
    put("v2/job/step/memory.max", "max\n");

    /* a container's view: the mount's root is the job's cgroup */
    put("mountinfo", "30 22 0:27 /job %s/v2/job rw - cgroup2 cgroup2 rw\n", root);
    CHECK(room() == 800000, "v2 in a container: %zu, expected 800000", room());

    /* no limit anywhere */
    put("v2/job/memory.max", "max\n");
    CHECK(room() == 0, "v2 without a limit: %zu, expected 0", room());

    /* v1's memory hierarchy beside a v2 mount (hybrid): v1's memory controller is the
     * one that limits; its unlimited root reads as a huge number */
    dir("m");
    put("m/memory.stat", "total_inactive_file 0\n");
    put("m/memory.limit_in_bytes", "9223372036854771712\n");
    put("m/memory.usage_in_bytes", "7000000\n");
    dir("m/a");
    put("m/a/memory.limit_in_bytes", "5000000\n");
    put("m/a/memory.usage_in_bytes", "2000000\n");
    put("m/a/memory.stat", "cache 600000\ninactive_file 1\ntotal_inactive_file 500000\n");
    put("proc_cgroup", "5:pids:/x\n4:memory:/a\n3:cpu,cpuacct:/\n0::/job\n");
    put("mountinfo",
        "30 22 0:27 / %s/v2 rw - cgroup2 cgroup2 rw\n"
        "31 22 0:28 / %s/cpu rw - cgroup cgroup rw,cpu,cpuacct\n"
        "32 22 0:29 / %s/m rw,relatime shared:12 - cgroup cgroup rw,memory\n",
        root, root, root);
    put("v2/job/memory.max", "100\n"); /* v2 holds no memory controller here */
    CHECK(room() == 3500000, "v1: %zu, expected 5000000 - (2000000 - 500000)", room());

    /* nothing mounted where the files say: no figure */
    put("mountinfo", "22 1 0:21 / /proc rw - proc proc rw\n");
    CHECK(room() == 0, "no cgroup file system: %zu, expected 0", room());

    /* the address space mapped now: VmSize of a status file, in KiB; not VmPeak or
     * VmSizeX, which a key's prefix would also match */
    char status[512];
    snprintf(status, sizeof status, "%s/status", root);
    put("status",
        "Name:\ttrainer\nVmPeak:\t  900000 kB\nVmSize:\t  436212 kB\nVmRSS:\t 32404 kB\n");
    CHECK(tr_mapped_bytes(status) == (size_t)436212 * 1024, "VmSize: %zu, expected 436212 KiB",
          tr_mapped_bytes(status));
    put("status", "Name:\ttrainer\nVmRSS:\t 32404 kB\n");
    CHECK(tr_mapped_bytes(status) == 0, "no VmSize: %zu, expected 0", tr_mapped_bytes(status));
    CHECK(tr_mapped_bytes("/proc/self/status") > 0, "this process maps nothing?");

    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd))
        fprintf(stderr, "could not remove %s\n", root);
    return tr_test_finish();
}
