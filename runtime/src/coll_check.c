/* coll_check.c - prove a whole program of a collective beyond allgather (every rank's
 * section of a format 1.2 file) before anyone runs it: cs_coll_check_whole (coll.h).
 *
 * compiler/collsched/collectives/verify.py's passes, order, first violation and words, as
 * "rank R, op I: what" or "rank R, end of list: what" (its Violation without the " [pass]"
 * tag, as whole_check.c does): shape, matching, holding, progress, delivery, order. Progress
 * replays verify.py's abstract execution step for step (the same stack of tasks, the same
 * wake-up order), so that the contribution sets, the first doubled contribution and the
 * first order break it meets are the ones verify.py reports. No MPI here.
 *
 * Cost, N = total ops, T = total pieces, P = ranks, S = nseg, W = ceil(P / 64), M = the
 * largest section's pieces: time O(N + T log M + P) (what an op waited for stays true, so
 * it keeps a cursor where verify.py starts again from the first); reductions add O(W) per
 * piece applied or sent. Memory about 100 N + 8 T + 36 M + 24 P bytes; reductions add
 * 8 W + 9 bytes per (rank, segment), 13 per piece and 8 W + 4 per unordered value in flight
 * (an interval is kept as such). Above CS_COLL_CHECK_MAX_BYTES (256 MiB) it refuses with
 * the figure (CS_COLL_NOMEM). Limits: N < 2^31.
 */
#include "coll.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NONE UINT32_MAX
#define MAX_RANKS (1u << 24)
#define MAX_SEGMENTS 65535u
#define MAX_PIECES (1u << 24)

typedef struct ref { uint32_t src, dst, seg, op, pos; } ref;  /* a piece of a rank's op (local op) */

typedef struct cc {
    const cs_coll_section *const *secs;
    uint32_t P, S, coll, root, W, N;
    int reducing, commutative, ordered, nomem;
    uint32_t *base;                  /* P + 1: first global op of each rank */
    const cs_coll_op **op;           /* N */
    const cs_coll_piece **pc;        /* N: the op's first piece */
    uint32_t *rank, *match;          /* N */
    uint64_t *pfirst;                /* N + 1: global index of the op's first piece */
    uint64_t *wstart, *rstart;       /* N + 1: writers[g], readers[g] in wlist, rlist */
    uint64_t *wcur, *rcur;           /* N: the first of them not known met (facts stay true) */
    uint32_t *wlist, *rlist;         /* T each */
    uint32_t *prev;                  /* N: FIFO send: previous send to its peer */
    uint8_t *done, *settled;         /* N */
    uint32_t *walk, *open, *lastto;  /* P: next op of the walk; first maybe unsettled recv; P + 1 */
    uint32_t *head, *tail, *tnext;   /* 2N keys; N + P tasks */
    uint32_t *stack; uint64_t top;   /* N + P */
    ref *refs;                       /* M: one rank's pieces, sorted */
    uint32_t *stamp, *tmp;           /* N (writers are receives, readers sends); 4 M */
    uint64_t *abits, *pool, *ibuf;   /* reductions: acc (P S W words); unordered snapshots; W */
    uint32_t *alo, *ahi, *slo, *shi; /* P S; T: an ordered value is the ranks lo..hi */
    uint8_t *aord, *sord;            /* P S; T */
    uint32_t *slot, *freel, nfree, cap;  /* T: an unordered snapshot's slot of W words in pool */
    double budget;                   /* bytes the pool may still take */
    char first_double[300], first_break[300], *reason;  /* the first doubled contribution, order break */
    size_t len;
} cc;

static const char *NAMES[] = { "alltoall", "bcast", "reduce", "allreduce" };
static const char *KINDS[] = { "send", "recv", "recv-reduce" };

