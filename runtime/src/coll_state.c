/* coll_state.c - per-communicator state of the collectives beyond allgather (alltoall,
 * bcast, reduce, allreduce: schedule files 1.2) and the choice of a schedule for a call.
 *
 * Cached as an attribute of the user's communicator (deleted with it, or at MPI_Finalize),
 * apart from the allgather state (comm_state.c) as the intergroup one is (inter_state.c).
 * First use, collective: a private duplicate of the communicator, the headers of the 1.2
 * files of the source (COLLSCHED_SCHEDULES or collsched_set_schedules: one file, or the
 * 1.2 files of a directory in name order; files of other kinds are not ours and are
 * skipped quietly) and one allreduce that every rank sees the same set.
 *
 * Selection is a pure function of what every rank of a correct call knows alike: the
 * collective, the communicator size, the root, the size in bytes (one alltoall block; the
 * whole vector otherwise) and whether the operation is commutative (MPI_Op_commutative: a
 * commutative-only file never serves another). The first file that fits decides; on its
 * first use every rank loads its own section, rank 0 loads every section and proves the
 * whole program (cs_coll_check_whole), and one allreduce and one broadcast make all ranks
 * run it or all fall back, with the reason for collsched_last_call.
 */
#include "coll_exec.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define REASON_LEN 512

typedef struct cand {
    char *path;
    cs_coll_header hdr;
    int state;                   /* 0 not tried, 1 proven and loaded, -1 refused */
    char reason[REASON_LEN];
    cs_coll_section *sec;
    cs_coll_plan *plan;
    MPI_Request *reqs;
    uint32_t max_pieces;         /* over the whole file (rank 0's, broadcast) */
} cand;

struct cs_coll_comm {
    MPI_Comm user, priv;
    int rank, size;
    int enabled, single_file, loud, warned, refused, released;
    int claims;                  /* bit 0: a broken 1.2 single file; bit c - 4: schedules of collective c */
    char source[REASON_LEN], disabled[REASON_LEN];
    cand *cand;
    int ncand;
    collsched_call_info last;
    uint64_t stamp;
    struct cs_coll_comm *next;
};

static int keyval = MPI_KEYVAL_INVALID, self_keyval = MPI_KEYVAL_INVALID;
static cs_coll_comm *all_states;
static uint64_t stamp_counter;

#ifndef SMPI_HELPERS_H
#include <pthread.h>
static pthread_mutex_t states_mu = PTHREAD_MUTEX_INITIALIZER;
#define LOCK() pthread_mutex_lock(&states_mu)
#define UNLOCK() pthread_mutex_unlock(&states_mu)
#else /* SMPI: the ranks are actors of one thread */
#define LOCK() ((void)0)
#define UNLOCK() ((void)0)
#endif

uint64_t cs_call_stamp(void) { return __atomic_add_fetch(&stamp_counter, 1, __ATOMIC_RELAXED); }

static const char *coll_name(uint32_t c)
{
    switch (c) {
    case CS_COLL_ALLTOALL: return "alltoall";
    case CS_COLL_BCAST: return "bcast";
    case CS_COLL_REDUCE: return "reduce";
    case CS_COLL_ALLREDUCE: return "allreduce";
    default: return "another collective";
    }
}

static void note(cs_coll_comm *st, const char *used, const char *reason)
{
    st->last.used_schedule = used != NULL;
    cs_text(st->last.schedule, sizeof st->last.schedule, "%s", used ? used : "");
    cs_text(st->last.reason, sizeof st->last.reason, "%s", reason ? reason : "");
    st->stamp = cs_call_stamp();
}

/* ---- lifetime ---- */

static void release(cs_coll_comm *st, int usable)
{
    if (st->released) return;
    st->released = 1;
    for (int i = 0; i < st->ncand; i++) {
        cs_coll_plan_free(st->cand[i].plan);
        cs_coll_free(st->cand[i].sec);
        free(st->cand[i].reqs);
        free(st->cand[i].path);
    }
    free(st->cand);
    st->cand = NULL;
    st->ncand = 0;
    if (usable && st->priv != MPI_COMM_NULL) PMPI_Comm_free(&st->priv);
    st->priv = MPI_COMM_NULL;
    LOCK();
    for (cs_coll_comm **p = &all_states; *p; p = &(*p)->next)
        if (*p == st) { *p = st->next; break; }
    UNLOCK();
}

