/* inter_file.c - read and check intergroup schedule files (collectives 3 and 4, version 1.1).
 *
 * Layout: docs/schedule-format.md#intergroup-schedules: the 128-byte header of every
 * schedule file, the groups extension (p, q, every rank's block bytes, its own CRC), the
 * index, then sections of 24-byte range operations. Like schedfile.c this reader trusts
 * nothing: every offset is checked against the file size before use, allocations are
 * bounded by it, every field is range-checked, and a failure is one line naming the file,
 * the field and what was expected. The allgather reader (schedfile.c) is left as it is: it
 * refuses these files by their collective. No MPI here.
 */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define HEADER_BYTES 128u
#define INDEX_ENTRY 16u
#define OP_BYTES 24u
#define MAX_RANKS (1u << 24)

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | ((uint64_t)rd32(p + 4) << 32); }

/* Checksums guard against corruption; a fuzz build (COLLSCHED_FUZZING) skips them so that
 * the checks behind them are reached, as schedfile.c does. */
static int crc_equal(uint32_t computed, uint32_t stored)
{
#ifdef COLLSCHED_FUZZING
    (void)computed; (void)stored;
    return 1;
#else
    return computed == stored;
#endif
}

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

/* An open regular file (never a FIFO or device: they could block forever). */
typedef struct file {
    const char *name;
    int fd;
    uint64_t size;
} file;

