/* collsched-coll-bench: times alltoall, bcast, reduce and allreduce (issue 18) for the lab.
 *
 * Every iteration: two barriers, emulated computation of 100 ms + u * maxDelay (u from
 * the seeded generator of compiler/collsched/lab/arrivals.py, as the allgather
 * mini-benchmark: the lab knows every iteration's arrival pattern), then the collective,
 * timed per rank, then a check of every byte the call delivered against a reference the
 * driver computes on its own (never from another rank's data):
 *
 *   alltoall   byte y of the block rank s sends to rank d in iteration k is
 *              block_byte(s, d, y, k) (a 64-bit hash per 8-byte word); rank r checks every
 *              byte of every block it received, its own included.
 *   bcast      byte y of the root's buffer is block_byte(root, P, y, k); every rank checks
 *              every byte.
 *   reduce,    element i of rank r's contribution is v(r, i, k) = (r + 1) * (1 + (i + k) % 7)
 *   allreduce  + (31 i + k) % 1013 (int or double: exact either way), so the sum over the
 *              P ranks is (1 + (i + k) % 7) P (P + 1) / 2 + P ((31 i + k) % 1013) and the
 *              max is P (1 + (i + k) % 7) + (31 i + k) % 1013: closed forms. A contribution
 *              lost, doubled or taken from the wrong element changes the result. reduce:
 *              the root checks; allreduce: every rank.
 *
 * One untimed call comes first (loading and proving a schedule, or the library's set-up,
 * is a one-off cost). Rank 0 prints one JSON line: every rank's arrival and exit per
 * iteration on the global clock (SimGrid's, or one machine's), relative to the first rank
 * leaving the barriers, the errors, the bytes checked, and per iteration the schedule
 * rank 0's call ran ("" where the MPI library's collective ran).
 *
 *   collsched-coll-bench --collective alltoall|bcast|reduce|allreduce --bytes N
 *       [--schedule FILE | --native] [--root R] [--dtype int|double] [--op sum|max]
 *       [--iterations K] [--max-delay-ms D] [--seed S] [--in-place] [--inject-error]
 *
 * --bytes: bytes of one alltoall block (per ordered pair), of the whole buffer (bcast), or
 * of the whole vector (reduce, allreduce: a whole number of elements of --dtype).
 * --schedule: the calls go through collsched_alltoall/bcast/reduce/allreduce with that
 * schedule (the lab also sets COLLSCHED_SCHEDULES and COLLSCHED_STRICT=1: a call the
 * schedule does not serve fails the run instead of measuring the MPI library); without
 * it (--native) MPI_Alltoall/MPI_Bcast/MPI_Reduce/MPI_Allreduce run, as the library (or
 * SMPI's --cfg=smpi/<coll>:NAME, Open MPI's coll_tuned) picks. A call the MPI library
 * served under --schedule (collsched_last_call) counts as a fallback and fails data_ok; under
 * COLLSCHED_STRICT=1 a call that returns was served by the schedule (strict mode refuses a
 * call it does not serve: MPI_ERRORS_ARE_FATAL stops the run).
 * --in-place: MPI_IN_PLACE (alltoall, allreduce; reduce at the root). --inject-error:
 * one checked byte of the first iteration's result is flipped on one rank (the tests
 * show the check failing). Builds with mpicc and smpicc (usleep is simulated time).
 */
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE /* usleep, which SMPI turns into simulated time */
#endif
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collsched.h"

#ifndef COLLSCHED_BUILD_VERSION
#define COLLSCHED_BUILD_VERSION "unknown"
#endif

#ifdef SMPI_HELPERS_H
#define LAB_SMPI 1
#else
#define LAB_SMPI 0
#endif

#define BASE_COMPUTE_S 0.100

enum coll { ALLTOALL, BCAST, REDUCE, ALLREDUCE };
static const char *const COLL_NAMES[] = {"alltoall", "bcast", "reduce", "allreduce"};

static uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* u in [0, 1) for (seed, iteration, rank): identical to lab/arrivals.py:uniform. */
static double uniform(uint64_t seed, uint64_t iteration, uint64_t rank) {
    uint64_t x = splitmix64(splitmix64(splitmix64(seed) ^ iteration) ^ rank);
    return (double)(x >> 11) * (1.0 / 9007199254740992.0);
}

