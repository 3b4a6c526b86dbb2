/* pat.c - the PAT API of the BDR paper (Proficz 2021, section 3) and its background engine.
 *
 * The application marks its computation phase (PAT_ProcessingStart, PAT_Edge(percent),
 * PAT_ProcessingEnd). At the edge the engine extrapolates when this rank will call the
 * allgather (linear extrapolation, or an EMA of past durations), sends the estimate to
 * every other rank without waiting for them, and obtains the iteration's schedule: BDR
 * built online for the predicted pattern (bdr.c, identical to the compiler's), once all
 * estimates are in, or at once a compiled schedule the application named for the
 * iteration (PAT_UseSchedule), which needs nobody's estimate: its exchange completes in
 * the background (waiting for it cost a wide-area latency per call: min3 on wan-3x16,
 * 48 ranks, 1 MiB, flat arrivals, under SMPI: 209 ms instead of 164). It then posts the
 * receives of the schedule's background part (the ops marked background, which lead the
 * rank's list): all at once for a dataflow
 * schedule, one at a time for a serial one (Listing 2, lines 47-51; unlike the paper's
 * blocking thread, the receives go on past the rank's first send, which only the call can
 * make, since its data are not ready before). Their data land in a staging buffer, since
 * the user's receive buffer is not known before the call.
 *
 * For a serial schedule it also relays, one at a time, the pieces its background part
 * sends on before the rank arrives. The allgather call (collsched_allgather on the
 * served communicator) takes the engine's requests over where it is - in flight or done -
 * and runs the rest of the schedule with the executor, which copies the staged pieces
 * into the receive buffer. Every rank builds the same schedule
 * from the same estimates, so no rank can disagree; if no schedule can be had (unknown
 * message size or tau, generator refusal, failed whole-schedule check) every rank sees
 * the same reason and the call falls back like any other.
 *
 * One engine, two drivers (docs/pat.md):
 *   thread    a progress thread under MPI_THREAD_MULTIPLE: it waits for the edge, then
 *             polls the engine (MPI_Testall and a short nap, polite on oversubscribed
 *             nodes) until the background receives are complete;
 *   explicit  no threads (SimGrid SMPI, or MPI without THREAD_MULTIPLE): PAT_Progress()
 *             advances the engine, and PAT_Sleep() sleeps in slices that call it while
 *             the engine waits for estimates. Under SMPI posted receives complete in
 *             simulated time without further calls.
 */
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE /* usleep */
#endif
#include "runtime.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef SMPI_HELPERS_H
#define PAT_THREADS 0 /* SMPI ranks are simulated actors: no threads of their own */
#else
#define PAT_THREADS 1
#include <pthread.h>
#endif

#define PAT_TAG_ESTIMATE 3
#define PAT_REASON 240 /* fits cs_pat_job.reason with its prefix */
#define PAT_CHECK_MAX_RANKS 64 /* above this the online schedule is not re-proven per iteration */
#define CS_PAT_TAU_MIN 1e-9    /* tau (s): 1 ns to 1000 s; 0 or less: unknown */
#define CS_PAT_TAU_MAX 1e3
#define PAT_EDGE_MIN 0.01      /* PAT_Edge percent: 0.01 to 100 */
#define PAT_SLEEP_MAX 1e6      /* PAT_Sleep: 0 to 1e6 s */

enum { PAT_PHASE_IDLE, PAT_PHASE_COMPUTING, PAT_PHASE_SENT };

enum pat_state {
    PAT_IDLE,       /* no iteration under way */
    PAT_COMPUTING,  /* after ProcessingStart, estimate not sent yet */
    PAT_EXCHANGING, /* estimate sent, waiting for the others' */
    PAT_BACKGROUND, /* schedule known, background receives being posted */
    PAT_READY,      /* background part done (as far as the engine goes) */
    PAT_FAILED      /* no schedule this iteration: the call falls back (reason) */
};

/* Everything the engine knows, one instance per engine: every function below takes it. */
typedef struct pat_engine {
    int threaded, alg_bdr, alg_cache, check; /* alg_cache: PAT_UseAlg("cache") */
    char alg[32];
    MPI_Comm comm;                 /* dup of MPI_COMM_WORLD: estimates and schedule traffic */
    cs_comm *st;                   /* its collsched state (proofs of compiled schedules) */
    int rank, size;
    double offset;                 /* MPI_Wtime() + offset: rank 0's clock */
    /* what the engine serves: allgathers of `bytes` per rank on `user` */
    MPI_Comm user;
    uint64_t bytes, iter_bytes;    /* iter_bytes: as known when this iteration's estimate left */
    double tau;                    /* s to move one block; <= 0 unknown */
    int learn_tau;                 /* time the first call to learn tau */
    /* predictor */
    double alpha, ema_duration;    /* alpha > 0: EMA of past durations */
    int have_history;
    /* the iteration. `phase` is the application thread's own view (IDLE, COMPUTING or
     * SENT); `state` is the engine's, which the progress thread moves on between the edge
     * and the call: the application thread reads it only after wait_for_thread. */
    int phase;
    int state;
    long iteration;
    double t_start, estimate;
    double mine[3], *theirs;       /* (estimate, tau, time sent) of every rank */
    MPI_Request *xreqs;            /* 2 * size */
    int x_pending;                 /* a compiled schedule went ahead: xreqs still to complete */
    collsched_schedule *sched, *next_file;
    int sched_owned;
    char sched_name[PAT_REASON], next_name[PAT_REASON];
    uint32_t nbg, bg_next;         /* background part ops [0, nbg); the next receive to post */
    int bg_serial;                 /* serial schedule: one background receive at a time */
    int bg_posted_current;         /* serial: receive bg_next is posted */
    uint32_t bs_next;              /* serial: the next background send to issue ... */
    int32_t bs_cur;                /* ... the one in flight (-1: none) ... */
    int bs_stopped;                /* ... and whether the chain reached an own-piece send */
    MPI_Request *reqs;
    uint32_t reqs_cap;
    char *staging;
    uint64_t staging_cap, slot;
    char **held;                   /* per background op: its staging slot while its piece is
                                      only there, else NULL (the executor copies it in place) */
    char reason[PAT_REASON];
    double slice_s;
#if PAT_THREADS
    pthread_t owner;               /* the thread that called PAT_Init: the API's thread */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int work, busy, stop, fg_waiting;
    struct timespec nap;
#endif
} pat_engine;

