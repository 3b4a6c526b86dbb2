/* cache.c - a schedule cache as COLLSCHED_SCHEDULES (docs/cache.md): the index reader,
 * the run-time selection rule (candidates, arrival exchange, history, prediction,
 * choice) and COLLSCHED_STATS.
 *
 * comm_state.c owns the communicator's schedule set: it hands this module the cache
 * directory on the communicator's first call, turns every index entry of the
 * communicator's size into a candidate (loaded and proven as any schedule file) and asks
 * cs_cache_select for each call. Everything a choice depends on is the same on every
 * rank (the index, which the ranks agree on; the call's collective, size and bytes,
 * which MPI requires to match; the arrivals, which every rank sends to every other), so
 * all ranks choose alike without talking; the call site is the one input MPI does not
 * make equal, and the exchange checks it after the fact (docs/runtime.md).
 */
#include "runtime.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MSG_LEN 512
#define INDEX_MAX_BYTES (64u << 20)    /* the whole index */
#define INDEX_MAX_LINE (4u << 20)      /* one line: PATTERN of 65536 ranks fits */
#define INDEX_MAX_ENTRIES 65536
#define RANKS_MAX 65536
#define CLASS_MAX 65535
#define NAME_MAX_LEN 255               /* FILE and SITE */
#define LOCK_WAIT_S 30.0               /* a writer holding DIR/.lock longer: refused */
#define HIST 32                        /* labels kept: 2 x the longest period */
#define PERIOD_MAX 16

/* Why a call did not use a class entry (COLLSCHED_STATS). */
enum { MISS_WARMUP, MISS_UNKNOWN, MISS_NO_ENTRY, MISS_REFUSED, MISS_NO_PREDICTION, NMISS };
static const char *const miss_name[NMISS] = { "warm-up", "unknown-pattern", "no-entry",
                                              "entry-refused", "no-prediction" };

#ifndef SMPI_HELPERS_H
#include <pthread.h>
static pthread_mutex_t stats_mu = PTHREAD_MUTEX_INITIALIZER;
#define STATS_LOCK() pthread_mutex_lock(&stats_mu)
#define STATS_UNLOCK() pthread_mutex_unlock(&stats_mu)
#else /* SMPI: the ranks are actors of one thread */
#define STATS_LOCK() ((void)0)
#define STATS_UNLOCK() ((void)0)
#endif

typedef struct entry {
    char *file;          /* a name inside DIR */
    int line;            /* in the index */
    int coll;            /* CS_COLL_* */
    uint64_t bmin, bmax;
    char *site;          /* "*": any */
    int klass;           /* -1: regular */
    double radius;
    double *pattern;     /* size offsets; NULL for regular */
    int group;
    int cand;            /* candidate number in the communicator's set; -1 skipped */
} entry;

/* Entries of one collective, SITE and byte range: class numbers are per group. */
typedef struct group {
    int coll;
    const char *site;
    uint64_t bmin, bmax;
    int regular;         /* entry, -1 none */
    int *classes;        /* entries with a class, in index order */
    int nclasses;
} group;

typedef struct stat_use { char *file; int klass; uint64_t n; } stat_use;
typedef struct stat_row {
    int ranks, coll;
    char site[NAME_MAX_LEN + 1];
    uint64_t calls, hits, right, fallback, miss[NMISS];
    stat_use *use;
    int nuse;
    struct stat_row *next;
} stat_row;

/* A call site's history on this communicator (one per site, collective and group). */
typedef struct history {
    char site[NAME_MAX_LEN + 1];
    int coll, group;     /* group -1: nothing in the cache for its calls */
    int labels[HIST];    /* h[i] at labels[i % HIST] */
    uint64_t n;
    uint64_t pred_at;    /* n + 1 when `pred` was predicted at the exit of the site's call */
    int pred, pred_ok;   /* that prediction (pred_ok 0: nothing predicted) */
    stat_row *row;       /* rank 0 of the communicator only */
} history;

typedef struct arrival_msg { uint32_t seq, site; double t; } arrival_msg; /* 16 bytes */

struct cs_cache {
    char *dir;
    int size, rank;
    entry *e;
    int ne;
    group *g;
    int ng;
    history *h;
    int nh;
    double offset;       /* to rank 0's clock */
    MPI_Comm priv;
    int off;             /* the ranks named different call sites: no more selection */
    char offwhy[MSG_LEN];
    /* the arrival exchange of the last call that had one */
    uint32_t seq;
    int pending, pending_hist;
    int pending_class;   /* the class whose entry ran in that call, -1 none */
    arrival_msg own, *in;
    MPI_Request *reqs;   /* 2 (size - 1): receives, then sends */
};


static const char *coll_name(int coll) { return coll == CS_COLL_ALLGATHERV ? "allgatherv" : "allgather"; }

/* ---- reading DIR/index ---- */

static const char *file_kind(mode_t m)
{
    return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISCHR(m) ? "a character device"
         : S_ISBLK(m) ? "a block device" : S_ISSOCK(m) ? "a socket" : "a special file";
}

/* A shared flock on DIR/.lock if it is there (never created: no lock file, no lock);
 * waits for a writer at most LOCK_WAIT_S. Returns the descriptor, -1 without a lock, -2
 * refused (err set). */
static int lock_shared(const char *dir, char *err, size_t len)
{
    char path[4096];
    struct stat sb;
    cs_text(path, sizeof path, "%s/.lock", dir);
    if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) return -1; /* missing, or not a lock file */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) return -1;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) { close(fd); return -1; }
    for (double waited = 0; flock(fd, LOCK_SH | LOCK_NB) != 0; waited += 0.01) {
        if (errno != EWOULDBLOCK && errno != EINTR) { close(fd); return -1; } /* no flock here */
        if (waited >= LOCK_WAIT_S) {
            cs_text(err, len, "%s: lock: a writer held it for %.0f s, the index was not read", path, LOCK_WAIT_S);
            close(fd);
            return -2;
        }
        struct timespec ts = { 0, 10000000 };
        nanosleep(&ts, NULL);
    }
    return fd;
}

/* The whole index in memory (NUL-terminated), read under the shared lock; as schedfile.c
 * opens schedules: a regular file only (stat, then O_NONBLOCK and fstat), nothing read
 * beyond its size at open. */
