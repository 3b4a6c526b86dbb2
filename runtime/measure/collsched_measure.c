/* collsched-measure: latency, bandwidth, send overhead and gap between MPI rank pairs.
 *
 * What one measurement is (every number is the median of --repeats runs):
 *   time_s(m)          src sends m bytes to dst with MPI_Send, dst answers with a 0-byte
 *                      message; the time src sees from its MPI_Send to the answer's arrival:
 *                      L(src,dst) + m / b(src,dst) + L(dst,src) on a Hockney network.
 *   send_overhead_s(m) how long src's MPI_Send of m bytes blocks (eager: a copy; rendezvous:
 *                      about the whole transfer).
 *   gap_s(m)           dst pre-posts K receives and says so; src then sends K messages of m
 *                      bytes back to back (blocking MPI_Send), dst answers once when all have
 *                      arrived: (T_K - time_s(m)) / (K - 1), the time each extra message
 *                      adds to a stream (noise can make it negative for tiny messages).
 *                      K = --gap-burst; 0 or 1 = not measured (null).
 *
 * Two phases, each in rounds of disjoint pairs; a round ends when all its pairs are done
 * (end_round: a barrier that keeps off the links of pairs still measuring):
 *   1. probe: every rank pair, a round-robin tournament (P-1 rounds of P/2 pairs), one
 *      message of the smallest size each way. Rank 0 groups ranks with it: ranks on one host
 *      (MPI_Get_processor_name) belong together, and so do hosts whose round trip is within
 *      --group-factor of the nearer host's round trip to its nearest other host.
 *   2. sweep: every size, both directions, for one rank per host pair (the lowest rank of
 *      each host) and one rank pair inside each host with several ranks; --all-pairs takes
 *      every rank pair. Pairs are packed so that a host is in at most one pair per round
 *      (its NIC is not shared) and a group in at most one cross-group pair (its wide-area
 *      link is not shared): bandwidths are those of one flow alone. --fit-only skips it.
 *   3. fit sweep (with --fit-sizes): time_s at every --fit-sizes size (a dense list, for
 *      the size-dependent cost fit), both directions, for one representative pair per link
 *      class, one pair per round: one rank pair inside the first host with several ranks,
 *      the first two hosts of every group, the first hosts of every two groups. A direction
 *      stops at the first size whose round trip exceeds --fit-budget seconds (later sizes
 *      are null), which bounds the run on slow links.
 *
 * Rank 0 writes one JSON object (format collsched-measure/1) to --output or stdout, and
 * with --progress "progress PHASE DONE TOTAL ELAPSED_S" lines to stderr after every round.
 * Builds with mpicc and with smpicc (SimGrid SMPI: MPI_Wtime is the simulated clock).
 *
 *   collsched-measure [--sizes 1,1024,65536] [--repeats 5] [--gap-burst 4]
 *                     [--group-factor 4] [--all-pairs] [--output FILE] [--progress]
 *                     [--fit-sizes 0,1,2,...] [--fit-budget 1.0] [--fit-only]
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef COLLSCHED_BUILD_VERSION  /* the Makefile passes VERSION (compiler/collsched/__init__.py) */
#define COLLSCHED_BUILD_VERSION "unknown"
#endif

#ifdef SMPI_HELPERS_H
#define MEASURE_SMPI 1
#else
#define MEASURE_SMPI 0
#endif

#define MAX_SIZES 64
#define TAG_DATA 7101
#define TAG_ACK 7102
#define TAG_READY 7103
#define TAG_CLOSE 7104
#define TAG_REPORT 7105
#define TAG_GO 7106
#define TAG_MORE 7107
#define MAX_BURST 64
#define MAX_FIT_SIZES 1024

struct opts {
    long sizes[MAX_SIZES];
    int nsizes;
    int repeats;
    int gap_burst;
    double group_factor;
    int all_pairs;
    int progress;
    const char *output;
    long fit_sizes[MAX_FIT_SIZES];
    int nfit;
    double fit_budget;
    int fit_only;
};

struct pair { int a, b; }; /* a < b */

static int usage(int rank, const char *msg) {
    if (rank == 0)
        fprintf(stderr, "collsched-measure: %s\nusage: collsched-measure [--sizes B,B,...] [--repeats N] "
                        "[--gap-burst K] [--group-factor F] [--all-pairs] [--output FILE] [--progress] "
                        "[--fit-sizes B,B,...] [--fit-budget S] [--fit-only]\n", msg);
    return 2;
}

