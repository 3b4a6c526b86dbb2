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

typedef struct pat_engine {
    int on, threaded, alg_bdr, check; /* on: read atomically (any thread's allgather asks) */
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

static pat_engine E = { .comm = MPI_COMM_NULL, .user = MPI_COMM_NULL };

static double now(void) { return PMPI_Wtime() + E.offset; }

static void say(const char *what)
{
    fprintf(stderr, "collsched PAT (rank %d): %s\n", E.rank, what);
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

static int engine_on(void) { return __atomic_load_n(&E.on, __ATOMIC_ACQUIRE); }

/* A bad API argument: MPI_ERR_ARG (or the code given), with one line from rank 0 of
 * MPI_COMM_WORLD (also when the engine is off: PAT_Sleep works without it). */
static int bad_arg(int code, const char *what)
{
    int rank = E.rank, initialized = 0, finalized = 1;
    if (!engine_on()) {
        PMPI_Initialized(&initialized);
        if (initialized) PMPI_Finalized(&finalized);
        if (initialized && !finalized) PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    }
    if (rank == 0) fprintf(stderr, "collsched PAT (rank 0): %s\n", what);
    return code;
}

/* The PAT API belongs to the thread that called PAT_Init (docs/pat.md): allgathers from
 * other threads, on other communicators, are never the engine's and must not touch it. */
static int api_thread(void)
{
#if PAT_THREADS
    return pthread_equal(pthread_self(), E.owner);
#else
    return 1;
#endif
}

/* ---- the engine: one step at a time, from either driver ---- */

static void fail_iteration(const char *fmt, const char *arg)
{
    snprintf(E.reason, sizeof E.reason, fmt, arg);
    E.state = PAT_FAILED;
}

/* Whether this iteration's estimate exchange is complete; `blocking` waits for it. */
static int exchange_complete(int blocking)
{
    int done = 1, n = 2 * (E.size - 1);
    if (blocking) PMPI_Waitall(n, E.xreqs, MPI_STATUSES_IGNORE);
    else PMPI_Testall(n, E.xreqs, &done, MPI_STATUSES_IGNORE);
    return done;
}

/* Completes the estimate exchange a compiled schedule went ahead of (x_pending). */
static void finish_exchange(int blocking)
{
    if (E.x_pending && exchange_complete(blocking)) E.x_pending = 0;
}

static void send_estimate(double estimate)
{
    finish_exchange(1); /* the previous iteration's: every rank sent it before its call */
    /* What the iteration serves is fixed here, in program order before its call on every
     * rank, so that all ranks decide alike whatever the threads' timing. */
    E.iter_bytes = E.bytes;
    E.estimate = estimate;
    E.mine[0] = estimate;
    E.mine[1] = E.tau;
    E.mine[2] = now();
    for (int k = 0; k < 3; k++) E.theirs[3 * E.rank + k] = E.mine[k];
    int n = 0;
    for (int r = 0; r < E.size; r++) {
        if (r == E.rank) continue;
        PMPI_Irecv(&E.theirs[3 * r], 3, MPI_DOUBLE, r, PAT_TAG_ESTIMATE, E.comm, &E.xreqs[n++]);
        PMPI_Isend(E.mine, 3, MPI_DOUBLE, r, PAT_TAG_ESTIMATE, E.comm, &E.xreqs[n++]);
    }
    E.state = PAT_EXCHANGING;
    E.phase = PAT_PHASE_SENT;
}

/* Proves the online schedule once more on every rank (each builds every rank's list: the
 * same verdict everywhere, no messages). */
static int prove_online(const double *arrivals, double tau, char *why, size_t len)
{
    uint32_t P = (uint32_t)E.size;
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

static int build_online(void)
{
    uint32_t P = (uint32_t)E.size;
    double *arrivals = malloc(P * sizeof *arrivals), first = INFINITY, tau = 0, known = -INFINITY;
    char err[PAT_REASON] = "";
    if (!arrivals) { fail_iteration("%s", "no memory for the arrival pattern"); return 0; }
    /* Nobody can start before the pattern is known, i.e. before the last prediction was
     * sent: a rank predicted to arrive earlier counts as arriving then (with a long
     * computation and a late last edge, BDR planned for the raw predictions sends in
     * pre-steps that cannot happen and comes out slower than the ring). */
    for (uint32_t r = 0; r < P; r++) {
        if (E.theirs[3 * r + 1] > tau) tau = E.theirs[3 * r + 1];
        if (E.theirs[3 * r + 2] > known) known = E.theirs[3 * r + 2];
    }
    for (uint32_t r = 0; r < P; r++) {
        arrivals[r] = E.theirs[3 * r] > known ? E.theirs[3 * r] : known;
        if (arrivals[r] < first) first = arrivals[r];
    }
    for (uint32_t r = 0; r < P; r++) arrivals[r] -= first;
    if (!(tau > 0)) {
        free(arrivals);
        fail_iteration("%s", "tau unknown (PAT_Declare, COLLSCHED_PAT_TAU, or a first call to learn it)");
        return 0;
    }
    collsched_op *ops = NULL;
    uint32_t n = 0;
    int rc = cs_bdr_build(P, arrivals, tau, (uint32_t)E.rank, &ops, &n);
    if (rc == COLLSCHED_OK)
        rc = cs_schedule_adopt(P, 1, (uint32_t)E.rank, ops, n, "online BDR", &E.sched, err, sizeof err);
    else
        free(ops);
    if (rc == COLLSCHED_OK && E.check && !prove_online(arrivals, tau, err, sizeof err)) {
        collsched_schedule_free(E.sched);
        E.sched = NULL;
        rc = COLLSCHED_EFORMAT;
    }
    free(arrivals);
    if (rc != COLLSCHED_OK) {
        fail_iteration("online BDR refused: %s", err[0] ? err : "pre-steps beyond the limit");
        return 0;
    }
    E.sched->hdr.flags = COLLSCHED_FLAG_FULL_DUPLEX | COLLSCHED_FLAG_SERIAL; /* as the compiler's bdr */
    E.sched_owned = 1;
    snprintf(E.sched_name, sizeof E.sched_name, "PAT bdr (online, tau %.3g s)", tau);
    return 1;
}

/* The background part: the leading receives of the rank's list, into the staging buffer. */
static int post_background(void)
{
    const collsched_schedule *s = E.sched;
    uint32_t nbg = 0;
    while (nbg < s->nops && s->ops[nbg].phase == 1) nbg++; /* sends among them: the call's */
    if (s->nops > E.reqs_cap) {
        MPI_Request *grown = realloc(E.reqs, s->nops * sizeof *grown);
        if (!grown) { fail_iteration("%s", "no memory for requests"); return 0; }
        E.reqs = grown;
        E.reqs_cap = s->nops;
    }
    uint64_t nseg = s->hdr.nseg, slot = (E.iter_bytes + nseg - 1) / nseg;
    if ((uint64_t)nbg * slot > E.staging_cap) {
        char *grown = realloc(E.staging, (size_t)((uint64_t)nbg * slot));
        if (!grown) { fail_iteration("%s", "no memory for the background staging buffer"); return 0; }
        E.staging = grown;
        E.staging_cap = (uint64_t)nbg * slot;
    }
    char **held = realloc(E.held, (nbg ? nbg : 1) * sizeof *held);
    if (!held) { fail_iteration("%s", "no memory for the background staging slots"); return 0; }
    E.held = held;
    for (uint32_t i = 0; i < nbg; i++)
        E.held[i] = s->ops[i].kind == COLLSCHED_RECV ? E.staging + (uint64_t)i * slot : NULL;
    E.slot = slot;
    E.nbg = nbg;
    E.bg_next = 0;
    E.bg_posted_current = 0;
    E.bs_next = 0;
    E.bs_cur = -1;
    E.bs_stopped = 0;
    E.bg_serial = (s->hdr.flags & COLLSCHED_FLAG_SERIAL) != 0;
    for (uint32_t i = 0; i < nbg; i++) E.reqs[i] = MPI_REQUEST_NULL;
    E.state = PAT_BACKGROUND;
    return 1;
}

/* Bytes of the piece op i moves (its segment of a block). */
static int piece_len(uint32_t i)
{
    uint64_t nseg = E.sched->hdr.nseg;
    uint32_t g = E.sched->ops[i].segment;
    return (int)(cs_seg_lo(g + 1u, E.iter_bytes, nseg) - cs_seg_lo(g, E.iter_bytes, nseg));
}

/* Posts background receive i into its staging slot. */
static void post_bg(uint32_t i)
{
    PMPI_Irecv(E.staging + (uint64_t)i * E.slot, piece_len(i), MPI_BYTE, (int)E.sched->ops[i].peer,
               CS_TAG, E.comm, &E.reqs[i]);
}

/* One step; `blocking` waits instead of testing. Returns 1 while background work is
 * pending (EXCHANGING or BACKGROUND). `posted_will_do`: the call is here to take over -
 * stop once a dataflow schedule's background receives are all posted, and at once for a
 * serial one (its receive in flight, if any, becomes the executor's). Called with the
 * engine locked out from the other driver (busy flag). */
static int advance(int blocking, int posted_will_do)
{
    finish_exchange(0);
    if (E.state == PAT_EXCHANGING) {
        if (E.alg_bdr) { /* the online schedule is built from everybody's estimate */
            if (!exchange_complete(blocking)) return 1;
        } else {
            E.x_pending = 1; /* a compiled schedule goes ahead; finish_exchange completes it */
        }
        if (!E.iter_bytes) {
            fail_iteration("%s", "message size unknown: PAT_Declare, or a first call teaches it");
            return 0;
        }
        if (E.alg_bdr) {
            if (!build_online()) return 0;
        } else if (E.next_file) {
            E.sched = E.next_file;
            E.next_file = NULL;
            E.sched_owned = 1;
            snprintf(E.sched_name, sizeof E.sched_name, "%s", E.next_name);
        } else {
            fail_iteration("%s", "no schedule named for this iteration (PAT_UseSchedule)");
            return 0;
        }
        if (!post_background()) return 0;
    }
    /* Serial schedules: one background receive at a time, in list order (Listing 2, lines
     * 47-51: blocking receives), as the foreground and the cost model have it: several at
     * once would share the rank's link and slow every sender's synchronous send. */
    if (E.state == PAT_BACKGROUND && !E.bg_serial) { /* dataflow: all at once */
        /* Posted once, tracked by bg_next (a partial Testall may already have set some
         * requests to MPI_REQUEST_NULL under some MPIs: never repost by looking at them). */
        if (E.bg_next == 0)
            for (E.bg_next = 1; E.bg_next <= E.nbg; E.bg_next++)
                if (E.sched->ops[E.bg_next - 1].kind == COLLSCHED_RECV) post_bg(E.bg_next - 1);
        if (posted_will_do) return 0;
        int done = 1;
        if (blocking) PMPI_Waitall((int)E.nbg, E.reqs, MPI_STATUSES_IGNORE);
        else if (E.nbg) PMPI_Testall((int)E.nbg, E.reqs, &done, MPI_STATUSES_IGNORE);
        if (!done) return 1;
        E.bg_next = E.nbg;
        E.state = PAT_READY;
        return 0;
    }
    /* Serial schedules: two chains, as the executor runs them (run_serial). The receives
     * of the background part one at a time, in list order (Listing 2, lines 47-51). Its
     * sends - pieces received in the background, relayed while the rank still computes
     * (semantics rule 4; arrival-aware min3 plans them) - one at a time, synchronous, each
     * once its piece is in. The send chain stops at a send of the rank's own piece: its
     * data are the call's. The call takes both chains over where they are. */
    if (E.state == PAT_BACKGROUND) {
        if (posted_will_do) return 0;
        const collsched_op *ops = E.sched->ops;
        for (int moved = 1; moved;) {
            moved = 0;
            while (E.bg_next < E.nbg && ops[E.bg_next].kind != COLLSCHED_RECV) E.bg_next++;
            if (E.bg_next < E.nbg) {
                if (!E.bg_posted_current) { post_bg(E.bg_next); E.bg_posted_current = 1; }
                int done = 0;
                PMPI_Test(&E.reqs[E.bg_next], &done, MPI_STATUS_IGNORE);
                if (done) { E.bg_next++; E.bg_posted_current = 0; moved = 1; }
            }
            if (E.bs_cur >= 0) {
                int done = 0;
                PMPI_Test(&E.reqs[E.bs_cur], &done, MPI_STATUS_IGNORE);
                if (done) { E.bs_cur = -1; moved = 1; }
            }
            while (E.bs_next < E.nbg && ops[E.bs_next].kind != COLLSCHED_SEND) E.bs_next++;
            if (E.bs_cur < 0 && !E.bs_stopped && E.bs_next < E.nbg) {
                const collsched_op *op = &ops[E.bs_next];
                if (op->dep < 0 || op->origin == (uint32_t)E.rank) {
                    E.bs_stopped = 1;
                } else if ((uint32_t)op->dep < E.bg_next) { /* receives complete in list order */
                    PMPI_Issend(E.staging + (uint64_t)op->dep * E.slot, piece_len(E.bs_next), MPI_BYTE,
                                (int)op->peer, CS_TAG, E.comm, &E.reqs[E.bs_next]);
                    E.bs_cur = (int32_t)E.bs_next++;
                    moved = 1;
                }
            }
        }
        if (E.bg_next >= E.nbg && E.bs_cur < 0 && (E.bs_stopped || E.bs_next >= E.nbg)) E.state = PAT_READY;
        return E.state == PAT_BACKGROUND;
    }
    return 0;
}

#if PAT_THREADS
static void *driver(void *unused)
{
    (void)unused;
    struct timespec nap = E.nap;
    pthread_mutex_lock(&E.mu);
    for (;;) {
        while (!E.work && !E.stop) pthread_cond_wait(&E.cv, &E.mu);
        if (E.stop) break;
        E.work = 0;
        pthread_mutex_unlock(&E.mu);
        /* Until the work is done, or - for a dataflow schedule whose receives are all
         * posted - the call has come to take the requests over. */
        while (advance(0, 0) && !(__atomic_load_n(&E.fg_waiting, __ATOMIC_ACQUIRE) &&
                                  E.state == PAT_BACKGROUND && (E.bg_serial || E.bg_next)))
            nanosleep(&nap, NULL);
        pthread_mutex_lock(&E.mu);
        E.busy = 0;
        pthread_cond_broadcast(&E.cv);
    }
    pthread_mutex_unlock(&E.mu);
    return NULL;
}
#endif

static void wait_for_thread(void)
{
#if PAT_THREADS
    if (E.threaded) {
        pthread_mutex_lock(&E.mu);
        __atomic_store_n(&E.fg_waiting, 1, __ATOMIC_RELEASE);
        while (E.busy) pthread_cond_wait(&E.cv, &E.mu);
        __atomic_store_n(&E.fg_waiting, 0, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&E.mu);
    }
#endif
}

/* A setting changes between the edge and the call: the progress thread may be reading
 * it, so it stops first (the call takes over from where it is, as usual). */
static void quiesce(void)
{
    if (E.phase == PAT_PHASE_SENT) wait_for_thread();
}

/* An iteration that no allgather consumed: finish the exchange (every rank sent its
 * estimate) and withdraw the background receives (no peer runs the schedule). */
static void abandon_iteration(void)
{
    wait_for_thread();
    if (E.phase == PAT_PHASE_COMPUTING) send_estimate(now());
    finish_exchange(1);
    if (E.state == PAT_EXCHANGING) {
        exchange_complete(1);
        E.state = PAT_FAILED;
    }
    if (E.state == PAT_BACKGROUND || E.state == PAT_READY) {
        for (uint32_t i = 0; i < E.nbg; i++) {
            if (E.reqs[i] == MPI_REQUEST_NULL) continue; /* unposted, or complete */
            PMPI_Cancel(&E.reqs[i]);
            if (E.sched->ops[i].kind == COLLSCHED_RECV) {
                PMPI_Wait(&E.reqs[i], MPI_STATUS_IGNORE);
            } else { /* a relayed send whose peer gave up too may never match: let it go */
                int done = 0;
                PMPI_Test(&E.reqs[i], &done, MPI_STATUS_IGNORE);
                if (!done) PMPI_Request_free(&E.reqs[i]);
            }
        }
        E.state = PAT_FAILED;
    }
}

/* The foreground takes the iteration over: waits for the thread, then finishes the
 * exchange and the posting of a dataflow schedule's receives; the executor takes the
 * requests over (a serial schedule's chain from the receive in flight on). */
static void take_over(void)
{
    wait_for_thread();
    while (advance(1, 1)) {}
}

static void end_iteration(void)
{
    if (E.sched_owned && E.sched) collsched_schedule_free(E.sched);
    E.sched = NULL;
    E.sched_owned = 0;
    E.nbg = 0;
    E.state = PAT_IDLE;
    E.phase = PAT_PHASE_IDLE;
    E.reason[0] = 0;
}

/* ---- the API ---- */

int PAT_Init(void)
{
    if (engine_on()) return MPI_SUCCESS;
    int initialized = 0, finalized = 0, provided = MPI_THREAD_SINGLE;
    PMPI_Initialized(&initialized);
    if (initialized) PMPI_Finalized(&finalized);
    if (!initialized || finalized) {
        fprintf(stderr, "collsched PAT: PAT_Init %s MPI_Init\n", finalized ? "after MPI_Finalize" : "before");
        return MPI_ERR_OTHER;
    }
    pat_env env;
    read_env(&env);
    int rc = PMPI_Comm_dup(MPI_COMM_WORLD, &E.comm);
    if (rc != MPI_SUCCESS) return rc;
    PMPI_Comm_rank(E.comm, &E.rank);
    PMPI_Comm_size(E.comm, &E.size);
    /* A bad variable on any rank turns the engine off on all (they must agree); the
     * lowest such rank says why. */
    int first_bad = env.bad[0] ? E.rank : E.size;
    rc = PMPI_Allreduce(MPI_IN_PLACE, &first_bad, 1, MPI_INT, MPI_MIN, E.comm);
    if (rc != MPI_SUCCESS || first_bad < E.size) {
        if (first_bad == E.rank) say(env.bad);
        PMPI_Comm_free(&E.comm);
        E.comm = MPI_COMM_NULL;
        return rc != MPI_SUCCESS ? rc : MPI_ERR_ARG;
    }
    E.theirs = calloc(3 * (size_t)E.size, sizeof *E.theirs);
    E.xreqs = malloc(2 * (size_t)E.size * sizeof *E.xreqs);
    if (!E.theirs || !E.xreqs) return MPI_ERR_NO_MEM;
    for (int i = 0; i < 2 * E.size; i++) E.xreqs[i] = MPI_REQUEST_NULL;
    /* One clock for the estimates: rank 0's, offset taken right after a barrier (ranks
     * leave it within a latency). Skipped where MPI says the clock is global. */
    int *global = NULL, flag = 0;
    PMPI_Comm_get_attr(MPI_COMM_WORLD, MPI_WTIME_IS_GLOBAL, &global, &flag);
    double t0 = 0, mine = 0;
    PMPI_Barrier(E.comm);
    mine = PMPI_Wtime();
    t0 = mine;
    PMPI_Bcast(&t0, 1, MPI_DOUBLE, 0, E.comm);
    E.offset = flag && global && *global ? 0.0 : t0 - mine;
    rc = cs_comm_state(E.comm, &E.st);
    if (rc != MPI_SUCCESS) return rc;
    E.tau = env.tau;
    E.alpha = env.alpha;
    E.slice_s = env.slice_us * 1e-6;
    E.check = env.check >= 0 ? env.check : E.size <= PAT_CHECK_MAX_RANKS;
    E.user = MPI_COMM_NULL;
    E.bytes = 0;
    E.state = PAT_IDLE;
    E.phase = PAT_PHASE_IDLE;
    PMPI_Query_thread(&provided);
    E.threaded = PAT_THREADS && provided == MPI_THREAD_MULTIPLE && env.driver != 2;
#if PAT_THREADS
    E.owner = pthread_self();
    if (E.threaded) {
        double poll_s = env.poll_us * 1e-6;
        E.nap.tv_sec = (time_t)poll_s;
        E.nap.tv_nsec = (long)((poll_s - floor(poll_s)) * 1e9);
        pthread_mutex_init(&E.mu, NULL);
        pthread_cond_init(&E.cv, NULL);
        E.work = E.busy = E.stop = 0;
        if (pthread_create(&E.thread, NULL, driver, NULL) != 0) E.threaded = 0;
    }
#endif
    if (env.driver == 1 && !E.threaded) {
        say("COLLSCHED_PAT_DRIVER=thread needs MPI_THREAD_MULTIPLE (and real MPI); using explicit progress");
    }
    __atomic_store_n(&E.on, 1, __ATOMIC_RELEASE);
    return MPI_SUCCESS;
}

int PAT_UseAlg(const char *algorithm)
{
    if (!engine_on()) return MPI_ERR_OTHER;
    if (!algorithm || !*algorithm || strlen(algorithm) >= sizeof E.alg)
        return bad_arg(MPI_ERR_ARG, "PAT_UseAlg: expected an algorithm name of 1 to 31 characters");
    quiesce();
    snprintf(E.alg, sizeof E.alg, "%s", algorithm);
    E.alg_bdr = !strcmp(algorithm, "bdr");
    return MPI_SUCCESS;
}

int PAT_Declare(MPI_Comm comm, int bytes_per_rank, double tau_s)
{
    if (!engine_on()) return MPI_ERR_OTHER;
    int inter = 0;
    if (comm == MPI_COMM_NULL || PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || inter)
        return bad_arg(MPI_ERR_COMM, "PAT_Declare: expected an intracommunicator with the ranks of "
                                     "MPI_COMM_WORLD, got MPI_COMM_NULL or an intercommunicator");
    if (bytes_per_rank < 0)
        return bad_arg(MPI_ERR_ARG, "PAT_Declare: bytes per rank must be 0 (unknown) or more");
    if (isnan(tau_s) || isinf(tau_s) || (tau_s > 0 && (tau_s < CS_PAT_TAU_MIN || tau_s > CS_PAT_TAU_MAX)))
        return bad_arg(MPI_ERR_ARG, "PAT_Declare: tau must be <= 0 (unknown) or seconds from 1e-09 to 1000");
    int same = MPI_UNEQUAL;
    PMPI_Comm_compare(comm, MPI_COMM_WORLD, &same);
    if (same != MPI_IDENT && same != MPI_CONGRUENT) {
        say("PAT_Declare: the communicator must hold the ranks of MPI_COMM_WORLD in the same order");
        return MPI_ERR_COMM;
    }
    quiesce();
    E.user = comm;
    E.bytes = (uint64_t)bytes_per_rank;
    if (tau_s > 0) E.tau = tau_s;
    if (!(E.tau > 0)) E.learn_tau = 1; /* from the first call, which runs without PAT */
    return MPI_SUCCESS;
}

int PAT_UseSchedule(const char *path)
{
    if (!engine_on()) return MPI_ERR_OTHER;
    quiesce();
    if (E.next_file) { collsched_schedule_free(E.next_file); E.next_file = NULL; }
    if (!path) return MPI_SUCCESS;
    char why[PAT_REASON] = "";
    int rc = cs_load_proven(E.st, path, &E.next_file, why, sizeof why);
    if (rc != MPI_SUCCESS) return rc;
    if (!E.next_file) { /* the loader said why, once, on the rank that found it */
        return cs_strict() ? MPI_ERR_OTHER : MPI_SUCCESS;
    }
    if (E.bytes && (E.bytes < E.next_file->hdr.bytes_min || E.bytes > E.next_file->hdr.bytes_max)) {
        if (E.rank == 0) say("PAT_UseSchedule: the file does not serve the declared bytes per rank");
        collsched_schedule_free(E.next_file);
        E.next_file = NULL;
        return cs_strict() ? MPI_ERR_OTHER : MPI_SUCCESS;
    }
    snprintf(E.next_name, sizeof E.next_name, "%s", path);
    return MPI_SUCCESS;
}

int PAT_ProcessingStart(void)
{
    if (!engine_on()) return MPI_ERR_OTHER;
    if (E.phase != PAT_PHASE_IDLE) { abandon_iteration(); end_iteration(); }
    E.iteration++;
    E.t_start = now();
    E.state = PAT_COMPUTING;
    E.phase = PAT_PHASE_COMPUTING;
    return MPI_SUCCESS;
}

int PAT_Edge(double percent)
{
    if (!engine_on()) return MPI_ERR_OTHER;
    /* Below 0.01% the extrapolation (x 100 / percent) is no prediction any more. */
    if (!(percent >= PAT_EDGE_MIN && percent <= 100))
        return bad_arg(MPI_ERR_ARG, "PAT_Edge: expected a percentage from 0.01 to 100");
    if (E.phase != PAT_PHASE_COMPUTING) return MPI_SUCCESS;
    double t = now(), duration = (t - E.t_start) * 100.0 / percent;
    if (E.alpha > 0 && E.have_history) duration = E.ema_duration; /* the option: past durations */
    send_estimate(E.t_start + duration);
#if PAT_THREADS
    if (E.threaded) {
        pthread_mutex_lock(&E.mu);
        E.work = E.busy = 1;
        pthread_cond_signal(&E.cv);
        pthread_mutex_unlock(&E.mu);
        return MPI_SUCCESS;
    }
#endif
    advance(0, 0);
    return MPI_SUCCESS;
}

int PAT_ProcessingEnd(void)
{
    if (!engine_on()) return MPI_ERR_OTHER;
    double t = now(), duration = t - E.t_start;
    if (E.alpha > 0) {
        E.ema_duration = E.have_history ? E.alpha * duration + (1 - E.alpha) * E.ema_duration : duration;
        E.have_history = 1;
    }
    if (E.phase == PAT_PHASE_COMPUTING) send_estimate(t); /* no edge: the arrival itself */
    return MPI_SUCCESS;
}

int PAT_Progress(void)
{
    if (!engine_on() || E.threaded) return MPI_SUCCESS;
    if (E.state == PAT_EXCHANGING || E.state == PAT_BACKGROUND) advance(0, 0);
    return MPI_SUCCESS;
}

int PAT_Sleep(double seconds)
{
    if (!(seconds >= 0 && seconds <= PAT_SLEEP_MAX)) /* NaN too: it never ended */
        return bad_arg(MPI_ERR_ARG, "PAT_Sleep: expected seconds from 0 to 1e6");
    double end = PMPI_Wtime() + seconds;
    int explicit = engine_on() && !E.threaded; /* the progress thread owns E.state */
    for (;;) {
        double left = end - PMPI_Wtime();
        if (left <= 0) return MPI_SUCCESS;
        /* Slices only while the engine has background work (estimates, receives, relays). */
        int pending = explicit && (E.state == PAT_EXCHANGING || E.state == PAT_BACKGROUND);
        /* Background receives and relays go one at a time: a slice well below tau keeps
         * the next one from waiting long for its turn (tau/8 cost arrival-aware min3, whose
         * relays chain from rank to rank, 4-9% against the cost model at 11-20 KB blocks;
         * tau/32 costs 0.4-1.6%). */
        double slice = pending && E.state == PAT_BACKGROUND && E.tau > 0 && E.tau / 32 < E.slice_s
                       ? E.tau / 32 : E.slice_s;
        double nap = pending && left > slice ? slice : left;
        nap_for(nap);
        if (pending) PAT_Progress();
        if (!pending) return MPI_SUCCESS;
    }
}

int PAT_Finalize(void)
{
    if (!engine_on()) return MPI_SUCCESS;
    if (E.phase != PAT_PHASE_IDLE) { abandon_iteration(); end_iteration(); }
    finish_exchange(1);
#if PAT_THREADS
    if (E.threaded) {
        pthread_mutex_lock(&E.mu);
        E.stop = 1;
        pthread_cond_broadcast(&E.cv);
        pthread_mutex_unlock(&E.mu);
        pthread_join(E.thread, NULL);
        pthread_mutex_destroy(&E.mu);
        pthread_cond_destroy(&E.cv);
    }
#endif
    __atomic_store_n(&E.on, 0, __ATOMIC_RELEASE);
    if (E.next_file) collsched_schedule_free(E.next_file);
    E.next_file = NULL;
    free(E.theirs);
    free(E.xreqs);
    free(E.reqs);
    free(E.staging);
    free(E.held);
    PMPI_Comm_free(&E.comm);
    memset(&E, 0, sizeof E);
    E.comm = E.user = MPI_COMM_NULL;
    return MPI_SUCCESS;
}

/* ---- the allgather's side (collectives.c) ---- */

int cs_pat_claim(MPI_Comm comm, uint64_t bytes, cs_pat_job *job)
{
    memset(job, 0, sizeof *job);
    if (!engine_on() || !api_thread() || E.phase == PAT_PHASE_IDLE) return CS_PAT_NOT_MINE;
    if (E.user == MPI_COMM_NULL) {
        /* Not declared: the first call on a communicator with world's ranks teaches the
         * engine what it serves; this iteration runs without a background part. */
        int same = MPI_UNEQUAL;
        PMPI_Comm_compare(comm, MPI_COMM_WORLD, &same);
        if (same != MPI_IDENT && same != MPI_CONGRUENT) return CS_PAT_NOT_MINE;
        E.user = comm;
        E.bytes = bytes;
        if (!(E.tau > 0)) E.learn_tau = 1;
    }
    if (comm != E.user) return CS_PAT_NOT_MINE;
    if (E.phase == PAT_PHASE_COMPUTING) send_estimate(now()); /* no PAT_ProcessingEnd either */
    take_over();
    if (E.iter_bytes && bytes != E.iter_bytes && E.state != PAT_FAILED) {
        abandon_iteration();
        fail_iteration("%s", "bytes per rank differ from PAT_Declare");
    }
    if (E.state == PAT_FAILED) {
        snprintf(job->reason, sizeof job->reason, "PAT: %s", E.reason);
        end_iteration();
        return CS_PAT_FALL_BACK;
    }
    if (cs_verbose())
        fprintf(stderr, "collsched PAT (rank %d): iteration %ld: %s, %u of %u ops in the background (%s driver)\n",
                E.rank, E.iteration, E.sched_name, E.nbg, E.sched->nops, E.threaded ? "thread" : "explicit");
    job->sched = E.sched;
    job->comm = E.comm;
    job->reqs = E.reqs;
    job->started.nops = E.nbg;
    /* Receives the engine posted: all of a dataflow schedule's; a serial one's up to the
     * one in flight (or all, once the chain is done). */
    job->started.recvs = E.state == PAT_BACKGROUND && E.bg_serial ? E.bg_next + (uint32_t)E.bg_posted_current : E.nbg;
    job->started.sends = E.bg_serial ? E.bs_next : 0; /* sends before it: issued by the engine */
    job->started.held = E.held;
    snprintf(job->name, sizeof job->name, "%s", E.sched_name);
    return CS_PAT_RUN;
}

int cs_pat_learning_tau(void) { return engine_on() && api_thread() && E.learn_tau; }

void cs_pat_learned(double elapsed_s)
{
    /* The last rank to arrive waits for nobody: its time is the algorithm's. The minimum
     * over ranks, over P - 1 steps, is tau; every rank gets the same value. */
    double t = elapsed_s;
    E.learn_tau = 0;
    PMPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MIN, E.comm);
    if (E.size > 1 && t > 0) E.tau = t / (E.size - 1);
}

void cs_pat_done(const cs_pat_job *job) { (void)job; end_iteration(); }