static int say(cc *c, uint32_t r, uint32_t i, const char *fmt, ...)
{
    char what[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (i == NONE) snprintf(c->reason, c->len, "rank %u, end of list: %s", r, what);
    else snprintf(c->reason, c->len, "rank %u, op %u: %s", r, i, what);
    return 1;
}

static uint32_t local(const cc *c, uint32_t g) { return g - c->base[c->rank[g]]; }

/* ---- shape ---- */

static int program_shape(cc *c, uint32_t nranks)
{
    if (!cs_coll_is(c->coll))
        return say(c, 0, NONE, "program: collective %u is not one of alltoall, bcast, reduce, allreduce", c->coll);
    if (c->P < 1 || c->P > MAX_RANKS) return say(c, 0, NONE, "program: nranks %u is not in 1..%u", c->P, MAX_RANKS);
    if (c->S < 1 || c->S > MAX_SEGMENTS) return say(c, 0, NONE, "program: nseg %u is not in 1..%u", c->S, MAX_SEGMENTS);
    if (nranks != c->P) return say(c, 0, NONE, "program: %u lists of operations for %u ranks", nranks, c->P);
    if (c->coll == CS_COLL_BCAST || c->coll == CS_COLL_REDUCE) {
        if (c->root >= c->P) return say(c, 0, NONE, "program: root %u is not a rank (0..%u)", c->root, c->P - 1);
    } else if (c->root != 0) {
        return say(c, 0, NONE, "program: root %u: expected 0 for %s (no root)", c->root, NAMES[c->coll - 5]);
    }
    return 0;
}

static int op_shape(cc *c, uint32_t g)
{
    const cs_coll_op *o = c->op[g];
    uint32_t r = c->rank[g], i = local(c, g);
    if (o->kind > CS_COLL_RECV_REDUCE) return say(c, r, i, "kind %u is not send, recv or recv-reduce", o->kind);
    if (o->kind == CS_COLL_RECV_REDUCE && !c->reducing)
        return say(c, r, i, "recv-reduce in %s (reduce and allreduce only)", NAMES[c->coll - 5]);
    if (o->peer >= c->P) return say(c, r, i, "peer %u out of range 0..%u", o->peer, c->P - 1);
    if (o->peer == r) return say(c, r, i, "peer is the rank itself");
    if (o->flags & ~(CS_COLL_OP_FIFO | CS_COLL_OP_FENCE | CS_COLL_OP_LOCAL_FIRST | CS_COLL_OP_CHAIN))
        return say(c, r, i, "flags %#x: unknown bits", o->flags);
    if ((o->flags & CS_COLL_OP_LOCAL_FIRST) && o->kind != CS_COLL_RECV_REDUCE)
        return say(c, r, i, "local-first flag on an op that is not a recv-reduce");
    if ((o->flags & (CS_COLL_OP_FIFO | CS_COLL_OP_CHAIN)) && o->kind != CS_COLL_SEND)
        return say(c, r, i, "%s flag on a receive", (o->flags & CS_COLL_OP_FIFO) ? "FIFO" : "chain");
    if (o->npieces > MAX_PIECES) return say(c, r, i, "%u pieces (at most %u)", o->npieces, MAX_PIECES);
    for (uint32_t k = 0; k < o->npieces; k++) {
        const cs_coll_piece *p = &c->pc[g][k];
        if (p->seg >= c->S)
            return say(c, r, i, "piece (%u,%u,%u): segment out of range 0..%u", p->src, p->dst, p->seg, c->S - 1);
        if (c->coll == CS_COLL_ALLTOALL) {
            if (p->src >= c->P || p->dst >= c->P)
                return say(c, r, i, "piece (%u,%u,%u): src and dst must be ranks 0..%u", p->src, p->dst, p->seg,
                           c->P - 1);
        } else if (p->src != 0 || p->dst != 0) {
            return say(c, r, i, "piece (%u,%u,%u): expected src = dst = 0 for %s", p->src, p->dst, p->seg,
                       NAMES[c->coll - 5]);
        }
    }
    return 0;
}

/* ---- matching: sends by (a, b, list order) against receives by (a, b, list order) ---- */

static void pieces_text(const cc *c, uint32_t g, char *out, size_t n)
{
    const cs_coll_op *o = c->op[g];
    if (!o->npieces) { snprintf(out, n, "no pieces (sync)"); return; }
    size_t at = (size_t)snprintf(out, n, "[");
    for (uint32_t k = 0; k < o->npieces && k < 4 && at < n; k++)
        at += (size_t)snprintf(out + at, n - at, "%s(%u,%u,%u)", k ? " " : "", c->pc[g][k].src, c->pc[g][k].dst,
                               c->pc[g][k].seg);
    if (at < n && o->npieces > 4) at += (size_t)snprintf(out + at, n - at, " ... (%u pieces)", o->npieces);
    if (at < n) snprintf(out + at, n - at, "]");
}

/* out[] = in[] stably sorted by the ops' peer (peer_key) or rank (a counting sort). */
static void by_key(const cc *c, uint32_t *cnt, const uint32_t *in, uint32_t n, uint32_t *out, int peer_key)
{
    memset(cnt, 0, ((size_t)c->P + 1) * sizeof *cnt);
    for (uint32_t i = 0; i < n; i++) cnt[(peer_key ? c->op[in[i]]->peer : c->rank[in[i]]) + 1]++;
    for (uint32_t p = 0; p < c->P; p++) cnt[p + 1] += cnt[p];
    for (uint32_t i = 0; i < n; i++) out[cnt[peer_key ? c->op[in[i]]->peer : c->rank[in[i]]]++] = in[i];
}

static int check_matching(cc *c, uint32_t *a, uint32_t *b, uint32_t *cnt)
{
    uint32_t ns = 0, i = 0, j = 0;
    for (uint32_t g = 0; g < c->N; g++) ns += c->op[g]->kind == CS_COLL_SEND;
    uint32_t nr = c->N - ns, *snd = a, *rcv = a + ns;  /* sends by (rank, peer, order): peer, then rank */
    for (uint32_t g = 0; g < c->N; g++) b[c->op[g]->kind == CS_COLL_SEND ? i++ : ns + j++] = g;
    by_key(c, cnt, b, ns, snd, 1);
    memcpy(b, snd, (size_t)ns * sizeof *b);
    by_key(c, cnt, b, ns, snd, 0);
    by_key(c, cnt, b + ns, nr, rcv, 1);  /* receives by (peer, rank, order): already by rank */
    for (i = 0, j = 0; i < ns || j < nr;) {
        uint64_t ks = i < ns ? ((uint64_t)c->rank[snd[i]] << 32 | c->op[snd[i]]->peer) : UINT64_MAX;
        uint64_t kr = j < nr ? ((uint64_t)c->op[rcv[j]]->peer << 32 | c->rank[rcv[j]]) : UINT64_MAX;
        uint64_t k = ks < kr ? ks : kr;
        uint32_t i1 = i, j1 = j, pa = (uint32_t)(k >> 32), pb = (uint32_t)k;
        while (i1 < ns && ((uint64_t)c->rank[snd[i1]] << 32 | c->op[snd[i1]]->peer) == k) i1++;
        while (j1 < nr && ((uint64_t)c->op[rcv[j1]]->peer << 32 | c->rank[rcv[j1]]) == k) j1++;
        for (uint32_t t = 0; t < i1 - i && t < j1 - j; t++) {
            uint32_t s = snd[i + t], q = rcv[j + t];
            const cs_coll_op *so = c->op[s], *qo = c->op[q];
            if (so->npieces != qo->npieces
                || (so->npieces && memcmp(c->pc[s], c->pc[q], (size_t)so->npieces * sizeof *c->pc[s]) != 0)) {
                char want[160], got[160];
                pieces_text(c, q, want, sizeof want);
                pieces_text(c, s, got, sizeof got);
                return say(c, pb, local(c, q), "recv from %u (#%u on that pair) expects %s but the matching send "
                           "(rank %u op %u) carries %s", pa, t + 1, want, pa, local(c, s), got);
            }
            c->match[s] = q, c->match[q] = s;
        }
        if (i1 - i > j1 - j)
            return say(c, pa, local(c, snd[i + (j1 - j)]), "send to %u (#%u on that pair) has no matching recv there",
                       pb, j1 - j + 1);
        if (j1 - j > i1 - i)
            return say(c, pb, local(c, rcv[j + (i1 - i)]), "recv from %u (#%u on that pair) has no matching send "
                       "there", pa, i1 - i + 1);
        i = i1, j = j1;
    }
    return 0;
}

/* ---- per rank: its pieces sorted by (piece, op, position) ---- */

static int cmp_ref(const void *x, const void *y)
{
    const ref *a = x, *b = y;
    if (a->src != b->src) return a->src < b->src ? -1 : 1;
    if (a->dst != b->dst) return a->dst < b->dst ? -1 : 1;
    if (a->seg != b->seg) return a->seg < b->seg ? -1 : 1;
    if (a->op != b->op) return a->op < b->op ? -1 : 1;
    return a->pos < b->pos ? -1 : a->pos > b->pos;
}

/* Rank r's pieces (of receives only if recv_only) sorted into c->refs; returns how many. */
static uint64_t sorted_refs(cc *c, uint32_t r, int recv_only)
{
    uint64_t n = 0;
    for (uint32_t g = c->base[r]; g < c->base[r + 1]; g++) {
        if (recv_only && c->op[g]->kind == CS_COLL_SEND) continue;
        for (uint32_t k = 0; k < c->op[g]->npieces; k++)
            c->refs[n++] = (ref){ c->pc[g][k].src, c->pc[g][k].dst, c->pc[g][k].seg, g - c->base[r], k };
    }
    qsort(c->refs, (size_t)n, sizeof *c->refs, cmp_ref);
    return n;
}

static int same_piece(const ref *a, const ref *b) { return a->src == b->src && a->dst == b->dst && a->seg == b->seg; }

static int owned(const cc *c, uint32_t r, const ref *p)
{
    return c->coll == CS_COLL_ALLTOALL ? p->src == r : c->coll == CS_COLL_BCAST ? r == c->root : 1;
}

/* ---- holding (alltoall, bcast): a send's pieces are the rank's own or received earlier ---- */

static int check_holding(cc *c)
{
    if (c->reducing) return 0;
    for (uint32_t r = 0; r < c->P; r++) {
        uint64_t n = sorted_refs(c, r, 0), first = 0;
        uint32_t bi = NONE, bk = 0;
        const ref *bad = NULL;
        for (uint64_t x = 0; x < n; x++) {
            const ref *p = &c->refs[x];
            if (x == 0 || !same_piece(p, p - 1)) first = NONE;
            uint32_t g = c->base[r] + p->op;
            if (c->op[g]->kind != CS_COLL_SEND) {
                if (first == NONE) first = p->op;
            } else if (!owned(c, r, p) && (first == NONE || first > p->op)
                       && (p->op < bi || (p->op == bi && p->pos < bk))) {
                bi = p->op, bk = p->pos, bad = p;
            }
        }
        if (bad)
            return say(c, r, bi, "sends piece (%u,%u,%u) to %u before holding it (never received before this op)",
                       bad->src, bad->dst, bad->seg, c->op[c->base[r] + bi]->peer);
    }
    return 0;
}

/* ---- what each op waits for in its own list (verify.py's _Execution._static) ----
 * A send: the last earlier receive of each of its pieces and, FIFO, the previous send to
 * its peer (CHAIN: unmet_walk). A receive: the last earlier receive of each of its pieces and the sends that
 * read them since. Each list without repeats, in the order of the op's pieces. */

static void static_waits(cc *c, uint32_t r, uint32_t *lastto)
{
    uint64_t n = sorted_refs(c, r, 0), M = n;
    uint32_t *wr = c->tmp, *rlo = c->tmp + M, *rhi = c->tmp + 2 * M, *at = c->tmp + 3 * M;
    uint32_t lastw = NONE, cur = NONE, since = 0, cstart = 0;
    for (uint64_t x = 0; x < n; x++) {
        const ref *p = &c->refs[x];
        if (x == 0 || !same_piece(p, p - 1)) { lastw = NONE; cur = NONE; since = (uint32_t)x; }
        if (p->op != cur) {
            if (cur != NONE && c->op[c->base[r] + cur]->kind != CS_COLL_SEND) { lastw = cur; since = (uint32_t)x; }
            cur = p->op;
            cstart = (uint32_t)x;
        }
        wr[x] = lastw;
        rlo[x] = since;                            /* the sends of the piece since its last writer */
        rhi[x] = x == cstart ? cstart : since;     /* (only once per op and piece) */
        at[c->pfirst[c->base[r] + p->op] - c->pfirst[c->base[r]] + p->pos] = (uint32_t)x;
    }
    for (uint32_t g = c->base[r]; g < c->base[r + 1]; g++) {
        const cs_coll_op *o = c->op[g];
        uint64_t w = c->wstart[g], q = c->rstart[g], lp = c->pfirst[g] - c->pfirst[c->base[r]];
        for (uint32_t k = 0; k < o->npieces; k++) {
            uint32_t x = at[lp + k];
            if (wr[x] != NONE && c->stamp[c->base[r] + wr[x]] != g + 1)
                c->stamp[c->base[r] + wr[x]] = g + 1, c->wlist[w++] = c->base[r] + wr[x];
        }
        if (o->kind != CS_COLL_SEND)
            for (uint32_t k = 0; k < o->npieces; k++)
                for (uint32_t y = rlo[at[lp + k]]; y < rhi[at[lp + k]]; y++) {
                    uint32_t s = c->base[r] + c->refs[y].op;
                    if (c->stamp[s] != g + 1) { c->stamp[s] = g + 1; c->rlist[q++] = s; }
                }
        c->wstart[g + 1] = c->wcur[g + 1] = w;
        c->rstart[g + 1] = c->rcur[g + 1] = q;
        c->prev[g] = o->kind == CS_COLL_SEND && (o->flags & CS_COLL_OP_FIFO) ? lastto[o->peer] : NONE;
        if (o->kind == CS_COLL_SEND) lastto[o->peer] = g;
    }
    for (uint32_t g = c->base[r]; g < c->base[r + 1]; g++) lastto[c->op[g]->peer] = NONE;
}

/* ---- the abstract execution (verify.py's _Execution, replayed step for step) ----
 * Fact keys: g = op g done (a send issued, a receive posted), N + g = receive g settled.
 * Tasks: g = settle receive g, N + r = walk rank r. */

static uint32_t unmet_fence(cc *c, uint32_t r, uint32_t g)
{
    uint32_t k = c->open[r];
    while (k < c->base[r + 1] && (c->op[k]->kind == CS_COLL_SEND || c->settled[k])) k++;
    c->open[r] = k;
    return k < g ? c->N + k : NONE;
}

static uint32_t unmet_walk(cc *c, uint32_t r, uint32_t g)
{
    const cs_coll_op *o = c->op[g];
    if (o->flags & CS_COLL_OP_FENCE) {
        uint32_t key = unmet_fence(c, r, g);
        if (key != NONE) return key;
    }
    if (o->kind == CS_COLL_SEND) {
        for (; c->wcur[g] < c->wstart[g + 1]; c->wcur[g]++)
            if (!c->settled[c->wlist[c->wcur[g]]]) return c->N + c->wlist[c->wcur[g]];
        uint32_t p = c->prev[g];
        if (p != NONE && !c->done[c->match[p]]) return c->match[p];
        for (p = g; (o->flags & CS_COLL_OP_CHAIN) && p-- > c->base[r];)  /* CHAIN: the previous send */
            if (c->op[p]->kind == CS_COLL_SEND) return c->done[c->match[p]] ? NONE : c->match[p];
    }
    return NONE;
}

static uint32_t unmet_settle(cc *c, uint32_t q)
{
    if (!c->done[c->match[q]]) return c->match[q];
    for (; c->wcur[q] < c->wstart[q + 1]; c->wcur[q]++)
        if (!c->settled[c->wlist[c->wcur[q]]]) return c->N + c->wlist[c->wcur[q]];
    for (; c->rcur[q] < c->rstart[q + 1]; c->rcur[q]++)
        if (!c->done[c->match[c->rlist[c->rcur[q]]]]) return c->match[c->rlist[c->rcur[q]]];
    return NONE;
}

static void wait_on(cc *c, uint32_t key, uint32_t task)
{
    c->tnext[task] = NONE;
    if (c->head[key] == NONE) c->head[key] = task;
    else c->tnext[c->tail[key]] = task;
    c->tail[key] = task;
}

static void fire(cc *c, uint32_t key)
{
    for (uint32_t t = c->head[key]; t != NONE; t = c->tnext[t]) c->stack[c->top++] = t;
    c->head[key] = NONE;
}

/* A send's values as it is issued: an interval as such, an unordered set as bits in a slot
 * of the pool (freed when the matching receive applies it). */
static void snapshot(cc *c, uint32_t g)
{
    for (uint32_t k = 0; k < c->op[g]->npieces && !c->nomem; k++) {
        uint64_t a = (uint64_t)c->rank[g] * c->S + c->pc[g][k].seg, s = c->pfirst[g] + k;
        c->slo[s] = c->alo[a], c->shi[s] = c->ahi[a], c->sord[s] = c->aord[a];
        if (c->aord[a]) continue;
        if (!c->nfree) {
            uint32_t n = c->cap ? 2 * c->cap : 64;
            double more = (double)(n - c->cap) * (8.0 * c->W + 4.0);
            uint64_t *pool = more <= c->budget ? realloc(c->pool, (size_t)n * c->W * sizeof *pool) : NULL;
            uint32_t *fl = pool ? realloc(c->freel, (size_t)n * sizeof *fl) : NULL;
            if (pool) c->pool = pool;
            if (!fl) {
                snprintf(c->reason, c->len, "whole-program check: the unordered contribution sets in flight need "
                         "more than the %llu MiB it allows", CS_COLL_CHECK_MAX_BYTES >> 20);
                c->nomem = 1;
                return;
            }
            c->freel = fl;
            for (uint32_t x = n; x > c->cap; x--) c->freel[c->nfree++] = x - 1;
            c->budget -= more, c->cap = n;
        }
        c->slot[s] = c->freel[--c->nfree];
        memcpy(c->pool + (uint64_t)c->slot[s] * c->W, c->abits + a * c->W, (size_t)c->W * sizeof *c->pool);
    }
}

static void order_break(cc *c, const char *fmt, uint32_t q, uint32_t s, uint32_t a, uint32_t b, uint32_t x,
                        uint32_t y)
{
    c->ordered = 0;
    if (!c->first_break[0] && fmt) {
        char what[200];
        snprintf(what, sizeof what, fmt, s, a, b, x, y);
        snprintf(c->first_break, sizeof c->first_break, "rank %u, op %u: %s", c->rank[q], local(c, q), what);
    }
}

/* Settling receive q: its values replace (recv) or combine with (recv-reduce) the
 * accumulator's; the first doubled contribution and the first order break are kept. */
static void apply(cc *c, uint32_t q)
{
    if (!c->reducing || c->nomem) return;
    const cs_coll_op *o = c->op[q];
    uint32_t r = c->rank[q], m = c->match[q], W = c->W;
    int lf = (o->flags & CS_COLL_OP_LOCAL_FIRST) != 0;
    for (uint32_t k = 0; k < o->npieces; k++) {
        uint32_t s = c->pc[q][k].seg;
        uint64_t a = (uint64_t)r * c->S + s, in = c->pfirst[m] + k;
        uint32_t lo = c->slo[in], hi = c->shi[in], alo = c->alo[a], ahi = c->ahi[a];
        int ord = c->sord[in], aord = c->aord[a];
        uint64_t *ab = c->abits + a * W, *ib = ord ? c->ibuf : c->pool + (uint64_t)c->slot[in] * W;
        if (ord)  /* the interval's bits */
            for (uint32_t w = 0; w < W; w++) {
                uint64_t b0 = (uint64_t)w * 64, x = lo > b0 ? lo - b0 : 0, y = hi < b0 + 63 ? hi - b0 : 63;
                ib[w] = lo > b0 + 63 || hi < b0 ? 0 : (~0ull >> (63 - y)) & (~0ull << x);
            }
        else
            c->freel[c->nfree++] = c->slot[in];  /* read below, before the next snapshot can reuse it */
        if (o->kind == CS_COLL_RECV) {
            memcpy(ab, ib, (size_t)W * sizeof *ab);
            c->alo[a] = lo; c->ahi[a] = hi; c->aord[a] = (uint8_t)ord;
            if (!ord) order_break(c, NULL, q, 0, 0, 0, 0, 0);
            continue;
        }
        for (uint32_t w = 0; w < W && !c->first_double[0]; w++)
            if (ab[w] & ib[w])
                snprintf(c->first_double, sizeof c->first_double, "rank %u, op %u: contribution %u doubled in "
                         "segment %u: the incoming value from %u and the rank's own both hold it", r, local(c, q),
                         w * 64 + (uint32_t)__builtin_ctzll(ab[w] & ib[w]), s, o->peer);
        for (uint32_t w = 0; w < W; w++) ab[w] |= ib[w];
        if (ord && aord && (lf ? ahi + 1 == lo : hi + 1 == alo)) {
            c->alo[a] = lf ? alo : lo;
            c->ahi[a] = lf ? hi : ahi;
        } else {
            c->alo[a] = c->ahi[a] = c->aord[a] = 0;
            if (ord && aord)
                order_break(c, "combines segment %u as ranks %u..%u (op) %u..%u: not MPI's rank order", q, s,
                            lf ? alo : lo, lf ? ahi : hi, lf ? lo : alo, lf ? hi : ahi);
        }
    }
}

static void advance(cc *c, uint32_t r)
{
    while (c->walk[r] < c->base[r + 1]) {
        uint32_t g = c->walk[r], key = unmet_walk(c, r, g);
        if (key != NONE) { wait_on(c, key, c->N + r); return; }
        if (c->op[g]->kind == CS_COLL_SEND && c->reducing) snapshot(c, g);
        c->done[g] = 1, c->walk[r] = g + 1;
        fire(c, g);
        if (c->op[g]->kind != CS_COLL_SEND) c->stack[c->top++] = g;
    }
}

static void run(cc *c)
{
    for (uint32_t r = 0; r < c->P; r++) { c->walk[r] = c->open[r] = c->base[r]; c->stack[c->top++] = c->N + r; }
    while (c->top) {
        uint32_t t = c->stack[--c->top];
        if (t >= c->N) { advance(c, t - c->N); continue; }
        if (c->settled[t]) continue;
        uint32_t key = unmet_settle(c, t);
        if (key != NONE) { wait_on(c, key, t); continue; }
        apply(c, t);
        c->settled[t] = 1, fire(c, c->N + t);
    }
}

static void describe(cc *c, uint32_t key, char *out, size_t n)
{
    if (key == NONE) { snprintf(out, n, "nothing left to wait for (internal)"); return; }
    uint32_t g = key >= c->N ? key - c->N : key;
    if (key >= c->N) snprintf(out, n, "waits for its receive op %u (from %u) to settle", local(c, g), c->op[g]->peer);
    else snprintf(out, n, "waits for rank %u to %s (op %u)", c->rank[g],
                  c->op[g]->kind == CS_COLL_SEND ? "issue its send" : "post its receive", local(c, g));
}

static int check_progress(cc *c)
{
    char why[200];
    run(c);
    if (c->nomem) return -1;
    for (uint32_t r = 0; r < c->P; r++) {
        uint32_t g = c->walk[r];
        if (g < c->base[r + 1]) {
            describe(c, unmet_walk(c, r, g), why, sizeof why);
            return say(c, r, local(c, g), "deadlock: %s to/from %u is never issued: %s", KINDS[c->op[g]->kind],
                       c->op[g]->peer, why);
        }
        for (g = c->base[r]; g < c->base[r + 1]; g++)
            if (c->op[g]->kind != CS_COLL_SEND && !c->settled[g]) {
                describe(c, unmet_settle(c, g), why, sizeof why);
                return say(c, r, local(c, g), "deadlock: receive from %u never settles: %s", c->op[g]->peer, why);
            }
        for (g = c->base[r]; g < c->base[r + 1]; g++)
            if (c->op[g]->kind == CS_COLL_SEND && !c->done[c->match[g]])
                return say(c, r, local(c, g), "deadlock: send to %u never completes: the peer never posts the "
                           "receive", c->op[g]->peer);
    }
    return 0;
}

/* ---- delivery ---- */

/* alltoall, bcast: per rank, its receives' pieces sorted: one held from the start, one
 * received twice (the op-level violations, the first in list order), then the first piece
 * it never receives. */
static int piece_delivery(cc *c)
{
    for (uint32_t r = 0; r < c->P; r++) {
        uint64_t n = sorted_refs(c, r, 1), uniq = 0, want;
        uint32_t bi = NONE, bk = 0, first = 0, ns = r == 0 ? 1 : 0, ng = 0, gap = 0;
        const ref *bad = NULL;
        for (uint64_t x = 0; x < n; x++) {
            const ref *p = &c->refs[x];
            int head = x == 0 || !same_piece(p, p - 1), own = owned(c, r, p);
            if (head) first = p->op;
            if ((own || !head) && (p->op < bi || (p->op == bi && p->pos < bk))) {
                bi = p->op, bk = p->pos, bad = p;
            }
            if (own || !head) continue;
            uniq += c->coll == CS_COLL_BCAST || p->dst == r;
            if (gap || (c->coll == CS_COLL_ALLTOALL && p->dst != r)) continue;
            if (c->coll == CS_COLL_ALLTOALL ? (p->src == ns && p->seg == ng) : p->seg == ng) {
                if (++ng == c->S && c->coll == CS_COLL_ALLTOALL) { ng = 0; if (++ns == r) ns++; }
            } else {
                gap = 1;
            }
        }
        if (bad) {
            if (owned(c, r, bad))
                return say(c, r, bi, "receives piece (%u,%u,%u), which it holds from the start", bad->src, bad->dst,
                           bad->seg);
            for (uint64_t x = 0; x < n; x++)  /* the first receipt of that piece */
                if (same_piece(&c->refs[x], bad)) { first = c->refs[x].op; break; }
            return say(c, r, bi, "receives piece (%u,%u,%u) a second time (first at op %u)", bad->src, bad->dst,
                       bad->seg, first);
        }
        want = c->coll == CS_COLL_ALLTOALL ? (uint64_t)(c->P - 1) * c->S : r == c->root ? 0 : c->S;
        if (uniq < want) {
            char more[64] = "";
            if (want - uniq > 1) snprintf(more, sizeof more, " (%llu pieces missing in all)",
                                          (unsigned long long)(want - uniq));
            return say(c, r, NONE, "never receives piece (%u,%u,%u)%s", c->coll == CS_COLL_ALLTOALL ? ns : 0,
                       c->coll == CS_COLL_ALLTOALL ? r : 0, ng, more);
        }
    }
    return 0;
}

/* reduce, allreduce: the first doubled contribution the execution met, then the first
 * segment of the root (reduce) / of a rank (allreduce) without every contribution. */
static int reduction_delivery(cc *c)
{
    if (c->first_double[0]) { snprintf(c->reason, c->len, "%s", c->first_double); return 1; }
    uint32_t r0 = c->coll == CS_COLL_REDUCE ? c->root : 0, r1 = c->coll == CS_COLL_REDUCE ? c->root + 1 : c->P;
    for (uint32_t r = r0; r < r1; r++)
        for (uint32_t s = 0; s < c->S; s++) {
            const uint64_t *b = c->abits + ((uint64_t)r * c->S + s) * c->W;
            uint32_t lack = c->P, shown = 0;
            char list[160] = "";
            size_t at = 0;
            for (uint32_t w = 0; w < c->W; w++) lack -= (uint32_t)__builtin_popcountll(b[w]);
            for (uint32_t x = 0; lack && x < c->P && shown < 8; x++)  /* the first 8 it lacks */
                if (!(b[x / 64] >> (x % 64) & 1))
                    at += (size_t)snprintf(list + at, sizeof list - at, "%s%u", shown++ ? ", " : "", x);
            if (lack)
                return say(c, r, NONE, "segment %u ends without the contribution%s of rank%s %s%s", s,
                           lack > 1 ? "s" : "", lack > 1 ? "s" : "", list, lack > 8 ? " ..." : "");
        }
    return 0;
}

static int check_order(cc *c)
{
    if (!c->reducing || c->commutative || c->ordered) return 0;
    if (c->first_break[0]) snprintf(c->reason, c->len, "%s (mark the program commutative_only)", c->first_break);
    else say(c, c->root, NONE, "the result is not combined in MPI's rank order (mark the program commutative_only)");
    return 1;
}

/* ---- the whole check ---- */

/* Every array of the check; the last 9 only for reductions (the pool grows as it goes). */
#define ARRAYS(c) (c)->base, (c)->op, (c)->pc, (c)->rank, (c)->pfirst, (c)->match, (c)->wstart, (c)->rstart, \
    (c)->wcur, (c)->rcur, (c)->wlist, (c)->rlist, (c)->prev, (c)->done, (c)->settled, (c)->walk, (c)->open, \
    (c)->lastto, (c)->head, (c)->tail, (c)->tnext, (c)->stack, (c)->refs, (c)->stamp, (c)->tmp, (c)->abits, \
    (c)->alo, (c)->ahi, (c)->aord, (c)->ibuf, (c)->slo, (c)->shi, (c)->sord, (c)->slot

static void release(cc *c)
{
    void *all[] = { ARRAYS(c), c->pool, c->freel };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]);
}

