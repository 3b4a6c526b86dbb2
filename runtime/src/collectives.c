/* collectives.c - collsched_allgather / collsched_allgatherv: check the call, pick a
 * schedule, put the own block in place and run the executor; otherwise run the MPI
 * library's own collective (PMPI, so the preload wrappers never recurse).
 *
 * Every decision that makes one rank fall back is one that MPI requires to be the same
 * on all ranks (communicator kind and size, bytes per block, schedule set), so the ranks
 * never disagree on whether a schedule runs. The one exception is a receive datatype
 * that is contiguous on some ranks and not on others (docs/runtime.md).
 */
#include "runtime.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

/* Type map is contiguous bytes: count elements cover [true_lb, true_lb + count*size). */
static int contiguous(MPI_Datatype t, MPI_Aint *true_lb, int *size)
{
    MPI_Aint lb, ext, tlb, text;
    if (PMPI_Type_size(t, size) != MPI_SUCCESS || PMPI_Type_get_extent(t, &lb, &ext) != MPI_SUCCESS
        || PMPI_Type_get_true_extent(t, &tlb, &text) != MPI_SUCCESS)
        return 0;
    *true_lb = tlb;
    return (MPI_Aint)*size == ext && ext == text;
}

/* Fall back (or, in strict mode, refuse). st may be NULL (intercommunicator). */
static int fallback(cs_comm *st, const char *reason, int *strict_err)
{
    if (st) cs_note_fallback(st, reason);
    *strict_err = cs_strict() ? MPI_ERR_OTHER : MPI_SUCCESS;
    if (*strict_err && !st) fprintf(stderr, "collsched: %s (COLLSCHED_STRICT=1)\n", reason);
    return *strict_err;
}

/* How the own block gets into the receive buffer (not for MPI_IN_PLACE): a contiguous
 * send buffer is left to the executor (sends from it, copies it after issuing the
 * transfers); a non-contiguous one is laid out by MPI now (a message to oneself). */
static int place_own(const void *sendbuf, int sendcount, MPI_Datatype sendtype, char *own,
                     uint64_t bytes, MPI_Comm priv, int rank, cs_layout *lay)
{
    MPI_Aint tlb;
    int size;
    lay->rank = (uint32_t)rank;
    if (sendbuf == MPI_IN_PLACE || bytes == 0) return MPI_SUCCESS;
    if (contiguous(sendtype, &tlb, &size)) {
        lay->own_src = (const char *)sendbuf + tlb;
        lay->own_dst = own;
        lay->own_bytes = bytes;
        return MPI_SUCCESS;
    }
    return PMPI_Sendrecv(sendbuf, sendcount, sendtype, rank, CS_TAG_SELF, own, (int)bytes,
                         MPI_BYTE, rank, CS_TAG_SELF, priv, MPI_STATUS_IGNORE);
}

static int send_bytes(const void *sendbuf, int sendcount, MPI_Datatype sendtype, uint64_t *bytes)
{
    int size;
    if (sendbuf == MPI_IN_PLACE) return 1;
    if (sendcount < 0 || PMPI_Type_size(sendtype, &size) != MPI_SUCCESS) return 0;
    *bytes = (uint64_t)sendcount * (uint64_t)size;
    return 1;
}

/* Why the call cannot use a schedule before one is even looked at, or NULL. */
static const char *call_problem(MPI_Datatype recvtype, MPI_Aint *tlb, int *rsize)
{
    if (!contiguous(recvtype, tlb, rsize))
        return "receive datatype is not contiguous bytes";
    return NULL;
}

static int piece_fits(uint64_t hi, const cs_selection *sel)
{
    return hi / sel->sched->hdr.nseg + 1 <= (uint64_t)INT_MAX;
}

/* The schedule for a call whose blocks are lo..hi bytes: 1 to run *sel; 0 to run the MPI
 * library's collective instead (*rc = MPI_SUCCESS) or to fail (*rc = the error, strict
 * mode). `why` is a reason already found not to use a schedule, or NULL. */
static int choose(cs_comm *st, const char *why, uint64_t lo, uint64_t hi, cs_selection *sel, int *rc)
{
    *rc = MPI_SUCCESS;
    if (!why) {
        *rc = cs_select(st, lo, hi, sel);
        if (*rc != MPI_SUCCESS) return 0;
        if (!sel->sched) {
            if (cs_strict()) *rc = MPI_ERR_OTHER;
            return 0;
        }
        if (!piece_fits(hi, sel)) why = "a piece exceeds INT_MAX bytes";
    }
    if (why) {
        int err;
        if (fallback(st, why, &err)) *rc = err;
        return 0;
    }
    return 1;
}

/* The PAT engine's iteration (pat.c): its background receives are in the staging
 * buffer; put them and the own block in place and run the rest of its schedule. */
