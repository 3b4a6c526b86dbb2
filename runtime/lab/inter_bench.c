/* collsched-inter-bench: times intergroup allgather / allgatherv (issue 19) for the lab.
 *
 * World ranks 0..p-1 are group A, p..size-1 group B (as MPI_Intercomm_merge numbers them
 * with A low). Every iteration of every implementation: a barrier, an optional seeded
 * arrival delay (u * maxDelay, u from the generator of compiler/collsched/lab/arrivals.py),
 * the call, timed per rank, then a check of the received bytes: byte y of rank i of group
 * g is pattern(g, i, y, iteration). Rank 0 prints one JSON line with every rank's arrival
 * and exit per iteration and implementation.
 *
 * Implementations (--impls, comma-separated; several are interleaved: iteration k runs
 * them in turn, starting with the (k mod n)-th, so that their ratios come from one run):
 *
 *   sched       the collsched runtime with the schedule --schedule names. Under SimGrid
 *               SMPI, which has no MPI_Intercomm_create (3.32), the merged entries
 *               collsched_inter_allgather(v)_merged on a duplicate of MPI_COMM_WORLD split
 *               at p; under real MPI a true intercommunicator (MPI_Comm_split +
 *               MPI_Intercomm_create) and collsched_allgather(v).
 *   rootgather  what an MPI library does for intercommunicators, from the library's own
 *               intracommunicator collectives on the split communicators: MPI_Gather(v) to
 *               each group's root, the roots swap with MPI_Sendrecv, MPI_Bcast in each group.
 *   native      real MPI: the library's own MPI_Allgather(v) on the intercommunicator;
 *               SMPI: rootgather (the library cannot build an intercommunicator).
 *
 *   collsched-inter-bench --collective allgather|allgatherv --p P --sizes-a LIST
 *       --sizes-b LIST --impls LIST [--schedule FILE] [--iterations N] [--max-delay-ms D]
 *       [--seed S] [--shared-data] [--inject-error]
 *
 * LIST of sizes: the block of every rank of the group in bytes, comma-separated (p of
 * them for A, size - p for B; allgather: all equal within a group). The receive layout is
 * the remote group's blocks back to back in rank order (allgatherv: displs the prefix
 * sums). --shared-data (SMPI): receive buffers (and the roots' gather buffers) in SMPI's
 * partial shared malloc, private only at one page per MiB and the last page, and only the
 * first byte of each private page is checked: SimGrid 3.32 skips the part of a private
 * block that lies before a message's start, so a later byte of such a page may never be
 * written when a message starts inside it (runtime/lab/minibench.c says more). A page's
 * first byte always comes with a message starting at or before it. --inject-error flips
 * one checked byte at rank 1 after each implementation's first timed call (proves that
 * the check fails). A sched call the MPI library served (collsched_last_call) counts as
 * a fallback and fails data_ok; under COLLSCHED_STRICT=1 (the lab's runs) there is no
 * such call: a call its schedule does not serve fails the run. MPI_COMM_WORLD keeps
 * MPI_ERRORS_ARE_FATAL; a call that returns an error anyway counts in call_errors.
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

#define PAGE 4096u
#define STRIDE ((size_t)1 << 20) /* one private, checked page per MiB of shared data */
#define MAX_IMPLS 3

enum impl { SCHED, ROOTGATHER, NATIVE };
static const char *const IMPL_NAMES[] = {"sched", "rootgather", "native"};

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

/* Byte y of the block of rank i of group g in iteration k. */
static inline uint8_t pattern(uint64_t g, uint64_t i, uint64_t y, uint64_t k) {
    return (uint8_t)((g * 251u + i) * 131u + y * 7u + (y >> 9) + k * 29u + 1u);
}

struct opts {
    int allgatherv, p, iterations, shared, inject_error;
    int impls[MAX_IMPLS], nimpls;
    double max_delay_s;
    uint64_t seed;
    const char *schedule, *sizes_a, *sizes_b;
};

