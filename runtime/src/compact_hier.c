/* compact_hier.c - the compact generator of the hierarchical composition over sites
 * (compiler/collsched/algorithms/hier.py; docs/hier.md).
 *
 * The tail (compiler/collsched/compact/hier.py writes it), little-endian:
 *
 *   0              u32  S, sites (1 .. CS_HIER_MAX_SITES), contiguous rank ranges in rank order
 *   4              u32  E, plan entries (S (S - 1))
 *   8              u32  plan kind (0 direct, 1 relay: informational)
 *   12             u32  reserved, 0
 *   16             u32  size[S], members per site (sum: nranks)
 *   16 + 4S        u64  fifo[S][S], row = sending site: a send of a piece of at least this
 *                       many bytes (at bytes_max) carries the FIFO bit
 *   16 + 4S + 8S^2 E x (u32 step, u32 src site, u32 dst site, u32 origin site), steps
 *                       nondecreasing
 *
 * Rank x of site X (member k of n) walks hier.py's three phases in its list order: the
 * site ring of own blocks, the plan's steps (each step's receives, then its sends, entry
 * by entry, blocks by member index: block i of origin site O goes from member i mod n_W of
 * the sending site to member i mod n_Y of the receiving one), the site ring of the remote
 * blocks each member owns. O(own ops + E + S^2 + n log S) time, no allocation (at most
 * about 20 KiB on the stack: the plan check's bitmap, the sites' first ranks and the
 * remote ring's site index), 64-bit arithmetic. The check trusts no field: every
 * offset read is within the tail once the length matches S and E.
 */
#include "compact_emit.h"

#define CS_HIER_MAX_SITES 256u
#define CS_HIER_HEAD 16u

static uint64_t tail_u32(const cs_compact_desc *d, uint64_t off) { return cs_compact_le(d->tail + off, 4); }

static uint64_t hier_size(const cs_compact_desc *d, uint64_t site) { return tail_u32(d, CS_HIER_HEAD + 4 * site); }

static uint64_t hier_fifo(const cs_compact_desc *d, uint64_t s, uint64_t src, uint64_t dst)
{
    return cs_compact_le(d->tail + CS_HIER_HEAD + 4 * s + 8 * (src * s + dst), 8);
}

/* Field f (0 step, 1 src, 2 dst, 3 origin) of entry i. */
static uint64_t hier_entry(const cs_compact_desc *d, uint64_t s, uint64_t i, int f)
{
    return tail_u32(d, CS_HIER_HEAD + 4 * s + 8 * s * s + 16 * i + 4 * (uint64_t)f);
}

/* site_plan.refusal, field for field: each site receives every other site's blocks exactly
 * once, from a site holding them from an earlier step; steps nondecreasing. */
static int check_plan(const cs_compact_desc *d, uint64_t s, uint64_t ne, char *err, size_t errlen)
{
    uint8_t got[CS_HIER_MAX_SITES * CS_HIER_MAX_SITES / 8] = {0}; /* [site][origin] */
#define GOT(a, b) (got[((a) * s + (b)) / 8] >> (((a) * s + (b)) % 8) & 1u)
#define SET(a, b) (got[((a) * s + (b)) / 8] |= (uint8_t)(1u << (((a) * s + (b)) % 8)))
    if (ne != s * (s - 1))
        return cs_compact_fail(err, errlen, "compact description: tail.entries: expected %llu (every "
                               "site receives every other site's blocks once), found %llu",
                               (unsigned long long)(s * (s - 1)), (unsigned long long)ne);
    for (uint64_t x = 0; x < s; x++) SET(x, x);
    for (uint64_t i = 0; i < ne;) {
        uint64_t j = i, step = hier_entry(d, s, i, 0);
        while (j < ne && hier_entry(d, s, j, 0) == step) j++;
        for (uint64_t k = i; k < j; k++) {
            uint64_t a = hier_entry(d, s, k, 1), b = hier_entry(d, s, k, 2), o = hier_entry(d, s, k, 3);
            if (a >= s || b >= s || o >= s)
                return cs_compact_fail(err, errlen, "compact description: tail.entries[%llu]: expected "
                                       "sites below %llu, found %llu->%llu origin %llu",
                                       (unsigned long long)k, (unsigned long long)s, (unsigned long long)a,
                                       (unsigned long long)b, (unsigned long long)o);
            if (a == b)
                return cs_compact_fail(err, errlen, "compact description: tail.entries[%llu]: expected two "
                                       "different sites, found %llu twice", (unsigned long long)k,
                                       (unsigned long long)a);
            if (!GOT(a, o))
                return cs_compact_fail(err, errlen, "compact description: tail.entries[%llu]: expected site "
                                       "%llu to hold origin site %llu's blocks before step %llu",
                                       (unsigned long long)k, (unsigned long long)a,
                                       (unsigned long long)o, (unsigned long long)step);
        }
        for (uint64_t k = i; k < j; k++) {
            uint64_t b = hier_entry(d, s, k, 2), o = hier_entry(d, s, k, 3);
            if (GOT(b, o))
                return cs_compact_fail(err, errlen, "compact description: tail.entries[%llu]: expected site "
                                       "%llu to receive origin site %llu's blocks once",
                                       (unsigned long long)k, (unsigned long long)b, (unsigned long long)o);
            SET(b, o);
        }
        if (j < ne && hier_entry(d, s, j, 0) < step)
            return cs_compact_fail(err, errlen, "compact description: tail.entries[%llu].step: expected "
                                   "nondecreasing steps, found %llu after %llu", (unsigned long long)j,
                                   (unsigned long long)hier_entry(d, s, j, 0), (unsigned long long)step);
        i = j;
    }
#undef GOT
#undef SET
    return CS_COMPACT_OK;
}

