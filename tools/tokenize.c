/* tokenize.c: text files -> token files for language-model training.
 *
 *   tokenize --encoder encoder.json --merges vocab.bpe [--split 0.9] -o PREFIX FILE...
 *   tokenize --bytes [--split 0.9] -o PREFIX FILE...
 *   tokenize (--encoder E --merges M | --bytes) --print FILE...
 *
 * The files are encoded in order into one stream, each followed by GPT-2's
 * <|endoftext|> (none in byte mode, which has no such token); the first `split` of
 * the tokens go to PREFIX.train.tok and the rest to PREFIX.val.tok (token_file.h).
 * Splitting the stream at the end, rather than per file, keeps the validation text
 * unseen and contiguous. --print writes each file's ids as a JSON array on its own
 * line instead (no end-of-text), which validation/text/compare_with_js.sh uses.
 * Exit codes are the trainer's (core/error.h): 64 usage, 66 missing input, 65
 * malformed input, 74 cannot write. */
#include "core/error.h"
#include "text/bpe.h"
#include "text/token_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct options {
    const char *encoder, *merges, *prefix;
    int bytes, print;
    double split;
    char **files;
    int nfiles;
} options;

static void usage(const char *why)
{
    if (why)
        fprintf(stderr, "tokenize: %s\n", why);
    fprintf(stderr,
            "usage: tokenize --encoder encoder.json --merges vocab.bpe [--split 0.9] -o PREFIX FILE...\n"
            "       tokenize --bytes [--split 0.9] -o PREFIX FILE...\n"
            "       tokenize (--encoder E --merges M | --bytes) --print FILE...\n"
            "writes PREFIX.train.tok and PREFIX.val.tok (the last 1-split of the tokens);\n"
            "--print writes each file's ids as a JSON array instead\n");
    exit(why ? TR_EXIT_USAGE : TR_EXIT_OK);
}

static const char *value(int argc, char **argv, int *i)
{
    if (*i + 1 >= argc) {
        fprintf(stderr, "tokenize: %s needs a value\n", argv[*i]);
        usage("");
    }
    return argv[++*i];
}

static options parse_args(int argc, char **argv)
{
    options o = {.split = 0.9};
    int i = 1;
    for (; i < argc && argv[i][0] == '-' && argv[i][1]; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--encoder")) {
            o.encoder = value(argc, argv, &i);
        } else if (!strcmp(a, "--merges")) {
            o.merges = value(argc, argv, &i);
        } else if (!strcmp(a, "-o")) {
            o.prefix = value(argc, argv, &i);
        } else if (!strcmp(a, "--bytes")) {
            o.bytes = 1;
        } else if (!strcmp(a, "--print")) {
            o.print = 1;
        } else if (!strcmp(a, "--split")) {
            const char *v = value(argc, argv, &i);
            char *end;
            o.split = strtod(v, &end);
            if (*end || !(o.split > 0.0 && o.split <= 1.0))
                usage("--split must be a number in (0, 1]");
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(NULL);
        } else if (!strcmp(a, "--")) {
            i++;
            break;
        } else {
            fprintf(stderr, "tokenize: unknown option %s\n", a);
            usage("");
        }
    }
    o.files = argv + i;
    o.nfiles = argc - i;
    if (o.nfiles == 0)
        usage("no input files");
    if (o.bytes && (o.encoder || o.merges))
        usage("--bytes takes no --encoder or --merges");
    if (!o.bytes && (!o.encoder || !o.merges))
        usage("--encoder and --merges are both needed (or --bytes)");
    if (!o.print && !o.prefix)
        usage("-o PREFIX is needed");
    return o;
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "tokenize: %s: cannot open: %s\n", path, strerror(errno));
        exit(TR_EXIT_NOINPUT);
    }
    size_t cap = 1 << 16, n = 0, got;
    char *buf = malloc(cap);
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb)
                free(buf);
            buf = nb;
        }
    }
    if (!buf)
        tr_fatal(TR_EXIT_OSERR, "out of memory reading %s", path);
    if (ferror(f)) {
        fprintf(stderr, "tokenize: %s: read error\n", path);
        exit(TR_EXIT_NOINPUT);
    }
    fclose(f);
    *len = n;
    return buf;
}

