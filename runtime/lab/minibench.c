/* collsched-minibench: the mini-benchmark of the BDR paper (Listing 4), for the lab.
 *
 * Every iteration: two barriers, emulated computation of 100 ms + u * maxDelay split in
 * two halves at a 50% edge (u from the same seeded generator as
 * compiler/collsched/lab/arrivals.py), then the allgather under test, timed per rank,
 * then a check of the received data. Rank 0 prints one JSON object with every rank's
 * arrival and exit time per iteration, so the Python side computes the BDR metrics.
 *
 * Builds with mpicc (real MPI) and smpicc (SimGrid SMPI: usleep is simulated time;
 * with --shared-data large buffers use SMPI's partial shared malloc, keeping the first
 * page of every piece private so the check still covers every piece).
 *
 *   collsched-minibench --bytes B --iterations N --max-delay-ms D --seed S
 *                       [--schedule FILE_OR_DIR | --native | --library | --pat ALG |
 *                        --schedules PATTERN] [--flat-iterations K] [--shared-data]
 *                       [--pat-tau S] [--pat-schedules PATTERN] [--late-ms MS]
 *                       [--delays FILE] [--allow-fallback]
 *
 * --pat ALG runs the allgather through the PAT engine (collsched.h): PAT_ProcessingStart,
 * half the computation, PAT_Edge(50), the other half, PAT_ProcessingEnd, then the call.
 * ALG bdr builds BDR online; ALG cache picks each iteration's schedule from the schedule
 * cache COLLSCHED_SCHEDULES names, by the ranks' PAT_Edge predictions (docs/cache.md); any
 * other ALG takes compiled schedules, one per iteration, from PATTERN (a printf pattern
 * with one %d: the iteration index). --late-ms makes the
 * rank predicted to arrive first in each iteration arrive MS later than predicted (an
 * unpredicted delay after its edge): the safety tests of wrong predictions.
 *
 * --delays FILE replays recorded computation delays instead of the seeded u * maxDelay
 * (the lab's --pap: recurring load patterns, docs/lab.md). The file is text:
 *
 *     ranks N iterations K
 *     d(0,0) d(0,1) ... d(0,N-1)        <- K lines, one per iteration, N delays each
 *     ...
 *
 * one space between fields, delays in seconds (decimal, finite, 0 to 3600), N the
 * number of ranks of the run, K at least --iterations (the first --iterations lines are
 * used). Anything else is refused with one line naming the line and what was expected.
 *
 * --schedule DIR with a schedule cache (docs/cache.md) runs the runtime's whole selection
 * path; --allow-fallback then counts an iteration the MPI library served (the cache's
 * warm-up, a miss) as a fallback without failing data_ok. --library calls
 * collsched_allgather without any schedule: the MPI library's collective through the
 * runtime (the arrival trace, COLLSCHED_ARRIVALS, records it; implies --allow-fallback).
 * --schedules PATTERN (the oracle): per iteration its own schedule file (printf pattern
 * with one %d, the iteration); before the iteration's barriers it selects that file,
 * duplicates a fresh communicator, makes one untimed warm-up call on it (loading and
 * proving are a one-off cost), then the timed call, then frees it.
 *
 * The JSON line's "used" lists, per iteration, the schedule file rank 0's call ran
 * (collsched_last_call), "" where the MPI library's collective ran. collsched_finalize()
 * (the arrival trace and cache statistics) is called before MPI_Finalize, except with
 * --native: an unmodified program's MPI_Finalize does that under the preload library.
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

#ifndef COLLSCHED_BUILD_VERSION  /* the Makefile passes VERSION (compiler/collsched/__init__.py) */
#define COLLSCHED_BUILD_VERSION "unknown"
#endif

#ifdef SMPI_HELPERS_H
#define LAB_SMPI 1
#else
#define LAB_SMPI 0
#endif

#define BASE_COMPUTE_S 0.100
#define PAGE 4096u

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

static inline uint8_t pattern(uint64_t origin, uint64_t offset, uint64_t iteration) {
    return (uint8_t)(origin * 131u + offset * 7u + (offset >> 9) + iteration * 29u + 1u);
}

/* Copy text into a JSON string body (quotes, backslashes and controls dropped). */
static void json_text(char *out, size_t cap, const char *in) {
    size_t n = 0;
    for (; *in && n + 1 < cap; in++)
        if (*in != '"' && *in != '\\' && (unsigned char)*in >= 0x20) out[n++] = *in;
    out[n] = 0;
}

