/* The compiler's C kernels: their prototypes and shared helpers (see __init__.py).
 *
 * Every kernel mirrors a Python function of the compiler to the bit (fluid.c to a relative
 * 1e-12 or so: its comment says why), so the helpers keep Python's semantics: pymax()
 * returns the first of equal values, as builtins.max does, and the heap orders (key, id)
 * pairs as heapq orders tuples. Kernels return the number of
 * results they wrote, or CS_ENOMEM.
 */
#ifndef COLLSCHED_KERNELS_H
#define COLLSCHED_KERNELS_H

#include <stdint.h>
#include <stdlib.h>

#define CS_ENOMEM (-1)

/* The kernels: the only functions Python calls. __init__.py reads these declarations when
 * it loads the library and sets each function's argument and result types from them, and
 * its keyword wrappers must name the same parameters (tests/compiler/test_kernels_interface.py), so
 * they are written in a restricted form: `int64_t cs_<name>(<parameters>);`, each parameter
 * `int64_t x`, `double x`, or a pointer `[const] int64_t|double|uint8_t *x` (const: read
 * only; otherwise the kernel writes it, and the caller's array must be writable). Arrays
 * are C-contiguous; the caller sizes them as each kernel's comment says. Each .c file
 * includes this header, so the compiler checks the definitions against these. */

/* progress.c: verify._progress_completes. */
int64_t cs_progress_completes(int64_t nranks, const int64_t *rank, const int64_t *offsets,
                              const int64_t *blocking, const int64_t *first, const int64_t *last,
                              const int64_t *dep0, const int64_t *dep1, const int64_t *dep2);

/* dag.c: model.dag_graph._PyGraph's topological order (cs_dag_order) and timing (cs_dag_time). */
int64_t cs_dag_order(int64_t n, const int64_t *pred0, const int64_t *pred1,
                     const int64_t *pred2, const int64_t *pred3, const int64_t *pred4,
                     const uint8_t *kind, const double *off0, const double *off1,
                     const double *off2, const double *off3, const double *off4,
                     const uint8_t *zero_col, int64_t n_extra, const int64_t *xoff,
                     const int64_t *xpred, const double *dur, const double *os,
                     const double *g, const double *wan_time, int64_t n_on_wan,
                     const int64_t *on_wan, int64_t *perm, int64_t *edge, double *eoff,
                     double *node, int64_t *on_wan_out, int64_t *xoff_out, int64_t *xedge);
int64_t cs_dag_time(int64_t n, const int64_t *edge, const double *eoff,
                    const uint8_t *zero_col, int64_t n_extra, const int64_t *xoff,
                    const int64_t *xedge, const double *node, const int64_t *perm,
                    int64_t n_on_wan, const int64_t *on_wan, const int64_t *link_of,
                    int64_t passes, const double *base, double *work_f, int64_t *work_i,
                    double *start, double *end);

/* leaf_pool.c: min3.leaf_pool._schedule_leaf_pool. neediest_first: receivers that tie go neediest
 * first (the most pieces lacking, then the latest arrival), else lowest rank first. */
int64_t cs_leaf_pool(int64_t n, int64_t n_items, int64_t p, int64_t nseg, int64_t full,
                     int64_t neediest_first, const int64_t *members, const double *dur,
                     const double *early, double *link, const double *os, const double *gap,
                     const uint8_t *fifo, double *send_free, double *recv_free,
                     uint8_t *overlap, double *after, const double *arrival,
                     const int64_t *held_off, const int64_t *held_rank, const double *held_time,
                     int64_t *out_src, int64_t *out_dst, int64_t *out_item, double *out_start,
                     double *out_end);

/* input_pool.c: min3.input_pool._schedule_input_pool. */
int64_t cs_input_pool(int64_t n, int64_t ng, int64_t nw, int64_t n_items, int64_t n_todo,
                      int64_t full, int64_t use_relays, const int64_t *nest, int64_t depth,
                      const int64_t *goff, const int64_t *group, const double *dur,
                      const double *early, double *link, const double *os, const double *gap,
                      const uint8_t *fifo, const int64_t *wan_of, const double *wan_hold,
                      double *wan_free, double *send_free, double *recv_free, uint8_t *overlap,
                      double *after, const double *arrival, const int64_t *held_off,
                      const int64_t *held_rank, const double *held_time, const int64_t *items,
                      int64_t *out_src, int64_t *out_dst, int64_t *out_item, double *out_start,
                      double *out_end);

