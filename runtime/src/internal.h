/* internal.h - declarations shared by the runtime's modules (not installed). */
#ifndef COLLSCHED_INTERNAL_H
#define COLLSCHED_INTERNAL_H

#include "collsched_schedfile.h"

#include <stddef.h>
#include <stdint.h>

/* schedfile.c (no MPI) */
#include "crc32.h" /* cs_crc32 */
uint64_t cs_hash64(uint64_t h, const void *buf, size_t len); /* h = 0 starts a new hash */
int cs_read_header_file(const char *path, collsched_header *h, char *err, size_t errlen);
/* schedfile.c: the fields of the 128 bytes every schedule file starts with, unchecked
 * (b holds at least 128 bytes); both readers check them in their own order. */
void cs_header_decode(const uint8_t *b, collsched_header *h);
/* Wraps a list built in memory as a schedule (dataflow checks, dep/prev links), like a
 * loaded section; takes ownership of ops. */
int cs_schedule_adopt(uint32_t nranks, uint32_t nseg, uint32_t rank, collsched_op *ops,
                      uint32_t nops, const char *name, collsched_schedule **out, char *err,
                      size_t errlen);

/* compact_load.c (no MPI): compact descriptions (docs/compact.md) where a .sched file is
 * accepted. A record starts with CS_COMPACT_MAGIC; its header stand-in carries
 * CS_COMPACT_MARK as compiler_version (cs_is_compact), the record's CRC as index_crc32. */
#define CS_COMPACT_MAGIC "CSCOMPCT"
#define CS_COMPACT_MARK "compact v1"
int cs_is_compact_record(const void *buf, size_t len);
int cs_is_compact(const collsched_header *h);
/* The header an explicit file of the same schedule would have (total_ops 0). */
int cs_compact_header(const void *rec, size_t len, const char *name, collsched_header *h,
                      char *err, size_t errlen);
/* Decodes, checks against nranks (EMATCH), generates rank's list and adopts it; hash =
 * hash of the record. COLLSCHED_OK or a code with "NAME: FIELD: expected ..." in err. */
int cs_compact_load(const void *rec, size_t len, const char *name, uint32_t nranks,
                    uint32_t rank, collsched_schedule **out, char *err, size_t errlen);
/* Either form by path: a compact record (by its magic) or an explicit file (collsched_load,
 * cs_read_header_file). The runtime's selection and first use go through these. */
int cs_load_file(const char *path, uint32_t nranks, uint32_t rank, collsched_schedule **out,
                 char *err, size_t errlen);
int cs_read_any_header(const char *path, collsched_header *h, char *err, size_t errlen);
/* The ranks' cheap agreement on a generated schedule: over all ranks, the sums are 0 iff
 * (barring a 64-bit hash collision) the k-th message on every link a -> b is the same
 * piece in a's list and in b's. *sum is this rank's term; -1 if out of memory (O(P)). */
int cs_compact_link_sum(const collsched_schedule *s, uint32_t nranks, uint64_t *sum);

/* whole_check.c (no MPI): proves the whole schedule - every rank's list - with the passes
 * of compiler/collsched/verify.py (shape, matching, holding, delivery, progress). The ops
 * of rank r are ops[sum(nops[0..r-1]) ...], in list order, in the 12-byte form rank 0
 * gathers them in. Returns CS_WHOLE_OK, or CS_WHOLE_BAD / CS_WHOLE_NOMEM with one line in
 * reason ("rank R, op I: what is wrong", as the Python verifier words it). */
typedef struct cs_wire_op {
    uint32_t peer, origin;
    uint32_t word;            /* segment | kind << 16 | flags << 24 (bit 0 phase, bit 1 FIFO,
                                 bit 2 join: the op continues the message of the op before) */
} cs_wire_op;
enum { CS_WHOLE_OK = 0, CS_WHOLE_BAD = 1, CS_WHOLE_NOMEM = 2 };
#define CS_WHOLE_MAX_OPS 0x7FFFFFFFu  /* total ops (int counts of MPI_Gatherv) */
#define CS_WHOLE_MAX_RANKS (1u << 24)
static inline cs_wire_op cs_wire_pack(const collsched_op *op)
{
    cs_wire_op w = { op->peer, op->origin,
                     (op->segment & 0xFFFFu) | ((uint32_t)op->kind << 16) |
                     ((uint32_t)(op->phase | op->fifo << 1 | op->join << 2) << 24) };
    return w;
}
int cs_whole_check(uint32_t nranks, uint32_t nseg, const int *nops, const cs_wire_op *ops,
                   char *reason, size_t len);
/* The same; serial = 1 proves progress under the PAT engine's serial execution (each send
 * waits for the previous send, each recv for the previous recv; docs/semantics.md). */
