/* An ordinary MPI program (no collsched in it): MPI_Allgather and MPI_Allgatherv on
 * MPI_COMM_WORLD and on a split communicator, in place and not, with a contiguous derived
 * type and a non-contiguous one, repeated. Checks its own results; exit 0 = all correct.
 * The preload tests run it with and without libcollsched-preload.so. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

static int value(int origin, int k, int iter) { return origin * 100003 + k * 7 + iter * 13; }

static void check(const char *what, int ok)
{
    if (!ok) {
        failures++;
        fprintf(stderr, "allgather_app: wrong data in %s\n", what);
    }
}

/* MPI_Allgather of n ints per rank, normal and in place. */
static void gather_ints(MPI_Comm comm, int n, int iter)
{
    int rank, P;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &P);
    int *send = malloc(sizeof(int) * (n + 1)), *recv = malloc(sizeof(int) * ((size_t)n * P + 1));
    for (int k = 0; k < n; k++) send[k] = value(rank, k, iter);
    MPI_Allgather(send, n, MPI_INT, recv, n, MPI_INT, comm);
    int ok = 1;
    for (int o = 0; o < P; o++)
        for (int k = 0; k < n; k++) ok &= recv[o * n + k] == value(o, k, iter);
    check("MPI_Allgather", ok);
    memset(recv, 0, sizeof(int) * (size_t)n * P);
    for (int k = 0; k < n; k++) recv[rank * n + k] = value(rank, k, iter + 1);
    MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, n, MPI_INT, comm);
    ok = 1;
    for (int o = 0; o < P; o++)
        for (int k = 0; k < n; k++) ok &= recv[o * n + k] == value(o, k, iter + 1);
    check("MPI_Allgather in place", ok);
    free(send);
    free(recv);
}

/* MPI_Allgatherv with counts n - (o % 3) and one spare int between blocks. */
static void gather_v(MPI_Comm comm, int n, int iter)
{
    int rank, P;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &P);
    int *counts = malloc(sizeof(int) * P), *displs = malloc(sizeof(int) * P), total = 0;
    for (int o = 0; o < P; o++) {
        counts[o] = n - o % 3 > 0 ? n - o % 3 : 0;
        displs[o] = total;
        total += counts[o] + 1;
    }
    int *send = malloc(sizeof(int) * (n + 1)), *recv = malloc(sizeof(int) * (total + 1));
    for (int i = 0; i < total; i++) recv[i] = -1;
    for (int k = 0; k < counts[rank]; k++) send[k] = value(rank, k, iter);
    MPI_Allgatherv(send, counts[rank], MPI_INT, recv, counts, displs, MPI_INT, comm);
    int ok = 1;
    for (int o = 0; o < P; o++) {
        for (int k = 0; k < counts[o]; k++) ok &= recv[displs[o] + k] == value(o, k, iter);
        ok &= recv[displs[o] + counts[o]] == -1;
    }
    check("MPI_Allgatherv", ok);
    free(send); free(recv); free(counts); free(displs);
}

/* A contiguous derived type (3 ints) and a non-contiguous one (every other int). */
static void gather_types(MPI_Comm comm, int iter)
{
    int rank, P;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &P);
    MPI_Datatype triple, strided;
    MPI_Type_contiguous(3, MPI_INT, &triple);
    MPI_Type_commit(&triple);
    MPI_Type_vector(2, 1, 2, MPI_INT, &strided); /* ints 0 and 2 of 3 */
    MPI_Type_commit(&strided);
    int send[6], *recv = malloc(sizeof(int) * 6 * P);
    for (int k = 0; k < 6; k++) send[k] = value(rank, k, iter);
    MPI_Allgather(send, 2, triple, recv, 2, triple, comm);
    int ok = 1;
    for (int o = 0; o < P; o++)
        for (int k = 0; k < 6; k++) ok &= recv[6 * o + k] == value(o, k, iter);
    check("MPI_Allgather contiguous derived type", ok);
    for (int i = 0; i < 6 * P; i++) recv[i] = -1;
    MPI_Allgather(send, 1, strided, recv, 2, MPI_INT, comm); /* strided send, packed recv */
    ok = 1;
    for (int o = 0; o < P; o++)
        ok &= recv[2 * o] == value(o, 0, iter) && recv[2 * o + 1] == value(o, 2, iter);
    check("MPI_Allgather strided send type", ok);
    for (int i = 0; i < 6 * P; i++) recv[i] = -1;
    MPI_Allgather(send, 2, MPI_INT, recv, 1, strided, comm); /* strided receive: staged */
    ok = 1;
    for (int o = 0; o < P; o++)
        ok &= recv[3 * o] == value(o, 0, iter) && recv[3 * o + 1] == -1
              && recv[3 * o + 2] == value(o, 1, iter);
    check("MPI_Allgather strided receive type", ok);
    MPI_Type_free(&triple);
    MPI_Type_free(&strided);
    free(recv);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm half;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
    for (int iter = 0; iter < 3; iter++) {
        int sizes[] = { 0, 1, 5, 1000, 40000 };
        for (int s = 0; s < 5; s++) {
            gather_ints(MPI_COMM_WORLD, sizes[s], iter);
            gather_v(MPI_COMM_WORLD, sizes[s], iter);
            gather_ints(half, sizes[s], iter);
        }
        gather_types(MPI_COMM_WORLD, iter);
    }
    MPI_Comm_free(&half);
    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("allgather_app: %s\n", all ? "FAILED" : "OK");
    MPI_Finalize();
    return all ? 1 : 0;
}
