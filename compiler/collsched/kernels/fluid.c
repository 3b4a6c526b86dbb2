/* model.fluid._share_flows in C: flows in progress share resources max-min fairly.
 *
 * A call runs _share_flows' loop (read it and _max_min first: this is the same loop) up to
 * the next event where flows end. The caller (model/fluid_share.py) keeps nothing but the
 * arrays: the flows that became ready since the last call come in (new_time, new_flow:
 * state[S_NEW] of them), the flows in progress stay here (active[], in the order they
 * started, with rem[] bytes left and rate[]), and the flows that end go out (out[], the
 * return value) at clock[0]; the caller then runs its callback, which makes more flows
 * ready, and calls again. Each event:
 *
 *   1. after an event (state[S_SOLVE]): the max-min rates of the active flows (max_min
 *      below, _max_min's progressive filling), a flow that crosses no resource at its cap;
 *   2. (on entry) the new flows go on the heap of starts (time, flow), heapq's order;
 *   3. the next event - the earliest projected end (ends within a relative _EPS of it
 *      together) or start: every active flow's bytes move on to it, the flows whose time
 *      has come start, and the flows that end leave: the earliest enders, or on a start
 *      every flow with at most _EPS x max(size, 1) bytes left.
 *
 * With state[S_QUIET] set, a call goes on through the events where flows only start (the
 * caller's callback, given no flow, would have nothing to do); without, it returns after
 * one event. state[S_EVENT] is 1 when an event happened, 0 when nothing can move any more
 * (no flow ready, none with a rate): the loop is over.
 *
 * Not bit for bit with the Python loop: where several flows are fixed at one level,
 * _max_min takes their rates off the resources in a set's order, this in the flows' start
 * order, so rates may differ in the last bits (tests/compiler/test_kernels_fluid.py: the
 * same finish times within a relative 1e-9).
 *
 * Sizes: roff n + 1; rid and rcoef roff[n] (flow f crosses rid[roff[f] .. roff[f + 1]) with
 * coefficients rcoef); size, cap, cap_level (cap / weight: the level at which a flow reaches
 * its cap), weight, rem, rate, new_time, new_flow, heap_key, heap_id, active, out, open and
 * done n; capacity, left, load, count and live nres; uoff nres + 1; uflow and ucoef roff[n];
 * seen n, zero at the first call (the flows made ready so far). Returns the number of flows
 * in out, or -3 for a new flow that is not one of the n or was ready before (a bug of the
 * caller's).
 */
#include <math.h>

#include "kernels.h"

#define EPS 1e-12 /* model.fluid._EPS */

enum { S_HEAP, S_ACTIVE, S_NEW, S_SOLVE, S_EVENT, S_QUIET };

/* _max_min over the active flows: rate[f] for each; the loops below visit flows in active
 * order and resources by index, each user list in active order, as _max_min builds them. */
static void max_min(int64_t nact, const int64_t *active, int64_t nres, const int64_t *roff,
                    const int64_t *rid, const double *rcoef, const double *cap_level,
                    const double *weight, const double *capacity, double *rate, int64_t *uoff,
                    int64_t *uflow, double *ucoef, double *left, double *load, int64_t *count,
                    int64_t *open, uint8_t *done, int64_t *live)
{
    for (int64_t r = 0; r <= nres; r++)
        uoff[r] = 0;
    for (int64_t i = 0; i < nact; i++)
        for (int64_t j = roff[active[i]]; j < roff[active[i] + 1]; j++)
            uoff[rid[j] + 1]++;
    for (int64_t r = 0; r < nres; r++)
        uoff[r + 1] += uoff[r];
    for (int64_t r = 0; r < nres; r++)
        count[r] = 0;
    for (int64_t i = 0; i < nact; i++) {
        int64_t f = active[i];
        for (int64_t j = roff[f]; j < roff[f + 1]; j++) {
            int64_t r = rid[j], k = uoff[r] + count[r]++;
            uflow[k] = f, ucoef[k] = rcoef[j];
        }
    }
    int64_t nlive = 0;
    for (int64_t r = 0; r < nres; r++) {
        if (!count[r])
            continue;
        left[r] = capacity[r];
        double s = 0.0;
        for (int64_t k = uoff[r]; k < uoff[r + 1]; k++)
            s += ucoef[k] * weight[uflow[k]];
        load[r] = s;
        live[nlive++] = r;
    }
    int64_t nopen = nact;
    for (int64_t i = 0; i < nact; i++)
        open[i] = active[i], done[active[i]] = 0;
    while (nopen) {
        double level = INFINITY;
        int64_t keep = 0;
        for (int64_t i = 0; i < nlive; i++) {
            int64_t r = live[i];
            if (!count[r])
                continue; /* every user fixed: gone from the list */
            live[keep++] = r;
            double x = (left[r] > 0.0 ? left[r] : 0.0) / load[r];
            if (x < level)
                level = x;
        }
        nlive = keep;
        for (int64_t i = 0; i < nopen; i++) {
            double x = cap_level[open[i]];
            if (x < level)
                level = x;
        }
        double limit = level * (1 + EPS);
        for (int64_t i = 0; i < nopen; i++)
            if (cap_level[open[i]] <= limit)
                done[open[i]] = 1;
        for (int64_t i = 0; i < nlive; i++) {
            int64_t r = live[i];
            if ((left[r] > 0.0 ? left[r] : 0.0) / load[r] <= limit)
                for (int64_t k = uoff[r]; k < uoff[r + 1]; k++)
                    if (done[uflow[k]] != 2)
                        done[uflow[k]] = 1;
        }
        keep = 0;
        for (int64_t i = 0; i < nopen; i++) {
            int64_t f = open[i];
            if (done[f] != 1) {
                open[keep++] = f;
                continue;
            }
            done[f] = 2; /* fixed */
            rate[f] = level * weight[f];
            for (int64_t j = roff[f]; j < roff[f + 1]; j++) {
                left[rid[j]] -= rcoef[j] * rate[f];
                load[rid[j]] -= rcoef[j] * weight[f];
                count[rid[j]]--;
            }
        }
        nopen = keep;
    }
}

