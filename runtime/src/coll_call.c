/* coll_call.c - collsched_alltoall, collsched_bcast, collsched_reduce and
 * collsched_allreduce: check the call, pick a schedule (coll_state.c), lay the data out
 * and run the executor (coll_exec.c); otherwise run the MPI library's own collective
 * (PMPI: the preload wrappers never recurse), or in strict mode refuse the call through
 * the communicator's error handler.
 *
 * Every decision that makes a rank fall back is one MPI requires to be the same on all
 * ranks (communicator, size in bytes, root, operation, and for reductions count and
 * datatype), so the ranks never disagree on whether a schedule runs. Alltoall and bcast
 * move bytes: a datatype whose elements are one run of bytes (datatype.c) is used in place,
 * any other is packed into a staging buffer by MPI (a message to oneself) and unpacked
 * after the schedule, as collectives.c does for allgather. Reductions keep the datatype's
 * own layout (element i at i * extent): messages and MPI_Reduce_local use the datatype
 * itself, so derived datatypes and user-defined operations work as MPI defines them.
 */
#include "coll_exec.h"

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

/* An intracommunicator (intercommunicators: the MPI library's collective). */
static int intra(MPI_Comm comm)
{
    int inter = 1;
    return comm != MPI_COMM_NULL && PMPI_Comm_test_inter(comm, &inter) == MPI_SUCCESS && !inter;
}

/* The schedule for the call: 1 run it; 0 the MPI library's collective; -1 failed with *rc
 * (an MPI error, or the strict mode's refusal, through the error handler). */
static int choose(cs_coll_comm *st, const cs_coll_need *need, const char *name, MPI_Comm comm,
                  cs_coll_choice *ch, int *rc)
{
    *rc = cs_coll_select(st, need, ch);
    if (*rc != MPI_SUCCESS) {
        raise_error(comm, *rc);
        return -1;
    }
    if (ch->plan) return 1;
    if (!cs_strict() || !ch->claimed) return 0; /* strict: only for collectives the source serves */
    cs_coll_refused(st, name, need->bytes);
    *rc = raise_error(comm, MPI_ERR_OTHER);
    return -1;
}

/* ---- alltoall ---- */

/* n elements of t at buf as `bytes` contiguous bytes: the buffer itself (*view) when t is
 * a run, else a staging buffer (*stage, malloc'ed), packed by MPI if `pack`. */
static int byte_view(const void *buf, int n, MPI_Datatype t, uint64_t bytes, int pack, MPI_Comm priv, int me,
                     char **view, char **stage)
{
    MPI_Aint off = 0;
    *stage = NULL;
    if (bytes == 0 || cs_type_run(t, &off)) {
        *view = (char *)buf + (bytes ? off : 0);
        return MPI_SUCCESS;
    }
    if (bytes > SIZE_MAX || !(*stage = malloc((size_t)bytes))) return MPI_ERR_NO_MEM;
    *view = *stage;
    return pack ? cs_copy_bytes(buf, n, t, *stage, bytes, 1, priv, me) : MPI_SUCCESS;
}

static int run_alltoall(const cs_coll_choice *ch, const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                        void *recvbuf, int recvcount, MPI_Datatype recvtype, int me, int P, uint64_t block)
{
    uint64_t all = block * (uint64_t)P;
    char *recv = NULL, *rstage = NULL, *send = NULL, *sstage = NULL, *copy = NULL;
    int rc = MPI_SUCCESS;
    if ((uint64_t)P * (uint64_t)(recvcount > 0 ? recvcount : 0) > INT_MAX
        || (sendbuf != MPI_IN_PLACE && (uint64_t)P * (uint64_t)(sendcount > 0 ? sendcount : 0) > INT_MAX))
        return MPI_ERR_COUNT;
    int in_place = sendbuf == MPI_IN_PLACE;
    /* in place: the receive buffer's data is packed (if need be) and copied to scratch first */
    rc = byte_view(recvbuf, P * recvcount, recvtype, all, in_place, ch->comm, me, &recv, &rstage);
    if (rc == MPI_SUCCESS && in_place && all) {
        if (all > SIZE_MAX || !(copy = malloc((size_t)all))) rc = MPI_ERR_NO_MEM;
        else memcpy(copy, recv, (size_t)all);
        send = copy;
    } else if (rc == MPI_SUCCESS && !in_place) {
        rc = byte_view(sendbuf, P * sendcount, sendtype, all, 1, ch->comm, me, &send, &sstage);
    }
    if (rc == MPI_SUCCESS && block) memmove(recv + (uint64_t)me * block, send + (uint64_t)me * block, (size_t)block);
    cs_coll_buf b = { send, recv, NULL, block, MPI_BYTE, MPI_OP_NULL, 1, 0, 1, 1, 0, 1 };
    if (rc == MPI_SUCCESS) rc = cs_coll_execute(ch->plan, ch->comm, &b, ch->reqs);
    if (rc == MPI_SUCCESS && rstage) rc = cs_copy_bytes(recvbuf, P * recvcount, recvtype, rstage, all, 0, ch->comm, me);
    free(rstage);
    free(sstage);
    free(copy);
    return rc;
}

