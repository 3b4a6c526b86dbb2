/* schedfile.c - read and validate one rank's section of a .sched file.
 *
 * Format and the order of checks: docs/schedule-format.md. The reader trusts nothing:
 * every offset is checked against the file size before it is used, every allocation is
 * bounded by the file size, and every operation field is range-checked, so a corrupt,
 * truncated or hostile file yields an error line, never a crash. No MPI in this file
 * (the fuzz target links it alone).
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
#define OP_BYTES 12u
#define MAX_RANKS (1u << 24)
#define MAX_SEGMENTS 65535u
#define KNOWN_FLAGS 7u /* full duplex, has background ops, serial execution */

/* ---- little helpers ---- */

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | ((uint64_t)rd32(p + 4) << 32); }

static int fail(int code, char *err, size_t errlen, const char *name, const char *field,
                const char *fmt, ...)
{
    if (err && errlen) {
        char what[200];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(what, sizeof what, fmt, ap);
        va_end(ap);
        snprintf(err, errlen, "%s: %s: %s", name, field, what);
    }
    return code;
}

uint64_t cs_hash64(uint64_t h, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    if (h == 0) h = 0xcbf29ce484222325ull; /* FNV-1a offset basis */
    while (len--) { h ^= *p++; h *= 0x100000001b3ull; }
    return h;
}

/* Checksums protect against corruption, not against hostile input, which every other
 * check must survive alone: the fuzz build (COLLSCHED_FUZZING) ignores them so that the
 * fuzzer reaches the checks behind them. */
static int crc_ok(uint32_t computed, uint32_t stored)
{
#ifdef COLLSCHED_FUZZING
    (void)computed; (void)stored;
    return 1;
#else
    return computed == stored;
#endif
}

/* ---- where the bytes come from: a file (pread) or memory ---- */

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
        size_t done = 0;
        while (done < n) {
            ssize_t got = pread(s->fd, (char *)buf + done, n - done, (off_t)(off + done));
            if (got < 0 && errno == EINTR) continue;
            if (got <= 0) return -1;
            done += (size_t)got;
        }
        return 0;
    }
    memcpy(buf, s->mem + off, n);
    return 0;
}

/* ---- header ---- */

static void copy_text(char dst[17], const uint8_t *src)
{
    memcpy(dst, src, 16);
    dst[16] = '\0';
    for (int i = 0; i < 16 && dst[i]; i++)
        if (dst[i] < 32 || dst[i] > 126) dst[i] = '?'; /* printable in messages */
}

void cs_header_decode(const uint8_t *b, collsched_header *h)
{
    memset(h, 0, sizeof *h);
    h->version_major = rd16(b + 8);
    h->version_minor = rd16(b + 10);
    h->collective = rd32(b + 16);
    h->nranks = rd32(b + 20);
    h->nseg = rd32(b + 24);
    h->flags = rd32(b + 28);
    h->bytes_min = rd64(b + 32);
    h->bytes_max = rd64(b + 40);
    copy_text(h->algorithm, b + 48);
    copy_text(h->compiler_version, b + 64);
    memcpy(h->input_hash, b + 80, 32);
    h->total_ops = rd64(b + 112);
    h->index_crc32 = rd32(b + 120);
}

