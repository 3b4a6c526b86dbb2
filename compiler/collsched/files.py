"""Writing a file whole or not at all.

Every file the tools write (schedules, topologies, arrival patterns, JSON results,
benchmark pages, plots, the lab's platforms and caches) goes first to a temporary name
beside its target and is renamed over it only once complete: an error or an interrupt
leaves the old file as it was and no temporary behind.

The temporary is created exclusively, named by the process (a crashed run's or another
thread's leftover makes it take the next name), with the mode of any new file: 0666
less the umask. (tempfile.mkstemp's 0600 would leave a schedule, or a regenerated
docs/benchmarks.md, unreadable to other users; its random names also cost more than a
small schedule's write.)
"""
from __future__ import annotations

import itertools
import os
from contextlib import contextmanager
from pathlib import Path


def _create_temp(path: Path) -> tuple[int, Path]:
    for attempt in itertools.count():
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{attempt}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:
            continue


def write_atomic(path: str | os.PathLike, data: bytes | str) -> int:
    """Write `data` (text as UTF-8) to `path` atomically; returns the number of bytes."""
    path = Path(path)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = _create_temp(path)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return len(raw)


@contextmanager
def replacing(path: str | os.PathLike):
    """For writers that want a file name: yields a temporary path beside `path`, renamed
    over `path` when the block ends normally and removed when it raises."""
    path = Path(path)
    fd, tmp = _create_temp(path)
    os.close(fd)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def save_figure(fig, path: str | os.PathLike, dpi: int = 110) -> None:
    """fig.savefig, atomically (the format from the target's suffix, PNG by default)."""
    path = Path(path)
    with replacing(path) as tmp:
        fig.savefig(tmp, format=path.suffix.lstrip(".").lower() or "png", dpi=dpi)