/* The 8 bytes of word w of the block s -> d in iteration k. */
static inline uint64_t block_word(uint64_t s, uint64_t d, uint64_t w, uint64_t k) {
    return splitmix64(splitmix64((s << 32) ^ d ^ (k << 52)) ^ w);
}

/* Fills n bytes with the block s -> d of iteration k. */
static void fill_block(uint8_t *b, size_t n, uint64_t s, uint64_t d, uint64_t k) {
    for (size_t w = 0; w * 8 < n; w++) {
        uint64_t v = block_word(s, d, w, k);
        size_t m = n - w * 8 < 8 ? n - w * 8 : 8;
        for (size_t j = 0; j < m; j++) b[w * 8 + j] = (uint8_t)(v >> (8 * j));
    }
}

/* Wrong bytes of the block s -> d of iteration k in b (n bytes). */
static long long check_block(const uint8_t *b, size_t n, uint64_t s, uint64_t d, uint64_t k) {
    long long bad = 0;
    for (size_t w = 0; w * 8 < n; w++) {
        uint64_t v = block_word(s, d, w, k);
        size_t m = n - w * 8 < 8 ? n - w * 8 : 8;
        for (size_t j = 0; j < m; j++) bad += b[w * 8 + j] != (uint8_t)(v >> (8 * j));
    }
    return bad;
}

/* Element i of rank r's contribution in iteration k, and the closed forms of the sum and
 * the max over P ranks (all below 2^31 for P < 2^15). */
static inline long long contribution(long long r, long long i, long long k) {
    return (r + 1) * (1 + (i + k) % 7) + (31 * i + k) % 1013;
}
static inline long long expected(int op_max, long long P, long long i, long long k) {
    long long a = 1 + (i + k) % 7, b = (31 * i + k) % 1013;
    return op_max ? P * a + b : a * P * (P + 1) / 2 + P * b;
}

struct opts {
    int coll, root, is_double, op_max, iterations, in_place, inject_error, native;
    size_t bytes;
    double max_delay_s;
    uint64_t seed;
    const char *schedule;
};

static int usage(int rank, const char *msg) {
    if (rank == 0)
        fprintf(stderr, "collsched-coll-bench: %s (usage: collsched-coll-bench --collective "
                        "alltoall|bcast|reduce|allreduce --bytes N [--schedule FILE | --native] [--root R] "
                        "[--dtype int|double] [--op sum|max] [--iterations K] [--max-delay-ms D] [--seed S] "
                        "[--in-place] [--inject-error])\n", msg);
    return 2;
}

static int parse(int argc, char **argv, struct opts *o, int rank, int size) {
    memset(o, 0, sizeof *o);
    o->coll = -1;
    o->iterations = 4;
    o->native = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (!strcmp(a, "--native")) { o->native = 1; o->schedule = NULL; continue; }
        if (!strcmp(a, "--in-place")) { o->in_place = 1; continue; }
        if (!strcmp(a, "--inject-error")) { o->inject_error = 1; continue; }
        if (!v) return usage(rank, "an option is missing its value");
        i++;
        end = (char *)v + strlen(v);
        if (!strcmp(a, "--collective")) {
            for (int c = 0; c < 4; c++)
                if (!strcmp(v, COLL_NAMES[c])) o->coll = c;
            if (o->coll < 0) return usage(rank, "--collective expects alltoall, bcast, reduce or allreduce");
        } else if (!strcmp(a, "--bytes")) {
            if (*v < '0' || *v > '9') return usage(rank, "--bytes expects a whole number");
            o->bytes = strtoull(v, &end, 10);
        } else if (!strcmp(a, "--schedule")) { o->schedule = v; o->native = 0; }
        else if (!strcmp(a, "--root")) o->root = (int)strtol(v, &end, 10);
        else if (!strcmp(a, "--dtype")) {
            if (strcmp(v, "int") && strcmp(v, "double")) return usage(rank, "--dtype expects int or double");
            o->is_double = !strcmp(v, "double");
        } else if (!strcmp(a, "--op")) {
            if (strcmp(v, "sum") && strcmp(v, "max")) return usage(rank, "--op expects sum or max");
            o->op_max = !strcmp(v, "max");
        } else if (!strcmp(a, "--iterations")) o->iterations = (int)strtol(v, &end, 10);
        else if (!strcmp(a, "--max-delay-ms")) o->max_delay_s = strtod(v, &end) / 1e3;
        else if (!strcmp(a, "--seed")) o->seed = strtoull(v, &end, 10);
        else return usage(rank, "unknown option");
        if (!end || *end) return usage(rank, "a value is not a number");
    }
    if (o->coll < 0) return usage(rank, "--collective is required");
    if (o->iterations < 1 || !(o->max_delay_s >= 0) || o->max_delay_s > 3600)
        return usage(rank, "iterations >= 1 and a max delay of 0 to 3600000 ms expected");
    if (o->root < 0 || o->root >= size) return usage(rank, "--root expects a rank of the run");
    if (o->coll == BCAST && o->in_place) return usage(rank, "--in-place: not for bcast");
    size_t elem = o->is_double ? 8 : 4;
    if ((o->coll == REDUCE || o->coll == ALLREDUCE) && o->bytes % elem)
        return usage(rank, "--bytes expects a whole number of elements of --dtype");
    size_t per = o->coll == ALLTOALL ? o->bytes * (size_t)size : o->bytes;
    if (o->bytes > (size_t)INT32_MAX || per > ((size_t)1 << 40))
        return usage(rank, "--bytes: a count must fit an int");
    if (size >= (1 << 15)) return usage(rank, "at most 32767 ranks");
    return 0;
}

