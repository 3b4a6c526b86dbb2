"""The compiler's C kernels: compiled twins of its hot loops, loaded with ctypes.

Each kernel does exactly what one Python function of the compiler does - the same float
operations in the same order, so the same bits (tests/compiler/test_kernels*.py check it)
- only without the interpreter's cost per operation. That Python function is the kernel's
one reference: what the docs describe and what the tests compare the kernel with. Where
the library is not built, the compiler runs Python instead: min3's references themselves,
and numpy waves for the DAG timing and the deadlock walk (docs/benchmarks.md, section
python-paths, says why). `make deps` (so `make test` and `make demo`) builds the library
next to this file:

    compiler/collsched/kernels/libcollsched_kernels.so   from   kernels/*.c

Which kernels exist, their wrappers here, and the reference each mirrors:

    leaf_pool.c   leaf_pool()             min3.leaf_pool._schedule_leaf_pool    (small pools of ranks)
    input_pool.c  input_pool()            min3.input_pool._schedule_input_pool  (pools of pools)
    ring.c        ring()                  min3.ring._schedule_ring              (large grid sites)
    progress.c    progress_completes()    verify._progress_completes            (deadlock freedom)
    dag.c         dag_order(), dag_time() model.dag_graph._PyGraph              (cost model timing)
    fluid.c       fluid_step()            model.fluid._share_flows              (fluid model's sharing)

fluid_step is called once per event of a loop on the same arrays: bind() checks its
arguments once and returns the call (model/fluid_share.py drives it). It is the one kernel
not bit for bit with its reference: where _max_min fixes several flows at one level, it
takes their rates off the resources in a set's order, the kernel in the flows' start order,
so times may differ in the last bits (tests/compiler/test_kernels_fluid.py: within a
relative 1e-9).

One interface: kernels.h declares every kernel's prototype. When the library loads, those
declarations are read (parse_prototypes) and set each C function's argument and result
types, and each wrapper below - keyword-only parameters named as the header names them -
must match its prototype name for name, or the library is not used (status() says why;
tests/compiler/test_kernels_interface.py fails). A call converts nothing silently: arrays
must have the declared element type, be C-contiguous, and be writable where the kernel
writes.

Installed from a wheel (`pip install .`), the package build (setup.py) has compiled the
same sources into the same place, collsched/kernels/libcollsched_kernels.so; the wheel
carries kernels.h but not the .c files.

In a source checkout, a library older than its sources is not loaded (the results would be
a stale build's); in an installed package there are no sources to compare with.
COLLSCHED_KERNELS=0 in the environment turns the kernels off, COLLSCHED_KERNELS_LIB loads
another build (`make check-kernels-asan`: the parity tests under ASan and UBSan).
`status()` says which: "c", or why the Python references run.
"""
from __future__ import annotations

import ctypes
import inspect
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
HEADER = HERE / "kernels.h"
# COLLSCHED_KERNELS_LIB: another build of the same sources (make check-kernels-asan).
LIBRARY = Path(os.environ.get("COLLSCHED_KERNELS_LIB") or HERE / "libcollsched_kernels.so")
# Tests switch the kernels off to compare with the Python reference (False: Python only).
ENABLED = os.environ.get("COLLSCHED_KERNELS", "1") != "0"
# The value of status() (and of `compile --json`'s "kernels") when the kernels run.
BUILT = "c"

# --- the prototypes, as kernels.h declares them ---------------------------------------

_DTYPES = {"int64_t": np.dtype(np.int64), "double": np.dtype(np.float64),
           "uint8_t": np.dtype(np.uint8)}
_SCALARS = {"int64_t": ctypes.c_int64, "double": ctypes.c_double}
_PARAM = re.compile(r"(const\s+)?(int64_t|double|uint8_t)\s*(\*)?\s*([A-Za-z_]\w*)")


