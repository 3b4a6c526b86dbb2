/* arrivals.c - COLLSCHED_ARRIVALS=FILE: the arrival trace (docs/trace-format.md).
 *
 * Every process appends one record per call (communicator, call number, site, bytes, its
 * own arrival and exit on its own clock) to a buffer of its own: no message and no
 * synchronisation inside the call, one mutex around the append (threads). At finalize
 * (collective over MPI_COMM_WORLD) the clocks are put on rank 0's - offsets estimated
 * by ping-pong at start (the preload library's MPI_Init) and at finalize, interpolated
 * linearly in between - rank 0 gathers every process's records, matches the calls by
 * (communicator id, call number), and writes the file whole or not at all.
 *
 * Communicators are known by an attribute of our own keyval on the user's communicator
 * (its index in this process's table): a freed handle loses it, so a handle MPI reuses is
 * a new communicator.
 *
 * The trace is written by collsched_finalize (the preload library's MPI_Finalize calls
 * it). A program linked against libcollsched that never calls it still gets its trace
 * under Open MPI: MPI_Finalize deletes MPI_COMM_SELF's attributes first, while MPI still
 * works, and ours calls collsched_finalize. That attribute is set only by a call on a
 * communicator of every world rank, which every rank makes, so all of them finalize
 * together. SMPI refuses MPI calls there: SMPI programs call collsched_finalize.
 */
#include "runtime.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef SMPI_HELPERS_H
#include <pthread.h>
static pthread_mutex_t arr_mu = PTHREAD_MUTEX_INITIALIZER;
#define ARR_LOCK() pthread_mutex_lock(&arr_mu)
#define ARR_UNLOCK() pthread_mutex_unlock(&arr_mu)
#else /* SMPI ranks are actors of one thread; nothing in the sections yields */
#define ARR_LOCK() ((void)0)
#define ARR_UNLOCK() ((void)0)
#endif

#define SITE_LEN 256       /* names: 1..255 bytes */
#define PATH_LEN 4096
#define SITE_CACHE 64      /* call sites named without formatting a string */

typedef struct rec {
    uint32_t comm, site, seq;
    uint8_t collective, flags;
    uint64_t bytes;
    double arrival, exit;  /* this process's clock */
} rec;

typedef struct tcomm {
    uint64_t id;
    uint32_t size, rank;   /* members; this process's rank among them */
    uint32_t *world;       /* world rank of each member, in communicator rank order */
    uint32_t ncalls;       /* the next call's number */
} tcomm;

static struct {
    int state;                    /* -1 not read yet, 0 off, 1 on (atomic) */
    int done;                     /* finalized: nothing more is recorded (atomic) */
    char path[PATH_LEN];
    int keyval, self_keyval;      /* MPI_KEYVAL_INVALID until the first traced call */
    rec *recs;
    size_t nrecs, cap;
    size_t lost;                  /* records dropped for want of memory */
    tcomm *comms;
    uint32_t ncomms, capc;
    char **sites;                 /* interned names; sites_at: open addressing, index + 1 */
    uint32_t nsites, capsites, *sites_at, nslots;
    int started;                  /* t_first is set */
    double t_first;               /* local time tracing started */
    int have_start;
    double off_start, at_start;   /* the start estimate (local time it holds for) */
    struct { const void *addr; uint32_t site; } by_addr[SITE_CACHE]; /* return address -> site */
} A = { .state = -1, .keyval = MPI_KEYVAL_INVALID, .self_keyval = MPI_KEYVAL_INVALID };

static void say(const char *why)
{
    fprintf(stderr, "collsched: COLLSCHED_ARRIVALS=%s: %s\n", A.path, why);
    fflush(stderr);
}

