/* checkpoint.c: the checkpoint directory: file names, the list of checkpoints, and
 * pruning. The files themselves: checkpoint_write.c and checkpoint_read.c, on
 * checkpoint_layout.c (where a rank's elements are), checkpoint_catalogue.c (what the
 * ranks agree on), checkpoint_checksums.c and checkpoint_hdf5.c; see checkpoint.h. */
#include "io/checkpoint.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void tr_ckpt_path(char *buf, size_t len, const char *dir, long step)
{
    snprintf(buf, len, "%s/step_%08ld.h5", dir, step);
}

/* ---- directory ---------------------------------------------------------------- */

static int parse_step(const char *name, long *step)
{
    char tail[8];
    long s;
    if (sscanf(name, "step_%ld.h5%7s", &s, tail) == 1 && s >= 0 &&
        strlen(name) >= strlen("step_00000000.h5")) {
        *step = s;
        return 1;
    }
    return 0;
}

static int cmp_desc(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;
    return (x < y) - (x > y);
}

int tr_ckpt_list(const char *dir, long *steps, int max)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < max) {
        long s;
        if (parse_step(e->d_name, &s))
            steps[n++] = s;
    }
    closedir(d);
    qsort(steps, (size_t)n, sizeof *steps, cmp_desc);
    return n;
}

void tr_ckpt_prune(const char *dir, int keep)
{
    long steps[4096];
    int n = tr_ckpt_list(dir, steps, 4096);
    char path[4096];
    for (int i = keep; keep > 0 && i < n; i++) {
        tr_ckpt_path(path, sizeof path, dir, steps[i]);
        unlink(path);
    }
    /* temporary files of writes that never finished */
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (!strncmp(e->d_name, "step_", 5) && len > 7 && !strcmp(e->d_name + len - 7, ".h5.tmp")) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
    }
    closedir(d);
}