static int read_index(const char *dir, char **out, size_t *n, char *err, size_t len)
{
    char path[4096];
    struct stat sb;
    cs_text(path, sizeof path, "%s/index", dir);
    *out = NULL;
    int lock = lock_shared(dir, err, len);
    if (lock == -2) return -1;
    int fd = -1, ok = 0;
    char *buf = NULL;
    if (stat(path, &sb) != 0) {
        cs_text(err, len, "%s: file: cannot read (%s)", path, strerror(errno));
    } else if (!S_ISREG(sb.st_mode)) {
        cs_text(err, len, "%s: file: expected a regular file, found %s", path, file_kind(sb.st_mode));
    } else if ((fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)) < 0) {
        cs_text(err, len, "%s: file: cannot read (%s)", path, strerror(errno));
    } else if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        cs_text(err, len, "%s: file: expected a regular file, found %s", path, file_kind(sb.st_mode));
    } else if ((uint64_t)sb.st_size > INDEX_MAX_BYTES) {
        cs_text(err, len, "%s: file: expected at most %u bytes, found %llu", path, INDEX_MAX_BYTES,
             (unsigned long long)sb.st_size);
    } else if (!(buf = malloc((size_t)sb.st_size + 1))) {
        cs_text(err, len, "%s: memory: cannot allocate %llu bytes", path, (unsigned long long)sb.st_size);
    } else {
        size_t got = 0, want = (size_t)sb.st_size;
        while (got < want) {
            ssize_t r = read(fd, buf + got, want - got);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) break;
            got += (size_t)r;
        }
        if (got != want) cs_text(err, len, "%s: file: expected %zu bytes, read %zu (changed while read)", path, want, got);
        else { buf[got] = 0; *n = got; ok = 1; }
    }
    if (fd >= 0) close(fd);
    if (lock >= 0) close(lock); /* closing releases the lock */
    if (!ok) { free(buf); return -1; }
    *out = buf;
    return 0;
}

/* One parsed entry line, pointing into the index buffer. */
typedef struct raw {
    char *f[12];
    int line;
    int coll;
    uint64_t ranks, bmin, bmax, klass;
} raw;

static int printable_word(const char *s, size_t max)
{
    size_t n = strlen(s);
    if (n == 0 || n > max) return 0;
    for (; *s; s++)
        if ((unsigned char)*s <= ' ' || (unsigned char)*s >= 0x7f) return 0;
    return 1;
}

static int whole(const char *s, uint64_t max, uint64_t *v)
{
    uint64_t x = 0;
    if (!*s || strlen(s) > 20) return 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return 0;
        if (x > (UINT64_MAX - (uint64_t)(*s - '0')) / 10) return 0;
        x = x * 10 + (uint64_t)(*s - '0');
    }
    if (x > max) return 0;
    *v = x;
    return 1;
}

/* A finite non-negative decimal (seconds): digits, '.', exponent; no inf, nan, hex. */
static int seconds(const char *s, size_t n, double *v)
{
    char tmp[64];
    if (n == 0 || n >= sizeof tmp) return 0;
    for (size_t i = 0; i < n; i++)
        if (!strchr("0123456789.eE+-", s[i])) return 0;
    memcpy(tmp, s, n);
    tmp[n] = 0;
    char *end;
    errno = 0;
    double x = strtod(tmp, &end);
    if (end != tmp + n || !isfinite(x) || x < 0) return 0;
    *v = x;
    return 1;
}

static const char *field_name[12] = { "record", "FILE", "COLLECTIVE", "RANKS", "BYTES_MIN", "BYTES_MAX",
                                      "SITE", "TOPOLOGY", "CLASS", "RADIUS", "USES", "PATTERN" };

