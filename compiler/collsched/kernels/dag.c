/* model.dag_graph._PyGraph in C: the transfer DAG of a model.dag.Plan, checked for a cycle and
 * timed with the shared-link iteration of _PyGraph.time. Read the Python class first: the step that
 * times one transfer is the same statement for statement, so the same floats.
 *
 * A transfer's times depend only on its predecessors' times, so any topological order
 * gives the same bits. The plan numbers transfers in sender list order, where an edge
 * joins transfers far apart in memory: timed in that numbering, a million transfers cost
 * a cache miss per edge. cs_dag_order renumbers them depth first (each right after its
 * last unnumbered predecessor: chains of dependent transfers side by side, the previous
 * one still in cache) and lays out what the timing reads in that order:
 *
 *   perm[i]            the plan's index of transfer i
 *   edge[i * K + c]    its predecessor in the plan's column c (preds in Plan.__init__)
 *                      renumbered, with its kind: NK * pred + kind (the index of
 *                      _PyGraph.rel); < 0: none
 *   eoff[i * nz + j]   the offsets of the nz columns whose offsets are not all +0.0
 *                      (zero_col[c]: every offset of column c is +0.0, added as a constant)
 *   node[i * NODE ..]  duration, os, g and wan_time
 *   xedge[xoff_out[i] .. xoff_out[i + 1]]
 *                      its extra edges (Plan.extra: a multi-piece message's other feeds),
 *                      renumbered, each NK * pred + END (offset 0); when n_extra > 0 only
 *
 * On a shared link, chain[i] is the transfer before i (< 0: none), an extra edge of kind
 * _LINK and offset 0; passes with the chain time depth first again.
 */
#include <math.h>
#include <string.h>

#include "kernels.h"

enum { OS, G, END, LINK, PORT_END, NK }; /* model.dag._OS .. _PORT_END */
enum { K = 5 };                           /* dependency columns of a Plan */
enum { DUR, OS_M, G_M, WAN_TIME, NODE };  /* node[i * NODE + ...] */
enum { UNSEEN = -1, OPEN = -2 };          /* not numbered (timed) yet; waiting on its preds */

static void *cs_alloc(int64_t count, size_t size)
{
    return malloc((size_t)(count > 0 ? count : 1) * size); /* malloc(0) may be NULL */
}

typedef struct {
    int64_t n, nz, nx; /* nx: extra edges laid out so far */
    const int64_t *pred[K];
    const int64_t *xoff, *xpred; /* NULL: no extra edges */
    const uint8_t *kind, *zero_col;
    const double *offset[K], *dur, *os, *g, *wan_time;
    int64_t *perm, *edge, *xoff_out, *xedge;
    double *eoff, *node;
} layout;

/* Numbers transfer v as i, its predecessors numbered (inv) before it. */
static void place(const layout *L, const int32_t *inv, int64_t v, int64_t i)
{
    for (int64_t c = 0, j = 0; c < K; c++) {
        int64_t q = L->pred[c][v];
        L->edge[i * K + c] = q < 0 ? -1 : NK * (int64_t)inv[q] + L->kind[c * L->n + v];
        if (!L->zero_col[c])
            L->eoff[i * L->nz + j++] = L->offset[c][v];
    }
    double *x = L->node + i * NODE;
    x[DUR] = L->dur[v], x[OS_M] = L->os[v], x[G_M] = L->g[v], x[WAN_TIME] = L->wan_time[v];
    L->perm[i] = v;
}

/* place()'s extra edges of v (numbered i), after those of i - 1. */
static void place_extra(layout *L, const int32_t *inv, int64_t v, int64_t i)
{
    L->xoff_out[i] = L->nx;
    for (int64_t j = L->xoff[v]; j < L->xoff[v + 1]; j++)
        L->xedge[L->nx++] = NK * (int64_t)inv[L->xpred[j]] + END;
    L->xoff_out[i + 1] = L->nx;
}

