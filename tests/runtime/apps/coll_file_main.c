/* Test driver of the format 1.2 reader and the whole-program check (runtime/src/coll_file.c,
 * coll_check.c), no MPI. Built and run by tests/runtime/test_coll_file.py.
 *
 *   coll_file_main FILE RANK      rank RANK's section (the communicator size from the
 *                                 header): a line "collective C nranks P nseg S root R flags F
 *                                 nops N npieces K", then one line per op as
 *                                 collsched.collectives.program.Op prints it
 *   coll_file_main --header FILE  the header line only (cs_coll_read_header)
 *   coll_file_main --check FILE   every section, then the whole check: "ok"
 *   coll_file_main --all FILE     every rank's section (cs_coll_load, as above, each after a
 *                                 line "rank R"; cs_coll_load_all must load the same), then
 *                                 "check: ok" or "check: <error line>"
 *   coll_file_main --each FILE... per file one line: "ok" (cs_coll_check_file) or its error
 *   coll_file_main --prefixes FILE  per prefix of the file's bytes (0 .. size - 1 bytes) one
 *                                 line: cs_coll_check_memory's error ("ok" would be a bug)
 *   coll_file_main --v10 FILE     the allgather reader (collsched_load) on the file: its error
 *   coll_file_main --text         programs from stdin until EOF, each as
 *                                     collective P nseg root flags
 *                                     then per rank: n, followed by n ops
 *                                     "kind peer flags npieces src dst seg ..."
 *                                 and one line per program: "ok", the first violation, or
 *                                 "nomem: reason" (cs_coll_check_whole, sections unchecked)
 * A refused file: its one error line on stderr, exit status 1. */
#include "coll.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *kind_name(unsigned k)
{
    return k == CS_COLL_SEND ? "send" : k == CS_COLL_RECV ? "recv" : k == CS_COLL_RECV_REDUCE ? "recv-reduce" : "?";
}

static void print_header(const cs_coll_header *h)
{
    printf("collective %u nranks %u nseg %u root %u flags %u", h->h.collective, h->h.nranks, h->h.nseg, h->root,
           h->h.flags);
}

static void print_section(const cs_coll_section *s)
{
    print_header(&s->hdr);
    printf(" nops %u npieces %llu\n", s->nops, (unsigned long long)s->npieces);
    for (uint32_t i = 0; i < s->nops; i++) {
        const cs_coll_op *op = &s->ops[i];
        printf("%s peer %u [", kind_name(op->kind), op->peer);
        for (uint32_t k = 0; k < op->npieces; k++) {
            const cs_coll_piece *p = &s->pieces[op->first + k];
            printf("%s%u>%u:%u", k ? " " : "", p->src, p->dst, p->seg);
        }
        printf("%s]%s%s%s%s\n", op->npieces ? "" : "(sync)", op->flags & CS_COLL_OP_FIFO ? " fifo" : "",
               op->flags & CS_COLL_OP_FENCE ? " fence" : "", op->flags & CS_COLL_OP_LOCAL_FIRST ? " local-first" : "",
               op->flags & CS_COLL_OP_CHAIN ? " chain" : "");
    }
}

static int refused(const char *err)
{
    fprintf(stderr, "%s\n", err);
    return 1;
}

/* One program from text into sections (not checked: the check must stand alone). */
static int read_text(cs_coll_section ***out, uint32_t *P)
{
    unsigned coll, nranks, nseg, root, flags;
    if (scanf("%u %u %u %u %u", &coll, &nranks, &nseg, &root, &flags) != 5) return 0;
    cs_coll_section **secs = calloc(nranks ? nranks : 1, sizeof *secs);
    if (!secs) exit(2);
    for (unsigned r = 0; r < nranks; r++) {
        cs_coll_section *s = secs[r] = calloc(1, sizeof *s);
        unsigned n;
        if (!s || scanf("%u", &n) != 1) exit(2);
        s->hdr.h.version_major = 1;
        s->hdr.h.version_minor = 2;
        s->hdr.h.collective = coll;
        s->hdr.h.nranks = nranks;
        s->hdr.h.nseg = nseg;
        s->hdr.h.flags = flags;
        s->hdr.root = root;
        s->rank = r;
        s->nops = n;
        s->ops = calloc(n ? n : 1, sizeof *s->ops);
        size_t cap = 16;
        s->pieces = malloc(cap * sizeof *s->pieces);
        if (!s->ops || !s->pieces) exit(2);
        for (unsigned i = 0; i < n; i++) {
            unsigned kind, peer, fl, np;
            if (scanf("%u %u %u %u", &kind, &peer, &fl, &np) != 4) exit(2);
            s->ops[i] = (cs_coll_op){ .peer = peer, .kind = (uint8_t)kind, .flags = (uint8_t)fl, .npieces = np,
                                      .first = s->npieces };
            for (unsigned k = 0; k < np; k++) {
                unsigned a, b, c;
                if (scanf("%u %u %u", &a, &b, &c) != 3) exit(2);
                if (s->npieces == cap && !(s->pieces = realloc(s->pieces, (cap *= 2) * sizeof *s->pieces))) exit(2);
                s->pieces[s->npieces++] = (cs_coll_piece){ a, b, c };
            }
        }
    }
    *out = secs;
    *P = nranks;
    return 1;
}