int collsched_parse_header(const void *buf, size_t len, uint64_t file_size, const char *name,
                           collsched_header *h, char *err, size_t errlen)
{
    const uint8_t *b = buf;
    if (len < HEADER_BYTES || file_size < HEADER_BYTES)
        return fail(COLLSCHED_EFORMAT, err, errlen, name, "header",
                    "expected at least %u bytes, file has %llu", HEADER_BYTES,
                    (unsigned long long)file_size);
    if (memcmp(b, "COLLSCHD", 8) != 0)
        return fail(COLLSCHED_EFORMAT, err, errlen, name, "magic",
                    "expected 'COLLSCHD': not a collsched schedule");
    cs_header_decode(b, h);
    if (h->version_major != 1)
        return fail(COLLSCHED_EFORMAT, err, errlen, name, "version_major", "expected 1, found %u",
                    h->version_major);
    if (rd32(b + 12) != HEADER_BYTES && h->collective >= 5 && h->collective <= 8)
        return fail(COLLSCHED_EFORMAT, err, errlen, name, "collective",
                    "expected 1 (allgather), found %u (alltoall, bcast, reduce or allreduce: a version %u.%u "
                    "schedule, read by the collectives' reader)", h->collective, h->version_major,
                    h->version_minor);
    if (rd32(b + 12) != HEADER_BYTES)
        return fail(COLLSCHED_EFORMAT, err, errlen, name, "header_bytes", "expected %u, found %u",
                    HEADER_BYTES, rd32(b + 12));
    if (!crc_ok(cs_crc32(0, b, HEADER_BYTES - 4), rd32(b + 124)))
        return fail(COLLSCHED_EFORMAT, err, errlen, name, "header_crc32",
                    "header checksum mismatch (corrupt file)");
    if (h->collective != 1)
        return fail(COLLSCHED_EFORMAT, err, errlen, name, "collective",
                    "expected 1 (allgather), found %u", h->collective);
    if (h->nranks < 1 || h->nranks > MAX_RANKS)
        return fail(COLLSCHED_EFORMAT, err, errlen, name, "nranks", "expected 1..%u, found %u",
                    MAX_RANKS, h->nranks);
    if (h->nseg < 1 || h->nseg > MAX_SEGMENTS)
        return fail(COLLSCHED_EFORMAT, err, errlen, name, "nseg", "expected 1..%u, found %u",
                    MAX_SEGMENTS, h->nseg);
    if (h->flags & ~KNOWN_FLAGS)
        return fail(COLLSCHED_EFORMAT, err, errlen, name, "flags", "unknown flag bits in %#x",
                    h->flags);
    if (h->bytes_min > h->bytes_max)
        return fail(COLLSCHED_EFORMAT, err, errlen, name, "bytes_min",
                    "expected bytes_min <= bytes_max, found %llu > %llu",
                    (unsigned long long)h->bytes_min, (unsigned long long)h->bytes_max);
    return COLLSCHED_OK;
}

/* ---- index: checksum, contiguity, total size; yields the rank's section ---- */

static int check_index(const source *s, const collsched_header *h, const uint8_t *index,
                       uint32_t rank, uint64_t *sec_off, uint32_t *sec_nops, uint32_t *sec_crc,
                       char *err, size_t errlen)
{
    const uint64_t index_end = HEADER_BYTES + (uint64_t)INDEX_ENTRY * h->nranks;
    if (!crc_ok(cs_crc32(0, index, (size_t)INDEX_ENTRY * h->nranks), h->index_crc32))
        return fail(COLLSCHED_EFORMAT, err, errlen, s->name, "index_crc32",
                    "index checksum mismatch (corrupt file)");
    uint64_t expect = index_end, ops = 0;
    for (uint32_t r = 0; r < h->nranks; r++) {
        const uint8_t *e = index + (size_t)INDEX_ENTRY * r;
        uint64_t off = rd64(e);
        uint32_t n = rd32(e + 8);
        if (off != expect)
            return fail(COLLSCHED_EFORMAT, err, errlen, s->name, "index.section_offset",
                        "rank %u: expected %llu (sections contiguous), found %llu", r,
                        (unsigned long long)expect, (unsigned long long)off);
        if (r == rank) { *sec_off = off; *sec_nops = n; *sec_crc = rd32(e + 12); }
        expect += (uint64_t)OP_BYTES * n; /* n < 2^32, r < 2^24: no overflow */
        ops += n;
    }
    if (ops != h->total_ops)
        return fail(COLLSCHED_EFORMAT, err, errlen, s->name, "total_ops",
                    "header says %llu, index sums to %llu", (unsigned long long)h->total_ops,
                    (unsigned long long)ops);
    if (s->size != expect)
        return fail(COLLSCHED_EFORMAT, err, errlen, s->name, "sections",
                    "expected file size %llu bytes, found %llu%s", (unsigned long long)expect,
                    (unsigned long long)s->size, s->size < expect ? " (truncated)" : " (trailing bytes)");
    return COLLSCHED_OK;
}

/* ---- section: fields, holding, delivery ---- */

/* Open-addressing map piece -> index of the recv that delivers it. */
typedef struct piece_map {
    uint64_t *keys; /* piece id + 1; 0 = empty */
    int32_t *vals;
    uint64_t mask;
} piece_map;

static int map_init(piece_map *m, uint32_t n)
{
    uint64_t cap = 16;
    while (cap < 2ull * n) cap <<= 1;
    m->keys = calloc(cap, sizeof *m->keys);
    m->vals = malloc(cap * sizeof *m->vals);
    m->mask = cap - 1;
    return m->keys && m->vals ? 0 : -1;
}

