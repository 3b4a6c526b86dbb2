/* compact_emit.h - what the compact generators share (compact_gen.c, compact_hier.c,
 * compact_bdr.c): the emitter that writes or counts a rank's operations, modular rank
 * arithmetic, and the one-line refusal. Internal to the generators; no MPI. */
#ifndef COLLSCHED_COMPACT_EMIT_H
#define COLLSCHED_COMPACT_EMIT_H

#include "compact_gen.h"

enum { CS_EMIT_SEND = 0, CS_EMIT_RECV = 1, CS_EMIT_PHASE_BG = 1, CS_EMIT_FIFO = 2 };

typedef struct cs_emitter {
    cs_compact_op *out;
    uint64_t cap, n;
    uint32_t nseg;
    uint64_t q, r;            /* bytes_max = q * nseg + r: piece sizes without overflow */
    uint64_t fifo_min;        /* a send of a piece at least this big carries the FIFO bit */
} cs_emitter;

/* Bytes of segment s at bytes_max: (s+1)*c/nseg - s*c/nseg, as ir.Schedule.piece_bytes. */
static inline uint64_t cs_emit_piece(const cs_emitter *e, uint64_t s)
{
    return e->q + ((s + 1) * e->r) / e->nseg - (s * e->r) / e->nseg;
}

/* One operation with explicit flags (bit 0 phase, bit 1 FIFO); counts only when full. */
static inline void cs_emit_op(cs_emitter *e, int kind, uint64_t peer, uint64_t origin,
                              uint64_t segment, uint8_t flags)
{
    if (e->n < e->cap) {
        cs_compact_op *op = &e->out[e->n];
        op->peer = (uint32_t)peer;
        op->origin = (uint32_t)origin;
        op->segment = (uint16_t)segment;
        op->kind = (uint8_t)kind;
        op->flags = flags;
    }
    e->n++;
}

/* One block: its nseg segment operations, in segment order, sends FIFO-marked by piece
 * size. Without room for them it only counts (in O(1): counting a rank's list costs
 * O(blocks), not O(ops)). */
static inline void cs_emit_block(cs_emitter *e, int kind, uint64_t peer, uint64_t origin)
{
    if (e->cap < e->nseg || e->n > e->cap - e->nseg) {
        e->n += e->nseg;
        return;
    }
    for (uint32_t s = 0; s < e->nseg; s++)
        cs_emit_op(e, kind, peer, origin, s,
                   kind == CS_EMIT_SEND && cs_emit_piece(e, s) >= e->fifo_min ? CS_EMIT_FIFO : 0);
}

/* (a + b) mod p for a, b < p; (a - b) mod p for a < p and any b. */
static inline uint64_t cs_mod_add(uint64_t a, uint64_t b, uint64_t p) { return (a + b) % p; }
static inline uint64_t cs_mod_sub(uint64_t a, uint64_t b, uint64_t p) { return (a + p - b % p) % p; }

/* Writes one line to err (printf-style); returns CS_COMPACT_EDESC. */
int cs_compact_fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Little-endian unsigned of n bytes at b. */
uint64_t cs_compact_le(const uint8_t *b, int n);

/* The version-2 algorithms: each checks its tail (CS_COMPACT_EDESC with one line, worded
 * as the compiler words the same refusal) and generates rank `rank`'s list into e. */
int cs_compact_hier_check(const cs_compact_desc *d, char *err, size_t errlen);
void cs_compact_hier_generate(cs_emitter *e, const cs_compact_desc *d, uint64_t rank);
int cs_compact_bdr_check(const cs_compact_desc *d, char *err, size_t errlen);
void cs_compact_bdr_generate(cs_emitter *e, const cs_compact_desc *d, uint64_t rank);

#endif
