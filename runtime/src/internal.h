/* internal.h - declarations shared by the runtime's modules (not installed). */
#ifndef COLLSCHED_INTERNAL_H
#define COLLSCHED_INTERNAL_H

#include "collsched_schedfile.h"

#include <stddef.h>
#include <stdint.h>

/* schedfile.c (no MPI) */
uint32_t cs_crc32(uint32_t crc, const void *buf, size_t len);
uint64_t cs_hash64(uint64_t h, const void *buf, size_t len); /* h = 0 starts a new hash */
int cs_read_header_file(const char *path, collsched_header *h, char *err, size_t errlen);
/* Wraps a list built in memory as a schedule (dataflow checks, dep/prev links), like a
 * loaded section; takes ownership of ops. */
int cs_schedule_adopt(uint32_t nranks, uint32_t nseg, uint32_t rank, collsched_op *ops,
                      uint32_t nops, const char *name, collsched_schedule **out, char *err,
                      size_t errlen);

/* whole_check.c (no MPI): proves the whole schedule - every rank's list - with the passes
 * of compiler/collsched/verify.py (shape, matching, holding, delivery, progress). The ops
 * of rank r are ops[sum(nops[0..r-1]) ...], in list order, in the 12-byte form rank 0
 * gathers them in. Returns CS_WHOLE_OK, or CS_WHOLE_BAD / CS_WHOLE_NOMEM with one line in
 * reason ("rank R, op I: what is wrong", as the Python verifier words it). */
typedef struct cs_wire_op {
    uint32_t peer, origin;
    uint32_t word;            /* segment | kind << 16 | flags << 24 (bit 0 phase, bit 1 FIFO) */
} cs_wire_op;
enum { CS_WHOLE_OK = 0, CS_WHOLE_BAD = 1, CS_WHOLE_NOMEM = 2 };
#define CS_WHOLE_MAX_OPS 0x7FFFFFFFu  /* total ops (int counts of MPI_Gatherv) */
#define CS_WHOLE_MAX_RANKS (1u << 24)
static inline cs_wire_op cs_wire_pack(const collsched_op *op)
{
    cs_wire_op w = { op->peer, op->origin,
                     (op->segment & 0xFFFFu) | ((uint32_t)op->kind << 16) |
                     ((uint32_t)(op->phase | op->fifo << 1) << 24) };
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

#endif
