/* standalone.c: a driver for the fuzz targets without libFuzzer (fuzz.h): runs
 * each seed, then a fixed set of mutations of it, so every build, GPU or
 * sanitizer, gcc or clang, runs the same inputs in the same order.
 *
 *   fuzz_deck [-mutations=N] [-seed=S] [-only=K:I] [-save=FILE] [-trace] SEED...
 *
 * SEED: files, or directories whose files (sorted by name) are seeds. Each seed
 * k runs as it is, then N mutations (default 500): mutation i of seed k applies
 * one to four edits (bit flips, odd bytes and numbers, inserted, deleted,
 * repeated or spliced ranges, truncation) drawn from a generator seeded by (S,
 * k, i) alone. -only=K:I runs just mutation I of seed K (I = -1: the seed
 * itself) and -save=FILE writes that input to FILE: a crash prints the K:I that
 * reproduces it. */
#include "fuzz.h"

#include <dirent.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FUZZ_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define FUZZ_ASAN 1
#endif
#ifdef FUZZ_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

#define FUZZ_MAX_INPUT (1u << 20)
#define MAX_SEEDS 4096

typedef struct seed {
    char *path;
    uint8_t *data;
    size_t size;
} seed;

static seed g_seeds[MAX_SEEDS];
static int g_nseeds;
static char g_now[512]; /* what runs now, for the crash message */

/* ---- seeds
 * ------------------------------------------------------------------------ */

static void add_seed(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "fuzz: cannot open seed %s\n", path);
        exit(66);
    }
    uint8_t *buf = malloc(FUZZ_MAX_INPUT);
    FUZZ_CHECK(buf != NULL, "out of memory");
    size_t n = fread(buf, 1, FUZZ_MAX_INPUT, f);
    fclose(f);
    FUZZ_CHECK(g_nseeds < MAX_SEEDS, "more than %d seeds", MAX_SEEDS);
    g_seeds[g_nseeds].path = strdup(path);
    g_seeds[g_nseeds].data = buf;
    g_seeds[g_nseeds++].size = n;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void add_path(const char *path)
{
    DIR *d = opendir(path);
    if (!d) {
        add_seed(path);
        return;
    }
    char *names[MAX_SEEDS];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.' && n < MAX_SEEDS) {
            size_t len = strlen(path) + strlen(e->d_name) + 2;
            names[n] = malloc(len);
            FUZZ_CHECK(names[n] != NULL, "out of memory");
            snprintf(names[n++], len, "%s/%s", path, e->d_name);
        }
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], by_name);
    for (int i = 0; i < n; i++) {
        add_seed(names[i]);
        free(names[i]);
    }
}

/* ---- the mutator
 * ------------------------------------------------------------------ */

static uint64_t next(uint64_t *s) /* splitmix64 */
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static size_t below(uint64_t *s, size_t n) { return n ? (size_t)(next(s) % n) : 0; }

static const uint8_t ODD_BYTES[] = {0,    1,    0x7f, 0x80, 0xff, '\n', '\r', '\t', ' ',
                                    '=',  '[',  ']',  '#',  ';',  ',',  '"',  '\\', 'u',
                                    '0',  '9',  '-',  '.',  'e',  '{',  '}',  ':',  0xc0,
                                    0xe2, 0xf0, 0xed, 0xc4, 0xa0, '(',  ')',  'x'};
static const char *const ODD_NUMBERS[] = {
    "0",          "-1",     "1",   "2147483648", "-2147483649", "99999999999999999999",
    "1e308",      "1e-320", "nan", "inf",        "-0",          "0x10",
    "4294967296", "65536",  "3.5", "1e2",        "00",
};
static const uint64_t ODD_WORDS[] = {
    0,          1,          0x7f,       0x80,         0xff,  0x100, 0xffff, 0x10000,
    0x7fffffff, 0x80000000, 0xffffffff, ~(uint64_t)0, 0x803, 0x801, 60000};

