/* executor.c - run one rank's operation list with nonblocking point-to-point calls.
 *
 * Semantics (docs/semantics.md): dataflow with in-order issue. The walk goes through the
 * list once: a receive is posted at once, straight into the piece's final place in the
 * receive buffer; a send first waits for exactly the receive that delivers its piece (if
 * it is a forwarded one) and for the previous send to the same peer (FIFO per link); then
 * everything is completed. (Posting all receives up front was measured
 * too: no faster at small sizes and a few percent slower at large ones.)
 *
 * The rank's own pieces are sent straight from the user's send buffer when it is
 * contiguous, and the own block is copied into the receive buffer after the walk, while
 * the messages are in flight: the copy is off the critical path (from 512 KiB on it goes
 * first instead: a big copy slows the transfers it overlaps). Serial schedules send one
 * message and receive one at a time, the sends and the receives each in list order but
 * neither waiting for the other (run_serial; docs/semantics.md). No buffer proportional to the
 * message is allocated here.
 *
 * The executor may also take over operations someone else started before the call
 * (cs_started: say receives posted while the rank still computed, before its receive
 * buffer was known), with their requests and the places their pieces landed instead of
 * the receive buffer; it copies those into place. Who started them it does not know.
 */
#include "runtime.h"

#include <string.h>

#define CS_OWN_COPY_FIRST_BYTES (512u << 10)

/* Address and size of piece (origin, segment): in the receive buffer, or for an own
 * piece with own_src set, in the send buffer. */
static char *piece_at(const cs_layout *lay, uint32_t nseg, const collsched_op *op, int *len)
{
    int64_t base; /* displacements may be negative (allgatherv) */
    uint64_t c;
    if (lay->counts) {
        base = (int64_t)lay->displs[op->origin] * (int64_t)lay->extent;
        c = (uint64_t)lay->counts[op->origin] * lay->extent;
    } else {
        base = (int64_t)((uint64_t)op->origin * lay->block);
        c = lay->block;
    }
    uint64_t lo = 0, hi = c;
    if (nseg > 1) {
        lo = cs_seg_lo(op->segment, c, nseg);
        hi = cs_seg_lo(op->segment + 1u, c, nseg);
    }
    *len = (int)(hi - lo); /* the caller made sure a piece fits an int */
    if (!*len) return lay->base; /* no arithmetic on a possibly NULL buffer */
    if (lay->own_src && op->origin == lay->rank) return (char *)lay->own_src + lo;
    return lay->base + base + (int64_t)lo;
}

/* After a failure: withdraw what can be withdrawn, then complete everything, so no
 * request outlives the call. */
static void drain(MPI_Request *reqs, uint32_t n, const collsched_op *ops)
{
    for (uint32_t i = 0; i < n; i++)
        if (reqs[i] != MPI_REQUEST_NULL && ops[i].kind == COLLSCHED_RECV) PMPI_Cancel(&reqs[i]);
    PMPI_Waitall((int)n, reqs, MPI_STATUSES_IGNORE);
}

/* One call of the executor: the schedule, where its pieces go, what was started. */
typedef struct run {
    const collsched_schedule *s;
    MPI_Comm comm;
    const cs_layout *lay;
    MPI_Request *reqs;
    const cs_started *st;
    cs_trace *tr;
} run;

/* A piece that landed elsewhere goes to its place (once it has arrived). */
static void unhold(const run *r, int32_t i)
{
    const cs_started *st = r->st;
    if (i < 0 || (uint32_t)i >= st->nops || !st->held || !st->held[i]) return;
    int len;
    char *dst = piece_at(r->lay, r->s->hdr.nseg, &r->s->ops[i], &len);
    if (len) memcpy(dst, st->held[i], (size_t)len);
    st->held[i] = NULL;
}