static int parse_sizes(const char *text, long *sizes, int cap, int *n) {
    *n = 0;
    const char *p = text;
    while (*p) {
        char *end = NULL;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > 0x7fffffffL || *n == cap) return -1;
        sizes[(*n)++] = v;
        if (*end == ',') end++;
        else if (*end) return -1;
        p = end;
    }
    return *n ? 0 : -1;
}

static int parse(int argc, char **argv, struct opts *o, int rank) {
    memset(o, 0, sizeof *o);
    o->repeats = 5;
    o->gap_burst = 4;
    o->group_factor = 4.0;
    o->fit_budget = 1.0;
    parse_sizes("1,1024,16384,131072,1048576", o->sizes, MAX_SIZES, &o->nsizes);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (!strcmp(a, "--all-pairs")) { o->all_pairs = 1; continue; }
        if (!strcmp(a, "--progress")) { o->progress = 1; continue; }
        if (!strcmp(a, "--fit-only")) { o->fit_only = 1; continue; }
        if (!v) return usage(rank, "an option is missing its value");
        i++;
        if (!strcmp(a, "--sizes")) {
            if (parse_sizes(v, o->sizes, MAX_SIZES, &o->nsizes))
                return usage(rank, "--sizes: expected comma-separated byte counts (at most 64)");
            continue;
        }
        if (!strcmp(a, "--fit-sizes")) {
            if (parse_sizes(v, o->fit_sizes, MAX_FIT_SIZES, &o->nfit))
                return usage(rank, "--fit-sizes: expected comma-separated byte counts (at most 1024)");
            continue;
        }
        if (!strcmp(a, "--output")) { o->output = v; continue; }
        if (!strcmp(a, "--repeats")) o->repeats = (int)strtol(v, &end, 10);
        else if (!strcmp(a, "--gap-burst")) o->gap_burst = (int)strtol(v, &end, 10);
        else if (!strcmp(a, "--group-factor")) o->group_factor = strtod(v, &end);
        else if (!strcmp(a, "--fit-budget")) o->fit_budget = strtod(v, &end);
        else return usage(rank, "unknown option");
        if (!end || *end) return usage(rank, "a value is not a number");
    }
    if (o->repeats < 1 || o->gap_burst < 0 || o->gap_burst > MAX_BURST || !(o->group_factor >= 1.0)
        || !(o->fit_budget > 0.0))
        return usage(rank, "expected --repeats >= 1, 0 <= --gap-burst <= 64, --group-factor >= 1 "
                           "and --fit-budget > 0");
    return 0;
}

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct direction_result { double time, send_overhead, gap; };

/* One direction of one pair at one size: the sender times, the receiver answers with an
 * empty message. Both ranks call it with the same arguments except `sending`. buf holds
 * max(1, burst) messages of m bytes: the receiver of a stream pre-posts one receive per
 * message (as a bandwidth test does), so the stream measures the sender and the network,
 * not how soon the receiver posts its next receive. */
static void measure_direction(int sending, int peer, char *buf, long m, int repeats, int burst,
                              double *scratch, struct direction_result *out) {
    MPI_Comm comm = MPI_COMM_WORLD;
    int count = (int)m;
    int streams = burst >= 2 ? repeats : 0;
    if (!sending) {
        for (int r = 0; r < 1 + repeats; r++) { /* 1 untimed warm-up first */
            MPI_Recv(buf, count, MPI_BYTE, peer, TAG_DATA, comm, MPI_STATUS_IGNORE);
            MPI_Send(buf, 0, MPI_BYTE, peer, TAG_ACK, comm);
        }
        MPI_Request req[MAX_BURST];
        for (int r = 0; r < streams; r++) {
            for (int k = 0; k < burst; k++)
                MPI_Irecv(buf + (size_t)k * (size_t)m, count, MPI_BYTE, peer, TAG_DATA, comm, &req[k]);
            MPI_Send(buf, 0, MPI_BYTE, peer, TAG_READY, comm);
            MPI_Waitall(burst, req, MPI_STATUSES_IGNORE);
            MPI_Send(buf, 0, MPI_BYTE, peer, TAG_ACK, comm);
        }
        return;
    }
    double *rtt = scratch, *os = scratch + repeats, *stream = scratch + 2 * repeats;
    for (int r = -1; r < repeats; r++) {
        double t0 = MPI_Wtime();
        MPI_Send(buf, count, MPI_BYTE, peer, TAG_DATA, comm);
        double t1 = MPI_Wtime();
        MPI_Recv(buf, 0, MPI_BYTE, peer, TAG_ACK, comm, MPI_STATUS_IGNORE);
        double t2 = MPI_Wtime();
        if (r >= 0) { rtt[r] = t2 - t0; os[r] = t1 - t0; }
    }
    for (int r = 0; r < streams; r++) {
        MPI_Recv(buf, 0, MPI_BYTE, peer, TAG_READY, comm, MPI_STATUS_IGNORE);
        double t0 = MPI_Wtime();
        for (int k = 0; k < burst; k++) MPI_Send(buf, count, MPI_BYTE, peer, TAG_DATA, comm);
        MPI_Recv(buf, 0, MPI_BYTE, peer, TAG_ACK, comm, MPI_STATUS_IGNORE);
        stream[r] = MPI_Wtime() - t0;
    }
    out->time = median(rtt, repeats);
    out->send_overhead = median(os, repeats);
    out->gap = streams ? (median(stream, repeats) - out->time) / (burst - 1) : NAN;
}

