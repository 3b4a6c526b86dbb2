/* coll_file.c - read and check schedule files of format 1.2 (collectives 5..8: alltoall,
 * bcast, reduce, allreduce; docs/schedule-format.md "Version 1.2", coll.h).
 *
 * Like schedfile.c and inter_file.c this reader trusts nothing. Every size and offset
 * read from the file is checked against the file's real size before it is used (sums
 * with __builtin_add_overflow / __builtin_mul_overflow), every allocation is bounded by
 * the bytes actually read, every field is range-checked, and a failure is one line
 * "NAME: FIELD: expected ..., found ..." with nothing left allocated. No MPI here (the
 * fuzz target and the test tool link it alone, with schedfile.c, crc32.c, coll_check.c).
 *
 * The order of the checks (the first failure is reported):
 *   file size >= 152; magic; version_major 1; header CRC; collective 5..8 (else
 *   EMATCH); version_minor >= 2; header_bytes 152; nranks 1..2^24; nseg 1..65535; flags
 *   (bits 0 and 3 only); bytes_min <= bytes_max; extension CRC; extension reserved words 0;
 *   root < nranks (0 for alltoall and allreduce);
 *   [load: nranks = the communicator's size, rank < nranks (EMATCH)];
 *   the index inside the file; index CRC; sections contiguous (the first right after the
 *   index, each at least 12 bytes per op after the previous one, on 12-byte records,
 *   inside the file); total_ops = sum of nops; file size = 152 + 16 nranks + 12
 *   (total_ops + total_pieces);
 *   then the rank's own section: its CRC; each op in list order (its record inside the
 *   section, kind - recv-reduce only for reduce and allreduce -, flags known and valid for
 *   the kind - FIFO and CHAIN on sends, LOCAL_FIRST on recv-reduce -, reserved 0, peer < nranks and
 *   != rank, npieces <= 2^24 and inside the section), then each of its pieces (alltoall:
 *   src, dst < nranks, seg < nseg; else src = dst = 0, seg < nseg); the section fully
 *   consumed.
 * What the ops mean together (matching, holding, delivery, order, progress) is
 * coll_check.c's whole-program proof, not this reader's.
 */
#include "coll.h"
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define BASE_BYTES 128u          /* the header every schedule file starts with */
#define HEADER_BYTES 152u        /* + the 1.2 extension */
#define INDEX_ENTRY 16u
#define REC_BYTES 12u            /* an op record, a piece record */
#define MAX_RANKS (1u << 24)
#define MAX_SEGMENTS 65535u
#define MAX_PIECES (1u << 24)    /* per op */
#define KNOWN_FLAGS (CS_COLL_FLAG_FULL_DUPLEX | CS_COLL_FLAG_COMMUTATIVE_ONLY)
#define OP_FLAGS (CS_COLL_OP_FIFO | CS_COLL_OP_FENCE | CS_COLL_OP_LOCAL_FIRST | CS_COLL_OP_CHAIN)

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | ((uint64_t)rd32(p + 4) << 32); }

static int fail(int code, char *err, size_t len, const char *name, const char *field, const char *fmt, ...)
{
    if (err && len) {
        char what[256];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(what, sizeof what, fmt, ap);
        va_end(ap);
        snprintf(err, len, "%s: %s: %s", name, field, what);
    }
    return code;
}

/* Checksums guard against corruption; the fuzz build (COLLSCHED_FUZZING) skips them so
 * that the checks behind them are reached, as schedfile.c does. */
static int crc_ok(uint32_t computed, uint32_t stored)
{
#ifdef COLLSCHED_FUZZING
    (void)computed; (void)stored;
    return 1;
#else
    return computed == stored;
#endif
}

static const char *coll_name(uint32_t c)
{
    static const char *names[] = { "alltoall", "bcast", "reduce", "allreduce" };
    return cs_coll_is(c) ? names[c - CS_COLL_ALLTOALL] : "?";
}

/* ---- where the bytes come from: a regular file (pread) or memory ---- */

typedef struct source {
    const char *name;
    uint64_t size;
    int fd;                  /* >= 0: file */
    const uint8_t *mem;      /* else memory */
} source;