/* err: "DIR/index: line N: FIELD: expected ..., found '...'" */
static int bad(char *err, size_t len, const char *dir, int line, int field, const char *found,
               const char *fmt, ...)
{
    char what[MSG_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (found)
        cs_text(err, len, "%s/index: line %d: %s: expected %s, found '%.40s%s'", dir, line,
             field_name[field], what, found, strlen(found) > 40 ? "..." : "");
    else
        cs_text(err, len, "%s/index: line %d: %s: expected %s", dir, line, field_name[field], what);
    return -1;
}

/* Checks one entry's fields (not PATTERN's values); fills r. */
static int check_entry(const char *dir, raw *r, char *err, size_t len)
{
    uint64_t v;
    int L = r->line;
    if (!printable_word(r->f[1], NAME_MAX_LEN) || strchr(r->f[1], '/') || r->f[1][0] == '.')
        return bad(err, len, dir, L, 1, r->f[1], "a file name inside the cache directory (no '/', "
                   "not starting with '.', 1 to %d printable bytes)", NAME_MAX_LEN);
    if (!strcmp(r->f[2], "allgather")) r->coll = CS_COLL_ALLGATHER;
    else if (!strcmp(r->f[2], "allgatherv")) r->coll = CS_COLL_ALLGATHERV;
    else return bad(err, len, dir, L, 2, r->f[2], "allgather or allgatherv");
    if (!whole(r->f[3], RANKS_MAX, &r->ranks) || r->ranks < 1)
        return bad(err, len, dir, L, 3, r->f[3], "a whole number 1 to %d", RANKS_MAX);
    if (!whole(r->f[4], UINT64_MAX, &r->bmin))
        return bad(err, len, dir, L, 4, r->f[4], "a whole number of bytes");
    if (!whole(r->f[5], UINT64_MAX, &r->bmax) || r->bmax < r->bmin)
        return bad(err, len, dir, L, 5, r->f[5], "a whole number of bytes, at least BYTES_MIN (%llu)",
                   (unsigned long long)r->bmin);
    if (!printable_word(r->f[6], NAME_MAX_LEN))
        return bad(err, len, dir, L, 6, r->f[6], "a call site (1 to %d printable bytes) or *", NAME_MAX_LEN);
    const char *t = r->f[7];
    int hex = strlen(t) == 16;
    for (int i = 0; hex && i < 16; i++) hex = strchr("0123456789abcdefABCDEF", t[i]) != NULL;
    if (!hex && strcmp(t, "-"))
        return bad(err, len, dir, L, 7, t, "16 hex digits or -");
    int regular = !strcmp(r->f[8], "regular");
    if (!regular && !whole(r->f[8], CLASS_MAX, &r->klass))
        return bad(err, len, dir, L, 8, r->f[8], "regular or a class number 0 to %d", CLASS_MAX);
    if (regular) r->klass = UINT64_MAX;
    double rad;
    if (regular ? strcmp(r->f[9], "-") : !seconds(r->f[9], strlen(r->f[9]), &rad))
        return bad(err, len, dir, L, 9, r->f[9], regular ? "- (a regular entry has no radius)"
                   : "a finite non-negative number of seconds");
    if (!whole(r->f[10], UINT64_MAX, &v))
        return bad(err, len, dir, L, 10, r->f[10], "a whole number of calls");
    if (regular && strcmp(r->f[11], "-"))
        return bad(err, len, dir, L, 11, r->f[11], "- (a regular entry has no pattern)");
    return 0;
}

/* PATTERN: exactly `ranks` finite non-negative comma-separated seconds, the smallest 0.
 * out: NULL to check only. */
static int check_pattern(const char *dir, const raw *r, double *out, char *err, size_t len)
{
    const char *s = r->f[11];
    uint64_t k = 0;
    double lo = INFINITY;
    for (;;) {
        const char *c = strchr(s, ',');
        size_t n = c ? (size_t)(c - s) : strlen(s);
        double x;
        if (k == r->ranks)
            return bad(err, len, dir, r->line, 11, NULL, "%llu values (RANKS), found more",
                       (unsigned long long)r->ranks);
        if (!seconds(s, n, &x))
            return bad(err, len, dir, r->line, 11, NULL, "finite non-negative seconds, value %llu is not",
                       (unsigned long long)k + 1);
        if (out) out[k] = x;
        if (x < lo) lo = x;
        k++;
        if (!c) break;
        s = c + 1;
    }
    if (k != r->ranks)
        return bad(err, len, dir, r->line, 11, NULL, "%llu values (RANKS), found %llu",
                   (unsigned long long)r->ranks, (unsigned long long)k);
    if (lo != 0)
        return bad(err, len, dir, r->line, 11, NULL, "the smallest offset 0, found %g", lo);
    return 0;
}

static int by_file(const void *a, const void *b)
{
    const raw *x = *(raw *const *)a, *y = *(raw *const *)b;
    int c = strcmp(x->f[1], y->f[1]);
    return c ? c : x->line - y->line;
}

/* Group key, then class (regular first), then line. */
static int by_key(const void *a, const void *b)
{
    const raw *x = *(raw *const *)a, *y = *(raw *const *)b;
    int c;
    if (x->coll != y->coll) return x->coll - y->coll;
    if (x->ranks != y->ranks) return x->ranks < y->ranks ? -1 : 1;
    if (x->bmin != y->bmin) return x->bmin < y->bmin ? -1 : 1;
    if (x->bmax != y->bmax) return x->bmax < y->bmax ? -1 : 1;
    if ((c = strcmp(x->f[6], y->f[6]))) return c;
    if (x->klass != y->klass) return x->klass + 1 < y->klass + 1 ? -1 : 1; /* regular (MAX) first */
    return x->line - y->line;
}

static int same_group(const raw *x, const raw *y)
{
    return x->coll == y->coll && x->ranks == y->ranks && x->bmin == y->bmin && x->bmax == y->bmax
        && !strcmp(x->f[6], y->f[6]);
}

static void free_cache(cs_cache *c)
{
    if (!c) return;
    for (int i = 0; i < c->ne; i++) {
        free(c->e[i].file);
        free(c->e[i].site);
        free(c->e[i].pattern);
    }
    for (int i = 0; i < c->ng; i++) free(c->g[i].classes);
    free(c->e);
    free(c->g);
    free(c->h);
    free(c->in);
    free(c->reqs);
    free(c->dir);
    free(c);
}

/* Builds the groups of the kept entries (in order of first appearance). */
static int build_groups(cs_cache *c)
{
    if (c->ne && !(c->g = calloc((size_t)c->ne, sizeof *c->g))) return -1;
    for (int i = 0; i < c->ne; i++) {
        entry *e = &c->e[i];
        int gi = 0;
        for (; gi < c->ng; gi++) {
            group *g = &c->g[gi];
            if (g->coll == e->coll && g->bmin == e->bmin && g->bmax == e->bmax && !strcmp(g->site, e->site))
                break;
        }
        group *g = &c->g[gi];
        if (gi == c->ng) {
            c->ng++;
            g->coll = e->coll;
            g->site = e->site;
            g->bmin = e->bmin;
            g->bmax = e->bmax;
            g->regular = -1;
        }
        e->group = gi;
        if (e->klass < 0) { g->regular = i; continue; }
        int *v = realloc(g->classes, (size_t)(g->nclasses + 1) * sizeof *v);
        if (!v) return -1;
        g->classes = v;
        v[g->nclasses++] = i;
    }
    return 0;
}

/* Parses and checks the index in buf; keeps the entries with RANKS == size. */
static int parse_index(cs_cache *c, char *buf, size_t n, char *err, size_t len)
{
    const char *dir = c->dir;
    raw *all = NULL;
    raw **order = NULL;
    int nall = 0, cap = 0, rc = -1, line = 0;
    char *p = buf, *end = buf + n;
    if (strlen(buf) != n) { /* a NUL byte inside */
        cs_text(err, len, "%s/index: file: expected text, found a NUL byte", dir);
        return -1;
    }
    while (p < end) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl) { cs_text(err, len, "%s/index: line %d: expected a newline at the end of the file", dir, line + 1); goto out; }
        *nl = 0;
        line++;
        if ((size_t)(nl - p) > INDEX_MAX_LINE) {
            cs_text(err, len, "%s/index: line %d: expected at most %u bytes, found %zu", dir, line,
                 INDEX_MAX_LINE, (size_t)(nl - p));
            goto out;
        }
        char *s = p;
        p = nl + 1;
        if (line == 1) {
            if (strcmp(s, "collsched-cache 1")) {
                cs_text(err, len, "%s/index: line 1: header: expected 'collsched-cache 1', found '%.40s'", dir, s);
                goto out;
            }
            continue;
        }
        if (s[0] == '#') continue;
        if (strncmp(s, "entry ", 6)) {
            cs_text(err, len, "%s/index: line %d: record: expected 'entry' or a '#' comment, found '%.40s'",
                 dir, line, s);
            goto out;
        }
        if (nall == INDEX_MAX_ENTRIES) {
            cs_text(err, len, "%s/index: line %d: entries: expected at most %d", dir, line, INDEX_MAX_ENTRIES);
            goto out;
        }
        if (nall == cap) {
            raw *v = realloc(all, (size_t)(cap = cap ? 2 * cap : 64) * sizeof *v);
            if (!v) { cs_text(err, len, "%s/index: memory: cannot allocate the entries", dir); goto out; }
            all = v;
        }
        raw *r = &all[nall];
        memset(r, 0, sizeof *r);
        r->line = line;
        int k = 0;
        for (char *f = s;; k++) {
            char *sp = strchr(f, ' ');
            if (k < 12) r->f[k] = f;
            if (!sp) { k++; break; }
            *sp = 0;
            f = sp + 1;
        }
        if (k != 12) {
            cs_text(err, len, "%s/index: line %d: fields: expected 12 separated by one space "
                 "(entry FILE COLLECTIVE RANKS BYTES_MIN BYTES_MAX SITE TOPOLOGY CLASS RADIUS USES PATTERN), "
                 "found %d", dir, line, k);
            goto out;
        }
        if (check_entry(dir, r, err, len)) goto out;
        if (r->klass != UINT64_MAX && check_pattern(dir, r, NULL, err, len)) goto out;
        nall++;
    }
    if (line == 0) { cs_text(err, len, "%s/index: line 1: header: expected 'collsched-cache 1', found an empty file", dir); goto out; }
    /* No duplicate FILE; one regular entry and one entry per class in a group. */
    if (nall && !(order = malloc((size_t)nall * sizeof *order))) {
        cs_text(err, len, "%s/index: memory: cannot allocate the entries", dir);
        goto out;
    }
    for (int i = 0; i < nall; i++) order[i] = &all[i];
    if (nall) qsort(order, (size_t)nall, sizeof *order, by_file);
    for (int i = 1; i < nall; i++)
        if (!strcmp(order[i]->f[1], order[i - 1]->f[1])) {
            raw *r = order[i];
            bad(err, len, dir, r->line, 1, r->f[1], "a file no other entry names (line %d does)", order[i - 1]->line);
            goto out;
        }
    if (nall) qsort(order, (size_t)nall, sizeof *order, by_key);
    for (int i = 1; i < nall; i++)
        if (same_group(order[i], order[i - 1]) && order[i]->klass == order[i - 1]->klass) {
            raw *r = order[i];
            if (r->klass == UINT64_MAX)
                bad(err, len, dir, r->line, 8, r->f[8], "one regular entry per collective, SITE, RANKS and "
                    "byte range (line %d has one)", order[i - 1]->line);
            else
                bad(err, len, dir, r->line, 8, r->f[8], "one entry per class per collective, SITE, RANKS "
                    "and byte range (line %d has this class)", order[i - 1]->line);
            goto out;
        }
    /* Keep this communicator's size, in index order. */
    int keep = 0;
    for (int i = 0; i < nall; i++) keep += all[i].ranks == (uint64_t)c->size;
    if (keep && !(c->e = calloc((size_t)keep, sizeof *c->e))) {
        cs_text(err, len, "%s/index: memory: cannot allocate the entries", dir);
        goto out;
    }
    for (int i = 0; i < nall; i++) {
        raw *r = &all[i];
        if (r->ranks != (uint64_t)c->size) continue;
        entry *e = &c->e[c->ne++];
        e->line = r->line;
        e->coll = r->coll;
        e->bmin = r->bmin;
        e->bmax = r->bmax;
        e->klass = r->klass == UINT64_MAX ? -1 : (int)r->klass;
        e->cand = -1;
        e->file = strdup(r->f[1]);
        e->site = strdup(r->f[6]);
        if (!e->file || !e->site) { cs_text(err, len, "%s/index: memory: cannot allocate the entries", dir); goto out; }
        if (e->klass >= 0) {
            seconds(r->f[9], strlen(r->f[9]), &e->radius);
            if (!(e->pattern = malloc((size_t)c->size * sizeof *e->pattern))) {
                cs_text(err, len, "%s/index: memory: cannot allocate the patterns", dir);
                goto out;
            }
            check_pattern(dir, r, e->pattern, err, len);
        }
    }
    if (build_groups(c)) { cs_text(err, len, "%s/index: memory: cannot allocate the groups", dir); goto out; }
    rc = 0;
