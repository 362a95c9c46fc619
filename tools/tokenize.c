/* tokenize.c: text files -> token files for language-model training.
 *
 *   tokenize --encoder encoder.json --merges vocab.bpe [--split 0.9] -o PREFIX FILE...
 *   tokenize --bytes [--split 0.9] -o PREFIX FILE...
 *   tokenize (--encoder E --merges M | --bytes) --print FILE...
 *   options: --jsonl [--field text]  --threads N  --piece-kib N
 *
 * The documents are encoded in order into one stream, each followed by GPT-2's
 * <|endoftext|> (none in byte mode, which has no such token); the first `split` of
 * the tokens go to PREFIX.train.tok and the rest to PREFIX.val.tok (token_file.h).
 * Splitting the stream at the end, rather than per document, keeps the validation
 * text unseen and contiguous. A document is a whole FILE, or with --jsonl one line
 * of a JSON-lines file (its string member --field). Files may be gzip-compressed.
 *
 * Any size of corpus: the files are read in pieces of about --piece-kib
 * (corpus_reader.h: cut where the ids cannot change), encoded on --threads threads
 * (default: OpenMP's, e.g. OMP_NUM_THREADS) and appended to the token file as they
 * come, in order; memory is some 8 pieces a thread, and the ids are those of each
 * document encoded whole, whatever the threads and piece size. Every 10 s a line on
 * stderr says how far it got.
 *
 * --print writes each document's ids as a JSON array on its own line instead (no
 * end-of-text), each encoded whole on one thread: validation/text/compare_with_js.sh
 * compares them with the reference encoder, and text.tokenize_stream the streamed
 * token files with them. Exit codes are the trainer's (core/error.h): 64 usage, 66
 * missing input, 65 malformed input, 74 cannot write. */
#include "core/error.h"
#include "text/bpe.h"
#include "text/corpus_reader.h"
#include "text/jsonl.h"
#include "text/token_file.h"

#include <errno.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct options {
    const char *encoder, *merges, *prefix, *field;
    int bytes, print, jsonl, threads;
    size_t piece_bytes;
    double split;
    char **files;
    int nfiles;
} options;

static void usage(const char *why)
{
    if (why && *why)
        fprintf(stderr, "tokenize: %s\n", why);
    fprintf(why ? stderr : stdout, /* --help: the text asked for, on stdout */
            "usage: tokenize --encoder encoder.json --merges vocab.bpe [--split 0.9] -o PREFIX "
            "FILE...\n"
            "       tokenize --bytes [--split 0.9] -o PREFIX FILE...\n"
            "       tokenize (--encoder E --merges M | --bytes) --print FILE...\n"
            "writes PREFIX.train.tok and PREFIX.val.tok (the last 1-split of the tokens);\n"
            "--print writes each document's ids as a JSON array instead\n"
            "  --jsonl        each line of the files is a JSON object holding one document\n"
            "  --field NAME   --jsonl: the member holding the document's text (default text)\n"
            "  --threads N    encoding threads (default: OpenMP's, e.g. OMP_NUM_THREADS)\n"
            "  --piece-kib N  text read and encoded at a time, per piece (default 1024)\n"
            "files may be gzip-compressed; each FILE (--jsonl: each line) is one document,\n"
            "followed by <|endoftext|> in the token files (--bytes: none, documents follow\n"
            "each other directly: the byte vocabulary has no such token)\n");
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

static long positive(const char *flag, const char *v, long max)
{
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (errno || *end || end == v || n < 1 || n > max) {
        char why[128];
        snprintf(why, sizeof why, "%s must be an integer from 1 to %ld", flag, max);
        usage(why);
    }
    return n;
}

static const char default_field[] = "text";

/* -o PREFIX names the start of two files (PREFIX.train.tok): a directory would give
 * hidden files in it (DIR/.train.tok), and a missing directory fails only after the
 * BPE files are loaded. */
static void check_prefix(const char *prefix)
{
    size_t n = strlen(prefix);
    struct stat st;
    if (n == 0 || prefix[n - 1] == '/' || (stat(prefix, &st) == 0 && S_ISDIR(st.st_mode))) {
        fprintf(stderr,
                "tokenize: -o %s: PREFIX is the start of the token files' names, not a "
                "directory (-o data/corpus writes data/corpus.train.tok and "
                "data/corpus.val.tok)\n",
                prefix);
        exit(TR_EXIT_USAGE);
    }
    const char *slash = strrchr(prefix, '/');
    if (slash) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - prefix ? slash - prefix : 1), prefix);
        if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
            fprintf(stderr,
                    "tokenize: -o %s: the directory %s does not exist; create it "
                    "(mkdir -p %s)\n",
                    prefix, dir, dir);
            exit(TR_EXIT_IOERR);
        }
    }
}

