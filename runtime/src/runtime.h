/* runtime.h - MPI-side declarations shared by executor.c, comm_state.c, collectives.c
 * and preload.c (not installed). */
#ifndef COLLSCHED_RUNTIME_H
#define COLLSCHED_RUNTIME_H

#include "collsched.h"
#include "internal.h"

#define CS_TAG 1        /* the one tag of schedule traffic, on a private communicator */
#define CS_TAG_SELF 2   /* local copies through MPI (non-contiguous datatypes) */

/* datatype.c: 1 if consecutive elements of t are one run of bytes in type-map order (size
 * bytes per element, no holes, nothing reordered), starting *off bytes from the buffer's
 * address; 0 if not (or if unsure). */
int cs_type_run(MPI_Datatype t, MPI_Aint *off);
/* datatype.c: a type over n pieces of a message, piece k len[k] bytes at the absolute
 * address addr[k], carried in list order; used as (MPI_BOTTOM, 1, *t). On success *t is
 * committed; the caller frees it (PMPI_Type_free; allowed once the calls that use it are
 * started). Empty pieces add nothing, n == 0 is an empty type. The executor (messages
 * whose pieces do not follow each other in memory) and the PAT engine's background
 * relays use it. */
int cs_pieces_type(const char *const *addr, const int *len, int n, MPI_Datatype *t);

/* Where the blocks live in the receive buffer (executor.c): only the layout. */
typedef struct cs_layout {
    char *base;             /* receive buffer + true lower bound of the type */
    uint64_t block;         /* allgather: bytes per rank (counts == NULL) */
    const int *counts;      /* allgatherv: per-origin element counts ... */
    const int *displs;      /* ... and displacements, in units of `extent` */
    uint64_t extent;
    uint32_t rank;          /* the calling rank (origin of the own block) */
    const char *own_src;    /* contiguous send buffer: own pieces are sent from here, and
                               copied to own_dst after the walk; NULL: already in place */
    char *own_dst;
    uint64_t own_bytes;
} cs_layout;

/* Operations someone else started before the call (the executor does not know who); the
 * executor takes them over where they are and runs the rest. Ops [0, nops) are the
 * starter's: reqs[i] is its request (MPI_REQUEST_NULL: not started, or complete); the
 * executor starts the others itself. Receives before `recvs` and sends before `sends`
 * were started (a serial schedule's chains go on from the last of each). held[i], for
 * i < nops, is where op i's piece lands instead of its place in the layout (a receive
 * started before the receive buffer was known), NULL if in its place: the executor
 * copies it to its place before a send forwards it, else at the end, and then sets
 * held[i] = NULL; a receive among them that the executor posts itself goes to its place.
 * Multi-piece messages: a started message's request is at its head op (its joined ops'
 * reqs are MPI_REQUEST_NULL); held[] is per op (a message received into one staging slot
 * has held[op] = slot + the piece's offset in the message for each of its ops); recvs and
 * sends count ops and end on a message boundary (a message is started whole). The
 * executor copies staged pieces to their places (per op, as above) and sends from there. */
typedef struct cs_started {
    uint32_t nops;
    uint32_t recvs, sends;
    char **held;
} cs_started;

/* Runs the rank's operations; returns an MPI error code. reqs holds s->nops requests;
 * started: the operations already under way, NULL for none. Serial or dataflow as the
 * schedule's header says (docs/semantics.md). Unless lay->own_src is set, the own block
 * must be in the receive buffer on entry. */
int cs_execute(const collsched_schedule *s, MPI_Comm comm, const cs_layout *lay,
               MPI_Request *reqs, const cs_started *started);

/* trace.c: COLLSCHED_TRACE, one record per executor call (NULL: not tracing; every
 * function takes NULL). */
typedef struct cs_trace cs_trace;
cs_trace *cs_trace_begin(uint32_t nops);
void cs_trace_issued(cs_trace *tr, uint32_t op);
void cs_trace_done(cs_trace *tr, uint32_t op);     /* the first completion seen counts */
/* Completes reqs one by one, noting when each did; returns an MPI error code. */
int cs_trace_complete(cs_trace *tr, MPI_Request *reqs, uint32_t nops);
/* Appends the call's lines to PREFIX.RANK.csv if `write`, and frees the record. */
void cs_trace_end(cs_trace *tr, const collsched_schedule *s, uint32_t rank, int write);

