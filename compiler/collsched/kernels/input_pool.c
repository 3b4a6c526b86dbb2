/* min3.input_pool._schedule_input_pool in C: ScheduleInputPool for a pool of sub-pools, with the
 * search of _ListSearch (FindMin, relays, commit). Read the Python first: this is the
 * same greedy, statement for statement, on the pool's own block of the cost matrices
 * (local rank indices, row-major n x n; the pool is its sub-pools one after the other, so
 * sub-pool j is the local ranks goff[j] .. goff[j + 1] - 1).
 *
 * In:  group[n] (each local rank's sub-pool), the matrices, wan_of (-1: no shared link),
 *      the port state and wan_free (updated in place, as _ListSearch.close() writes them
 *      back), the holders of each piece in insertion order (held_rank/held_time[held_off[d]
 *      .. held_off[d + 1]], local ranks), the pieces to schedule, items[n_todo], and for
 *      relays the pools below (nest[n * depth]: input_pool._nest_rows, local rank order).
 * Out: the transfers in the order taken (local ranks); returns how many, or < 0. The new
 *      holders are their receivers, in that order (the Python dicts append them so).
 */
#include <math.h>

#include "kernels.h"

#define CS_ENOHOLDER (-2) /* a piece nobody in the pool holds: the Python function fails too */

typedef struct {
    int64_t n, ng, nw, links, full, use_relays;
    const int64_t *goff, *group, *wan_of;
    const double *dur, *early, *os, *gap, *wan_hold, *arrival;
    const uint8_t *fifo;
    double *link, *send_free, *recv_free, *after, *wan_free;
    uint8_t *overlap;
    /* wan_free's index per pair: Python's wan_free[wan_of[s][r]] reads the last entry (0.0,
     * never written) for -1, so -1 maps to it here. */
    int64_t *wk;
    /* held[d]: its holders in insertion order, hrank/htime[hoff[d] + k], k < hlen[d]. */
    int64_t *hoff, *hlen, *hrank;
    double *htime;
    uint8_t *pending; /* pending[d * ng + j]: sub-pool j still lacks piece d */
    /* reach[(j * n + x) * nw + k]: the shortest transfer from x into sub-pool j over wan_free
     * entry k, INFINITY where none (_ListSearch._reach). Relay searches only. */
    double *reach;
    uint8_t *mark; /* scratch: the holders of the piece being searched */
    double *xs;    /* scratch: max(send_free[s], ready) per holder (_find_relay's srcs) */
    const int64_t *nest; /* relays: _nest_rows, depth per rank */
    int64_t depth;
} pool;

typedef struct {
    int64_t n, s[2], r[2];
} hops;

static int64_t wan_index(int64_t k, int64_t nw) { return k < 0 ? nw + k : k; }

/* _find_min(held[d], groups[j]): first holder, then first receiver on ties. */
static double find_min(const pool *P, int64_t d, int64_t j, int64_t *bs_out, int64_t *br_out)
{
    const int64_t n = P->n, g0 = P->goff[j], g1 = P->goff[j + 1];
    double best = INFINITY;
    int64_t bs = -1, br = -1;
    for (int64_t h = P->hoff[d]; h < P->hoff[d] + P->hlen[d]; h++) {
        int64_t s = P->hrank[h];
        double x = pymax(P->send_free[s], P->htime[h]);
        const double *ls = P->link + s * n, *ds = P->dur + s * n, *es = P->early + s * n;
        const int64_t *ws = P->wk + s * n;
        for (int64_t r = g0; r < g1; r++) {
            /* max(x, link, after, port[, link free]) + dur, one comparison at a time */
            double t = ls[r];
            if (t < x)
                t = x;
            double u = P->after[r];
            if (t < u)
                t = u;
            u = P->overlap[r] ? P->recv_free[r] - es[r] : P->recv_free[r];
            if (t < u)
                t = u;
            if (P->links) {
                u = P->wan_free[ws[r]];
                if (t < u)
                    t = u;
            }
            t += ds[r];
            if (t < best)
                best = t, bs = s, br = r;
        }
    }
    *bs_out = bs, *br_out = br;
    return best;
}