static int usage(int rank, const char *msg) {
    if (rank == 0)
        fprintf(stderr, "collsched-inter-bench: %s (usage: collsched-inter-bench --collective "
                        "allgather|allgatherv --p P --sizes-a LIST --sizes-b LIST --impls "
                        "sched,rootgather,native [--schedule FILE] [--iterations N] "
                        "[--max-delay-ms D] [--seed S] [--shared-data] [--inject-error])\n", msg);
    return 2;
}

static int parse_impls(const char *v, struct opts *o) {
    char buf[128];
    snprintf(buf, sizeof buf, "%s", v);
    o->nimpls = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int found = -1;
        for (int i = 0; i < MAX_IMPLS; i++)
            if (!strcmp(t, IMPL_NAMES[i])) found = i;
        if (found < 0 || o->nimpls == MAX_IMPLS) return 0;
        for (int i = 0; i < o->nimpls; i++)
            if (o->impls[i] == found) return 0;
        o->impls[o->nimpls++] = found;
    }
    return o->nimpls > 0;
}

static int parse(int argc, char **argv, struct opts *o, int rank, int size) {
    memset(o, 0, sizeof *o);
    o->iterations = 3;
    o->allgatherv = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (!strcmp(a, "--shared-data")) { o->shared = 1; continue; }
        if (!strcmp(a, "--inject-error")) { o->inject_error = 1; continue; }
        if (!v) return usage(rank, "an option is missing its value");
        i++;
        end = (char *)v + strlen(v);
        if (!strcmp(a, "--collective")) {
            if (!strcmp(v, "allgather")) o->allgatherv = 0;
            else if (!strcmp(v, "allgatherv")) o->allgatherv = 1;
            else return usage(rank, "--collective expects allgather or allgatherv");
        } else if (!strcmp(a, "--p")) o->p = (int)strtol(v, &end, 10);
        else if (!strcmp(a, "--sizes-a")) o->sizes_a = v;
        else if (!strcmp(a, "--sizes-b")) o->sizes_b = v;
        else if (!strcmp(a, "--impls")) { if (!parse_impls(v, o)) return usage(rank, "--impls expects distinct names of sched, rootgather, native"); }
        else if (!strcmp(a, "--schedule")) o->schedule = v;
        else if (!strcmp(a, "--iterations")) o->iterations = (int)strtol(v, &end, 10);
        else if (!strcmp(a, "--max-delay-ms")) o->max_delay_s = strtod(v, &end) / 1e3;
        else if (!strcmp(a, "--seed")) o->seed = strtoull(v, &end, 10);
        else return usage(rank, "unknown option");
        if (!end || *end) return usage(rank, "a value is not a number");
    }
    if (o->allgatherv < 0 || !o->sizes_a || !o->sizes_b || !o->nimpls)
        return usage(rank, "--collective, --sizes-a, --sizes-b and --impls are required");
    if (o->p < 1 || o->p >= size) return usage(rank, "--p expects 1 <= P < the number of ranks");
    if (o->iterations < 1 || o->max_delay_s < 0) return usage(rank, "iterations >= 1 and max delay >= 0 expected");
    for (int i = 0; i < o->nimpls; i++)
        if (o->impls[i] == SCHED && !o->schedule) return usage(rank, "sched needs --schedule FILE");
    return 0;
}

/* n block sizes from a comma-separated list into out; 0 unless exactly n whole numbers
 * that fit an int. */
static int parse_sizes(const char *text, int n, int *out) {
    const char *s = text;
    for (int i = 0; i < n; i++) {
        char *end = NULL;
        if (*s < '0' || *s > '9') return 0;
        long long v = strtoll(s, &end, 10);
        if (v < 0 || v > INT32_MAX) return 0;
        out[i] = (int)v;
        if (i + 1 < n) {
            if (*end != ',') return 0;
            s = end + 1;
        } else if (*end) return 0;
    }
    return 1;
}

/* A buffer of `bytes`: plain malloc, or (SMPI, shared) SMPI's partial shared malloc,
 * private at the page of every multiple of STRIDE and at the last page. */
static int sampled(size_t bytes, int shared) {
    return LAB_SMPI && shared && bytes >= 2 * STRIDE;
}