/* One JSON matrix (iterations x ranks) of column `col` (1 arrival, 2 exit) of the gathered
 * times, relative to each iteration's origin. */
static void print_times(const double *every, const double *origin, int size, int all, int col)
{
    for (int k = 0; k < all; k++) {
        printf(k ? ", [" : "[");
        for (int p = 0; p < size; p++)
            printf(p ? ", %.17g" : "%.17g", every[(size_t)p * 3 * all + 3 * k + col] - origin[k]);
        printf("]");
    }
}

struct opts {
    size_t bytes;
    int iterations, flat_iterations;
    double max_delay_s;
    uint64_t seed;
    const char *schedule; /* NULL: the MPI library's MPI_Allgather */
    int shared;
    int print_u; /* print the generator's values and exit (C/Python agreement test) */
    int inject_error; /* corrupt one received byte on rank 1 (proves the check can fail) */
    const char *pat;  /* PAT engine algorithm, or NULL */
    const char *pat_schedules;
    double pat_tau, late_s;
    const char *delays_file; /* --delays: replayed delays instead of the seeded ones */
    const char *oracle;      /* --schedules PATTERN: a fresh communicator per iteration */
    int library, allow_fallback;
};

static int usage(int rank, const char *msg) {
    if (rank == 0)
        fprintf(stderr, "collsched-minibench: %s\nusage: collsched-minibench --bytes B --iterations N "
                        "--max-delay-ms D --seed S [--schedule FILE_OR_DIR | --native | --library | --pat ALG | "
                        "--schedules PATTERN] [--flat-iterations K] [--shared-data] [--delays FILE] "
                        "[--allow-fallback]\n", msg);
    return 2;
}

/* A printf pattern with exactly one %d and no other conversion (%% allowed). */
static int one_int_conversion(const char *p) {
    int n = 0;
    for (; *p; p++) {
        if (*p != '%') continue;
        if (p[1] == '%') { p++; continue; }
        if (p[1] != 'd') return 0;
        n++;
        p++;
    }
    return n == 1;
}

static int parse(int argc, char **argv, struct opts *o, int rank) {
    memset(o, 0, sizeof *o);
    o->iterations = 4;
    o->flat_iterations = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (!strcmp(a, "--native")) { o->schedule = NULL; continue; }
        if (!strcmp(a, "--library")) { o->library = o->allow_fallback = 1; continue; }
        if (!strcmp(a, "--allow-fallback")) { o->allow_fallback = 1; continue; }
        if (!strcmp(a, "--shared-data")) { o->shared = 1; continue; }
        if (!strcmp(a, "--print-u")) { o->print_u = 1; continue; }
        if (!strcmp(a, "--inject-error")) { o->inject_error = 1; continue; }
        if (!v) return usage(rank, "an option is missing its value");
        i++;
        if (!strcmp(a, "--bytes")) o->bytes = strtoull(v, &end, 10);
        else if (!strcmp(a, "--iterations")) o->iterations = (int)strtol(v, &end, 10);
        else if (!strcmp(a, "--flat-iterations")) o->flat_iterations = (int)strtol(v, &end, 10);
        else if (!strcmp(a, "--max-delay-ms")) o->max_delay_s = strtod(v, &end) / 1e3;
        else if (!strcmp(a, "--seed")) o->seed = strtoull(v, &end, 10);
        else if (!strcmp(a, "--schedule")) { o->schedule = v; end = (char *)v + strlen(v); }
        else if (!strcmp(a, "--pat")) { o->pat = v; end = (char *)v + strlen(v); }
        else if (!strcmp(a, "--pat-schedules")) { o->pat_schedules = v; end = (char *)v + strlen(v); }
        else if (!strcmp(a, "--pat-tau")) o->pat_tau = strtod(v, &end);
        else if (!strcmp(a, "--late-ms")) o->late_s = strtod(v, &end) / 1e3;
        else if (!strcmp(a, "--delays")) { o->delays_file = v; end = (char *)v + strlen(v); }
        else if (!strcmp(a, "--schedules")) { o->oracle = v; end = (char *)v + strlen(v); }
        else return usage(rank, "unknown option");
        if (!end || *end) return usage(rank, "a value is not a number");
    }
    if (o->iterations < 1 || o->flat_iterations < 0 || o->max_delay_s < 0 || o->late_s < 0)
        return usage(rank, "iterations >= 1, flat iterations >= 0, max delay and late >= 0 expected");
    if (o->pat && strcmp(o->pat, "bdr") && strcmp(o->pat, "cache") && !o->pat_schedules)
        return usage(rank, "--pat ALG other than bdr and cache needs --pat-schedules PATTERN");
    if (o->pat_schedules && !strstr(o->pat_schedules, "%d"))
        return usage(rank, "--pat-schedules expects a pattern with %d (the iteration)");
    if (o->oracle && !one_int_conversion(o->oracle))
        return usage(rank, "--schedules expects a pattern with one %d (the iteration) and no other %");
    if (!!o->oracle + !!o->pat + !!o->schedule + o->library > 1)
        return usage(rank, "give one of --schedule, --schedules, --library and --pat");
    return 0;
}

