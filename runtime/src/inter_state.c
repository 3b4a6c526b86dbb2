/* inter_state.c - the state of a two-group communicator: private communicators, the
 * intergroup schedules of the source, and the choice of one for a call.
 *
 * Cached as an attribute (deleted with the communicator, or at MPI_Finalize). First use,
 * collective over both groups: an MPI_Intercomm_merge (the merged form: a duplicate),
 * the headers of the configured intergroup files (collectives 3 and 4), and one allreduce
 * that the ranks see the same ones. G0 is the group holding the merged communicator's rank
 * 0 (MPI_Group_translate_ranks: no message), G1 the other.
 *
 * Which group is the schedule's A: the one whose size and block sizes are the file's A
 * side. Allgather: every rank knows its group's block size (its own) and the remote one, so
 * each decides alone and all decide alike. Allgatherv: a rank knows only its own block and
 * the remote ones; its fit flags ANDed with those of one rank of the other group (one
 * message, agree()) make the choice common in every correct call. When both mappings fit
 * (symmetric groups), G0 is A. The schedule runs on a communicator in its numbering (A's
 * ranks, then B's: MPI_Comm_split of the merged one, one per file and mapping), its
 * messages tagged with the call's number. On a file's first use every rank loads its
 * section and rank 0 proves the whole file (inter_check.c); one allreduce spreads the
 * verdict: all run it or none.
 */
#include "runtime.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define REASON_LEN 512
#define TAG_FIRST 16 /* schedule traffic on a file's communicator: TAG_FIRST + call number mod span */
#define TAG_AGREE 4  /* allgatherv's agreement on the merged communicator (CS_TAG: the merged form's fallback) */

typedef struct cand {
    char *path;
    cs_inter_header hdr;
    int state;                   /* the whole file: 0 not tried, 1 proven, -1 refused */
    char reason[REASON_LEN];
    cs_inter_section *sec[2];    /* this rank's section when G_a is A */
    MPI_Request *reqs[2];
    MPI_Comm comm[2];            /* its own communicator per mapping, in the schedule's numbering */
    int loaded[2];               /* 0 not tried, 1 loaded and agreed, -1 refused */
} cand;

struct cs_inter {
    int split_p;                 /* merged form: G0 = ranks 0..split_p-1; intercommunicator: -1 */
    int mine, lrank, lsize, rsize;
    int *rmerged;                /* rsize: the remote group's ranks in the merged communicator */
    MPI_Comm merged, half;
    unsigned long calls;         /* intergroup calls so far: the schedule traffic's tag */
    int enabled, single_file, warned, refused, released;
    char source[REASON_LEN], disabled[REASON_LEN];
    cand *cand;
    int ncand;
    collsched_call_info last;
    struct cs_inter *next;
};

static int keyval = MPI_KEYVAL_INVALID, self_keyval = MPI_KEYVAL_INVALID, tag_keyval = MPI_KEYVAL_INVALID;
static int tag_span = 32767 - TAG_FIRST + 1;
static cs_inter *all_states;

#ifndef SMPI_HELPERS_H
#include <pthread.h>
static pthread_mutex_t states_mu = PTHREAD_MUTEX_INITIALIZER;
#define LOCK() pthread_mutex_lock(&states_mu)
#define UNLOCK() pthread_mutex_unlock(&states_mu)
#else /* SMPI: the ranks are actors of one thread */
#define LOCK() ((void)0)
#define UNLOCK() ((void)0)
#endif

/* ---- lifetime ---- */

static void free_comm(MPI_Comm *c, int usable)
{
    if (usable && *c != MPI_COMM_NULL) PMPI_Comm_free(c);
    *c = MPI_COMM_NULL;
}