int cs_arrivals_enabled(void)
{
    int v = __atomic_load_n(&A.state, __ATOMIC_ACQUIRE);
    if (v >= 0) return v;
    ARR_LOCK();
    if (A.state < 0) {
        const char *p = getenv("COLLSCHED_ARRIVALS");
        int on = p && *p && strlen(p) < PATH_LEN - 16; /* room for the temporary name */
        if (on) strcpy(A.path, p);
        else if (p && *p) fprintf(stderr, "collsched: COLLSCHED_ARRIVALS: the path is longer than "
                                  "%d bytes; not tracing\n", PATH_LEN - 17);
        __atomic_store_n(&A.state, on, __ATOMIC_RELEASE);
    }
    v = A.state;
    ARR_UNLOCK();
    return v;
}

static int mpi_usable(void)
{
    int init = 0, fin = 0;
    PMPI_Initialized(&init);
    if (init) PMPI_Finalized(&fin);
    return init && !fin;
}

void cs_arrivals_start(void)
{
    double off, at, rtt;
    if (!cs_arrivals_enabled() || !mpi_usable() || A.have_start) return;
    if (cs_clock_estimate(MPI_COMM_WORLD, &off, &at, &rtt) != MPI_SUCCESS) return;
    ARR_LOCK();
    A.off_start = off;
    A.at_start = at;
    A.have_start = 1;
    if (!A.started) A.t_first = PMPI_Wtime();
    A.started = 1;
    ARR_UNLOCK();
}

/* ---- recording ---- */

#ifndef SMPI_HELPERS_H
static int at_mpi_finalize(MPI_Comm comm, int kv, void *value, void *extra)
{
    (void)comm; (void)kv; (void)value; (void)extra;
    collsched_finalize();
    return MPI_SUCCESS;
}
#endif

/* Our keyval for the communicators (once; under the lock). */
static int ensure_keyval(void)
{
    int rc = MPI_SUCCESS;
    if (__atomic_load_n(&A.keyval, __ATOMIC_ACQUIRE) != MPI_KEYVAL_INVALID) return rc;
    ARR_LOCK();
    if (A.keyval == MPI_KEYVAL_INVALID) {
        int kv = MPI_KEYVAL_INVALID;
        rc = PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, MPI_COMM_NULL_DELETE_FN, &kv, NULL);
        if (rc == MPI_SUCCESS) __atomic_store_n(&A.keyval, kv, __ATOMIC_RELEASE);
    }
    ARR_UNLOCK();
    return rc;
}

/* The finalize hook on MPI_COMM_SELF (Open MPI; see the top comment). */
static void hook_finalize(void)
{
#ifndef SMPI_HELPERS_H
    int set = 0;
    ARR_LOCK();
    if (A.self_keyval == MPI_KEYVAL_INVALID
        && PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, at_mpi_finalize, &A.self_keyval, NULL)
               == MPI_SUCCESS)
        set = 1;
    ARR_UNLOCK();
    if (set) PMPI_Comm_set_attr(MPI_COMM_SELF, A.self_keyval, NULL);
#endif
}

/* This process's index of comm, registering it on first sight; -1: not traced
 * (intercommunicator, members outside MPI_COMM_WORLD, no memory). */
