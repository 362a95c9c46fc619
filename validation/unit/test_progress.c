/* test_progress.c: which steps the progress line shows (train/progress.h). In lines
 * mode (a log file): the first step of the session, every twentieth of the run, the
 * last, and a step that ends a minute or more after the last line, so a slow run's
 * log never goes quiet for long; never two lines for one step. On a terminal: in
 * place (\r ... erase to the end), at most ten a second, the last always, and one
 * newline before other output. Off: nothing. */
#include "test_util.h"
#include "train/progress.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char g_buf[1 << 16];

/* A progress line writer in `mode` for `total` steps, into a fresh temporary file. */
static tr_progress start(const char *mode, long total)
{
    tr_progress p;
    tr_progress_init(&p, mode, total);
    p.out = tmpfile();
    if (!p.out) {
        perror("tmpfile");
        exit(1);
    }
    return p;
}

/* Everything written so far; closes the file. */
static const char *finish(tr_progress *p)
{
    rewind(p->out);
    size_t n = fread(g_buf, 1, sizeof g_buf - 1, p->out);
    g_buf[n] = '\0';
    fclose(p->out);
    return g_buf;
}

/* The steps of the "step S/T" lines in text, as "S,S,...". */
static const char *steps_shown(const char *text)
{
    static char list[4096];
    list[0] = '\0';
    for (const char *s = strstr(text, "step "); s; s = strstr(s + 1, "step ")) {
        char one[32];
        snprintf(one, sizeof one, "%s%ld", list[0] ? "," : "", strtol(s + 5, NULL, 10));
        strncat(list, one, sizeof list - strlen(list) - 1);
    }
    return list;
}

static void update(tr_progress *p, long step, double now)
{
    tr_progress_update(p, step, step / 10.0, 2.5, 0.01, 1000, "samples/s", 0, 10, now);
}

int main(void)
{
    /* lines: 100 steps of 0.1 s: the first, every fifth, the last */
    tr_progress p = start("lines", 100);
    for (long s = 1; s <= 100; s++)
        update(&p, s, 0.1 * s);
    const char *got = steps_shown(finish(&p));
    CHECK(!strcmp(got, "1,5,10,15,20,25,30,35,40,45,50,55,60,65,70,75,80,85,90,95,100"),
          "fast lines run: %s", got);

    /* a session resumed at step 37: its first step is shown too */
    p = start("lines", 100);
    for (long s = 38; s <= 100; s++)
        update(&p, s, 0.1 * s);
    got = steps_shown(finish(&p));
    CHECK(!strcmp(got, "38,40,45,50,55,60,65,70,75,80,85,90,95,100"), "resumed run: %s", got);

    /* slow steps (25 s each) on a long run (every 50th step): a line each minute */
    p = start("lines", 1000);
    for (long s = 1; s <= 12; s++)
        update(&p, s, 25.0 * s);
    got = steps_shown(finish(&p));
    CHECK(!strcmp(got, "1,4,7,10"), "slow run, a line a minute: %s", got);

    /* the minute counts from the last line, whatever printed it */
    p = start("lines", 1000);
    update(&p, 1, 0.0);
    update(&p, 49, 59.0);
    update(&p, 50, 59.5); /* every 50th: printed */
    update(&p, 51, 100.0);
    update(&p, 52, 119.6); /* 60.1 s after step 50's line */
    got = steps_shown(finish(&p));
    CHECK(!strcmp(got, "1,50,52"), "minute after the last line: %s", got);

    /* a single-step run: one line */
    p = start("lines", 1);
    update(&p, 1, 1.0);
    got = steps_shown(finish(&p));
    CHECK(!strcmp(got, "1"), "one step: %s", got);

    /* the line itself */
    p = start("lines", 100);
    tr_progress_update(&p, 5, 0.5, 1.23456, 0.0005, 2048.4, "tokens/s", 0.125, 75, 0);
    got = finish(&p);
    CHECK(!strcmp(got, "step   5/100  epoch 0.50  loss 1.2346  lr 0.0005  2048 tokens/s  MFU "
                       "12.5%  ETA 1m15s\n"),
          "line: '%s'", got);

    /* terminal: in place, at most ten a second, the last always, then a newline */
    p = start("tty", 100);
    for (long s = 1; s <= 100; s++)
        update(&p, s, 0.01 * s); /* 100 steps a second */
    tr_progress_break(&p);
    tr_progress_break(&p); /* nothing more: the line was ended */
    got = finish(&p);
    int returns = 0;
    for (const char *c = got; *c; c++)
        returns += *c == '\r';
    CHECK(returns >= 9 && returns <= 11, "terminal updates: %d for 1 s", returns);
    CHECK(strstr(got, "\rstep 100/100") != NULL, "terminal: last step shown");
    size_t n = strlen(got);
    CHECK(n > 4 && !strcmp(got + n - 4, "\033[K\n"), "terminal: ends with erase, newline");
    CHECK(!strchr(got, '\n') || strchr(got, '\n') == got + n - 1, "terminal: one newline");

    /* off */
    p = start("off", 100);
    for (long s = 1; s <= 100; s++)
        update(&p, s, 100.0 * s);
    tr_progress_break(&p);
    got = finish(&p);
    CHECK(got[0] == '\0', "off: '%s'", got);

    return tr_test_finish();
}
