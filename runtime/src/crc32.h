/* crc32.h - CRC-32 as zlib computes it, shared by the schedule readers and the compact
 * generators (which build without the rest of the runtime: compact/native.py). */
#ifndef COLLSCHED_CRC32_H
#define COLLSCHED_CRC32_H

#include <stddef.h>
#include <stdint.h>

uint32_t cs_crc32(uint32_t crc, const void *buf, size_t len);

#endif