/* input_pool._enters_once: may a relay's first hop s -> x go without piece d entering a pool a
 * second time (none of its holders in the pool of x where s and x part)? */
static int enters_once(const pool *P, int64_t d, int64_t s, int64_t x)
{
    const int64_t D = P->depth, *rs = P->nest + s * D, *rx = P->nest + x * D;
    int64_t k = 0;
    while (rs[k] == rx[k])
        k++;
    for (int64_t h = P->hoff[d]; h < P->hoff[d] + P->hlen[d]; h++)
        if (P->nest[P->hrank[h] * D + k] == rx[k])
            return 0;
    return 1;
}

/* _find_relay(hold, relays, j, bound) with relays = the ranks x not holding d whose sub-pool
 * is not pending (mark: the holders): the best two-hop delivery if it completes before
 * `bound`, else bs = -1. Pruned exactly as the Python prunes. */
static double find_relay(const pool *P, int64_t d, int64_t j, double bound, int64_t *bs_out,
                         int64_t *bx_out, int64_t *br_out)
{
    const int64_t n = P->n, nw = P->nw, g0 = P->goff[j], g1 = P->goff[j + 1];
    const int64_t h0 = P->hoff[d], nh = P->hlen[d];
    for (int64_t h = 0; h < nh; h++)
        P->xs[h] = pymax(P->send_free[P->hrank[h0 + h]], P->htime[h0 + h]);
    double best = bound;
    int64_t bs = -1, bx = -1, br = -1;
    for (int64_t x = 0; x < n; x++) {
        if (P->mark[x] || P->pending[d * P->ng + P->group[x]])
            continue; /* not a relay candidate */
        /* First hop: the best holder in x's own sub-pool (else the piece would enter that
         * sub-pool twice) whose hop enters no pool inside twice; the first on ties. */
        double t1 = INFINITY;
        int64_t via = -1;
        const int64_t gx = P->group[x];
        const double ax = P->after[x], fx = P->recv_free[x];
        const uint8_t ox = P->overlap[x];
        for (int64_t h = 0; h < nh; h++) {
            int64_t s = P->hrank[h0 + h];
            if (P->group[s] != gx || !enters_once(P, d, s, x))
                continue;
            double t = P->link[s * n + x];
            if (t < P->xs[h])
                t = P->xs[h];
            if (t < ax)
                t = ax;
            double u = ox ? fx - P->early[s * n + x] : fx;
            if (t < u)
                t = u;
            u = P->wan_free[P->wk[s * n + x]];
            if (t < u)
                t = u;
            t += P->dur[s * n + x];
            if (t < t1)
                t1 = t, via = s;
        }
        if (via < 0)
            continue; /* no holder in x's sub-pool: never a candidate */
        double y = pymax(P->send_free[x], t1);
        /* Can any receiver be reached through x before `best`? (reach has no entry where
         * the shortest transfer is INFINITY: that term is never below `best` either.) */
        const double *rx = P->reach + (j * n + x) * nw;
        int64_t k = 0;
        for (; k < nw; k++) {
            double w = P->wan_free[k];
            if ((y > w ? y : w) + rx[k] < best)
                break;
        }
        if (k == nw)
            continue;
        const double *lx = P->link + x * n, *dx = P->dur + x * n, *ex = P->early + x * n;
        const int64_t *wx = P->wk + x * n;
        for (int64_t r = g0; r < g1; r++) {
            double dr = dx[r];
            if (y + dr >= best)
                continue;
            double t = lx[r];
            if (t < y)
                t = y;
            double u = P->after[r];
            if (t < u)
                t = u;
            u = P->overlap[r] ? P->recv_free[r] - ex[r] : P->recv_free[r];
            if (t < u)
                t = u;
            u = P->wan_free[wx[r]];
            if (t < u)
                t = u;
            t += dr;
            if (t < best)
                best = t, bs = via, bx = x, br = r;
        }
    }
    *bs_out = bs, *bx_out = bx, *br_out = br;
    return best;
}

