/* compact_gen.c - every rank's operation list from a compact description (compact_gen.h).
 *
 * Each generator is the closed form of one Python algorithm (compiler/collsched/
 * algorithms/<name>.py) as the pipeline turns it into lists: block_transfers cuts every
 * block into nseg segment transfers in segment order, ir.from_transfers sorts a rank's ops
 * by (step, sub-step, receives before sends, transfer index), and the FIFO pass
 * (policy.mark_fifo_links) marks sends by piece size. In every algorithm here a rank
 * receives from at most one peer and sends to at most one peer per step, so "transfer
 * index" is the order of the blocks in the Python loop: the generators walk the steps a
 * rank takes part in and emit its receives, then its sends, block by block.
 *
 * Half duplex (flags bit 0 clear): from_transfers colours each step's transfers greedily in
 * the global order (ir._half_duplex_substeps) and sorts by colour first. Where a step's
 * transfers come as groups of equal size (one sender to one receiver, contiguous in the
 * global order, senders in rank order), each group takes one aligned block of colours, so
 * a rank's list keeps each group's order and only the order of its receive group and its
 * send group in the step can change: sends_first says when they swap (docs/compact-
 * regular.md derives the closed forms). lnbc, magpie and mpichg2 never have a rank in two
 * groups of one step: their half-duplex lists are the full-duplex ones.
 *
 * Nothing is allocated; counts and ranks are held in 64 bits (P <= 2^24, nseg < 2^16).
 * The proof that the lists are the compiler's: tests/compiler/test_compact_gen.py and
 * tools/prove_compact.py (docs/compact.md).
 */
#include "compact_emit.h"
#include "crc32.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static uint64_t lowbit(uint64_t x) { return x & (~x + 1); }

/* The colour block of group s in a step where every rank s sends one group to s + shift
 * (mod P, 0 < shift < P), groups in sender order: b(s) = mex{b(s - shift) if that sender
 * came earlier, b(s + shift - P) if it came earlier}. With m = min(shift, P - shift): rows
 * of m senders alternate 0, 1 up to P - m; the last m senders meet both an earlier sender
 * and an earlier receiver's group and take 1 or 2 by their row's parity. */
static unsigned shift_block(uint64_t s, uint64_t shift, uint64_t p)
{
    uint64_t m = shift < p - shift ? shift : p - shift, row = s / m;
    if (s < p - m) return (unsigned)(row % 2);
    return row % 2 ? 1u : 2u;
}

/* Whether rank x lists a shift step's sends before its receives: in half duplex, when its
 * send group (sender x) has a lower colour block than its receive group (sender x - shift). */
static int sends_first(int half, uint64_t x, uint64_t shift, uint64_t p)
{
    return half && shift_block(x, shift, p) < shift_block(cs_mod_sub(x, shift, p), shift, p);
}

/* ring.py: in step k, rank i sends block i - k to i + 1 (and receives i - 1 - k). Every
 * step is a shift by 1, so the half-duplex order is the same in every step. */
static void ring(cs_emitter *e, uint64_t p, uint64_t x, int half)
{
    int first = p > 1 && sends_first(half, x, 1, p);
    for (uint64_t k = 0; k + 1 < p; k++) {
        if (first) cs_emit_block(e, CS_EMIT_SEND, cs_mod_add(x, 1, p), cs_mod_sub(x, k, p));
        cs_emit_block(e, CS_EMIT_RECV, cs_mod_sub(x, 1, p), cs_mod_sub(x, k + 1, p));
        if (!first) cs_emit_block(e, CS_EMIT_SEND, cs_mod_add(x, 1, p), cs_mod_sub(x, k, p));
    }
}

/* bruck.py: in step k, rank r sends blocks r .. r+c-1 to r - 2^k, c = min(2^k, P - 2^k). */
static void bruck(cs_emitter *e, uint64_t p, uint64_t x, int half)
{
    for (uint64_t dist = 1; dist < p; dist *= 2) {
        uint64_t count = dist < p - dist ? dist : p - dist, from = cs_mod_add(x, dist, p);
        int first = sends_first(half, x, p - dist, p); /* a shift by -dist */
        for (int part = 0; part < 2; part++) { /* receives then sends, or sends first */
            if ((part == 0) != first)
                for (uint64_t j = 0; j < count; j++) cs_emit_block(e, CS_EMIT_RECV, from, cs_mod_add(from, j, p));
            else
                for (uint64_t j = 0; j < count; j++) cs_emit_block(e, CS_EMIT_SEND, cs_mod_sub(x, dist, p), cs_mod_add(x, j, p));
        }
    }
}

