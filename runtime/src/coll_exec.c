/* coll_exec.c - execute one rank's section of an alltoall, bcast, reduce or allreduce
 * schedule (file format 1.2) under the rules of docs/semantics.md, "Collectives beyond
 * allgather":
 *   1. a receive is posted when the walk reaches it: alltoall and bcast pieces straight
 *      into their places (a message over several places: an hindexed type of bytes),
 *      reduction pieces into a staging region of their own (the datatype's layout);
 *   2. settling a receive = waiting for it, then applying it: nothing more for alltoall
 *      and bcast; for reductions, per piece in list order, the accumulator's segment is
 *      overwritten (RECV) or combined (RECV_REDUCE: MPI_Reduce_local(in, acc), or with
 *      LOCAL_FIRST acc (op) in, computed in the staging region and copied back), after
 *      every earlier receive of those pieces is settled and every earlier send that reads
 *      them has completed;
 *   3. a send waits for the settling of the earlier receives of its pieces, and sends
 *      their current values as one message (FIFO: synchronous, after the previous send
 *      to that peer completed; CHAIN: after the previous send of the list completed);
 *   4. FENCE: every earlier receive settled first;
 *   6. at the end every receive is settled in list order and every send completed.
 * Units: bytes (alltoall: of one block; bcast: of the buffer) or elements of the call's
 * datatype (reductions). Alltoall pieces a rank relays live in scratch slots assigned at
 * load (cs_coll_plan_build). The plan is computed once per file and rank and keeps the
 * scratch and staging memory from call to call.
 */
#include "coll_exec.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

struct cs_coll_plan {
    const cs_coll_section *sec;
    uint32_t *pid;             /* per piece occurrence: its distinct piece */
    uint32_t ndistinct;
    cs_coll_piece *distinct;
    int32_t *slot;             /* alltoall: scratch slot of a relayed distinct piece, else -1 */
    uint32_t nrelay;
    uint32_t *dep_at, *deps;   /* CSR (nops + 1): receives to settle before issuing / applying */
    uint32_t *wait_at, *waits; /* CSR (nops + 1): sends to complete before applying a receive */
    int32_t *prev;             /* sends: the previous send to the same peer, else -1 */
    uint32_t max_pieces;
    char *cache;               /* relay slots and staging, kept from call to call (grow only: */
    size_t cache_cap;          /* no page faults on every call of a large reduction) */
};

/* ---- the plan ---- */

typedef struct vec {
    uint32_t *v;
    size_t n, cap;
    int bad;
} vec;

static void push(vec *a, uint32_t x)
{
    if (a->bad) return;
    if (a->n == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 64;
        uint32_t *w = realloc(a->v, cap * sizeof *w);
        if (!w) { a->bad = 1; return; }
        a->v = w;
        a->cap = cap;
    }
    a->v[a->n++] = x;
}

static uint64_t piece_hash(const cs_coll_piece *p)
{
    uint64_t h = ((uint64_t)p->src * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)p->dst * 0xC2B2AE3D27D4EB4Full)
                 ^ ((uint64_t)p->seg * 0x165667B19E3779F9ull);
    return h ^ (h >> 29);
}

/* Distinct pieces by open addressing: pid[k] for every occurrence k. */
static int number_pieces(cs_coll_plan *p)
{
    const cs_coll_section *s = p->sec;
    uint64_t cap = 16;
    while (cap < 2 * s->npieces) cap *= 2;
    int64_t *table = malloc(cap * sizeof *table);
    p->pid = malloc((s->npieces ? s->npieces : 1) * sizeof *p->pid);
    p->distinct = malloc((s->npieces ? s->npieces : 1) * sizeof *p->distinct);
    if (!table || !p->pid || !p->distinct) { free(table); return -1; }
    for (uint64_t i = 0; i < cap; i++) table[i] = -1;
    for (uint64_t k = 0; k < s->npieces; k++) {
        const cs_coll_piece *x = &s->pieces[k];
        uint64_t h = piece_hash(x) & (cap - 1);
        while (table[h] >= 0) {
            const cs_coll_piece *y = &p->distinct[table[h]];
            if (y->src == x->src && y->dst == x->dst && y->seg == x->seg) break;
            h = (h + 1) & (cap - 1);
        }
        if (table[h] < 0) {
            table[h] = p->ndistinct;
            p->distinct[p->ndistinct++] = *x;
        }
        p->pid[k] = (uint32_t)table[h];
    }
    free(table);
    return 0;
}