static int src_read(const source *s, uint64_t off, void *buf, size_t n)
{
    if (off > s->size || n > s->size - off) return -1;
    if (!s->mem) {
        for (size_t done = 0; done < n;) {
            ssize_t got = pread(s->fd, (char *)buf + done, n - done, (off_t)(off + done));
            if (got < 0 && errno == EINTR) continue;
            if (got <= 0) return -1;
            done += (size_t)got;
        }
        return 0;
    }
    if (n) memcpy(buf, s->mem + off, n);
    return 0;
}

/* A regular file only (a FIFO or a device could block forever): checked before open and
 * again on the descriptor, opened non-blocking. */
static int open_source(const char *path, source *s, char *err, size_t len)
{
    struct stat st;
    *s = (source){ path, 0, -1, NULL };
    if (stat(path, &st) != 0)
        return fail(COLLSCHED_EIO, err, len, path, "file", "cannot read (%s)", strerror(errno));
    if (!S_ISREG(st.st_mode))
        return fail(COLLSCHED_EIO, err, len, path, "file", "expected a regular file");
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        if (fd >= 0) close(fd);
        return fail(COLLSCHED_EIO, err, len, path, "file", "cannot read a regular file there");
    }
    *s = (source){ path, (uint64_t)st.st_size, fd, NULL };
    return COLLSCHED_OK;
}

static void close_source(source *s)
{
    if (s->fd >= 0) close(s->fd);
    s->fd = -1;
}

/* ---- header and extension ---- */

/* The 152 bytes in b (the file has at least that many). */
static int parse_header(const source *s, const uint8_t *b, cs_coll_header *ch, uint64_t *total_pieces,
                        char *err, size_t len)
{
    const char *n = s->name;
    collsched_header *h = &ch->h;
    if (memcmp(b, "COLLSCHD", 8) != 0)
        return fail(COLLSCHED_EFORMAT, err, len, n, "magic", "expected 'COLLSCHD': not a collsched schedule");
    cs_header_decode(b, h);
    if (h->version_major != 1)
        return fail(COLLSCHED_EFORMAT, err, len, n, "version_major", "expected 1, found %u", h->version_major);
    if (!crc_ok(cs_crc32(0, b, BASE_BYTES - 4), rd32(b + 124)))
        return fail(COLLSCHED_EFORMAT, err, len, n, "header_crc32", "header checksum mismatch (corrupt file)");
    if (!cs_coll_is(h->collective))
        return fail(COLLSCHED_EMATCH, err, len, n, "collective",
                    "expected 5 (alltoall), 6 (bcast), 7 (reduce) or 8 (allreduce), found %u", h->collective);
    if (h->version_minor < 2)
        return fail(COLLSCHED_EFORMAT, err, len, n, "version_minor",
                    "expected 2 or later for collective %u (%s), found %u", h->collective, coll_name(h->collective),
                    h->version_minor);
    if (rd32(b + 12) != HEADER_BYTES)
        return fail(COLLSCHED_EFORMAT, err, len, n, "header_bytes", "expected %u, found %u", HEADER_BYTES,
                    rd32(b + 12));
    if (h->nranks < 1 || h->nranks > MAX_RANKS)
        return fail(COLLSCHED_EFORMAT, err, len, n, "nranks", "expected 1..%u, found %u", MAX_RANKS, h->nranks);
    if (h->nseg < 1 || h->nseg > MAX_SEGMENTS)
        return fail(COLLSCHED_EFORMAT, err, len, n, "nseg", "expected 1..%u, found %u", MAX_SEGMENTS, h->nseg);
    if (h->flags & ~KNOWN_FLAGS)
        return fail(COLLSCHED_EFORMAT, err, len, n, "flags",
                    "expected bits 0 (full duplex) and 3 (commutative only) only, found %#x", h->flags);
    if (h->bytes_min > h->bytes_max)
        return fail(COLLSCHED_EFORMAT, err, len, n, "bytes_min", "expected bytes_min <= bytes_max, found %llu > %llu",
                    (unsigned long long)h->bytes_min, (unsigned long long)h->bytes_max);
    if (!crc_ok(cs_crc32(0, b + BASE_BYTES, 16), rd32(b + 144)))
        return fail(COLLSCHED_EFORMAT, err, len, n, "ext_crc32", "extension checksum mismatch (corrupt file)");
    if (rd32(b + 132) != 0)
        return fail(COLLSCHED_EFORMAT, err, len, n, "ext.reserved", "expected 0 at byte 132, found %u", rd32(b + 132));
    if (rd32(b + 148) != 0)
        return fail(COLLSCHED_EFORMAT, err, len, n, "ext.reserved", "expected 0 at byte 148, found %u", rd32(b + 148));
    ch->root = rd32(b + 128);
    *total_pieces = rd64(b + 136);
    if (ch->root >= h->nranks)
        return fail(COLLSCHED_EFORMAT, err, len, n, "root", "expected a rank below nranks=%u, found %u", h->nranks,
                    ch->root);
    if (ch->root != 0 && (h->collective == CS_COLL_ALLTOALL || h->collective == CS_COLL_ALLREDUCE))
        return fail(COLLSCHED_EFORMAT, err, len, n, "root", "expected 0 for %s (no root), found %u",
                    coll_name(h->collective), ch->root);
    return COLLSCHED_OK;
}

