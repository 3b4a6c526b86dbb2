# runtime/runtime.mk - the C runtime (included by the top-level Makefile).
#
#   make runtime                 build/lib (libcollsched.so/.a, libcollsched-preload.so,
#                                pkgconfig), build/bin/collsched-run, build/smpi/ (SimGrid),
#                                build/fortran/ (the Fortran test programs, with mpifort)
#   make install PREFIX=/opt/x [DESTDIR=/stage]
#                                lib (versioned sonames), include, pkgconfig, cmake, bin
#   make uninstall PREFIX=... [DESTDIR=...]   removes exactly what install put
#   make check-asan              runtime tests against an ASan+UBSan build (build/asan/)
#   make check-tsan              the threaded runtime tests against a TSan build (build/tsan/)
#   make fuzz [FUZZ_SECONDS=N]   libFuzzer run of the schedule parser (build/fuzz/)
#   make bench-runtime           executor overhead vs Open MPI's ring -> docs/benchmarks.md
#   make bench-trace             arrival-trace overhead (real MPI and SMPI) -> docs/benchmarks.md

RT        := runtime
RT_BUILD  := build
MPICC     ?= mpicc
SMPICC    ?= smpicc
MPIFORT   ?= mpifort
PREFIX    ?= /usr/local
DESTDIR   ?=
RT_CFLAGS := -std=c11 -D_POSIX_C_SOURCE=200809L -O2 -g -Wall -Wextra -I$(RT)/include -I$(RT)/src \
             -DCOLLSCHED_BUILD_VERSION='"$(VERSION)"'
