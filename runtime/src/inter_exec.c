/* inter_exec.c - execute one rank's intergroup section (docs/semantics.md#intergroup-schedules).
 *
 * Where a range lives: the remote group's data in the receive layout (block j where the
 * call puts remote rank j's block), so a range over several blocks that are not adjacent
 * there is one message over several places (an hindexed datatype of bytes, built for the
 * call and freed once issued); this rank's own group's data in its own block (own_src) or,
 * when the rank receives own-group data, in a scratch copy of its group's data with its
 * own block placed first; duplicates in scratch places of their own, dropped.
 *
 * Messages go on the file's own communicator with the call's tag (cs_inter_call_tag), so
 * a receive is never completed by another file's or another call's message.
 *
 * The walk is the dataflow one: receives posted at once; a send waits for exactly the
 * receives its range depends on (the deps inter_check.c derived) and, if FIFO, for the
 * previous send to its peer (then synchronous, as executor.c does); then everything
 * completes. After a failure, receives are cancelled and all requests completed.
 */
#include "runtime.h"

#include <stdlib.h>
#include <string.h>


typedef struct exec {
    const cs_inter_choice *ch;
    int tag;                     /* the call's own (cs_inter_call_tag) */
    const cs_inter_layout *lay;
    int mine, remote;            /* group indices */
    uint32_t first_remote, nremote;
    uint64_t *roff;              /* nremote + 1: offsets of the remote blocks in their data */
    uint64_t own_off;
    char *scratch, *dups;        /* own group's data; duplicates */
    uint64_t dup_at;
    int *lens;                   /* nremote: an hindexed type's pieces */
    MPI_Aint *disps;
} exec;

/* Address of remote block j in the layout. */
static char *remote_block(const exec *x, uint32_t j)
{
    const cs_inter_layout *l = x->lay;
    int64_t at = l->counts ? (int64_t)l->displs[j] * (int64_t)l->esize : (int64_t)((uint64_t)j * l->block);
    return l->base + at;
}

/* The place of a range of the remote group's data: one run, or *type over several. */
static int remote_place(exec *x, const cs_inter_op *op, char **buf, int *count, MPI_Datatype *type)
{
    uint32_t a = 0, b = x->nremote; /* first block ending after lo */
    while (a < b) {
        uint32_t m = a + (b - a) / 2;
        if (x->roff[m + 1] <= op->lo) a = m + 1; else b = m;
    }
    int n = 0;
    char *first = NULL, *end = NULL;
    for (uint32_t j = a; j < x->nremote && x->roff[j] < op->hi; j++) {
        uint64_t lo = op->lo > x->roff[j] ? op->lo : x->roff[j];
        uint64_t hi = op->hi < x->roff[j + 1] ? op->hi : x->roff[j + 1];
        if (hi <= lo) continue; /* an empty block */
        char *at = remote_block(x, j) + (lo - x->roff[j]);
        if (n && at == end) { /* adjacent in memory: the same piece goes on */
            x->lens[n - 1] += (int)(hi - lo);
        } else {
            if (!n) first = at;
            x->disps[n] = (MPI_Aint)(at - first);
            x->lens[n++] = (int)(hi - lo);
        }
        end = at + (hi - lo);
    }
    *buf = first;
    *type = MPI_BYTE;
    *count = (int)(op->hi - op->lo); /* below INT_MAX: checked when the file was loaded */
    if (n <= 1) return MPI_SUCCESS;
    *count = 1;
    int rc = PMPI_Type_create_hindexed(n, x->lens, x->disps, MPI_BYTE, type);
    if (rc == MPI_SUCCESS) rc = PMPI_Type_commit(type);
    return rc;
}

static int place(exec *x, const cs_inter_op *op, char **buf, int *count, MPI_Datatype *type)
{
    *type = MPI_BYTE;
    *count = (int)(op->hi - op->lo);
    if (op->kind == COLLSCHED_RECV && op->dup) {
        *buf = x->dups + x->dup_at;
        x->dup_at += op->hi - op->lo;
        return MPI_SUCCESS;
    }
    if (op->group == x->mine) {
        *buf = x->scratch ? x->scratch + op->lo : (char *)x->lay->own_src + (op->lo - x->own_off);
        return MPI_SUCCESS;
    }
    return remote_place(x, op, buf, count, type);
}

