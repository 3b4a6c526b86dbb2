/* The PAT engine's cache mode (PAT_UseAlg("cache"), tests/runtime/test_cache_mpi.py):
 * N iterations cycling through 3 imbalance classes as cache_app.c does, but announced
 * to the engine: every rank computes BASE_US microseconds (SPREAD_US more for the ranks
 * r with r % 3 == iteration % 3), marking PAT_Edge(50) halfway, so the engine predicts
 * each rank's arrival and picks the cache entry of the predicted class in the same
 * iteration. collsched_allgather of BYTES per rank, every byte checked; rank 0 prints
 *
 *     iter I class K used U schedule NAME reason WHY
 *
 * Explicit progress (PAT_Sleep), or with a 5th argument "thread" MPI_THREAD_MULTIPLE and
 * the engine's progress thread (which then picks the entry). Exit status 0 iff every
 * byte was right. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collsched.h"

static unsigned char value(int origin, int k, int iter)
{
    uint32_t x = (uint32_t)origin * 2654435761u ^ (uint32_t)iter * 40503u ^ (uint32_t)k * 2246822519u;
    x ^= x >> 13;
    return (unsigned char)(x * 0x9E3779B1u >> 24);
}

int main(int argc, char **argv)
{
    int provided = 0;
    if (argc > 5 && !strcmp(argv[5], "thread")) MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    else MPI_Init(&argc, &argv);
    int rank, P;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    if (argc < 5) {
        if (rank == 0) fprintf(stderr, "usage: pat_cache_app ITERATIONS BYTES BASE_US SPREAD_US [thread]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int iters = atoi(argv[1]), bytes = atoi(argv[2]);
    double base = atof(argv[3]) * 1e-6, spread = atof(argv[4]) * 1e-6;
    int failures = 0;
    if (PAT_Init() != MPI_SUCCESS || PAT_UseAlg("cache") != MPI_SUCCESS
        || PAT_Declare(MPI_COMM_WORLD, bytes, 1e-4) != MPI_SUCCESS) {
        fprintf(stderr, "pat_cache_app: PAT set-up failed\n");
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    unsigned char *send = malloc((size_t)bytes + 1), *recv = malloc((size_t)bytes * P + 16);
    for (int it = 0; it < iters; it++) {
        int k = it % 3;
        double compute = base + (rank % 3 == k ? spread : 0);
        for (int j = 0; j < bytes; j++) send[j] = value(rank, j, it);
        memset(recv, 0xA5, (size_t)bytes * P + 16);
        PAT_ProcessingStart();
        PAT_Sleep(compute / 2);
        PAT_Edge(50);
        PAT_Sleep(compute / 2);
        PAT_ProcessingEnd();
        int ok = collsched_allgather(send, bytes, MPI_BYTE, recv, bytes, MPI_BYTE, MPI_COMM_WORLD) == MPI_SUCCESS;
        for (int o = 0; o < P; o++)
            for (int j = 0; j < bytes; j++) ok &= recv[(size_t)o * bytes + j] == value(o, j, it);
        for (int j = 0; j < 16; j++) ok &= recv[(size_t)bytes * P + j] == 0xA5;
        failures += !ok;
        collsched_call_info info;
        collsched_last_call(MPI_COMM_WORLD, &info);
        for (char *c = info.schedule; *c; c++) if (*c == ' ') *c = '_'; /* one word */
        if (rank == 0)
            printf("iter %d class %d used %d schedule %s reason %s\n", it, k, info.used_schedule,
                   info.schedule[0] ? info.schedule : "-", info.reason[0] ? info.reason : "-");
    }
    free(send);
    free(recv);
    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("pat_cache_app: ranks %d iterations %d bytes %d data_ok %d\n", P, iters, bytes, all == 0);
    fflush(stdout);
    PAT_Finalize();
    collsched_finalize();
    MPI_Finalize();
    return all == 0 ? 0 : 1;
}