/* Copy text into a JSON string body (quotes, backslashes and controls dropped). */
static void json_text(char *out, size_t cap, const char *in) {
    size_t n = 0;
    for (; *in && n + 1 < cap; in++)
        if (*in != '"' && *in != '\\' && (unsigned char)*in >= 0x20) out[n++] = *in;
    out[n] = 0;
}

struct bufs {
    uint8_t *send, *recv;
    size_t send_bytes, recv_bytes, count, elem;
    MPI_Datatype type;
};

static void *zalloc(size_t n) { return calloc(n ? n : 1, 1); }

static void make_bufs(struct bufs *b, const struct opts *o, int size) {
    memset(b, 0, sizeof *b);
    b->elem = o->coll == ALLTOALL || o->coll == BCAST ? 1 : (o->is_double ? 8 : 4);
    b->type = b->elem == 1 ? MPI_BYTE : o->is_double ? MPI_DOUBLE : MPI_INT;
    b->count = o->bytes / b->elem;
    if (o->coll == ALLTOALL) b->send_bytes = b->recv_bytes = o->bytes * (size_t)size;
    else if (o->coll == BCAST) b->recv_bytes = o->bytes;
    else b->send_bytes = b->recv_bytes = o->bytes;
    b->send = zalloc(b->send_bytes);
    b->recv = zalloc(b->recv_bytes);
}

static void put_value(const struct bufs *b, uint8_t *buf, size_t i, long long v) {
    if (b->elem == 8) { double d = (double)v; memcpy(buf + 8 * i, &d, 8); }
    else { int x = (int)v; memcpy(buf + 4 * i, &x, 4); }
}

static long long get_value(const struct bufs *b, const uint8_t *buf, size_t i, int *exact) {
    if (b->elem == 8) {
        double d;
        memcpy(&d, buf + 8 * i, 8);
        *exact = d == (double)(long long)d && d > -1e15 && d < 1e15;
        return *exact ? (long long)d : 0;
    }
    int x;
    memcpy(&x, buf + 4 * i, 4);
    *exact = 1;
    return x;
}

/* The inputs of iteration k, and the receive side cleared to values no result has. */
static void prepare(const struct bufs *b, const struct opts *o, int rank, int size, int k) {
    switch (o->coll) {
    case ALLTOALL:
        for (int d = 0; d < size; d++)
            fill_block(b->send + (size_t)d * o->bytes, o->bytes, (uint64_t)rank, (uint64_t)d, (uint64_t)k);
        if (o->in_place) memcpy(b->recv, b->send, b->recv_bytes);
        else memset(b->recv, 0, b->recv_bytes);
        break;
    case BCAST:
        if (rank == o->root) fill_block(b->recv, o->bytes, (uint64_t)o->root, (uint64_t)size, (uint64_t)k);
        else memset(b->recv, 0, b->recv_bytes);
        break;
    default:
        for (size_t i = 0; i < b->count; i++) put_value(b, b->send, i, contribution(rank, (long long)i, k));
        if (o->in_place && (o->coll == ALLREDUCE || rank == o->root)) memcpy(b->recv, b->send, b->recv_bytes);
        else memset(b->recv, 0xff, b->recv_bytes); /* -1 everywhere: no result is negative */
    }
}

