/* comm_state.c - per-communicator state (MPI attribute caching) and schedule selection.
 *
 * On the first collsched call on a communicator, every rank duplicates it (a private
 * communicator: schedule traffic can never match the application's messages), reads the
 * headers of the configured schedules and the ranks agree that they all see the same
 * set. Selection for a call is then a pure function of (schedule set, communicator size,
 * bytes per rank), identical on every rank, so it needs no communication. The first use
 * of a schedule loads each rank's own section and the ranks agree again (all loaded it,
 * same header and index) and rank 0 proves the whole schedule (every rank's list,
 * gathered; whole_check.c) before anyone runs it: either all ranks use it or all fall
 * back. Nothing collective happens per call after that.
 */
#include "runtime.h"
#include "coll_exec.h" /* cs_call_stamp, cs_coll_last_call: the collectives beyond allgather */

#include <dirent.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define REASON_LEN 512

typedef struct cs_candidate {
    char *path;
    collsched_header hdr;
    collsched_schedule *sched;   /* own section, once loaded and agreed */
    MPI_Request *reqs;           /* one per op, reused by every call */
    cs_ahead *ahead;             /* a cache entry's receive-ahead (cache_ahead.c), NULL none */
    int state;                   /* 0 not tried, 1 agreed, -1 refused */
    char reason[REASON_LEN];     /* why refused */
} cs_candidate;

typedef struct cs_comm {
    MPI_Comm user, priv;
    int rank, size;
    int enabled;                 /* a schedule set is configured and agreed */
    int single_file;             /* source is one file: mismatches are worth a line */
    int loud_disabled;           /* a broken source (single file, cache index): worth a line */
    cs_cache *cache;             /* a schedule cache (cache.c), NULL otherwise */
    char source[REASON_LEN];
    char disabled[REASON_LEN];   /* why no schedule can ever run here */
    cs_candidate *cand;
    int ncand;
    int warned;                  /* the mismatch line was printed (once per communicator) */
    int refused;                 /* strict mode refused a call here (said once) */
    collsched_call_info last;
    uint64_t stamp;              /* when `last` was written (cs_call_stamp) */
    int orphan;                  /* released at finalize; only its memory remains */
    struct cs_comm *next;
} cs_comm;

static int keyval = MPI_KEYVAL_INVALID;
static int self_keyval = MPI_KEYVAL_INVALID;
static cs_comm *all_states;
static char *override_path;
static int strict_mode = -1, verbose_mode = -1; /* cached, read and set atomically */

/* Threads may create and free states of different communicators at the same time
 * (MPI_THREAD_MULTIPLE): the keyvals and the list of states are shared, under a lock. */
#ifndef SMPI_HELPERS_H
#include <pthread.h>
static pthread_mutex_t states_mu = PTHREAD_MUTEX_INITIALIZER;
#define STATES_LOCK() pthread_mutex_lock(&states_mu)
#define STATES_UNLOCK() pthread_mutex_unlock(&states_mu)
#else /* SMPI: the ranks are actors of one thread, and an MPI call may switch actors */
#define STATES_LOCK() ((void)0)
#define STATES_UNLOCK() ((void)0)
#endif

/* ---- environment ---- */

static int env_flag(const char *name)
{
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

static int cached_flag(int *cache, const char *name)
{
    int v = __atomic_load_n(cache, __ATOMIC_RELAXED);
    if (v < 0) __atomic_store_n(cache, v = env_flag(name), __ATOMIC_RELAXED);
    return v;
}

int cs_strict(void) { return cached_flag(&strict_mode, "COLLSCHED_STRICT"); }

int cs_verbose(void) { return cached_flag(&verbose_mode, "COLLSCHED_VERBOSE"); }

static const char *source_path(void)
{
    if (override_path) return override_path;
    const char *v = getenv("COLLSCHED_SCHEDULES");
    return v && *v ? v : NULL;
}

int cs_source_configured(void) { return source_path() != NULL; }
/* The same source for the intergroup path (inter_state.c). */
const char *cs_source_path(void) { return source_path(); }

int collsched_set_schedules(const char *path)
{
    free(override_path);
    override_path = path ? strdup(path) : NULL;
    return MPI_SUCCESS;
}

/* ---- messages: one line each, prefixed so they are easy to grep ---- */

/* snprintf that may truncate long paths on purpose (messages only). */
void cs_text(char *dst, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dst, n, fmt, ap);
    va_end(ap);
}