static int text_mode(void)
{
    cs_coll_section **secs;
    uint32_t P;
    while (read_text(&secs, &P)) {
        char reason[512];
        int rc = cs_coll_check_whole((const cs_coll_section *const *)secs, P, reason, sizeof reason);
        printf("%s%s\n", rc == CS_COLL_NOMEM ? "nomem: " : "", rc == CS_COLL_PROVEN ? "ok" : reason);
        for (uint32_t r = 0; r < P; r++) cs_coll_free(secs[r]);
        free(secs);
    }
    return 0;
}

static int all_mode(const char *path)
{
    char err[512];
    cs_coll_header h;
    cs_coll_section **all;
    if (cs_coll_read_header(path, &h, err, sizeof err) != COLLSCHED_OK) return refused(err);
    if (cs_coll_load_all(path, h.h.nranks, &all, err, sizeof err) != COLLSCHED_OK) return refused(err);
    for (uint32_t r = 0; r < h.h.nranks; r++) {
        cs_coll_section *s = NULL;
        if (cs_coll_load(path, h.h.nranks, r, &s, err, sizeof err) != COLLSCHED_OK) return refused(err);
        printf("rank %u\n", r);
        print_section(s);
        const cs_coll_section *a = all[r];  /* the one-pass loader: the same section */
        if (a->rank != r || a->nops != s->nops || a->npieces != s->npieces || a->hash != s->hash
            || (s->nops && memcmp(a->ops, s->ops, s->nops * sizeof *s->ops))
            || (s->npieces && memcmp(a->pieces, s->pieces, s->npieces * sizeof *s->pieces)))
            printf("cs_coll_load_all differs at rank %u\n", r);
        cs_coll_free(s);
    }
    cs_coll_free_all(all, h.h.nranks);
    printf("check: %s\n", cs_coll_check_file(path, err, sizeof err) == COLLSCHED_OK ? "ok" : err);
    return 0;
}

static int prefixes_mode(const char *path)
{
    FILE *f = fopen(path, "rb");
    static unsigned char buf[1 << 16];
    size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f) fclose(f);
    for (size_t k = 0; k < n; k++) {
        char err[512];
        unsigned char *copy = malloc(k ? k : 1);  /* exactly k bytes: ASan sees any read past them */
        if (!copy) return 2;
        memcpy(copy, buf, k);
        printf("%s\n", cs_coll_check_memory(copy, k, path, err, sizeof err) == COLLSCHED_OK ? "ok" : err);
        free(copy);
    }
    return 0;
}

int main(int argc, char **argv)
{
    char err[512];
    if (argc == 2 && !strcmp(argv[1], "--text")) return text_mode();
    if (argc == 3 && !strcmp(argv[1], "--all")) return all_mode(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "--prefixes")) return prefixes_mode(argv[2]);
    if (argc >= 2 && !strcmp(argv[1], "--each")) {
        for (int i = 2; i < argc; i++)
            printf("%s\n", cs_coll_check_file(argv[i], err, sizeof err) == COLLSCHED_OK ? "ok" : err);
        return 0;
    }
    if (argc == 3 && !strcmp(argv[1], "--v10")) {
        collsched_schedule *s = NULL;
        cs_coll_header h;
        uint32_t n = cs_coll_read_header(argv[2], &h, err, sizeof err) == COLLSCHED_OK ? h.h.nranks : 1;
        if (collsched_load(argv[2], n, 0, &s, err, sizeof err) == COLLSCHED_OK) {
            collsched_schedule_free(s);
            printf("loaded\n");
            return 0;
        }
        return refused(err);
    }
    if (argc == 3 && !strcmp(argv[1], "--header")) {
        cs_coll_header h;
        if (cs_coll_read_header(argv[2], &h, err, sizeof err) != COLLSCHED_OK) return refused(err);
        print_header(&h);
        printf("\n");
        return 0;
    }
    if (argc == 3 && !strcmp(argv[1], "--check")) {
        if (cs_coll_check_file(argv[2], err, sizeof err) != COLLSCHED_OK) return refused(err);
        printf("ok\n");
        return 0;
    }
    if (argc == 3) {
        cs_coll_header h;
        cs_coll_section *s = NULL;
        if (cs_coll_read_header(argv[1], &h, err, sizeof err) != COLLSCHED_OK) return refused(err);
        uint32_t rank = (uint32_t)strtoul(argv[2], NULL, 10);
        if (cs_coll_load(argv[1], h.h.nranks, rank, &s, err, sizeof err) != COLLSCHED_OK) return refused(err);
        print_section(s);
        cs_coll_free(s);
        return 0;
    }
    fprintf(stderr, "usage: coll_file_main FILE RANK | --header FILE | --check FILE | --all FILE | --each FILE... "
                    "| --prefixes FILE | --v10 FILE | --text\n");
    return 2;
}