static int comm_index(MPI_Comm comm)
{
    void *v = NULL;
    int flag = 0, inter = 0, size = 0, rank = 0, wsize = 0;
    if (ensure_keyval() != MPI_SUCCESS || PMPI_Comm_get_attr(comm, A.keyval, &v, &flag) != MPI_SUCCESS)
        return -1;
    if (flag) return (int)((intptr_t)v - 1);
    if (PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || inter) return -1;
    PMPI_Comm_size(comm, &size);
    PMPI_Comm_rank(comm, &rank);
    PMPI_Comm_size(MPI_COMM_WORLD, &wsize);
    int *mine = malloc(2 * (size_t)size * sizeof *mine);
    uint32_t *world = malloc((size_t)size * sizeof *world);
    MPI_Group g = MPI_GROUP_NULL, wg = MPI_GROUP_NULL;
    int ok = mine && world && PMPI_Comm_group(comm, &g) == MPI_SUCCESS
             && PMPI_Comm_group(MPI_COMM_WORLD, &wg) == MPI_SUCCESS;
    for (int i = 0; ok && i < size; i++) mine[i] = i;
    if (ok) ok = PMPI_Group_translate_ranks(g, size, mine, wg, mine + size) == MPI_SUCCESS;
    for (int i = 0; ok && i < size; i++) {
        ok = mine[size + i] != MPI_UNDEFINED && mine[size + i] >= 0;
        if (ok) world[i] = (uint32_t)mine[size + i];
    }
    if (g != MPI_GROUP_NULL) PMPI_Group_free(&g);
    if (wg != MPI_GROUP_NULL) PMPI_Group_free(&wg);
    free(mine);
    int idx = -1;
    ARR_LOCK();
    if (ok && A.ncomms < INT32_MAX - 1) {
        if (A.ncomms == A.capc) {
            uint32_t c = A.capc ? 2 * A.capc : 16;
            tcomm *t = realloc(A.comms, c * sizeof *t);
            if (t) { A.comms = t; A.capc = c; }
        }
        if (A.ncomms < A.capc) {
            /* the id: members in rank order, and how many with the same members came before */
            uint32_t before = 0;
            for (uint32_t i = 0; i < A.ncomms; i++)
                before += A.comms[i].size == (uint32_t)size
                          && !memcmp(A.comms[i].world, world, (size_t)size * sizeof *world);
            uint64_t id = cs_hash64(0, &size, sizeof size);
            id = cs_hash64(id, world, (size_t)size * sizeof *world);
            id = cs_hash64(id, &before, sizeof before);
            A.comms[A.ncomms] = (tcomm){ id, (uint32_t)size, (uint32_t)rank, world, 0 };
            idx = (int)A.ncomms++;
            world = NULL;
        }
    }
    ARR_UNLOCK();
    free(world);
    /* not traced: remembered too (value 0), so the next call does not ask again */
    PMPI_Comm_set_attr(comm, A.keyval, (void *)(intptr_t)(idx + 1));
    if (idx >= 0 && size == wsize) hook_finalize();
    return idx;
}

static uint32_t name_hash(const char *s) { return (uint32_t)cs_hash64(0, s, strlen(s)); }

/* The index of a site name, added if new; UINT32_MAX without memory. Under the lock. */
static uint32_t intern(const char *name)
{
    uint32_t h = name_hash(name);
    for (uint32_t k = A.nslots ? h & (A.nslots - 1) : 0; A.nslots; k = (k + 1) & (A.nslots - 1)) {
        uint32_t at = A.sites_at[k];
        if (!at) break;
        if (!strcmp(A.sites[at - 1], name)) return at - 1;
    }
    if (2 * (A.nsites + 1) > A.nslots) { /* grow the table (half full at most) and rehash */
        uint32_t n = A.nslots ? 2 * A.nslots : 64;
        uint32_t *at = calloc(n, sizeof *at);
        if (!at) return UINT32_MAX;
        for (uint32_t i = 0; i < A.nsites; i++) {
            uint32_t k = name_hash(A.sites[i]) & (n - 1);
            while (at[k]) k = (k + 1) & (n - 1);
            at[k] = i + 1;
        }
        free(A.sites_at);
        A.sites_at = at;
        A.nslots = n;
    }
    if (A.nsites == A.capsites) {
        uint32_t c = A.capsites ? 2 * A.capsites : 16;
        char **s = realloc(A.sites, c * sizeof *s);
        if (!s) return UINT32_MAX;
        A.sites = s;
        A.capsites = c;
    }
    char *copy = strdup(name);
    if (!copy) return UINT32_MAX;
    uint32_t k = h & (A.nslots - 1);
    while (A.sites_at[k]) k = (k + 1) & (A.nslots - 1);
    A.sites[A.nsites] = copy;
    A.sites_at[k] = ++A.nsites;
    return A.nsites - 1;
}

/* The site index of a call: a label is interned as it is; an address is looked up in a
 * small direct-mapped cache first (naming it formats a string). Under the lock;
 * UINT32_MAX: not cached (name it outside the lock). */
static uint32_t cached_site(const cs_call_ctx *ctx)
{
    if (ctx->label) return intern(ctx->label);
    size_t k = ((uintptr_t)ctx->site >> 2) % SITE_CACHE;
    return ctx->site && A.by_addr[k].addr == ctx->site ? A.by_addr[k].site : UINT32_MAX;
}