/* Lays out the DAG of a Plan (see the top): its K dependency columns pred0..pred4 (< 0:
 * none), their kinds kind[c * n + v] and offsets off0..off4 (those of zero_col columns are
 * not read); with n_extra > 0 the extra edges of v xpred[xoff[v] .. xoff[v + 1]] (xoff:
 * n + 1 entries; xoff_out n + 1, xedge n_extra; none of the three read otherwise);
 * on_wan_out: on_wan renumbered. Returns n, or fewer if the graph has a cycle (the caller
 * lets Plan._topological_waves name the stuck transfer). */
int64_t cs_dag_order(int64_t n, const int64_t *pred0, const int64_t *pred1,
                     const int64_t *pred2, const int64_t *pred3, const int64_t *pred4,
                     const uint8_t *kind, const double *off0, const double *off1,
                     const double *off2, const double *off3, const double *off4,
                     const uint8_t *zero_col, int64_t n_extra, const int64_t *xoff,
                     const int64_t *xpred, const double *dur, const double *os,
                     const double *g, const double *wan_time, int64_t n_on_wan,
                     const int64_t *on_wan, int64_t *perm, int64_t *edge, double *eoff,
                     double *node, int64_t *on_wan_out, int64_t *xoff_out, int64_t *xedge)
{
    layout L = {.n = n, .pred = {pred0, pred1, pred2, pred3, pred4}, .kind = kind,
                .zero_col = zero_col, .offset = {off0, off1, off2, off3, off4}, .dur = dur,
                .os = os, .g = g, .wan_time = wan_time, .perm = perm, .edge = edge,
                .eoff = eoff, .node = node};
    if (n_extra > 0)
        L.xoff = xoff, L.xpred = xpred, L.xoff_out = xoff_out, L.xedge = xedge;
    for (int64_t c = 0; c < K; c++)
        L.nz += !zero_col[c];
    /* 32-bit scratch: half the cache misses of its random lookups. (2^31 transfers would
     * have taken hundreds of GB before this point.) */
    if (n >= INT32_MAX)
        return CS_ENOMEM;
    int32_t *inv = cs_alloc(n, sizeof *inv), *stack = cs_alloc(n, sizeof *stack);
    if (!inv || !stack) {
        free(inv), free(stack);
        return CS_ENOMEM;
    }
    int64_t done = 0;
    for (int64_t v = 0; v < n; v++)
        inv[v] = UNSEEN;
    for (int64_t r = 0; r < n; r++) {
        if (inv[r] != UNSEEN)
            continue;
        int64_t sp = 0;
        stack[sp++] = (int32_t)r, inv[r] = OPEN;
        while (sp) {
            int64_t v = stack[sp - 1], next = -1;
            for (int64_t c = 0; c < K && next < 0; c++) {
                int64_t q = L.pred[c][v];
                if (q < 0)
                    continue;
                if (inv[q] == OPEN)
                    goto out; /* q waits on itself through v */
                if (inv[q] == UNSEEN)
                    next = q;
            }
            for (int64_t j = L.xoff ? L.xoff[v] : 0; L.xoff && j < L.xoff[v + 1] && next < 0; j++) {
                int64_t q = L.xpred[j];
                if (inv[q] == OPEN)
                    goto out;
                if (inv[q] == UNSEEN)
                    next = q;
            }
            if (next >= 0) {
                stack[sp++] = (int32_t)next, inv[next] = OPEN;
                continue;
            }
            inv[v] = (int32_t)done;
            if (L.xoff)
                place_extra(&L, inv, v, done);
            place(&L, inv, v, done++);
            sp--;
        }
    }
    for (int64_t j = 0; j < n_on_wan; j++)
        on_wan_out[j] = inv[on_wan[j]];
out:
    free(inv), free(stack);
    return done;
}

/* What the timing keeps per transfer. _PyGraph keeps the release times rel[]; each is one
 * sum of start or ready and a constant of the transfer, so it is summed where read
 * instead (the same sum, the same bits, and a fifth of the memory). */
