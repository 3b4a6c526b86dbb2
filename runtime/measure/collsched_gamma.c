/* collsched-gamma: the reduction cost gamma (seconds per byte) of MPI_Reduce_local.
 *
 * Every rank, at once (as in an allreduce, where all ranks combine side by side and share
 * their hosts' memory bandwidth), times MPI_Reduce_local(in, inout, count, MPI_DOUBLE,
 * MPI_SUM) for each --sizes size (bytes, rounded down to whole doubles): the median of
 * --repeats runs, each of as many back-to-back calls as take at least --min-time seconds
 * (one call's time = the run's time / calls). A barrier separates sizes; one untimed
 * call per size first (page faults, caches). Each rank fits time(m) = a + gamma * m by
 * least squares on relative residuals over the sizes (bytes m); rank 0 writes one JSON object (format
 * collsched-gamma/1) to --output or stdout:
 *   sizes, time_s[rank][size], a_s[rank], gamma_s_per_byte[rank],
 *   gamma_median_s_per_byte (the median over ranks: the value `collsched measure` writes
 *   to the topology's reduction: section), hosts (processor name of each rank), smpi.
 * Under SimGrid SMPI, MPI_Wtime is the simulated clock: MPI_Reduce_local then costs what
 * smpi/simulate-computation makes it cost (nothing when it is off, as in the lab's runs;
 * the benchmarked time scaled by smpi/host-speed when on).
 *
 *   collsched-gamma [--sizes 4096,16384,65536,262144,1048576,4194304] [--repeats 5] [--min-time 0.002]
 *                   [--output FILE]
 * Bad arguments: "collsched-gamma: FIELD: expected ..., found ..." and exit status 2.
 */
#include <errno.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef COLLSCHED_BUILD_VERSION
#define COLLSCHED_BUILD_VERSION "unknown"
#endif

#if defined(SMPI_HELPERS_H) || defined(SMPI_H)
#define GAMMA_SMPI 1
#else
#define GAMMA_SMPI 0
#endif

#define MAX_SIZES 32
#define MAX_REPEATS 1000
#define MAX_BYTES (1L << 30)
#define MAX_CALLS (1L << 20)

struct opts {
    long sizes[MAX_SIZES];
    int nsizes;
    int repeats;
    double min_time;
    const char *output;
};

static int bad(int rank, const char *field, const char *expected, const char *found)
{
    if (rank == 0)
        fprintf(stderr, "collsched-gamma: %s: expected %s, found %s\n", field, expected,
                found ? found : "(nothing)");
    return 2;
}

static int parse_sizes(const char *text, struct opts *o)
{
    o->nsizes = 0;
    const char *p = text;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 8 || v > MAX_BYTES || (*end && *end != ','))
            return -1;
        if (o->nsizes == MAX_SIZES)
            return -1;
        o->sizes[o->nsizes++] = v;
        p = *end ? end + 1 : end;
    }
    return o->nsizes >= 2 ? 0 : -1;
}

static int parse(int argc, char **argv, int rank, struct opts *o)
{
    static const long defaults[] = {4096, 16384, 65536, 262144, 1048576, 4194304};
    o->nsizes = 6;
    memcpy(o->sizes, defaults, sizeof defaults);
    o->repeats = 5;
    o->min_time = 0.002;
    o->output = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end;
        if (!strcmp(a, "--sizes")) {
            if (!v || parse_sizes(v, o))
                return bad(rank, "--sizes", "2 to 32 comma-separated byte counts, 8 to 2^30", v);
        } else if (!strcmp(a, "--repeats")) {
            long r = v ? strtol(v, &end, 10) : 0;
            if (!v || *end || r < 1 || r > MAX_REPEATS)
                return bad(rank, "--repeats", "1 to 1000", v);
            o->repeats = (int)r;
        } else if (!strcmp(a, "--min-time")) {
            double t = v ? strtod(v, &end) : -1;
            if (!v || *end || !(t >= 0 && t <= 10))
                return bad(rank, "--min-time", "seconds from 0 to 10", v);
            o->min_time = t;
        } else if (!strcmp(a, "--output")) {
            if (!v)
                return bad(rank, "--output", "a file name", v);
            o->output = v;
        } else {
            return bad(rank, "argument", "--sizes, --repeats, --min-time or --output", a);
        }
        i++;
    }
    return 0;
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* One call's time for `count` doubles: the median of the repeats. */
static double time_size(double *in, double *inout, int count, const struct opts *o)
{
    double runs[MAX_REPEATS];
    MPI_Reduce_local(in, inout, count, MPI_DOUBLE, MPI_SUM); /* untimed: first touch */
    long calls = 1;
    for (int k = 0; k < o->repeats; k++) {
        double t;
        for (;;) {
            double t0 = MPI_Wtime();
            for (long c = 0; c < calls; c++)
                MPI_Reduce_local(in, inout, count, MPI_DOUBLE, MPI_SUM);
            t = MPI_Wtime() - t0;
            /* SMPI: the simulated clock is deterministic (and MPI_Wtime itself advances it
             * by smpi/wtime): one call per run. Elsewhere: a clock that does not move. */
            if (GAMMA_SMPI || t >= o->min_time || calls >= MAX_CALLS || (t <= 0 && calls >= 16))
                break;
            calls *= t > 0 ? (long)(o->min_time / t) + 2 : 16;
            if (calls > MAX_CALLS)
                calls = MAX_CALLS;
        }
        runs[k] = t / (double)calls;
    }
    qsort(runs, (size_t)o->repeats, sizeof runs[0], cmp_double);
    return runs[o->repeats / 2];
}