/* End of a round, instead of MPI_Barrier, whose messages would cross links that pairs still
 * measuring use (that disturbed single samples under SMPI). First a closing handshake with
 * the partner: after it none of the pair's timed messages is on the wire. Then every rank
 * reports to its group's leader (lowest rank of the group), the leaders report to rank 0
 * once their whole group is done (rank 0 first waits for its own group), and rank 0 lets
 * everyone go. leader[i]: leader of rank i's group (all 0 before groups are known). */
static void end_round(int rank, int size, int peer, const int *leader, MPI_Request *reqs) {
    MPI_Comm comm = MPI_COMM_WORLD;
    char none = 0;
    if (peer >= 0)
        MPI_Sendrecv(&none, 0, MPI_BYTE, peer, TAG_CLOSE, &none, 0, MPI_BYTE, peer, TAG_CLOSE, comm,
                     MPI_STATUS_IGNORE);
    if (leader[rank] == rank) {
        int n = 0;
        for (int i = 0; i < size; i++)
            if (i != rank && leader[i] == rank)
                MPI_Irecv(&none, 0, MPI_BYTE, i, TAG_REPORT, comm, &reqs[n++]);
        MPI_Waitall(n, reqs, MPI_STATUSES_IGNORE);
        if (rank != 0) {
            MPI_Send(&none, 0, MPI_BYTE, 0, TAG_REPORT, comm);
        } else {
            n = 0;
            for (int i = 1; i < size; i++)
                if (leader[i] == i) MPI_Irecv(&none, 0, MPI_BYTE, i, TAG_REPORT, comm, &reqs[n++]);
            MPI_Waitall(n, reqs, MPI_STATUSES_IGNORE);
            for (int i = 1; i < size; i++) MPI_Isend(&none, 0, MPI_BYTE, i, TAG_GO, comm, &reqs[i - 1]);
            MPI_Waitall(size - 1, reqs, MPI_STATUSES_IGNORE);
        }
    } else {
        MPI_Send(&none, 0, MPI_BYTE, leader[rank], TAG_REPORT, comm);
    }
    if (rank != 0) MPI_Recv(&none, 0, MPI_BYTE, 0, TAG_GO, comm, MPI_STATUS_IGNORE);
}

/* Round r (0 <= r < n-1) of the circle-method tournament on n (even) players: pair k of
 * it, k < n/2. Every pair of players meets exactly once in n-1 rounds. */
static struct pair tournament_pair(int n, int r, int k) {
    int x, y;
    if (k == 0) { x = n - 1; y = r; }
    else { x = (r + k) % (n - 1); y = (r - k + n - 1) % (n - 1); }
    struct pair p = { x < y ? x : y, x < y ? y : x };
    return p;
}

/* Phase 1 at one rank: its round trip (probe size out, empty answer back) to every other
 * rank, 0 on the diagonal. Returns the number of rounds. */
