/* collsched-flows: time sets of concurrent flows between MPI ranks (the capacity probes
 * of `collsched measure`, docs/measure.md "Capacity").
 *
 * Input (--tests FILE, read by rank 0 and broadcast; nothing in it is trusted): text,
 * whitespace-separated,
 *
 *     collsched-flows/1
 *     NTESTS
 *     NFLOWS                       then NFLOWS lines of
 *     SRC DST BYTES COUNT          one flow: rank SRC sends COUNT messages of BYTES bytes
 *     ...                          to rank DST, all in flight at once (MPI_Isend/MPI_Irecv)
 *
 * A test: MPI_Barrier, then every rank posts its receives and sends of every flow at once;
 * a flow completes when its last message has arrived at DST. Per flow the program reports
 * its duration: under SMPI (one simulated clock) from the moment both its ends had left the
 * barrier (a large message moves once its receive is posted) to the last arrival; under
 * real MPI (clocks not synchronised) from the moment the receiver left the barrier. Every test is run --repeats times; the median per flow
 * is written. Rank 0 writes one JSON object (format collsched-flows/1) to --output, and
 * with --progress "progress flows DONE TOTAL ELAPSED_S" lines to stderr after each test.
 *
 * Bad input: one line on stderr ("collsched-flows: ..."), exit status 2.
 * Message contents do not matter: every send reads one buffer and every receive writes
 * one buffer (of the largest message), so memory stays at two messages per rank.
 *
 *   collsched-flows --tests FILE [--output FILE] [--repeats N] [--progress]
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef COLLSCHED_BUILD_VERSION
#define COLLSCHED_BUILD_VERSION "unknown"
#endif

#ifdef SMPI_HELPERS_H
#define FLOWS_SMPI 1
#else
#define FLOWS_SMPI 0
#endif

#define MAGIC "collsched-flows/1"
#define MAX_TESTS 100000
#define MAX_FLOWS 65536      /* per test */
#define MAX_TOTAL_FLOWS 1000000
#define MAX_COUNT 1024       /* messages in flight per flow */
#define MAX_BYTES 0x7fffffffL
#define MAX_REPEATS 1000
#define MAX_REAL_BUFFER (1L << 30) /* real MPI: the largest message buffer allocated */
#define TAG_FLOW 7201

struct flow { long src, dst, bytes, count; };

static void fail(int rank, const char *msg) {
    if (rank == 0) {
        fprintf(stderr, "collsched-flows: %s\n", msg);
        fflush(stderr);
    }
}

/* Rank 0: read the tests file into flows (all tests in order) and start (NTESTS + 1
 * offsets). Returns 0, or writes why to err and returns -1. */
