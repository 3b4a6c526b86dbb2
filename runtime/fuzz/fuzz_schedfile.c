/* fuzz_schedfile.c - libFuzzer target for the schedule parser (make fuzz).
 *
 * Loads the input as a schedule file image, for the communicator size the header claims
 * and for one that differs, at a rank chosen from the input, and walks the result the way
 * the executor does (dep indices must point at earlier recvs of the same piece). */
#include "collsched_schedfile.h"

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
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    collsched_header h;
    uint32_t nranks = 4, rank = 0;
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
