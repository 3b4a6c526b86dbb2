# collsched: `make demo` and `make test` are the two commands a newcomer needs.
# Both install what is missing first (tools/ensure-deps.sh) and are idempotent.
SHELL := /bin/bash
VENV  := .venv
PY    := $(VENV)/bin/python
CLI   := $(VENV)/bin/collsched
OUT   := out

.PHONY: all deps test test-compiler demo bench bench-compiler clean
all: runtime lab

deps:
	@bash tools/ensure-deps.sh

include runtime/runtime.mk
include runtime/lab/lab.mk

# Every test: compiler (pytest + hypothesis) and runtime (pytest driving mpirun / smpirun).
test: deps runtime lab
	$(PY) -m pytest -q tests

test-compiler: deps
	$(PY) -m pytest -q tests/compiler

# The main job on a bundled default: compile, verify, simulate and plot a schedule.
demo: deps runtime lab
	@mkdir -p $(OUT)
	$(CLI) compile --collective allgather --algorithm ring --ranks 16 --bytes 65536 \
	    --topology topologies/tryton-48.yaml -o $(OUT)/demo-ring.sched --json
	$(CLI) verify $(OUT)/demo-ring.sched
	$(CLI) simulate $(OUT)/demo-ring.sched --topology topologies/tryton-48.yaml
	$(CLI) plot $(OUT)/demo-ring.sched --topology topologies/tryton-48.yaml -o $(OUT)/demo-ring.png
	$(CLI) show $(OUT)/demo-ring.sched --rank 0 | head -n 12
	@echo "demo: Gantt chart written to $(OUT)/demo-ring.png"

bench: deps bench-compiler bench-runtime

bench-compiler: deps
	$(CLI) bench --suite compiler --doc docs/benchmarks.md --plot docs/img/compile-time.png

clean:
	rm -rf build $(OUT)