/* One collective call as the arrival trace and the schedule cache see it (collectives.c
 * fills it at entry; `bytes` once the call is checked, `used` once it ran). */
enum { CS_COLL_ALLGATHER = 1, CS_COLL_ALLGATHERV = 2 };
typedef struct cs_call_ctx {
    const void *site;          /* the caller's return address: the call site (NULL unknown) */
    int collective;            /* CS_COLL_* */
    uint64_t bytes;            /* bytes per rank (allgatherv: the largest block) */
    double arrival;            /* PMPI_Wtime() at entry (this process's clock) */
    int used;                  /* a schedule ran (else the MPI library's collective) */
    const char *label;         /* the call's label (cs_call_label_take at entry), NULL none */
} cs_call_ctx;

/* callsite.c: the call site's name, identical on every rank of a job for the same source
 * line: this thread's label (collsched_label, PAT_Label) if one is set for the call, else
 * the return address resolved with dladdr to function+offset (module+offset without a
 * symbol). Cached per address; never fails ("?" at worst). */
void cs_call_site(const cs_call_ctx *ctx, char *out, size_t len);
/* The label of the thread's call now starting: its one-shot collsched_label (taken: the
 * next call does not see it), else its PAT_Label, else NULL. The pointer stays valid for
 * the call (thread-local). */
const char *cs_call_label_take(void);

/* clock.c: this rank's offset to comm's rank 0 clock: PMPI_Wtime() + *offset is rank 0's
 * time. Collective over comm; 0 where MPI says the clock is global. */
int cs_clock_offset(MPI_Comm comm, double *offset);
/* The estimate itself, made even where the clock is global: *offset, the local time it
 * holds for (*at, the middle of the kept exchange) and that exchange's round trip (*rtt,
 * twice the error bound); rank 0: 0, now, 0. Collective over comm. */
int cs_clock_estimate(MPI_Comm comm, double *offset, double *at, double *rtt);

/* arrivals.c: COLLSCHED_ARRIVALS, the arrival trace (docs/trace-format.md). */
int cs_arrivals_enabled(void);
/* Right after MPI_Init (the preload library): the start estimate of the clock offsets,
 * collective over MPI_COMM_WORLD; nothing when tracing is off. */
void cs_arrivals_start(void);
/* Records one call on the user's communicator at its exit (exit_time: PMPI_Wtime()). */
void cs_arrivals_call(MPI_Comm comm, const cs_call_ctx *ctx, double exit_time);
/* Gathers every rank's records and writes the trace (rank 0); collective over
 * MPI_COMM_WORLD; idempotent. */
int cs_arrivals_finalize(void);
/* arrivals_file.c: rank 0's part of finalize: every process's records (len[r] bytes at
 * all + at[r], as arrivals.c serialises them) matched and written to path (flags bit 0:
 * `applied`); failures are one line. */
void cs_arrivals_write(const char *path, const uint8_t *all, const int *len, const int *at, int wsize,
                       int applied);
/* The one line: "collsched: COLLSCHED_ARRIVALS=PATH: why". */
void cs_arrivals_say(const char *path, const char *why);
/* A growing little-endian byte buffer (bad: out of memory, the rest ignored). */
typedef struct cs_wbuf { uint8_t *p; size_t n, cap; int bad; } cs_wbuf;
void cs_put(cs_wbuf *b, const void *x, size_t n);
void cs_put_le(cs_wbuf *b, uint64_t v, int n);
void cs_put_f64(cs_wbuf *b, double d);

/* cache.c: a schedule cache as COLLSCHED_SCHEDULES (docs/cache.md): COLLSCHED_STATS at
 * finalize (collective over MPI_COMM_WORLD; idempotent). */
int cs_cache_finalize(void);
#define CS_TAG_ARRIVAL 3          /* the cache's arrival exchange, on the private communicator */
#define CS_CACHE_EAGER 256        /* entries proven at set-up; the others on first use */
#define CS_CACHE_EXCHANGE_MAX 256 /* largest communicator with the exchange (P - 1 messages a rank) */
typedef struct cs_cache cs_cache;
struct cs_comm;
struct cs_selection;
/* Reads and checks DIR/index (under a shared flock on DIR/.lock when it exists) for a
 * communicator of `size` ranks and keeps its entries of that size, in index order.
 * Returns 0, or -1 with one line in err (file, line, field, what was expected); *hash
 * (the index's bytes) is set either way, for the ranks' agreement. */