/* Bytes of iteration k's result at this rank that differ from the reference; *checked
 * the bytes looked at. */
static long long verify(const struct bufs *b, const struct opts *o, int rank, int size, int k, long long *checked) {
    long long bad = 0;
    if (o->coll == ALLTOALL) {
        for (int s = 0; s < size; s++)
            bad += check_block(b->recv + (size_t)s * o->bytes, o->bytes, (uint64_t)s, (uint64_t)rank, (uint64_t)k);
        *checked += (long long)b->recv_bytes;
    } else if (o->coll == BCAST) {
        bad = check_block(b->recv, o->bytes, (uint64_t)o->root, (uint64_t)size, (uint64_t)k);
        *checked += (long long)o->bytes;
    } else if (o->coll == ALLREDUCE || rank == o->root) {
        for (size_t i = 0; i < b->count; i++) {
            int exact;
            long long v = get_value(b, b->recv, i, &exact);
            if (!exact || v != expected(o->op_max, size, (long long)i, k)) bad += (long long)b->elem;
        }
        *checked += (long long)b->recv_bytes;
    }
    return bad;
}

static int call(const struct bufs *b, const struct opts *o, MPI_Comm comm, int rank) {
    int lib = !o->native;
    const void *sb = o->in_place ? MPI_IN_PLACE : b->send;
    MPI_Op op = o->op_max ? MPI_MAX : MPI_SUM;
    int n = (int)b->count;
    switch (o->coll) {
    case ALLTOALL:
        return lib ? collsched_alltoall(sb, n, MPI_BYTE, b->recv, n, MPI_BYTE, comm)
                   : MPI_Alltoall(sb, n, MPI_BYTE, b->recv, n, MPI_BYTE, comm);
    case BCAST:
        return lib ? collsched_bcast(b->recv, n, MPI_BYTE, o->root, comm)
                   : MPI_Bcast(b->recv, n, MPI_BYTE, o->root, comm);
    case REDUCE:
        if (rank != o->root) sb = b->send; /* MPI_IN_PLACE only at the root */
        return lib ? collsched_reduce(sb, b->recv, n, b->type, op, o->root, comm)
                   : MPI_Reduce(sb, b->recv, n, b->type, op, o->root, comm);
    default:
        return lib ? collsched_allreduce(sb, b->recv, n, b->type, op, comm)
                   : MPI_Allreduce(sb, b->recv, n, b->type, op, comm);
    }
}

/* One JSON matrix (iterations x ranks) of column col (1 arrival, 2 exit) of the gathered
 * times, relative to each iteration's first barrier exit. */
static void print_times(const double *every, int size, int its, int col) {
    for (int k = 0; k < its; k++) {
        double origin = every[3 * k];
        for (int p = 1; p < size; p++)
            if (every[(size_t)p * 3 * its + 3 * k] < origin) origin = every[(size_t)p * 3 * its + 3 * k];
        printf(k ? ", [" : "[");
        for (int p = 0; p < size; p++)
            printf(p ? ", %.17g" : "%.17g", every[(size_t)p * 3 * its + 3 * k + col] - origin);
        printf("]");
    }
}