void cs_arrivals_call(MPI_Comm comm, const cs_call_ctx *ctx, double exit_time)
{
    if (!cs_arrivals_enabled() || __atomic_load_n(&A.done, __ATOMIC_ACQUIRE)) return;
    int c = comm_index(comm);
    if (c < 0) return;
    ARR_LOCK();
    uint32_t site = cached_site(ctx);
    if (site == UINT32_MAX && !ctx->label) {
        char name[SITE_LEN];
        ARR_UNLOCK(); /* dladdr takes the loader's lock: not under ours */
        cs_call_site(ctx, name, sizeof name);
        if (!name[0]) snprintf(name, sizeof name, "?");
        ARR_LOCK();
        site = intern(name);
        size_t k = ((uintptr_t)ctx->site >> 2) % SITE_CACHE;
        if (site != UINT32_MAX && ctx->site) {
            A.by_addr[k].addr = ctx->site;
            A.by_addr[k].site = site;
        }
    }
    if (!A.done) {
        if (!A.started) {
            A.t_first = ctx->arrival;
            A.started = 1;
        }
        if (A.nrecs == A.cap && site != UINT32_MAX) {
            size_t n = A.cap ? 2 * A.cap : 1024;
            rec *r = realloc(A.recs, n * sizeof *r);
            if (r) { A.recs = r; A.cap = n; }
        }
        tcomm *t = &A.comms[c];
        if (site == UINT32_MAX || A.nrecs == A.cap) {
            A.lost++;
        } else {
            A.recs[A.nrecs++] = (rec){ (uint32_t)c, site, t->ncalls, (uint8_t)ctx->collective,
                                       (uint8_t)(ctx->used ? 1 : 0), ctx->bytes, ctx->arrival,
                                       exit_time };
        }
        t->ncalls++; /* a lost record still takes its number: the others' calls keep theirs */
    }
    ARR_UNLOCK();
}

/* ---- bytes: little-endian, grown as needed ---- */

typedef struct wbuf { uint8_t *p; size_t n, cap; int bad; } wbuf;

static void put(wbuf *b, const void *x, size_t n)
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

static void put_le(wbuf *b, uint64_t v, int n)
{
    uint8_t x[8];
    for (int i = 0; i < n; i++) x[i] = (uint8_t)(v >> (8 * i));
    put(b, x, (size_t)n);
}

static void put_f64(wbuf *b, double d)
{
    uint64_t v;
    memcpy(&v, &d, 8);
    put_le(b, v, 8);
}