out:
    free(order);
    free(all);
    return rc;
}

int cs_cache_open(const char *dir, int size, int rank, cs_cache **out, uint64_t *hash, char *err,
                  size_t len)
{
    char *buf = NULL;
    size_t n = 0;
    *out = NULL;
    *hash = cs_hash64(0, "cache", 5);
    cs_cache *c = calloc(1, sizeof *c);
    if (!c || !(c->dir = strdup(dir))) {
        free(c);
        cs_text(err, len, "%s/index: memory: cannot allocate the cache", dir);
        return -1;
    }
    c->size = size;
    c->rank = rank;
    c->priv = MPI_COMM_NULL;
    c->pending_hist = -1;
    c->pending_class = -1;
    if (read_index(dir, &buf, &n, err, len) != 0) { free_cache(c); return -1; }
    *hash = cs_hash64(*hash, buf, n);
    int rc = parse_index(c, buf, n, err, len);
    free(buf);
    if (rc != 0) { free_cache(c); return -1; }
    *out = c;
    return 0;
}

int cs_cache_entries(const cs_cache *c) { return c->ne; }
const char *cs_cache_file(const cs_cache *c, int i) { return c->e[i].file; }
int cs_cache_line(const cs_cache *c, int i) { return c->e[i].line; }
void cs_cache_set_candidate(cs_cache *c, int i, int k) { c->e[i].cand = k; }

int cs_cache_header_fits(const cs_cache *c, int i, const collsched_header *h, char *why, size_t len)
{
    const entry *e = &c->e[i];
    if (h->collective != 1) {
        cs_text(why, len, "collective: expected 1 (allgather, which serves allgatherv too), found %u", h->collective);
        return 0;
    }
    if (h->nranks != (uint32_t)c->size) {
        cs_text(why, len, "nranks: expected %d (the index's RANKS), found %u", c->size, h->nranks);
        return 0;
    }
    if (h->bytes_min > e->bmin || h->bytes_max < e->bmax) {
        cs_text(why, len, "bytes: expected a range covering the index's %llu..%llu, found %llu..%llu",
             (unsigned long long)e->bmin, (unsigned long long)e->bmax,
             (unsigned long long)h->bytes_min, (unsigned long long)h->bytes_max);
        return 0;
    }
    return 1;
}

/* COLLSCHED_STATS for programs that never call collsched_finalize (linked against
 * libcollsched, no preload): under Open MPI, MPI_Finalize deletes MPI_COMM_SELF's
 * attributes first, while MPI still works, and ours calls collsched_finalize (as
 * arrivals.c's does for the trace; whichever runs first writes both, the other finds them
 * done). Set only by the set-up of a cache on a communicator of every world rank, which
 * every rank makes, so all of them finalize together. SMPI refuses MPI calls there: SMPI
 * programs call collsched_finalize. */
#ifndef SMPI_HELPERS_H
static int finalize_keyval = MPI_KEYVAL_INVALID;

static int at_mpi_finalize(MPI_Comm comm, int kv, void *value, void *extra)
{
    (void)comm; (void)kv; (void)value; (void)extra;
    collsched_finalize();
    return MPI_SUCCESS;
}
#endif

static void hook_finalize(void)
{
#ifndef SMPI_HELPERS_H
    int set = 0;
    STATS_LOCK();
    if (finalize_keyval == MPI_KEYVAL_INVALID
        && PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, at_mpi_finalize, &finalize_keyval, NULL) == MPI_SUCCESS)
        set = 1;
    STATS_UNLOCK();
    if (set) PMPI_Comm_set_attr(MPI_COMM_SELF, finalize_keyval, NULL);
