/* coll_app.c - an unmodified MPI program for the preload library (tests/runtime/
 * test_coll_mpi.py): MPI_Alltoall, MPI_Bcast, MPI_Reduce and MPI_Allreduce over datatypes
 * {int, float, double, a derived vector type}, operations {MPI_SUM, MPI_MAX, a user-defined
 * commutative op, a user-defined non-commutative op}, in place or not, each call checked
 * byte for byte against the MPI library's own collective (PMPI_*, which the preload does
 * not intercept) on buffers prefilled alike (the vector type's holes must stay untouched).
 *
 *   coll_app WHAT COUNTS ITERS MAXSLEEP_US [ROOT]   (COUNTS: n[,n...], elements)
 *     WHAT: alltoall | bcast | reduce | allreduce | matrix (reduce and allreduce over the
 *     whole matrix, then alltoall and bcast over the types)
 * One JSON line per call on rank 0: {"coll", "type", "op", "inplace", "root", "ok",
 * "used", "reason", "error"} (error: the call returned an error code, as the MPI library's
 * own did: Open MPI refuses predefined operations on derived datatypes) (used/reason: collsched_last_call when the preload library provides
 * it, else null). Random sleeps of up to MAXSLEEP_US before each call make arrivals
 * imbalanced. Exit 0 if every call was correct, 1 otherwise.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct info {
    int used;
    char schedule[256], reason[256];
} info;

static int rank, size, maxsleep, failures;
static MPI_Datatype vec;           /* 2 ints with a hole between: extent 12, size 8 */
static MPI_Op user_sum, user_left;

enum { T_INT, T_FLOAT, T_DOUBLE, T_VEC, NTYPES };
static const char *tname[NTYPES] = { "int", "float", "double", "vector" };
enum { O_SUM, O_MAX, O_USER, O_NONCOMM, NOPS };
static const char *oname[NOPS] = { "sum", "max", "user", "noncommutative" };

static MPI_Datatype type_of(int t)
{
    return t == T_INT ? MPI_INT : t == T_FLOAT ? MPI_FLOAT : t == T_DOUBLE ? MPI_DOUBLE : vec;
}

static MPI_Aint extent_of(int t) { return t == T_INT || t == T_FLOAT ? 4 : t == T_DOUBLE ? 8 : 12; }

/* The ints of the vector type's elements: at 0 and 8 of each 12 bytes. */
static int *vec_int(void *buf, long i, int k) { return (int *)((char *)buf + 12 * i + 8 * k); }

/* User ops: a sum (commutative) and, non-commutative but associative, for ints and the
 * vector type the "rectangular band" a op b = (a's high 16 bits, b's low 16 bits), for
 * floating point the left projection a op b = a. MPI_Reduce_local(in, inout) computes
 * inout = in op inout. */
static void fn_sum(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    for (int i = 0; i < *len; i++) {
        if (*dt == MPI_INT) ((int *)inout)[i] += ((int *)in)[i];
        else if (*dt == MPI_FLOAT) ((float *)inout)[i] += ((float *)in)[i];
        else if (*dt == MPI_DOUBLE) ((double *)inout)[i] += ((double *)in)[i];
        else for (int k = 0; k < 2; k++) *vec_int(inout, i, k) += *vec_int(in, i, k);
    }
}

static int band(int a, int b) { return (int)(((unsigned)a & 0xFFFF0000u) | ((unsigned)b & 0xFFFFu)); }

static void fn_left(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    for (int i = 0; i < *len; i++) {
        if (*dt == MPI_INT) ((int *)inout)[i] = band(((int *)in)[i], ((int *)inout)[i]);
        else if (*dt == MPI_FLOAT) ((float *)inout)[i] = ((float *)in)[i];
        else if (*dt == MPI_DOUBLE) ((double *)inout)[i] = ((double *)in)[i];
        else for (int k = 0; k < 2; k++) *vec_int(inout, i, k) = band(*vec_int(in, i, k), *vec_int(inout, i, k));
    }
}

static MPI_Op op_of(int o)
{
    return o == O_SUM ? MPI_SUM : o == O_MAX ? MPI_MAX : o == O_USER ? user_sum : user_left;
}

