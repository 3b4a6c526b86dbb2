"""Compiled kernels for the compiler's hot loops (C, loaded with ctypes).

Each kernel does exactly what one Python function of the compiler does - the same float
operations in the same order, so the same bits (tests/compiler/test_native*.py check it)
- only without the interpreter's cost per operation. The Python functions stay the
reference: they are what the docs describe, and they run wherever the library is not
built. `make deps` (so `make test` and `make demo`) builds it next to this file:

    compiler/collsched/native/libcollsched_kernels.so   from   native/*.c

Which kernels exist and what they mirror:

    leaf_pool.c   min3._schedule_leaf_pool       (small pools of single ranks)
    input_pool.c  min3._schedule_input_pool      (pools of pools, with _ListSearch's relays)
    ring.c        min3._schedule_ring            (large sites of grids: the pipelined ring)
    progress.c    verify._progress_completes     (the deadlock-freedom walk, any size)
    dag.c         dag._PyGraph                   (the cost model's timing of the transfer DAG,
                                                  any size; replaces the numpy waves too)

A library older than its sources is not loaded (the results would be a stale build's);
COLLSCHED_NATIVE=0 in the environment turns the kernels off, COLLSCHED_NATIVE_LIB loads
another build (`make check-kernels-asan`: the parity tests under ASan and UBSan).
`status()` says which.
"""
from __future__ import annotations

import ctypes
import os
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
# COLLSCHED_NATIVE_LIB: another build of the same sources (make check-kernels-asan).
LIBRARY = Path(os.environ.get("COLLSCHED_NATIVE_LIB") or HERE / "libcollsched_kernels.so")
# Tests switch the kernels off to compare with the Python reference (False: Python only).
ENABLED = os.environ.get("COLLSCHED_NATIVE", "1") != "0"

_lib = None
_why = None


def _load():
    global _lib, _why
    if _lib is not None or _why is not None:
        return
    if not LIBRARY.exists():
        _why = f"{LIBRARY.name} is not built (make deps builds it)"
        return
    built = LIBRARY.stat().st_mtime
    with os.scandir(HERE) as entries:
        stale = sorted(e.name for e in entries
                       if e.name.endswith((".c", ".h")) and e.stat().st_mtime > built)
    if stale:
        _why = f"{LIBRARY.name} is older than {stale[0]} (make deps rebuilds it)"
        return
    try:
        _lib = ctypes.CDLL(str(LIBRARY))
    except OSError as exc:
        _why = f"{LIBRARY.name} does not load: {exc}"


def kernels():
    """The loaded library, or None (Python reference paths then): disabled, missing, stale."""
    if not ENABLED:
        return None
    _load()
    return _lib


# Loaded with the module, as the other libraries are imported at start-up: a compile job's
# stage timings (compile --json) count its own work, not the process's start.
if ENABLED:
    _load()


def status() -> str:
    """'native', or why the Python reference paths run instead."""
    if not ENABLED:
        return "python (COLLSCHED_NATIVE=0)"
    _load()
    return "native" if _lib is not None else f"python ({_why})"


_ARRAY_DTYPES = {np.dtype(t).num for t in (np.float64, np.int64, np.uint8)}
# What a negative return means (native/*.c): -1 is the machine's, the others are bugs.
_ERRORS = {-1: "out of memory", -2: "a piece that no rank of the pool holds (a bug)",
           -3: "more results than the caller made room for (a bug)"}
_functions: dict = {}  # name -> (ctypes function with its argtypes, those argtypes)


def _address(a: np.ndarray) -> int:
    """The address of an array's data: through the buffer protocol (a sixth of the cost of
    a.ctypes.data, which builds a helper object), or a.ctypes for read-only or empty ones."""
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(a))
    except (TypeError, ValueError):
        return a.ctypes.data


def call(name: str, *args) -> int:
    """Call kernel `name`: numpy arrays pass as pointers (they must be C-contiguous and
    of the kernel's dtype: float64, int64 or uint8), ints as int64, floats as double.
    Kernels return the number of results written, or a negative error code.

    The argument types are set on the function once (ctypes then converts plain Python
    values in C): a kernel takes some 30 arguments, and wrapping each in a ctypes object
    cost more than small kernels' work."""
    lib = kernels()
    if lib is None:
        raise RuntimeError(f"native kernel {name} called without the library: {status()}")
    values, types = [], []
    for a in args:
        if isinstance(a, np.ndarray):
            if not a.flags.c_contiguous or a.dtype.num not in _ARRAY_DTYPES:
                raise TypeError(f"{name}: array of {a.dtype} (contiguous: {a.flags.c_contiguous})")
            values.append(_address(a)), types.append(ctypes.c_void_p)
        elif isinstance(a, (bool, int, np.integer)):
            values.append(int(a)), types.append(ctypes.c_int64)
        elif isinstance(a, (float, np.floating)):
            values.append(float(a)), types.append(ctypes.c_double)
        else:
            raise TypeError(f"{name}: cannot pass {type(a).__name__}")
    got = _functions.get(name)
    if got is None:
        fn = getattr(lib, "cs_" + name)
        fn.restype, fn.argtypes = ctypes.c_int64, types
        got = _functions[name] = (fn, types)
    elif got[1] != types:
        raise TypeError(f"{name}: argument types {types} differ from the first call's {got[1]}")
    rc = got[0](*values)
    if rc < 0:
        what = f"native kernel {name} failed: {_ERRORS.get(rc, f'code {rc}')}"
        raise MemoryError(what) if rc == -1 else RuntimeError(what)
    return rc
