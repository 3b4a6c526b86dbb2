/* inter_call.c - MPI_Allgather(v) between two groups: on an intercommunicator (the preload
 * library and collsched_allgather(v) come here when MPI_Comm_test_inter says so), or on
 * the lab's merged form (collsched_inter_allgather(v)_merged: SimGrid SMPI has no
 * MPI_Intercomm_create, so the lab runs an intracommunicator whose first p ranks are one
 * group). A call checks its arguments, picks a schedule (inter_state.c), stages what is not
 * a run of bytes as collectives.c does (the send type packed, the receive type unpacked
 * after the schedule) and runs it (inter_exec.c). Without a schedule: the MPI library's
 * intercommunicator collective, or for the merged form a root gathering built from the MPI
 * library's gather, sendrecv and bcast on the two halves (what MPICH and SMPI do on an
 * intercommunicator); in strict mode the call is refused through the error handler.
 */
#include "runtime.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

static int raise_error(MPI_Comm comm, int rc)
{
    if (rc != MPI_SUCCESS) PMPI_Comm_call_errhandler(comm, rc);
    return rc;
}

static int type_bytes(MPI_Datatype t, uint64_t *bytes)
{
    MPI_Count n;
    if (t == MPI_DATATYPE_NULL || PMPI_Type_size_x(t, &n) != MPI_SUCCESS || n < 0) return 0;
    *bytes = (uint64_t)n;
    return 1;
}

/* The own block as contiguous bytes: the send buffer itself when its type is a run, else
 * packed by MPI into *packed (malloc'ed). */
static int own_bytes(const cs_inter_args *a, uint64_t own, MPI_Comm comm, const char **src, char **packed)
{
    MPI_Aint off = 0;
    int me = 0;
    *packed = NULL;
    if (own == 0 || cs_type_run(a->sendtype, &off)) {
        *src = (const char *)a->sendbuf + (own ? off : 0);
        return MPI_SUCCESS;
    }
    if (own > SIZE_MAX || !(*packed = malloc((size_t)own))) return MPI_ERR_NO_MEM;
    PMPI_Comm_rank(comm, &me);
    *src = *packed;
    return cs_copy_bytes(a->sendbuf, a->sendcount, a->sendtype, *packed, own, 1, comm, me);
}

/* The receive layout of the remote group's blocks. */
static cs_recv_spec recv_spec(const cs_inter_args *a, int rsize, uint64_t esize)
{
    cs_recv_spec r = { a->recvbuf, a->recvcount, a->counts, a->displs, a->recvtype, esize,
                       (uint64_t)(a->recvcount > 0 ? a->recvcount : 0) * esize, rsize };
    return r;
}

static int run(const cs_inter_choice *ch, const cs_inter_args *a, const cs_inter *st, uint64_t own, uint64_t esize)
{
    cs_recv_spec spec = recv_spec(a, cs_inter_rsize(st), esize);
    cs_inter_layout lay = { NULL, a->counts, a->displs, esize, spec.block, NULL };
    char *stage = NULL, *packed = NULL;
    int rc = cs_stage_open(&spec, &lay.base, &stage);
    if (rc == MPI_SUCCESS) rc = own_bytes(a, own, ch->comm, &lay.own_src, &packed);
    if (rc == MPI_SUCCESS) rc = cs_inter_execute(ch, &lay);
    if (rc == MPI_SUCCESS && stage) rc = cs_stage_close(&spec, lay.base, ch->comm, (int)ch->sec->rank);
    free(stage);
    free(packed);
    return rc;
}

/* The merged form without a schedule: each group gathers its data at its first rank, the
 * two exchange it, and each broadcasts the remote data in its group (Eq. 1's phases, one
 * after another, all the MPI library's own). */