/* Reads and checks the 152 bytes (kept in head for the hash). */
static int read_header(const source *s, uint8_t head[HEADER_BYTES], cs_coll_header *h, uint64_t *total_pieces,
                       char *err, size_t len)
{
    memset(h, 0, sizeof *h);
    *total_pieces = 0;
    if (s->size < HEADER_BYTES || src_read(s, 0, head, HEADER_BYTES) != 0)
        return fail(COLLSCHED_EFORMAT, err, len, s->name, "header",
                    "expected at least %u bytes (header and extension), file has %llu", HEADER_BYTES,
                    (unsigned long long)s->size);
    return parse_header(s, head, h, total_pieces, err, len);
}

/* ---- index ---- */

/* Reads the index into *index (malloc'ed, also on failure: the caller frees it) and
 * checks it: CRC, contiguous sections inside the file, total_ops, total_pieces. */
static int read_index(const source *s, const cs_coll_header *ch, uint64_t total_pieces, uint8_t **index,
                      char *err, size_t len)
{
    const collsched_header *h = &ch->h;
    const char *n = s->name;
    uint64_t bytes = (uint64_t)INDEX_ENTRY * h->nranks;   /* nranks <= 2^24: no overflow */
    uint64_t first = HEADER_BYTES + bytes, prev_end = first, ops = 0;
    *index = NULL;
    if (s->size < first)
        return fail(COLLSCHED_EFORMAT, err, len, n, "index",
                    "truncated: expected %llu bytes for %u ranks, file has %llu",
                    (unsigned long long)first, h->nranks, (unsigned long long)s->size);
    if (!(*index = malloc((size_t)bytes)))
        return fail(COLLSCHED_ENOMEM, err, len, n, "memory", "allocation failed");
    if (src_read(s, HEADER_BYTES, *index, (size_t)bytes) != 0)
        return fail(COLLSCHED_EIO, err, len, n, "index", "cannot read %llu bytes", (unsigned long long)bytes);
    if (!crc_ok(cs_crc32(0, *index, (size_t)bytes), h->index_crc32))
        return fail(COLLSCHED_EFORMAT, err, len, n, "index_crc32", "index checksum mismatch (corrupt file)");
    for (uint32_t r = 0; r < h->nranks; r++) {
        const uint8_t *e = *index + (size_t)INDEX_ENTRY * r;
        uint64_t off = rd64(e), nops = rd32(e + 8);
        if (r == 0 && off != first)
            return fail(COLLSCHED_EFORMAT, err, len, n, "index.section_offset",
                        "rank 0: expected %llu (right after the index), found %llu", (unsigned long long)first,
                        (unsigned long long)off);
        if (off < prev_end)
            return fail(COLLSCHED_EFORMAT, err, len, n, "index.section_offset",
                        "rank %u: expected at least %llu (after rank %u's %u ops: sections contiguous), found %llu",
                        r, (unsigned long long)prev_end, r - 1, rd32(e - INDEX_ENTRY + 8), (unsigned long long)off);
        if (off > s->size)
            return fail(COLLSCHED_EFORMAT, err, len, n, "index.section_offset",
                        "rank %u: expected at most the file size %llu (truncated file), found %llu", r,
                        (unsigned long long)s->size, (unsigned long long)off);
        if ((off - first) % REC_BYTES != 0)
            return fail(COLLSCHED_EFORMAT, err, len, n, "index.section_offset",
                        "rank %u: expected %llu + a multiple of 12 (sections of 12-byte records), found %llu", r,
                        (unsigned long long)first, (unsigned long long)off);
        if (__builtin_add_overflow(off, REC_BYTES * nops, &prev_end) || __builtin_add_overflow(ops, nops, &ops))
            prev_end = UINT64_MAX;          /* (not with off <= size: refused below as outside the file) */
    }
    if (prev_end > s->size)
        return fail(COLLSCHED_EFORMAT, err, len, n, "index.nops",
                    "rank %u: expected its ops inside the file (%llu bytes), found them ending at %llu",
                    h->nranks - 1, (unsigned long long)s->size, (unsigned long long)prev_end);
    if (ops != h->total_ops)
        return fail(COLLSCHED_EFORMAT, err, len, n, "total_ops", "expected %llu (the index's sum), found %llu",
                    (unsigned long long)ops, (unsigned long long)h->total_ops);
    uint64_t recs, want;
    if (__builtin_add_overflow(ops, total_pieces, &recs) || __builtin_mul_overflow(recs, (uint64_t)REC_BYTES, &want)
        || __builtin_add_overflow(want, first, &want))
        return fail(COLLSCHED_EFORMAT, err, len, n, "total_pieces",
                    "expected at most %llu (what the file's size leaves), found %llu",
                    (unsigned long long)((s->size - first) / REC_BYTES - ops), (unsigned long long)total_pieces);
    if (want != s->size)
        return fail(COLLSCHED_EFORMAT, err, len, n, "sections",
                    "expected file size %llu (%llu + 12 bytes for each of %llu ops and %llu pieces), found %llu%s",
                    (unsigned long long)want, (unsigned long long)first, (unsigned long long)ops,
                    (unsigned long long)total_pieces, (unsigned long long)s->size,
                    s->size < want ? " (truncated)" : " (trailing bytes)");
    return COLLSCHED_OK;
}

