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
 * the messages are in flight: the copy is off the critical path. No buffer proportional
 * to the message is allocated here.
 */
#include "runtime.h"

#include <string.h>

/* Address and size of piece (origin, segment): in the receive buffer, or for an own
 * piece with own_src set, in the send buffer. */
char *cs_piece_at(const cs_layout *lay, uint32_t nseg, const collsched_op *op, int *len)
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

static int issue(const collsched_schedule *s, uint32_t i, MPI_Comm comm, const cs_layout *lay,
                 MPI_Request *reqs, int serial, int32_t *last_send)
{
    const collsched_op *op = &s->ops[i];
    int len;
    char *buf = cs_piece_at(lay, s->hdr.nseg, op, &len);
    if (op->kind == COLLSCHED_RECV)
        return PMPI_Irecv(buf, len, MPI_BYTE, (int)op->peer, CS_TAG, comm, &reqs[i]);
    /* The walk's two waits: a forwarded piece must have arrived, and the previous message
     * to the same peer must be complete (FIFO per link: messages to one peer never share
     * the link, so the first one, which the peer may have to forward, is not slowed). */
    if (op->dep >= 0 && reqs[op->dep] != MPI_REQUEST_NULL) {
        int rc = PMPI_Wait(&reqs[op->dep], MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return rc;
    }
    if (op->prev >= 0 && reqs[op->prev] != MPI_REQUEST_NULL) {
        int rc = PMPI_Wait(&reqs[op->prev], MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return rc;
    }
    /* Serial sends (one port, one message at a time, as the BDR paper's blocking sends
     * and the cost model have it): the previous send to any peer completes first. */
    if (serial) {
        if (*last_send >= 0 && reqs[*last_send] != MPI_REQUEST_NULL) {
            int rc = PMPI_Wait(&reqs[*last_send], MPI_STATUS_IGNORE);
            if (rc != MPI_SUCCESS) return rc;
        }
        *last_send = (int32_t)i;
        return PMPI_Issend(buf, len, MPI_BYTE, (int)op->peer, CS_TAG, comm, &reqs[i]);
    }
    /* A FIFO send is synchronous: it completes once the peer has matched it, whatever its
     * size (an eager Isend would complete at once and the next one would share the link). */
    if (op->fifo)
        return PMPI_Issend(buf, len, MPI_BYTE, (int)op->peer, CS_TAG, comm, &reqs[i]);
    return PMPI_Isend(buf, len, MPI_BYTE, (int)op->peer, CS_TAG, comm, &reqs[i]);
}

int cs_execute(const collsched_schedule *s, MPI_Comm comm, const cs_layout *lay,
               MPI_Request *reqs)
{
    return cs_execute_from(s, 0, 0, comm, lay, reqs);
}

/* Ops before `first` already ran (the background engine's receives, whose pieces are in
 * place by now): their requests count as complete. */
int cs_execute_from(const collsched_schedule *s, uint32_t first, int serial, MPI_Comm comm,
                    const cs_layout *lay, MPI_Request *reqs)
{
    int rc = MPI_SUCCESS;
    int32_t last_send = -1;
    for (uint32_t i = 0; i < s->nops; i++) reqs[i] = MPI_REQUEST_NULL;
    for (uint32_t i = first; i < s->nops && rc == MPI_SUCCESS; i++)
        rc = issue(s, i, comm, lay, reqs, serial, &last_send);
    if (rc == MPI_SUCCESS && lay->own_src && lay->own_bytes)
        memcpy(lay->own_dst, lay->own_src, (size_t)lay->own_bytes); /* overlaps the transfers */
    if (rc == MPI_SUCCESS) rc = PMPI_Waitall((int)s->nops, reqs, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) drain(reqs, s->nops, s->ops);
    return rc;
}