static uint64_t *map_slot(const piece_map *m, uint64_t key, int32_t **val)
{
    uint64_t i = (key * 0x9E3779B97F4A7C15ull) >> 20;
    for (;; i++) {
        uint64_t *k = &m->keys[i & m->mask];
        if (*k == 0 || *k == key + 1) { *val = &m->vals[i & m->mask]; return k; }
    }
}

static void map_free(piece_map *m) { free(m->keys); free(m->vals); }

static int check_fields(const source *s, const collsched_header *h, uint32_t rank, uint32_t i,
                        const uint8_t *raw, collsched_op *op, int *seen_fg, char *err, size_t errlen)
{
    op->peer = rd32(raw);
    op->origin = rd32(raw + 4);
    op->segment = rd16(raw + 8);
    op->kind = raw[10];
    op->phase = raw[11] & 1u;        /* byte 11 holds flags: bit 0 phase, bit 1 FIFO wait, */
    op->fifo = (raw[11] >> 1) & 1u;  /* bit 2 join (multi-piece messages) */
    op->join = (raw[11] >> 2) & 1u;
    op->dep = -1;
    op->prev = -1;
    char field[64];
#define BAD(fld, ...) (snprintf(field, sizeof field, "rank %u op %u %s", rank, i, fld), \
                       fail(COLLSCHED_EFORMAT, err, errlen, s->name, field, __VA_ARGS__))
    if (op->kind > 1) return BAD("kind", "expected 0 (send) or 1 (recv), found %u", op->kind);
    if (raw[11] > 7)
        return BAD("flags", "expected bits 0 (background), 1 (FIFO wait) and 2 (join) only, found %u", raw[11]);
    /* A joined op continues the message of the op before it (docs/semantics.md,
     * "Multi-piece messages"); the words are the Python reader's (_check_op_fields). */
    if (op->join && i == 0)
        return BAD("flags", "expected no join bit on a rank's first op (it has no message to join)");
    if (op->join && (op->kind != op[-1].kind || op->peer != op[-1].peer || op->phase != op[-1].phase))
        return BAD("flags", "expected the join bit only on an op with the kind, peer and phase of the op before it");
    if (op->join && op->fifo) return BAD("flags", "expected the FIFO bit on a message's first op only");
    if (op->fifo && op->kind == COLLSCHED_RECV) return BAD("flags", "expected the FIFO bit on sends only");
    if (op->peer >= h->nranks) return BAD("peer", "expected a rank below %u, found %u", h->nranks, op->peer);
    if (op->peer == rank) return BAD("peer", "expected a rank other than the op's own (%u)", rank);
    if (op->origin >= h->nranks) return BAD("origin", "expected a rank below %u, found %u", h->nranks, op->origin);
    if (op->segment >= h->nseg) return BAD("segment", "expected a segment below nseg=%u, found %u", h->nseg, op->segment);
    if (op->phase == 1 && *seen_fg) return BAD("phase", "expected background ops before foreground ops");
    if (op->phase == 0) *seen_fg = 1;
    if (op->kind == COLLSCHED_RECV && op->origin == rank)
        return BAD("origin", "expected a piece of another rank (a rank never receives its own)");
#undef BAD
    return COLLSCHED_OK;
}

/* Multi-piece messages, once every op's fields passed: no piece twice in one message, and
 * joined ops only in a file of minor version 3 or later (the Python reader's checks and
 * words, in its order: the first message with a repeat, its smallest repeated piece, at
 * its second op). */
typedef struct msg_piece { uint32_t head, op; uint64_t piece; } msg_piece;

static int cmp_msg_piece(const void *a, const void *b)
{
    const msg_piece *x = a, *y = b;
    if (x->head != y->head) return x->head < y->head ? -1 : 1;
    if (x->piece != y->piece) return x->piece < y->piece ? -1 : 1;
    return x->op < y->op ? -1 : x->op > y->op;
}

