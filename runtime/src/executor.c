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
 * message and receive one at a time (docs/semantics.md). No buffer proportional to the
 * message is allocated here (the PAT engine's staging of background pieces aside).
 */
#include "runtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* COLLSCHED_TRACE=PREFIX: every call appends when each op was issued and completed to
 * PREFIX.RANK.csv (call, op, kind, peer, origin, segment, issued, completed; MPI_Wtime
 * seconds), to compare a run with the cost model's timeline op by op. Diagnostic only:
 * completions are observed with MPI_Waitsome, so they are exact under SMPI and late by
 * up to one poll under real MPI. */
typedef struct trace { double *issued, *done; } trace;

#define CS_OWN_COPY_FIRST_BYTES (512u << 10)
static trace *trace_on;
static trace trace_buf;

static void trace_done(uint32_t i)
{
    if (trace_on && trace_on->done[i] == 0) trace_on->done[i] = PMPI_Wtime();
}

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

/* A background piece goes from its staging slot to its place (once it has arrived). */
static void unstage(const collsched_schedule *s, const cs_layout *lay, uint32_t i)
{
    if (!lay->unstaged[i]) return;
    int len;
    char *dst = cs_piece_at(lay, s->hdr.nseg, &s->ops[i], &len);
    if (len) memcpy(dst, lay->staging + (uint64_t)i * lay->slot, (size_t)len);
    lay->unstaged[i] = 0;
}

static int issue(const collsched_schedule *s, uint32_t i, MPI_Comm comm, const cs_layout *lay,
                 MPI_Request *reqs, int serial, int32_t *last_send, int32_t *last_recv)
{
    const collsched_op *op = &s->ops[i];
    int len;
    char *buf = cs_piece_at(lay, s->hdr.nseg, op, &len);
    if (op->kind == COLLSCHED_RECV) {
        /* Serial mode receives one message at a time too: the previous one first. */
        if (serial) {
            if (*last_recv >= 0 && reqs[*last_recv] != MPI_REQUEST_NULL) {
                int rc = PMPI_Wait(&reqs[*last_recv], MPI_STATUS_IGNORE);
                if (rc != MPI_SUCCESS) return rc;
                trace_done((uint32_t)*last_recv);
            }
            *last_recv = (int32_t)i;
        }
        return PMPI_Irecv(buf, len, MPI_BYTE, (int)op->peer, CS_TAG, comm, &reqs[i]);
    }
    /* The walk's two waits: a forwarded piece must have arrived, and the previous message
     * to the same peer must be complete (FIFO per link: messages to one peer never share
     * the link, so the first one, which the peer may have to forward, is not slowed). */
    if (op->dep >= 0 && reqs[op->dep] != MPI_REQUEST_NULL) {
        int rc = PMPI_Wait(&reqs[op->dep], MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return rc;
        trace_done((uint32_t)op->dep);
    }
    if (op->dep >= 0 && (uint32_t)op->dep < lay->nstaged) unstage(s, lay, (uint32_t)op->dep);
    if (op->prev >= 0 && reqs[op->prev] != MPI_REQUEST_NULL) {
        int rc = PMPI_Wait(&reqs[op->prev], MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return rc;
        trace_done((uint32_t)op->prev);
    }
    /* Serial sends (one port, one message at a time, as the BDR paper's blocking sends
     * and the cost model have it): the previous send to any peer completes first. */
    if (serial) {
        if (*last_send >= 0 && reqs[*last_send] != MPI_REQUEST_NULL) {
            int rc = PMPI_Wait(&reqs[*last_send], MPI_STATUS_IGNORE);
            if (rc != MPI_SUCCESS) return rc;
            trace_done((uint32_t)*last_send);
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
    return cs_execute_from(s, 0, (s->hdr.flags & COLLSCHED_FLAG_SERIAL) != 0, comm, lay, reqs);
}

/* Ops before `first` already ran (the background engine's receives, whose pieces are in
 * place by now): their requests count as complete. */
int cs_execute_from(const collsched_schedule *s, uint32_t first, int serial, MPI_Comm comm,
                    const cs_layout *lay, MPI_Request *reqs)
{
    int rc = MPI_SUCCESS;
    int32_t last_send = -1, last_recv = -1;
    const char *prefix = getenv("COLLSCHED_TRACE");
    trace_on = NULL;
    if (prefix && *prefix) {
        trace_buf.issued = calloc(s->nops + 1u, sizeof(double));
        trace_buf.done = calloc(s->nops + 1u, sizeof(double));
        if (trace_buf.issued && trace_buf.done) trace_on = &trace_buf;
    }
    for (uint32_t i = first; i < s->nops; i++) reqs[i] = MPI_REQUEST_NULL; /* earlier: the engine's */
    /* A large own block is copied before the walk: copied while the first transfers run,
     * it competed with them for memory bandwidth (ring, P = 8, shared memory, 1 MiB: our
     * time / Open MPI's ring 1.07-1.11 with the copy overlapped, 1.05-1.07 before; below
     * 256 KiB the overlap helps or is noise). */
    int copy_first = lay->own_src && lay->own_bytes >= CS_OWN_COPY_FIRST_BYTES;
    if (copy_first) memcpy(lay->own_dst, lay->own_src, (size_t)lay->own_bytes);
    for (uint32_t i = first; i < s->nops && rc == MPI_SUCCESS; i++) {
        rc = issue(s, i, comm, lay, reqs, serial, &last_send, &last_recv);
        if (trace_on) trace_on->issued[i] = PMPI_Wtime();
    }
    if (!copy_first && rc == MPI_SUCCESS && lay->own_src && lay->own_bytes)
        memcpy(lay->own_dst, lay->own_src, (size_t)lay->own_bytes); /* overlaps the transfers */
    if (rc == MPI_SUCCESS && trace_on) {
        int *idx = malloc((s->nops + 1u) * sizeof *idx), n = 0;
        for (;;) {
            rc = PMPI_Waitsome((int)s->nops, reqs, &n, idx, MPI_STATUSES_IGNORE);
            if (rc != MPI_SUCCESS || n == MPI_UNDEFINED) break;
            for (int k = 0; k < n; k++) trace_done((uint32_t)idx[k]);
        }
        free(idx);
        static int calls;
        char path[4096];
        snprintf(path, sizeof path, "%s.%u.csv", prefix, lay->rank);
        FILE *f = fopen(path, "a");
        for (uint32_t i = first; f && i < s->nops; i++)
            fprintf(f, "%d,%u,%u,%u,%u,%u,%.9f,%.9f\n", calls, i, s->ops[i].kind, s->ops[i].peer,
                    s->ops[i].origin, s->ops[i].segment, trace_on->issued[i], trace_on->done[i]);
        if (f) fclose(f);
        calls++;
    }
    free(trace_buf.issued);
    free(trace_buf.done);
    trace_buf.issued = trace_buf.done = NULL;
    trace_on = NULL;
    if (rc == MPI_SUCCESS) rc = PMPI_Waitall((int)s->nops, reqs, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) drain(reqs, s->nops, s->ops);
    for (uint32_t i = 0; rc == MPI_SUCCESS && i < lay->nstaged; i++) unstage(s, lay, i);
    return rc;
}
