/* arrivals_file.c - the arrival trace file (docs/trace-format.md), on rank 0 at finalize:
 * every process's records (the blob arrivals.c serialises: its clock offsets, start,
 * call-site names, communicators with its rank in each, and records already on rank 0's
 * clock) are matched by (communicator id, call number); a call every rank of its
 * communicator recorded becomes one record of the file, any other is left out and
 * counted. The file is written whole or not at all (a temporary file beside it, then
 * rename). Nothing here trusts the blobs' counts or indices. */
#include "runtime.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SITE_LEN 256       /* names: 1..255 bytes */
#define PATH_LEN 4096

void cs_arrivals_say(const char *path, const char *why)
{
    fprintf(stderr, "collsched: COLLSCHED_ARRIVALS=%s: %s\n", path, why);
    fflush(stderr);
}

/* ---- bytes: little-endian, grown as needed ---- */

void cs_put(cs_wbuf *b, const void *x, size_t n)
{
    if (b->bad) return;
    if (b->n + n > b->cap) {
        size_t c = b->cap ? b->cap : 4096;
        while (c < b->n + n) c *= 2;
        uint8_t *q = realloc(b->p, c);
        if (!q) { b->bad = 1; return; }
        b->p = q;
        b->cap = c;
    }
    memcpy(b->p + b->n, x, n);
    b->n += n;
}

void cs_put_le(cs_wbuf *b, uint64_t v, int n)
{
    uint8_t x[8];
    for (int i = 0; i < n; i++) x[i] = (uint8_t)(v >> (8 * i));
    cs_put(b, x, (size_t)n);
}

void cs_put_f64(cs_wbuf *b, double d)
{
    uint64_t v;
    memcpy(&v, &d, 8);
    cs_put_le(b, v, 8);
}

static void put_f32(cs_wbuf *b, float f)
{
    uint32_t v;
    memcpy(&v, &f, 4);
    cs_put_le(b, v, 4);
}

typedef struct rbuf { const uint8_t *p; size_t n, at; int bad; } rbuf;

static uint64_t get_le(rbuf *b, int n)
{
    uint64_t v = 0;
    if (b->bad || b->n - b->at < (size_t)n) { b->bad = 1; return 0; }
    for (int i = 0; i < n; i++) v |= (uint64_t)b->p[b->at + i] << (8 * i);
    b->at += (size_t)n;
    return v;
}

static double get_f64(rbuf *b)
{
    uint64_t v = get_le(b, 8);
    double d;
    memcpy(&d, &v, 8);
    return d;
}

/* ---- matching calls across ranks ---- */

typedef struct slot {
    uint32_t seen;            /* ranks that recorded the call */
    uint32_t site;            /* merged site index (the communicator's rank 0's) */
    int site_set, differ;
    uint8_t collective, flags;
    uint64_t bytes;
    double *t;                /* size arrivals, then size exits */
} slot;

typedef struct gcomm {
    uint64_t id;
    uint32_t size;
    uint32_t *world;          /* borrowed from the first rank that named it */
    slot *calls;
    uint32_t ncalls;          /* slots allocated (largest call number + 1) */
    uint32_t out;             /* index in the file, UINT32_MAX if no complete call */
} gcomm;

typedef struct merged {
    gcomm *comms;
    uint32_t ncomms;
    char **sites;             /* borrowed from the blobs (NUL-terminated copies) */
    uint32_t nsites;
    double *offsets;          /* world_size x (start, end) */
    double t0;
    int have_t0;
    size_t dropped, bad;
} merged;

static uint32_t merged_site(merged *m, const char *name)
{
    for (uint32_t i = 0; i < m->nsites; i++)
        if (!strcmp(m->sites[i], name)) return i;
    char **s = realloc(m->sites, (m->nsites + 1) * sizeof *s);
    if (!s) return UINT32_MAX;
    m->sites = s;
    if (!(s[m->nsites] = strdup(name))) return UINT32_MAX;
    return m->nsites++;
}

