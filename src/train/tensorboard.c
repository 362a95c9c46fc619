/* tensorboard.c: TensorBoard event files (see tensorboard.h). The few protobuf
 * messages are encoded by hand (field numbers of tensorboard/compat/proto's
 * event.proto and summary.proto):
 *   Event      { double wall_time = 1; int64 step = 2; string file_version = 3;
 *                Summary summary = 5; SessionLog session_log = 7; }
 *   Summary    { repeated Value value = 1; }
 *   Value      { string tag = 1; float simple_value = 2; }
 *   SessionLog { SessionStatus status = 1; }  START = 1 */
#include "tensorboard.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

struct tr_tb {
    FILE *f;
    char path[4200];
    long tokens_per_sample; /* 0: not a language model */
    int loss_scaled, failed;
};

uint32_t tr_crc32c(const void *data, size_t n)
{
    static uint32_t table[256];
    static int ready; /* filled on first use; rank 0's main thread only */
    if (!ready) {
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++)
                c = c & 1 ? 0x82F63B78u ^ (c >> 1) : c >> 1;
            table[i] = c;
        }
        ready = 1;
    }
    const uint8_t *p = data;
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++)
        c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

static uint32_t masked(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u; }

/* A protobuf message being encoded into a fixed buffer. */
typedef struct pb {
    uint8_t b[2048];
    size_t n;
} pb;

static void put_byte(pb *m, uint8_t v)
{
    if (m->n < sizeof m->b)
        m->b[m->n] = v;
    m->n++; /* an overflow shows as n > sizeof b, checked before use */
}

static void put_varint(pb *m, uint64_t v)
{
    for (; v >= 0x80; v >>= 7)
        put_byte(m, (uint8_t)(v | 0x80));
    put_byte(m, (uint8_t)v);
}

static void put_fixed(pb *m, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        put_byte(m, (uint8_t)(v >> (8 * i)));
}

static void put_bytes(pb *m, int field, const void *p, size_t n)
{
    put_varint(m, (uint64_t)field << 3 | 2);
    put_varint(m, n);
    for (size_t i = 0; i < n; i++)
        put_byte(m, ((const uint8_t *)p)[i]);
}

static void put_double(pb *m, int field, double v)
{
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    put_varint(m, (uint64_t)field << 3 | 1);
    put_fixed(m, bits, 8);
}

/* An Event's wall_time and step; the caller adds one `what`. */
static void event_head(pb *e, long step)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    e->n = 0;
    put_double(e, 1, (double)tv.tv_sec + 1e-6 * (double)tv.tv_usec);
    put_varint(e, 2 << 3);
    put_varint(e, (uint64_t)step);
}

static void write_record(tr_tb *tb, const pb *e)
{
    if (tb->failed)
        return;
    uint8_t len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (uint8_t)((uint64_t)e->n >> (8 * i));
    uint32_t crcs[2] = {masked(tr_crc32c(len, 8)), masked(tr_crc32c(e->b, e->n))};
    uint8_t c[2][4];
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 4; i++)
            c[k][i] = (uint8_t)(crcs[k] >> (8 * i));
    if (e->n > sizeof e->b || fwrite(len, 8, 1, tb->f) != 1 || fwrite(c[0], 4, 1, tb->f) != 1 ||
        fwrite(e->b, e->n, 1, tb->f) != 1 || fwrite(c[1], 4, 1, tb->f) != 1 || fflush(tb->f)) {
        fprintf(stderr,
                "warning: cannot write %s: %s; TensorBoard's curves stop here "
                "(metrics.csv goes on)\n",
                tb->path, e->n > sizeof e->b ? "event too large" : strerror(errno));
        tb->failed = 1;
    }
}

/* The seconds in a new session's file name: now, or one past the newest event file
 * already in sub where that is not earlier. TensorBoard reads a run's files in name
 * order, and each session's START drops the later steps of those read before it, so a
 * session's file must sort after the earlier sessions' files. Within one second the
 * host and pid decide, as text (10012 before 9987, as a pid wraps); a clock behind the
 * one an earlier session ran under (another node's, one set back) sorts it first. */