#define ALLOC(p, n) ((p) = malloc(((n) > 0 ? (size_t)(n) : 1) * sizeof *(p)))

/* Counts ops and pieces, checks the working memory against the cap, allocates. 0, or
 * CS_COLL_NOMEM with the reason. */
static int setup(cc *c, uint32_t nranks)
{
    uint64_t N = 0, T = 0, M = 0, P = nranks;
    for (uint32_t r = 0; r < nranks; r++) {
        uint64_t t = 0;
        for (uint32_t i = 0; i < c->secs[r]->nops; i++) t += c->secs[r]->ops[i].npieces;
        N += c->secs[r]->nops;
        T += t;
        if (t > M) M = t;
    }
    uint64_t W = (P + 63) / 64;
    double need = 100.0 * N + 8.0 * T + 36.0 * M + 24.0 * P;
    if (c->reducing) need += (double)P * c->S * (8.0 * W + 9.0) + 13.0 * T + 8.0 * W;
    c->budget = (double)CS_COLL_CHECK_MAX_BYTES - need;
    if (N >= 0x7FFFFFFFull || need > (double)CS_COLL_CHECK_MAX_BYTES) {
        snprintf(c->reason, c->len, "whole-program check: %llu ops, %llu pieces and %llu ranks need %.0f MiB of "
                 "working memory, more than the %llu MiB it allows", (unsigned long long)N, (unsigned long long)T,
                 (unsigned long long)P, need / 1048576.0, CS_COLL_CHECK_MAX_BYTES >> 20);
        return CS_COLL_NOMEM;
    }
    c->N = (uint32_t)N, c->W = (uint32_t)W;
    ALLOC(c->base, P + 1); ALLOC(c->op, N); ALLOC(c->pc, N); ALLOC(c->rank, N); ALLOC(c->pfirst, N + 1);
    ALLOC(c->match, N); ALLOC(c->wstart, N + 1); ALLOC(c->rstart, N + 1); ALLOC(c->wcur, N + 1);
    ALLOC(c->rcur, N + 1); ALLOC(c->wlist, T); ALLOC(c->rlist, T); ALLOC(c->prev, N); ALLOC(c->walk, P);
    c->done = calloc(N + 1, 1), c->settled = calloc(N + 1, 1), c->stamp = calloc(N + 1, sizeof *c->stamp);
    ALLOC(c->open, P); ALLOC(c->lastto, P + 1); ALLOC(c->head, 2 * N + 1); ALLOC(c->tail, 2 * N + 1);
    ALLOC(c->tnext, N + P); ALLOC(c->stack, N + P); ALLOC(c->refs, M); ALLOC(c->tmp, 4 * M);
    if (c->reducing) {
        ALLOC(c->abits, P * c->S * W); ALLOC(c->alo, P * c->S); ALLOC(c->ahi, P * c->S); ALLOC(c->aord, P * c->S);
        ALLOC(c->ibuf, W); ALLOC(c->slo, T); ALLOC(c->shi, T); ALLOC(c->sord, T); ALLOC(c->slot, T);
    }
    void *all[] = { ARRAYS(c) };
    int ok = 1;
    for (size_t i = 0; i < sizeof all / sizeof *all - (c->reducing ? 0 : 9); i++) ok &= all[i] != NULL;
    if (!ok) return snprintf(c->reason, c->len, "whole-program check: out of memory"), CS_COLL_NOMEM;
    uint64_t g = 0, t = 0;
    for (uint32_t r = 0; r < nranks; r++) {
        const cs_coll_section *s = c->secs[r];
        c->base[r] = (uint32_t)g;
        for (uint32_t i = 0; i < s->nops; i++, g++) {
            c->op[g] = &s->ops[i];
            c->pc[g] = s->pieces ? s->pieces + s->ops[i].first : NULL;
            c->rank[g] = r;
            c->pfirst[g] = t;
            c->match[g] = NONE;
            t += s->ops[i].npieces;
        }
    }
    c->base[nranks] = (uint32_t)g;
    c->pfirst[g] = t;
    memset(c->head, 0xFF, (size_t)(2 * N + 1) * sizeof *c->head);
    for (uint32_t r = 0; c->reducing && r < nranks; r++)
        for (uint32_t s = 0; s < c->S; s++) {
            uint64_t a = (uint64_t)r * c->S + s;
            memset(c->abits + a * W, 0, (size_t)W * sizeof *c->abits);
            c->abits[a * W + r / 64] = 1ull << (r % 64);
            c->alo[a] = c->ahi[a] = r, c->aord[a] = 1;
        }
    return 0;
}