int cs_alltoall_at(const void *site, const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                   void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm)
{
    (void)site;
    cs_call_label_take();
    uint64_t esize, ssize, block;
    cs_coll_comm *st;
    if (!cs_source_configured() || !intra(comm) || recvcount < 0 || !type_bytes(recvtype, &esize))
        goto pmpi;
    block = (uint64_t)recvcount * esize;
    if (sendbuf != MPI_IN_PLACE && (sendcount < 0 || !type_bytes(sendtype, &ssize)
                                    || (uint64_t)sendcount * ssize != block))
        goto pmpi; /* erroneous: MPI reports it */
    int rc = cs_coll_state(comm, &st);
    if (rc != MPI_SUCCESS) return raise_error(comm, rc);
    cs_coll_need need = { CS_COLL_ALLTOALL, 0, block, block, 0 };
    cs_coll_choice ch;
    int how = choose(st, &need, "MPI_Alltoall", comm, &ch, &rc);
    if (how < 0) return rc;
    if (how == 0) goto pmpi;
    return raise_error(comm, run_alltoall(&ch, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype,
                                          cs_coll_rank(st), cs_coll_size(st), block));
pmpi:
    return PMPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}

int collsched_alltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
                       MPI_Datatype recvtype, MPI_Comm comm)
{
    return cs_alltoall_at(__builtin_return_address(0), sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype,
                          comm);
}

/* ---- bcast ---- */

int cs_bcast_at(const void *site, void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm)
{
    (void)site;
    cs_call_label_take();
    uint64_t esize, bytes;
    cs_coll_comm *st;
    if (!cs_source_configured() || !intra(comm) || count < 0 || !type_bytes(datatype, &esize) || root < 0)
        goto pmpi;
    int rc = cs_coll_state(comm, &st);
    if (rc != MPI_SUCCESS) return raise_error(comm, rc);
    int me = cs_coll_rank(st);
    if (root >= cs_coll_size(st)) goto pmpi;
    bytes = (uint64_t)count * esize;
    cs_coll_need need = { CS_COLL_BCAST, (uint32_t)root, bytes, bytes, 0 };
    cs_coll_choice ch;
    int how = choose(st, &need, "MPI_Bcast", comm, &ch, &rc);
    if (how < 0) return rc;
    if (how == 0) goto pmpi;
    char *view, *stage;
    rc = byte_view(buffer, count, datatype, bytes, me == root, ch.comm, me, &view, &stage);
    cs_coll_buf b = { NULL, view, NULL, bytes, MPI_BYTE, MPI_OP_NULL, 1, 0, 1, 1, 0, 1 };
    if (rc == MPI_SUCCESS) rc = cs_coll_execute(ch.plan, ch.comm, &b, ch.reqs);
    if (rc == MPI_SUCCESS && stage && me != root) rc = cs_copy_bytes(buffer, count, datatype, stage, bytes, 0, ch.comm, me);
    free(stage);
    return raise_error(comm, rc);
pmpi:
    return PMPI_Bcast(buffer, count, datatype, root, comm);
}

int collsched_bcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm)
{
    return cs_bcast_at(__builtin_return_address(0), buffer, count, datatype, root, comm);
}

/* ---- reduce, allreduce ---- */

/* The datatype's layout for the executor; 0 if the runtime cannot serve it (the same
 * answer on every rank: reductions use one datatype everywhere). */
static int elem_layout(MPI_Datatype t, MPI_Op op, cs_coll_buf *b)
{
    MPI_Aint lb;
    memset(b, 0, sizeof *b);
    b->type = t;
    b->op = op;
    if (!type_bytes(t, &b->esize) || PMPI_Type_get_extent(t, &lb, &b->extent) != MPI_SUCCESS
        || PMPI_Type_get_true_extent(t, &b->true_lb, &b->true_extent) != MPI_SUCCESS)
        return 0;
    if (b->esize == 0 || b->extent <= 0 || b->true_extent <= 0) return 0;
    b->run = cs_type_run(t, &b->run_off);
    return 1;
}

typedef struct red_call {
    const char *name;
    const void *sendbuf;
    void *recvbuf;
    int count;
    MPI_Datatype type;
    MPI_Op op;
    int root;                   /* -1: allreduce */
    MPI_Comm comm;
} red_call;

