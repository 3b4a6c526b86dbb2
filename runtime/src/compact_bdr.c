/* compact_bdr.c - the compact generators of BDR and BSLB (algorithms/bdr.py, bslb.py) from
 * their tails (compiler/collsched/compact/bdr.py has the layouts; docs/compact-bdr.md the
 * argument). No MPI, no allocation, no floating point: the tails hold the arrival pattern's
 * class as integers.
 *
 * BDR. A rank's explicit list is its steps in order, each step's receive before its send
 * (from_transfers' sort: every rank receives at most once and sends at most once per step,
 * and its background receives are exactly its pre-step receives before its first send).
 * The pre-steps are a global simulation; seen in the frame that moves down the ring one
 * rank per step, rank r (active from step b_r = M - ps_r) sits at u_r = r + s - sent_r, and
 * in a step the ranks at one u all aim at the same target u - 1 - s: the first in the order
 * (class, rank) sends, the others fall back to u + 1. A rank moves up at most one place
 * per step, so the place-time cells {u >= x - M + s} depend on nothing below them, and
 * every cell rank x needs (its own sends; the receives of x and x + 1, at u = x + 1 + s and
 * x + 2 + s, which also say which blocks the ring still brings them) lies there and at or
 * below u = x + M + 1. So the pre-steps are replayed on the ranks x - M .. x + M + 1 only
 * (a window of 2M + 3 slots, 10 KiB on the stack; the whole ring when P is not larger),
 * and ranks leaving the region are dropped: O(M^2) per rank, independent of P, for
 * M <= CS_BDR_COMPACT_MAX_PS.
 *
 * BSLB. The root's list: the gather's receives in the tail's order (background when the
 * root is late and the engine is pat), then every block to each child, largest subtree
 * first. Any other rank: its own block to the root, every block but its own from its
 * parent, then every block but the child's to each child; blocks in the order
 * [0] + order, each as its segments. */
#include "compact_emit.h"

#define CS_BDR_COMPACT_MAX_PS 512u                       /* compact/bdr.py MAX_PRE_STEPS */
#define CS_BDR_SLOTS (2u * CS_BDR_COMPACT_MAX_PS + 3u)    /* the replay's window */
#define BDR_HEAD 16u
#define BSLB_HEAD 4u
#define NONE UINT64_MAX

enum { ENGINE_PAT = 0, ENGINE_LAST = 2 };

typedef struct bdr_tail {
    uint64_t m, nclass, nruns, width;
    unsigned engine;
    const uint8_t *runs, *ids;
} bdr_tail;

static void bdr_read(const cs_compact_desc *d, bdr_tail *t)
{
    const uint8_t *b = d->tail;
    t->m = cs_compact_le(b, 4);
    t->nclass = cs_compact_le(b + 4, 4);
    t->nruns = cs_compact_le(b + 8, 4);
    t->engine = b[12];
    t->width = b[13];
    t->runs = b + BDR_HEAD;
    t->ids = t->runs + 8 * t->nruns;
}

static uint64_t bdr_class(const bdr_tail *t, uint64_t r)
{
    return cs_compact_le(t->ids + r * t->width, (int)t->width);
}

/* ps of a class: the run whose first class is the last at or below it (binary search). */
static uint64_t bdr_ps(const bdr_tail *t, uint64_t cls)
{
    uint64_t lo = 0, hi = t->nruns; /* runs[lo].first <= cls < runs[hi].first */
    while (hi - lo > 1) {
        uint64_t mid = (lo + hi) / 2;
        if (cs_compact_le(t->runs + 8 * mid, 4) <= cls) lo = mid; else hi = mid;
    }
    return cs_compact_le(t->runs + 8 * lo + 4, 4);
}