/* rd.py: in step k, rank r swaps its aligned group of 2^k blocks with r XOR 2^k. In half
 * duplex the lower rank of each pair sends first (its group comes first in the order). */
static void rd(cs_emitter *e, uint64_t p, uint64_t x, int half)
{
    for (uint64_t dist = 1; dist < p; dist *= 2) {
        uint64_t partner = x ^ dist;
        int first = half && x < partner;
        for (int part = 0; part < 2; part++) { /* receives then sends, or sends first */
            if ((part == 0) != first)
                for (uint64_t o = partner & ~(dist - 1); o < (partner & ~(dist - 1)) + dist; o++)
                    cs_emit_block(e, CS_EMIT_RECV, partner, o);
            else
                for (uint64_t o = x & ~(dist - 1); o < (x & ~(dist - 1)) + dist; o++)
                    cs_emit_block(e, CS_EMIT_SEND, partner, o);
        }
    }
}

/* spreading.py: in step d - 1, rank j sends its own block to j + d (a shift by d). */
static void spreading(cs_emitter *e, uint64_t p, uint64_t x, int half)
{
    for (uint64_t d = 1; d < p; d++) {
        int first = sends_first(half, x, d, p);
        if (first) cs_emit_block(e, CS_EMIT_SEND, cs_mod_add(x, d, p), x);
        cs_emit_block(e, CS_EMIT_RECV, cs_mod_sub(x, d, p), cs_mod_sub(x, d, p));
        if (!first) cs_emit_block(e, CS_EMIT_SEND, cs_mod_add(x, d, p), x);
    }
}

/* nex.py's partner: even ranks go right in even steps, odd ranks left; it alternates. */
static uint64_t nex_partner(uint64_t r, uint64_t step, uint64_t p)
{
    int right = (r % 2 == 0) == (step % 2 == 0);
    return right ? cs_mod_add(r, 1, p) : cs_mod_sub(r, 1, p);
}

/* The two blocks rank r receives in step s >= 1 of nex.py, in its list order: by
 * induction over the steps (docs/compact.md), [r + s, r + s + 1] when r and s have the
 * same parity, [r - s, r - s - 1] otherwise. */
static void nex_received(uint64_t r, uint64_t s, uint64_t p, uint64_t out[2])
{
    if ((r % 2) == (s % 2)) {
        out[0] = cs_mod_add(r, s % p, p);
        out[1] = cs_mod_add(r, (s + 1) % p, p);
    } else {
        out[0] = cs_mod_sub(r, s, p);
        out[1] = cs_mod_sub(r, s + 1, p);
    }
}

/* nex.py: step 0 swaps own blocks in pairs; step 1 sends [own, step-0 partner's]; step
 * s >= 2 forwards the two blocks received in step s - 1. Every step pairs the ranks, so in
 * half duplex the lower rank of each pair sends first. */
static void nex(cs_emitter *e, uint64_t p, uint64_t x, int half)
{
    uint64_t got[2], sent[2];
    for (uint64_t s = 0; s < p / 2; s++) {
        uint64_t peer = nex_partner(x, s, p);
        int first = half && x < peer;
        if (s == 0) {
            if (first) cs_emit_block(e, CS_EMIT_SEND, peer, x);
            cs_emit_block(e, CS_EMIT_RECV, peer, peer);
            if (!first) cs_emit_block(e, CS_EMIT_SEND, peer, x);
            continue;
        }
        nex_received(x, s, p, got);
        if (s == 1) {
            sent[0] = x;
            sent[1] = nex_partner(x, 0, p);
        } else {
            nex_received(x, s - 1, p, sent);
        }
        if (first) {
            cs_emit_block(e, CS_EMIT_SEND, peer, sent[0]);
            cs_emit_block(e, CS_EMIT_SEND, peer, sent[1]);
        }
        cs_emit_block(e, CS_EMIT_RECV, peer, got[0]);
        cs_emit_block(e, CS_EMIT_RECV, peer, got[1]);
        if (!first) {
            cs_emit_block(e, CS_EMIT_SEND, peer, sent[0]);
            cs_emit_block(e, CS_EMIT_SEND, peer, sent[1]);
        }
    }
}

/* Every block except `skip`, in origin order (the broadcasts' "everything it lacks"). */
static void all_but(cs_emitter *e, int kind, uint64_t peer, uint64_t p, uint64_t lo, uint64_t hi)
{
    for (uint64_t o = 0; o < p; o++)
        if (o < lo || o >= hi) cs_emit_block(e, kind, peer, o);
}

