/* whole_check.c - prove a whole schedule (every rank's list) before anyone runs it.
 *
 * The passes of compiler/collsched/verify.py, under the rules of docs/semantics.md, in the
 * same order and with the same first violation and wording: shape, matching (exact: the
 * k-th send a->b carries the piece the k-th recv at b from a expects), holding, delivery,
 * progress (no deadlock). No MPI here: comm_state.c gathers the sections on rank 0 and
 * calls cs_whole_check; the unit test (tests/runtime/apps/whole_check_main.c) calls it
 * on lists read from text.
 *
 * Cost, N = total ops, P = ranks, M = largest section: O(N log M) time (one sort of each
 * rank's list), memory 16 N bytes + 16 M bytes + O(P) besides the 12 N bytes of the input.
 * Limits: N <= INT32_MAX, P <= 2^24 (the file format's own limit).
 */
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NONE UINT32_MAX

typedef struct wc {
    uint32_t P, nseg;
    const cs_wire_op *ops;
    uint64_t *off;        /* P + 1: first op of each rank */
    uint32_t *nsend;      /* P: sends of each rank (of its message heads, sorting heads) */
    uint32_t *nsel;       /* P: ops (heads) of each rank in order[] */
    uint32_t *order;      /* N: per rank, sends by (peer, list order), then recvs by (peer,
                           * list order) - every op, or message heads only (sort_lists);
                           * reused by the progress pass as its wait lists */
    int messages;         /* some op is joined (multi-piece messages) */
    uint32_t *link;       /* N: recv -> the send it matches; forwarded send -> its feeding recv */
    uint32_t *fifo;       /* N: send -> the recv matching the previous send to the same peer */
    uint32_t *mh;         /* N: the first op (head) of each op's message: itself unless joined */
    int serial;           /* prove the PAT engine's serial execution (docs/semantics.md) */
    uint32_t *mrecv;      /* serial: N: send -> the recv it matches */
    uint64_t *lsend, *lrecv; /* serial: P: each rank's last issued send / recv (or UINT64_MAX) */
    uint64_t *lead_end;   /* P: first op after the rank's leading background receives */
    void *tmp;            /* 16 M bytes: one rank's sort keys */
    char *reason;
    size_t len;
} wc;

static uint32_t seg_of(const cs_wire_op *o) { return o->word & 0xFFFFu; }
static uint32_t kind_of(const cs_wire_op *o) { return (o->word >> 16) & 0xFFu; }
static uint32_t phase_of(const cs_wire_op *o) { return (o->word >> 24) & 1u; }
static uint32_t fifo_of(const cs_wire_op *o) { return (o->word >> 25) & 1u; }
static uint32_t join_of(const cs_wire_op *o) { return o->word >> 26; } /* 0 or 1 once shaped */

