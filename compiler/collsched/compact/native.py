"""The C generators (runtime/src/compact_gen.c) called from Python through ctypes.

The runtime links compact_gen.c (and the other C_FILES) itself; the compiler and its tests build the same files
with the system C compiler into the user cache directory (resources.cache_dir()), once
per content of the source and header (the file name carries their hash, so an edited
source is never served by a stale build), under a file lock. The call goes through the
kernels' machinery (kernels/__init__.py): the prototype of cs_compact_ops is read from
compact_gen.h by kernels.parse_prototypes and every call is type-checked by its
kernel wrapper, so the Python side and the header cannot drift apart silently.
"""
from __future__ import annotations

import ctypes
import fcntl
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np

from .. import kernels, resources
from ..errors import InputError
from ..ir import Schedule
from .desc import SOURCE, CompactDesc

# The 12-byte operation of a .sched section (docs/schedule-format.md), as C writes it.
OP_DTYPE = np.dtype([("peer", "<u4"), ("origin", "<u4"), ("segment", "<u2"), ("kind", "u1"),
                     ("flags", "u1")])
CFLAGS = ("-std=c11", "-O2", "-fPIC", "-shared", "-ffp-contract=off", "-Wall", "-Wextra", "-Werror")
_OK, _BAD, _ROOM = 0, 1, 2  # CS_COMPACT_OK / EDESC / ECAPACITY
_ERR_BYTES = 512
_kernel = None


# The generators' C files (they build alone: no MPI, no other runtime file) and headers.
C_FILES = ("compact_gen.c", "compact_hier.c", "compact_bdr.c", "crc32.c")
H_FILES = ("compact_gen.h", "compact_emit.h", "crc32.h")


def sources() -> tuple[list[Path], Path]:
    """The generators' C files and compact_gen.h of this checkout or installation (the
    other headers sit beside it)."""
    root = resources.runtime_sources()
    if root is None:
        raise InputError(str(resources.DATA / "runtime"), "",
                         "the runtime's sources, missing from this installation (reinstall collsched)")
    return [root / "src" / c for c in C_FILES], root / "src" / "compact_gen.h"


def library_path() -> Path:
    """Where the build of the current sources lives (built or not)."""
    cs, h = sources()
    text = b"".join(p.read_bytes() for p in [*cs, *(h.parent / n for n in H_FILES)])
    digest = hashlib.sha256(text + " ".join(CFLAGS).encode()).hexdigest()
    return resources.cache_dir() / "compact" / f"libcollsched_compact-{digest[:16]}.so"


def build() -> Path:
    """The library of the current sources, compiled first if missing; InputError (one
    line) when there is no C compiler or it fails."""
    path = library_path()
    if path.exists():
        return path
    cc = os.environ.get("CC") or "cc"
    if shutil.which(cc) is None:
        raise InputError(cc, "", "not found: install a C compiler to build the compact generators")
    cs, _ = sources()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = open(path.parent / ".build.lock", "w")
    except OSError as e:
        raise InputError(str(path.parent), "", f"a writable cache directory: {e.strerror}") from None
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when closed
        if path.exists():  # another process built it meanwhile
            return path
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        run = subprocess.run([cc, *CFLAGS, "-o", str(tmp), *map(str, cs)], capture_output=True, text=True)
        if run.returncode != 0:
            tmp.unlink(missing_ok=True)
            first = (run.stderr.strip().splitlines() or ["no message"])[0]
            raise InputError(str(cs[0]), "", f"a successful build with {cc} (exit {run.returncode}): {first}")
        os.replace(tmp, path)
    return path


def _compact_ops():
    """The type-checked kernel wrapper of cs_compact_ops (built and loaded on first use)."""
    global _kernel
    if _kernel is None:
        _, header = sources()
        proto = kernels.parse_prototypes(header.read_text())["compact_ops"]
        lib = ctypes.CDLL(str(build()))
        _kernel = kernels.Kernel(proto, lib.cs_compact_ops)
    return _kernel


def _call(record: bytes, rank: int, capacity: int) -> tuple[int, int, np.ndarray, str]:
    ops = np.zeros(capacity * OP_DTYPE.itemsize, np.uint8)
    nops = np.zeros(1, np.int64)
    err = np.zeros(_ERR_BYTES, np.uint8)
    rc = _compact_ops()({"desc": np.frombuffer(record, np.uint8).copy(), "desc_len": len(record),
                         "rank": int(rank), "capacity": capacity, "ops": ops, "nops": nops,
                         "err": err, "errlen": _ERR_BYTES})
    return rc, int(nops[0]), ops, bytes(err).split(b"\0", 1)[0].decode("ascii", "replace")


def _raise(message: str):
    parts = message.split(": ", 2)
    if len(parts) == 3:
        raise InputError(*parts)
    raise InputError(SOURCE, "", message)


def count(desc: CompactDesc | bytes, rank: int) -> int:
    """How many operations rank `rank` has (the generator run without room: O(ops) time,
    no memory)."""
    record = desc if isinstance(desc, bytes) else desc.encode()
    rc, n, _, msg = _call(record, rank, 0)
    if rc == _BAD:
        _raise(msg)
    return n


def generate(desc: CompactDesc | bytes, rank: int) -> np.ndarray:
    """Rank `rank`'s list from C, as an OP_DTYPE array (columns peer, origin, segment,
    kind, flags; .tobytes() is its .sched section). `desc` may be the encoded record, which
    C then decodes itself. InputError (the generator's one line) for a description or rank
    it does not serve."""
    record = desc if isinstance(desc, bytes) else desc.encode()
    rc, n, ops, msg = _call(record, rank, 0)
    if rc == _ROOM:
        rc, n, ops, msg = _call(record, rank, n)
    if rc != _OK:
        _raise(msg)
    return ops.view(OP_DTYPE)[:n]


def schedule(desc: CompactDesc) -> Schedule:
    """Every rank's generated list as one ir.Schedule (for comparison with the explicit
    compiler's; O(total ops) memory, so for the sizes the explicit path serves)."""
    lists = [generate(desc, r) for r in range(desc.nranks)]
    offsets = np.zeros(desc.nranks + 1, np.int64)
    np.cumsum([len(x) for x in lists], out=offsets[1:])
    ops = np.concatenate(lists) if lists else np.zeros(0, OP_DTYPE)
    return Schedule(nranks=desc.nranks, nseg=desc.nseg, offsets=offsets,
                    kind=ops["kind"].copy(), peer=ops["peer"].astype(np.int32),
                    origin=ops["origin"].astype(np.int32), segment=ops["segment"].astype(np.int32),
                    phase=ops["flags"] & 1, fifo=ops["flags"] >> 1, algorithm=desc.algorithm,
                    bytes_min=desc.bytes_min, bytes_max=desc.bytes_max, full_duplex=desc.full_duplex)