int cs_compact_hier_check(const cs_compact_desc *d, char *err, size_t errlen)
{
    if (d->tail == NULL || d->tail_len < CS_HIER_HEAD)
        return cs_compact_fail(err, errlen, "compact description: tail: expected at least %u bytes "
                               "(the hier tail's header), found %u", CS_HIER_HEAD, d->tail_len);
    uint64_t s = tail_u32(d, 0), ne = tail_u32(d, 4), kind = tail_u32(d, 8), reserved = tail_u32(d, 12);
    if (s < 1 || s > CS_HIER_MAX_SITES)
        return cs_compact_fail(err, errlen, "compact description: tail.nsites: expected 1..%u, found %llu",
                               CS_HIER_MAX_SITES, (unsigned long long)s);
    uint64_t want = CS_HIER_HEAD + 4 * s + 8 * s * s + 16 * ne; /* ne < 2^32: no overflow */
    if (d->tail_len != want)
        return cs_compact_fail(err, errlen, "compact description: tail: expected %llu bytes for %llu "
                               "sites and %llu entries, found %u", (unsigned long long)want,
                               (unsigned long long)s, (unsigned long long)ne, d->tail_len);
    if (reserved != 0)
        return cs_compact_fail(err, errlen, "compact description: tail.reserved: expected 0, found %llu",
                               (unsigned long long)reserved);
    if (kind > 1)
        return cs_compact_fail(err, errlen, "compact description: tail.plan: expected 0 (direct) or 1 "
                               "(relay), found %llu", (unsigned long long)kind);
    if (d->fifo_min_piece != CS_COMPACT_NO_FIFO)
        return cs_compact_fail(err, errlen, "compact description: fifo_min_piece: expected 2^64-1 for "
                               "hier (its thresholds are per site pair, in the tail), found %llu",
                               (unsigned long long)d->fifo_min_piece);
    uint64_t sum = 0;
    for (uint64_t x = 0; x < s; x++) {
        if (hier_size(d, x) == 0)
            return cs_compact_fail(err, errlen, "compact description: tail.sizes[%llu]: expected at "
                                   "least 1 member, found 0", (unsigned long long)x);
        sum += hier_size(d, x);
    }
    if (sum != d->nranks)
        return cs_compact_fail(err, errlen, "compact description: tail.sizes: expected members summing "
                               "to nranks %u, found %llu", d->nranks, (unsigned long long)sum);
    return check_plan(d, s, ne, err, errlen);
}

/* The other sites with more than j members, for R_j in O(1 + its sites): rank[r] lists
 * the sites by size (largest first, then by index), bits[r] is the set of the r largest
 * as a bitmap, whose set bits are walked in site order. Built once per rank in O(S^2). */
typedef struct hier_remote {
    uint64_t nrank, size[CS_HIER_MAX_SITES];                      /* sizes, largest first */
    uint64_t bits[CS_HIER_MAX_SITES + 1][CS_HIER_MAX_SITES / 64]; /* the r largest */
} hier_remote;