/* The dependencies of the walk (rules 2-3), one pass in list order. */
static int walk(cs_coll_plan *p)
{
    const cs_coll_section *s = p->sec;
    uint32_t n = s->nops, P = s->hdr.h.nranks, nd = p->ndistinct;
    int32_t *last_recv = malloc((nd ? nd : 1) * sizeof *last_recv);
    int32_t *rhead = malloc((nd ? nd : 1) * sizeof *rhead);     /* sends reading since the last write */
    int32_t *node_op = malloc((s->npieces ? s->npieces : 1) * sizeof *node_op);
    int32_t *node_next = malloc((s->npieces ? s->npieces : 1) * sizeof *node_next);
    uint32_t *seen = calloc(n ? n : 1, sizeof *seen);
    int32_t *last_send = malloc((size_t)P * sizeof *last_send);
    p->dep_at = malloc((n + 1) * sizeof *p->dep_at);
    p->wait_at = malloc((n + 1) * sizeof *p->wait_at);
    p->prev = malloc((n ? n : 1) * sizeof *p->prev);
    vec deps = { 0 }, waits = { 0 };
    int ok = last_recv && rhead && node_op && node_next && seen && last_send && p->dep_at && p->wait_at && p->prev;
    uint64_t nodes = 0;
    for (uint32_t d = 0; ok && d < nd; d++) last_recv[d] = rhead[d] = -1;
    for (uint32_t r = 0; ok && r < P; r++) last_send[r] = -1;
    for (uint32_t i = 0; ok && i < n; i++) {
        const cs_coll_op *op = &s->ops[i];
        p->dep_at[i] = (uint32_t)deps.n;
        p->wait_at[i] = (uint32_t)waits.n;
        p->prev[i] = -1;
        if (op->npieces > p->max_pieces) p->max_pieces = op->npieces;
        for (uint32_t k = 0; k < op->npieces; k++) {
            uint32_t d = p->pid[op->first + k];
            int32_t w = last_recv[d];
            if (w >= 0 && (uint32_t)w != i && seen[w] != i + 1) { seen[w] = i + 1; push(&deps, (uint32_t)w); }
            if (op->kind == CS_COLL_SEND) {
                if (rhead[d] < 0 || node_op[rhead[d]] != (int32_t)i) {
                    node_op[nodes] = (int32_t)i;
                    node_next[nodes] = rhead[d];
                    rhead[d] = (int32_t)nodes++;
                }
            } else {
                for (int32_t x = rhead[d]; x >= 0; x = node_next[x]) {
                    uint32_t snd = (uint32_t)node_op[x];
                    if (seen[snd] != i + 1) { seen[snd] = i + 1; push(&waits, snd); }
                }
                rhead[d] = -1;
            }
        }
        if (op->kind != CS_COLL_SEND)
            for (uint32_t k = 0; k < op->npieces; k++) last_recv[p->pid[op->first + k]] = (int32_t)i;
        if (op->kind == CS_COLL_SEND && op->peer < P) {
            p->prev[i] = last_send[op->peer];
            last_send[op->peer] = (int32_t)i;
        }
    }
    if (ok) {
        p->dep_at[n] = (uint32_t)deps.n;
        p->wait_at[n] = (uint32_t)waits.n;
    }
    p->deps = deps.v;
    p->waits = waits.v;
    free(last_recv);
    free(rhead);
    free(node_op);
    free(node_next);
    free(seen);
    free(last_send);
    return ok && !deps.bad && !waits.bad && deps.n < UINT32_MAX && waits.n < UINT32_MAX ? 0 : -1;
}

/* Alltoall: a distinct piece neither from nor to this rank is relayed: a scratch slot. */
static int relay_slots(cs_coll_plan *p)
{
    const cs_coll_section *s = p->sec;
    p->slot = malloc((p->ndistinct ? p->ndistinct : 1) * sizeof *p->slot);
    if (!p->slot) return -1;
    for (uint32_t d = 0; d < p->ndistinct; d++) {
        const cs_coll_piece *x = &p->distinct[d];
        int relayed = s->hdr.h.collective == CS_COLL_ALLTOALL && x->src != s->rank && x->dst != s->rank;
        p->slot[d] = relayed ? (int32_t)p->nrelay++ : -1;
    }
    return 0;
}

