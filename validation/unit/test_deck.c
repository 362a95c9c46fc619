/* test_deck.c: the deck parser: values, defaults, overrides, every error message
 * naming FILE:LINE or the override, suggestions, the resolved deck reparsing, and the
 * keys a run sets but does not use (another model's, another data format's). */
#include "core/deck.h"
#include "core/error.h"
#include "test_util.h"

#include <stdlib.h>
#include <string.h>

static int has(const tr_deck *d, const char *needle) { return strstr(d->errors, needle) != NULL; }

static void test_values_and_defaults(void)
{
    tr_deck d;
    const char *text = "# comment\n[train]\nepochs = 3   # trailing comment\nbatch_size=64\n"
                       "[optim]\nname = adamw\nlr = 1e-3\n[model]\nhidden = 128, 64,32\n"
                       "[data]\nshuffle = off\n";
    int rc = tr_deck_load_text(&d, "t.in", text, 0, NULL);
    CHECK(rc == 0, "rc %d errors: %s", rc, d.errors);
    CHECK(tr_deck_int(&d, "train", "epochs") == 3, "epochs");
    CHECK(tr_deck_int(&d, "train", "batch_size") == 64, "batch");
    CHECK(tr_deck_int(&d, "train", "seed") == 1234, "default seed");
    CHECK(!strcmp(tr_deck_str(&d, "optim", "name"), "adamw"), "choice");
    CHECK(tr_deck_float(&d, "optim", "lr") == 1e-3, "float");
    CHECK(tr_deck_bool(&d, "data", "shuffle") == 0, "bool off");
    int h[8];
    int n = tr_deck_intlist(&d, "model", "hidden", h, 8);
    CHECK(n == 3 && h[0] == 128 && h[1] == 64 && h[2] == 32, "intlist n=%d", n);
    char where[256];
    tr_deck_where(&d, "train", "epochs", where, sizeof where);
    CHECK(!strcmp(where, "t.in:3"), "where %s", where);
    tr_deck_where(&d, "train", "seed", where, sizeof where);
    CHECK(strstr(where, "default of [train] seed") != NULL, "where default %s", where);
    tr_deck_free(&d);
}

static void test_overrides(void)
{
    tr_deck d;
    char *ov[] = {"train.epochs=7", "optim.lr = 0.5", "run.dir=/tmp/x=y"};
    int rc = tr_deck_load_text(&d, "t.in", "[train]\nepochs = 3\n", 3, ov);
    CHECK(rc == 0, "rc %d: %s", rc, d.errors);
    CHECK(tr_deck_int(&d, "train", "epochs") == 7, "override replaces deck value");
    CHECK(tr_deck_float(&d, "optim", "lr") == 0.5, "override with spaces");
    CHECK(!strcmp(tr_deck_str(&d, "run", "dir"), "/tmp/x=y"), "value with '='");
    char where[256];
    tr_deck_where(&d, "train", "epochs", where, sizeof where);
    CHECK(!strcmp(where, "command line 'train.epochs=7'"), "where %s", where);
    tr_deck_free(&d);
}

