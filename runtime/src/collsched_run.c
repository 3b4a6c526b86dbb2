/* collsched-run - execute a schedule on MPI_COMM_WORLD with a known data pattern, check
 * every byte on every rank, print timings.
 *
 *   collsched-run FILE [FILE...] [--iterations N] [--bytes B[,B...]] [--in-place] [--json]
 *                 [--all-modes] [--allgatherv] [--dtype byte|int] [--compare]
 *                 [--warmup N] [--check-every K] [--compare-self] [--inject-error] [--samples]
 *                 [--shared-sample K]
 *
 * Byte k of origin o's block in iteration i is pattern_at(seed(o, i), k). Receive buffers are
 * filled with a sentinel first, and the bytes around and between blocks must keep it.
 * --compare alternates each schedule call with the MPI library's own collective (same
 * buffers, order flipped every iteration) and reports both and their median ratio.
 * Several FILEs run one after the other, each on its own duplicate of MPI_COMM_WORLD
 * (so each is selected afresh): one launch can test many schedules.
 * --compare-self runs the MPI library's collective on both sides: the noise floor of
 * --compare on this machine (its ratio should be 1).
 * --samples adds every iteration's time (slowest rank's) to the --json line, "samples_s" and
 * with --compare "ref_samples_s", in iteration order: for confidence intervals of the median.
 * --inject-error flips one received byte on the last rank after each call: a test that
 * the check itself catches wrong data.
 * --shared-sample K (SMPI only; allgather, not in place, bytes a multiple of 4096): the
 * receive buffer is SMPI's partial shared malloc, one physical copy for all ranks, except
 * the first 4096 bytes of K sampled origins' blocks and the guard after the last block,
 * which are private to the rank and are what is checked (the same origins on every rank,
 * so a sampled block is private all along its way: 0, P-1 and K-2 drawn by a fixed seed;
 * K >= P samples every origin). SimGrid copies only private bytes between such buffers,
 * so every rank checks K x 4096 bytes per call: what makes P = 4096 at 64 KiB fit one
 * machine (P^2 x 64 KiB = 1 TiB of receive buffers otherwise) with 2K + 2 memory maps per
 * rank instead of 2P.
 * Files of format 1.2 (alltoall, bcast, reduce, allreduce) run their collective through
 * collsched_alltoall & co. (bytes: one alltoall block, or the whole vector), every call
 * checked byte for byte, sentinel guard included, against the MPI library's own collective
 * (PMPI_*) on the same inputs in buffers of its own: alltoall and bcast move the pattern
 * (--dtype byte|int), reductions sum MPI_INT values below 2^16 (exact in any order) and,
 * unless the file is commutative-only, also combine them with a non-commutative
 * user-defined operation (MPI's rank order is then checked too); --in-place as MPI allows
 * it. One row per operation.
 * Exit status: 0 all data correct, 1 a mismatch or an MPI error, 2 usage.
 */
#include "collsched.h"
#include "coll.h"     /* cs_coll_read_header: 1.2 files (alltoall, bcast, reduce, allreduce) */
#include "internal.h" /* cs_read_any_header: linked from libcollsched.a */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef COLLSCHED_BUILD_VERSION  /* the Makefile passes VERSION (compiler/collsched/__init__.py) */
#define COLLSCHED_BUILD_VERSION "unknown"
#endif

#define SENTINEL 0xA5
#define GUARD 64
#define SAMPLE_PAGE 4096u  /* the private, checked bytes of a sampled block (--shared-sample) */

#ifdef SMPI_HELPERS_H  /* compiled with smpicc: SMPI's shared malloc is there */
#define RUN_SMPI 1
#else
#define RUN_SMPI 0
#endif

typedef struct options {
    const char *files[256];
    int nfiles;
    int iterations, warmup, check_every, json, compare, dtype_int, inject, aa, samples;
    int shared_sample; /* --shared-sample K: sampled origins (0: every byte, private buffers) */
    int modes[4][2];   /* (allgatherv?, in place?) pairs to run */
    int nmodes;
    uint64_t bytes[64];
    int nbytes;
} options;

typedef struct result {
    double avg, max, median, ref_avg, ref_median, ratio;
    int ok, err, used;
    collsched_call_info info;
    double *samples;   /* --samples: n times, then n reference times (NULL otherwise) */
} result;