static options parse_args(int argc, char **argv)
{
    options o = {.split = 0.9, .field = default_field, .piece_bytes = 1 << 20};
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
        } else if (!strcmp(a, "--jsonl")) {
            o.jsonl = 1;
        } else if (!strcmp(a, "--field")) {
            o.field = value(argc, argv, &i);
        } else if (!strcmp(a, "--threads")) {
            o.threads = (int)positive(a, value(argc, argv, &i), 4096);
        } else if (!strcmp(a, "--piece-kib")) {
            o.piece_bytes = (size_t)positive(a, value(argc, argv, &i), 1 << 20) << 10;
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
    if (o.field != default_field && !o.jsonl)
        usage("--field names the member of a JSON line holding the text: it needs --jsonl");
    if (o.prefix && !o.print)
        check_prefix(o.prefix);
    if (!o.threads)
        o.threads = omp_get_max_threads();
    return o;
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

/* One piece and what encoding it made. */
typedef struct job {
    tr_corpus_piece piece;
    uint32_t *ids;
    size_t n, cap;
    size_t text_bytes, docs, replaced;
    int rc;
    char err[1024];
} job;

/* Scratch of one thread. */
typedef struct worker {
    tr_bpe *bpe;
    tr_json_buf doc, key;
} worker;

static int append_id(job *j, uint32_t id)
{
    if (j->n == j->cap) {
        size_t cap = j->cap * 2 + 1024;
        uint32_t *p = realloc(j->ids, cap * sizeof *p);
        if (!p)
            return -1;
        j->ids = p, j->cap = cap;
    }
    j->ids[j->n++] = id;
    return 0;
}

/* Encodes one document's text, then its end-of-text where the tokenizer has one. */
static int encode_document(job *j, worker *w, const char *text, size_t len)
{
    uint32_t eot;
    if (tr_bpe_encode_append(w->bpe, text, len, &j->ids, &j->n, &j->cap) ||
        (tr_bpe_eot(w->bpe, &eot) == 0 && append_id(j, eot)))
        return -1;
    j->docs++;
    j->text_bytes += len;
    return 0;
}

/* Each line of the piece a document; a blank line is skipped. */
static int encode_jsonl(job *j, worker *w, const options *o)
{
    const char *s = j->piece.text, *end = s + j->piece.len;
    for (long line = j->piece.first_line; s < end; line++) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        size_t len = nl ? (size_t)(nl - s) : (size_t)(end - s), at = 0;
        /* a UTF-8 byte order mark before a file's first record, as some editors and
         * Windows tools write one, is not part of the JSON */
        size_t bom = line == 1 && len >= 3 && !memcmp(s, "\xEF\xBB\xBF", 3) ? 3 : 0;
        size_t blank = strspn(s + bom, " \t\r");
        if (bom + blank < len) {
            char msg[256];
            int rc = tr_jsonl_member(s + bom, len - bom, o->field, &w->doc, &w->key, &j->replaced,
                                     &at, msg, sizeof msg);
            if (rc < 0) {
                snprintf(j->err, sizeof j->err, "%s:%ld: byte %zu: %s", j->piece.file, line,
                         bom + at + 1, msg);
                return TR_EXIT_DATA;
            }
            if (rc > 0) {
                snprintf(j->err, sizeof j->err,
                         "%s:%ld: the object has no member \"%s\" (--field names the member "
                         "that holds the text)",
                         j->piece.file, line, o->field);
                return TR_EXIT_DATA;
            }
            if (encode_document(j, w, w->doc.p, w->doc.len))
                return TR_EXIT_OSERR;
        }
        s += len + 1;
    }
    return 0;
}