/* ---- one rank's section ---- */

/* Op i's fields (its record at raw; `room` bytes of the section follow the record once
 * the records of the ops after it are set aside). */
static int check_op(const source *s, const cs_coll_header *ch, uint32_t rank, uint32_t i, const uint8_t *raw,
                    uint64_t room, cs_coll_op *op, char *err, size_t len)
{
    const collsched_header *h = &ch->h;
    char field[96];
    op->peer = rd32(raw);
    op->kind = raw[4];
    op->flags = raw[5];
    op->npieces = rd32(raw + 8);
    int reduces = h->collective == CS_COLL_REDUCE || h->collective == CS_COLL_ALLREDUCE;
#define BAD(fld, ...) (snprintf(field, sizeof field, "rank %u op %u %s", rank, i, fld), \
                       fail(COLLSCHED_EFORMAT, err, len, s->name, field, __VA_ARGS__))
    if (op->kind > CS_COLL_RECV_REDUCE || (op->kind == CS_COLL_RECV_REDUCE && !reduces))
        return reduces ? BAD("kind", "expected 0 (send), 1 (recv) or 2 (recv-reduce), found %u", op->kind)
                       : BAD("kind", "expected 0 (send) or 1 (recv) for %s, found %u", coll_name(h->collective),
                             op->kind);
    if (op->flags & ~OP_FLAGS)
        return BAD("flags", "expected bits 0 (FIFO), 1 (FENCE), 2 (LOCAL_FIRST) and 3 (CHAIN) only, found %#x",
                   op->flags);
    if ((op->flags & (CS_COLL_OP_FIFO | CS_COLL_OP_CHAIN)) && op->kind != CS_COLL_SEND)
        return BAD("flags", "expected the %s bit on sends only, found it on a %s",
                   (op->flags & CS_COLL_OP_FIFO) ? "FIFO" : "CHAIN", op->kind == CS_COLL_RECV ? "recv" : "recv-reduce");
    if ((op->flags & CS_COLL_OP_LOCAL_FIRST) && op->kind != CS_COLL_RECV_REDUCE)
        return BAD("flags", "expected the LOCAL_FIRST bit on recv-reduce only, found it on a %s",
                   op->kind == CS_COLL_SEND ? "send" : "recv");
    if (rd16(raw + 6) != 0) return BAD("reserved", "expected 0, found %u", rd16(raw + 6));
    if (op->peer >= h->nranks) return BAD("peer", "expected a rank below %u, found %u", h->nranks, op->peer);
    if (op->peer == rank) return BAD("peer", "expected a rank other than the op's own (%u)", rank);
    if (op->npieces > MAX_PIECES) return BAD("npieces", "expected at most %u, found %u", MAX_PIECES, op->npieces);
    if ((uint64_t)op->npieces * REC_BYTES > room)
        return BAD("npieces", "expected at most %llu (what is left of the section), found %u",
                   (unsigned long long)(room / REC_BYTES), op->npieces);
