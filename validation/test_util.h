/* test_util.h: a tiny check macro shared by the C tests: counts and reports. */
#ifndef TR_TEST_UTIL_H
#define TR_TEST_UTIL_H

#include <stdio.h>

static int tr_test_passed, tr_test_failed;

#define CHECK(cond, ...)                                                  \
    do {                                                                  \
        if (cond) {                                                       \
            tr_test_passed++;                                             \
        } else {                                                          \
            tr_test_failed++;                                             \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                 \
            fprintf(stderr, "\n");                                        \
        }                                                                 \
    } while (0)

/* Prints the closing line CI reads and returns the exit code. */
static inline int tr_test_finish(void)
{
    printf("%d passed, %d failed\n", tr_test_passed, tr_test_failed);
    return tr_test_failed ? 1 : 0;
}

#endif