static void encode_job(job *j, worker *w, const options *o)
{
    j->n = j->text_bytes = j->docs = j->replaced = 0;
    j->err[0] = '\0';
    if (o->jsonl) {
        j->rc = encode_jsonl(j, w, o);
    } else if (j->piece.doc_end) {
        j->rc = encode_document(j, w, j->piece.text, j->piece.len) ? TR_EXIT_OSERR : 0;
    } else {
        j->text_bytes = j->piece.len;
        j->rc = tr_bpe_encode_append(w->bpe, j->piece.text, j->piece.len, &j->ids, &j->n, &j->cap)
                    ? TR_EXIT_OSERR
                    : 0;
    }
    if (j->rc == TR_EXIT_OSERR && !j->err[0])
        snprintf(j->err, sizeof j->err, "%s: out of memory encoding a piece of %zu bytes",
                 j->piece.file, j->piece.len);
}

static void print_ids(const job *j)
{
    putchar('[');
    for (size_t i = 0; i < j->n; i++)
        printf(i ? ",%u" : "%u", (unsigned)j->ids[i]);
    printf("]\n");
}

/* --print: each document encoded whole on this thread, its ids without the
 * end-of-text (the reference the streamed token files are compared with). */
static int print_documents(const options *o, worker *w)
{
    char err[1024];
    tr_corpus_reader *r = tr_corpus_reader_open(o->files, o->nfiles, o->jsonl,
                                                o->jsonl ? o->piece_bytes : SIZE_MAX / 4);
    job j = {0};
    uint32_t eot;
    int have_eot = tr_bpe_eot(w->bpe, &eot) == 0, rc;
    if (!r)
        tr_fatal(TR_EXIT_OSERR, "out of memory");
    while ((rc = tr_corpus_reader_next(r, &j.piece, err, sizeof err)) == 0) {
        if (o->jsonl) {
            /* one array a line: encode the piece's lines one by one */
            const char *s = j.piece.text, *end = s + j.piece.len;
            tr_corpus_piece whole = j.piece;
            for (long line = whole.first_line; s < end; line++) {
                const char *nl = memchr(s, '\n', (size_t)(end - s));
                size_t len = nl ? (size_t)(nl - s) + 1 : (size_t)(end - s);
                j.piece.text = (char *)s, j.piece.len = len, j.piece.first_line = line;
                encode_job(&j, w, o);
                if (j.rc)
                    break;
                if (j.docs) {
                    j.n -= have_eot;
                    print_ids(&j);
                }
                s += len;
            }
            j.piece = whole;
        } else {
            encode_job(&j, w, o);
            j.n -= have_eot;
            if (!j.rc)
                print_ids(&j);
        }
        if (j.rc) {
            fprintf(stderr, "tokenize: %s\n", j.err);
            rc = j.rc;
            break;
        }
    }
    if (rc > 0 && !j.rc)
        fprintf(stderr, "tokenize: %s\n", err);
    free(j.piece.text);
    free(j.ids);
    tr_corpus_reader_close(r);
    return rc > 0 ? rc : TR_EXIT_OK;
}

