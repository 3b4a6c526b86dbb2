! allgather_check.F90 - a plain MPI program in Fortran, for the preload library's Fortran
! entry points (tests/runtime/test_fortran.py, docs/runtime.md "Fortran"). One source,
! built by runtime/runtime.mk for each of Open MPI's Fortran bindings:
! -DBINDING_mpif (include 'mpif.h'), -DBINDING_mpi (use mpi), -DBINDING_f08 (use mpi_f08).
!
!   collsched-fortran-B [check|check-thread [COUNT]]
!       MPI_Init (check-thread: MPI_Init_thread, MPI_THREAD_FUNNELED), then on
!       MPI_COMM_WORLD MPI_Allgather (MPI_INTEGER) and MPI_Allgatherv (MPI_DOUBLE_PRECISION,
!       blocks of COUNT + mod(rank, 3) elements, one element of gap between them), each
!       normal and with MPI_IN_PLACE; with use mpi_f08 twice more without ierror (an
!       OPTIONAL argument). COUNT elements per rank, default 37. Every element received is
!       compared with the value that identifies (rank, index), computed here; the elements
!       around and between the blocks and the send buffer must be untouched, ierror
!       MPI_SUCCESS. Rank 0 prints "collsched-fortran B: ranks P calls N OK" (else FAILED,
!       after a line from each rank that found something wrong, naming the first).
!   collsched-fortran-B return
!       MPI_ERRORS_RETURN on MPI_COMM_WORLD; MPI_Allgather and MPI_Allgatherv must return
!       an error of class MPI_ERR_OTHER (strict mode refusing them; f08: and return
!       without ierror too). Rank 0 prints "collsched-fortran B: refused OK" (or FAILED).
!   collsched-fortran-B fatal
!       the default error handler: the job must abort in MPI_Allgather; prints
!       "collsched-fortran B: returned" if it does not.
program allgather_check
#if defined(BINDING_f08)
  use mpi_f08
#elif defined(BINDING_mpi)
  use mpi
#endif
  implicit none
#if defined(BINDING_mpif)
  include 'mpif.h'
#endif
#if defined(BINDING_f08)
  character(len=*), parameter :: binding = 'f08'
  type(MPI_Comm) :: comm
#elif defined(BINDING_mpi)
  character(len=*), parameter :: binding = 'mpi'
  integer :: comm
#else
  character(len=*), parameter :: binding = 'mpif'
  integer :: comm
#endif
  integer, parameter :: GUARD = 3, POISON = -777
  double precision, parameter :: DPOISON = -777.5d0
  integer :: rank, nranks, ierr, count, ncalls, provided
  logical :: ok, all_ok
  character(len=32) :: mode, arg

  mode = 'check'
  count = 37
  if (command_argument_count() >= 1) call get_command_argument(1, mode)
  if (command_argument_count() >= 2) then
     call get_command_argument(2, arg)
     read (arg, *) count
  end if
  if (trim(mode) == 'check-thread') then
     call MPI_Init_thread(MPI_THREAD_FUNNELED, provided, ierr)
     if (provided < MPI_THREAD_SINGLE .or. provided > MPI_THREAD_MULTIPLE) ierr = -1
  else
     call MPI_Init(ierr)
  end if
  if (ierr /= MPI_SUCCESS) stop 2
  comm = MPI_COMM_WORLD
  call MPI_Comm_rank(comm, rank, ierr)
  call MPI_Comm_size(comm, nranks, ierr)
  ok = .true.
  ncalls = 0

  select case (trim(mode))
  case ('check', 'check-thread')
     call gather_ints(.false., .true., 'allgather')
     call gather_ints(.true., .true., 'allgather in place')
     call gatherv_doubles(.false., .true., 'allgatherv')
     call gatherv_doubles(.true., .true., 'allgatherv in place')
#if defined(BINDING_f08)
     call gather_ints(.false., .false., 'allgather without ierror')
     call gatherv_doubles(.true., .false., 'allgatherv in place without ierror')
