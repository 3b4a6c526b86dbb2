/* A program with a recurring load pattern for the schedule cache tests
 * (tests/runtime/test_cache_mpi.py): N iterations cycling through 3 imbalance classes
 * (class k = iteration % 3: the ranks r with r % 3 == k sleep SPREAD_US microseconds
 * before the allgather, the others not), BYTES bytes per rank, every byte checked on
 * every rank in every call. Rank 0 prints per iteration which schedule ran
 * (collsched_last_call):
 *
 *     iter I class K used U schedule PATH reason WHY
 *
 * Built plain (an unmodified MPI program: MPI_Allgather; under the preload library
 * collsched_last_call is found with dlsym, else "used -1") or with -DCACHE_APP_API,
 * linked with libcollsched.a (collsched_allgather, collsched_label, collsched_finalize).
 * With --interleave every iteration also calls an allgather on a duplicate of
 * MPI_COMM_WORLD from another call site (the same bytes, every rank on time); with
 * --mixed-sites the odd ranks make the main call from that other site (legal MPI). 
 * Exit status 0 iff every byte of every call was right. */
#define _GNU_SOURCE
#include <mpi.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef CACHE_APP_API
#include "collsched.h"
#define ALLGATHER collsched_allgather
#else
typedef struct { int used_schedule; char schedule[256]; char reason[256]; } last_call_info;
#define ALLGATHER MPI_Allgather
#endif

static unsigned char value(int origin, int k, int iter)
{
    uint32_t x = (uint32_t)origin * 2654435761u ^ (uint32_t)iter * 40503u ^ (uint32_t)k * 2246822519u;
    x ^= x >> 13;
    return (unsigned char)(x * 0x9E3779B1u >> 24);
}

/* Two call sites: the main allgather and the interleaved one. */
static volatile int sites_called[2];
static __attribute__((noinline)) int gather_a(const void *send, int bytes, void *recv, MPI_Comm comm)
{
    sites_called[0]++;
    return ALLGATHER(send, bytes, MPI_BYTE, recv, bytes, MPI_BYTE, comm);
}
static __attribute__((noinline)) int gather_b(const void *send, int bytes, void *recv, MPI_Comm comm)
{
    sites_called[1] += 2;
    return ALLGATHER(send, bytes, MPI_BYTE, recv, bytes, MPI_BYTE, comm);
}

static int gather_checked(MPI_Comm comm, int bytes, int iter, int tag, int site_b)
{
    int rank, P;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &P);
    unsigned char *send = malloc((size_t)bytes + 1), *recv = malloc((size_t)bytes * P + 16);
    for (int k = 0; k < bytes; k++) send[k] = value(rank, k, iter * 2 + tag);
    memset(recv, 0xA5, (size_t)bytes * P + 16);
    int rc = (site_b ? gather_b : gather_a)(send, bytes, recv, comm);
    int ok = rc == MPI_SUCCESS;
    for (int o = 0; o < P; o++)
        for (int k = 0; k < bytes; k++) ok &= recv[(size_t)o * bytes + k] == value(o, k, iter * 2 + tag);
    for (int k = 0; k < 16; k++) ok &= recv[(size_t)bytes * P + k] == 0xA5; /* guard zone */
    free(send);
    free(recv);
    return ok;
}

static void last_call(MPI_Comm comm, int *used, char *sched, char *reason)
{
    *used = -1;
    strcpy(sched, "-");
    strcpy(reason, "-");
#ifdef CACHE_APP_API
    collsched_call_info info;
    collsched_last_call(comm, &info);
#else
    int (*fn)(MPI_Comm, last_call_info *) = (int (*)(MPI_Comm, last_call_info *))dlsym(RTLD_DEFAULT, "collsched_last_call");
    if (!fn) return;
    last_call_info info;
    fn(comm, &info);
#endif
    *used = info.used_schedule;
    if (info.schedule[0]) snprintf(sched, 256, "%s", info.schedule);
    if (info.reason[0]) {
        snprintf(reason, 256, "%s", info.reason);
        for (char *s = reason; *s; s++) if (*s == '\n') *s = ' ';
    }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, P;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    if (argc < 4) {
        if (rank == 0) fprintf(stderr, "usage: cache_app ITERATIONS BYTES SPREAD_US [--interleave] [--mixed-sites]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int iters = atoi(argv[1]), bytes = atoi(argv[2]), spread = atoi(argv[3]);
    int interleave = 0, mixed = 0;
    for (int i = 4; i < argc; i++) {
        interleave |= !strcmp(argv[i], "--interleave");
        mixed |= !strcmp(argv[i], "--mixed-sites");
    }
    MPI_Comm dup = MPI_COMM_NULL;
    if (interleave) MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    int failures = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    for (int it = 0; it < iters; it++) {
        int k = it % 3;
        if (rank % 3 == k && spread > 0) usleep((useconds_t)spread);
#ifdef CACHE_APP_API
        collsched_label("step");
#endif
        /* --mixed-sites: odd ranks call the main allgather from the other call site */
        failures += !gather_checked(MPI_COMM_WORLD, bytes, it, 0, mixed && rank % 2);
        char sched[256], reason[256];
        int used;
        last_call(MPI_COMM_WORLD, &used, sched, reason);
        if (rank == 0) printf("iter %d class %d used %d schedule %s reason %s\n", it, k, used, sched, reason);
        if (interleave) {
            failures += !gather_checked(dup, bytes, it, 1, 1);
            last_call(dup, &used, sched, reason);
            if (rank == 0) printf("dup %d used %d schedule %s reason %s\n", it, used, sched, reason);
        }
    }
    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("cache_app: ranks %d iterations %d bytes %d data_ok %d\n", P, iters, bytes, all == 0);
    fflush(stdout);
    if (interleave) MPI_Comm_free(&dup);
#ifdef CACHE_APP_API
    collsched_finalize();
#endif
    MPI_Finalize();
    return all == 0 ? 0 : 1;
}