static void remote_index(hier_remote *h, const cs_compact_desc *d, uint64_t s, uint64_t site)
{
    uint64_t order[CS_HIER_MAX_SITES], n = 0;
    for (uint64_t y = 0; y < s; y++) {
        if (y == site) continue;
        uint64_t i = n++; /* insertion by (size descending, index ascending) */
        while (i > 0 && hier_size(d, order[i - 1]) < hier_size(d, y)) {
            order[i] = order[i - 1];
            i--;
        }
        order[i] = y;
    }
    h->nrank = n;
    for (uint64_t w = 0; w < CS_HIER_MAX_SITES / 64; w++) h->bits[0][w] = 0;
    for (uint64_t r = 0; r < n; r++) {
        h->size[r] = hier_size(d, order[r]);
        for (uint64_t w = 0; w < CS_HIER_MAX_SITES / 64; w++) h->bits[r + 1][w] = h->bits[r][w];
        h->bits[r + 1][order[r] / 64] |= (uint64_t)1 << (order[r] % 64);
    }
}

/* R_j of a site of n members: the blocks of the other sites whose member index is j mod
 * n, in ascending rank (site by site), as one ring step's sends or receives to/from peer. */
static void remote_owned(cs_emitter *e, const cs_compact_desc *d, const hier_remote *h,
                         const uint64_t *first, uint64_t n, uint64_t j, int kind, uint64_t peer)
{
    uint64_t lo = 0, hi = h->nrank; /* how many sites have more than j members */
    while (lo < hi) {
        uint64_t mid = (lo + hi) / 2;
        if (h->size[mid] > j) lo = mid + 1;
        else hi = mid;
    }
    for (uint64_t w = 0; w < CS_HIER_MAX_SITES / 64; w++) {
        for (uint64_t bits = h->bits[lo][w]; bits; bits &= bits - 1) {
            uint64_t y = w * 64 + (uint64_t)__builtin_ctzll(bits), ny = hier_size(d, y);
            for (uint64_t b = j; b < ny; b += n) cs_emit_block(e, kind, peer, first[y] + b);
        }
    }
}

void cs_compact_hier_generate(cs_emitter *e, const cs_compact_desc *d, uint64_t x)
{
    uint64_t s = tail_u32(d, 0), ne = tail_u32(d, 4), first[CS_HIER_MAX_SITES], site = 0;
    for (uint64_t y = 0, at = 0; y < s; y++) {
        first[y] = at;
        at += hier_size(d, y);
        if (x >= first[y] && x < at) site = y;
    }
    uint64_t fx = first[site], n = hier_size(d, site), k = x - fx;
    uint64_t left = fx + (k + n - 1) % n, right = fx + (k + 1) % n;
    /* Phase 1: in step t member k sends member k - t's block to k + 1. */
    e->fifo_min = hier_fifo(d, s, site, site);
    for (uint64_t t = 0; t + 1 < n; t++) {
        cs_emit_block(e, CS_EMIT_RECV, left, fx + (k + 2 * n - 1 - t) % n);
        cs_emit_block(e, CS_EMIT_SEND, right, fx + (k + n - t) % n);
    }
    /* Phase 2: step by step, the receives of every entry into this site, then the sends of
     * every entry out of it, each the blocks this member owns (index k mod n). */
    for (uint64_t i = 0; i < ne;) {
        uint64_t j = i, step = hier_entry(d, s, i, 0);
        while (j < ne && hier_entry(d, s, j, 0) == step) j++;
        for (uint64_t m = i; m < j; m++) {
            if (hier_entry(d, s, m, 2) != site) continue;
            uint64_t w = hier_entry(d, s, m, 1), o = hier_entry(d, s, m, 3), nw = hier_size(d, w);
            for (uint64_t b = k; b < hier_size(d, o); b += n)
                cs_emit_block(e, CS_EMIT_RECV, first[w] + b % nw, first[o] + b);
        }
        for (uint64_t m = i; m < j; m++) {
            if (hier_entry(d, s, m, 1) != site) continue;
            uint64_t y = hier_entry(d, s, m, 2), o = hier_entry(d, s, m, 3), ny = hier_size(d, y);
            e->fifo_min = hier_fifo(d, s, site, y);
            for (uint64_t b = k; b < hier_size(d, o); b += n)
                cs_emit_block(e, CS_EMIT_SEND, first[y] + b % ny, first[o] + b);
        }
        i = j;
    }
    /* Phase 3: in ring step t member k sends R_{k-t} to k + 1 and receives R_{k-1-t}. */
    if (n < 2) return;
    hier_remote h;
    remote_index(&h, d, s, site);
    e->fifo_min = hier_fifo(d, s, site, site);
    for (uint64_t t = 0; t + 1 < n; t++) {
        remote_owned(e, d, &h, first, n, (k + 2 * n - 1 - t) % n, CS_EMIT_RECV, left);
        remote_owned(e, d, &h, first, n, (k + n - t) % n, CS_EMIT_SEND, right);
    }
}
