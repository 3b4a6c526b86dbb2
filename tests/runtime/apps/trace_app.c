/* The arrival trace's test program: per iteration an allgather on MPI_COMM_WORLD
 * (world_step), one on a split communicator of the even and the odd ranks (split_step)
 * and an allgatherv on MPI_COMM_WORLD (world_v), every result checked byte for byte.
 * Rank DELAY_RANK sleeps DELAY seconds before world_step's call on odd iterations, so
 * its arrival there is late by at least that much.
 *
 *   trace_app ITERATIONS BYTES DELAY_RANK DELAY_S
 *
 * Built plain (an unmodified MPI program, for the preload library) or with -DUSE_API
 * (collsched_allgather(v) from libcollsched; labels: collsched_label("first_world") for
 * iteration 0's world_step call only, PAT_Label("halo") for every split_step call; then
 * collsched_finalize() before MPI_Finalize unless -DNO_FINALIZE).
 * Rank 0 prints one line per call of this rank's readings gathered from every rank:
 *   call COMM SEQ R T_BEFORE T_AFTER   (MPI_Wtime right before and after the call)
 * one line per rank, "origin R SECONDS" (MPI_Wtime - CLOCK_MONOTONIC), then
 * "trace_app: ranks P data_ok 1". Exit 0 = every result correct. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef USE_API
#include <collsched.h>
#define ALLGATHER collsched_allgather
#define ALLGATHERV collsched_allgatherv
#else
#define ALLGATHER MPI_Allgather
#define ALLGATHERV MPI_Allgatherv
#endif

#define MAX_CALLS 3000
static double before[MAX_CALLS], after[MAX_CALLS];
static int comm_of[MAX_CALLS], seq_of[MAX_CALLS], ncalls, failures;

static unsigned char byte_of(int origin, long k, int iter) { return (unsigned char)(origin * 31 + k * 7 + iter * 13 + 1); }

static void note(int comm, int seq, double t0, double t1)
{
    if (ncalls < MAX_CALLS) {
        comm_of[ncalls] = comm; seq_of[ncalls] = seq;
        before[ncalls] = t0; after[ncalls] = t1;
        ncalls++;
    }
}

static void pause_for(double s)
{
    struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };
    nanosleep(&ts, NULL);
}

__attribute__((noinline)) void world_step(MPI_Comm comm, long bytes, int iter, int seq)
{
    int rank, P;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &P);
    unsigned char *send = malloc(bytes + 1), *recv = malloc(bytes * P + 1);
    for (long k = 0; k < bytes; k++) send[k] = byte_of(rank, k, iter);
    memset(recv, 0, bytes * P + 1);
    double t0 = MPI_Wtime();
    ALLGATHER(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, comm);
    double t1 = MPI_Wtime();
    note(0, seq, t0, t1);
    for (int o = 0; o < P; o++)
        for (long k = 0; k < bytes; k++)
            if (recv[o * bytes + k] != byte_of(o, k, iter)) { failures++; o = P; break; }
    free(send); free(recv);
}

__attribute__((noinline)) void split_step(MPI_Comm comm, long bytes, int iter, int seq)
{
    int rank, P;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &P);
    unsigned char *recv = malloc(bytes * P + 1);
    memset(recv, 0, bytes * P + 1);
    for (long k = 0; k < bytes; k++) recv[rank * bytes + k] = byte_of(rank, k, iter + 5);
    double t0 = MPI_Wtime();
    ALLGATHER(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, (int)bytes, MPI_BYTE, comm);
    double t1 = MPI_Wtime();
    note(1, seq, t0, t1);
    for (int o = 0; o < P; o++)
        for (long k = 0; k < bytes; k++)
            if (recv[o * bytes + k] != byte_of(o, k, iter + 5)) { failures++; o = P; break; }
    free(recv);
}

/* counts bytes - 3 * origin (at least 1), one spare byte after each block */
__attribute__((noinline)) void world_v(MPI_Comm comm, long bytes, int iter, int seq)
{
    int rank, P;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &P);
    int *counts = malloc(sizeof(int) * P), *displs = malloc(sizeof(int) * P), total = 0;
    for (int o = 0; o < P; o++) {
        counts[o] = bytes - 3 * o > 0 ? (int)(bytes - 3 * o) : 1;
        displs[o] = total;
        total += counts[o] + 1;
    }
    unsigned char *send = malloc(counts[rank]), *recv = malloc(total);
    for (int k = 0; k < counts[rank]; k++) send[k] = byte_of(rank, k, iter + 9);
    memset(recv, 0xEE, total);
    double t0 = MPI_Wtime();
    ALLGATHERV(send, counts[rank], MPI_BYTE, recv, counts, displs, MPI_BYTE, comm);
    double t1 = MPI_Wtime();
    note(2, seq, t0, t1);
    for (int o = 0; o < P; o++) {
        for (int k = 0; k < counts[o]; k++)
            if (recv[displs[o] + k] != byte_of(o, k, iter + 9)) { failures++; break; }
        if (recv[displs[o] + counts[o]] != 0xEE) failures++;
    }
    free(send); free(recv); free(counts); free(displs);
}

