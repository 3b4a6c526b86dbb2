/* preload_fortran.c - the preload library's Fortran entry points (linked only into
 * libcollsched-preload.so). Open MPI's Fortran bindings (libmpi_mpifh for mpif.h and
 * `use mpi`, libmpi_usempif08 for `use mpi_f08`) convert their arguments and call
 * PMPI_Allgather & co. directly, so the C wrappers of preload.c never see a Fortran
 * program's calls. These functions take the Fortran symbols' place instead: each converts
 * the handles (PMPI_Comm_f2c, PMPI_Type_f2c) and the sentinels MPI_IN_PLACE and
 * MPI_BOTTOM as Open MPI's own binding does, calls the C path of the C wrappers
 * (cs_preload_*: the same decision, selection and fallback) and stores the result in
 * ierror when the program passed one (mpi_f08's ierror is OPTIONAL: absent, it is a null
 * pointer and nothing is written).
 *
 * Names: every name under which Open MPI 4.1 exports these routines' Fortran bindings:
 * mpi_allgather, mpi_allgather_, mpi_allgather__, MPI_ALLGATHER, MPI_Allgather_f,
 * MPI_Allgather_f08 (libmpi_mpifh: one function under six names, arguments by reference,
 * ierror last) and mpi_allgather_f08_ (libmpi_usempif08: the same arguments - buffers as
 * addresses, TYPE(MPI_Comm)/TYPE(MPI_Datatype) by reference, i.e. a pointer to their
 * INTEGER MPI_VAL - with ierror optional). Their pmpi_ / PMPI_ names are left alone, as
 * are ompi_allgather_f & co. (Open MPI's internal implementation, which its PMPI_*_f08
 * routines call too): a program that calls the profiling interface bypasses us, as in C.
 * docs/runtime.md, "Fortran". */
#include "preload.h"

#ifdef OPEN_MPI /* the names and sentinels below are Open MPI's */

_Static_assert(sizeof(MPI_Fint) == sizeof(int), "MPI_Fint is not int: recvcounts/displs need converting");

/* Fortran's MPI_IN_PLACE and MPI_BOTTOM are common blocks; a program passes their address.
 * libmpi defines them (the Fortran libraries too: the dynamic linker makes every
 * reference, the program's and ours, one object). Weak: absent, their address is null
 * and nothing is converted. */
extern MPI_Fint mpi_fortran_in_place_ __attribute__((weak));
extern MPI_Fint mpi_fortran_bottom_ __attribute__((weak));

static const void *send_buffer(const void *buf)
{
    if (&mpi_fortran_in_place_ && buf == (const void *)&mpi_fortran_in_place_) return MPI_IN_PLACE;
    if (&mpi_fortran_bottom_ && buf == (const void *)&mpi_fortran_bottom_) return MPI_BOTTOM;
    return buf;
}

static void *recv_buffer(void *buf)
{
    if (&mpi_fortran_bottom_ && buf == (void *)&mpi_fortran_bottom_) return MPI_BOTTOM;
    return buf;
}

static void set_ierror(MPI_Fint *ierror, int rc)
{
    if (ierror) *ierror = (MPI_Fint)rc;
}

/* The implementations (hidden); the exported names below are aliases of them, so that
 * __builtin_return_address(0) is the Fortran program's call site. */
void cs_fortran_allgather(const void *sendbuf, const MPI_Fint *sendcount, const MPI_Fint *sendtype,
                          void *recvbuf, const MPI_Fint *recvcount, const MPI_Fint *recvtype,
                          const MPI_Fint *comm, MPI_Fint *ierror)
{
    int rc = cs_preload_allgather(__builtin_return_address(0), send_buffer(sendbuf), (int)*sendcount,
                                  PMPI_Type_f2c(*sendtype), recv_buffer(recvbuf), (int)*recvcount,
                                  PMPI_Type_f2c(*recvtype), PMPI_Comm_f2c(*comm));
    set_ierror(ierror, rc);
}

void cs_fortran_allgatherv(const void *sendbuf, const MPI_Fint *sendcount, const MPI_Fint *sendtype,
                           void *recvbuf, const MPI_Fint *recvcounts, const MPI_Fint *displs,
                           const MPI_Fint *recvtype, const MPI_Fint *comm, MPI_Fint *ierror)
{
    int rc = cs_preload_allgatherv(__builtin_return_address(0), send_buffer(sendbuf), (int)*sendcount,
                                   PMPI_Type_f2c(*sendtype), recv_buffer(recvbuf),
                                   (const int *)recvcounts, (const int *)displs,
                                   PMPI_Type_f2c(*recvtype), PMPI_Comm_f2c(*comm));
    set_ierror(ierror, rc);
}

/* Fortran has no argc/argv to give: Open MPI's binding passes 0 and NULL, so do we. */
void cs_fortran_init(MPI_Fint *ierror)
{
    int argc = 0;
    char **argv = NULL;
    set_ierror(ierror, cs_preload_init(&argc, &argv));
}

void cs_fortran_init_thread(const MPI_Fint *required, MPI_Fint *provided, MPI_Fint *ierror)
{
    int argc = 0, got = MPI_THREAD_SINGLE;
    char **argv = NULL;
    int rc = cs_preload_init_thread(&argc, &argv, (int)*required, &got);
    if (provided) *provided = (MPI_Fint)got;
    set_ierror(ierror, rc);
}

void cs_fortran_finalize(MPI_Fint *ierror)
{
    set_ierror(ierror, cs_preload_finalize());
}

#define CS_FORTRAN_ALIAS(name, impl) \
    extern __typeof__(impl) name __attribute__((alias(#impl), visibility("default")));
/* lower: mpi_allgather; upper: MPI_ALLGATHER; camel: MPI_Allgather */
#define CS_FORTRAN_NAMES(impl, lower, upper, camel) \
    CS_FORTRAN_ALIAS(lower, impl) CS_FORTRAN_ALIAS(lower##_, impl) CS_FORTRAN_ALIAS(lower##__, impl) \
    CS_FORTRAN_ALIAS(upper, impl) CS_FORTRAN_ALIAS(camel##_f, impl) CS_FORTRAN_ALIAS(camel##_f08, impl) \
    CS_FORTRAN_ALIAS(lower##_f08_, impl)

CS_FORTRAN_NAMES(cs_fortran_allgather, mpi_allgather, MPI_ALLGATHER, MPI_Allgather)
CS_FORTRAN_NAMES(cs_fortran_allgatherv, mpi_allgatherv, MPI_ALLGATHERV, MPI_Allgatherv)
CS_FORTRAN_NAMES(cs_fortran_init, mpi_init, MPI_INIT, MPI_Init)
CS_FORTRAN_NAMES(cs_fortran_init_thread, mpi_init_thread, MPI_INIT_THREAD, MPI_Init_thread)
CS_FORTRAN_NAMES(cs_fortran_finalize, mpi_finalize, MPI_FINALIZE, MPI_Finalize)

#endif /* OPEN_MPI */
