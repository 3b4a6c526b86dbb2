/* A program with a recurring load pattern for the receive-ahead tests
 * (tests/runtime/test_cache_ahead.py, docs/cache.md "Receive-ahead"): N iterations
 * cycling through 3 imbalance classes (class k = iteration % 3: the ranks r with
 * r % 3 == k sleep SPREAD_US microseconds before the allgather), BYTES bytes per rank,
 * every byte checked on every rank in every call. Rank 0 prints per iteration which
 * schedule ran (collsched_last_call) and every rank's time in the call (arrival to exit):
 *
 *     iter I class K used U schedule PATH
 *     times I T0 T1 ... (seconds)
 *
 * Options: --other-bytes B: every 4th iteration, also a call of B bytes per rank from the
 * same call site (no entry serves it: the receives posted ahead must not catch its
 * messages); --flat-site: every 4th iteration, also a call of BYTES from another call
 * site, every rank on time (its own history: another entry than the one posted ahead);
 * --dup: the iterations run on a duplicate of MPI_COMM_WORLD, freed after them (with
 * receives posted ahead outstanding), then one more call on MPI_COMM_WORLD; --break I:
 * iteration I makes class (I + 1) % 3's ranks late instead (a mispredicted call: the
 * entry posted ahead runs for a pattern of another class).
 * Built plain (MPI_Allgather, for the preload library) or with -DCACHE_APP_API (linked
 * with libcollsched.a). Exit status 0 iff every byte of every call was right. */
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

/* One checked call; *elapsed: its time on this rank. */
static int gather_checked(MPI_Comm comm, int bytes, int stamp, int site_b, double *elapsed)
{
    int rank, P;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &P);
    unsigned char *send = malloc((size_t)bytes + 1), *recv = malloc((size_t)bytes * P + 16);
    for (int k = 0; k < bytes; k++) send[k] = value(rank, k, stamp);
    memset(recv, 0xA5, (size_t)bytes * P + 16);
#ifdef CACHE_APP_API
    collsched_label(site_b ? "flat" : "step");
#endif
    double t0 = MPI_Wtime();
    int rc = (site_b ? gather_b : gather_a)(send, bytes, recv, comm);
    *elapsed = MPI_Wtime() - t0;
    int ok = rc == MPI_SUCCESS;
    for (int o = 0; o < P; o++)
        for (int k = 0; k < bytes; k++) ok &= recv[(size_t)o * bytes + k] == value(o, k, stamp);
    for (int k = 0; k < 16; k++) ok &= recv[(size_t)bytes * P + k] == 0xA5; /* guard zone */
    free(send);
    free(recv);
    return ok;
}

static void last_call(MPI_Comm comm, int *used, char *sched)
{
    *used = -1;
    strcpy(sched, "-");
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
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, P;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    if (argc < 4) {
        if (rank == 0) fprintf(stderr, "usage: cache_ahead_app ITERATIONS BYTES SPREAD_US [--other-bytes B] [--flat-site] [--dup] [--break I]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int iters = atoi(argv[1]), bytes = atoi(argv[2]), spread = atoi(argv[3]);
    int other = 0, flat = 0, dup = 0, brk = -1;
    for (int i = 4; i < argc; i++) {
        if (!strcmp(argv[i], "--other-bytes") && i + 1 < argc) other = atoi(argv[++i]);
        flat |= !strcmp(argv[i], "--flat-site");
        dup |= !strcmp(argv[i], "--dup");
        if (!strcmp(argv[i], "--break") && i + 1 < argc) brk = atoi(argv[++i]);
    }
    MPI_Comm comm = MPI_COMM_WORLD;
    if (dup) MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    double *times = malloc((size_t)P * sizeof *times);
    int failures = 0;
    char sched[256];
    int used;
    double el;
    MPI_Barrier(MPI_COMM_WORLD);
    for (int it = 0; it < iters; it++) {
        int k = (it + (it == brk)) % 3;
        MPI_Barrier(MPI_COMM_WORLD); /* every iteration starts together: the classes stay sharp */
        if (rank % 3 == k && spread > 0) usleep((useconds_t)spread);
        failures += !gather_checked(comm, bytes, 4 * it, 0, &el);
        last_call(comm, &used, sched);
        MPI_Gather(&el, 1, MPI_DOUBLE, times, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            printf("iter %d class %d used %d schedule %s\ntimes %d", it, k, used, sched, it);
            for (int r = 0; r < P; r++) printf(" %.9f", times[r]);
            printf("\n");
        }
        if (other && it % 4 == 3) {
            failures += !gather_checked(comm, other, 4 * it + 1, 0, &el);
            last_call(comm, &used, sched);
            if (rank == 0) printf("other %d used %d schedule %s\n", it, used, sched);
        }
        if (flat && it % 4 == 1) {
            failures += !gather_checked(comm, bytes, 4 * it + 2, 1, &el);
            last_call(comm, &used, sched);
            if (rank == 0) printf("flat %d used %d schedule %s\n", it, used, sched);
        }
    }
    if (dup) {
        MPI_Comm_free(&comm); /* receives posted ahead are outstanding */
        failures += !gather_checked(MPI_COMM_WORLD, bytes, 4 * iters + 3, 0, &el);
    }
    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("cache_ahead_app: ranks %d iterations %d bytes %d data_ok %d\n", P, iters, bytes, all == 0);
    fflush(stdout);
    free(times);
#ifdef CACHE_APP_API
    collsched_finalize();
#endif
    MPI_Finalize();
    return all == 0 ? 0 : 1;
}