static int issue(const run *r, uint32_t i)
{
    const collsched_op *op = &r->s->ops[i];
    MPI_Request *reqs = r->reqs;
    int len;
    char *buf = piece_at(r->lay, r->s->hdr.nseg, op, &len);
    if (op->kind == COLLSCHED_RECV)
        return PMPI_Irecv(buf, len, MPI_BYTE, (int)op->peer, CS_TAG, r->comm, &reqs[i]);
    /* The walk's two waits: a forwarded piece must have arrived, and the previous message
     * to the same peer must be complete (FIFO per link: messages to one peer never share
     * the link, so the first one, which the peer may have to forward, is not slowed). */
    if (op->dep >= 0 && reqs[op->dep] != MPI_REQUEST_NULL) {
        int rc = PMPI_Wait(&reqs[op->dep], MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return rc;
        cs_trace_done(r->tr, (uint32_t)op->dep);
    }
    unhold(r, op->dep);
    if (op->prev >= 0 && reqs[op->prev] != MPI_REQUEST_NULL) {
        int rc = PMPI_Wait(&reqs[op->prev], MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return rc;
        cs_trace_done(r->tr, (uint32_t)op->prev);
    }
    /* A FIFO send is synchronous: it completes once the peer has matched it, whatever its
     * size (an eager Isend would complete at once and the next one would share the link). */
    if (op->fifo)
        return PMPI_Issend(buf, len, MPI_BYTE, (int)op->peer, CS_TAG, r->comm, &reqs[i]);
    return PMPI_Isend(buf, len, MPI_BYTE, (int)op->peer, CS_TAG, r->comm, &reqs[i]);
}

/* Serial execution (docs/semantics.md): one synchronous send and one receive in flight
 * at a time, sends in list order and receives in list order, the two chains independent
 * of each other, as the BDR paper's single port and the cost model have it. A send
 * also waits for the receive that delivers its piece. (A walk that blocked on the
 * previous receive before posting the next held back the sends listed after it: BDR's
 * early ranks, whose pre-step sends interleave with receives, started the ring 1.6 ms
 * late at P = 48, 10,922 bytes per rank, maxDelay 5 ms under SMPI.) The receive chain
 * and the send chain go on from where the operations started before the call left them:
 * their receive and their send in flight, if any, are the current ones. */
static uint32_t next_of(const collsched_schedule *s, uint32_t i, uint8_t kind)
{
    while (i < s->nops && s->ops[i].kind != kind) i++;
    return i;
}

/* Posts receive i; one whose piece would have landed elsewhere (a started op's) goes
 * straight to its place now: the receive buffer is known. */
static int post_recv(const run *r, uint32_t i)
{
    if (i < r->st->nops && r->st->held) r->st->held[i] = NULL;
    int rc = issue(r, i);
    cs_trace_issued(r->tr, i);
    return rc;
}

static int run_serial(const run *r, int copy_own)
{
    const collsched_schedule *s = r->s;
    const cs_layout *lay = r->lay;
    MPI_Request *reqs = r->reqs;
    uint32_t n = s->nops;
    uint32_t ns = next_of(s, r->st->sends, COLLSCHED_SEND), nr = next_of(s, r->st->recvs, COLLSCHED_RECV);
    int32_t cur[2] = { -1, -1 }; /* the send and the receive in flight (maybe started before) */
    for (uint32_t i = 0; i < r->st->recvs; i++)
        if (s->ops[i].kind == COLLSCHED_RECV && reqs[i] != MPI_REQUEST_NULL) cur[1] = (int32_t)i;
    for (uint32_t i = 0; i < r->st->sends; i++)
        if (s->ops[i].kind == COLLSCHED_SEND && reqs[i] != MPI_REQUEST_NULL) cur[0] = (int32_t)i;
    int rc = MPI_SUCCESS;
    while (rc == MPI_SUCCESS) {
        int moved = 0;
        if (cur[1] < 0 && nr < n) {
            rc = post_recv(r, nr);
            cur[1] = (int32_t)nr;
            nr = next_of(s, nr + 1, COLLSCHED_RECV);
            moved = 1;
        }
        if (rc == MPI_SUCCESS && cur[0] < 0 && ns < n) {
            /* Receives complete in list order: every posted one but the current has. */
            int32_t dep = s->ops[ns].dep;
            if (dep < 0 || ((uint32_t)dep < nr && dep != cur[1])) {
                const collsched_op *op = &s->ops[ns];
                int len;
                unhold(r, dep);
                char *buf = piece_at(lay, s->hdr.nseg, op, &len);
                rc = PMPI_Issend(buf, len, MPI_BYTE, (int)op->peer, CS_TAG, r->comm, &reqs[ns]);
                cs_trace_issued(r->tr, ns);
                cur[0] = (int32_t)ns;
                ns = next_of(s, ns + 1, COLLSCHED_SEND);
                moved = 1;
            }
        }
        if (copy_own) { /* overlaps the first transfers */
            memcpy(lay->own_dst, lay->own_src, (size_t)lay->own_bytes);
            copy_own = 0;
        }
        if (rc != MPI_SUCCESS || moved) continue;
        if (cur[0] < 0 && cur[1] < 0) break; /* ns == nr == n: a waiting send has its receive done */
        MPI_Request w[2] = { cur[0] >= 0 ? reqs[cur[0]] : MPI_REQUEST_NULL,
                             cur[1] >= 0 ? reqs[cur[1]] : MPI_REQUEST_NULL };
        int k = MPI_UNDEFINED;
        rc = PMPI_Waitany(2, w, &k, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS || k == MPI_UNDEFINED) break;
        reqs[cur[k]] = MPI_REQUEST_NULL; /* Waitany freed it through the copy */
        cs_trace_done(r->tr, (uint32_t)cur[k]);
        cur[k] = -1;
    }
    return rc;
}

/* Dataflow execution: the walk in list order (the file's header comment). */
static int run_dataflow(const run *r, int copy_own)
{
    const collsched_schedule *s = r->s;
    int rc = MPI_SUCCESS;
    for (uint32_t i = 0; i < s->nops && rc == MPI_SUCCESS; i++) {
        if (s->ops[i].kind == COLLSCHED_RECV) {
            if (i >= r->st->recvs) rc = post_recv(r, i); /* else started before */
            continue;
        }
        if (i < r->st->sends) continue; /* started before */
        rc = issue(r, i);
        cs_trace_issued(r->tr, i);
    }
    if (copy_own && rc == MPI_SUCCESS)
        memcpy(r->lay->own_dst, r->lay->own_src, (size_t)r->lay->own_bytes); /* overlaps the transfers */
    return rc;
}

int cs_execute(const collsched_schedule *s, MPI_Comm comm, const cs_layout *lay,
               MPI_Request *reqs, const cs_started *started)
{
    static const cs_started none = { 0, 0, 0, NULL };
    run r = { s, comm, lay, reqs, started ? started : &none, cs_trace_begin(s->nops) };
    int rc = MPI_SUCCESS;
    /* Requests of the started ops are their starter's (NULL: not started, or complete). */
    for (uint32_t i = r.st->nops; i < s->nops; i++) reqs[i] = MPI_REQUEST_NULL;
    /* A large own block is copied before the walk: copied while the first transfers run,
     * it competed with them for memory bandwidth (ring, P = 8, shared memory, 1 MiB: our
     * time / Open MPI's ring 1.07-1.11 with the copy overlapped, 1.05-1.07 before; below
     * 256 KiB the overlap helps or is noise). */
    int copy_first = lay->own_src && lay->own_bytes >= CS_OWN_COPY_FIRST_BYTES;
    if (copy_first) memcpy(lay->own_dst, lay->own_src, (size_t)lay->own_bytes);
    int copy_later = !copy_first && lay->own_src && lay->own_bytes;
    rc = (s->hdr.flags & COLLSCHED_FLAG_SERIAL) ? run_serial(&r, copy_later)
                                                : run_dataflow(&r, copy_later);
    int walked = rc == MPI_SUCCESS;
    if (walked && r.tr) rc = cs_trace_complete(r.tr, reqs, s->nops);
    cs_trace_end(r.tr, s, lay->rank, walked);
    if (rc == MPI_SUCCESS) rc = PMPI_Waitall((int)s->nops, reqs, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) drain(reqs, s->nops, s->ops);
    for (uint32_t i = 0; rc == MPI_SUCCESS && i < r.st->nops; i++) unhold(&r, (int32_t)i);
    return rc;
}
