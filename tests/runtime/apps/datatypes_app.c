/* An ordinary MPI program: MPI_Allgather and MPI_Allgatherv with a catalogue of derived
 * datatypes - as send type, as receive type, both, mixed with another type of the same
 * signature, in place, and one receive type that differs from rank to rank - each call
 * compared byte for byte with PMPI_Allgather(v) run on identical buffers (the whole
 * receive buffer, holes and guard zones included, prefilled with a pattern). Under
 * LD_PRELOAD=libcollsched-preload.so the MPI_ calls run collsched schedules; the PMPI_ calls
 * are always the MPI library's own. Every catalogue type has a signature of n ints.
 * Prints one line per mismatch and "datatypes_app: OK" / "FAILED" on rank 0; exit 0 = all
 * equal. Built with -DDATATYPES_APP_LINKED against libcollsched.a (whose internal symbols
 * the shared libraries do not export), rank 0 also prints how the runtime classifies each
 * type ("layout NAME run OFFSET" or "layout NAME staged"). */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DATATYPES_APP_LINKED
int cs_type_run(MPI_Datatype t, MPI_Aint *off); /* runtime/src/datatype.c */
#endif

#define GUARD 64
#define MAXT 24

typedef struct ctype {
    const char *name;
    MPI_Datatype t;
    int n; /* ints in its signature */
} ctype;

static ctype cat[MAXT];
static int ncat, rank, P, failures, calls;

static void add(const char *name, MPI_Datatype t)
{
    int size;
    MPI_Type_commit(&t);
    MPI_Type_size(t, &size);
    cat[ncat++] = (ctype){ name, t, size / (int)sizeof(int) };
}

static void build_catalogue(void)
{
    MPI_Datatype t, u, v;
    /* two ints swapped (size = extent = true extent) */
    MPI_Type_indexed(2, (int[]){ 1, 1 }, (int[]){ 1, 0 }, MPI_INT, &t);
    add("indexed_reordered", t);
    MPI_Type_indexed(2, (int[]){ 1, 2 }, (int[]){ 0, 1 }, MPI_INT, &t);
    add("indexed_in_order", t);
    MPI_Type_indexed(2, (int[]){ 1, 1 }, (int[]){ 0, 2 }, MPI_INT, &t);
    add("indexed_hole", t);
    MPI_Type_vector(2, 1, 2, MPI_INT, &t);
    add("vector_stride", t);
    MPI_Type_create_struct(2, (int[]){ 1, 1 }, (MPI_Aint[]){ 0, 8 }, (MPI_Datatype[]){ MPI_INT, MPI_INT }, &t);
    add("struct_holes", t);
    MPI_Type_create_struct(2, (int[]){ 1, 1 }, (MPI_Aint[]){ 4, 0 }, (MPI_Datatype[]){ MPI_INT, MPI_INT }, &t);
    add("struct_reordered", t);
    MPI_Type_create_resized(MPI_INT, 0, 8, &t);
    add("resized_grow", t);
    MPI_Type_create_resized(MPI_INT, -4, 8, &t);
    add("resized_lb_hole", t);
    MPI_Type_create_hindexed(1, (int[]){ 1 }, (MPI_Aint[]){ 8 }, MPI_INT, &u);
    MPI_Type_create_resized(u, 8, 4, &t); /* contiguous, data 8 bytes after the address */
    MPI_Type_free(&u);
    add("resized_lb_shift", t);
    MPI_Type_create_subarray(2, (int[]){ 4, 4 }, (int[]){ 2, 2 }, (int[]){ 1, 1 }, MPI_ORDER_C, MPI_INT, &t);
    add("subarray_2x2", t);
    MPI_Type_create_subarray(2, (int[]){ 4, 3 }, (int[]){ 2, 3 }, (int[]){ 2, 0 }, MPI_ORDER_C, MPI_INT, &u);
    MPI_Type_create_resized(u, 24, 24, &t); /* whole rows: one run, extent = its size */
    MPI_Type_free(&u);
    add("subarray_rows_resized", t);
    MPI_Type_dup(MPI_INT, &t);
    add("dup_int", t);
    MPI_Type_contiguous(3, MPI_INT, &u);
    MPI_Type_contiguous(2, u, &t);
    MPI_Type_free(&u);
    add("contiguous_of_contiguous", t);
    MPI_Type_dup(MPI_2INT, &t);
    add("pair_2int", t);
    MPI_Type_create_hvector(3, 1, 8, MPI_INT, &t);
    add("hvector", t);
    /* a tight hvector of a stretched int, resized back: one run, in order */
    MPI_Type_create_resized(MPI_INT, 0, 8, &u);
    MPI_Type_create_hvector(2, 1, 4, u, &v);
    MPI_Type_create_resized(v, 0, 8, &t);
    MPI_Type_free(&u);
    MPI_Type_free(&v);
    add("hvector_tight", t);
    MPI_Type_create_indexed_block(3, 1, (int[]){ 2, 0, 1 }, MPI_INT, &t);
    add("indexed_block_reordered", t);
    MPI_Type_create_darray(P, rank, 1, (int[]){ 2 * P }, (int[]){ MPI_DISTRIBUTE_CYCLIC },
                           (int[]){ 1 }, (int[]){ P }, MPI_ORDER_C, MPI_INT, &t);
    add("darray_cyclic", t); /* differs from rank to rank */
    /* reordered on even ranks, plain on odd ones: ranks describe the same signature with
     * layouts that are contiguous on some ranks only */
    if (rank % 2 == 0) MPI_Type_indexed(2, (int[]){ 1, 1 }, (int[]){ 1, 0 }, MPI_INT, &t);
    else MPI_Type_contiguous(2, MPI_INT, &t);
    add("reordered_on_even_ranks", t);
}

