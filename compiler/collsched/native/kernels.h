/* Shared helpers of the compiler's native kernels (see __init__.py).
 *
 * Every kernel mirrors a Python function of the compiler to the bit, so the helpers keep
 * Python's semantics: pymax() returns the first of equal values, as builtins.max does, and
 * the heap orders (key, id) pairs as heapq orders tuples. Kernels return the number of
 * results they wrote, or CS_ENOMEM.
 */
#ifndef COLLSCHED_KERNELS_H
#define COLLSCHED_KERNELS_H

#include <stdint.h>
#include <stdlib.h>

#define CS_ENOMEM (-1)

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