#endif
     call MPI_Allreduce(ok, all_ok, 1, MPI_LOGICAL, MPI_LAND, comm, ierr)
     if (rank == 0) then
        if (all_ok) then
           write (*, '("collsched-fortran ", a, ": ranks ", i0, " calls ", i0, " OK")') binding, nranks, ncalls
        else
           write (*, '("collsched-fortran ", a, ": ranks ", i0, " calls ", i0, " FAILED")') binding, nranks, ncalls
        end if
     end if
  case ('return')
     call MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN, ierr)
     call refused()
     call MPI_Allreduce(ok, all_ok, 1, MPI_LOGICAL, MPI_LAND, comm, ierr)
     if (rank == 0) then
        if (all_ok) then
           write (*, '("collsched-fortran ", a, ": refused OK")') binding
        else
           write (*, '("collsched-fortran ", a, ": refused FAILED")') binding
        end if
     end if
  case ('fatal')
     call refused()
     write (*, '("collsched-fortran ", a, ": returned (rank ", i0, ")")') binding, rank
  case default
     if (rank == 0) write (*, '("collsched-fortran: unknown mode ", a)') trim(mode)
     ok = .false.
  end select
  call MPI_Finalize(ierr)
  if (.not. ok) stop 1

contains

  ! The value of element i (1-based) of rank o's block: every (rank, index) its own.
  integer function ival(o, i)
    integer, intent(in) :: o, i
    ival = 1000003 * o + i + 17
  end function ival

  double precision function dval(o, i)
    integer, intent(in) :: o, i
    dval = 1.0d6 * o + i + 0.25d0
  end function dval

  subroutine fail(what, o, i)
    character(len=*), intent(in) :: what
    integer, intent(in) :: o, i
    if (ok) write (*, '("collsched-fortran ", a, ": rank ", i0, ": ", a, ": wrong at rank ", i0, " index ", i0)') &
         binding, rank, what, o, i
    ok = .false.
  end subroutine fail

  subroutine gather_ints(in_place, with_ierror, what)
    logical, intent(in) :: in_place, with_ierror
    character(len=*), intent(in) :: what
    integer, allocatable :: send(:), recv(:)
    integer :: i, o, err
    allocate (send(count), recv(2 * GUARD + count * nranks))  ! on the heap: COUNT may be large
    do i = 1, count
       send(i) = ival(rank, i)
    end do
    recv = POISON
    err = -12345
    ncalls = ncalls + 1
    if (in_place) then
       recv(GUARD + rank * count + 1:GUARD + (rank + 1) * count) = send
       if (with_ierror) then
          call MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv(GUARD + 1), count, MPI_INTEGER, comm, err)
#if defined(BINDING_f08)
       else
          call MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv(GUARD + 1), count, MPI_INTEGER, comm)
#endif
       end if
    else
       if (with_ierror) then
          call MPI_Allgather(send, count, MPI_INTEGER, recv(GUARD + 1), count, MPI_INTEGER, comm, err)
#if defined(BINDING_f08)
       else
          call MPI_Allgather(send, count, MPI_INTEGER, recv(GUARD + 1), count, MPI_INTEGER, comm)