#undef BAD
    return COLLSCHED_OK;
}

static int check_piece(const source *s, const cs_coll_header *ch, uint32_t rank, uint32_t i, uint32_t k,
                       const uint8_t *raw, cs_coll_piece *p, char *err, size_t len)
{
    const collsched_header *h = &ch->h;
    char field[112];
    p->src = rd32(raw);
    p->dst = rd32(raw + 4);
    p->seg = rd32(raw + 8);
#define BAD(fld, ...) (snprintf(field, sizeof field, "rank %u op %u piece %u %s", rank, i, k, fld), \
                       fail(COLLSCHED_EFORMAT, err, len, s->name, field, __VA_ARGS__))
    if (h->collective == CS_COLL_ALLTOALL) {
        if (p->src >= h->nranks) return BAD("src", "expected a rank below %u, found %u", h->nranks, p->src);
        if (p->dst >= h->nranks) return BAD("dst", "expected a rank below %u, found %u", h->nranks, p->dst);
    } else {
        if (p->src != 0) return BAD("src", "expected 0 for %s, found %u", coll_name(h->collective), p->src);
        if (p->dst != 0) return BAD("dst", "expected 0 for %s, found %u", coll_name(h->collective), p->dst);
    }
    if (p->seg >= h->nseg) return BAD("seg", "expected a segment below nseg=%u, found %u", h->nseg, p->seg);
#undef BAD
    return COLLSCHED_OK;
}

/* The ops and pieces of a section image raw[0 .. bytes) (bytes >= 12 nops: the index). */
static int parse_section(const source *s, const cs_coll_header *ch, uint32_t rank, const uint8_t *raw,
                         uint64_t bytes, cs_coll_section *sc, char *err, size_t len)
{
    uint64_t pos = 0, maxp = bytes / REC_BYTES - sc->nops;  /* pieces: at most the other records */
    sc->ops = calloc(sc->nops ? sc->nops : 1, sizeof *sc->ops);
    sc->pieces = calloc(maxp ? (size_t)maxp : 1, sizeof *sc->pieces);
    if (!sc->ops || !sc->pieces) return fail(COLLSCHED_ENOMEM, err, len, s->name, "memory", "allocation failed");
    for (uint32_t i = 0; i < sc->nops; i++) {
        cs_coll_op *op = &sc->ops[i];
        /* the records of ops i+1.. still need their 12 bytes each */
        uint64_t room = bytes - pos - REC_BYTES * ((uint64_t)sc->nops - i);
        int rc = check_op(s, ch, rank, i, raw + pos, room, op, err, len);
        if (rc) return rc;
        pos += REC_BYTES;
        op->first = sc->npieces;
        for (uint32_t k = 0; k < op->npieces; k++, pos += REC_BYTES)
            if ((rc = check_piece(s, ch, rank, i, k, raw + pos, &sc->pieces[sc->npieces++], err, len))) return rc;
    }
    if (pos != bytes)
        return fail(COLLSCHED_EFORMAT, err, len, s->name, "section",
                    "rank %u: expected its ops and pieces to fill its %llu bytes, found %llu bytes left over", rank,
                    (unsigned long long)bytes, (unsigned long long)(bytes - pos));
    (void)maxp;
    return COLLSCHED_OK;
}

