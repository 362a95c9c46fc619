/* fuzz_json.c: the encoder.json parser (text/json_object.c) on any bytes.
 *
 * Checked: every member's key is NUL-terminated at its length and its offset
 * lies in the text; a callback that stops the parse makes it fail with the
 * callback's own message; any other failure names the file. */
#include "fuzz.h"

#include "text/json_object.h"

#include <string.h>

typedef struct members {
    size_t len, count, stop_after; /* the text's length; members seen; stop at this one */
} members;

static int on_member(void *ctx, const char *key, size_t key_len, int64_t value, size_t offset,
                     char *err, size_t errlen)
{
    members *m = ctx;
    (void)value;
    FUZZ_CHECK(key != NULL && key[key_len] == '\0', "key of %zu bytes not terminated", key_len);
    FUZZ_CHECK(offset < m->len, "offset %zu in a text of %zu", offset, m->len);
    if (++m->count == m->stop_after) {
        snprintf(err, errlen, "stopped at member %zu", m->count);
        return 1;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* the text's last byte chooses where the callback stops (0: never) */
    members m = {size, 0, size ? data[size - 1] % 16 : 0};
    char err[256];
    err[0] = '\0';
    int rc =
        tr_json_object_parse((const char *)data, size, "fuzz.json", on_member, &m, err, sizeof err);
    FUZZ_CHECK(rc == 0 || rc == -1, "returned %d", rc);
    if (rc) {
        fuzz_check_message(err, sizeof err, "json");
        if (m.stop_after && m.count == m.stop_after)
            FUZZ_CHECK(!strncmp(err, "stopped at member", 17), "the callback's message lost: %s",
                       err);
        else
            FUZZ_CHECK(!strncmp(err, "fuzz.json", 9), "message without the file: %s", err);
    } else {
        FUZZ_CHECK(!m.stop_after || m.count < m.stop_after, "went on after a stop");
    }
    return 0;
}