int cs_cache_open(const char *dir, int size, int rank, cs_cache **out, uint64_t *hash, char *err,
                  size_t len);
int cs_cache_entries(const cs_cache *c);
const char *cs_cache_file(const cs_cache *c, int i);   /* entry i's FILE */
int cs_cache_line(const cs_cache *c, int i);           /* its line in the index */
/* 1 if a schedule's header agrees with entry i (collective, RANKS, byte range); else 0, why. */
int cs_cache_header_fits(const cs_cache *c, int i, const collsched_header *h, char *why, size_t len);
/* Entry i is candidate k of the communicator's schedule set (not called: skipped). */
void cs_cache_set_candidate(cs_cache *c, int i, int k);
/* The communicator's set-up (collective over priv): the clock offset. */
int cs_cache_setup(cs_cache *c, MPI_Comm priv);
/* docs/cache.md's rule for one call (the arrival exchange included); as cs_select. */
int cs_cache_select(cs_cache *c, struct cs_comm *st, const cs_call_ctx *ctx, uint64_t lo, uint64_t hi,
                    struct cs_selection *sel);
/* At the exit of a call that ran a schedule (every rank entered it): completes the
 * exchange, labels the history, predicts the call site's next entry (kept for its next
 * call) and posts that entry's leading background receives (cache_ahead.c). */
int cs_cache_after(cs_cache *c, struct cs_comm *st);
/* Completes an outstanding exchange (if MPI is usable) and frees the cache. */
void cs_cache_free(cs_cache *c, int mpi_usable);
/* PAT_UseAlg("cache") (pat.c): the entry for a predicted pattern (P offsets, the PAT
 * engine's estimates, the same on every rank): the nearest class of the allgather '*'
 * group holding `bytes` if within its radius, else that group's regular entry; only
 * entries proven at the set-up (no collective). NULL: none (*path unset). */
const collsched_schedule *cs_cache_pick(cs_cache *c, struct cs_comm *st, const double *pattern,
                                        uint64_t bytes, const char **path);

/* collectives.c: collsched_allgather(v) with the call site given (the preload library
 * passes its caller's). */
int cs_allgather_at(const void *site, const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                    void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm);
int cs_allgatherv_at(const void *site, const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                     void *recvbuf, const int recvcounts[], const int displs[],
                     MPI_Datatype recvtype, MPI_Comm comm);

/* collectives.c: the pieces of a call the intergroup path shares. A receive layout: n
 * blocks of `block` bytes (counts NULL; `count` elements of `type` in all) or counts[o]
 * elements at displs[o] (units of the type's extent, esize bytes per element). */
typedef struct cs_recv_spec {
    void *buf;
    int count;
    const int *counts, *displs;
    MPI_Datatype type;
    uint64_t esize, block;
    int n;
} cs_recv_spec;
/* *base: where block o's bytes go (o * block or displs[o] * esize from it): the receive
 * buffer when its type is a run of bytes, else a staging buffer (*stage, malloc'ed). */
int cs_stage_open(const cs_recv_spec *r, char **base, char **stage);
/* The staged blocks into the user's layout (a message to oneself on priv). */
int cs_stage_close(const cs_recv_spec *r, const char *base, MPI_Comm priv, int rank);
/* A datatype of n bytes (n may exceed INT_MAX); the caller commits and frees it. */
int cs_byte_type(uint64_t n, MPI_Datatype *t);
/* scount elements of stype into `bytes` contiguous bytes at dst (pack = 1), or back
 * (pack = 0: from dst into src's layout): a message to oneself on priv. */
int cs_copy_bytes(const void *src, int scount, MPI_Datatype stype, void *dst, uint64_t bytes,
                  int pack, MPI_Comm priv, int rank);

/* inter_call.c: MPI_Allgather(v) between two groups. comm is an intercommunicator
 * (split_p < 0), or the lab's merged form: an intracommunicator whose ranks 0..split_p-1
 * are one group and the rest the other (collsched_inter_*_merged). counts == NULL:
 * allgather (recvcount elements per remote rank), else allgatherv. Runs a schedule, or the
 * MPI library's collective (intercommunicator) / a root gathering built from it (merged),
 * or refuses in strict mode; returns an MPI error code. */