static long long name_seconds(const char *sub, long long now)
{
    DIR *d = opendir(sub);
    if (!d)
        return now;
    long long newest = -1, s;
    const struct dirent *e;
    while ((e = readdir(d)))
        if (sscanf(e->d_name, "events.out.tfevents.%lld.", &s) == 1 && s > newest)
            newest = s;
    closedir(d);
    return newest >= now ? newest + 1 : now;
}

tr_tb *tr_tb_open(const char *dir, long first_step, long tokens_per_sample, int loss_scaled)
{
    char sub[4096], host[256] = "host";
    snprintf(sub, sizeof sub, "%s/tensorboard", dir);
    if (mkdir(sub, 0777) != 0 && errno != EEXIST)
        return NULL;
    tr_tb *tb = calloc(1, sizeof *tb);
    if (!tb)
        return NULL;
    gethostname(host, sizeof host - 1);
    struct timeval tv;
    gettimeofday(&tv, NULL);
    snprintf(tb->path, sizeof tb->path, "%s/events.out.tfevents.%lld.%s.%d", sub,
             name_seconds(sub, (long long)tv.tv_sec), host, (int)getpid());
    tb->f = fopen(tb->path, "wb");
    if (!tb->f) {
        int e = errno;
        free(tb);
        errno = e;
        return NULL;
    }
    tb->tokens_per_sample = tokens_per_sample, tb->loss_scaled = loss_scaled;
    pb e;
    event_head(&e, 0);
    put_bytes(&e, 3, "brain.Event:2", 13);
    write_record(tb, &e);
    pb log = {.n = 0};
    put_varint(&log, 1 << 3);
    put_varint(&log, 1); /* START */
    event_head(&e, first_step);
    put_bytes(&e, 7, log.b, log.n);
    write_record(tb, &e);
    if (tb->failed) {
        tr_tb_close(tb);
        errno = EIO;
        return NULL;
    }
    return tb;
}

/* One Summary.Value into the summary being built. */
static void scalar(pb *s, const char *phase, const char *name, double v)
{
    char tag[64];
    int n = snprintf(tag, sizeof tag, "%s/%s", phase, name);
    pb val = {.n = 0};
    put_bytes(&val, 1, tag, (size_t)n);
    float f = (float)v;
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    put_varint(&val, 2 << 3 | 5);
    put_fixed(&val, bits, 4);
    put_bytes(s, 1, val.b, val.n);
}

void tr_tb_row(tr_tb *tb, const tr_metrics_row *r)
{
    if (!tb)
        return;
    pb s = {.n = 0}, e;
    int train = !strcmp(r->phase, "train");
    scalar(&s, r->phase, "loss", r->loss);
    scalar(&s, r->phase, "accuracy", r->accuracy);
    if (train) {
        scalar(&s, r->phase, "lr", r->lr);
        scalar(&s, r->phase, "grad_norm", r->grad_norm);
        scalar(&s, r->phase, "samples_per_s", r->samples_per_s);
        if (tb->tokens_per_sample)
            scalar(&s, r->phase, "tokens_per_s", r->samples_per_s * (double)tb->tokens_per_sample);
        if (tb->loss_scaled)
            scalar(&s, r->phase, "loss_scale", r->loss_scale);
    } else if (tb->tokens_per_sample) {
        scalar(&s, r->phase, "perplexity", exp(r->loss));
    }
    event_head(&e, r->step);
    put_bytes(&e, 5, s.b, s.n);
    write_record(tb, &e);
}

const char *tr_tb_path(const tr_tb *tb) { return tb->path; }

void tr_tb_close(tr_tb *tb)
{
    if (!tb)
        return;
    if (tb->f)
        fclose(tb->f);
    free(tb);
}