static int root_gather(cs_inter *st, const cs_inter_args *a, uint64_t own, uint64_t esize, uint64_t remote)
{
    MPI_Comm half, merged = cs_inter_merged(st);
    int rc = cs_inter_half(st, &half), me = 0, lrank = cs_inter_lrank(st), lsize = cs_inter_lsize(st);
    int other = cs_inter_mine(st) ? 0 : lsize; /* the other group's first rank in the merged numbering */
    PMPI_Comm_rank(merged, &me);
    if (own > INT_MAX || remote > INT_MAX) return MPI_ERR_COUNT;
    const char *src = NULL;
    char *packed = NULL, *local = NULL, *rbuf = malloc(remote ? (size_t)remote : 1);
    int *counts = lrank == 0 ? malloc(sizeof *counts * 2 * (size_t)lsize) : NULL, n = (int)own;
    uint64_t total = 0;
    if (!rbuf || (lrank == 0 && !counts)) rc = MPI_ERR_NO_MEM;
    if (rc == MPI_SUCCESS) rc = own_bytes(a, own, merged, &src, &packed);
    if (rc == MPI_SUCCESS) rc = PMPI_Gather(&n, 1, MPI_INT, counts, 1, MPI_INT, 0, half);
    for (int r = 0; rc == MPI_SUCCESS && lrank == 0 && r < lsize; r++) {
        counts[lsize + r] = (int)total; /* displacements */
        total += (uint64_t)counts[r];
    }
    if (rc == MPI_SUCCESS && lrank == 0 && (total > INT_MAX || !(local = malloc(total ? (size_t)total : 1))))
        rc = total > INT_MAX ? MPI_ERR_COUNT : MPI_ERR_NO_MEM;
    if (rc == MPI_SUCCESS)
        rc = PMPI_Gatherv(src, n, MPI_BYTE, local, counts, counts ? counts + lsize : NULL, MPI_BYTE, 0, half);
    if (rc == MPI_SUCCESS && lrank == 0)
        rc = PMPI_Sendrecv(local, (int)total, MPI_BYTE, other, CS_TAG, rbuf, (int)remote, MPI_BYTE, other, CS_TAG,
                           merged, MPI_STATUS_IGNORE);
    if (rc == MPI_SUCCESS) rc = PMPI_Bcast(rbuf, (int)remote, MPI_BYTE, 0, half);
    /* the remote data, in block order, into the user's layout */
    MPI_Datatype to = MPI_DATATYPE_NULL;
    int rsize = cs_inter_rsize(st);
    if (rc == MPI_SUCCESS && remote && a->counts) {
        rc = PMPI_Type_indexed(rsize, a->counts, a->displs, a->recvtype, &to);
        if (rc == MPI_SUCCESS) rc = PMPI_Type_commit(&to);
        if (rc == MPI_SUCCESS) rc = cs_copy_bytes(a->recvbuf, 1, to, rbuf, remote, 0, merged, me);
    } else if (rc == MPI_SUCCESS && remote) {
        rc = PMPI_Type_contiguous(a->recvcount, a->recvtype, &to);
        if (rc == MPI_SUCCESS) rc = PMPI_Type_commit(&to);
        if (rc == MPI_SUCCESS) rc = cs_copy_bytes(a->recvbuf, rsize, to, rbuf, remote, 0, merged, me);
    }
    if (to != MPI_DATATYPE_NULL) PMPI_Type_free(&to);
    (void)esize;
    free(packed);
    free(local);
    free(counts);
    free(rbuf);
    return rc;
}

static int fallback(cs_inter *st, const cs_inter_args *a, MPI_Comm comm, int split_p, uint64_t own, uint64_t esize,
                    uint64_t remote)
{
    if (split_p >= 0) return raise_error(comm, root_gather(st, a, own, esize, remote));
    if (a->counts)
        return PMPI_Allgatherv(a->sendbuf, a->sendcount, a->sendtype, a->recvbuf, a->counts, a->displs, a->recvtype, comm);
    return PMPI_Allgather(a->sendbuf, a->sendcount, a->sendtype, a->recvbuf, a->recvcount, a->recvtype, comm);
}