/* Byte k of origin o's block in iteration i: a per-(o, i) seed plus a fast sequence in k,
 * so a piece in the wrong place or from the wrong origin or iteration shows. */
static uint32_t seed(int origin, int iter)
{
    uint32_t x = (uint32_t)origin * 0x85EBCA6Bu ^ (uint32_t)iter * 0xC2B2AE35u ^ 0x27D4EB2Fu;
    x ^= x >> 15;
    x *= 0x2C1B3C6Du;
    return x ^ (x >> 12);
}

static uint8_t pattern_at(uint32_t sd, uint64_t k)
{
    return (uint8_t)(((uint32_t)k * 0x9E3779B1u + sd + (uint32_t)(k >> 32)) >> 24);
}

static void usage(void)
{
    fprintf(stderr, "usage: collsched-run FILE [--iterations N] [--bytes B[,B...]] [--in-place] "
                    "[--json] [--all-modes] [--allgatherv] [--dtype byte|int] [--compare] "
                    "[--warmup N] [--check-every K] [--compare-self] [--inject-error] [--samples] "
                    "[--shared-sample K]\n");
}

static int parse_bytes(options *o, char *list)
{
    for (char *t = strtok(list, ","); t; t = strtok(NULL, ",")) {
        char *end;
        unsigned long long v = strtoull(t, &end, 10);
        if (*end || o->nbytes == 64) return -1;
        o->bytes[o->nbytes++] = v;
    }
    return o->nbytes ? 0 : -1;
}

static int parse(int argc, char **argv, options *o)
{
    int in_place = 0, v = 0, all = 0;
    memset(o, 0, sizeof *o);
    o->iterations = 5;
    o->check_every = 1;
    o->warmup = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json")) o->json = 1;
        else if (!strcmp(a, "--in-place")) in_place = 1;
        else if (!strcmp(a, "--allgatherv")) v = 1;
        else if (!strcmp(a, "--all-modes")) all = 1;
        else if (!strcmp(a, "--compare")) o->compare = 1;
        else if (!strcmp(a, "--inject-error")) o->inject = 1;
        else if (!strcmp(a, "--samples")) o->samples = 1;
        else if (!strcmp(a, "--compare-self")) o->compare = o->aa = 1;
        else if (!strcmp(a, "--iterations") && val) o->iterations = atoi(argv[++i]);
        else if (!strcmp(a, "--warmup") && val) o->warmup = atoi(argv[++i]);
        else if (!strcmp(a, "--check-every") && val) o->check_every = atoi(argv[++i]);
        else if (!strcmp(a, "--shared-sample") && val) {
            o->shared_sample = atoi(argv[++i]);
            if (o->shared_sample < 1) return -1;
        }
        else if (!strcmp(a, "--bytes") && val) { if (parse_bytes(o, argv[++i])) return -1; }
        else if (!strcmp(a, "--dtype") && val) {
            const char *d = argv[++i];
            if (!strcmp(d, "int")) o->dtype_int = 1;
            else if (strcmp(d, "byte")) return -1;
        } else if (a[0] != '-' && o->nfiles < 256) o->files[o->nfiles++] = a;
        else return -1;
    }
    if (!o->nfiles || o->iterations < 1 || o->check_every < 1) return -1;
    /* sampled shared buffers: SMPI, the allgather not in place (the layout it samples) */
    if (o->shared_sample && (!RUN_SMPI || v || in_place || all)) return -1;
    if (o->warmup < 0) o->warmup = o->compare ? 2 : 0;
    for (int g = 0; g < 2; g++)
        for (int p = 0; p < 2; p++)
            if (all || (g == v && p == in_place)) {
                o->modes[o->nmodes][0] = g;
                o->modes[o->nmodes][1] = p;
                o->nmodes++;
            }
    return 0;
}

/* ---- buffers of one case ---- */

typedef struct layout {
    MPI_Comm comm;
    int P, rank, elem, v, in_place, inject, aa;
    int *counts, *displs;       /* in elements */
    uint64_t total;             /* receive buffer bytes incl. gaps and guard */
    uint8_t *recv, *send;
    MPI_Datatype type;
    int nsample;                /* --shared-sample: sampled origins, ascending (else 0) */
    int *sample;
} layout;