static void *lab_alloc(size_t bytes, int shared) {
#if LAB_SMPI
    if (sampled(bytes, shared)) {
        size_t last = (bytes - 1) / PAGE * PAGE, n = 0;
        size_t *off = malloc(2 * (bytes / STRIDE + 2) * sizeof *off);
        for (size_t x = 0; x < bytes; x += STRIDE) {
            size_t lo = x + PAGE, hi = x + STRIDE < last ? x + STRIDE : last;
            if (hi > lo) { off[2 * n] = lo; off[2 * n + 1] = hi; n++; }
        }
        void *buf = SMPI_PARTIAL_SHARED_MALLOC(bytes, off, (int)n);
        free(off);
        return buf;
    }
#else
    (void)shared;
#endif
    return malloc(bytes ? bytes : 1);
}

/* Offsets of the checked bytes of a buffer of `bytes`: every byte, or (sampled) the first
 * byte of each private page. Returns the count; *all set when every byte is checked. */
static size_t checked_offsets(size_t bytes, int shared, size_t **out, int *all) {
    *all = !sampled(bytes, shared);
    if (*all) { *out = NULL; return bytes; }
    size_t n = 0, last = (bytes - 1) / PAGE * PAGE;
    size_t *v = malloc((bytes / STRIDE + 2) * sizeof *v);
    for (size_t x = 0; x < bytes; x += STRIDE) v[n++] = x;
    if (v[n - 1] != last) v[n++] = last;
    *out = v;
    return n;
}

struct layout {
    int p, q, g, local, nremote, nown;
    const int *own_sizes, *remote_sizes;
    int *remote_displs, *own_displs;
    size_t remote_total, own_total;
};

/* The remote group index j and offset y of byte x of the receive buffer. */
static void locate(const struct layout *L, size_t x, int *j, size_t *y) {
    int lo = 0, hi = L->nremote - 1;
    while (lo < hi) { /* the last block starting at or before x */
        int mid = (lo + hi + 1) / 2;
        if ((size_t)L->remote_displs[mid] <= x) lo = mid; else hi = mid - 1;
    }
    *j = lo;
    *y = x - (size_t)L->remote_displs[lo];
}

/* Wrong bytes among the checked ones after iteration k. */
static long long check(const struct layout *L, const uint8_t *recv, const size_t *offs, size_t n,
                       int all, int k) {
    long long errors = 0;
    int rg = 1 - L->g;
    if (all) {
        for (int j = 0; j < L->nremote; j++) {
            const uint8_t *b = recv + L->remote_displs[j];
            for (size_t y = 0; y < (size_t)L->remote_sizes[j]; y++)
                if (b[y] != pattern((uint64_t)rg, (uint64_t)j, y, (uint64_t)k)) errors++;
        }
        return errors;
    }
    for (size_t i = 0; i < n; i++) {
        int j;
        size_t y;
        locate(L, offs[i], &j, &y);
        if (recv[offs[i]] != pattern((uint64_t)rg, (uint64_t)j, y, (uint64_t)k)) errors++;
    }
    return errors;
}

/* Clears the checked bytes before a call. */
static void clear(uint8_t *recv, size_t bytes, const size_t *offs, size_t n, int all) {
    if (all) { memset(recv, 0, bytes); return; }
    for (size_t i = 0; i < n; i++) recv[offs[i]] = 0;
}

/* Root gathering from the library's intracommunicator collectives: gather to the local
 * root, swap between the roots (world ranks 0 and p), broadcast in each group. */