/* Section `rank`: where the index puts it, its CRC, its ops and pieces. */
static int read_section(const source *s, const cs_coll_header *ch, const uint8_t *index, uint64_t hash,
                        uint32_t rank, cs_coll_section **out, char *err, size_t len)
{
    const uint8_t *e = index + (size_t)INDEX_ENTRY * rank;
    uint64_t off = rd64(e);
    uint64_t end = rank + 1 < ch->h.nranks ? rd64(e + INDEX_ENTRY) : s->size;  /* read_index: off <= end <= size */
    uint64_t bytes = end - off;
    *out = NULL;
    cs_coll_section *sc = calloc(1, sizeof *sc);
    uint8_t *raw = malloc(bytes ? (size_t)bytes : 1);
    int rc = COLLSCHED_OK;
    if (!sc || !raw) {
        rc = fail(COLLSCHED_ENOMEM, err, len, s->name, "memory", "allocation failed");
    } else {
        sc->hdr = *ch;
        sc->rank = rank;
        sc->nops = rd32(e + 8);
        sc->hash = hash;
        if (sc->nops > (uint32_t)INT32_MAX)
            rc = fail(COLLSCHED_EFORMAT, err, len, s->name, "index.nops", "rank %u: expected at most %d ops, found %u",
                      rank, INT32_MAX, sc->nops);
        else if (src_read(s, off, raw, (size_t)bytes) != 0)
            rc = fail(COLLSCHED_EIO, err, len, s->name, "section", "rank %u: cannot read %llu bytes", rank,
                      (unsigned long long)bytes);
        else if (!crc_ok(cs_crc32(0, raw, (size_t)bytes), rd32(e + 12)))
            rc = fail(COLLSCHED_EFORMAT, err, len, s->name, "section_crc32",
                      "rank %u: section checksum mismatch (corrupt file)", rank);
        else
            rc = parse_section(s, ch, rank, raw, bytes, sc, err, len);
    }
    free(raw);
    if (rc != COLLSCHED_OK) {
        cs_coll_free(sc);
        return rc;
    }
    *out = sc;
    return COLLSCHED_OK;
}

/* ---- the entry points ---- */

/* Header, extension, index; leaves the index in *index (the caller frees it). */
static int read_front(const source *s, cs_coll_header *h, uint8_t **index, uint64_t *hash, char *err, size_t len)
{
    uint8_t head[HEADER_BYTES];
    uint64_t total_pieces;
    *index = NULL;
    int rc = read_header(s, head, h, &total_pieces, err, len);
    if (rc == COLLSCHED_OK) rc = read_index(s, h, total_pieces, index, err, len);
    if (rc == COLLSCHED_OK)
        *hash = cs_hash64(cs_hash64(0, head, HEADER_BYTES), *index, (size_t)INDEX_ENTRY * h->h.nranks);
    return rc;
}

static int load(const source *s, uint32_t nranks, uint32_t rank, cs_coll_section **out, char *err, size_t len)
{
    cs_coll_header h;
    uint8_t head[HEADER_BYTES], *index = NULL;
    uint64_t total_pieces, hash = 0;
    *out = NULL;
    int rc = read_header(s, head, &h, &total_pieces, err, len);
    if (rc == COLLSCHED_OK && h.h.nranks != nranks)
        rc = fail(COLLSCHED_EMATCH, err, len, s->name, "nranks", "expected %u (communicator size), found %u", nranks,
                  h.h.nranks);
    if (rc == COLLSCHED_OK && rank >= nranks)
        rc = fail(COLLSCHED_EMATCH, err, len, s->name, "rank", "expected below %u, found %u", nranks, rank);
    if (rc == COLLSCHED_OK) rc = read_index(s, &h, total_pieces, &index, err, len);
    if (rc == COLLSCHED_OK) {
        hash = cs_hash64(cs_hash64(0, head, HEADER_BYTES), index, (size_t)INDEX_ENTRY * nranks);
        rc = read_section(s, &h, index, hash, rank, out, err, len);
    }
    free(index);
    return rc;
}

int cs_coll_read_header(const char *path, cs_coll_header *h, char *err, size_t errlen)
{
    source s;
    uint8_t head[HEADER_BYTES];
    uint64_t total_pieces;
    memset(h, 0, sizeof *h);
    int rc = open_source(path, &s, err, errlen);
    if (rc) return rc;
    rc = read_header(&s, head, h, &total_pieces, err, errlen);
    close_source(&s);
    return rc;
}