static void test_errors(void)
{
    tr_deck d;
    const char *text = "[train]\n"          /* 1 */
                       "epochz = 3\n"       /* 2 unknown key, suggestion */
                       "batch_size = -4\n"  /* 3 out of range */
                       "seed = abc\n"       /* 4 wrong type */
                       "[optimizer]\n"      /* 5 unknown section */
                       "lr = 1\n"           /* 6 skipped: section reported */
                       "[optim]\n"          /* 7 */
                       "name = adam\n"      /* 8 not a choice */
                       "just words\n"       /* 9 no '=' */
                       "[data]\n"           /* 10 */
                       "shuffle = maybe\n"  /* 11 bad bool */
                       "[model]\n"          /* 12 */
                       "hidden = 10,,x\n"   /* 13 bad list */
                       "epochs = 2\n";      /* 14 right name, wrong section */
    char *ov[] = {"optim.lrr=1", "nodot=1", "train.steps=1.5"};
    int rc = tr_deck_load_text(&d, "bad.in", text, 3, ov);
    CHECK(rc == TR_EXIT_USAGE, "rc %d", rc);
    CHECK(has(&d, "bad.in:2: unknown key 'epochz' in [train]; did you mean [train] epochs?"),
          "%s", d.errors);
    CHECK(has(&d, "bad.in:3: [train] batch_size = -4 is out of range [1, 16777216]"), "%s",
          d.errors);
    CHECK(has(&d, "bad.in:4: [train] seed expects an integer, got 'abc'"), "%s", d.errors);
    CHECK(has(&d, "bad.in:5: unknown section [optimizer]; did you mean [optim]?"), "%s",
          d.errors);
    CHECK(!has(&d, "bad.in:6:"), "keys of an unknown section are not reported again");
    CHECK(has(&d, "bad.in:8: [optim] name = 'adam' is not one of: sgd|adamw"), "%s", d.errors);
    CHECK(has(&d, "bad.in:9: expected 'key = value' or '[section]', got 'just words'"), "%s",
          d.errors);
    CHECK(has(&d, "bad.in:11: [data] shuffle expects true or false, got 'maybe'"), "%s",
          d.errors);
    CHECK(has(&d, "bad.in:13: [model] hidden expects comma-separated integers"), "%s",
          d.errors);
    CHECK(has(&d, "bad.in:14: unknown key 'epochs' in [model]; did you mean [train] epochs?"),
          "%s", d.errors);
    CHECK(has(&d, "command line 'optim.lrr=1': unknown key 'lrr' in [optim]; did you mean "
                  "[optim] lr?"),
          "%s", d.errors);
    CHECK(has(&d, "command line 'nodot=1': overrides are written section.key=value"), "%s",
          d.errors);
    CHECK(has(&d, "command line 'train.steps=1.5': [train] steps expects an integer"), "%s",
          d.errors);
    CHECK(d.nerrors == 12, "nerrors %d:\n%s", d.nerrors, d.errors);
    tr_deck_free(&d);

    rc = tr_deck_load(&d, "/nonexistent/deck.in", 0, NULL);
    CHECK(rc == TR_EXIT_NOINPUT, "missing file rc %d", rc);
    CHECK(has(&d, "/nonexistent/deck.in: cannot read the deck: No such file or directory"),
          "%s", d.errors);
    tr_deck_free(&d);

    rc = tr_deck_load_text(&d, "k.in", "epochs = 1\n", 0, NULL);
    CHECK(rc == TR_EXIT_USAGE && has(&d, "k.in:1: key 'epochs' appears before any [section]"),
          "%s", d.errors);
    tr_deck_free(&d);
}