/* The MPI library's collective for an erroneous call (it reports the error); the merged
 * form has no library call to defer to: MPI_ERR_ARG / MPI_ERR_COUNT. */
static int erroneous(const cs_inter_args *a, MPI_Comm comm, int split_p, int code)
{
    if (split_p >= 0) return raise_error(comm, code);
    if (a->counts)
        return PMPI_Allgatherv(a->sendbuf, a->sendcount, a->sendtype, a->recvbuf, a->counts, a->displs, a->recvtype, comm);
    return PMPI_Allgather(a->sendbuf, a->sendcount, a->sendtype, a->recvbuf, a->recvcount, a->recvtype, comm);
}

int cs_inter_collective(const cs_inter_args *a, MPI_Comm comm, int split_p, cs_call_ctx *ctx)
{
    uint64_t esize = 0, ssize = 0, remote = 0;
    int size = 0;
    if (comm == MPI_COMM_NULL) return erroneous(a, comm, split_p, MPI_ERR_COMM);
    if (split_p >= 0 && (PMPI_Comm_size(comm, &size) != MPI_SUCCESS || split_p < 1 || split_p >= size))
        return erroneous(a, comm, split_p, MPI_ERR_ARG);
    if (a->sendbuf == MPI_IN_PLACE || a->sendcount < 0 || !type_bytes(a->sendtype, &ssize)
        || !type_bytes(a->recvtype, &esize) || (a->counts ? !a->displs : a->recvcount < 0))
        return erroneous(a, comm, split_p, MPI_ERR_COUNT);
    cs_inter *st = NULL;
    int rc = cs_inter_state(comm, split_p, &st);
    if (rc != MPI_SUCCESS) return raise_error(comm, rc);
    int rsize = cs_inter_rsize(st);
    uint64_t own = (uint64_t)a->sendcount * ssize;
    for (int j = 0; a->counts && j < rsize; j++) {
        if (a->counts[j] < 0) return erroneous(a, comm, split_p, MPI_ERR_COUNT);
        remote += (uint64_t)a->counts[j] * esize;
    }
    if (!a->counts) remote = (uint64_t)a->recvcount * esize * (uint64_t)rsize;
    cs_inter_need need = { a->counts != NULL, own, (uint64_t)(a->recvcount > 0 ? a->recvcount : 0) * esize,
                           a->counts, esize };
    ctx->bytes = own;
    cs_inter_choice ch;
    rc = cs_inter_select(st, &need, &ch);
    if (rc != MPI_SUCCESS) return raise_error(comm, rc);
    if (!ch.h) {
        if (cs_strict()) {
            cs_inter_refused(st, a->name);
            return raise_error(comm, MPI_ERR_OTHER);
        }
        return fallback(st, a, comm, split_p, own, esize, remote);
    }
    ctx->used = 1;
    return raise_error(comm, run(&ch, a, st, own, esize));
}

int collsched_inter_allgather_merged(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                                     int recvcount, MPI_Datatype recvtype, MPI_Comm comm, int p)
{
    cs_call_ctx ctx = { __builtin_return_address(0), CS_COLL_ALLGATHER, 0, PMPI_Wtime(), 0, NULL };
    cs_inter_args a = { "MPI_Allgather", sendbuf, sendcount, sendtype, recvbuf, recvcount, NULL, NULL, recvtype };
    return cs_inter_collective(&a, comm, p, &ctx);
}

int collsched_inter_allgatherv_merged(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                                      const int recvcounts[], const int displs[], MPI_Datatype recvtype,
                                      MPI_Comm comm, int p)
{
    cs_call_ctx ctx = { __builtin_return_address(0), CS_COLL_ALLGATHERV, 0, PMPI_Wtime(), 0, NULL };
    cs_inter_args a = { "MPI_Allgatherv", sendbuf, sendcount, sendtype, recvbuf, 0, recvcounts, displs, recvtype };
    if (!recvcounts || !displs) return erroneous(&a, comm, p, MPI_ERR_ARG);
    return cs_inter_collective(&a, comm, p, &ctx);
}
