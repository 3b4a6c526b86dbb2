/* An ordinary MPI program for strict mode (run under the preload library with
 * COLLSCHED_STRICT=1 and schedules that do not serve its calls):
 *   strict_app return [inter]   MPI_ERRORS_RETURN: MPI_Allgather and MPI_Allgatherv must
 *                               return an error of class MPI_ERR_OTHER; then, with an error
 *                               handler of its own, that handler must be called once per
 *                               call with that error. Prints "strict_app: OK" on rank 0.
 *   strict_app fatal [inter]    the default handler (MPI_ERRORS_ARE_FATAL): the job must
 *                               abort in MPI_Allgather; prints "strict_app: returned" if not.
 * With "inter", the calls are on an intercommunicator between the even and odd ranks (the
 * schedules given serve no intergroup call: an allgather file only). */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

static int handled, handled_code;

static void count_errors(MPI_Comm *comm, int *code, ...)
{
    (void)comm;
    handled++;
    handled_code = *code;
}

static int error_class(int rc)
{
    int cls = rc;
    if (rc != MPI_SUCCESS) MPI_Error_class(rc, &cls);
    return cls;
}

/* Both collectives, 4 ints per rank; returns the error classes. */
static void both(MPI_Comm comm, int cls[2])
{
    int P, send[4] = { 1, 2, 3, 4 }, recv[4 * 64], counts[64], displs[64];
    MPI_Comm_test_inter(comm, &P);
    if (P) MPI_Comm_remote_size(comm, &P);
    else MPI_Comm_size(comm, &P);
    for (int i = 0; i < P && i < 64; i++) {
        counts[i] = 4;
        displs[i] = 4 * i;
    }
    cls[0] = error_class(MPI_Allgather(send, 4, MPI_INT, recv, 4, MPI_INT, comm));
    cls[1] = error_class(MPI_Allgatherv(send, 4, MPI_INT, recv, counts, displs, MPI_INT, comm));
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size, fatal = argc > 1 && strcmp(argv[1], "fatal") == 0;
    int inter = argc > 2 && strcmp(argv[2], "inter") == 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm comm = MPI_COMM_WORLD, half = MPI_COMM_NULL;
    if (inter) {
        MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
        MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, rank % 2 ? 0 : 1, 7, &comm);
    }
    int cls[2], ok = 1;
    if (fatal) {
        both(comm, cls);
        printf("strict_app: returned (rank %d, classes %d %d)\n", rank, cls[0], cls[1]);
    } else {
        MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
        both(comm, cls);
        ok &= cls[0] == MPI_ERR_OTHER && cls[1] == MPI_ERR_OTHER;
        MPI_Errhandler eh;
        MPI_Comm_create_errhandler(count_errors, &eh);
        MPI_Comm_set_errhandler(comm, eh);
        both(comm, cls);
        ok &= handled == 2 && error_class(handled_code) == MPI_ERR_OTHER;
        ok &= cls[0] == MPI_ERR_OTHER && cls[1] == MPI_ERR_OTHER;
        MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
        MPI_Errhandler_free(&eh);
        if (!ok) printf("strict_app: rank %d: classes %d %d, handler called %d times\n", rank, cls[0], cls[1], handled);
    }
    int all;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    if (rank == 0) printf("strict_app: %s\n", all ? "OK" : "FAILED");
    if (inter) {
        MPI_Comm_free(&comm);
        MPI_Comm_free(&half);
    }
    MPI_Finalize();
    return all ? 0 : 1;
}