static int issue(exec *x, uint32_t i)
{
    const cs_inter_section *s = x->ch->sec;
    const cs_inter_op *op = &s->ops[i];
    MPI_Request *reqs = x->ch->reqs;
    int rc = MPI_SUCCESS, count;
    if (op->kind == COLLSCHED_SEND) {
        for (uint32_t k = 0; rc == MPI_SUCCESS && k < op->ndep; k++)
            rc = PMPI_Wait(&reqs[s->deps[op->dep0 + k]], MPI_STATUS_IGNORE);
        if (rc == MPI_SUCCESS && op->prev >= 0) rc = PMPI_Wait(&reqs[op->prev], MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return rc;
    }
    char *buf;
    MPI_Datatype type;
    rc = place(x, op, &buf, &count, &type);
    if (rc != MPI_SUCCESS) return rc;
    MPI_Comm comm = x->ch->comm;
    if (op->kind == COLLSCHED_RECV)
        rc = PMPI_Irecv(buf, count, type, (int)op->peer, x->tag, comm, &reqs[i]);
    else if (op->fifo) /* complete once matched: the next message to the peer waits for it */
        rc = PMPI_Issend(buf, count, type, (int)op->peer, x->tag, comm, &reqs[i]);
    else
        rc = PMPI_Isend(buf, count, type, (int)op->peer, x->tag, comm, &reqs[i]);
    if (type != MPI_BYTE) PMPI_Type_free(&type); /* MPI keeps it until the message is done */
    return rc;
}

static int setup(exec *x)
{
    const cs_inter_header *h = x->ch->h;
    const cs_inter_section *s = x->ch->sec;
    x->mine = x->ch->role;
    x->remote = 1 - x->mine;
    x->first_remote = x->remote == CS_GROUP_A ? 0 : h->p;
    x->nremote = x->remote == CS_GROUP_A ? h->p : h->q;
    x->own_off = cs_inter_block_offset(h, s->rank);
    x->roff = malloc(sizeof *x->roff * (x->nremote + 1));
    x->lens = malloc(sizeof *x->lens * x->nremote);
    x->disps = malloc(sizeof *x->disps * x->nremote);
    if (!x->roff || !x->lens || !x->disps) return MPI_ERR_NO_MEM;
    x->roff[0] = 0;
    for (uint32_t j = 0; j < x->nremote; j++) x->roff[j + 1] = x->roff[j] + h->blocks[x->first_remote + j];
    if (s->dup_bytes && !(x->dups = malloc((size_t)s->dup_bytes))) return MPI_ERR_NO_MEM;
    if (s->own_scratch) {
        uint64_t k = h->blocks[s->rank];
        if (!(x->scratch = malloc((size_t)(h->total[x->mine] ? h->total[x->mine] : 1)))) return MPI_ERR_NO_MEM;
        if (k) memcpy(x->scratch + x->own_off, x->lay->own_src, (size_t)k);
    }
    return MPI_SUCCESS;
}

int cs_inter_execute(const cs_inter_choice *ch, const cs_inter_layout *lay)
{
    const cs_inter_section *s = ch->sec;
    exec x;
    memset(&x, 0, sizeof x);
    x.ch = ch;
    x.lay = lay;
    x.tag = cs_inter_call_tag(ch->comm);
    for (uint32_t i = 0; i < s->nops; i++) ch->reqs[i] = MPI_REQUEST_NULL;
    int rc = setup(&x);
    for (uint32_t i = 0; rc == MPI_SUCCESS && i < s->nops; i++) rc = issue(&x, i);
    if (rc == MPI_SUCCESS) rc = PMPI_Waitall((int)s->nops, ch->reqs, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) { /* withdraw what can be, then complete everything */
        for (uint32_t i = 0; i < s->nops; i++)
            if (ch->reqs[i] != MPI_REQUEST_NULL && s->ops[i].kind == COLLSCHED_RECV) PMPI_Cancel(&ch->reqs[i]);
        PMPI_Waitall((int)s->nops, ch->reqs, MPI_STATUSES_IGNORE);
    }
    free(x.roff);
    free(x.lens);
    free(x.disps);
    free(x.dups);
    free(x.scratch);
    return rc;
}