/* Records "rank R, op I: ..." (I local to R; I == NONE: "end of list"); returns 1. */
static int bad(wc *w, uint32_t rank, uint64_t op, const char *fmt, ...)
{
    char what[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (op == NONE)
        snprintf(w->reason, w->len, "rank %u, end of list: %s", rank, what);
    else
        snprintf(w->reason, w->len, "rank %u, op %llu: %s", rank, (unsigned long long)op, what);
    return 1;
}

/* Pieces of the message op g (global, of rank r) belongs to (mh set). */
static uint64_t pieces_of(const wc *w, uint32_t r, uint64_t g)
{
    uint64_t e = g + 1;
    while (e < w->off[r + 1] && join_of(&w->ops[e])) e++;
    return e - w->mh[g];
}

/* How a reason names the message of op g of rank r, as verify.py's _Ctx.message: "op I",
 * or "message at op I (N pieces)" (I its head's index in the rank's list). */
static const char *msg_name(const wc *w, uint32_t r, uint64_t g, char *buf, size_t n)
{
    uint64_t k = pieces_of(w, r, g), h = w->mh[g] - w->off[r];
    if (k == 1) snprintf(buf, n, "op %llu", (unsigned long long)h);
    else snprintf(buf, n, "message at op %llu (%llu pieces)", (unsigned long long)h, (unsigned long long)k);
    return buf;
}

/* ---- shape (the loader checks the same per rank; repeated so the function stands alone) ---- */

typedef struct piece_at { uint64_t piece; uint64_t op; } piece_at; /* op: local index */

static int cmp_piece(const void *a, const void *b)
{
    const piece_at *x = a, *y = b;
    if (x->piece != y->piece) return x->piece < y->piece ? -1 : 1;
    return x->op < y->op ? -1 : x->op > y->op;
}

/* Once the join rules hold: each op's message head (mh), then no piece twice in one
 * message (verify.py sorts by (head, piece, op): the first message with a repeat, its
 * smallest repeated piece, named at its second op). */
static int twice_in_message(wc *w)
{
    piece_at *p = w->tmp;
    w->messages = 0;
    for (uint32_t r = 0; r < w->P; r++)
        for (uint64_t g = w->off[r]; g < w->off[r + 1]; g++) {
            w->mh[g] = join_of(&w->ops[g]) ? w->mh[g - 1] : (uint32_t)g;
            w->messages |= join_of(&w->ops[g]) != 0;
        }
    for (uint32_t r = 0; w->messages && r < w->P; r++)
        for (uint64_t g = w->off[r], e; g < w->off[r + 1]; g = e) {
            for (e = g + 1; e < w->off[r + 1] && join_of(&w->ops[e]); e++) {}
            if (e - g < 2) continue;
            for (uint64_t k = g; k < e; k++)
                p[k - g] = (piece_at){ (uint64_t)w->ops[k].origin * w->nseg + seg_of(&w->ops[k]), k - w->off[r] };
            qsort(p, (size_t)(e - g), sizeof *p, cmp_piece);
            for (uint64_t k = 1; k < e - g; k++)
                if (p[k].piece == p[k - 1].piece) {
                    char m[64];
                    return bad(w, r, p[k].op, "piece (%llu,%llu) twice in the %s (first at op %llu)",
                               (unsigned long long)(p[k].piece / w->nseg), (unsigned long long)(p[k].piece % w->nseg),
                               msg_name(w, r, g, m, sizeof m), (unsigned long long)p[k - 1].op);
                }
        }
    return 0;
}


static int check_shape(wc *w)
{
    static const char *const kinds[2] = { "send", "recv" };
    for (int t = 0; t < 14; t++)
        for (uint32_t r = 0; r < w->P; r++)
            for (uint64_t g = w->off[r]; g < w->off[r + 1]; g++) {
                const cs_wire_op *o = &w->ops[g], *p = o - 1;
                uint64_t i = g - w->off[r];
                int joined = join_of(o) != 0, next = joined && i > 0;
                switch (t) {
                case 0: if (kind_of(o) > 1) return bad(w, r, i, "kind is neither send nor recv"); break;
                case 1: if (o->peer >= w->P) return bad(w, r, i, "peer out of range 0..%u", w->P - 1); break;
                case 2: if (o->peer == r) return bad(w, r, i, "peer is the rank itself"); break;
                case 3: if (o->origin >= w->P) return bad(w, r, i, "origin out of range 0..%u", w->P - 1); break;
                case 4: if (seg_of(o) >= w->nseg) return bad(w, r, i, "segment out of range 0..%u", w->nseg - 1); break;
                case 5: break; /* (verify.py: FIFO flag neither 0 nor 1; one bit here) */
                case 6:
                    if (fifo_of(o) == 1 && kind_of(o) == COLLSCHED_RECV) return bad(w, r, i, "FIFO flag on a recv");
                    break;
                case 7:
                    if (i > 0 && phase_of(o) == 1 && phase_of(p) != 1)
                        return bad(w, r, i, "background op after a foreground op");
                    break;
                /* multi-piece messages (docs/semantics.md, rule 1): a joined op continues
                 * the message of the op before it; verify.py's _message_shape words */
                case 8: if (join_of(o) > 1) return bad(w, r, i, "join flag is %u, neither 0 nor 1", join_of(o)); break;
                case 9: if (joined && i == 0) return bad(w, r, i, "joined op is the rank's first op (no message to join)"); break;
                case 10:
                    if (next && kind_of(o) != kind_of(p))
                        return bad(w, r, i, "joined %s continues a message of %ss (op %llu)", kinds[kind_of(o)],
                                   kinds[kind_of(p)], (unsigned long long)(i - 1));
                    break;
                case 11:
                    if (next && o->peer != p->peer)
                        return bad(w, r, i, "joined op's peer %u differs from its message's peer %u (op %llu)",
                                   o->peer, p->peer, (unsigned long long)(i - 1));
                    break;
                case 12:
                    if (next && phase_of(o) != phase_of(p))
                        return bad(w, r, i, "joined op's phase differs from its message's (op %llu)",
                                   (unsigned long long)(i - 1));
                    break;
                case 13:
                    if (joined && fifo_of(o))
                        return bad(w, r, i, "FIFO flag on a joined op (a message's FIFO mark is its head's)");
                    break;
                }
            }
    return twice_in_message(w);
}

/* ---- matching ---- */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* order[] of every rank: sends by (peer, list order), then recvs by (peer, list order);
 * of every op, or of message heads only (heads = 1). */
static void sort_lists(wc *w, int heads)
{
    uint64_t *key = w->tmp;
    for (uint32_t r = 0; r < w->P; r++) {
        uint64_t lo = w->off[r], n = 0;
        w->nsend[r] = 0;
        for (uint64_t i = 0; i < w->off[r + 1] - lo; i++) {
            const cs_wire_op *o = &w->ops[lo + i];
            if (heads && join_of(o)) continue;
            key[n++] = ((uint64_t)kind_of(o) << 56) | ((uint64_t)o->peer << 32) | i;
            w->nsend[r] += kind_of(o) == COLLSCHED_SEND;
        }
        w->nsel[r] = (uint32_t)n;
        qsort(key, (size_t)n, sizeof *key, cmp_u64);
        for (uint64_t i = 0; i < n; i++) w->order[lo + i] = (uint32_t)(lo + (key[i] & 0xFFFFFFFFu));
    }
}

/* Positions [a, b) in order[] of rank r's sends (recv = 0) or recvs (recv = 1). */
static void part(const wc *w, uint32_t r, int recv, uint64_t *a, uint64_t *b)
{
    *a = w->off[r] + (recv ? w->nsend[r] : 0);
    *b = w->off[r] + (recv ? w->nsel[r] : w->nsend[r]);
}

/* Positions [*lo, *hi) in order[] of rank r's sends (recv = 0) or recvs (recv = 1) whose
 * peer is p: a binary search, the part being sorted by peer. */
static void find_run(const wc *w, uint32_t r, int recv, uint32_t p, uint64_t *lo, uint64_t *hi)
{
    uint64_t a, b;
    part(w, r, recv, &a, &b);
    uint64_t l = a, h = b;
    while (l < h) {
        uint64_t m = l + (h - l) / 2;
        if (w->ops[w->order[m]].peer < p) l = m + 1; else h = m;
    }
    *lo = l;
    h = b;
    while (l < h) {
        uint64_t m = l + (h - l) / 2;
        if (w->ops[w->order[m]].peer <= p) l = m + 1; else h = m;
    }
    *hi = l;
}

/* Calls fn for every run of equal peers in rank r's sends (recv = 0) or recvs (recv = 1),
 * peers ascending; stops when fn returns non-zero. */
typedef int (*run_fn)(wc *w, uint32_t r, uint32_t peer, uint64_t lo, uint64_t hi, void *arg);
static int each_run(wc *w, uint32_t r, int recv, run_fn fn, void *arg)
{
    uint64_t a, b;
    part(w, r, recv, &a, &b);
    for (uint64_t i = a, j; i < b; i = j) {
        uint32_t p = w->ops[w->order[i]].peer;
        for (j = i + 1; j < b && w->ops[w->order[j]].peer == p; j++) {}
        int rc = fn(w, r, p, i, j, arg);
        if (rc) return rc;
    }
    return 0;
}

/* arg non-NULL: the sorted ops are message heads (the words name messages). */
static int excess_send(wc *w, uint32_t a, uint32_t b, uint64_t lo, uint64_t hi, void *arg)
{
    uint64_t rl, rh;
    find_run(w, b, 1, a, &rl, &rh);
    if (hi - lo <= rh - rl) return 0;
    uint32_t g = w->order[lo + (rh - rl)];
    char m[64];
    if (arg)
        return bad(w, a, g - w->off[a], "send %s to %u (message #%llu on that pair) has no matching recv message there",
                   msg_name(w, a, g, m, sizeof m), b, (unsigned long long)(rh - rl + 1));
    return bad(w, a, g - w->off[a], "send to %u (#%llu on that pair) has no matching recv there", b,
               (unsigned long long)(rh - rl + 1));
}

typedef struct excess { uint32_t a, b, op; uint64_t k; } excess;

static int excess_recv(wc *w, uint32_t b, uint32_t a, uint64_t lo, uint64_t hi, void *arg)
{
    excess *e = arg;
    uint64_t sl, sh;
    find_run(w, a, 0, b, &sl, &sh);
    if (hi - lo > sh - sl && (e->op == NONE || a < e->a || (a == e->a && b < e->b)))
        *e = (excess){ a, b, w->order[lo + (sh - sl)], sh - sl + 1 };
    return 0;
}

/* The k-th send message a -> b and the k-th recv message at b from a carry as many pieces. */
static int same_sizes(wc *w, uint32_t a, uint32_t b, uint64_t lo, uint64_t hi, void *arg)
{
    (void)arg;
    uint64_t rl, rh;
    find_run(w, b, 1, a, &rl, &rh);
    for (uint64_t k = 0; k < hi - lo; k++) {
        uint32_t so = w->order[lo + k], ro = w->order[rl + k];
        uint64_t ns = pieces_of(w, a, so), nr = pieces_of(w, b, ro);
        if (ns != nr)
            return bad(w, a, so - w->off[a], "send message of %llu pieces to %u (message #%llu on that pair) "
                       "matched by a message of %llu at rank %u op %llu", (unsigned long long)ns, b,
                       (unsigned long long)(k + 1), (unsigned long long)nr, b, (unsigned long long)(ro - w->off[b]));
    }
    return 0;
}

/* Appends up to 8 pieces of the message [h, e) as verify.py's _fmt: "[(o,s) (o,s) ...]". */
static void fmt_pieces(const wc *w, uint64_t h, uint64_t e, char *buf, size_t n)
{
    size_t at = (size_t)snprintf(buf, n, "[");
    for (uint64_t i = h; i < e && i < h + 8 && at < n; i++)
        at += (size_t)snprintf(buf + at, n - at, "%s(%u,%u)", i > h ? " " : "", w->ops[i].origin, seg_of(&w->ops[i]));
    if (at < n) snprintf(buf + at, n - at, "%s]", e - h > 8 ? " ..." : "");
}

/* Recv op ro (of a message of several pieces, at rank b) differs from its matching send op
 * so (rank a): verify.py's _piece_mismatch. */
static int piece_mismatch(wc *w, uint32_t a, uint32_t b, uint32_t so, uint32_t ro)
{
    uint64_t sh = w->mh[so], rh = w->mh[ro], n = pieces_of(w, b, ro);
    uint64_t *x = malloc(2 * n * sizeof *x);
    int same = 0;
    if (x) {
        for (uint64_t i = 0; i < n; i++) {
            x[i] = (uint64_t)w->ops[sh + i].origin * w->nseg + seg_of(&w->ops[sh + i]);
            x[n + i] = (uint64_t)w->ops[rh + i].origin * w->nseg + seg_of(&w->ops[rh + i]);
        }
        qsort(x, (size_t)n, sizeof *x, cmp_u64);
        qsort(x + n, (size_t)n, sizeof *x, cmp_u64);
        same = !memcmp(x, x + n, n * sizeof *x);
        free(x);
    }
    char how[340], sent[150], got[150], ms[64], mr[64];
    if (same) {
        snprintf(how, sizeof how, "the same pieces in another order");
    } else {
        fmt_pieces(w, sh, sh + n, sent, sizeof sent);
        fmt_pieces(w, rh, rh + n, got, sizeof got);
        snprintf(how, sizeof how, "pieces %s where it expects %s", sent, got);
    }
    const cs_wire_op *s = &w->ops[so], *r = &w->ops[ro];
    return bad(w, b, ro - w->off[b], "piece %llu of its recv %s from %u is (%u,%u) but the matching send %s at rank "
               "%u carries (%u,%u): %s", (unsigned long long)(ro - rh + 1), msg_name(w, b, ro, mr, sizeof mr), a,
               r->origin, seg_of(r), msg_name(w, a, so, ms, sizeof ms), a, s->origin, seg_of(s), how);
}

static int same_pieces(wc *w, uint32_t a, uint32_t b, uint64_t lo, uint64_t hi, void *arg)
{
    (void)arg;
    uint64_t rl, rh;
    find_run(w, b, 1, a, &rl, &rh);
    for (uint64_t k = 0; k < hi - lo; k++) {
        uint32_t s = w->order[lo + k], r = w->order[rl + k];
        const cs_wire_op *so = &w->ops[s], *ro = &w->ops[r];
        w->link[r] = s;
        w->fifo[s] = k ? w->order[rl + k - 1] : NONE;
        if (so->origin == ro->origin && seg_of(so) == seg_of(ro)) continue;
        if (w->messages && pieces_of(w, b, r) > 1) return piece_mismatch(w, a, b, s, r);
        return bad(w, b, r - w->off[b],
                   "recv from %u expects piece (%u,%u) but the matching send (rank %u op %llu) carries (%u,%u)",
                   a, ro->origin, seg_of(ro), a, (unsigned long long)(s - w->off[a]), so->origin, seg_of(so));
    }
    return 0;
}

/* As many sends a -> b as recvs at b from a (of messages first, then of ops: heads = 1
 * sorts messages); messages of as many pieces; then the same pieces (verify.py's order). */
static int counts_match(wc *w, int heads)
{
    for (uint32_t a = 0; a < w->P; a++)
        if (each_run(w, a, 0, excess_send, heads ? w : NULL)) return 1;
    excess e = { 0, 0, NONE, 0 };
    for (uint32_t b = 0; b < w->P; b++) each_run(w, b, 1, excess_recv, &e);
    char m[64];
    if (e.op != NONE && heads)
        return bad(w, e.b, e.op - w->off[e.b], "recv %s from %u (message #%llu on that pair) has no matching send "
                   "message there", msg_name(w, e.b, e.op, m, sizeof m), e.a, (unsigned long long)e.k);
    if (e.op != NONE)
        return bad(w, e.b, e.op - w->off[e.b], "recv from %u (#%llu on that pair) has no matching send there",
                   e.a, (unsigned long long)e.k);
    return 0;
}

static int check_matching(wc *w)
{
    if (w->messages) {
        sort_lists(w, 1);
        if (counts_match(w, 1)) return 1;
        for (uint32_t a = 0; a < w->P; a++)
            if (each_run(w, a, 0, same_sizes, NULL)) return 1;
    }
    sort_lists(w, 0);
    if (counts_match(w, 0)) return 1;
    for (uint32_t a = 0; a < w->P; a++)
        if (each_run(w, a, 0, same_pieces, NULL)) return 1;
    return 0;
}

/* ---- holding and delivery (one sort of each rank's recvs by piece) ---- */

typedef struct delivery {
    uint32_t dup_rank, miss_rank;   /* NONE: not seen */
    uint64_t dup_op, dup_first, dup_piece, miss_piece, missing;
} delivery;

/* Rank r's recvs sorted by (piece, list order) in tmp; returns their number. */
static uint64_t sorted_recvs(wc *w, uint32_t r)
{
    piece_at *p = w->tmp;
    uint64_t n = 0, lo = w->off[r];
    for (uint64_t g = lo; g < w->off[r + 1]; g++)
        if (kind_of(&w->ops[g]) == COLLSCHED_RECV)
            p[n++] = (piece_at){ (uint64_t)w->ops[g].origin * w->nseg + seg_of(&w->ops[g]), g - lo };
    qsort(p, (size_t)n, sizeof *p, cmp_piece);
    return n;
}

/* Duplicates and missing pieces of rank r (its recvs sorted in tmp, none of its own). */
static void note_delivery(wc *w, uint32_t r, uint64_t n, delivery *d)
{
    const piece_at *p = w->tmp;
    uint64_t unique = 0, next = r == 0 ? w->nseg : 0; /* lowest piece not yet seen */
    int gap = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (i > 0 && p[i].piece == p[i - 1].piece) {
            if (d->dup_rank == NONE) {
                d->dup_rank = r;
                d->dup_op = p[i].op;
                d->dup_first = p[i - 1].op;
                d->dup_piece = p[i].piece;
            }
            continue;
        }
        unique++;
        if (!gap && p[i].piece == next) {
            next++;
            if (next == (uint64_t)r * w->nseg) next += w->nseg;
        } else {
            gap = 1;
        }
    }
    uint64_t want = (uint64_t)(w->P - 1) * w->nseg;
    if (unique < want && d->miss_rank == NONE) {
        d->miss_rank = r;
        d->miss_piece = next;
        d->missing = want - unique;
    }
}

