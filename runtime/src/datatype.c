/* datatype.c - is a datatype's type map one run of bytes, in order?
 *
 * The executor moves raw byte ranges (pieces) of a block. That is right only if the
 * elements of the user's datatype, flattened in type-map order, are consecutive bytes in
 * increasing address order; size = extent = true extent is not enough (an indexed type
 * with displacements {1, 0} swaps two ints and passes that test). The decision
 * walks the type's constructor tree (MPI_Type_get_envelope / MPI_Type_get_contents):
 * predefined types are runs when they have no holes; a derived type is a run when the
 * runs of its parts, in the order the constructor lists them, follow each other with no
 * gap and no overlap. Anything this file does not know (darray, deep nesting, MPI errors)
 * is "not a run": the caller then copies through MPI, which is always right.
 */
#include "runtime.h"

#include <stdlib.h>

#define MAX_DEPTH 32

/* One element's bytes, [lo, lo + len) from its address, in type-map order (len 0: none). */
typedef struct run {
    MPI_Aint lo, len;
} run;

/* The runs of a constructor's parts, appended in type-map order. */
typedef struct cursor {
    int started, ok;
    MPI_Aint start, end;
} cursor;

static MPI_Aint mul(cursor *c, MPI_Aint a, MPI_Aint b)
{
    MPI_Aint r = 0;
    if (__builtin_mul_overflow(a, b, &r)) c->ok = 0;
    return r;
}

static MPI_Aint add(cursor *c, MPI_Aint a, MPI_Aint b)
{
    MPI_Aint r = 0;
    if (__builtin_add_overflow(a, b, &r)) c->ok = 0;
    return r;
}

static void append(cursor *c, MPI_Aint at, MPI_Aint len)
{
    if (!c->ok || len == 0) return;
    if (!c->started) {
        c->started = 1;
        c->start = c->end = at;
    } else if (at != c->end) {
        c->ok = 0;
        return;
    }
    c->end = add(c, c->end, len);
}

/* `count` blocks of `bl` elements (run r, extent ext) each, block i at i * stride bytes. */
static void append_blocks(cursor *c, MPI_Aint count, MPI_Aint bl, MPI_Aint stride, const run *r,
                          MPI_Aint ext)
{
    if (count <= 0 || bl <= 0 || r->len == 0) return;
    if (bl > 1 && ext != r->len) { c->ok = 0; return; } /* holes or overlap inside a block */
    MPI_Aint span = mul(c, bl, r->len);
    if (count > 1 && stride != span) { c->ok = 0; return; } /* between blocks */
    append(c, r->lo, mul(c, count, span));
}

/* `bl` elements (run r, extent ext) from byte `at`. */
static void append_at(cursor *c, MPI_Aint at, MPI_Aint bl, const run *r, MPI_Aint ext)
{
    if (bl <= 0 || r->len == 0) return;
    if (bl > 1 && ext != r->len) { c->ok = 0; return; }
    append(c, add(c, at, r->lo), mul(c, bl, r->len));
}

/* Predefined types (the F90 ones too) are neither taken apart nor freed. */
static int named(int comb)
{
    return comb == MPI_COMBINER_NAMED || comb == MPI_COMBINER_F90_REAL
           || comb == MPI_COMBINER_F90_COMPLEX || comb == MPI_COMBINER_F90_INTEGER;
}

static int predefined(MPI_Datatype t)
{
    int ni, na, nd, comb;
    return PMPI_Type_get_envelope(t, &ni, &na, &nd, &comb) != MPI_SUCCESS || named(comb);
}

static int run_of(MPI_Datatype t, int depth, run *out);

/* The run and extent of a constructor's element type. */
static int element(MPI_Datatype t, int depth, run *r, MPI_Aint *ext)
{
    MPI_Aint lb;
    return run_of(t, depth + 1, r) && PMPI_Type_get_extent(t, &lb, ext) == MPI_SUCCESS;
}

/* An n-dimensional subarray lists its elements in array order, which is address order:
 * it is a run when its first and last elements are N - 1 elements apart. */
