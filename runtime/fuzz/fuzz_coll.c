/* fuzz_coll.c - libFuzzer target for the format 1.2 reader and the whole-program check
 * (make fuzz-coll; runtime/src/coll_file.c, coll_check.c).
 *
 * Loads the input as a file image for the communicator size its header claims and for one
 * more, at a rank chosen from the input, and walks the section the way the executor would
 * (every index in range); a refusal must leave nothing and be one line naming the file and
 * the field. Small files (nranks <= 64) also go through the whole check (every section,
 * then cs_coll_check_whole). The fuzz build skips the CRCs (COLLSCHED_FUZZING), so the
 * fuzzer reaches every check behind them. An input starting with 'P' is a program made
 * straight from its bytes, every field unchecked, for cs_coll_check_whole alone. */
#include "coll.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static void walk(const cs_coll_section *s, uint32_t rank)
{
    const collsched_header *h = &s->hdr.h;
    if (s->rank != rank || !cs_coll_is(h->collective) || s->hdr.root >= h->nranks) abort();
    uint64_t next = 0;
    for (uint32_t i = 0; i < s->nops; i++) {
        const cs_coll_op *op = &s->ops[i];
        if (op->peer >= h->nranks || op->peer == rank || op->kind > CS_COLL_RECV_REDUCE || op->first != next
            || op->npieces > s->npieces - op->first)
            abort();
        next += op->npieces;
        for (uint32_t k = 0; k < op->npieces; k++) {
            const cs_coll_piece *p = &s->pieces[op->first + k];
            if (p->seg >= h->nseg || p->src >= h->nranks || p->dst >= h->nranks) abort();
            if (h->collective != CS_COLL_ALLTOALL && (p->src || p->dst)) abort();
        }
    }
    if (next != s->npieces) abort();
}

static void refusal_ok(const char *err)
{
    if (!memchr(err, ':', strlen(err)) || strchr(err, '\n')) abort(); /* one line naming file and field */
}

/* An input starting with 'P': a program built straight from the bytes, fields unchecked
 * (the check must stand alone: shape first), every array of exactly its size. */
static int raw_program(const uint8_t *d, size_t n)
{
    size_t at = 1;
#define BYTE() (at < n ? d[at++] : 0)
    uint32_t coll = 5 + BYTE() % 5, P = 1 + BYTE() % 9, nseg = BYTE() % 5, root = BYTE() % 10, flags = BYTE() % 16;
    cs_coll_section **secs = calloc(P, sizeof *secs);
    for (uint32_t r = 0; secs && r < P; r++) {
        cs_coll_section *s = secs[r] = calloc(1, sizeof *s);
        if (!s) abort();
        s->hdr.h.collective = coll, s->hdr.h.nranks = P, s->hdr.h.nseg = nseg, s->hdr.h.flags = flags;
        s->hdr.root = root, s->rank = r, s->nops = BYTE() % 9;
        s->ops = malloc((s->nops ? s->nops : 1) * sizeof *s->ops);
        s->pieces = malloc(4 * (s->nops ? s->nops : 1) * sizeof *s->pieces);
        if (!s->ops || !s->pieces) abort();
        for (uint32_t i = 0; i < s->nops; i++) {
            cs_coll_op *o = &s->ops[i];
            o->peer = BYTE() % (P + 1), o->kind = BYTE() % 4, o->flags = BYTE() % 9, o->npieces = BYTE() % 4;
            o->first = s->npieces;
            for (uint32_t k = 0; k < o->npieces; k++) {
                cs_coll_piece *p = &s->pieces[s->npieces++];
                p->src = BYTE() % (P + 1), p->dst = BYTE() % (P + 1), p->seg = BYTE() % 4;
            }
        }
    }
#undef BYTE
    char why[512] = "";
    int rc = secs ? cs_coll_check_whole((const cs_coll_section *const *)secs, P, why, sizeof why) : CS_COLL_PROVEN;
    if (rc != CS_COLL_PROVEN && rc != CS_COLL_VIOLATION && rc != CS_COLL_NOMEM) abort();
    if (rc != CS_COLL_PROVEN && strncmp(why, "rank ", 5) != 0 && strncmp(why, "whole-program check: ", 21) != 0)
        abort(); /* one reason, named */
    for (uint32_t r = 0; secs && r < P; r++) cs_coll_free(secs[r]);
    free(secs);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    if (size && data[0] == 'P') return raw_program(data, size);
    uint32_t nranks = 4, rank = 0;
    if (size >= 152) {
        nranks = rd32(data + 20);
        if (nranks == 0 || nranks > (1u << 24)) nranks = 4;
        rank = data[size - 1] % nranks;
    }
    for (int pass = 0; pass < 2; pass++) {
        cs_coll_section *s = NULL;
        uint32_t n = pass ? nranks + 1 : nranks;
        err[0] = 0;
        if (cs_coll_load_memory(data, size, "fuzz", n, rank, &s, err, sizeof err) == COLLSCHED_OK) {
            if (pass || !s) abort(); /* a file for P ranks must refuse P + 1 */
            walk(s, rank);
            cs_coll_free(s);
        } else {
            if (s) abort();
            refusal_ok(err);
        }
    }
    if (nranks <= 64) {
        err[0] = 0;
        if (cs_coll_check_memory(data, size, "fuzz", err, sizeof err) != COLLSCHED_OK) refusal_ok(err);
    }
    return 0;
}