/* The process's engine. The PAT API has no communicator argument (one engine per process,
 * as in the paper: PAT_Edge, PAT_ProcessingEnd, ... name none), so its entry points find
 * the engine here; nothing below them does. Set by PAT_Init, cleared by PAT_Finalize,
 * neither of which runs while another thread is in a collsched call (docs/pat.md); read
 * atomically, since any thread's allgather asks (cs_pat_claim). NULL: the engine is off.
 * Under SMPI each rank has its own (SMPI privatizes globals per rank). */
static pat_engine *pat_active;

static pat_engine *engine(void) { return __atomic_load_n(&pat_active, __ATOMIC_ACQUIRE); }

static double now(const pat_engine *e) { return PMPI_Wtime() + e->offset; }

static void say(const pat_engine *e, const char *what)
{
    fprintf(stderr, "collsched PAT (rank %d): %s\n", e->rank, what);
}

/* Sleeps `seconds` (0 to PAT_SLEEP_MAX): whole seconds, then the microseconds (usleep
 * takes less than one second; SMPI redirects sleep and usleep to simulated time). */
static void nap_for(double seconds)
{
    unsigned whole = (unsigned)seconds, us = (unsigned)((seconds - whole) * 1e6);
    if (whole) sleep(whole);
    if (us) usleep(us > 999999u ? 999999u : us);
}

/* A number in [lo, hi]: parsed whole (strtod, end pointer, errno), finite, not NaN. */
static int number_in(const char *text, double lo, double hi, double *out)
{
    char *end = NULL;
    errno = 0;
    double x = strtod(text, &end);
    if (end == text || *end || errno == ERANGE || !isfinite(x) || x < lo || x > hi) return 0;
    *out = x;
    return 1;
}

/* The COLLSCHED_PAT_* variables (docs/pat.md). Unset or empty: the default. A value
 * outside its range is an error: PAT_Init returns MPI_ERR_ARG on every rank (and the
 * engine stays off) after the first rank that saw it said which and what is accepted. */
typedef struct pat_env {
    double tau, alpha, slice_us, poll_us;
    int check;                     /* -1: by the number of ranks */
    int driver;                    /* 0 automatic, 1 thread, 2 explicit */
    char bad[300];                 /* the first bad variable, as a message */
} pat_env;

static void env_bad(pat_env *v, const char *name, const char *value, const char *expected)
{
    if (!v->bad[0])
        snprintf(v->bad, sizeof v->bad, "%s=%.40s%s: expected %s; the PAT engine is off", name, value,
                 strlen(value) > 40 ? "..." : "", expected);
}

static void env_number(pat_env *v, const char *name, double lo, double hi, int zero_ok,
                       const char *expected, double *out)
{
    const char *text = getenv(name);
    double x = 0;
    if (!text || !*text) return; /* *out keeps its default */
    if (number_in(text, zero_ok ? 0.0 : lo, hi, &x) && (x >= lo || (zero_ok && x == 0))) *out = x;
    else env_bad(v, name, text, expected);
}

static void read_env(pat_env *v)
{
    memset(v, 0, sizeof *v);
    v->slice_us = 200.0;
    v->poll_us = 50.0;
    v->check = -1;
    env_number(v, "COLLSCHED_PAT_TAU", CS_PAT_TAU_MIN, CS_PAT_TAU_MAX, 1,
               "0 (unknown) or seconds from 1e-09 to 1000", &v->tau);
    env_number(v, "COLLSCHED_PAT_EMA", 0.0, 1.0, 1, "a weight from 0 (off) to 1", &v->alpha);
    env_number(v, "COLLSCHED_PAT_SLICE_US", 1.0, 1e6, 0, "microseconds from 1 to 1000000", &v->slice_us);
    env_number(v, "COLLSCHED_PAT_POLL_US", 1.0, 1e6, 0, "microseconds from 1 to 1000000", &v->poll_us);
    const char *chk = getenv("COLLSCHED_PAT_CHECK");
    if (chk && *chk) {
        if (!strcmp(chk, "0") || !strcmp(chk, "1")) v->check = chk[0] == '1';
        else env_bad(v, "COLLSCHED_PAT_CHECK", chk, "0 or 1");
    }
    const char *drv = getenv("COLLSCHED_PAT_DRIVER");
    if (drv && *drv) {
        if (!strcmp(drv, "thread")) v->driver = 1;
        else if (!strcmp(drv, "explicit")) v->driver = 2;
        else env_bad(v, "COLLSCHED_PAT_DRIVER", drv, "thread or explicit");
    }
}

/* A bad API argument: MPI_ERR_ARG (or the code given), with one line from rank 0 of
 * MPI_COMM_WORLD (also when the engine is off: PAT_Sleep works without it). */
static int bad_arg(const pat_engine *e, int code, const char *what)
{
    int rank = e ? e->rank : 0, initialized = 0, finalized = 1;
    if (!e) {
        PMPI_Initialized(&initialized);
        if (initialized) PMPI_Finalized(&finalized);
        if (initialized && !finalized) PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    }
    if (rank == 0) fprintf(stderr, "collsched PAT (rank 0): %s\n", what);
    return code;
}

/* The PAT API belongs to the thread that called PAT_Init (docs/pat.md): allgathers from
 * other threads, on other communicators, are never the engine's and must not touch it. */
static int api_thread(const pat_engine *e)
{
#if PAT_THREADS
    return pthread_equal(pthread_self(), e->owner);
#else
    (void)e;
    return 1;
#endif
}

/* ---- the engine: one step at a time, from either driver ---- */

static void fail_iteration(pat_engine *e, const char *fmt, const char *arg)
{
    snprintf(e->reason, sizeof e->reason, fmt, arg);
    e->state = PAT_FAILED;
}

/* Whether this iteration's estimate exchange is complete; `blocking` waits for it. */
static int exchange_complete(pat_engine *e, int blocking)
{
    int done = 1, n = 2 * (e->size - 1);
    if (blocking) PMPI_Waitall(n, e->xreqs, MPI_STATUSES_IGNORE);
    else PMPI_Testall(n, e->xreqs, &done, MPI_STATUSES_IGNORE);
    return done;
}

/* Completes the estimate exchange a compiled schedule went ahead of (x_pending). */
static void finish_exchange(pat_engine *e, int blocking)
{
    if (e->x_pending && exchange_complete(e, blocking)) e->x_pending = 0;
}