#endif
}

int cs_cache_setup(cs_cache *c, MPI_Comm priv)
{
    int world = 0;
    c->priv = priv;
    if (PMPI_Comm_size(MPI_COMM_WORLD, &world) == MPI_SUCCESS && world == c->size) hook_finalize();
    return cs_clock_offset(priv, &c->offset);
}

/* ---- the rule ---- */

/* The call's group: the first (index order) of its collective whose byte range holds
 * every block, of the call's own site if any, else of site '*'; -1 none. */
static int find_group(const cs_cache *c, int coll, const char *site, uint64_t lo, uint64_t hi)
{
    int any = -1;
    for (int i = 0; i < c->ng; i++) {
        const group *g = &c->g[i];
        if (g->coll != coll || lo < g->bmin || hi > g->bmax) continue;
        if (!strcmp(g->site, site)) return i;
        if (any < 0 && !strcmp(g->site, "*")) any = i;
    }
    return any;
}

/* Whether the call carries the arrival exchange: some group of its collective and bytes,
 * whatever its site, has classes (the site does not decide it: MPI does not make it
 * equal on every rank, and a rank that posted receives nobody sends would hang). */
static int wants_exchange(const cs_cache *c, int coll, uint64_t lo, uint64_t hi)
{
    if (c->off || c->size < 2 || c->size > CS_CACHE_EXCHANGE_MAX || c->priv == MPI_COMM_NULL) return 0;
    for (int i = 0; i < c->ng; i++) {
        const group *g = &c->g[i];
        if (g->coll == coll && lo >= g->bmin && hi <= g->bmax && g->nclasses) return 1;
    }
    return 0;
}

/* RMS over ranks of (a_r - min a) - c_r. */
static double distance(const double *a, double amin, const double *cls, int n)
{
    double s = 0;
    for (int r = 0; r < n; r++) {
        double d = (a[r] - amin) - cls[r];
        s += d * d;
    }
    return sqrt(s / n);
}

/* The nearest class of group g (ties to the lower number) if within its radius, else -1. */
static int label_of(const cs_cache *c, const group *g, const double *a)
{
    double amin = INFINITY;
    for (int r = 0; r < c->size; r++) {
        if (!isfinite(a[r])) return -1;
        if (a[r] < amin) amin = a[r];
    }
    int best = -1;
    double bd = INFINITY;
    for (int i = 0; i < g->nclasses; i++) {
        const entry *e = &c->e[g->classes[i]];
        double d = distance(a, amin, e->pattern, c->size);
        if (!isfinite(d)) continue;
        if (best < 0 || d < bd || (d == bd && e->klass < c->e[best].klass)) { best = g->classes[i]; bd = d; }
    }
    return best >= 0 && bd <= c->e[best].radius ? c->e[best].klass : -1;
}

static int H(const history *h, uint64_t i) { return h->labels[i % HIST]; }

/* The smallest period p (1..16) whose last p labels repeat the p before them predicts
 * h[n-p]; without one, the last label; without history, nothing (0). */
static int predict(const history *h, int *label)
{
    uint64_t n = h->n;
    if (n == 0) return 0;
    for (uint64_t p = 1; p <= PERIOD_MAX && n >= 2 * p; p++) {
        uint64_t i = 0;
        while (i < p && H(h, n - 1 - i) == H(h, n - 1 - i - p)) i++;
        if (i == p) { *label = H(h, n - p); return 1; }
    }
    *label = H(h, n - 1);
    return 1;
}

/* The prediction for the site's next call: the one made at the exit of its last call if
 * the history has not moved since (cs_cache_after), else made now (the same rule). */
static int predicted(const history *h, int *label)
{
    if (h->pred_at != h->n + 1) return predict(h, label);
    *label = h->pred;
    return h->pred_ok;
}

static uint32_t site_hash(const char *site)
{
    uint64_t x = cs_hash64(0, site, strlen(site));
    return (uint32_t)(x ^ (x >> 32));
}

/* Completes the previous exchange (every rank sent when it entered that call, and all
 * entered it: its allgather completed here) and labels its pattern into its history. */
static int complete_exchange(cs_cache *c)
{
    if (!c->pending) return MPI_SUCCESS;
    c->pending = 0;
    int rc = PMPI_Waitall(2 * (c->size - 1), c->reqs, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) return rc;
    c->in[c->rank] = c->own;
    for (int r = 0; r < c->size; r++) {
        if (c->in[r].seq != c->own.seq || c->in[r].site != c->in[0].site) {
            c->off = 1;
            cs_text(c->offwhy, sizeof c->offwhy, "%s: cache: ranks named different call sites (or "
                 "exchanged out of step) for call %u of an exchange on a communicator of %d ranks: "
                 "the cache is off for this communicator", c->dir, c->own.seq, c->size);
            if (c->rank == 0) cs_say("%s", c->offwhy);
            return MPI_SUCCESS;
        }
    }
    if (c->pending_hist < 0) return MPI_SUCCESS;
    history *h = &c->h[c->pending_hist];
    double a[CS_CACHE_EXCHANGE_MAX];
    for (int r = 0; r < c->size; r++) a[r] = c->in[r].t;
    int label = label_of(c, &c->g[h->group], a);
    h->labels[h->n % HIST] = label;
    h->n++;
    if (h->row && c->pending_class >= 0 && label == c->pending_class) { /* the entry was right */
        STATS_LOCK();
        h->row->right++;
        STATS_UNLOCK();
    }
    return MPI_SUCCESS;
}

/* Every rank's arrival (on rank 0's clock) to every other, and the receives for theirs. */
static int post_exchange(cs_cache *c, const cs_call_ctx *ctx, const char *site, int hist, int klass)
{
    if (!c->reqs) {
        c->reqs = malloc((size_t)2 * (size_t)(c->size - 1) * sizeof *c->reqs);
        c->in = malloc((size_t)c->size * sizeof *c->in);
        if (!c->reqs || !c->in) return MPI_ERR_NO_MEM;
    }
    c->own.seq = c->seq++;
    c->own.site = site_hash(site);
    c->own.t = ctx->arrival + c->offset;
    int rc = MPI_SUCCESS, k = 0;
    for (int r = 0; r < c->size && rc == MPI_SUCCESS; r++)
        if (r != c->rank)
            rc = PMPI_Irecv(&c->in[r], (int)sizeof(arrival_msg), MPI_BYTE, r, CS_TAG_ARRIVAL, c->priv, &c->reqs[k++]);
    for (int r = 0; r < c->size && rc == MPI_SUCCESS; r++)
        if (r != c->rank)
            rc = PMPI_Isend(&c->own, (int)sizeof(arrival_msg), MPI_BYTE, r, CS_TAG_ARRIVAL, c->priv, &c->reqs[k++]);
    if (rc != MPI_SUCCESS) return rc;
    c->pending = 1;
    c->pending_hist = hist;
    c->pending_class = klass;
    return MPI_SUCCESS;
}