static int delete_state(MPI_Comm comm, int kv, void *value, void *extra)
{
    (void)comm; (void)kv; (void)extra;
    cs_coll_comm *st = value;
    int finalized = 1;
    if (!st->released) PMPI_Finalized(&finalized);
    release(st, !finalized);
    free(st);
    return MPI_SUCCESS;
}

/* MPI_Finalize deletes MPI_COMM_SELF's attributes first: the private communicators go
 * while MPI works (the memory goes with the user communicators' attributes). */
static int at_finalize(MPI_Comm comm, int kv, void *value, void *extra)
{
    (void)comm; (void)kv; (void)value; (void)extra;
    while (all_states) {
        cs_coll_comm *st = all_states;
        release(st, 1); /* the private communicator, while MPI works */
        PMPI_Comm_delete_attr(st->user, keyval); /* the memory too, where MPI lets us */
    }
    PMPI_Comm_free_keyval(&keyval);
    PMPI_Comm_free_keyval(&self_keyval);
    return MPI_SUCCESS;
}

static int ensure_keyvals(void)
{
    int rc = MPI_SUCCESS;
    LOCK();
    if (keyval == MPI_KEYVAL_INVALID) {
        rc = PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_state, &keyval, NULL);
        if (rc == MPI_SUCCESS) rc = PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, at_finalize, &self_keyval, NULL);
        if (rc == MPI_SUCCESS) rc = PMPI_Comm_set_attr(MPI_COMM_SELF, self_keyval, NULL);
    }
    UNLOCK();
    return rc;
}

/* ---- the schedule set ---- */

static int add(cs_coll_comm *st, const char *path, char *err, size_t len)
{
    cs_coll_header h;
    int rc = cs_coll_read_header(path, &h, err, len);
    if (rc != COLLSCHED_OK) return rc;
    cand *c = realloc(st->cand, (size_t)(st->ncand + 1) * sizeof *c);
    if (!c) return COLLSCHED_ENOMEM;
    st->cand = c;
    c = &st->cand[st->ncand];
    memset(c, 0, sizeof *c);
    c->hdr = h;
    if (!(c->path = strdup(path))) return COLLSCHED_ENOMEM;
    st->ncand++;
    return COLLSCHED_OK;
}

/* A directory: its 1.2 files in name order (others are the allgather and intergroup paths'). */
static void scan_directory(cs_coll_comm *st, const char *dir)
{
    char **names = NULL, err[REASON_LEN];
    int n = cs_list_directory(dir, &names);
    for (int i = 0; i < n; i++) {
        char path[4096];
        struct stat sb;
        cs_text(path, sizeof path, "%s/%s", dir, names[i]);
        free(names[i]);
        if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode)) add(st, path, err, sizeof err);
    }
    free(names);
    if (!st->ncand) cs_text(st->disabled, sizeof st->disabled, "%s: no alltoall, bcast, reduce or allreduce schedule there", dir);
}

/* Does the file start like a 1.2 schedule (magic, version 1.2)? Only regular files are
 * opened (a FIFO would block, a device never end). */
static int looks_ours(const char *path)
{
    struct stat sb;
    uint8_t b[12];
    if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) return 0;
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    size_t n = fread(b, 1, sizeof b, f);
    fclose(f);
    return n == sizeof b && memcmp(b, "COLLSCHD", 8) == 0 && b[8] == 1 && b[9] == 0 && b[10] == 2 && b[11] == 0;
}

/* A single file: a 1.2 file that cannot be read is worth a line (and strict mode refuses
 * the four collectives); anything else (an allgather or intergroup schedule, a file that is
 * no schedule at all: the allgather path says so) is simply not for these calls. */
static void scan_file(cs_coll_comm *st, const char *path)
{
    char err[REASON_LEN];
    st->single_file = 1;
    if (add(st, path, err, sizeof err) == COLLSCHED_OK) return;
    if (looks_ours(path)) {
        cs_text(st->disabled, sizeof st->disabled, "%s", err);
        st->loud = st->claims = 1;
        return;
    }
    cs_text(st->disabled, sizeof st->disabled, "%s: not an alltoall, bcast, reduce or allreduce schedule", path);
}

