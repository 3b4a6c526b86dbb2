/* collectives.c - collsched_allgather / collsched_allgatherv: check the call, pick a
 * schedule, put the own block in place and run the executor; otherwise run the MPI
 * library's own collective (PMPI, so the preload wrappers never recurse), or, in strict
 * mode, refuse the call through the communicator's error handler.
 *
 * Every decision that makes one rank fall back is one that MPI requires to be the same
 * on all ranks (communicator kind and size, bytes per block, schedule set), so the ranks
 * never disagree on whether a schedule runs. Datatypes are not such a decision: MPI lets
 * ranks describe the same bytes with different layouts. So every layout runs the
 * schedule: a receive type whose elements are one run of bytes in order (datatype.c)
 * gets the pieces in place; any other gets them in a staging buffer, which MPI unpacks
 * into the user's layout after the schedule (a message to oneself). Likewise a send type
 * that is not a run is laid out in the own block by a message to oneself.
 */
#include "runtime.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One call's arguments, allgather (counts == NULL) or allgatherv. */
typedef struct call {
    const char *name;          /* "MPI_Allgather" or "MPI_Allgatherv" (messages) */
    const void *sendbuf;
    int sendcount;
    MPI_Datatype sendtype;
    void *recvbuf;
    int recvcount;             /* allgather */
    const int *counts, *displs; /* allgatherv */
    MPI_Datatype recvtype;
    MPI_Comm comm;             /* the user's communicator */
    int rank, size;
    uint64_t esize;            /* bytes of one receive element */
    uint64_t block;            /* allgather: bytes per rank */
} call;

/* An error of the runtime's own goes through the communicator's error handler, as an
 * MPI call's would: with MPI_ERRORS_ARE_FATAL (the default) the job aborts. */
static int raise_error(MPI_Comm comm, int rc)
{
    if (rc != MPI_SUCCESS) PMPI_Comm_call_errhandler(comm, rc);
    return rc;
}

/* Strict mode: no schedule serves the call, and it is refused (MPI_ERR_OTHER). */
static int refuse(cs_comm *st, const call *c, uint64_t lo, uint64_t hi)
{
    cs_note_refused(st, c->name, lo, hi);
    return raise_error(c->comm, MPI_ERR_OTHER);
}

/* A datatype of n bytes; n may exceed INT_MAX. */
int cs_byte_type(uint64_t n, MPI_Datatype *t)
{
    const uint64_t G = 1u << 30;
    if (n <= INT_MAX) return PMPI_Type_contiguous((int)n, MPI_BYTE, t);
    if (n / G > INT_MAX) return MPI_ERR_COUNT;
    MPI_Datatype g;
    int rc = PMPI_Type_contiguous((int)G, MPI_BYTE, &g);
    if (rc != MPI_SUCCESS) return rc;
    int bl[2] = { (int)(n / G), (int)(n % G) };
    MPI_Aint at[2] = { 0, (MPI_Aint)(n / G * G) };
    MPI_Datatype parts[2] = { g, MPI_BYTE };
    rc = PMPI_Type_create_struct(2, bl, at, parts, t);
    PMPI_Type_free(&g);
    return rc;
}

/* A local copy through MPI, from one layout to another (a message to oneself). */
static int self_copy(const void *src, int scount, MPI_Datatype stype, void *dst, int dcount,
                     MPI_Datatype dtype, MPI_Comm priv, int rank)
{
    return PMPI_Sendrecv(src, scount, stype, rank, CS_TAG_SELF, dst, dcount, dtype, rank,
                         CS_TAG_SELF, priv, MPI_STATUS_IGNORE);
}

/* The same, into or out of `bytes` contiguous bytes. */
int cs_copy_bytes(const void *src, int scount, MPI_Datatype stype, void *dst, uint64_t bytes,
                      int pack, MPI_Comm priv, int rank)
{
    MPI_Datatype b;
    int rc = cs_byte_type(bytes, &b);
    if (rc == MPI_SUCCESS) rc = PMPI_Type_commit(&b);
    if (rc != MPI_SUCCESS) return rc;
    rc = pack ? self_copy(src, scount, stype, dst, 1, b, priv, rank)
              : self_copy(dst, 1, b, (void *)src, scount, stype, priv, rank);
    PMPI_Type_free(&b);
    return rc;
}