static int read_tests(const char *path, int size, struct flow **flows_out, long **start_out, long *ntests_out,
                      char *err, size_t errlen) {
    FILE *f = fopen(path, "r");
    if (!f) { snprintf(err, errlen, "cannot read the tests file %s", path); return -1; }
    char magic[32] = {0};
    long ntests = -1;
    struct flow *flows = NULL;
    long *start = NULL, total = 0;
    if (fscanf(f, "%31s", magic) != 1 || strcmp(magic, MAGIC)) {
        snprintf(err, errlen, "%s: expected the first word %s", path, MAGIC);
        goto bad;
    }
    if (fscanf(f, "%ld", &ntests) != 1 || ntests < 1 || ntests > MAX_TESTS) {
        snprintf(err, errlen, "%s: expected the number of tests, 1 to %d", path, MAX_TESTS);
        goto bad;
    }
    start = calloc((size_t)ntests + 1, sizeof *start);
    if (!start) { snprintf(err, errlen, "out of memory"); goto bad; }
    for (long t = 0; t < ntests; t++) {
        long n = -1;
        if (fscanf(f, "%ld", &n) != 1 || n < 1 || n > MAX_FLOWS || total + n > MAX_TOTAL_FLOWS) {
            snprintf(err, errlen, "%s: test %ld: expected the number of flows, 1 to %d (at most %d in all)",
                     path, t, MAX_FLOWS, MAX_TOTAL_FLOWS);
            goto bad;
        }
        struct flow *grown = realloc(flows, (size_t)(total + n) * sizeof *flows);
        if (!grown) { snprintf(err, errlen, "out of memory"); goto bad; }
        flows = grown;
        for (long k = 0; k < n; k++) {
            struct flow *x = &flows[total + k];
            if (fscanf(f, "%ld %ld %ld %ld", &x->src, &x->dst, &x->bytes, &x->count) != 4) {
                snprintf(err, errlen, "%s: test %ld flow %ld: expected four integers SRC DST BYTES COUNT",
                         path, t, k);
                goto bad;
            }
            if (x->src < 0 || x->src >= size || x->dst < 0 || x->dst >= size || x->src == x->dst) {
                snprintf(err, errlen, "%s: test %ld flow %ld: expected two different ranks from 0 to %d",
                         path, t, k, size - 1);
                goto bad;
            }
            if (x->bytes < 0 || x->bytes > MAX_BYTES || x->count < 1 || x->count > MAX_COUNT) {
                snprintf(err, errlen, "%s: test %ld flow %ld: expected 0 <= BYTES <= %ld and 1 <= COUNT <= %d",
                         path, t, k, MAX_BYTES, MAX_COUNT);
                goto bad;
            }
        }
        total += n;
        start[t + 1] = total;
    }
    if (fscanf(f, "%31s", magic) == 1) {
        snprintf(err, errlen, "%s: unexpected text after the last test", path);
        goto bad;
    }
    fclose(f);
    *flows_out = flows;
    *start_out = start;
    *ntests_out = ntests;
    return 0;
bad:
    fclose(f);
    free(flows);
    free(start);
    return -1;
}

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* One run of one test at this rank: durations[k] (for the flows this rank receives) is set,
 * others are 0; t_start[k] is this rank's start for the flows it sends or receives, -inf
 * for the others (MAX reductions collect both). */
