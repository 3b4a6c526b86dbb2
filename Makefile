# collsched: `make demo` and `make test` are the two commands a newcomer needs.
# Both install what is missing first (tools/ensure-deps.sh) and are idempotent.
SHELL := /bin/bash
VENV  := .venv
PY    := $(VENV)/bin/python
CLI   := $(VENV)/bin/collsched
OUT   := out
MPIRUN_ROOT := $(shell [ "$$(id -u)" -eq 0 ] && echo --allow-run-as-root)
# The one version string is the package's __version__ (pyproject reads it too).
VERSION := $(shell sed -n 's/^__version__ = "\(.*\)"$$/\1/p' compiler/collsched/__init__.py)

.PHONY: all deps test test-compiler demo bench bench-compiler bench-lab bench-bound bench-sweep bench-recurring bench-intergroup bench-scale-compact clean
all: runtime lab

deps:
	@bash tools/ensure-deps.sh
	@if command -v cc >/dev/null 2>&1; then $(MAKE) --no-print-directory kernels; \
	 else echo "deps: cc not found: the compiler's C kernels not built (the compiler runs Python)"; fi

# The compiler's C kernels (compiler/collsched/kernels/, loaded with ctypes): built with
# deps, so every target that installs the compiler has them. Without them the compiler runs
# Python instead (same results, slower); `collsched compile --json` says which ("kernels").
KERNELS    := compiler/collsched/kernels/libcollsched_kernels.so
KERNEL_SRC := $(wildcard compiler/collsched/kernels/*.c compiler/collsched/kernels/*.h)
.PHONY: kernels
kernels: $(KERNELS)
$(KERNELS): $(KERNEL_SRC)
	cc -std=c11 -O2 -g -fPIC -shared -ffp-contract=off -Wall -Wextra -Werror \
	    -o $@.tmp $(filter %.c,$^) -lm && mv $@.tmp $@

# The kernels' parity tests against an ASan+UBSan build (COLLSCHED_KERNELS_LIB points the
# loader at it). Python is not instrumented: the sanitizer runtimes are preloaded, and leak
# checking is off (the interpreter's own allocations would drown it).
KERNELS_ASAN := build/asan/libcollsched_kernels.so
.PHONY: check-kernels-asan
$(KERNELS_ASAN): $(KERNEL_SRC)
	@mkdir -p $(@D)
	cc -std=c11 -O1 -g -fPIC -shared -ffp-contract=off -fsanitize=address,undefined \
	    -fno-omit-frame-pointer -Wall -Wextra -Werror -o $@ $(filter %.c,$^) -lm
check-kernels-asan: deps $(KERNELS_ASAN)
	COLLSCHED_KERNELS_LIB=$(abspath $(KERNELS_ASAN)) \
	LD_PRELOAD="$$(cc -print-file-name=libasan.so) $$(cc -print-file-name=libubsan.so)" \
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	$(PY) -m pytest -q -p no:cacheprovider tests/compiler/test_kernels.py tests/compiler/test_kernels_pool.py \
	    tests/compiler/test_kernels_ring.py tests/compiler/test_kernels_dag.py tests/compiler/test_kernels_interface.py \
	    tests/compiler/test_kernels_fluid.py

include runtime/runtime.mk
include runtime/lab/lab.mk
include runtime/measure/measure.mk

# Every test: compiler (pytest + hypothesis) and runtime (pytest driving mpirun / smpirun).
test: deps runtime lab
	$(PY) -m pytest -q tests

test-compiler: deps
	$(PY) -m pytest -q tests/compiler

# The main job on a bundled default: compile, verify, simulate and plot a schedule, run it
# under real MPI with every byte checked, and compare algorithms in the SimGrid lab.
demo: deps runtime lab
	@mkdir -p $(OUT)
	$(CLI) compile --collective allgather --algorithm ring --ranks 16 --bytes 65536 \
	    --topology topologies/tryton-48.yaml -o $(OUT)/demo-ring.sched --json
	$(CLI) verify $(OUT)/demo-ring.sched
	$(CLI) simulate $(OUT)/demo-ring.sched --topology topologies/tryton-48.yaml
	$(CLI) plot $(OUT)/demo-ring.sched --topology topologies/tryton-48.yaml -o $(OUT)/demo-ring.png
	$(CLI) show $(OUT)/demo-ring.sched --rank 0 | head -n 12
	mpirun -np 16 --oversubscribe $(MPIRUN_ROOT) build/bin/collsched-run $(OUT)/demo-ring.sched \
	    --iterations 3 --json
	$(CLI) bench --backend smpi --topology topologies/tryton-48.yaml --ranks 16 --bytes 64KiB \
	    --algorithms ring,bruck,native,native:ompi --max-delay-ms 5 --iterations 3 --seed 1 \
	    --plot $(OUT)/demo-lab.png
	@echo "demo: Gantt chart in $(OUT)/demo-ring.png, lab comparison in $(OUT)/demo-lab.png"

bench: deps bench-compiler bench-runtime bench-trace bench-lab bench-bound bench-sweep bench-recurring \
	bench-intergroup bench-platforms bench-collectives bench-aggregate

# Issue 21: measure -> compile -> run on the bundled multi-site platforms (docs/platforms.md;
# docs/benchmarks.md, section lab-platforms).
.PHONY: bench-platforms
bench-platforms: deps runtime lab measure
	$(CLI) bench --backend smpi --suite platforms --doc docs/benchmarks.md --plot docs/img/lab-platforms.png

# Issue 18: alltoall, bcast, reduce and allreduce under SMPI, compiled against the natives
# (docs/collectives.md; docs/benchmarks.md, sections lab-collectives (CM02) and
# lab-collectives-smpi (SimGrid's default model: the allreduce and alltoall target cases)).
.PHONY: bench-collectives
bench-collectives: deps runtime lab
	$(PY) -m collsched.lab.coll_report --suite --network-model CM02 --doc docs/benchmarks.md \
	    --img-dir docs/img --json out/collectives-cm02.json
	$(PY) -m collsched.lab.coll_report --suite --network-model SMPI --no-faraj-grid \
	    --doc docs/benchmarks.md --img-dir docs/img --json out/collectives-smpi.json
	$(PY) -m collsched.lab.coll_arrival --doc docs/benchmarks.md

# The lab at scale with compact schedules (issue 24 part 5; docs/benchmarks.md, section
# lab-scale-compact): compact ring and bruck against native:ompi and native:mpich on the
# default cluster, hier against native:ompi on grid-8x512, under SMPI at 1024 and 4096
# ranks, 64 KiB per rank, sampled shared buffers. Not in `make bench`: on this 2-core
# machine one 1024-rank launch takes minutes and one 4096-rank call tens of minutes of CPU.
# Each rank maps about 3 regions per sampled origin: raise the limit.
bench-scale-compact: deps runtime lab
	@[ "$$(cat /proc/sys/vm/max_map_count)" -ge 1048576 ] || sysctl -q -w vm.max_map_count=1048576 || \
	    echo "bench-scale-compact: could not raise vm.max_map_count; the suite will say what to do"
	$(CLI) bench --suite scale-compact --ranks 1024,4096 --doc docs/benchmarks.md

bench-compiler: deps
	$(CLI) bench --suite compiler --doc docs/benchmarks.md --plot docs/img/compile-time.png
	$(CLI) bench --suite compile-grid --doc docs/benchmarks.md

# The performance lab on SimGrid SMPI: model check, a mini-benchmark, the P=256 scale run,
# the grid runs; the model check under CM02 and SMPI, the mini-benchmarks and grid runs
# under each (issue 25; the rule for each model: docs/lab.md). The model check once more
# predicting with measured topologies (out/measured/<topology>-<MODEL>.yaml, measured by
# `collsched measure` when missing).
# The scale run maps one shared region per piece and rank (P^2 maps): raise the limit.
LAB_ALGS := ring,nex,lnbc,bruck,spreading,bdr,bslb,min3,native,native:ompi,native:mpich,native:bruck,native:rdb,native:ring
GRID_ALGS := min3,magpie,mpichg2,bcast-trees,ring,nex,lnbc,bruck,spreading,native,native:ompi,native:mpich
# No wan-3x16 runs under SMPI's network model: there the segment search cuts every block
# below SimGrid's 64 KiB factor step (17 pieces at 1 MiB: up to 38,000 flows at once on the
# WAN links), and SimGrid took over 10 minutes per algorithm (lnbc, bruck) without finishing.
bench-lab: deps runtime lab
	@[ "$$(cat /proc/sys/vm/max_map_count)" -ge 200000 ] || sysctl -q -w vm.max_map_count=262144 || \
	    echo "bench-lab: could not raise vm.max_map_count; the scale run will say what to do"
	$(CLI) bench --suite model --network-model CM02,SMPI --doc docs/benchmarks.md \
	    --plot docs/img/model-check.png
	@mkdir -p out/measured
	$(CLI) bench --suite model --network-model CM02,SMPI --measured out/measured \
	    --doc docs/benchmarks.md --section lab-model-check-measured --plot docs/img/model-check-measured.png
	$(CLI) bench --backend smpi --topology topologies/tryton-48.yaml --ranks 28 --bytes 37448 \
	    --algorithms $(LAB_ALGS) --max-delay-ms 5 --iterations 8 --seed 1 \
	    --doc docs/benchmarks.md --section lab-tryton --plot docs/img/lab-tryton28.png
	$(CLI) bench --backend smpi --network-model SMPI --topology topologies/tryton-48.yaml --ranks 28 \
	    --bytes 37448 --algorithms $(LAB_ALGS) --max-delay-ms 5 --iterations 8 --seed 1 \
	    --doc docs/benchmarks.md --section lab-tryton-smpi --plot docs/img/lab-tryton28-smpi.png
	$(CLI) bench --backend smpi --network-model SMPI --topology topologies/tryton-48.yaml --ranks 28 \
	    --bytes 64KiB --algorithms $(LAB_ALGS) --max-delay-ms 5 --iterations 8 --seed 1 \
	    --doc docs/benchmarks.md --section lab-tryton-64k-smpi --plot docs/img/lab-tryton28-64k-smpi.png
	$(CLI) bench --suite scale --doc docs/benchmarks.md
	$(CLI) bench --backend smpi --topology topologies/three-site-grid.yaml --ranks 20 --bytes 256KiB \
	    --algorithms $(GRID_ALGS) --iterations 1 --seed 1 --doc docs/benchmarks.md --section lab-grid-256k \
	    --plot docs/img/lab-grid-256k.png
	$(CLI) bench --backend smpi --topology topologies/three-site-grid.yaml --ranks 20 --bytes 1MiB \
	    --algorithms $(GRID_ALGS) --iterations 1 --seed 1 --doc docs/benchmarks.md --section lab-grid-1m \
	    --plot docs/img/lab-grid-1m.png
	$(CLI) bench --backend smpi --topology topologies/three-site-grid.yaml --ranks 20 --bytes 4MiB \
	    --algorithms $(GRID_ALGS) --iterations 1 --seed 1 --doc docs/benchmarks.md --section lab-grid-4m \
	    --plot docs/img/lab-grid-4m.png
	$(CLI) bench --backend smpi --topology topologies/wan-3x16.yaml --ranks 48 --bytes 1MiB \
	    --algorithms $(GRID_ALGS) --iterations 1 --seed 1 --doc docs/benchmarks.md --section lab-wan-1m \
	    --plot docs/img/lab-wan-1m.png
	$(CLI) bench --backend smpi --topology topologies/wan-3x16.yaml --ranks 48 --bytes 4MiB \
	    --algorithms $(GRID_ALGS) --iterations 1 --seed 1 --doc docs/benchmarks.md --section lab-wan-4m \
	    --plot docs/img/lab-wan-4m.png
	$(CLI) bench --backend smpi --topology topologies/wan-3x16.yaml --ranks 48 --bytes 1MiB \
	    --algorithms min3,magpie,mpichg2,bcast-trees,spreading,bdr,native --max-delay-ms 50 \
	    --iterations 3 --seed 1 --doc docs/benchmarks.md --section lab-wan-pap --plot docs/img/lab-wan-pap.png
	$(CLI) bench --backend smpi --topology topologies/grid-8x128.yaml --ranks 256 --bytes 64KiB \
	    --algorithms min3,magpie,mpichg2,native:ompi --iterations 1 --seed 1 --doc docs/benchmarks.md \
	    --section lab-grid8-256 --plot docs/img/lab-grid8-256.png
	$(CLI) bench --backend smpi --network-model SMPI --topology topologies/three-site-grid.yaml --ranks 20 \
	    --bytes 256KiB --algorithms $(GRID_ALGS) --iterations 1 --seed 1 --doc docs/benchmarks.md \
	    --section lab-grid-256k-smpi --plot docs/img/lab-grid-256k-smpi.png
	$(CLI) bench --backend smpi --network-model SMPI --topology topologies/three-site-grid.yaml --ranks 20 \
	    --bytes 1MiB --algorithms $(GRID_ALGS) --iterations 1 --seed 1 --doc docs/benchmarks.md \
	    --section lab-grid-1m-smpi --plot docs/img/lab-grid-1m-smpi.png
	$(CLI) bench --backend smpi --network-model SMPI --topology topologies/three-site-grid.yaml --ranks 20 \
	    --bytes 4MiB --algorithms $(GRID_ALGS) --iterations 1 --seed 1 --doc docs/benchmarks.md \
	    --section lab-grid-4m-smpi --plot docs/img/lab-grid-4m-smpi.png
	$(CLI) bench --backend smpi --network-model SMPI --topology topologies/grid-8x128.yaml --ranks 256 \
	    --bytes 64KiB --algorithms min3,magpie,mpichg2,native:ompi --iterations 1 --seed 1 \
	    --doc docs/benchmarks.md --section lab-grid8-256-smpi --plot docs/img/lab-grid8-256-smpi.png

# Issue 20 (arrival-aware scheduling at the lower bound; docs/lab.md, "bench-aggregate"):
# the lab's mini-benchmark with the multi-piece planner agg beside min3, bdr and the best
# regular algorithms on tryton-48 (the lab's seeded patterns: maxDelay 5 ms and 0), at
# P = 28 with 256K floats in all (37448 B per rank), P = 48 with 256K floats (21844 B) and
# P = 28 with 1 MiB per rank, each under CM02 and SimGrid's SMPI model; then forest beside
# min3 and magpie on the grids (wan-3x16 under CM02 only: bench-lab says why). Every table
# gives each row's gap to the LP lower bound. Needs agg and forest registered (check_algorithm
# refuses an unknown name before anything runs). Measured 2026-11-27 with min3,bdr,spreading,
# ring,native (agg not yet there) on 2 cores at load 12-25: P = 28 37448 B 8 iterations 96 s
# (CM02); P = 48 21844 B 335 s (CM02); P = 28 1 MiB 8 iterations 354 s (CM02), 816 s under the
# SMPI model (min3: 23 s to compile each iteration, 296 s to run); hence 4 iterations at 1 MiB,
# where the gaps are bandwidth-bound and the 8 iterations' averages spread by under 1%
# (ring under the SMPI model: 5%).
AGG_ALGS := agg,min3,bdr,spreading,ring,native
FOREST_ALGS := min3,forest,magpie,native
AGG_1M_ITERATIONS := 4
AGG_TRYTON := $(CLI) bench --backend smpi --topology topologies/tryton-48.yaml --seed 1 --algorithms $(AGG_ALGS) \
	--doc docs/benchmarks.md
.PHONY: bench-aggregate
bench-aggregate: deps runtime lab
	$(AGG_TRYTON) --ranks 28 --bytes 37448 --max-delay-ms 5 --iterations 8 \
	    --section lab-agg-tryton28 --plot docs/img/lab-agg-tryton28.png
	$(AGG_TRYTON) --network-model SMPI --ranks 28 --bytes 37448 --max-delay-ms 5 --iterations 8 \
	    --section lab-agg-tryton28-smpi --plot docs/img/lab-agg-tryton28-smpi.png
	$(AGG_TRYTON) --ranks 28 --bytes 37448 --max-delay-ms 0 --iterations 8 \
	    --section lab-agg-tryton28-flat --plot docs/img/lab-agg-tryton28-flat.png
	$(AGG_TRYTON) --network-model SMPI --ranks 28 --bytes 37448 --max-delay-ms 0 --iterations 8 \
	    --section lab-agg-tryton28-flat-smpi --plot docs/img/lab-agg-tryton28-flat-smpi.png
	$(AGG_TRYTON) --ranks 48 --bytes 21844 --max-delay-ms 5 --iterations 8 \
	    --section lab-agg-tryton48 --plot docs/img/lab-agg-tryton48.png
	$(AGG_TRYTON) --network-model SMPI --ranks 48 --bytes 21844 --max-delay-ms 5 --iterations 8 \
	    --section lab-agg-tryton48-smpi --plot docs/img/lab-agg-tryton48-smpi.png
	$(AGG_TRYTON) --ranks 28 --bytes 1MiB --max-delay-ms 5 --iterations $(AGG_1M_ITERATIONS) \
	    --section lab-agg-tryton28-1m --plot docs/img/lab-agg-tryton28-1m.png
	$(AGG_TRYTON) --network-model SMPI --ranks 28 --bytes 1MiB --max-delay-ms 5 --iterations $(AGG_1M_ITERATIONS) \
	    --section lab-agg-tryton28-1m-smpi --plot docs/img/lab-agg-tryton28-1m-smpi.png
	$(CLI) bench --backend smpi --topology topologies/wan-3x16.yaml --ranks 48 --bytes 1MiB \
	    --algorithms $(FOREST_ALGS) --iterations 1 --seed 1 --doc docs/benchmarks.md \
	    --section lab-forest-wan-1m --plot docs/img/lab-forest-wan-1m.png
	$(CLI) bench --backend smpi --topology topologies/three-site-grid.yaml --ranks 20 --bytes 256KiB \
	    --algorithms $(FOREST_ALGS) --iterations 1 --seed 1 --doc docs/benchmarks.md \
	    --section lab-forest-grid-256k --plot docs/img/lab-forest-grid-256k.png
	$(CLI) bench --backend smpi --network-model SMPI --topology topologies/three-site-grid.yaml --ranks 20 \
	    --bytes 256KiB --algorithms $(FOREST_ALGS) --iterations 1 --seed 1 --doc docs/benchmarks.md \
	    --section lab-forest-grid-256k-smpi --plot docs/img/lab-forest-grid-256k-smpi.png

# The optimality gap (predicted / LP lower bound - 1) of every algorithm on every bundled
# topology (7 min of CPU on 2026-11-27: six topologies, 15 algorithms; grid-8x512 left out, too many hosts).
bench-bound: deps
	@mkdir -p $(OUT)
	{ echo "## Lower bound and optimality gaps (cost model)"; echo; \
	  echo "Written $$(date -u +%Y-%m-%d) by \`python -m collsched.lab.gaps\` (docs/grid-baselines.md explains the bound)."; \
	  echo; $(PY) -m collsched.lab.gaps; } > $(OUT)/bound.md
	$(PY) -m collsched.lab.benchdoc docs/benchmarks.md lower-bound-gaps $(OUT)/bound.md

# The BDR paper's grid (Tables 3 and 4) under SMPI: about an hour at 4 iterations under CM02
# (docs/sweep.md), then again under SMPI's default network model (issue 25).
bench-sweep: deps runtime lab
	$(CLI) sweep --iterations 4 --cache out/sweep-cache.json --json out/sweep.json \
	    --plot docs/img/sweep.png --doc docs/benchmarks.md --section lab-sweep
	$(CLI) sweep --network-model SMPI --iterations 4 --cache out/sweep-smpi-cache.json \
	    --json out/sweep-smpi.json --plot docs/img/sweep-smpi.png --doc docs/benchmarks.md \
	    --section lab-sweep-smpi

# Recurring load patterns (issue 17, docs/lab.md "The recurring suite"): trace -> cache build ->
# the runtime's selection on tryton-48, P = 28, 256K floats in total (37448 B per rank),
# 120 iterations of 3 classes, under SMPI with CM02, both ways a cache serves calls (in-call:
# cache:DIR, engine none; pat: cache-pat:DIR, engine pat, the PAT engine's cache mode); then
# the real-MPI check (P = 8, 64 KiB, the unmodified minibench under the preload library).
# Run directories and JSON reports in out/recurring-*. About 20-25 minutes on 2 cores (the
# PAT runs - bdr, cache-pat, oracle-pat - take most of it; the real-MPI check 30 s). The same
# scenario under SimGrid's SMPI network model (section lab-recurring-smpi-model, as long):
# $(CLI) bench --suite recurring --network-model SMPI --keep $(OUT)/recurring-smpi-model
# --doc docs/benchmarks.md --section lab-recurring-smpi-model --plot docs/img/lab-recurring-smpi-model.png
bench-recurring: deps runtime lab
	$(CLI) bench --suite recurring --backend smpi --network-model CM02 --keep $(OUT)/recurring-smpi \
	    --doc docs/benchmarks.md --section lab-recurring-smpi --plot docs/img/lab-recurring-smpi.png
	$(CLI) bench --suite recurring --backend mpi --keep $(OUT)/recurring-mpi \
	    --doc docs/benchmarks.md --section lab-recurring-mpi --plot docs/img/lab-recurring-mpi.png

# Intergroup allgather(v) (issue 19, docs/lab.md "The intergroup suite"): the Kang paper's
# settings 1-8 under SMPI CM02 at 64 ranks, 64 KiB to 8 MiB (about 8 minutes), then the
# real-MPI comparison with Open MPI's own intercommunicator collectives at P = 8.
bench-intergroup: deps runtime lab
	$(CLI) bench --suite intergroup --doc docs/benchmarks.md --plot docs/img/intergroup-speedup.png
	$(CLI) bench --suite intergroup --backend mpi --doc docs/benchmarks.md

clean:
	rm -rf build $(OUT)
