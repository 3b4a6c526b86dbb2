# runtime/lab/lab.mk - the lab's mini-benchmark (BDR paper, Listing 4), for real MPI and
# SimGrid SMPI. Included by the top-level Makefile; uses the runtime's variables.
LAB := runtime/lab
# collsched-coll-bench is built once the runtime defines collsched_alltoall & co. (coll_call.c).
COLL_API := $(wildcard runtime/src/coll_call.c)

.PHONY: lab
# Only what the present compilers allow (runtime.mk's line says what is not built).
lab: $(if $(HAVE_MPICC),$(RT_BUILD)/bin/collsched-minibench $(RT_BUILD)/bin/collsched-inter-bench) \
     $(if $(HAVE_SMPICC),$(RT_BUILD)/smpi/bin/collsched-minibench $(RT_BUILD)/smpi/bin/collsched-inter-bench) \
     $(if $(COLL_API),$(if $(HAVE_MPICC),$(RT_BUILD)/bin/collsched-coll-bench) \
                      $(if $(HAVE_SMPICC),$(RT_BUILD)/smpi/bin/collsched-coll-bench))

$(RT_BUILD)/bin/collsched-minibench: $(LAB)/minibench.c $(RT_BUILD)/lib/libcollsched.a $(RT_HDRS)
	@mkdir -p $(@D)
	$(MPICC) $(RT_CFLAGS) -o $@ $< $(RT_BUILD)/lib/libcollsched.a $(RT_LIBS)

$(RT_BUILD)/smpi/bin/collsched-minibench: $(LAB)/minibench.c $(RT_BUILD)/smpi/lib/libcollsched.a $(RT_HDRS)
	@mkdir -p $(@D)
	$(SMPICC) $(RT_CFLAGS) -o $@ $< $(RT_BUILD)/smpi/lib/libcollsched.a $(RT_LIBS) 2>&1 | { grep -v '^\[smpicc\]' || true; }; test -f $@

# The intergroup allgather(v) driver (issue 19; docs/lab.md, "Intergroup").
$(RT_BUILD)/bin/collsched-inter-bench: $(LAB)/inter_bench.c $(RT_BUILD)/lib/libcollsched.a $(RT_HDRS)
	@mkdir -p $(@D)
	$(MPICC) $(RT_CFLAGS) -o $@ $< $(RT_BUILD)/lib/libcollsched.a $(RT_LIBS)

$(RT_BUILD)/smpi/bin/collsched-inter-bench: $(LAB)/inter_bench.c $(RT_BUILD)/smpi/lib/libcollsched.a $(RT_HDRS)
	@mkdir -p $(@D)
	$(SMPICC) $(RT_CFLAGS) -o $@ $< $(RT_BUILD)/smpi/lib/libcollsched.a $(RT_LIBS) 2>&1 | { grep -v '^\[smpicc\]' || true; }; test -f $@

# The driver of alltoall, bcast, reduce and allreduce (issue 18; docs/collectives.md).
$(RT_BUILD)/bin/collsched-coll-bench: $(LAB)/coll_bench.c $(RT_BUILD)/lib/libcollsched.a $(RT_HDRS)
	@mkdir -p $(@D)
	$(MPICC) $(RT_CFLAGS) -o $@ $< $(RT_BUILD)/lib/libcollsched.a $(RT_LIBS)

$(RT_BUILD)/smpi/bin/collsched-coll-bench: $(LAB)/coll_bench.c $(RT_BUILD)/smpi/lib/libcollsched.a $(RT_HDRS)
	@mkdir -p $(@D)
	$(SMPICC) $(RT_CFLAGS) -o $@ $< $(RT_BUILD)/smpi/lib/libcollsched.a $(RT_LIBS) 2>&1 | { grep -v '^\[smpicc\]' || true; }; test -f $@
