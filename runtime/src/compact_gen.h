/* compact_gen.h - the compact schedule form's generators (docs/compact.md).
 *
 * A compact description names an allgather algorithm and its parameters; from it every
 * rank computes its own operation list, op for op and byte for byte what the Python
 * compiler writes in that rank's section of the explicit .sched file of the same compile:
 * the regular algorithms on a homogeneous cluster in either duplex (version 1, this file),
 * the hierarchical composition over sites (compact_hier.c) and BDR/BSLB from their arrival
 * pattern's class (compact_bdr.c) (version 2, a tail). Pure C, no MPI: the runtime calls it
 * at communicator setup, the compiler's tests through ctypes (compact/native.py).
 */
#ifndef COLLSCHED_COMPACT_GEN_H
#define COLLSCHED_COMPACT_GEN_H

#include <stddef.h>
#include <stdint.h>

#define CS_COMPACT_VERSION 1u          /* the fixed 56-byte record: regular algorithms */
#define CS_COMPACT_VERSION_TAIL 2u     /* the record plus an algorithm's tail and a CRC-32 */
#define CS_COMPACT_DESC_BYTES 56u      /* the fixed head (all of a version-1 record) */
#define CS_COMPACT_MAX_DESC_BYTES (64u << 20) /* a version-2 record's largest size */
#define CS_COMPACT_MAX_RANKS (1u << 24)     /* the schedule format's limits */
#define CS_COMPACT_MAX_SEGMENTS 65535u
#define CS_COMPACT_NO_FIFO UINT64_MAX       /* fifo_min_piece: no send waits */
#define CS_COMPACT_FULL_DUPLEX 1u           /* desc flags bit 0 */

/* Algorithm codes of the description (compact/desc.py ALGORITHMS names them). */
enum {
    CS_COMPACT_RING = 1, CS_COMPACT_BRUCK = 2, CS_COMPACT_RD = 3, CS_COMPACT_SPREADING = 4,
    CS_COMPACT_NEX = 5, CS_COMPACT_LNBC = 6, CS_COMPACT_MAGPIE = 7, CS_COMPACT_MPICHG2 = 8,
    /* Version 2 (a tail): the hierarchical composition over sites (compact_hier.c) and the
     * arrival-aware BDR and BSLB (compact_bdr.c). */
    CS_COMPACT_HIER = 9, CS_COMPACT_BDR = 10, CS_COMPACT_BSLB = 11
};
#define CS_COMPACT_LAST_REGULAR CS_COMPACT_MPICHG2
#define CS_COMPACT_LAST_CODE CS_COMPACT_BSLB

typedef struct cs_compact_desc {
    uint32_t version;         /* CS_COMPACT_VERSION */
    uint32_t algorithm;       /* CS_COMPACT_* */
    uint32_t nranks;          /* 1 .. CS_COMPACT_MAX_RANKS */
    uint32_t nseg;            /* segments per block, 1 .. CS_COMPACT_MAX_SEGMENTS */
    uint32_t flags;           /* CS_COMPACT_FULL_DUPLEX, or 0: half duplex (regular algorithms only) */
    uint64_t bytes_min, bytes_max;
    /* A send of a piece of at least this many bytes (at bytes_max) carries the FIFO bit:
     * the threshold form of policy.fifo_link on a homogeneous topology. */
    uint64_t fifo_min_piece;
    /* Version 2: the algorithm's tail (between the head and the CRC-32), pointing into
     * the buffer given to cs_compact_decode, which must outlive the description. */
    const uint8_t *tail;
    uint32_t tail_len;
} cs_compact_desc;

/* One operation, laid out as the .sched file's 12-byte op (docs/schedule-format.md). */
typedef struct cs_compact_op {
    uint32_t peer, origin;
    uint16_t segment;
    uint8_t kind;             /* 0 send, 1 recv */
    uint8_t flags;            /* bit 0 phase (always 0 here), bit 1 FIFO wait */
} cs_compact_op;

enum { CS_COMPACT_OK = 0, CS_COMPACT_EDESC = 1, CS_COMPACT_ECAPACITY = 2 };

/* Reads the little-endian encoding (compact/desc.py encode): version 1, the 56-byte head
 * alone; version 2, the head (desc_bytes = the whole length), the algorithm's tail and a
 * CRC-32 of everything before it. CS_COMPACT_EDESC with one line in err for a buffer that
 * is not a valid description. d->tail points into buf. */
int cs_compact_decode(const void *buf, size_t len, cs_compact_desc *d, char *err, size_t errlen);

/* Rank `rank`'s list into out[0 .. capacity): *nops is its length. CS_COMPACT_ECAPACITY
 * when capacity is too small (*nops says how many; out is then partly written; capacity 0
 * with out NULL only counts). CS_COMPACT_EDESC with one line in err for a description or
 * rank it does not serve. O(nops) time, no allocation; counting (no room) takes O(nops /
 * nseg). A list longer than the format's u32 count is refused (*nops still says how long). */
int cs_compact_generate(const cs_compact_desc *d, uint32_t rank, cs_compact_op *out,
                        uint64_t capacity, uint64_t *nops, char *err, size_t errlen);

/* The same on an encoded description, in the kernels' calling form (int64_t and uint8_t
 * arrays only, compiler/collsched/kernels/__init__.py parse_prototypes): ops receives
 * 12 * capacity bytes, nops[0] the count; returns a CS_COMPACT_* code. */
int64_t cs_compact_ops(const uint8_t *desc, int64_t desc_len, int64_t rank, int64_t capacity,
                       uint8_t *ops, int64_t *nops, uint8_t *err, int64_t errlen);

#endif