/* The resolved deck written to the run directory must parse back to the same values. */
static void test_resolved_roundtrip(void)
{
    tr_deck d, e;
    char *ov[] = {"optim.lr=0.25", "model.hidden=32,16"};
    tr_deck_load_text(&d, "a.in", "[train]\nepochs = 4\n", 2, ov);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    tr_deck_write_resolved(&d, f);
    fclose(f);
    int rc = tr_deck_load_text(&e, "resolved.in", buf, 0, NULL);
    CHECK(rc == 0, "resolved deck reparses: %s", e.errors);
    for (int i = 0; i < tr_deck_nkeys; i++)
        CHECK(!strcmp(d.values[i].text, e.values[i].text), "[%s] %s: '%s' vs '%s'",
              tr_deck_keys[i].section, tr_deck_keys[i].name, d.values[i].text,
              e.values[i].text);
    free(buf);
    tr_deck_free(&d);
    tr_deck_free(&e);

    /* overrides a deck line could not hold, which the resolved deck would read back
     * otherwise (found by validation/fuzz/fuzz_deck.c): refused, said why */
    const char *bad[][2] = {{"run.dir=runs/a\nb", "line break"},
                            {"run.dir=runs/my #1", "comment"},
                            {"run.dir=;x", "comment"},
                            {"data.train_images=a\r", NULL}}; /* trailing: trimmed */
    for (int i = 0; i < 4; i++) {
        char *one[] = {(char *)bad[i][0]};
        rc = tr_deck_load_text(&d, "b.in", "", 1, one);
        if (bad[i][1])
            CHECK(rc == TR_EXIT_USAGE && strstr(d.errors, bad[i][1]), "'%s': rc %d: %s",
                  bad[i][0], rc, d.errors);
        else
            CHECK(rc == 0, "'%s': rc %d: %s", bad[i][0], rc, d.errors);
        tr_deck_free(&d);
    }
    char *fine[] = {"run.dir=runs/a#1;b"}; /* no space before: part of the value */
    rc = tr_deck_load_text(&d, "c.in", "", 1, fine);
    CHECK(rc == 0 && !strcmp(tr_deck_str(&d, "run", "dir"), "runs/a#1;b"), "rc %d: %s", rc,
          d.errors);
    tr_deck_free(&d);

    /* an override's control characters stay escaped in its origin, a comment line of
     * the resolved deck, which therefore still reads back */
    char *nl[] = {"train.epochs=2\n"};
    rc = tr_deck_load_text(&d, "d\n.in", "", 1, nl);
    char where[256];
    tr_deck_where(&d, "train", "epochs", where, sizeof where);
    CHECK(rc == 0 && !strcmp(where, "command line 'train.epochs=2\\n'"), "rc %d, origin %s",
          rc, where);
    CHECK(!strcmp(d.path, "d\\n.in"), "deck name in messages: %s", d.path);
    buf = NULL;
    f = open_memstream(&buf, &len);
    tr_deck_write_resolved(&d, f);
    fclose(f);
    rc = tr_deck_load_text(&e, "resolved.in", buf, 0, NULL);
    CHECK(rc == 0 && tr_deck_int(&e, "train", "epochs") == 2, "resolved: rc %d: %s", rc, e.errors);
    free(buf);
    tr_deck_free(&d);
    tr_deck_free(&e);
}

/* Every default in the table must pass the table's own checks. */
static void test_table_defaults_valid(void)
{
    tr_deck d;
    int rc = tr_deck_load_text(&d, "empty.in", "", 0, NULL);
    CHECK(rc == 0, "empty deck: %s", d.errors);
    for (int i = 0; i < tr_deck_nkeys; i++) {
        char ov[1200];
        snprintf(ov, sizeof ov, "%s.%s=%s", tr_deck_keys[i].section, tr_deck_keys[i].name,
                 tr_deck_keys[i].def);
        char *p = ov;
        tr_deck e;
        rc = tr_deck_load_text(&e, "x.in", "", 1, &p);
        CHECK(rc == 0, "default of [%s] %s fails its own check: %s", tr_deck_keys[i].section,
              tr_deck_keys[i].name, e.errors);
        tr_deck_free(&e);
        for (int j = 0; j < i; j++)
            CHECK(strcmp(tr_deck_keys[i].section, tr_deck_keys[j].section) ||
                      strcmp(tr_deck_keys[i].name, tr_deck_keys[j].name),
                  "[%s] %s declared twice", tr_deck_keys[i].section, tr_deck_keys[i].name);
    }
    tr_deck_free(&d);
    CHECK(tr_edit_distance("epochs", "epochz") == 1, "distance");
    CHECK(tr_edit_distance("", "abc") == 3, "distance empty");
}

static int key_index(const char *section, const char *name)
{
    for (int i = 0; i < tr_deck_nkeys; i++)
        if (!strcmp(tr_deck_keys[i].section, section) && !strcmp(tr_deck_keys[i].name, name))
            return i;
    return -1;
}

/* tr_deck_same_value compares as the key's type, which is what a resumed run's
 * report of changed keys relies on: the same value written another way is no change */
