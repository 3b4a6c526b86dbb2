/* arrivals.c - COLLSCHED_ARRIVALS: the arrival trace (docs/trace-format.md).
 * (Being written: tracing is off until it lands.) */
#include "runtime.h"

int cs_arrivals_enabled(void) { return 0; }
void cs_arrivals_call(MPI_Comm comm, const cs_call_ctx *ctx, double exit_time)
{
    (void)comm; (void)ctx; (void)exit_time;
}
int cs_arrivals_finalize(void) { return MPI_SUCCESS; }
