/* compact_bdr.c - the compact generator of BDR and BSLB from their arrival pattern (algorithms/bdr.py, bslb.py).
 * Not served yet: every description with this code is refused in one line. */
#include "compact_emit.h"

int cs_compact_bdr_check(const cs_compact_desc *d, char *err, size_t errlen)
{
    return cs_compact_fail(err, errlen, "compact description: algorithm: code %u has no "
                           "generator in this build", d->algorithm);
}

void cs_compact_bdr_generate(cs_emitter *e, const cs_compact_desc *d, uint64_t rank)
{
    (void)e, (void)d, (void)rank;
}
