/* test_shm_allreduce.c (4 ranks): the shared-memory collectives of comm_shm.c.
 * Every rank of a group gets, bit for bit, the sum of the members' buffers taken in
 * group-rank order ((x0 + x1) + x2) + x3, in place and out of place, for sizes at
 * the shared-memory threshold (1024 floats), not a multiple of anything, and over
 * several chunks of the window (both halves, within one call and across calls); on
 * the world and on the 2-rank groups of a 2 x 2 grid, one after the other; the send
 * buffer of an out-of-place call is left as it was. The same for ZeRO's
 * reduce-scatter and all-gather over uneven parts, also through MPI before the
 * window exists. Below the threshold MPI sums in an order of its own, and the sum
 * is checked to rounding: on these values MPI's order does change bits, which shows
 * that the exact checks can fail. */
#include "comm/comm.h"
#include "core/error.h"
#include "test_util.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The value world rank r contributes at element i: magnitudes from 1e-4 to 1e4 and
 * both signs, so that a different order of the additions changes the bits. */
static float value(int r, size_t i)
{
    uint32_t h = (uint32_t)(i * 2654435761u) ^ (uint32_t)(r * 40503u + 17u);
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    float mant = (float)(h & 0xffff) / 65536.0f + 0.5f;
    int e = (int)((h >> 16) % 9) - 4;
    return ((h >> 31) ? -mant : mant) * powf(10.0f, (float)e);
}

/* members[k]: the world rank of group rank k */
static void check_sum(tr_group *g, const int *members, int me, size_t count, int in_place,
                      const char *what)
{
    int size = tr_group_size(g);
    float *send = tr_alloc(count * sizeof(float), "send"), *recv = send;
    for (size_t i = 0; i < count; i++)
        send[i] = value(me, i);
    if (!in_place) {
        recv = tr_alloc(count * sizeof(float), "recv");
        for (size_t i = 0; i < count; i++)
            recv[i] = NAN;
    }
    tr_allreduce(send, recv, count, TR_F32, TR_SUM, g);
    size_t wrong = 0, first = count, send_changed = 0;
    int exact = count >= 1024;
    for (size_t i = 0; i < count; i++) {
        float want = value(members[0], i), mag = fabsf(want);
        for (int k = 1; k < size; k++) {
            want += value(members[k], i);
            mag += fabsf(value(members[k], i));
        }
        if (exact ? memcmp(&want, &recv[i], sizeof want) != 0
                  : !(fabsf(want - recv[i]) <= 1e-6f * mag)) {
            wrong++;
            if (first == count)
                first = i;
        }
        if (!in_place && memcmp(&send[i], &(float){value(me, i)}, sizeof(float)))
            send_changed++;
    }
    CHECK(wrong == 0, "%s, %zu floats, %s: %zu elements differ from the rank-order sum%s "
                      "(first at %zu: %.9g)",
          what, count, in_place ? "in place" : "out of place", wrong,
          exact ? "" : " beyond rounding", first,
          first < count ? (double)recv[first] : 0.0);
    CHECK(send_changed == 0, "%s: the send buffer changed in %zu places", what, send_changed);
    if (recv != send)
        tr_free(recv);
    tr_free(send);
}

/* ZeRO's collectives over uneven parts (rank r owns [count r / size, count (r+1) /
 * size)): tr_reduce_scatterv leaves the rank-order sum in this rank's part (to
 * rounding when MPI sums) and the rest of the buffer as it was; tr_allgatherv gives
 * every rank every part. */
static void check_parts(tr_group *g, const int *members, int me, size_t count, int exact,
                        const char *what)
{
    int size = tr_group_size(g), gr = tr_group_rank(g);
    size_t *counts = tr_alloc(2 * (size_t)size * sizeof *counts, "parts"), *displs = counts + size;
    for (int r = 0; r < size; r++) {
        displs[r] = count * (size_t)r / (size_t)size;
        counts[r] = count * (size_t)(r + 1) / (size_t)size - displs[r];
    }
    float *buf = tr_alloc(count * sizeof(float), "buffer");
    for (size_t i = 0; i < count; i++)
        buf[i] = value(me, i);
    tr_reduce_scatterv(buf, counts, displs, g);
    size_t wrong = 0, kept = 0;
    for (size_t i = 0; i < count; i++) {
        int mine = i >= displs[gr] && i < displs[gr] + counts[gr];
        float want = value(members[0], i), mag = fabsf(want);
        for (int k = 1; k < size && mine; k++) {
            want += value(members[k], i);
            mag += fabsf(value(members[k], i));
        }
        if (!mine)
            want = value(me, i);
        if (exact || !mine ? memcmp(&want, &buf[i], sizeof want) != 0
                           : !(fabsf(want - buf[i]) <= 1e-6f * mag))
            wrong++;
        kept += !mine;
    }
    CHECK(wrong == 0, "%s: reduce-scatter of %zu floats: %zu elements wrong (%zu outside "
                      "this rank's part)", what, count, wrong, kept);
    for (size_t i = 0; i < count; i++)
        buf[i] = i >= displs[gr] && i < displs[gr] + counts[gr] ? value(me, i) : NAN;
    tr_allgatherv(buf, counts, displs, TR_F32, g);
    wrong = 0;
    for (int r = 0; r < size; r++)
        for (size_t i = displs[r]; i < displs[r] + counts[r]; i++)
            wrong += memcmp(&buf[i], &(float){value(members[r], i)}, sizeof(float)) != 0;
    CHECK(wrong == 0, "%s: all-gather of %zu floats: %zu elements wrong", what, count, wrong);
    tr_free(buf);
    tr_free(counts);
}

