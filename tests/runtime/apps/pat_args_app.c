/* Every PAT API argument the engine must refuse, with the code it must refuse it with,
 * then one valid iteration whose allgather is checked byte for byte (the refusals left
 * the engine working). Prints "pat_args_app: OK" on rank 0, or one line per wrong answer
 * and exit 1. Run it with any thread level (argv[1] = "multiple" asks for
 * MPI_THREAD_MULTIPLE: the progress-thread driver). */
#include <collsched.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures, rank;

static void expect(const char *call, int got, int want)
{
    if (got == want) return;
    failures++;
    fprintf(stderr, "pat_args_app (rank %d): %s returned %d, expected %d\n", rank, call, got, want);
}

int main(int argc, char **argv)
{
    int provided, size;
    int want = argc > 1 && !strcmp(argv[1], "multiple") ? MPI_THREAD_MULTIPLE : MPI_THREAD_SINGLE;
    MPI_Init_thread(&argc, &argv, want, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    expect("PAT_Edge before PAT_Init", PAT_Edge(50), MPI_ERR_OTHER);
    expect("PAT_Init", PAT_Init(), MPI_SUCCESS);

    char name[64];
    memset(name, 'x', 40);
    name[40] = 0;
    expect("PAT_UseAlg(NULL)", PAT_UseAlg(NULL), MPI_ERR_ARG);
    expect("PAT_UseAlg(\"\")", PAT_UseAlg(""), MPI_ERR_ARG);
    expect("PAT_UseAlg(40 chars)", PAT_UseAlg(name), MPI_ERR_ARG);

    expect("PAT_Declare(MPI_COMM_NULL)", PAT_Declare(MPI_COMM_NULL, 64, 1e-4), MPI_ERR_COMM);
    expect("PAT_Declare(MPI_COMM_SELF)", PAT_Declare(MPI_COMM_SELF, 64, 1e-4), size > 1 ? MPI_ERR_COMM : MPI_SUCCESS);
    expect("PAT_Declare(bytes -1)", PAT_Declare(MPI_COMM_WORLD, -1, 1e-4), MPI_ERR_ARG);
    const double bad_tau[] = { NAN, INFINITY, -INFINITY, 1e-300, 5e-10, 1e4, 1e300 };
    for (size_t i = 0; i < sizeof bad_tau / sizeof *bad_tau; i++) {
        char what[64];
        snprintf(what, sizeof what, "PAT_Declare(tau %g)", bad_tau[i]);
        expect(what, PAT_Declare(MPI_COMM_WORLD, 64, bad_tau[i]), MPI_ERR_ARG);
    }

    const double bad_percent[] = { NAN, INFINITY, -INFINITY, 0, -5, 1e-300, 0.005, 100.5, 1e300 };
    const double bad_sleep[] = { NAN, INFINITY, -INFINITY, -1, -1e-9, 2e6 };
    expect("PAT_ProcessingStart", PAT_ProcessingStart(), MPI_SUCCESS);
    for (size_t i = 0; i < sizeof bad_percent / sizeof *bad_percent; i++) {
        char what[64];
        snprintf(what, sizeof what, "PAT_Edge(%g)", bad_percent[i]);
        expect(what, PAT_Edge(bad_percent[i]), MPI_ERR_ARG);
    }
    for (size_t i = 0; i < sizeof bad_sleep / sizeof *bad_sleep; i++) {
        char what[64];
        snprintf(what, sizeof what, "PAT_Sleep(%g)", bad_sleep[i]);
        expect(what, PAT_Sleep(bad_sleep[i]), MPI_ERR_ARG);
    }
    expect("PAT_ProcessingEnd", PAT_ProcessingEnd(), MPI_SUCCESS);

    /* After all that, a valid iteration still runs the engine and delivers every byte. */
    enum { BYTES = 4099 };
    expect("PAT_UseAlg(bdr)", PAT_UseAlg("bdr"), MPI_SUCCESS);
    expect("PAT_Declare(valid)", PAT_Declare(MPI_COMM_WORLD, BYTES, 2e-4), MPI_SUCCESS);
    unsigned char *send = malloc(BYTES), *got = malloc((size_t)BYTES * size), *ref = malloc((size_t)BYTES * size);
    for (int it = 0; it < 3; it++) {
        for (int k = 0; k < BYTES; k++) send[k] = (unsigned char)(rank * 31 + k * 7 + it);
        memset(got, 0, (size_t)BYTES * size);
        expect("PAT_ProcessingStart", PAT_ProcessingStart(), MPI_SUCCESS);
        expect("PAT_Sleep(0.001 * rank)", PAT_Sleep(0.001 * rank), MPI_SUCCESS);
        expect("PAT_Edge(50)", PAT_Edge(50), MPI_SUCCESS);
        expect("PAT_Edge(0.01)", PAT_Edge(0.01), MPI_SUCCESS); /* the smallest; a second edge is ignored */
        expect("PAT_Sleep(0)", PAT_Sleep(0), MPI_SUCCESS);
        expect("PAT_ProcessingEnd", PAT_ProcessingEnd(), MPI_SUCCESS);
        expect("collsched_allgather", collsched_allgather(send, BYTES, MPI_BYTE, got, BYTES, MPI_BYTE, MPI_COMM_WORLD),
               MPI_SUCCESS);
        PMPI_Allgather(send, BYTES, MPI_BYTE, ref, BYTES, MPI_BYTE, MPI_COMM_WORLD);
        if (memcmp(got, ref, (size_t)BYTES * size) != 0) expect("allgather bytes", 1, 0);
    }
    free(send);
    free(got);
    free(ref);
    expect("PAT_Finalize", PAT_Finalize(), MPI_SUCCESS);
    MPI_Allreduce(MPI_IN_PLACE, &failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("pat_args_app: %s (%d wrong)\n", failures ? "FAIL" : "OK", failures);
    MPI_Finalize();
    return failures != 0;
}