static int probe_all(const struct opts *o, int rank, int size, char *buf, double *scratch,
                     double *row, double t_start, MPI_Request *reqs) {
    int *everyone_to_0 = calloc((size_t)size, sizeof *everyone_to_0); /* groups not known yet */
    int n = size + size % 2; /* odd P: a dummy player, meeting it is a bye */
    long m = o->sizes[0];
    for (int i = 0; i < o->nsizes; i++) if (o->sizes[i] < m) m = o->sizes[i];
    for (int j = 0; j < size; j++) row[j] = 0.0;
    int rounds = n - 1;
    for (int r = 0; r < rounds; r++) {
        int peer = -1;
        for (int k = 0; k < n / 2; k++) {
            struct pair p = tournament_pair(n, r, k);
            if (p.b >= size || (p.a != rank && p.b != rank)) continue;
            peer = p.a == rank ? p.b : p.a;
            struct direction_result res;
            for (int d = 0; d < 2; d++) { /* a times first, then b */
                int sending = (d == 0) == (rank == p.a);
                measure_direction(sending, peer, buf, m, o->repeats, 0, scratch, &res);
                if (sending) row[peer] = res.time;
            }
        }
        end_round(rank, size, peer, everyone_to_0, reqs);
        if (o->progress && rank == 0) {
            fprintf(stderr, "progress probe %d %d %.6f\n", r + 1, rounds, MPI_Wtime() - t_start);
            fflush(stderr);
        }
    }
    free(everyone_to_0);
    return rounds;
}

/* Union-find over hosts. */
static int find(int *parent, int x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
}

/* Rank 0: host of every rank (by processor name, in order of first appearance) and group
 * of every rank (hosts whose round trip is within `factor` of the smaller of the two hosts'
 * nearest-other-host round trips, closed transitively). */
static void group_ranks(int size, const char *names, int name_len, const double *rtt, double factor,
                        int *host, int *group) {
    int nhosts = 0;
    int *first = malloc((size_t)size * sizeof *first); /* first rank of each host */
    for (int i = 0; i < size; i++) {
        host[i] = -1;
        for (int h = 0; h < nhosts; h++)
            if (!strncmp(names + (size_t)first[h] * name_len, names + (size_t)i * name_len, (size_t)name_len)) {
                host[i] = h;
                break;
            }
        if (host[i] < 0) { first[nhosts] = i; host[i] = nhosts++; }
    }
    /* Host-level round trip: the fastest of its rank pairs, both directions. */
    double *hr = malloc((size_t)nhosts * nhosts * sizeof *hr);
    for (int x = 0; x < nhosts * nhosts; x++) hr[x] = -1.0;
    for (int i = 0; i < size; i++)
        for (int j = 0; j < size; j++) {
            if (host[i] == host[j]) continue;
            double v = rtt[(size_t)i * size + j];
            double *c = &hr[(size_t)host[i] * nhosts + host[j]];
            double *c2 = &hr[(size_t)host[j] * nhosts + host[i]];
            if (*c < 0 || v < *c) *c = *c2 = v;
        }
    double *nearest = malloc((size_t)nhosts * sizeof *nearest);
    for (int h = 0; h < nhosts; h++) {
        nearest[h] = -1.0;
        for (int g = 0; g < nhosts; g++) {
            double v = hr[(size_t)h * nhosts + g];
            if (g != h && (nearest[h] < 0 || v < nearest[h])) nearest[h] = v;
        }
    }
    int *parent = malloc((size_t)nhosts * sizeof *parent);
    for (int h = 0; h < nhosts; h++) parent[h] = h;
    for (int h = 0; h < nhosts; h++)
        for (int g = h + 1; g < nhosts; g++) {
            double ref = nearest[h] < nearest[g] ? nearest[h] : nearest[g];
            if (hr[(size_t)h * nhosts + g] <= factor * ref) parent[find(parent, h)] = find(parent, g);
        }
    int *label = malloc((size_t)nhosts * sizeof *label), ngroups = 0;
    for (int h = 0; h < nhosts; h++) label[h] = -1;
    for (int i = 0; i < size; i++) {
        int root = find(parent, host[i]);
        if (label[root] < 0) label[root] = ngroups++;
        group[i] = label[root];
    }
    free(first); free(hr); free(nearest); free(parent); free(label);
}

/* How many hosts and groups the ranks span, and each host's first and second rank (-1:
 * none); *first and *second are malloc'ed (the caller frees them). */
static void host_ranks(int size, const int *host, const int *group, int *nhosts_out, int *ngroups_out,
                       int **first_out, int **second_out) {
    int nhosts = 0, ngroups = 0;
    for (int i = 0; i < size; i++) {
        if (host[i] + 1 > nhosts) nhosts = host[i] + 1;
        if (group[i] + 1 > ngroups) ngroups = group[i] + 1;
    }
    int *first = malloc((size_t)nhosts * sizeof *first), *second = malloc((size_t)nhosts * sizeof *second);
    for (int h = 0; h < nhosts; h++) first[h] = second[h] = -1;
    for (int i = 0; i < size; i++) {
        if (first[host[i]] < 0) first[host[i]] = i;
        else if (second[host[i]] < 0) second[host[i]] = i;
    }
    *nhosts_out = nhosts, *ngroups_out = ngroups, *first_out = first, *second_out = second;
}