static int root_gather(const struct layout *L, int allgatherv, const uint8_t *send, uint8_t *recv,
                       uint8_t *gathered, MPI_Comm local) {
    int own = L->own_sizes[L->local];
    if (allgatherv)
        MPI_Gatherv(send, own, MPI_BYTE, gathered, L->own_sizes, L->own_displs, MPI_BYTE, 0, local);
    else
        MPI_Gather(send, own, MPI_BYTE, gathered, own, MPI_BYTE, 0, local);
    if (L->local == 0) {
        int peer = L->g == 0 ? L->p : 0;
        MPI_Sendrecv(gathered, (int)L->own_total, MPI_BYTE, peer, 77, recv, (int)L->remote_total, MPI_BYTE,
                     peer, 77, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    return MPI_Bcast(recv, (int)L->remote_total, MPI_BYTE, 0, local);
}

struct comms {
    MPI_Comm merged;  /* SMPI sched: a duplicate of MPI_COMM_WORLD, A low */
    MPI_Comm local;   /* the own group */
    MPI_Comm inter;   /* real MPI: the intercommunicator */
};

static int call(enum impl impl, const struct opts *o, const struct layout *L, const struct comms *c,
                const uint8_t *send, uint8_t *recv, uint8_t *gathered) {
    int own = L->own_sizes[L->local];
    if (impl == ROOTGATHER || (impl == NATIVE && LAB_SMPI))
        return root_gather(L, o->allgatherv, send, recv, gathered, c->local);
#if LAB_SMPI
    if (o->allgatherv)
        return collsched_inter_allgatherv_merged(send, own, MPI_BYTE, recv, L->remote_sizes, L->remote_displs,
                                                 MPI_BYTE, c->merged, o->p);
    return collsched_inter_allgather_merged(send, own, MPI_BYTE, recv, L->remote_sizes[0], MPI_BYTE,
                                            c->merged, o->p);
#else
    if (impl == SCHED)
        return o->allgatherv ? collsched_allgatherv(send, own, MPI_BYTE, recv, L->remote_sizes, L->remote_displs,
                                                    MPI_BYTE, c->inter)
                             : collsched_allgather(send, own, MPI_BYTE, recv, L->remote_sizes[0], MPI_BYTE, c->inter);
    return o->allgatherv ? MPI_Allgatherv(send, own, MPI_BYTE, recv, L->remote_sizes, L->remote_displs, MPI_BYTE,
                                          c->inter)
                         : MPI_Allgather(send, own, MPI_BYTE, recv, L->remote_sizes[0], MPI_BYTE, c->inter);
#endif
}

/* The communicator collsched_last_call reads for the sched implementation. */
static MPI_Comm sched_comm(const struct comms *c) {
    return LAB_SMPI ? c->merged : c->inter;
}

/* Copy text into a JSON string body (quotes, backslashes and controls dropped). */
static void json_text(char *out, size_t cap, const char *in) {
    size_t n = 0;
    for (; *in && n + 1 < cap; in++)
        if (*in != '"' && *in != '\\' && (unsigned char)*in >= 0x20) out[n++] = *in;
    out[n] = 0;
}

struct result {
    long long errors;
    int fallbacks, call_errors;
    char reason[256];
    double *times; /* per iteration: barrier exit, arrival, exit */
};

/* One JSON matrix (iterations x ranks) of column col (1 arrival, 2 exit), relative to
 * each iteration's first barrier exit. */
static void print_times(const double *every, int size, int iterations, int col) {
    for (int k = 0; k < iterations; k++) {
        double origin = every[3 * k];
        for (int r = 1; r < size; r++)
            if (every[(size_t)r * 3 * iterations + 3 * k] < origin) origin = every[(size_t)r * 3 * iterations + 3 * k];
        printf(k ? ", [" : "[");
        for (int r = 0; r < size; r++)
            printf(r ? ", %.17g" : "%.17g", every[(size_t)r * 3 * iterations + 3 * k + col] - origin);
        printf("]");
    }
}

static int setup_layout(struct layout *L, const struct opts *o, int rank, int size, int *sizes_a, int *sizes_b) {
    L->p = o->p;
    L->q = size - o->p;
    L->g = rank < o->p ? 0 : 1;
    L->local = L->g == 0 ? rank : rank - o->p;
    if (!parse_sizes(o->sizes_a, L->p, sizes_a)) return usage(rank, "--sizes-a expects P comma-separated sizes (bytes)");
    if (!parse_sizes(o->sizes_b, L->q, sizes_b)) return usage(rank, "--sizes-b expects size - P comma-separated sizes (bytes)");
    if (!o->allgatherv)
        for (int g = 0; g < 2; g++)
            for (int i = 1; i < (g ? L->q : L->p); i++)
                if ((g ? sizes_b : sizes_a)[i] != (g ? sizes_b : sizes_a)[0])
                    return usage(rank, "allgather expects one block size per group");
    L->own_sizes = L->g == 0 ? sizes_a : sizes_b;
    L->remote_sizes = L->g == 0 ? sizes_b : sizes_a;
    L->nown = L->g == 0 ? L->p : L->q;
    L->nremote = L->g == 0 ? L->q : L->p;
    L->remote_displs = malloc((size_t)L->nremote * sizeof(int));
    L->own_displs = malloc((size_t)L->nown * sizeof(int));
    size_t t = 0;
    for (int j = 0; j < L->nremote; j++) { L->remote_displs[j] = (int)t; t += (size_t)L->remote_sizes[j]; }
    L->remote_total = t;
    t = 0;
    for (int j = 0; j < L->nown; j++) { L->own_displs[j] = (int)t; t += (size_t)L->own_sizes[j]; }
    L->own_total = t;
    if (L->remote_total > INT32_MAX || L->own_total > INT32_MAX)
        return usage(rank, "each group's data must fit an int (displacements)");
    return 0;
}

static void make_comms(struct comms *c, const struct layout *L, int rank, const struct opts *o) {
    memset(c, 0, sizeof *c);
    MPI_Comm_split(MPI_COMM_WORLD, L->g, rank, &c->local);
    c->merged = MPI_COMM_NULL;
    c->inter = MPI_COMM_NULL;
#if LAB_SMPI
    MPI_Comm_dup(MPI_COMM_WORLD, &c->merged);
    (void)o;
#else
    int need = 0;
    for (int i = 0; i < o->nimpls; i++) need |= o->impls[i] != ROOTGATHER;
    if (need) MPI_Intercomm_create(c->local, 0, MPI_COMM_WORLD, L->g == 0 ? L->p : 0, 78, &c->inter);
#endif
}

static void free_comms(struct comms *c) {
    if (c->inter != MPI_COMM_NULL) MPI_Comm_free(&c->inter);
    if (c->merged != MPI_COMM_NULL) MPI_Comm_free(&c->merged);
    MPI_Comm_free(&c->local);
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "--version")) { /* before MPI_Init: no mpirun needed */
        printf("%s %s\n", "collsched-inter-bench", COLLSCHED_BUILD_VERSION);
        return 0;
    }
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    struct opts o;
    struct layout L;
    int *sizes_a = calloc((size_t)size, sizeof(int)), *sizes_b = calloc((size_t)size, sizeof(int));
    int rc = parse(argc, argv, &o, rank, size);
    if (!rc) rc = setup_layout(&L, &o, rank, size, sizes_a, sizes_b);
    if (rc) { MPI_Finalize(); return rc; }
    if (o.schedule) collsched_set_schedules(o.schedule);
    /* COLLSCHED_STRICT=1 (the lab sets it): a call its schedule does not serve is an MPI
     * error, never the MPI library's collective, so a call that returns was served by the
     * schedule; otherwise collsched_last_call says whether it was. */
    const char *strict_env = getenv("COLLSCHED_STRICT");
    int strict = strict_env && !strcmp(strict_env, "1");
    struct comms c;
    make_comms(&c, &L, rank, &o);

    int own = L.own_sizes[L.local];
    uint8_t *send = malloc(own ? (size_t)own : 1);
    uint8_t *recv = lab_alloc(L.remote_total, o.shared);
    int need_gather = 0;
    for (int i = 0; i < o.nimpls; i++) need_gather |= o.impls[i] == ROOTGATHER || (o.impls[i] == NATIVE && LAB_SMPI);
    uint8_t *gathered = need_gather && L.local == 0 ? lab_alloc(L.own_total, o.shared) : NULL;
    size_t *offs = NULL;
    int all;
    size_t nchecked = checked_offsets(L.remote_total, o.shared, &offs, &all);
    struct result res[MAX_IMPLS];
    memset(res, 0, sizeof res);
    for (int i = 0; i < o.nimpls; i++) res[i].times = malloc(3 * (size_t)o.iterations * sizeof(double));

    /* One untimed call of each first: loading and agreeing on a schedule, or the
     * library's own set-up, is a one-off cost. */
    memset(send, 0, own ? (size_t)own : 1);
    for (int i = 0; i < o.nimpls; i++) call((enum impl)o.impls[i], &o, &L, &c, send, recv, gathered);

    for (int k = 0; k < o.iterations; k++) {
        for (size_t y = 0; y < (size_t)own; y++) send[y] = pattern((uint64_t)L.g, (uint64_t)L.local, y, (uint64_t)k);
        for (int t = 0; t < o.nimpls; t++) {
            int i = (t + k) % o.nimpls; /* interleaved, each first in turn */
            enum impl impl = (enum impl)o.impls[i];
            clear(recv, L.remote_total, offs, nchecked, all);
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            double delay = uniform(o.seed, (uint64_t)k, (uint64_t)rank) * o.max_delay_s;
            if (delay > 0) usleep((useconds_t)(delay * 1e6 + 0.5));
            double a = MPI_Wtime();
            int err = call(impl, &o, &L, &c, send, recv, gathered);
            double f = MPI_Wtime();
            if (err != MPI_SUCCESS) res[i].call_errors++;
            if (impl == SCHED && !strict) {
                collsched_call_info info;
                if (collsched_last_call(sched_comm(&c), &info) != MPI_SUCCESS) {
                    res[i].fallbacks++;
                    json_text(res[i].reason, sizeof res[i].reason, "collsched_last_call failed");
                } else if (!info.used_schedule) {
                    res[i].fallbacks++;
                    json_text(res[i].reason, sizeof res[i].reason, info.reason);
                }
            }
            if (o.inject_error && k == 0 && rank == 1 && L.remote_total > 0) recv[all ? 0 : offs[0]] ^= 0x5a;
            res[i].errors += check(&L, recv, offs, nchecked, all, k);
            res[i].times[3 * k] = t0;
            res[i].times[3 * k + 1] = a;
            res[i].times[3 * k + 2] = f;
        }
    }

    long long checked = (long long)nchecked, all_checked = 0;
    MPI_Reduce(&checked, &all_checked, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("{\"program\": \"collsched-inter-bench\", \"collective\": \"%s\", \"ranks\": %d, \"p\": %d, "
               "\"q\": %d, \"iterations\": %d, \"max_delay_s\": %.17g, \"seed\": %llu, \"smpi\": %s, "
               "\"shared_data\": %s, \"checked_bytes_per_iteration\": %lld, \"runs\": [",
               o.allgatherv ? "allgatherv" : "allgather", size, L.p, L.q, o.iterations, o.max_delay_s,
               (unsigned long long)o.seed, LAB_SMPI ? "true" : "false", all ? "false" : "true", all_checked);
    double *every = rank == 0 ? malloc(3 * (size_t)o.iterations * (size_t)size * sizeof *every) : NULL;
    for (int i = 0; i < o.nimpls; i++) {
        long long errors = 0;
        int counts[2] = {res[i].fallbacks, res[i].call_errors}, sums[2] = {0, 0};
        MPI_Reduce(&res[i].errors, &errors, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
        MPI_Reduce(counts, sums, 2, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
        MPI_Gather(res[i].times, 3 * o.iterations, MPI_DOUBLE, every, 3 * o.iterations, MPI_DOUBLE, 0,
                   MPI_COMM_WORLD);
        if (rank) continue;
        printf("%s{\"impl\": \"%s\", \"errors\": %lld, \"fallbacks\": %d, \"fallback_reason\": \"%s\", "
               "\"call_errors\": %d, \"data_ok\": %s, \"arrivals\": [", i ? ", " : "", IMPL_NAMES[o.impls[i]],
               errors, sums[0], res[i].reason, sums[1], errors == 0 && sums[0] == 0 && sums[1] == 0 ? "true" : "false");
        print_times(every, size, o.iterations, 1);
        printf("], \"exits\": [");
        print_times(every, size, o.iterations, 2);
        printf("]}");
    }
    if (rank == 0) {
        printf("]}\n");
        fflush(stdout);
    }
    free(every);
    for (int i = 0; i < o.nimpls; i++) free(res[i].times);
    free(offs);
    free(send);
    free(recv); /* under SMPI, free() also releases shared blocks */
    free(gathered);
    free(L.remote_displs);
    free(L.own_displs);
    free(sizes_a);
    free(sizes_b);
    free_comms(&c);
    if (o.schedule) collsched_finalize();
    MPI_Finalize();
    return 0;
}