/* The merged index of a communicator (added if new); UINT32_MAX if its id names other
 * members (a hash clash) or without memory. */
static uint32_t merged_comm(merged *m, uint64_t id, uint32_t size, const uint32_t *world)
{
    for (uint32_t i = 0; i < m->ncomms; i++)
        if (m->comms[i].id == id)
            return m->comms[i].size == size && !memcmp(m->comms[i].world, world, size * sizeof *world)
                       ? i : UINT32_MAX;
    gcomm *g = realloc(m->comms, (m->ncomms + 1) * sizeof *g);
    if (!g) return UINT32_MAX;
    m->comms = g;
    g = &m->comms[m->ncomms];
    memset(g, 0, sizeof *g);
    g->id = id;
    g->size = size;
    if (!(g->world = malloc(size * sizeof *world))) return UINT32_MAX;
    memcpy(g->world, world, size * sizeof *world);
    return m->ncomms++;
}

static slot *call_slot(gcomm *g, uint32_t seq)
{
    if (seq >= g->ncalls) {
        uint32_t n = g->ncalls ? g->ncalls : 64;
        while (n <= seq) n *= 2;
        slot *s = realloc(g->calls, n * sizeof *s);
        if (!s) return NULL;
        memset(s + g->ncalls, 0, (n - g->ncalls) * sizeof *s);
        g->calls = s;
        g->ncalls = n;
    }
    slot *s = &g->calls[seq];
    if (!s->t && !(s->t = malloc(2 * (size_t)g->size * sizeof *s->t))) return NULL;
    return s;
}

/* One process's blob into m; 0 if it does not parse (then its records are left out). */
static int merge_blob(merged *m, uint32_t wrank, const uint8_t *p, size_t n)
{
    rbuf b = { p, n, 0, 0 };
    m->offsets[2 * wrank] = get_f64(&b);
    m->offsets[2 * wrank + 1] = get_f64(&b);
    uint32_t started = (uint32_t)get_le(&b, 4);
    double first = get_f64(&b);
    if (started && (!m->have_t0 || first < m->t0)) { m->t0 = first; m->have_t0 = 1; }
    uint32_t ns = (uint32_t)get_le(&b, 4), nc = (uint32_t)get_le(&b, 4);
    uint64_t nr = get_le(&b, 8);
    if (b.bad || ns > n / 3 || nc > n / 20 || nr > n / 38) return 0; /* smallest entries */
    uint32_t *site_map = malloc((ns + 1) * sizeof *site_map);
    uint32_t *comm_map = malloc((nc + 1) * sizeof *comm_map);
    uint32_t *my_rank = malloc((nc + 1) * sizeof *my_rank);
    int ok = site_map && comm_map && my_rank;
    for (uint32_t i = 0; ok && i < ns; i++) {
        char name[SITE_LEN];
        size_t len = (size_t)get_le(&b, 2);
        ok = !b.bad && len >= 1 && len < SITE_LEN && b.n - b.at >= len;
        if (!ok) break;
        memcpy(name, b.p + b.at, len);
        name[len] = '\0';
        b.at += len;
        ok = (site_map[i] = merged_site(m, name)) != UINT32_MAX;
    }
    for (uint32_t i = 0; ok && i < nc; i++) {
        uint64_t id = get_le(&b, 8);
        uint32_t size = (uint32_t)get_le(&b, 4);
        my_rank[i] = (uint32_t)get_le(&b, 4);
        ok = !b.bad && size >= 1 && my_rank[i] < size && (b.n - b.at) / 4 >= size;
        if (!ok) break;
        uint32_t *world = malloc(size * sizeof *world);
        ok = world != NULL;
        for (uint32_t j = 0; ok && j < size; j++) world[j] = (uint32_t)get_le(&b, 4);
        comm_map[i] = ok ? merged_comm(m, id, size, world) : UINT32_MAX;
        free(world);
    }
    for (uint64_t i = 0; ok && i < nr; i++) {
        uint32_t c = (uint32_t)get_le(&b, 4), s = (uint32_t)get_le(&b, 4), seq = (uint32_t)get_le(&b, 4);
        uint8_t coll = (uint8_t)get_le(&b, 1), flags = (uint8_t)get_le(&b, 1);
        uint64_t bytes = get_le(&b, 8);
        double arr = get_f64(&b), ex = get_f64(&b);
        ok = !b.bad && c < nc && s < ns;
        if (!ok) break;
        gcomm *g = comm_map[c] != UINT32_MAX ? &m->comms[comm_map[c]] : NULL;
        slot *sl = g && seq < (1u << 30) ? call_slot(g, seq) : NULL;
        if (!sl) { m->bad++; continue; } /* a communicator whose id another one has */
        uint32_t r = my_rank[c];
        if (!sl->site_set || r == 0) {
            if (sl->site_set && sl->site != site_map[s]) sl->differ = 1;
            sl->site = site_map[s];
            sl->collective = coll;
            sl->flags = flags;
            sl->bytes = bytes;
            sl->site_set = 1;
        } else if (sl->site != site_map[s]) {
            sl->differ = 1;
        }
        sl->t[r] = arr;
        sl->t[g->size + r] = ex;
        sl->seen++;
    }
    free(site_map);
    free(comm_map);
    free(my_rank);
    return ok && b.at == b.n;
}