typedef struct cs_inter_args {
    const char *name;
    const void *sendbuf;
    int sendcount;
    MPI_Datatype sendtype;
    void *recvbuf;
    int recvcount;
    const int *counts, *displs;
    MPI_Datatype recvtype;
} cs_inter_args;
int cs_inter_collective(const cs_inter_args *a, MPI_Comm comm, int split_p, cs_call_ctx *ctx);
/* What the last intergroup call on comm did; 0 if comm never had one (collsched_last_call
 * then answers from the intracommunicator state). */
int cs_inter_last_call(MPI_Comm comm, collsched_call_info *info);
/* inter_state.c: per two-group communicator state (attribute on it; collective on first
 * use): a private merged communicator, the communicators in each schedule numbering, the
 * intergroup schedules of the source, proven on first use. G0 is the merge's low group
 * (the merged form: ranks 0..split_p-1), G1 the other. */
typedef struct cs_inter cs_inter;
int cs_inter_state(MPI_Comm comm, int split_p, cs_inter **out);
/* What a call needs of a schedule: this rank's block and the remote group's blocks (one
 * size for allgather, counts[j] * esize for allgatherv). */
typedef struct cs_inter_need {
    int v;
    uint64_t own, remote;
    const int *counts;
    uint64_t esize;
} cs_inter_need;
/* The schedule a call runs: its header and this rank's section under the chosen group
 * mapping, the communicator in the schedule's numbering, this rank's group there. */
typedef struct cs_inter_choice {
    const cs_inter_header *h;
    const cs_inter_section *sec;
    MPI_Request *reqs;
    MPI_Comm comm;
    int role;                 /* CS_GROUP_A or CS_GROUP_B */
    const char *path;
} cs_inter_choice;
/* Chooses (allgather: a local decision every rank makes alike; allgatherv: the fit flags
 * of one rank of the other group, one message each way, ANDed with this rank's) and
 * proves on first use (collective). ch->h == NULL: fall back, the reason recorded.
 * Returns an MPI error code. */
int cs_inter_select(cs_inter *st, const cs_inter_need *need, cs_inter_choice *ch);
/* This call's tag on a file's communicator (ch->comm): calls never match each other's
 * schedule messages. */
int cs_inter_call_tag(MPI_Comm comm);
void cs_inter_note(cs_inter *st, const char *used, const char *reason);
const char *cs_inter_reason(const cs_inter *st);
int cs_inter_mine(const cs_inter *st);      /* 0: this rank is in G0; 1: in G1 */
int cs_inter_lrank(const cs_inter *st);
int cs_inter_lsize(const cs_inter *st);
int cs_inter_rsize(const cs_inter *st);
MPI_Comm cs_inter_merged(const cs_inter *st);
/* The merged form's fallback: this rank's group alone (created on first use, collective). */
int cs_inter_half(cs_inter *st, MPI_Comm *half);
/* Strict mode: says once per communicator (rank 0 of the merged one) what was refused. */
void cs_inter_refused(cs_inter *st, const char *call);

/* inter_exec.c: runs this rank's section (docs/semantics.md#intergroup-schedules): the
 * remote group's blocks straight into `base` (block j at displs[j] * esize, or j * block),
 * own-group ranges from own_src (this rank's block, contiguous) or a scratch copy of the
 * group's data, duplicates into scratch. Returns an MPI error code; nothing outlives it. */
typedef struct cs_inter_layout {
    char *base;
    const int *counts, *displs;
    uint64_t esize, block;
    const char *own_src;
} cs_inter_layout;
int cs_inter_execute(const cs_inter_choice *ch, const cs_inter_layout *lay);

/* comm_state.c: the configured schedule source (collsched_set_schedules, else
 * COLLSCHED_SCHEDULES), NULL if none. */
const char *cs_source_path(void);

/* comm_state.c: the runtime's messages, one line each on stderr prefixed "collsched: "
 * (cs_say), and snprintf that may truncate long paths on purpose (cs_text). */