/* Element i of rank r's contribution (exactly representable; distinct per rank). */
static void fill(void *buf, int t, long n, int r, int salt)
{
    for (long i = 0; i < n; i++) {
        int v = (int)((r + 1) * 65536 + (i * 7 + salt * 13 + r * 3) % 1000);
        if (t == T_INT) ((int *)buf)[i] = v;
        else if (t == T_FLOAT) ((float *)buf)[i] = (float)((r + 1) * 100 + (i * 7 + salt) % 50);
        else if (t == T_DOUBLE) ((double *)buf)[i] = (double)v;
        else { *vec_int(buf, i, 0) = v; *vec_int(buf, i, 1) = -v; }
    }
}

static void nap(void)
{
    if (maxsleep <= 0) return;
    struct timespec ts = { 0, (long)(rand() % maxsleep) * 1000L };
    nanosleep(&ts, NULL);
}

static void report(const char *coll, int t, int o, int inplace, int root, int ok, int error)
{
    int all = 0;
    PMPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all) failures++;
    if (rank != 0) return;
    int (*last)(MPI_Comm, info *) = (int (*)(MPI_Comm, info *))dlsym(RTLD_DEFAULT, "collsched_last_call");
    info in;
    memset(&in, 0, sizeof in);
    char used[16] = "null", reason[300] = "null", sched[300] = "null";
    if (last && last(MPI_COMM_WORLD, &in) == MPI_SUCCESS) {
        snprintf(used, sizeof used, "%s", in.used ? "true" : "false");
        snprintf(reason, sizeof reason, "\"%s\"", in.reason);
        for (char *p = reason + 1; p[1]; p++) if (*p == '"' || *p == '\\') *p = '\'';
        snprintf(sched, sizeof sched, "\"%s\"", in.schedule);
    }
    printf("{\"coll\": \"%s\", \"type\": \"%s\", \"op\": \"%s\", \"inplace\": %d, \"root\": %d, \"ok\": %s, "
           "\"used\": %s, \"reason\": %s, \"schedule\": %s, \"error\": %d}\n", coll, t >= 0 ? tname[t] : "", o >= 0 ? oname[o] : "",
           inplace, root, all ? "true" : "false", used, reason, sched, error);
    fflush(stdout);
}

static void *alloc_fill(size_t bytes, int byte)
{
    void *p = malloc(bytes ? bytes : 1);
    memset(p, byte, bytes ? bytes : 1);
    return p;
}

static void reduction(int allred, int t, int o, int inplace, long n, int root, int it)
{
    MPI_Aint ext = extent_of(t);
    size_t bytes = (size_t)(n * ext);
    char *send = alloc_fill(bytes, 0x5A), *recv = alloc_fill(bytes, 0xA5), *ref = alloc_fill(bytes, 0xA5);
    char *rsend = alloc_fill(bytes, 0x5A);
    fill(send, t, n, rank, it);
    fill(rsend, t, n, rank, it);
    int mine_in_place = inplace && (allred || rank == root);
    if (mine_in_place) { fill(recv, t, n, rank, it); fill(ref, t, n, rank, it); }
    nap();
    int rc, rc_ref;
    if (allred) rc = MPI_Allreduce(mine_in_place ? MPI_IN_PLACE : send, recv, (int)n, type_of(t), op_of(o), MPI_COMM_WORLD);
    else rc = MPI_Reduce(mine_in_place ? MPI_IN_PLACE : send, recv, (int)n, type_of(t), op_of(o), root, MPI_COMM_WORLD);
    if (allred) rc_ref = PMPI_Allreduce(mine_in_place ? MPI_IN_PLACE : rsend, ref, (int)n, type_of(t), op_of(o), MPI_COMM_WORLD);
    else rc_ref = PMPI_Reduce(mine_in_place ? MPI_IN_PLACE : rsend, ref, (int)n, type_of(t), op_of(o), root, MPI_COMM_WORLD);
    /* Open MPI refuses predefined operations on derived datatypes: the same error either way */
    int ok = (rc == MPI_SUCCESS) == (rc_ref == MPI_SUCCESS) && memcmp(send, rsend, bytes) == 0;
    if (allred || rank == root) ok = ok && memcmp(recv, ref, bytes) == 0;
    else ok = ok && memcmp(recv, ref, bytes) == 0; /* untouched on non-roots: both still prefilled */
    report(allred ? "allreduce" : "reduce", t, o, inplace, allred ? -1 : root, ok, rc != MPI_SUCCESS);
    free(send); free(recv); free(ref); free(rsend);
}