static uint64_t block_bytes(const layout *l, int o) { return (uint64_t)l->counts[o] * l->elem; }

/* ---- --shared-sample: which origins are checked, and the buffer that keeps only them ---- */

static uint64_t mix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* K origins of P, the same on every rank: 0 and P-1, then K-2 distinct others drawn by a
 * partial Fisher-Yates shuffle of 1..P-2 with a fixed seed; every origin when K >= P.
 * Ascending. Returns the count, or -1 (no memory). */
static int sample_origins(int P, int K, int **out)
{
    int n = K >= P ? P : K;
    int *all = malloc(sizeof(int) * (size_t)P), *s = malloc(sizeof(int) * (size_t)(n ? n : 1));
    if (!all || !s) { free(all); free(s); return -1; }
    for (int i = 0; i < P; i++) all[i] = i;
    if (n < P) {
        /* 0 and P-1 first (n >= 1; with n == 1 only 0), then the shuffle of the middle */
        int m = 0;
        s[m++] = 0;
        if (n >= 2) s[m++] = P - 1;
        for (int j = 0; m < n; j++, m++) {
            int span = P - 2 - j; /* all[1 + j .. P - 2] not drawn yet */
            int pick = 1 + j + (int)(mix64(0x636F6C6C73636864ull ^ (uint64_t)P << 20 ^ (uint64_t)j) % (uint64_t)span);
            int t = all[1 + j]; all[1 + j] = all[pick]; all[pick] = t;
            s[m] = all[1 + j];
        }
    } else {
        memcpy(s, all, sizeof(int) * (size_t)n);
    }
    free(all);
    qsort(s, (size_t)n, sizeof *s, cmp_int);
    *out = s;
    return n;
}

/* The receive buffer: shared everywhere but the first SAMPLE_PAGE bytes of every sampled
 * origin's block and the guard (from the end of the last block). Blocks are B bytes, B a
 * multiple of SAMPLE_PAGE, back to back (the allgather's layout). */
static uint8_t *shared_recv(const layout *l, uint64_t B)
{
#if RUN_SMPI
    size_t *off = malloc(2 * ((size_t)l->nsample + 1) * sizeof *off);
    if (!off) return NULL;
    size_t at = 0, n = 0, end = (size_t)B * (size_t)l->P; /* the guard starts at end */
    for (int i = 0; i < l->nsample; i++) {
        size_t lo = (size_t)l->sample[i] * (size_t)B;
        if (lo > at) { off[2 * n] = at; off[2 * n + 1] = lo; n++; }
        at = lo + (B < SAMPLE_PAGE ? B : SAMPLE_PAGE);
    }
    if (end > at) { off[2 * n] = at; off[2 * n + 1] = end; n++; }
    uint8_t *buf = n ? SMPI_PARTIAL_SHARED_MALLOC(l->total, off, (int)n) : malloc(l->total);
    free(off);
    return buf;
#else
    (void)l; (void)B;
    return NULL;
#endif
}

/* The bytes of origin o's block that are checked: all of it, or its private first page. */
static uint64_t checked_bytes(const layout *l, int o)
{
    uint64_t b = block_bytes(l, o);
    return l->nsample && b > SAMPLE_PAGE ? SAMPLE_PAGE : b;
}

/* allgatherv: blocks of different sizes (within the schedule's range: never above B)
 * with gaps between them; allgather: back to back. */
static int setup(layout *l, uint64_t B, int v, int in_place, int dtype_int)
{
    l->elem = dtype_int ? 4 : 1;
    l->type = dtype_int ? MPI_INT : MPI_BYTE;
    l->v = v;
    l->in_place = in_place;
    l->counts = malloc(sizeof(int) * l->P);
    l->displs = malloc(sizeof(int) * l->P);
    uint64_t n = B / l->elem, at = 0;
    for (int o = 0; o < l->P; o++) {
        l->counts[o] = (int)(v ? n - (o % 4) * (n / 8) : n);
        l->displs[o] = (int)at;
        at += (uint64_t)l->counts[o] + (v ? (uint64_t)(o % 3) : 0);
    }
    l->total = at * l->elem + GUARD;
    l->recv = l->nsample ? shared_recv(l, B) : malloc(l->total);
    l->send = malloc(n * l->elem + 1);
    return l->counts && l->displs && l->recv && l->send ? 0 : -1;
}

