/* collsched_schedfile.h - the .sched file parser of libcollsched (no MPI needed).
 * Format: docs/schedule-format.md. Included by collsched.h. */
#ifndef COLLSCHED_SCHEDFILE_H
#define COLLSCHED_SCHEDFILE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Exported from libcollsched (built with -fvisibility=hidden); also in collsched.h. */
#ifndef COLLSCHED_API
#  if defined(__GNUC__) && __GNUC__ >= 4
#    define COLLSCHED_API __attribute__((visibility("default")))
#  else
#    define COLLSCHED_API
#  endif
#endif

/* ---- Schedule files (no MPI needed): parse and validate one rank's section. ---- */

typedef struct collsched_header {
    uint16_t version_major, version_minor;
    uint32_t collective;      /* 1 = allgather */
    uint32_t nranks, nseg, flags;
    uint64_t bytes_min, bytes_max;
    char algorithm[17], compiler_version[17];
    uint8_t input_hash[32];
    uint64_t total_ops;
    uint32_t index_crc32;
} collsched_header;

enum { COLLSCHED_SEND = 0, COLLSCHED_RECV = 1 };
/* Header flags (collsched_header.flags). SERIAL: run one send and one receive at a time
 * (docs/semantics.md, "Serial execution"); the schedule is proven for that. */
enum { COLLSCHED_FLAG_FULL_DUPLEX = 1, COLLSCHED_FLAG_BACKGROUND = 2, COLLSCHED_FLAG_SERIAL = 4 };

typedef struct collsched_op {
    uint32_t peer, origin, segment;
    int32_t dep;              /* send of a forwarded piece: index of the recv that delivers it; else -1 */
    int32_t prev;             /* FIFO-marked send: the head of the previous send message to the same
                                 peer (its request's index; FIFO per link); else -1 */
    uint8_t kind, phase;
    uint8_t fifo;             /* send: wait for the previous send to the same peer first */
    uint8_t join;             /* 1: carries one more piece of the message the op before it
                                 started (multi-piece messages, docs/semantics.md) */
} collsched_op;

typedef struct collsched_schedule {
    collsched_header hdr;
    uint32_t rank;            /* whose section this is */
    uint32_t nops, nrecv, nsend;
    collsched_op *ops;
    uint64_t hash;            /* hash of header + index: equal on every rank that read the same file */
} collsched_schedule;

/* Return codes of the parser. */
enum {
    COLLSCHED_OK = 0,
    COLLSCHED_EIO,        /* cannot open/read the file */
    COLLSCHED_EFORMAT,    /* malformed, corrupt or hostile file */
    COLLSCHED_EMATCH,     /* well formed, but not for this call (collective, size, rank, bytes) */
    COLLSCHED_ENOMEM
};

/* Parse and check the 128-byte header. `err` receives one line "FILE: FIELD: expected ...". */
COLLSCHED_API int collsched_parse_header(const void *buf, size_t len, uint64_t file_size, const char *name,
                           collsched_header *hdr, char *err, size_t errlen);

/* Load rank `rank`'s section of a schedule for a communicator of `nranks` ranks, reading
 * only the header, the index and that section. On success *out is owned by the caller
 * (collsched_schedule_free). */
COLLSCHED_API int collsched_load(const char *path, uint32_t nranks, uint32_t rank, collsched_schedule **out,
                   char *err, size_t errlen);
/* The same from a file image in memory (used by the fuzz target and tests). */
COLLSCHED_API int collsched_load_memory(const void *data, size_t len, const char *name, uint32_t nranks,
                          uint32_t rank, collsched_schedule **out, char *err, size_t errlen);
COLLSCHED_API void collsched_schedule_free(collsched_schedule *s);

#ifdef __cplusplus
}
#endif
#endif /* COLLSCHED_SCHEDFILE_H */
