/* coll.h - collectives beyond allgather (alltoall, bcast, reduce, allreduce; schedule
 * file format 1.2, docs/schedule-format.md "Version 1.2"; rules: docs/semantics.md
 * "Collectives beyond allgather"). Shared by coll_file.c (reader, no MPI), coll_check.c
 * (the whole-program proof, no MPI) and the executor and call layer (coll_exec.c,
 * coll_call.c). Not installed. */
#ifndef COLLSCHED_COLL_H
#define COLLSCHED_COLL_H

#include "collsched_schedfile.h"

#include <stddef.h>
#include <stdint.h>

enum { CS_COLL_ALLTOALL = 5, CS_COLL_BCAST = 6, CS_COLL_REDUCE = 7, CS_COLL_ALLREDUCE = 8 };
enum { CS_COLL_SEND = 0, CS_COLL_RECV = 1, CS_COLL_RECV_REDUCE = 2 };
/* Operation flags (one byte per op). CHAIN (sends): issued once the previous send of the
 * list, to any peer, has completed. */
enum { CS_COLL_OP_FIFO = 1, CS_COLL_OP_FENCE = 2, CS_COLL_OP_LOCAL_FIRST = 4, CS_COLL_OP_CHAIN = 8 };
/* Header flags (collsched_header.flags): bit 0 full duplex (as 1.0); bit 3: the
 * reductions do not follow MPI's canonical order (commutative operations only). */
#define CS_COLL_FLAG_FULL_DUPLEX 1u
#define CS_COLL_FLAG_COMMUTATIVE_ONLY 8u

typedef struct cs_coll_piece {
    uint32_t src, dst, seg;   /* alltoall: block src->dst, segment seg; others: 0, 0, seg */
} cs_coll_piece;

typedef struct cs_coll_op {
    uint32_t peer;
    uint8_t kind, flags;
    uint32_t npieces;
    uint64_t first;           /* index of its first piece in cs_coll_section.pieces */
} cs_coll_op;

typedef struct cs_coll_header {
    collsched_header h;       /* collective 5..8, version 1.2 */
    uint32_t root;            /* bcast, reduce: the root; else 0 */
} cs_coll_header;

/* One rank's section, as loaded and checked. */
typedef struct cs_coll_section {
    cs_coll_header hdr;
    uint32_t rank, nops;
    cs_coll_op *ops;
    uint64_t npieces;
    cs_coll_piece *pieces;
    uint64_t hash;            /* of header + index: equal on every rank that read the same file */
} cs_coll_section;

/* Is this a 1.2 collective (5..8)? */
static inline int cs_coll_is(uint32_t collective)
{
    return collective >= CS_COLL_ALLTOALL && collective <= CS_COLL_ALLREDUCE;
}

/* coll_file.c. Every function returns COLLSCHED_OK or a COLLSCHED_E* code with one line
 * "NAME: FIELD: expected ..., found ..." in err; nothing is left allocated on failure. */
int cs_coll_read_header(const char *path, cs_coll_header *h, char *err, size_t errlen);
int cs_coll_load(const char *path, uint32_t nranks, uint32_t rank, cs_coll_section **out,
                 char *err, size_t errlen);
/* The same from a file image in memory (the fuzz target, tests). */
int cs_coll_load_memory(const void *data, size_t size, const char *name, uint32_t nranks,
                        uint32_t rank, cs_coll_section **out, char *err, size_t errlen);
/* Every rank's section in one pass (the header and index read once): *out holds nranks
 * sections (nranks 0: as many as the file has); free with cs_coll_free_all. */
int cs_coll_load_all(const char *path, uint32_t nranks, cs_coll_section ***out, char *err,
                     size_t errlen);
void cs_coll_free_all(cs_coll_section **secs, uint32_t nranks);
/* The whole file: header, index, every rank's section read and checked as above, then
 * cs_coll_check_whole ("NAME: whole schedule: <the first violation>"). */
int cs_coll_check_file(const char *path, char *err, size_t errlen);
int cs_coll_check_memory(const void *data, size_t size, const char *name, char *err,
                         size_t errlen);
void cs_coll_free(cs_coll_section *s);

/* coll_check.c: proves the whole program (every rank's section, in rank order) under the
 * rules of docs/semantics.md, as compiler/collsched/collectives/verify.py does: shape,
 * matching, holding, delivery (contribution sets), reduction order against the
 * commutative-only flag, progress. CS_COLL_PROVEN; CS_COLL_VIOLATION with the first
 * violation in reason ("rank R, op I: what [pass]", verify.py's words); CS_COLL_NOMEM when
 * the check cannot be made (memory: above CS_COLL_CHECK_MAX_BYTES of working memory it
 * refuses with the reason, as it does when an allocation fails). */
enum { CS_COLL_PROVEN = 0, CS_COLL_VIOLATION = 1, CS_COLL_NOMEM = 2 };
#define CS_COLL_CHECK_MAX_BYTES (256ull << 20)
int cs_coll_check_whole(const cs_coll_section *const *sections, uint32_t nranks,
                        char *reason, size_t len);

#endif /* COLLSCHED_COLL_H */