static int run_reduce(const red_call *r, const cs_coll_choice *ch, cs_coll_buf *b, int me)
{
    char *mem = NULL;
    int rc = MPI_SUCCESS;
    int holder = r->root < 0 || r->root == me; /* the result lands in recvbuf */
    if (holder) {
        b->acc = r->recvbuf;
        if (r->sendbuf != MPI_IN_PLACE)
            rc = cs_coll_copy_elems(b, ch->comm, me, r->sendbuf, r->recvbuf, (uint64_t)r->count);
    } else {
        rc = cs_coll_alloc_elems(b, (uint64_t)r->count, &mem, &b->acc);
        if (rc == MPI_SUCCESS && r->count)  /* scratch: the whole span, holes included */
            memcpy(b->acc + b->true_lb, (const char *)r->sendbuf + b->true_lb,
                   (size_t)(((uint64_t)r->count - 1) * (uint64_t)b->extent + (uint64_t)b->true_extent));
    }
    if (rc == MPI_SUCCESS) rc = cs_coll_execute(ch->plan, ch->comm, b, ch->reqs);
    free(mem);
    return rc;
}

/* A predefined operation on a derived datatype: Open MPI refuses it (MPI_ERR_OP), as it
 * may; the MPI library's collective reports it. */
static int predefined_on_derived(MPI_Op op, MPI_Datatype t)
{
    static const MPI_Op ops[] = { MPI_MAX, MPI_MIN, MPI_SUM, MPI_PROD, MPI_LAND, MPI_BAND, MPI_LOR, MPI_BOR,
                                  MPI_LXOR, MPI_BXOR, MPI_MAXLOC, MPI_MINLOC, MPI_REPLACE };
    int ni, na, nd, comb, predefined = 0;
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) predefined |= op == ops[i];
    return predefined && (PMPI_Type_get_envelope(t, &ni, &na, &nd, &comb) != MPI_SUCCESS || comb != MPI_COMBINER_NAMED);
}

static int reduction(const red_call *r)
{
    cs_coll_comm *st;
    cs_coll_buf b;
    int commute = 1;
    if (!cs_source_configured() || !intra(r->comm) || r->count < 0 || r->op == MPI_OP_NULL
        || predefined_on_derived(r->op, r->type) || !elem_layout(r->type, r->op, &b) || PMPI_Op_commutative(r->op, &commute) != MPI_SUCCESS)
        goto pmpi;
    int rc = cs_coll_state(r->comm, &st);
    if (rc != MPI_SUCCESS) return raise_error(r->comm, rc);
    int me = cs_coll_rank(st);
    if (r->root >= cs_coll_size(st)) goto pmpi;
    if (r->sendbuf == MPI_IN_PLACE && r->root >= 0 && me != r->root) goto pmpi; /* erroneous */
    b.n = (uint64_t)r->count;
    cs_coll_need need = { r->root < 0 ? CS_COLL_ALLREDUCE : CS_COLL_REDUCE, r->root < 0 ? 0 : (uint32_t)r->root,
                          b.n * b.esize, b.n, !commute };
    cs_coll_choice ch;
    int how = choose(st, &need, r->name, r->comm, &ch, &rc);
    if (how < 0) return rc;
    if (how == 0) goto pmpi;
    return raise_error(r->comm, run_reduce(r, &ch, &b, me));
pmpi:
    if (r->root < 0) return PMPI_Allreduce(r->sendbuf, r->recvbuf, r->count, r->type, r->op, r->comm);
    return PMPI_Reduce(r->sendbuf, r->recvbuf, r->count, r->type, r->op, r->root, r->comm);
}

int cs_reduce_at(const void *site, const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                 int root, MPI_Comm comm)
{
    (void)site;
    cs_call_label_take();
    if (root < 0) return PMPI_Reduce(sendbuf, recvbuf, count, datatype, op, root, comm);
    red_call r = { "MPI_Reduce", sendbuf, recvbuf, count, datatype, op, root, comm };
    return reduction(&r);
}

int cs_allreduce_at(const void *site, const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype,
                    MPI_Op op, MPI_Comm comm)
{
    (void)site;
    cs_call_label_take();
    red_call r = { "MPI_Allreduce", sendbuf, recvbuf, count, datatype, op, -1, comm };
    return reduction(&r);
}

int collsched_reduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, int root,
                     MPI_Comm comm)
{
    return cs_reduce_at(__builtin_return_address(0), sendbuf, recvbuf, count, datatype, op, root, comm);
}

int collsched_allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                        MPI_Comm comm)
{
    return cs_allreduce_at(__builtin_return_address(0), sendbuf, recvbuf, count, datatype, op, comm);
}
