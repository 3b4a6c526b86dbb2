/* crc32.c - CRC-32 (crc32.h), on its own so that the compact generators can link it alone. */
#include "crc32.h"

#include <pthread.h>

/* CRC-32 as zlib computes it (reflected IEEE 802.3 polynomial). The table is built once
 * per process (pthread_once: threads may load schedules at the same time, and two
 * threads filling it together was a data race, even if they wrote the same values). */
static uint32_t crc_table[256];

static void crc_table_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
}

uint32_t cs_crc32(uint32_t crc, const void *buf, size_t len)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    const uint32_t *table = crc_table;
    pthread_once(&once, crc_table_init);
    const uint8_t *p = buf;
    crc = ~crc;
    while (len--) crc = table[(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

