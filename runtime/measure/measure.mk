# runtime/measure/measure.mk - collsched-measure, the link measurement behind
# `collsched measure` (docs/measure.md), and collsched-flows, its capacity probes (sets of
# concurrent flows), for real MPI and SimGrid SMPI. Included by the top-level Makefile;
# uses the runtime's variables (RT_BUILD, MPICC, SMPICC, RT_CFLAGS).
MEASURE := runtime/measure

.PHONY: measure
# Only what the present compilers allow (runtime.mk's line says what is not built).
measure: $(if $(HAVE_MPICC),$(RT_BUILD)/bin/collsched-measure $(RT_BUILD)/bin/collsched-flows \
                           $(RT_BUILD)/bin/collsched-gamma) \
         $(if $(HAVE_SMPICC),$(RT_BUILD)/smpi/bin/collsched-measure $(RT_BUILD)/smpi/bin/collsched-flows \
                             $(RT_BUILD)/smpi/bin/collsched-gamma)

# `make`, `make runtime` (and so `make test`) build it too.
all runtime: measure

# collsched-gamma: the reduction cost (MPI_Reduce_local's seconds per byte, lab/gamma.py).
MEASURE_PROGRAMS := collsched-measure collsched-flows collsched-gamma
$(RT_BUILD)/bin/collsched-measure: $(MEASURE)/collsched_measure.c
$(RT_BUILD)/bin/collsched-flows: $(MEASURE)/collsched_flows.c
$(RT_BUILD)/smpi/bin/collsched-measure: $(MEASURE)/collsched_measure.c
$(RT_BUILD)/smpi/bin/collsched-flows: $(MEASURE)/collsched_flows.c
$(RT_BUILD)/bin/collsched-gamma: $(MEASURE)/collsched_gamma.c
$(RT_BUILD)/smpi/bin/collsched-gamma: $(MEASURE)/collsched_gamma.c

$(addprefix $(RT_BUILD)/bin/,$(MEASURE_PROGRAMS)):
	@mkdir -p $(@D)
	$(MPICC) $(RT_CFLAGS) -o $@ $<

$(addprefix $(RT_BUILD)/smpi/bin/,$(MEASURE_PROGRAMS)):
	@mkdir -p $(@D)
	$(SMPICC) $(RT_CFLAGS) -o $@ $< 2>&1 | { grep -v '^\[smpicc\]' || true; }; test -f $@