/* The sections of one program, every op's pieces inside its section (C only: a section
 * built in memory is not the reader's). */
static int sections_sane(cc *c, uint32_t nranks)
{
    for (uint32_t r = 0; r < nranks; r++) {
        const cs_coll_section *s = c->secs[r];
        const cs_coll_header *x = s ? &s->hdr : NULL, *h = c->secs[0] ? &c->secs[0]->hdr : NULL;
        if (!s || !h || (s->nops && !s->ops)) return say(c, r, NONE, "program: section %u is missing", r);
        if (s->rank != r) return say(c, 0, NONE, "program: section %u is rank %u's", r, s->rank);
        if (x->h.collective != h->h.collective || x->h.nranks != h->h.nranks || x->h.nseg != h->h.nseg
            || x->root != h->root || x->h.flags != h->h.flags)
            return say(c, 0, NONE, "program: section %u's header differs from section 0's", r);
        for (uint32_t i = 0; i < s->nops; i++)
            if (s->ops[i].first > s->npieces || s->ops[i].npieces > s->npieces - s->ops[i].first
                || (s->ops[i].npieces && !s->pieces))
                return say(c, r, i, "pieces outside the section's %llu", (unsigned long long)s->npieces);
    }
    return 0;
}

int cs_coll_check_whole(const cs_coll_section *const *sections, uint32_t nranks, char *reason, size_t len)
{
    char spare[8];
    cc c;
    memset(&c, 0, sizeof c);
    c.secs = sections, c.ordered = 1;
    c.reason = reason && len ? reason : spare, c.len = reason && len ? len : sizeof spare, c.reason[0] = 0;
    if (nranks == 0 || !sections) return say(&c, 0, NONE, "program: nranks 0 is not in 1..%u", MAX_RANKS);
    if (sections_sane(&c, nranks)) return CS_COLL_VIOLATION;
    const cs_coll_header *h = &sections[0]->hdr;
    c.P = h->h.nranks, c.S = h->h.nseg, c.coll = h->h.collective, c.root = h->root;
    c.commutative = (h->h.flags & CS_COLL_FLAG_COMMUTATIVE_ONLY) != 0;
    c.reducing = c.coll == CS_COLL_REDUCE || c.coll == CS_COLL_ALLREDUCE;
    if (program_shape(&c, nranks)) return CS_COLL_VIOLATION;
    int rc = setup(&c, nranks);
    if (rc) { release(&c); return rc; }
    for (uint32_t g = 0; g < c.N && !rc; g++) rc = op_shape(&c, g);
    if (!rc) rc = check_matching(&c, c.head, c.tail, c.lastto);  /* head, tail: scratch until the execution */
    memset(c.head, 0xFF, (size_t)(2 * (uint64_t)c.N + 1) * sizeof *c.head);
    memset(c.lastto, 0xFF, (size_t)c.P * sizeof *c.lastto);
    if (!rc) rc = check_holding(&c);
    c.wstart[0] = c.rstart[0] = c.wcur[0] = c.rcur[0] = 0;
    for (uint32_t r = 0; !rc && r < c.P; r++) static_waits(&c, r, c.lastto);
    if (!rc) rc = check_progress(&c);
    if (!rc) rc = c.reducing ? reduction_delivery(&c) : piece_delivery(&c);
    if (!rc) rc = check_order(&c);
    release(&c);
    if (rc < 0 && !c.nomem) snprintf(c.reason, c.len, "whole-program check: out of memory");
    return rc < 0 ? CS_COLL_NOMEM : rc ? CS_COLL_VIOLATION : CS_COLL_PROVEN;
}