#define DELAY_MAX_S 3600.0
#define DELAY_LINE_MAX (1u << 24)

/* One line of f (without its newline) into a growing buffer; 0 at end of file, -1 when
 * the line is longer than DELAY_LINE_MAX or has a NUL byte. */
static int read_line(FILE *f, char **buf, size_t *cap) {
    size_t n = 0;
    int c;
    while ((c = fgetc(f)) != EOF && c != '\n') {
        if (c == 0 || n + 2 > DELAY_LINE_MAX) return -1;
        if (n + 2 > *cap) {
            size_t cap2 = *cap ? 2 * *cap : 256;
            char *b = realloc(*buf, cap2);
            if (!b) return -1;
            *buf = b;
            *cap = cap2;
        }
        (*buf)[n++] = (char)c;
    }
    if (c == EOF && n == 0) return 0;
    if (!*buf) { *buf = malloc(1); *cap = 1; if (!*buf) return -1; }
    (*buf)[n] = 0;
    return 1;
}

/* A whole decimal number in [lo, hi] at *p, followed by one space or the end; advances *p. */
static int field(const char **p, double lo, double hi, double *out) {
    const char *s = *p;
    if (!(*s == '.' || (*s >= '0' && *s <= '9'))) return 0; /* no sign, no space, no inf/nan */
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s || !(v >= lo && v <= hi)) return 0;
    if (*end == ' ' && end[1] != 0) end++;
    else if (*end != 0) return 0;
    *p = end;
    *out = v;
    return 1;
}

/* ASCII digits (no sign, at most 7) as a whole number; returns the end, or NULL. */
static const char *whole(const char *s, int *out) {
    int n = 0, v = 0;
    for (; *s >= '0' && *s <= '9'; s++, n++) {
        if (n == 7) return NULL;
        v = 10 * v + (*s - '0');
    }
    if (!n) return NULL;
    *out = v;
    return s;
}

/* --delays FILE (format: the header comment) for `size` ranks and at least `iterations`
 * iterations: a malloc'ed iterations x size matrix, or NULL with *why set. */
static double *load_delays(const char *path, int size, int iterations, char *why, size_t cap) {
    FILE *f = fopen(path, "r");
    if (!f) { snprintf(why, cap, "%s: cannot be read", path); return NULL; }
    char *line = NULL;
    size_t lcap = 0;
    double *d = NULL;
    int ranks = 0, its = 0, got = 0, ok = 0;
    const char *h = NULL;
    if (read_line(f, &line, &lcap) != 1 || strncmp(line, "ranks ", 6) || !(h = whole(line + 6, &ranks))
        || strncmp(h, " iterations ", 12) || !(h = whole(h + 12, &its)) || *h || ranks < 1 || its < 1) {
        snprintf(why, cap, "%s: line 1: expected `ranks N iterations K`", path);
        goto out;
    }
    if (ranks != size) { snprintf(why, cap, "%s: line 1: ranks %d, expected %d (the run's ranks)", path, ranks, size); goto out; }
    if (its < iterations) {
        snprintf(why, cap, "%s: line 1: iterations %d, expected at least %d (--iterations)", path, its, iterations);
        goto out;
    }
    d = malloc((size_t)iterations * (size_t)size * sizeof *d);
    if (!d) { snprintf(why, cap, "%s: out of memory", path); goto out; }
    for (int k = 0; k < its; k++) {
        int r = read_line(f, &line, &lcap);
        if (r != 1) {
            snprintf(why, cap, "%s: line %d: expected %d delays (seconds, 0 to %g, one space between)", path,
                     k + 2, size, DELAY_MAX_S);
            goto out;
        }
        const char *p = line;
        for (int q = 0; q < size; q++) {
            double v;
            if (!field(&p, 0.0, DELAY_MAX_S, &v) || (q + 1 < size) == (*p == 0)) {
                snprintf(why, cap, "%s: line %d, delay %d: expected %d delays (seconds, 0 to %g, one space "
                         "between)", path, k + 2, q + 1, size, DELAY_MAX_S);
                goto out;
            }
            if (k < iterations) d[(size_t)k * size + q] = v;
        }
        got++;
    }
    if (read_line(f, &line, &lcap) != 0) {
        snprintf(why, cap, "%s: line %d: expected the end of the file (%d iterations)", path, its + 2, its);
        goto out;
    }
    ok = got == its;
out:
    free(line);
    fclose(f);
    if (!ok) { free(d); return NULL; }
    return d;
}