static void send_estimate(pat_engine *e, double estimate)
{
    finish_exchange(e, 1); /* the previous iteration's: every rank sent it before its call */
    /* What the iteration serves is fixed here, in program order before its call on every
     * rank, so that all ranks decide alike whatever the threads' timing. */
    e->iter_bytes = e->bytes;
    e->estimate = estimate;
    e->mine[0] = estimate;
    e->mine[1] = e->tau;
    e->mine[2] = now(e);
    for (int k = 0; k < 3; k++) e->theirs[3 * e->rank + k] = e->mine[k];
    int n = 0;
    for (int r = 0; r < e->size; r++) {
        if (r == e->rank) continue;
        PMPI_Irecv(&e->theirs[3 * r], 3, MPI_DOUBLE, r, PAT_TAG_ESTIMATE, e->comm, &e->xreqs[n++]);
        PMPI_Isend(e->mine, 3, MPI_DOUBLE, r, PAT_TAG_ESTIMATE, e->comm, &e->xreqs[n++]);
    }
    e->state = PAT_EXCHANGING;
    e->phase = PAT_PHASE_SENT;
}

/* Proves the online schedule once more on every rank (each builds every rank's list: the
 * same verdict everywhere, no messages). */
static int prove_online(pat_engine *e, const double *arrivals, double tau, char *why, size_t len)
{
    uint32_t P = (uint32_t)e->size;
    int *counts = calloc(P, sizeof *counts);
    cs_wire_op *all = NULL;
    size_t n = 0, cap = 0;
    int verdict = CS_WHOLE_NOMEM;
    for (uint32_t r = 0; counts && r < P; r++) {
        collsched_op *ops = NULL;
        uint32_t k = 0;
        if (cs_bdr_build(P, arrivals, tau, r, &ops, &k) != COLLSCHED_OK) { free(ops); goto out; }
        if (n + k > cap) {
            cap = 2 * (n + k) + 64;
            cs_wire_op *grown = realloc(all, cap * sizeof *all);
            if (!grown) { free(ops); goto out; }
            all = grown;
        }
        for (uint32_t i = 0; i < k; i++) all[n + i] = cs_wire_pack(&ops[i]);
        counts[r] = (int)k;
        n += k;
        free(ops);
    }
    if (counts) verdict = cs_whole_check_mode(P, 1, counts, all, 1, why, len);
out:
    if (verdict == CS_WHOLE_NOMEM) snprintf(why, len, "no memory for the whole-schedule check");
    free(counts);
    free(all);
    return verdict == CS_WHOLE_OK;
}

/* The predicted pattern from every rank's estimate (the same on every rank), the earliest
 * at 0, and the largest tau. Nobody can start before the pattern is known, i.e. before
 * the last prediction was sent: a rank predicted to arrive earlier counts as arriving
 * then (with a long computation and a late last edge, BDR planned for the raw
 * predictions sends in pre-steps that cannot happen and comes out slower than the ring). */
static void predicted_pattern(const pat_engine *e, double *arrivals, double *tau)
{
    uint32_t P = (uint32_t)e->size;
    double first = INFINITY, known = -INFINITY;
    *tau = 0;
    for (uint32_t r = 0; r < P; r++) {
        if (e->theirs[3 * r + 1] > *tau) *tau = e->theirs[3 * r + 1];
        if (e->theirs[3 * r + 2] > known) known = e->theirs[3 * r + 2];
    }
    for (uint32_t r = 0; r < P; r++) {
        arrivals[r] = e->theirs[3 * r] > known ? e->theirs[3 * r] : known;
        if (arrivals[r] < first) first = arrivals[r];
    }
    for (uint32_t r = 0; r < P; r++) arrivals[r] -= first;
}

/* PAT_UseAlg("cache"): the schedule cache's entry for the predicted pattern (cache.c:
 * the nearest class of the '*' group within its radius, else its regular entry; entries
 * proven at the set-up only, so no collective here). 0: none, build BDR online. */
static int pick_cached(pat_engine *e)
{
    cs_cache *c = cs_comm_cache(e->st);
    double *arrivals = c ? malloc((size_t)e->size * sizeof *arrivals) : NULL, tau;
    const char *path = NULL;
    if (!arrivals) return 0;
    predicted_pattern(e, arrivals, &tau);
    const collsched_schedule *s = cs_cache_pick(c, e->st, arrivals, e->iter_bytes, &path);
    free(arrivals);
    if (!s) return 0;
    e->sched = (collsched_schedule *)s; /* the communicator state's: never changed, never freed here */
    e->sched_owned = 0;
    snprintf(e->sched_name, sizeof e->sched_name, "%s", path);
    return 1;
}

static int build_online(pat_engine *e)
{
    uint32_t P = (uint32_t)e->size;
    double *arrivals = malloc(P * sizeof *arrivals), tau = 0;
    char err[PAT_REASON] = "";
    if (!arrivals) { fail_iteration(e, "%s", "no memory for the arrival pattern"); return 0; }
    predicted_pattern(e, arrivals, &tau);
    if (!(tau > 0)) {
        free(arrivals);
        fail_iteration(e, "%s", "tau unknown (PAT_Declare, COLLSCHED_PAT_TAU, or a first call to learn it)");
        return 0;
    }
    collsched_op *ops = NULL;
    uint32_t n = 0;
    int rc = cs_bdr_build(P, arrivals, tau, (uint32_t)e->rank, &ops, &n);
    if (rc == COLLSCHED_OK)
        rc = cs_schedule_adopt(P, 1, (uint32_t)e->rank, ops, n, "online BDR", &e->sched, err, sizeof err);
    else
        free(ops);
    if (rc == COLLSCHED_OK && e->check && !prove_online(e, arrivals, tau, err, sizeof err)) {
        collsched_schedule_free(e->sched);
        e->sched = NULL;
        rc = COLLSCHED_EFORMAT;
    }
    free(arrivals);
    if (rc != COLLSCHED_OK) {
        fail_iteration(e, "online BDR refused: %s", err[0] ? err : "pre-steps beyond the limit");
        return 0;
    }
    e->sched->hdr.flags = COLLSCHED_FLAG_FULL_DUPLEX | COLLSCHED_FLAG_SERIAL; /* as the compiler's bdr */
    e->sched_owned = 1;
    snprintf(e->sched_name, sizeof e->sched_name, "PAT bdr (online, tau %.3g s)", tau);
    return 1;
}