static int check_bdr(const cs_compact_desc *d, char *err, size_t errlen)
{
    if (d->nseg != 1)
        return cs_compact_fail(err, errlen, "compact description: nseg: expected 1 for bdr (it "
                               "moves whole blocks), found %u", d->nseg);
    if (d->tail_len < BDR_HEAD)
        return cs_compact_fail(err, errlen, "compact description: tail: length: expected at "
                               "least %u bytes for bdr, found %u", BDR_HEAD, d->tail_len);
    bdr_tail t;
    bdr_read(d, &t);
    if (t.m > CS_BDR_COMPACT_MAX_PS)
        return cs_compact_fail(err, errlen, "compact description: tail: max_ps: expected at most "
                               "%u pre-steps, found %llu", CS_BDR_COMPACT_MAX_PS,
                               (unsigned long long)t.m);
    if (t.nclass < 1 || t.nclass > d->nranks)
        return cs_compact_fail(err, errlen, "compact description: tail: nclass: expected 1..%u, "
                               "found %llu", d->nranks, (unsigned long long)t.nclass);
    if (t.nruns < 1 || t.nruns > t.m + 1)
        return cs_compact_fail(err, errlen, "compact description: tail: nruns: expected 1..%llu, "
                               "found %llu", (unsigned long long)t.m + 1, (unsigned long long)t.nruns);
    if (t.engine > ENGINE_LAST)
        return cs_compact_fail(err, errlen, "compact description: tail: engine: expected 0..%d, "
                               "found %u", ENGINE_LAST, t.engine);
    if (t.width < 1 || t.width > 4 || cs_compact_le(d->tail + 14, 2) != 0)
        return cs_compact_fail(err, errlen, "compact description: tail: width: expected 1..4 and "
                               "a zero reserved word, found %llu, %llu", (unsigned long long)t.width,
                               (unsigned long long)cs_compact_le(d->tail + 14, 2));
    /* nruns <= 1025 and P < 2^25: no overflow */
    uint64_t want = BDR_HEAD + 8 * t.nruns + (uint64_t)d->nranks * t.width;
    if (d->tail_len != want)
        return cs_compact_fail(err, errlen, "compact description: tail: length: expected %llu "
                               "bytes, found %u", (unsigned long long)want, d->tail_len);
    for (uint64_t i = 0; i < t.nruns; i++) {
        uint64_t first = cs_compact_le(t.runs + 8 * i, 4), ps = cs_compact_le(t.runs + 8 * i + 4, 4);
        uint64_t pfirst = i ? cs_compact_le(t.runs + 8 * (i - 1), 4) : 0;
        uint64_t pps = i ? cs_compact_le(t.runs + 8 * (i - 1) + 4, 4) : 0;
        if ((i == 0 && first != 0) || (i > 0 && first <= pfirst) || first >= t.nclass)
            return cs_compact_fail(err, errlen, "compact description: tail: runs: expected first "
                                   "classes 0, then increasing, below nclass");
        if ((i > 0 && ps <= pps) || (i + 1 == t.nruns && ps != t.m))
            return cs_compact_fail(err, errlen, "compact description: tail: runs: expected "
                                   "increasing pre-step counts ending at max_ps %llu",
                                   (unsigned long long)t.m);
    }
    for (uint64_t r = 0; r < d->nranks; r++)
        if (bdr_class(&t, r) >= t.nclass)
            return cs_compact_fail(err, errlen, "compact description: tail: class: expected "
                                   "class ids below %llu, found %llu", (unsigned long long)t.nclass,
                                   (unsigned long long)bdr_class(&t, r));
    return CS_COMPACT_OK;
}

/* The replay's window: slot i is rank base + i (mod P); ranks in slots lo .. nslot-1 take
 * part, and a slot records who claimed it as a target in step `step - 1`. got[k][d]: rank
 * x + k received block x + k + d in the pre-steps (k = 0, 1; d < nslot). */
typedef struct bdr_window {
    uint64_t p, base, lo, nslot;
    int whole;                        /* the window is the whole ring */
    uint16_t sent[CS_BDR_SLOTS], start[CS_BDR_SLOTS], step[CS_BDR_SLOTS], claimer[CS_BDR_SLOTS];
    uint8_t got[2][CS_BDR_SLOTS];
} bdr_window;

/* Slot of the target of slot i's rank, or NONE when that rank does not take part in step s
 * (not arrived, done, or below the region that matters: its target under base). */
