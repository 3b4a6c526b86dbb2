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
 *
 * Multi-piece messages (docs/semantics.md; docs/runtime.md, "Multi-piece messages"): a
 * head op and the joined ops after it are one MPI call, whose request sits at the head
 * (the joined ops' stay MPI_REQUEST_NULL). Its buffer is the pieces' places themselves:
 * one run of bytes when they follow each other, else a derived datatype over their
 * addresses (cs_pieces_type, with MPI_BOTTOM): zero copy. The walk meets a message at its
 * head: a send message first waits for every receive message that delivers one of its
 * pieces and, FIFO-marked, for the previous send message to the same peer.
 */
#include "runtime.h"

#include <limits.h>
#include <stdlib.h>
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

/* ---- messages: a head op and the joined ops after it ---- */

/* The message headed by op h ends before the returned op (the first one not joined). */
static uint32_t msg_end(const collsched_schedule *s, uint32_t h)
{
    uint32_t e = h + 1;
    while (e < s->nops && s->ops[e].join) e++;
    return e;
}

/* The head of op i's message (where its request is). *hint: the head found last, or -1:
 * the pieces of a send message often come from one receive message in turn, and are
 * then found without walking back each time. */
static uint32_t msg_head(const collsched_schedule *s, uint32_t i, int32_t *hint)
{
    uint32_t h = i;
    if (*hint >= 0 && (uint32_t)*hint < i) {
        uint32_t k = (uint32_t)*hint + 1;
        while (k <= i && s->ops[k].join) k++;
        if (k > i) h = (uint32_t)*hint; /* i is in the message *hint heads */
    }
    while (h > 0 && s->ops[h].join) h--;
    *hint = (int32_t)h;
    return h;
}

/* What one MPI call moves for the message [h, e): `count` elements of `type` at `buf`.
 * One piece, or pieces that follow each other in memory, are a run of bytes (MPI_BYTE);
 * anything else a committed derived type over the pieces' absolute addresses at
 * MPI_BOTTOM, freed by msg_free once the call is started (MPI keeps what it needs). */
typedef struct msg {
    void *buf;
    int count;
    MPI_Datatype type;
} msg;

#define CS_MSG_STACK 32 /* runs described without an allocation */

static int describe(const run *r, uint32_t h, uint32_t e, msg *m)
{
    const collsched_schedule *s = r->s;
    int len0;
    m->buf = piece_at(r->lay, s->hdr.nseg, &s->ops[h], &len0);
    m->count = len0;
    m->type = MPI_BYTE;
    if (e == h + 1) return MPI_SUCCESS;
    char *addr_stack[CS_MSG_STACK];
    int len_stack[CS_MSG_STACK];
    char **addr = addr_stack;
    int *len = len_stack;
    if (e - h > CS_MSG_STACK) {
        addr = malloc((size_t)(e - h) * sizeof *addr);
        len = malloc((size_t)(e - h) * sizeof *len);
        if (!addr || !len) { free(addr); free(len); return MPI_ERR_NO_MEM; }
    }
    int k = 0; /* runs: pieces that follow each other merge (each run below INT_MAX bytes) */
    for (uint32_t i = h; i < e; i++) {
        int l;
        char *p = piece_at(r->lay, s->hdr.nseg, &s->ops[i], &l);
        if (!l) continue;
        if (k && addr[k - 1] + len[k - 1] == p && len[k - 1] <= INT_MAX - l) {
            len[k - 1] += l;
        } else {
            addr[k] = p;
            len[k++] = l;
        }
    }
    int rc = MPI_SUCCESS;
    if (k == 1) {
        m->buf = addr[0];
        m->count = len[0];
    } else if (k > 1) {
        rc = cs_pieces_type((const char *const *)addr, len, k, &m->type);
        m->buf = MPI_BOTTOM;
        m->count = 1;
        if (rc != MPI_SUCCESS) m->type = MPI_BYTE;
    }
    if (addr != addr_stack) { free(addr); free(len); }
    return rc;
}

static void msg_free(msg *m)
{
    if (m->type != MPI_BYTE) PMPI_Type_free(&m->type);
}

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

/* Completes request i if it is still out (a receive message being waited for, or the
 * previous send message to a peer). */
static int complete(const run *r, int32_t i)
{
    if (i < 0 || r->reqs[i] == MPI_REQUEST_NULL) return MPI_SUCCESS;
    int rc = PMPI_Wait(&r->reqs[i], MPI_STATUS_IGNORE);
    if (rc == MPI_SUCCESS) cs_trace_done(r->tr, (uint32_t)i);
    return rc;
}

/* Posts the receive message headed by h straight into its pieces' places; a started op's
 * piece, which would have landed elsewhere, goes there too now: the buffer is known. */
static int post_recv(const run *r, uint32_t h)
{
    uint32_t e = msg_end(r->s, h);
    for (uint32_t i = h; i < e && i < r->st->nops && r->st->held; i++) r->st->held[i] = NULL;
    msg m;
    int rc = describe(r, h, e, &m);
    if (rc == MPI_SUCCESS) {
        rc = PMPI_Irecv(m.buf, m.count, m.type, (int)r->s->ops[h].peer, CS_TAG, r->comm, &r->reqs[h]);
        msg_free(&m);
    }
    cs_trace_issued(r->tr, h);
    return rc;
}

/* Sends the message headed by h, whose pieces are all held (synchronous: a FIFO or serial
 * send completes once the peer has matched it, whatever its size; an eager Isend would
 * complete at once and the next one would share the link). */
static int send_msg(const run *r, uint32_t h, int sync)
{
    msg m;
    int rc = describe(r, h, msg_end(r->s, h), &m);
    if (rc != MPI_SUCCESS) return rc;
    int peer = (int)r->s->ops[h].peer;
    rc = sync ? PMPI_Issend(m.buf, m.count, m.type, peer, CS_TAG, r->comm, &r->reqs[h])
              : PMPI_Isend(m.buf, m.count, m.type, peer, CS_TAG, r->comm, &r->reqs[h]);
    msg_free(&m);
    cs_trace_issued(r->tr, h);
    return rc;
}

/* The dataflow walk's two waits before a send message: every forwarded piece must have
 * arrived (its receive message complete, then the piece in its place), and the previous
 * message to the same peer must be complete (FIFO per link: messages to one peer never
 * share the link, so the first one, which the peer may have to forward, is not slowed). */
static int issue_send(const run *r, uint32_t h)
{
    const collsched_schedule *s = r->s;
    int32_t hint = -1;
    int rc = MPI_SUCCESS;
    for (uint32_t i = h, e = msg_end(s, h); i < e && rc == MPI_SUCCESS; i++) {
        int32_t dep = s->ops[i].dep;
        if (dep < 0) continue;
        rc = complete(r, (int32_t)msg_head(s, (uint32_t)dep, &hint));
        unhold(r, dep);
    }
    if (rc == MPI_SUCCESS) rc = complete(r, s->ops[h].prev);
    return rc == MPI_SUCCESS ? send_msg(r, h, s->ops[h].fifo) : rc;
}

/* Serial execution (docs/semantics.md): one synchronous send message and one receive
 * message in flight at a time, sends in list order and receives in list order, the two
 * chains independent of each other, as the BDR paper's single port and the cost model
 * have it. A send message also waits for the receive messages that deliver its pieces.
 * (A walk that blocked on the previous receive before posting the next held back the
 * sends listed after it: BDR's early ranks, whose pre-step sends interleave with
 * receives, started the ring 1.6 ms late at P = 48, 10,922 bytes per rank, maxDelay 5 ms
 * under SMPI.) The receive chain and the send chain go on from where the operations
 * started before the call left them: their receive and their send in flight, if any, are
 * the current ones. */
static uint32_t next_of(const collsched_schedule *s, uint32_t i, uint8_t kind)
{
    while (i < s->nops && (s->ops[i].kind != kind || s->ops[i].join)) i++;
    return i;
}

/* Whether the send message headed by h has every piece (receive messages complete in
 * list order, so every one posted, before nr, but the current, cur, has); if so, its
 * pieces held elsewhere go to their places first. */
static int serial_ready(const run *r, uint32_t h, uint32_t nr, int32_t cur)
{
    const collsched_schedule *s = r->s;
    int32_t hint = -1;
    for (uint32_t i = h, e = msg_end(s, h); i < e; i++) {
        int32_t dep = s->ops[i].dep;
        if (dep < 0) continue;
        uint32_t dh = msg_head(s, (uint32_t)dep, &hint);
        if (dh >= nr || (int32_t)dh == cur) return 0;
    }
    for (uint32_t i = h, e = msg_end(s, h); i < e; i++) unhold(r, s->ops[i].dep);
    return 1;
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
        if (rc == MPI_SUCCESS && cur[0] < 0 && ns < n && serial_ready(r, ns, nr, cur[1])) {
            rc = send_msg(r, ns, 1);
            cur[0] = (int32_t)ns;
            ns = next_of(s, ns + 1, COLLSCHED_SEND);
            moved = 1;
        }
        if (copy_own) { /* overlaps the first transfers */
            memcpy(lay->own_dst, lay->own_src, (size_t)lay->own_bytes);
            copy_own = 0;
        }
        if (rc != MPI_SUCCESS || moved) continue;
        if (cur[0] < 0 && cur[1] < 0) break; /* ns == nr == n: a waiting send has its receives done */
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

/* Dataflow execution: the walk in list order, message by message (the file's header
 * comment); a rank's first op is never joined, so every step starts at a head. */
static int run_dataflow(const run *r, int copy_own)
{
    const collsched_schedule *s = r->s;
    int rc = MPI_SUCCESS;
    for (uint32_t i = 0; i < s->nops && rc == MPI_SUCCESS; i = msg_end(s, i)) {
        if (s->ops[i].kind == COLLSCHED_RECV) {
            if (i >= r->st->recvs) rc = post_recv(r, i); /* else started before */
            continue;
        }
        if (i < r->st->sends) continue; /* started before */
        rc = issue_send(r, i);
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