/* Bytes of the piece op i moves (its segment of a block). */
static uint64_t piece_len(const pat_engine *e, uint32_t i)
{
    uint64_t nseg = e->sched->hdr.nseg;
    uint32_t g = e->sched->ops[i].segment;
    return cs_seg_lo(g + 1u, e->iter_bytes, nseg) - cs_seg_lo(g, e->iter_bytes, nseg);
}

/* Multi-piece messages (docs/semantics.md): the message op i heads ends before this op
 * (its joined ops follow it; never past the background part, which holds whole messages). */
static uint32_t msg_end(const pat_engine *e, uint32_t i)
{
    for (i++; i < e->nbg && e->sched->ops[i].join; i++) {}
    return i;
}

/* Bytes of the message headed by op h: its pieces' sum. */
static uint64_t msg_bytes(const pat_engine *e, uint32_t h)
{
    uint64_t n = 0;
    for (uint32_t i = h, end = msg_end(e, h); i < end; i++) n += piece_len(e, i);
    return n;
}

/* The background part: the leading ops marked background (whole messages). A receive
 * message lands in the staging slots of its ops, contiguously from its head's slot
 * (slot = the largest piece, so piece k sits at head slot + the bytes of the pieces
 * before it, within the message's own slots); held[] says where each piece is. */
static int post_background(pat_engine *e)
{
    const collsched_schedule *s = e->sched;
    uint32_t nbg = 0;
    while (nbg < s->nops && s->ops[nbg].phase == 1) nbg++; /* sends among them: the call's */
    if (s->nops > e->reqs_cap) {
        MPI_Request *grown = realloc(e->reqs, s->nops * sizeof *grown);
        if (!grown) { fail_iteration(e, "%s", "no memory for requests"); return 0; }
        e->reqs = grown;
        e->reqs_cap = s->nops;
    }
    uint64_t nseg = s->hdr.nseg, slot = (e->iter_bytes + nseg - 1) / nseg;
    if ((uint64_t)nbg * slot > e->staging_cap) {
        char *grown = realloc(e->staging, (size_t)((uint64_t)nbg * slot));
        if (!grown) { fail_iteration(e, "%s", "no memory for the background staging buffer"); return 0; }
        e->staging = grown;
        e->staging_cap = (uint64_t)nbg * slot;
    }
    char **held = realloc(e->held, (nbg ? nbg : 1) * sizeof *held);
    if (!held) { fail_iteration(e, "%s", "no memory for the background staging slots"); return 0; }
    e->held = held;
    e->nbg = nbg;
    for (uint32_t h = 0; h < nbg; h = msg_end(e, h)) {
        char *at = e->staging + (uint64_t)h * slot;
        for (uint32_t i = h, end = msg_end(e, h); i < end; at += piece_len(e, i), i++)
            e->held[i] = s->ops[i].kind == COLLSCHED_RECV ? at : NULL;
        if (msg_bytes(e, h) > INT_MAX) { /* one MPI call moves it, counted in an int */
            e->nbg = 0;
            fail_iteration(e, "%s", "a background message exceeds INT_MAX bytes");
            return 0;
        }
    }
    e->slot = slot;
    e->bg_next = 0;
    e->bg_posted_current = 0;
    e->bs_next = 0;
    e->bs_cur = -1;
    e->bs_stopped = 0;
    e->bg_serial = (s->hdr.flags & COLLSCHED_FLAG_SERIAL) != 0;
    for (uint32_t i = 0; i < nbg; i++) e->reqs[i] = MPI_REQUEST_NULL;
    e->state = PAT_BACKGROUND;
    return 1;
}

/* Posts the background receive message headed by op h into its staging slots; its
 * request sits at h (its joined ops' stay MPI_REQUEST_NULL). */
static void post_bg(pat_engine *e, uint32_t h)
{
    PMPI_Irecv(e->held[h], (int)msg_bytes(e, h), MPI_BYTE, (int)e->sched->ops[h].peer, CS_TAG, e->comm,
               &e->reqs[h]);
}

/* Relays the background send message [h, end) from the staging slots its pieces were
 * received in (synchronous, as serial execution has it): one contiguous run as bytes,
 * else a derived datatype over the pieces' places (cs_pieces_type, at MPI_BOTTOM).
 * 0: it could not be issued (no memory): the call will send it. */
static int relay(pat_engine *e, uint32_t h, uint32_t end)
{
    const collsched_op *ops = e->sched->ops;
    int n = (int)(end - h), rc = MPI_ERR_NO_MEM, contiguous = 1;
    char **addr = malloc((size_t)n * sizeof *addr);
    int *len = malloc((size_t)n * sizeof *len);
    uint64_t total = 0;
    for (int k = 0; addr && len && k < n; k++) {
        addr[k] = e->held[ops[h + (uint32_t)k].dep];
        len[k] = (int)piece_len(e, h + (uint32_t)k);
        if (k && addr[k] != addr[k - 1] + len[k - 1]) contiguous = 0;
        total += (uint64_t)len[k];
    }
    if (addr && len && total <= INT_MAX) {
        if (contiguous) {
            rc = PMPI_Issend(addr[0], (int)total, MPI_BYTE, (int)ops[h].peer, CS_TAG, e->comm, &e->reqs[h]);
        } else {
            MPI_Datatype t;
            rc = cs_pieces_type((const char *const *)addr, len, n, &t);
            if (rc == MPI_SUCCESS) {
                rc = PMPI_Issend(MPI_BOTTOM, 1, t, (int)ops[h].peer, CS_TAG, e->comm, &e->reqs[h]);
                PMPI_Type_free(&t); /* the send keeps what it needs */
            }
        }
    }
    free(addr);
    free(len);
    return rc == MPI_SUCCESS;
}

/* Whether the send message [h, end) relays only pieces received in the background:
 * none is the rank's own (*own), and all have arrived (receives complete in list order,
 * message by message: those before bg_next have). */
static int relay_ready(const pat_engine *e, uint32_t h, uint32_t end, int *own)
{
    const collsched_op *ops = e->sched->ops;
    int ready = 1;
    *own = 0;
    for (uint32_t i = h; i < end; i++) {
        if (ops[i].dep < 0 || ops[i].origin == (uint32_t)e->rank) { *own = 1; return 0; }
        if ((uint32_t)ops[i].dep >= e->bg_next) ready = 0;
    }
    return ready;
}