static void test_same_value(void)
{
    tr_deck a, b;
    int ra = tr_deck_load_text(&a, "a.in",
                               "[optim]\nlr = 0.1\nmomentum = 0.9\n[train]\nsteps = 1000\n"
                               "[data]\nshuffle = yes\nformat = idx\n[model]\nhidden = 256,256\n",
                               0, NULL);
    int rb =
        tr_deck_load_text(&b, "b.in",
                          "[optim]\nlr = 1e-1\nmomentum = 0.8\n[train]\nsteps = 1e3\n"
                          "[data]\nshuffle = true\nformat = tokens\n[model]\nhidden = 256, 256\n",
                          0, NULL);
    CHECK(!ra && !rb, "load: %s %s", a.errors, b.errors);
    struct {
        const char *section, *name;
        int same;
    } cases[] = {{"optim", "lr", 1},     {"optim", "momentum", 0}, {"train", "steps", 1},
                 {"data", "shuffle", 1}, {"data", "format", 0},    {"model", "hidden", 1},
                 {"train", "seed", 1}}; /* both defaults */
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int k = key_index(cases[i].section, cases[i].name);
        CHECK(k >= 0 && tr_deck_same_value(&a, &b, k) == cases[i].same, "[%s] %s: expected %s",
              cases[i].section, cases[i].name, cases[i].same ? "same" : "different");
    }
    char *ov[] = {"model.hidden=256,128"};
    tr_deck c;
    CHECK(!tr_deck_load_text(&c, "c.in", "", 1, ov), "load c: %s", c.errors);
    CHECK(!tr_deck_same_value(&a, &c, key_index("model", "hidden")), "256,256 vs 256,128");
    tr_deck_free(&a);
    tr_deck_free(&b);
    tr_deck_free(&c);
}

/* Set keys of another model or data format are named, with where they were set; the
 * defaults and the keys of the deck's own model are not. */