/* 16-bit values (sequence parallelism's layernorm outputs): every rank's part, each
 * value as it was; parts of even counts at even offsets go through the window as
 * pairs, the others through MPI */
static void check_u16_parts(tr_group *g, const int *members, int me, size_t count, int even,
                            const char *what)
{
    int size = tr_group_size(g), gr = tr_group_rank(g);
    size_t *counts = tr_alloc(2 * (size_t)size * sizeof *counts, "parts"), *displs = counts + size;
    for (int r = 0; r < size; r++) { /* rows of 2 values each where even */
        size_t unit = even ? 2 : 1, rows = count / unit;
        displs[r] = rows * (size_t)r / (size_t)size * unit;
        counts[r] = rows * (size_t)(r + 1) / (size_t)size * unit - displs[r];
    }
    uint16_t *buf = tr_alloc(count * sizeof *buf, "buffer");
    for (size_t i = 0; i < count; i++) /* another rank's: 0xffff, to be overwritten */
        buf[i] =
            i >= displs[gr] && i < displs[gr] + counts[gr] ? (uint16_t)(me * 7919 + i) : 0xffff;
    tr_allgatherv(buf, counts, displs, TR_U16, g);
    size_t wrong = 0;
    for (int r = 0; r < size; r++)
        for (size_t i = displs[r]; i < displs[r] + counts[r]; i++)
            wrong += buf[i] != (uint16_t)(members[r] * 7919 + i);
    CHECK(wrong == 0, "%s: all-gather of %zu 16-bit values (%s parts): %zu elements wrong", what,
          count, even ? "even" : "odd", wrong);
    tr_free(buf);
    tr_free(counts);
}

/* sizes: below the threshold, at it, odd, and across the 3000-float chunks below */
static const size_t sizes[] = {10, 1024, 1031, 2999, 3000, 3001, 9017, 20000};

static void check_group(tr_group *g, const int *members, int me, const char *what)
{
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        for (int in_place = 0; in_place < 2; in_place++)
            check_sum(g, members, me, sizes[s], in_place, what);
        check_parts(g, members, me, sizes[s], 1, what);
        check_u16_parts(g, members, me, 2 * sizes[s], 1, what);
        check_u16_parts(g, members, me, sizes[s], 0, what);
    }
}

int main(int argc, char **argv)
{
    tr_world w;
    tr_comm_init(&argc, &argv, &w);
    if (w.size != 4) {
        if (w.rank == 0)
            fprintf(stderr, "test_shm_allreduce: run on 4 ranks (got %d)\n", w.size);
        tr_comm_finalize(&w);
        return 1;
    }
    int world_members[4] = {0, 1, 2, 3};
    /* first through MPI, before the world has a window */
    check_parts(w.world, world_members, w.rank, 9017, 0, "world through MPI");
    /* the window holds 3000 floats per half: the larger sizes take several chunks */
    CHECK(tr_group_share_memory(w.world, 3000) == 1, "4 ranks of one node: no window");
    CHECK(tr_group_shares_memory(w.world), "the world does not report its window");
    check_group(w.world, world_members, w.rank, "world");

    tr_comm_make_grid(&w, 2, 2, 1);
    /* the dp group: the ranks of the same tp rank, in dp order; tp: consecutive */
    int dp_members[2] = {w.tp_rank, w.tp_rank + 2};
    int tp_members[2] = {w.dp_rank * 2, w.dp_rank * 2 + 1};
    CHECK(tr_group_share_memory(w.dp_group, 3000) == 1, "dp group: no window");
    CHECK(tr_group_share_memory(w.tp_group, 1 << 30) == 1, "tp group: no window");
    check_group(w.dp_group, dp_members, w.rank, "dp group of 2");
    check_group(w.tp_group, tp_members, w.rank, "tp group of 2");
    check_group(w.world, world_members, w.rank, "world again");

    int failed = tr_test_failed, any = 0;
    tr_allreduce(&failed, &any, 1, TR_I32, TR_MAX, w.world);
    int rc = tr_test_finish();
    tr_comm_finalize(&w);
    return rc || any;
}
