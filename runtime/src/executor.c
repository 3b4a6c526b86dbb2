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

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef SMPI_HELPERS_H
#include <pthread.h>
#define TRACE_LOCK() pthread_mutex_lock(&trace_mu)
#define TRACE_UNLOCK() pthread_mutex_unlock(&trace_mu)
#else /* SMPI ranks are actors of one thread; nothing in the section yields */
#define TRACE_LOCK() ((void)0)
#define TRACE_UNLOCK() ((void)0)
#endif

#define CS_OWN_COPY_FIRST_BYTES (512u << 10)

/* ---- COLLSCHED_TRACE ----
 * COLLSCHED_TRACE=PREFIX: every call records when each op was issued and completed and
 * appends it to PREFIX.RANK.csv (call, op, kind, peer, origin, segment, issued, completed;
 * MPI_Wtime seconds), to compare a run with the cost model's timeline op by op.
 * Diagnostic only: completions are observed with MPI_Waitsome, so they are exact under
 * SMPI and late by up to one poll under real MPI.
 *
 * The record belongs to the call (NULL when tracing is off): calls on different
 * communicators in different threads never share one (a shared global record was freed
 * under another thread's feet: heap-use-after-free under MPI_THREAD_MULTIPLE, issue 22).
 * The files are process-wide, so their bookkeeping (which path was opened, call numbers)
 * is under one mutex. */
typedef struct cs_trace {
    double *issued, *done;
    int *idx;                 /* MPI_Waitsome's output */
} cs_trace;

/* Paths this process has opened: the first open truncates (a re-run overwrites its own
 * trace), later calls append; a refused path is reported once. */
#define TRACE_PATHS 64
static struct { uint64_t hash; int calls, refused; } trace_paths[TRACE_PATHS];
static int trace_npaths;
#ifndef SMPI_HELPERS_H
static pthread_mutex_t trace_mu = PTHREAD_MUTEX_INITIALIZER;
#endif

static cs_trace *trace_begin(uint32_t nops)
{
    const char *prefix = getenv("COLLSCHED_TRACE");
    if (!prefix || !*prefix) return NULL;
    cs_trace *tr = calloc(1, sizeof *tr);
    if (!tr) return NULL;
    tr->issued = calloc(nops + 1u, sizeof(double));
    tr->done = calloc(nops + 1u, sizeof(double));
    tr->idx = malloc((nops + 1u) * sizeof *tr->idx);
    if (tr->issued && tr->done && tr->idx) return tr;
    free(tr->issued); free(tr->done); free(tr->idx); free(tr);
    return NULL; /* no memory: this call is not traced */
}

static void trace_free(cs_trace *tr)
{
    if (!tr) return;
    free(tr->issued); free(tr->done); free(tr->idx); free(tr);
}

static void trace_done(cs_trace *tr, uint32_t i)
{
    if (tr && tr->done[i] == 0) tr->done[i] = PMPI_Wtime();
}

/* Opens PATH for this call's lines, never through a symbolic link and never anything but
 * a regular file (a FIFO is opened non-blocking, so it cannot hang the call, then
 * refused). Returns -1 with why set. */
static int trace_open(const char *path, int first, const char **why)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
    struct stat sb;
    if (fd < 0) { /* a FIFO without a reader fails here (ENXIO): say what the path is */
        int err = errno;
        *why = lstat(path, &sb) == 0 && S_ISLNK(sb.st_mode)   ? "it is a symbolic link"
               : lstat(path, &sb) == 0 && !S_ISREG(sb.st_mode) ? "it is not a regular file"
                                                               : strerror(err);
        return -1;
    }
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        *why = "it is not a regular file";
        return -1;
    }
    if (first && ftruncate(fd, 0) != 0) {
        *why = strerror(errno);
        close(fd);
        return -1;
    }
    return fd;
}

