/* trace_overhead - what COLLSCHED_ARRIVALS costs a call (runtime/bench/bench_trace.py).
 *
 *   trace_overhead ITERATIONS BYTES[,BYTES...] [SELF_CALLS]
 *
 * Two variants of the same allgather on MPI_COMM_WORLD, alternating call by call with the
 * order flipped every iteration, a barrier before each (outside the timed call): A is
 * MPI_Allgather (under the preload library with COLLSCHED_ARRIVALS: recorded), or
 * collsched_allgather when built with -DUSE_API (SMPI); B is PMPI_Allgather, which
 * nothing intercepts. A call's time is the slowest rank's. Every result is checked byte
 * for byte (outside the timing). Then SELF_CALLS calls of one int on MPI_COMM_SELF per
 * variant, in alternating blocks: the recording's cost per call with no communication
 * to hide it. Rank 0 prints one JSON line per size and one for the self calls. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef USE_API
#include <collsched.h>
#define TRACED collsched_allgather
#else
#define TRACED MPI_Allgather
#endif

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, n, sizeof *v, cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static unsigned char byte_of(int origin, long k, int it) { return (unsigned char)(origin * 29 + k * 3 + it); }

static int one_size(long bytes, int iters, int rank, int P)
{
    unsigned char *send = malloc(bytes), *recv = malloc(bytes * P);
    double *t[2] = { malloc(sizeof(double) * iters), malloc(sizeof(double) * iters) };
    double *ratio = malloc(sizeof(double) * iters);
    int wrong = 0;
    for (int it = -5; it < iters; it++) { /* 5 warm-up iterations */
        for (int k = 0; k < 2; k++) {
            int v = (k + (it & 1)) & 1;
            int tag = (it + 8) * 2 + v;
            for (long b = 0; b < bytes; b++) send[b] = byte_of(rank, b, tag);
            memset(recv, 0, bytes * P);
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            if (v == 0) TRACED(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, MPI_COMM_WORLD);
            else PMPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, MPI_COMM_WORLD);
            double dt = MPI_Wtime() - t0;
            if (it >= 0) t[v][it] = dt;
            for (int o = 0; o < P; o++)
                for (long b = 0; b < bytes; b++)
                    if (recv[o * bytes + b] != byte_of(o, b, tag)) { wrong++; o = P; break; }
        }
    }
    MPI_Allreduce(MPI_IN_PLACE, t[0], iters, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, t[1], iters, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
        double sum0 = 0, sum1 = 0, min1 = t[1][0];
        for (int i = 0; i < iters; i++) {
            ratio[i] = t[0][i] / t[1][i];
            sum0 += t[0][i];
            sum1 += t[1][i];
            if (t[1][i] < min1) min1 = t[1][i];
        }
        printf("{\"ranks\": %d, \"bytes\": %ld, \"iterations\": %d, \"traced_median_s\": %.9g, "
               "\"plain_median_s\": %.9g, \"traced_mean_s\": %.9g, \"plain_mean_s\": %.9g, "
               "\"plain_min_s\": %.9g, \"median_ratio\": %.6f, \"data_ok\": %s}\n",
               P, bytes, iters, median(t[0], iters), median(t[1], iters), sum0 / iters, sum1 / iters,
               min1, median(ratio, iters), wrong ? "false" : "true");
        fflush(stdout);
    }
    free(send); free(recv); free(t[0]); free(t[1]); free(ratio);
    return wrong;
}

/* One int on MPI_COMM_SELF: no communication, so the difference is the recording. */
static void self_calls(int calls, int rank)
{
    enum { BLOCK = 500 };
    double spent[2] = { 0, 0 };
    int x = rank, y = 0;
    for (int done = 0, k = 0; done < 2 * calls; done += BLOCK, k++) {
        int v = k & 1;
        double t0 = MPI_Wtime();
        for (int i = 0; i < BLOCK; i++) {
            if (v == 0) TRACED(&x, 1, MPI_INT, &y, 1, MPI_INT, MPI_COMM_SELF);
            else PMPI_Allgather(&x, 1, MPI_INT, &y, 1, MPI_INT, MPI_COMM_SELF);
        }
        spent[v] += MPI_Wtime() - t0;
    }
    if (rank == 0) {
        printf("{\"self_calls\": %d, \"traced_per_call_s\": %.9g, \"plain_per_call_s\": %.9g}\n",
               calls, spent[0] / calls, spent[1] / calls);
        fflush(stdout);
    }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, P, wrong = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    if (argc < 3) {
        if (rank == 0) fprintf(stderr, "usage: trace_overhead ITERATIONS BYTES[,BYTES...] [SELF_CALLS]\n");
        MPI_Finalize();
        return 2;
    }
    int iters = atoi(argv[1]);
    /* (not strtok: SMPI's ranks share libc's hidden state) */
    for (char *s = argv[2], *end; *s; s = *end ? end + 1 : end) wrong += one_size(strtol(s, &end, 10), iters, rank, P);
    int self = argc > 3 ? atoi(argv[3]) : 0;
    if (self > 0) self_calls(self, rank);
#ifdef USE_API
    collsched_finalize();
#endif
    MPI_Finalize();
    return wrong != 0;
}
