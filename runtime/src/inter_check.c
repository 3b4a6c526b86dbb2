/* inter_check.c - the rules of docs/semantics.md#intergroup-schedules, proven on range lists.
 *
 * cs_inter_walk walks one rank's list in order, keeping per group the byte ranges the
 * rank holds (its own block from entry, each new receive from its place in the list) as a
 * sorted set of disjoint intervals, each remembering the receive that brings it: a send
 * must be covered (holding) and waits for exactly the receives whose intervals meet its
 * range (its deps); a receive is new (meets nothing held), a duplicate (wholly held) or
 * an error (partly held); at the end the remote group's data must be covered (delivery).
 * The executor runs on what the walk derives, so the runtime's waits are the proof's.
 *
 * cs_inter_whole_check adds what only the whole schedule shows: the k-th send a -> b and
 * the k-th receive at b from a name the same group and range (matching), and the ranks'
 * dataflow walks all finish (progress: a send waits for its deps' matching sends to be
 * issued, a FIFO send for the receive of the previous send to its peer to be posted).
 * Cost: O(N log N) for N ops in all, plus O(n^2) for a rank of n ops in the worst case of
 * the interval sets (n is a few times the group sizes for every plan of docs/intergroup.md).
 * No MPI here.
 */
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct iv { uint64_t lo, hi; int64_t op; } iv; /* op < 0: the own block */
typedef struct ivset { iv *v; size_t n, cap; } ivset;

static int say(char *why, size_t len, uint32_t rank, int64_t op, const char *fmt, ...)
{
    char what[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (op < 0) snprintf(why, len, "rank %u, end of list: %s", rank, what);
    else snprintf(why, len, "rank %u, op %lld: %s", rank, (long long)op, what);
    return -1;
}

/* The first interval that ends after lo (ends increase: the intervals are disjoint). */
static size_t first_after(const ivset *s, uint64_t lo)
{
    size_t a = 0, b = s->n;
    while (a < b) {
        size_t m = a + (b - a) / 2;
        if (s->v[m].hi <= lo) a = m + 1; else b = m;
    }
    return a;
}

static int insert(ivset *s, size_t at, iv x)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 16;
        iv *v = realloc(s->v, cap * sizeof *v);
        if (!v) return -1;
        s->v = v;
        s->cap = cap;
    }
    memmove(s->v + at + 1, s->v + at, (s->n - at) * sizeof *s->v);
    s->v[at] = x;
    s->n++;
    return 0;
}

/* Bytes of [lo, hi) the set covers. */
static uint64_t covered(const ivset *s, size_t from, uint64_t lo, uint64_t hi)
{
    uint64_t c = 0;
    for (size_t k = from; k < s->n && s->v[k].lo < hi; k++) {
        uint64_t a = s->v[k].lo > lo ? s->v[k].lo : lo, b = s->v[k].hi < hi ? s->v[k].hi : hi;
        c += b - a;
    }
    return c;
}

typedef struct ulist { uint32_t *v; size_t n, cap; } ulist;

static int push(ulist *l, uint32_t x)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        uint32_t *v = realloc(l->v, cap * sizeof *v);
        if (!v) return -1;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = x;
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* FIFO sends: the previous send to the same peer (one sort by peer, list order). */
static int link_fifo(cs_inter_section *s)
{
    uint64_t *key = malloc(sizeof *key * (s->nops ? s->nops : 1));
    size_t n = 0;
    if (!key) return -1;
    for (uint32_t i = 0; i < s->nops; i++)
        if (s->ops[i].kind == COLLSCHED_SEND) key[n++] = (uint64_t)s->ops[i].peer << 32 | i;
    qsort(key, n, sizeof *key, cmp_u64);
    for (size_t k = 0; k < n; k++) {
        cs_inter_op *op = &s->ops[(uint32_t)key[k]];
        op->prev = op->fifo && k > 0 && key[k - 1] >> 32 == key[k] >> 32 ? (int32_t)(uint32_t)key[k - 1] : -1;
    }
    free(key);
    return 0;
}

/* One op of the walk against the held set of its group. */
static int walk_op(const cs_inter_header *h, cs_inter_section *s, uint32_t i, ivset *set, ulist *deps,
                   char *why, size_t len)
{
    cs_inter_op *op = &s->ops[i];
    static const char gname[2] = { 'A', 'B' };
    size_t at = first_after(set, op->lo);
    uint64_t have = covered(set, at, op->lo, op->hi), want = op->hi - op->lo;
    if (op->kind == COLLSCHED_RECV) {
        if (have == want) {
            op->dup = 1;
            s->dup_bytes += want;
            return 0;
        }
        if (have)
            return say(why, len, s->rank, i, "receives [%llu, %llu) of %c's data from %u, partly held already "
                       "(a receive is either new or a duplicate)", (unsigned long long)op->lo,
                       (unsigned long long)op->hi, gname[op->group], op->peer);
        if (op->group == cs_inter_group_of(h, s->rank)) s->own_scratch = 1;
        return insert(set, at, (iv){ op->lo, op->hi, i }) ? say(why, len, s->rank, i, "out of memory") : 0;
    }
    if (have != want)
        return say(why, len, s->rank, i, "sends [%llu, %llu) of %c's data to %u before holding it",
                   (unsigned long long)op->lo, (unsigned long long)op->hi, gname[op->group], op->peer);
    op->dep0 = (uint32_t)deps->n;
    for (size_t k = at; k < set->n && set->v[k].lo < op->hi; k++)
        if (set->v[k].op >= 0 && push(deps, (uint32_t)set->v[k].op)) return say(why, len, s->rank, i, "out of memory");
    op->ndep = (uint32_t)(deps->n - op->dep0);
    return 0;
}

