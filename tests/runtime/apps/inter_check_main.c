/* The runtime's intergroup reader and checker without MPI (tests/runtime/test_inter_mpi.py):
 *
 *   inter_check FILE...        one line per file: "OK" or the reader's / checker's line
 *                               (cs_inter_check_file: every section, then the whole schedule)
 *   inter_check --rank R FILE  rank R's section as the runtime loads it (cs_inter_load): one
 *                               line per op "send|recv PEER GROUP LO HI dup=D deps=I,J,..",
 *                               then "own_scratch=S dup_bytes=N", or the error line
 * Exit status 0 when every file was accepted, 1 otherwise.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int show_rank(const char *path, uint32_t rank)
{
    cs_inter_header h;
    cs_inter_section *s = NULL;
    char err[512];
    if (cs_inter_load(path, rank, &h, &s, err, sizeof err) != COLLSCHED_OK) {
        printf("%s\n", err);
        cs_inter_header_free(&h);
        return 1;
    }
    for (uint32_t i = 0; i < s->nops; i++) {
        const cs_inter_op *op = &s->ops[i];
        printf("%s %u %c %llu %llu dup=%u deps=", op->kind ? "recv" : "send", op->peer, "AB"[op->group],
               (unsigned long long)op->lo, (unsigned long long)op->hi, op->dup);
        for (uint32_t k = 0; k < op->ndep; k++) printf("%s%u", k ? "," : "", s->deps[op->dep0 + k]);
        printf("\n");
    }
    printf("own_scratch=%d dup_bytes=%llu\n", s->own_scratch, (unsigned long long)s->dup_bytes);
    cs_inter_section_free(s);
    cs_inter_header_free(&h);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--rank") == 0) return show_rank(argv[3], (uint32_t)atoi(argv[2]));
    int bad = 0;
    for (int i = 1; i < argc; i++) {
        char err[512];
        if (cs_inter_check_file(argv[i], err, sizeof err) == COLLSCHED_OK) {
            printf("OK\n");
        } else {
            printf("%s\n", err);
            bad = 1;
        }
    }
    return bad;
}
