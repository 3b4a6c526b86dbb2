/* Unit-test driver of cs_whole_check (runtime/src/whole_check.c), no MPI. Reads cases from
 * stdin until EOF, each as
 *     P nseg
 *     then per rank: n, followed by n ops "kind peer origin segment phase"
 * and prints one line per case: "ok", or the reason (nomem: "nomem: reason"). With
 * --serial, progress is proven for the PAT engine's serial execution.
 * Built and run by tests/runtime/test_fallback_mpi.py. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    int serial = argc > 1 && !strcmp(argv[1], "--serial");
    unsigned P, nseg;
    while (scanf("%u %u", &P, &nseg) == 2) {
        int *nops = calloc(P ? P : 1, sizeof *nops);
        size_t cap = 16, n = 0;
        cs_wire_op *ops = malloc(cap * sizeof *ops);
        if (!nops || !ops) return 2;
        for (unsigned r = 0; r < P; r++) {
            if (scanf("%d", &nops[r]) != 1) return 2;
            for (int i = 0; i < nops[r]; i++) {
                unsigned kind, peer, origin, seg, phase;
                if (scanf("%u %u %u %u %u", &kind, &peer, &origin, &seg, &phase) != 5) return 2;
                if (n == cap && !(ops = realloc(ops, (cap *= 2) * sizeof *ops))) return 2;
                ops[n++] = (cs_wire_op){ peer, origin, (seg & 0xFFFFu) | (kind << 16) | (phase << 24) };
            }
        }
        char reason[512];
        int rc = cs_whole_check_mode(P, nseg, nops, ops, serial, reason, sizeof reason);
        printf("%s%s\n", rc == CS_WHOLE_NOMEM ? "nomem: " : "", rc == CS_WHOLE_OK ? "ok" : reason);
        free(nops);
        free(ops);
    }
    return 0;
}
