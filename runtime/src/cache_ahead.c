/* cache_ahead.c - receive-ahead for a schedule cache (docs/cache.md, "Receive-ahead").
 *
 * At the exit of a call a cache served, the rule already knows the entry the call site's
 * next call will run (cache.c, cs_cache_after). If that entry is a dataflow schedule of
 * one byte size, this rank posts its leading background receives (those at the head of
 * its list, before its first other operation; docs/semantics.md) into a staging buffer
 * now, as the PAT engine posts its background part: a late rank then receives the early
 * ranks' pieces while it still computes. The call that runs the entry hands them to the
 * executor (cs_started), which copies the held pieces into place.
 *
 * Safety: such an entry runs on its own communicator (a duplicate of the private one,
 * made collectively when the entry is proven, decided from its header alone so every rank
 * makes it), so its pre-posted receives can only ever match its own messages; and its
 * schedule is the same every time, so receives left posted by a misprediction serve the
 * entry's next use, whoever's call it is. At communicator free and finalize they are
 * cancelled and completed. COLLSCHED_AHEAD=0 turns the posting off on this rank (the
 * entries still run on their own communicators: that choice must be the same on every
 * rank, the posting need not be).
 */
#include "runtime.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cs_ahead {
    MPI_Comm comm;                 /* the entry's own communicator */
    const collsched_schedule *s;
    MPI_Request *reqs;             /* the candidate's, one per op: [0, nlead) when posted */
    uint32_t nlead;                /* this rank's leading background receives */
    uint64_t bytes, slot;          /* the entry's one size; a piece's staging slot */
    char *staging;
    char **held;
    int posted;
    cs_started started;
};

static int ahead_mode = -1;

int cs_ahead_enabled(void)
{
    int v = __atomic_load_n(&ahead_mode, __ATOMIC_RELAXED);
    if (v < 0) {
        const char *e = getenv("COLLSCHED_AHEAD");
        __atomic_store_n(&ahead_mode, v = !(e && !strcmp(e, "0")), __ATOMIC_RELAXED);
    }
    return v;
}

int cs_ahead_open(MPI_Comm priv, const collsched_schedule *s, MPI_Request *reqs, cs_ahead **out)
{
    const collsched_header *h = &s->hdr;
    *out = NULL;
    /* From the header only (the ranks agreed on it): every rank decides alike. */
    if ((h->flags & COLLSCHED_FLAG_SERIAL) || h->bytes_min != h->bytes_max || h->nseg == 0
        || h->bytes_max / h->nseg + 1 > (uint64_t)INT_MAX)
        return MPI_SUCCESS;
    cs_ahead *a = calloc(1, sizeof *a);
    MPI_Comm dup = MPI_COMM_NULL;
    int rc = PMPI_Comm_dup(priv, &dup); /* collective: made even if this rank's memory fails */
    if (rc != MPI_SUCCESS) { free(a); return rc; }
    PMPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
    if (!a) { PMPI_Comm_free(&dup); return MPI_ERR_NO_MEM; }
    a->comm = dup;
    a->s = s;
    a->reqs = reqs;
    a->bytes = h->bytes_max;
    a->slot = (a->bytes + h->nseg - 1) / h->nseg;
    uint32_t n = 0;
    while (n < s->nops && s->ops[n].phase == 1 && s->ops[n].kind == COLLSCHED_RECV) n++;
    uint64_t room = (uint64_t)n * a->slot;
    if (n && (room > SIZE_MAX / 2 || !(a->held = calloc(n, sizeof *a->held))
              || !(a->staging = malloc((size_t)(room ? room : 1))))) {
        free(a->held);
        a->held = NULL;
        n = 0; /* no memory: this rank runs the entry wholly in the call */
    }
    a->nlead = n;
    *out = a;
    return MPI_SUCCESS;
}

MPI_Comm cs_ahead_comm(const cs_ahead *a) { return a->comm; }

/* Withdraws receives [0, n): cancel, then complete. Returns 0; 1 if one failed; 2 if
 * one had matched a message instead (nothing sends the entry's messages outside its
 * calls: never expected, said). */
static int withdraw(cs_ahead *a, uint32_t n)
{
    int bad = 0;
    for (uint32_t i = 0; i < n; i++) {
        MPI_Status st;
        int cancelled = 0;
        if (a->reqs[i] == MPI_REQUEST_NULL) continue;
        PMPI_Cancel(&a->reqs[i]);
        if (PMPI_Wait(&a->reqs[i], &st) != MPI_SUCCESS) bad = 1;
        else if (PMPI_Test_cancelled(&st, &cancelled) != MPI_SUCCESS || !cancelled) bad = bad ? bad : 2;
        a->reqs[i] = MPI_REQUEST_NULL;
    }
    return bad;
}

int cs_ahead_post(cs_ahead *a)
{
    if (!a || a->posted || !a->nlead || !cs_ahead_enabled()) return MPI_SUCCESS;
    const collsched_schedule *s = a->s;
    int rc = MPI_SUCCESS;
    uint32_t i = 0;
    /* One receive per message (multi-piece messages: its pieces back to back from the
     * head's slot; a message of k pieces fits the k slots of its ops); requests of joined
     * ops stay MPI_REQUEST_NULL, as the executor expects (runtime.h, cs_started). */
    for (uint32_t k = 0; k < a->nlead; k++) a->reqs[k] = MPI_REQUEST_NULL;
    while (i < a->nlead && rc == MPI_SUCCESS) {
        uint32_t h = i;
        uint64_t at = 0;
        do {
            uint64_t g = s->ops[i].segment;
            a->held[i] = a->staging + h * a->slot + at;
            at += cs_seg_lo(g + 1u, a->bytes, s->hdr.nseg) - cs_seg_lo(g, a->bytes, s->hdr.nseg);
            i++;
        } while (i < a->nlead && s->ops[i].join);
        rc = at > INT_MAX ? MPI_ERR_COUNT
                          : PMPI_Irecv(a->held[h], (int)at, MPI_BYTE, (int)s->ops[h].peer, CS_TAG, a->comm, &a->reqs[h]);
        if (rc != MPI_SUCCESS) a->reqs[h] = MPI_REQUEST_NULL;
    }
    if (rc != MPI_SUCCESS) { /* none stays out: the call posts them itself */
        withdraw(a, i);
        return rc;
    }
    a->posted = 1;
    if (cs_verbose())
        fprintf(stderr, "collsched: receive-ahead: %u receives of %s posted ahead\n", a->nlead, a->s->hdr.algorithm);
    return MPI_SUCCESS;
}

const cs_started *cs_ahead_take(cs_ahead *a)
{
    if (!a || !a->posted) return NULL;
    a->posted = 0;
    a->started = (cs_started){ a->nlead, a->nlead, 0, a->held };
    return &a->started;
}

void cs_ahead_close(cs_ahead *a, int mpi_usable)
{
    if (!a) return;
    if (a->posted && !mpi_usable) return; /* SMPI's late delete: MPI may still write into staging */
    int bad = a->posted ? withdraw(a, a->nlead) : 0;
    if (bad)
        fprintf(stderr, "collsched: receive-ahead: a pre-posted receive of %s %s when withdrawn\n",
                a->s->hdr.algorithm, bad == 1 ? "failed" : "had matched a message");
    if (mpi_usable && a->comm != MPI_COMM_NULL) PMPI_Comm_free(&a->comm);
    free(a->staging);
    free(a->held);
    free(a);
}