static tr_bpe *load(const options *o)
{
    if (o->bytes) {
        tr_bpe *b = tr_bpe_bytes();
        if (!b)
            tr_fatal(TR_EXIT_OSERR, "out of memory");
        return b;
    }
    const char *need[2] = {o->encoder, o->merges};
    for (int k = 0; k < 2; k++)
        if (access(need[k], R_OK) != 0) {
            fprintf(stderr, "tokenize: %s: cannot read: %s (scripts/fetch_gpt2_bpe.sh fetches "
                            "GPT-2's files)\n", need[k], strerror(errno));
            exit(TR_EXIT_NOINPUT);
        }
    char err[512];
    tr_bpe *b = tr_bpe_load(o->encoder, o->merges, err, sizeof err);
    if (!b) {
        fprintf(stderr, "tokenize: %s\n", err);
        exit(TR_EXIT_DATA);
    }
    return b;
}

static void print_ids(tr_bpe *b, const options *o)
{
    for (int f = 0; f < o->nfiles; f++) {
        size_t len, n;
        uint32_t *ids;
        char *text = read_file(o->files[f], &len);
        if (tr_bpe_encode(b, text, len, &ids, &n))
            tr_fatal(TR_EXIT_OSERR, "out of memory encoding %s", o->files[f]);
        putchar('[');
        for (size_t i = 0; i < n; i++)
            printf(i ? ",%u" : "%u", (unsigned)ids[i]);
        printf("]\n");
        free(ids);
        free(text);
    }
}

static void write_or_die(const char *prefix, const char *suffix, const uint32_t *ids, size_t n,
                         uint32_t vocab)
{
    char path[4096], err[4096 + 256];
    if (snprintf(path, sizeof path, "%s%s", prefix, suffix) >= (int)sizeof path) {
        fprintf(stderr, "tokenize: output prefix too long\n");
        exit(TR_EXIT_USAGE);
    }
    int rc = tr_token_file_write(path, ids, n, vocab, err, sizeof err);
    if (rc) {
        fprintf(stderr, "tokenize: %s\n", err);
        exit(rc);
    }
    printf("tokenize: wrote %s: %zu tokens\n", path, n);
}

int main(int argc, char **argv)
{
    options o = parse_args(argc, argv);
    tr_bpe *b = load(&o);
    if (o.print) {
        print_ids(b, &o);
        tr_bpe_free(b);
        return TR_EXIT_OK;
    }
    uint32_t eot;
    int have_eot = tr_bpe_eot(b, &eot) == 0;
    uint32_t *ids = NULL;
    size_t n = 0, cap = 0, bytes = 0;
    double seconds = 0;
    for (int f = 0; f < o.nfiles; f++) {
        size_t len;
        char *text = read_file(o.files[f], &len);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        if (tr_bpe_encode_append(b, text, len, &ids, &n, &cap))
            tr_fatal(TR_EXIT_OSERR, "out of memory encoding %s", o.files[f]);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        seconds += (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        if (have_eot) {
            if (n == cap) {
                uint32_t *nb = realloc(ids, (cap = cap * 2 + 1) * sizeof *ids);
                if (!nb)
                    tr_fatal(TR_EXIT_OSERR, "out of memory");
                ids = nb;
            }
            ids[n++] = eot;
        }
        bytes += len;
        free(text);
    }
    size_t ntrain = (size_t)((double)n * o.split);
    printf("tokenize: %d file(s), %zu bytes -> %zu tokens (%.2f bytes/token) in %.3f s, "
           "%.0f tokens/s\n",
           o.nfiles, bytes, n, n ? (double)bytes / (double)n : 0.0, seconds,
           seconds > 0 ? (double)n / seconds : 0.0);
    write_or_die(o.prefix, ".train.tok", ids, ntrain, tr_bpe_vocab_size(b));
    write_or_die(o.prefix, ".val.tok", ids + ntrain, n - ntrain, tr_bpe_vocab_size(b));
    free(ids);
    tr_bpe_free(b);
    return TR_EXIT_OK;
}