static uint64_t bdr_target(const bdr_window *w, uint64_t i, uint64_t s)
{
    if (w->start[i] > s || w->sent[i] + 1u >= w->p) return NONE;
    if (w->whole) return (i + w->p - 1 - w->sent[i]) % w->p;
    return (uint64_t)w->sent[i] + 1 > i ? NONE : i - 1 - w->sent[i];
}

static int bdr_before(const bdr_tail *t, const bdr_window *w, uint64_t i, uint64_t j)
{
    uint64_t ri = (w->base + i) % w->p, rj = (w->base + j) % w->p;
    uint64_t ci = bdr_class(t, ri), cj = bdr_class(t, rj);
    return ci != cj ? ci < cj : ri < rj;
}

/* Did rank x + k get block x + k + d in the pre-steps? Only d <= M can be set, and the
 * window is wider than M. */
static int bdr_got(const bdr_window *w, int k, uint64_t d)
{
    return d < w->nslot && w->got[k][d];
}

static void bdr_generate(cs_emitter *e, const cs_compact_desc *d, uint64_t x)
{
    bdr_tail t;
    bdr_read(d, &t);
    bdr_window w;
    uint64_t p = d->nranks, m = t.m;
    if (p < 2) return;
    w.p = p;
    w.whole = 2 * m + 3 >= p;
    w.nslot = w.whole ? p : 2 * m + 3;
    w.base = w.whole ? 0 : cs_mod_sub(x, m + 1, p);
    w.lo = w.whole ? 0 : 1;          /* ranks x - M .. x + M + 1 */
    for (uint64_t i = 0; i < w.nslot; i++) {
        w.sent[i] = w.step[i] = w.claimer[i] = 0;
        w.got[0][i] = w.got[1][i] = 0;
        w.start[i] = (uint16_t)(i < w.lo ? m : m - bdr_ps(&t, bdr_class(&t, (w.base + i) % p)));
    }
    uint64_t xs = (x + p - w.base) % p, x1s = (xs + 1) % p; /* the slots of x and x + 1 */
    int bg = t.engine == ENGINE_PAT, sent_yet = 0;
    for (uint64_t s = 0; s < m; s++) {
        for (uint64_t i = w.lo; i < w.nslot; i++) {     /* the first in the order claims */
            uint64_t c = bdr_target(&w, i, s);
            if (c == NONE) continue;
            if (w.step[c] != s + 1 || bdr_before(&t, &w, i, w.claimer[c])) {
                w.step[c] = (uint16_t)(s + 1);
                w.claimer[c] = (uint16_t)i;
            }
        }
        uint64_t from = NONE, to = NONE;
        for (uint64_t i = w.lo; i < w.nslot; i++) {
            uint64_t c = bdr_target(&w, i, s);
            if (c == NONE || w.claimer[c] != i) continue;
            if (i == xs) to = (w.base + c) % p;
            if (c == xs) {
                from = (w.base + i) % p;
                w.got[0][(i + p - xs) % p] = 1;
            }
            if (c == x1s) w.got[1][(i + p - x1s) % p] = 1;
            w.sent[i]++;
        }
        if (from != NONE)  /* background while x has not sent yet (its first send) */
            cs_emit_op(e, CS_EMIT_RECV, from, from, 0, bg && !sent_yet && to == NONE ? CS_EMIT_PHASE_BG : 0);
        if (to != NONE) {
            cs_emit_block(e, CS_EMIT_SEND, to, x);
            sent_yet = 1;
        }
    }
    /* The ring: in step j, x gets block x-1-j = x + (P-1-j) from x-1 unless the pre-steps
     * brought it, and sends block x-j = (x+1) + (P-1-j) to x+1 unless they brought it there. */
    for (uint64_t j = 0; j + 1 < p; j++) {
        if (!bdr_got(&w, 0, p - 1 - j))
            cs_emit_block(e, CS_EMIT_RECV, cs_mod_sub(x, 1, p), cs_mod_sub(x, j + 1, p));
        if (!bdr_got(&w, 1, p - 1 - j))
            cs_emit_block(e, CS_EMIT_SEND, cs_mod_add(x, 1, p), cs_mod_sub(x, j, p));
    }
}