/* lnbc.py: rank i sends its block to 0 in step i - 1; then in round k (step P - 1 + k)
 * every rank r < 2^k sends r + 2^k every block but that rank's own. */
static void lnbc(cs_emitter *e, uint64_t p, uint64_t x)
{
    if (x == 0)
        for (uint64_t i = 1; i < p; i++) cs_emit_block(e, CS_EMIT_RECV, i, i);
    else
        cs_emit_block(e, CS_EMIT_SEND, 0, x);
    for (uint64_t mask = 1; mask < p; mask *= 2) {
        if (x >= mask && x < 2 * mask) all_but(e, CS_EMIT_RECV, x - mask, p, x, x + 1);
        if (x < mask && x + mask < p) all_but(e, CS_EMIT_SEND, x + mask, p, x + mask, x + mask + 1);
    }
}

/* magpie.py's binomial_bcast on one site of ranks 0 .. P-1: masks from the largest power
 * of two below P down to 1; a rank receives from x - lowbit(x) in the round of its lowest
 * bit and then sends to x + mask for every smaller mask. Each member is sent every block
 * outside [child, child + held(child)), the range it already holds. */
static void binomial_bcast(cs_emitter *e, uint64_t p, uint64_t x, int gathered)
{
    uint64_t top = 1;
    while (top * 2 < p) top *= 2;
    for (uint64_t mask = top; p > 1 && mask >= 1; mask /= 2) {
        if (x != 0 && lowbit(x) == mask) {
            uint64_t hi = gathered ? (x + mask < p ? x + mask : p) : x + 1;
            all_but(e, CS_EMIT_RECV, x - mask, p, x, hi);
        }
        if ((x == 0 || lowbit(x) > mask) && x + mask < p) {
            uint64_t c = x + mask, hi = gathered ? (c + mask < p ? c + mask : p) : c + 1;
            all_but(e, CS_EMIT_SEND, c, p, c, hi);
        }
    }
}

/* magpie.py on one site (the default topology): linear gather to rank 0 (rank i in step
 * i - 1), then the binomial broadcast of everything but each member's own block. */
static void magpie(cs_emitter *e, uint64_t p, uint64_t x)
{
    if (x == 0)
        for (uint64_t i = 1; i < p; i++) cs_emit_block(e, CS_EMIT_RECV, i, i);
    else
        cs_emit_block(e, CS_EMIT_SEND, 0, x);
    binomial_bcast(e, p, x, 0);
}

/* mpichg2.py on one site: binomial gather (in round k the member i with lowest bit 2^k
 * sends blocks i .. i+2^k-1 to i - 2^k), then the binomial broadcast of what each member
 * lacks (all but its gather subtree's blocks). */
static void mpichg2(cs_emitter *e, uint64_t p, uint64_t x)
{
    for (uint64_t half = 1; half < p; half *= 2) {
        if ((x == 0 || lowbit(x) > half) && x + half < p) {
            uint64_t hi = x + 2 * half < p ? x + 2 * half : p;
            for (uint64_t o = x + half; o < hi; o++) cs_emit_block(e, CS_EMIT_RECV, x + half, o);
        }
        if (x != 0 && lowbit(x) == half) {
            uint64_t hi = x + half < p ? x + half : p;
            for (uint64_t o = x; o < hi; o++) cs_emit_block(e, CS_EMIT_SEND, x - half, o);
        }
    }
    binomial_bcast(e, p, x, 1);
}

int cs_compact_fail(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return CS_COMPACT_EDESC;
}