static int check_holding_delivery(wc *w)
{
    for (uint32_t r = 0; r < w->P; r++)
        for (uint64_t g = w->off[r]; g < w->off[r + 1]; g++) {
            const cs_wire_op *o = &w->ops[g];
            if (kind_of(o) == COLLSCHED_RECV && o->origin == r)
                return bad(w, r, g - w->off[r], "receives its own piece (%u,%u)", o->origin, seg_of(o));
        }
    delivery d = { NONE, NONE, 0, 0, 0, 0, 0 };
    for (uint32_t r = 0; r < w->P; r++) {
        uint64_t n = sorted_recvs(w, r);
        const piece_at *p = w->tmp;
        for (uint64_t g = w->off[r]; g < w->off[r + 1]; g++) {
            const cs_wire_op *o = &w->ops[g];
            if (kind_of(o) != COLLSCHED_SEND || o->origin == r) continue;
            uint64_t key = (uint64_t)o->origin * w->nseg + seg_of(o), l = 0, h = n, i = g - w->off[r];
            while (l < h) {
                uint64_t m = l + (h - l) / 2;
                if (p[m].piece < key) l = m + 1; else h = m;
            }
            /* a send message holds every piece when the walk reaches its head */
            char m[80] = "", name[64];
            if (w->messages && pieces_of(w, r, g) > 1)
                snprintf(m, sizeof m, " in its send %s", msg_name(w, r, g, name, sizeof name));
            if (l == n || p[l].piece != key)
                return bad(w, r, i, "forwards piece (%u,%u) to %u%s before holding it: the rank never receives it",
                           o->origin, seg_of(o), o->peer, m);
            if (p[l].op > w->mh[g] - w->off[r])
                return bad(w, r, i, "forwards piece (%u,%u) to %u%s before holding it: the rank receives it "
                           "only later (op %llu)", o->origin, seg_of(o), o->peer, m, (unsigned long long)p[l].op);
            w->link[g] = (uint32_t)(w->off[r] + p[l].op);
        }
        note_delivery(w, r, n, &d);
    }
    if (d.dup_rank != NONE)
        return bad(w, d.dup_rank, d.dup_op, "receives piece (%llu,%llu) a second time (first at op %llu)",
                   (unsigned long long)(d.dup_piece / w->nseg), (unsigned long long)(d.dup_piece % w->nseg),
                   (unsigned long long)d.dup_first);
    if (d.miss_rank != NONE) {
        char more[64] = "";
        if (d.missing > 1) snprintf(more, sizeof more, " (%llu pieces missing in all)", (unsigned long long)d.missing);
        return bad(w, d.miss_rank, NONE, "never receives piece (%llu, %llu)%s",
                   (unsigned long long)(d.miss_piece / w->nseg), (unsigned long long)(d.miss_piece % w->nseg), more);
    }
    return 0;
}

