/* fuzz_deck.c: the deck parser (core/deck.c) on any file and command-line
 * overrides.
 *
 * Input: the deck file's bytes, then, after a 0x1e byte (ASCII's record
 * separator), up to 8 overrides separated by 0x1e. Checked: a failed load says
 * why (one line per problem); a deck that loads reads back through every typed
 * getter, and its resolved form (what the run directory keeps) loads again to
 * the same values. */
#include "fuzz.h"

#include "core/deck.h"

#include <string.h>

#define MAX_OVERRIDES 8

static void read_every_key(const tr_deck *d)
{
    for (int i = 0; i < tr_deck_nkeys; i++) {
        const tr_key_spec *k = &tr_deck_keys[i];
        int list[64];
        char where[2048];
        switch (k->type) {
        case TR_KEY_INT: {
            long v = tr_deck_int(d, k->section, k->name);
            FUZZ_CHECK(v >= k->min && v <= k->max, "[%s] %s = %ld outside [%g, %g]", k->section,
                       k->name, v, k->min, k->max);
            break;
        }
        case TR_KEY_FLOAT: {
            double v = tr_deck_float(d, k->section, k->name);
            FUZZ_CHECK(v >= k->min && v <= k->max, "[%s] %s = %g outside [%g, %g]", k->section,
                       k->name, v, k->min, k->max);
            break;
        }
        case TR_KEY_BOOL: {
            int v = tr_deck_bool(d, k->section, k->name);
            FUZZ_CHECK(v == 0 || v == 1, "[%s] %s = %d", k->section, k->name, v);
            break;
        }
        case TR_KEY_INTLIST: {
            int n = tr_deck_intlist(d, k->section, k->name, list, 64);
            FUZZ_CHECK(n >= 0 && n <= 64, "[%s] %s: %d values", k->section, k->name, n);
            for (int j = 0; j < n; j++)
                FUZZ_CHECK(list[j] > 0, "[%s] %s: value %d is %d", k->section, k->name, j, list[j]);
            break;
        }
        default:
            FUZZ_CHECK(tr_deck_str(d, k->section, k->name) != NULL, "[%s] %s", k->section, k->name);
        }
        tr_deck_where(d, k->section, k->name, where, sizeof where);
        FUZZ_CHECK(memchr(where, '\0', sizeof where) != NULL, "where");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *deck_bytes, *rest;
    size_t deck_len, rest_len;
    fuzz_split(data, size, 0x1e, &deck_bytes, &deck_len, &rest, &rest_len);
    char *overrides[MAX_OVERRIDES];
    int n = 0;
    while (rest_len && n < MAX_OVERRIDES) {
        const uint8_t *one, *after;
        size_t one_len, after_len;
        fuzz_split(rest, rest_len, 0x1e, &one, &one_len, &after, &after_len);
        overrides[n++] = fuzz_cstring(one, one_len);
        rest = after, rest_len = after_len;
    }

    tr_deck d;
    int rc = tr_deck_load(&d, fuzz_file(0, deck_bytes, deck_len), n, overrides);
    FUZZ_CHECK(rc == 0 || rc == 64, "load returned %d", rc);
    FUZZ_CHECK(memchr(d.errors, '\0', sizeof d.errors) != NULL, "errors not terminated");
    FUZZ_CHECK((rc != 0) == (d.nerrors > 0), "rc %d with %d errors", rc, d.nerrors);
    if (rc) {
        FUZZ_CHECK(d.errors[0] != '\0', "rc %d without a message", rc);
    } else {
        read_every_key(&d);
        /* the resolved deck loads again, to the same values */
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        FUZZ_CHECK(f != NULL, "open_memstream");
        tr_deck_write_resolved(&d, f);
        fclose(f);
        tr_deck again;
        int rc2 = tr_deck_load_text(&again, "resolved.in", text, 0, NULL);
        FUZZ_CHECK(rc2 == 0, "the resolved deck does not load: %s\n%s", again.errors, text);
        for (int i = 0; i < tr_deck_nkeys; i++)
            FUZZ_CHECK(!strcmp(d.values[i].text, again.values[i].text),
                       "[%s] %s is '%s', resolved and read again '%s'", tr_deck_keys[i].section,
                       tr_deck_keys[i].name, d.values[i].text, again.values[i].text);
        tr_deck_free(&again);
        free(text);
    }
    tr_deck_free(&d);
    for (int i = 0; i < n; i++)
        free(overrides[i]);
    return 0;
}
