/* min3.ring._schedule_ring in C: every piece travels the ring of the pool's ranks from each rank
 * that holds it to the next one that does, each rank forwarding what it holds earliest
 * first, its transfers backfilled into the gaps of the timelines the pools above left. Read
 * the Python function first: this is the same engine, statement for statement, on local
 * rank indices (rank i sends to i + 1 mod n).
 *
 * In:  per rank i its ring link i -> i + 1: dur, early, os, gap, fifo and link (updated in
 *      place, as the Python function updates its list); floor, the pool's arrival; the
 *      timelines above per rank, in the order the Python sorts its tuples: sends
 *      (send_start, send_freed)[send_off[i] .. send_off[i + 1]] and receives
 *      (recv_start, recv_end, recv_land)[recv_off[j] .. recv_off[j + 1]]; the holders of
 *      each piece in insertion order: held_rank/held_time[held_off[d] .. held_off[d + 1]].
 * Out: the transfers in the order taken (local ranks), at most cap; the ring's own
 *      send_free and recv_free per rank. Returns how many transfers, or < 0.
 */
#include "kernels.h"

#define CS_EOVERFLOW (-3) /* more transfers than the caller counted: a bug, not a schedule */

typedef struct {
    int64_t n;
    const double *dur, *early, *os, *gap;
    const uint8_t *fifo;
    double *link, *send_free, *recv_free;
    const int64_t *send_off, *recv_off;
    const double *send_start, *send_freed, *recv_start, *recv_end, *recv_land;
    cs_heap *queue; /* per rank: (time it holds the piece, piece) to forward */
    cs_heap heap;   /* (start of the rank's next transfer, rank) */
    double *live;   /* the rank's current entry in heap, if live_has */
    uint8_t *live_has;
} ring;