static void run_test(const struct flow *fl, long n, int rank, char *sbuf, char *rbuf, MPI_Request *req,
                     int *req_flow, long *left, double *durations, double *t_start) {
    MPI_Comm comm = MPI_COMM_WORLD;
    int nreq = 0;
    for (long k = 0; k < n; k++) { durations[k] = 0.0; t_start[k] = -INFINITY; left[k] = 0; }
    MPI_Barrier(comm);
    double t0 = MPI_Wtime();
    for (long k = 0; k < n; k++)
        if (fl[k].src == rank || fl[k].dst == rank) t_start[k] = t0;
    for (long k = 0; k < n; k++)
        if (fl[k].dst == rank)
            for (long c = 0; c < fl[k].count; c++) {
                req_flow[nreq] = (int)k;
                left[k]++;
                MPI_Irecv(rbuf, (int)fl[k].bytes, MPI_BYTE, (int)fl[k].src, TAG_FLOW + (int)(k % 1000), comm,
                          &req[nreq++]);
            }
    for (long k = 0; k < n; k++)
        if (fl[k].src == rank) {
            for (long c = 0; c < fl[k].count; c++) {
                req_flow[nreq] = -1;
                MPI_Isend(sbuf, (int)fl[k].bytes, MPI_BYTE, (int)fl[k].dst, TAG_FLOW + (int)(k % 1000), comm,
                          &req[nreq++]);
            }
        }
    for (int done = 0; done < nreq; done++) {
        int i = MPI_UNDEFINED;
        MPI_Waitany(nreq, req, &i, MPI_STATUS_IGNORE);
        if (i == MPI_UNDEFINED) break;
        int k = req_flow[i];
        if (k >= 0 && --left[k] == 0) durations[k] = MPI_Wtime() - t0; /* from the receiver's start */
    }
    if (FLOWS_SMPI) { /* one clock: from the sender's start (receivers' times are absolute here) */
        for (long k = 0; k < n; k++)
            if (fl[k].dst == rank) durations[k] += t0;
    }
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "--version")) {
        printf("%s %s\n", "collsched-flows", COLLSCHED_BUILD_VERSION);
        return 0;
    }
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *tests = NULL, *output = NULL;
    long repeats = 1;
    int progress = 0, bad = 0;
    for (int i = 1; i < argc && !bad; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (!strcmp(a, "--progress")) { progress = 1; continue; }
        if (!v) { fail(rank, "an option is missing its value"); bad = 1; break; }
        i++;
        if (!strcmp(a, "--tests")) tests = v;
        else if (!strcmp(a, "--output")) output = v;
        else if (!strcmp(a, "--repeats")) {
            repeats = strtol(v, &end, 10);
            if (!end || *end || repeats < 1 || repeats > MAX_REPEATS) {
                fail(rank, "--repeats: expected a whole number from 1 to 1000");
                bad = 1;
            }
        } else { fail(rank, "unknown option (usage: collsched-flows --tests FILE [--output FILE] "
                            "[--repeats N] [--progress])"); bad = 1; }
    }
    if (!bad && !tests) { fail(rank, "--tests FILE is required"); bad = 1; }
    if (bad) { MPI_Finalize(); return 2; }

    /* rank 0 reads and checks; everyone gets the flows or stops */
    struct flow *flows = NULL;
    long *start = NULL, ntests = 0;
    long header[2] = {0, 0}; /* ok, ntests */
    char err[512] = {0};
    if (rank == 0) {
        if (read_tests(tests, size, &flows, &start, &ntests, err, sizeof err) == 0) {
            header[0] = 1;
            header[1] = ntests;
        } else {
            fail(rank, err);
        }
    }
    MPI_Bcast(header, 2, MPI_LONG, 0, MPI_COMM_WORLD);
    if (!header[0]) { MPI_Finalize(); return 2; }
    ntests = header[1];
    if (rank != 0) start = malloc(((size_t)ntests + 1) * sizeof *start);
    MPI_Bcast(start, (int)ntests + 1, MPI_LONG, 0, MPI_COMM_WORLD);
    long total = start[ntests];
    if (rank != 0) flows = malloc((size_t)total * sizeof *flows);
    MPI_Bcast(flows, (int)(4 * total), MPI_LONG, 0, MPI_COMM_WORLD);

    long max_bytes = 1, max_n = 1, max_req = 1;
    for (long t = 0; t < ntests; t++) {
        long n = start[t + 1] - start[t], reqs = 0;
        if (n > max_n) max_n = n;
        for (long k = start[t]; k < start[t + 1]; k++) {
            if (flows[k].bytes > max_bytes) max_bytes = flows[k].bytes;
            if (flows[k].src == rank || flows[k].dst == rank) reqs += flows[k].count;
        }
        if (reqs > max_req) max_req = reqs;
    }
    FILE *out = stdout;
    int ok = 1;
    if (rank == 0 && output && !(out = fopen(output, "w"))) {
        snprintf(err, sizeof err, "cannot write %s", output);
        fail(rank, err);
        ok = 0;
    }
#if FLOWS_SMPI
    char *sbuf = SMPI_SHARED_MALLOC((size_t)max_bytes), *rbuf = SMPI_SHARED_MALLOC((size_t)max_bytes);
#else
    char *sbuf = NULL, *rbuf = NULL;
    if (max_bytes > MAX_REAL_BUFFER) {
        if (rank == 0) {
            snprintf(err, sizeof err, "messages of %ld bytes: at most %ld under real MPI", max_bytes,
                     MAX_REAL_BUFFER);
            fail(rank, err);
        }
        ok = 0;
    } else {
        sbuf = calloc((size_t)max_bytes, 1);
        rbuf = calloc((size_t)max_bytes, 1);
        if (!sbuf || !rbuf) ok = 0;
    }
