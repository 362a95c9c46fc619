/* checkpoint.c: the checkpoint directory: file names, the list of checkpoints,
 * pruning, and the check that every rank sees the same directory. The files
 * themselves: checkpoint_write.c and checkpoint_read.c, on checkpoint_layout.c
 * (where a rank's elements are), checkpoint_catalogue.c (what the ranks agree on),
 * checkpoint_checksums.c and checkpoint_hdf5.c; see checkpoint.h. */
#include "core/dir_lock.h"
#include "io/checkpoint_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void tr_ckpt_path(char *buf, size_t len, const char *dir, long step)
{
    snprintf(buf, len, "%s/step_%08ld.h5", dir, step);
}

/* ---- directory ---------------------------------------------------------------- */

int ckpt_sync_path(const char *path, int dir)
{
    int fd = open(path, dir ? O_RDONLY | O_DIRECTORY : O_RDWR);
    if (fd < 0)
        return errno;
    int rc = fsync(fd) ? errno : 0;
    close(fd);
    return rc;
}

int tr_ckpt_link(const char *dir, long step, const char *name)
{
    char from[4096], to[4200], tmp[4300];
    tr_ckpt_path(from, sizeof from, dir, step);
    snprintf(to, sizeof to, "%s/%s", dir, name);
    snprintf(tmp, sizeof tmp, "%s.tmp", to);
    unlink(tmp); /* left by a run that stopped between the two calls below */
    int e = link(from, tmp) ? errno : 0;
    if (!e && rename(tmp, to))
        e = errno;
    if (!e)
        e = ckpt_sync_path(dir, 1);
    if (e)
        unlink(tmp);
    return e;
}

int tr_ckpt_point_last(const char *dir, long step)
{
    char target[64], to[4200], tmp[4300];
    snprintf(target, sizeof target, "step_%08ld.h5", step); /* relative: moves with DIR */
    snprintf(to, sizeof to, "%s/%s", dir, TR_CKPT_LAST);
    snprintf(tmp, sizeof tmp, "%s.tmp", to);
    unlink(tmp);
    int e = symlink(target, tmp) ? errno : 0;
    if (!e && rename(tmp, to))
        e = errno;
    if (e)
        unlink(tmp);
    return e;
}

/* A name exactly as tr_ckpt_path writes it: "step_+0000010.h5" or "step_10.h5" are
 * not checkpoints, or a prune could delete step_00000010.h5 on their account. */
static int parse_step(const char *name, long *step)
{
    char canon[64];
    long s;
    if (strncmp(name, "step_", 5) || name[5] < '0' || name[5] > '9' ||
        sscanf(name, "step_%ld", &s) != 1 || s < 0)
        return 0;
    snprintf(canon, sizeof canon, "step_%08ld.h5", s);
    if (strcmp(name, canon))
        return 0;
    *step = s;
    return 1;
}

long tr_ckpt_last_step(const char *dir)
{
    char link[4200], target[256];
    snprintf(link, sizeof link, "%s/%s", dir, TR_CKPT_LAST);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n <= 0)
        return -1;
    target[n] = '\0';
    long step;
    struct stat st;
    if (!parse_step(target, &step) || stat(link, &st) || !S_ISREG(st.st_mode))
        return -1;
    return step;
}

static int cmp_desc(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;
    return (x < y) - (x > y);
}

int tr_ckpt_list(const char *dir, long **steps)
{
    *steps = NULL;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    /* every one, however many: a directory lists in no particular order, so a list
     * cut at some count could miss the newest */
    int n = 0, cap = 0;
    long *list = NULL;
    struct dirent *e;
    while ((e = readdir(d))) {
        long s;
        if (!parse_step(e->d_name, &s))
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            long *grown = realloc(list, (size_t)cap * sizeof *list);
            if (!grown)
                tr_fatal(TR_EXIT_OSERR, "out of memory listing the checkpoints in %s", dir);
            list = grown;
        }
        list[n++] = s;
    }
    closedir(d);
    if (n)
        qsort(list, (size_t)n, sizeof *list, cmp_desc);
    *steps = list;
    return n;
}

/* Deletes the temporary files of writes that never finished (a killed run's: they
 * would count against the free space the next write checks for). */