static void subarray(cursor *c, const int *ints, const run *r, MPI_Aint ext)
{
    int nd = ints[0];
    const int *sizes = ints + 1, *sub = ints + 1 + nd, *starts = ints + 1 + 2 * nd;
    int fortran = ints[1 + 3 * nd] == MPI_ORDER_FORTRAN;
    MPI_Aint n = 1, first = 0, last = 0, stride = 1;
    for (int i = 0; i < nd; i++) {
        int k = fortran ? i : nd - 1 - i; /* fastest-varying dimension first */
        if (sub[k] == 0) return;          /* no elements */
        n = mul(c, n, sub[k]);
        first = add(c, first, mul(c, starts[k], stride));
        last = add(c, last, mul(c, starts[k] + sub[k] - 1, stride));
        stride = mul(c, stride, sizes[k]);
    }
    if (n > 1 && last - first != n - 1) { c->ok = 0; return; }
    append_at(c, mul(c, first, ext), n, r, ext);
}

static int combine(int comb, const int *ints, const MPI_Aint *addrs, const MPI_Datatype *types,
                   int depth, run *out)
{
    run r;
    MPI_Aint ext;
    cursor c = { 0, 1, 0, 0 };
    switch (comb) {
    case MPI_COMBINER_DUP:
    case MPI_COMBINER_RESIZED: /* same type map; the new extent matters to the parent only */
        return run_of(types[0], depth + 1, out);
    case MPI_COMBINER_CONTIGUOUS:
        if (!element(types[0], depth, &r, &ext)) return 0;
        append_at(&c, 0, ints[0], &r, ext);
        break;
    case MPI_COMBINER_VECTOR:
        if (!element(types[0], depth, &r, &ext)) return 0;
        append_blocks(&c, ints[0], ints[1], mul(&c, ints[2], ext), &r, ext);
        break;
    case MPI_COMBINER_HVECTOR:
        if (!element(types[0], depth, &r, &ext)) return 0;
        append_blocks(&c, ints[0], ints[1], addrs[0], &r, ext);
        break;
    case MPI_COMBINER_INDEXED:
        if (!element(types[0], depth, &r, &ext)) return 0;
        for (int i = 0; c.ok && i < ints[0]; i++)
            append_at(&c, mul(&c, ints[1 + ints[0] + i], ext), ints[1 + i], &r, ext);
        break;
    case MPI_COMBINER_HINDEXED:
        if (!element(types[0], depth, &r, &ext)) return 0;
        for (int i = 0; c.ok && i < ints[0]; i++) append_at(&c, addrs[i], ints[1 + i], &r, ext);
        break;
    case MPI_COMBINER_INDEXED_BLOCK:
        if (!element(types[0], depth, &r, &ext)) return 0;
        for (int i = 0; c.ok && i < ints[0]; i++)
            append_at(&c, mul(&c, ints[2 + i], ext), ints[1], &r, ext);
        break;
    case MPI_COMBINER_HINDEXED_BLOCK:
        if (!element(types[0], depth, &r, &ext)) return 0;
        for (int i = 0; c.ok && i < ints[0]; i++) append_at(&c, addrs[i], ints[1], &r, ext);
        break;
    case MPI_COMBINER_STRUCT:
        for (int i = 0; c.ok && i < ints[0]; i++) {
            if (!element(types[i], depth, &r, &ext)) return 0;
            append_at(&c, addrs[i], ints[1 + i], &r, ext);
        }
        break;
    case MPI_COMBINER_SUBARRAY:
        if (!element(types[0], depth, &r, &ext)) return 0;
        subarray(&c, ints, &r, ext);
        break;
    default: /* darray and anything newer: not known to be a run */
        return 0;
    }
    if (!c.ok) return 0;
    out->lo = c.started ? c.start : 0;
    out->len = c.started ? c.end - c.start : 0;
    return 1;
}

