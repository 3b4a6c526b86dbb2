/* compact_load.c - a compact description (docs/compact.md) adopted as a schedule.
 *
 * The record (56 bytes, or a version-2 record with a tail) is decoded by compact_gen.c, checked against the call like an
 * explicit file's header, and this rank's list generated (count, allocate, generate) and
 * handed to cs_schedule_adopt: the same dataflow checks and dep/prev links as a section
 * read from a file. cs_load_file and cs_read_any_header take either form by path (the
 * explicit reader, schedfile.c, stays alone: the fuzz target and tools link it without
 * this file). No MPI here: comm_state.c does the ranks' agreement, with
 * cs_compact_link_sum in place of the whole-schedule gather (docs/compact.md, "The
 * loader"). */
#include "internal.h"
#include "compact_gen.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* compact_gen.h's algorithm codes, named as compact/desc.py ALGORITHMS names them. */
static const char *const algorithm_names[] = {
    "?", "ring", "bruck", "rd", "spreading", "nex", "lnbc", "magpie", "mpichg2", "hier", "bdr",
    "bslb"
};
_Static_assert(sizeof algorithm_names / sizeof *algorithm_names == CS_COMPACT_LAST_CODE + 1,
               "a name for every algorithm code");

int cs_is_compact_record(const void *buf, size_t len)
{
    return len >= 8 && memcmp(buf, CS_COMPACT_MAGIC, 8) == 0;
}

int cs_is_compact(const collsched_header *h)
{
    return strcmp(h->compiler_version, CS_COMPACT_MARK) == 0;
}

int cs_compact_header(const void *rec, size_t len, const char *name, collsched_header *h,
                      char *err, size_t errlen)
{
    cs_compact_desc d;
    char why[256];
    memset(h, 0, sizeof *h);
    if (cs_compact_decode(rec, len, &d, why, sizeof why) != CS_COMPACT_OK) {
        if (err && errlen) snprintf(err, errlen, "%s: %s", name, why);
        return COLLSCHED_EFORMAT;
    }
    h->version_major = 1;
    h->collective = 1;
    h->nranks = d.nranks;
    h->nseg = d.nseg;
    /* The flags an explicit file of the same schedule carries: the duplex as described,
     * and serial for bdr and bslb (their registry entries are serial: the paper runs
     * them with blocking sends, one receive at a time; docs/semantics.md). */
    h->flags = (d.flags & CS_COMPACT_FULL_DUPLEX) ? COLLSCHED_FLAG_FULL_DUPLEX : 0;
    if (d.algorithm == CS_COMPACT_BDR || d.algorithm == CS_COMPACT_BSLB)
        h->flags |= COLLSCHED_FLAG_SERIAL;
    h->bytes_min = d.bytes_min;
    h->bytes_max = d.bytes_max;
    snprintf(h->algorithm, sizeof h->algorithm, "%s", algorithm_names[d.algorithm]);
    snprintf(h->compiler_version, sizeof h->compiler_version, "%s", CS_COMPACT_MARK);
    /* Explicit headers carry the compiler's input hash; here the record is the input. */
    uint64_t hv = cs_hash64(0, rec, len);
    memcpy(h->input_hash, &hv, sizeof hv);
    /* total_ops stays 0: the sum over ranks would cost O(P) counts, and nothing needs it.
     * The record's CRC stands in for the index's: the directory scan hashes it. */
    h->index_crc32 = cs_crc32(0, rec, len);
    return COLLSCHED_OK;
}

int cs_compact_load(const void *rec, size_t len, const char *name, uint32_t nranks,
                    uint32_t rank, collsched_schedule **out, char *err, size_t errlen)
{
    collsched_header h;
    cs_compact_desc d;
    char why[256];
    *out = NULL;
    int rc = cs_compact_header(rec, len, name, &h, err, errlen);
    if (rc != COLLSCHED_OK) return rc;
    cs_compact_decode(rec, len, &d, why, sizeof why); /* valid: cs_compact_header said so */
    if (h.nranks != nranks) {
        if (err && errlen) snprintf(err, errlen, "%s: nranks: expected %u (communicator size), found %u",
                                    name, nranks, h.nranks);
        return COLLSCHED_EMATCH;
    }
    if (rank >= nranks) {
        if (err && errlen) snprintf(err, errlen, "%s: rank: expected below %u, found %u", name, nranks, rank);
        return COLLSCHED_EMATCH;
    }
    uint64_t n = 0;
    rc = cs_compact_generate(&d, rank, NULL, 0, &n, why, sizeof why);
    if (rc == CS_COMPACT_EDESC) {
        if (err && errlen) snprintf(err, errlen, "%s: %s", name, why);
        return COLLSCHED_EFORMAT;
    }
    /* the op index is an int32 (dep, prev): the explicit reader's bound */
    if (n > (uint64_t)INT32_MAX / 2) {
        if (err && errlen) snprintf(err, errlen, "%s: rank %u: expected at most %d ops, the description gives %llu",
                                    name, rank, INT32_MAX / 2, (unsigned long long)n);
        return COLLSCHED_EFORMAT;
    }
    cs_compact_op *raw = malloc((size_t)(n ? n : 1) * sizeof *raw);
    collsched_op *ops = calloc((size_t)(n ? n : 1), sizeof *ops);
    uint64_t got = 0;
    if (!raw || !ops) {
        free(raw); free(ops);
        if (err && errlen) snprintf(err, errlen, "%s: memory: cannot allocate %llu ops", name, (unsigned long long)n);
        return COLLSCHED_ENOMEM;
    }
    if (cs_compact_generate(&d, rank, raw, n, &got, why, sizeof why) != CS_COMPACT_OK || got != n) {
        free(raw); free(ops);
        if (err && errlen) snprintf(err, errlen, "%s: rank %u: generator: %s", name, rank,
                                    why[0] ? why : "count changed between two calls");
        return COLLSCHED_EFORMAT;
    }
    for (uint64_t i = 0; i < n; i++) {
        /* the generator is proven (docs/compact.md), yet the executor indexes by these */
        if (raw[i].peer >= nranks || raw[i].peer == rank || raw[i].origin >= nranks
            || raw[i].segment >= d.nseg || raw[i].kind > 1 || raw[i].flags > 3) {
            free(raw); free(ops);
            if (err && errlen) snprintf(err, errlen, "%s: rank %u op %llu: generator gave an op outside "
                                        "the description's ranks and segments", name, rank, (unsigned long long)i);
            return COLLSCHED_EFORMAT;
        }
        ops[i].peer = raw[i].peer;
        ops[i].origin = raw[i].origin;
        ops[i].segment = raw[i].segment;
        ops[i].kind = raw[i].kind;
        ops[i].phase = raw[i].flags & 1u;
        ops[i].fifo = (raw[i].flags >> 1) & 1u;
    }
    free(raw);
    collsched_schedule *sc;
    rc = cs_schedule_adopt(nranks, d.nseg, rank, ops, (uint32_t)n, name, &sc, err, errlen);
    if (rc != COLLSCHED_OK) return rc;
    sc->hdr = h;
    sc->hash = cs_hash64(0, rec, len);
    *out = sc;
    return COLLSCHED_OK;
}