/* Least squares time = a + g * m over the sizes, on relative residuals (each point
 * weighted 1 / t^2: a 4 KiB time counts as much as an 8 MiB one). */
static void fit(const long *m, const double *t, int n, double *a, double *g)
{
    double sw = 0, sm = 0, st = 0, smm = 0, smt = 0;
    for (int i = 0; i < n; i++) {
        double w = t[i] > 0 ? 1.0 / (t[i] * t[i]) : 0.0, x = (double)m[i];
        sw += w, sm += w * x, st += w * t[i], smm += w * x * x, smt += w * x * t[i];
    }
    double den = sw * smm - sm * sm;
    *g = den > 0 ? (sw * smt - sm * st) / den : 0.0;
    *a = sw > 0 ? (st - *g * sm) / sw : 0.0;
}

static void write_json(FILE *f, const struct opts *o, int size, const double *times,
                       const double *as, const double *gs, const char *hosts)
{
    double *sorted = malloc(sizeof(double) * (size_t)size);
    memcpy(sorted, gs, sizeof(double) * (size_t)size);
    qsort(sorted, (size_t)size, sizeof(double), cmp_double);
    double med = size % 2 ? sorted[size / 2] : 0.5 * (sorted[size / 2 - 1] + sorted[size / 2]);
    free(sorted);
    fprintf(f, "{\"format\": \"collsched-gamma/1\", \"version\": \"%s\", \"smpi\": %d, "
               "\"ranks\": %d, \"type\": \"double\", \"op\": \"sum\", \"repeats\": %d, "
               "\"sizes\": [", COLLSCHED_BUILD_VERSION, GAMMA_SMPI, size, o->repeats);
    for (int i = 0; i < o->nsizes; i++)
        fprintf(f, "%s%ld", i ? ", " : "", (o->sizes[i] / 8) * 8);
    fprintf(f, "], \"time_s\": [");
    for (int r = 0; r < size; r++) {
        fprintf(f, "%s[", r ? ", " : "");
        for (int i = 0; i < o->nsizes; i++)
            fprintf(f, "%s%.9g", i ? ", " : "", times[r * o->nsizes + i]);
        fprintf(f, "]");
    }
    fprintf(f, "], \"a_s\": [");
    for (int r = 0; r < size; r++)
        fprintf(f, "%s%.9g", r ? ", " : "", as[r]);
    fprintf(f, "], \"gamma_s_per_byte\": [");
    for (int r = 0; r < size; r++)
        fprintf(f, "%s%.9g", r ? ", " : "", gs[r]);
    fprintf(f, "], \"gamma_median_s_per_byte\": %.9g, \"hosts\": [", med > 0 ? med : 0.0);
    for (int r = 0; r < size; r++)
        fprintf(f, "%s\"%s\"", r ? ", " : "", hosts + (size_t)r * MPI_MAX_PROCESSOR_NAME);
    fprintf(f, "]}\n");
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    struct opts o;
    int rc = parse(argc, argv, rank, &o);
    if (rc) {
        MPI_Finalize();
        return rc;
    }
    long biggest = 0;
    for (int i = 0; i < o.nsizes; i++)
        biggest = o.sizes[i] > biggest ? o.sizes[i] : biggest;
    size_t nd = (size_t)(biggest / 8);
    double *in = malloc(nd * sizeof(double)), *inout = malloc(nd * sizeof(double));
    if (!in || !inout) {
        fprintf(stderr, "collsched-gamma: rank %d: out of memory for %ld bytes\n", rank, biggest);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (size_t i = 0; i < nd; i++)
        in[i] = 1e-9 * (double)(i % 1000), inout[i] = 0.0;
    double mine[MAX_SIZES];
    long bytes[MAX_SIZES];
    for (int i = 0; i < o.nsizes; i++) {
        MPI_Barrier(MPI_COMM_WORLD);
        int count = (int)(o.sizes[i] / 8);
        bytes[i] = (long)count * 8;
        mine[i] = time_size(in, inout, count, &o);
    }
    double a, g, ag[2];
    fit(bytes, mine, o.nsizes, &a, &g);
    ag[0] = a, ag[1] = g;
    char host[MPI_MAX_PROCESSOR_NAME] = {0};
    int len;
    MPI_Get_processor_name(host, &len);
    double *times = NULL, *all_ag = NULL;
    char *hosts = NULL;
    if (rank == 0) {
        times = malloc(sizeof(double) * (size_t)size * (size_t)o.nsizes);
        all_ag = malloc(sizeof(double) * 2 * (size_t)size);
        hosts = calloc((size_t)size, MPI_MAX_PROCESSOR_NAME);
    }
    MPI_Gather(mine, o.nsizes, MPI_DOUBLE, times, o.nsizes, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    MPI_Gather(ag, 2, MPI_DOUBLE, all_ag, 2, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    MPI_Gather(host, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, hosts, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0,
               MPI_COMM_WORLD);
    if (rank == 0) {
        double *as = malloc(sizeof(double) * (size_t)size), *gs = malloc(sizeof(double) * (size_t)size);
        for (int r = 0; r < size; r++)
            as[r] = all_ag[2 * r], gs[r] = all_ag[2 * r + 1];
        FILE *f = o.output ? fopen(o.output, "w") : stdout;
        if (!f) {
            fprintf(stderr, "collsched-gamma: --output: cannot write %s\n", o.output);
            rc = 1;
        } else {
            write_json(f, &o, size, times, as, gs, hosts);
            if (f != stdout)
                fclose(f);
        }
        free(as), free(gs), free(times), free(all_ag), free(hosts);
    }
    free(in), free(inout);
    MPI_Finalize();
    return rc;
}