void cs_text(char *dst, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void cs_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* comm_state.c: per-communicator state and schedule selection. */
typedef struct cs_comm cs_comm;
typedef struct cs_selection {
    const collsched_schedule *sched;  /* NULL: fall back */
    MPI_Comm comm;                    /* private communicator to run it on */
    MPI_Request *reqs;
    const cs_started *started;        /* receives posted ahead (cache_ahead.c), NULL none */
} cs_selection;

/* The communicator's state, created on first use (collective over comm). */
/* The names in a directory (not those starting with '.'), in strcmp (byte) order, however
 * many there are. Returns the count, or -1 (*names NULL) if the directory or memory fails;
 * the caller frees each name and the array. */
int cs_list_directory(const char *dir, char ***names);
int cs_comm_state(MPI_Comm comm, cs_comm **st);
/* Chooses the schedule for a call whose blocks have between lo and hi bytes. Collective
 * only on first use of a schedule (the ranks agree); returns an MPI error code;
 * sel->sched == NULL means "fall back", with the reason recorded for collsched_last_call. */
int cs_select(cs_comm *st, const cs_call_ctx *ctx, uint64_t lo, uint64_t hi, cs_selection *sel);
/* A cache's candidate k (cache.c), loaded and proven on first use (collective);
 * sel->sched == NULL if it was refused. Returns an MPI error code. */
int cs_candidate_use(cs_comm *st, int k, cs_selection *sel);
/* Posts candidate k's leading background receives if it is proven and can take them
 * (cache_ahead.c); nothing otherwise. */
int cs_candidate_ahead(cs_comm *st, int k);
/* Candidate k's schedule if it was proven (no loading; NULL otherwise), and its path. */
const collsched_schedule *cs_candidate_proven(const cs_comm *st, int k, const char **path);
/* The communicator's schedule cache, NULL if its source is none or disabled. */
cs_cache *cs_comm_cache(const cs_comm *st);
/* Loads, agrees on and proves one schedule file outside selection (collective). */
int cs_load_proven(cs_comm *st, const char *path, collsched_schedule **out, char *reason,
                   size_t len);
/* Records that `what` ran (for collsched_last_call). */
void cs_note_used(cs_comm *st, const char *what);
/* Records a fallback decided after selection (a piece too large, PAT's reason). */
void cs_note_fallback(cs_comm *st, const char *reason);
/* Strict mode: rank 0 says once per communicator that `call` (lo..hi bytes per rank) was
 * refused and why (the last reason recorded); collective over the communicator. */
void cs_note_refused(cs_comm *st, const char *call, uint64_t lo, uint64_t hi);
int cs_comm_rank(const cs_comm *st);
int cs_comm_size(const cs_comm *st);
MPI_Comm cs_comm_private(const cs_comm *st);
int cs_strict(void);
int cs_verbose(void);
int cs_source_configured(void);

/* cache_ahead.c: receive-ahead for a cache entry (docs/cache.md). */
typedef struct cs_ahead cs_ahead;
int cs_ahead_enabled(void);   /* COLLSCHED_AHEAD, on unless "0" */
/* After the entry's proof (collective over priv): an entry of one byte size run dataflow
 * gets its own communicator (a duplicate of priv) and this rank's staging; *out NULL for
 * any other entry (it runs on priv, nothing ahead). reqs: the entry's, one per op. */
int cs_ahead_open(MPI_Comm priv, const collsched_schedule *s, MPI_Request *reqs, cs_ahead **out);
MPI_Comm cs_ahead_comm(const cs_ahead *a);
/* Posts the leading background receives into staging (nothing if already out, none,
 * or COLLSCHED_AHEAD=0). */
int cs_ahead_post(cs_ahead *a);
/* The posted receives for the executor (then no longer this module's); NULL if none. */
const cs_started *cs_ahead_take(cs_ahead *a);
/* Withdraws what is posted (cancel and complete), frees the communicator and staging. */
void cs_ahead_close(cs_ahead *a, int mpi_usable);

/* pat.c: the PAT background engine's side of an allgather call. */
typedef struct cs_pat_job {
    struct pat_engine *engine;        /* the engine that claimed the call */
    const collsched_schedule *sched;  /* the iteration's schedule */
    MPI_Comm comm;                    /* the engine's communicator */
    MPI_Request *reqs;
    cs_started started;               /* its background part, as far as it went */
    char name[256];                   /* what runs (collsched_last_call) */
    char reason[256];                 /* why not (CS_PAT_FALL_BACK) */
} cs_pat_job;
enum { CS_PAT_NOT_MINE = 0, CS_PAT_RUN = 1, CS_PAT_FALL_BACK = 2 };
int cs_pat_claim(MPI_Comm comm, uint64_t bytes, cs_pat_job *job);
void cs_pat_done(const cs_pat_job *job);
int cs_pat_learning_tau(void);
int cs_pat_active(void);
void cs_pat_learned(double elapsed_s);

#endif