static int check_messages(const source *s, const collsched_header *h, const collsched_schedule *sc,
                          char *err, size_t errlen)
{
    uint32_t n = 0, head = 0;
    for (uint32_t i = 0; i < sc->nops; i++) n += sc->ops[i].join || (i + 1 < sc->nops && sc->ops[i + 1].join);
    if (!n) return COLLSCHED_OK;
    if (h->version_minor < 3)
        return fail(COLLSCHED_EFORMAT, err, errlen, s->name, "version_minor",
                    "expected at least 3 for a schedule with joined ops (flags bit 2), found %u", h->version_minor);
    msg_piece *m = malloc((size_t)n * sizeof *m);
    if (!m) return COLLSCHED_ENOMEM;
    n = 0;
    for (uint32_t i = 0; i < sc->nops; i++) {
        const collsched_op *op = &sc->ops[i];
        if (!op->join) head = i;
        if (op->join || (i + 1 < sc->nops && sc->ops[i + 1].join))
            m[n++] = (msg_piece){ head, i, (uint64_t)op->origin * h->nseg + op->segment };
    }
    qsort(m, n, sizeof *m, cmp_msg_piece);
    int rc = COLLSCHED_OK;
    for (uint32_t k = 1; k < n && rc == COLLSCHED_OK; k++)
        if (m[k].head == m[k - 1].head && m[k].piece == m[k - 1].piece) {
            char field[64];
            const collsched_op *op = &sc->ops[m[k].op];
            snprintf(field, sizeof field, "rank %u op %u segment", sc->rank, m[k].op);
            rc = fail(COLLSCHED_EFORMAT, err, errlen, s->name, field,
                      "expected a piece not already in its message (op %u carries (%u,%u) too)", m[k - 1].op,
                      op->origin, op->segment);
        }
    free(m);
    return rc;
}

/* Holding: a forwarded send names an earlier recv of its piece (its dep). Delivery: every
 * piece of every other origin is received exactly once. */
static int check_dataflow(const source *s, const collsched_header *h, collsched_schedule *sc,
                          char *err, size_t errlen)
{
    piece_map m;
    if (map_init(&m, sc->nops) != 0) { map_free(&m); return COLLSCHED_ENOMEM; }
    int rc = COLLSCHED_OK;
    char field[64];
    for (uint32_t i = 0; i < sc->nops && rc == COLLSCHED_OK; i++) {
        collsched_op *op = &sc->ops[i];
        uint64_t key = (uint64_t)op->origin * h->nseg + op->segment;
        int32_t *val;
        uint64_t *slot = map_slot(&m, key, &val);
        snprintf(field, sizeof field, "rank %u op %u", sc->rank, i);
        if (op->kind == COLLSCHED_RECV) {
            if (*slot)
                rc = fail(COLLSCHED_EFORMAT, err, errlen, s->name, field,
                          "expected each piece received once, piece (%u,%u) again at op %u",
                          op->origin, op->segment, i);
            *slot = key + 1;
            *val = (int32_t)i;
            sc->nrecv++;
        } else {
            sc->nsend++;
            if (op->origin == sc->rank) continue;
            if (!*slot)
                rc = fail(COLLSCHED_EFORMAT, err, errlen, s->name, field,
                          "expected an earlier recv of forwarded piece (%u,%u)", op->origin,
                          op->segment);
            op->dep = *val;
        }
    }
    uint64_t want = (uint64_t)(h->nranks - 1) * h->nseg;
    if (rc == COLLSCHED_OK && sc->nrecv != want)
        rc = fail(COLLSCHED_EFORMAT, err, errlen, s->name, "section",
                  "rank %u: expected %llu recvs (every piece of every other rank), found %u",
                  sc->rank, (unsigned long long)want, sc->nrecv);
    map_free(&m);
    return rc;
}

/* FIFO per link (docs/semantics.md): a send marked FIFO names the previous send message
 * to the same peer (its head op, where its request is), which the executor completes
 * before it issues this one. Joined ops carry no FIFO mark: prev = -1. */
static int link_sends(collsched_schedule *sc)
{
    piece_map m;
    if (map_init(&m, sc->nops) != 0) { map_free(&m); return COLLSCHED_ENOMEM; }
    for (uint32_t i = 0; i < sc->nops; i++) {
        collsched_op *op = &sc->ops[i];
        if (op->kind != COLLSCHED_SEND || op->join) continue;
        int32_t *val;
        uint64_t *slot = map_slot(&m, op->peer, &val);
        op->prev = op->fifo && *slot ? *val : -1;
        *slot = (uint64_t)op->peer + 1;
        *val = (int32_t)i;
    }
    map_free(&m);
    return COLLSCHED_OK;
}

