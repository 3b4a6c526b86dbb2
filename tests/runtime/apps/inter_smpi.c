/* collsched_inter_allgather(v)_merged under SimGrid SMPI (tests/runtime/test_inter_mpi.py):
 *
 *   inter_smpi P (V A B)...
 *
 * MPI_COMM_WORLD split at P: ranks 0..P-1 are group A, the rest B. Each triple is one case
 * of three calls: V 0 = allgather, 1 = allgatherv; A and B the block bytes of each group (a
 * comma list, or one value for every rank). Every byte each rank receives is checked
 * against what the remote rank sent (SMPI has no intercommunicator to compare with); rank 0
 * prints "inter_smpi: case N data_ok D used U" (U: a schedule ran in every call). The
 * schedules come from COLLSCHED_SCHEDULES. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collsched.h"

static void sizes(const char *s, int n, int *v)
{
    char *end;
    for (int i = 0; i < n; i++) {
        v[i] = (int)strtol(s, &end, 10);
        if (*end == ',') s = end + 1;
    }
}

static unsigned char value(int group, int rank, long k, int iter)
{
    return (unsigned char)((group * 101 + rank * 37 + k * 7 + iter * 13 + 1) & 0xFF);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int wrank, wsize;
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    int p = atoi(argv[1]), q = wsize - p, failed = 0;
    int mine = wrank >= p, lrank = mine ? wrank - p : wrank, rsize = mine ? p : q;
    for (int c = 0; 2 + 3 * c + 2 < argc; c++) {
        int v = atoi(argv[2 + 3 * c]), a[64], b[64], displs[64];
        sizes(argv[3 + 3 * c], p, a);
        sizes(argv[4 + 3 * c], q, b);
        int *lsz = mine ? b : a, *rsz = mine ? a : b;
        long total = 0;
        for (int j = 0; j < rsize; j++) displs[j] = (int)total, total += rsz[j];
        unsigned char *send = malloc((size_t)lsz[lrank] + 1), *recv = malloc((size_t)total + 1);
        int bad = 0, used = 1;
        for (int it = 0; it < 3; it++) {
            for (long k = 0; k < lsz[lrank]; k++) send[k] = value(mine, lrank, k, it);
            memset(recv, 0xA5, (size_t)total);
            int rc = v ? collsched_inter_allgatherv_merged(send, lsz[lrank], MPI_BYTE, recv, rsz, displs, MPI_BYTE,
                                                           MPI_COMM_WORLD, p)
                       : collsched_inter_allgather_merged(send, lsz[0], MPI_BYTE, recv, rsz[0], MPI_BYTE,
                                                          MPI_COMM_WORLD, p);
            bad += rc != MPI_SUCCESS;
            for (int j = 0; j < rsize; j++)
                for (long k = 0; k < rsz[j]; k++) bad += recv[displs[j] + k] != value(!mine, j, k, it);
            collsched_call_info info;
            used &= (collsched_last_call(MPI_COMM_WORLD, &info) == MPI_SUCCESS) && info.used_schedule;
        }
        int mine2[2] = { bad, !used }, all[2];
        MPI_Allreduce(mine2, all, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        if (wrank == 0) printf("inter_smpi: case %d data_ok %d used %d\n", c, all[0] == 0, all[1] == 0);
        failed |= all[0] != 0;
        free(send);
        free(recv);
    }
    MPI_Finalize();
    return failed;
}
