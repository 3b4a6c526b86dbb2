/* preload.c - PMPI wrappers: LD_PRELOAD=libcollsched-preload.so makes an unmodified
 * program's MPI_Allgather and MPI_Allgatherv run a matching schedule from
 * COLLSCHED_SCHEDULES, and records them in the arrival trace with COLLSCHED_ARRIVALS
 * (a program that runs the PAT engine gets its served allgather from it, as through
 * collsched_allgather). Without any of these every call goes straight to the MPI
 * library: preloading alone changes no call (MPI_Finalize adds one small allreduce, the
 * ranks' agreement on whether COLLSCHED_STATS is wanted anywhere: cache.c).
 * MPI_Alltoall, MPI_Bcast, MPI_Reduce and MPI_Allreduce are served the same way by
 * schedules of file format 1.2 (coll_call.c); they are not traced.
 * The cs_preload_* functions are the path itself; the Fortran entry points
 * (preload_fortran.c) call them too. */
#include "preload.h"

#include "coll_exec.h"

/* Nothing asks for collsched: the call is the MPI library's, untouched. */
static int bypass(void)
{
    return !cs_source_configured() && !cs_arrivals_enabled() && !cs_pat_active();
}

int cs_preload_allgather(const void *site, const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                         void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm)
{
    if (bypass())
        return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
    return cs_allgather_at(site, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}

int cs_preload_allgatherv(const void *site, const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                          void *recvbuf, const int recvcounts[], const int displs[],
                          MPI_Datatype recvtype, MPI_Comm comm)
{
    if (bypass())
        return PMPI_Allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs,
                               recvtype, comm);
    return cs_allgatherv_at(site, sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs,
                            recvtype, comm);
}

/* The collectives beyond allgather: only a schedule source makes them ours. */
int cs_preload_alltoall(const void *site, const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                        void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm)
{
    if (!cs_source_configured())
        return PMPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
    return cs_alltoall_at(site, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}

int cs_preload_bcast(const void *site, void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm)
{
    if (!cs_source_configured()) return PMPI_Bcast(buffer, count, datatype, root, comm);
    return cs_bcast_at(site, buffer, count, datatype, root, comm);
}

int cs_preload_reduce(const void *site, const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype,
                      MPI_Op op, int root, MPI_Comm comm)
{
    if (!cs_source_configured()) return PMPI_Reduce(sendbuf, recvbuf, count, datatype, op, root, comm);
    return cs_reduce_at(site, sendbuf, recvbuf, count, datatype, op, root, comm);
}

int cs_preload_allreduce(const void *site, const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype,
                         MPI_Op op, MPI_Comm comm)
{
    if (!cs_source_configured()) return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
    return cs_allreduce_at(site, sendbuf, recvbuf, count, datatype, op, comm);
}

/* The arrival trace's clocks are estimated at start (docs/trace-format.md). */
int cs_preload_init(int *argc, char ***argv)
{
    int rc = PMPI_Init(argc, argv);
    if (rc == MPI_SUCCESS) cs_arrivals_start();
    return rc;
}

int cs_preload_init_thread(int *argc, char ***argv, int required, int *provided)
{
    int rc = PMPI_Init_thread(argc, argv, required, provided);
    if (rc == MPI_SUCCESS) cs_arrivals_start();
    return rc;
}

/* The arrival trace and the cache statistics are written while MPI still works. */
int cs_preload_finalize(void)
{
    collsched_finalize();
    return PMPI_Finalize();
}

COLLSCHED_API int MPI_Allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                  int recvcount, MPI_Datatype recvtype, MPI_Comm comm)
{
    return cs_preload_allgather(__builtin_return_address(0), sendbuf, sendcount, sendtype, recvbuf,
                                recvcount, recvtype, comm);
}

COLLSCHED_API int MPI_Allgatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                   const int recvcounts[], const int displs[], MPI_Datatype recvtype, MPI_Comm comm)
{
    return cs_preload_allgatherv(__builtin_return_address(0), sendbuf, sendcount, sendtype, recvbuf,
                                 recvcounts, displs, recvtype, comm);
}

COLLSCHED_API int MPI_Alltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                               int recvcount, MPI_Datatype recvtype, MPI_Comm comm)
{
    return cs_preload_alltoall(__builtin_return_address(0), sendbuf, sendcount, sendtype, recvbuf, recvcount,
                               recvtype, comm);
}

COLLSCHED_API int MPI_Bcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm)
{
    return cs_preload_bcast(__builtin_return_address(0), buffer, count, datatype, root, comm);
}

COLLSCHED_API int MPI_Reduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                             int root, MPI_Comm comm)
{
    return cs_preload_reduce(__builtin_return_address(0), sendbuf, recvbuf, count, datatype, op, root, comm);
}

COLLSCHED_API int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                                MPI_Comm comm)
{
    return cs_preload_allreduce(__builtin_return_address(0), sendbuf, recvbuf, count, datatype, op, comm);
}

COLLSCHED_API int MPI_Init(int *argc, char ***argv)
{
    return cs_preload_init(argc, argv);
}

COLLSCHED_API int MPI_Init_thread(int *argc, char ***argv, int required, int *provided)
{
    return cs_preload_init_thread(argc, argv, required, provided);
}

COLLSCHED_API int MPI_Finalize(void)
{
    return cs_preload_finalize();
}
