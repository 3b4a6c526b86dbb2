/* min3.leaf_pool._schedule_leaf_pool in C: ScheduleInputPool for a pool of single ranks, with MinTime
 * kept per receiving rank (the minimum over the pieces it lacks). Read the Python function
 * first: this is the same greedy, statement for statement, on the pool's own block of the
 * cost matrices (local rank indices, row-major n x n).
 *
 * In:  members[n] (global ranks, for the tie-break), neediest_first (receivers that tie
 *      go neediest first, else lowest first; see the Python function), the matrices, the
 *      port state (updated in place, as the Python function updates its lists), the
 *      holders of each piece in insertion order: held_rank/held_time[held_off[d] .. held_off[d + 1]].
 * Out: the transfers in the order taken (local ranks); returns how many, or < 0.
 */
#include <math.h>
#include <string.h>

#include "kernels.h"

#define CS_ENOHOLDER (-2) /* a piece nobody in the pool holds: the Python function fails too */

typedef struct {
    int64_t n, n_items, full;
    const double *dur, *early, *os, *gap, *arrival;
    const uint8_t *fifo;
    double *link, *send_free, *recv_free, *after;
    uint8_t *overlap;
    /* held[d]: its holders in insertion order (hrank/htime[d * n + k], k < hlen[d]), and
     * has[d * n + i]: does i hold d. */
    int64_t *hrank, *hlen;
    double *htime;
    uint8_t *has;
    /* lacking[r]: the pieces r lacks, in preference order (lack[r * n_items + k], k < nlack[r]). */
    int64_t *lack, *nlack;
    double *bytes_min, *dur_min, *c, *at_c;
} leaf;

typedef struct {
    int64_t p, nseg, rank;
} pref_ctx;

static pref_ctx g_pref; /* qsort has no context argument in C11 */