void cs_say(const char *fmt, ...)
{
    char line[2 * REASON_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "collsched: %s\n", line);
    fflush(stderr);
}

/* dst := src, truncated to n - 1 bytes; nothing written when dst already holds it (the
 * common case: the same schedule call after call; two vsnprintf per call were a third of
 * a call's bookkeeping, docs/benchmarks.md runtime-overhead). */
static void keep_text(char *dst, size_t n, const char *src)
{
    size_t len = strnlen(src, n - 1);
    if (strncmp(dst, src, len) == 0 && dst[len] == '\0') return;
    memcpy(dst, src, len);
    dst[len] = '\0';
}

static void set_last(cs_comm *st, const char *schedule, const char *reason)
{
    st->last.used_schedule = schedule != NULL;
    keep_text(st->last.schedule, sizeof st->last.schedule, schedule ? schedule : "");
    keep_text(st->last.reason, sizeof st->last.reason, reason ? reason : "");
    st->stamp = cs_call_stamp();
}

void cs_note_fallback(cs_comm *st, const char *reason)
{
    set_last(st, NULL, reason);
    if (st->rank == 0 && !st->warned && cs_verbose() && !cs_strict()) {
        cs_say("no schedule for this call on a communicator of %d ranks: %s", st->size, reason);
        st->warned = 1;
    }
}

/* Strict mode words it as a refusal, with the reason (the fallback lines are not printed
 * then). Every rank refuses the same calls, so all of them reach the barrier: rank 0's
 * line is out before any rank's error handler aborts the job. */
void cs_note_refused(cs_comm *st, const char *call, uint64_t lo, uint64_t hi)
{
    if (st->refused) return;
    st->refused = 1;
    if (st->rank == 0) {
        char bytes[64];
        if (lo == hi) cs_text(bytes, sizeof bytes, "%llu bytes per rank", (unsigned long long)lo);
        else cs_text(bytes, sizeof bytes, "%llu..%llu bytes per rank", (unsigned long long)lo,
                  (unsigned long long)hi);
        cs_say("COLLSCHED_STRICT=1: %s refused on a communicator of %d ranks (%s), no fallback to "
            "the MPI library: %s", call, st->size, bytes, st->last.reason);
    }
    PMPI_Barrier(st->priv);
}

/* ---- cleanup (attribute delete callbacks) ---- */

/* Releases what a state holds; MPI calls only while MPI is usable. */
static void release_state(cs_comm *st, int mpi_usable)
{
    cs_cache_free(st->cache, mpi_usable); /* its exchange completes on the private communicator */
    st->cache = NULL;
    for (int i = 0; i < st->ncand; i++) {
        cs_ahead_close(st->cand[i].ahead, mpi_usable); /* before its requests go */
        free(st->cand[i].path);
        free(st->cand[i].reqs);
        collsched_schedule_free(st->cand[i].sched);
    }
    free(st->cand);
    st->cand = NULL;
    st->ncand = 0;
    if (mpi_usable && st->priv != MPI_COMM_NULL) PMPI_Comm_free(&st->priv);
    st->priv = MPI_COMM_NULL;
    STATES_LOCK();
    for (cs_comm **p = &all_states; *p; p = &(*p)->next)
        if (*p == st) { *p = st->next; break; }
    STATES_UNLOCK();
}

static int delete_state(MPI_Comm comm, int kv, void *value, void *extra)
{
    (void)comm; (void)kv; (void)extra;
    cs_comm *st = value;
    if (!st->orphan) {
        int finalized = 0;
        PMPI_Finalized(&finalized);
        release_state(st, !finalized);
    }
    free(st);
    return MPI_SUCCESS;
}

/* MPI_Finalize deletes MPI_COMM_SELF's attributes first: free every state while MPI
 * still works (the private communicators must go before MPI does). Some MPIs (SimGrid
 * SMPI) already refuse MPI calls here and delete MPI_COMM_WORLD's attributes later, from
 * another context: then release what we can without MPI and leave the memory to that
 * later callback, which must not touch anything but the state itself. */
static int at_finalize(MPI_Comm comm, int kv, void *value, void *extra)
{
    (void)comm; (void)kv; (void)value; (void)extra;
    while (all_states) {
        cs_comm *st = all_states;
        if (PMPI_Comm_delete_attr(st->user, keyval) != MPI_SUCCESS) {
            release_state(st, 0);
            st->orphan = 1;
        }
    }
    PMPI_Comm_free_keyval(&keyval);
    /* and this callback's own keyval (MPI frees it once the attribute is gone) */
    PMPI_Comm_free_keyval(&self_keyval);
    return MPI_SUCCESS;
}

