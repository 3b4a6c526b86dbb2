/* arrivals.c - COLLSCHED_ARRIVALS=FILE: the arrival trace (docs/trace-format.md).
 *
 * Every process appends one record per call (communicator, call number, site, bytes, its
 * own arrival and exit on its own clock) to a buffer of its own: no message and no
 * synchronisation inside the call, one mutex around the append (threads). At finalize
 * (collective over MPI_COMM_WORLD) the clocks are put on rank 0's - offsets estimated
 * by ping-pong at start (the preload library's MPI_Init) and at finalize, interpolated
 * linearly in between - and rank 0 gathers every process's records and writes the file
 * (arrivals_file.c).
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

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static void say(const char *why) { cs_arrivals_say(A.path, why); }

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
static void serialise(cs_wbuf *b, const clockfix *k)
{
    cs_put_f64(b, k->off_s);
    cs_put_f64(b, k->off_e);
    cs_put_le(b, (uint64_t)A.started, 4);
    cs_put_f64(b, A.started ? to_rank0(k, A.t_first) : 0.0);
    cs_put_le(b, A.nsites, 4);
    cs_put_le(b, A.ncomms, 4);
    cs_put_le(b, A.nrecs, 8);
    for (uint32_t i = 0; i < A.nsites; i++) {
        size_t n = strlen(A.sites[i]);
        cs_put_le(b, n, 2);
        cs_put(b, A.sites[i], n);
    }
    for (uint32_t i = 0; i < A.ncomms; i++) {
        const tcomm *t = &A.comms[i];
        cs_put_le(b, t->id, 8);
        cs_put_le(b, t->size, 4);
        cs_put_le(b, t->rank, 4);
        for (uint32_t j = 0; j < t->size; j++) cs_put_le(b, t->world[j], 4);
    }
    for (size_t i = 0; i < A.nrecs; i++) {
        const rec *r = &A.recs[i];
        cs_put_le(b, r->comm, 4);
        cs_put_le(b, r->site, 4);
        cs_put_le(b, r->seq, 4);
        cs_put_le(b, r->collective, 1);
        cs_put_le(b, r->flags, 1);
        cs_put_le(b, r->bytes, 8);
        cs_put_f64(b, to_rank0(k, r->arrival));
        cs_put_f64(b, to_rank0(k, r->exit));
    }
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
    cs_wbuf b = { 0 };
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
    if (rc == MPI_SUCCESS && go && rank == 0) cs_arrivals_write(A.path, all, len, at, wsize, k.apply);
    free(all); free(lens); free(len); free(at); free(b.p);
    PMPI_Comm_free(&w);
    return rc;
}