int cs_whole_check_mode(uint32_t nranks, uint32_t nseg, const int *nops, const cs_wire_op *ops,
                        int serial, char *reason, size_t len);

/* First byte of segment s of a block of c bytes cut into nseg segments:
 * floor(s * c / nseg) without 64-bit overflow (c = q * nseg + r). */
static inline uint64_t cs_seg_lo(uint64_t s, uint64_t c, uint64_t nseg)
{
    return s * (c / nseg) + (s * (c % nseg)) / nseg;
}

/* bdr.c: the BDR schedule for an arrival pattern (seconds) and tau, rank `rank`'s list,
 * op for op as compiler/collsched/algorithms/bdr.py builds it (full duplex). *out is
 * malloc'ed; dep/prev are left -1 for the loader's passes to fill. */
#define CS_BDR_MAX_PRESTEPS 1000000
int cs_bdr_build(uint32_t nranks, const double *arrivals, double tau, uint32_t rank,
                 collsched_op **out, uint32_t *nout);

/* ---- Intergroup schedules (collectives 3 and 4, file version 1.1; docs/schedule-format.md
 * #intergroup-schedules, docs/semantics.md#intergroup-schedules). No MPI. ---- */
enum { CS_INTER_ALLGATHER = 3, CS_INTER_ALLGATHERV = 4 };
enum { CS_GROUP_A = 0, CS_GROUP_B = 1 };

/* The 128-byte header and the groups extension. */
typedef struct cs_inter_header {
    collsched_header h;
    uint32_t header_bytes;
    uint32_t p, q;              /* ranks of A and B; schedule rank i < p is a_i, p + j is b_j */
    uint64_t *blocks;           /* p + q block sizes in bytes, A's then B's (malloc'ed) */
    uint64_t total[2];          /* K_A, K_B: each group's data */
    uint64_t hash;              /* header + extension + index: equal where the same file was read */
} cs_inter_header;

/* One operation of a rank's list, with what the walk of semantics.md derives from it. */
typedef struct cs_inter_op {
    uint64_t lo, hi;            /* [lo, hi) of group `group`'s data */
    uint32_t peer;
    uint8_t kind, group, fifo;
    uint8_t dup;                /* recv: bytes held already (taken into scratch, dropped) */
    int32_t prev;               /* FIFO send: the previous send to the same peer, else -1 */
    uint32_t dep0, ndep;        /* send: deps[dep0 .. dep0 + ndep) are the recvs it waits for */
} cs_inter_op;

/* One rank's section, walked: deps, duplicates, where its own group's data lives. */
typedef struct cs_inter_section {
    uint32_t rank, nops;
    cs_inter_op *ops;
    uint32_t *deps;             /* the earlier new receives whose ranges meet each send's */
    int own_scratch;            /* it receives own-group data: a scratch copy of the group's data */
    uint64_t dup_bytes;         /* bytes of its duplicate receives (each its own scratch place) */
} cs_inter_section;

static inline int cs_inter_group_of(const cs_inter_header *h, uint32_t rank)
{
    return rank < h->p ? CS_GROUP_A : CS_GROUP_B;
}
/* First byte of schedule rank r's block in its group's data. */
uint64_t cs_inter_block_offset(const cs_inter_header *h, uint32_t rank);
void cs_inter_header_free(cs_inter_header *h);
void cs_inter_section_free(cs_inter_section *s);

/* inter_file.c: header and groups extension only (file size checked against the index
 * later). Refuses with one line "FILE: FIELD: expected ..." (COLLSCHED_E* codes). */
int cs_inter_read_header(const char *path, cs_inter_header *h, char *err, size_t len);
/* Header, extension, index and rank `rank`'s section, every field checked, then walked
 * (cs_inter_walk). *h is filled (free with cs_inter_header_free) even on failure. */
int cs_inter_load(const char *path, uint32_t rank, cs_inter_header *h, cs_inter_section **out,
                  char *err, size_t len);
/* The whole file: every section read, checked and walked, then matching and progress
 * (cs_inter_whole_check). COLLSCHED_OK or an error code with one line in err. */
int cs_inter_check_file(const char *path, char *err, size_t len);

/* inter_check.c: the walk of one rank's list (rules 1, 2, 4, 5 of semantics.md: holding,
 * the receives each send waits for, new / duplicate / partly duplicate receives,
 * delivery); fills the section's deps, dup flags, own_scratch and dup_bytes. 0, or -1
 * with "rank R, op I: what" in why. */
int cs_inter_walk(const cs_inter_header *h, cs_inter_section *s, char *why, size_t len);
/* The whole schedule (every rank's walked section, in rank order): per-pair matching of
 * group and range in order (rule 3) and progress of the dataflow walks (no deadlock). */
int cs_inter_whole_check(const cs_inter_header *h, cs_inter_section *const *secs, char *why,
                         size_t len);

#endif