/* One edit of buf[0..*n) (capacity FUZZ_MAX_INPUT). */
static void edit(uint8_t *buf, size_t *n, uint64_t *s)
{
    size_t len = *n;
    switch (below(s, 9)) {
    case 0: /* flip a bit */
        if (len)
            buf[below(s, len)] ^= (uint8_t)(1u << below(s, 8));
        break;
    case 1: /* an odd byte */
        if (len)
            buf[below(s, len)] = ODD_BYTES[below(s, sizeof ODD_BYTES)];
        break;
    case 2: { /* insert 1-8 odd or random bytes */
        size_t k = 1 + below(s, 8), at = below(s, len + 1);
        if (len + k > FUZZ_MAX_INPUT)
            break;
        memmove(buf + at + k, buf + at, len - at);
        for (size_t i = 0; i < k; i++)
            buf[at + i] = below(s, 2) ? ODD_BYTES[below(s, sizeof ODD_BYTES)] : (uint8_t)next(s);
        *n = len + k;
        break;
    }
    case 3: { /* delete a range */
        if (!len)
            break;
        size_t at = below(s, len), k = 1 + below(s, len - at < 64 ? len - at : 64);
        memmove(buf + at, buf + at + k, len - at - k);
        *n = len - k;
        break;
    }
    case 4: { /* repeat a range somewhere */
        if (!len)
            break;
        size_t from = below(s, len), k = 1 + below(s, len - from < 256 ? len - from : 256);
        size_t at = below(s, len + 1);
        if (len + k > FUZZ_MAX_INPUT)
            break;
        uint8_t tmp[256];
        memcpy(tmp, buf + from, k);
        memmove(buf + at + k, buf + at, len - at);
        memcpy(buf + at, tmp, k);
        *n = len + k;
        break;
    }
    case 5: /* truncate */
        *n = below(s, len + 1);
        break;
    case 6: { /* splice in a range of another seed */
        const seed *o = &g_seeds[below(s, (size_t)g_nseeds)];
        if (!o->size)
            break;
        size_t from = below(s, o->size),
               k = 1 + below(s, o->size - from < 512 ? o->size - from : 512);
        size_t at = below(s, len + 1);
        if (len + k > FUZZ_MAX_INPUT)
            break;
        memmove(buf + at + k, buf + at, len - at);
        memcpy(buf + at, o->data + from, k);
        *n = len + k;
        break;
    }
    case 7: { /* an odd integer of 1, 2, 4 or 8 bytes, either byte order */
        size_t w = (size_t)1 << below(s, 4);
        if (len < w)
            break;
        size_t at = below(s, len - w + 1);
        uint64_t v = ODD_WORDS[below(s, sizeof ODD_WORDS / sizeof ODD_WORDS[0])];
        int big = (int)below(s, 2);
        for (size_t i = 0; i < w; i++)
            buf[at + i] = (uint8_t)(v >> (8 * (big ? w - 1 - i : i)));
        break;
    }
    default: { /* a run of digits replaced by an odd number */
        if (!len)
            break;
        size_t at = below(s, len);
        while (at < len && (buf[at] < '0' || buf[at] > '9'))
            at++;
        if (at == len)
            break;
        size_t end = at;
        while (end < len && buf[end] >= '0' && buf[end] <= '9')
            end++;
        const char *num = ODD_NUMBERS[below(s, sizeof ODD_NUMBERS / sizeof ODD_NUMBERS[0])];
        size_t k = strlen(num);
        if (len - (end - at) + k > FUZZ_MAX_INPUT)
            break;
        memmove(buf + at + k, buf + end, len - end);
        memcpy(buf + at, num, k);
        *n = len - (end - at) + k;
        break;
    }
    }
}

/* Input I of seed K into buf: the seed (I = -1) or its mutation I. */
static size_t make_input(uint8_t *buf, uint64_t base, int k, long i)
{
    const seed *sd = &g_seeds[k];
    memcpy(buf, sd->data, sd->size);
    size_t n = sd->size;
    if (i < 0)
        return n;
    uint64_t s = base ^ ((uint64_t)k << 40) ^ (uint64_t)i * 0x2545f4914f6cdd1dull;
    next(&s);
    int edits = 1 + (int)below(&s, 4);
    for (int e = 0; e < edits; e++)
        edit(buf, &n, &s);
    return n;
}