/* _ListSearch.best(d, j, pending[d]): the earliest delivery of d into j, and its hops. */
static double best_for(const pool *P, int64_t d, int64_t j, hops *out)
{
    int64_t s, r;
    double t = find_min(P, d, j, &s, &r);
    if (P->use_relays) {
        const int64_t h0 = P->hoff[d], nh = P->hlen[d];
        for (int64_t h = 0; h < nh; h++)
            P->mark[P->hrank[h0 + h]] = 1;
        int64_t s2, x, r2;
        double t2 = find_relay(P, d, j, t, &s2, &x, &r2);
        for (int64_t h = 0; h < nh; h++)
            P->mark[P->hrank[h0 + h]] = 0;
        if (s2 >= 0) {
            *out = (hops){2, {s2, x}, {x, r2}};
            return t2;
        }
    }
    *out = (hops){1, {s, 0}, {r, 0}};
    return t;
}

/* _ListSearch._commit: _Model.commit on the pool's block; returns end, start in *start. */
static double commit(pool *P, int64_t s, int64_t r, double ready, double *start_out)
{
    const int64_t n = P->n, sr = s * n + r, k = P->wan_of[sr];
    double start = pymax(pymax(pymax(pymax(pymax(P->send_free[s], ready), P->link[sr]),
                                     P->after[r]),
                               P->links ? P->wan_free[P->wk[sr]] : 0.0),
                         P->recv_free[r] - (P->overlap[r] ? P->early[sr] : 0.0));
    double end = start + P->dur[sr];
    if (k >= 0)
        P->wan_free[k] = start + P->wan_hold[sr];
    P->link[sr] = P->fifo[sr] ? end : start + P->gap[sr];
    P->after[r] = start;
    double sent = start + P->os[sr];
    if (P->full) {
        P->send_free[s] = sent, P->recv_free[r] = end;
    } else {
        P->recv_free[s] = sent, P->send_free[s] = pymax(P->arrival[s], sent), P->overlap[s] = 0;
        P->recv_free[r] = end, P->send_free[r] = pymax(P->arrival[r], end), P->overlap[r] = 1;
    }
    *start_out = start;
    return end;
}