/* --- BSLB ---------------------------------------------------------------------------- */

static int check_bslb(const cs_compact_desc *d, char *err, size_t errlen)
{
    if (d->tail_len < BSLB_HEAD)
        return cs_compact_fail(err, errlen, "compact description: tail: length: expected at "
                               "least %u bytes for bslb, found %u", BSLB_HEAD, d->tail_len);
    const uint8_t *b = d->tail;
    if (b[0] > ENGINE_LAST)
        return cs_compact_fail(err, errlen, "compact description: tail: engine: expected 0..%d, "
                               "found %u", ENGINE_LAST, b[0]);
    if (b[1] > 1 || b[2] < 1 || b[2] > 4 || b[3] != 0)
        return cs_compact_fail(err, errlen, "compact description: tail: root_late: expected 0 or "
                               "1, a width 1..4 and a zero reserved byte, found %u, %u, %u",
                               b[1], b[2], b[3]);
    uint64_t want = BSLB_HEAD + (uint64_t)(d->nranks - 1) * b[2];
    if (d->tail_len != want)
        return cs_compact_fail(err, errlen, "compact description: tail: length: expected %llu "
                               "bytes, found %u", (unsigned long long)want, d->tail_len);
    /* The range only: a repeated rank (no memory here for a P-bit set) gives a rank that
     * receives a piece twice, which the runtime's dataflow check refuses. */
    for (uint64_t i = 0; i + 1 < d->nranks; i++) {
        uint64_t r = cs_compact_le(b + BSLB_HEAD + i * b[2], b[2]);
        if (r < 1 || r >= d->nranks)
            return cs_compact_fail(err, errlen, "compact description: tail: order: expected "
                                   "ranks 1..%u", d->nranks - 1);
    }
    return CS_COMPACT_OK;
}

/* Block i of the broadcast order [0] + order. */
static uint64_t bslb_block(const uint8_t *tail, uint64_t i)
{
    return i == 0 ? 0 : cs_compact_le(tail + BSLB_HEAD + (i - 1) * tail[2], tail[2]);
}

static void bslb_blocks(cs_emitter *e, int kind, uint64_t peer, uint64_t p, uint64_t skip,
                        const uint8_t *tail)
{
    for (uint64_t i = 0; i < p; i++) {
        uint64_t o = bslb_block(tail, i);
        if (o != skip) cs_emit_block(e, kind, peer, o);
    }
}

static void bslb_generate(cs_emitter *e, const cs_compact_desc *d, uint64_t x)
{
    const uint8_t *tail = d->tail;
    uint64_t p = d->nranks, mask;
    if (x == 0) {
        uint8_t flags = tail[0] == ENGINE_PAT && tail[1] ? CS_EMIT_PHASE_BG : 0;
        for (uint64_t i = 1; i < p; i++) {
            uint64_t r = bslb_block(tail, i);
            for (uint64_t s = 0; s < e->nseg; s++) cs_emit_op(e, CS_EMIT_RECV, r, r, s, flags);
        }
        for (mask = 1; mask < p; mask <<= 1) {}
        mask >>= 1;                 /* the root's largest subtree: half the power of two >= P */
    } else {
        uint64_t low = x & (~x + 1);
        cs_emit_block(e, CS_EMIT_SEND, 0, x);
        bslb_blocks(e, CS_EMIT_RECV, x - low, p, x, tail);
        mask = low >> 1;
    }
    for (; mask; mask >>= 1)
        if (x + mask < p) bslb_blocks(e, CS_EMIT_SEND, x + mask, p, x + mask, tail);
}

int cs_compact_bdr_check(const cs_compact_desc *d, char *err, size_t errlen)
{
    return d->algorithm == CS_COMPACT_BDR ? check_bdr(d, err, errlen) : check_bslb(d, err, errlen);
}

void cs_compact_bdr_generate(cs_emitter *e, const cs_compact_desc *d, uint64_t rank)
{
    if (d->algorithm == CS_COMPACT_BDR) bdr_generate(e, d, rank);
    else bslb_generate(e, d, rank);
}