static uint64_t scan_source(cs_coll_comm *st)
{
    const char *src = cs_source_path();
    struct stat sb;
    if (!src) {
        cs_text(st->disabled, sizeof st->disabled, "COLLSCHED_SCHEDULES is not set");
        return 1;
    }
    cs_text(st->source, sizeof st->source, "%s", src);
    uint64_t h = cs_hash64(0, src, strlen(src));
    if (stat(src, &sb) == 0 && S_ISDIR(sb.st_mode)) scan_directory(st, src);
    else scan_file(st, src);
    for (int i = 0; i < st->ncand; i++) {
        const collsched_header *c = &st->cand[i].hdr.h;
        st->claims |= 1 << (c->collective - CS_COLL_ALLTOALL + 1);
        uint64_t f[8] = { c->collective, c->nranks, c->nseg, c->bytes_min, c->bytes_max, c->total_ops,
                          c->index_crc32, st->cand[i].hdr.root };
        h = cs_hash64(h, st->cand[i].path, strlen(st->cand[i].path));
        h = cs_hash64(h, f, sizeof f);
    }
    return h;
}

static int create(MPI_Comm comm, cs_coll_comm **out)
{
    cs_coll_comm *st = calloc(1, sizeof *st);
    if (!st) return MPI_ERR_NO_MEM;
    st->user = comm;
    PMPI_Comm_rank(comm, &st->rank);
    PMPI_Comm_size(comm, &st->size);
    int rc = PMPI_Comm_dup(comm, &st->priv);
    if (rc != MPI_SUCCESS) { free(st); return rc; }
    PMPI_Comm_set_errhandler(st->priv, MPI_ERRORS_RETURN);
    uint64_t h = scan_source(st), x[2] = { h, ~h };
    rc = PMPI_Allreduce(MPI_IN_PLACE, x, 2, MPI_UINT64_T, MPI_MAX, st->priv);
    int same = x[0] == h && x[1] == ~h;
    st->enabled = same && st->ncand > 0;
    if (rc == MPI_SUCCESS && !same) {
        cs_text(st->disabled, sizeof st->disabled, "ranks see different schedule files under %s", st->source);
        if (st->rank == 0) cs_say("%s: falling back to the MPI library", st->disabled);
    } else if (st->loud && st->rank == 0 && !cs_strict()) {
        cs_say("%s", st->disabled);
        st->warned = 1;
    }
    LOCK();
    st->next = all_states;
    all_states = st;
    UNLOCK();
    if (rc == MPI_SUCCESS) rc = PMPI_Comm_set_attr(comm, keyval, st);
    if (rc != MPI_SUCCESS) { release(st, 1); free(st); return rc; }
    *out = st;
    return MPI_SUCCESS;
}

int cs_coll_state(MPI_Comm comm, cs_coll_comm **out)
{
    int found = 0, rc = ensure_keyvals();
    if (rc == MPI_SUCCESS) rc = PMPI_Comm_get_attr(comm, keyval, out, &found);
    if (rc != MPI_SUCCESS) return rc;
    return found ? MPI_SUCCESS : create(comm, out);
}

int cs_coll_last_call(MPI_Comm comm, collsched_call_info *info, uint64_t *stamp)
{
    cs_coll_comm *st = NULL;
    int found = 0;
    if (keyval == MPI_KEYVAL_INVALID || comm == MPI_COMM_NULL
        || PMPI_Comm_get_attr(comm, keyval, &st, &found) != MPI_SUCCESS || !found || !st->stamp)
        return 0;
    *info = st->last;
    *stamp = st->stamp;
    return 1;
}

/* ---- first use: load, prove the whole program on rank 0, agree ---- */

/* Rank 0: every section of the file, proven whole; *maxp the most pieces of one op. */
static int prove_whole(cs_coll_comm *st, cand *c, uint32_t *maxp, char *why, size_t len)
{
    uint32_t P = (uint32_t)st->size;
    cs_coll_section **all = NULL;
    char err[REASON_LEN];
    *maxp = 0;
    /* every section with the header and the index read once (not P times) */
    if (cs_coll_load_all(c->path, P, &all, err, sizeof err) != COLLSCHED_OK) {
        cs_text(why, len, "%s", err);
        return 1;
    }
    for (uint32_t r = 0; r < P; r++)
        for (uint32_t i = 0; i < all[r]->nops; i++)
            if (all[r]->ops[i].npieces > *maxp) *maxp = all[r]->ops[i].npieces;
    char reason[REASON_LEN] = "";
    int bad = 0;
    double t0 = PMPI_Wtime();
    if (cs_coll_check_whole((const cs_coll_section *const *)all, P, reason, sizeof reason) != CS_COLL_PROVEN) {
        cs_text(why, len, "%s: %s", c->path, reason);
        bad = 1;
    }
    if (cs_verbose())
        cs_say("%s: whole %s program checked on rank 0 (%s): %llu ops, %.3f ms", c->path,
               coll_name(c->hdr.h.collective), bad ? "refused" : "correct", (unsigned long long)c->hdr.h.total_ops,
               1e3 * (PMPI_Wtime() - t0));
    cs_coll_free_all(all, P);
    return bad;
}