static void report(const struct opts *o, int size, const double *times, long long errors, long long checked,
                   int fallbacks, int call_errors, const char *reason, char (*used)[256]) {
    int rank, its = o->iterations;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    long long in[2] = {errors, checked}, sum[2] = {0, 0};
    int cin[2] = {fallbacks, call_errors}, csum[2] = {0, 0};
    MPI_Reduce(in, sum, 2, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Reduce(cin, csum, 2, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    double *every = rank == 0 ? malloc(3 * (size_t)its * (size_t)size * sizeof *every) : NULL;
    MPI_Gather(times, 3 * its, MPI_DOUBLE, every, 3 * its, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        int ok = sum[0] == 0 && csum[0] == 0 && csum[1] == 0 && sum[1] > 0;
        printf("{\"program\": \"collsched-coll-bench\", \"collective\": \"%s\", \"ranks\": %d, \"bytes\": %zu, "
               "\"root\": %d, \"dtype\": \"%s\", \"op\": \"%s\", \"in_place\": %s, \"iterations\": %d, "
               "\"max_delay_s\": %.17g, \"seed\": %llu, \"smpi\": %s, \"native\": %s, \"errors\": %lld, "
               "\"checked_bytes\": %lld, \"fallbacks\": %d, \"fallback_reason\": \"%s\", \"call_errors\": %d, "
               "\"data_ok\": %s, \"arrivals\": [",
               COLL_NAMES[o->coll], size, o->bytes, o->root, o->is_double ? "double" : "int",
               o->op_max ? "max" : "sum", o->in_place ? "true" : "false", its, o->max_delay_s,
               (unsigned long long)o->seed, LAB_SMPI ? "true" : "false", o->native ? "true" : "false",
               sum[0], sum[1], csum[0], reason, csum[1], ok ? "true" : "false");
        print_times(every, size, its, 1);
        printf("], \"exits\": [");
        print_times(every, size, its, 2);
        printf("], \"used\": [");
        for (int k = 0; k < its; k++) printf(k ? ", \"%s\"" : "\"%s\"", used[k]);
        printf("]}\n");
        fflush(stdout);
    }
    free(every);
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "--version")) { /* before MPI_Init: no mpirun needed */
        printf("%s %s\n", "collsched-coll-bench", COLLSCHED_BUILD_VERSION);
        return 0;
    }
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    struct opts o;
    int rc = parse(argc, argv, &o, rank, size);
    if (rc) { MPI_Finalize(); return rc; }
    if (o.schedule) collsched_set_schedules(o.schedule);
    const char *strict_env = getenv("COLLSCHED_STRICT");
    int strict = strict_env && !strcmp(strict_env, "1");
    /* The collective runs on a communicator of its own, as libraries do; errors return
     * (a call that fails is counted, the run still reports). */
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    if (!strict) MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    struct bufs b;
    make_bufs(&b, &o, size);
    int its = o.iterations;
    double *times = malloc(3 * (size_t)its * sizeof *times);
    char (*used)[256] = calloc((size_t)its, sizeof *used);
    char reason[256] = "";
    long long errors = 0, checked = 0;
    int fallbacks = 0, call_errors = 0;

    prepare(&b, &o, rank, size, 0);
    call(&b, &o, comm, rank); /* untimed: loading and proving the schedule is a one-off cost */
    for (int k = 0; k < its; k++) {
        prepare(&b, &o, rank, size, k);
        double share = uniform(o.seed, (uint64_t)k, (uint64_t)rank) * o.max_delay_s;
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        usleep((useconds_t)((BASE_COMPUTE_S + share) * 1e6 + 0.5));
        double a = MPI_Wtime();
        int err = call(&b, &o, comm, rank);
        double f = MPI_Wtime();
        if (err != MPI_SUCCESS) call_errors++;
        if (!o.native) {
            collsched_call_info info;
            if (strict) /* a call that returned was served by the schedule: strict refuses the rest */
                json_text(used[k], sizeof used[k],
                          collsched_last_call(comm, &info) == MPI_SUCCESS && info.used_schedule ? info.schedule
                                                                                                : o.schedule);
            else if (collsched_last_call(comm, &info) != MPI_SUCCESS) {
                fallbacks++;
                json_text(reason, sizeof reason, "collsched_last_call failed");
            } else if (info.used_schedule) json_text(used[k], sizeof used[k], info.schedule);
            else {
                fallbacks++;
                json_text(reason, sizeof reason, info.reason);
            }
        }
        if (o.inject_error && k == 0 && b.recv_bytes > 0
            && rank == (o.coll == REDUCE ? o.root : (size > 1 ? 1 : 0)))
            b.recv[0] ^= 0x5a;
        errors += verify(&b, &o, rank, size, k, &checked);
        times[3 * k] = t0;
        times[3 * k + 1] = a;
        times[3 * k + 2] = f;
    }
    report(&o, size, times, errors, checked, fallbacks, call_errors, reason, used);
    free(times);
    free(used);
    free(b.send);
    free(b.recv);
    MPI_Comm_free(&comm);
    if (!o.native) collsched_finalize();
    MPI_Finalize();
    return 0;
}