static int ensure_keyvals(void)
{
    int rc = MPI_SUCCESS;
    STATES_LOCK();
    if (keyval == MPI_KEYVAL_INVALID) {
        rc = PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_state, &keyval, NULL);
        if (rc == MPI_SUCCESS)
            rc = PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, at_finalize, &self_keyval, NULL);
        if (rc == MPI_SUCCESS) rc = PMPI_Comm_set_attr(MPI_COMM_SELF, self_keyval, NULL);
    }
    STATES_UNLOCK();
    return rc;
}

/* ---- the schedule set ---- */

static int add_candidate(cs_comm *st, const char *path, char *err, size_t errlen)
{
    collsched_header h;
    if (cs_read_any_header(path, &h, err, errlen) != COLLSCHED_OK) return -1;
    cs_candidate *c = realloc(st->cand, (size_t)(st->ncand + 1) * sizeof *c);
    if (!c) return -1;
    st->cand = c;
    c = &st->cand[st->ncand];
    memset(c, 0, sizeof *c);
    c->path = strdup(path);
    c->hdr = h;
    if (!c->path) return -1;
    st->ncand++;
    return 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* runtime.h: the names in a directory in byte order (every selection path lists its
 * directory so: the order candidates are tried in must not depend on readdir's). */
int cs_list_directory(const char *dir, char ***names)
{
    DIR *d = opendir(dir);
    char **v = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    int ok = d != NULL;
    while (ok && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            char **w = realloc(v, (cap = cap ? 2 * cap : 64) * sizeof *v);
            if (!w) { ok = 0; break; }
            v = w;
        }
        if (!(v[n] = strdup(e->d_name)) || n + 1 > (size_t)INT_MAX) { ok = 0; break; }
        n++;
    }
    if (d) closedir(d);
    if (!ok) {
        for (size_t i = 0; i < n; i++) free(v[i]);
        free(v);
        *names = NULL;
        return -1;
    }
    if (n) qsort(v, n, sizeof *v, by_name);
    *names = v;
    return (int)n;
}

/* Directory: every regular file, in name order; files whose header is not valid are
 * skipped (noted for COLLSCHED_VERBOSE). Special files are never opened. */
static void scan_directory(cs_comm *st, const char *dir)
{
    char **names;
    int n = cs_list_directory(dir, &names), skipped = 0;
    char err[REASON_LEN] = "", first_err[REASON_LEN] = "";
    if (n < 0) {
        cs_text(st->disabled, sizeof st->disabled, "%s: cannot read the directory", dir);
        return;
    }
    for (int i = 0; i < n; i++) {
        char path[4096];
        struct stat sb;
        cs_text(path, sizeof path, "%s/%s", dir, names[i]);
        free(names[i]);
        if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
        if (add_candidate(st, path, err, sizeof err) != 0 && !skipped++)
            cs_text(first_err, sizeof first_err, "%s", err);
    }
    free(names);
    if (st->rank == 0 && skipped && cs_verbose())
        cs_say("skipped %d file(s) of %s that are not valid schedules, first: %s", skipped, dir, first_err);
}

/* A schedule cache (DIR/index exists: docs/cache.md): the entries of the communicator's
 * size become the candidates, in index order; an entry whose file is missing, not a
 * schedule, or not what the index says is skipped with one line (rank 0). A bad index
 * disables the communicator's schedules with one line (create_state). */
static uint64_t scan_cache(cs_comm *st, const char *dir)
{
    char err[REASON_LEN], why[REASON_LEN];
    uint64_t h;
    if (cs_cache_open(dir, st->size, st->rank, &st->cache, &h, err, sizeof err) != 0) {
        cs_text(st->disabled, sizeof st->disabled, "%s", err);
        st->loud_disabled = 1;
        return h;
    }
    int n = cs_cache_entries(st->cache), skipped = 0;
    for (int i = 0; i < n; i++) {
        char path[4096];
        cs_text(path, sizeof path, "%s/%s", dir, cs_cache_file(st->cache, i));
        int k = st->ncand, ok = add_candidate(st, path, err, sizeof err) == 0;
        if (ok && !cs_cache_header_fits(st->cache, i, &st->cand[k].hdr, why, sizeof why)) {
            cs_text(err, sizeof err, "%s: %s", path, why);
            free(st->cand[k].path);
            st->ncand--;
            ok = 0;
        }
        if (!ok) {
            skipped++;
            if (st->rank == 0)
                cs_say("%s (index line %d): entry skipped: %s", cs_cache_file(st->cache, i),
                    cs_cache_line(st->cache, i), err);
            continue;
        }
        cs_cache_set_candidate(st->cache, i, k);
        h = cs_hash64(h, &i, sizeof i);
    }
    if (st->ncand == 0)
        cs_text(st->disabled, sizeof st->disabled, "%s: cache: no %sentry for %d ranks", dir,
             skipped ? "usable " : "", st->size);
    return h;
}

/* Reads the configured headers; returns a hash of what was found (the ranks compare it). */
static uint64_t scan_source(cs_comm *st)
{
    const char *src = source_path();
    struct stat sb;
    char err[REASON_LEN];
    if (!src) {
        cs_text(st->disabled, sizeof st->disabled, "COLLSCHED_SCHEDULES is not set");
        return 1;
    }
    cs_text(st->source, sizeof st->source, "%s", src);
    uint64_t h = cs_hash64(0, src, strlen(src));
    char index[4096];
    cs_text(index, sizeof index, "%s/index", src);
    if (stat(src, &sb) == 0 && S_ISDIR(sb.st_mode) && lstat(index, &sb) == 0) {
        h = cs_hash64(h, "cache", 5);
        uint64_t ih = scan_cache(st, src);
        h = cs_hash64(h, &ih, sizeof ih);
    } else if (stat(src, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        scan_directory(st, src);
        if (st->ncand == 0 && !st->disabled[0])
            cs_text(st->disabled, sizeof st->disabled, "%s: directory holds no valid schedule file", src);
    } else {
        st->single_file = 1;
        st->loud_disabled = 1;
        if (add_candidate(st, src, err, sizeof err) != 0) cs_text(st->disabled, sizeof st->disabled, "%s", err);
    }
    for (int i = 0; i < st->ncand; i++) {
        const collsched_header *c = &st->cand[i].hdr;
        uint64_t fields[7] = { c->collective, c->nranks, c->nseg, c->bytes_min, c->bytes_max,
                               c->total_ops, c->index_crc32 };
        h = cs_hash64(h, st->cand[i].path, strlen(st->cand[i].path));
        h = cs_hash64(h, fields, sizeof fields);
    }
    return h;
}

/* All ranks hold the same value? (max of v and of ~v: equal to one's own iff all equal) */
static int all_equal(MPI_Comm comm, uint64_t v, int *same)
{
    uint64_t x[2] = { v, ~v };
    int rc = PMPI_Allreduce(MPI_IN_PLACE, x, 2, MPI_UINT64_T, MPI_MAX, comm);
    *same = x[0] == v && x[1] == ~v;
    return rc;
}

static int load_candidate(cs_comm *st, cs_candidate *c, int quiet0);

/* A cache entry's first use: proven, then its receive-ahead set up (collective). */
static int load_entry(cs_comm *st, cs_candidate *c)
{
    int rc = load_candidate(st, c, 0);
    if (rc == MPI_SUCCESS && c->state == 1) rc = cs_ahead_open(st->priv, c->sched, c->reqs, &c->ahead);
    return rc;
}

static int create_state(MPI_Comm comm, cs_comm **out)
{
    cs_comm *st = calloc(1, sizeof *st);
    if (!st) return MPI_ERR_NO_MEM;
    st->user = comm;
    st->priv = MPI_COMM_NULL;
    PMPI_Comm_rank(comm, &st->rank);
    PMPI_Comm_size(comm, &st->size);
    int rc = PMPI_Comm_dup(comm, &st->priv);
    if (rc != MPI_SUCCESS) { free(st); return rc; }
    PMPI_Comm_set_errhandler(st->priv, MPI_ERRORS_RETURN);
    uint64_t h = scan_source(st);
    int same = 0;
    rc = all_equal(st->priv, h, &same);
    st->enabled = same && st->ncand > 0;
    if (rc == MPI_SUCCESS && !same) {
        cs_text(st->disabled, sizeof st->disabled,
                 "ranks see different schedule files under %s", st->source[0] ? st->source : "(unset)");
        if (st->rank == 0) cs_say("%s: falling back to the MPI library", st->disabled);
    } else if (st->loud_disabled && !st->enabled && st->rank == 0 && !cs_strict()) {
        cs_say("%s", st->disabled); /* a broken single file or */
        st->warned = 1;          /* cache index is always worth a line (strict: the refusal's */
    }                            /* line says it) */
    /* A cache's set-up: the clock offset for the arrival exchange, and the first
     * CS_CACHE_EAGER entries loaded and proven now (the rest on first use, collectively:
     * the rule chooses alike on every rank). */
    if (rc == MPI_SUCCESS && st->cache && st->enabled) {
        rc = cs_cache_setup(st->cache, st->priv);
        for (int i = 0; rc == MPI_SUCCESS && i < st->ncand && i < CS_CACHE_EAGER; i++)
            rc = load_entry(st, &st->cand[i]);
    }
    STATES_LOCK();
    st->next = all_states;
    all_states = st;
    STATES_UNLOCK();
    if (rc == MPI_SUCCESS) rc = PMPI_Comm_set_attr(comm, keyval, st);
    if (rc != MPI_SUCCESS) { release_state(st, 1); free(st); return rc; }
    *out = st;
    return MPI_SUCCESS;
}

int cs_comm_state(MPI_Comm comm, cs_comm **out)
{
    int found = 0, rc = ensure_keyvals();
    if (rc != MPI_SUCCESS) return rc;
    rc = PMPI_Comm_get_attr(comm, keyval, out, &found);
    if (rc != MPI_SUCCESS) return rc;
    return found ? MPI_SUCCESS : create_state(comm, out);
}

/* ---- first use of a schedule: load own section, prove the whole schedule, agree ---- */

/* Rank 0's side of the gather, prepared before the agreement so that the ranks learn at
 * once whether it can take place: the op counts of every rank (one MPI_Gather) and a
 * buffer for all of them. Returns 0, or 1 (too large) / 2 (no memory) with why set. */
typedef struct gather_plan {
    int *counts, *displs;
    cs_wire_op *all;
} gather_plan;

static void plan_free(gather_plan *g)
{
    free(g->counts);
    free(g->displs);
    free(g->all);
    memset(g, 0, sizeof *g);
}

static int plan_gather(cs_comm *st, const cs_candidate *c, gather_plan *g, char *why, size_t len)
{
    uint64_t total = 0;
    for (int r = 0; r < st->size; r++) total += (uint64_t)g->counts[r];
    if (total > CS_WHOLE_MAX_OPS) {
        cs_text(why, len, "%s: whole-schedule check: %llu ops in all, more than MPI_Gatherv can address "
             "(%u)", c->path, (unsigned long long)total, CS_WHOLE_MAX_OPS);
        return 1;
    }
    g->displs = malloc((size_t)st->size * sizeof *g->displs);
    g->all = malloc((size_t)(total ? total : 1) * sizeof *g->all);
    if (!g->displs || !g->all) {
        cs_text(why, len, "%s: whole-schedule check: rank 0 cannot allocate %llu bytes for the "
             "sections of all ranks", c->path, (unsigned long long)(total * sizeof *g->all));
        return 2;
    }
    for (int r = 0, d = 0; r < st->size; d += g->counts[r], r++) g->displs[r] = d;
    return 0;
}

/* All ranks loaded their sections and agree on header and index: rank 0 gathers every
 * section (12 bytes per op) and proves the whole schedule (whole_check.c); the verdict
 * and its reason reach every rank in one broadcast. *ok = 1: use the schedule. */
static int prove_whole(cs_comm *st, cs_candidate *c, const collsched_schedule *s,
                       const cs_wire_op *mine, gather_plan *g, int *ok)
{
    struct { int32_t ok; char reason[REASON_LEN]; } verdict = { 0, "" };
    MPI_Datatype wire = MPI_DATATYPE_NULL;
    int rc = PMPI_Type_contiguous(3, MPI_UINT32_T, &wire);
    if (rc == MPI_SUCCESS) rc = PMPI_Type_commit(&wire);
    double t0 = PMPI_Wtime();
    if (rc == MPI_SUCCESS)
        rc = PMPI_Gatherv(mine, (int)s->nops, wire, g->all, g->counts, g->displs, wire, 0, st->priv);
    if (rc == MPI_SUCCESS && st->rank == 0) {
        double t1 = PMPI_Wtime();
        char why[REASON_LEN];
        int v = cs_whole_check_mode((uint32_t)st->size, s->hdr.nseg, g->counts, g->all,
                                    (s->hdr.flags & COLLSCHED_FLAG_SERIAL) != 0, why, sizeof why);
        verdict.ok = v == CS_WHOLE_OK;
        if (!verdict.ok) cs_text(verdict.reason, sizeof verdict.reason, "%s: %s", c->path, why);
        if (cs_verbose())
            cs_say("%s: whole schedule checked on rank 0 (%s): %llu ops, gather %.3f ms, check %.3f ms",
                c->path, verdict.ok ? "correct" : "refused", (unsigned long long)s->hdr.total_ops,
                1e3 * (t1 - t0), 1e3 * (PMPI_Wtime() - t1));
    }
    if (rc == MPI_SUCCESS) rc = PMPI_Bcast(&verdict, (int)sizeof verdict, MPI_BYTE, 0, st->priv);
    if (wire != MPI_DATATYPE_NULL) PMPI_Type_free(&wire);
    *ok = rc == MPI_SUCCESS && verdict.ok;
    if (rc == MPI_SUCCESS && !verdict.ok) cs_text(c->reason, sizeof c->reason, "%s", verdict.reason);
    return rc;
}

/* A compact schedule's setup check (collective, O(own ops + P) per rank, one reduction):
 * every link's k-th send is the k-th receive at the other end, the same piece
 * (cs_compact_link_sum). Each list passed its local dataflow checks on loading (every
 * piece received once, forwarded pieces held); progress is the generator's proof. */
static int agree_links(cs_comm *st, cs_candidate *c, const collsched_schedule *s, int *ok)
{
    uint64_t x[2] = { 0, 0 };   /* link sum, ranks out of memory */
    if (cs_compact_link_sum(s, (uint32_t)st->size, &x[0]) != 0) x[1] = 1;
    int rc = PMPI_Allreduce(MPI_IN_PLACE, x, 2, MPI_UINT64_T, MPI_SUM, st->priv);
    *ok = rc == MPI_SUCCESS && x[0] == 0 && x[1] == 0;
    if (rc == MPI_SUCCESS && !*ok)
    {
        if (x[1]) cs_text(c->reason, sizeof c->reason, "%s: link check: a rank cannot allocate its %d link counters",
                          c->path, st->size);
        else cs_text(c->reason, sizeof c->reason, "%s: link check: the generated lists do not match link by "
                     "link (the k-th send and receive of a link differ)", c->path);
    }
    if (rc == MPI_SUCCESS && st->rank == 0 && cs_verbose())
        cs_say("%s: compact schedule (%s) generated on every rank, link check %s", c->path,
               s->hdr.algorithm, *ok ? "passed" : "failed");
    return rc;
}

/* Loads, agrees on and proves c (collective). The rank that finds what is wrong says it
 * in one line, except rank 0 when `quiet0` (strict mode: the refusal line carries it). */
static int load_candidate(cs_comm *st, cs_candidate *c, int quiet0)
{
    char err[REASON_LEN] = "", why[REASON_LEN] = "";
    collsched_schedule *s = NULL;
    cs_wire_op *mine = NULL;
    gather_plan g = { 0 };
    int loaded = cs_load_file(c->path, (uint32_t)st->size, (uint32_t)st->rank, &s, err,
                              sizeof err) == COLLSCHED_OK;
    if (loaded && (!(c->reqs = malloc((s->nops ? s->nops : 1) * sizeof *c->reqs))
                   || !(mine = malloc((s->nops ? s->nops : 1) * sizeof *mine)))) {
        cs_text(err, sizeof err, "%s: memory: cannot allocate requests and buffers for %u ops", c->path, s->nops);
        loaded = 0;
    }
    for (uint32_t i = 0; loaded && i < s->nops; i++) mine[i] = cs_wire_pack(&s->ops[i]);
    /* Rank 0 learns every rank's op count (0 for a rank that failed to load) and prepares
     * the gather of all sections. (O(P) bytes, like the rest of the state: if even that
     * cannot be allocated, the call returns MPI_ERR_NO_MEM.) */
    if (st->rank == 0 && !(g.counts = malloc((size_t)st->size * sizeof *g.counts))) {
        free(mine);
        collsched_schedule_free(s);
        free(c->reqs);
        c->reqs = NULL;
        return MPI_ERR_NO_MEM;
    }
    /* A compact description is never gathered: its generator is proven (docs/compact.md);
     * the ranks check their lists against each other link by link (agree_links). Equal
     * hashes below mean every rank that loaded holds the same record, so they agree on
     * which path to take. */
    int compact = loaded && cs_is_compact(&s->hdr);
    int n = loaded ? (int)s->nops : 0, plan = 0;
    int rc = PMPI_Gather(&n, 1, MPI_INT, g.counts, 1, MPI_INT, 0, st->priv);
    if (rc == MPI_SUCCESS && st->rank == 0 && loaded && !compact) plan = plan_gather(st, c, &g, why, sizeof why);
    /* One reduction: same header+index everywhere, lowest rank that failed to load, and
     * whether rank 0 can take the whole schedule. */
    uint64_t h = loaded ? s->hash : 0;
    uint64_t P = (uint64_t)st->size, me = (uint64_t)st->rank;
    uint64_t x[4] = { h, ~h, loaded ? 0 : P - me, (uint64_t)plan };
    if (rc == MPI_SUCCESS) rc = PMPI_Allreduce(MPI_IN_PLACE, x, 4, MPI_UINT64_T, MPI_MAX, st->priv);
    int same = x[0] == h && x[1] == ~h, proven = 0;
    if (rc == MPI_SUCCESS && same && !x[2] && !x[3])
        rc = compact ? agree_links(st, c, s, &proven) : prove_whole(st, c, s, mine, &g, &proven);
    plan_free(&g);
    free(mine);
    if (rc == MPI_SUCCESS && proven) {
        c->sched = s;
        c->state = 1;
        if (st->rank == 0 && cs_verbose())
            cs_say("communicator of %d ranks: selected %s (algorithm %s, nseg %u, bytes %llu..%llu)",
                st->size, c->path, s->hdr.algorithm, s->hdr.nseg,
                (unsigned long long)s->hdr.bytes_min, (unsigned long long)s->hdr.bytes_max);
        return MPI_SUCCESS;
    }
    collsched_schedule_free(s);
    free(c->reqs);
    c->reqs = NULL;
    c->state = -1;
    int loud = !(quiet0 && st->rank == 0);
    if (rc != MPI_SUCCESS) {
        cs_text(c->reason, sizeof c->reason, "%s: MPI error %d while the ranks agreed", c->path, rc);
    } else if (x[2]) {
        uint64_t bad = P - x[2];
        if (bad == me) { cs_text(c->reason, sizeof c->reason, "%s", err); if (loud) cs_say("%s", err); }
        else cs_text(c->reason, sizeof c->reason, "%s: refused on rank %llu", c->path, (unsigned long long)bad);
    } else if (!same) {
        cs_text(c->reason, sizeof c->reason, "%s: ranks read different headers or indexes",
                 c->path);
        if (st->rank == 0 && loud) cs_say("%s", c->reason);
    } else if (x[3]) {
        if (st->rank == 0) { cs_text(c->reason, sizeof c->reason, "%s", why); if (loud) cs_say("%s", why); }
        else cs_text(c->reason, sizeof c->reason, "%s: whole-schedule check: refused on rank 0", c->path);
    } else if (st->rank == 0 && loud) {
        cs_say("%s", c->reason); /* the whole-schedule proof failed: reason set by prove_whole */
    }
    return rc;
}

/* A file proven outside selection (the PAT engine's per-iteration schedules): loaded,
 * agreed on and proven like a candidate. Collective. */
int cs_load_proven(cs_comm *st, const char *path, collsched_schedule **out, char *reason,
                   size_t len)
{
    cs_candidate c;
    memset(&c, 0, sizeof c);
    c.path = (char *)path;
    *out = NULL;
    int rc = load_candidate(st, &c, 0);
    free(c.reqs);
    if (rc == MPI_SUCCESS && c.state == 1) *out = c.sched;
    else cs_text(reason, len, "%s", c.reason[0] ? c.reason : "refused");
    return rc;
}

void cs_note_used(cs_comm *st, const char *what) { set_last(st, what, NULL); }

/* ---- selection ---- */

static int serves(const cs_comm *st, const collsched_header *h, uint64_t lo, uint64_t hi,
                  char *why, size_t len)
{
    if (h->nranks != (uint32_t)st->size) {
        cs_text(why, len, "nranks: expected %d (communicator size), found %u", st->size, h->nranks);
        return 0;
    }
    if (lo < h->bytes_min || hi > h->bytes_max) {
        if (lo == hi)
            cs_text(why, len, "bytes: expected bytes per rank %llu within [%llu, %llu]",
                     (unsigned long long)lo, (unsigned long long)h->bytes_min,
                     (unsigned long long)h->bytes_max);
        else
            cs_text(why, len, "bytes: expected every block's bytes (%llu..%llu) within [%llu, %llu]",
                     (unsigned long long)lo, (unsigned long long)hi,
                     (unsigned long long)h->bytes_min, (unsigned long long)h->bytes_max);
        return 0;
    }
    return 1;
}

static void no_match(cs_comm *st, const char *reason)
{
    set_last(st, NULL, reason);
    /* A single file that does not fit is a user error worth one line; a directory that
     * has nothing for this call is normal (COLLSCHED_VERBOSE tells). Strict mode does
     * not fall back: its caller says what was refused (cs_note_refused). */
    if (st->rank == 0 && !st->warned && !cs_strict() && (st->single_file || cs_verbose())) {
        cs_say("%s: falling back to the MPI library", reason);
        st->warned = 1;
    }
}

/* A cache's candidate k, loaded and proven on its first use (collective). */
int cs_candidate_use(cs_comm *st, int k, cs_selection *sel)
{
    cs_candidate *c = &st->cand[k];
    sel->sched = NULL;
    sel->started = NULL;
    int rc = c->state == 0 ? load_entry(st, c) : MPI_SUCCESS;
    if (rc != MPI_SUCCESS || c->state < 0) return rc;
    sel->sched = c->sched;
    sel->comm = c->ahead ? cs_ahead_comm(c->ahead) : st->priv;
    sel->reqs = c->reqs;
    sel->started = cs_ahead_take(c->ahead);
    set_last(st, c->path, NULL);
    return MPI_SUCCESS;
}

int cs_candidate_ahead(cs_comm *st, int k)
{
    const cs_candidate *c = &st->cand[k];
    return c->state == 1 ? cs_ahead_post(c->ahead) : MPI_SUCCESS;
}

int cs_select(cs_comm *st, const cs_call_ctx *ctx, uint64_t lo, uint64_t hi, cs_selection *sel)
{
    char why[REASON_LEN], reason[REASON_LEN];
    sel->sched = NULL;
    sel->started = NULL;
    if (!st->enabled) {
        no_match(st, st->disabled);
        return MPI_SUCCESS;
    }
    if (st->cache) return cs_cache_select(st->cache, st, ctx, lo, hi, sel);
    for (int i = 0; i < st->ncand; i++) {
        cs_candidate *c = &st->cand[i];
        if (!serves(st, &c->hdr, lo, hi, why, sizeof why)) continue;
        int rc = c->state == 0 ? load_candidate(st, c, cs_strict()) : MPI_SUCCESS;
        if (rc != MPI_SUCCESS) return rc;
        if (c->state < 0) { /* the first match decides: a refused file is not skipped */
            set_last(st, NULL, c->reason);
            return MPI_SUCCESS;
        }
        sel->sched = c->sched;
        sel->comm = st->priv;
        sel->reqs = c->reqs;
        set_last(st, c->path, NULL);
        return MPI_SUCCESS;
    }
    if (st->single_file)
        cs_text(reason, sizeof reason, "%s: %s", st->cand[0].path, why);
    else
        cs_text(reason, sizeof reason, "%s: no schedule matches %d ranks, %llu..%llu bytes per rank",
                 st->source, st->size, (unsigned long long)lo, (unsigned long long)hi);
    no_match(st, reason);
    return MPI_SUCCESS;
}

int collsched_last_call(MPI_Comm comm, collsched_call_info *info)
{
    int found = 0;
    cs_comm *st = NULL;
    collsched_call_info other;
    uint64_t other_stamp = 0;
    memset(info, 0, sizeof *info);
    if (cs_inter_last_call(comm, info)) return MPI_SUCCESS; /* a two-group communicator */
    int coll = cs_coll_last_call(comm, &other, &other_stamp); /* alltoall, bcast, reduce, allreduce */
    if (keyval != MPI_KEYVAL_INVALID)
        PMPI_Comm_get_attr(comm, keyval, &st, &found);
    if (coll && (!found || other_stamp > st->stamp)) {
        *info = other;
        return MPI_SUCCESS;
    }
    if (!found) {
        cs_text(info->reason, sizeof info->reason, "no collsched call on this communicator yet");
        return MPI_SUCCESS;
    }
    *info = st->last;
    return MPI_SUCCESS;
}

cs_cache *cs_comm_cache(const cs_comm *st) { return st && st->enabled ? st->cache : NULL; }

const collsched_schedule *cs_candidate_proven(const cs_comm *st, int k, const char **path)
{
    const cs_candidate *c = &st->cand[k];
    if (c->state != 1) return NULL;
    *path = c->path;
    return c->sched;
}

int cs_comm_rank(const cs_comm *st) { return st->rank; }
int cs_comm_size(const cs_comm *st) { return st->size; }
MPI_Comm cs_comm_private(const cs_comm *st) { return st->priv; }