static int read_section(const source *s, const collsched_header *h, uint32_t rank, uint64_t off,
                        uint32_t nops, uint32_t crc, collsched_schedule *sc, char *err, size_t errlen)
{
    if (nops > (uint32_t)INT32_MAX / 2)
        return fail(COLLSCHED_EFORMAT, err, errlen, s->name, "index.nops",
                    "rank %u: expected at most %d ops, found %u", rank, INT32_MAX / 2, nops);
    size_t bytes = (size_t)OP_BYTES * nops;
    uint8_t *raw = malloc(bytes ? bytes : 1);
    sc->ops = calloc(nops ? nops : 1, sizeof *sc->ops);
    if (!raw || !sc->ops) { free(raw); return COLLSCHED_ENOMEM; }
    int rc = COLLSCHED_OK;
    if (src_read(s, off, raw, bytes) != 0)
        rc = fail(COLLSCHED_EIO, err, errlen, s->name, "section", "rank %u: cannot read %zu bytes",
                  rank, bytes);
    else if (!crc_ok(cs_crc32(0, raw, bytes), crc))
        rc = fail(COLLSCHED_EFORMAT, err, errlen, s->name, "section_crc32",
                  "rank %u: section checksum mismatch (corrupt file)", rank);
    sc->nops = nops;
    int seen_fg = 0;
    for (uint32_t i = 0; i < nops && rc == COLLSCHED_OK; i++)
        rc = check_fields(s, h, rank, i, raw + (size_t)OP_BYTES * i, &sc->ops[i], &seen_fg, err, errlen);
    free(raw);
    if (rc == COLLSCHED_OK) rc = check_messages(s, h, sc, err, errlen);
    if (rc == COLLSCHED_OK) rc = check_dataflow(s, h, sc, err, errlen);
    return rc == COLLSCHED_OK ? link_sends(sc) : rc;
}

/* A list built in memory (the online BDR generator): the same dataflow checks and links
 * as a loaded section. Takes ownership of ops (freed on failure too). */
int cs_schedule_adopt(uint32_t nranks, uint32_t nseg, uint32_t rank, collsched_op *ops,
                      uint32_t nops, const char *name, collsched_schedule **out, char *err,
                      size_t errlen)
{
    source src = { name, 0, -1, NULL };
    collsched_schedule *sc = calloc(1, sizeof *sc);
    *out = NULL;
    if (!sc) { free(ops); return COLLSCHED_ENOMEM; }
    sc->hdr.version_major = 1;
    sc->hdr.collective = 1;
    sc->hdr.nranks = nranks;
    sc->hdr.nseg = nseg;
    sc->rank = rank;
    sc->nops = nops;
    sc->ops = ops;
    for (uint32_t i = 0; i < nops; i++) ops[i].dep = ops[i].prev = -1;
    int rc = check_dataflow(&src, &sc->hdr, sc, err, errlen);
    if (rc == COLLSCHED_OK) rc = link_sends(sc);
    if (rc != COLLSCHED_OK) { collsched_schedule_free(sc); return rc; }
    *out = sc;
    return COLLSCHED_OK;
}

/* ---- the loader ---- */