/* Bytes a buffer of `count` elements of t needs below (lo <= 0) and above its address. */
static void span(MPI_Datatype t, int64_t count, int64_t *lo, int64_t *hi)
{
    MPI_Aint lb, ext, tlb, text;
    MPI_Type_get_extent(t, &lb, &ext);
    MPI_Type_get_true_extent(t, &tlb, &text);
    *lo = tlb < 0 ? tlb : 0;
    *hi = count > 0 ? (count - 1) * (int64_t)ext + tlb + text : 0;
    if (*hi < 0) *hi = 0;
}

typedef struct buf {
    unsigned char *mem;
    char *at; /* the address handed to MPI */
    size_t len;
} buf;

static void buf_make(buf *b, MPI_Datatype t, int64_t count)
{
    int64_t lo, hi;
    span(t, count, &lo, &hi);
    b->len = (size_t)(hi - lo) + 2 * GUARD;
    b->mem = malloc(b->len);
    b->at = (char *)b->mem + GUARD - lo;
}

/* The send buffer: every int slot a distinct value of this rank. */
static void fill_send(buf *b, int iter)
{
    for (size_t i = 0; i + sizeof(int) <= b->len; i += sizeof(int)) {
        int v = rank * 1000003 + (int)(i / sizeof(int)) * 7 + iter * 13 + 1;
        memcpy(b->mem + i, &v, sizeof v);
    }
}

/* The receive buffer's pattern (for in place, every byte depends on the rank too). */
static void fill_recv(buf *b, int per_rank)
{
    for (size_t i = 0; i < b->len; i++)
        b->mem[i] = (unsigned char)(0xA5 ^ (i * 31) ^ (per_rank ? rank * 77 + 1 : 0));
}

static void compare(const char *coll, const char *mode, const ctype *s, const ctype *r, int units,
                    int rc_ref, int rc, const buf *ref, const buf *got)
{
    calls++;
    if (rc != MPI_SUCCESS || rc_ref != MPI_SUCCESS) {
        failures++;
        printf("datatypes_app: rank %d: %s %s send=%s recv=%s units=%d: error %d (reference %d)\n",
               rank, coll, mode, s->name, r->name, units, rc, rc_ref);
        return;
    }
    for (size_t i = 0; i < ref->len; i++)
        if (ref->mem[i] != got->mem[i]) {
            failures++;
            printf("datatypes_app: rank %d: %s %s send=%s recv=%s units=%d: byte %ld of the receive "
                   "buffer differs (expected %u, found %u)\n", rank, coll, mode, s->name, r->name,
                   units, (long)i - GUARD, ref->mem[i], got->mem[i]);
            return;
        }
}

static int gcd(int a, int b) { return b ? gcd(b, a % b) : a; }

/* Every origin o contributes k_o "units" of L = lcm(n_s, n_r) ints: k_o * L / n_s elements
 * of the send type, k_o * L / n_r of the receive type. Allgather (vee 0): k_o = units;
 * allgatherv: k_o = units + o % 2, with one receive element of gap after each block, the
 * blocks in rank order (vee 1) or in reverse order, with displacements counted from the
 * middle of the buffer, so that some are negative (vee 2). */
