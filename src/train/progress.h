/* progress.h: the rank-0 progress line: in place on a terminal, plain periodic
 * lines into a file, nothing when off. */
#ifndef TR_PROGRESS_H
#define TR_PROGRESS_H

#include <stdio.h>

typedef enum { TR_PROGRESS_TTY, TR_PROGRESS_LINES, TR_PROGRESS_OFF } tr_progress_mode;

/* Lines mode: the longest a log goes without a line while steps complete, seconds.
 * A long run's twentieth can be hours; someone tailing a Slurm output file should
 * not have to wonder whether the job still runs. */
#define TR_PROGRESS_QUIET_S 60.0

typedef struct tr_progress {
    tr_progress_mode mode;
    long total_steps, every; /* lines mode: print every this many steps */
    double last_print;       /* `now` of the last line; none yet: -1e30 */
    int dirty;               /* a \r line is on screen */
    FILE *out;               /* stdout (a test may point it elsewhere) */
} tr_progress;

/* mode: "auto", "tty", "lines" or "off"; auto looks at whether stdout is a terminal. */
void tr_progress_init(tr_progress *p, const char *mode, long total_steps);
/* rate in unit ("samples/s", "tokens/s"); mfu shown when > 0; now in seconds (any
 * origin). Lines mode prints the session's first step, every `every`-th, the last,
 * and any step that ends TR_PROGRESS_QUIET_S or more after the last line. */
void tr_progress_update(tr_progress *p, long step, double epoch, double loss, double lr,
                        double rate, const char *unit, double mfu, double eta_s, double now);
/* Ends an in-place line before other output. */
void tr_progress_break(tr_progress *p);

#endif
