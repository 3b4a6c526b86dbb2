/* bdr.c - build a Background Disseminated Ring schedule online (BDR paper, Listing 2).
 *
 * The runtime needs BDR schedules for arrival patterns it has no file for. This is the
 * compiler's generator (compiler/collsched/algorithms/bdr.py) in C, producing the same
 * list for every rank, op for op: the same pre-steps, the same ring remainder, the same
 * background/foreground split and the same per-rank order as collsched.ir.from_transfers
 * (background first, then by step, receives before sends, then generation order). The
 * tests compare both on random patterns. Full duplex only (the paper's model). No MPI.
 */
#include "internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct xfer { int64_t step; uint32_t src, dst, origin; } xfer;

static const double *sort_arrivals; /* qsort has no context argument */

static int slowest_first(const void *x, const void *y)
{
    uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
    double da = sort_arrivals[a], db = sort_arrivals[b];
    if (da != db) return da > db ? -1 : 1;
    return a < b ? -1 : a > b;
}

typedef struct keyed { int64_t phase_fg, step; int send; uint64_t tid; collsched_op op; } keyed;

static int by_order(const void *x, const void *y)
{
    const keyed *a = x, *b = y;
    if (a->phase_fg != b->phase_fg) return a->phase_fg < b->phase_fg ? -1 : 1;
    if (a->step != b->step) return a->step < b->step ? -1 : 1;
    if (a->send != b->send) return a->send < b->send ? -1 : 1;  /* receives first */
    return a->tid < b->tid ? -1 : a->tid > b->tid;
}

int cs_bdr_build(uint32_t P, const double *arrivals, double tau, uint32_t rank,
                 collsched_op **out, uint32_t *nout)
{
    *out = NULL;
    *nout = 0;
    if (P == 0 || rank >= P || P > (1u << 16) || !isfinite(tau)) return COLLSCHED_EFORMAT;
    double amax = arrivals[0];
    for (uint32_t r = 1; r < P; r++) if (arrivals[r] > amax) amax = arrivals[r];
    int64_t *ps = calloc(P, sizeof *ps), maxps = 0;
    uint32_t *prev_sent = calloc(P, sizeof *prev_sent), *order = malloc(P * sizeof *order);
    int64_t *first_send = malloc(P * sizeof *first_send);
    uint8_t *busy = calloc(P, 1);
    if (!ps || !prev_sent || !order || !first_send || !busy) goto nomem;
    int refused = 0;
    for (uint32_t r = 0; r < P; r++) {
        /* Same arithmetic as the Python generator, so the counts agree to the bit. The
         * limit is checked in double before the cast: a tiny tau or a huge spread gave a
         * quotient no int64_t holds (undefined behaviour, and the limit was bypassed);
         * NaN and infinity (non-finite arrivals or tau) fail the comparison as well. */
        double steps = tau > 0 ? floor((amax - arrivals[r]) / tau + 1e-9) : 0.0;
        if (!(steps >= 0 && steps <= CS_BDR_MAX_PRESTEPS)) { refused = 1; steps = 0; }
        ps[r] = (int64_t)steps;
        if (ps[r] > maxps) maxps = ps[r];
        order[r] = r;
        first_send[r] = INT64_MAX;
    }
    if (refused) { /* the compiler refuses the same patterns */
        free(ps); free(prev_sent); free(order); free(first_send); free(busy);
        return COLLSCHED_EFORMAT;
    }
    sort_arrivals = arrivals;
    qsort(order, P, sizeof *order, slowest_first);

    size_t cap = 2 * (size_t)P * P + 16, n = 0; /* each rank sends at most P - 1 in each part */
    xfer *x = malloc(cap * sizeof *x);
    if (!x) goto nomem;
    for (int64_t s = 0; s < maxps; s++) {              /* pre-steps (Listing 2, l. 22-33) */
        memset(busy, 0, P);
        for (uint32_t k = 0; k < P; k++) {
            uint32_t r = order[k], rc = (uint32_t)(((int64_t)r - 1 - prev_sent[r] + 2 * (int64_t)P) % P);
            if (ps[r] >= maxps - s && prev_sent[r] < P - 1 && !busy[rc]) {
                x[n++] = (xfer){ s, r, rc, r };
                busy[rc] = 1;
                prev_sent[r]++;
            }
        }
    }
    for (uint32_t i = 0; i < P; i++)                    /* the ring remainder (l. 34-45) */
        for (uint32_t j = 0; j < P; j++) {
            uint32_t seg = (i + P - j % P) % P;
            if (prev_sent[seg] + j < P - 1) x[n++] = (xfer){ maxps + j, i, (i + 1) % P, seg };
        }
    for (size_t t = 0; t < n; t++)
        if (x[t].step < first_send[x[t].src]) first_send[x[t].src] = x[t].step;

    size_t mine = 0;
    for (size_t t = 0; t < n; t++) mine += (x[t].src == rank) + (x[t].dst == rank);
    keyed *k = malloc((mine ? mine : 1) * sizeof *k);
    collsched_op *ops = malloc((mine ? mine : 1) * sizeof *ops);
    if (!k || !ops) { free(k); free(ops); free(x); goto nomem; }
    size_t m = 0;
    for (size_t t = 0; t < n; t++) {
        const xfer *e = &x[t];
        if (e->src == rank)
            k[m++] = (keyed){ 1, e->step, 1, t, { e->dst, e->origin, 0, -1, -1, COLLSCHED_SEND, 0, 0, 0 } };
        if (e->dst == rank) {
            int bg = e->step < maxps && e->step < first_send[rank];
            k[m++] = (keyed){ bg ? 0 : 1, e->step, 0, t, { e->src, e->origin, 0, -1, -1, COLLSCHED_RECV,
                                                           (uint8_t)bg, 0, 0 } };
        }
    }
    qsort(k, m, sizeof *k, by_order);
    for (size_t i = 0; i < m; i++) ops[i] = k[i].op;
    free(k);
    free(x);
    free(ps); free(prev_sent); free(order); free(first_send); free(busy);
    *out = ops;
    *nout = (uint32_t)m;
    return COLLSCHED_OK;
nomem:
    free(ps); free(prev_sent); free(order); free(first_send); free(busy);
    return COLLSCHED_ENOMEM;
}
