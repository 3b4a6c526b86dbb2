/* collsched_allgather on MPI_COMM_WORLD itself (not a duplicate), for smpirun:
 *     world_smpi FILE [BYTES]
 * sets the schedule with collsched_set_schedules(FILE), runs three allgathers of BYTES
 * bytes per rank (default 1000), checks every byte on every rank, prints one line from
 * rank 0 and exits 0 when all is correct. The state the runtime caches on MPI_COMM_WORLD
 * is released at MPI_Finalize, which SMPI does after MPI_COMM_SELF's callback already ran
 * (tests/runtime/test_smpi.py). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collsched.h"

static unsigned char value(int origin, long k, int iter)
{
    return (unsigned char)((origin * 131 + k * 7 + iter * 29) & 0xFF);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, P;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    if (argc < 2) {
        if (rank == 0) fprintf(stderr, "usage: world_smpi FILE [BYTES]\n");
        MPI_Finalize();
        return 2;
    }
    collsched_set_schedules(argv[1]);
    long n = argc > 2 ? atol(argv[2]) : 1000;
    unsigned char *send = malloc((size_t)n + 1), *recv = malloc((size_t)n * P + 1);
    int bad = 0, err = 0, used = 1;
    for (int iter = 0; iter < 3; iter++) {
        for (long k = 0; k < n; k++) send[k] = value(rank, k, iter);
        memset(recv, 0xA5, (size_t)n * P);
        err |= collsched_allgather(send, (int)n, MPI_BYTE, recv, (int)n, MPI_BYTE, MPI_COMM_WORLD);
        for (int o = 0; o < P; o++)
            for (long k = 0; k < n; k++) bad += recv[(long)o * n + k] != value(o, k, iter);
        collsched_call_info info;
        collsched_last_call(MPI_COMM_WORLD, &info);
        used &= info.used_schedule;
    }
    int local[3] = { bad, err != MPI_SUCCESS, !used }, all[3];
    MPI_Reduce(local, all, 3, MPI_INT, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("world_smpi: ranks %d bytes %ld data_ok %d mpi_ok %d used_schedule %d\n", P, n,
               all[0] == 0, all[1] == 0, all[2] == 0);
    free(send);
    free(recv);
    MPI_Finalize();
    return rank == 0 && (all[0] || all[1]) ? 1 : 0;
}