# Shared libraries: libX.so.$(VERSION) is the file, libX.so.$(SOMAJOR) (the soname) and
# libX.so (for -lX and LD_PRELOAD=libcollsched-preload.so) are symlinks to it.
SOMAJOR   := $(firstword $(subst ., ,$(VERSION)))
# Only what carries COLLSCHED_API (collsched.h, collsched_schedfile.h, preload.c's MPI_*
# wrappers) and preload_fortran.c's Fortran names is exported from the shared libraries.
RT_VISFLAGS := -fvisibility=hidden
# Without an MPI compiler wrapper (tools/ensure-deps.sh skipped the system packages) the
# builds that need it say so in one line and are skipped; `make test` still runs.
HAVE_MPICC  := $(shell command -v $(MPICC) 2>/dev/null)
HAVE_SMPICC := $(shell command -v $(SMPICC) 2>/dev/null)
# mpifort runs: the wrapper is there and so is the Fortran compiler it wraps.
HAVE_MPIFORT := $(shell $(MPIFORT) --version >/dev/null 2>&1 && echo yes)
RT_LIBS   := -lm -lpthread  # bdr.c: floor(); pat.c: the progress thread
# Every module of src/ but the preload wrappers (C and Fortran) and the driver's main goes
# into the library.
RT_PRELOAD := preload preload_fortran
RT_LIBSRC := $(filter-out $(RT_PRELOAD) collsched_run,$(basename $(notdir $(wildcard $(RT)/src/*.c))))
RT_HDRS   := $(wildcard $(RT)/include/*.h $(RT)/src/*.h)
FUZZ_SECONDS ?= 180

.PHONY: runtime runtime-mpi runtime-smpi runtime-fortran install uninstall check-asan check-tsan fuzz bench-runtime bench-trace test-runtime

runtime: runtime-mpi runtime-smpi runtime-fortran

# ---- Open MPI build (objects are PIC: they go into the shared libraries too) ----
RT_OBJ      := $(RT_BUILD)/obj
RT_LIBOBJS  := $(RT_LIBSRC:%=$(RT_OBJ)/%.o)

ifeq ($(HAVE_MPICC),)
runtime-mpi:
	@echo "runtime: $(MPICC) not found: libcollsched, collsched-run, collsched-minibench and collsched-measure not built (install openmpi-bin libopenmpi-dev)"
else
runtime-mpi: $(RT_BUILD)/lib/libcollsched.so $(RT_BUILD)/lib/libcollsched.a \
             $(RT_BUILD)/lib/libcollsched-preload.so $(RT_BUILD)/bin/collsched-run \
             $(RT_BUILD)/lib/pkgconfig/collsched.pc $(RT_BUILD)/include/collsched.h
endif

$(RT_OBJ)/%.o: $(RT)/src/%.c $(RT_HDRS)
	@mkdir -p $(@D)
	$(MPICC) $(RT_CFLAGS) $(RT_VISFLAGS) -fPIC -c $< -o $@

$(RT_BUILD)/lib/libcollsched.a: $(RT_LIBOBJS)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(RT_BUILD)/lib/libcollsched.so: $(RT_LIBOBJS)
	@mkdir -p $(@D)
	$(MPICC) -shared -Wl,-soname,libcollsched.so.$(SOMAJOR) -o $@.$(VERSION) $^ $(RT_LIBS)
	ln -sf libcollsched.so.$(VERSION) $@.$(SOMAJOR) && ln -sf libcollsched.so.$(SOMAJOR) $@

$(RT_BUILD)/lib/libcollsched-preload.so: $(RT_LIBOBJS) $(RT_PRELOAD:%=$(RT_OBJ)/%.o)
	@mkdir -p $(@D)
	$(MPICC) -shared -Wl,-soname,libcollsched-preload.so.$(SOMAJOR) -o $@.$(VERSION) $^ $(RT_LIBS)
	ln -sf libcollsched-preload.so.$(VERSION) $@.$(SOMAJOR) && ln -sf libcollsched-preload.so.$(SOMAJOR) $@

$(RT_BUILD)/bin/collsched-run: $(RT_OBJ)/collsched_run.o $(RT_BUILD)/lib/libcollsched.a
	@mkdir -p $(@D)
	$(MPICC) -o $@ $^ $(RT_LIBS)

$(RT_BUILD)/include/collsched.h: $(wildcard $(RT)/include/*.h)
	@mkdir -p $(@D)
	cp $(RT)/include/*.h $(@D)/

$(RT_BUILD)/lib/pkgconfig/collsched.pc: $(RT)/collsched.pc.in
	@mkdir -p $(@D)
	sed -e 's|@PREFIX@|$(abspath $(RT_BUILD))|' -e 's|@VERSION@|$(VERSION)|' $< > $@

# ---- Fortran test programs (tests/runtime/test_fortran.py): one source, built for each
# of Open MPI's Fortran bindings - include 'mpif.h', use mpi, use mpi_f08 - plain MPI
# programs that the preload library serves (docs/runtime.md, "Fortran") ----
RT_FORTRAN      := $(RT_BUILD)/fortran
RT_FBINDINGS    := mpif mpi f08
RT_FPROGS       := $(RT_FBINDINGS:%=$(RT_FORTRAN)/collsched-fortran-%)

ifeq ($(HAVE_MPIFORT),)
runtime-fortran:
	@echo "runtime: $(MPIFORT) not found or not working: the Fortran test programs (build/fortran/) not built, their tests skip (install gfortran)"
else
runtime-fortran: $(RT_FPROGS)
endif

# BINDING_mpif, BINDING_mpi or BINDING_f08 selects the binding (the program defines no
# module). mpif.h declares no interfaces: gfortran >= 10 needs -fallow-argument-mismatch to
# pass integer and double precision buffers to the same routine, as with any mpif.h program
# (-w: it warns for each such call).
$(RT_FORTRAN)/collsched-fortran-%: $(RT)/fortran/allgather_check.F90
	@mkdir -p $(@D)
	$(MPIFORT) -O1 -g -Wall -fcheck=bounds -DBINDING_$* $(if $(filter mpif,$*),-fallow-argument-mismatch -w) \
	    -o $@ $<

# ---- SimGrid SMPI build: the same sources, compiled with smpicc ----
RT_SOBJ := $(RT_BUILD)/smpi/obj

ifeq ($(HAVE_SMPICC),)
runtime-smpi:
	@echo "runtime: $(SMPICC) not found: the SimGrid builds (build/smpi/) not built, the lab cannot run (install libsimgrid-dev)"
else
runtime-smpi: $(RT_BUILD)/smpi/lib/libcollsched.a $(RT_BUILD)/smpi/bin/collsched-run
endif

$(RT_SOBJ)/%.o: $(RT)/src/%.c $(RT_HDRS)
	@mkdir -p $(@D)
	$(SMPICC) $(RT_CFLAGS) -c $< -o $@ 2>&1 | { grep -v '^\[smpicc\]' || true; }; test -f $@

$(RT_BUILD)/smpi/lib/libcollsched.a: $(RT_LIBSRC:%=$(RT_SOBJ)/%.o)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(RT_BUILD)/smpi/bin/collsched-run: $(RT_SOBJ)/collsched_run.o $(RT_BUILD)/smpi/lib/libcollsched.a
	@mkdir -p $(@D)
	$(SMPICC) -o $@ $^ $(RT_LIBS)

# ---- install: $(DESTDIR)$(PREFIX); the pkg-config and CMake files name $(PREFIX) ----
RT_D       := $(DESTDIR)$(PREFIX)
RT_SOLIBS  := libcollsched libcollsched-preload
RT_INSTALLED := lib/libcollsched.a include/collsched.h include/collsched_schedfile.h \
    bin/collsched-run lib/pkgconfig/collsched.pc \
    lib/cmake/collsched/collschedConfig.cmake lib/cmake/collsched/collschedConfigVersion.cmake \
    $(foreach l,$(RT_SOLIBS),lib/$(l).so.$(VERSION) lib/$(l).so.$(SOMAJOR) lib/$(l).so)
RT_CMAKE_SED := sed -e 's|@VERSION@|$(VERSION)|g' -e 's|@SOMAJOR@|$(SOMAJOR)|g'

install: runtime-mpi
	@[ -n "$(HAVE_MPICC)" ] || { echo "install: $(MPICC) not found: nothing to install"; exit 1; }
	install -d $(RT_D)/lib/pkgconfig $(RT_D)/lib/cmake/collsched $(RT_D)/include $(RT_D)/bin
	install -m 644 $(RT_BUILD)/lib/libcollsched.a $(RT_D)/lib/
	for l in $(RT_SOLIBS); do \
	    install -m 755 $(RT_BUILD)/lib/$$l.so.$(VERSION) $(RT_D)/lib/ && \
	    ln -sf $$l.so.$(VERSION) $(RT_D)/lib/$$l.so.$(SOMAJOR) && \
	    ln -sf $$l.so.$(SOMAJOR) $(RT_D)/lib/$$l.so || exit 1; done
	install -m 644 $(RT)/include/collsched.h $(RT)/include/collsched_schedfile.h $(RT_D)/include/
	install -m 755 $(RT_BUILD)/bin/collsched-run $(RT_D)/bin/
	sed -e 's|@PREFIX@|$(abspath $(PREFIX))|' -e 's|@VERSION@|$(VERSION)|' $(RT)/collsched.pc.in \
	    > $(RT_D)/lib/pkgconfig/collsched.pc
	$(RT_CMAKE_SED) $(RT)/collschedConfig.cmake.in > $(RT_D)/lib/cmake/collsched/collschedConfig.cmake
	$(RT_CMAKE_SED) $(RT)/collschedConfigVersion.cmake.in \
	    > $(RT_D)/lib/cmake/collsched/collschedConfigVersion.cmake

uninstall:
	rm -f $(addprefix $(RT_D)/,$(RT_INSTALLED))
	-rmdir $(RT_D)/lib/cmake/collsched 2>/dev/null

# ---- sanitizers: the runtime tests against an ASan + UBSan build ----
RT_AOBJ    := $(RT_BUILD)/asan/obj
# GCC leaves float-cast-overflow out of "undefined" (a double-to-int64 overflow in bdr.c
# once went unseen).
RT_SANFLAGS := -fsanitize=address,undefined,float-cast-overflow \
               -fno-sanitize-recover=undefined,float-cast-overflow -fno-omit-frame-pointer

$(RT_AOBJ)/%.o: $(RT)/src/%.c $(RT_HDRS)
	@mkdir -p $(@D)
	$(MPICC) $(RT_CFLAGS) -O1 $(RT_SANFLAGS) -fPIC -c $< -o $@

$(RT_BUILD)/asan/lib/libcollsched-preload.so: $(RT_LIBSRC:%=$(RT_AOBJ)/%.o) $(RT_PRELOAD:%=$(RT_AOBJ)/%.o)
	@mkdir -p $(@D)
	$(MPICC) $(RT_SANFLAGS) -shared -o $@ $^ $(RT_LIBS)

$(RT_BUILD)/asan/bin/collsched-run: $(RT_AOBJ)/collsched_run.o $(RT_LIBSRC:%=$(RT_AOBJ)/%.o)
	@mkdir -p $(@D)
	$(MPICC) $(RT_SANFLAGS) -o $@ $^ $(RT_LIBS)

# The mini-benchmark too: the PAT engine (progress thread, staging) under the sanitizers.
$(RT_BUILD)/asan/bin/collsched-minibench: $(RT)/lab/minibench.c $(RT_LIBSRC:%=$(RT_AOBJ)/%.o)
	@mkdir -p $(@D)
	$(MPICC) $(RT_CFLAGS) -O1 $(RT_SANFLAGS) -o $@ $^ $(RT_LIBS)

# The library itself, for test programs linked against it (tests/runtime/test_threads_mpi.py).
$(RT_BUILD)/asan/lib/libcollsched.a: $(RT_LIBSRC:%=$(RT_AOBJ)/%.o)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

# Leak checking is off under MPI: Open MPI's plugins are unloaded at MPI_Finalize, so
# their leaks have no symbols left to suppress. The parser's leaks are checked by the
# fuzz target (libFuzzer + ASan with leak detection).
check-asan: deps runtime $(RT_BUILD)/asan/bin/collsched-run $(RT_BUILD)/asan/lib/libcollsched-preload.so \
            $(RT_BUILD)/asan/bin/collsched-minibench $(RT_BUILD)/asan/lib/libcollsched.a
	COLLSCHED_BUILD=$(abspath $(RT_BUILD)/asan) COLLSCHED_ASAN=1 COLLSCHED_SANFLAGS="$(RT_SANFLAGS)" \
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:detect_stack_use_after_return=1 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	$(PY) -m pytest -q -m "mpi and not smpi" tests/runtime

# ---- ThreadSanitizer: the tests that run collsched from several threads (under
# MPI_THREAD_MULTIPLE, on different communicators; and the PAT engine's progress thread).
# Open MPI is not built with TSan: its own reports are suppressed by tests/runtime/tsan.supp,
# which names MPI's libraries only - a report with a collsched frame always fails.
RT_TOBJ      := $(RT_BUILD)/tsan/obj
RT_TSANFLAGS := -fsanitize=thread -fno-omit-frame-pointer

$(RT_TOBJ)/%.o: $(RT)/src/%.c $(RT_HDRS)
	@mkdir -p $(@D)
	$(MPICC) $(RT_CFLAGS) -O1 $(RT_TSANFLAGS) -fPIC -c $< -o $@

$(RT_BUILD)/tsan/lib/libcollsched.a: $(RT_LIBSRC:%=$(RT_TOBJ)/%.o)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(RT_BUILD)/tsan/bin/collsched-minibench: $(RT)/lab/minibench.c $(RT_LIBSRC:%=$(RT_TOBJ)/%.o)
	@mkdir -p $(@D)
	$(MPICC) $(RT_CFLAGS) -O1 $(RT_TSANFLAGS) -o $@ $^ $(RT_LIBS)

check-tsan: deps $(RT_BUILD)/tsan/lib/libcollsched.a $(RT_BUILD)/tsan/bin/collsched-minibench
	COLLSCHED_BUILD=$(abspath $(RT_BUILD)/tsan) COLLSCHED_TSAN=1 COLLSCHED_SANFLAGS="$(RT_TSANFLAGS)" \
	TSAN_OPTIONS="halt_on_error=1 exitcode=66 suppressions=$(abspath tests/runtime/tsan.supp)" \
	$(PY) -m pytest -q -m "mpi and not smpi" tests/runtime/test_threads_mpi.py tests/runtime/test_pat.py

# ---- fuzzing the parser (libFuzzer; installs clang when missing) ----
# The readers the target reaches: the explicit one and the compact loader with its generators.
RT_FUZZ_SRC := $(addprefix $(RT)/src/,schedfile.c crc32.c compact_load.c compact_gen.c compact_hier.c compact_bdr.c)
$(RT_BUILD)/fuzz/fuzz_schedfile: $(RT)/fuzz/fuzz_schedfile.c $(RT_FUZZ_SRC) $(RT_HDRS)
	@command -v clang >/dev/null 2>&1 || { echo "fuzz: installing clang"; \
	    $$( [ "$$(id -u)" -eq 0 ] || echo sudo ) apt-get install -y -qq clang >/dev/null; }
	@mkdir -p $(@D)
	clang -std=c11 -D_POSIX_C_SOURCE=200809L -DCOLLSCHED_FUZZING -g -O1 -fsanitize=fuzzer,address,undefined \
	    -I$(RT)/include -I$(RT)/src $(RT)/fuzz/fuzz_schedfile.c $(RT_FUZZ_SRC) -o $@

fuzz: $(RT_BUILD)/fuzz/fuzz_schedfile
	@mkdir -p $(RT_BUILD)/fuzz/corpus $(RT_BUILD)/fuzz/artifacts
	$(RT_BUILD)/fuzz/fuzz_schedfile -max_total_time=$(FUZZ_SECONDS) -max_len=4096 \
	    -artifact_prefix=$(RT_BUILD)/fuzz/artifacts/ -print_final_stats=1 \
	    $(RT_BUILD)/fuzz/corpus $(RT)/fuzz/corpus 2>&1 | tee $(RT_BUILD)/fuzz/last-run.log | tail -n 25

# The format 1.2 reader and the whole-program check of alltoall/bcast/reduce/allreduce
# (make fuzz-coll; seeds: runtime/fuzz/make_coll_corpus.py writes runtime/fuzz/corpus-coll/).
.PHONY: fuzz-coll
RT_FUZZ_COLL_SRC := $(addprefix $(RT)/src/,coll_file.c coll_check.c schedfile.c crc32.c)
$(RT_BUILD)/fuzz/fuzz_coll: $(RT)/fuzz/fuzz_coll.c $(RT_FUZZ_COLL_SRC) $(RT_HDRS)
	@command -v clang >/dev/null 2>&1 || { echo "fuzz: installing clang"; \
	    $$( [ "$$(id -u)" -eq 0 ] || echo sudo ) apt-get install -y -qq clang >/dev/null; }
	@mkdir -p $(@D)
	clang -std=c11 -D_POSIX_C_SOURCE=200809L -DCOLLSCHED_FUZZING -g -O1 -fsanitize=fuzzer,address,undefined \
	    -fno-sanitize-recover=undefined -I$(RT)/include -I$(RT)/src $(RT)/fuzz/fuzz_coll.c $(RT_FUZZ_COLL_SRC) -o $@

fuzz-coll: $(RT_BUILD)/fuzz/fuzz_coll
	@mkdir -p $(RT_BUILD)/fuzz/corpus-coll $(RT_BUILD)/fuzz/artifacts-coll
	$(RT_BUILD)/fuzz/fuzz_coll -max_total_time=$(FUZZ_SECONDS) -max_len=4096 \
	    -artifact_prefix=$(RT_BUILD)/fuzz/artifacts-coll/ -print_final_stats=1 \
	    $(RT_BUILD)/fuzz/corpus-coll $(RT)/fuzz/corpus-coll 2>&1 | tee $(RT_BUILD)/fuzz/last-run-coll.log | tail -n 25

# ---- benchmark: executor overhead against Open MPI's own ring ----
bench-runtime: deps runtime
	$(PY) $(RT)/bench/bench_runtime.py --doc docs/benchmarks.md

# ---- benchmark: what the arrival trace (COLLSCHED_ARRIVALS) costs a call ----
bench-trace: deps runtime
	$(PY) $(RT)/bench/bench_trace.py --doc docs/benchmarks.md

test-runtime: deps runtime
	$(PY) -m pytest -q tests/runtime