static int run_of(MPI_Datatype t, int depth, run *out)
{
    int ni, na, nd, comb;
    if (depth > MAX_DEPTH || PMPI_Type_get_envelope(t, &ni, &na, &nd, &comb) != MPI_SUCCESS)
        return 0;
    if (named(comb)) { /* basic elements in increasing order: a run unless it has holes */
        int size;
        MPI_Aint tlb, text;
        if (PMPI_Type_size(t, &size) != MPI_SUCCESS
            || PMPI_Type_get_true_extent(t, &tlb, &text) != MPI_SUCCESS || text != size)
            return 0;
        *out = (run){ size ? tlb : 0, size };
        return 1;
    }
    int *ints = malloc(sizeof *ints * (size_t)(ni ? ni : 1));
    MPI_Aint *addrs = malloc(sizeof *addrs * (size_t)(na ? na : 1));
    MPI_Datatype *types = malloc(sizeof *types * (size_t)(nd ? nd : 1));
    int ok = ints && addrs && types
             && PMPI_Type_get_contents(t, ni, na, nd, ints, addrs, types) == MPI_SUCCESS;
    if (ok) {
        ok = combine(comb, ints, addrs, types, depth, out);
        for (int i = 0; i < nd; i++) /* get_contents returns new handles to derived types */
            if (!predefined(types[i])) PMPI_Type_free(&types[i]);
    }
    free(ints);
    free(addrs);
    free(types);
    return ok;
}

int cs_type_run(MPI_Datatype t, MPI_Aint *off)
{
    /* The usual predefined types are runs at offset 0, answered without the walk: for the
     * send and the receive type it was 600 of the about 3,500 instructions of bookkeeping a
     * call made before its first message (callgrind; docs/benchmarks.md, runtime-overhead). */
    if (t == MPI_BYTE || t == MPI_CHAR || t == MPI_UNSIGNED_CHAR || t == MPI_INT
        || t == MPI_FLOAT || t == MPI_DOUBLE) {
        *off = 0;
        return 1;
    }
    run r;
    MPI_Aint lb, ext;
    MPI_Count size;
    if (!run_of(t, 0, &r) || PMPI_Type_get_extent(t, &lb, &ext) != MPI_SUCCESS
        || PMPI_Type_size_x(t, &size) != MPI_SUCCESS || (MPI_Count)r.len != size)
        return 0;
    if (r.len && ext != r.len) return 0; /* holes (or overlap) between consecutive elements */
    *off = r.lo;
    return 1;
}

/* A datatype over n pieces: piece k is len[k] bytes at addr[k] (absolute addresses; the
 * type is used with MPI_BOTTOM as the buffer, count 1). The wire carries the pieces'
 * bytes in list order (a message of several pieces, docs/semantics.md); the addresses may
 * lie in different buffers and in any order. Empty pieces add nothing; n == 0 gives an
 * empty type. On success *t is committed and the caller frees it (PMPI_Type_free), which
 * MPI allows as soon as the calls that use it have been started. */
int cs_pieces_type(const char *const *addr, const int *len, int n, MPI_Datatype *t)
{
    if (n <= 0) {
        int rc = PMPI_Type_contiguous(0, MPI_BYTE, t);
        if (rc == MPI_SUCCESS && (rc = PMPI_Type_commit(t)) != MPI_SUCCESS) PMPI_Type_free(t);
        return rc;
    }
    MPI_Aint stack[32], *disp = n <= 32 ? stack : malloc(sizeof *disp * (size_t)n);
    if (!disp) return MPI_ERR_NO_MEM;
    int rc = MPI_SUCCESS;
    for (int k = 0; k < n && rc == MPI_SUCCESS; k++) rc = PMPI_Get_address(addr[k], &disp[k]);
    if (rc == MPI_SUCCESS) rc = PMPI_Type_create_hindexed(n, len, disp, MPI_BYTE, t);
    if (rc == MPI_SUCCESS && (rc = PMPI_Type_commit(t)) != MPI_SUCCESS) PMPI_Type_free(t);
    if (disp != stack) free(disp);
    return rc;
}