/* Every rank: the sweep's pairs, in the order of their rounds (round_start[r] .. [r+1]).
 * Players are the lowest rank of each host, or every rank with --all-pairs. Candidates:
 * cross-group pairs first (they are the scarce ones), then same-group pairs in per-group
 * tournament order, then (without --all-pairs) one pair inside each host with several
 * ranks. Each round takes, first fit, every candidate whose hosts and (for a cross-group
 * pair) groups are still free in that round. */
static int plan_sweep(int size, const int *host, const int *group, int all_pairs,
                      struct pair **pairs_out, int **round_start_out) {
    int nhosts, ngroups, *first, *second;
    host_ranks(size, host, group, &nhosts, &ngroups, &first, &second);
    int *player = malloc((size_t)size * sizeof *player);
    for (int i = 0; i < size; i++) player[i] = all_pairs || first[host[i]] == i;

    size_t cap = (size_t)size * (size - 1) / 2 + 1, ncand = 0;
    struct pair *cand = malloc(cap * sizeof *cand);
    for (int i = 0; i < size; i++)
        for (int j = i + 1; j < size; j++)
            if (player[i] && player[j] && group[i] != group[j]) cand[ncand++] = (struct pair){i, j};

    int *members = malloc((size_t)size * sizeof *members);
    int *gstart = calloc((size_t)ngroups + 1, sizeof *gstart);
    int *fill = malloc((size_t)ngroups * sizeof *fill);
    for (int i = 0; i < size; i++) if (player[i]) gstart[group[i] + 1]++;
    for (int g = 0; g < ngroups; g++) gstart[g + 1] += gstart[g];
    for (int g = 0; g < ngroups; g++) fill[g] = gstart[g];
    for (int i = 0; i < size; i++) if (player[i]) members[fill[group[i]]++] = i;
    int maxn = 0;
    for (int g = 0; g < ngroups; g++) {
        int c = gstart[g + 1] - gstart[g];
        if (c + c % 2 > maxn) maxn = c + c % 2;
    }
    for (int r = 0; r + 1 < maxn; r++)
        for (int g = 0; g < ngroups; g++) {
            int c = gstart[g + 1] - gstart[g], n = c + c % 2;
            if (r >= n - 1) continue;
            for (int k = 0; k < n / 2; k++) {
                struct pair t = tournament_pair(n, r, k);
                if (t.b < c) cand[ncand++] = (struct pair){members[gstart[g] + t.a], members[gstart[g] + t.b]};
            }
        }
    if (!all_pairs)
        for (int h = 0; h < nhosts; h++)
            if (second[h] >= 0) cand[ncand++] = (struct pair){first[h], second[h]};

    struct pair *out = malloc((ncand + 1) * sizeof *out);
    int *round_start = malloc((ncand + 2) * sizeof *round_start);
    char *done = calloc(ncand + 1, 1), *host_busy = malloc((size_t)nhosts), *group_busy = malloc((size_t)ngroups);
    size_t nout = 0;
    int rounds = 0;
    while (nout < ncand) {
        memset(host_busy, 0, (size_t)nhosts);
        memset(group_busy, 0, (size_t)ngroups);
        round_start[rounds++] = (int)nout;
        for (size_t c = 0; c < ncand; c++) {
            if (done[c]) continue;
            int i = cand[c].a, j = cand[c].b, cross = group[i] != group[j];
            if (host_busy[host[i]] || host_busy[host[j]]) continue;
            if (cross && (group_busy[group[i]] || group_busy[group[j]])) continue;
            host_busy[host[i]] = host_busy[host[j]] = 1;
            if (cross) group_busy[group[i]] = group_busy[group[j]] = 1;
            done[c] = 1;
            out[nout++] = cand[c];
        }
    }
    round_start[rounds] = (int)nout;
    free(first); free(second); free(player); free(cand); free(members); free(gstart); free(fill);
    free(done); free(host_busy); free(group_busy);
    *pairs_out = out;
    *round_start_out = round_start;
    return rounds;
}

/* Every rank: the fit sweep's representative pairs, one per link class (see the header):
 * an intra-host pair, a same-group host pair per group, a cross-group pair per two groups.
 * Returns how many; *out is malloc'ed. */