/* Buffers: plain malloc, or (SMPI, --shared-data) one physical copy for all ranks except
 * the first page of every piece, which stays private and is checked. Only the first page:
 * SimGrid 3.32 drops a private block that straddles the start of a message's buffer when
 * it copies private blocks, and a private last page of piece p would merge with the first
 * page of piece p+1 into such a block. */
static void *lab_alloc(size_t bytes, size_t piece, size_t pieces, int shared) {
#if LAB_SMPI
    if (shared && piece >= 4 * PAGE && piece % PAGE == 0) {
        size_t *off = malloc(2 * pieces * sizeof *off);
        for (size_t p = 0; p < pieces; p++) {
            off[2 * p] = p * piece + PAGE;
            off[2 * p + 1] = (p + 1) * piece;
        }
        void *buf = SMPI_PARTIAL_SHARED_MALLOC(bytes, off, (int)pieces);
        free(off);
        return buf;
    }
#else
    (void)piece; (void)pieces; (void)shared;
#endif
    return malloc(bytes ? bytes : 1);
}

/* The byte ranges of a piece that hold real data: all of it, or its private pages. */
static int checked_ranges(size_t piece, int shared, size_t r[2][2]) {
    if (LAB_SMPI && shared && piece >= 4 * PAGE && piece % PAGE == 0) {
        r[0][0] = 0; r[0][1] = PAGE;
        return -1; /* one range, and the data are shared beyond it */
    }
    r[0][0] = 0; r[0][1] = piece;
    return 1;
}

/* Rank p's computation delay (beyond the base) in imbalanced iteration k: replayed, or
 * the seeded u * maxDelay. */
static double delay_of(const struct opts *o, const double *delays, int k, int p, int size) {
    if (delays) return delays[(size_t)k * size + p];
    return uniform(o->seed, (uint64_t)k, (uint64_t)p) * o->max_delay_s;
}

/* The rank whose arrival is predicted first in iteration k (smallest share; the lowest
 * rank among equals). */
static int predicted_first(const struct opts *o, const double *delays, int k, int size) {
    int best = 0;
    for (int p = 1; p < size; p++)
        if (delays ? delays[(size_t)k * size + p] < delays[(size_t)k * size + best]
                   : uniform(o->seed, (uint64_t)k, (uint64_t)p) < uniform(o->seed, (uint64_t)k, (uint64_t)best))
            best = p;
    return best;
}

static int pat_wanted(int argc, char **argv) {
    for (int i = 1; i < argc; i++) if (!strcmp(argv[i], "--pat")) return 1;
    return 0;
}