static void put_f32(wbuf *b, float f)
{
    uint32_t v;
    memcpy(&v, &f, 4);
    put_le(b, v, 4);
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

/* ---- finalize: one process's records, on rank 0's clock ---- */

typedef struct clockfix { double off_s, at_s, off_e, at_e; int apply; } clockfix;

/* Local time to rank 0's: the offset interpolated between the two estimates. */
static double to_rank0(const clockfix *k, double t)
{
    if (!k->apply) return t;
    if (k->at_e <= k->at_s) return t + k->off_e;
    return t + k->off_s + (k->off_e - k->off_s) * (t - k->at_s) / (k->at_e - k->at_s);
}

/* What a process sends rank 0: offsets, start, sites, communicators, records. */
static void serialise(wbuf *b, const clockfix *k)
{
    put_f64(b, k->off_s);
    put_f64(b, k->off_e);
    put_le(b, (uint64_t)A.started, 4);
    put_f64(b, A.started ? to_rank0(k, A.t_first) : 0.0);
    put_le(b, A.nsites, 4);
    put_le(b, A.ncomms, 4);
    put_le(b, A.nrecs, 8);
    for (uint32_t i = 0; i < A.nsites; i++) {
        size_t n = strlen(A.sites[i]);
        put_le(b, n, 2);
        put(b, A.sites[i], n);
    }
    for (uint32_t i = 0; i < A.ncomms; i++) {
        const tcomm *t = &A.comms[i];
        put_le(b, t->id, 8);
        put_le(b, t->size, 4);
        put_le(b, t->rank, 4);
        for (uint32_t j = 0; j < t->size; j++) put_le(b, t->world[j], 4);
    }
    for (size_t i = 0; i < A.nrecs; i++) {
        const rec *r = &A.recs[i];
        put_le(b, r->comm, 4);
        put_le(b, r->site, 4);
        put_le(b, r->seq, 4);
        put_le(b, r->collective, 1);
        put_le(b, r->flags, 1);
        put_le(b, r->bytes, 8);
        put_f64(b, to_rank0(k, r->arrival));
        put_f64(b, to_rank0(k, r->exit));
    }
}

/* ---- rank 0: matching calls across ranks ---- */

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
static void encode(wbuf *b, merged *m, uint32_t wsize, int estimated)
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
    put(b, "CSATRACE", 8);
    put_le(b, 1, 4);
    put_le(b, estimated ? 1 : 0, 4);
    put_le(b, wsize, 4);
    put_le(b, nsites, 4);
    put_le(b, ncomms, 4);
    put_le(b, 0, 4);
    put_le(b, ncalls, 8);
    put_f64(b, m->t0);
    for (uint32_t k = 0; k < nsites; k++) /* in index order */
        for (uint32_t i = 0; i < m->nsites; i++)
            if (site_out[i] == k) {
                size_t n = strlen(m->sites[i]);
                put_le(b, n, 2);
                put(b, m->sites[i], n);
            }
    for (uint32_t i = 0; i < m->ncomms; i++) {
        const gcomm *g = &m->comms[i];
        if (g->out == UINT32_MAX) continue;
        put_le(b, g->id, 8);
        put_le(b, g->size, 4);
        for (uint32_t r = 0; r < g->size; r++) put_le(b, g->world[r], 4);
    }
    for (uint32_t r = 0; r < 2 * wsize; r++) put_f64(b, m->offsets[r]);
    for (uint32_t i = 0; i < m->ncomms; i++) {
        const gcomm *g = &m->comms[i];
        for (uint32_t j = 0; g->out != UINT32_MAX && j < g->ncalls; j++) {
            const slot *s = &g->calls[j];
            if (!complete(g, s)) continue;
            double base = s->t[0];
            for (uint32_t r = 1; r < g->size; r++) base = s->t[r] < base ? s->t[r] : base;
            put_le(b, site_out[s->site], 4);
            put_le(b, g->out, 4);
            put_le(b, s->collective, 1);
            put_le(b, (uint64_t)((s->flags & 1) | (s->differ ? 2 : 0)), 1);
            put_le(b, 0, 2);
            put_le(b, j, 4);
            put_le(b, s->bytes, 8);
            put_f64(b, base - m->t0);
            for (uint32_t r = 0; r < 2 * g->size; r++) put_f32(b, (float)(s->t[r] - base));
        }
    }
    free(site_out);
    if (!b->bad) put_le(b, cs_crc32(0, b->p, b->n), 4);
}