/* Where the executor puts the blocks: straight into the receive buffer when its type is
 * a run of bytes, else into staging (*stage, malloc'ed) laid out like the receive buffer
 * would be with a contiguous type: allgather block o at o * block; allgatherv block o at
 * displs[o] * esize, staging covering only the span the blocks use. (The intergroup
 * executor stages the remote group's blocks the same way: inter_exec.c.) */
int cs_stage_open(const cs_recv_spec *r, char **base, char **stage)
{
    MPI_Aint off = 0;
    int64_t lo = 0, hi = 0;
    *stage = NULL;
    if (r->counts) {
        for (int o = 0, first = 1; o < r->n; o++) {
            int64_t a, b;
            if (r->counts[o] == 0) continue;
            if (__builtin_mul_overflow((int64_t)r->displs[o], (int64_t)r->esize, &a)
                || __builtin_mul_overflow((int64_t)r->counts[o], (int64_t)r->esize, &b)
                || __builtin_add_overflow(a, b, &b))
                return MPI_ERR_NO_MEM;
            if (first || a < lo) lo = a;
            if (first || b > hi) hi = b;
            first = 0;
        }
    } else if (__builtin_mul_overflow((int64_t)r->block, (int64_t)r->n, &hi)) {
        return MPI_ERR_NO_MEM;
    }
    if (hi == lo || cs_type_run(r->type, &off)) { /* nothing to move, or in place */
        *base = hi == lo ? (char *)r->buf : (char *)r->buf + off;
        return MPI_SUCCESS;
    }
    if ((uint64_t)(hi - lo) > SIZE_MAX || !(*stage = malloc((size_t)(hi - lo))))
        return MPI_ERR_NO_MEM;
    /* block o's bytes at base + displs[o] * esize: inside the staging buffer */
    *base = (char *)((uintptr_t)*stage - (uintptr_t)lo);
    return MPI_SUCCESS;
}

static int open_recv(const call *c, cs_layout *lay, char **stage)
{
    cs_recv_spec r = { c->recvbuf, c->recvcount, c->counts, c->displs, c->recvtype, c->esize,
                       c->block, c->size };
    lay->rank = (uint32_t)c->rank;
    if (c->counts) {
        lay->counts = c->counts;
        lay->displs = c->displs;
        lay->extent = c->esize;
    } else {
        lay->block = c->block;
    }
    return cs_stage_open(&r, &lay->base, stage);
}

/* The staged blocks into the user's receive layout (one message to oneself). */
int cs_stage_close(const cs_recv_spec *r, const char *base, MPI_Comm priv, int rank)
{
    MPI_Datatype from = MPI_DATATYPE_NULL, to = MPI_DATATYPE_NULL, e = MPI_DATATYPE_NULL;
    int rc = cs_byte_type(r->counts ? r->esize : r->block, &e);
    if (rc == MPI_SUCCESS)
        rc = r->counts ? PMPI_Type_indexed(r->n, r->counts, r->displs, e, &from)
                       : PMPI_Type_contiguous(r->n, e, &from);
    if (rc == MPI_SUCCESS)
        rc = r->counts ? PMPI_Type_indexed(r->n, r->counts, r->displs, r->type, &to)
                       : PMPI_Type_contiguous(r->count, r->type, &to);
    if (rc == MPI_SUCCESS) rc = PMPI_Type_commit(&from);
    if (rc == MPI_SUCCESS) rc = PMPI_Type_commit(&to);
    if (rc == MPI_SUCCESS)
        rc = self_copy(base, 1, from, r->buf, r->counts ? 1 : r->n, to, priv, rank);
    MPI_Datatype *all[3] = { &from, &to, &e };
    for (int i = 0; i < 3; i++)
        if (*all[i] != MPI_DATATYPE_NULL) PMPI_Type_free(all[i]);
    return rc;
}