#endif
       end if
    end if
    if (with_ierror .and. err /= MPI_SUCCESS) call fail(what // ': ierror', rank, err)
    if (.not. with_ierror .and. err /= -12345) call fail(what // ': ierror written', rank, err)
    do i = 1, count
       if (send(i) /= ival(rank, i)) call fail(what // ': send buffer', rank, i)
    end do
    do i = 1, GUARD
       if (recv(i) /= POISON) call fail(what // ': before the buffer', -1, i)
       if (recv(GUARD + count * nranks + i) /= POISON) call fail(what // ': after the buffer', -1, i)
    end do
    do o = 0, nranks - 1
       do i = 1, count
          if (recv(GUARD + o * count + i) /= ival(o, i)) call fail(what, o, i)
       end do
    end do
    deallocate (send, recv)
  end subroutine gather_ints

  subroutine gatherv_doubles(in_place, with_ierror, what)
    logical, intent(in) :: in_place, with_ierror
    character(len=*), intent(in) :: what
    integer :: counts(0:nranks - 1), displs(0:nranks - 1), o, i, err, total
    double precision, allocatable :: send(:), recv(:)
    total = 0
    do o = 0, nranks - 1
       counts(o) = count + mod(o, 3)
       displs(o) = total
       total = total + counts(o) + 1  ! one element of gap after each block
    end do
    allocate (send(counts(rank)), recv(2 * GUARD + total))
    do i = 1, counts(rank)
       send(i) = dval(rank, i)
    end do
    recv = DPOISON
    err = -12345
    ncalls = ncalls + 1
    if (in_place) then
       recv(GUARD + displs(rank) + 1:GUARD + displs(rank) + counts(rank)) = send
       if (with_ierror) then
          call MPI_Allgatherv(MPI_IN_PLACE, counts(rank), MPI_DOUBLE_PRECISION, recv(GUARD + 1), counts, displs, &
               MPI_DOUBLE_PRECISION, comm, err)
#if defined(BINDING_f08)
       else
          call MPI_Allgatherv(MPI_IN_PLACE, counts(rank), MPI_DOUBLE_PRECISION, recv(GUARD + 1), counts, displs, &
               MPI_DOUBLE_PRECISION, comm)
#endif
       end if
    else
       if (with_ierror) then
          call MPI_Allgatherv(send, counts(rank), MPI_DOUBLE_PRECISION, recv(GUARD + 1), counts, displs, &
               MPI_DOUBLE_PRECISION, comm, err)
#if defined(BINDING_f08)
       else
          call MPI_Allgatherv(send, counts(rank), MPI_DOUBLE_PRECISION, recv(GUARD + 1), counts, displs, &
               MPI_DOUBLE_PRECISION, comm)
#endif
       end if
    end if
    if (with_ierror .and. err /= MPI_SUCCESS) call fail(what // ': ierror', rank, err)
    if (.not. with_ierror .and. err /= -12345) call fail(what // ': ierror written', rank, err)
    do i = 1, counts(rank)
       if (send(i) /= dval(rank, i)) call fail(what // ': send buffer', rank, i)
    end do
    do i = 1, GUARD
       if (recv(i) /= DPOISON) call fail(what // ': before the buffer', -1, i)
       if (recv(GUARD + total + i) /= DPOISON) call fail(what // ': after the buffer', -1, i)
    end do
    do o = 0, nranks - 1
       do i = 1, counts(o)
          if (recv(GUARD + displs(o) + i) /= dval(o, i)) call fail(what, o, i)
       end do
       if (recv(GUARD + displs(o) + counts(o) + 1) /= DPOISON) call fail(what // ': gap', o, counts(o) + 1)
    end do
    deallocate (send, recv)
  end subroutine gatherv_doubles

  ! Both collectives once (4 integers per rank), for strict mode: each must come back with
  ! an error of class MPI_ERR_OTHER (under MPI_ERRORS_RETURN).
  subroutine refused()
    integer :: send(4), recv(4 * nranks), counts(0:nranks - 1), displs(0:nranks - 1), o, err, cls
    send = rank
    do o = 0, nranks - 1
       counts(o) = 4
       displs(o) = 4 * o
    end do
    err = MPI_SUCCESS
    call MPI_Allgather(send, 4, MPI_INTEGER, recv, 4, MPI_INTEGER, comm, err)
    cls = MPI_SUCCESS
    if (err /= MPI_SUCCESS) call MPI_Error_class(err, cls, ierr)
    if (cls /= MPI_ERR_OTHER) call fail('allgather: error class', rank, cls)
    err = MPI_SUCCESS
    call MPI_Allgatherv(send, 4, MPI_INTEGER, recv, counts, displs, MPI_INTEGER, comm, err)
    cls = MPI_SUCCESS
    if (err /= MPI_SUCCESS) call MPI_Error_class(err, cls, ierr)
    if (cls /= MPI_ERR_OTHER) call fail('allgatherv: error class', rank, cls)
#if defined(BINDING_f08)
    call MPI_Allgather(send, 4, MPI_INTEGER, recv, 4, MPI_INTEGER, comm)
    call MPI_Allgatherv(send, 4, MPI_INTEGER, recv, counts, displs, MPI_INTEGER, comm)
#endif
  end subroutine refused

end program allgather_check