int64_t cs_input_pool(int64_t n, int64_t ng, int64_t nw, int64_t n_items, int64_t n_todo,
                      int64_t full, int64_t use_relays, const int64_t *nest, int64_t depth,
                      const int64_t *goff, const int64_t *group,
                      const double *dur, const double *early, double *link, const double *os,
                      const double *gap, const uint8_t *fifo, const int64_t *wan_of,
                      const double *wan_hold, double *wan_free, double *send_free,
                      double *recv_free, uint8_t *overlap, double *after, const double *arrival,
                      const int64_t *held_off, const int64_t *held_rank, const double *held_time,
                      const int64_t *items, int64_t *out_src, int64_t *out_dst, int64_t *out_item,
                      double *out_start, double *out_end)
{
    pool P = {.n = n, .ng = ng, .nw = nw, .links = nw > 1, .full = full,
              .use_relays = use_relays, .nest = nest, .depth = depth, .goff = goff, .group = group, .wan_of = wan_of,
              .dur = dur, .early = early, .os = os, .gap = gap, .wan_hold = wan_hold,
              .arrival = arrival, .fifo = fifo, .link = link, .send_free = send_free,
              .recv_free = recv_free, .after = after, .wan_free = wan_free, .overlap = overlap};
    int64_t nout = 0, rc = 0;
    size_t nn = (size_t)n, ni = (size_t)n_items;
    /* Each (piece, sub-pool) pair is taken once, with at most two hops: two new holders. */
    int64_t total = held_off[n_items] + 2 * n_items * ng;
    /* (+ 1: malloc(0) may return NULL, which is not out of memory) */
    P.wk = malloc((nn * nn + 1) * sizeof(int64_t));
    P.hoff = malloc((ni + 1) * sizeof(int64_t));
    P.hlen = malloc((ni + 1) * sizeof(int64_t));
    P.hrank = malloc(((size_t)total + 1) * sizeof(int64_t));
    P.htime = malloc(((size_t)total + 1) * sizeof(double));
    P.pending = calloc(ni * (size_t)ng + 1, 1);
    P.mark = calloc(nn + 1, 1);
    P.xs = malloc((nn + 1) * sizeof(double));
    if (use_relays)
        P.reach = malloc(((size_t)ng * nn * (size_t)nw + 1) * sizeof(double));
    cs_heap heap = {0};
    if (!P.wk || !P.hoff || !P.hlen || !P.hrank || !P.htime || !P.pending || !P.mark || !P.xs ||
        (use_relays && !P.reach)) {
        rc = CS_ENOMEM;
        goto out;
    }
    for (int64_t i = 0; i < n * n; i++)
        P.wk[i] = wan_index(wan_of[i], nw);
    for (int64_t d = 0, at = 0; d < n_items; d++) {
        int64_t c = held_off[d + 1] - held_off[d];
        P.hoff[d] = at, P.hlen[d] = c;
        for (int64_t k = 0; k < c; k++)
            P.hrank[at + k] = held_rank[held_off[d] + k], P.htime[at + k] = held_time[held_off[d] + k];
        at += c + 2 * ng;
    }
    if (use_relays)
        for (int64_t j = 0; j < ng; j++)
            for (int64_t x = 0; x < n; x++) {
                double *rx = P.reach + (j * n + x) * nw;
                for (int64_t k = 0; k < nw; k++)
                    rx[k] = INFINITY;
                for (int64_t r = goff[j]; r < goff[j + 1]; r++)
                    if (dur[x * n + r] < rx[P.wk[x * n + r]])
                        rx[P.wk[x * n + r]] = dur[x * n + r];
            }

    /* The heap orders (time, piece, sub-pool) triples as heapq does: id = piece * ng + j
     * keeps (piece, j)'s lexicographic order. */
    hops hp;
    for (int64_t q = 0; q < n_todo; q++) {
        int64_t d = items[q];
        uint8_t *pd = P.pending + d * ng;
        for (int64_t j = 0; j < ng; j++)
            pd[j] = 1;
        for (int64_t h = P.hoff[d]; h < P.hoff[d] + P.hlen[d]; h++)
            pd[group[P.hrank[h]]] = 0;
        for (int64_t j = 0; j < ng; j++)
            if (pd[j] && cs_heap_push(&heap, best_for(&P, d, j, &hp), d * ng + j)) {
                rc = CS_ENOMEM;
                goto out;
            }
    }
    while (heap.len) {
        double t;
        int64_t id;
        cs_heap_pop(&heap, &t, &id);
        int64_t d = id / ng, j = id % ng;
        if (!P.pending[d * ng + j])
            continue; /* an outdated duplicate of a pair already scheduled */
        double t2 = best_for(&P, d, j, &hp);
        if (heap.len && t2 > heap.key[0]) {
            if (cs_heap_push(&heap, t2, id)) {
                rc = CS_ENOMEM;
                goto out;
            }
            continue;
        }
        /* take(d, hops): each hop from its sender's time of holding d. */
        for (int64_t k = 0; k < hp.n; k++) {
            int64_t s = hp.s[k], r = hp.r[k], h0 = P.hoff[d], h = 0;
            while (h < P.hlen[d] && P.hrank[h0 + h] != s)
                h++;
            if (s < 0 || h == P.hlen[d]) {
                rc = CS_ENOHOLDER;
                goto out;
            }
            double start, end = commit(&P, s, r, P.htime[h0 + h], &start);
            out_src[nout] = s, out_dst[nout] = r, out_item[nout] = d;
            out_start[nout] = start, out_end[nout++] = end;
            /* held[d][r] = end: in place if r holds d already, else appended */
            for (h = 0; h < P.hlen[d] && P.hrank[h0 + h] != r; h++)
                ;
            if (h == P.hlen[d])
                P.hrank[h0 + P.hlen[d]++] = r;
            P.htime[h0 + h] = end;
        }
        P.pending[d * ng + j] = 0;
        for (int64_t j2 = 0; j2 < ng; j2++)
            if (P.pending[d * ng + j2] &&
                cs_heap_push(&heap, best_for(&P, d, j2, &hp), d * ng + j2)) {
                rc = CS_ENOMEM;
                goto out;
            }
    }
    rc = nout;
out:
    free(P.wk), free(P.hoff), free(P.hlen), free(P.hrank), free(P.htime), free(P.pending);
    free(P.mark), free(P.xs), free(P.reach);
    cs_heap_free(&heap);
    return rc;
}