static int plan_fit(int size, const int *host, const int *group, struct pair **out) {
    int nhosts, ngroups, *first, *second;
    host_ranks(size, host, group, &nhosts, &ngroups, &first, &second);
    /* the first two hosts of every group, by their first ranks */
    int *g1 = malloc((size_t)ngroups * sizeof *g1), *g2 = malloc((size_t)ngroups * sizeof *g2);
    for (int g = 0; g < ngroups; g++) g1[g] = g2[g] = -1;
    for (int i = 0; i < size; i++) {
        if (first[host[i]] != i) continue;
        int g = group[i];
        if (g1[g] < 0) g1[g] = i;
        else if (g2[g] < 0) g2[g] = i;
    }
    struct pair *p = malloc(((size_t)ngroups * ngroups + 2) * sizeof *p);
    int n = 0;
    for (int h = 0; h < nhosts; h++)
        if (second[h] >= 0) { p[n++] = (struct pair){first[h], second[h]}; break; }
    for (int g = 0; g < ngroups; g++)
        if (g2[g] >= 0) p[n++] = (struct pair){g1[g], g2[g]};
    for (int g = 0; g < ngroups; g++)
        for (int k = g + 1; k < ngroups; k++)
            p[n++] = (struct pair){g1[g] < g1[k] ? g1[g] : g1[k], g1[g] < g1[k] ? g1[k] : g1[g]};
    free(first); free(second); free(g1); free(g2);
    *out = p;
    return n;
}

/* Phase 3: the fit sweep, one representative pair per round. Records of the directions this
 * rank timed go to recs (src, dst, then time_s per fit size; NAN past the budget). Returns
 * the number of records. */