static void one_case(const ctype *s, const ctype *r, int units, int in_place, int vee, int iter)
{
    int L = s->n / gcd(s->n, r->n) * r->n, su = L / s->n, ru = L / r->n;
    int k_me = units + (vee ? rank % 2 : 0), sendcount = k_me * su;
    int *counts = malloc(sizeof(int) * P), *displs = malloc(sizeof(int) * P), total = 0;
    for (int i = 0; i < P; i++) {
        int o = vee == 2 ? P - 1 - i : i;
        counts[o] = (units + (vee ? o % 2 : 0)) * ru;
        displs[o] = total;
        total += counts[o] + (vee ? 1 : 0);
    }
    MPI_Aint lb, ext;
    MPI_Type_get_extent(r->t, &lb, &ext);
    int shift = vee == 2 ? total / 2 : 0;
    for (int o = 0; o < P; o++) displs[o] -= shift;
    int64_t relems = vee ? total : (int64_t)P * units * ru;
    buf sb, ref, got;
    buf_make(&sb, s->t, sendcount);
    buf_make(&ref, r->t, relems);
    buf_make(&got, r->t, relems);
    fill_send(&sb, iter);
    fill_recv(&ref, in_place);
    fill_recv(&got, in_place);
    const void *send = in_place ? MPI_IN_PLACE : sb.at;
    int rc_ref, rc;
    const char *mode = in_place ? (vee == 2 ? "in-place reversed" : "in-place") : (vee == 2 ? "reversed" : "");
    if (vee) {
        rc_ref = PMPI_Allgatherv(send, sendcount, s->t, ref.at + shift * ext, counts, displs, r->t, MPI_COMM_WORLD);
        rc = MPI_Allgatherv(send, sendcount, s->t, got.at + shift * ext, counts, displs, r->t, MPI_COMM_WORLD);
        compare("MPI_Allgatherv", mode, s, r, units, rc_ref, rc, &ref, &got);
    } else {
        rc_ref = PMPI_Allgather(send, sendcount, s->t, ref.at, units * ru, r->t, MPI_COMM_WORLD);
        rc = MPI_Allgather(send, sendcount, s->t, got.at, units * ru, r->t, MPI_COMM_WORLD);
        compare("MPI_Allgather", mode, s, r, units, rc_ref, rc, &ref, &got);
    }
    free(sb.mem); free(ref.mem); free(got.mem); free(counts); free(displs);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    build_catalogue();
    ctype plain = { "int", MPI_INT, 1 };
    int units[] = { 0, 1, 3, 700 }; /* 700: pieces cut inside elements (2 segments) */
    for (int vee = 0; vee < 3; vee++)
        for (int u = 0; u < 4; u++)
            for (int i = 0; i < ncat; i++) {
                const ctype *t = &cat[i], *other = &cat[(i + 1) % ncat];
                one_case(t, &plain, units[u], 0, vee, u);   /* as send type */
                one_case(&plain, t, units[u], 0, vee, u);   /* as receive type */
                one_case(t, t, units[u], 0, vee, u);        /* both */
                one_case(t, other, units[u], 0, vee, u);    /* mixed */
                one_case(&plain, t, units[u], 1, vee, u);   /* in place */
            }
    /* the runtime's verdict on each type (datatype.c), when it is linked in */
#ifdef DATATYPES_APP_LINKED
    int (*type_run)(MPI_Datatype, MPI_Aint *) = cs_type_run;
#else
    int (*type_run)(MPI_Datatype, MPI_Aint *) = NULL;
#endif
    for (int i = 0; type_run && rank == 0 && i < ncat; i++) {
        MPI_Aint off = 0;
        if (type_run(cat[i].t, &off)) printf("datatypes_app: layout %s run %ld\n", cat[i].name, (long)off);
        else printf("datatypes_app: layout %s staged\n", cat[i].name);
    }
    int all = 0, ncalls = calls;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    for (int i = 0; i < ncat; i++) MPI_Type_free(&cat[i].t);
    if (rank == 0) printf("datatypes_app: %d types, %d calls per rank: %s\n", ncat, ncalls, all ? "FAILED" : "OK");
    MPI_Finalize();
    return all ? 1 : 0;
}
