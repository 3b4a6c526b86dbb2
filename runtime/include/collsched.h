/* collsched.h - run compiled collective schedules (.sched files) inside MPI.
 *
 * Two ways to use it:
 *   1. call collsched_allgather / collsched_allgatherv instead of MPI_Allgather(v);
 *   2. LD_PRELOAD libcollsched-preload.so: an unmodified program's MPI_Allgather(v)
 *      goes through the same code.
 * Either way the schedules come from COLLSCHED_SCHEDULES (a file or a directory) or from
 * collsched_set_schedules(). A call no schedule serves runs the MPI library's own
 * collective (unless COLLSCHED_STRICT=1). Documentation: docs/runtime.md.
 */
#ifndef COLLSCHED_H
#define COLLSCHED_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "collsched_schedfile.h"

#ifdef __cplusplus
extern "C" {
#endif

#define COLLSCHED_VERSION "0.1.0"

/* Drop-in replacements: same arguments and MPI error codes as MPI_Allgather(v). */
int collsched_allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                        void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm);
int collsched_allgatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                         void *recvbuf, const int recvcounts[], const int displs[],
                         MPI_Datatype recvtype, MPI_Comm comm);

/* Where schedules come from (a .sched file or a directory of them); overrides
 * COLLSCHED_SCHEDULES for communicators first used after this call. NULL restores the
 * environment variable. Returns MPI_SUCCESS. */
int collsched_set_schedules(const char *path);

/* What the last collsched call on `comm` did. */
typedef struct collsched_call_info {
    int used_schedule;    /* 1: a schedule ran; 0: the MPI library's collective ran */
    char schedule[256];   /* path of the schedule file used, "" if none */
    char reason[256];     /* why no schedule ran, "" if one did */
} collsched_call_info;
int collsched_last_call(MPI_Comm comm, collsched_call_info *info);

#ifdef __cplusplus
}
#endif
#endif /* COLLSCHED_H */