static int open_file(const char *path, file *f, char *err, size_t len)
{
    struct stat st;
    f->name = path;
    f->fd = -1;
    if (stat(path, &st) != 0)
        return fail(COLLSCHED_EIO, err, len, path, "file", "cannot read (%s)", strerror(errno));
    if (!S_ISREG(st.st_mode))
        return fail(COLLSCHED_EIO, err, len, path, "file", "expected a regular file");
    f->fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (f->fd < 0 || fstat(f->fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        if (f->fd >= 0) close(f->fd);
        f->fd = -1;
        return fail(COLLSCHED_EIO, err, len, path, "file", "cannot read a regular file there");
    }
    f->size = (uint64_t)st.st_size;
    return COLLSCHED_OK;
}

static int read_at(const file *f, uint64_t off, void *buf, size_t n)
{
    if (off > f->size || n > f->size - off) return -1;
    for (size_t done = 0; done < n;) {
        ssize_t got = pread(f->fd, (char *)buf + done, n - done, (off_t)(off + done));
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return -1;
        done += (size_t)got;
    }
    return 0;
}

void cs_inter_header_free(cs_inter_header *h)
{
    free(h->blocks);
    h->blocks = NULL;
}

void cs_inter_section_free(cs_inter_section *s)
{
    if (!s) return;
    free(s->ops);
    free(s->deps);
    free(s);
}

uint64_t cs_inter_block_offset(const cs_inter_header *h, uint32_t rank)
{
    uint32_t first = rank < h->p ? 0 : h->p;
    uint64_t off = 0;
    for (uint32_t r = first; r < rank; r++) off += h->blocks[r];
    return off;
}

/* The 128 bytes: the fields an intergroup file must have. */
static int parse_head(const file *f, const uint8_t *b, cs_inter_header *h, char *err, size_t len)
{
    const char *n = f->name;
    collsched_header *c = &h->h;
    if (memcmp(b, "COLLSCHD", 8) != 0)
        return fail(COLLSCHED_EFORMAT, err, len, n, "magic", "expected 'COLLSCHD': not a collsched schedule");
    cs_header_decode(b, c); /* the 128 bytes every schedule file starts with (schedfile.c) */
    if (c->version_major != 1)
        return fail(COLLSCHED_EFORMAT, err, len, n, "version_major", "expected 1, found %u", c->version_major);
    if (!crc_equal(cs_crc32(0, b, HEADER_BYTES - 4), rd32(b + 124)))
        return fail(COLLSCHED_EFORMAT, err, len, n, "header_crc32", "header checksum mismatch (corrupt file)");
    h->header_bytes = rd32(b + 12);
    if (c->collective != CS_INTER_ALLGATHER && c->collective != CS_INTER_ALLGATHERV)
        return fail(COLLSCHED_EMATCH, err, len, n, "collective",
                    "expected 3 (inter-allgather) or 4 (inter-allgatherv), found %u", c->collective);
    if (c->nranks < 2 || c->nranks > MAX_RANKS)
        return fail(COLLSCHED_EFORMAT, err, len, n, "nranks", "expected 2..%u (both groups), found %u",
                    MAX_RANKS, c->nranks);
    uint64_t hb = 144 + 8 * (uint64_t)c->nranks;
    if (h->header_bytes != hb)
        return fail(COLLSCHED_EFORMAT, err, len, n, "header_bytes", "expected %llu for %u ranks, found %u",
                    (unsigned long long)hb, c->nranks, h->header_bytes);
    if (c->nseg != 1)
        return fail(COLLSCHED_EFORMAT, err, len, n, "nseg", "expected 1 for an intergroup schedule, found %u", c->nseg);
    if (c->flags & ~1u)
        return fail(COLLSCHED_EFORMAT, err, len, n, "flags", "expected bit 0 only for an intergroup schedule, found %#x",
                    c->flags);
    if (f->size < hb)
        return fail(COLLSCHED_EFORMAT, err, len, n, "groups", "truncated: expected %llu header bytes, file has %llu",
                    (unsigned long long)hb, (unsigned long long)f->size);
    return COLLSCHED_OK;
}

/* The groups extension (bytes 128 .. header_bytes). */
static int parse_groups(const file *f, const uint8_t *ext, cs_inter_header *h, char *err, size_t len)
{
    const char *n = f->name;
    uint32_t N = h->h.nranks;
    h->p = rd32(ext);
    h->q = rd32(ext + 4);
    if (h->p < 1 || h->q < 1 || (uint64_t)h->p + h->q != N)
        return fail(COLLSCHED_EFORMAT, err, len, n, "groups.p", "expected p, q >= 1 with p + q = nranks = %u, found %u, %u",
                    N, h->p, h->q);
    if (!crc_equal(cs_crc32(0, ext, 8 + 8 * (size_t)N), rd32(ext + 8 + 8 * (size_t)N)))
        return fail(COLLSCHED_EFORMAT, err, len, n, "groups_crc32", "groups extension checksum mismatch (corrupt file)");
    if (rd32(ext + 12 + 8 * (size_t)N) != 0)
        return fail(COLLSCHED_EFORMAT, err, len, n, "groups.reserved", "expected 0");
    if (!(h->blocks = malloc(sizeof *h->blocks * N))) return fail(COLLSCHED_ENOMEM, err, len, n, "memory", "allocation failed");
    uint64_t lo = UINT64_MAX, hi = 0;
    h->total[0] = h->total[1] = 0;
    for (uint32_t r = 0; r < N; r++) {
        uint64_t k = h->blocks[r] = rd64(ext + 8 + 8 * (size_t)r);
        int g = r < h->p ? CS_GROUP_A : CS_GROUP_B;
        if (k > (1ull << 62) || h->total[g] + k > (1ull << 62))
            return fail(COLLSCHED_EFORMAT, err, len, n, "groups.block_bytes", "expected below 2^62 bytes per group");
        h->total[g] += k;
        if (k < lo) lo = k;
        if (k > hi) hi = k;
        if (h->h.collective == CS_INTER_ALLGATHER && r != 0 && r != h->p && k != h->blocks[r - 1])
            return fail(COLLSCHED_EFORMAT, err, len, n, "groups.block_bytes",
                        "expected one block size per group for inter-allgather (rank %u)", r);
    }
    if (h->h.bytes_min != lo || h->h.bytes_max != hi)
        return fail(COLLSCHED_EFORMAT, err, len, n, "bytes_min", "expected the smallest and largest block, %llu and %llu",
                    (unsigned long long)lo, (unsigned long long)hi);
    return COLLSCHED_OK;
}

/* Header and groups extension of an open file; h->hash covers both. */
static int read_header(const file *f, cs_inter_header *h, char *err, size_t len)
{
    uint8_t head[HEADER_BYTES];
    memset(h, 0, sizeof *h);
    if (f->size < HEADER_BYTES || read_at(f, 0, head, HEADER_BYTES) != 0)
        return fail(COLLSCHED_EFORMAT, err, len, f->name, "header", "expected at least %u bytes, file has %llu",
                    HEADER_BYTES, (unsigned long long)f->size);
    int rc = parse_head(f, head, h, err, len);
    if (rc) return rc;
    size_t ext_bytes = h->header_bytes - HEADER_BYTES;
    uint8_t *ext = malloc(ext_bytes);
    if (!ext) return fail(COLLSCHED_ENOMEM, err, len, f->name, "memory", "allocation failed");
    rc = read_at(f, HEADER_BYTES, ext, ext_bytes) != 0
             ? fail(COLLSCHED_EIO, err, len, f->name, "groups", "cannot read %zu bytes", ext_bytes)
             : parse_groups(f, ext, h, err, len);
    h->hash = cs_hash64(cs_hash64(0, head, HEADER_BYTES), ext, ext_bytes);
    free(ext);
    return rc;
}

int cs_inter_read_header(const char *path, cs_inter_header *h, char *err, size_t len)
{
    file f;
    memset(h, 0, sizeof *h);
    int rc = open_file(path, &f, err, len);
    if (rc) return rc;
    rc = read_header(&f, h, err, len);
    close(f.fd);
    return rc;
}

/* The index: CRC, contiguous sections, total_ops, file size. Leaves it in *index. */
static int read_index(const file *f, cs_inter_header *h, uint8_t **index, char *err, size_t len)
{
    uint32_t N = h->h.nranks;
    uint64_t bytes = (uint64_t)INDEX_ENTRY * N, expect = h->header_bytes + bytes, ops = 0;
    if (f->size < expect)
        return fail(COLLSCHED_EFORMAT, err, len, f->name, "index", "truncated: expected %llu bytes for %u ranks, file has %llu",
                    (unsigned long long)expect, N, (unsigned long long)f->size);
    if (!(*index = malloc((size_t)bytes))) return fail(COLLSCHED_ENOMEM, err, len, f->name, "memory", "allocation failed");
    if (read_at(f, h->header_bytes, *index, (size_t)bytes) != 0)
        return fail(COLLSCHED_EIO, err, len, f->name, "index", "cannot read %llu bytes", (unsigned long long)bytes);
    h->hash = cs_hash64(h->hash, *index, (size_t)bytes);
    if (!crc_equal(cs_crc32(0, *index, (size_t)bytes), h->h.index_crc32))
        return fail(COLLSCHED_EFORMAT, err, len, f->name, "index_crc32", "index checksum mismatch (corrupt file)");
    for (uint32_t r = 0; r < N; r++) {
        const uint8_t *e = *index + (size_t)INDEX_ENTRY * r;
        if (rd64(e) != expect)
            return fail(COLLSCHED_EFORMAT, err, len, f->name, "index.section_offset",
                        "rank %u: expected %llu (sections contiguous), found %llu", r,
                        (unsigned long long)expect, (unsigned long long)rd64(e));
        expect += (uint64_t)OP_BYTES * rd32(e + 8);
        ops += rd32(e + 8);
    }
    if (ops != h->h.total_ops)
        return fail(COLLSCHED_EFORMAT, err, len, f->name, "total_ops", "header says %llu, index sums to %llu",
                    (unsigned long long)h->h.total_ops, (unsigned long long)ops);
    if (f->size != expect)
        return fail(COLLSCHED_EFORMAT, err, len, f->name, "sections", "expected file size %llu bytes, found %llu%s",
                    (unsigned long long)expect, (unsigned long long)f->size,
                    f->size < expect ? " (truncated)" : " (trailing bytes)");
    return COLLSCHED_OK;
}

/* One operation's fields (docs/schedule-format.md's list). */
static int check_op(const file *f, const cs_inter_header *h, uint32_t rank, uint32_t i, const uint8_t *raw,
                    cs_inter_op *op, char *err, size_t len)
{
    char field[80];
    memset(op, 0, sizeof *op);
    op->peer = rd32(raw);
    op->kind = raw[4];
    op->fifo = (raw[5] >> 1) & 1u;
    op->group = raw[6];
    op->lo = rd64(raw + 8);
    op->hi = rd64(raw + 16);
    op->prev = -1;
#define BAD(fld, ...) (snprintf(field, sizeof field, "rank %u op %u %s", rank, i, fld), \
                       fail(COLLSCHED_EFORMAT, err, len, f->name, field, __VA_ARGS__))
    if (op->kind > 1) return BAD("kind", "expected 0 (send) or 1 (recv), found %u", op->kind);
    if (raw[5] & 0xFDu) return BAD("flags", "expected bit 1 (FIFO wait) only, found %u", raw[5]);
    if (op->fifo && op->kind == COLLSCHED_RECV) return BAD("flags", "expected the FIFO bit on sends only");
    if (op->group > 1) return BAD("group", "expected 0 (A's data) or 1 (B's data), found %u", op->group);
    if (raw[7] != 0) return BAD("reserved", "expected 0, found %u", raw[7]);
    if (op->peer >= h->h.nranks) return BAD("peer", "expected a rank below %u, found %u", h->h.nranks, op->peer);
    if (op->peer == rank) return BAD("peer", "expected a rank other than the op's own (%u)", rank);
    if (op->lo >= op->hi)
        return BAD("lo", "expected lo < hi (a non-empty range), found [%llu, %llu)", (unsigned long long)op->lo,
                   (unsigned long long)op->hi);
    if (op->hi > h->total[op->group])
        return BAD("hi", "expected hi <= the group's total bytes (%llu), found %llu",
                   (unsigned long long)h->total[op->group], (unsigned long long)op->hi);
#undef BAD
    return COLLSCHED_OK;
}