static int load(const source *s, uint32_t nranks, uint32_t rank, collsched_schedule **out,
                char *err, size_t errlen)
{
    uint8_t head[HEADER_BYTES];
    collsched_header h;
    *out = NULL;
    if (s->size < HEADER_BYTES || src_read(s, 0, head, HEADER_BYTES) != 0)
        return fail(COLLSCHED_EFORMAT, err, errlen, s->name, "header",
                    "expected at least %u bytes, file has %llu", HEADER_BYTES,
                    (unsigned long long)s->size);
    int rc = collsched_parse_header(head, HEADER_BYTES, s->size, s->name, &h, err, errlen);
    if (rc) return rc;
    if (h.nranks != nranks)
        return fail(COLLSCHED_EMATCH, err, errlen, s->name, "nranks",
                    "expected %u (communicator size), found %u", nranks, h.nranks);
    if (rank >= nranks)
        return fail(COLLSCHED_EMATCH, err, errlen, s->name, "rank", "expected below %u, found %u",
                    nranks, rank);
    uint64_t index_bytes = (uint64_t)INDEX_ENTRY * h.nranks;
    if (s->size < HEADER_BYTES + index_bytes)
        return fail(COLLSCHED_EFORMAT, err, errlen, s->name, "index",
                    "truncated: expected %llu bytes for %u ranks, file has %llu",
                    (unsigned long long)(HEADER_BYTES + index_bytes), h.nranks,
                    (unsigned long long)s->size);
    uint8_t *index = malloc((size_t)index_bytes);
    collsched_schedule *sc = calloc(1, sizeof *sc);
    if (!index || !sc) { free(index); free(sc); return COLLSCHED_ENOMEM; }
    uint64_t off = 0;
    uint32_t nops = 0, crc = 0;
    if (src_read(s, HEADER_BYTES, index, (size_t)index_bytes) != 0)
        rc = fail(COLLSCHED_EIO, err, errlen, s->name, "index", "cannot read %llu bytes",
                  (unsigned long long)index_bytes);
    else
        rc = check_index(s, &h, index, rank, &off, &nops, &crc, err, errlen);
    sc->hdr = h;
    sc->rank = rank;
    sc->hash = cs_hash64(cs_hash64(0, head, HEADER_BYTES), index, (size_t)index_bytes);
    free(index);
    if (rc == COLLSCHED_OK) rc = read_section(s, &h, rank, off, nops, crc, sc, err, errlen);
    if (rc != COLLSCHED_OK) {
        collsched_schedule_free(sc);
        if (rc == COLLSCHED_ENOMEM) fail(rc, err, errlen, s->name, "memory", "allocation failed");
        return rc;
    }
    *out = sc;
    return COLLSCHED_OK;
}

int collsched_load_memory(const void *data, size_t len, const char *name, uint32_t nranks,
                          uint32_t rank, collsched_schedule **out, char *err, size_t errlen)
{
    source s = { name ? name : "<memory>", len, -1, data };
    if (!data) s.mem = (const uint8_t *)"", s.size = 0;
    return load(&s, nranks, rank, out, err, errlen);
}

static const char *file_kind(mode_t m)
{
    return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISCHR(m) ? "a character device"
         : S_ISBLK(m) ? "a block device" : S_ISSOCK(m) ? "a socket" : "a special file";
}

/* Opens `path` as a source: only a regular file (a symbolic link is followed to one). A
 * FIFO or a device could block open() or read() forever, or never end: the type is
 * checked before anything is opened, and again on the descriptor, opened non-blocking in
 * case the path changed in between. What is read is bounded by the file's size. */
static int open_source(const char *path, source *s, char *err, size_t errlen)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return fail(COLLSCHED_EIO, err, errlen, path, "file", "cannot read (%s)", strerror(errno));
    if (!S_ISREG(st.st_mode))
        return fail(COLLSCHED_EIO, err, errlen, path, "file", "expected a regular file, found %s",
                    file_kind(st.st_mode));
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        return fail(COLLSCHED_EIO, err, errlen, path, "file", "cannot read (%s)", strerror(errno));
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return fail(COLLSCHED_EIO, err, errlen, path, "file", "expected a regular file, found %s",
                    file_kind(st.st_mode));
    }
    *s = (source){ path, (uint64_t)st.st_size, fd, NULL };
    return COLLSCHED_OK;
}

int collsched_load(const char *path, uint32_t nranks, uint32_t rank, collsched_schedule **out,
                   char *err, size_t errlen)
{
    *out = NULL;
    source s;
    int rc = open_source(path, &s, err, errlen);
    if (rc != COLLSCHED_OK) return rc;
    rc = load(&s, nranks, rank, out, err, errlen);
    close(s.fd);
    return rc;
}

int cs_read_header_file(const char *path, collsched_header *h, char *err, size_t errlen)
{
    uint8_t head[HEADER_BYTES];
    source s;
    int orc = open_source(path, &s, err, errlen);
    if (orc != COLLSCHED_OK) return orc;
    int rc = (s.size < HEADER_BYTES || src_read(&s, 0, head, HEADER_BYTES) != 0)
        ? fail(COLLSCHED_EFORMAT, err, errlen, path, "header", "expected at least %u bytes, file has %llu",
               HEADER_BYTES, (unsigned long long)s.size)
        : collsched_parse_header(head, HEADER_BYTES, s.size, path, h, err, errlen);
    close(s.fd);
    return rc;
}

void collsched_schedule_free(collsched_schedule *s)
{
    if (!s) return;
    free(s->ops);
    free(s);
}
