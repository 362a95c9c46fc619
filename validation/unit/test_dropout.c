/* test_dropout.c: dropout's mask (backend/dropout_math.h) and the CPU kernel.
 *  - Philox-4x32-10 against Random123's known-answer vectors, both through rng.c and
 *    the inline form the kernels share (core/philox.h);
 *  - tr_dropout_make: p 0 is off; p 0.5 drops below 2^31 and scales by 2;
 *  - tr_cpu_dropout: each element is 0 or exactly inp * 1 / (1 - p), the fraction
 *    dropped within 5 standard deviations of p (100000 elements, p 0.1 and 0.5);
 *  - the mask is a function of the global index alone: a call split in two at an
 *    index that is not a multiple of four (the Philox groups), in place or not, and
 *    with 1 or 2 threads, gives the bits of the whole call;
 *  - another step or site draws another mask (overlap about p^2);
 *  - attention's numbering: a call's (b, h) with its batch row and head offsets is
 *    the whole model's (base + b, head0 + h);
 *  - attention's groups: each element's factor is its word, 2 (i bit 3) + (j bit 3),
 *    of the call whose counter is the number of (i & ~8, j & ~8); no two elements
 *    share a (counter, word), T not a multiple of 16 included; the dropped fraction
 *    within 5 standard deviations of p. */
#include "backend/cpu_backend.h"
#include "backend/dropout_math.h"
#include "backend/transformer_kernels.h"
#include "core/philox.h"
#include "core/rng.h"
#include "test_util.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

enum { N = 100000 };
static float x[N], a[N], b[N];