/* Section `rank` (its index entry in `index`): CRC, fields, then the walk. */
static int read_section(const file *f, const cs_inter_header *h, const uint8_t *index, uint32_t rank,
                        cs_inter_section **out, char *err, size_t len)
{
    const uint8_t *e = index + (size_t)INDEX_ENTRY * rank;
    uint32_t nops = rd32(e + 8);
    *out = NULL;
    if (nops > (uint32_t)INT32_MAX / 2)
        return fail(COLLSCHED_EFORMAT, err, len, f->name, "index.nops", "rank %u: expected at most %d ops, found %u",
                    rank, INT32_MAX / 2, nops);
    size_t bytes = (size_t)OP_BYTES * nops;
    uint8_t *raw = malloc(bytes ? bytes : 1);
    cs_inter_section *s = calloc(1, sizeof *s);
    if (s) s->ops = calloc(nops ? nops : 1, sizeof *s->ops);
    if (!raw || !s || !s->ops) {
        free(raw);
        cs_inter_section_free(s);
        return fail(COLLSCHED_ENOMEM, err, len, f->name, "memory", "allocation failed");
    }
    s->rank = rank;
    s->nops = nops;
    int rc = COLLSCHED_OK;
    if (read_at(f, rd64(e), raw, bytes) != 0)
        rc = fail(COLLSCHED_EIO, err, len, f->name, "section", "rank %u: cannot read %zu bytes", rank, bytes);
    else if (!crc_equal(cs_crc32(0, raw, bytes), rd32(e + 12)))
        rc = fail(COLLSCHED_EFORMAT, err, len, f->name, "section_crc32", "rank %u: section checksum mismatch (corrupt file)",
                  rank);
    for (uint32_t i = 0; i < nops && rc == COLLSCHED_OK; i++)
        rc = check_op(f, h, rank, i, raw + (size_t)OP_BYTES * i, &s->ops[i], err, len);
    free(raw);
    char why[256];
    if (rc == COLLSCHED_OK && cs_inter_walk(h, s, why, sizeof why) != 0)
        rc = fail(COLLSCHED_EFORMAT, err, len, f->name, "section", "%s", why);
    if (rc != COLLSCHED_OK) {
        cs_inter_section_free(s);
        return rc;
    }
    *out = s;
    return COLLSCHED_OK;
}