/* Serial schedules: two chains, as the executor runs them (run_serial), message by
 * message. The receive messages of the background part one at a time, in list order
 * (Listing 2, lines 47-51). Its send messages - pieces received in the background,
 * relayed while the rank still computes (semantics rule 4; arrival-aware min3 plans them)
 * - one at a time, synchronous, each once all its pieces are in. The send chain stops at
 * a message carrying the rank's own piece: its data are the call's. The call takes both
 * chains over where they are. Returns 1 while either chain has work. */
static int serial_step(pat_engine *e)
{
    const collsched_op *ops = e->sched->ops;
    for (int moved = 1; moved;) {
        moved = 0;
        while (e->bg_next < e->nbg && (ops[e->bg_next].kind != COLLSCHED_RECV || ops[e->bg_next].join))
            e->bg_next++;
        if (e->bg_next < e->nbg) {
            if (!e->bg_posted_current) { post_bg(e, e->bg_next); e->bg_posted_current = 1; }
            int done = 0;
            PMPI_Test(&e->reqs[e->bg_next], &done, MPI_STATUS_IGNORE);
            if (done) { e->bg_next = msg_end(e, e->bg_next); e->bg_posted_current = 0; moved = 1; }
        }
        if (e->bs_cur >= 0) {
            int done = 0;
            PMPI_Test(&e->reqs[e->bs_cur], &done, MPI_STATUS_IGNORE);
            if (done) { e->bs_cur = -1; moved = 1; }
        }
        while (e->bs_next < e->nbg && (ops[e->bs_next].kind != COLLSCHED_SEND || ops[e->bs_next].join))
            e->bs_next++;
        if (e->bs_cur < 0 && !e->bs_stopped && e->bs_next < e->nbg) {
            uint32_t end = msg_end(e, e->bs_next);
            int own = 0;
            if (relay_ready(e, e->bs_next, end, &own)) {
                if (relay(e, e->bs_next, end)) {
                    e->bs_cur = (int32_t)e->bs_next;
                    e->bs_next = end;
                    moved = 1;
                } else {
                    e->bs_stopped = 1; /* the call sends it */
                }
            } else if (own) {
                e->bs_stopped = 1;
            }
        }
    }
    if (e->bg_next >= e->nbg && e->bs_cur < 0 && (e->bs_stopped || e->bs_next >= e->nbg)) e->state = PAT_READY;
    return e->state == PAT_BACKGROUND;
}

/* One step; `blocking` waits instead of testing. Returns 1 while background work is
 * pending (EXCHANGING or BACKGROUND). `posted_will_do`: the call is here to take over -
 * stop once a dataflow schedule's background receives are all posted, and at once for a
 * serial one (its receive in flight, if any, becomes the executor's). Called with the
 * engine locked out from the other driver (busy flag). */
static int advance(pat_engine *e, int blocking, int posted_will_do)
{
    finish_exchange(e, 0);
    if (e->state == PAT_EXCHANGING) {
        if (e->alg_bdr || e->alg_cache) { /* the schedule depends on everybody's estimate */
            if (!exchange_complete(e, blocking)) return 1;
        } else {
            e->x_pending = 1; /* a compiled schedule goes ahead; finish_exchange completes it */
        }
        if (!e->iter_bytes) {
            fail_iteration(e, "%s", "message size unknown: PAT_Declare, or a first call teaches it");
            return 0;
        }
        if (e->alg_cache && pick_cached(e)) {
            /* the cache's entry; else online BDR as for "bdr" */
        } else if (e->alg_bdr || e->alg_cache) {
            if (!build_online(e)) return 0;
        } else if (e->next_file) {
            e->sched = e->next_file;
            e->next_file = NULL;
            e->sched_owned = 1;
            snprintf(e->sched_name, sizeof e->sched_name, "%s", e->next_name);
        } else {
            fail_iteration(e, "%s", "no schedule named for this iteration (PAT_UseSchedule)");
            return 0;
        }
        if (!post_background(e)) return 0;
    }
    /* Serial schedules: one background receive at a time, in list order (Listing 2, lines
     * 47-51: blocking receives), as the foreground and the cost model have it: several at
     * once would share the rank's link and slow every sender's synchronous send. */
    if (e->state == PAT_BACKGROUND && !e->bg_serial) { /* dataflow: all at once */
        /* Posted once, tracked by bg_next (a partial Testall may already have set some
         * requests to MPI_REQUEST_NULL under some MPIs: never repost by looking at them). */
        if (e->bg_next == 0)
            for (e->bg_next = 1; e->bg_next <= e->nbg; e->bg_next++)
                if (e->sched->ops[e->bg_next - 1].kind == COLLSCHED_RECV && !e->sched->ops[e->bg_next - 1].join)
                    post_bg(e, e->bg_next - 1); /* receive messages at once, each at its head */
        if (posted_will_do) return 0;
        int done = 1;
        if (blocking) PMPI_Waitall((int)e->nbg, e->reqs, MPI_STATUSES_IGNORE);
        else if (e->nbg) PMPI_Testall((int)e->nbg, e->reqs, &done, MPI_STATUSES_IGNORE);
        if (!done) return 1;
        e->bg_next = e->nbg;
        e->state = PAT_READY;
        return 0;
    }
    if (e->state == PAT_BACKGROUND) { /* serial */
        if (posted_will_do) return 0;
        return serial_step(e);
    }
    return 0;
}

#if PAT_THREADS
static void *driver(void *engine_)
{
    pat_engine *e = engine_;
    struct timespec nap = e->nap;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        while (!e->work && !e->stop) pthread_cond_wait(&e->cv, &e->mu);
        if (e->stop) break;
        e->work = 0;
        pthread_mutex_unlock(&e->mu);
        /* Until the work is done, or - for a dataflow schedule whose receives are all
         * posted - the call has come to take the requests over. */
        while (advance(e, 0, 0) && !(__atomic_load_n(&e->fg_waiting, __ATOMIC_ACQUIRE) &&
                                  e->state == PAT_BACKGROUND && (e->bg_serial || e->bg_next)))
            nanosleep(&nap, NULL);
        pthread_mutex_lock(&e->mu);
        e->busy = 0;
        pthread_cond_broadcast(&e->cv);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}
#endif

