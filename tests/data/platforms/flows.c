/* flows: timed concurrent messages, for the platform tests (tests/lab/test_platform_xml.py).
 *
 *   flows BYTES ROUND [ROUND ...]     ROUND = SRC-DST[,SRC-DST...]
 *
 * Per round, every DST posts its receive, all ranks meet at a barrier, rank 0 names a start
 * time one second ahead (a barrier over a wide-area network lets ranks go at different
 * times), every SRC sleeps until then and sends BYTES to its DST: all flows start at once.
 * Rank 0 prints one line per round: for each pair, the time from its send's start (the
 * wake-up, within a microsecond of the start) to its receive's end (MPI_Wtime: SimGrid's clock under SMPI, where usleep is simulated). A rank
 * may be in several pairs of a round only as the sender of one and receiver of another.
 * Written for this project's tests; built with smpicc by the test. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_PAIRS 256

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 3) {
        if (rank == 0) fprintf(stderr, "usage: flows BYTES ROUND [ROUND ...]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    long bytes = atol(argv[1]);
    char *sbuf = calloc((size_t)bytes + 1, 1), *rbuf = calloc((size_t)bytes + 1, 1);
    for (int r = 2; r < argc; r++) {
        int src[MAX_PAIRS], dst[MAX_PAIRS], n = 0;
        char *text = strdup(argv[r]);
        for (char *tok = strtok(text, ","); tok && n < MAX_PAIRS; tok = strtok(NULL, ",")) {
            if (sscanf(tok, "%d-%d", &src[n], &dst[n]) != 2 || src[n] < 0 || dst[n] < 0 ||
                src[n] >= size || dst[n] >= size) {
                if (rank == 0) fprintf(stderr, "flows: bad pair %s\n", tok);
                MPI_Abort(MPI_COMM_WORLD, 2);
            }
            n++;
        }
        free(text);
        MPI_Request req = MPI_REQUEST_NULL, sreq = MPI_REQUEST_NULL;
        int recv_of = -1, send_of = -1;
        for (int k = 0; k < n; k++) {
            if (dst[k] == rank) recv_of = k;
            if (src[k] == rank) send_of = k;
        }
        if (recv_of >= 0) MPI_Irecv(rbuf, (int)bytes, MPI_BYTE, src[recv_of], r, MPI_COMM_WORLD, &req);
        MPI_Barrier(MPI_COMM_WORLD);
        double start = MPI_Wtime() + 1.0;
        MPI_Bcast(&start, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        double times[2] = {-1.0, -1.0};  /* my send's start, my receive's end */
        if (send_of >= 0) {
            double now = MPI_Wtime();
            if (now < start) usleep((useconds_t)((start - now) * 1e6 + 0.5));
            times[0] = MPI_Wtime();
            MPI_Isend(sbuf, (int)bytes, MPI_BYTE, dst[send_of], r, MPI_COMM_WORLD, &sreq);
        }
        if (recv_of >= 0) {
            MPI_Wait(&req, MPI_STATUS_IGNORE);
            times[1] = MPI_Wtime();
        }
        MPI_Wait(&sreq, MPI_STATUS_IGNORE);
        double *all = rank == 0 ? malloc(sizeof(double) * 2 * (size_t)size) : NULL;
        MPI_Gather(times, 2, MPI_DOUBLE, all, 2, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            printf("round %d:", r - 2);
            for (int k = 0; k < n; k++) printf(" %.12g", all[2 * dst[k] + 1] - all[2 * src[k]]);
            printf("\n");
            free(all);
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }
    free(sbuf);
    free(rbuf);
    MPI_Finalize();
    return 0;
}
