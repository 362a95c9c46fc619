/* progress.h: the rank-0 progress line: in place on a terminal, plain periodic
 * lines into a file, nothing when off. */
#ifndef TR_PROGRESS_H
#define TR_PROGRESS_H

typedef enum { TR_PROGRESS_TTY, TR_PROGRESS_LINES, TR_PROGRESS_OFF } tr_progress_mode;

typedef struct tr_progress {
    tr_progress_mode mode;
    long total_steps, every; /* lines mode: print every this many steps */
    double last_print;
    int dirty; /* a \r line is on screen */
} tr_progress;

/* mode: "auto", "tty", "lines" or "off"; auto looks at whether stdout is a terminal. */
void tr_progress_init(tr_progress *p, const char *mode, long total_steps);
/* rate in unit ("samples/s", "tokens/s"); mfu shown when > 0 */
void tr_progress_update(tr_progress *p, long step, double epoch, double loss, double lr,
                        double rate, const char *unit, double mfu, double eta_s, double now);
/* Ends an in-place line before other output. */
void tr_progress_break(tr_progress *p);

#endif