static void wait_for_thread(pat_engine *e)
{
#if !PAT_THREADS
    (void)e;
#else
    if (e->threaded) {
        pthread_mutex_lock(&e->mu);
        __atomic_store_n(&e->fg_waiting, 1, __ATOMIC_RELEASE);
        while (e->busy) pthread_cond_wait(&e->cv, &e->mu);
        __atomic_store_n(&e->fg_waiting, 0, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&e->mu);
    }
#endif
}

/* A setting changes between the edge and the call: the progress thread may be reading
 * it, so it stops first (the call takes over from where it is, as usual). */
static void quiesce(pat_engine *e)
{
    if (e->phase == PAT_PHASE_SENT) wait_for_thread(e);
}

/* An iteration that no allgather consumed: finish the exchange (every rank sent its
 * estimate) and withdraw the background receives (no peer runs the schedule). */
static void abandon_iteration(pat_engine *e)
{
    wait_for_thread(e);
    if (e->phase == PAT_PHASE_COMPUTING) send_estimate(e, now(e));
    finish_exchange(e, 1);
    if (e->state == PAT_EXCHANGING) {
        exchange_complete(e, 1);
        e->state = PAT_FAILED;
    }
    if (e->state == PAT_BACKGROUND || e->state == PAT_READY) {
        for (uint32_t i = 0; i < e->nbg; i++) {
            if (e->reqs[i] == MPI_REQUEST_NULL) continue; /* unposted, or complete */
            PMPI_Cancel(&e->reqs[i]);
            if (e->sched->ops[i].kind == COLLSCHED_RECV) {
                PMPI_Wait(&e->reqs[i], MPI_STATUS_IGNORE);
            } else { /* a relayed send whose peer gave up too may never match: let it go */
                int done = 0;
                PMPI_Test(&e->reqs[i], &done, MPI_STATUS_IGNORE);
                if (!done) PMPI_Request_free(&e->reqs[i]);
            }
        }
        e->state = PAT_FAILED;
    }
}

/* The foreground takes the iteration over: waits for the thread, then finishes the
 * exchange and the posting of a dataflow schedule's receives; the executor takes the
 * requests over (a serial schedule's chain from the receive in flight on). */
static void take_over(pat_engine *e)
{
    wait_for_thread(e);
    while (advance(e, 1, 1)) {}
}

static void end_iteration(pat_engine *e)
{
    if (e->sched_owned && e->sched) collsched_schedule_free(e->sched);
    e->sched = NULL;
    e->sched_owned = 0;
    e->nbg = 0;
    e->state = PAT_IDLE;
    e->phase = PAT_PHASE_IDLE;
    e->reason[0] = 0;
}

/* An engine that is off: its memory and its communicator (with its collsched state). */
static void engine_free(pat_engine *e)
{
    if (e->next_file) collsched_schedule_free(e->next_file);
    free(e->theirs);
    free(e->xreqs);
    free(e->reqs);
    free(e->staging);
    free(e->held);
    if (e->comm != MPI_COMM_NULL) PMPI_Comm_free(&e->comm);
    free(e);
}

/* The explicit driver's step (PAT_Progress, PAT_Sleep). */
static void progress(pat_engine *e)
{
    if (e->threaded) return;
    if (e->state == PAT_EXCHANGING || e->state == PAT_BACKGROUND) advance(e, 0, 0);
}

/* ---- the API: each entry point finds the process's engine ---- */

int PAT_Init(void)
{
    if (engine()) return MPI_SUCCESS;
    int initialized = 0, finalized = 0, provided = MPI_THREAD_SINGLE;
    PMPI_Initialized(&initialized);
    if (initialized) PMPI_Finalized(&finalized);
    if (!initialized || finalized) {
        fprintf(stderr, "collsched PAT: PAT_Init %s MPI_Init\n", finalized ? "after MPI_Finalize" : "before");
        return MPI_ERR_OTHER;
    }
    pat_env env;
    read_env(&env);
    pat_engine *e = calloc(1, sizeof *e);
    if (!e) return MPI_ERR_NO_MEM;
    e->comm = e->user = MPI_COMM_NULL;
    int rc = PMPI_Comm_dup(MPI_COMM_WORLD, &e->comm);
    if (rc != MPI_SUCCESS) { free(e); return rc; }
    PMPI_Comm_rank(e->comm, &e->rank);
    PMPI_Comm_size(e->comm, &e->size);
    /* A bad variable on any rank turns the engine off on all (they must agree); the
     * lowest such rank says why. */
    int first_bad = env.bad[0] ? e->rank : e->size;
    rc = PMPI_Allreduce(MPI_IN_PLACE, &first_bad, 1, MPI_INT, MPI_MIN, e->comm);
    if (rc != MPI_SUCCESS || first_bad < e->size) {
        if (first_bad == e->rank) say(e, env.bad);
        engine_free(e);
        return rc != MPI_SUCCESS ? rc : MPI_ERR_ARG;
    }
    e->theirs = calloc(3 * (size_t)e->size, sizeof *e->theirs);
    e->xreqs = malloc(2 * (size_t)e->size * sizeof *e->xreqs);
    if (!e->theirs || !e->xreqs) { engine_free(e); return MPI_ERR_NO_MEM; }
    for (int i = 0; i < 2 * e->size; i++) e->xreqs[i] = MPI_REQUEST_NULL;
    /* One clock for the estimates: rank 0's, offset taken right after a barrier (ranks
     * leave it within a latency). Skipped where MPI says the clock is global. */
    int *global = NULL, flag = 0;
    PMPI_Comm_get_attr(MPI_COMM_WORLD, MPI_WTIME_IS_GLOBAL, &global, &flag);
    double t0 = 0, mine = 0;
    PMPI_Barrier(e->comm);
    mine = PMPI_Wtime();
    t0 = mine;
    PMPI_Bcast(&t0, 1, MPI_DOUBLE, 0, e->comm);
    e->offset = flag && global && *global ? 0.0 : t0 - mine;
    rc = cs_comm_state(e->comm, &e->st);
    if (rc != MPI_SUCCESS) { engine_free(e); return rc; }
    e->tau = env.tau;
    e->alpha = env.alpha;
    e->slice_s = env.slice_us * 1e-6;
    e->check = env.check >= 0 ? env.check : e->size <= PAT_CHECK_MAX_RANKS;
    e->user = MPI_COMM_NULL;
    e->bytes = 0;
    e->state = PAT_IDLE;
    e->phase = PAT_PHASE_IDLE;
    PMPI_Query_thread(&provided);
    e->threaded = PAT_THREADS && provided == MPI_THREAD_MULTIPLE && env.driver != 2;
#if PAT_THREADS
    e->owner = pthread_self();
    if (e->threaded) {
        double poll_s = env.poll_us * 1e-6;
        e->nap.tv_sec = (time_t)poll_s;
        e->nap.tv_nsec = (long)((poll_s - floor(poll_s)) * 1e9);
        pthread_mutex_init(&e->mu, NULL);
        pthread_cond_init(&e->cv, NULL);
        e->work = e->busy = e->stop = 0;
        if (pthread_create(&e->thread, NULL, driver, e) != 0) e->threaded = 0;
    }
#endif
    if (env.driver == 1 && !e->threaded) {
        say(e, "COLLSCHED_PAT_DRIVER=thread needs MPI_THREAD_MULTIPLE (and real MPI); using explicit progress");
    }
    __atomic_store_n(&pat_active, e, __ATOMIC_RELEASE);
    return MPI_SUCCESS;
}