#endif
    MPI_Request *req = malloc((size_t)max_req * sizeof *req);
    int *req_flow = malloc((size_t)max_req * sizeof *req_flow);
    long *left = malloc((size_t)max_n * sizeof *left);
    double *dur = malloc((size_t)max_n * sizeof *dur), *tsend = malloc((size_t)max_n * sizeof *tsend);
    double *runs = malloc((size_t)max_n * (size_t)repeats * sizeof *runs);
    double *red = malloc(2 * (size_t)max_n * sizeof *red), *got = malloc(2 * (size_t)max_n * sizeof *got);
    double *result = rank == 0 ? malloc((size_t)total * sizeof *result) : NULL;
    double *scratch = malloc((size_t)repeats * sizeof *scratch);
    if (!req || !req_flow || !left || !dur || !tsend || !runs || !red || !got || !scratch || (rank == 0 && !result))
        ok = 0;
    int all_ok = 0;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all_ok) {
        if (rank == 0 && !err[0]) fail(rank, "out of memory");
        MPI_Finalize();
        return 2;
    }

    MPI_Barrier(MPI_COMM_WORLD);
    double t_start = MPI_Wtime();
    for (long t = 0; t < ntests; t++) {
        const struct flow *fl = flows + start[t];
        long n = start[t + 1] - start[t];
        for (long r = 0; r < repeats; r++) {
            run_test(fl, n, rank, sbuf, rbuf, req, req_flow, left, dur, tsend);
            /* red[k]: the receiver's end (SMPI) or duration; red[n + k]: the later start of the two ends */
            for (long k = 0; k < n; k++) { red[k] = dur[k]; red[n + k] = tsend[k]; }
            MPI_Reduce(red, got, (int)(2 * n), MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
            if (rank == 0)
                for (long k = 0; k < n; k++)
                    runs[k * repeats + r] = FLOWS_SMPI ? got[k] - got[n + k] : got[k];
        }
        if (rank == 0) {
            for (long k = 0; k < n; k++) {
                memcpy(scratch, runs + k * repeats, (size_t)repeats * sizeof *scratch);
                result[start[t] + k] = median(scratch, (int)repeats);
            }
            if (progress) {
                fprintf(stderr, "progress flows %ld %ld %.6f\n", t + 1, ntests, MPI_Wtime() - t_start);
                fflush(stderr);
            }
        }
    }
    double elapsed = MPI_Wtime() - t_start;

    char name[MPI_MAX_PROCESSOR_NAME];
    int name_len = 0;
    memset(name, 0, sizeof name);
    MPI_Get_processor_name(name, &name_len);
    char *names = rank == 0 ? calloc((size_t)size, MPI_MAX_PROCESSOR_NAME) : NULL;
    MPI_Gather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        fprintf(out, "{\"format\": \"collsched-flows/1\", \"ranks\": %d, \"smpi\": %s, \"repeats\": %ld, "
                     "\"elapsed_s\": %.17g, \"processor_names\": [", size, FLOWS_SMPI ? "true" : "false",
                repeats, elapsed);
        for (int i = 0; i < size; i++) {
            fputs(i ? ", \"" : "\"", out);
            const char *s = names + (size_t)i * MPI_MAX_PROCESSOR_NAME;
            for (int c = 0; c < MPI_MAX_PROCESSOR_NAME && s[c]; c++) {
                unsigned char ch = (unsigned char)s[c];
                if (ch == '"' || ch == '\\') fprintf(out, "\\%c", ch);
                else if (ch < 0x20) fprintf(out, "\\u%04x", ch);
                else fputc(ch, out);
            }
            fputc('"', out);
        }
        fputs("], \"tests\": [", out);
        for (long t = 0; t < ntests; t++) {
            fputs(t ? ", [" : "[", out);
            for (long k = start[t]; k < start[t + 1]; k++)
                fprintf(out, k > start[t] ? ", %.17g" : "%.17g", result[k]);
            fputc(']', out);
        }
        fputs("]}\n", out);
        if (out != stdout) fclose(out);
        else fflush(out);
    }
#if FLOWS_SMPI
    SMPI_SHARED_FREE(sbuf);
    SMPI_SHARED_FREE(rbuf);
#else
    free(sbuf);
    free(rbuf);
#endif
    free(flows); free(start); free(req); free(req_flow); free(left); free(dur); free(tsend); free(runs);
    free(red); free(got); free(result); free(scratch); free(names);
    MPI_Finalize();
    return 0;
}