static int close_recv(const call *c, const cs_layout *lay, MPI_Comm priv)
{
    cs_recv_spec r = { c->recvbuf, c->recvcount, c->counts, c->displs, c->recvtype, c->esize,
                       c->block, c->size };
    return cs_stage_close(&r, lay->base, priv, c->rank);
}

/* The own block at its place in the layout: a send buffer that is a run of bytes is left
 * to the executor (it sends from there and copies it in after issuing the transfers);
 * any other is laid out by MPI now. In place, the block is already there, unless the
 * blocks are staged: then MPI packs it from the receive buffer into staging. */
static int place_own(const call *c, cs_layout *lay, int staged, MPI_Comm priv)
{
    uint64_t bytes = c->counts ? (uint64_t)c->counts[c->rank] * c->esize : c->block;
    if (bytes == 0) return MPI_SUCCESS;
    char *dst = lay->base + (c->counts ? (int64_t)c->displs[c->rank] * (int64_t)c->esize
                                       : (int64_t)((uint64_t)c->rank * c->block));
    MPI_Aint off, lb, ext;
    if (c->sendbuf == MPI_IN_PLACE) {
        if (!staged) return MPI_SUCCESS;
        int n = c->counts ? c->counts[c->rank] : c->recvcount;
        int rc = PMPI_Type_get_extent(c->recvtype, &lb, &ext);
        if (rc != MPI_SUCCESS) return rc;
        MPI_Aint at = (MPI_Aint)(c->counts ? c->displs[c->rank] : (int64_t)c->rank * c->recvcount) * ext;
        return cs_copy_bytes((char *)c->recvbuf + at, n, c->recvtype, dst, bytes, 1, priv, c->rank);
    }
    if (cs_type_run(c->sendtype, &off)) {
        lay->own_src = (const char *)c->sendbuf + off;
        lay->own_dst = dst;
        lay->own_bytes = bytes;
        return MPI_SUCCESS;
    }
    return cs_copy_bytes(c->sendbuf, c->sendcount, c->sendtype, dst, bytes, 1, priv, c->rank);
}

/* Runs the schedule: layout, own block, executor (taking over what was started), unstaging. */
static int run(const call *c, const collsched_schedule *s, MPI_Comm priv, MPI_Request *reqs,
               const cs_started *started)
{
    cs_layout lay = { 0 };
    char *stage = NULL;
    int rc = open_recv(c, &lay, &stage);
    if (rc == MPI_SUCCESS) rc = place_own(c, &lay, stage != NULL, priv);
    if (rc == MPI_SUCCESS) rc = cs_execute(s, priv, &lay, reqs, started);
    if (rc == MPI_SUCCESS && stage) rc = close_recv(c, &lay, priv);
    free(stage);
    return rc;
}

/* Bytes of one element of t (signatures: the same on every rank for the same data). */
static int type_bytes(MPI_Datatype t, uint64_t *bytes)
{
    MPI_Count n;
    if (PMPI_Type_size_x(t, &n) != MPI_SUCCESS || n < 0) return 0;
    *bytes = (uint64_t)n;
    return 1;
}

/* The own contribution in bytes agrees with the receive side (else MPI reports it). */
static int send_matches(const call *c, uint64_t own)
{
    uint64_t size;
    if (c->sendbuf == MPI_IN_PLACE) return 1;
    return c->sendcount >= 0 && type_bytes(c->sendtype, &size) && (uint64_t)c->sendcount * size == own;
}

/* The schedule for a call whose blocks are lo..hi bytes: 1 to run *sel; 0 to run the MPI
 * library's collective instead; -1 to fail with *rc (an MPI error; strict mode: the call
 * was refused, through the error handler). */
static int choose(cs_comm *st, const call *c, const cs_call_ctx *ctx, uint64_t lo, uint64_t hi,
                  cs_selection *sel, int *rc)
{
    *rc = cs_select(st, ctx, lo, hi, sel);
    if (*rc != MPI_SUCCESS) {
        raise_error(c->comm, *rc);
        return -1;
    }
    if (sel->sched && hi / sel->sched->hdr.nseg + 1 > (uint64_t)INT_MAX) {
        cs_note_fallback(st, "a piece exceeds INT_MAX bytes");
        sel->sched = NULL;
    }
    if (sel->sched) return 1;
    if (!cs_strict()) return 0;
    *rc = refuse(st, c, lo, hi);
    return -1;
}