/* ---- running
 * ---------------------------------------------------------------------- */

static void say_where(void)
{
    ssize_t r = write(2, g_now, strlen(g_now));
    (void)r;
}

static void on_signal(int sig)
{
    say_where();
    signal(sig, SIG_DFL);
    raise(sig);
}

static int g_trace;

static void run(uint8_t *buf, uint64_t base, int k, long i, const char *argv0)
{
    size_t n = make_input(buf, base, k, i);
    snprintf(g_now, sizeof g_now,
             "fuzz: the input that failed: seed %d (%s), mutation %ld, %zu "
             "bytes; alone: "
             "%s -only=%d:%ld -save=FILE\n",
             k, g_seeds[k].path, i, n, argv0, k, i);
    if (g_trace)
        fprintf(stderr, "fuzz: seed %d, mutation %ld\n", k, i);
    LLVMFuzzerTestOneInput(buf, n);
}

int main(int argc, char **argv)
{
    long mutations = 500, only_i = -2;
    int only_k = -1;
    uint64_t base = 1;
    const char *save = NULL;
    for (int a = 1; a < argc; a++) {
        if (!strncmp(argv[a], "-mutations=", 11))
            mutations = atol(argv[a] + 11);
        else if (!strncmp(argv[a], "-seed=", 6))
            base = strtoull(argv[a] + 6, NULL, 10);
        else if (!strncmp(argv[a], "-only=", 6)) {
            if (sscanf(argv[a] + 6, "%d:%ld", &only_k, &only_i) != 2) {
                fprintf(stderr, "fuzz: -only=K:I, e.g. -only=3:-1 (seed 3 itself)\n");
                return 64;
            }
        } else if (!strncmp(argv[a], "-save=", 6))
            save = argv[a] + 6;
        else if (argv[a][0] == '-') {
            fprintf(stderr,
                    "usage: %s [-mutations=N] [-seed=S] [-only=K:I] [-save=FILE] [-trace] "
                    "SEED...\n",
                    argv[0]);
            return 64;
        } else
            add_path(argv[a]);
    }
    if (!g_nseeds) {
        fprintf(stderr, "%s: no seeds given\n", argv[0]);
        return 64;
    }
    signal(SIGSEGV, on_signal);
    signal(SIGBUS, on_signal);
    signal(SIGFPE, on_signal);
    signal(SIGABRT, on_signal);
#ifdef FUZZ_ASAN
    __sanitizer_set_death_callback(say_where);
#endif
    atexit(say_where); /* an exit from inside a target (tr_fatal) is a failure too */
    uint8_t *buf = malloc(FUZZ_MAX_INPUT);
    FUZZ_CHECK(buf != NULL, "out of memory");
    long inputs = 0;
    if (only_k >= 0) {
        FUZZ_CHECK(only_k < g_nseeds, "seed %d of %d", only_k, g_nseeds);
        if (save) {
            size_t n = make_input(buf, base, only_k, only_i);
            FILE *f = fopen(save, "wb");
            FUZZ_CHECK(f && fwrite(buf, 1, n, f) == n && !fclose(f), "cannot write %s", save);
        }
        run(buf, base, only_k, only_i, argv[0]);
        inputs = 1;
    } else {
        for (int k = 0; k < g_nseeds; k++) {
            fprintf(stderr, "fuzz: seed %d: %s, %zu bytes, and %ld mutations\n", k, g_seeds[k].path,
                    g_seeds[k].size, mutations);
            for (long i = -1; i < mutations; i++, inputs++)
                run(buf, base, k, i, argv[0]);
        }
    }
    g_now[0] = '\0'; /* a normal exit: nothing to blame */
    printf("%s: %d seeds, %ld inputs, no failure\n", argv[0], g_nseeds, inputs);
    free(buf);
    return 0;
}
