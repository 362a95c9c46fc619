/* deck.h: the input deck: INI-style text, every key declared once in a table.
 *
 * A deck is `[section]` headers, `key = value` lines and `#` or `;` comments.
 * The table in deck_keys.c declares each key (section, name, type, default,
 * range or choices, help); the parser, `trainer --help-deck`, the resolved deck
 * written to the run directory and every error message come from that table.
 * Overrides `section.key=value` from the command line are applied after the file.
 *
 * Why not libinih: its handler is not told the line number unless the library
 * itself was built with INI_HANDLER_LINENO (Debian's is not), and every error
 * here must say FILE:LINE. The grammar is small enough to parse strictly here. */
#ifndef TR_DECK_H
#define TR_DECK_H

#include <stdio.h>

typedef enum {
    TR_KEY_INT,
    TR_KEY_FLOAT,
    TR_KEY_BOOL,
    TR_KEY_STRING,
    TR_KEY_PATH,    /* a file path; an empty value means "not used" */
    TR_KEY_CHOICE,  /* one of the '|'-separated words in choices */
    TR_KEY_INTLIST, /* comma-separated positive integers, e.g. 256,256 */
} tr_key_type;

typedef struct tr_key_spec {
    const char *section;
    const char *name;
    tr_key_type type;
    const char *def;     /* default, as deck text */
    double min, max;     /* inclusive range for INT and FLOAT */
    const char *choices; /* "a|b|c" for CHOICE */
    const char *help;
} tr_key_spec;

extern const tr_key_spec tr_deck_keys[];
extern const int tr_deck_nkeys;

#define TR_DECK_VALUE_MAX 1024
#define TR_DECK_ORIGIN_MAX 1200
#define TR_DECK_ERRORS_MAX 8192

typedef struct tr_deck_value {
    char text[TR_DECK_VALUE_MAX];
    char origin[TR_DECK_ORIGIN_MAX]; /* "inputs/mnist.in:12", "command line 'x.y=z'" or "" */
    int set;                         /* 0: default */
} tr_deck_value;

typedef struct tr_deck {
    char path[1024];
    tr_deck_value *values; /* tr_deck_nkeys entries, in table order */
    char errors[TR_DECK_ERRORS_MAX]; /* every problem found, one per line */
    int nerrors;
} tr_deck;

/* Reads the deck file and applies the overrides. Returns 0, or TR_EXIT_NOINPUT
 * when the file cannot be read, or TR_EXIT_USAGE when any key is wrong; then
 * d->errors holds one "FILE:LINE: message" line per problem. Pure: no MPI, no
 * printing, so every rank can parse and agree without talking. */
int tr_deck_load(tr_deck *d, const char *path, int noverrides, char *const *overrides);
/* Parses deck text already in memory (tests, checkpoints); name is for messages. */
int tr_deck_load_text(tr_deck *d, const char *name, const char *text, int noverrides,
                      char *const *overrides);
void tr_deck_free(tr_deck *d);

/* Typed access. Asking for a key the table does not declare is a bug (fatal). */
long tr_deck_int(const tr_deck *d, const char *section, const char *name);
double tr_deck_float(const tr_deck *d, const char *section, const char *name);
int tr_deck_bool(const tr_deck *d, const char *section, const char *name);
const char *tr_deck_str(const tr_deck *d, const char *section, const char *name);
/* Fills out[] and returns the count (at most max). */
int tr_deck_intlist(const tr_deck *d, const char *section, const char *name, int *out, int max);
/* 1 when key (an index into tr_deck_keys) has the same value in a and b, compared
 * as its type (0.1 and 1e-1 are the same float, "true" and "yes" the same bool). */
int tr_deck_same_value(const tr_deck *a, const tr_deck *b, int key);
/* 1 when the deck file or an override set the key, 0 when it holds its default. */
int tr_deck_is_set(const tr_deck *d, const char *section, const char *name);
/* A value the program decides when the deck left the key at its default (the run
 * directory of a Slurm job): checked like deck text, marked set at `origin` (e.g.
 * "Slurm job 1234") in the resolved deck and in messages. Returns 0, or
 * TR_EXIT_USAGE with the problem appended to d->errors. */
int tr_deck_set(tr_deck *d, const char *section, const char *name, const char *value,
                const char *origin);
/* Where the value came from, for later errors: "FILE:LINE", "command line 'k=v'",
 * or "FILE (default of [section] name)" when the deck did not set it. */
void tr_deck_where(const tr_deck *d, const char *section, const char *name, char *buf,
                   size_t len);

/* The keys the deck or an override set that this run does not use: those whose help
 * names a model or data form ("gpt: ", "mlp: ", "tokens: ") other than the deck's
 * model.name or data.format (a dropout set for the MLP, say). One line per key into
 * buf, "[model] attn_pdrop = 0.1 (FILE:LINE) applies where model.name = gpt; this run
 * has model.name = mlp and ignores it"; returns how many. */
int tr_deck_unused_keys(const tr_deck *d, char *buf, size_t len);

/* The full reference, generated from the table (trainer --help-deck). */
void tr_deck_print_reference(FILE *out);
/* The resolved deck: every key with its value, the non-default ones marked. */
void tr_deck_write_resolved(const tr_deck *d, FILE *out);
/* The same text in memory (malloc'd; free() it) */
char *tr_deck_resolved_text(const tr_deck *d);
/* Edit distance, exposed for the unit tests of suggestions. */
int tr_edit_distance(const char *a, const char *b);

#endif