/* ---- progress: Kahn's algorithm over what a send waits for: a forwarded send for the
 * send feeding its recv, and any send for the peer to have posted the recv matching the
 * previous send to it (FIFO per link). Only a send can stop a rank's walk; the set of ops
 * that end up issued does not depend on the order the ranks are advanced in, so the first
 * rank left stuck (and its op) is the one the wave algorithm of verify.py reports. ---- */

/* The head of the send message that delivers the piece forwarded by send op i of rank r,
 * if not issued yet (NONE: issued, or i sends an own piece). */
static uint32_t fwd_wait(const wc *w, const uint64_t *pos, uint64_t i, uint32_t r)
{
    if (w->ops[i].origin == r) return NONE;
    uint32_t fr = w->link[i], f = w->mh[w->link[fr]];
    return f >= pos[w->ops[fr].peer] ? f : NONE;
}

/* The op that op g of rank r still waits for (NONE: it may be issued now). *why: 1 FIFO
 * or serial send (the recv of the previous message must be posted), 2 serial recv (the
 * previous recv must be complete: its send issued), 3 the serial chain of leading
 * background receives, 0 a forwarded piece (*at: the op of the message carrying it).
 * Messages are the units (docs/semantics.md, "Multi-piece messages"): a joined op never
 * waits (it is issued with its head), a head waits for everything its message needs,
 * and what it waits for is the head of another message. */
