/* test_metrics.c: metrics.csv across a resume (train/metrics.h). The rows up to the
 * checkpoint's step stay and later ones go; a line longer than any buffer is one
 * line (a hand-edited note is dropped whole, never split into pieces that parse as
 * rows); a row cut short by a crash or a full disk is dropped, so the next row does
 * not run into it; rows written after the resume follow the kept ones. */
#include "test_util.h"
#include "train/metrics.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char g_dir[] = "/tmp/trainer_metrics.XXXXXX";

static void write_file(const char *text)
{
    char path[256];
    snprintf(path, sizeof path, "%s/metrics.csv", g_dir);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

static char *read_file(void)
{
    static char buf[1 << 16];
    char path[256];
    snprintf(path, sizeof path, "%s/metrics.csv", g_dir);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    buf[n] = '\0';
    if (f)
        fclose(f);
    return buf;
}

static const char *HEADER =
    "step,epoch,phase,loss,accuracy,lr,grad_norm,samples_per_s,elapsed_s,loss_scale\n";
/* the row tr_metrics_write makes of step 4 below */
static const char *ROW4 = "4,0.500000,train,1.25,0.500000,0.01,2,100.0,3.000,1\n";

/* metrics.csv holding HEADER + rows, opened to resume at step (writing row 4 after
 * it when add4), must read HEADER + want */
static void expect_resume(const char *what, const char *rows, long step, int add4, const char *want)
{
    static char text[8192];
    snprintf(text, sizeof text, "%s%s", HEADER, rows);
    write_file(text);
    FILE *f = tr_metrics_open(g_dir, step);
    CHECK(f != NULL, "%s: open", what);
    if (!f)
        return;
    if (add4) {
        tr_metrics_row r = {4, 0.5, "train", 1.25, 0.5, 0.01, 2, 100, 3, 1};
        tr_metrics_write(f, &r);
    }
    fclose(f);
    snprintf(text, sizeof text, "%s%s%s", HEADER, want, add4 ? ROW4 : "");
    CHECK(!strcmp(read_file(), text), "%s:\n%.300s", what, read_file());
}

int main(void)
{
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }

    /* a fresh run: the header alone */
    FILE *f = tr_metrics_open(g_dir, 0);
    CHECK(f != NULL, "open");
    fclose(f);
    CHECK(!strcmp(read_file(), HEADER), "fresh file: '%s'", read_file());

    /* a resume at step 3: rows 1-3 stay, 4 goes; the rows after follow */
    expect_resume("resume at 3", "1,a\n2,b\n3,c\n4,d\n", 3, 1, "1,a\n2,b\n3,c\n");

    /* a hand-edited line of 3000 characters whose byte 2046 (from 0) starts "2,": one
     * line, dropped whole (a reader of 1023-byte pieces took "2,..." for a row) */
    static char note[4096];
    memset(note, 'x', 3000);
    note[0] = '#';
    memcpy(note + 2046, "2,zz", 4);
    snprintf(note + 3000, sizeof note - 3000, "\n2,b\n");
    expect_resume("long line", note, 5, 0, "2,b\n");

    /* the last row cut short (no newline): dropped, so the next row starts a line */
    expect_resume("cut row", "1,a\n2,b\n3,0.0", 3, 1, "1,a\n2,b\n");

    /* a resume with no metrics.csv (deleted by hand): a fresh one */
    char path[256];
    snprintf(path, sizeof path, "%s/metrics.csv", g_dir);
    unlink(path);
    f = tr_metrics_open(g_dir, 7);
    CHECK(f != NULL, "open without a file");
    fclose(f);
    CHECK(!strcmp(read_file(), HEADER), "no file: '%s'", read_file());

    unlink(path);
    rmdir(g_dir);
    return tr_test_finish();
}