/* ---- COLLSCHED_STATS rows (process-wide: rows outlive communicators) ---- */

static stat_row *stat_rows;

static stat_row *stat_row_for(int ranks, int coll, const char *site)
{
    STATS_LOCK();
    stat_row *r = stat_rows;
    for (; r; r = r->next)
        if (r->ranks == ranks && r->coll == coll && !strcmp(r->site, site)) break;
    if (!r && (r = calloc(1, sizeof *r))) {
        r->ranks = ranks;
        r->coll = coll;
        cs_text(r->site, sizeof r->site, "%s", site);
        r->next = stat_rows;
        stat_rows = r;
    }
    STATS_UNLOCK();
    return r;
}

static void stat_count(stat_row *r, const char *file, int klass, int miss)
{
    if (!r) return;
    STATS_LOCK();
    r->calls++;
    if (miss >= 0) r->miss[miss]++;
    if (!file) {
        r->fallback++;
    } else {
        if (klass >= 0) r->hits++;
        int i = 0;
        while (i < r->nuse && strcmp(r->use[i].file, file)) i++;
        if (i == r->nuse) {
            stat_use *v = realloc(r->use, (size_t)(r->nuse + 1) * sizeof *v);
            char *f = strdup(file);
            if (v) r->use = v;
            if (!v || !f) { free(f); STATS_UNLOCK(); return; }
            v[i] = (stat_use){ f, klass, 0 };
            r->nuse++;
        }
        r->use[i].n++;
    }
    STATS_UNLOCK();
}

/* The call site's history on this communicator (created on its first call). */
static int history_for(cs_cache *c, const char *site, int coll, int gi)
{
    for (int i = 0; i < c->nh; i++)
        if (c->h[i].coll == coll && c->h[i].group == gi && !strcmp(c->h[i].site, site)) return i;
    history *v = realloc(c->h, (size_t)(c->nh + 1) * sizeof *v);
    if (!v) return -1;
    c->h = v;
    history *h = &v[c->nh];
    memset(h, 0, sizeof *h);
    cs_text(h->site, sizeof h->site, "%s", site);
    h->coll = coll;
    h->group = gi;
    if (c->rank == 0) h->row = stat_row_for(c->size, coll, site);
    return c->nh++;
}

/* Entry i, loaded and proven on first use (collective: every rank makes the same
 * choice); 1 usable, 0 skipped or refused. */
static int usable(cs_comm *st, const cs_cache *c, int i, cs_selection *sel, int *rc)
{
    *rc = MPI_SUCCESS;
    if (c->e[i].cand < 0) return 0;
    *rc = cs_candidate_use(st, c->e[i].cand, sel);
    return *rc == MPI_SUCCESS && sel->sched != NULL;
}

int cs_cache_select(cs_cache *c, cs_comm *st, const cs_call_ctx *ctx, uint64_t lo, uint64_t hi,
                    cs_selection *sel)
{
    char site[NAME_MAX_LEN + 1], why[MSG_LEN];
    int rc = MPI_SUCCESS;
    sel->sched = NULL;
    if (c->off) { cs_note_fallback(st, c->offwhy); return MPI_SUCCESS; }
    cs_call_site(ctx, site, sizeof site);
    for (char *s = site; *s; s++) /* a word, as the index and the stats file hold them */
        if ((unsigned char)*s <= ' ' || (unsigned char)*s >= 0x7f) *s = '?';
    if (!site[0]) cs_text(site, sizeof site, "?");
    int gi = find_group(c, ctx->collective, site, lo, hi);
    int exch = wants_exchange(c, ctx->collective, lo, hi);
    if (exch) {
        if ((rc = complete_exchange(c)) != MPI_SUCCESS) return rc;
        if (c->off) { cs_note_fallback(st, c->offwhy); return MPI_SUCCESS; }
    }
    int hi_ = history_for(c, site, ctx->collective, gi);
    if (hi_ < 0) return MPI_ERR_NO_MEM;
    history *h = &c->h[hi_];
    int miss = -1, used = -1, label = -1;
    if (gi < 0) {
        miss = MISS_NO_ENTRY;
        cs_text(why, sizeof why, "%s: cache: no entry for %s, %d ranks, %llu..%llu bytes per rank, site %s",
             c->dir, coll_name(ctx->collective), c->size, (unsigned long long)lo, (unsigned long long)hi, site);
    } else {
        const group *g = &c->g[gi];
        if (g->nclasses) {
            if (!exch) miss = MISS_NO_PREDICTION;
            else if (!predicted(h, &label)) miss = MISS_WARMUP;
            else if (label < 0) miss = MISS_UNKNOWN;
            else {
                int k = -1;
                for (int i = 0; i < g->nclasses && k < 0; i++)
                    if (c->e[g->classes[i]].klass == label) k = g->classes[i];
                if (k < 0) miss = MISS_NO_ENTRY;
                else if (usable(st, c, k, sel, &rc)) used = k;
                else if (rc != MPI_SUCCESS) return rc;
                else miss = MISS_REFUSED;
            }
        }
        if (used < 0 && g->regular >= 0) {
            if (usable(st, c, g->regular, sel, &rc)) used = g->regular;
            else if (rc != MPI_SUCCESS) return rc;
            else if (miss < 0) miss = MISS_REFUSED;
        }
        if (used < 0)
            cs_text(why, sizeof why, "%s: cache: %s for %s, %d ranks, %llu..%llu bytes per rank, site %s, "
                 "and no usable regular entry", c->dir, miss == MISS_WARMUP ? "nothing predicted yet"
                 : miss == MISS_UNKNOWN ? "the last pattern is in no class"
                 : miss == MISS_REFUSED ? "the entry was refused" : miss == MISS_NO_PREDICTION
                 ? "no prediction above " "256 ranks" : "no class entry", coll_name(ctx->collective),
                 c->size, (unsigned long long)lo, (unsigned long long)hi, g->site);
    }
    if (exch && (rc = post_exchange(c, ctx, site, gi >= 0 && c->g[gi].nclasses ? hi_ : -1,
                                    used >= 0 ? c->e[used].klass : -1)) != MPI_SUCCESS)
        return rc;
    if (used < 0) { sel->sched = NULL; cs_note_fallback(st, why); } /* used: cs_candidate_use noted it */
    if (h->row) stat_count(h->row, used >= 0 ? c->e[used].file : NULL, used >= 0 ? c->e[used].klass : -1, miss);
    return MPI_SUCCESS;
}