static void merged_free(merged *m)
{
    for (uint32_t i = 0; i < m->ncomms; i++) {
        for (uint32_t j = 0; j < m->comms[i].ncalls; j++) free(m->comms[i].calls[j].t);
        free(m->comms[i].calls);
        free(m->comms[i].world);
    }
    for (uint32_t i = 0; i < m->nsites; i++) free(m->sites[i]);
    free(m->comms);
    free(m->sites);
    free(m->offsets);
}

static int complete(const gcomm *g, const slot *s)
{
    if (!s->t || s->seen != g->size) return 0;
    for (uint32_t r = 0; r < 2 * g->size; r++)
        if (!isfinite(s->t[r])) return 0;
    return 1;
}

/* The file (docs/trace-format.md) in b. */
static void encode(cs_wbuf *b, merged *m, uint32_t wsize, int estimated)
{
    uint32_t *site_out = malloc((m->nsites + 1) * sizeof *site_out);
    uint32_t nsites = 0, ncomms = 0;
    uint64_t ncalls = 0;
    if (!site_out) { b->bad = 1; return; }
    for (uint32_t i = 0; i < m->nsites; i++) site_out[i] = UINT32_MAX;
    for (uint32_t i = 0; i < m->ncomms; i++) {
        gcomm *g = &m->comms[i];
        g->out = UINT32_MAX;
        for (uint32_t j = 0; j < g->ncalls; j++) {
            slot *s = &g->calls[j];
            if (!s->t) continue;
            if (!complete(g, s)) { m->dropped++; continue; }
            if (g->out == UINT32_MAX) g->out = ncomms++;
            if (site_out[s->site] == UINT32_MAX) site_out[s->site] = nsites++;
            ncalls++;
        }
    }
    cs_put(b, "CSATRACE", 8);
    cs_put_le(b, 1, 4);
    cs_put_le(b, estimated ? 1 : 0, 4);
    cs_put_le(b, wsize, 4);
    cs_put_le(b, nsites, 4);
    cs_put_le(b, ncomms, 4);
    cs_put_le(b, 0, 4);
    cs_put_le(b, ncalls, 8);
    cs_put_f64(b, m->t0);
    for (uint32_t k = 0; k < nsites; k++) /* in index order */
        for (uint32_t i = 0; i < m->nsites; i++)
            if (site_out[i] == k) {
                size_t n = strlen(m->sites[i]);
                cs_put_le(b, n, 2);
                cs_put(b, m->sites[i], n);
            }
    for (uint32_t i = 0; i < m->ncomms; i++) {
        const gcomm *g = &m->comms[i];
        if (g->out == UINT32_MAX) continue;
        cs_put_le(b, g->id, 8);
        cs_put_le(b, g->size, 4);
        for (uint32_t r = 0; r < g->size; r++) cs_put_le(b, g->world[r], 4);
    }
    for (uint32_t r = 0; r < 2 * wsize; r++) cs_put_f64(b, m->offsets[r]);
    for (uint32_t i = 0; i < m->ncomms; i++) {
        const gcomm *g = &m->comms[i];
        for (uint32_t j = 0; g->out != UINT32_MAX && j < g->ncalls; j++) {
            const slot *s = &g->calls[j];
            if (!complete(g, s)) continue;
            double base = s->t[0];
            for (uint32_t r = 1; r < g->size; r++) base = s->t[r] < base ? s->t[r] : base;
            cs_put_le(b, site_out[s->site], 4);
            cs_put_le(b, g->out, 4);
            cs_put_le(b, s->collective, 1);
            cs_put_le(b, (uint64_t)((s->flags & 1) | (s->differ ? 2 : 0)), 1);
            cs_put_le(b, 0, 2);
            cs_put_le(b, j, 4);
            cs_put_le(b, s->bytes, 8);
            cs_put_f64(b, base - m->t0);
            for (uint32_t r = 0; r < 2 * g->size; r++) put_f32(b, (float)(s->t[r] - base));
        }
    }
    free(site_out);
    if (!b->bad) cs_put_le(b, cs_crc32(0, b->p, b->n), 4);
}