static int first_use(cs_coll_comm *st, cand *c)
{
    char err[REASON_LEN] = "";
    cs_coll_section *s = NULL;
    cs_coll_plan *plan = NULL;
    int ok = cs_coll_load(c->path, (uint32_t)st->size, (uint32_t)st->rank, &s, err, sizeof err) == COLLSCHED_OK;
    if (ok && cs_coll_plan_build(s, &plan, err, sizeof err) != 0) ok = 0;
    if (ok && !(c->reqs = malloc((s->nops ? s->nops : 1) * sizeof *c->reqs))) {
        cs_text(err, sizeof err, "%s: memory: cannot allocate %u requests", c->path, s->nops);
        ok = 0;
    }
    uint64_t hash = ok ? s->hash : 0, P = (uint64_t)st->size, me = (uint64_t)st->rank;
    uint64_t x[3] = { hash, ~hash, ok ? 0 : P - me };
    int rc = PMPI_Allreduce(MPI_IN_PLACE, x, 3, MPI_UINT64_T, MPI_MAX, st->priv);
    int agreed = rc == MPI_SUCCESS && !x[2] && x[0] == hash && x[1] == ~hash;
    if (rc == MPI_SUCCESS && x[2]) /* the lowest rank that could not load says why, to all */
        rc = PMPI_Bcast(err, (int)sizeof err, MPI_CHAR, (int)(P - x[2]), st->priv);
    struct { int32_t bad; uint32_t maxp; char why[REASON_LEN]; } verdict = { 0, 0, "" };
    if (agreed && st->rank == 0) verdict.bad = prove_whole(st, c, &verdict.maxp, verdict.why, sizeof verdict.why);
    if (agreed) rc = PMPI_Bcast(&verdict, (int)sizeof verdict, MPI_BYTE, 0, st->priv);
    if (rc == MPI_SUCCESS && agreed && !verdict.bad) {
        c->sec = s;
        c->plan = plan;
        c->max_pieces = verdict.maxp;
        c->state = 1;
        if (st->rank == 0 && cs_verbose())
            cs_say("communicator of %d ranks: selected %s (%s, algorithm %s, nseg %u, bytes %llu..%llu)", st->size,
                   c->path, coll_name(c->hdr.h.collective), c->hdr.h.algorithm, c->hdr.h.nseg,
                   (unsigned long long)c->hdr.h.bytes_min, (unsigned long long)c->hdr.h.bytes_max);
        return MPI_SUCCESS;
    }
    cs_coll_plan_free(plan);
    cs_coll_free(s);
    free(c->reqs);
    c->reqs = NULL;
    c->state = -1;
    int loud = !cs_strict();
    if (rc != MPI_SUCCESS) {
        cs_text(c->reason, sizeof c->reason, "%s: MPI error %d while the ranks agreed", c->path, rc);
    } else if (x[2]) {
        uint64_t bad = P - x[2];
        cs_text(c->reason, sizeof c->reason, "%s", err);
        if (bad == me && loud) cs_say("%s", err);
    } else if (!agreed) {
        cs_text(c->reason, sizeof c->reason, "%s: ranks read different headers or indexes", c->path);
        if (st->rank == 0 && loud) cs_say("%s", c->reason);
    } else {
        cs_text(c->reason, sizeof c->reason, "%s", verdict.why);
        if (st->rank == 0 && loud) cs_say("%s", c->reason);
    }
    return rc;
}

/* ---- selection ---- */