int cs_coll_plan_build(const cs_coll_section *s, cs_coll_plan **out, char *err, size_t len)
{
    cs_coll_plan *p = calloc(1, sizeof *p);
    *out = NULL;
    if (!p) { cs_text(err, len, "memory: cannot allocate the section's plan"); return -1; }
    p->sec = s;
    for (uint32_t i = 0; i < s->nops; i++)
        if (s->ops[i].peer >= s->hdr.h.nranks || s->ops[i].peer == s->rank) {
            cs_text(err, len, "rank %u, op %u: peer: expected another rank below %u, found %u", s->rank, i,
                    s->hdr.h.nranks, s->ops[i].peer);
            cs_coll_plan_free(p);
            return -1;
        }
    if (number_pieces(p) != 0 || walk(p) != 0 || relay_slots(p) != 0) {
        cs_text(err, len, "memory: cannot allocate the plan of %u ops, %llu pieces", s->nops,
                (unsigned long long)s->npieces);
        cs_coll_plan_free(p);
        return -1;
    }
    *out = p;
    return 0;
}

void cs_coll_plan_free(cs_coll_plan *p)
{
    if (!p) return;
    free(p->pid);
    free(p->distinct);
    free(p->slot);
    free(p->dep_at);
    free(p->deps);
    free(p->wait_at);
    free(p->waits);
    free(p->prev);
    free(p->cache);
    free(p);
}

const cs_coll_section *cs_coll_plan_section(const cs_coll_plan *p) { return p->sec; }
uint32_t cs_coll_plan_max_pieces(const cs_coll_plan *p) { return p->max_pieces; }

/* ---- element helpers ---- */