int cs_inter_walk(const cs_inter_header *h, cs_inter_section *s, char *why, size_t len)
{
    ivset held[2] = { { 0 }, { 0 } };
    ulist deps = { 0 };
    int g = cs_inter_group_of(h, s->rank), rc = 0;
    uint64_t own = cs_inter_block_offset(h, s->rank), k = h->blocks[s->rank];
    s->own_scratch = 0;
    s->dup_bytes = 0;
    if (k && insert(&held[g], 0, (iv){ own, own + k, -1 })) rc = say(why, len, s->rank, -1, "out of memory");
    for (uint32_t i = 0; i < s->nops && !rc; i++) rc = walk_op(h, s, i, &held[s->ops[i].group], &deps, why, len);
    if (!rc && link_fifo(s)) rc = say(why, len, s->rank, -1, "out of memory");
    /* Delivery: the remote group's data is covered, [0, K) without a gap. */
    const ivset *r = &held[1 - g];
    uint64_t next = 0;
    for (size_t j = 0; !rc && j < r->n && r->v[j].lo == next; j++) next = r->v[j].hi;
    if (!rc && next < h->total[1 - g])
        rc = say(why, len, s->rank, -1, "never receives byte %llu of %c's data (delivery)", (unsigned long long)next,
                 g ? 'A' : 'B');
    free(held[0].v);
    free(held[1].v);
    free(s->deps);
    s->deps = deps.v;
    if (!s->deps) s->deps = malloc(sizeof *s->deps);
    return rc;
}

/* ---- matching and progress over every rank ---- */

typedef struct whole {
    const cs_inter_header *h;
    cs_inter_section *const *secs;
    uint64_t **sorted;      /* per rank: sends by (peer, list order), then recvs likewise */
    uint32_t *nsend;
    uint32_t **match;       /* per rank, per op: the local index of the matching op at the peer */
} whole;

/* Rank r's sorted list: key = kind << 56 | peer << 32 | index. */
static int sort_rank(whole *w, uint32_t r)
{
    const cs_inter_section *s = w->secs[r];
    uint64_t *k = w->sorted[r] = malloc(sizeof *k * (s->nops ? s->nops : 1));
    w->match[r] = malloc(sizeof *w->match[r] * (s->nops ? s->nops : 1));
    if (!k || !w->match[r]) return -1;
    w->nsend[r] = 0;
    for (uint32_t i = 0; i < s->nops; i++) {
        k[i] = (uint64_t)s->ops[i].kind << 56 | (uint64_t)s->ops[i].peer << 32 | i;
        w->nsend[r] += s->ops[i].kind == COLLSCHED_SEND;
    }
    qsort(k, s->nops, sizeof *k, cmp_u64);
    return 0;
}

/* [*a, *b): the positions in r's sorted list of its sends (recv 0) or recvs (1) with peer p. */
static void run_of(const whole *w, uint32_t r, int recv, uint32_t p, size_t *a, size_t *b)
{
    const uint64_t *k = w->sorted[r];
    size_t lo = recv ? w->nsend[r] : 0, hi = recv ? w->secs[r]->nops : w->nsend[r];
    uint64_t want = (uint64_t)recv << 56 | (uint64_t)p << 32;
    size_t l = lo, h = hi;
    while (l < h) { size_t m = l + (h - l) / 2; if (k[m] < want) l = m + 1; else h = m; }
    *a = l;
    want += 1ull << 32;
    h = hi;
    while (l < h) { size_t m = l + (h - l) / 2; if (k[m] < want) l = m + 1; else h = m; }
    *b = l;
}