#ifdef USE_API
/* The label rules: 1..63 printable characters, no spaces; a refused label changes nothing;
 * NULL and "" clear. */
static void check_labels(void)
{
    char ok63[64], long64[65];
    memset(ok63, 'a', 63);
    ok63[63] = '\0';
    memset(long64, 'b', 64);
    long64[64] = '\0';
    int bad = collsched_label("two words") != MPI_ERR_ARG || collsched_label("tab\there") != MPI_ERR_ARG
              || collsched_label(long64) != MPI_ERR_ARG || PAT_Label("\x7f") != MPI_ERR_ARG
              || PAT_Label("caf\xc3\xa9") != MPI_ERR_ARG || collsched_label(ok63) != MPI_SUCCESS
              || collsched_label(NULL) != MPI_SUCCESS || PAT_Label(ok63) != MPI_SUCCESS
              || PAT_Label("") != MPI_SUCCESS;
    if (bad) {
        failures++;
        fprintf(stderr, "trace_app: a label was not accepted or refused as it should be\n");
    }
}
#endif

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    if (argc != 5) {
        fprintf(stderr, "usage: trace_app ITERATIONS BYTES DELAY_RANK DELAY_S\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int iters = atoi(argv[1]), delay_rank = atoi(argv[3]);
    long bytes = atol(argv[2]);
    double delay = atof(argv[4]);
    int rank, P;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    MPI_Comm split;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &split);
#ifdef USE_API
    check_labels(); /* (then no label is set: the calls below are named as they say) */
#endif
    for (int i = 0; i < iters; i++) {
        if (i % 2 == 1 && rank == delay_rank) pause_for(delay);
#ifdef USE_API
        if (i == 0) collsched_label("first_world");
        if (i == 1 && (collsched_label("cleared") != MPI_SUCCESS || collsched_label("") != MPI_SUCCESS))
            failures++;
#endif
        world_step(MPI_COMM_WORLD, bytes, i, i);
#ifdef USE_API
        PAT_Label("halo");
#endif
        split_step(split, bytes, i, i);
#ifdef USE_API
        PAT_Label(NULL);
#endif
        world_v(MPI_COMM_WORLD, bytes, i, i);
    }
    /* every rank's readings to rank 0 (not traced: MPI_Gather) */
    double *all = rank == 0 ? malloc(sizeof(double) * 2 * MAX_CALLS * P) : NULL;
    double mine[2 * MAX_CALLS];
    for (int c = 0; c < ncalls; c++) { mine[2 * c] = before[c]; mine[2 * c + 1] = after[c]; }
    MPI_Gather(mine, 2 * ncalls, MPI_DOUBLE, all, 2 * ncalls, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    /* MPI_Wtime's origin against the node's monotonic clock (Open MPI: per process): the
     * true clock offsets between ranks on one node, for the test to check the estimates */
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    double origin = MPI_Wtime() - ((double)now.tv_sec + now.tv_nsec * 1e-9), *origins = NULL;
    if (rank == 0) origins = malloc(sizeof(double) * P);
    MPI_Gather(&origin, 1, MPI_DOUBLE, origins, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    int bad = failures;
    MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
        for (int r = 0; r < P; r++)
            for (int c = 0; c < ncalls; c++)
                printf("call %d %d %d %.9f %.9f\n", comm_of[c], seq_of[c], r,
                       all[(size_t)r * 2 * ncalls + 2 * c], all[(size_t)r * 2 * ncalls + 2 * c + 1]);
        for (int r = 0; r < P; r++) printf("origin %d %.9f\n", r, origins[r]);
        printf("trace_app: ranks %d data_ok %d\n", P, bad == 0);
        free(origins);
        fflush(stdout);
        free(all);
    }
    MPI_Comm_free(&split);
#if defined(USE_API) && !defined(NO_FINALIZE)
    collsched_finalize();
#endif
    MPI_Finalize();
    return bad != 0;
}