/* heapq on fixed arrays: (key, id) pairs in tuple order. */
static int before(const double *key, const int64_t *id, int64_t a, int64_t b)
{
    return key[a] < key[b] || (key[a] == key[b] && id[a] < id[b]);
}

static void swap(double *key, int64_t *id, int64_t a, int64_t b)
{
    double k = key[a];
    int64_t i = id[a];
    key[a] = key[b], id[a] = id[b];
    key[b] = k, id[b] = i;
}

static void heap_push(double *key, int64_t *id, int64_t *len, double k, int64_t i)
{
    int64_t c = (*len)++;
    key[c] = k, id[c] = i;
    while (c > 0 && before(key, id, c, (c - 1) / 2)) {
        swap(key, id, c, (c - 1) / 2);
        c = (c - 1) / 2;
    }
}

static int64_t heap_pop(double *key, int64_t *id, int64_t *len)
{
    int64_t top = id[0], n = --*len;
    key[0] = key[n], id[0] = id[n];
    for (int64_t c = 0;;) {
        int64_t l = 2 * c + 1, m = c;
        if (l < n && before(key, id, l, m))
            m = l;
        if (l + 1 < n && before(key, id, l + 1, m))
            m = l + 1;
        if (m == c)
            break;
        swap(key, id, c, m);
        c = m;
    }
    return top;
}

/* One event (3. in the comment at the top); returns the number of flows in out. */
static int64_t next_event(const double *size, double *heap_key, int64_t *heap_id,
                          int64_t *active, double *rem, const double *rate, double *clock,
                          int64_t *state, int64_t *out)
{
    int64_t nact = state[S_ACTIVE], nheap = state[S_HEAP];
    double now = clock[0], t_end = INFINITY;
    int64_t nout = 0;
    for (int64_t i = 0; i < nact; i++) {
        int64_t f = active[i];
        double te = rate[f] > 0 ? now + rem[f] / rate[f] : INFINITY;
        if (te < t_end * (1 - EPS))
            t_end = te, out[0] = f, nout = 1;
        else if (te <= t_end * (1 + EPS))
            out[nout++] = f;
    }
    double t_start = nheap ? heap_key[0] : INFINITY;
    if (t_start == INFINITY && t_end == INFINITY) {
        state[S_EVENT] = 0;
        return 0;
    }
    double t_next = t_start < t_end ? t_start : t_end, dt = t_next - now;
    for (int64_t i = 0; i < nact; i++)
        rem[active[i]] -= rate[active[i]] * dt;
    now = t_next;
    if (t_start <= t_end) {
        while (nheap && heap_key[0] <= now) {
            int64_t f = heap_pop(heap_key, heap_id, &nheap);
            active[nact++] = f;
            rem[f] = size[f];
        }
        nout = 0;
        for (int64_t i = 0; i < nact; i++) {
            int64_t f = active[i];
            if (rem[f] <= EPS * (size[f] > 1.0 ? size[f] : 1.0))
                out[nout++] = active[i];
        }
    }
    /* out[] is in active order: drop its flows from active, keeping the others' order */
    int64_t keep = 0;
    for (int64_t i = 0, k = 0; i < nact; i++) {
        if (k < nout && active[i] == out[k])
            k++;
        else
            active[keep++] = active[i];
    }
    clock[0] = now;
    state[S_ACTIVE] = keep, state[S_HEAP] = nheap, state[S_SOLVE] = 1, state[S_EVENT] = 1;
    return nout;
}

int64_t cs_fluid_step(int64_t n, int64_t nres, const int64_t *roff, const int64_t *rid,
                      const double *rcoef, const double *size, const double *cap,
                      const double *cap_level, const double *weight, const double *capacity,
                      const double *new_time, const int64_t *new_flow, double *heap_key,
                      int64_t *heap_id, int64_t *active, double *rem, double *rate,
                      double *clock, int64_t *state, int64_t *out, int64_t *uoff,
                      int64_t *uflow, double *ucoef, double *left, double *load,
                      int64_t *count, int64_t *open, uint8_t *done, int64_t *live,
                      uint8_t *seen)
{
    if (state[S_NEW] < 0 || state[S_NEW] > n)
        return -3;
    for (int64_t i = 0; i < state[S_NEW]; i++) {
        int64_t f = new_flow[i];
        if (f < 0 || f >= n || seen[f])
            return -3; /* each flow starts once: the heap and active[] hold at most n */
        seen[f] = 1;
        heap_push(heap_key, heap_id, &state[S_HEAP], new_time[i], f);
    }
    state[S_NEW] = 0;
    for (;;) {
        int64_t nact = state[S_ACTIVE];
        if (state[S_SOLVE] && nact) {
            max_min(nact, active, nres, roff, rid, rcoef, cap_level, weight, capacity, rate, uoff,
                    uflow, ucoef, left, load, count, open, done, live);
            for (int64_t i = 0; i < nact; i++)
                if (roff[active[i]] == roff[active[i] + 1])
                    rate[active[i]] = cap[active[i]];
        }
        state[S_SOLVE] = 0;
        int64_t nout = next_event(size, heap_key, heap_id, active, rem, rate, clock, state, out);
        /* an event where only flows started: the callback would have nothing to do */
        if (nout || !state[S_EVENT] || !state[S_QUIET])
            return nout;
    }
}