static void remove_unfinished(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    char path[4096];
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if ((!strncmp(e->d_name, "step_", 5) || !strcmp(e->d_name, TR_CKPT_BEST ".tmp") ||
             !strcmp(e->d_name, TR_CKPT_LAST ".tmp")) &&
            len > 7 && !strcmp(e->d_name + len - 7, ".h5.tmp")) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
    }
    closedir(d);
}

void tr_ckpt_prune(const char *dir, int keep, long newest)
{
    long *steps;
    int n = tr_ckpt_list(dir, &steps);
    char path[4096];
    /* later steps than the one just written are not this run's: another run's in the
     * same directory (a model that resume skipped, resume = none); counting them
     * would delete the checkpoint just written */
    for (int i = 0, kept = 0; keep > 0 && i < n; i++) {
        if (steps[i] > newest || kept++ < keep)
            continue;
        tr_ckpt_path(path, sizeof path, dir, steps[i]);
        if (unlink(path) && errno != ENOENT)
            printf("warning: [checkpoint] keep = %d: cannot delete %s: %s; it stays, with the "
                   "newer ones\n",
                   keep, path, strerror(errno));
    }
    free(steps);
    remove_unfinished(dir);
}

/* ---- the directory every rank must see ------------------------------------------- */

/* Rank 0's file for the other ranks to read back: 0 or errno. One it could not fill (a
 * full disk) is deleted: the ranks stop there, before the unlink after their look,
 * and nothing else would ever remove it. */
static int write_probe(const char *path, int64_t token)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return errno;
    int e = fprintf(f, "%lld\n", (long long)token) < 0 ? errno : 0;
    if (fclose(f) && !e)
        e = errno;
    if (e)
        unlink(path);
    return e;
}

int tr_ckpt_dir_check(const char *dir, tr_group *g, char *err, size_t errlen)
{
    err[0] = '\0';
    int rank = tr_group_rank(g), code = 0;
    int64_t token = 0;
    char probe[4200], who[600];
    if (rank == 0) {
        /* a name and content only this start of this run knows */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        token = (int64_t)(((uint64_t)getpid() << 40) ^ ((uint64_t)ts.tv_sec << 20) ^
                          (uint64_t)ts.tv_nsec);
        snprintf(probe, sizeof probe, "%s/.trainer-probe-%016llx", dir, (unsigned long long)token);
        int e;
        if (mkdir(dir, 0775) && errno != EEXIST) {
            ckpt_fail(err, errlen, "cannot create the checkpoint directory '%s': %s", dir,
                      strerror(errno));
            code = TR_EXIT_IOERR;
        } else if (tr_dir_lock(dir, who, sizeof who)) {
            /* checkpoint.dir shared by two runs with run directories of their own */
            ckpt_fail(err, errlen,
                      "the checkpoint directory '%s' is in use by another run (%s): two runs "
                      "writing checkpoints in one directory would prune, resume from and "
                      "delete the unfinished writes of each other's; give this run a "
                      "checkpoint directory of its own (checkpoint.dir=..., or leave it empty "
                      "for <run dir>/checkpoints)",
                      dir, who);
            code = TR_EXIT_USAGE;
        } else if ((e = write_probe(probe, token))) {
            ckpt_fail(err, errlen, "cannot write in the checkpoint directory '%s': %s", dir,
                      strerror(e));
            code = TR_EXIT_IOERR;
        } else {
            remove_unfinished(dir); /* before this run writes any, and only its own */
        }
    }
    code = ckpt_agree(g, code, err, errlen);
    if (code)
        return code;
    tr_bcast(&token, 1, TR_I64, 0, g);
    snprintf(probe, sizeof probe, "%s/.trainer-probe-%016llx", dir, (unsigned long long)token);
    if (rank != 0) {
        long long seen = 0;
        FILE *f = fopen(probe, "r");
        int ok = f && fscanf(f, "%lld", &seen) == 1 && seen == (long long)token;
        if (!ok) {
            ckpt_fail(err, errlen,
                      "the checkpoint directory '%s' is not the same directory on every rank: "
                      "rank %d cannot %s the file rank 0 wrote there. Checkpoints are written "
                      "and read by all ranks together: put it on a file system every node "
                      "shares, not a node-local one such as /tmp",
                      dir, rank, f ? "read back" : "open");
            code = TR_EXIT_USAGE;
        }
        if (f)
            fclose(f);
    }
    code = ckpt_agree(g, code, err, errlen);
    if (rank == 0)
        unlink(probe); /* after every rank has looked */
    return code;
}