static char *output_path(const char *prefix, const char *suffix)
{
    static char path[2][4096];
    static int which;
    char *p = path[which++ & 1];
    if (snprintf(p, sizeof path[0], "%s%s", prefix, suffix) >= (int)sizeof path[0]) {
        fprintf(stderr, "tokenize: output prefix too long\n");
        exit(TR_EXIT_USAGE);
    }
    return p;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Encodes the corpus in rounds of 4 pieces a thread: read (this thread), encode
 * (all threads), append in order. */
static int write_token_files(const options *o, worker *workers, uint32_t vocab)
{
    char err[1024];
    const char *train = output_path(o->prefix, ".train.tok");
    int rc = 0, nj = 4 * o->threads, done = 0;
    tr_token_writer *out = tr_token_writer_open(train, vocab, &rc, err, sizeof err);
    tr_corpus_reader *r = tr_corpus_reader_open(o->files, o->nfiles, o->jsonl, o->piece_bytes);
    job *jobs = calloc((size_t)nj, sizeof *jobs);
    if (!out) {
        fprintf(stderr, "tokenize: %s\n", err);
        exit(rc);
    }
    if (!r || !jobs)
        tr_fatal(TR_EXIT_OSERR, "out of memory");
    size_t text_bytes = 0, docs = 0, replaced = 0;
    double t0 = now(), reported = t0;
    while (!done && !rc) {
        int n = 0;
        while (n < nj && !rc) {
            int got = tr_corpus_reader_next(r, &jobs[n].piece, err, sizeof err);
            if (got < 0) {
                done = 1;
                break;
            }
            if (got > 0)
                rc = got;
            else
                n++;
        }
#pragma omp parallel for num_threads(o->threads) schedule(dynamic, 1)
        for (int i = 0; i < n; i++)
            encode_job(&jobs[i], &workers[omp_get_thread_num()], o);
        for (int i = 0; i < n && !rc; i++) {
            if ((rc = jobs[i].rc)) {
                snprintf(err, sizeof err, "%s", jobs[i].err);
                break;
            }
            rc = tr_token_writer_append(out, jobs[i].ids, jobs[i].n, err, sizeof err);
            text_bytes += jobs[i].text_bytes, docs += jobs[i].docs, replaced += jobs[i].replaced;
        }
        double t = now();
        if (t - reported >= 10) { /* a large corpus takes minutes: say how far it got */
            fprintf(stderr, "tokenize: %.1f MB read, %llu tokens so far, %.0f tokens/s\n",
                    (double)tr_corpus_reader_bytes(r) / 1e6,
                    (unsigned long long)tr_token_writer_count(out),
                    (double)tr_token_writer_count(out) / (t - t0));
            reported = t;
        }
    }
    double seconds = now() - t0;
    uint64_t total = tr_token_writer_count(out), ntrain = (uint64_t)((double)total * o->split);
    const char *val = output_path(o->prefix, ".val.tok");
    if (!rc && !(rc = tr_token_writer_split(out, ntrain, val, err, sizeof err)))
        rc = tr_token_writer_close(out, err, sizeof err);
    else
        tr_token_writer_abort(out);
    for (int i = 0; i < nj; i++)
        free(jobs[i].piece.text), free(jobs[i].ids);
    free(jobs);
    size_t read = tr_corpus_reader_bytes(r);
    tr_corpus_reader_close(r);
    if (rc) {
        fprintf(stderr, "tokenize: %s\n", err);
        return rc;
    }
    printf("tokenize: %d file(s), %zu bytes -> %llu tokens (%.2f bytes/token) in %.3f s, "
           "%.0f tokens/s on %d thread%s\n",
           o->nfiles, text_bytes, (unsigned long long)total,
           total ? (double)text_bytes / (double)total : 0.0, seconds,
           seconds > 0 ? (double)total / seconds : 0.0, o->threads, o->threads == 1 ? "" : "s");
    if (o->jsonl)
        printf("tokenize: %zu documents from %zu bytes of JSON lines\n", docs, read);
    if (replaced)
        printf("tokenize: note: %zu lone surrogate escape%s (\\uD800-\\uDFFF unpaired) read as "
               "U+FFFD\n",
               replaced, replaced == 1 ? "" : "s");
    printf("tokenize: wrote %s: %llu tokens\n", train, (unsigned long long)ntrain);
    printf("tokenize: wrote %s: %llu tokens\n", val, (unsigned long long)(total - ntrain));
    return TR_EXIT_OK;
}

int main(int argc, char **argv)
{
    options o = parse_args(argc, argv);
    worker *workers = calloc((size_t)o.threads, sizeof *workers);
    if (!workers)
        tr_fatal(TR_EXIT_OSERR, "out of memory");
    workers[0].bpe = load(&o);
    for (int t = 1; t < o.threads; t++)
        if (!(workers[t].bpe = tr_bpe_clone(workers[0].bpe)))
            tr_fatal(TR_EXIT_OSERR, "out of memory");
    int rc = o.print ? print_documents(&o, &workers[0])
                     : write_token_files(&o, workers, tr_bpe_vocab_size(workers[0].bpe));
    for (int t = o.threads - 1; t >= 0; t--) {
        tr_bpe_free(workers[t].bpe);
        free(workers[t].doc.p);
        free(workers[t].key.p);
    }
    free(workers);
    return rc;
}