int cs_coll_copy_elems(const cs_coll_buf *b, MPI_Comm comm, int rank, const void *src, void *dst, uint64_t count)
{
    if (count == 0 || src == dst) return MPI_SUCCESS;
    if (b->run) {
        memmove((char *)dst + b->run_off, (const char *)src + b->run_off, (size_t)(count * b->esize));
        return MPI_SUCCESS;
    }
    const uint64_t chunk = (uint64_t)INT_MAX / 2;
    for (uint64_t at = 0; at < count; at += chunk) {
        int c = (int)(count - at < chunk ? count - at : chunk);
        MPI_Aint off = (MPI_Aint)at * b->extent;
        int rc = PMPI_Sendrecv((const char *)src + off, c, b->type, rank, CS_TAG_SELF, (char *)dst + off, c, b->type,
                               rank, CS_TAG_SELF, comm, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return rc;
    }
    return MPI_SUCCESS;
}

static uint64_t span_of(const cs_coll_buf *b, uint64_t count)
{
    if (count == 0) return 0;
    return (count - 1) * (uint64_t)b->extent + (uint64_t)b->true_extent;
}

int cs_coll_alloc_elems(const cs_coll_buf *b, uint64_t count, char **mem, char **buf)
{
    uint64_t span = span_of(b, count);
    *mem = malloc(span ? (size_t)span : 1);
    if (!*mem) return MPI_ERR_NO_MEM;
    *buf = *mem - b->true_lb;
    return MPI_SUCCESS;
}

/* ---- one call ---- */

enum { SETTLED = 1, DIRECT = 2 };

typedef struct xr {
    cs_coll_plan *p;
    const cs_coll_buf *b;
    MPI_Comm comm;
    MPI_Request *reqs;
    int me, reducing;
    uint32_t nseg;
    uint8_t *settled;          /* per op: SETTLED, DIRECT (a RECV posted into its place) */
    uint32_t fenced;           /* receives before this op are settled */
    char *scratch;             /* alltoall relay slots */
    uint64_t slot_bytes;
    char *stage_mem;           /* reductions: every receive's staging region */
    uint64_t *stage_at;
    int *lens;
    MPI_Aint *disps;
    char dummy[16];
} xr;

/* Piece k of op i: its address and units (bytes, or elements of the type). */
static char *piece_place(const xr *x, uint64_t k, uint64_t *units)
{
    const cs_coll_section *s = x->p->sec;
    const cs_coll_piece *pc = &s->pieces[k];
    uint64_t lo = cs_seg_lo(pc->seg, x->b->n, x->nseg), hi = cs_seg_lo(pc->seg + 1u, x->b->n, x->nseg);
    *units = hi - lo;
    if (x->reducing) return x->b->acc + (MPI_Aint)lo * x->b->extent;
    if (s->hdr.h.collective == CS_COLL_BCAST) return x->b->recv + lo;
    if (pc->src == s->rank) return (char *)x->b->send + (uint64_t)pc->dst * x->b->n + lo;
    if (pc->dst == s->rank) return x->b->recv + (uint64_t)pc->src * x->b->n + lo;
    return x->scratch + (uint64_t)x->p->slot[x->p->pid[k]] * x->slot_bytes;
}

/* Op i's message over its pieces' places: one run (*type is the unit type) or an hindexed
 * type over several (*own = 1: the caller frees it once issued). */
static int message(xr *x, uint32_t i, char **buf, int *count, MPI_Datatype *type, int *own)
{
    const cs_coll_op *op = &x->p->sec->ops[i];
    MPI_Datatype unit = x->reducing ? x->b->type : MPI_BYTE;
    MPI_Aint ext = x->reducing ? x->b->extent : 1;
    char *first = NULL, *end = NULL;
    int n = 0;
    *own = 0;
    for (uint32_t k = 0; k < op->npieces; k++) {
        uint64_t units;
        char *at = piece_place(x, op->first + k, &units);
        if (!units) continue;
        if (n && at == end) {
            x->lens[n - 1] += (int)units;
        } else {
            if (!n) first = at;
            x->disps[n] = at - first;
            x->lens[n++] = (int)units;
        }
        end = at + (MPI_Aint)units * ext;
    }
    *type = unit;
    if (n == 0) {
        *buf = x->dummy;
        *count = 0;
        *type = MPI_BYTE;
        return MPI_SUCCESS;
    }
    *buf = first;
    if (n == 1) { *count = x->lens[0]; return MPI_SUCCESS; }
    *count = 1;
    int rc = PMPI_Type_create_hindexed(n, x->lens, x->disps, unit, type);
    if (rc == MPI_SUCCESS) rc = PMPI_Type_commit(type);
    *own = rc == MPI_SUCCESS;
    return rc;
}

/* Elements op i carries (reductions). */
static uint64_t op_units(const xr *x, uint32_t i)
{
    const cs_coll_op *op = &x->p->sec->ops[i];
    uint64_t total = 0;
    for (uint32_t k = 0; k < op->npieces; k++) {
        uint32_t g = x->p->sec->pieces[op->first + k].seg;
        total += cs_seg_lo(g + 1u, x->b->n, x->nseg) - cs_seg_lo(g, x->b->n, x->nseg);
    }
    return total;
}

static int apply(xr *x, uint32_t j)
{
    const cs_coll_op *op = &x->p->sec->ops[j];
    const cs_coll_buf *b = x->b;
    char *in = x->stage_mem + x->stage_at[j] - b->true_lb;
    if (x->settled[j] & DIRECT) return MPI_SUCCESS; /* it landed in place */
    for (uint32_t k = 0; k < op->npieces; k++) {
        uint64_t units;
        char *acc = piece_place(x, op->first + k, &units);
        int rc = MPI_SUCCESS;
        if (!units) continue;
        if (op->kind == CS_COLL_RECV) {
            rc = cs_coll_copy_elems(b, x->comm, x->me, in, acc, units);
        } else if (op->flags & CS_COLL_OP_LOCAL_FIRST) { /* acc = acc (op) in */
            rc = PMPI_Reduce_local(acc, in, (int)units, b->type, b->op);
            if (rc == MPI_SUCCESS) rc = cs_coll_copy_elems(b, x->comm, x->me, in, acc, units);
        } else { /* acc = in (op) acc */
            rc = PMPI_Reduce_local(in, acc, (int)units, b->type, b->op);
        }
        if (rc != MPI_SUCCESS) return rc;
        in += (MPI_Aint)units * b->extent;
    }
    return MPI_SUCCESS;
}

/* Rule 2: the earlier receives of its pieces, the receive itself, the earlier sends
 * reading its pieces, then the reduction's application. */
static int settle(xr *x, uint32_t j)
{
    const cs_coll_plan *p = x->p;
    if (x->settled[j] & SETTLED) return MPI_SUCCESS;
    x->settled[j] |= SETTLED;
    int rc = MPI_SUCCESS;
    for (uint32_t k = p->dep_at[j]; rc == MPI_SUCCESS && k < p->dep_at[j + 1]; k++) rc = settle(x, p->deps[k]);
    if (rc == MPI_SUCCESS) rc = PMPI_Wait(&x->reqs[j], MPI_STATUS_IGNORE);
    if (!x->reducing || rc != MPI_SUCCESS) return rc;
    for (uint32_t k = p->wait_at[j]; rc == MPI_SUCCESS && k < p->wait_at[j + 1]; k++)
        rc = PMPI_Wait(&x->reqs[p->waits[k]], MPI_STATUS_IGNORE);
    return rc == MPI_SUCCESS ? apply(x, j) : rc;
}

/* Rule 4 (and 6): every receive before op `upto` settled, in list order. */
static int settle_before(xr *x, uint32_t upto)
{
    const cs_coll_section *s = x->p->sec;
    int rc = MPI_SUCCESS;
    for (; rc == MPI_SUCCESS && x->fenced < upto; x->fenced++)
        if (s->ops[x->fenced].kind != CS_COLL_SEND) rc = settle(x, x->fenced);
    return rc;
}

/* A reduction's RECV (an overwrite) may land straight in the accumulator when nothing can
 * see the difference: every earlier receive of its pieces is settled and every earlier send
 * reading them has completed (MPI_Test: posting never waits); later operations on those
 * pieces wait for its settling anyway. Saves the staging and the copy (a ring allreduce's
 * whole allgather phase, once its sends are out). */
static int in_place_now(xr *x, uint32_t i)
{
    const cs_coll_plan *p = x->p;
    for (uint32_t k = p->dep_at[i]; k < p->dep_at[i + 1]; k++)
        if (!(x->settled[p->deps[k]] & SETTLED)) return 0;
    for (uint32_t k = p->wait_at[i]; k < p->wait_at[i + 1]; k++) {
        int done = 0;
        if (PMPI_Test(&x->reqs[p->waits[k]], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || !done) return 0;
    }
    return 1;
}

static int issue(xr *x, uint32_t i)
{
    const cs_coll_op *op = &x->p->sec->ops[i];
    const cs_coll_plan *p = x->p;
    int rc = MPI_SUCCESS, count, own;
    char *buf;
    MPI_Datatype type;
    if (op->flags & CS_COLL_OP_FENCE) rc = settle_before(x, i);
    if (op->kind != CS_COLL_SEND) {
        if (rc != MPI_SUCCESS) return rc;
        if (x->reducing && op->kind == CS_COLL_RECV && in_place_now(x, i)) x->settled[i] |= DIRECT;
        if (x->reducing && !(x->settled[i] & DIRECT)) {
            uint64_t units = op_units(x, i);
            buf = units ? x->stage_mem + x->stage_at[i] - x->b->true_lb : x->dummy;
            return PMPI_Irecv(buf, (int)units, units ? x->b->type : MPI_BYTE, (int)op->peer, CS_TAG, x->comm,
                              &x->reqs[i]);
        }
        rc = message(x, i, &buf, &count, &type, &own);
        if (rc == MPI_SUCCESS) rc = PMPI_Irecv(buf, count, type, (int)op->peer, CS_TAG, x->comm, &x->reqs[i]);
        if (own) PMPI_Type_free(&type);
        return rc;
    }
    for (uint32_t k = p->dep_at[i]; rc == MPI_SUCCESS && k < p->dep_at[i + 1]; k++) rc = settle(x, p->deps[k]);
    int fifo = (op->flags & CS_COLL_OP_FIFO) != 0;
    if (rc == MPI_SUCCESS && fifo && p->prev[i] >= 0) rc = PMPI_Wait(&x->reqs[p->prev[i]], MPI_STATUS_IGNORE);
    for (uint32_t k = i; rc == MPI_SUCCESS && (op->flags & CS_COLL_OP_CHAIN) && k-- > 0;)
        if (p->sec->ops[k].kind == CS_COLL_SEND) { /* CHAIN: the previous send of the list completed */
            rc = PMPI_Wait(&x->reqs[k], MPI_STATUS_IGNORE);
            break;
        }
    if (rc == MPI_SUCCESS) rc = message(x, i, &buf, &count, &type, &own);
    if (rc != MPI_SUCCESS) return rc;
    if (fifo) rc = PMPI_Issend(buf, count, type, (int)op->peer, CS_TAG, x->comm, &x->reqs[i]);
    else rc = PMPI_Isend(buf, count, type, (int)op->peer, CS_TAG, x->comm, &x->reqs[i]);
    if (own) PMPI_Type_free(&type); /* MPI keeps it until the message is done */
    return rc;
}

/* Scratch of the call: relay slots (alltoall), staging regions (reductions), 16-aligned,
 * in the plan's cache. */
static int setup(xr *x)
{
    const cs_coll_section *s = x->p->sec;
    uint32_t n = s->nops;
    x->settled = calloc(n ? n : 1, 1);
    x->lens = malloc((x->p->max_pieces ? x->p->max_pieces : 1) * sizeof *x->lens);
    x->disps = malloc((x->p->max_pieces ? x->p->max_pieces : 1) * sizeof *x->disps);
    if (x->reducing) x->stage_at = malloc((n ? n : 1) * sizeof *x->stage_at);
    if (!x->settled || !x->lens || !x->disps || (x->reducing && !x->stage_at)) return MPI_ERR_NO_MEM;
    uint64_t total = 0;
    if (x->p->nrelay) {
        x->slot_bytes = x->b->n / x->nseg + 1;
        total = (x->slot_bytes * x->p->nrelay + 15) & ~(uint64_t)15;
    }
    for (uint32_t i = 0; x->reducing && i < n; i++) {
        x->stage_at[i] = total;
        if (s->ops[i].kind != CS_COLL_SEND) total += (span_of(x->b, op_units(x, i)) + 15) & ~(uint64_t)15;
    }
    if (total > SIZE_MAX) return MPI_ERR_NO_MEM;
    if (total > x->p->cache_cap) {
        free(x->p->cache);
        x->p->cache_cap = 0;
        if (!(x->p->cache = malloc((size_t)total))) return MPI_ERR_NO_MEM;
        x->p->cache_cap = (size_t)total;
    }
    x->scratch = x->stage_mem = x->p->cache;
    return MPI_SUCCESS;
}

int cs_coll_execute(cs_coll_plan *p, MPI_Comm comm, const cs_coll_buf *b, MPI_Request *reqs)
{
    const cs_coll_section *s = p->sec;
    uint32_t coll = s->hdr.h.collective;
    xr x;
    memset(&x, 0, sizeof x);
    x.p = p;
    x.b = b;
    x.comm = comm;
    x.reqs = reqs;
    x.me = (int)s->rank;
    x.nseg = s->hdr.h.nseg;
    x.reducing = coll == CS_COLL_REDUCE || coll == CS_COLL_ALLREDUCE;
    for (uint32_t i = 0; i < s->nops; i++) reqs[i] = MPI_REQUEST_NULL;
    int rc = setup(&x);
    for (uint32_t i = 0; rc == MPI_SUCCESS && i < s->nops; i++) rc = issue(&x, i);
    if (rc == MPI_SUCCESS) rc = settle_before(&x, s->nops);
    if (rc == MPI_SUCCESS) rc = PMPI_Waitall((int)s->nops, reqs, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) { /* withdraw what can be, then complete everything */
        for (uint32_t i = 0; i < s->nops; i++)
            if (reqs[i] != MPI_REQUEST_NULL && s->ops[i].kind != CS_COLL_SEND) PMPI_Cancel(&reqs[i]);
        PMPI_Waitall((int)s->nops, reqs, MPI_STATUSES_IGNORE);
    }
    free(x.settled);
    free(x.lens);
    free(x.disps);
    free(x.stage_at);
    return rc;
}