static void test_unused_keys(void)
{
    tr_deck d;
    char *ov[] = {"model.attn_pdrop=0.1"};
    int rc = tr_deck_load_text(&d, "u.in",
                               "[model]\nname = mlp\nhidden = 64\nn_layer = 4\n"
                               "[data]\nval_limit = 8\n[optim]\nlr = 0.1\n",
                               1, ov);
    CHECK(!rc, "load: %s", d.errors);
    char buf[1024];
    int n = tr_deck_unused_keys(&d, buf, sizeof buf);
    CHECK(n == 3, "3 unused keys, got %d: %s", n, buf);
    CHECK(strstr(buf, "[model] n_layer = 4 (u.in:4) applies where model.name = gpt; this run "
                      "has model.name = mlp and ignores it\n"),
          "n_layer named with its line: %s", buf);
    CHECK(strstr(buf, "[model] attn_pdrop = 0.1 (command line 'model.attn_pdrop=0.1')"),
          "the override named: %s", buf);
    CHECK(strstr(buf, "[data] val_limit = 8 (u.in:6) applies where data.format = tokens or "
                      "random_tokens; this run has data.format = idx"),
          "a tokens key under idx: %s", buf);
    CHECK(!strstr(buf, "hidden") && !strstr(buf, "lr"), "used keys are not named: %s", buf);
    char tiny[40];
    CHECK(tr_deck_unused_keys(&d, tiny, sizeof tiny) == 3 && strlen(tiny) < sizeof tiny,
          "a short buffer: all counted, the text cut: '%s'", tiny);
    tr_deck_free(&d);

    tr_deck g;
    char *ov2[] = {"model.name=gpt", "data.format=tokens"};
    CHECK(!tr_deck_load_text(&g, "g.in", "[model]\nn_layer = 4\nhidden = 8\n", 2, ov2),
          "load g: %s", g.errors);
    n = tr_deck_unused_keys(&g, buf, sizeof buf);
    CHECK(n == 1 && strstr(buf, "[model] hidden = 8 (g.in:3) applies where model.name = mlp"),
          "gpt: only hidden unused, got %d: %s", n, buf);
    tr_deck_free(&g);

    /* the image files under token data, token files under random tokens */
    char *ov3[] = {"model.name=gpt", "data.format=random_tokens", "data.train_tokens=t.tok",
                   "data.test_labels=l.idx", "data.val_limit=4"};
    CHECK(!tr_deck_load_text(&g, "r.in", "", 5, ov3), "load r: %s", g.errors);
    n = tr_deck_unused_keys(&g, buf, sizeof buf);
    CHECK(n == 2 &&
              strstr(buf, "[data] train_tokens = t.tok (command line 'data.train_tokens=t.tok') "
                          "applies where data.format = tokens; this run has data.format = "
                          "random_tokens") &&
              strstr(buf, "[data] test_labels = l.idx (command line 'data.test_labels=l.idx') "
                          "applies where data.format = idx"),
          "random_tokens: train_tokens and test_labels unused, got %d: %s", n, buf);

    /* the classifiers' keys under a GPT: the image prefetcher and the class count;
     * the GPT's tokenizer under a classifier */
    tr_deck c;
    char *ov6[] = {"model.name=gpt", "data.format=tokens", "data.prefetch=false",
                   "model.classes=5"};
    CHECK(!tr_deck_load_text(&c, "c.in", "", 4, ov6), "load c: %s", c.errors);
    n = tr_deck_unused_keys(&c, buf, sizeof buf);
    CHECK(n == 2 &&
              strstr(buf, "[data] prefetch = false (command line 'data.prefetch=false') applies "
                          "where data.format = idx") &&
              strstr(buf, "[model] classes = 5 (command line 'model.classes=5') applies where "
                          "model.name = mlp or cnn"),
          "gpt: prefetch and classes unused, got %d: %s", n, buf);
    tr_deck_free(&c);
    char *ov7[] = {"model.name=cnn", "data.tokenizer=bytes", "model.classes=5"};
    CHECK(!tr_deck_load_text(&c, "c.in", "", 3, ov7), "load c2: %s", c.errors);
    n = tr_deck_unused_keys(&c, buf, sizeof buf);
    CHECK(n == 1 && strstr(buf, "[data] tokenizer = bytes (command line 'data.tokenizer=bytes') "
                                "applies where model.name = gpt"),
          "cnn: tokenizer unused, classes used, got %d: %s", n, buf);
    tr_deck_free(&c);

    /* greedy sampling (top_k 1) draws nothing: top_p and temperature named, at 01 too;
     * with top_k 40 they are used */
    tr_deck gr;
    char *ov4[] = {"model.name=gpt", "sample.top_k=01", "sample.top_p=0.9"};
    CHECK(!tr_deck_load_text(&gr, "s.in", "[sample]\ntemperature = 0.7\n", 3, ov4), "load s: %s",
          gr.errors);
    n = tr_deck_unused_keys(&gr, buf, sizeof buf);
    CHECK(n == 2 &&
              strstr(buf, "[sample] top_p = 0.9 (command line 'sample.top_p=0.9') applies where "
                          "sample.top_k > 1; this run has sample.top_k = 01") &&
              strstr(buf, "[sample] temperature = 0.7 (s.in:2) applies where sample.top_k > 1"),
          "greedy: top_p and temperature unused, got %d: %s", n, buf);
    tr_deck_free(&gr);
    char *ov5[] = {"model.name=gpt", "sample.top_k=40", "sample.top_p=0.9"};
    CHECK(!tr_deck_load_text(&gr, "s.in", "", 3, ov5), "load s40: %s", gr.errors);
    n = tr_deck_unused_keys(&gr, buf, sizeof buf);
    CHECK(n == 0, "top_k 40: top_p used, got %d: %s", n, buf);
    tr_deck_free(&gr);

    /* sequence parallelism needs tp > 1 (and a GPT): named at tp 1, used at tp 2 */
    char *ov8[] = {"model.name=gpt", "parallel.sequence_parallel=true"};
    CHECK(!tr_deck_load_text(&gr, "p.in", "", 2, ov8), "load p: %s", gr.errors);
    n = tr_deck_unused_keys(&gr, buf, sizeof buf);
    CHECK(n == 1 && strstr(buf, "[parallel] sequence_parallel = true (command line "
                                "'parallel.sequence_parallel=true') applies where parallel.tp > "
                                "1; this run has parallel.tp = 1 and ignores it"),
          "tp 1: sequence_parallel unused, got %d: %s", n, buf);
    tr_deck_free(&gr);
    char *ov9[] = {"model.name=gpt", "parallel.tp=2", "parallel.sequence_parallel=true"};
    CHECK(!tr_deck_load_text(&gr, "p.in", "", 3, ov9), "load p2: %s", gr.errors);
    n = tr_deck_unused_keys(&gr, buf, sizeof buf);
    CHECK(n == 0, "tp 2: sequence_parallel used, got %d: %s", n, buf);
    tr_deck_free(&gr);

    /* a resolved deck (deck.in) sets every key, the other model's at their defaults:
     * read back, it names none of those */
    char *text = tr_deck_resolved_text(&g);
    tr_deck r;
    CHECK(!tr_deck_load_text(&r, "deck.in", text, 0, NULL), "load deck.in: %s", r.errors);
    n = tr_deck_unused_keys(&r, buf, sizeof buf);
    CHECK(n == 2, "deck.in names only the two keys set for other data, got %d: %s", n, buf);
    free(text);
    tr_deck_free(&r);
    tr_deck_free(&g);
}

