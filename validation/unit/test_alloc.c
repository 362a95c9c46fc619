/* test_alloc.c: tr_alloc and tr_free (core/alloc.c). Every block reads as zeros,
 * also where it reuses memory a freed block wrote; large blocks (32 MiB and more) are
 * mappings of their own, aligned to 2 MiB for huge pages, gone once freed (mincore
 * says the pages are not mapped), whichever order they are freed in and from however
 * many threads; TRAINER_HUGEPAGES=0 keeps them on malloc, zeroed all the same. Under
 * AddressSanitizer every block is malloc's: the zeros are checked, not the mappings. */
#include "core/error.h"
#include "test_util.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define MAPPED 0
#else
#define MAPPED 1
#endif

#define MIB ((size_t)1 << 20)
/* more than the registry's first 64 entries; under AddressSanitizer, whose malloc'd
 * blocks are zeroed page by page, a few */
#define NBIG (MAPPED ? 70 : 8)
#define BIG (32 * MIB)

/* 1 where every page of p (and its last byte) reads 0 */
static int reads_zero(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i += 4096)
        if (p[i])
            return 0;
    return p[n - 1] == 0;
}

/* 1 where the page holding p is mapped in this process */
static int mapped(const void *p)
{
    unsigned char vec;
    uintptr_t page = (uintptr_t)p & ~(uintptr_t)4095;
    return mincore((void *)page, 4096, &vec) == 0 || errno != ENOMEM;
}

static size_t big_size(int i) { return BIG + (size_t)i * 4099; /* not page multiples */ }

/* writes a block's first, middle and last bytes, as kernels will: three pages made
 * (huge ones where the kernel has them), not all, to keep the test light */
static void touch(unsigned char *p, size_t n, unsigned char v) { p[0] = p[n / 2] = p[n - 1] = v; }

static void check_big_blocks(void)
{
    unsigned char *b[NBIG];
    for (int i = 0; i < NBIG; i++) {
        b[i] = tr_alloc(big_size(i), "test block");
        touch(b[i], big_size(i), 0xab); /* as kernels will */
    }
    int aligned = 1;
    for (int i = 0; i < NBIG; i++)
        aligned &= (uintptr_t)b[i] % (2 * MIB) == 0;
    if (MAPPED)
        CHECK(aligned, "every block of 32 MiB or more starts at a 2 MiB boundary");
    /* free in a scrambled order: each goes, the others stay */
    int order[NBIG];
    for (int i = 0; i < NBIG; i++)
        order[i] = (i * 37) % NBIG; /* 37 is prime to 70 and 8: a permutation */
    int gone_ok = 1, kept_ok = 1;
    for (int k = 0; k < NBIG; k++) {
        unsigned char *p = b[order[k]];
        tr_free(p);
        if (MAPPED)
            gone_ok &= !mapped(p) && !mapped(p + big_size(order[k]) - 1);
        if (k + 1 < NBIG)
            kept_ok &= mapped(b[order[k + 1]]) && b[order[k + 1]][0] == 0xab;
    }
    if (MAPPED)
        CHECK(gone_ok, "a freed large block is unmapped, head to tail");
    CHECK(kept_ok, "freeing one block leaves the others in place");
    /* the same sizes again read as zeros (fresh mappings, or malloc's zeroed reuse) */
    int zero = 1;
    for (int i = 0; i < NBIG; i += 7) {
        unsigned char *p = tr_alloc(big_size(i), "test block again");
        zero &= reads_zero(p, big_size(i));
        tr_free(p);
    }
    CHECK(zero, "large blocks read as zeros after others were written and freed");
}

static void check_small_blocks(void)
{
    int zero = 1;
    for (size_t n = 1; n < BIG; n = n * 3 + 5) {
        unsigned char *p = tr_alloc(n, "small block");
        memset(p, 0xcd, n); /* reused below 32 MiB: must be zeroed again */
        tr_free(p);
        p = tr_alloc(n, "small block again"); /* malloc may hand back the same memory */
        zero &= reads_zero(p, n) && (uintptr_t)p % 64 == 0;
        tr_free(p);
    }
    CHECK(zero, "small blocks are zeroed and 64-byte aligned, also when reused");
    tr_free(NULL); /* as free(NULL) */
    CHECK(1, "tr_free(NULL) is harmless");
}

static void *thread_blocks(void *arg)
{
    int *ok = arg;
    for (int round = 0; round < (MAPPED ? 6 : 1); round++) {
        unsigned char *p[4];
        for (int i = 0; i < 4; i++) {
            p[i] = tr_alloc(BIG + (size_t)round * 64, "thread block");
            *ok &= reads_zero(p[i], BIG);
            touch(p[i], BIG, 1);
        }
        for (int i = 3; i >= 0; i--)
            tr_free(p[i]);
    }
    return NULL;
}

static void check_threads(void)
{
    pthread_t t[4];
    int ok[4] = {1, 1, 1, 1};
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, thread_blocks, &ok[i]);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    CHECK(ok[0] && ok[1] && ok[2] && ok[3], "four threads allocating and freeing at once");
}

static void check_switched_off(void)
{
    setenv("TRAINER_HUGEPAGES", "0", 1);
    unsigned char *p = tr_alloc(BIG, "malloc block");
    touch(p, BIG, 0x11);
    tr_free(p);
    p = tr_alloc(BIG, "malloc block again");
    CHECK(reads_zero(p, BIG) && (uintptr_t)p % 64 == 0,
          "TRAINER_HUGEPAGES=0: malloc's block, zeroed and 64-byte aligned");
    tr_free(p);
    unsetenv("TRAINER_HUGEPAGES");
}

int main(void)
{
    check_big_blocks();
    check_small_blocks();
    check_threads();
    check_switched_off();
    return tr_test_finish();
}
