/* preload.h - the preload library's C path, shared by its C wrappers (preload.c) and its
 * Fortran entry points (preload_fortran.c), so that a Fortran call is served exactly as the
 * same call from C: one decision (straight to the MPI library, or to collsched), one
 * selection and fallback (collectives.c). Internal: linked only into
 * libcollsched-preload.so, not installed. */
#ifndef COLLSCHED_PRELOAD_H
#define COLLSCHED_PRELOAD_H

#include "runtime.h"

/* MPI_Allgather(v) as the preload serves it; site is the caller's return address (the
 * call site of the arrival trace and of a schedule cache). */
int cs_preload_allgather(const void *site, const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                         void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm);
int cs_preload_allgatherv(const void *site, const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                          void *recvbuf, const int recvcounts[], const int displs[],
                          MPI_Datatype recvtype, MPI_Comm comm);
/* MPI_Alltoall, MPI_Bcast, MPI_Reduce, MPI_Allreduce as the preload serves them: the
 * MPI library's own unless a schedule source is configured, else coll_call.c. */
int cs_preload_alltoall(const void *site, const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                        void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm);
int cs_preload_bcast(const void *site, void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm);
int cs_preload_reduce(const void *site, const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype,
                      MPI_Op op, int root, MPI_Comm comm);
int cs_preload_allreduce(const void *site, const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype,
                         MPI_Op op, MPI_Comm comm);
/* PMPI_Init(_thread), then the arrival trace's start estimate of the clocks. */
int cs_preload_init(int *argc, char ***argv);
int cs_preload_init_thread(int *argc, char ***argv, int required, int *provided);
/* collsched_finalize (trace, cache statistics), then PMPI_Finalize. */
int cs_preload_finalize(void);

#endif
