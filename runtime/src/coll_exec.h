/* coll_exec.h - the MPI side of the collectives beyond allgather (alltoall, bcast, reduce,
 * allreduce; schedule files 1.2): the executor (coll_exec.c), the per-communicator state
 * and selection (coll_state.c) and the calls (coll_call.c), shared with preload.c and
 * collsched_run.c. Not installed. Rules: docs/semantics.md "Collectives beyond allgather";
 * the runtime's side: docs/runtime.md "Alltoall, bcast, reduce and allreduce". */
#ifndef COLLSCHED_COLL_EXEC_H
#define COLLSCHED_COLL_EXEC_H

#include "coll.h"
#include "runtime.h"

/* ---- coll_exec.c ---- */

/* One rank's section walked once at load: every piece occurrence's distinct piece, the
 * receives each operation must settle first (a send: the earlier receives that write its
 * pieces; a receive: the earlier receives of the same pieces), the sends a receive waits
 * for before applying (earlier sends reading its pieces), FIFO predecessors, and for
 * alltoall the scratch slot of every relayed piece. */
typedef struct cs_coll_plan cs_coll_plan;
/* 0, or -1 with one line in err (memory; a peer out of range). */
int cs_coll_plan_build(const cs_coll_section *s, cs_coll_plan **out, char *err, size_t len);
void cs_coll_plan_free(cs_coll_plan *p);
const cs_coll_section *cs_coll_plan_section(const cs_coll_plan *p);
/* Most pieces one operation of the section carries. */
uint32_t cs_coll_plan_max_pieces(const cs_coll_plan *p);

/* Where a call's data lives. Alltoall and bcast count bytes: `send` holds the P blocks of
 * `n` bytes this rank sends (alltoall), `recv` the P blocks it receives (alltoall) or the
 * whole buffer of n bytes (bcast). Reductions count elements of `type`: `acc` is the
 * accumulator of n elements (element i at acc + i * extent), holding this rank's
 * contribution on entry and the result on exit. */
typedef struct cs_coll_buf {
    const char *send;
    char *recv;
    char *acc;
    uint64_t n;
    MPI_Datatype type;
    MPI_Op op;
    MPI_Aint extent, true_lb, true_extent;
    int run;                  /* elements of type are one run of bytes (cs_type_run) ... */
    MPI_Aint run_off;         /* ... starting this far from the address */
    uint64_t esize;           /* bytes of one element */
} cs_coll_buf;

/* Runs the section (rules 1-6) on comm (the state's private communicator); reqs holds one
 * request per op. Returns an MPI error code; no request outlives the call. The plan keeps
 * the call's scratch for the next call (one call at a time per plan: per communicator). */
int cs_coll_execute(cs_coll_plan *p, MPI_Comm comm, const cs_coll_buf *b, MPI_Request *reqs);

/* count elements of b->type from src to dst (a memcpy for a run, else a message to oneself
 * on comm: holes are never written). */
int cs_coll_copy_elems(const cs_coll_buf *b, MPI_Comm comm, int rank, const void *src, void *dst,
                       uint64_t count);
/* Bytes a buffer of count elements of b->type spans, and its allocation (caller frees
 * *mem; the buffer's address is *mem - true_lb). */
int cs_coll_alloc_elems(const cs_coll_buf *b, uint64_t count, char **mem, char **buf);

/* ---- coll_state.c ---- */

typedef struct cs_coll_comm cs_coll_comm;
/* The communicator's state, created on first use (collective over comm): a private
 * communicator and the 1.2 schedules of the source, agreed on by every rank. */
int cs_coll_state(MPI_Comm comm, cs_coll_comm **out);

typedef struct cs_coll_need {
    uint32_t collective;      /* CS_COLL_ALLTOALL .. CS_COLL_ALLREDUCE */
    uint32_t root;
    uint64_t bytes;           /* one alltoall block / the whole vector */
    uint64_t units;           /* bytes (alltoall, bcast) or elements (reductions) */
    int noncommutative;       /* the operation is not commutative */
} cs_coll_need;

typedef struct cs_coll_choice {
    cs_coll_plan *plan;       /* NULL: fall back (reason recorded) */
    MPI_Comm comm;
    MPI_Request *reqs;
    const char *path;
    int claimed;              /* the source has schedules of this collective (or a broken
                                 1.2 file): strict mode refuses a call none serves */
} cs_coll_choice;

/* The schedule for a call: the same decision on every rank of a correct call; collective
 * only on a file's first use (loaded everywhere, proven whole on rank 0, agreed). */
int cs_coll_select(cs_coll_comm *st, const cs_coll_need *need, cs_coll_choice *ch);
/* Strict mode: rank 0 says once per communicator what was refused and why (collective). */
void cs_coll_refused(cs_coll_comm *st, const char *call, uint64_t bytes);
int cs_coll_rank(const cs_coll_comm *st);
int cs_coll_size(const cs_coll_comm *st);
MPI_Comm cs_coll_private(const cs_coll_comm *st);
/* What the last call of these four on comm did and when (a stamp of cs_call_stamp);
 * 0 if none ran there. collsched_last_call answers with the latest of this and the
 * allgather state's record. */
int cs_coll_last_call(MPI_Comm comm, collsched_call_info *info, uint64_t *stamp);
/* A process-wide increasing counter: the order of the calls' records. */
uint64_t cs_call_stamp(void);

/* ---- coll_call.c: the calls with their call site (the preload library's entry) ---- */
int cs_alltoall_at(const void *site, const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                   void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm);
int cs_bcast_at(const void *site, void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm);
int cs_reduce_at(const void *site, const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype,
                 MPI_Op op, int root, MPI_Comm comm);
int cs_allreduce_at(const void *site, const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype,
                    MPI_Op op, MPI_Comm comm);

#endif