/* Emulated computation: under the PAT engine, sleeps that drive its explicit progress. */
static void compute(double seconds, int pat) {
    if (pat) PAT_Sleep(seconds);
    else usleep((useconds_t)(seconds * 1e6 + 0.5));
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "--version")) {  /* before MPI_Init: no mpirun needed */
        printf("%s %s\n", "collsched-minibench", COLLSCHED_BUILD_VERSION);
        return 0;
    }
    int provided;
    /* The PAT engine's progress thread needs MPI_THREAD_MULTIPLE (real MPI). */
    MPI_Init_thread(&argc, &argv, pat_wanted(argc, argv) ? MPI_THREAD_MULTIPLE : MPI_THREAD_SINGLE,
                    &provided);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    struct opts o;
    int rc = parse(argc, argv, &o, rank);
    if (rc) { MPI_Finalize(); return rc; }
    if (o.print_u) {
        if (rank == 0)
            for (int k = 0; k < o.iterations; k++)
                for (int r = 0; r < size; r++)
                    printf("%d %d %.17g\n", k, r, uniform(o.seed, (uint64_t)k, (uint64_t)r));
        MPI_Finalize();
        return 0;
    }
    double *delays = NULL;
    if (o.delays_file) {
        char why[512];
        delays = load_delays(o.delays_file, size, o.iterations, why, sizeof why);
        if (!delays) {  /* every rank read the same file: all stop here */
            if (rank == 0) fprintf(stderr, "collsched-minibench: --delays %s\n", why);
            MPI_Finalize();
            return 2;
        }
    }
    if (o.schedule) collsched_set_schedules(o.schedule);
    /* collsched_allgather, else MPI_Allgather */
    int use_lib = o.schedule || o.pat || o.library || o.oracle;
    /* The collective runs on a communicator of its own, as libraries do, freed before
     * MPI_Finalize so that the runtime's per-communicator state goes with it. */
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    if (o.bytes > (size_t)INT32_MAX) { MPI_Finalize(); return usage(rank, "bytes per rank must fit an int"); }

    size_t piece = o.bytes, total = piece * (size_t)size;
    uint8_t *send = lab_alloc(piece, piece, 1, o.shared);
    uint8_t *recv = lab_alloc(total, piece, (size_t)size, o.shared);
    size_t ranges[2][2];
    int nranges = checked_ranges(piece, o.shared, ranges);
    int shared_data = nranges < 0;
    if (shared_data) nranges = 1;
    int all = o.iterations + o.flat_iterations;
    double *times = malloc(3 * (size_t)all * sizeof *times); /* barrier exit, arrival, exit */
    long long errors = 0;
    int fallbacks = 0;
    char reason[256] = "";
    char (*used)[256] = calloc((size_t)all, sizeof *used); /* the schedule each iteration ran */

    /* One untimed call first: loading and agreeing on the schedule (or the MPI library's
     * own set-up) is a one-off cost, not part of any iteration. */
    memset(send, 0, piece ? piece : 1);
    if (o.oracle)
        ; /* a warm-up call per iteration, on its own communicator */
    else if (use_lib)
        collsched_allgather(send, (int)piece, MPI_BYTE, recv, (int)piece, MPI_BYTE, comm);
    else
        MPI_Allgather(send, (int)piece, MPI_BYTE, recv, (int)piece, MPI_BYTE, comm);

    if (o.pat) {
        PAT_Init();
        PAT_UseAlg(o.pat);
        PAT_Declare(comm, (int)piece, o.pat_tau);
    }
    for (int k = 0; k < all; k++) {
        int flat = k >= o.iterations;
        MPI_Comm c = comm;
        if (o.oracle) {  /* this iteration's schedule, loaded and proven before the barriers */
            char path[4096];
            snprintf(path, sizeof path, o.oracle, k);
            collsched_set_schedules(path);
            MPI_Comm_dup(MPI_COMM_WORLD, &c);
            memset(send, 0, piece ? piece : 1);
            collsched_allgather(send, (int)piece, MPI_BYTE, recv, (int)piece, MPI_BYTE, c);
        }
        if (o.pat_schedules) {
            char path[4096];
            snprintf(path, sizeof path, o.pat_schedules, k);
            PAT_UseSchedule(path);
        }
        for (int g = 0; g < nranges; g++)
            for (size_t j = ranges[g][0]; j < ranges[g][1]; j++)
                send[j] = pattern((uint64_t)rank, j, (uint64_t)k);
        for (int p = 0; p < size; p++)
            for (int g = 0; g < nranges; g++)
                memset(recv + (size_t)p * piece + ranges[g][0], 0, ranges[g][1] - ranges[g][0]);
        double share = flat ? 0.0 : delay_of(&o, delays, k, rank, size);
        double half = (BASE_COMPUTE_S + share) / 2;
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        if (o.pat) PAT_ProcessingStart();
        compute(half, o.pat != NULL);
        if (o.pat) PAT_Edge(50.0);
        compute(half, o.pat != NULL);
        if (o.late_s > 0 && !flat && rank == predicted_first(&o, delays, k, size)) compute(o.late_s, o.pat != NULL);
        if (o.pat) PAT_ProcessingEnd();
        double a = MPI_Wtime();
        if (use_lib)
            collsched_allgather(send, (int)piece, MPI_BYTE, recv, (int)piece, MPI_BYTE, c);
        else
            MPI_Allgather(send, (int)piece, MPI_BYTE, recv, (int)piece, MPI_BYTE, c);
        double f = MPI_Wtime();
        if (use_lib) {
            collsched_call_info info;
            collsched_last_call(c, &info);
            if (info.used_schedule) json_text(used[k], sizeof used[k], info.schedule);
            else {
                fallbacks++;
                json_text(reason, sizeof reason, info.reason);
            }
        }
        if (o.inject_error && k == 0 && rank == 1 && size > 1 && piece > 0) recv[0] ^= 0x5a;
        times[3 * k] = t0;
        times[3 * k + 1] = a;
        times[3 * k + 2] = f;
        for (int p = 0; p < size; p++)
            for (int g = 0; g < nranges; g++)
                for (size_t j = ranges[g][0]; j < ranges[g][1]; j++)
                    if (recv[(size_t)p * piece + j] != pattern((uint64_t)p, j, (uint64_t)k)) errors++;
        if (o.oracle) MPI_Comm_free(&c);
    }

    long long all_errors = 0;
    int all_fallbacks = 0;
    MPI_Reduce(&errors, &all_errors, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Reduce(&fallbacks, &all_fallbacks, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    /* Times on the global clock (SimGrid's, or one machine's), relative to the first rank
     * that left the double barrier in that iteration: ranks leave it up to a latency apart. */
    double *every = rank == 0 ? malloc(3 * (size_t)all * (size_t)size * sizeof *every) : NULL;
    MPI_Gather(times, 3 * all, MPI_DOUBLE, every, 3 * all, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    double *origin = rank == 0 ? malloc((size_t)all * sizeof *origin) : NULL;
    if (rank == 0)
        for (int k = 0; k < all; k++) {
            origin[k] = every[3 * k];
            for (int p = 1; p < size; p++)
                if (every[(size_t)p * 3 * all + 3 * k] < origin[k]) origin[k] = every[(size_t)p * 3 * all + 3 * k];
        }
    if (rank == 0) {
        printf("{\"ranks\": %d, \"bytes\": %zu, \"iterations\": %d, \"flat_iterations\": %d, "
               "\"max_delay_s\": %.17g, \"seed\": %llu, \"smpi\": %s, \"shared_data\": %s, "
               "\"checked_bytes_per_piece\": %zu, \"errors\": %lld, \"fallbacks\": %d, "
               "\"fallback_reason\": \"%s\", \"data_ok\": %s, \"arrivals\": [",
               size, o.bytes, o.iterations, o.flat_iterations, o.max_delay_s,
               (unsigned long long)o.seed, LAB_SMPI ? "true" : "false",
               shared_data ? "true" : "false",
               shared_data ? (size_t)PAGE : piece, all_errors, all_fallbacks,
               reason,
               all_errors == 0 && (all_fallbacks == 0 || o.allow_fallback) ? "true" : "false");
        print_times(every, origin, size, all, 1);
        printf("], \"exits\": [");
        print_times(every, origin, size, all, 2);
        printf("], \"used\": [");
        for (int k = 0; k < all; k++) printf(k ? ", \"%s\"" : "\"%s\"", used[k]);
        printf("]}\n");
        fflush(stdout);
        free(every);
        free(origin);
    }
    free(times);
    free(used);
    free(delays);
    if (o.pat) PAT_Finalize();
    MPI_Comm_free(&comm);
    free(send); /* under SMPI, free() also releases shared blocks */
    free(recv);
    /* The arrival trace and the cache statistics (COLLSCHED_ARRIVALS, COLLSCHED_STATS). Not
     * with --native: that is the unmodified program, whose MPI_Finalize does it under the
     * preload library (this binary's own copy of the runtime served no call). */
    if (use_lib) collsched_finalize();
    MPI_Finalize();
    return 0;
}
