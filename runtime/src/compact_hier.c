/* compact_hier.c - the compact generator of the hierarchical composition over sites (algorithms/hier.py).
 * Not served yet: every description with this code is refused in one line. */
#include "compact_emit.h"

int cs_compact_hier_check(const cs_compact_desc *d, char *err, size_t errlen)
{
    return cs_compact_fail(err, errlen, "compact description: algorithm: code %u has no "
                           "generator in this build", d->algorithm);
}

void cs_compact_hier_generate(cs_emitter *e, const cs_compact_desc *d, uint64_t rank)
{
    (void)e, (void)d, (void)rank;
}