static void release(cs_inter *st, int usable)
{
    if (st->released) return;
    st->released = 1;
    for (int i = 0; i < st->ncand; i++) {
        for (int a = 0; a < 2; a++) {
            cs_inter_section_free(st->cand[i].sec[a]);
            free(st->cand[i].reqs[a]);
            free_comm(&st->cand[i].comm[a], usable);
        }
        cs_inter_header_free(&st->cand[i].hdr);
        free(st->cand[i].path);
    }
    free(st->cand);
    st->cand = NULL;
    free(st->rmerged);
    st->rmerged = NULL;
    st->ncand = 0;
    free_comm(&st->half, usable);
    free_comm(&st->merged, usable);
    LOCK();
    for (cs_inter **p = &all_states; *p; p = &(*p)->next)
        if (*p == st) { *p = st->next; break; }
    UNLOCK();
}

static int delete_state(MPI_Comm comm, int kv, void *value, void *extra)
{
    (void)comm; (void)kv; (void)extra;
    cs_inter *st = value;
    int finalized = 1;
    if (!st->released) PMPI_Finalized(&finalized);
    release(st, !finalized);
    free(st);
    return MPI_SUCCESS;
}

/* MPI_Finalize deletes MPI_COMM_SELF's attributes first: the private communicators go
 * while MPI works (the states' memory goes with their communicators' attributes, or never
 * where those outlive MPI, as under SMPI). */
static int at_finalize(MPI_Comm comm, int kv, void *value, void *extra)
{
    (void)comm; (void)kv; (void)value; (void)extra;
    while (all_states) release(all_states, 1);
    return MPI_SUCCESS;
}

static int ensure_keyvals(void)
{
    int rc = MPI_SUCCESS;
    LOCK();
    if (keyval == MPI_KEYVAL_INVALID) {
        rc = PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_state, &keyval, NULL);
        if (rc == MPI_SUCCESS)
            rc = PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, at_finalize, &self_keyval, NULL);
        if (rc == MPI_SUCCESS) rc = PMPI_Comm_set_attr(MPI_COMM_SELF, self_keyval, NULL);
        if (rc == MPI_SUCCESS)
            rc = PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, MPI_COMM_NULL_DELETE_FN, &tag_keyval, NULL);
        int *ub = NULL, found = 0;
        if (rc == MPI_SUCCESS && PMPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &found) == MPI_SUCCESS && found
            && ub && *ub >= 32767)
            tag_span = (*ub > (1 << 30) ? (1 << 30) : *ub) - TAG_FIRST + 1;
    }
    UNLOCK();
    return rc;
}

/* ---- the schedule set ---- */

static int add(cs_inter *st, const char *path, char *err, size_t len)
{
    cs_inter_header h;
    int rc = cs_inter_read_header(path, &h, err, len);
    if (rc != COLLSCHED_OK) { cs_inter_header_free(&h); return rc; }
    cand *c = realloc(st->cand, (size_t)(st->ncand + 1) * sizeof *c);
    if (!c) { cs_inter_header_free(&h); return COLLSCHED_ENOMEM; }
    st->cand = c;
    c = &st->cand[st->ncand];
    memset(c, 0, sizeof *c);
    c->comm[0] = c->comm[1] = MPI_COMM_NULL;
    c->hdr = h;
    if (!(c->path = strdup(path))) { cs_inter_header_free(&c->hdr); return COLLSCHED_ENOMEM; }
    st->ncand++;
    return COLLSCHED_OK;
}

/* A directory: its intergroup files in name order (others are the allgather path's). */
static void scan_directory(cs_inter *st, const char *dir)
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
    if (!st->ncand) cs_text(st->disabled, sizeof st->disabled, "%s: no intergroup schedule there", dir);
}