/* What editors and people write: a UTF-8 byte-order mark before the first section;
 * integers in e-notation up to a key's maximum (1e18 is exact in a double), and past
 * a long's range refused as out of range, quoting what was written. */
static void test_bom_and_big_integers(void)
{
    tr_deck d;
    int rc = tr_deck_load_text(&d, "bom.in", "\xEF\xBB\xBF[train]\nepochs = 3\n", 0, NULL);
    CHECK(rc == 0 && tr_deck_int(&d, "train", "epochs") == 3, "BOM: rc %d: %s", rc, d.errors);
    tr_deck_free(&d);
    char *big[] = {"train.steps=1e18", "train.log_every=1e16"};
    rc = tr_deck_load_text(&d, "b.in", "", 2, big);
    CHECK(rc == 0, "1e18 and 1e16 as integers: rc %d: %s", rc, d.errors);
    CHECK(tr_deck_int(&d, "train", "steps") == 1000000000000000000L, "1e18 exactly");
    tr_deck_free(&d);
    char *huge[] = {"train.steps=1e19", "train.epochs=99999999999999999999", "train.seed=2.5"};
    rc = tr_deck_load_text(&d, "h.in", "", 3, huge);
    CHECK(rc == TR_EXIT_USAGE, "past a long: rc %d", rc);
    CHECK(strstr(d.errors, "[train] steps = 1e19 is out of range"), "1e19: %s", d.errors);
    CHECK(strstr(d.errors, "[train] epochs = 99999999999999999999 is out of range"),
          "20 digits: %s", d.errors);
    CHECK(strstr(d.errors, "[train] seed expects an integer, got '2.5'"), "2.5: %s", d.errors);
    tr_deck_free(&d);
    /* a range's end as it is (beta2's 0.999999999 was printed "1", refusing 1 "in" it) */
    char *one[] = {"optim.beta2=1"};
    rc = tr_deck_load_text(&d, "o.in", "", 1, one);
    CHECK(rc == TR_EXIT_USAGE && strstr(d.errors, "beta2 = 1 is out of range [0, 0.999999999]"),
          "beta2 = 1: %s", d.errors);
    tr_deck_free(&d);
}

int main(void)
{
    test_values_and_defaults();
    test_overrides();
    test_errors();
    test_resolved_roundtrip();
    test_table_defaults_valid();
    test_same_value();
    test_unused_keys();
    test_bom_and_big_integers();
    return tr_test_finish();
}