static void trace_write(cs_trace *tr, const collsched_schedule *s, uint32_t rank)
{
    const char *prefix = getenv("COLLSCHED_TRACE");
    char path[4096];
    if (!prefix || !*prefix) return;
    int len = snprintf(path, sizeof path, "%s.%u.csv", prefix, rank);
    if (len < 0 || (size_t)len >= sizeof path) return;
    uint64_t h = cs_hash64(0, path, (size_t)len);
    TRACE_LOCK();
    int k = 0;
    while (k < trace_npaths && trace_paths[k].hash != h) k++;
    if (k == trace_npaths && k < TRACE_PATHS) trace_paths[trace_npaths++].hash = h;
    int first = k < TRACE_PATHS && trace_paths[k].calls == 0 && !trace_paths[k].refused;
    int calls = k < TRACE_PATHS ? trace_paths[k].calls++ : 0;
    const char *why = NULL;
    int fd = k < TRACE_PATHS && trace_paths[k].refused ? -1 : trace_open(path, first, &why);
    FILE *f = fd >= 0 ? fdopen(fd, "a") : NULL;
    if (fd >= 0 && !f) close(fd);
    if (why && k < TRACE_PATHS) trace_paths[k].refused = 1;
    if (why) { /* once per path; the collective itself has completed */
        fprintf(stderr, "collsched: COLLSCHED_TRACE: not writing %s: %s\n", path, why);
        fflush(stderr);
    }
    for (uint32_t i = 0; f && i < s->nops; i++)
        fprintf(f, "%d,%u,%u,%u,%u,%u,%.9f,%.9f\n", calls, i, s->ops[i].kind, s->ops[i].peer,
                s->ops[i].origin, s->ops[i].segment, tr->issued[i], tr->done[i]);
    if (f) fclose(f);
    TRACE_UNLOCK();
}

/* ---- the executor ---- */

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
        trace_done(r->tr, (uint32_t)op->dep);
    }
    unhold(r, op->dep);
    if (op->prev >= 0 && reqs[op->prev] != MPI_REQUEST_NULL) {
        int rc = PMPI_Wait(&reqs[op->prev], MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return rc;
        trace_done(r->tr, (uint32_t)op->prev);
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
    if (r->tr) r->tr->issued[i] = PMPI_Wtime();
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
                if (r->tr) r->tr->issued[ns] = PMPI_Wtime();
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
        trace_done(r->tr, (uint32_t)cur[k]);
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
        if (r->tr) r->tr->issued[i] = PMPI_Wtime();
    }
    if (copy_own && rc == MPI_SUCCESS)
        memcpy(r->lay->own_dst, r->lay->own_src, (size_t)r->lay->own_bytes); /* overlaps the transfers */
    return rc;
}

int cs_execute(const collsched_schedule *s, MPI_Comm comm, const cs_layout *lay,
               MPI_Request *reqs, const cs_started *started)
{
    static const cs_started none = { 0, 0, 0, NULL };
    run r = { s, comm, lay, reqs, started ? started : &none, trace_begin(s->nops) };
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
    cs_trace *tr = r.tr;
    if (rc == MPI_SUCCESS && tr) {
        /* Completions one by one, for their times. */
        int n = 0;
        for (;;) {
            rc = PMPI_Waitsome((int)s->nops, reqs, &n, tr->idx, MPI_STATUSES_IGNORE);
            if (rc != MPI_SUCCESS || n == MPI_UNDEFINED) break;
            for (int k = 0; k < n; k++) trace_done(tr, (uint32_t)tr->idx[k]);
        }
        trace_write(tr, s, lay->rank);
    }
    trace_free(tr);
    if (rc == MPI_SUCCESS) rc = PMPI_Waitall((int)s->nops, reqs, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) drain(reqs, s->nops, s->ops);
    for (uint32_t i = 0; rc == MPI_SUCCESS && i < r.st->nops; i++) unhold(&r, (int32_t)i);
    return rc;
}
