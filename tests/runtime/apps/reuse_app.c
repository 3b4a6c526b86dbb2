/* Three communicators with the same members, one after another: duplicate
 * MPI_COMM_WORLD, one MPI_Allgather on it, free it (MPI may hand the next duplicate the
 * same handle). The arrival trace must see three communicators (three ids), one call
 * each. Then one MPI_Allgather on MPI_COMM_WORLD. Checks its results; prints
 * "reuse_app: OK" on rank 0. An unmodified MPI program (for the preload library). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, P, failures = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    int *got = malloc(sizeof(int) * P);
    for (int k = 0; k < 4; k++) {
        MPI_Comm c = MPI_COMM_WORLD;
        if (k < 3) MPI_Comm_dup(MPI_COMM_WORLD, &c);
        int mine = rank * 10 + k;
        MPI_Allgather(&mine, 1, MPI_INT, got, 1, MPI_INT, c);
        for (int o = 0; o < P; o++) failures += got[o] != o * 10 + k;
        if (k < 3) MPI_Comm_free(&c);
    }
    MPI_Allreduce(MPI_IN_PLACE, &failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("reuse_app: %s\n", failures ? "FAILED" : "OK");
    free(got);
    MPI_Finalize();
    return failures != 0;
}