static uint32_t waits_for(const wc *w, const uint64_t *pos, uint64_t g, uint32_t r, int *why, uint64_t *at)
{
    const cs_wire_op *o = &w->ops[g];
    *why = 0;
    *at = g;
    if (join_of(o)) return NONE;
    /* Serial: the background engine runs the leading background receives before the call,
     * which waits for all of them: proven as a chain, each message waiting for the one before. */
    if (w->serial && g > w->off[r] && g <= w->lead_end[r] && g < w->off[r + 1]) {
        uint32_t p = w->mh[g - 1], f = w->link[p];
        if (f >= pos[w->ops[p].peer]) { *why = 3; return f; }
    }
    if (kind_of(o) != COLLSCHED_SEND) {
        if (w->serial && w->lrecv[r] != UINT64_MAX) {
            const cs_wire_op *p = &w->ops[w->lrecv[r]];
            uint32_t f = w->link[w->lrecv[r]];
            if (f >= pos[p->peer]) { *why = 2; return f; }
        }
        return NONE;
    }
    /* In the order verify.py's walk meets them (it passes a message op by op): the head's
     * piece, the head's FIFO or serial wait, then the joined ops' pieces. */
    uint32_t f = fwd_wait(w, pos, g, r);
    if (f != NONE) return f;
    uint32_t m = NONE;
    if (w->serial && w->lsend[r] != UINT64_MAX) {
        m = w->mrecv[w->lsend[r]];
        if (m < pos[w->ops[w->lsend[r]].peer]) m = NONE;
    } else if (!w->serial && fifo_of(o) && w->fifo[g] != NONE) {
        m = w->mh[w->fifo[g]];
        if (m < pos[o->peer]) m = NONE;
    }
    if (m != NONE) { *why = 1; return m; }
    for (uint64_t i = g + 1; i < w->off[r + 1] && join_of(&w->ops[i]); i++)
        if ((f = fwd_wait(w, pos, i, r)) != NONE) { *at = i; return f; }
    return NONE;
}

