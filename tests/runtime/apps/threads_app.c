/* Several threads, each with its own duplicate of MPI_COMM_WORLD, call collsched_allgather
 * at the same time (legal under MPI_THREAD_MULTIPLE: different communicators), every
 * result compared byte for byte with PMPI_Allgather on the same communicator.
 *
 *   threads_app THREADS ITERATIONS INTS
 *
 * Prints "threads_app: SKIP: ..." (exit 0) when MPI does not provide
 * MPI_THREAD_MULTIPLE, else "threads_app: OK calls=C scheduled=S" on rank 0 (S: calls a
 * schedule ran, from collsched_last_call: the test can tell a run that never reached the
 * executor) or "threads_app: FAIL ..." with exit 1. */
#include <collsched.h>
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct job {
    MPI_Comm comm;
    int id, iterations, ints, rank, size;
    long calls, scheduled, wrong, errors;
} job;

static void *run(void *arg)
{
    job *j = arg;
    size_t most = (size_t)j->ints + 2;
    int *send = malloc(most * sizeof *send);
    int *got = malloc(most * (size_t)j->size * sizeof *got), *want = malloc(most * (size_t)j->size * sizeof *want);
    if (!send || !got || !want) { j->errors++; goto out; }
    for (int it = 0; it < j->iterations; it++) {
        int n = j->ints + it % 3; /* a few sizes, all served by the schedule */
        for (int k = 0; k < n; k++) send[k] = (j->rank * 1000003) ^ (j->id * 7919) ^ (it * 131) ^ k;
        memset(got, 0xA5, (size_t)n * j->size * sizeof *got);
        memset(want, 0x5A, (size_t)n * j->size * sizeof *want);
        if (collsched_allgather(send, n, MPI_INT, got, n, MPI_INT, j->comm) != MPI_SUCCESS) j->errors++;
        if (PMPI_Allgather(send, n, MPI_INT, want, n, MPI_INT, j->comm) != MPI_SUCCESS) j->errors++;
        if (memcmp(got, want, (size_t)n * j->size * sizeof *got) != 0) j->wrong++;
        collsched_call_info info;
        if (collsched_last_call(j->comm, &info) == MPI_SUCCESS && info.used_schedule) j->scheduled++;
        j->calls++;
    }
out:
    free(send);
    free(got);
    free(want);
    return NULL;
}

int main(int argc, char **argv)
{
    int provided = MPI_THREAD_SINGLE, rank, size;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (provided < MPI_THREAD_MULTIPLE) {
        if (rank == 0) printf("threads_app: SKIP: MPI provides thread level %d, not MPI_THREAD_MULTIPLE\n", provided);
        MPI_Finalize();
        return 0;
    }
    int nthreads = argc > 1 ? atoi(argv[1]) : 2;
    int iterations = argc > 2 ? atoi(argv[2]) : 100, ints = argc > 3 ? atoi(argv[3]) : 16;
    if (nthreads < 1 || nthreads > 16 || iterations < 1 || ints < 1) {
        if (rank == 0) fprintf(stderr, "usage: threads_app THREADS(1-16) ITERATIONS INTS\n");
        MPI_Finalize();
        return 2;
    }
    job jobs[16];
    pthread_t tid[16];
    for (int t = 0; t < nthreads; t++) { /* collective over world: one thread does them all */
        memset(&jobs[t], 0, sizeof jobs[t]);
        MPI_Comm_dup(MPI_COMM_WORLD, &jobs[t].comm);
        jobs[t].id = t;
        jobs[t].iterations = iterations;
        jobs[t].ints = ints;
        jobs[t].rank = rank;
        jobs[t].size = size;
    }
    int started = 0;
    for (int t = 0; t < nthreads; t++)
        if (pthread_create(&tid[t], NULL, run, &jobs[t]) == 0) started++;
        else break;
    long totals[4] = { 0, 0, 0, 0 }; /* calls, scheduled, wrong, errors */
    for (int t = 0; t < started; t++) {
        pthread_join(tid[t], NULL);
        totals[0] += jobs[t].calls;
        totals[1] += jobs[t].scheduled;
        totals[2] += jobs[t].wrong;
        totals[3] += jobs[t].errors;
    }
    if (started < nthreads) totals[3]++;
    MPI_Allreduce(MPI_IN_PLACE, totals, 4, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    for (int t = 0; t < nthreads; t++) MPI_Comm_free(&jobs[t].comm);
    int bad = totals[2] || totals[3];
    if (rank == 0)
        printf("threads_app: %s calls=%ld scheduled=%ld wrong=%ld errors=%ld\n", bad ? "FAIL" : "OK",
               totals[0], totals[1], totals[2], totals[3]);
    MPI_Finalize();
    return bad;
}
