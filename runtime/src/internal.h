/* internal.h - declarations shared by the runtime's modules (not installed). */
#ifndef COLLSCHED_INTERNAL_H
#define COLLSCHED_INTERNAL_H

#include "collsched_schedfile.h"

#include <stddef.h>
#include <stdint.h>

/* schedfile.c (no MPI) */
uint32_t cs_crc32(uint32_t crc, const void *buf, size_t len);
uint64_t cs_hash64(uint64_t h, const void *buf, size_t len); /* h = 0 starts a new hash */
int cs_read_header_file(const char *path, collsched_header *h, char *err, size_t errlen);

/* First byte of segment s of a block of c bytes cut into nseg segments:
 * floor(s * c / nseg) without 64-bit overflow (c = q * nseg + r). */
static inline uint64_t cs_seg_lo(uint64_t s, uint64_t c, uint64_t nseg)
{
    return s * (c / nseg) + (s * (c % nseg)) / nseg;
}

#endif
