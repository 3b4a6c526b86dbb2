/* collsched.h - run compiled collective schedules (.sched files) inside MPI.
 *
 * Two ways to use it:
 *   1. call collsched_allgather / collsched_allgatherv instead of MPI_Allgather(v);
 *   2. LD_PRELOAD libcollsched-preload.so: an unmodified program's MPI_Allgather(v)
 *      goes through the same code.
 * Either way the schedules come from COLLSCHED_SCHEDULES (a file or a directory) or from
 * collsched_set_schedules(). A call no schedule serves runs the MPI library's own
 * collective (unless COLLSCHED_STRICT=1). Intercommunicators are served too, by intergroup
 * schedules (collectives 3 and 4). Documentation: docs/runtime.md.
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

/* The library is built with -fvisibility=hidden: only what carries COLLSCHED_API (defined
 * in collsched_schedfile.h: this header, that one and the MPI_* wrappers of the preload
 * library) is exported. */

/* Drop-in replacements: same arguments and MPI error codes as MPI_Allgather(v). */
COLLSCHED_API int collsched_allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                        void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm);
COLLSCHED_API int collsched_allgatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                         void *recvbuf, const int recvcounts[], const int displs[],
                         MPI_Datatype recvtype, MPI_Comm comm);

/* The intercommunicator MPI_Allgather(v) on an intracommunicator split in two groups:
 * ranks 0..p-1 of comm are group A, p..size-1 group B (1 <= p < size), and each rank gets
 * the other group's blocks only, exactly as on an intercommunicator of those groups
 * (recvcount / recvcounts / displs describe the remote group, indexed by remote rank).
 * For simulators without MPI_Intercomm_create (SimGrid SMPI): the same intergroup
 * schedules, strict mode and fallback (a root gathering built from the MPI library's
 * gather, sendrecv and bcast on the two groups). MPI error codes, as MPI_Allgather(v). */
COLLSCHED_API int collsched_inter_allgather_merged(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                                     void *recvbuf, int recvcount, MPI_Datatype recvtype,
                                     MPI_Comm comm, int p);
COLLSCHED_API int collsched_inter_allgatherv_merged(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                                      void *recvbuf, const int recvcounts[], const int displs[],
                                      MPI_Datatype recvtype, MPI_Comm comm, int p);

/* Collectives beyond allgather (schedule file format 1.2, docs/collectives.md): same
 * arguments and MPI error codes as the MPI functions, same selection, whole-schedule
 * proof and fallback as collsched_allgather. A schedule serves a call when it was compiled
 * for that collective, communicator size, root (bcast, reduce) and size in bytes (one
 * alltoall block; the whole vector otherwise); a schedule marked commutative-only never
 * serves a non-commutative operation. MPI_IN_PLACE as MPI allows it. */
COLLSCHED_API int collsched_alltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                       void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm);
COLLSCHED_API int collsched_bcast(void *buffer, int count, MPI_Datatype datatype, int root,
                    MPI_Comm comm);
COLLSCHED_API int collsched_reduce(const void *sendbuf, void *recvbuf, int count,
                     MPI_Datatype datatype, MPI_Op op, int root, MPI_Comm comm);
COLLSCHED_API int collsched_allreduce(const void *sendbuf, void *recvbuf, int count,
                        MPI_Datatype datatype, MPI_Op op, MPI_Comm comm);

/* Where schedules come from (a .sched file or a directory of them); overrides
 * COLLSCHED_SCHEDULES for communicators first used after this call. NULL restores the
 * environment variable. Returns MPI_SUCCESS. */
COLLSCHED_API int collsched_set_schedules(const char *path);

/* What the last collsched call on `comm` did. */
typedef struct collsched_call_info {
    int used_schedule;    /* 1: a schedule ran; 0: the MPI library's collective ran */
    char schedule[256];   /* path of the schedule file used, "" if none */
    char reason[256];     /* why no schedule ran, "" if one did */
} collsched_call_info;
COLLSCHED_API int collsched_last_call(MPI_Comm comm, collsched_call_info *info);