static void teardown(layout *l)
{
    free(l->counts); free(l->displs); free(l->recv); free(l->send); free(l->sample);
}

static void fill(layout *l, int iter)
{
    if (l->nsample) { /* only the private bytes: the rest is one shared copy */
        for (int i = 0; i < l->nsample; i++)
            memset(l->recv + (uint64_t)l->displs[l->sample[i]] * l->elem, SENTINEL,
                   checked_bytes(l, l->sample[i]));
        memset(l->recv + l->total - GUARD, SENTINEL, GUARD);
    } else {
        memset(l->recv, SENTINEL, l->total);
    }
    uint8_t *own = l->in_place ? l->recv + (uint64_t)l->displs[l->rank] * l->elem : l->send;
    uint32_t sd = seed(l->rank, iter);
    for (uint64_t k = 0; k < block_bytes(l, l->rank); k++) own[k] = pattern_at(sd, k);
}

static int check(const layout *l, int iter)
{
    if (l->nsample) {
        for (int i = 0; i < l->nsample; i++) {
            int o = l->sample[i];
            const uint8_t *b = l->recv + (uint64_t)l->displs[o] * l->elem;
            uint32_t sd = seed(o, iter);
            uint8_t diff = 0;
            for (uint64_t k = 0; k < checked_bytes(l, o); k++) diff |= b[k] ^ pattern_at(sd, k);
            if (diff) return 0;
        }
        for (uint64_t pos = l->total - GUARD; pos < l->total; pos++)
            if (l->recv[pos] != SENTINEL) return 0; /* guard written */
        return 1;
    }
    uint64_t pos = 0;
    for (int o = 0; o < l->P; o++) {
        const uint8_t *b = l->recv + (uint64_t)l->displs[o] * l->elem;
        for (; l->recv + pos < b; pos++)
            if (l->recv[pos] != SENTINEL) return 0; /* gap written */
        uint32_t sd = seed(o, iter);
        uint8_t diff = 0;
        for (uint64_t k = 0; k < block_bytes(l, o); k++) diff |= b[k] ^ pattern_at(sd, k);
        if (diff) return 0;
        pos += block_bytes(l, o);
    }
    for (; pos < l->total; pos++)
        if (l->recv[pos] != SENTINEL) return 0; /* guard written */
    return 1;
}

static int call(const layout *l, int reference)
{
    if (l->aa) reference = 1;
    const void *sb = l->in_place ? MPI_IN_PLACE : l->send;
    int sc = l->counts[l->rank];
    if (l->v)
        return reference ? PMPI_Allgatherv(sb, sc, l->type, l->recv, l->counts, l->displs, l->type, l->comm)
                         : collsched_allgatherv(sb, sc, l->type, l->recv, l->counts, l->displs, l->type, l->comm);
    return reference ? PMPI_Allgather(sb, sc, l->type, l->recv, l->counts[0], l->type, l->comm)
                     : collsched_allgather(sb, sc, l->type, l->recv, l->counts[0], l->type, l->comm);
}