@dataclass(frozen=True)
class Param:
    """One parameter of a kernel: `int64_t x`, `double x` or `[const] T *x`."""

    name: str
    ctype: str  # int64_t, double or uint8_t (the element type of a pointer)
    pointer: bool
    const: bool  # a pointer the kernel only reads

    @property
    def dtype(self) -> np.dtype:
        return _DTYPES[self.ctype]

    def __str__(self):
        return f"{'const ' if self.const else ''}{self.ctype} {'*' if self.pointer else ''}{self.name}"


@dataclass(frozen=True)
class Prototype:
    name: str  # without the cs_ prefix
    params: tuple[Param, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)


def parse_prototypes(text: str, definitions: bool = False) -> dict[str, Prototype]:
    """The kernels `int64_t cs_<name>(...)` declared in C source `text` (definitions=True:
    defined, followed by `{`), in the restricted form kernels.h describes. Raises
    ValueError on a parameter outside it."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    end = r"\{" if definitions else ";"
    out = {}
    for m in re.finditer(r"^int64_t\s+cs_(\w+)\s*\(([^)]*)\)\s*" + end, text, re.M):
        params = []
        for raw in m.group(2).split(","):
            p = _PARAM.fullmatch(" ".join(raw.split()))
            if p is None or (p.group(1) and not p.group(3)):
                raise ValueError(f"cs_{m.group(1)}: cannot read parameter {raw.strip()!r}")
            params.append(Param(p.group(4), p.group(2), bool(p.group(3)), bool(p.group(1))))
        if m.group(1) in out:
            raise ValueError(f"cs_{m.group(1)} declared twice")
        out[m.group(1)] = Prototype(m.group(1), tuple(params))
    return out


# --- loading ---------------------------------------------------------------------------

_lib = None
_why = None
_kernels: dict[str, "Kernel"] = {}


def _load():
    global _lib, _why
    if _lib is not None or _why is not None:
        return
    with os.scandir(HERE) as entries:
        sources = {e.name: e.stat().st_mtime for e in entries if e.name.endswith((".c", ".h"))}
    # The C sources are here in a source checkout (or an unpacked sdist), not in a wheel:
    # it ships kernels.h only (for the prototypes), and its files' times are the install's.
    checkout = any(name.endswith(".c") for name in sources)
    if not LIBRARY.exists():
        _why = (f"{LIBRARY.name} is not built (make deps builds it)" if checkout else
                f"{LIBRARY.name} is not in this installation: it was built without a C compiler "
                "(reinstall with cc present; docs/install.md)")
        return
    built = LIBRARY.stat().st_mtime
    stale = sorted(name for name, mtime in sources.items() if mtime > built) if checkout else []
    if stale:
        _why = f"{LIBRARY.name} is older than {stale[0]} (make deps rebuilds it)"
        return
    try:
        lib = ctypes.CDLL(str(LIBRARY))
        kernels = {name: Kernel(proto, getattr(lib, "cs_" + name))
                   for name, proto in parse_prototypes(HEADER.read_text()).items()}
    except (OSError, AttributeError, ValueError) as exc:
        _why = f"{LIBRARY.name} does not load: {exc}"
        return
    wrong = wrapper_mismatches(kernels)
    if wrong:
        _why = f"{HEADER.name} and the wrappers disagree: {wrong[0]}"
        return
    _kernels.update(kernels)
    _lib = lib


def available() -> bool:
    """Whether the kernels run (else the Python references): enabled, built, current."""
    if not ENABLED:
        return False
    _load()
    return _lib is not None


def library():
    """The loaded ctypes library, or None (see available())."""
    return _lib if available() else None


def status() -> str:
    """BUILT ("c"), or why the Python reference paths run instead."""
    if not ENABLED:
        return "python (COLLSCHED_KERNELS=0)"
    _load()
    return BUILT if _lib is not None else f"python ({_why})"


# --- calls -----------------------------------------------------------------------------

# What a negative return means (kernels/*.c): -1 is the machine's, the others are bugs.
_ERRORS = {-1: "out of memory", -2: "a piece that no rank of the pool holds (a bug)",
           -3: "more results than the caller made room for (a bug)"}


def _address(a: np.ndarray) -> int:
    """The address of an array's data: through the buffer protocol (a sixth of the cost of
    a.ctypes.data, which builds a helper object), or a.ctypes for read-only or empty ones."""
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(a))
    except (TypeError, ValueError):
        return a.ctypes.data


class Kernel:
    """One C kernel with its declared prototype: called with every parameter by name."""

    def __init__(self, proto: Prototype, fn):
        self.proto, self.fn = proto, fn
        self.names = frozenset(proto.names)
        fn.restype = ctypes.c_int64
        fn.argtypes = [ctypes.c_void_p if p.pointer else _SCALARS[p.ctype] for p in proto.params]

    def __call__(self, fields: dict) -> int:
        return self._result(self.fn(*self.values(fields)))

    def _result(self, rc: int) -> int:
        if rc < 0:
            what = f"kernel {self.proto.name} failed: {_ERRORS.get(rc, f'code {rc}')}"
            raise MemoryError(what) if rc == -1 else RuntimeError(what)
        return rc

    def values(self, fields: dict) -> list:
        """The C arguments of a call with `fields`, checked as the module docstring says."""
        name = self.proto.name
        if fields.keys() != self.names:
            missing = sorted(self.names - fields.keys())
            extra = sorted(fields.keys() - self.names)
            raise TypeError(f"{name}: missing {missing}, unexpected {extra}")
        values = []
        for p in self.proto.params:
            v = fields[p.name]
            if p.pointer:
                if type(v) is not np.ndarray:
                    raise TypeError(f"{name}: {p} takes a numpy array, not {type(v).__name__}")
                if v.dtype != p.dtype or not v.flags.c_contiguous:
                    raise TypeError(f"{name}: {p} takes a C-contiguous {p.dtype} array, not "
                                    f"{v.dtype} (contiguous: {v.flags.c_contiguous})")
                if not p.const and not v.flags.writeable:
                    raise TypeError(f"{name}: {p} is written: the array must be writable")
                values.append(_address(v))
            elif p.ctype == "double":
                if not isinstance(v, (float, int, np.floating, np.integer)):
                    raise TypeError(f"{name}: {p} takes a number, not {type(v).__name__}")
                values.append(float(v))
            else:
                if not isinstance(v, (int, np.integer)):  # bool is an int: 0 or 1
                    raise TypeError(f"{name}: {p} takes an integer, not {type(v).__name__}")
                values.append(int(v))
        return values


def _run(name: str, fields: dict) -> int:
    """Calls kernel `name` with `fields` (every parameter by name); returns its count."""
    kernel = _kernels.get(name) if available() else None
    if kernel is None:
        raise RuntimeError(f"kernel {name} called without the library: {status()}")
    return kernel(fields)


def bind(wrapper, **fields):
    """wrapper's kernel with these arguments (every parameter by name), checked once: a
    function of no arguments that calls it and returns its count. For a kernel called many
    times on the same arrays, whose contents (not shapes or types) change between calls;
    the function keeps the arrays alive."""
    name = getattr(wrapper, "__name__", repr(wrapper))
    if WRAPPERS.get(name) is not wrapper:
        raise TypeError(f"{name} is not a kernel's wrapper")
    kernel = _kernels.get(name) if available() else None
    if kernel is None:
        raise RuntimeError(f"kernel {name} called without the library: {status()}")
    fn, values, result = kernel.fn, kernel.values(fields), kernel._result

    def call(_arrays=fields) -> int:
        rc = fn(*values)
        return rc if rc >= 0 else result(rc)
    return call


def wrapper_mismatches(kernels=None) -> list[str]:
    """Where a wrapper's keyword parameters differ from its prototype in kernels.h (or a
    prototype has no wrapper, or a wrapper no prototype): one line each; [] if none."""
    protos = {n: k.proto for n, k in kernels.items()} if kernels is not None else \
        parse_prototypes(HEADER.read_text())
    out = []
    for name in sorted(set(protos) | set(WRAPPERS)):
        if name not in WRAPPERS or name not in protos:
            out.append(f"cs_{name}: {'no wrapper' if name in protos else 'not declared in kernels.h'}")
            continue
        sig = inspect.signature(WRAPPERS[name]).parameters.values()
        got = tuple(p.name for p in sig if p.kind is inspect.Parameter.KEYWORD_ONLY)
        if got != protos[name].names or len(got) != len(sig):
            out.append(f"cs_{name}: the wrapper takes {got}, kernels.h declares {protos[name].names}")
    return out


# --- the wrappers: one per kernel, keyword-only, named as kernels.h names them -----------
# (`locals()` on entry is exactly the parameters.)

def progress_completes(*, nranks, rank, offsets, blocking, first, last, dep0, dep1, dep2) -> int:
    """verify._progress_completes: 1 if every rank's walk ends, else 0 (progress.c)."""
    return _run("progress_completes", locals())


