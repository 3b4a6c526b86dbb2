"""Memory a job will need, estimated before anything is allocated.

A compile, simulate or plot holds, per transfer (one matched send/recv pair), the
schedule's two ops, the matching and the cost model's plan: about BYTES_PER_TRANSFER
(a peak measured for ring, bruck, min3 and lnbc above the interpreter's own memory, plus
headroom for the lower bound and the fluid model). A topology holds a few P x P float64 matrices (latency,
bandwidth, per-pair overheads, the flow rates derived from them). An allgather moves at
least P (P - 1) segments, so

    estimate = BYTES_PER_TRANSFER * P (P - 1) nseg + MATRICES * 8 P^2

is a floor for every algorithm (relaying ones, min3 and bcast-trees on grids, move a
few more). A job whose estimate exceeds the memory it may use - the smallest of
MemAvailable, the cgroup's limit and the process's RLIMIT_AS/RLIMIT_DATA - is refused
with one line naming --ranks/--segments, instead of being killed or thrashing halfway
(--ranks 100000 would ask for one 80 GB matrix, 8 P^2 bytes).
"""
from __future__ import annotations

import os
import resource

from ..errors import InputError

BYTES_PER_TRANSFER = 600
MATRICES = 6


def estimate(nranks: int, nseg: int = 1, transfers: int | None = None) -> int:
    """Bytes a job on `nranks` ranks with `nseg` segments needs (or with `transfers`
    transfers, when a schedule file says how many it has)."""
    p = int(nranks)
    if transfers is None:
        transfers = p * (p - 1) * int(nseg)
    return BYTES_PER_TRANSFER * int(transfers) + MATRICES * 8 * p * p


def available() -> int:
    """Bytes this process may still allocate: MemAvailable, the cgroup's memory.max less
    what the group uses, RLIMIT_AS and RLIMIT_DATA - the smallest that is known."""
    limits = []
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    limits.append(int(line.split()[1]) * 1024)
                    break
    except (OSError, ValueError):
        pass
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            cap = f.read().strip()
        if cap != "max":
            with open("/sys/fs/cgroup/memory.current") as f:
                limits.append(int(cap) - int(f.read().strip()))
    except (OSError, ValueError):
        pass
    for which in (resource.RLIMIT_AS, resource.RLIMIT_DATA):
        soft = resource.getrlimit(which)[0]
        if soft != resource.RLIM_INFINITY:
            limits.append(soft)
    if not limits:  # no way to tell: the physical memory
        try:
            limits.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
        except (ValueError, OSError):
            return 1 << 62
    return max(0, min(limits))


def check(nranks: int, nseg: int = 1, *, transfers: int | None = None, source: str = "--ranks",
          what: str = "", hint: str = "expected fewer ranks (--ranks) or segments (--segments)") -> None:
    """InputError (one line: the option, the estimate, the memory available) when the
    job cannot fit; `source` names the option or file that asked for it."""
    need, have = estimate(nranks, nseg, transfers), available()
    if need > have:
        job = what or (f"{nranks} ranks x {nseg} segment{'s' * (nseg != 1)}")
        raise InputError(source, str(nranks) if source == "--ranks" else "",
                         f"{job} need about {_size(need)} of memory, {_size(have)} available; {hint}")


def _size(n: int) -> str:
    for unit, f in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20)):
        if n >= f:
            return f"{n / f:.1f} {unit}"
    return f"{n} B"