static int check_matching(whole *w, char *why, size_t len)
{
    uint64_t sends = 0, recvs = 0;
    for (uint32_t a = 0; a < w->h->h.nranks; a++) {
        const cs_inter_section *sa = w->secs[a];
        sends += w->nsend[a];
        recvs += sa->nops - w->nsend[a];
        for (size_t i = 0, j; i < w->nsend[a]; i = j) {
            uint32_t b = (uint32_t)(w->sorted[a][i] >> 32) & 0xFFFFFFu;
            for (j = i + 1; j < w->nsend[a] && ((w->sorted[a][j] >> 32) & 0xFFFFFFu) == b; j++) {}
            size_t ra, rb;
            run_of(w, b, 1, a, &ra, &rb);
            if (rb - ra != j - i)
                return say(why, len, a, (uint32_t)w->sorted[a][i], "%zu sends to %u, which has %zu receives from %u "
                           "(matching)", j - i, b, rb - ra, a);
            for (size_t k = 0; k < j - i; k++) {
                uint32_t si = (uint32_t)w->sorted[a][i + k], ri = (uint32_t)w->sorted[b][ra + k];
                const cs_inter_op *so = &sa->ops[si], *ro = &w->secs[b]->ops[ri];
                if (so->group != ro->group || so->lo != ro->lo || so->hi != ro->hi)
                    return say(why, len, b, ri, "receive from %u expects [%llu, %llu) of %c's data but the matching "
                               "send (rank %u op %u) carries [%llu, %llu) of %c's", a, (unsigned long long)ro->lo,
                               (unsigned long long)ro->hi, "AB"[ro->group], a, si, (unsigned long long)so->lo,
                               (unsigned long long)so->hi, "AB"[so->group]);
                w->match[a][si] = ri;
                w->match[b][ri] = si;
            }
        }
    }
    if (sends != recvs) /* every send run matched one of as many receives: the rest have none */
        return say(why, len, 0, -1, "%llu receives in all have no matching send (matching)",
                   (unsigned long long)(recvs - sends));
    return 0;
}

/* Can rank r issue op i now (pos: each rank's first op not issued)? */
static int ready(const whole *w, const uint32_t *pos, uint32_t r, uint32_t i, uint32_t *cursor)
{
    const cs_inter_section *s = w->secs[r];
    const cs_inter_op *op = &s->ops[i];
    if (op->kind == COLLSCHED_RECV) return 1;
    for (; *cursor < op->ndep; ++*cursor) { /* a receive completes once its send is issued */
        uint32_t d = s->deps[op->dep0 + *cursor];
        if (pos[s->ops[d].peer] <= w->match[r][d]) return 0;
    }
    /* a FIFO send is synchronous: the previous one completes once its receive is posted */
    return !(op->prev >= 0 && pos[op->peer] <= w->match[r][op->prev]);
}

static int check_progress(whole *w, char *why, size_t len)
{
    uint32_t P = w->h->h.nranks, head = 0, n = 0;
    uint32_t *pos = calloc(P, sizeof *pos), *cursor = calloc(P, sizeof *cursor);
    uint32_t *queue = malloc(sizeof *queue * P);
    uint8_t *in = malloc(P);
    int rc = 0;
    if (!pos || !cursor || !queue || !in) rc = say(why, len, 0, -1, "out of memory");
    for (uint32_t r = 0; !rc && r < P; r++) { queue[r] = r; in[r] = 1; }
    n = rc ? 0 : P;
    while (n) { /* a ring of P slots: each rank is in it at most once */
        uint32_t r = queue[head];
        head = (head + 1) % P;
        n--;
        in[r] = 0;
        const cs_inter_section *s = w->secs[r];
        while (pos[r] < s->nops && ready(w, pos, r, pos[r], &cursor[r])) {
            uint32_t peer = s->ops[pos[r]].peer;
            pos[r]++;
            cursor[r] = 0;
            if (!in[peer]) { /* its waits on this op may be over */
                queue[(head + n) % P] = peer;
                in[peer] = 1;
                n++;
            }
        }
    }
    for (uint32_t r = 0; !rc && r < P; r++)
        if (pos[r] < w->secs[r]->nops)
            rc = say(why, len, r, pos[r], "never issued: the ranks' dataflow walks deadlock (progress)");
    free(pos);
    free(cursor);
    free(queue);
    free(in);
    return rc;
}

int cs_inter_whole_check(const cs_inter_header *h, cs_inter_section *const *secs, char *why, size_t len)
{
    uint32_t P = h->h.nranks;
    whole w = { h, secs, calloc(P, sizeof(uint64_t *)), calloc(P, sizeof(uint32_t)), calloc(P, sizeof(uint32_t *)) };
    int rc = w.sorted && w.nsend && w.match ? 0 : say(why, len, 0, -1, "out of memory");
    for (uint32_t r = 0; !rc && r < P; r++)
        if (sort_rank(&w, r)) rc = say(why, len, r, -1, "out of memory");
    if (!rc) rc = check_matching(&w, why, len);
    if (!rc) rc = check_progress(&w, why, len);
    for (uint32_t r = 0; r < P && w.sorted; r++) free(w.sorted[r]);
    for (uint32_t r = 0; r < P && w.match; r++) free(w.match[r]);
    free(w.sorted);
    free(w.nsend);
    free(w.match);
    return rc;
}
