/* Compact schedules against the MPI library (tests/runtime/test_compact_mpi.py):
 *   compact_app BYTES ITERATIONS [imbalance]
 * Each iteration fills every rank's block with a pattern of (rank, iteration), runs
 * collsched_allgather (the schedule named by COLLSCHED_SCHEDULES) and then PMPI_Allgather on
 * the same input, and compares the two receive buffers byte for byte. With "imbalance",
 * the ranks enter collsched_allgather at different times (rank r sleeps (3r mod P) ms).
 * Rank 0 prints one JSON line: {"ok", "errors", "used", "schedule", "reason"}, the last
 * three from collsched_last_call after the last call. Exit status 0 when the data and
 * the MPI return codes were right on every rank. */
#include "collsched.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void json_text(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') putchar('\\');
        putchar((unsigned char)*s >= 32 ? *s : '?');
    }
    putchar('"');
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, P;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    if (argc < 3) {
        if (rank == 0) fprintf(stderr, "usage: compact_app BYTES ITERATIONS [imbalance]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int n = atoi(argv[1]), iters = atoi(argv[2]);
    int imbalance = argc > 3 && strcmp(argv[3], "imbalance") == 0;
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    unsigned char *send = malloc((size_t)n + 1), *mine = malloc((size_t)n * P + 1),
                  *ref = malloc((size_t)n * P + 1);
    int ok = send && mine && ref, errors = 0;
    for (int it = 0; ok && it < iters; it++) {
        for (int k = 0; k < n; k++) send[k] = (unsigned char)(rank * 131 + it * 17 + k * 7 + (k >> 8));
        memset(mine, 0xA5, (size_t)n * P);
        memset(ref, 0x5A, (size_t)n * P);
        if (imbalance) {
            struct timespec ts = { 0, (long)((3 * rank + it) % P) * 1000000L };
            nanosleep(&ts, NULL);
        }
        if (collsched_allgather(send, n, MPI_BYTE, mine, n, MPI_BYTE, comm) != MPI_SUCCESS) errors++;
        if (PMPI_Allgather(send, n, MPI_BYTE, ref, n, MPI_BYTE, comm) != MPI_SUCCESS) ok = 0;
        if (memcmp(mine, ref, (size_t)n * P) != 0) ok = 0;
    }
    collsched_call_info info;
    memset(&info, 0, sizeof info);
    collsched_last_call(comm, &info);
    int all[2] = { ok, -errors }, red[2];
    MPI_Allreduce(all, red, 2, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("{\"ok\": %s, \"errors\": %d, \"used\": %d, \"schedule\": ", red[0] ? "true" : "false",
               -red[1], info.used_schedule);
        json_text(info.schedule);
        printf(", \"reason\": ");
        json_text(info.reason);
        printf("}\n");
        fflush(stdout);
    }
    free(send); free(mine); free(ref);
    MPI_Comm_free(&comm);
    MPI_Finalize();
    return red[0] ? 0 : 1;
}