static int fits(const cs_coll_comm *st, const cand *c, const cs_coll_need *n, char *why, size_t len)
{
    const collsched_header *h = &c->hdr.h;
    if (h->collective != n->collective) {
        cs_text(why, len, "collective: expected %s, found %s", coll_name(n->collective), coll_name(h->collective));
        return 0;
    }
    if (h->nranks != (uint32_t)st->size) {
        cs_text(why, len, "nranks: expected %d (communicator size), found %u", st->size, h->nranks);
        return 0;
    }
    if ((n->collective == CS_COLL_BCAST || n->collective == CS_COLL_REDUCE) && c->hdr.root != n->root) {
        cs_text(why, len, "root: expected %u (the call's), found %u", n->root, c->hdr.root);
        return 0;
    }
    if (n->bytes < h->bytes_min || n->bytes > h->bytes_max) {
        cs_text(why, len, "bytes: expected %llu %s within [%llu, %llu]", (unsigned long long)n->bytes,
                n->collective == CS_COLL_ALLTOALL ? "bytes per block" : "bytes", (unsigned long long)h->bytes_min,
                (unsigned long long)h->bytes_max);
        return 0;
    }
    if (n->noncommutative && (h->flags & CS_COLL_FLAG_COMMUTATIVE_ONLY)) {
        cs_text(why, len, "flags: a commutative-only schedule, the call's operation is not commutative");
        return 0;
    }
    return 1;
}

static void no_match(cs_coll_comm *st, const char *reason)
{
    note(st, NULL, reason);
    /* a single 1.2 file that does not fit is worth a line; a source with nothing of these
     * collectives (only allgather schedules, say) is normal and stays quiet */
    if (st->rank == 0 && !st->warned && !cs_strict() && st->enabled && (st->single_file || cs_verbose())) {
        cs_say("%s: falling back to the MPI library", reason);
        st->warned = 1;
    }
}

int cs_coll_select(cs_coll_comm *st, const cs_coll_need *need, cs_coll_choice *ch)
{
    char why[REASON_LEN] = "", reason[REASON_LEN];
    memset(ch, 0, sizeof *ch);
    ch->claimed = (st->claims & 1) || (st->claims >> (need->collective - CS_COLL_ALLTOALL + 1) & 1);
    if (!st->enabled) {
        no_match(st, st->disabled);
        return MPI_SUCCESS;
    }
    const char *comm_only = NULL; /* a file that fits but for the operation's commutativity */
    for (int i = 0; i < st->ncand; i++) {
        cand *c = &st->cand[i];
        if (!fits(st, c, need, why, sizeof why)) {
            if (!comm_only && strncmp(why, "flags:", 6) == 0) comm_only = c->path;
            continue;
        }
        int rc = c->state == 0 ? first_use(st, c) : MPI_SUCCESS;
        if (rc != MPI_SUCCESS) return rc;
        if (c->state < 0) { /* the first match decides: a refused file is not skipped */
            note(st, NULL, c->reason);
            return MPI_SUCCESS;
        }
        uint64_t piece = need->units / c->hdr.h.nseg + 1;
        if (piece * (c->max_pieces ? c->max_pieces : 1) > (uint64_t)INT_MAX) {
            cs_text(reason, sizeof reason, "%s: a message would exceed INT_MAX units", c->path);
            note(st, NULL, reason);
            return MPI_SUCCESS;
        }
        *ch = (cs_coll_choice){ c->plan, st->priv, c->reqs, c->path, ch->claimed };
        note(st, c->path, NULL);
        return MPI_SUCCESS;
    }
    if (st->single_file)
        cs_text(reason, sizeof reason, "%s: %s", st->cand[0].path, why);
    else
        cs_text(reason, sizeof reason, "%s: no %s schedule matches %d ranks%s, %llu bytes%s%s%s", st->source,
                coll_name(need->collective), st->size,
                need->collective == CS_COLL_BCAST || need->collective == CS_COLL_REDUCE ? " with this root" : "",
                (unsigned long long)need->bytes, comm_only ? " for a non-commutative operation (commutative-only: " : "",
                comm_only ? comm_only : "", comm_only ? ")" : "");
    no_match(st, reason);
    return MPI_SUCCESS;
}

/* Every rank refuses the same calls, so all reach the barrier: the line is out before any
 * rank's error handler aborts the job. */
void cs_coll_refused(cs_coll_comm *st, const char *call, uint64_t bytes)
{
    if (st->refused) return;
    st->refused = 1;
    if (st->rank == 0)
        cs_say("COLLSCHED_STRICT=1: %s refused on a communicator of %d ranks (%llu bytes), no fallback to the MPI "
               "library: %s", call, st->size, (unsigned long long)bytes, st->last.reason);
    PMPI_Barrier(st->priv);
}

int cs_coll_rank(const cs_coll_comm *st) { return st->rank; }
int cs_coll_size(const cs_coll_comm *st) { return st->size; }
MPI_Comm cs_coll_private(const cs_coll_comm *st) { return st->priv; }