/* Whole or not at all: a temporary file beside the target, then rename. */
static void write_file(const char *path, const cs_wbuf *b)
{
    char tmp[PATH_LEN + 16];
    snprintf(tmp, sizeof tmp, "%s.XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        char why[160];
        snprintf(why, sizeof why, "cannot create a file there (%s)", strerror(errno));
        cs_arrivals_say(path, why);
        return;
    }
    const uint8_t *p = b->p;
    size_t left = b->n;
    int err = 0;
    while (left && !err) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) err = w < 0 ? errno : EIO;
        else { p += w; left -= (size_t)w; }
    }
    if (!err && fchmod(fd, 0644) != 0) err = errno;
    if (close(fd) != 0 && !err) err = errno;
    if (!err && rename(tmp, path) != 0) err = errno;
    if (err) {
        unlink(tmp);
        cs_arrivals_say(path, strerror(err));
    }
}

void cs_arrivals_write(const char *path, const uint8_t *all, const int *len, const int *at, int wsize,
                       int estimated)
{
    merged m;
    memset(&m, 0, sizeof m);
    cs_wbuf b = { 0 };
    m.offsets = calloc(2 * (size_t)wsize, sizeof *m.offsets);
    if (!m.offsets) {
        cs_arrivals_say(path, "out of memory; no trace written");
        return;
    }
    int unparsed = 0;
    for (int r = 0; r < wsize; r++)
        if (!merge_blob(&m, (uint32_t)r, all + at[r], (size_t)len[r])) unparsed++;
    if (!m.have_t0) { m.t0 = PMPI_Wtime(); m.have_t0 = 1; }
    encode(&b, &m, (uint32_t)wsize, estimated);
    if (b.bad) cs_arrivals_say(path, "out of memory; no trace written");
    else write_file(path, &b);
    char line[160];
    if (m.dropped || m.bad || unparsed) {
        snprintf(line, sizeof line, "%zu call(s) not recorded by every rank of their communicator "
                 "left out (%zu record(s) of clashing communicators, %d rank(s) unreadable)",
                 m.dropped, m.bad, unparsed);
        cs_arrivals_say(path, line);
    }
    free(b.p);
    merged_free(&m);
}