typedef struct {
    int64_t n, nz;
    const int64_t *edge, *xoff, *xedge; /* xoff NULL: no extra edges */
    const double *eoff, *node;
    const uint8_t *zero_col;
    double *base, *start, *ready, *key;
    int64_t *level;
} graph;

/* _PyGraph.rel[NK * q + kind]. */
static inline double release(const graph *D, int64_t q, int64_t kind)
{
    const double *x = D->node + q * NODE;
    switch (kind) {
    case OS:
        return D->ready[q] + x[OS_M];
    case G:
        return D->start[q] + x[G_M];
    case END:
        return D->start[q] + x[DUR]; /* en */
    case LINK:
        return D->start[q] + x[WAN_TIME];
    default:
        return D->ready[q] + x[DUR]; /* PORT_END */
    }
}

/* The body of _PyGraph._longest_paths' loop: times transfer v, whose predecessors (and
 * chain[v], if chain) are timed. */
static inline void time_one(graph *D, int64_t v, const int64_t *chain)
{
    double st = D->base[v], km = -INFINITY;
    int64_t lv = 0;
    const int64_t *e = D->edge + v * K;
    const double *off = D->eoff + v * D->nz;
    for (int64_t c = 0; c < K; c++) {
        if (e[c] < 0) {
            off += !D->zero_col[c];
            continue;
        }
        int64_t q = e[c] / NK;
        double x = release(D, q, e[c] % NK) + (D->zero_col[c] ? 0.0 : *off++);
        if (x > st)
            st = x;
        if (D->key[q] > km)
            km = D->key[q];
        if (D->level[q] >= lv)
            lv = D->level[q] + 1;
    }
    for (int64_t j = D->xoff ? D->xoff[v] : 0; D->xoff && j < D->xoff[v + 1]; j++) {
        int64_t q = D->xedge[j] / NK;
        double x = release(D, q, D->xedge[j] % NK) + 0.0;
        if (x > st)
            st = x;
        if (D->key[q] > km)
            km = D->key[q];
        if (D->level[q] >= lv)
            lv = D->level[q] + 1;
    }
    double ready = st; /* the start but for the shared link's queue */
    int64_t q = chain ? chain[v] : -1;
    if (q >= 0) {
        double x = release(D, q, LINK) + 0.0;
        if (x > st)
            st = x;
        if (D->key[q] > km)
            km = D->key[q];
        if (D->level[q] >= lv)
            lv = D->level[q] + 1;
    }
    D->start[v] = st;
    D->ready[v] = ready;
    D->key[v] = km > st ? km : st;
    D->level[v] = lv;
}

/* Times every transfer with the chain's edges, depth first: each once its predecessors
 * are (level[] UNSEEN before, OPEN while waiting). Returns n, or fewer on a cycle. */
static int64_t time_chained(graph *D, const int64_t *chain, int64_t *stack)
{
    const int64_t n = D->n;
    int64_t *level = D->level, done = 0;
    memset(level, 0xff, (size_t)n * sizeof *level); /* UNSEEN */
    for (int64_t r = 0; r < n; r++) {
        if (level[r] != UNSEEN)
            continue;
        int64_t sp = 0;
        stack[sp++] = r, level[r] = OPEN;
        while (sp) {
            int64_t v = stack[sp - 1], next = chain[v];
            if (next >= 0 && level[next] >= 0)
                next = -1;
            for (int64_t c = 0; c < K && next < 0; c++)
                if (D->edge[v * K + c] >= 0 && level[D->edge[v * K + c] / NK] < 0)
                    next = D->edge[v * K + c] / NK;
            for (int64_t j = D->xoff ? D->xoff[v] : 0; D->xoff && j < D->xoff[v + 1] && next < 0; j++)
                if (level[D->xedge[j] / NK] < 0)
                    next = D->xedge[j] / NK;
            if (next >= 0) {
                if (level[next] == OPEN)
                    return done;
                stack[sp++] = next, level[next] = OPEN;
                continue;
            }
            time_one(D, v, chain);
            sp--, done++;
        }
    }
    return done;
}