/* The description's checks, each with the line the compiler would give. */
static int check(const cs_compact_desc *d, uint32_t rank, char *err, size_t errlen)
{
    if (d->algorithm < CS_COMPACT_RING || d->algorithm > CS_COMPACT_LAST_CODE)
        return cs_compact_fail(err, errlen, "compact description: algorithm: expected a code "
                               "1..%u, found %u", CS_COMPACT_LAST_CODE, d->algorithm);
    int tail = d->algorithm > CS_COMPACT_LAST_REGULAR;
    if (d->version != (tail ? CS_COMPACT_VERSION_TAIL : CS_COMPACT_VERSION))
        return cs_compact_fail(err, errlen, "compact description: version: expected %u for "
                               "algorithm code %u, found %u",
                               tail ? CS_COMPACT_VERSION_TAIL : CS_COMPACT_VERSION, d->algorithm,
                               d->version);
    if (d->nranks < 1 || d->nranks > CS_COMPACT_MAX_RANKS)
        return cs_compact_fail(err, errlen, "compact description: nranks: expected 1..%u, found %u",
                    CS_COMPACT_MAX_RANKS, d->nranks);
    if (d->nseg < 1 || d->nseg > CS_COMPACT_MAX_SEGMENTS)
        return cs_compact_fail(err, errlen, "compact description: nseg: expected 1..%u, found %u",
                    CS_COMPACT_MAX_SEGMENTS, d->nseg);
    /* The regular algorithms serve either duplex; the tailed ones full duplex only. */
    if (tail ? d->flags != CS_COMPACT_FULL_DUPLEX : (d->flags & ~CS_COMPACT_FULL_DUPLEX) != 0)
        return cs_compact_fail(err, errlen, "compact description: flags: expected %s, found %#x",
                               tail ? "0x1 (full duplex; half duplex has no compact form for this "
                               "algorithm yet)" : "0 (half duplex) or 0x1 (full duplex)", d->flags);
    if (d->bytes_min > d->bytes_max)
        return cs_compact_fail(err, errlen, "compact description: bytes_min: expected <= bytes_max, found "
                    "%llu > %llu", (unsigned long long)d->bytes_min, (unsigned long long)d->bytes_max);
    if (d->algorithm == CS_COMPACT_RD && (d->nranks & (d->nranks - 1)))
        return cs_compact_fail(err, errlen, "compact description: algorithm: recursive doubling needs a "
                    "power-of-two rank count, got %u", d->nranks);
    if (d->algorithm == CS_COMPACT_NEX && d->nranks % 2)
        return cs_compact_fail(err, errlen, "compact description: algorithm: neighbor exchange needs an "
                    "even rank count, got %u (use ring)", d->nranks);
    if (!tail && d->tail_len != 0)
        return cs_compact_fail(err, errlen, "compact description: tail: expected none for "
                               "algorithm code %u, found %u bytes", d->algorithm, d->tail_len);
    if (d->algorithm == CS_COMPACT_HIER) {
        int rc = cs_compact_hier_check(d, err, errlen);
        if (rc) return rc;
    } else if (d->algorithm == CS_COMPACT_BDR || d->algorithm == CS_COMPACT_BSLB) {
        int rc = cs_compact_bdr_check(d, err, errlen);
        if (rc) return rc;
    }
    if (rank >= d->nranks)
        return cs_compact_fail(err, errlen, "compact description: rank: expected below %u, found %u",
                    d->nranks, rank);
    return CS_COMPACT_OK;
}

int cs_compact_generate(const cs_compact_desc *d, uint32_t rank, cs_compact_op *out,
                        uint64_t capacity, uint64_t *nops, char *err, size_t errlen)
{
    *nops = 0;
    int rc = check(d, rank, err, errlen);
    if (rc) return rc;
    cs_emitter e = { out, out ? capacity : 0, 0, d->nseg, d->bytes_max / d->nseg,
                  d->bytes_max % d->nseg, d->fifo_min_piece };
    uint64_t p = d->nranks, x = rank;
    int half = !(d->flags & CS_COMPACT_FULL_DUPLEX);
    switch (d->algorithm) {
    case CS_COMPACT_RING: ring(&e, p, x, half); break;
    case CS_COMPACT_BRUCK: bruck(&e, p, x, half); break;
    case CS_COMPACT_RD: rd(&e, p, x, half); break;
    case CS_COMPACT_SPREADING: spreading(&e, p, x, half); break;
    case CS_COMPACT_NEX: nex(&e, p, x, half); break;
    case CS_COMPACT_LNBC: lnbc(&e, p, x); break;
    case CS_COMPACT_MAGPIE: magpie(&e, p, x); break;
    case CS_COMPACT_MPICHG2: mpichg2(&e, p, x); break;
    case CS_COMPACT_HIER: cs_compact_hier_generate(&e, d, x); break;
    default: cs_compact_bdr_generate(&e, d, x); break;
    }
    *nops = e.n;
    if (e.n > UINT32_MAX)
        return cs_compact_fail(err, errlen, "compact description: rank %u: %llu operations, expected at "
                    "most %u (the schedule format's per-rank count)", rank,
                    (unsigned long long)e.n, UINT32_MAX);
    return e.n > e.cap ? CS_COMPACT_ECAPACITY : CS_COMPACT_OK;
}

uint64_t cs_compact_le(const uint8_t *b, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | b[i];
    return v;
}