/* The call site's name for this thread's next collsched call only (the arrival trace and
 * the schedule cache key calls by it; without one, the caller's function+offset as dladdr
 * resolves it, or module+offset). 1 to 63 printable ASCII characters, no spaces; NULL or ""
 * clears it. Returns MPI_SUCCESS or MPI_ERR_ARG (the label is then unchanged). */
COLLSCHED_API int collsched_label(const char *label);

/* Writes what the runtime keeps for the end of the job: the arrival trace
 * (COLLSCHED_ARRIVALS) and the cache statistics (COLLSCHED_STATS). Collective over
 * MPI_COMM_WORLD, before MPI_Finalize; idempotent; calls after it are not traced. The
 * preload library calls it from its MPI_Finalize; under Open MPI the runtime also does at
 * MPI_Finalize if nobody did (once a traced call ran on a communicator of every world
 * rank). Under SimGrid SMPI the program must call it: SMPI refuses MPI calls there. */
COLLSCHED_API int collsched_finalize(void);

/* ---- The PAT API (BDR paper, Proficz 2021, section 3; docs/pat.md) ----
 * Arrival-pattern-aware allgather: the application marks its computation phase, a
 * background engine predicts every rank's arrival at the allgather, and the schedule's
 * pre-steps move early data before the late ranks even call it. All return MPI codes.
 *
 *   PAT_Init()                 after MPI_Init (MPI_THREAD_MULTIPLE: a progress thread
 *                              drives the engine; otherwise PAT_Progress/PAT_Sleep do)
 *   PAT_UseAlg("bdr")          BDR schedules built online for each predicted pattern;
 *              ("cache")       the schedule cache's entry (COLLSCHED_SCHEDULES=DIR, docs/
 *                              cache.md) for the predicted pattern's class, else online BDR;
 *                              any other name: compiled schedules named per iteration
 *                              with PAT_UseSchedule (e.g. bslb, arrival-aware min3)
 *   per iteration:  PAT_ProcessingStart(); compute; PAT_Edge(50.0); compute;
 *                   PAT_ProcessingEnd(); collsched_allgather(...) on the served comm
 *   PAT_Finalize()             before MPI_Finalize
 *
 * Every call of an iteration is collective in program order: all ranks make them, in the
 * same order. The served allgather is on a communicator with MPI_COMM_WORLD's ranks in
 * the same order; a call that does not fit falls back like any other. */
COLLSCHED_API int PAT_Init(void);
COLLSCHED_API int PAT_UseAlg(const char *algorithm);
COLLSCHED_API int PAT_ProcessingStart(void);
COLLSCHED_API int PAT_Edge(double percent);
COLLSCHED_API int PAT_ProcessingEnd(void);
COLLSCHED_API int PAT_Finalize(void);
/* collsched extensions. PAT_Declare: the allgather the engine serves - communicator,
 * bytes per rank, and tau (seconds to move one block; <= 0: COLLSCHED_PAT_TAU, else
 * learned from the first call). Without it the first call teaches comm and bytes and
 * runs without a background part. */
COLLSCHED_API int PAT_Declare(MPI_Comm comm, int bytes_per_rank, double tau_s);
/* A compiled schedule file for the next iteration (collective: loaded and proven like
 * any schedule). NULL clears it. */
COLLSCHED_API int PAT_UseSchedule(const char *path);
/* A persistent label: every collsched call of this thread is named `label` until
 * PAT_Label(NULL) or PAT_Label("") clears it (a collsched_label for one call takes
 * precedence for that call). Same rules and return codes as collsched_label. */
COLLSCHED_API int PAT_Label(const char *label);
/* Explicit progress (no progress thread): advance the engine / sleep in slices that do. */
COLLSCHED_API int PAT_Progress(void);
COLLSCHED_API int PAT_Sleep(double seconds);

#ifdef __cplusplus
}
#endif
#endif /* COLLSCHED_H */
