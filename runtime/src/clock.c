/* clock.c - one clock for a communicator's ranks: each rank's offset to rank 0's
 * PMPI_Wtime, estimated by ping-pong.
 *
 * Rank 0 serves the other ranks one after another; each sends CLOCK_ROUNDS requests,
 * rank 0 answers each with its clock, and the rank keeps the exchange of the shortest
 * round trip: offset = t_rank0 - (t_send + t_recv) / 2, off by at most half that round
 * trip (the two directions' latencies may differ). The traffic runs on a duplicate of the
 * communicator, so it can never match the application's messages, and uses PMPI only.
 */
#include "runtime.h"

#define CLOCK_ROUNDS 16
#define CLOCK_TAG 4

int cs_clock_estimate(MPI_Comm comm, double *offset, double *at, double *rtt)
{
    MPI_Comm c;
    int rank, size, rc = PMPI_Comm_dup(comm, &c);
    *offset = 0.0;
    *rtt = 0.0;
    *at = PMPI_Wtime();
    if (rc != MPI_SUCCESS) return rc;
    PMPI_Comm_rank(c, &rank);
    PMPI_Comm_size(c, &size);
    double best = -1.0, t0, ts, tr;
    for (int r = 1; r < size && rc == MPI_SUCCESS; r++) {
        for (int k = 0; k < CLOCK_ROUNDS && rc == MPI_SUCCESS; k++) {
            if (rank == 0) {
                rc = PMPI_Recv(NULL, 0, MPI_BYTE, r, CLOCK_TAG, c, MPI_STATUS_IGNORE);
                t0 = PMPI_Wtime();
                if (rc == MPI_SUCCESS) rc = PMPI_Send(&t0, 1, MPI_DOUBLE, r, CLOCK_TAG, c);
            } else if (rank == r) {
                ts = PMPI_Wtime();
                rc = PMPI_Send(NULL, 0, MPI_BYTE, 0, CLOCK_TAG, c);
                if (rc == MPI_SUCCESS) rc = PMPI_Recv(&t0, 1, MPI_DOUBLE, 0, CLOCK_TAG, c, MPI_STATUS_IGNORE);
                tr = PMPI_Wtime();
                if (rc == MPI_SUCCESS && (best < 0 || tr - ts < best)) {
                    best = tr - ts;
                    *offset = t0 - (ts + tr) / 2;
                    *at = (ts + tr) / 2;
                    *rtt = best;
                }
            }
        }
    }
    PMPI_Comm_free(&c);
    return rc;
}

int cs_clock_offset(MPI_Comm comm, double *offset)
{
    int *global = NULL, flag = 0;
    double at, rtt;
    int rc = cs_clock_estimate(comm, offset, &at, &rtt);
    PMPI_Comm_get_attr(MPI_COMM_WORLD, MPI_WTIME_IS_GLOBAL, &global, &flag);
    if (flag && global && *global) *offset = 0.0;
    return rc;
}