int cs_compact_decode(const void *buf, size_t len, cs_compact_desc *d, char *err, size_t errlen)
{
    const uint8_t *b = buf;
    memset(d, 0, sizeof *d);
    if (len < CS_COMPACT_DESC_BYTES || len > CS_COMPACT_MAX_DESC_BYTES)
        return cs_compact_fail(err, errlen, "compact description: size: expected %u bytes (version "
                               "1) or %u .. %u (version 2), found %zu", CS_COMPACT_DESC_BYTES,
                               CS_COMPACT_DESC_BYTES + 4, CS_COMPACT_MAX_DESC_BYTES, len);
    if (memcmp(b, "CSCOMPCT", 8) != 0)
        return cs_compact_fail(err, errlen, "compact description: magic: expected 'CSCOMPCT': not a "
                    "compact description");
    d->version = (uint32_t)cs_compact_le(b + 8, 2);
    d->algorithm = (uint32_t)cs_compact_le(b + 10, 2);
    uint64_t size = cs_compact_le(b + 48, 4);
    int tailed = d->algorithm > CS_COMPACT_LAST_REGULAR && d->algorithm <= CS_COMPACT_LAST_CODE;
    if (d->version == CS_COMPACT_VERSION_TAIL && tailed) {
        /* The head says how long the record is; a CRC-32 of all before it ends it. */
        if (size != len || len < CS_COMPACT_DESC_BYTES + 4 || cs_compact_le(b + 52, 4) != 0)
            return cs_compact_fail(err, errlen, "compact description: desc_bytes: expected the "
                                   "record's length %zu and a zero reserved word, found %llu",
                                   len, (unsigned long long)size);
        uint32_t want = (uint32_t)cs_compact_le(b + len - 4, 4);
#ifndef COLLSCHED_FUZZING /* the fuzz build reaches the tail checks behind the CRC (make fuzz) */
        if (cs_crc32(0, b, len - 4) != want)
            return cs_compact_fail(err, errlen, "compact description: crc32: the record is "
                                   "corrupt (its CRC-32 does not match)");
#else
        (void)want;
#endif
        d->tail = b + CS_COMPACT_DESC_BYTES;
        d->tail_len = (uint32_t)(len - CS_COMPACT_DESC_BYTES - 4);
    } else if (d->version == CS_COMPACT_VERSION && !tailed &&
               (len != CS_COMPACT_DESC_BYTES || size != CS_COMPACT_DESC_BYTES ||
                cs_compact_le(b + 52, 4) != 0)) {
        return cs_compact_fail(err, errlen, "compact description: desc_bytes: expected %u and a "
                               "zero reserved word", CS_COMPACT_DESC_BYTES);
    }
    /* any other version/algorithm pairing: check() names the version expected */
    d->nranks = (uint32_t)cs_compact_le(b + 12, 4);
    d->nseg = (uint32_t)cs_compact_le(b + 16, 4);
    d->flags = (uint32_t)cs_compact_le(b + 20, 4);
    d->bytes_min = cs_compact_le(b + 24, 8);
    d->bytes_max = cs_compact_le(b + 32, 8);
    d->fifo_min_piece = cs_compact_le(b + 40, 8);
    return check(d, 0, err, errlen);
}

int64_t cs_compact_ops(const uint8_t *desc, int64_t desc_len, int64_t rank, int64_t capacity,
                       uint8_t *ops, int64_t *nops, uint8_t *err, int64_t errlen)
{
    cs_compact_desc d;
    char *msg = (char *)err;
    size_t room = errlen > 0 ? (size_t)errlen : 0;
    nops[0] = 0;
    if (desc_len < 0 || capacity < 0)
        return cs_compact_fail(msg, room, "compact description: expected non-negative lengths");
    int rc = cs_compact_decode(desc, (size_t)desc_len, &d, msg, room);
    if (rc) return rc;
    if (rank < 0 || rank >= (int64_t)d.nranks)
        return cs_compact_fail(msg, room, "compact description: rank: expected 0..%u, found %lld",
                    d.nranks - 1, (long long)rank);
    uint64_t n = 0;
    /* cs_compact_op is the 12-byte file op: no padding (checked below at compile time). */
    rc = cs_compact_generate(&d, (uint32_t)rank, (cs_compact_op *)(void *)ops,
                             (uint64_t)capacity, &n, msg, room);
    nops[0] = (int64_t)n;
    return rc;
}

_Static_assert(sizeof(cs_compact_op) == 12, "cs_compact_op is the 12-byte file op");
