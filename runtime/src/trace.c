/* trace.c - COLLSCHED_TRACE, the executor's op-by-op timeline.
 *
 * COLLSCHED_TRACE=PREFIX: every call records when each op was issued and completed and
 * appends it to PREFIX.RANK.csv (call, op, kind, peer, origin, segment, issued, completed;
 * MPI_Wtime seconds), to compare a run with the cost model's timeline op by op.
 * Diagnostic only: completions are observed with MPI_Waitsome, so they are exact under
 * SMPI and late by up to one poll under real MPI.
 *
 * The record belongs to the call (NULL when tracing is off): calls on different
 * communicators in different threads never share one (a shared global record was freed
 * under another thread's feet: heap-use-after-free under MPI_THREAD_MULTIPLE).
 * The files are process-wide (two communicators' ranks may write the same PREFIX.RANK.csv),
 * so their bookkeeping - which path was opened, call numbers - is the one process-wide
 * state here, under one mutex. */
#include "runtime.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef SMPI_HELPERS_H
#include <pthread.h>
#define TRACE_LOCK() pthread_mutex_lock(&trace_mu)
#define TRACE_UNLOCK() pthread_mutex_unlock(&trace_mu)
#else /* SMPI ranks are actors of one thread; nothing in the section yields */
#define TRACE_LOCK() ((void)0)
#define TRACE_UNLOCK() ((void)0)
#endif

struct cs_trace {
    double *issued, *done;
    int *idx;                 /* MPI_Waitsome's output */
};

/* Paths this process has opened: the first open truncates (a re-run overwrites its own
 * trace), later calls append; a refused path is reported once. */
#define TRACE_PATHS 64
static struct { uint64_t hash; int calls, refused; } trace_paths[TRACE_PATHS];
static int trace_npaths;
#ifndef SMPI_HELPERS_H
static pthread_mutex_t trace_mu = PTHREAD_MUTEX_INITIALIZER;
#endif

/* COLLSCHED_TRACE is read once per process: a getenv on every call was about a fifth of a
 * call's bookkeeping (callgrind, P = 2, 1 KiB; docs/benchmarks.md, runtime-overhead). */
static const char *trace_prefix_value;
static void trace_prefix_read(void) { trace_prefix_value = getenv("COLLSCHED_TRACE"); }

static const char *trace_prefix(void)
{
#ifndef SMPI_HELPERS_H
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, trace_prefix_read);
#else /* one thread runs every rank: a flag suffices */
    static int read;
    if (!read) { trace_prefix_read(); read = 1; }
#endif
    return trace_prefix_value;
}

cs_trace *cs_trace_begin(uint32_t nops)
{
    const char *prefix = trace_prefix();
    if (!prefix || !*prefix) return NULL;
    cs_trace *tr = calloc(1, sizeof *tr);
    if (!tr) return NULL;
    tr->issued = calloc(nops + 1u, sizeof(double));
    tr->done = calloc(nops + 1u, sizeof(double));
    tr->idx = malloc((nops + 1u) * sizeof *tr->idx);
    if (tr->issued && tr->done && tr->idx) return tr;
    free(tr->issued); free(tr->done); free(tr->idx); free(tr);
    return NULL; /* no memory: this call is not traced */
}

void cs_trace_issued(cs_trace *tr, uint32_t i)
{
    if (tr) tr->issued[i] = PMPI_Wtime();
}

void cs_trace_done(cs_trace *tr, uint32_t i)
{
    if (tr && tr->done[i] == 0) tr->done[i] = PMPI_Wtime();
}

int cs_trace_complete(cs_trace *tr, MPI_Request *reqs, uint32_t nops)
{
    int n = 0, rc = MPI_SUCCESS;
    for (;;) { /* completions one by one, for their times */
        rc = PMPI_Waitsome((int)nops, reqs, &n, tr->idx, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS || n == MPI_UNDEFINED) break;
        for (int k = 0; k < n; k++) cs_trace_done(tr, (uint32_t)tr->idx[k]);
    }
    return rc;
}

/* Opens PATH for this call's lines, never through a symbolic link and never anything but
 * a regular file (a FIFO is opened non-blocking, so it cannot hang the call, then
 * refused). Returns -1 with why set. */
static int trace_open(const char *path, int first, const char **why)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
    struct stat sb;
    if (fd < 0) { /* a FIFO without a reader fails here (ENXIO): say what the path is */
        int err = errno;
        *why = lstat(path, &sb) == 0 && S_ISLNK(sb.st_mode)   ? "it is a symbolic link"
               : lstat(path, &sb) == 0 && !S_ISREG(sb.st_mode) ? "it is not a regular file"
                                                               : strerror(err);
        return -1;
    }
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        *why = "it is not a regular file";
        return -1;
    }
    if (first && ftruncate(fd, 0) != 0) {
        *why = strerror(errno);
        close(fd);
        return -1;
    }
    return fd;
}

static void trace_write(const cs_trace *tr, const collsched_schedule *s, uint32_t rank)
{
    const char *prefix = trace_prefix();
    char path[4096];
    if (!prefix || !*prefix) return;
    int len = snprintf(path, sizeof path, "%s.%u.csv", prefix, rank);
    if (len < 0 || (size_t)len >= sizeof path) return;
    uint64_t h = cs_hash64(0, path, (size_t)len);
    TRACE_LOCK();
    int k = 0;
    while (k < trace_npaths && trace_paths[k].hash != h) k++;
    if (k == trace_npaths && k < TRACE_PATHS) trace_paths[trace_npaths++].hash = h;
    int first = k < TRACE_PATHS && trace_paths[k].calls == 0 && !trace_paths[k].refused;
    int calls = k < TRACE_PATHS ? trace_paths[k].calls++ : 0;
    const char *why = NULL;
    int fd = k < TRACE_PATHS && trace_paths[k].refused ? -1 : trace_open(path, first, &why);
    FILE *f = fd >= 0 ? fdopen(fd, "a") : NULL;
    if (fd >= 0 && !f) close(fd);
    if (why && k < TRACE_PATHS) trace_paths[k].refused = 1;
    if (why) { /* once per path; the collective itself has completed */
        fprintf(stderr, "collsched: COLLSCHED_TRACE: not writing %s: %s\n", path, why);
        fflush(stderr);
    }
    for (uint32_t i = 0; f && i < s->nops; i++)
        fprintf(f, "%d,%u,%u,%u,%u,%u,%.9f,%.9f\n", calls, i, s->ops[i].kind, s->ops[i].peer,
                s->ops[i].origin, s->ops[i].segment, tr->issued[i], tr->done[i]);
    if (f) fclose(f);
    TRACE_UNLOCK();
}

void cs_trace_end(cs_trace *tr, const collsched_schedule *s, uint32_t rank, int write)
{
    if (!tr) return;
    for (uint32_t i = 1; write && i < s->nops; i++) /* a joined op moves with its message's head */
        if (s->ops[i].join) { tr->issued[i] = tr->issued[i - 1]; tr->done[i] = tr->done[i - 1]; }
    if (write) trace_write(tr, s, rank);
    free(tr->issued); free(tr->done); free(tr->idx); free(tr);
}