/* Whole or not at all: a temporary file beside the target, then rename. */
static void write_file(const wbuf *b)
{
    char tmp[PATH_LEN + 16];
    snprintf(tmp, sizeof tmp, "%s.XXXXXX", A.path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        char why[PATH_LEN + 64];
        snprintf(why, sizeof why, "cannot create a file there (%s)", strerror(errno));
        say(why);
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
    if (!err && rename(tmp, A.path) != 0) err = errno;
    if (err) {
        unlink(tmp);
        say(strerror(err));
    }
}

/* Rank 0: every process's blob -> the file. */
static void assemble(const uint8_t *all, const int *len, const int *at, int wsize, int estimated)
{
    merged m;
    memset(&m, 0, sizeof m);
    wbuf b = { 0 };
    m.offsets = calloc(2 * (size_t)wsize, sizeof *m.offsets);
    if (!m.offsets) { say("out of memory; no trace written"); return; }
    int unparsed = 0;
    for (int r = 0; r < wsize; r++)
        if (!merge_blob(&m, (uint32_t)r, all + at[r], (size_t)len[r])) unparsed++;
    if (!m.have_t0) { m.t0 = PMPI_Wtime(); m.have_t0 = 1; }
    encode(&b, &m, (uint32_t)wsize, estimated);
    if (b.bad) say("out of memory; no trace written");
    else write_file(&b);
    char line[160];
    if (m.dropped || m.bad || unparsed) {
        snprintf(line, sizeof line, "%zu call(s) not recorded by every rank of their communicator "
                 "left out (%zu record(s) of clashing communicators, %d rank(s) unreadable)",
                 m.dropped, m.bad, unparsed);
        say(line);
    }
    free(b.p);
    merged_free(&m);
}

int cs_arrivals_finalize(void)
{
    if (!cs_arrivals_enabled() || !mpi_usable()) return MPI_SUCCESS;
    if (__atomic_exchange_n(&A.done, 1, __ATOMIC_ACQ_REL)) return MPI_SUCCESS;
    ARR_LOCK(); /* an append under way ends before we read the records */
    ARR_UNLOCK();
    MPI_Comm w;
    int rc = PMPI_Comm_dup(MPI_COMM_WORLD, &w);
    if (rc != MPI_SUCCESS) return rc;
    int rank, wsize, *global = NULL, flag = 0;
    PMPI_Comm_rank(w, &rank);
    PMPI_Comm_size(w, &wsize);
    clockfix k;
    double rtt;
    rc = cs_clock_estimate(w, &k.off_e, &k.at_e, &rtt);
    if (!A.have_start) { k.off_s = k.off_e; k.at_s = k.at_e; }
    else { k.off_s = A.off_start; k.at_s = A.at_start; }
    PMPI_Comm_get_attr(MPI_COMM_WORLD, MPI_WTIME_IS_GLOBAL, &global, &flag);
    k.apply = !(flag && global && *global);
    wbuf b = { 0 };
    if (A.lost) { /* this rank's missing records leave their calls incomplete: counted below */
        char line[96];
        snprintf(line, sizeof line, "rank %d: %zu record(s) lost for want of memory", rank, A.lost);
        say(line);
    }
    serialise(&b, &k);
    /* Sizes first: a rank without memory sends nothing (its calls are then incomplete). */
    long long mine = b.bad || b.n > INT32_MAX ? 0 : (long long)b.n, *lens = NULL;
    int *len = NULL, *at = NULL, go = 1;
    uint8_t *all = NULL;
    if (rank == 0) {
        lens = malloc((size_t)wsize * sizeof *lens);
        len = malloc((size_t)wsize * sizeof *len);
        at = malloc((size_t)wsize * sizeof *at);
        go = lens && len && at;
        if (!go) say("out of memory; no trace written");
    }
    if (rc == MPI_SUCCESS) rc = PMPI_Bcast(&go, 1, MPI_INT, 0, w);
    if (rc == MPI_SUCCESS && go) rc = PMPI_Gather(&mine, 1, MPI_LONG_LONG, lens, 1, MPI_LONG_LONG, 0, w);
    if (rc == MPI_SUCCESS && rank == 0 && go) {
        long long total = 0;
        for (int r = 0; r < wsize; r++) {
            len[r] = (int)lens[r];
            at[r] = (int)total;
            total += lens[r];
        }
        go = total <= INT32_MAX && (all = malloc(total ? (size_t)total : 1)) != NULL;
        if (!go) say("the records do not fit one gather (2 GiB) or memory; no trace written");
    }
    if (rc == MPI_SUCCESS) rc = PMPI_Bcast(&go, 1, MPI_INT, 0, w);
    if (rc == MPI_SUCCESS && go)
        rc = PMPI_Gatherv(b.p, (int)mine, MPI_BYTE, all, len, at, MPI_BYTE, 0, w);
    if (rc == MPI_SUCCESS && go && rank == 0) assemble(all, len, at, wsize, k.apply);
    free(all); free(lens); free(len); free(at); free(b.p);
    PMPI_Comm_free(&w);
    return rc;
}