static void test_philox(void)
{
    /* Random123's kat_vectors for philox4x32_10: counter words c0..c3, key k0, k1 */
    static const struct {
        uint32_t ctr[4], key[2], out[4];
    } kat[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
        {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
         {0xffffffffu, 0xffffffffu},
         {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
        {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
         {0xa4093822u, 0x299f31d0u},
         {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
    };
    for (size_t i = 0; i < sizeof kat / sizeof kat[0]; i++) {
        uint64_t lo = kat[i].ctr[0] | (uint64_t)kat[i].ctr[1] << 32;
        uint64_t hi = kat[i].ctr[2] | (uint64_t)kat[i].ctr[3] << 32;
        uint64_t key = kat[i].key[0] | (uint64_t)kat[i].key[1] << 32;
        uint32_t o[4];
        tr_philox4x32(o, key, hi, lo);
        tr_philox_out r = tr_philox(key, hi, lo);
        CHECK(!memcmp(o, kat[i].out, sizeof o), "Philox known answer %zu: %08x %08x %08x %08x", i,
              o[0], o[1], o[2], o[3]);
        CHECK(!memcmp(r.v, kat[i].out, sizeof o), "rng.c's Philox, known answer %zu", i);
    }
}

static void test_make(void)
{
    tr_dropout off = tr_dropout_make(0.0f, 1, 2, 3, 4);
    CHECK(!tr_dropout_on(&off) && !tr_dropout_on(NULL), "p 0 and NULL are off");
    tr_dropout half = tr_dropout_make(0.5f, 1, 2, 3, 4);
    CHECK(half.threshold == 0x80000000u && half.scale == 2.0f, "p 0.5: threshold %08x, scale %g",
          half.threshold, (double)half.scale);
    CHECK(half.stream == ((uint64_t)2 << 32 | 3) && half.base == 4, "stream: step << 32 | site");
}

/* the dropped fraction and the kept values of one call */
static void test_values(float p)
{
    tr_dropout d = tr_dropout_make(p, 1234, 5, TR_STREAM_DROPOUT + 1, 17);
    tr_cpu_dropout(a, x, N, &d);
    size_t zeros = 0, bad = 0;
    for (size_t i = 0; i < N; i++) {
        zeros += a[i] == 0.0f;
        bad += a[i] != 0.0f && a[i] != x[i] * d.scale;
    }
    double mean = p * (double)N, sd = sqrt(N * (double)p * (1.0 - p));
    CHECK(fabs((double)zeros - mean) < 5 * sd, "p %.2f: dropped %zu of %d, expected %.0f", p, zeros,
          N, mean);
    CHECK(bad == 0, "p %.2f: %zu kept values are not inp / (1 - p)", p, bad);
    printf("  p %.2f: dropped %zu of %d (expected %.0f +- %.0f)\n", p, zeros, N, mean, sd);
}

/* the mask depends on the global index only */
static void test_split(void)
{
    tr_dropout d = tr_dropout_make(0.3f, 99, 8, TR_STREAM_DROPOUT + 2, 1001);
    tr_cpu_dropout(a, x, N, &d);
    const size_t cut = 333; /* 1001 + 333: not a multiple of 4 */
    tr_dropout d1 = d, d2 = d;
    d2.base = d.base + cut;
    memcpy(b, x, sizeof b);
    tr_cpu_dropout(b, b, cut, &d1); /* in place, in two calls */
    tr_cpu_dropout(b + cut, b + cut, N - cut, &d2);
    CHECK(!memcmp(a, b, sizeof a), "two calls in place give the whole call's bits");
    omp_set_num_threads(1);
    tr_cpu_dropout(b, x, N, &d);
    omp_set_num_threads(2);
    CHECK(!memcmp(a, b, sizeof a), "1 thread gives 2 threads' bits");

    tr_dropout other = tr_dropout_make(0.3f, 99, 9, TR_STREAM_DROPOUT + 2, 1001);
    tr_cpu_dropout(b, x, N, &other);
    size_t both = 0;
    for (size_t i = 0; i < N; i++)
        both += a[i] == 0.0f && b[i] == 0.0f;
    double mean = 0.09 * N, sd = sqrt(N * 0.09 * 0.91);
    CHECK(fabs((double)both - mean) < 5 * sd, "another step: %zu dropped in both, expected %.0f",
          both, mean);
}

static void test_attention_index(void)
{
    tr_dropout whole = tr_dropout_make(0.1f, 1, 1, 1, 0), part = whole;
    whole.heads = part.heads = 12;
    part.base = 6, part.head0 = 4; /* a rank's call: global rows 6.., heads 4.. */
    int T = 9, ok = 1;
    for (int bb = 0; bb < 2; bb++)
        for (int h = 0; h < 4; h++)
            for (int i = 0; i < T; i++)
                for (int j = 0; j <= i; j++)
                    ok &= tr_dropout_att_index(&part, bb, h, i, j, T) ==
                          tr_dropout_att_index(&whole, 6 + bb, 4 + h, i, j, T);
    CHECK(ok, "attention's (b, h) with offsets is the model's (base + b, head0 + h)");
    CHECK(tr_dropout_att_index(&whole, 1, 2, 3, 4, T) ==
              (((uint64_t)1 * 12 + 2) * (uint64_t)T + 3) * (uint64_t)T + 4,
          "((b NH + h) T + i) T + j");
}

/* a (counter, word) pair, for finding two elements that share a draw */
typedef struct {
    uint64_t counter;
    int word;
} draw_id;

static int draw_id_cmp(const void *pa, const void *pb)
{
    const draw_id *u = pa, *v = pb;
    if (u->counter != v->counter)
        return u->counter < v->counter ? -1 : 1;
    return (u->word > v->word) - (u->word < v->word);
}

static void test_attention_groups(void)
{
    tr_dropout d = tr_dropout_make(0.3f, 77, 3, TR_STREAM_DROPOUT + 4, 5);
    d.heads = 6, d.head0 = 2;
    enum { B = 2, H = 3, T = 37 }; /* T: two whole 16-row bands and a ragged one */
    static draw_id ids[B * H * T * T];
    size_t n = 0, bad = 0;
    for (int bb = 0; bb < B; bb++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < T; i++)
                for (int j = 0; j < T; j++) {
                    uint64_t counter = tr_dropout_att_index(&d, bb, h, i & ~8, j & ~8, T);
                    int word = 2 * ((i >> 3) & 1) + ((j >> 3) & 1);
                    uint32_t r[4];
                    tr_philox4x32(r, d.seed, d.stream, counter);
                    float want = r[word] < d.threshold ? 0.0f : d.scale;
                    bad += tr_dropout_att_factor(&d, bb, h, i, j, T) != want;
                    ids[n++] = (draw_id){counter, word};
                }
    CHECK(bad == 0,
          "attention: %zu factors are not word 2 (i bit 3) + (j bit 3) of the counter "
          "of (i & ~8, j & ~8)",
          bad);
    qsort(ids, n, sizeof ids[0], draw_id_cmp);
    size_t shared = 0;
    for (size_t e = 1; e < n; e++)
        shared += !draw_id_cmp(&ids[e - 1], &ids[e]);
    CHECK(shared == 0, "attention: %zu pairs of elements share a Philox word", shared);

    /* the fraction dropped over a causal 256 x 256 head */
    enum { TT = 256 };
    size_t zeros = 0, live = 0;
    for (int i = 0; i < TT; i++)
        for (int j = 0; j <= i; j++, live++)
            zeros += tr_dropout_att_factor(&d, 0, 0, i, j, TT) == 0.0f;
    double mean = 0.3 * (double)live, sd = sqrt((double)live * 0.3 * 0.7);
    CHECK(fabs((double)zeros - mean) < 5 * sd, "attention: dropped %zu of %zu, expected %.0f",
          zeros, live, mean);
}

int main(void)
{
    tr_cpu_backend_init(2);
    for (size_t i = 0; i < N; i++)
        x[i] = tr_rng_uniform(3, 4, i) * 4.0f - 2.0f;
    test_philox();
    test_make();
    test_values(0.1f);
    test_values(0.5f);
    test_split();
    test_attention_index();
    test_attention_groups();
    return tr_test_finish();
}