/* bisect.bisect_right: the number of leading a[k] <= t (the same comparisons). */
static int64_t bisect_right(const double *a, int64_t len, double t)
{
    int64_t lo = 0, hi = len;
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (t < a[mid])
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* Earliest t' >= t at which rank i may start a ring send between its sends above. */
static double send_fit(const ring *R, int64_t i, double t)
{
    const int64_t off = R->send_off[i], len = R->send_off[i + 1] - off;
    const double *starts = R->send_start + off, *freed = R->send_freed + off;
    int64_t k = bisect_right(starts, len, t);
    for (;;) {
        if (k && freed[k - 1] > t)
            t = freed[k - 1]; /* the send before has released the port */
        if (k < len) {
            if (starts[k] <= t) {
                k++; /* it starts first: it is the one before */
                continue;
            }
            if (t + R->os[i] > starts[k]) {
                t = starts[k]; /* would hold the port when the next one starts */
                k++;
                continue;
            }
        }
        return t;
    }
}

/* Earliest t' >= t at which rank j may start receiving the ring transfer from `sender`:
 * its bytes land after those of the receive before, and before those of the one after. */
static double recv_fit(const ring *R, int64_t j, double t, int64_t sender)
{
    const int64_t off = R->recv_off[j], len = R->recv_off[j + 1] - off;
    const double *starts = R->recv_start + off, *end = R->recv_end + off, *land = R->recv_land + off;
    const double e = R->early[sender], d = R->dur[sender];
    int64_t k = bisect_right(starts, len, t);
    for (;;) {
        if (k && end[k - 1] - e > t)
            t = end[k - 1] - e;
        if (k < len) {
            if (starts[k] <= t) {
                k++;
                continue;
            }
            if (t + d > land[k]) {
                t = starts[k];
                k++;
                continue;
            }
        }
        return t;
    }
}

/* The start of rank i's next transfer (its queue is not empty). */
static double earliest(const ring *R, int64_t i)
{
    const int64_t j = (i + 1) % R->n;
    double t = pymax(pymax(pymax(R->queue[i].key[0], R->send_free[i]), R->link[i]),
                     R->recv_free[j] - R->early[i]);
    if (R->send_off[i + 1] == R->send_off[i] && R->recv_off[j + 1] == R->recv_off[j])
        return t; /* most ranks: nothing planned above */
    for (;;) {
        double t2 = recv_fit(R, j, send_fit(R, i, t), i);
        if (t2 == t)
            return t;
        t = t2;
    }
}

static int wake(ring *R, int64_t i)
{
    if (!R->queue[i].len)
        return 0;
    double t = earliest(R, i);
    if (R->live_has[i] && !(t < R->live[i]))
        return 0;
    R->live[i] = t, R->live_has[i] = 1;
    return cs_heap_push(&R->heap, t, i);
}

int64_t cs_ring(int64_t n, int64_t n_items, double floor, const double *dur, const double *early,
                const double *os, const double *gap, const uint8_t *fifo, double *link,
                const int64_t *send_off, const double *send_start, const double *send_freed,
                const int64_t *recv_off, const double *recv_start, const double *recv_end,
                const double *recv_land, const int64_t *held_off, const int64_t *held_rank,
                const double *held_time, int64_t cap, int64_t *out_src, int64_t *out_dst,
                int64_t *out_item, double *out_start, double *out_end, double *send_free,
                double *recv_free)
{
    ring R = {.n = n, .dur = dur, .early = early, .os = os, .gap = gap, .fifo = fifo,
              .link = link, .send_free = send_free, .recv_free = recv_free,
              .send_off = send_off, .recv_off = recv_off, .send_start = send_start,
              .send_freed = send_freed, .recv_start = recv_start, .recv_end = recv_end,
              .recv_land = recv_land};
    int64_t nout = 0, rc = 0;
    size_t nn = (size_t)n;
    /* initial[d] of the Python function: has[d * n + i], does i hold d from above. */
    uint8_t *has = calloc((size_t)n_items * nn, 1);
    R.queue = calloc(nn, sizeof *R.queue);
    R.live = malloc(nn * sizeof *R.live);
    R.live_has = calloc(nn, 1);
    if (!has || !R.queue || !R.live || !R.live_has) {
        rc = CS_ENOMEM;
        goto out;
    }
    for (int64_t i = 0; i < n; i++)
        send_free[i] = floor, recv_free[i] = 0.0;
    for (int64_t d = 0; d < n_items; d++)
        for (int64_t k = held_off[d]; k < held_off[d + 1]; k++)
            has[d * n + held_rank[k]] = 1;
    /* Pushed one by one instead of heapified: the pops are the same (pieces are unique). */
    for (int64_t d = 0; d < n_items; d++)
        for (int64_t k = held_off[d]; k < held_off[d + 1]; k++) {
            int64_t i = held_rank[k];
            if (!has[d * n + (i + 1) % n] && cs_heap_push(&R.queue[i], held_time[k], d)) {
                rc = CS_ENOMEM;
                goto out;
            }
        }

    for (int64_t i = 0; i < n; i++)
        if (wake(&R, i)) {
            rc = CS_ENOMEM;
            goto out;
        }
    while (R.heap.len) {
        double t, held;
        int64_t i, d;
        cs_heap_pop(&R.heap, &t, &i);
        if (!R.live_has[i] || R.live[i] != t)
            continue; /* superseded */
        R.live_has[i] = 0;
        /* t is still exact: only rank i's own transfers move its ports, its link and the
         * receiving port of i + 1, and its queue's head only gets earlier (wake). */
        cs_heap_pop(&R.queue[i], &held, &d);
        const int64_t j = (i + 1) % n;
        const double en = t + dur[i];
        link[i] = fifo[i] ? en : t + gap[i];
        send_free[i] = t + os[i];
        recv_free[j] = en;
        if (nout == cap) {
            rc = CS_EOVERFLOW;
            goto out;
        }
        out_src[nout] = i, out_dst[nout] = j, out_item[nout] = d;
        out_start[nout] = t, out_end[nout++] = en;
        if (!has[d * n + (j + 1) % n]) {
            if (cs_heap_push(&R.queue[j], en, d)) {
                rc = CS_ENOMEM;
                goto out;
            }
            /* a new head: j's next transfer may come earlier */
            if (R.queue[j].id[0] == d && R.queue[j].key[0] == en && wake(&R, j)) {
                rc = CS_ENOMEM;
                goto out;
            }
        }
        if (wake(&R, i)) {
            rc = CS_ENOMEM;
            goto out;
        }
    }
    rc = nout;
out:
    if (R.queue)
        for (int64_t i = 0; i < n; i++)
            cs_heap_free(&R.queue[i]);
    free(R.queue), free(R.live), free(R.live_has), free(has);
    cs_heap_free(&R.heap);
    return rc;
}