static int fit_sweep(const struct opts *o, int rank, int size, const int *host, const int *group,
                     const int *leader, char *buf, double *scratch, MPI_Request *reqs, double t_start,
                     double *recs, int *rounds_out) {
    struct pair *pairs;
    int npairs = plan_fit(size, host, group, &pairs), rec_len = 2 + o->nfit, nrec = 0;
    *rounds_out = o->nfit ? npairs : 0;
    for (int r = 0; r < *rounds_out; r++) {
        struct pair p = pairs[r];
        int peer = p.a == rank ? p.b : p.b == rank ? p.a : -1;
        for (int d = 0; d < 2 && peer >= 0; d++) {
            int sending = (d == 0) == (rank == p.a);
            double *rec = recs + (size_t)nrec * rec_len;
            int more = 1;
            for (int s = 0; s < o->nfit; s++) {
                struct direction_result res;
                if (sending) rec[2 + s] = NAN;
                if (!more) continue;
                measure_direction(sending, peer, buf, o->fit_sizes[s], o->repeats, 0, scratch, &res);
                if (sending) {
                    rec[2 + s] = res.time;
                    more = res.time <= o->fit_budget;
                    MPI_Send(&more, 1, MPI_INT, peer, TAG_MORE, MPI_COMM_WORLD);
                } else {
                    MPI_Recv(&more, 1, MPI_INT, peer, TAG_MORE, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                }
            }
            if (sending) { rec[0] = rank; rec[1] = peer; nrec++; }
        }
        end_round(rank, size, peer, leader, reqs);
        if (o->progress && rank == 0) {
            fprintf(stderr, "progress fit %d %d %.6f\n", r + 1, *rounds_out, MPI_Wtime() - t_start);
            fflush(stderr);
        }
    }
    free(pairs);
    return nrec;
}

/* Rank 0 gets every rank's records (count doubles each); returns the total count there. */
static int gather_records(const double *recs, int count, int rank, int size, double **all_out) {
    int *counts = rank == 0 ? malloc((size_t)size * sizeof *counts) : NULL;
    int *displs = rank == 0 ? malloc((size_t)size * sizeof *displs) : NULL;
    MPI_Gather(&count, 1, MPI_INT, counts, 1, MPI_INT, 0, MPI_COMM_WORLD);
    double *all = NULL;
    int total = 0;
    if (rank == 0) {
        for (int i = 0; i < size; i++) { displs[i] = total; total += counts[i]; }
        all = malloc((size_t)(total ? total : 1) * sizeof *all);
    }
    MPI_Gatherv(recs, count, MPI_DOUBLE, all, counts, displs, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    free(counts); free(displs);
    *all_out = all;
    return total;
}

static void json_string(FILE *f, const char *s, int len) {
    fputc('"', f);
    for (int i = 0; i < len && s[i]; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

static void json_number(FILE *f, double v) {
    if (isnan(v)) fputs("null", f); /* not measured */
    else fprintf(f, "%.17g", v);
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "--version")) {  /* before MPI_Init: no mpirun needed */
        printf("%s %s\n", "collsched-measure", COLLSCHED_BUILD_VERSION);
        return 0;
    }
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    struct opts o;
    int rc = parse(argc, argv, &o, rank);
    if (rc) { MPI_Finalize(); return rc; }
    FILE *out = stdout;
    if (rank == 0 && o.output && !(out = fopen(o.output, "w"))) {
        fprintf(stderr, "collsched-measure: cannot write %s\n", o.output);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    long max_size = 1, max_fit = 1;
    for (int i = 0; i < o.nsizes; i++) if (o.sizes[i] > max_size) max_size = o.sizes[i];
    max_size *= o.gap_burst > 1 ? o.gap_burst : 1; /* a stream's receives each have their own slot */
    for (int i = 0; i < o.nfit; i++) if (o.fit_sizes[i] > max_fit) max_fit = o.fit_sizes[i];
    if (max_fit > max_size) max_size = max_fit;
#if MEASURE_SMPI
    char *buf = SMPI_SHARED_MALLOC((size_t)max_size); /* contents do not matter, only timing */
#else
    char *buf = malloc((size_t)max_size);
#endif
    memset(buf, 0, (size_t)max_size);
    double *scratch = malloc(3 * (size_t)o.repeats * sizeof *scratch);

    char name[MPI_MAX_PROCESSOR_NAME];
    int name_len = 0;
    memset(name, 0, sizeof name);
    MPI_Get_processor_name(name, &name_len);
    char *names = rank == 0 ? calloc((size_t)size, MPI_MAX_PROCESSOR_NAME) : NULL;
    MPI_Gather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0,
               MPI_COMM_WORLD);

    MPI_Barrier(MPI_COMM_WORLD);
    double t_start = MPI_Wtime();
    double *row = malloc((size_t)size * sizeof *row);
    MPI_Request *reqs = malloc((size_t)size * sizeof *reqs);
    int probe_rounds = probe_all(&o, rank, size, buf, scratch, row, t_start, reqs);
    double *rtt = rank == 0 ? malloc((size_t)size * size * sizeof *rtt) : NULL;
    MPI_Gather(row, size, MPI_DOUBLE, rtt, size, MPI_DOUBLE, 0, MPI_COMM_WORLD);

    int *host = malloc(2 * (size_t)size * sizeof *host), *group = host + size;
    if (rank == 0) group_ranks(size, names, MPI_MAX_PROCESSOR_NAME, rtt, o.group_factor, host, group);
    MPI_Bcast(host, 2 * size, MPI_INT, 0, MPI_COMM_WORLD);
    int *leader = malloc((size_t)size * sizeof *leader);
    for (int i = size - 1; i >= 0; i--)
        for (int j = 0; j <= i; j++)
            if (group[j] == group[i]) { leader[i] = j; break; }
    end_round(rank, size, -1, leader, reqs); /* the broadcast's forwarding is over everywhere */

    struct pair *pairs;
    int *round_start;
    int rounds = plan_sweep(size, host, group, o.all_pairs, &pairs, &round_start);
    if (o.fit_only) rounds = 0;
    /* Records of the directions this rank timed: src, dst, then per size time, os, gap. */
    int rec_len = 2 + 3 * o.nsizes, nrec = 0;
    double *recs = malloc((size_t)2 * size * rec_len * sizeof *recs);
    for (int r = 0; r < rounds; r++) {
        int peer = -1;
        for (int c = round_start[r]; c < round_start[r + 1]; c++) {
            struct pair p = pairs[c];
            if (p.a != rank && p.b != rank) continue;
            peer = p.a == rank ? p.b : p.a;
            for (int d = 0; d < 2; d++) {
                int sending = (d == 0) == (rank == p.a);
                double *rec = recs + (size_t)nrec * rec_len;
                for (int s = 0; s < o.nsizes; s++) {
                    struct direction_result res;
                    measure_direction(sending, peer, buf, o.sizes[s], o.repeats, o.gap_burst, scratch, &res);
                    if (sending) {
                        rec[2 + 3 * s] = res.time;
                        rec[3 + 3 * s] = res.send_overhead;
                        rec[4 + 3 * s] = res.gap;
                    }
                }
                if (sending) { rec[0] = rank; rec[1] = peer; nrec++; }
            }
        }
        end_round(rank, size, peer, leader, reqs);
        if (o.progress && rank == 0) {
            fprintf(stderr, "progress sweep %d %d %.6f\n", r + 1, rounds, MPI_Wtime() - t_start);
            fflush(stderr);
        }
    }
    int fit_len = 2 + o.nfit, fit_rounds = 0;
    double *fit_recs = malloc((size_t)2 * size * fit_len * sizeof *fit_recs);
    int nfit_rec = fit_sweep(&o, rank, size, host, group, leader, buf, scratch, reqs, t_start, fit_recs,
                             &fit_rounds);
    double elapsed = MPI_Wtime() - t_start;

    double *all = NULL, *fit_all = NULL;
    int total = gather_records(recs, nrec * rec_len, rank, size, &all);
    int fit_total = gather_records(fit_recs, nfit_rec * fit_len, rank, size, &fit_all);

    if (rank == 0) {
        fprintf(out, "{\"format\": \"collsched-measure/1\", \"ranks\": %d, \"smpi\": %s, ", size,
                MEASURE_SMPI ? "true" : "false");
        fprintf(out, "\"processor_names\": [");
        for (int i = 0; i < size; i++) {
            if (i) fputs(", ", out);
            json_string(out, names + (size_t)i * MPI_MAX_PROCESSOR_NAME, MPI_MAX_PROCESSOR_NAME);
        }
        fprintf(out, "], \"sizes\": [");
        for (int s = 0; s < o.nsizes; s++) fprintf(out, s ? ", %ld" : "%ld", o.sizes[s]);
        fprintf(out, "], \"repeats\": %d, \"gap_burst\": %d, \"group_factor\": %.17g, \"all_pairs\": %s, "
                     "\"wtick_s\": %.17g, \"elapsed_s\": %.17g, ",
                o.repeats, o.gap_burst, o.group_factor, o.all_pairs ? "true" : "false", MPI_Wtick(), elapsed);
        fprintf(out, "\"rounds\": {\"probe\": %d, \"sweep\": %d, \"fit\": %d}, \"hosts\": [", probe_rounds,
                rounds, fit_rounds);
        for (int i = 0; i < size; i++) fprintf(out, i ? ", %d" : "%d", host[i]);
        fprintf(out, "], \"groups\": [");
        for (int i = 0; i < size; i++) fprintf(out, i ? ", %d" : "%d", group[i]);
        fprintf(out, "], \"probe_round_trip_s\": [");
        for (int i = 0; i < size; i++) {
            fputs(i ? ", [" : "[", out);
            for (int j = 0; j < size; j++) fprintf(out, j ? ", %.17g" : "%.17g", rtt[(size_t)i * size + j]);
            fputc(']', out);
        }
        fprintf(out, "], \"pairs\": [");
        for (int k = 0; k < total / rec_len; k++) {
            const double *rec = all + (size_t)k * rec_len;
            fprintf(out, "%s{\"src\": %d, \"dst\": %d", k ? ", " : "", (int)rec[0], (int)rec[1]);
            static const char *const keys[3] = {"time_s", "send_overhead_s", "gap_s"};
            for (int q = 0; q < 3; q++) {
                fprintf(out, ", \"%s\": [", keys[q]);
                for (int s = 0; s < o.nsizes; s++) {
                    if (s) fputs(", ", out);
                    json_number(out, rec[2 + 3 * s + q]);
                }
                fputc(']', out);
            }
            fputc('}', out);
        }
        fprintf(out, "], \"fit_budget_s\": %.17g, \"fit_sizes\": [", o.fit_budget);
        for (int s = 0; s < o.nfit; s++) fprintf(out, s ? ", %ld" : "%ld", o.fit_sizes[s]);
        fprintf(out, "], \"fit_pairs\": [");
        for (int k = 0; k < fit_total / fit_len; k++) {
            const double *rec = fit_all + (size_t)k * fit_len;
            fprintf(out, "%s{\"src\": %d, \"dst\": %d, \"time_s\": [", k ? ", " : "", (int)rec[0], (int)rec[1]);
            for (int s = 0; s < o.nfit; s++) {
                if (s) fputs(", ", out);
                json_number(out, rec[2 + s]);
            }
            fputs("]}", out);
        }
        fprintf(out, "]}\n");
        if (out != stdout) fclose(out);
        else fflush(out);
        free(names); free(rtt); free(all); free(fit_all);
    }
#if MEASURE_SMPI
    SMPI_SHARED_FREE(buf);
#else
    free(buf);
#endif
    free(scratch); free(row); free(host); free(leader); free(reqs); free(pairs); free(round_start); free(recs);
    free(fit_recs);
    MPI_Finalize();
    return 0;
}