int PAT_UseAlg(const char *algorithm)
{
    pat_engine *e = engine();
    if (!e) return MPI_ERR_OTHER;
    if (!algorithm || !*algorithm || strlen(algorithm) >= sizeof e->alg)
        return bad_arg(e, MPI_ERR_ARG, "PAT_UseAlg: expected an algorithm name of 1 to 31 characters");
    quiesce(e);
    snprintf(e->alg, sizeof e->alg, "%s", algorithm);
    e->alg_bdr = !strcmp(algorithm, "bdr");
    e->alg_cache = !strcmp(algorithm, "cache");
    return MPI_SUCCESS;
}

int PAT_Declare(MPI_Comm comm, int bytes_per_rank, double tau_s)
{
    pat_engine *e = engine();
    if (!e) return MPI_ERR_OTHER;
    int inter = 0;
    if (comm == MPI_COMM_NULL || PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || inter)
        return bad_arg(e, MPI_ERR_COMM, "PAT_Declare: expected an intracommunicator with the ranks of "
                                     "MPI_COMM_WORLD, got MPI_COMM_NULL or an intercommunicator");
    if (bytes_per_rank < 0)
        return bad_arg(e, MPI_ERR_ARG, "PAT_Declare: bytes per rank must be 0 (unknown) or more");
    if (isnan(tau_s) || isinf(tau_s) || (tau_s > 0 && (tau_s < CS_PAT_TAU_MIN || tau_s > CS_PAT_TAU_MAX)))
        return bad_arg(e, MPI_ERR_ARG, "PAT_Declare: tau must be <= 0 (unknown) or seconds from 1e-09 to 1000");
    int same = MPI_UNEQUAL;
    PMPI_Comm_compare(comm, MPI_COMM_WORLD, &same);
    if (same != MPI_IDENT && same != MPI_CONGRUENT) {
        say(e, "PAT_Declare: the communicator must hold the ranks of MPI_COMM_WORLD in the same order");
        return MPI_ERR_COMM;
    }
    /* The served communicator's collsched state (a private duplicate, the ranks' agreement
     * on the schedule source) is set up now, collectively like every PAT call: inside the
     * first served call it would hold every rank until the last arrived. */
    cs_comm *st = NULL;
    int rc = cs_comm_state(comm, &st);
    if (rc != MPI_SUCCESS) return rc;
    quiesce(e);
    e->user = comm;
    e->bytes = (uint64_t)bytes_per_rank;
    if (tau_s > 0) e->tau = tau_s;
    if (!(e->tau > 0)) e->learn_tau = 1; /* from the first call, which runs without PAT */
    return MPI_SUCCESS;
}

int PAT_UseSchedule(const char *path)
{
    pat_engine *e = engine();
    if (!e) return MPI_ERR_OTHER;
    quiesce(e);
    if (e->next_file) { collsched_schedule_free(e->next_file); e->next_file = NULL; }
    if (!path) return MPI_SUCCESS;
    char why[PAT_REASON] = "";
    int rc = cs_load_proven(e->st, path, &e->next_file, why, sizeof why);
    if (rc != MPI_SUCCESS) return rc;
    if (!e->next_file) { /* the loader said why, once, on the rank that found it */
        return cs_strict() ? MPI_ERR_OTHER : MPI_SUCCESS;
    }
    if (e->bytes && (e->bytes < e->next_file->hdr.bytes_min || e->bytes > e->next_file->hdr.bytes_max)) {
        if (e->rank == 0) say(e, "PAT_UseSchedule: the file does not serve the declared bytes per rank");
        collsched_schedule_free(e->next_file);
        e->next_file = NULL;
        return cs_strict() ? MPI_ERR_OTHER : MPI_SUCCESS;
    }
    snprintf(e->next_name, sizeof e->next_name, "%s", path);
    return MPI_SUCCESS;
}

int PAT_ProcessingStart(void)
{
    pat_engine *e = engine();
    if (!e) return MPI_ERR_OTHER;
    if (e->phase != PAT_PHASE_IDLE) { abandon_iteration(e); end_iteration(e); }
    e->iteration++;
    e->t_start = now(e);
    e->state = PAT_COMPUTING;
    e->phase = PAT_PHASE_COMPUTING;
    return MPI_SUCCESS;
}

int PAT_Edge(double percent)
{
    pat_engine *e = engine();
    if (!e) return MPI_ERR_OTHER;
    /* Below 0.01% the extrapolation (x 100 / percent) is no prediction any more. */
    if (!(percent >= PAT_EDGE_MIN && percent <= 100))
        return bad_arg(e, MPI_ERR_ARG, "PAT_Edge: expected a percentage from 0.01 to 100");
    if (e->phase != PAT_PHASE_COMPUTING) return MPI_SUCCESS;
    double t = now(e), duration = (t - e->t_start) * 100.0 / percent;
    if (e->alpha > 0 && e->have_history) duration = e->ema_duration; /* the option: past durations */
    send_estimate(e, e->t_start + duration);
#if PAT_THREADS
    if (e->threaded) {
        pthread_mutex_lock(&e->mu);
        e->work = e->busy = 1;
        pthread_cond_signal(&e->cv);
        pthread_mutex_unlock(&e->mu);
        return MPI_SUCCESS;
    }
#endif
    advance(e, 0, 0);
    return MPI_SUCCESS;
}