/* The reason of a rank r whose walk is stuck at op g (verify.py's check_progress words). */
static int report_stuck(wc *w, const uint64_t *pos, uint32_t r, uint64_t g)
{
    const cs_wire_op *o = &w->ops[g];
    int why;
    uint64_t at;
    uint32_t f = waits_for(w, pos, g, r, &why, &at);
    uint32_t q = why == 3 ? w->ops[g - 1].peer
               : why == 2 ? w->ops[w->lrecv[r]].peer
               : why == 1 ? (w->serial ? w->ops[w->lsend[r]].peer : o->peer)
               : w->ops[w->link[at]].peer;
    char dep[64], mine[64], in[96] = "";
    msg_name(w, q, f, dep, sizeof dep);
    if (pieces_of(w, r, g) > 1)
        snprintf(in, sizeof in, why == 2 ? " (its recv %s)" : " in its send %s", msg_name(w, r, g, mine, sizeof mine));
    uint64_t i = g - w->off[r];
    if (why == 3)
        return bad(w, r, i, "deadlock: waits for its background receives (rank %u issuing its %s), which never happens",
                   q, dep);
    if (why == 2)
        return bad(w, r, i, "deadlock: posts its receive of piece (%u,%u)%s only after the previous receive completes "
                   "(rank %u issuing its %s), which never happens (serial execution)", o->origin, seg_of(o), in, q, dep);
    if (why == 1)
        return bad(w, r, i, "deadlock: waits to send piece (%u,%u)%s to %u until rank %u posts its %s (the receive of "
                   "the previous message), which never happens", o->origin, seg_of(o), in, o->peer, q, dep);
    return bad(w, r, i, "deadlock: waits to forward piece (%u,%u)%s until rank %u issues its %s, which never happens",
               w->ops[at].origin, seg_of(&w->ops[at]), in, q, dep);
}