def dag_order(*, n, pred0, pred1, pred2, pred3, pred4, kind, off0, off1, off2, off3, off4,
              zero_col, n_extra, xoff, xpred, dur, os, g, wan_time, n_on_wan, on_wan, perm,
              edge, eoff, node, on_wan_out, xoff_out, xedge) -> int:
    """Lays out a Plan's DAG for dag_time (dag.c); returns n, or fewer on a cycle."""
    return _run("dag_order", locals())


def dag_time(*, n, edge, eoff, zero_col, n_extra, xoff, xedge, node, perm, n_on_wan, on_wan,
             link_of, passes, base, work_f, work_i, start, end) -> int:
    """model.dag_graph._PyGraph.time on dag_order's layout (dag.c); returns n, or fewer on a cycle."""
    return _run("dag_time", locals())


def leaf_pool(*, n, n_items, p, nseg, full, neediest_first, members, dur, early, link, os, gap,
              fifo, send_free, recv_free, overlap, after, arrival, held_off, held_rank,
              held_time, out_src, out_dst, out_item, out_start, out_end) -> int:
    """min3.leaf_pool._schedule_leaf_pool (leaf_pool.c); returns the number of transfers written."""
    return _run("leaf_pool", locals())


def input_pool(*, n, ng, nw, n_items, n_todo, full, use_relays, nest, depth, goff, group, dur,
               early, link, os, gap, fifo, wan_of, wan_hold, wan_free, send_free, recv_free,
               overlap, after, arrival, held_off, held_rank, held_time, items, out_src,
               out_dst, out_item, out_start, out_end) -> int:
    """min3.input_pool._schedule_input_pool (input_pool.c); returns the number of transfers written."""
    return _run("input_pool", locals())


def ring(*, n, n_items, floor, dur, early, os, gap, fifo, link, send_off, send_start,
         send_freed, recv_off, recv_start, recv_end, recv_land, held_off, held_rank, held_time,
         cap, out_src, out_dst, out_item, out_start, out_end, send_free, recv_free) -> int:
    """min3.ring._schedule_ring (ring.c); returns the number of transfers written."""
    return _run("ring", locals())


def fluid_step(*, n, nres, roff, rid, rcoef, size, cap, cap_level, weight, capacity, new_time,
               new_flow, heap_key, heap_id, active, rem, rate, clock, state, out, uoff, uflow,
               ucoef, left, load, count, open, done, live, seen) -> int:
    """One event of model.fluid._share_flows (fluid.c); returns the number of flows that end."""
    return _run("fluid_step", locals())


WRAPPERS = {f.__name__: f for f in (progress_completes, dag_order, dag_time, leaf_pool,
                                    input_pool, ring, fluid_step)}


# Loaded with the module, as the other libraries are imported at start-up: a compile job's
# stage timings (compile --json) count its own work, not the process's start.
if ENABLED:
    _load()