static int run_pat(const cs_pat_job *job, cs_comm *st, const void *sendbuf, int sendcount,
                   MPI_Datatype sendtype, char *base, uint64_t bytes)
{
    int rank = cs_comm_rank(st);
    cs_layout lay = { .base = base, .block = bytes, .staging = job->staging, .slot = job->slot,
                      .nstaged = job->nbg, .bg_posted = job->bg_posted,
                      .bg_sent = job->bg_sent, .unstaged = job->unstaged };
    int rc = place_own(sendbuf, sendcount, sendtype, base + (uint64_t)rank * bytes, bytes,
                       job->comm, rank, &lay);
    if (rc == MPI_SUCCESS) {
        rc = cs_execute_pat(job->sched, (job->sched->hdr.flags & COLLSCHED_FLAG_SERIAL) != 0,
                            job->comm, &lay, job->reqs);
    }
    cs_note_used(st, job->name);
    cs_pat_done();
    return rc;
}

static int allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                     int recvcount, MPI_Datatype recvtype, MPI_Comm comm, int *timed)
{
    int inter = 0, err = MPI_SUCCESS, rsize;
    MPI_Aint tlb;
    cs_comm *st = NULL;
    if (comm == MPI_COMM_NULL || recvcount < 0 || PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS)
        goto pmpi; /* erroneous call: MPI reports it */
    if (inter) {
        if (fallback(NULL, "intercommunicator: not supported", &err)) return err;
        goto pmpi;
    }
    int rc = cs_comm_state(comm, &st);
    if (rc != MPI_SUCCESS) return rc;
    const char *why = call_problem(recvtype, &tlb, &rsize);
    uint64_t bytes = (uint64_t)recvcount * (uint64_t)rsize, own_bytes = bytes;
    if (!why && !send_bytes(sendbuf, sendcount, sendtype, &own_bytes)) goto pmpi;
    if (!why && own_bytes != bytes) goto pmpi; /* mismatched signatures: MPI reports it */
    cs_pat_job job;
    int claim = why || bytes > (uint64_t)INT_MAX ? CS_PAT_NOT_MINE : cs_pat_claim(comm, bytes, &job);
    if (claim == CS_PAT_RUN)
        return run_pat(&job, st, sendbuf, sendcount, sendtype, (char *)recvbuf + tlb, bytes);
    if (claim == CS_PAT_FALL_BACK) {
        if (cs_verbose() && cs_comm_rank(st) == 0) fprintf(stderr, "collsched: %s\n", job.reason);
        *timed = cs_pat_learning_tau();
    }
    cs_selection sel;
    if (!choose(st, why, bytes, bytes, &sel, &rc)) {
        if (rc != MPI_SUCCESS) return rc;
        if (claim == CS_PAT_FALL_BACK) cs_note_fallback(st, job.reason); /* the news for a PAT user */
        goto pmpi;
    }
    char *base = (char *)recvbuf + tlb;
    int rank = cs_comm_rank(st);
    cs_layout lay = { .base = base, .block = bytes };
    rc = place_own(sendbuf, sendcount, sendtype, base + (uint64_t)rank * bytes, bytes, sel.comm,
                   rank, &lay);
    return rc == MPI_SUCCESS ? cs_execute(sel.sched, sel.comm, &lay, sel.reqs) : rc;
pmpi:
    return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}

int collsched_allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                        void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm)
{
    int timed = 0;
    double t = PMPI_Wtime();
    int rc = allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, &timed);
    /* The PAT engine learns tau from its first call when nobody told it (pat.c). */
    if (timed && rc == MPI_SUCCESS) cs_pat_learned(PMPI_Wtime() - t);
    return rc;
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

int collsched_allgatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                         void *recvbuf, const int recvcounts[], const int displs[],
                         MPI_Datatype recvtype, MPI_Comm comm)
{
    int inter = 0, err = MPI_SUCCESS, rsize;
    MPI_Aint tlb;
    cs_comm *st = NULL;
    uint64_t lo = 0, hi = 0;
    if (comm == MPI_COMM_NULL || !recvcounts || !displs
        || PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS)
        goto pmpi;
    if (inter) {
        if (fallback(NULL, "intercommunicator: not supported", &err)) return err;
        goto pmpi;
    }
    int rc = cs_comm_state(comm, &st);
    if (rc != MPI_SUCCESS) return rc;
    int rank = cs_comm_rank(st), size = cs_comm_size(st);
    const char *why = call_problem(recvtype, &tlb, &rsize);
    if (!why && !block_range(recvcounts, size, (uint64_t)rsize, &lo, &hi)) goto pmpi;
    uint64_t own = why ? 0 : (uint64_t)recvcounts[rank] * (uint64_t)rsize, own_bytes = own;
    if (!why && (!send_bytes(sendbuf, sendcount, sendtype, &own_bytes) || own_bytes != own))
        goto pmpi;
    cs_selection sel;
    if (!choose(st, why, lo, hi, &sel, &rc)) {
        if (rc != MPI_SUCCESS) return rc;
        goto pmpi;
    }
    char *base = (char *)recvbuf + tlb;
    cs_layout lay = { .base = base, .counts = recvcounts, .displs = displs, .extent = (uint64_t)rsize };
    char *dst = own ? base + (int64_t)displs[rank] * rsize : base;
    rc = place_own(sendbuf, sendcount, sendtype, dst, own, sel.comm, rank, &lay);
    return rc == MPI_SUCCESS ? cs_execute(sel.sched, sel.comm, &lay, sel.reqs) : rc;
pmpi:
    return PMPI_Allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm);
}