/* The PAT engine's iteration (pat.c): the executor takes its background part over
 * (requests, receives held in its staging buffer), puts the held pieces and the own
 * block in place and runs the rest. */
static int run_pat(const cs_pat_job *job, cs_comm *st, const call *c)
{
    int rc = run(c, job->sched, job->comm, job->reqs, &job->started);
    cs_note_used(st, job->name);
    cs_pat_done(job);
    return raise_error(c->comm, rc);
}

static int allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                     int recvcount, MPI_Datatype recvtype, MPI_Comm comm, cs_call_ctx *ctx, int *timed)
{
    int inter = 0;
    cs_comm *st = NULL;
    call c = { "MPI_Allgather", sendbuf, sendcount, sendtype, recvbuf, recvcount, NULL, NULL,
               recvtype, comm, 0, 0, 0, 0 };
    if (comm == MPI_COMM_NULL || recvcount < 0 || !type_bytes(recvtype, &c.esize)
        || PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS)
        goto pmpi; /* erroneous call: MPI reports it */
    if (inter) { /* between two groups: inter_call.c */
        cs_inter_args a = { c.name, sendbuf, sendcount, sendtype, recvbuf, recvcount, NULL, NULL, recvtype };
        return cs_inter_collective(&a, comm, -1, ctx);
    }
    int rc = cs_comm_state(comm, &st);
    if (rc != MPI_SUCCESS) return rc;
    c.rank = cs_comm_rank(st);
    c.size = cs_comm_size(st);
    c.block = (uint64_t)recvcount * c.esize;
    if (!send_matches(&c, c.block)) goto pmpi; /* mismatched signatures: MPI reports it */
    ctx->bytes = c.block;
    cs_pat_job job;
    int claim = c.block > (uint64_t)INT_MAX ? CS_PAT_NOT_MINE : cs_pat_claim(comm, c.block, &job);
    if (claim == CS_PAT_RUN) {
        ctx->used = 1;
        return run_pat(&job, st, &c);
    }
    if (claim == CS_PAT_FALL_BACK) {
        if (cs_verbose() && c.rank == 0) fprintf(stderr, "collsched: %s\n", job.reason);
        *timed = cs_pat_learning_tau();
    }
    cs_selection sel;
    int how = choose(st, &c, ctx, c.block, c.block, &sel, &rc);
    if (how < 0) return rc;
    if (how == 0) {
        if (claim == CS_PAT_FALL_BACK) cs_note_fallback(st, job.reason); /* the news for a PAT user */
        goto pmpi;
    }
    ctx->used = 1;
    rc = run(&c, sel.sched, sel.comm, sel.reqs, sel.started);
    if (rc == MPI_SUCCESS) rc = cs_cache_after(cs_comm_cache(st), st); /* receive-ahead */
    return raise_error(comm, rc);
pmpi:
    return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}

/* Without a schedule source or the PAT engine the runtime stays out of the way (no
 * communicator state), but a traced call is still recorded. */
int cs_allgather_at(const void *site, const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                    void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm)
{
    int timed = 0, rc;
    cs_call_ctx ctx = { site, CS_COLL_ALLGATHER, 0, PMPI_Wtime(), 0, cs_call_label_take() };
    if (cs_source_configured() || cs_pat_active()) {
        rc = allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, &ctx, &timed);
    } else {
        uint64_t esize;
        if (recvcount >= 0 && type_bytes(recvtype, &esize)) ctx.bytes = (uint64_t)recvcount * esize;
        rc = PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
    }
    double t = PMPI_Wtime();
    /* The PAT engine learns tau from its first call when nobody told it (pat.c). */
    if (timed && rc == MPI_SUCCESS) cs_pat_learned(t - ctx.arrival);
    if (rc == MPI_SUCCESS && cs_arrivals_enabled()) cs_arrivals_call(comm, &ctx, t);
    return rc;
}

