/* preload.c - PMPI wrappers: LD_PRELOAD=libcollsched-preload.so makes an unmodified
 * program's MPI_Allgather and MPI_Allgatherv run a matching schedule from
 * COLLSCHED_SCHEDULES, and records them in the arrival trace with COLLSCHED_ARRIVALS
 * (a program that runs the PAT engine gets its served allgather from it, as through
 * collsched_allgather). Without any of these every call goes straight to the MPI
 * library: preloading alone changes no call (MPI_Finalize adds one small allreduce, the
 * ranks' agreement on whether COLLSCHED_STATS is wanted anywhere: cache.c). */
#include "runtime.h"

COLLSCHED_API int MPI_Allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                  int recvcount, MPI_Datatype recvtype, MPI_Comm comm)
{
    if (!cs_source_configured() && !cs_arrivals_enabled() && !cs_pat_active())
        return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
    return cs_allgather_at(__builtin_return_address(0), sendbuf, sendcount, sendtype, recvbuf,
                           recvcount, recvtype, comm);
}

COLLSCHED_API int MPI_Allgatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                   const int recvcounts[], const int displs[], MPI_Datatype recvtype, MPI_Comm comm)
{
    if (!cs_source_configured() && !cs_arrivals_enabled() && !cs_pat_active())
        return PMPI_Allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs,
                               recvtype, comm);
    return cs_allgatherv_at(__builtin_return_address(0), sendbuf, sendcount, sendtype, recvbuf,
                            recvcounts, displs, recvtype, comm);
}

/* The arrival trace's clocks are estimated at start (docs/trace-format.md). */
COLLSCHED_API int MPI_Init(int *argc, char ***argv)
{
    int rc = PMPI_Init(argc, argv);
    if (rc == MPI_SUCCESS) cs_arrivals_start();
    return rc;
}

COLLSCHED_API int MPI_Init_thread(int *argc, char ***argv, int required, int *provided)
{
    int rc = PMPI_Init_thread(argc, argv, required, provided);
    if (rc == MPI_SUCCESS) cs_arrivals_start();
    return rc;
}

/* The arrival trace and the cache statistics are written while MPI still works. */
COLLSCHED_API int MPI_Finalize(void)
{
    collsched_finalize();
    return PMPI_Finalize();
}