const collsched_schedule *cs_cache_pick(cs_cache *c, cs_comm *st, const double *pattern, uint64_t bytes,
                                        const char **path)
{
    int gi = find_group(c, CS_COLL_ALLGATHER, "*", bytes, bytes);
    int hi_ = history_for(c, "PAT", CS_COLL_ALLGATHER, gi);
    stat_row *row = hi_ >= 0 ? c->h[hi_].row : NULL;
    const collsched_schedule *s = NULL;
    int miss = -1, used = -1;
    if (gi < 0) {
        miss = MISS_NO_ENTRY;
    } else {
        const group *g = &c->g[gi];
        if (g->nclasses) {
            int label = label_of(c, g, pattern), k = -1;
            for (int i = 0; i < g->nclasses && k < 0 && label >= 0; i++)
                if (c->e[g->classes[i]].klass == label) k = g->classes[i];
            if (label < 0) miss = MISS_UNKNOWN;
            else if (c->e[k].cand >= 0 && (s = cs_candidate_proven(st, c->e[k].cand, path))) used = k;
            else miss = MISS_REFUSED;
        }
        if (!s && g->regular >= 0 && c->e[g->regular].cand >= 0
            && (s = cs_candidate_proven(st, c->e[g->regular].cand, path)))
            used = g->regular;
        else if (!s && g->regular >= 0 && miss < 0)
            miss = MISS_REFUSED;
    }
    if (row) stat_count(row, used >= 0 ? c->e[used].file : NULL, used >= 0 ? c->e[used].klass : -1, miss);
    return s;
}

/* Step 6's entry for a predicted label of group g, among the proven entries only (no
 * collective here): the class's entry, else the regular one; -1 none. (A class entry not
 * proven yet gets the regular entry's receives: they wait for that entry's next use.) */
static int entry_ahead(const cs_cache *c, cs_comm *st, const group *g, int ok, int label)
{
    const char *path;
    for (int i = 0; ok && label >= 0 && i < g->nclasses; i++) {
        const entry *e = &c->e[g->classes[i]];
        if (e->klass != label) continue;
        if (e->cand >= 0 && cs_candidate_proven(st, e->cand, &path)) return e->cand;
        break; /* absent or refused: the regular entry serves */
    }
    if (g->regular < 0 || c->e[g->regular].cand < 0) return -1;
    return cs_candidate_proven(st, c->e[g->regular].cand, &path) ? c->e[g->regular].cand : -1;
}

int cs_cache_after(cs_cache *c, cs_comm *st)
{
    if (!c || !c->pending || c->off) return MPI_SUCCESS;
    int hist = c->pending_hist;
    int rc = complete_exchange(c); /* every rank entered the call: its message is here */
    if (rc != MPI_SUCCESS || c->off || hist < 0) return rc;
    history *h = &c->h[hist];
    h->pred_ok = predict(h, &h->pred);
    h->pred_at = h->n + 1;
    int k = entry_ahead(c, st, &c->g[h->group], h->pred_ok, h->pred);
    return k >= 0 ? cs_candidate_ahead(st, k) : MPI_SUCCESS;
}

void cs_cache_free(cs_cache *c, int mpi_usable)
{
    if (!c) return;
    /* The peers sent and posted their receives when they entered the exchange's call. */
    if (c->pending && mpi_usable) complete_exchange(c);
    if (c->pending && !mpi_usable) { /* SMPI's late delete: MPI may still write into them */
        c->in = NULL;
        c->reqs = NULL;
    }
    free_cache(c);
}

/* ---- COLLSCHED_STATS at finalize ---- */

/* This process's rows as text: "R ranks coll calls hits right fallback m0..m4 nuse site" and
 * "U klass n file" lines. */
static char *serialize(size_t *n)
{
    size_t cap = 256, len = 0;
    char *s = malloc(cap);
    if (!s) return NULL;
    s[0] = 0;
    STATS_LOCK();
    for (stat_row *r = stat_rows; r; r = r->next) {
        for (int u = -1; u < r->nuse; u++) {
            char line[2 * NAME_MAX_LEN + 256];
            if (u < 0)
                cs_text(line, sizeof line, "R %d %d %llu %llu %llu %llu %llu %llu %llu %llu %llu %d %s\n", r->ranks,
                     r->coll, (unsigned long long)r->calls, (unsigned long long)r->hits,
                     (unsigned long long)r->right,
                     (unsigned long long)r->fallback, (unsigned long long)r->miss[0],
                     (unsigned long long)r->miss[1], (unsigned long long)r->miss[2],
                     (unsigned long long)r->miss[3], (unsigned long long)r->miss[4], r->nuse, r->site);
            else
                cs_text(line, sizeof line, "U %d %llu %s\n", r->use[u].klass, (unsigned long long)r->use[u].n,
                     r->use[u].file);
            size_t l = strlen(line);
            if (len + l + 1 > cap) {
                char *v = realloc(s, cap = 2 * (len + l + 1));
                if (!v) { STATS_UNLOCK(); free(s); return NULL; }
                s = v;
            }
            memcpy(s + len, line, l + 1);
            len += l;
        }
    }
    STATS_UNLOCK();
    *n = len;
    return s;
}

/* Rank 0: merges every process's rows (its own text: still read with care). */
static stat_row *merge(char *all)
{
    stat_row *rows = NULL, *cur = NULL;
    for (char *line = strtok(all, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == 'R') {
            stat_row t;
            unsigned long long v[9];
            int ranks, coll, nuse, off = 0;
            memset(&t, 0, sizeof t);
            if (sscanf(line, "R %d %d %llu %llu %llu %llu %llu %llu %llu %llu %llu %d %n", &ranks, &coll, &v[0],
                       &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &nuse, &off) < 12 || !off) {
                cur = NULL;
                continue;
            }
            for (cur = rows; cur; cur = cur->next)
                if (cur->ranks == ranks && cur->coll == coll && !strcmp(cur->site, line + off)) break;
            if (!cur) {
                if (!(cur = calloc(1, sizeof *cur))) continue;
                cur->ranks = ranks;
                cur->coll = coll;
                cs_text(cur->site, sizeof cur->site, "%s", line + off);
                cur->next = rows;
                rows = cur;
            }
            cur->calls += v[0]; cur->hits += v[1]; cur->right += v[2]; cur->fallback += v[3];
            for (int m = 0; m < NMISS; m++) cur->miss[m] += v[4 + m];
        } else if (line[0] == 'U' && cur) {
            int klass, off = 0;
            unsigned long long n;
            if (sscanf(line, "U %d %llu %n", &klass, &n, &off) < 2 || !off) continue;
            const char *file = line + off;
            int i = 0;
            while (i < cur->nuse && strcmp(cur->use[i].file, file)) i++;
            if (i == cur->nuse) {
                stat_use *v = realloc(cur->use, (size_t)(cur->nuse + 1) * sizeof *v);
                char *f = strdup(file);
                if (v) cur->use = v;
                if (!v || !f) { free(f); continue; }
                v[i] = (stat_use){ f, klass, 0 };
                cur->nuse++;
            }
            cur->use[i].n += n;
        }
    }
    return rows;
}