/* One timed call (barrier first); checks the data when asked. */
static double timed(layout *l, int reference, int iter, int checkit, int *ok, int *err)
{
    if (checkit) fill(l, iter);
    MPI_Barrier(l->comm);
    double t0 = MPI_Wtime();
    int rc = call(l, reference);
    double dt = MPI_Wtime() - t0;
    if (l->inject && l->rank == l->P - 1 && l->counts[0] > 0)
        l->recv[(uint64_t)l->displs[0] * l->elem] ^= 1;
    if (rc != MPI_SUCCESS) { *err = rc; *ok = 0; }
    else if (checkit && !check(l, iter)) *ok = 0;
    return dt;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void run_case(const options *o, layout *l, result *r)
{
    int n = o->iterations, ok = 1, err = 0;
    double *t = calloc(3 * (size_t)n, sizeof *t), *ref = t + n, *ratio = t + 2 * n;
    for (int w = 0; w < o->warmup; w++) {
        timed(l, 0, 1000 + w, 1, &ok, &err);
        if (o->compare) timed(l, 1, 2000 + w, 1, &ok, &err);
    }
    for (int i = 0; i < n; i++) {
        int checkit = i % o->check_every == 0 || i == n - 1;
        if (o->compare && i % 2) ref[i] = timed(l, 1, i, checkit, &ok, &err);
        t[i] = timed(l, 0, i, checkit, &ok, &err);
        collsched_last_call(l->comm, &r->info);
        if (o->compare && !(i % 2)) ref[i] = timed(l, 1, i, checkit, &ok, &err);
    }
    /* The time of a call is its slowest rank's. */
    MPI_Allreduce(MPI_IN_PLACE, t, 2 * n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &err, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    r->ok = ok;
    r->err = err;
    r->used = r->info.used_schedule;
    r->avg = r->max = r->ref_avg = 0;
    for (int i = 0; i < n; i++) {
        r->avg += t[i] / n;
        r->ref_avg += ref[i] / n;
        if (t[i] > r->max) r->max = t[i];
        ratio[i] = ref[i] > 0 ? t[i] / ref[i] : 0;
    }
    if (o->samples && (r->samples = malloc(2 * (size_t)n * sizeof *t)))
        memcpy(r->samples, t, 2 * (size_t)n * sizeof *t); /* before median() sorts them */
    r->ratio = o->compare ? median(ratio, n) : 0;
    r->median = median(t, n);
    r->ref_median = o->compare ? median(ref, n) : 0;
    free(t);
}

static void json_string(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') printf("\\%c", *s);
        else if ((unsigned char)*s < 32) printf("\\u%04x", *s);
        else putchar(*s);
    }
    putchar('"');
}

static void report(const options *o, const layout *l, const char *file, const result *r)
{
    uint64_t B = (uint64_t)l->counts[0] * l->elem;
    const char *coll = l->v ? "allgatherv" : "allgather";
    if (!o->json) {
        printf("%-10s P=%d bytes=%llu in_place=%d iterations=%d avg=%.6fs max=%.6fs %s %s%s",
               coll, l->P, (unsigned long long)B, l->in_place, o->iterations, r->avg, r->max,
               r->ok ? "data ok" : "DATA MISMATCH", r->used ? "schedule " : "fallback: ",
               r->used ? r->info.schedule : r->info.reason);
        if (o->compare) printf(" ref_median=%.6fs median_ratio=%.3f", r->ref_median, r->ratio);
        if (r->err) printf(" mpi_error=%d", r->err);
        printf("\n");
        return;
    }
    printf("{\"ranks\": %d, \"bytes\": %llu, \"iterations\": %d, \"avg_s\": %.9g, \"max_s\": %.9g, "
           "\"median_s\": %.9g, \"data_ok\": %s, \"collective\": \"%s\", \"in_place\": %s, "
           "\"dtype\": \"%s\", \"used_schedule\": %s, \"mpi_error\": %d, \"file\": ",
           l->P, (unsigned long long)B, o->iterations, r->avg, r->max, r->median,
           r->ok ? "true" : "false", coll, l->in_place ? "true" : "false",
           o->dtype_int ? "int" : "byte", r->used ? "true" : "false", r->err);
    json_string(file);
    printf(", \"schedule\": ");
    json_string(r->info.schedule);
    printf(", \"reason\": ");
    json_string(r->info.reason);
    if (o->compare)
        printf(", \"ref_avg_s\": %.9g, \"ref_median_s\": %.9g, \"median_ratio\": %.6g", r->ref_avg,
               r->ref_median, r->ratio);
    if (l->nsample) {
        printf(", \"sampled_origins\": [");
        for (int i = 0; i < l->nsample; i++) printf("%s%d", i ? ", " : "", l->sample[i]);
        printf("], \"checked_bytes_per_block\": %llu", (unsigned long long)checked_bytes(l, l->sample[0]));
    }
    for (int k = 0; r->samples && k < (o->compare ? 2 : 1); k++) {
        printf(", \"%s\": [", k ? "ref_samples_s" : "samples_s");
        for (int i = 0; i < o->iterations; i++)
            printf("%s%.9g", i ? ", " : "", r->samples[k * o->iterations + i]);
        printf("]");
    }
    printf("}\n");
}

/* 1024 bytes, or the nearest size the file serves (explicit or compact: cs_read_any_header). */
static uint64_t default_bytes(const char *file)
{
    collsched_header h;
    if (cs_read_any_header(file, &h, NULL, 0) != COLLSCHED_OK) return 1024;
    return h.bytes_min > 1024 ? h.bytes_min : (h.bytes_max < 1024 ? h.bytes_max : 1024);
}

/* ---- 1.2 files: alltoall, bcast, reduce, allreduce ---- */

typedef struct ccase {
    MPI_Comm comm;
    uint32_t coll;
    int P, rank, root, in_place, elem, noncomm, inject;
    uint64_t B;                 /* bytes: one alltoall block, or the vector */
    MPI_Datatype type;
    MPI_Op op;
    uint8_t *send, *recv, *ref; /* recv and ref: the call's and the reference's, guard after */
    uint64_t sbytes, rbytes;
} ccase;

/* a op b = (a's high 16 bits, b's low 16 bits): associative, not commutative. */
static void band_fn(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    (void)dt;
    for (int i = 0; i < *len; i++)
        ((int *)inout)[i] = (int)(((unsigned)((int *)in)[i] & 0xFFFF0000u) | ((unsigned)((int *)inout)[i] & 0xFFFFu));
}

static int reducing(uint32_t coll) { return coll == CS_COLL_REDUCE || coll == CS_COLL_ALLREDUCE; }

/* This rank's inputs in send (and, in place, in both result buffers); results: sentinel. */
static void coll_fill(ccase *c, int iter)
{
    memset(c->recv, SENTINEL, c->rbytes + GUARD);
    memset(c->ref, SENTINEL, c->rbytes + GUARD);
    if (reducing(c->coll)) {
        uint32_t sd = seed(c->rank, iter);
        for (uint64_t i = 0; i < c->B / 4; i++) ((int *)c->send)[i] = (int)(pattern_at(sd, i) | (pattern_at(sd, i + 7) << 8));
    } else if (c->coll == CS_COLL_ALLTOALL) {
        for (int d = 0; d < c->P; d++) {
            uint32_t sd = seed(c->rank * c->P + d, iter);
            for (uint64_t k = 0; k < c->B; k++) c->send[(uint64_t)d * c->B + k] = pattern_at(sd, k);
        }
    } else if (c->rank == c->root) {
        for (uint64_t k = 0; k < c->B; k++) c->recv[k] = c->ref[k] = pattern_at(seed(c->root, iter), k);
    }
    if (c->in_place && c->coll != CS_COLL_BCAST && (c->coll != CS_COLL_REDUCE || c->rank == c->root)) {
        memcpy(c->recv, c->send, c->sbytes);
        memcpy(c->ref, c->send, c->sbytes);
    }
}

static int coll_call(const ccase *c, int reference, uint8_t *out)
{
    int n = (int)(c->B / (uint64_t)c->elem);
    int ip = c->in_place && (c->coll != CS_COLL_REDUCE || c->rank == c->root);
    const void *sb = ip ? MPI_IN_PLACE : c->send;
    switch (c->coll) {
    case CS_COLL_ALLTOALL:
        return reference ? PMPI_Alltoall(sb, n, c->type, out, n, c->type, c->comm)
                         : collsched_alltoall(sb, n, c->type, out, n, c->type, c->comm);
    case CS_COLL_BCAST:
        return reference ? PMPI_Bcast(out, n, c->type, c->root, c->comm) : collsched_bcast(out, n, c->type, c->root, c->comm);
    case CS_COLL_REDUCE:
        return reference ? PMPI_Reduce(sb, out, n, MPI_INT, c->op, c->root, c->comm)
                         : collsched_reduce(sb, out, n, MPI_INT, c->op, c->root, c->comm);
    default:
        return reference ? PMPI_Allreduce(sb, out, n, MPI_INT, c->op, c->comm)
                         : collsched_allreduce(sb, out, n, MPI_INT, c->op, c->comm);
    }
}

static void coll_case(const options *o, ccase *c, result *r)
{
    int n = o->iterations, ok = 1, err = 0;
    double *t = calloc(2 * (size_t)n, sizeof *t), *ref = t + n;
    for (int i = 0; i < n; i++) {
        coll_fill(c, i);
        MPI_Barrier(c->comm);
        double t0 = MPI_Wtime();
        int rc = coll_call(c, 0, c->recv);
        t[i] = MPI_Wtime() - t0;
        collsched_last_call(c->comm, &r->info);
        MPI_Barrier(c->comm);
        t0 = MPI_Wtime();
        int rc2 = coll_call(c, 1, c->ref);
        ref[i] = MPI_Wtime() - t0;
        if (c->inject && c->rank == c->P - 1 && c->rbytes) c->recv[0] ^= 1;
        if (rc != MPI_SUCCESS || rc2 != MPI_SUCCESS) { err = rc != MPI_SUCCESS ? rc : rc2; ok = 0; }
        else if (memcmp(c->recv, c->ref, c->rbytes + GUARD) != 0) ok = 0;
    }
    MPI_Allreduce(MPI_IN_PLACE, t, 2 * n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &err, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    r->ok = ok, r->err = err, r->used = r->info.used_schedule;
    r->avg = r->max = r->ref_avg = 0;
    for (int i = 0; i < n; i++) r->avg += t[i] / n, r->ref_avg += ref[i] / n, r->max = t[i] > r->max ? t[i] : r->max;
    r->median = median(t, n);
    r->ref_median = median(ref, n);
    r->ratio = r->ref_median > 0 ? r->median / r->ref_median : 0;
    free(t);
}

static void coll_report(const options *o, const ccase *c, const char *file, const result *r)
{
    static const char *names[] = { "alltoall", "bcast", "reduce", "allreduce" };
    const char *coll = names[c->coll - CS_COLL_ALLTOALL];
    const char *op = reducing(c->coll) ? (c->noncomm ? "noncommutative" : "sum") : "";
    if (!o->json) {
        printf("%-10s P=%d bytes=%llu in_place=%d%s%s iterations=%d avg=%.6fs max=%.6fs ref_median=%.6fs %s %s%s",
               coll, c->P, (unsigned long long)c->B, c->in_place, *op ? " op=" : "", op, o->iterations, r->avg,
               r->max, r->ref_median, r->ok ? "data ok" : "DATA MISMATCH", r->used ? "schedule " : "fallback: ",
               r->used ? r->info.schedule : r->info.reason);
        if (r->err) printf(" mpi_error=%d", r->err);
        printf("\n");
        return;
    }
    printf("{\"ranks\": %d, \"bytes\": %llu, \"iterations\": %d, \"avg_s\": %.9g, \"max_s\": %.9g, "
           "\"median_s\": %.9g, \"ref_median_s\": %.9g, \"median_ratio\": %.6g, \"data_ok\": %s, \"collective\": \"%s\", "
           "\"op\": \"%s\", \"root\": %d, \"in_place\": %s, \"dtype\": \"%s\", \"used_schedule\": %s, \"mpi_error\": %d, "
           "\"file\": ", c->P, (unsigned long long)c->B, o->iterations, r->avg, r->max, r->median, r->ref_median,
           r->ratio, r->ok ? "true" : "false", coll, op, c->root, c->in_place ? "true" : "false",
           reducing(c->coll) || c->elem == 4 ? "int" : "byte", r->used ? "true" : "false", r->err);
    json_string(file);
    printf(", \"schedule\": ");
    json_string(r->info.schedule);
    printf(", \"reason\": ");
    json_string(r->info.reason);
    printf("}\n");
}

/* 1.2 files: every size, in-place mode and operation, on a fresh duplicate of the world. */
static int run_coll_file(const options *o, const char *file, const cs_coll_header *h, int P, int rank)
{
    MPI_Comm comm;
    MPI_Op band;
    int all_ok = 1, red = reducing(h->h.collective);
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    MPI_Op_create(band_fn, 0, &band);
    collsched_set_schedules(file);
    uint64_t deflt = h->h.bytes_min > 1024 ? h->h.bytes_min : (h->h.bytes_max < 1024 ? h->h.bytes_max : 1024);
    int nops = red && !(h->h.flags & CS_COLL_FLAG_COMMUTATIVE_ONLY) ? 2 : 1;
    for (int b = 0; b < (o->nbytes ? o->nbytes : 1); b++)
        for (int m = 0; m < o->nmodes; m++)
            for (int k = 0; k < nops; k++) {
                if (o->modes[m][0] || (o->modes[m][1] && h->h.collective == CS_COLL_BCAST)) continue;
                ccase c = { comm, h->h.collective, P, rank, (int)h->root, o->modes[m][1], 1, k, o->inject, 0,
                            MPI_BYTE, k ? band : MPI_SUM, NULL, NULL, NULL, 0, 0 };
                c.elem = red || o->dtype_int ? 4 : 1;
                c.type = c.elem == 4 ? MPI_INT : MPI_BYTE;
                c.B = (o->nbytes ? o->bytes[b] : deflt) / (uint64_t)c.elem * (uint64_t)c.elem;
                c.sbytes = c.coll == CS_COLL_ALLTOALL ? c.B * (uint64_t)P : c.B;
                c.rbytes = c.sbytes;
                int bad = !(c.send = malloc(c.sbytes + 1)) | !(c.recv = malloc(c.rbytes + GUARD))
                          | !(c.ref = malloc(c.rbytes + GUARD));
                MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, comm);
                result r;
                memset(&r, 0, sizeof r);
                if (bad) {
                    if (rank == 0) fprintf(stderr, "collsched-run: out of memory for %llu bytes\n", (unsigned long long)c.B);
                    all_ok = 0;
                } else {
                    coll_case(o, &c, &r);
                    if (rank == 0) coll_report(o, &c, file, &r);
                    all_ok &= r.ok;
                }
                fflush(stdout);
                free(c.send), free(c.recv), free(c.ref);
            }
    MPI_Op_free(&band);
    MPI_Comm_free(&comm);
    return all_ok;
}

/* Every size and mode of one schedule file, on a fresh duplicate of MPI_COMM_WORLD. */
static int run_file(const options *o, const char *file, int P, int rank)
{
    MPI_Comm comm;
    int all_ok = 1;
    cs_coll_header ch;
    if (cs_coll_read_header(file, &ch, NULL, 0) == COLLSCHED_OK) return run_coll_file(o, file, &ch, P, rank);
    uint64_t deflt = default_bytes(file);
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    collsched_set_schedules(file);
    for (int b = 0; b < (o->nbytes ? o->nbytes : 1); b++)
        for (int m = 0; m < o->nmodes; m++) {
            layout l = { .comm = comm, .P = P, .rank = rank, .inject = o->inject, .aa = o->aa };
            result r;
            memset(&r, 0, sizeof r);
            uint64_t B = o->nbytes ? o->bytes[b] : deflt;
            int bad = 0, unaligned = o->shared_sample && (B == 0 || B % SAMPLE_PAGE);
            if (o->shared_sample && !unaligned)
                bad = (l.nsample = sample_origins(P, o->shared_sample, &l.sample)) < 0;
            if (!bad && !unaligned) bad = setup(&l, B, o->modes[m][0], o->modes[m][1], o->dtype_int) != 0;
            MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, comm);
            if (unaligned) {
                if (rank == 0) fprintf(stderr, "collsched-run: --shared-sample: bytes %llu: expected a "
                                       "positive multiple of %u\n", (unsigned long long)B, SAMPLE_PAGE);
                all_ok = 0;
                continue;
            }
            if (bad) {
                if (rank == 0) fprintf(stderr, "collsched-run: out of memory for %llu bytes\n",
                                       (unsigned long long)B);
                all_ok = 0;
            } else {
                run_case(o, &l, &r);
                if (rank == 0) report(o, &l, file, &r);
                all_ok &= r.ok;
                free(r.samples);
            }
            fflush(stdout);
            teardown(&l);
        }
    MPI_Comm_free(&comm);
    return all_ok;
}

int main(int argc, char **argv)
{
    options o;
    if (argc == 2 && !strcmp(argv[1], "--version")) {  /* before MPI_Init: no mpirun needed */
        printf("%s %s\n", "collsched-run", COLLSCHED_BUILD_VERSION);
        return 0;
    }
    MPI_Init(&argc, &argv);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int rank, P, all_ok = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    if (parse(argc, argv, &o) != 0) {
        if (rank == 0) usage();
        MPI_Finalize();
        return 2;
    }
    for (int f = 0; f < o.nfiles; f++)
        all_ok &= run_file(&o, o.files[f], P, rank);
    MPI_Finalize();
    return all_ok ? 0 : 1;
}