/* splitmix64's finaliser: spreads a message's fields over 64 bits. */
static uint64_t mix(uint64_t x)
{
    x ^= x >> 30; x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27; x *= 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static uint64_t message_key(uint64_t src, uint64_t dst, uint64_t k, uint64_t origin, uint64_t seg)
{
    return mix(mix(mix(src << 24 | dst) ^ k) ^ (origin << 16 | seg));
}

int cs_compact_link_sum(const collsched_schedule *s, uint32_t nranks, uint64_t *sum)
{
    /* k-th send to and k-th receive from each peer: 2 counters per rank of the communicator */
    uint32_t *seq = calloc((size_t)nranks * 2, sizeof *seq);
    if (!seq) return -1;
    uint64_t acc = 0;
    for (uint32_t i = 0; i < s->nops; i++) {
        const collsched_op *op = &s->ops[i];
        if (op->kind == COLLSCHED_SEND)
            acc += message_key(s->rank, op->peer, seq[2u * op->peer]++, op->origin, op->segment);
        else
            acc -= message_key(op->peer, s->rank, seq[2u * op->peer + 1]++, op->origin, op->segment);
    }
    free(seq);
    *sum = acc;
    return 0;
}

/* Reads `path` if it holds a compact record: 1 with the record in *rec (malloc'd, the
 * caller frees) and its length in *len; 0 when it is anything else (the explicit reader
 * then opens it and says what is wrong); -1 with one line in err for a file with the
 * compact magic that cannot be a record (a size no version has, or an unreadable file).
 * Only a regular file is opened (non-blocking, type checked again on the descriptor), as
 * schedfile.c does; the size is taken from fstat and the read must deliver all of it. */
static int read_record(const char *path, uint8_t **rec, size_t *len, char *err, size_t errlen)
{
    struct stat st;
    *rec = NULL;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < 8) return 0;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) return 0;
    uint8_t head[8];
    int rc = 0;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= 8 &&
        pread(fd, head, 8, 0) == 8 && cs_is_compact_record(head, 8)) {
        uint64_t size = (uint64_t)st.st_size;
        uint8_t *buf = size >= CS_COMPACT_DESC_BYTES && size <= CS_COMPACT_MAX_DESC_BYTES
                       ? malloc((size_t)size) : NULL;
        size_t got = 0;
        while (buf && got < size) {
            ssize_t n = pread(fd, buf + got, (size_t)size - got, (off_t)got);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) break;
            got += (size_t)n;
        }
        if (!buf || got != size) {
            if (err && errlen)
                snprintf(err, errlen, "%s: compact description: size: expected %u .. %u bytes "
                         "read whole, found %llu", path, CS_COMPACT_DESC_BYTES,
                         CS_COMPACT_MAX_DESC_BYTES, (unsigned long long)size);
            free(buf);
            rc = -1;
        } else {
            *rec = buf;
            *len = got;
            rc = 1;
        }
    }
    close(fd);
    return rc;
}

int cs_load_file(const char *path, uint32_t nranks, uint32_t rank, collsched_schedule **out,
                 char *err, size_t errlen)
{
    uint8_t *rec = NULL;
    size_t len = 0;
    *out = NULL;
    int c = read_record(path, &rec, &len, err, errlen);
    if (c < 0) return COLLSCHED_EFORMAT;
    if (!c) return collsched_load(path, nranks, rank, out, err, errlen);
    int rc = cs_compact_load(rec, len, path, nranks, rank, out, err, errlen);
    free(rec);
    return rc;
}

int cs_read_any_header(const char *path, collsched_header *h, char *err, size_t errlen)
{
    uint8_t *rec = NULL;
    size_t len = 0;
    int c = read_record(path, &rec, &len, err, errlen);
    if (c < 0) return COLLSCHED_EFORMAT;
    if (!c) return cs_read_header_file(path, h, err, errlen);
    int rc = cs_compact_header(rec, len, path, h, err, errlen);
    free(rec);
    return rc;
}