/* Alltoall: blocks of n elements; the vector type on the send side, n * 2 ints on the
 * receive side for T_VEC (same signature, other layout). */
static void alltoall(int t, int inplace, long n, int it)
{
    MPI_Aint ext = extent_of(t);
    size_t sbytes = (size_t)(n * ext * size);
    MPI_Datatype rt = t == T_VEC && !inplace ? MPI_INT : type_of(t);
    long rn = t == T_VEC && !inplace ? 2 * n : n;
    size_t rbytes = (size_t)(rn * (rt == MPI_INT ? 4 : ext) * size);
    char *send = alloc_fill(sbytes, 0x5A), *recv = alloc_fill(rbytes, 0xA5), *ref = alloc_fill(rbytes, 0xA5);
    fill(send, t, n * size, rank, it);
    if (inplace) { fill(recv, t, n * size, rank, it); fill(ref, t, n * size, rank, it); }
    nap();
    int rc = MPI_Alltoall(inplace ? MPI_IN_PLACE : send, (int)n, type_of(t), recv, (int)rn, rt, MPI_COMM_WORLD);
    PMPI_Alltoall(inplace ? MPI_IN_PLACE : send, (int)n, type_of(t), ref, (int)rn, rt, MPI_COMM_WORLD);
    report("alltoall", t, -1, inplace, -1, rc == MPI_SUCCESS && memcmp(recv, ref, rbytes) == 0, rc != MPI_SUCCESS);
    free(send); free(recv); free(ref);
}

static void bcast(int t, long n, int root, int it)
{
    size_t bytes = (size_t)(n * extent_of(t));
    char *buf = alloc_fill(bytes, 0xA5), *ref = alloc_fill(bytes, 0xA5);
    if (rank == root) { fill(buf, t, n, rank, it); fill(ref, t, n, rank, it); }
    nap();
    int rc = MPI_Bcast(buf, (int)n, type_of(t), root, MPI_COMM_WORLD);
    PMPI_Bcast(ref, (int)n, type_of(t), root, MPI_COMM_WORLD);
    report("bcast", t, -1, 0, root, rc == MPI_SUCCESS && memcmp(buf, ref, bytes) == 0, rc != MPI_SUCCESS);
    free(buf); free(ref);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 5) {
        if (rank == 0) fprintf(stderr, "usage: coll_app WHAT COUNTS ITERS MAXSLEEP_US [ROOT]\n");
        MPI_Finalize();
        return 2;
    }
    const char *what = argv[1];
    int iters = atoi(argv[3]), root = argc > 5 ? atoi(argv[5]) : 0;
    maxsleep = atoi(argv[4]);
    srand(1234 + 77 * rank);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Type_vector(2, 1, 2, MPI_INT, &vec);
    MPI_Type_commit(&vec);
    MPI_Op_create(fn_sum, 1, &user_sum);
    MPI_Op_create(fn_left, 0, &user_left);
    int matrix = strcmp(what, "matrix") == 0;
    for (char *cs = argv[2], *next; *cs; cs = *next ? next + 1 : next) {
    long n = strtol(cs, &next, 10);
    for (int it = 0; it < iters; it++) {
        for (int t = 0; t < NTYPES; t++) {
            if (matrix || !strcmp(what, "reduce") || !strcmp(what, "allreduce"))
                for (int o = 0; o < NOPS; o++)
                    for (int ip = 0; ip < 2; ip++) {
                        if (matrix || !strcmp(what, "allreduce")) reduction(1, t, o, ip, n, root, it);
                        if (matrix || !strcmp(what, "reduce")) reduction(0, t, o, ip, n, root, it);
                    }
            if (matrix || !strcmp(what, "alltoall"))
                for (int ip = 0; ip < 2; ip++) alltoall(t, ip, n, it);
            if (matrix || !strcmp(what, "bcast")) bcast(t, n, root, it);
        }
    }
    }
    MPI_Op_free(&user_sum);
    MPI_Op_free(&user_left);
    MPI_Type_free(&vec);
    MPI_Finalize();
    return failures ? 1 : 0;
}