int PAT_ProcessingEnd(void)
{
    pat_engine *e = engine();
    if (!e) return MPI_ERR_OTHER;
    double t = now(e), duration = t - e->t_start;
    if (e->alpha > 0) {
        e->ema_duration = e->have_history ? e->alpha * duration + (1 - e->alpha) * e->ema_duration : duration;
        e->have_history = 1;
    }
    if (e->phase == PAT_PHASE_COMPUTING) send_estimate(e, t); /* no edge: the arrival itself */
    return MPI_SUCCESS;
}

int PAT_Progress(void)
{
    pat_engine *e = engine();
    if (e) progress(e);
    return MPI_SUCCESS;
}

int PAT_Sleep(double seconds)
{
    pat_engine *e = engine();
    if (!(seconds >= 0 && seconds <= PAT_SLEEP_MAX)) /* NaN too: it never ended */
        return bad_arg(e, MPI_ERR_ARG, "PAT_Sleep: expected seconds from 0 to 1e6");
    double end = PMPI_Wtime() + seconds;
    int explicit = e && !e->threaded; /* the progress thread owns e->state */
    for (;;) {
        double left = end - PMPI_Wtime();
        if (left <= 0) return MPI_SUCCESS;
        /* Slices only while the engine has background work (estimates, receives, relays). */
        int pending = explicit && (e->state == PAT_EXCHANGING || e->state == PAT_BACKGROUND);
        /* Background receives and relays go one at a time: a slice well below tau keeps
         * the next one from waiting long for its turn (tau/8 cost arrival-aware min3, whose
         * relays chain from rank to rank, 4-9% against the cost model at 11-20 KB blocks;
         * tau/32 costs 0.4-1.6%). */
        double slice = !pending ? left
                       : e->state == PAT_BACKGROUND && e->tau > 0 && e->tau / 32 < e->slice_s ? e->tau / 32
                       : e->slice_s; /* no engine, or no work: one nap to the end */
        double nap = pending && left > slice ? slice : left;
        nap_for(nap);
        if (pending) progress(e);
        if (!pending) return MPI_SUCCESS;
    }
}

int PAT_Finalize(void)
{
    pat_engine *e = engine();
    if (!e) return MPI_SUCCESS;
    if (e->phase != PAT_PHASE_IDLE) { abandon_iteration(e); end_iteration(e); }
    finish_exchange(e, 1);
#if PAT_THREADS
    if (e->threaded) {
        pthread_mutex_lock(&e->mu);
        e->stop = 1;
        pthread_cond_broadcast(&e->cv);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->thread, NULL);
        pthread_mutex_destroy(&e->mu);
        pthread_cond_destroy(&e->cv);
    }
#endif
    __atomic_store_n(&pat_active, NULL, __ATOMIC_RELEASE);
    engine_free(e);
    return MPI_SUCCESS;
}

/* ---- the allgather's side (collectives.c) ---- */

int cs_pat_claim(MPI_Comm comm, uint64_t bytes, cs_pat_job *job)
{
    pat_engine *e = engine();
    memset(job, 0, sizeof *job);
    if (!e || !api_thread(e) || e->phase == PAT_PHASE_IDLE) return CS_PAT_NOT_MINE;
    if (e->user == MPI_COMM_NULL) {
        /* Not declared: the first call on a communicator with world's ranks teaches the
         * engine what it serves; this iteration runs without a background part. */
        int same = MPI_UNEQUAL;
        PMPI_Comm_compare(comm, MPI_COMM_WORLD, &same);
        if (same != MPI_IDENT && same != MPI_CONGRUENT) return CS_PAT_NOT_MINE;
        e->user = comm;
        e->bytes = bytes;
        if (!(e->tau > 0)) e->learn_tau = 1;
    }
    if (comm != e->user) return CS_PAT_NOT_MINE;
    if (e->phase == PAT_PHASE_COMPUTING) send_estimate(e, now(e)); /* no PAT_ProcessingEnd either */
    take_over(e);
    if (e->iter_bytes && bytes != e->iter_bytes && e->state != PAT_FAILED) {
        abandon_iteration(e);
        fail_iteration(e, "%s", "bytes per rank differ from PAT_Declare");
    }
    if (e->state == PAT_FAILED) {
        snprintf(job->reason, sizeof job->reason, "PAT: %s", e->reason);
        end_iteration(e);
        return CS_PAT_FALL_BACK;
    }
    if (cs_verbose())
        fprintf(stderr, "collsched PAT (rank %d): iteration %ld: %s, %u of %u ops in the background (%s driver)\n",
                e->rank, e->iteration, e->sched_name, e->nbg, e->sched->nops, e->threaded ? "thread" : "explicit");
    job->engine = e;
    job->sched = e->sched;
    job->comm = e->comm;
    job->reqs = e->reqs;
    job->started.nops = e->nbg;
    /* Ops the engine reached, counted in ops and ending on message boundaries (a message's
     * request sits at its head): the receives it posted - all of a dataflow schedule's; a
     * serial one's up to the message in flight (or all, once the chain is done) - and the
     * sends before bs_next, issued by the engine. */
    job->started.recvs = e->state == PAT_BACKGROUND && e->bg_serial
                             ? (e->bg_posted_current ? msg_end(e, e->bg_next) : e->bg_next) : e->nbg;
    job->started.sends = e->bg_serial ? e->bs_next : 0;
    job->started.held = e->held;
    snprintf(job->name, sizeof job->name, "%s", e->sched_name);
    return CS_PAT_RUN;
}

/* 1 while PAT_Init's engine runs: the allgather path must then reach cs_pat_claim even
 * without a schedule source (bdr builds its schedules online). */
int cs_pat_active(void) { return engine() != NULL; }

int cs_pat_learning_tau(void)
{
    const pat_engine *e = engine();
    return e && api_thread(e) && e->learn_tau;
}

void cs_pat_learned(double elapsed_s)
{
    /* The last rank to arrive waits for nobody: its time is the algorithm's. The minimum
     * over ranks, over P - 1 steps, is tau; every rank gets the same value. */
    pat_engine *e = engine();
    double t = elapsed_s;
    if (!e) return;
    e->learn_tau = 0;
    PMPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MIN, e->comm);
    if (e->size > 1 && t > 0) e->tau = t / (e->size - 1);
}

void cs_pat_done(const cs_pat_job *job) { end_iteration(job->engine); }
