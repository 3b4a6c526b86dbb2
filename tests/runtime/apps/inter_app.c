/* MPI_Allgather(v) between two groups, checked byte for byte (tests/runtime/test_inter_mpi.py).
 *
 *   inter_app --a N,N,.. --b N,N,.. [--v] [--type byte|gappy] [--displs packed|reversed]
 *             [--api mpi|collsched|merged] [--sleep] [--iters K]
 *
 * World ranks 0..|a|-1 form one group (block sizes --a, in elements of the type), the others
 * the second (--b). --api mpi: MPI_Allgather(v) on an intercommunicator made with
 * MPI_Comm_split + MPI_Intercomm_create (served by the preload library when it is
 * preloaded); collsched: collsched_allgather(v) on it; merged: collsched_inter_allgather(v)_
 * merged on MPI_COMM_WORLD split at |a| (linked builds, -DLINKED). Every call's receive
 * buffer is compared, whole (gaps included), with the MPI library's own intercommunicator
 * collective (PMPI) on the same inputs, and for --type byte with the values each rank sent.
 * --type gappy: elements of two ints with a gap, extent 16 bytes (not a run of bytes).
 * --displs reversed: allgatherv blocks in reverse rank order with gaps between them.
 * --sleep: ranks arrive up to 6 ms apart. Several cases, separated by "+", run one after the
 * other; rank 0 prints "inter_app: case N OK ... used U of K calls" or a mismatch for each.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef LINKED
#include "collsched.h"
#endif

#define MAXR 64

static int parse_list(const char *s, int *v)
{
    int n = 0;
    for (char *end; *s && n < MAXR; s = *end ? end + 1 : end) v[n++] = (int)strtol(s, &end, 10);
    return n;
}

static unsigned char value(int group, int rank, long k, int iter)
{
    return (unsigned char)((group * 101 + rank * 37 + k * 7 + iter * 13 + 1) & 0xFF);
}

typedef struct opts {
    int a[MAXR], b[MAXR], na, nb, v, gappy, reversed, sleep, iters;
    const char *api;
} opts;

static void parse(int argc, char **argv, opts *o)
{
    memset(o, 0, sizeof *o);
    o->api = "mpi";
    o->iters = 3;
    for (int i = 1; i < argc; i++) {
        const char *x = argv[i], *y = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(x, "--a")) o->na = parse_list(y, o->a), i++;
        else if (!strcmp(x, "--b")) o->nb = parse_list(y, o->b), i++;
        else if (!strcmp(x, "--v")) o->v = 1;
        else if (!strcmp(x, "--type")) o->gappy = !strcmp(y, "gappy"), i++;
        else if (!strcmp(x, "--displs")) o->reversed = !strcmp(y, "reversed"), i++;
        else if (!strcmp(x, "--api")) o->api = y, i++;
        else if (!strcmp(x, "--sleep")) o->sleep = 1;
        else if (!strcmp(x, "--iters")) o->iters = atoi(y), i++;
    }
}

/* One case: iters calls on a fresh intercommunicator; returns 0 if every byte was right. */
static int run_case(const opts *oo, int ncase, int wrank, int wsize)
{
    opts o = *oo;
    if (o.na < 1 || o.nb < 1 || o.na + o.nb != wsize) {
        if (wrank == 0) fprintf(stderr, "inter_app: --a and --b must list %d ranks in all\n", wsize);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int mine = wrank >= o.na, lrank = mine ? wrank - o.na : wrank;
    int *lsz = mine ? o.b : o.a, *rsz = mine ? o.a : o.b, rsize = mine ? o.na : o.nb;
    MPI_Comm local, inter;
    MPI_Comm_split(MPI_COMM_WORLD, mine, lrank, &local);
    MPI_Intercomm_create(local, 0, MPI_COMM_WORLD, mine ? 0 : o.na, 7, &inter);
    MPI_Datatype t = MPI_BYTE;
    long ext = 1;
    if (o.gappy) { /* two ints, a gap of 4 bytes between them and 4 after: size 8, extent 16 */
        MPI_Datatype v;
        MPI_Type_vector(2, 1, 2, MPI_INT, &v);
        MPI_Type_create_resized(v, 0, 16, &t);
        MPI_Type_commit(&t);
        MPI_Type_free(&v);
        ext = 16;
    }
    int counts[MAXR], displs[MAXR];
    long span = 0;
    for (int j = 0; j < rsize; j++) span += rsz[j] + 2;
    for (int j = 0, at = 0; j < rsize; j++) { /* reversed: block j after blocks j+1.., 2 elements apart */
        counts[j] = rsz[j];
        displs[j] = o.reversed ? (int)(span - at - rsz[j] - 2) : at;
        at += rsz[j] + (o.reversed ? 2 : 0);
    }
    long sbytes = (long)lsz[lrank] * ext + 1, rbytes = (span + 1) * ext;
    unsigned char *send = malloc((size_t)sbytes), *got = malloc((size_t)rbytes), *want = malloc((size_t)rbytes);
    int bad = 0, used = 0, err = 0;
    for (int it = 0; it < o.iters; it++) {
        for (long k = 0; k < sbytes; k++) send[k] = value(mine, lrank, k, it);
        memset(got, 0xA5, (size_t)rbytes);
        memset(want, 0xA5, (size_t)rbytes);
        if (o.sleep) usleep((useconds_t)(((wrank * 7 + it) % 4) * 2000));
        if (!o.v) {
            int rc = strcmp(o.api, "merged") && strcmp(o.api, "collsched")
                ? MPI_Allgather(send, lsz[0], t, got, rsz[0], t, inter)
#ifdef LINKED
                : !strcmp(o.api, "merged")
                ? collsched_inter_allgather_merged(send, lsz[0], t, got, rsz[0], t, MPI_COMM_WORLD, o.na)
                : collsched_allgather(send, lsz[0], t, got, rsz[0], t, inter);
#else
                : MPI_ERR_OTHER;
#endif
            err |= rc != MPI_SUCCESS;
            PMPI_Allgather(send, lsz[0], t, want, rsz[0], t, inter);
        } else {
            int rc = strcmp(o.api, "merged") && strcmp(o.api, "collsched")
                ? MPI_Allgatherv(send, lsz[lrank], t, got, counts, displs, t, inter)
#ifdef LINKED
                : !strcmp(o.api, "merged")
                ? collsched_inter_allgatherv_merged(send, lsz[lrank], t, got, counts, displs, t, MPI_COMM_WORLD, o.na)
                : collsched_allgatherv(send, lsz[lrank], t, got, counts, displs, t, inter);
#else
                : MPI_ERR_OTHER;
#endif
            err |= rc != MPI_SUCCESS;
            PMPI_Allgatherv(send, lsz[lrank], t, want, counts, displs, t, inter);
        }
        bad += memcmp(got, want, (size_t)rbytes) != 0;
        for (int j = 0; !o.gappy && j < rsize; j++) /* and the bytes each remote rank sent */
            for (long k = 0; k < (o.v ? counts[j] : rsz[0]); k++)
                bad += got[(o.v ? displs[j] : (long)j * rsz[0]) + k] != value(!mine, j, k, it);
#ifdef LINKED
        collsched_call_info info;
        used += (collsched_last_call(strcmp(o.api, "merged") ? inter : MPI_COMM_WORLD, &info) == MPI_SUCCESS) && info.used_schedule;
#endif
    }
    int local3[2] = { bad, err }, all[2], least = 0;
    MPI_Allreduce(local3, all, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Reduce(&used, &least, 1, MPI_INT, MPI_MIN, 0, MPI_COMM_WORLD);
    if (wrank == 0) {
        if (all[0] || all[1]) printf("inter_app: case %d MISMATCH bad=%d errors=%d\n", ncase, all[0], all[1]);
        else printf("inter_app: case %d OK ranks %d used %d of %d calls\n", ncase, wsize, least, o.iters);
        fflush(stdout);
    }
    MPI_Comm_free(&inter);
    MPI_Comm_free(&local);
    if (o.gappy) MPI_Type_free(&t);
    free(send);
    free(got);
    free(want);
    return all[0] || all[1];
}

/* Cases are separated by a lone "+" on the command line. */
int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int wrank, wsize, failed = 0, ncase = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    for (int i = 1; i <= argc; i++) {
        int from = i;
        while (i < argc && strcmp(argv[i], "+") != 0) i++;
        opts o;
        parse(i - from + 1, argv + from - 1, &o);
        failed |= run_case(&o, ncase++, wrank, wsize);
    }
    MPI_Finalize();
    return failed;
}
