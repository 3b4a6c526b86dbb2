/* fuzz_schedfile.c - libFuzzer target for the schedule readers (make fuzz).
 *
 * Loads the input as a schedule file image, for the communicator size the header claims
 * and for one that differs, at a rank chosen from the input, and walks the result the way
 * the executor does (dep indices must point at earlier recvs of the same piece; joined ops
 * continue their message; FIFO links name earlier send heads to the same peer). An input
 * with the compact magic goes through the compact loader instead (decode, the generators,
 * the dataflow checks of cs_schedule_adopt), as cs_load_file sends a compact file there. */
#include "collsched_schedfile.h"
#include "compact_gen.h"
#include "internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void walk(const collsched_schedule *s)
{
    for (uint32_t i = 0; i < s->nops; i++) {
        const collsched_op *op = &s->ops[i];
        if (op->peer >= s->hdr.nranks || op->peer == s->rank || op->origin >= s->hdr.nranks
            || op->segment >= s->hdr.nseg)
            abort();
        if (op->dep >= 0) {
            const collsched_op *r = &s->ops[op->dep];
            if ((uint32_t)op->dep >= i || r->kind != COLLSCHED_RECV || r->origin != op->origin
                || r->segment != op->segment)
                abort();
        }
        /* multi-piece messages: a joined op continues the message of the op before it
         * (what the executor relies on to find a message's head and end), carries no FIFO
         * mark; a FIFO send waits for an earlier send message's head to the same peer */
        if (op->join > 1 || (op->join && (i == 0 || op->fifo || op[-1].kind != op->kind
                                          || op[-1].peer != op->peer || op[-1].phase != op->phase)))
            abort();
        if (op->prev >= 0) {
            const collsched_op *p = &s->ops[op->prev];
            if ((uint32_t)op->prev >= i || p->kind != COLLSCHED_SEND || p->peer != op->peer || p->join || op->join)
                abort();
        }
    }
}

/* Records whose list is longer than this are only decoded and counted: a valid record
 * may ask for a list of gigabytes (many ranks times many segments), which the loader
 * allocates as asked; the fuzzer should spend its time on the checks instead. */
#define FUZZ_MAX_COMPACT_OPS (1u << 20)

static int compact_input(const uint8_t *data, size_t size)
{
    char err[512];
    collsched_header h;
    if (cs_compact_header(data, size, "fuzz", &h, err, sizeof err) != COLLSCHED_OK) {
        if (!memchr(err, ':', strlen(err))) abort(); /* a refusal names file and field */
        return 0;
    }
    uint32_t rank = size > 56 ? data[size - 5] % h.nranks : h.nranks - 1;
    cs_compact_desc d;
    uint64_t nops = 0;
    if (cs_compact_decode(data, size, &d, err, sizeof err) != CS_COMPACT_OK) abort(); /* header said valid */
    if (cs_compact_generate(&d, rank, NULL, 0, &nops, err, sizeof err) == CS_COMPACT_EDESC) return 0;
    if (nops > FUZZ_MAX_COMPACT_OPS) return 0;
    for (int pass = 0; pass < 2; pass++) {
        collsched_schedule *s = NULL;
        uint32_t n = pass ? h.nranks + 1 : h.nranks;
        if (cs_compact_load(data, size, "fuzz", n, rank, &s, err, sizeof err) == COLLSCHED_OK) {
            if (pass) abort(); /* a record for P ranks must refuse P + 1 */
            walk(s);
            collsched_schedule_free(s);
        } else if (s || !memchr(err, ':', strlen(err))) {
            abort();
        }
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    collsched_header h;
    uint32_t nranks = 4, rank = 0;
    if (cs_is_compact_record(data, size)) return compact_input(data, size);
    if (collsched_parse_header(data, size, size, "fuzz", &h, err, sizeof err) == COLLSCHED_OK) {
        nranks = h.nranks;
        rank = size > 128 ? data[size - 1] % nranks : 0;
    }
    for (int pass = 0; pass < 2; pass++) {
        collsched_schedule *s = NULL;
        uint32_t n = pass ? nranks + 1 : nranks;
        if (collsched_load_memory(data, size, "fuzz", n, rank, &s, err, sizeof err) == COLLSCHED_OK) {
            walk(s);
            collsched_schedule_free(s);
        } else if (s || !memchr(err, ':', strlen(err))) {
            abort(); /* failure must leave no result and name file and field */
        }
    }
    return 0;
}