typedef struct {
    int64_t link;
    double key;
    int64_t level, index, v;
} link_entry;

/* _PyGraph.time's (wan, key, rank), rank being the position by (level, plan index): so
 * (wan, key, level, plan index), a total order. */
static int by_link_order(const void *a, const void *b)
{
    const link_entry *x = a, *y = b;
    if (x->link != y->link)
        return x->link < y->link ? -1 : 1;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    if (x->level != y->level)
        return x->level < y->level ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* _PyGraph.time on cs_dag_order's layout: (start, end) in the plan's numbering, for the
 * transfers' earliest starts `base` (also the plan's); xoff and xedge: cs_dag_order's
 * xoff_out and xedge (read when n_extra > 0). on_wan[j] (renumbered) crosses
 * shared link link_of[j]. work_f (4 n) and work_i (3 n): scratch the caller keeps, so
 * that its pages are mapped once. Returns n, or fewer if a shared-link order made a cycle
 * (it cannot: keys and ranks grow along every edge; the caller then runs the Python
 * reference, which reports it). */
int64_t cs_dag_time(int64_t n, const int64_t *edge, const double *eoff,
                    const uint8_t *zero_col, int64_t n_extra, const int64_t *xoff,
                    const int64_t *xedge, const double *node, const int64_t *perm,
                    int64_t n_on_wan, const int64_t *on_wan, const int64_t *link_of,
                    int64_t passes, const double *base, double *work_f, int64_t *work_i,
                    double *start, double *end)
{
    graph D = {.n = n, .edge = edge, .eoff = eoff, .node = node, .zero_col = zero_col,
               .base = work_f, .start = work_f + n, .ready = work_f + 2 * n,
               .key = work_f + 3 * n, .level = work_i};
    if (n_extra > 0)
        D.xoff = xoff, D.xedge = xedge;
    for (int64_t c = 0; c < K; c++)
        D.nz += !zero_col[c];
    int64_t *chain = work_i + n, *stack = work_i + 2 * n;
    link_entry *t = cs_alloc(n_on_wan, sizeof *t);
    if (!t)
        return CS_ENOMEM;
    int64_t rc = n;
    for (int64_t i = 0; i < n; i++)
        D.base[i] = base[perm[i]];
    for (int64_t i = 0; i < n; i++)
        time_one(&D, i, NULL); /* the numbering is topological */
    int have_chain = 0;
    for (int64_t pass = 0; pass < (n_on_wan ? passes : 0); pass++) {
        /* Each link's transfers one after the other, by (key, rank). The levels are those
         * of the last pass: the first pass's are Kahn's, as _PyGraph takes them. */
        for (int64_t j = 0; j < n_on_wan; j++) {
            int64_t v = on_wan[j];
            t[j] = (link_entry){link_of[j], D.key[v], D.level[v], perm[v], v};
        }
        qsort(t, (size_t)n_on_wan, sizeof *t, by_link_order);
        int64_t *prev = stack; /* free until time_chained */
        for (int64_t j = 0; j < n_on_wan; j++)
            prev[on_wan[j]] = -1;
        for (int64_t j = 1; j < n_on_wan; j++)
            if (t[j].link == t[j - 1].link)
                prev[t[j].v] = t[j - 1].v;
        int same = have_chain; /* the order the timing was made with is the order it produced */
        for (int64_t j = 0; same && j < n_on_wan; j++)
            same = prev[on_wan[j]] == chain[on_wan[j]];
        if (same)
            break;
        if (!have_chain)
            for (int64_t v = 0; v < n; v++)
                chain[v] = -1;
        for (int64_t j = 0; j < n_on_wan; j++)
            chain[on_wan[j]] = prev[on_wan[j]];
        have_chain = 1;
        if (time_chained(&D, chain, stack) != n) {
            rc = 0;
            break;
        }
    }
    for (int64_t i = 0; i < n; i++) {
        start[perm[i]] = D.start[i];
        end[perm[i]] = D.start[i] + node[i * NODE + DUR]; /* en */
    }
    free(t);
    return rc;
}
