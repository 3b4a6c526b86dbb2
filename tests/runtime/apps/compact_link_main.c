/* The compact loader without MPI (tests/runtime/test_compact_mpi.py):
 *   compact_link FILE P [swap R]
 * loads every rank's list of FILE through cs_load_file (the compact record path) and
 * prints the sum over ranks of cs_compact_link_sum ("links 0" when every link's k-th send
 * is the k-th receive at the other end) and the total op count. With "swap R", rank R's
 * first two sends to the same peer are exchanged before the sums: the check must see it.
 * A refused load prints the loader's line and exits 1. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc < 3) { fprintf(stderr, "usage: compact_link FILE P [swap R]\n"); return 2; }
    uint32_t P = (uint32_t)strtoul(argv[2], NULL, 10);
    long swap = argc > 4 && strcmp(argv[3], "swap") == 0 ? atol(argv[4]) : -1;
    uint64_t total = 0, ops = 0;
    int swapped = 0;
    for (uint32_t r = 0; r < P; r++) {
        collsched_schedule *s;
        char err[300];
        if (cs_load_file(argv[1], P, r, &s, err, sizeof err) != COLLSCHED_OK) {
            printf("%s\n", err);
            return 1;
        }
        if ((long)r == swap)
            for (uint32_t i = 0; i < s->nops && !swapped; i++)
                for (uint32_t j = i + 1; j < s->nops && !swapped; j++)
                    if (s->ops[i].kind == COLLSCHED_SEND && s->ops[j].kind == COLLSCHED_SEND
                        && s->ops[i].peer == s->ops[j].peer) {
                        collsched_op t = s->ops[i];
                        s->ops[i] = s->ops[j];
                        s->ops[j] = t;
                        swapped = 1;
                    }
        uint64_t sum;
        if (cs_compact_link_sum(s, P, &sum) != 0) { printf("out of memory\n"); return 1; }
        total += sum;
        ops += s->nops;
        if (r == 0) printf("algorithm %s nseg %u compact %d\n", s->hdr.algorithm, s->hdr.nseg, cs_is_compact(&s->hdr));
        collsched_schedule_free(s);
    }
    printf("links %llu ops %llu swapped %d\n", (unsigned long long)total, (unsigned long long)ops, swapped);
    return 0;
}