static int row_order(const void *a, const void *b)
{
    const stat_row *x = *(stat_row *const *)a, *y = *(stat_row *const *)b;
    if (x->ranks != y->ranks) return x->ranks - y->ranks;
    if (x->coll != y->coll) return x->coll - y->coll;
    return strcmp(x->site, y->site);
}

static int use_order(const void *a, const void *b)
{
    return strcmp(((const stat_use *)a)->file, ((const stat_use *)b)->file);
}

/* A YAML double-quoted scalar (the names are printable words; '"' and '\\' escaped). */
static void quoted(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

/* Writes the statistics to path atomically (a temporary file beside it, then rename). */
static void write_stats(const char *path, stat_row *rows)
{
    int n = 0;
    for (stat_row *r = rows; r; r = r->next) n++;
    stat_row **v = malloc((size_t)(n ? n : 1) * sizeof *v);
    char tmp[4096];
    cs_text(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    int fd = v ? open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644) : -1;
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        cs_say("COLLSCHED_STATS: not writing %s: %s", path, v ? strerror(errno) : "no memory");
        if (fd >= 0) { close(fd); unlink(tmp); }
        free(v);
        return;
    }
    n = 0;
    for (stat_row *r = rows; r; r = r->next) v[n++] = r;
    if (n) qsort(v, (size_t)n, sizeof *v, row_order);
    const char *src = getenv("COLLSCHED_SCHEDULES");
    fprintf(f, "# collsched schedule cache statistics (docs/cache.md)\ncollsched-stats: 1\nsource: ");
    quoted(f, src ? src : "");
    fprintf(f, "\nsites:%s\n", n ? "" : " []");
    for (int i = 0; i < n; i++) {
        stat_row *r = v[i];
        if (r->nuse) qsort(r->use, (size_t)r->nuse, sizeof *r->use, use_order);
        fprintf(f, "  - ranks: %d\n    collective: %s\n    site: ", r->ranks, coll_name(r->coll));
        quoted(f, r->site);
        fprintf(f, "\n    calls: %llu\n    hits: %llu\n    right: %llu\n    fallback: %llu\n    used:%s\n",
                (unsigned long long)r->calls, (unsigned long long)r->hits, (unsigned long long)r->right,
                (unsigned long long)r->fallback, r->nuse ? "" : " []");
        for (int u = 0; u < r->nuse; u++) {
            fprintf(f, "      - {file: ");
            quoted(f, r->use[u].file);
            if (r->use[u].klass >= 0) fprintf(f, ", class: %d", r->use[u].klass);
            else fprintf(f, ", class: regular");
            fprintf(f, ", calls: %llu}\n", (unsigned long long)r->use[u].n);
        }
        fprintf(f, "    missed:\n");
        for (int m = 0; m < NMISS; m++)
            fprintf(f, "      %s: %llu\n", miss_name[m], (unsigned long long)r->miss[m]);
    }
    free(v);
    int ok = fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        cs_say("COLLSCHED_STATS: not writing %s: %s", path, strerror(errno));
        unlink(tmp);
    }
}

static void free_rows(stat_row *r)
{
    while (r) {
        stat_row *next = r->next;
        for (int i = 0; i < r->nuse; i++) free(r->use[i].file);
        free(r->use);
        free(r);
        r = next;
    }
}

/* Collective over MPI_COMM_WORLD (one reduction whether or not COLLSCHED_STATS is set
 * anywhere, so that ranks that disagree on it cannot hang); idempotent. */
int cs_cache_finalize(void)
{
    static int done;
    int init = 0, fin = 0;
    if (PMPI_Initialized(&init) != MPI_SUCCESS || !init || PMPI_Finalized(&fin) != MPI_SUCCESS || fin)
        return MPI_SUCCESS;
    if (__atomic_exchange_n(&done, 1, __ATOMIC_ACQ_REL)) return MPI_SUCCESS;
    const char *path = getenv("COLLSCHED_STATS");
    int rank = 0, size = 1;
    int *lens = NULL, *displs = NULL;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    PMPI_Comm_size(MPI_COMM_WORLD, &size);
    if (rank == 0) {
        lens = calloc((size_t)size, sizeof *lens);
        displs = calloc((size_t)size, sizeof *displs);
    }
    /* wanted anywhere; rank 0 has no room for the counts (then nobody gathers) */
    int want[2] = { path && *path, rank == 0 && (!lens || !displs) };
    int rc = PMPI_Allreduce(MPI_IN_PLACE, want, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS || !want[0] || want[1]) {
        if (want[0] && want[1] && rank == 0) cs_say("COLLSCHED_STATS: no memory to gather the statistics");
        free(lens);
        free(displs);
        return rc;
    }
    size_t n = 0;
    char *mine = serialize(&n);
    int len = mine && n < (size_t)INT_MAX / 2 ? (int)n : 0;
    char *all = NULL;
    long long total = 0;
    int one = 0;
    rc = PMPI_Gather(&len, 1, MPI_INT, rank == 0 ? lens : &one, 1, MPI_INT, 0, MPI_COMM_WORLD);
    int go = 0; /* rank 0 can take every rank's text: all send it, else none does */
    if (rc == MPI_SUCCESS && rank == 0) {
        for (int r = 0; r < size; r++) { displs[r] = (int)total; total += lens[r]; if (total >= INT_MAX) break; }
        go = total < INT_MAX && (all = malloc((size_t)total + 1)) != NULL;
        if (!go) {
            cs_say("COLLSCHED_STATS: cannot gather %lld bytes of statistics on rank 0", total);
            for (int r = 0; r < size; r++) lens[r] = 0, displs[r] = 0;
        }
    }
    if (rc == MPI_SUCCESS) rc = PMPI_Bcast(&go, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (!go) len = 0;
    int zero = 0;
    if (rc == MPI_SUCCESS)
        rc = PMPI_Gatherv(mine ? mine : "", len, MPI_CHAR, all, lens ? lens : &zero, displs ? displs : &zero,
                          MPI_CHAR, 0, MPI_COMM_WORLD);
    if (rc == MPI_SUCCESS && rank == 0 && go) {
        all[total] = 0;
        stat_row *rows = merge(all);
        if (path && *path) write_stats(path, rows);
        free_rows(rows);
    }
    free(all);
    free(lens);
    free(displs);
    free(mine);
    return rc;
}