/* _preference: ((rank - d // nseg) % p, d), Python's non-negative modulo. */
static int by_preference(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    int64_t px = ((g_pref.rank - x / g_pref.nseg) % g_pref.p + g_pref.p) % g_pref.p;
    int64_t py = ((g_pref.rank - y / g_pref.nseg) % g_pref.p + g_pref.p) % g_pref.p;
    if (px != py)
        return px < py ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* best_for(r): (time, sender, piece) of the earliest transfer into r. */
static double best_for(const leaf *L, int64_t r, int64_t *bs_out, int64_t *bd_out)
{
    const int64_t n = L->n;
    double best = INFINITY;
    int64_t bs = -1, bd = -1;
    const double rf = L->recv_free[r], af = L->after[r];
    const int ov = L->overlap[r];
    double min_sf = L->send_free[0];
    for (int64_t s = 1; s < n; s++)
        if (L->send_free[s] < min_sf)
            min_sf = L->send_free[s];
    double floor = pymax(rf + (ov ? L->bytes_min[r] : L->dur_min[r]), min_sf + L->dur_min[r]);
    double low = INFINITY;
    for (int64_t s = 0; s < n; s++) {
        double port = ov ? rf - L->early[s * n + r] : rf;
        double c = pymax(pymax(pymax(L->send_free[s], L->link[s * n + r]), port), af);
        L->c[s] = c;
        L->at_c[s] = s == r ? INFINITY : c + L->dur[s * n + r];
        if (L->at_c[s] < low)
            low = L->at_c[s];
    }
    floor = pymax(floor, low);
    for (int64_t k = 0; k < L->nlack[r]; k++) {
        int64_t d = L->lack[r * L->n_items + k];
        for (int64_t h = 0; h < L->hlen[d]; h++) {
            int64_t s = L->hrank[d * n + h];
            double ready = L->htime[d * n + h];
            double t = ready <= L->c[s] ? L->at_c[s] : ready + L->dur[s * n + r];
            if (t < best)
                best = t, bs = s, bd = d;
        }
        if (best <= floor)
            break;
    }
    *bs_out = bs, *bd_out = bd;
    return best;
}

int64_t cs_leaf_pool(int64_t n, int64_t n_items, int64_t p, int64_t nseg, int64_t full,
                     int64_t neediest_first, const int64_t *members, const double *dur, const double *early,
                     double *link, const double *os, const double *gap, const uint8_t *fifo,
                     double *send_free, double *recv_free, uint8_t *overlap, double *after,
                     const double *arrival, const int64_t *held_off, const int64_t *held_rank,
                     const double *held_time, int64_t *out_src, int64_t *out_dst,
                     int64_t *out_item, double *out_start, double *out_end)
{
    leaf L = {.n = n, .n_items = n_items, .full = full, .dur = dur, .early = early, .os = os,
              .gap = gap, .arrival = arrival, .fifo = fifo, .link = link,
              .send_free = send_free, .recv_free = recv_free, .after = after, .overlap = overlap};
    int64_t nout = 0, rc = 0;
    size_t ni = (size_t)n_items, nn = (size_t)n;
    L.hrank = malloc(ni * nn * sizeof(int64_t));
    L.hlen = calloc(ni, sizeof(int64_t));
    L.htime = malloc(ni * nn * sizeof(double));
    L.has = calloc(ni * nn, 1);
    L.lack = malloc(ni * nn * sizeof(int64_t));
    L.nlack = calloc(nn, sizeof(int64_t));
    L.bytes_min = malloc(nn * sizeof(double));
    L.dur_min = malloc(nn * sizeof(double));
    L.c = malloc(nn * sizeof(double));
    L.at_c = malloc(nn * sizeof(double));
    double *key = malloc(nn * sizeof(double));
    int64_t *key_tie = malloc(nn * sizeof(int64_t)); /* the tie of r's newest heap entry */
    uint8_t *key_has = calloc(nn, 1);
    /* Ties between receivers: the heap orders (time, tie), tie = (need, arrival order,
     * rank) packed into one integer as the Python function packs it; rank_of decodes it. */
    int64_t *place = malloc(nn * sizeof(int64_t)), *rank_of = malloc(nn * sizeof(int64_t));
    cs_heap heap = {0};
    if (!L.hrank || !L.hlen || !L.htime || !L.has || !L.lack || !L.nlack || !L.bytes_min ||
        !L.dur_min || !L.c || !L.at_c || !key || !key_tie || !key_has || !place || !rank_of) {
        rc = CS_ENOMEM;
        goto out;
    }
    for (int64_t d = 0; d < n_items; d++)
        for (int64_t k = held_off[d]; k < held_off[d + 1]; k++) {
            int64_t i = held_rank[k];
            L.hrank[d * n + L.hlen[d]] = i;
            L.htime[d * n + L.hlen[d]++] = held_time[k];
            L.has[d * n + i] = 1;
        }
    for (int64_t i = 0; i < n; i++) {
        int64_t *lk = L.lack + i * n_items;
        for (int64_t d = 0; d < n_items; d++)
            if (!L.has[d * n + i])
                lk[L.nlack[i]++] = d;
        g_pref = (pref_ctx){p, nseg, members[i]};
        qsort(lk, (size_t)L.nlack[i], sizeof *lk, by_preference);
    }
    /* No transfer into r completes before its port frees plus the fastest byte time. */
    for (int64_t r = 0; r < n; r++) {
        double bm = INFINITY, dm = INFINITY;
        for (int64_t s = 0; s < n; s++) {
            if (s == r)
                continue;
            double b = dur[s * n + r] - early[s * n + r];
            if (b < bm)
                bm = b;
            if (dur[s * n + r] < dm)
                dm = dur[s * n + r];
        }
        L.bytes_min[r] = bm, L.dur_min[r] = dm;
    }

    /* place[r]: r's position ordered by (later arrival first, then lower index). */
    for (int64_t r = 0; r < n; r++) {
        place[r] = r;
        if (neediest_first) {
            place[r] = 0;
            for (int64_t i = 0; i < n; i++)
                if (arrival[i] > arrival[r] || (arrival[i] == arrival[r] && i < r))
                    place[r]++;
        }
        rank_of[place[r]] = r;
    }
#define TIE(r) (neediest_first ? (n_items - L.nlack[r]) * n + place[r] : (r))
#define CURRENT(k, id) (key_has[rank_of[(id) % n]] && (k) == key[rank_of[(id) % n]] && \
                        (id) == key_tie[rank_of[(id) % n]])
    int64_t bs, bd;
    for (int64_t r = 0; r < n; r++)
        if (L.nlack[r]) {
            key[r] = best_for(&L, r, &bs, &bd);
            key_tie[r] = TIE(r);
            key_has[r] = 1;
            if (cs_heap_push(&heap, key[r], key_tie[r])) {
                rc = CS_ENOMEM;
                goto out;
            }
        }
    while (heap.len) {
        double k;
        int64_t id;
        cs_heap_pop(&heap, &k, &id);
        if (!CURRENT(k, id))
            continue; /* superseded by a newer entry */
        int64_t r = rank_of[id % n], s, d;
        double t = best_for(&L, r, &s, &d);
        while (heap.len && !CURRENT(heap.key[0], heap.id[0])) {
            double k2;
            int64_t id2;
            cs_heap_pop(&heap, &k2, &id2);
        }
        if (heap.len && (t > heap.key[0] || (neediest_first && t == heap.key[0] && id > heap.id[0]))) {
            key[r] = t;
            if (cs_heap_push(&heap, t, id)) {
                rc = CS_ENOMEM;
                goto out;
            }
            continue;
        }
        if (s < 0) {
            rc = CS_ENOHOLDER;
            goto out;
        }
        /* Commit (the model's update rules). */
        double ready = 0.0;
        for (int64_t h = 0; h < L.hlen[d]; h++)
            if (L.hrank[d * n + h] == s)
                ready = L.htime[d * n + h];
        double start = pymax(pymax(pymax(pymax(send_free[s], ready), link[s * n + r]), after[r]),
                             recv_free[r] - (overlap[r] ? early[s * n + r] : 0.0));
        double end = start + dur[s * n + r];
        link[s * n + r] = fifo[s * n + r] ? end : start + gap[s * n + r];
        after[r] = start;
        double sent = start + os[s * n + r];
        if (full) {
            send_free[s] = sent, recv_free[r] = end;
        } else {
            recv_free[s] = sent, send_free[s] = pymax(arrival[s], sent), overlap[s] = 0;
            recv_free[r] = end, send_free[r] = pymax(arrival[r], end), overlap[r] = 1;
        }
        out_src[nout] = s, out_dst[nout] = r, out_item[nout] = d;
        out_start[nout] = start, out_end[nout++] = end;
        L.hrank[d * n + L.hlen[d]] = r;
        L.htime[d * n + L.hlen[d]++] = end;
        L.has[d * n + r] = 1;
        int64_t *lk = L.lack + r * n_items;
        for (int64_t x = 0; x < L.nlack[r]; x++)
            if (lk[x] == d) {
                memmove(lk + x, lk + x + 1, (size_t)(L.nlack[r] - x - 1) * sizeof *lk);
                break;
            }
        L.nlack[r]--;
        key_has[r] = 0;
        if (L.nlack[r]) {
            key[r] = t, key_tie[r] = TIE(r), key_has[r] = 1; /* a lower bound: its ports only got later */
            if (cs_heap_push(&heap, t, key_tie[r])) {
                rc = CS_ENOMEM;
                goto out;
            }
        }
        /* The new holder may serve d earlier than anyone so far (UpdateAfterSched). */
        double sf = pymax(send_free[r], end);
        for (int64_t y = 0; y < n; y++) {
            if (y == r || L.has[d * n + y])
                continue;
            double t3 = pymax(pymax(pymax(sf, link[r * n + y]), after[y]),
                              recv_free[y] - (overlap[y] ? early[r * n + y] : 0.0)) +
                        dur[r * n + y];
            if (t3 < key[y]) {
                key[y] = t3;
                if (cs_heap_push(&heap, t3, key_tie[y])) {
                    rc = CS_ENOMEM;
                    goto out;
                }
            }
        }
    }
    rc = nout;
out:
    free(L.hrank), free(L.hlen), free(L.htime), free(L.has), free(L.lack), free(L.nlack);
    free(L.bytes_min), free(L.dur_min), free(L.c), free(L.at_c), free(key), free(key_tie);
    free(key_has), free(place), free(rank_of);
#undef TIE
#undef CURRENT
    cs_heap_free(&heap);
    return rc;
}
