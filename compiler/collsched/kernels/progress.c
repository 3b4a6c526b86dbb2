/* verify._progress_completes in C: does every rank's walk reach the end of its list?
 *
 * Each rank walks as far as its blocking ops' conditions allow and waits on the rank whose
 * progress it needs; a rank that moves wakes its waiters (read the Python function first:
 * this is the same walk). blocking[] lists the blocking ops rank-major in list order; rank
 * r's are blocking[first[r] .. last[r]). dep0..dep2[op] name the op that must have been
 * issued before op may go (-1: none). Returns 1 (every walk ends) or 0, or CS_ENOMEM.
 * Multi-piece messages need nothing here: verify._progress_deps names a send message by its
 * last op and a receive message by its head, so the message-level walk is this walk.
 */
#include "kernels.h"

int64_t cs_progress_completes(int64_t nranks, const int64_t *rank, const int64_t *offsets,
                              const int64_t *blocking, const int64_t *first, const int64_t *last,
                              const int64_t *dep0, const int64_t *dep1, const int64_t *dep2)
{
    const int64_t *deps[3] = {dep0, dep1, dep2};
    size_t nr = (size_t)nranks;
    int64_t *cur = malloc(nr * sizeof *cur);
    int64_t *issued = malloc(nr * sizeof *issued); /* r has issued its ops before this index */
    /* waiters: singly linked lists of ranks waiting on a rank (a rank waits on one at a time) */
    int64_t *wait_head = malloc(nr * sizeof *wait_head), *wait_next = malloc(nr * sizeof *wait_next);
    int64_t *todo = malloc(nr * sizeof *todo);
    int64_t rc = CS_ENOMEM, ntodo = 0;
    if (!cur || !issued || !wait_head || !wait_next || !todo)
        goto out;
    for (int64_t r = 0; r < nranks; r++) {
        cur[r] = first[r];
        issued[r] = cur[r] < last[r] ? blocking[cur[r]] : offsets[r + 1];
        wait_head[r] = -1;
        todo[ntodo++] = r;
    }
    while (ntodo) {
        int64_t r = todo[--ntodo], moved = 0;
        while (cur[r] < last[r]) {
            int64_t op = blocking[cur[r]], stop = -1;
            for (int k = 0; k < 3; k++) {
                int64_t d = deps[k][op];
                if (d >= 0 && d >= issued[rank[d]]) {
                    stop = rank[d];
                    break;
                }
            }
            if (stop >= 0) {
                wait_next[r] = wait_head[stop];
                wait_head[stop] = r;
                break;
            }
            cur[r]++;
            moved = 1;
        }
        if (moved) {
            issued[r] = cur[r] < last[r] ? blocking[cur[r]] : offsets[r + 1];
            /* A waiting rank is on no todo list and waits on one rank: todo never overflows. */
            for (int64_t w = wait_head[r]; w >= 0; w = wait_next[w])
                todo[ntodo++] = w;
            wait_head[r] = -1;
        }
    }
    rc = 1;
    for (int64_t r = 0; r < nranks; r++)
        if (cur[r] != last[r])
            rc = 0;
out:
    free(cur), free(issued), free(wait_head), free(wait_next), free(todo);
    return rc;
}