int cs_inter_load(const char *path, uint32_t rank, cs_inter_header *h, cs_inter_section **out, char *err,
                  size_t len)
{
    file f;
    uint8_t *index = NULL;
    *out = NULL;
    memset(h, 0, sizeof *h);
    int rc = open_file(path, &f, err, len);
    if (rc) return rc;
    rc = read_header(&f, h, err, len);
    if (rc == COLLSCHED_OK && rank >= h->h.nranks)
        rc = fail(COLLSCHED_EMATCH, err, len, path, "rank", "expected below %u, found %u", h->h.nranks, rank);
    if (rc == COLLSCHED_OK) rc = read_index(&f, h, &index, err, len);
    if (rc == COLLSCHED_OK) rc = read_section(&f, h, index, rank, out, err, len);
    free(index);
    close(f.fd);
    return rc;
}

int cs_inter_check_file(const char *path, char *err, size_t len)
{
    file f;
    cs_inter_header h;
    uint8_t *index = NULL;
    cs_inter_section **secs = NULL;
    memset(&h, 0, sizeof h);
    int rc = open_file(path, &f, err, len);
    if (rc) return rc;
    rc = read_header(&f, &h, err, len);
    if (rc == COLLSCHED_OK) rc = read_index(&f, &h, &index, err, len);
    if (rc == COLLSCHED_OK && !(secs = calloc(h.h.nranks, sizeof *secs)))
        rc = fail(COLLSCHED_ENOMEM, err, len, path, "memory", "allocation failed");
    for (uint32_t r = 0; rc == COLLSCHED_OK && r < h.h.nranks; r++)
        rc = read_section(&f, &h, index, r, &secs[r], err, len);
    char why[256];
    if (rc == COLLSCHED_OK && cs_inter_whole_check(&h, secs, why, sizeof why) != 0)
        rc = fail(COLLSCHED_EFORMAT, err, len, path, "whole schedule", "%s", why);
    for (uint32_t r = 0; secs && r < h.h.nranks; r++) cs_inter_section_free(secs[r]);
    free(secs);
    free(index);
    cs_inter_header_free(&h);
    close(f.fd);
    return rc;
}