int cs_coll_load(const char *path, uint32_t nranks, uint32_t rank, cs_coll_section **out, char *err, size_t errlen)
{
    source s;
    *out = NULL;
    int rc = open_source(path, &s, err, errlen);
    if (rc) return rc;
    rc = load(&s, nranks, rank, out, err, errlen);
    close_source(&s);
    return rc;
}

int cs_coll_load_memory(const void *data, size_t size, const char *name, uint32_t nranks, uint32_t rank,
                        cs_coll_section **out, char *err, size_t errlen)
{
    source s = { name ? name : "<memory>", data ? size : 0, -1, data ? data : (const uint8_t *)"" };
    return load(&s, nranks, rank, out, err, errlen);
}

/* Every section of an open source (nranks 0: as many as the file has). */
static int load_all(const source *s, uint32_t nranks, cs_coll_section ***out, uint32_t *n, char *err, size_t len)
{
    cs_coll_header h;
    uint8_t *index = NULL;
    uint64_t hash = 0;
    cs_coll_section **secs = NULL;
    *out = NULL;
    *n = 0;
    int rc = read_front(s, &h, &index, &hash, err, len);
    if (rc == COLLSCHED_OK && nranks && h.h.nranks != nranks)
        rc = fail(COLLSCHED_EMATCH, err, len, s->name, "nranks", "expected %u (communicator size), found %u", nranks,
                  h.h.nranks);
    if (rc == COLLSCHED_OK && !(secs = calloc(h.h.nranks, sizeof *secs)))
        rc = fail(COLLSCHED_ENOMEM, err, len, s->name, "memory", "allocation failed");
    for (uint32_t r = 0; rc == COLLSCHED_OK && r < h.h.nranks; r++)
        rc = read_section(s, &h, index, hash, r, &secs[r], err, len);
    free(index);
    if (rc != COLLSCHED_OK) {
        cs_coll_free_all(secs, secs ? h.h.nranks : 0);
        return rc;
    }
    *out = secs;
    *n = h.h.nranks;
    return COLLSCHED_OK;
}

int cs_coll_load_all(const char *path, uint32_t nranks, cs_coll_section ***out, char *err, size_t errlen)
{
    source s;
    uint32_t n;
    *out = NULL;
    int rc = open_source(path, &s, err, errlen);
    if (rc) return rc;
    rc = load_all(&s, nranks, out, &n, err, errlen);
    close_source(&s);
    return rc;
}

void cs_coll_free_all(cs_coll_section **secs, uint32_t nranks)
{
    for (uint32_t r = 0; secs && r < nranks; r++) cs_coll_free(secs[r]);
    free(secs);
}

/* Every section of an open source, then the whole-program proof. */
static int check_all(const source *s, char *err, size_t len)
{
    cs_coll_section **secs;
    uint32_t n;
    int rc = load_all(s, 0, &secs, &n, err, len);
    if (rc == COLLSCHED_OK) {
        char why[400];
        int v = cs_coll_check_whole((const cs_coll_section *const *)secs, n, why, sizeof why);
        if (v == CS_COLL_NOMEM) rc = fail(COLLSCHED_ENOMEM, err, len, s->name, "whole schedule", "%s", why);
        else if (v != 0) rc = fail(COLLSCHED_EFORMAT, err, len, s->name, "whole schedule", "%s", why);
    }
    cs_coll_free_all(secs, n);
    return rc;
}

int cs_coll_check_file(const char *path, char *err, size_t errlen)
{
    source s;
    int rc = open_source(path, &s, err, errlen);
    if (rc) return rc;
    rc = check_all(&s, err, errlen);
    close_source(&s);
    return rc;
}

int cs_coll_check_memory(const void *data, size_t size, const char *name, char *err, size_t errlen)
{
    source s = { name ? name : "<memory>", data ? size : 0, -1, data ? data : (const uint8_t *)"" };
    return check_all(&s, err, errlen);
}

void cs_coll_free(cs_coll_section *s)
{
    if (!s) return;
    free(s->ops);
    free(s->pieces);
    free(s);
}