int collsched_allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                        void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm)
{
    return cs_allgather_at(__builtin_return_address(0), sendbuf, sendcount, sendtype, recvbuf,
                           recvcount, recvtype, comm);
}

/* Smallest and largest block in bytes; 0 if a count is negative (erroneous call). */
static int block_range(const int *counts, int n, uint64_t ext, uint64_t *lo, uint64_t *hi)
{
    *lo = UINT64_MAX;
    *hi = 0;
    for (int i = 0; i < n; i++) {
        if (counts[i] < 0) return 0;
        uint64_t c = (uint64_t)counts[i] * ext;
        if (c < *lo) *lo = c;
        if (c > *hi) *hi = c;
    }
    if (n == 0) *lo = 0;
    return 1;
}

static int allgatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                      void *recvbuf, const int recvcounts[], const int displs[],
                      MPI_Datatype recvtype, MPI_Comm comm, cs_call_ctx *ctx)
{
    int inter = 0;
    cs_comm *st = NULL;
    uint64_t lo = 0, hi = 0;
    call c = { "MPI_Allgatherv", sendbuf, sendcount, sendtype, recvbuf, 0, recvcounts, displs,
               recvtype, comm, 0, 0, 0, 0 };
    if (comm == MPI_COMM_NULL || !recvcounts || !displs || !type_bytes(recvtype, &c.esize)
        || PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS)
        goto pmpi;
    if (inter) {
        cs_inter_args a = { c.name, sendbuf, sendcount, sendtype, recvbuf, 0, recvcounts, displs, recvtype };
        return cs_inter_collective(&a, comm, -1, ctx);
    }
    int rc = cs_comm_state(comm, &st);
    if (rc != MPI_SUCCESS) return rc;
    c.rank = cs_comm_rank(st);
    c.size = cs_comm_size(st);
    if (!block_range(recvcounts, c.size, c.esize, &lo, &hi)
        || !send_matches(&c, (uint64_t)recvcounts[c.rank] * c.esize))
        goto pmpi;
    ctx->bytes = hi;
    cs_selection sel;
    int how = choose(st, &c, ctx, lo, hi, &sel, &rc);
    if (how < 0) return rc;
    if (how == 0) goto pmpi;
    ctx->used = 1;
    rc = run(&c, sel.sched, sel.comm, sel.reqs, sel.started);
    if (rc == MPI_SUCCESS) rc = cs_cache_after(cs_comm_cache(st), st); /* receive-ahead */
    return raise_error(comm, rc);
pmpi:
    return PMPI_Allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm);
}

int cs_allgatherv_at(const void *site, const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                     void *recvbuf, const int recvcounts[], const int displs[],
                     MPI_Datatype recvtype, MPI_Comm comm)
{
    int rc;
    cs_call_ctx ctx = { site, CS_COLL_ALLGATHERV, 0, PMPI_Wtime(), 0, cs_call_label_take() };
    if (cs_source_configured()) {
        rc = allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm, &ctx);
    } else {
        int size = 0, inter = 0;
        uint64_t esize, lo, hi;
        if (comm != MPI_COMM_NULL && recvcounts && PMPI_Comm_test_inter(comm, &inter) == MPI_SUCCESS
            && !inter && PMPI_Comm_size(comm, &size) == MPI_SUCCESS && type_bytes(recvtype, &esize)
            && block_range(recvcounts, size, esize, &lo, &hi))
            ctx.bytes = hi;
        rc = PMPI_Allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm);
    }
    if (rc == MPI_SUCCESS && cs_arrivals_enabled()) cs_arrivals_call(comm, &ctx, PMPI_Wtime());
    return rc;
}

int collsched_allgatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                         void *recvbuf, const int recvcounts[], const int displs[],
                         MPI_Datatype recvtype, MPI_Comm comm)
{
    return cs_allgatherv_at(__builtin_return_address(0), sendbuf, sendcount, sendtype, recvbuf,
                            recvcounts, displs, recvtype, comm);
}

int collsched_finalize(void)
{
    int rc = cs_arrivals_finalize();
    int rc2 = cs_cache_finalize();
    return rc != MPI_SUCCESS ? rc : rc2;
}
