/* Reads BDR cases from stdin, one per line: "P tau a_0 ... a_{P-1}" (seconds), and prints
 * for each rank one line "r: kind,peer,origin,phase ..." of cs_bdr_build's list, or
 * "refused" for the case. Used by tests/runtime/test_bdr_online.py (no MPI). */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>

int main(void)
{
    unsigned P;
    double tau;
    while (scanf("%u %lf", &P, &tau) == 2) {
        double *a = malloc((P ? P : 1) * sizeof *a);
        for (unsigned r = 0; r < P; r++)
            if (scanf("%lf", &a[r]) != 1) return 2;
        for (unsigned r = 0; r < P; r++) {
            collsched_op *ops;
            uint32_t n;
            if (cs_bdr_build(P, a, tau, r, &ops, &n) != COLLSCHED_OK) { printf("refused\n"); break; }
            printf("%u:", r);
            for (uint32_t i = 0; i < n; i++)
                printf(" %u,%u,%u,%u", ops[i].kind, ops[i].peer, ops[i].origin, ops[i].phase);
            printf("\n");
            free(ops);
        }
        free(a);
    }
    return 0;
}