/* ring.c: min3.ring._schedule_ring. */
int64_t cs_ring(int64_t n, int64_t n_items, double floor, const double *dur, const double *early,
                const double *os, const double *gap, const uint8_t *fifo, double *link,
                const int64_t *send_off, const double *send_start, const double *send_freed,
                const int64_t *recv_off, const double *recv_start, const double *recv_end,
                const double *recv_land, const int64_t *held_off, const int64_t *held_rank,
                const double *held_time, int64_t cap, int64_t *out_src, int64_t *out_dst,
                int64_t *out_item, double *out_start, double *out_end, double *send_free,
                double *recv_free);

/* fluid.c: one event of model.fluid._share_flows (its max-min rates, next event, flows that end). */
int64_t cs_fluid_step(int64_t n, int64_t nres, const int64_t *roff, const int64_t *rid,
                      const double *rcoef, const double *size, const double *cap,
                      const double *cap_level, const double *weight, const double *capacity,
                      const double *new_time, const int64_t *new_flow, double *heap_key,
                      int64_t *heap_id, int64_t *active, double *rem, double *rate,
                      double *clock, int64_t *state, int64_t *out, int64_t *uoff,
                      int64_t *uflow, double *ucoef, double *left, double *load,
                      int64_t *count, int64_t *open, uint8_t *done, int64_t *live,
                      uint8_t *seen);

/* builtins.max(a, b): b only if strictly greater. */
static inline double pymax(double a, double b) { return b > a ? b : a; }

/* A binary min-heap of (key, id) pairs, ordered by key, then id: the order in which heapq
 * pops (key, id) tuples. Equal pairs are interchangeable, so any heap gives the same pops. */
typedef struct {
    double *key;
    int64_t *id;
    int64_t len, cap;
} cs_heap;

static inline int cs_heap_less(const cs_heap *h, int64_t a, int64_t b)
{
    return h->key[a] < h->key[b] || (h->key[a] == h->key[b] && h->id[a] < h->id[b]);
}

static inline void cs_heap_swap(cs_heap *h, int64_t a, int64_t b)
{
    double k = h->key[a];
    int64_t i = h->id[a];
    h->key[a] = h->key[b], h->id[a] = h->id[b];
    h->key[b] = k, h->id[b] = i;
}

static inline int cs_heap_push(cs_heap *h, double key, int64_t id)
{
    if (h->len == h->cap) {
        int64_t cap = h->cap ? 2 * h->cap : 64;
        double *k = realloc(h->key, (size_t)cap * sizeof *k);
        if (!k)
            return CS_ENOMEM;
        h->key = k;
        int64_t *i = realloc(h->id, (size_t)cap * sizeof *i);
        if (!i)
            return CS_ENOMEM;
        h->id = i;
        h->cap = cap;
    }
    int64_t c = h->len++;
    h->key[c] = key, h->id[c] = id;
    while (c > 0 && cs_heap_less(h, c, (c - 1) / 2)) {
        cs_heap_swap(h, c, (c - 1) / 2);
        c = (c - 1) / 2;
    }
    return 0;
}

/* Removes the smallest pair (the heap must not be empty). */
static inline void cs_heap_pop(cs_heap *h, double *key, int64_t *id)
{
    *key = h->key[0], *id = h->id[0];
    h->len--;
    h->key[0] = h->key[h->len], h->id[0] = h->id[h->len];
    for (int64_t c = 0;;) {
        int64_t l = 2 * c + 1, m = c;
        if (l < h->len && cs_heap_less(h, l, m))
            m = l;
        if (l + 1 < h->len && cs_heap_less(h, l + 1, m))
            m = l + 1;
        if (m == c)
            break;
        cs_heap_swap(h, c, m);
        c = m;
    }
}

static inline void cs_heap_free(cs_heap *h)
{
    free(h->key);
    free(h->id);
}

#endif