static uint64_t scan_source(cs_inter *st)
{
    const char *src = cs_source_path();
    struct stat sb;
    char err[REASON_LEN];
    if (!src) {
        cs_text(st->disabled, sizeof st->disabled, "COLLSCHED_SCHEDULES is not set");
        return 1;
    }
    cs_text(st->source, sizeof st->source, "%s", src);
    uint64_t h = cs_hash64(0, src, strlen(src));
    if (stat(src, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        scan_directory(st, src);
    } else {
        st->single_file = 1;
        if (add(st, src, err, sizeof err) != COLLSCHED_OK) cs_text(st->disabled, sizeof st->disabled, "%s", err);
    }
    for (int i = 0; i < st->ncand; i++) {
        h = cs_hash64(h, st->cand[i].path, strlen(st->cand[i].path));
        h = cs_hash64(h, &st->cand[i].hdr.hash, sizeof st->cand[i].hdr.hash);
    }
    return h;
}

/* ---- creation ---- */

/* Which group this rank is in, without a message: G0 holds the merged rank 0. */
static int group_of_merged(MPI_Comm inter, MPI_Comm merged, int *mine)
{
    MPI_Group local, all;
    int zero = 0, r = MPI_UNDEFINED;
    int rc = PMPI_Comm_group(inter, &local);
    if (rc == MPI_SUCCESS) rc = PMPI_Comm_group(merged, &all);
    if (rc == MPI_SUCCESS) rc = PMPI_Group_translate_ranks(all, 1, &zero, local, &r);
    PMPI_Group_free(&local);
    PMPI_Group_free(&all);
    *mine = r == MPI_UNDEFINED;
    return rc;
}

/* The remote group's ranks in the merged communicator (no message). */
static int remote_ranks(MPI_Comm inter, cs_inter *st)
{
    MPI_Group remote = MPI_GROUP_NULL, all = MPI_GROUP_NULL;
    int *idx = malloc(sizeof *idx * (size_t)st->rsize);
    st->rmerged = malloc(sizeof *st->rmerged * (size_t)st->rsize);
    if (!idx || !st->rmerged) { free(idx); return MPI_ERR_NO_MEM; }
    for (int j = 0; j < st->rsize; j++) idx[j] = j;
    int rc = PMPI_Comm_remote_group(inter, &remote);
    if (rc == MPI_SUCCESS) rc = PMPI_Comm_group(st->merged, &all);
    if (rc == MPI_SUCCESS) rc = PMPI_Group_translate_ranks(remote, st->rsize, idx, all, st->rmerged);
    if (remote != MPI_GROUP_NULL) PMPI_Group_free(&remote);
    if (all != MPI_GROUP_NULL) PMPI_Group_free(&all);
    free(idx);
    return rc;
}

static int open_comms(cs_inter *st, MPI_Comm comm, int split_p)
{
    int rc;
    st->split_p = split_p;
    st->merged = st->half = MPI_COMM_NULL;
    if (split_p < 0) {
        PMPI_Comm_rank(comm, &st->lrank);
        PMPI_Comm_size(comm, &st->lsize);
        PMPI_Comm_remote_size(comm, &st->rsize);
        rc = PMPI_Intercomm_merge(comm, 0, &st->merged);
        if (rc == MPI_SUCCESS) rc = group_of_merged(comm, st->merged, &st->mine);
        if (rc == MPI_SUCCESS) rc = remote_ranks(comm, st);
    } else {
        int rank, size;
        PMPI_Comm_rank(comm, &rank);
        PMPI_Comm_size(comm, &size);
        st->mine = rank >= split_p;
        st->lrank = st->mine ? rank - split_p : rank;
        st->lsize = st->mine ? size - split_p : split_p;
        st->rsize = size - st->lsize;
        rc = PMPI_Comm_dup(comm, &st->merged);
        if (!(st->rmerged = malloc(sizeof *st->rmerged * (size_t)st->rsize))) rc = MPI_ERR_NO_MEM;
        for (int j = 0; rc == MPI_SUCCESS && j < st->rsize; j++) st->rmerged[j] = st->mine ? j : split_p + j;
    }
    if (rc == MPI_SUCCESS) PMPI_Comm_set_errhandler(st->merged, MPI_ERRORS_RETURN);
    return rc;
}

static int create(MPI_Comm comm, int split_p, cs_inter **out)
{
    cs_inter *st = calloc(1, sizeof *st);
    if (!st) return MPI_ERR_NO_MEM;
    int rc = open_comms(st, comm, split_p);
    uint64_t h = scan_source(st), x[2] = { h, ~h };
    if (rc == MPI_SUCCESS) rc = PMPI_Allreduce(MPI_IN_PLACE, x, 2, MPI_UINT64_T, MPI_MAX, st->merged);
    int same = x[0] == h && x[1] == ~h, first = 1;
    if (rc == MPI_SUCCESS) PMPI_Comm_rank(st->merged, &first);
    first = first == 0;
    st->enabled = same && st->ncand > 0;
    if (rc == MPI_SUCCESS && !same) {
        cs_text(st->disabled, sizeof st->disabled, "ranks see different schedule files under %s", st->source);
        if (first) cs_say("%s: falling back to the MPI library", st->disabled);
    } else if (st->single_file && !st->enabled && first && !cs_strict()) {
        cs_say("%s", st->disabled); /* a broken single file is worth a line */
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

int cs_inter_state(MPI_Comm comm, int split_p, cs_inter **out)
{
    int found = 0, rc = ensure_keyvals();
    if (rc == MPI_SUCCESS) rc = PMPI_Comm_get_attr(comm, keyval, out, &found);
    if (rc != MPI_SUCCESS) return rc;
    if (found && (*out)->split_p == split_p) return MPI_SUCCESS;
    if (found) PMPI_Comm_delete_attr(comm, keyval); /* the merged form with another split */
    return create(comm, split_p, out);
}

int cs_inter_last_call(MPI_Comm comm, collsched_call_info *info)
{
    cs_inter *st = NULL;
    int found = 0;
    if (keyval == MPI_KEYVAL_INVALID || comm == MPI_COMM_NULL
        || PMPI_Comm_get_attr(comm, keyval, &st, &found) != MPI_SUCCESS || !found)
        return 0;
    *info = st->last;
    return 1;
}

/* ---- choosing a schedule ---- */

/* Does the file fit the call when this rank's group plays `role`? */
static int fits(const cs_inter *st, const cs_inter_header *h, const cs_inter_need *n, int role)
{
    uint32_t mp = role == CS_GROUP_A ? h->p : h->q, rp = role == CS_GROUP_A ? h->q : h->p;
    uint32_t mfirst = role == CS_GROUP_A ? 0 : h->p, rfirst = role == CS_GROUP_A ? h->p : 0;
    if (mp != (uint32_t)st->lsize || rp != (uint32_t)st->rsize) return 0;
    if (!n->v) {
        for (uint32_t r = 0; r < mp; r++)
            if (h->blocks[mfirst + r] != n->own) return 0;
        for (uint32_t j = 0; j < rp; j++)
            if (h->blocks[rfirst + j] != n->remote) return 0;
        return 1;
    }
    if (h->blocks[mfirst + (uint32_t)st->lrank] != n->own) return 0;
    for (uint32_t j = 0; j < rp; j++)
        if (n->counts[j] < 0 || h->blocks[rfirst + j] != (uint64_t)n->counts[j] * n->esize) return 0;
    return 1;
}

/* Schedule rank of this rank when G_a is A. */
static uint32_t sched_rank(const cs_inter *st, int a)
{
    int a_size = st->mine == a ? st->lsize : st->rsize;
    return (uint32_t)(st->mine == a ? st->lrank : a_size + st->lrank);
}

/* File c's communicator in the numbering with G_a as A (collective; on its first use).
 * One per file and mapping: should the ranks ever run different files in one call (an
 * erroneous allgatherv, see agree()), their messages cannot match each other. */
static int file_comm(cs_inter *st, cand *c, int a)
{
    int rc = PMPI_Comm_split(st->merged, 0, (int)sched_rank(st, a), &c->comm[a]);
    if (rc == MPI_SUCCESS) PMPI_Comm_set_errhandler(c->comm[a], MPI_ERRORS_RETURN);
    if (rc == MPI_SUCCESS) rc = PMPI_Comm_set_attr(c->comm[a], tag_keyval, st);
    return rc;
}

/* The tag of the current call's schedule messages on a file's communicator: the call's
 * number on the intercommunicator (every rank counts every intergroup call on it), so a
 * message of one call never completes a receive of another. */
int cs_inter_call_tag(MPI_Comm comm)
{
    cs_inter *st = NULL;
    int found = 0;
    if (PMPI_Comm_get_attr(comm, tag_keyval, &st, &found) != MPI_SUCCESS || !found) return CS_TAG;
    return TAG_FIRST + (int)(st->calls % (unsigned long)tag_span);
}

/* Loads this rank's section of c for mapping a; rank 0 proves the whole file if nobody did
 * yet; the ranks agree (one allreduce; the reason of a whole-file refusal in one bcast). */
static int first_use(cs_inter *st, cand *c, int a)
{
    char err[REASON_LEN] = "";
    int me = 0, P = st->lsize + st->rsize;
    PMPI_Comm_rank(st->merged, &me);
    cs_inter_header h;
    cs_inter_section *s = NULL;
    int ok = cs_inter_load(c->path, sched_rank(st, a), &h, &s, err, sizeof err) == COLLSCHED_OK;
    uint64_t hash = ok ? h.hash : 0;
    cs_inter_header_free(&h);
    for (uint32_t i = 0; ok && i < s->nops; i++)
        if (s->ops[i].hi - s->ops[i].lo > (uint64_t)INT_MAX) {
            cs_text(err, sizeof err, "%s: rank %u op %u: a range exceeds INT_MAX bytes", c->path, s->rank, i);
            ok = 0;
        }
    if (ok && !(c->reqs[a] = malloc(sizeof *c->reqs[a] * (s->nops ? s->nops : 1)))) {
        cs_text(err, sizeof err, "%s: memory: cannot allocate %u requests", c->path, s->nops);
        ok = 0;
    }
    int whole = 0;
    char why[REASON_LEN] = "";
    if (c->state == 0 && me == 0) {
        whole = cs_inter_check_file(c->path, why, sizeof why) != COLLSCHED_OK;
        if (cs_verbose()) cs_say("%s: whole intergroup schedule checked on rank 0: %s", c->path, whole ? "refused" : "correct");
    }
    uint64_t id = (uint64_t)(c - st->cand) * 2 + (uint64_t)a; /* which file and mapping: all alike */
    uint64_t x[6] = { hash, ~hash, ok ? 0 : (uint64_t)(P - me), (uint64_t)whole, id, ~id };
    int rc = PMPI_Allreduce(MPI_IN_PLACE, x, 6, MPI_UINT64_T, MPI_MAX, st->merged);
    if (rc == MPI_SUCCESS && x[3]) rc = PMPI_Bcast(why, (int)sizeof why, MPI_CHAR, 0, st->merged);
    if (rc == MPI_SUCCESS && x[3]) {
        c->state = -1;
        cs_text(c->reason, sizeof c->reason, "%s", why);
        if (me == 0 && !cs_strict()) cs_say("%s", why);
    } else if (rc == MPI_SUCCESS) {
        c->state = 1;
    }
    int agreed = rc == MPI_SUCCESS && !x[3] && !x[2] && x[0] == hash && x[1] == ~hash && x[4] == id && x[5] == ~id;
    if (agreed) rc = file_comm(st, c, a);
    if (rc == MPI_SUCCESS && agreed) {
        c->sec[a] = s;
        c->loaded[a] = 1;
        if (me == 0 && cs_verbose())
            cs_say("two groups of %d and %d ranks: selected %s (algorithm %s, p %u, q %u)", st->mine ? st->rsize : st->lsize,
                   st->mine ? st->lsize : st->rsize, c->path, c->hdr.h.algorithm, c->hdr.p, c->hdr.q);
        return MPI_SUCCESS;
    }
    cs_inter_section_free(s);
    free(c->reqs[a]);
    c->reqs[a] = NULL;
    c->loaded[a] = -1;
    if (x[3]) return rc;
    if (rc != MPI_SUCCESS) {
        cs_text(c->reason, sizeof c->reason, "%s: MPI error %d while the ranks agreed", c->path, rc);
    } else if (x[2]) {
        uint64_t bad = (uint64_t)P - x[2];
        if (bad == (uint64_t)me) {
            cs_text(c->reason, sizeof c->reason, "%s", err);
            if (!cs_strict()) cs_say("%s", err);
        } else {
            cs_text(c->reason, sizeof c->reason, "%s: refused on rank %llu", c->path, (unsigned long long)bad);
        }
    } else {
        cs_text(c->reason, sizeof c->reason, "%s: ranks read different headers or indexes", c->path);
    }
    return rc;
}

/* Allgatherv's agreement, one message deep: rank r of a group X receives the flags of rank
 * r mod |Y| of the other group Y, and sends its own to the ranks of Y that map to it
 * (r, r + |X|, ... below |Y|), on the private merged communicator with a tag of its own.
 * In a correct call all ranks of X see the same blocks of Y, and every block of X is seen
 * by the ranks of Y; a rank's flags hold for (its own block) AND (its view of the other
 * group), so own AND partner = (X's blocks are the file's) AND (Y's are): the same on every
 * rank. Every rank sends and receives in every allgatherv call, whatever it decides, so
 * the messages of one call pair with each other (MPI's order per sender and tag). */
static int agree(cs_inter *st, uint64_t *fit, int words)
{
    int nsend = st->lrank < st->rsize ? (st->rsize - 1 - st->lrank) / st->lsize + 1 : 0;
    uint64_t one[4], *got = words <= 4 ? one : malloc(sizeof *got * (size_t)words);
    MPI_Request stack[9], *req = nsend + 1 <= 9 ? stack : malloc(sizeof *req * (size_t)(nsend + 1));
    int rc = got && req ? MPI_SUCCESS : MPI_ERR_NO_MEM, n = 0;
    if (rc == MPI_SUCCESS)
        rc = PMPI_Irecv(got, words, MPI_UINT64_T, st->rmerged[st->lrank % st->rsize], TAG_AGREE, st->merged, &req[n++]);
    for (int j = st->lrank; rc == MPI_SUCCESS && j < st->rsize; j += st->lsize)
        rc = PMPI_Isend(fit, words, MPI_UINT64_T, st->rmerged[j], TAG_AGREE, st->merged, &req[n++]);
    if (n) {
        int w = PMPI_Waitall(n, req, MPI_STATUSES_IGNORE);
        if (rc == MPI_SUCCESS) rc = w;
    }
    for (int w = 0; rc == MPI_SUCCESS && w < words; w++) fit[w] &= got[w];
    if (got != one) free(got);
    if (req != stack) free(req);
    return rc;
}

static void no_match(cs_inter *st, const char *reason)
{
    cs_inter_note(st, NULL, reason);
    int me = 0;
    PMPI_Comm_rank(st->merged, &me);
    if (me == 0 && !st->warned && !cs_strict() && (st->single_file || cs_verbose())) {
        cs_say("%s: falling back to the MPI library", reason);
        st->warned = 1;
    }
}

/* fit[2i + a]: file i fits with G_a as A. Allgather: every rank of a correct call computes
 * the same flags alone. Allgatherv: a rank's flags say that its own block and its view of
 * the remote group's blocks are the file's; every rank of one group sees all blocks of the
 * other, so the flags of one rank of each group, ANDed, decide for all (see the comment of
 * agree()). */
static int fit_flags(cs_inter *st, const cs_inter_need *n, uint64_t *fit, int words)
{
    memset(fit, 0, sizeof *fit * (size_t)words);
    for (int i = 0; i < st->ncand; i++)
        for (int a = 0; a < 2; a++) {
            int role = st->mine == a ? CS_GROUP_A : CS_GROUP_B;
            if (fits(st, &st->cand[i].hdr, n, role)) fit[(2 * i + a) / 64] |= 1ull << ((2 * i + a) % 64);
        }
    if (!n->v) return MPI_SUCCESS; /* the same on every rank of a correct call */
    return agree(st, fit, words);
}

int cs_inter_select(cs_inter *st, const cs_inter_need *need, cs_inter_choice *ch)
{
    memset(ch, 0, sizeof *ch);
    st->calls++;
    if (!st->enabled) {
        no_match(st, st->disabled);
        return MPI_SUCCESS;
    }
    int words = (2 * st->ncand + 63) / 64;
    uint64_t one, *fit = words == 1 ? &one : malloc(sizeof *fit * (size_t)words);
    if (!fit) return MPI_ERR_NO_MEM;
    int rc = fit_flags(st, need, fit, words), k = -1, a = 0;
    for (int i = 0; rc == MPI_SUCCESS && k < 0 && i < st->ncand; i++)
        for (int b = 1; b >= 0; b--) /* G0 as A wins when both fit */
            if (fit[(2 * i + b) / 64] >> ((2 * i + b) % 64) & 1) { k = i; a = b; }
    if (fit != &one) free(fit);
    if (rc != MPI_SUCCESS) return rc;
    if (k < 0) {
        char reason[REASON_LEN];
        if (st->single_file)
            cs_text(reason, sizeof reason, "%s: groups: expected %u:%u ranks with its block sizes, the call has "
                    "%d:%d ranks and other sizes", st->cand[0].path, st->cand[0].hdr.p, st->cand[0].hdr.q,
                    st->mine ? st->rsize : st->lsize, st->mine ? st->lsize : st->rsize);
        else
            cs_text(reason, sizeof reason, "%s: no intergroup schedule matches groups of %d and %d ranks with "
                    "these block sizes", st->source, st->mine ? st->rsize : st->lsize, st->mine ? st->lsize : st->rsize);
        no_match(st, reason);
        return MPI_SUCCESS;
    }
    cand *c = &st->cand[k];
    if (c->state >= 0 && c->loaded[a] == 0) rc = first_use(st, c, a);
    if (rc != MPI_SUCCESS) return rc;
    if (c->loaded[a] != 1) { /* the first match decides: a refused file is not skipped */
        cs_inter_note(st, NULL, c->reason);
        return MPI_SUCCESS;
    }
    *ch = (cs_inter_choice){ &c->hdr, c->sec[a], c->reqs[a], c->comm[a],
                             st->mine == a ? CS_GROUP_A : CS_GROUP_B, c->path };
    cs_inter_note(st, c->path, NULL);
    return MPI_SUCCESS;
}

/* ---- notes and accessors ---- */

void cs_inter_note(cs_inter *st, const char *used, const char *reason)
{
    st->last.used_schedule = used != NULL;
    cs_text(st->last.schedule, sizeof st->last.schedule, "%s", used ? used : "");
    cs_text(st->last.reason, sizeof st->last.reason, "%s", reason ? reason : "");
}

const char *cs_inter_reason(const cs_inter *st) { return st->last.reason; }
int cs_inter_mine(const cs_inter *st) { return st->mine; }
int cs_inter_lrank(const cs_inter *st) { return st->lrank; }
int cs_inter_lsize(const cs_inter *st) { return st->lsize; }
int cs_inter_rsize(const cs_inter *st) { return st->rsize; }
MPI_Comm cs_inter_merged(const cs_inter *st) { return st->merged; }

int cs_inter_half(cs_inter *st, MPI_Comm *half)
{
    int rc = MPI_SUCCESS;
    if (st->half == MPI_COMM_NULL) {
        rc = PMPI_Comm_split(st->merged, st->mine, st->lrank, &st->half);
        if (rc == MPI_SUCCESS) PMPI_Comm_set_errhandler(st->half, MPI_ERRORS_RETURN);
    }
    *half = st->half;
    return rc;
}

/* Every rank refuses the same calls, so all reach the barrier: the line is out before any
 * rank's error handler aborts the job. */
void cs_inter_refused(cs_inter *st, const char *call)
{
    if (st->refused) return;
    st->refused = 1;
    int me = 0;
    PMPI_Comm_rank(st->merged, &me);
    if (me == 0)
        cs_say("COLLSCHED_STRICT=1: %s refused between groups of %d and %d ranks, no fallback to the MPI "
               "library: %s", call, st->mine ? st->rsize : st->lsize, st->mine ? st->lsize : st->rsize,
               st->last.reason);
    PMPI_Barrier(st->merged);
}