static int check_progress(wc *w)
{
    uint32_t P = w->P;
    uint64_t *pos = malloc((size_t)P * sizeof *pos);      /* first op not yet issued */
    uint32_t *next = malloc((size_t)P * sizeof *next);    /* wait lists, through ranks */
    uint32_t *stack = malloc((size_t)P * sizeof *stack);
    uint32_t *head = w->order;                            /* per op: first rank waiting for it */
    if (!pos || !next || !stack) { free(pos); free(next); free(stack); return -1; }
    uint32_t top = 0;
    for (uint32_t r = 0; r < P; r++) {
        pos[r] = w->off[r];
        stack[top++] = P - 1 - r;
    }
    memset(head, 0xFF, (size_t)w->off[P] * sizeof *head);
    for (uint32_t r = 0; r < P; r++) {
        uint64_t g = w->off[r];
        while (g < w->off[r + 1] && phase_of(&w->ops[g]) && kind_of(&w->ops[g]) == COLLSCHED_RECV) g++;
        w->lead_end[r] = g;
    }
    if (w->serial) {
        for (uint32_t r = 0; r < P; r++) w->lsend[r] = w->lrecv[r] = UINT64_MAX;
        for (uint32_t r = 0; r < P; r++)
            for (uint64_t g = w->off[r]; g < w->off[r + 1]; g++)
                if (kind_of(&w->ops[g]) == COLLSCHED_RECV) w->mrecv[w->link[g]] = (uint32_t)g;
    }
    while (top) {
        uint32_t r = stack[--top];
        while (pos[r] < w->off[r + 1]) {
            uint64_t g = pos[r];
            int why;
            uint64_t at;
            uint32_t f = waits_for(w, pos, g, r, &why, &at);
            if (f != NONE) { next[r] = head[f]; head[f] = r; break; }
            if (w->serial && !join_of(&w->ops[g])) {
                if (kind_of(&w->ops[g]) == COLLSCHED_SEND) w->lsend[r] = g;
                else w->lrecv[r] = g;
            }
            pos[r]++;
            for (uint32_t x = head[g]; x != NONE; x = next[x]) stack[top++] = x;
            head[g] = NONE;
        }
    }
    int rc = 0;
    for (uint32_t r = 0; r < P && !rc; r++)
        if (pos[r] < w->off[r + 1]) rc = report_stuck(w, pos, r, pos[r]);
    free(pos);
    free(next);
    free(stack);
    return rc;
}

static void wc_free(wc *w)
{
    free(w->off); free(w->nsend); free(w->nsel); free(w->order); free(w->link); free(w->fifo); free(w->mh);
    free(w->tmp); free(w->mrecv); free(w->lsend); free(w->lrecv); free(w->lead_end);
}

int cs_whole_check(uint32_t nranks, uint32_t nseg, const int *nops, const cs_wire_op *ops,
                   char *reason, size_t len)
{
    return cs_whole_check_mode(nranks, nseg, nops, ops, 0, reason, len);
}

int cs_whole_check_mode(uint32_t nranks, uint32_t nseg, const int *nops, const cs_wire_op *ops,
                        int serial, char *reason, size_t len)
{
    wc w = { .P = nranks, .nseg = nseg, .ops = ops, .reason = reason, .len = len, .serial = serial };
    if (reason && len) reason[0] = 0;
    if (nranks == 0 || nranks > CS_WHOLE_MAX_RANKS || nseg == 0 || nseg > 65535) {
        snprintf(reason, len, "whole-schedule check: expected 1..%u ranks and 1..65535 segments, found %u and %u",
                 CS_WHOLE_MAX_RANKS, nranks, nseg);
        return CS_WHOLE_BAD;
    }
    w.off = malloc(((size_t)nranks + 1) * sizeof *w.off);
    w.nsend = malloc((size_t)nranks * sizeof *w.nsend);
    w.nsel = malloc((size_t)nranks * sizeof *w.nsel);
    if (!w.off || !w.nsend || !w.nsel) goto nomem;
    uint64_t N = 0, M = 0;
    for (uint32_t r = 0; r < nranks; r++) {
        if (nops[r] < 0) {
            snprintf(reason, len, "whole-schedule check: rank %u has a negative op count", r);
            wc_free(&w);
            return CS_WHOLE_BAD;
        }
        w.off[r] = N;
        N += (uint64_t)nops[r];
        if ((uint64_t)nops[r] > M) M = (uint64_t)nops[r];
    }
    w.off[nranks] = N;
    if (N > CS_WHOLE_MAX_OPS) {
        snprintf(reason, len, "whole-schedule check: %llu ops in all, more than the %u it handles",
                 (unsigned long long)N, CS_WHOLE_MAX_OPS);
        wc_free(&w);
        return CS_WHOLE_BAD;
    }
    w.order = malloc((size_t)(N ? N : 1) * sizeof *w.order);
    w.link = malloc((size_t)(N ? N : 1) * sizeof *w.link);
    w.fifo = malloc((size_t)(N ? N : 1) * sizeof *w.fifo);
    w.mh = malloc((size_t)(N ? N : 1) * sizeof *w.mh);
    w.tmp = malloc((size_t)(M ? M : 1) * sizeof(piece_at));
    w.lead_end = malloc((size_t)nranks * sizeof *w.lead_end);
    if (!w.lead_end) goto nomem;
    if (serial) {
        w.mrecv = malloc((size_t)(N ? N : 1) * sizeof *w.mrecv);
        w.lsend = malloc((size_t)nranks * sizeof *w.lsend);
        w.lrecv = malloc((size_t)nranks * sizeof *w.lrecv);
        if (!w.mrecv || !w.lsend || !w.lrecv) goto nomem;
    }
    if (!w.order || !w.link || !w.fifo || !w.mh || !w.tmp) goto nomem;
    int rc = check_shape(&w);
    if (!rc) rc = check_matching(&w);
    if (!rc) rc = check_holding_delivery(&w);
    if (!rc) rc = check_progress(&w);
    if (rc < 0) goto nomem;
    wc_free(&w);
    return rc ? CS_WHOLE_BAD : CS_WHOLE_OK;
nomem:
    wc_free(&w);
    snprintf(reason, len, "whole-schedule check: cannot allocate memory for the check");
    return CS_WHOLE_NOMEM;
}
